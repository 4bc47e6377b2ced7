//! Writing JSON by hand into one buffer: a string literal with its escapes,
//! and a writer that escapes whatever serde writes into it, so a message whose
//! `data` is a JSON *string* holding JSON (what Pusher sends) is built in a
//! single allocation instead of serialising the inner value first.

use std::io;

/// Appends `s` to `out` as the body of a JSON string (no quotes): `"`, `\`
/// and the control characters escaped as RFC 8259 §7 requires. Only ASCII is
/// touched, so escaping a chunk that splits a UTF-8 sequence is safe.
pub(crate) fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => {
                out.extend_from_slice(&bytes[start..i]);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(esc);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

/// Appends `s` as a quoted JSON string.
pub(crate) fn push_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    escape_into(out, s.as_bytes());
    out.push(b'"');
}

/// An `io::Write` that escapes everything written through it into a JSON
/// string body: `serde_json::to_writer(Escaping(out), &value)` puts `value`'s
/// JSON inside a JSON string without an intermediate `String`.
pub(crate) struct Escaping<'a>(pub &'a mut Vec<u8>);

impl io::Write for Escaping<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        escape_into(self.0, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The buffer as a `String`: everything written into it came from `&str`s
/// and serde_json output, which are UTF-8, and escaping adds only ASCII.
pub(crate) fn finish(out: Vec<u8>) -> String {
    String::from_utf8(out).expect("JSON built from UTF-8 parts is UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_strings_read_back_as_the_original() {
        for s in [
            "plain",
            "q\"uote",
            "back\\slash",
            "nl\n\t\r\u{1}\u{1f}",
            "é✓",
        ] {
            let mut out = Vec::new();
            push_string(&mut out, s);
            let back: String = serde_json::from_slice(&out).unwrap();
            assert_eq!(back, s);
        }
    }

    #[test]
    fn escaping_writer_nests_json_in_a_string() {
        let mut out = b"\"".to_vec();
        serde_json::to_writer(Escaping(&mut out), &serde_json::json!({"a": "b\"c"})).unwrap();
        out.push(b'"');
        let inner: String = serde_json::from_slice(&out).unwrap();
        assert_eq!(inner, r#"{"a":"b\"c"}"#);
    }
}
