//! The I/O a [`TestRoute`] leaves to the test to play: the handler's
//! requests, history and presence reads and timers wait here until the test
//! answers or fires them, and its key-value store is a map the test reads.

use super::*;

impl<H: Handler> TestRoute<H> {
    /// Tell the handler that its write of `key` was refused for `reason`
    /// (as the gateway does when the store is full or its queue is):
    /// `on_kv_error` runs with the route's handle.
    pub fn kv_error(&mut self, key: &[u8], reason: KvErrorReason) {
        self.run(0, EventKind::KvError, reason as u16, key);
    }

    /// The requests the handler sent that are not answered yet.
    pub fn requests(&mut self) -> Vec<SentRequest> {
        self.requests.clone()
    }

    /// Answer the pending request `tag` with `status`, `headers` and
    /// `body`: the handler's `on_response` runs.
    ///
    /// # Panics
    /// If no request with `tag` is pending.
    pub fn respond(&mut self, tag: Tag, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        let req = self.take_request(tag);
        if req.conn != 0 && !self.is_open(req.conn) {
            return;
        }
        let mut bytes = Vec::new();
        encode_http_response(&mut bytes, tag, headers.iter().copied(), body);
        self.run(req.conn, EventKind::HttpResponse, status, &bytes);
    }

    /// Fail the pending request `tag` with `reason` (as the gateway does
    /// on a timeout, a refusal by policy...): `on_response` gets the error.
    pub fn fail(&mut self, tag: Tag, reason: HttpErrorReason) {
        let req = self.take_request(tag);
        if req.conn != 0 && !self.is_open(req.conn) {
            return;
        }
        let mut bytes = tag.to_le_bytes().to_vec();
        bytes.extend_from_slice(reason.as_str().as_bytes());
        self.run(req.conn, EventKind::HttpError, reason as u16, &bytes);
    }

    /// The history and presence reads the handler sent that are not
    /// answered yet.
    pub fn reads(&self) -> Vec<SentRead> {
        self.reads.clone()
    }

    /// Answer the pending history read `tag`: the channel is at `offset`
    /// in `epoch` and holds `publications` (offset, JSON text); the
    /// handler's `on_history` runs.
    ///
    /// # Panics
    /// If no history read with `tag` is pending.
    pub fn answer_history(
        &mut self,
        tag: Tag,
        offset: u64,
        epoch: &str,
        publications: &[(u64, &str)],
    ) {
        let read = self.take_read(tag, true);
        let mut bytes = Vec::new();
        let pubs = publications.iter().map(|(o, d)| (*o, d.as_bytes()));
        encode_history(&mut bytes, tag, offset, epoch, pubs);
        self.answer_read(read.conn, EventKind::History, 0, &bytes);
    }

    /// Answer the pending presence read `tag` with `members` (client id,
    /// user, connection info as JSON text or ""); `on_presence` runs.
    ///
    /// # Panics
    /// If no presence read with `tag` is pending.
    pub fn answer_presence(&mut self, tag: Tag, members: &[(&str, &str, &str)]) {
        let read = self.take_read(tag, false);
        let mut bytes = Vec::new();
        let members = members.iter().map(|(c, u, i)| (*c, *u, i.as_bytes()));
        encode_presence(&mut bytes, tag, members);
        self.answer_read(read.conn, EventKind::Presence, 0, &bytes);
    }

    /// Fail the pending read `tag` with `reason` (as the gateway does for
    /// an unknown namespace, history or presence off, Redis down...).
    ///
    /// # Panics
    /// If no read with `tag` is pending.
    pub fn fail_read(&mut self, tag: Tag, reason: ReadErrorReason) {
        let at = self
            .reads
            .iter()
            .position(|r| r.tag == tag)
            .unwrap_or_else(|| panic!("no read with tag {tag} is pending"));
        let read = self.reads.remove(at);
        let kind = if read.limit.is_some() {
            EventKind::History
        } else {
            EventKind::Presence
        };
        self.answer_read(read.conn, kind, reason as u16, &tag.to_le_bytes());
    }

    fn take_read(&mut self, tag: Tag, history: bool) -> SentRead {
        let at = self
            .reads
            .iter()
            .position(|r| r.tag == tag && r.limit.is_some() == history)
            .unwrap_or_else(|| panic!("no such read with tag {tag} is pending"));
        self.reads.remove(at)
    }

    fn answer_read(&mut self, conn: ConnectionId, kind: EventKind, code: u16, bytes: &[u8]) {
        if conn == 0 || self.is_open(conn) {
            self.run(conn, kind, code, bytes);
        }
    }

    fn take_request(&mut self, tag: Tag) -> SentRequest {
        let at = self
            .requests
            .iter()
            .position(|r| r.tag == tag)
            .unwrap_or_else(|| panic!("no request with tag {tag} is pending"));
        self.requests.remove(at)
    }

    /// Pending timers: (connection or 0 for the route's, tag, delay).
    pub fn timers(&self) -> Vec<(ConnectionId, Tag, Duration)> {
        self.timers
            .iter()
            .map(|(&(conn, tag), &delay)| (conn, tag, delay))
            .collect()
    }

    /// Fire the pending timer `tag`: the handler's `on_timer` runs.
    ///
    /// # Panics
    /// If no timer with `tag` is pending.
    pub fn fire(&mut self, tag: Tag) {
        let key = *self
            .timers
            .keys()
            .find(|(_, t)| *t == tag)
            .unwrap_or_else(|| panic!("no timer with tag {tag} is pending"));
        self.timers.remove(&key);
        // A connection's timer ends with the connection.
        if key.0 == 0 || self.is_open(key.0) {
            self.run(key.0, EventKind::Timer, 0, &tag.to_le_bytes());
        }
    }

    /// The route's key-value store as the handler left it.
    pub fn kv(&self) -> &BTreeMap<Vec<u8>, Vec<u8>> {
        &self.kv
    }
}
