//! permessage-deflate (RFC 7692): what a route allows (`compression`,
//! `compression_min`, `compression_context`, `compression_level`), and the
//! negotiation of one connection's parameters from the client's
//! `Sec-WebSocket-Extensions` offers (§5, §7.1). The compressor and decompressor are in
//! [`super::compress`].

use http::{header, HeaderMap};

/// Messages shorter than this go out uncompressed by default: below a few
/// hundred bytes deflate saves little and costs a compressor call.
pub(crate) const DEFAULT_COMPRESSION_MIN_BYTES: usize = 256;
/// zlib level 1 by default: the cheapest that still finds repeats; a
/// gateway's CPU goes to many connections, and JSON compresses well at
/// any level. (zlib-rs's level 1 is its fastest strategy; level 2 takes
/// about twice the CPU for a fifth more compression on JSON.)
pub(crate) const DEFAULT_COMPRESSION_LEVEL: u32 = 1;
/// The LZ77 window deflate uses unless the client asks for less (RFC 7692
/// §7.1.2: 15 is the largest, and the default).
pub(crate) const MAX_WINDOW_BITS: u8 = 15;
/// zlib refuses an 8-bit window for raw deflate and uses 9 (zlib 1.2.9
/// on; zlib-rs does the same), so a request for 8 is served with 9 — as
/// zlib-based peers do; every zlib inflater decodes it.
const MIN_ZLIB_WINDOW_BITS: u8 = 9;

/// Whether a route keeps compression state between messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Context {
    /// Each direction keeps its LZ77 window across messages (better ratio,
    /// ~300 KiB of zlib state per connection while it lives).
    #[default]
    Takeover,
    /// No state between messages in either direction: the server answers
    /// with `server_no_context_takeover` and `client_no_context_takeover`,
    /// and an idle connection holds no zlib state at all.
    None,
}

/// A route's permessage-deflate settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compression {
    /// Negotiate permessage-deflate when the client offers it.
    pub enabled: bool,
    /// Messages shorter than this are sent uncompressed (RSV1 clear).
    pub min_bytes: usize,
    pub context: Context,
    /// zlib's level (1–9) for what the server compresses.
    pub level: u32,
}

impl Default for Compression {
    fn default() -> Self {
        Compression {
            enabled: false,
            min_bytes: DEFAULT_COMPRESSION_MIN_BYTES,
            context: Context::Takeover,
            level: DEFAULT_COMPRESSION_LEVEL,
        }
    }
}

/// The parameters one connection agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// The server resets its compressor after every message.
    pub server_no_context_takeover: bool,
    /// The client resets its compressor after every message, so the
    /// server's decompressor may too.
    pub client_no_context_takeover: bool,
    /// The window the server compresses with (≤ what the client allows).
    pub server_window_bits: u8,
    /// Sent back only when the client offered `client_max_window_bits`
    /// with a value; the server inflates with a 15-bit window regardless.
    pub client_window_bits: Option<u8>,
    /// Bytes asked for in `server_max_window_bits`, echoed in the answer.
    server_window_requested: bool,
    /// Messages shorter than this go out uncompressed.
    pub min_bytes: usize,
    /// zlib's level for what the server compresses (the route's).
    pub level: u32,
}

impl Negotiated {
    /// The `Sec-WebSocket-Extensions` value of the 101.
    pub fn response(&self) -> String {
        let mut out = String::from("permessage-deflate");
        if self.server_no_context_takeover {
            out.push_str("; server_no_context_takeover");
        }
        if self.client_no_context_takeover {
            out.push_str("; client_no_context_takeover");
        }
        if self.server_window_requested {
            out.push_str(&format!(
                "; server_max_window_bits={}",
                self.server_window_bits
            ));
        }
        if let Some(bits) = self.client_window_bits {
            out.push_str(&format!("; client_max_window_bits={bits}"));
        }
        out
    }

