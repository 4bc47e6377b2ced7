//! Presence roster: `/presence/{room}?name=ann` joins ann to the room's
//! members, kept in the route's key-value store (`kv = "route"`), so the
//! roster survives a restart of the gateway. On joining, the client gets
//! `{room}: N members`, and the room's other clients get `ann joined
//! (N members)` when ann is new there. `!members` answers the count again.
//!
//! Keys: `m/{room}/{name}` (a member) and `n/{room}` (the count, u64 LE).
//! Writes are applied after the batch, so the instance keeps the counts it
//! changed in `self` until the store has them (with several workers, two
//! first joins of one room at the same instant on two workers may count
//! once: the store has no increment yet).

use std::collections::HashMap;

use weir_guest::{Conn, Context, Handler, Message, Request, Upgrade};

#[derive(Default)]
struct Presence {
    /// Counts this instance wrote, newer than what the store may show.
    counts: HashMap<String, u64>,
    /// Members this instance added, for the same reason.
    added: std::collections::HashSet<String>,
}

/// The member's name, the connection's state.
type Name = String;

impl Presence {
    fn count(&mut self, ctx: &mut Context, room: &str) -> u64 {
        if let Some(&n) = self.counts.get(room) {
            return n;
        }
        ctx.kv_get(format!("n/{room}").as_bytes())
            .and_then(|v| v.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    }
}

impl Handler for Presence {
    type State = Name;

    fn on_upgrade(&mut self, req: &Request) -> Upgrade<Name> {
        match req.query_param("name") {
            Some(name) if !name.is_empty() && name.len() <= 64 => {
                Upgrade::accept_with(name.to_string())
            }
            _ => Upgrade::reject(400),
        }
    }

    fn on_open(&mut self, conn: &mut Conn<Name>) {
        let room = conn.param("room").unwrap_or("lobby");
        let name = conn.state().clone();
        conn.subscribe(room);
        let member = format!("m/{room}/{name}");
        let known = self.added.contains(&member) || conn.ctx().kv_get(member.as_bytes()).is_some();
        let mut n = self.count(conn.ctx(), room);
        if !known {
            n += 1;
            conn.ctx().kv_set(member.as_bytes(), b"1");
            conn.ctx()
                .kv_set(format!("n/{room}").as_bytes(), &n.to_le_bytes());
            self.counts.insert(room.to_string(), n);
            self.added.insert(member);
            let note = format!("{name} joined ({n} members)");
            conn.publish(room, Message::Text(&note));
        }
        conn.send_fmt(format_args!("{room}: {n} members"));
    }

    fn on_message(&mut self, conn: &mut Conn<Name>, msg: Message) {
        let room = conn.param("room").unwrap_or("lobby");
        if msg == Message::Text("!members") {
            let n = self.count(conn.ctx(), room);
            conn.send_fmt(format_args!("{room}: {n} members"));
        }
    }
}

weir_guest::export!(Presence);

#[cfg(test)]
mod tests {
    use super::Presence;
    use weir_guest::testing::TestRoute;

    #[test]
    fn members_are_counted_once_per_room_and_the_store_keeps_them() {
        let mut route = TestRoute::<Presence>::new("/presence/{room}");
        let ann = route.connect("/presence/lobby?name=ann");
        assert_eq!(route.texts(ann), ["lobby: 1 members"]);
        let bob = route.connect("/presence/lobby?name=bob");
        assert_eq!(route.texts(ann), ["bob joined (2 members)"]);
        assert_eq!(route.texts(bob), ["lobby: 2 members"]);
        route.close(bob, 1000, "");
        // A fresh instance reads the store: bob is still a member.
        route.replace_instance();
        let bob = route.connect("/presence/lobby?name=bob");
        assert_eq!(route.texts(bob), ["lobby: 2 members"]);
        assert!(route.texts(ann).is_empty(), "no second join note");
        let cy = route.connect("/presence/attic?name=cy");
        assert_eq!(route.texts(cy), ["attic: 1 members"]);
        route.send_text(ann, "!members");
        assert_eq!(route.texts(ann), ["lobby: 2 members"]);
        assert_eq!(route.kv()[&b"n/lobby"[..]], 2u64.to_le_bytes());
    }

    #[test]
    fn a_name_is_required() {
        let mut route = TestRoute::<Presence>::new("/presence/{room}");
        assert_eq!(
            route.upgrade(weir_guest::Request::new("/presence/lobby")),
            Err(400)
        );
    }
}
