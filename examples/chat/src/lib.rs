//! Chat rooms: a route `/chat/{room}`. On open a connection joins the room
//! named by the last path segment (topic `room:<name>`); every message is
//! published to the room and reaches every *other* member (publish leaves the
//! sender out). The room name is kept in the connection's attachment, so an
//! instance that replaced another still knows where to publish.

use weir_guest::{ConnState, ConnectionId, Context, Handler, Message};

#[derive(Default)]
struct Chat;

/// The connection's room topic (`room:<name>`).
#[derive(Default)]
struct Room(String);

impl ConnState for Room {
    fn restore(bytes: &[u8]) -> Self {
        Room(String::from_utf8_lossy(bytes).into_owned())
    }
    fn persist(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.0.as_bytes());
    }
}

/// `room:<last path segment>` of a request target, `room:lobby` if empty.
fn room_topic(target: &str) -> String {
    let path = target.split('?').next().unwrap_or("");
    let name = path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|s| !s.is_empty());
    format!("room:{}", name.unwrap_or("lobby"))
}

impl Handler for Chat {
    type State = Room;

    fn on_open(&mut self, ctx: &mut Context, conn: ConnectionId, room: &mut Room, target: &str) {
        room.0 = room_topic(target);
        ctx.subscribe(conn, &room.0);
        ctx.save(conn, room);
    }

    fn on_message(
        &mut self,
        ctx: &mut Context,
        conn: ConnectionId,
        room: &mut Room,
        msg: Message<'_>,
    ) {
        if room.0.is_empty() {
            // No attachment: the state was lost; better to say so than to talk to nobody.
            ctx.close(conn, 1011, "room unknown");
            return;
        }
        ctx.publish(&room.0, msg, Some(conn));
    }
}

weir_guest::export!(Chat);
