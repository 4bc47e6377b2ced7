//! Binary counter: a 4-byte little-endian signed integer n gets back n + 1
//! when n is odd and n + 2 when n is even (wrapping at i32 bounds), as 4 bytes
//! little-endian, binary.
//!
//! A message that is not exactly 4 bytes, or a text message, is a protocol
//! error for this route: the connection is closed with 1003 (unsupported
//! data) and a reason saying why.

use weir_guest::{Conn, Handler, Message};

#[derive(Default)]
struct Binary;

impl Handler for Binary {
    type State = ();
    fn on_message(&mut self, conn: &mut Conn<()>, msg: Message) {
        match msg {
            Message::Binary(&[a, b, c, d]) => {
                let n = i32::from_le_bytes([a, b, c, d]);
                let next = n.wrapping_add(if n % 2 == 0 { 2 } else { 1 });
                conn.send_binary(&next.to_le_bytes());
            }
            Message::Binary(_) => conn.close(1003, "expected exactly 4 bytes"),
            Message::Text(_) => conn.close(1003, "expected a binary message"),
        }
    }
}

weir_guest::export!(Binary);

#[cfg(test)]
mod tests;
