//! Chat rooms on a route `/chat/{room}`: a connection joins the room its
//! path names (the topic is the room's name; topics belong to the route),
//! and every message it sends reaches every *other* member of the room,
//! text as text, binary as binary.

use weir_guest::{Conn, Handler, Message};

#[derive(Default)]
struct Chat;

impl Handler for Chat {
    type State = ();

    fn on_open(&mut self, conn: &mut Conn<()>) {
        let room = conn.param("room").unwrap_or("lobby");
        conn.subscribe(room);
    }

    fn on_message(&mut self, conn: &mut Conn<()>, msg: Message) {
        let room = conn.param("room").unwrap_or("lobby");
        conn.publish(room, msg);
    }
}

weir_guest::export!(Chat);

#[cfg(test)]
mod tests;