    /// Window bits the server's compressor uses (zlib's floor applied).
    pub(crate) fn deflate_window_bits(&self) -> u8 {
        self.server_window_bits.max(MIN_ZLIB_WINDOW_BITS)
    }

    /// The server keeps no compressor between messages.
    pub(crate) fn outbound_stateless(&self) -> bool {
        self.server_no_context_takeover
    }

    /// The server keeps no decompressor between messages.
    pub(crate) fn inbound_stateless(&self) -> bool {
        self.client_no_context_takeover
    }
}

/// Picks the first acceptable permessage-deflate offer of the request
/// (RFC 7692 §5.1), or None: compression off on the route, nothing
/// offered, or every offer declined. An offer with an unknown parameter,
/// a repeated one, or an invalid value is declined (§7.1: "MUST decline"),
/// and the next one is tried; the connection then goes on uncompressed.
pub fn negotiate(headers: &HeaderMap, route: &Compression) -> Option<Negotiated> {
    if !route.enabled {
        return None;
    }
    headers
        .get_all(header::SEC_WEBSOCKET_EXTENSIONS)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(split_offers)
        .find_map(|offer| accept_offer(offer, route))
}

/// Splits a header value into extension offers at commas outside quotes.
fn split_offers(value: &str) -> impl Iterator<Item = &str> {
    let mut quoted = false;
    let mut start = 0;
    let mut cuts = Vec::new();
    for (i, c) in value.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                cuts.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    cuts.push(&value[start..]);
    cuts.into_iter()
}

/// One offer: `permessage-deflate; param[=value]; ...`. None when it is for
/// another extension or must be declined.
fn accept_offer(offer: &str, route: &Compression) -> Option<Negotiated> {
    let mut parts = offer.split(';').map(str::trim);
    if !parts.next()?.eq_ignore_ascii_case("permessage-deflate") {
        return None;
    }
    let stateless = route.context == Context::None;
    let mut n = Negotiated {
        server_no_context_takeover: stateless,
        client_no_context_takeover: stateless,
        server_window_bits: MAX_WINDOW_BITS,
        client_window_bits: None,
        server_window_requested: false,
        min_bytes: route.min_bytes,
        level: route.level,
    };
    let mut seen = [false; 4];
    for param in parts {
        let (name, value) = match param.split_once('=') {
            Some((name, value)) => (name.trim(), Some(unquote(value.trim())?)),
            None => (param, None),
        };
        let slot = match name.to_ascii_lowercase().as_str() {
            "server_no_context_takeover" => {
                value.is_none().then_some(())?;
                n.server_no_context_takeover = true;
                0
            }
            "client_no_context_takeover" => {
                value.is_none().then_some(())?;
                n.client_no_context_takeover = true;
                1
            }
            "server_max_window_bits" => {
                n.server_window_bits = window_bits(value?)?;
                n.server_window_requested = true;
                2
            }
            "client_max_window_bits" => {
                // Without a value: the client merely supports the
                // parameter; the server need not answer it (§7.1.2.2).
                if let Some(value) = value {
                    n.client_window_bits = Some(window_bits(value)?);
                }
                3
            }
            _ => return None,
        };
        if std::mem::replace(&mut seen[slot], true) {
            return None;
        }
    }
    Some(n)
}

/// A quoted-string value unquoted (RFC 7692 §7.1.2.1 allows either form);
/// None when a quote is unbalanced.
fn unquote(value: &str) -> Option<&str> {
    match value.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"'),
        None => (!value.contains('"')).then_some(value),
    }
}

