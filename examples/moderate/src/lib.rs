//! A proxy route's filter (`filter = "wasm/moderate.wasm"` on a
//! `native = "proxy"` route): every text message, either way, that
//! contains "spam" is dropped, "darn" is rewritten to "d**n", and a client
//! that says "!kick" is closed with 1008. Binary messages pass unchanged.
//!
//! As a real-time namespace's guest (`guest = "wasm/moderate.wasm"` on a
//! `[[namespaces]]` table): subscribes to channels named `<ns>:secret…`
//! are refused (103), `<ns>:vip…` with the application's code 4403;
//! publications are moderated as messages are ("spam" dropped with 103,
//! "darn" rewritten), and one containing "!broken" is replaced by bytes
//! that are not JSON (the gateway refuses it: host/tests/rt_hooks.rs).

use weir_guest::{
    Conn, Direction, Handler, Message, PubDecision, PublishRequest, SubDecision, SubscribeRequest,
    Verdict,
};

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

    fn on_subscribe(&mut self, req: &SubscribeRequest) -> SubDecision {
        let name = req.channel.split_once(':').map_or(req.channel, |(_, n)| n);
        if name.starts_with("secret") {
            SubDecision::Refuse(103)
        } else if name.starts_with("vip") {
            SubDecision::Refuse(4403)
        } else {
            SubDecision::Allow
        }
    }

    fn on_client_publish(&mut self, req: &PublishRequest) -> PubDecision {
        let Ok(text) = std::str::from_utf8(req.data) else {
            return PubDecision::Pass;
        };
        if text.contains(DROPPED) {
            PubDecision::Drop(103)
        } else if text.contains("!broken") {
            PubDecision::Replace(b"{not json".to_vec())
        } else if text.contains(REWRITTEN) {
            PubDecision::Replace(text.replace(REWRITTEN, REWRITTEN_AS).into_bytes())
        } else {
            PubDecision::Pass
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

    #[test]
    fn as_a_namespace_guest_refuses_secrets_and_moderates_publications() {
        let mut route = TestRoute::<Moderate>::new("/rt");
        let sub = |channel| SubscribeRequest {
            channel,
            client: "c",
            user: "u",
            info: b"",
        };
        assert_eq!(route.subscribe(&sub("chat:index")), SubDecision::Allow);
        assert_eq!(
            route.subscribe(&sub("chat:secret-1")),
            SubDecision::Refuse(103)
        );
        assert_eq!(route.subscribe(&sub("chat:vip")), SubDecision::Refuse(4403));
        let publish = |data: &'static str| PublishRequest {
            channel: "chat:index",
            client: "c",
            user: "u",
            info: b"",
            data: data.as_bytes(),
        };
        assert_eq!(
            route.client_publish(&publish(r#"{"t":"hi"}"#)),
            PubDecision::Pass
        );
        assert_eq!(
            route.client_publish(&publish(r#"{"t":"darn"}"#)),
            PubDecision::Replace(br#"{"t":"d**n"}"#.to_vec())
        );
        assert_eq!(
            route.client_publish(&publish(r#"{"t":"spam"}"#)),
            PubDecision::Drop(103)
        );
    }
}
