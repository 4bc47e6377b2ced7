//! Reading the real-time core from a route with `realtime = true`: a
//! channel's history and presence. A read is a command, its answer an
//! event in a later batch ([`Handler::on_history`](crate::Handler::on_history),
//! [`Handler::on_presence`](crate::Handler::on_presence)), matched by the
//! [`Tag`] the call returned, like an HTTP request. On such a route the
//! topics are the core's channels: `subscribe` joins one (publications from
//! the server API and centrifugo clients arrive as text messages, their
//! data alone) and `publish` of JSON text goes through the core (offsets,
//! history, centrifugo subscribers).

use weir_abi::io::{encode_history_read, encode_presence_read};
use weir_abi::CommandKind;

pub use weir_abi::io::{HistoryAnswer as History, Member, Members, Publications};
pub use weir_abi::ReadErrorReason;

use crate::conn::Context;
use crate::io::{next_tag, Tag};
use crate::ConnectionId;

/// Why a history or presence read has no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadError {
    /// Bad channel, history off, presence off, unavailable, busy, not a
    /// realtime route; None for a reason this SDK does not know.
    pub reason: Option<ReadErrorReason>,
}

impl ReadError {
    /// The reason as one word (`bad-channel`, `history-off`,
    /// `presence-off`, `unavailable`, `busy`, `not-realtime`, `unknown`).
    pub fn reason_str(&self) -> &'static str {
        self.reason.map_or("unknown", ReadErrorReason::as_str)
    }
}

/// What became of a history read: the stream's position and publications.
pub type HistoryResult<'a> = Result<History<'a>, ReadError>;
/// What became of a presence read: the channel's members.
pub type PresenceResult<'a> = Result<Members<'a>, ReadError>;

impl Context {
    /// Read up to `limit` publications of `channel`, oldest first (the
    /// gateway caps `limit`; 0 reads the position alone), for the route:
    /// the answer comes to [`Handler::on_history`](crate::Handler::on_history)
    /// with the route's handle, on this worker, in a later batch.
    pub fn history(&mut self, channel: &str, limit: u32) -> Tag {
        self.history_for(0, channel, limit, false)
    }

    /// The same, newest first: the channel's last `limit` publications.
    pub fn history_newest(&mut self, channel: &str, limit: u32) -> Tag {
        self.history_for(0, channel, limit, true)
    }

    /// Read `channel`'s presence for the route: the answer comes to
    /// [`Handler::on_presence`](crate::Handler::on_presence).
    pub fn presence(&mut self, channel: &str) -> Tag {
        self.presence_for(0, channel)
    }

    pub(crate) fn history_for(
        &mut self,
        conn: ConnectionId,
        channel: &str,
        limit: u32,
        reverse: bool,
    ) -> Tag {
        let tag = next_tag();
        let start = self.data.len();
        encode_history_read(&mut self.data, tag, limit, reverse, channel);
        let meta = (start as u32, (self.data.len() - start) as u32);
        self.push(conn, CommandKind::HistoryRead, 0, meta, (0, 0));
        tag
    }

    pub(crate) fn presence_for(&mut self, conn: ConnectionId, channel: &str) -> Tag {
        let tag = next_tag();
        let start = self.data.len();
        encode_presence_read(&mut self.data, tag, channel);
        let meta = (start as u32, (self.data.len() - start) as u32);
        self.push(conn, CommandKind::PresenceRead, 0, meta, (0, 0));
        tag
    }
}