/// A window size: 8 to 15, decimal digits with no leading zero (§7.1.2.1).
fn window_bits(value: &str) -> Option<u8> {
    if value.is_empty() || value.starts_with('0') || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok().filter(|bits| (8..=15).contains(bits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn on(context: Context) -> Compression {
        Compression {
            enabled: true,
            min_bytes: 0,
            context,
            level: DEFAULT_COMPRESSION_LEVEL,
        }
    }

    fn offer(values: &[&str], route: &Compression) -> Option<String> {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(
                header::SEC_WEBSOCKET_EXTENSIONS,
                HeaderValue::from_str(v).unwrap(),
            );
        }
        negotiate(&h, route).map(|n| n.response())
    }

    /// RFC 7692 §7.1: a plain offer is accepted as it is.
    #[test]
    fn plain_offer() {
        let t = on(Context::Takeover);
        assert_eq!(
            offer(&["permessage-deflate"], &t).unwrap(),
            "permessage-deflate"
        );
        assert_eq!(
            offer(&["permessage-deflate; client_max_window_bits"], &t).unwrap(),
            "permessage-deflate"
        );
    }

    #[test]
    fn off_route_and_no_offer_negotiate_nothing() {
        assert_eq!(
            offer(&["permessage-deflate"], &Compression::default()),
            None
        );
        assert_eq!(offer(&[], &on(Context::Takeover)), None);
        assert_eq!(
            offer(&["x-webkit-deflate-frame"], &on(Context::Takeover)),
            None
        );
    }

    /// §7.1.1: the context parameters are echoed; a "none" route asks for
    /// both even when the client did not offer them (§7.1.1.2 allows it).
    #[test]
    fn context_takeover_parameters() {
        let t = on(Context::Takeover);
        assert_eq!(
            offer(
                &["permessage-deflate; server_no_context_takeover; client_no_context_takeover"],
                &t
            )
            .unwrap(),
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
        );
        assert_eq!(
            offer(&["permessage-deflate"], &on(Context::None)).unwrap(),
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
        );
    }

    /// §7.1.2: window sizes are answered; a quoted value is accepted.
    #[test]
    fn window_bits_parameters() {
        let t = on(Context::Takeover);
        assert_eq!(
            offer(
                &["permessage-deflate; server_max_window_bits=10; client_max_window_bits=\"12\""],
                &t
            )
            .unwrap(),
            "permessage-deflate; server_max_window_bits=10; client_max_window_bits=12"
        );
        let mut h = HeaderMap::new();
        h.insert(
            header::SEC_WEBSOCKET_EXTENSIONS,
            HeaderValue::from_static("permessage-deflate; server_max_window_bits=8"),
        );
        let n = negotiate(&h, &t).unwrap();
        assert_eq!((n.server_window_bits, n.deflate_window_bits()), (8, 9));
    }

    /// §7.1: invalid, unknown or repeated parameters decline the offer, and
    /// the next acceptable one is taken.
    #[test]
    fn bad_offers_are_declined_and_the_next_is_taken() {
        let t = on(Context::Takeover);
        for bad in [
            "permessage-deflate; server_max_window_bits=7",
            "permessage-deflate; server_max_window_bits=16",
            "permessage-deflate; server_max_window_bits=010",
            "permessage-deflate; server_max_window_bits",
            "permessage-deflate; client_max_window_bits=abc",
            "permessage-deflate; server_no_context_takeover=1",
            "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
            "permessage-deflate; client_max_window_bits; client_max_window_bits=9",
            "permessage-deflate; mystery",
            "permessage-deflate; server_max_window_bits=\"10",
        ] {
            assert_eq!(offer(&[bad], &t), None, "{bad}");
        }
        assert_eq!(
            offer(
                &["permessage-deflate; server_max_window_bits=99, permessage-deflate; client_no_context_takeover"],
                &t
            )
            .unwrap(),
            "permessage-deflate; client_no_context_takeover"
        );
        // Offers on separate header lines count in order too.
        assert_eq!(
            offer(
                &[
                    "foo, permessage-deflate; x=1",
                    "permessage-deflate; server_max_window_bits=12"
                ],
                &t
            )
            .unwrap(),
            "permessage-deflate; server_max_window_bits=12"
        );
    }
}
