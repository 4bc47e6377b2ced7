//! A guest attached to a Pusher app (`guest = "x.wasm"` on a pusher
//! route's `[[route.apps]]` entry): the questions the route asks it about
//! the app's connections ([`ConnectRequest`]), subscriptions
//! ([`ChannelRequest`]) and client events ([`ClientEventRequest`]), and its
//! answers, through [`Handler::on_pusher_connect`],
//! [`Handler::on_pusher_subscribe`] and [`Handler::on_pusher_client_event`]
//! (`crate::Handler`). Layouts: `weir_abi::pusher`.
//!
//! [`Handler::on_pusher_connect`]: crate::Handler::on_pusher_connect
//! [`Handler::on_pusher_subscribe`]: crate::Handler::on_pusher_subscribe
//! [`Handler::on_pusher_client_event`]: crate::Handler::on_pusher_client_event

use weir_abi::pusher::{RT_ALLOW, RT_AUTHORISE};
use weir_abi::{CommandKind, RtRequest};

use crate::conn::Context;
use crate::ConnectionId;
pub use weir_abi::SignatureCheck;

/// A connection of the app opens (before `pusher:connection_established`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectRequest<'a> {
    /// The request target: path and query (`/app/key?protocol=7&…`).
    pub target: &'a str,
    pub socket_id: &'a str,
    /// The upgrade's headers, `name: value` lines joined by `\n`.
    pub headers: &'a str,
}

impl<'a> ConnectRequest<'a> {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.headers.split('\n').find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The first value of query parameter `name`, as sent (not
    /// percent-decoded).
    pub fn query(&self, name: &str) -> Option<&'a str> {
        let (_, query) = self.target.split_once('?')?;
        query.split('&').find_map(|pair| {
            let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
            (n == name).then_some(v)
        })
    }

    /// The path, without the query.
    pub fn path(&self) -> &'a str {
        self.target.split_once('?').map_or(self.target, |(p, _)| p)
    }
}

/// The answer to a [`ConnectRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectDecision {
    Allow,
    /// `pusher:error` with this code and message, then a close with the
    /// code: 4000–4099 (pusher-js does not reconnect); any other code
    /// becomes 4009 (unauthorized).
    Refuse(u16, String),
}

/// A client of the app subscribes (weir's limits passed; its signature
/// checked, with the result in `signature`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelRequest<'a> {
    pub channel: &'a str,
    pub socket_id: &'a str,
    /// The user signed in on the connection (`pusher:signin`), or empty.
    pub user: &'a str,
    /// The `channel_data` the client sent (JSON text), or empty.
    pub channel_data: &'a str,
    /// The `auth` the client sent (what its authoriser returned), or empty.
    pub auth: &'a str,
    /// What weir's HMAC check made of `auth`.
    pub signature: SignatureCheck,
}

/// The answer to a [`ChannelRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelDecision {
    /// Subscribe if weir's own check lets it (the signature of a private
    /// or presence channel must have passed).
    Allow,
    /// The guest answered authorisation itself: subscribe whatever the
    /// signature. For a presence channel, the member's channel data
    /// (`{"user_id":"…","user_info":{…}}`), or None for the client's own.
    Authorise(Option<String>),
    /// `pusher:subscription_error` with this status and message.
    Refuse(u16, String),
}

/// A client of the app sends a client event (weir's checks passed: the app
/// allows them, the sender is subscribed, within its rate). Answered with a
/// [`PubDecision`](crate::PubDecision): pass, replace the data (JSON), or
/// drop (code 0: silently; else the sender gets `pusher:error` with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientEventRequest<'a> {
    pub channel: &'a str,
    pub socket_id: &'a str,
    /// The sender's presence `user_id` on a presence channel, else the
    /// signed-in user, or empty.
    pub user: &'a str,
    /// The event's name (`client-…`).
    pub event: &'a str,
    /// The event's `data`, JSON text.
    pub data: &'a [u8],
}

impl<'a> ConnectRequest<'a> {
    pub(crate) fn from_abi(r: &RtRequest<'a>) -> Self {
        ConnectRequest {
            target: r.channel,
            socket_id: r.client,
            headers: core::str::from_utf8(r.info).unwrap_or_default(),
        }
    }
}

impl<'a> ChannelRequest<'a> {
    pub(crate) fn from_abi(r: &RtRequest<'a>, signature: SignatureCheck, auth: &'a str) -> Self {
        ChannelRequest {
            channel: r.channel,
            socket_id: r.client,
            user: r.user,
            channel_data: core::str::from_utf8(r.info).unwrap_or_default(),
            auth,
            signature,
        }
    }
}

impl<'a> ClientEventRequest<'a> {
    pub(crate) fn from_abi(r: &RtRequest<'a>, data: &'a [u8]) -> Self {
        ClientEventRequest {
            channel: r.channel,
            socket_id: r.client,
            user: r.user,
            event: core::str::from_utf8(r.info).unwrap_or_default(),
            data,
        }
    }
}

impl Context {
    /// An rt-subscribe-verdict: byte 9, code and payload as given.
    fn verdict(&mut self, conn: ConnectionId, call: u64, decision: u8, code: u16, text: &str) {
        let meta = self.put(&call.to_le_bytes());
        let payload = self.put(text.as_bytes());
        let mut header = weir_abi::CommandHeader::new(
            conn,
            CommandKind::RtSubscribeVerdict as u8,
            code,
            meta,
            payload,
        );
        header.reserved = decision;
        self.commands.extend_from_slice(&header.encode());
    }

    /// Answers the pusher-connect `call` of `conn`.
    pub(crate) fn connect_verdict(&mut self, conn: ConnectionId, call: u64, d: &ConnectDecision) {
        match d {
            ConnectDecision::Allow => self.verdict(conn, call, RT_ALLOW, 0, ""),
            ConnectDecision::Refuse(code, message) => {
                self.verdict(conn, call, RT_ALLOW, (*code).max(1), message)
            }
        }
    }

    /// Answers the pusher-subscribe `call` of `conn`.
    pub(crate) fn channel_verdict(&mut self, conn: ConnectionId, call: u64, d: &ChannelDecision) {
        match d {
            ChannelDecision::Allow => self.verdict(conn, call, RT_ALLOW, 0, ""),
            ChannelDecision::Authorise(data) => {
                self.verdict(conn, call, RT_AUTHORISE, 0, data.as_deref().unwrap_or(""))
            }
            ChannelDecision::Refuse(code, message) => {
                self.verdict(conn, call, RT_ALLOW, (*code).max(1), message)
            }
        }
    }
}
