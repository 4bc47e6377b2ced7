//! Message counter: replies to every message with how many messages this
//! connection has sent so far (`1`, `2`, …, as text). The count lives in the
//! connection's attachment, so it survives the instance being replaced.

use weir_guest::{ConnState, ConnectionId, Context, Handler, Message};

#[derive(Default)]
struct Counter;

/// Messages seen on one connection.
#[derive(Default)]
struct Count(u64);

impl ConnState for Count {
    fn restore(bytes: &[u8]) -> Self {
        Count(bytes.try_into().map(u64::from_le_bytes).unwrap_or(0))
    }
    fn persist(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_le_bytes());
    }
}

impl Handler for Counter {
    type State = Count;
    fn on_message(
        &mut self,
        ctx: &mut Context,
        conn: ConnectionId,
        count: &mut Count,
        _: Message<'_>,
    ) {
        count.0 += 1;
        ctx.save(conn, count);
        ctx.send_text_fmt(conn, format_args!("{}", count.0));
    }
}

weir_guest::export!(Counter);
