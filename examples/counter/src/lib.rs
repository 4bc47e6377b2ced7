//! Message counter: answers every message with how many messages this
//! connection has sent so far (`1`, `2`, …, as text). The count is the
//! connection's state: the SDK saves it in the gateway-held attachment
//! after each change, so it survives the instance being replaced
//! (`recycle_after`, a fault, a deploy). A client can start counting from
//! another number with `?from=N` on the upgrade.

use weir_guest::{Conn, Handler, Message, Request, Upgrade};

#[derive(Default)]
struct Counter;

impl Handler for Counter {
    type State = u64;

    fn on_upgrade(&mut self, req: &Request) -> Upgrade<u64> {
        let from = req.query_param("from").and_then(|n| n.parse().ok());
        Upgrade::accept_with(from.unwrap_or(0))
    }

    fn on_message(&mut self, conn: &mut Conn<u64>, _: Message) {
        *conn.state_mut() += 1;
        let n = *conn.state();
        conn.send_fmt(format_args!("{n}"));
    }
}

weir_guest::export!(Counter);

#[cfg(test)]
mod tests;
