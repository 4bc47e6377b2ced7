//! Shout room on a route `/shout/{room}`: a text message is uppercased and
//! sent to everyone in the room (the sender too) with the sender's name;
//! `!count` answers the sender alone with how many messages it has
//! shouted; binary closes the connection with 1003. The name comes from
//! the upgrade (`?name=ann`, else the connection id) and lives with the
//! count in the connection's state, which survives instance replacement.

use weir_guest::{Conn, Handler, Message, Request, Upgrade};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Member {
    name: Option<String>,
    shouted: u64,
}

#[derive(Default)]
struct Shout;

impl Handler for Shout {
    type State = Member;

    fn on_upgrade(&mut self, req: &Request) -> Upgrade<Member> {
        let name = req.query_param("name").map(str::to_string);
        Upgrade::accept_with(Member { name, shouted: 0 })
    }

    fn on_open(&mut self, conn: &mut Conn<Member>) {
        conn.subscribe(conn.param("room").unwrap_or("lobby"));
    }

    fn on_message(&mut self, conn: &mut Conn<Member>, msg: Message) {
        match msg {
            Message::Text("!count") => {
                let n = conn.shouted;
                conn.send_fmt(format_args!("{n}"));
            }
            Message::Text(text) => {
                conn.shouted += 1;
                let who = conn.name.clone().unwrap_or_else(|| conn.id().to_string());
                let line = format!("{who}: {}", text.to_uppercase());
                conn.broadcast(conn.param("room").unwrap_or("lobby"), Message::Text(&line));
            }
            Message::Binary(_) => conn.close(1003, "text only"),
        }
    }
}

weir_guest::export!(Shout);

#[cfg(test)]
mod tests;
