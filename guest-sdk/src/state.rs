//! [`ConnState`]: per-connection state that outlives the instance holding
//! it, written to the connection's host-held attachment.

/// Per-connection state that can outlive the instance holding it.
///
/// The SDK saves it by itself: after a hook that changed it (took it
/// mutably through [`Conn`](crate::Conn)), [`persist`](ConnState::persist)
/// writes it into the connection's attachment, which the gateway keeps; a
/// fresh instance that meets the connection rebuilds it with
/// [`restore`](ConnState::restore). An upgrade can also hand a first state
/// to the connection ([`Upgrade::accept_with`](crate::Upgrade::accept_with)).
///
/// Two ways to implement it:
///
/// - with the `serde` feature, every `Serialize + DeserializeOwned +
///   Default` type is a `ConnState`, encoded with postcard (compact binary);
/// - by hand, for a codec of your own. The defaults keep nothing, which suits
///   state you can afford to lose.
///
/// What `persist` writes is capped by the route's `attachment_max`: over it,
/// the gateway closes the connection with 1011 and logs why.
pub trait ConnState: Default + 'static {
    /// Rebuild the state from attachment bytes (never called with empty
    /// bytes: no attachment means `Default`).
    fn restore(attachment: &[u8]) -> Self {
        let _ = attachment;
        Self::default()
    }

    /// Append the durable part of the state to `out` (nothing: the
    /// attachment is cleared).
    fn persist(&self, out: &mut Vec<u8>) {
        let _ = out;
    }
}

#[cfg(not(feature = "serde"))]
impl ConnState for () {}

#[cfg(feature = "serde")]
impl<T> ConnState for T
where
    T: serde::Serialize + serde::de::DeserializeOwned + Default + 'static,
{
    /// Bytes that do not decode (state written by an older version of the
    /// type) give `Default`, with a warning in the gateway log.
    fn restore(attachment: &[u8]) -> Self {
        postcard::from_bytes(attachment).unwrap_or_else(|e| {
            crate::log(
                crate::Level::Warn,
                &format!("connection state does not decode ({e}); starting from Default"),
            );
            T::default()
        })
    }

    fn persist(&self, out: &mut Vec<u8>) {
        // Serializing into a Vec fails only for what postcard cannot
        // encode (a sequence of unknown length); such a type is a
        // programming error, reported where it happens.
        let buf = std::mem::take(out);
        *out = postcard::to_extend(self, buf).expect("connection state serializes with postcard");
    }
}
