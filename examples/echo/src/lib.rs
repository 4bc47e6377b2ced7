//! Echo: every message goes back to its sender, same kind, same bytes.

use weir_guest::{ConnectionId, Context, Handler, Message};

#[derive(Default)]
struct Echo;

impl Handler for Echo {
    type State = ();
    fn on_message(&mut self, ctx: &mut Context, conn: ConnectionId, _: &mut (), msg: Message<'_>) {
        ctx.send(conn, msg);
    }
}

weir_guest::export!(Echo);
