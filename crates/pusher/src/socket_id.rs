//! Socket ids: `{digits}.{digits}`, the shape pusher-http-node checks
//! (`/^\d+\.\d+$/` in `validateSocketId`) before it signs an auth or excludes
//! a sender. The server makes one per connection from random bytes; the
//! caller supplies them, so tests are deterministic.

use std::fmt;

/// Random bytes a socket id is made from: two `u64` halves.
pub const SOCKET_ID_RANDOM_BYTES: usize = 16;

/// Each half is kept below 10^10 (ten digits at most): ids stay short in
/// every frame that carries them and the pair still has ~66 bits of entropy,
/// plenty to keep live connections apart.
const HALF_MODULUS: u64 = 10_000_000_000;

/// Longest socket id accepted from a client or the HTTP API: two 20-digit
/// halves and the dot, the longest any `u64` pair prints as.
pub const MAX_SOCKET_ID_BYTES: usize = 41;

/// A socket id in the `\d+\.\d+` form.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SocketId(String);

/// Why a string is not a socket id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SocketIdError {
    #[error("socket id is not of the form digits.digits")]
    NotDigitsDotDigits,
    #[error("socket id is longer than {MAX_SOCKET_ID_BYTES} bytes")]
    SocketIdTooLong,
}

impl SocketId {
    /// The id made from `random` (deterministic: same bytes, same id).
    pub fn from_random(random: [u8; SOCKET_ID_RANDOM_BYTES]) -> SocketId {
        let (a, b) = random.split_at(8);
        let a = u64::from_le_bytes(a.try_into().expect("8 bytes")) % HALF_MODULUS;
        let b = u64::from_le_bytes(b.try_into().expect("8 bytes")) % HALF_MODULUS;
        SocketId(format!("{a}.{b}"))
    }

    /// A fresh id from the operating system's randomness (getrandom).
    pub fn generate() -> Result<SocketId, getrandom::Error> {
        let mut random = [0u8; SOCKET_ID_RANDOM_BYTES];
        getrandom::fill(&mut random)?;
        Ok(SocketId::from_random(random))
    }

    /// `s` if it has the `\d+\.\d+` form (ASCII digits only).
    pub fn parse(s: &str) -> Result<SocketId, SocketIdError> {
        if s.len() > MAX_SOCKET_ID_BYTES {
            return Err(SocketIdError::SocketIdTooLong);
        }
        let Some((a, b)) = s.split_once('.') else {
            return Err(SocketIdError::NotDigitsDotDigits);
        };
        let digits = |p: &str| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit());
        if digits(a) && digits(b) {
            Ok(SocketId(s.to_owned()))
        } else {
            Err(SocketIdError::NotDigitsDotDigits)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SocketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_have_the_shape_pusher_http_node_checks() {
        // pusher-http-node lib/pusher.js validateSocketId: /^\d+\.\d+$/.
        for seed in [[0u8; 16], [0xff; 16], [7; 16]] {
            let id = SocketId::from_random(seed);
            assert_eq!(SocketId::parse(id.as_str()), Ok(id.clone()));
        }
        assert_eq!(SocketId::from_random([0; 16]).as_str(), "0.0");
        assert_eq!(
            SocketId::from_random([1; 16]),
            SocketId::from_random([1; 16])
        );
        let a = SocketId::generate().unwrap();
        assert!(SocketId::parse(a.as_str()).is_ok());
    }

    #[test]
    fn malformed_ids_are_refused() {
        for bad in [
            "", ".", "1.", ".1", "1", "1.2.3", "a.1", "1.1a", " 1.1", "1.-1", "١.١",
        ] {
            assert_eq!(
                SocketId::parse(bad),
                Err(SocketIdError::NotDigitsDotDigits),
                "{bad:?}"
            );
        }
        let long = format!("{}.1", "1".repeat(40));
        assert_eq!(SocketId::parse(&long), Err(SocketIdError::SocketIdTooLong));
    }
}
