//! [`ConnInfo`]: what the host tells a guest about one connection, as the
//! bytes of its open event and as the answer of the `host.connection`
//! import (which an instance calls for a connection it has not seen, after
//! it replaced the instance that had).
//!
//! Layout, little-endian, no padding:
//!
//! | bytes          | field         | meaning                                   |
//! |----------------|---------------|-------------------------------------------|
//! | 4              | target-len    | u32                                       |
//! | target-len     | target        | request target, `path` or `path?query`, UTF-8 |
//! | 4              | param-count   | u32: route parameters that follow         |
//! | per parameter: |               |                                           |
//! | 4              | name-len      | u32                                       |
//! | name-len       | name          | the route's `{name}`, UTF-8                |
//! | 4              | value-len     | u32                                       |
//! | value-len      | value         | the matched path segment(s), UTF-8, not percent-decoded |
//! | the rest       | attachment    | the connection's attachment (empty: none) |
//!
//! Parameters come in the order the route's path declares them. On the open
//! event the attachment is the one the upgrade hook accepted with (empty if
//! it gave none); from `host.connection` it is the latest one stored.

use crate::error::AbiError;
use crate::header::is_utf8;

/// A connection's request target, route parameters and attachment,
/// borrowed from the bytes [`ConnInfo::parse`] checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnInfo<'a> {
    /// `path` or `path?query`.
    pub target: &'a str,
    /// The parameter records, checked: `(name-len, name, value-len, value)*`.
    params: &'a [u8],
    /// The attachment; empty when there is none.
    pub attachment: &'a [u8],
    /// Everything that was parsed.
    bytes: &'a [u8],
}

/// Read a little-endian u32 length and the bytes it announces.
fn take<'a>(bytes: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (len, rest) = bytes.split_first_chunk::<4>()?;
    let len = u32::from_le_bytes(*len) as usize;
    if rest.len() < len {
        return None;
    }
    let (field, rest) = rest.split_at(len);
    *bytes = rest;
    Some(field)
}

/// `take`, then check the field is UTF-8.
fn take_str<'a>(bytes: &mut &'a [u8]) -> Option<&'a str> {
    let field = take(bytes)?;
    if !is_utf8(field) {
        return None;
    }
    // SAFETY: checked just above.
    Some(unsafe { core::str::from_utf8_unchecked(field) })
}

impl<'a> ConnInfo<'a> {
    /// Check `bytes` against the layout above. `index` names the event in
    /// the error (use 0 for a `host.connection` answer).
    pub fn parse(bytes: &'a [u8], index: usize) -> Result<Self, AbiError> {
        let bad = AbiError::ConnInfoMalformed { index };
        let mut rest = bytes;
        let target = take_str(&mut rest).ok_or(bad)?;
        let (count, after) = rest.split_first_chunk::<4>().ok_or(bad)?;
        rest = after;
        let params_start = rest;
        for _ in 0..u32::from_le_bytes(*count) {
            take_str(&mut rest).ok_or(bad)?;
            take_str(&mut rest).ok_or(bad)?;
        }
        let params = &params_start[..params_start.len() - rest.len()];
        Ok(ConnInfo {
            target,
            params,
            attachment: rest,
            bytes,
        })
    }

    /// The request path, without the query.
    pub fn path(&self) -> &'a str {
        self.target.split_once('?').map_or(self.target, |(p, _)| p)
    }

    /// The route parameters, `(name, value)`, in the route's order.
    pub fn params(&self) -> Params<'a> {
        Params { rest: self.params }
    }

    /// The value of route parameter `name`, if the route has one.
    pub fn param(&self, name: &str) -> Option<&'a str> {
        self.params().find_map(|(n, v)| (n == name).then_some(v))
    }

    /// The bytes before the attachment (target and parameters): what stays
    /// the same for the connection's whole life.
    pub fn fixed(&self) -> &'a [u8] {
        &self.bytes[..self.bytes.len() - self.attachment.len()]
    }
}

/// The route parameters of a [`ConnInfo`] (`Default`: none).
#[derive(Debug, Clone, Default)]
pub struct Params<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Params<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<(&'a str, &'a str)> {
        if self.rest.is_empty() {
            return None;
        }
        // Checked by ConnInfo::parse: both fields are there and UTF-8.
        let name = take_str(&mut self.rest)?;
        let value = take_str(&mut self.rest)?;
        Some((name, value))
    }
}

/// Append the info of a connection to `out`: its target, its parameters and
/// its attachment (empty for none).
#[cfg(feature = "alloc")]
pub fn encode_conn_info<'p>(
    out: &mut alloc::vec::Vec<u8>,
    target: &str,
    params: impl ExactSizeIterator<Item = (&'p str, &'p str)>,
    attachment: &[u8],
) {
    let put = |out: &mut alloc::vec::Vec<u8>, field: &[u8]| {
        out.extend_from_slice(&(field.len() as u32).to_le_bytes());
        out.extend_from_slice(field);
    };
    put(out, target.as_bytes());
    out.extend_from_slice(&(params.len() as u32).to_le_bytes());
    for (name, value) in params {
        put(out, name.as_bytes());
        put(out, value.as_bytes());
    }
    out.extend_from_slice(attachment);
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    #[test]
    fn round_trip_with_params_and_attachment() {
        let mut out = Vec::new();
        let params = [("room", "lobby"), ("id", "42")];
        encode_conn_info(
            &mut out,
            "/r/lobby/42?x=1",
            params.into_iter(),
            b"\x00state",
        );
        let info = ConnInfo::parse(&out, 0).unwrap();
        assert_eq!(info.target, "/r/lobby/42?x=1");
        assert_eq!(info.path(), "/r/lobby/42");
        assert_eq!(info.params().collect::<Vec<_>>(), params);
        assert_eq!(info.param("id"), Some("42"));
        assert_eq!(info.param("nope"), None);
        assert_eq!(info.attachment, b"\x00state");
        assert_eq!(info.fixed(), &out[..out.len() - 6]);
    }

    #[test]
    fn no_params_no_attachment() {
        let mut out = Vec::new();
        encode_conn_info(&mut out, "/echo", [].into_iter(), b"");
        assert_eq!(out.len(), 4 + 5 + 4);
        let info = ConnInfo::parse(&out, 0).unwrap();
        assert_eq!((info.target, info.params().count()), ("/echo", 0));
        assert!(info.attachment.is_empty());
    }

    #[test]
    fn truncated_or_not_utf8_is_refused() {
        let mut out = Vec::new();
        encode_conn_info(&mut out, "/a", [("k", "v")].into_iter(), b"");
        for cut in 0..out.len() {
            assert_eq!(
                ConnInfo::parse(&out[..cut], 3),
                Err(AbiError::ConnInfoMalformed { index: 3 }),
                "cut at {cut}"
            );
        }
        let mut bad = Vec::new();
        encode_conn_info(&mut bad, "/a", [("k", "\u{e9}")].into_iter(), b"");
        let last = bad.len() - 1;
        bad[last] = 0xff;
        assert!(ConnInfo::parse(&bad, 0).is_err());
        // A count that promises more parameters than there are.
        let mut lying = Vec::new();
        encode_conn_info(&mut lying, "/a", [].into_iter(), b"");
        lying[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(ConnInfo::parse(&lying, 0).is_err());
    }
}
