//! Packed-only kinds for a guest attached to a Pusher app (`guest =
//! "x.wasm"` on a pusher route's `[[route.apps]]` entry): the app's
//! connections (pusher-connect, 14), subscriptions (pusher-subscribe, 15)
//! and client events (pusher-client-event, 16). Each event's bytes are a
//! real-time request ([`crate::realtime`]: call id, then four sized
//! fields, then the rest), with the fields meaning:
//!
//! | event               | channel            | client    | user                       | info              | rest                          |
//! |---------------------|--------------------|-----------|----------------------------|-------------------|-------------------------------|
//! | pusher-connect      | the request target (path and query) | socket id | empty     | the upgrade's headers, `name: value` lines joined by `\n` | empty |
//! | pusher-subscribe    | the Pusher channel | socket id | the signed-in user, or empty | the `channel_data` the client sent (JSON text, or empty) | [`SignatureCheck`] u8, then the client's `auth` (UTF-8) |
//! | pusher-client-event | the Pusher channel | socket id | the sender's presence `user_id` (else the signed-in user, or empty) | the event's name (`client-…`) | the event's `data` (JSON text) |
//!
//! The guest answers with the namespace guests' verdict commands, naming
//! the call id in their 8-byte meta:
//!
//! - pusher-connect: rt-subscribe-verdict (17), code 0 allows; any other
//!   code refuses with that Pusher close code (4000–4099 as given, any
//!   other becomes 4009), the payload the message (UTF-8).
//! - pusher-subscribe: rt-subscribe-verdict (17). Byte 9 [`RT_ALLOW`] (0)
//!   with code 0 lets weir's own signature check decide; byte 9
//!   [`RT_AUTHORISE`] (1) with code 0 subscribes whatever the signature
//!   (the guest answered authorisation), with the payload the presence
//!   `channel_data` to use (`{"user_id":…,"user_info":…}`; empty: the
//!   client's own); code ≠ 0 refuses, the client getting
//!   `pusher:subscription_error` with that status and the payload as its
//!   error.
//! - pusher-client-event: rt-publish-verdict (18): pass, replace (the
//!   payload is the new `data`, JSON) or drop (code 0: silently; else the
//!   sender gets `pusher:error` with that code).

/// What weir's own HMAC check made of a subscribe: byte 0 of a
/// pusher-subscribe's rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SignatureCheck {
    /// The client sent no `auth` (a public channel, or an app whose guest
    /// answers authorisation).
    None = 0,
    /// The `auth` is the app's valid signature for this socket and channel.
    Passed = 1,
    /// An `auth` was sent and is not a valid signature.
    Failed = 2,
}

impl SignatureCheck {
    pub const fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(SignatureCheck::None),
            1 => Some(SignatureCheck::Passed),
            2 => Some(SignatureCheck::Failed),
            _ => None,
        }
    }

    /// As one word (what the SDK and the vectors show).
    pub const fn as_str(self) -> &'static str {
        match self {
            SignatureCheck::None => "none",
            SignatureCheck::Passed => "passed",
            SignatureCheck::Failed => "failed",
        }
    }
}

/// Byte 9 of an rt-subscribe-verdict: allow, leaving the signature check
/// to weir (every verdict of a namespace guest).
pub const RT_ALLOW: u8 = 0;
/// Byte 9 of an rt-subscribe-verdict: the guest answered authorisation
/// (a pusher-subscribe), the payload the presence channel data or empty.
pub const RT_AUTHORISE: u8 = 1;

/// A pusher-subscribe's rest: the signature check and the client's `auth`;
/// None when it does not follow the layout.
pub fn split_subscribe_rest(rest: &[u8]) -> Option<(SignatureCheck, &str)> {
    let (&check, auth) = rest.split_first()?;
    Some((
        SignatureCheck::from_byte(check)?,
        core::str::from_utf8(auth).ok()?,
    ))
}

/// Appends a pusher-subscribe's rest for `check` and `auth` to `out`.
#[cfg(feature = "alloc")]
pub fn encode_subscribe_rest(out: &mut alloc::vec::Vec<u8>, check: SignatureCheck, auth: &str) {
    out.push(check as u8);
    out.extend_from_slice(auth.as_bytes());
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn a_subscribe_rest_reads_back_and_bad_ones_are_refused() {
        let mut rest = Vec::new();
        encode_subscribe_rest(&mut rest, SignatureCheck::Failed, "key:abc");
        assert_eq!(
            split_subscribe_rest(&rest),
            Some((SignatureCheck::Failed, "key:abc"))
        );
        assert_eq!(split_subscribe_rest(&[]), None);
        assert_eq!(split_subscribe_rest(&[3]), None);
        assert_eq!(split_subscribe_rest(&[0, 0xff]), None);
        assert_eq!(split_subscribe_rest(&[0]), Some((SignatureCheck::None, "")));
    }
}
