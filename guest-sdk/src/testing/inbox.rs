//! What a [`TestRoute`]'s clients got: each one's inbox (taken as it is
//! read), what a proxy filter passed on, its close, topics and saved state.

use super::*;

impl<H: Handler> TestRoute<H> {
    /// What a proxy filter passed on through `conn` since the last call,
    /// oldest first, each with its direction.
    pub fn forwarded(&mut self, conn: ConnectionId) -> Vec<(Direction, Received)> {
        self.clients
            .get_mut(&conn)
            .unwrap_or_else(|| panic!("no connection {conn} on this route"))
            .forwarded
            .drain(..)
            .collect()
    }

    /// Everything `conn` received since the last call, oldest first.
    pub fn received(&mut self, conn: ConnectionId) -> Vec<Received> {
        self.clients
            .get_mut(&conn)
            .unwrap_or_else(|| panic!("no connection {conn} on this route"))
            .inbox
            .drain(..)
            .collect()
    }

    /// What `conn` received since the last call, all text.
    ///
    /// # Panics
    /// If a binary message is among them.
    pub fn texts(&mut self, conn: ConnectionId) -> Vec<String> {
        self.received(conn)
            .into_iter()
            .map(|r| match r {
                Received::Text(t) => t,
                Received::Binary(b) => panic!("connection {conn} received binary {b:?}"),
            })
            .collect()
    }

    /// The close code and reason the handler closed `conn` with, if it did.
    pub fn closed_with(&self, conn: ConnectionId) -> Option<(u16, &str)> {
        let c = self.client(conn).closed_by_handler.as_ref()?;
        Some((c.0, c.1.as_str()))
    }

    /// Whether `conn` is still open (neither side closed it).
    pub fn is_open(&self, conn: ConnectionId) -> bool {
        self.clients.get(&conn).is_some_and(|c| !c.gone)
    }

    /// The topics `conn` is subscribed to.
    pub fn topics(&self, conn: ConnectionId) -> Vec<String> {
        self.client(conn).topics.iter().cloned().collect()
    }

    /// The attachment the gateway holds for `conn` (the saved state).
    pub fn attachment(&self, conn: ConnectionId) -> &[u8] {
        &self.client(conn).attachment
    }
}
