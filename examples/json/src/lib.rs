//! JSON counter: `{"number": n}` gets back `{"number": n + 1}` when n is odd
//! and `{"number": n + 2}` when n is even, so the answer is always the
//! next even number after n.
//! Anything else (not JSON, no integer `number`, overflow) gets
//! `{"error": "<what was wrong>"}` and the connection stays open.

use weir_guest::{Conn, Handler, Message};

#[derive(Default)]
struct Json;

/// The next even number after `n` (n + 1 for odd n, n + 2 for even), or
/// None on overflow.
fn next_even(n: i64) -> Option<i64> {
    n.checked_add(if n % 2 == 0 { 2 } else { 1 })
}

/// The request shape, borrowed straight from the message: no map or string
/// is allocated for the common case.
#[derive(serde::Deserialize)]
struct Request {
    number: i64,
}

fn answer(bytes: &[u8]) -> Result<i64, String> {
    // Fast path: an object with an integer `number` (serde would also take
    // `[n]` as this struct, hence the check for `{`).
    let object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if object {
        if let Ok(req) = serde_json::from_slice::<Request>(bytes) {
            return next_even(req.number).ok_or_else(|| "\"number\" is too large".to_string());
        }
    }
    // Anything else: parse generically to say exactly what is wrong.
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("malformed JSON: {e}"))?;
    let n = value
        .get("number")
        .ok_or("missing field \"number\"")?
        .as_i64()
        .ok_or("\"number\" must be an integer")?;
    next_even(n).ok_or_else(|| "\"number\" is too large".to_string())
}

impl Handler for Json {
    type State = ();
    fn on_message(&mut self, conn: &mut Conn<()>, msg: Message) {
        match answer(msg.as_bytes()) {
            Ok(n) => conn.send_fmt(format_args!("{{\"number\":{n}}}")),
            Err(e) => conn.send_text(&serde_json::json!({ "error": e }).to_string()),
        }
    }
}

weir_guest::export!(Json);

#[cfg(test)]
mod tests;
