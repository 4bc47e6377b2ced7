//! Echo: every message goes back to its sender, text as text and binary as
//! binary. The smallest handler the SDK allows.

use weir_guest::{Conn, Handler, Message};

#[derive(Default)]
struct Echo;

impl Handler for Echo {
    type State = ();
    fn on_message(&mut self, conn: &mut Conn<()>, msg: Message) {
        conn.send(msg);
    }
}

weir_guest::export!(Echo);

#[cfg(test)]
mod tests;
