//! A proxy route's filter (`filter = "wasm/moderate.wasm"` on a
//! `native = "proxy"` route): every text message, either way, that
//! contains "spam" is dropped, "darn" is rewritten to "d**n", and a client
//! that says "!kick" is closed with 1008. Binary messages pass unchanged.

use weir_guest::{Conn, Direction, Handler, Message, Verdict};

/// Messages containing this are not passed on.
const DROPPED: &str = "spam";
/// This word is passed on as [`REWRITTEN_AS`].
const REWRITTEN: &str = "darn";
const REWRITTEN_AS: &str = "d**n";
/// A client message that closes its connection.
const KICK: &str = "!kick";

#[derive(Default)]
struct Moderate;

impl Handler for Moderate {
    type State = ();

    /// Not called on a proxy route: messages come to `on_proxy_message`.
    fn on_message(&mut self, _: &mut Conn<()>, _: Message) {}

    fn on_proxy_message(&mut self, _: &mut Conn<()>, dir: Direction, msg: Message) -> Verdict {
        let Message::Text(text) = msg else {
            return Verdict::Forward;
        };
        if dir == Direction::ToUpstream && text == KICK {
            Verdict::Close(1008, "kicked by the moderator".into())
        } else if text.contains(DROPPED) {
            Verdict::Drop
        } else if text.contains(REWRITTEN) {
            Verdict::ReplaceText(text.replace(REWRITTEN, REWRITTEN_AS))
        } else {
            Verdict::Forward
        }
    }
}

weir_guest::export!(Moderate);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_guest::testing::{Received, TestRoute};

    #[test]
    fn drops_rewrites_forwards_and_kicks_in_order() {
        let mut route = TestRoute::<Moderate>::new("/rooms/{room}");
        let conn = route.connect("/rooms/a");
        for (dir, text) in [
            (Direction::ToUpstream, "hello"),
            (Direction::ToUpstream, "buy spam now"),
            (Direction::ToClient, "darn it, darn"),
            (Direction::ToClient, "spam"),
        ] {
            route.proxy_message(conn, dir, Message::Text(text));
        }
        route.proxy_message(conn, Direction::ToClient, Message::Binary(b"spam"));
        assert_eq!(
            route.forwarded(conn),
            [
                (Direction::ToUpstream, Received::Text("hello".into())),
                (Direction::ToClient, Received::Text("d**n it, d**n".into())),
                (Direction::ToClient, Received::Binary(b"spam".to_vec())),
            ]
        );
        route.proxy_message(conn, Direction::ToUpstream, Message::Text(KICK));
        assert_eq!(
            route.closed_with(conn),
            Some((1008, "kicked by the moderator"))
        );
        assert!(route.forwarded(conn).is_empty());
    }
}
