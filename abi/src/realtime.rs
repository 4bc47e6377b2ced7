//! Packed-only kinds for a guest attached to a real-time namespace
//! (`guest = "x.wasm"` on a `[[namespaces]]` entry): the rt-subscribe and
//! rt-publish events' bytes and the two verdict commands' meta.
//!
//! An rt event's bytes ([`split_rt_request`]):
//!
//! | bytes        | field   | meaning                                       |
//! |--------------|---------|-----------------------------------------------|
//! | 0..8         | call    | the host's id for this question, u64          |
//! | then u32 + n | channel | UTF-8                                         |
//! | then u32 + n | client  | the Centrifugo client id, UTF-8               |
//! | then u32 + n | user    | the token's `sub`, UTF-8 (may be empty)       |
//! | then u32 + n | info    | the connection token's `info` (JSON, or empty)|
//! | rest         | data    | rt-publish: the publication (JSON); rt-subscribe: empty |
//!
//! Lengths are little-endian. The verdict commands carry the call id as
//! their 8-byte meta (the topic range).

/// One question the host asks a namespace's guest, borrowed from its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtRequest<'a> {
    /// Echoed in the verdict, so the host finds the waiting client.
    pub call: u64,
    pub channel: &'a str,
    pub client: &'a str,
    pub user: &'a str,
    /// The connection token's `info` claim, raw JSON (empty when none).
    pub info: &'a [u8],
}

/// What a guest does with a client's publication (rt-publish-verdict).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtVerdict<'a> {
    /// Publish it unchanged.
    Pass,
    /// Publish these bytes instead (JSON for the JSON protocol; the host
    /// checks).
    Replace(&'a [u8]),
    /// Publish nothing; the publisher gets this Centrifugo error code (0:
    /// the host's 103, permission denied).
    Drop(u16),
}

/// Byte 9 of an rt-publish-verdict command: what the guest decided.
pub const RT_PASS: u8 = 0;
pub const RT_REPLACE: u8 = 1;
pub const RT_DROP: u8 = 2;

/// Splits an rt event's bytes into its request and the publication data;
/// None when they do not follow the layout.
pub fn split_rt_request(bytes: &[u8]) -> Option<(RtRequest<'_>, &[u8])> {
    let (call, mut rest) = bytes.split_first_chunk::<8>()?;
    let mut field = || {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        if tail.len() < len {
            return None;
        }
        let (value, tail) = tail.split_at(len);
        rest = tail;
        Some(value)
    };
    let channel = core::str::from_utf8(field()?).ok()?;
    let client = core::str::from_utf8(field()?).ok()?;
    let user = core::str::from_utf8(field()?).ok()?;
    let info = field()?;
    Some((
        RtRequest {
            call: u64::from_le_bytes(*call),
            channel,
            client,
            user,
            info,
        },
        rest,
    ))
}

/// Appends an rt event's bytes for `req` and `data` to `out`.
#[cfg(feature = "alloc")]
pub fn encode_rt_request(out: &mut alloc::vec::Vec<u8>, req: &RtRequest<'_>, data: &[u8]) {
    out.extend_from_slice(&req.call.to_le_bytes());
    for field in [
        req.channel.as_bytes(),
        req.client.as_bytes(),
        req.user.as_bytes(),
        req.info,
    ] {
        out.extend_from_slice(&(field.len() as u32).to_le_bytes());
        out.extend_from_slice(field);
    }
    out.extend_from_slice(data);
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn a_request_reads_back_and_short_ones_are_refused() {
        let req = RtRequest {
            call: 7,
            channel: "chat:index",
            client: "c-1",
            user: "42",
            info: br#"{"name":"Ann"}"#,
        };
        let mut bytes = Vec::new();
        encode_rt_request(&mut bytes, &req, b"{\"text\":\"hi\"}");
        assert_eq!(
            split_rt_request(&bytes),
            Some((req, &b"{\"text\":\"hi\"}"[..]))
        );
        // Cut anywhere inside the fields: refused.
        let fixed = 8 + 4 * 4 + 10 + 3 + 2 + 14;
        for cut in 0..fixed {
            assert_eq!(split_rt_request(&bytes[..cut]), None, "cut at {cut}");
        }
        // A channel that is not UTF-8: refused.
        bytes[12] = 0xff;
        assert_eq!(split_rt_request(&bytes), None);
    }
}
