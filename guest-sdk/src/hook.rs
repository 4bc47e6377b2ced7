//! A guest attached to a real-time namespace (`guest = "x.wasm"` on a
//! `[[namespaces]]` entry of the routes file): the questions the centrifugo
//! route asks it ([`SubscribeRequest`], [`PublishRequest`]) and its answers
//! ([`SubDecision`], [`PubDecision`]), through
//! [`Handler::on_subscribe`](crate::Handler::on_subscribe) and
//! [`Handler::on_client_publish`](crate::Handler::on_client_publish).

use weir_abi::realtime::{RtRequest, RT_DROP, RT_PASS, RT_REPLACE};
use weir_abi::CommandKind;

use crate::conn::Context;
use crate::ConnectionId;

/// A client asks to subscribe to a channel of the namespace (its own
/// permission checks and subscription token have passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscribeRequest<'a> {
    pub channel: &'a str,
    /// The Centrifugo client id (one per connection).
    pub client: &'a str,
    /// The connection token's `sub` (empty for an anonymous user).
    pub user: &'a str,
    /// The connection token's `info` claim, raw JSON (empty when none).
    pub info: &'a [u8],
}

/// A client publishes into a channel of the namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishRequest<'a> {
    pub channel: &'a str,
    pub client: &'a str,
    pub user: &'a str,
    pub info: &'a [u8],
    /// The publication, JSON.
    pub data: &'a [u8],
}

/// The answer to a [`SubscribeRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubDecision {
    Allow,
    /// The client gets this Centrifugo error code: 103 (permission
    /// denied) is the usual one; codes from 400 up are the application's.
    Refuse(u16),
}

/// The answer to a [`PublishRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PubDecision {
    /// Publish it unchanged.
    Pass,
    /// Publish this instead (valid JSON: the gateway refuses anything else
    /// and the publisher gets error 100).
    Replace(Vec<u8>),
    /// Publish nothing; the publisher gets this Centrifugo error code.
    Drop(u16),
}

/// Permission denied, Centrifugo's refusal.
pub const PERMISSION_DENIED: u16 = 103;

impl<'a> SubscribeRequest<'a> {
    pub(crate) fn from_abi(r: &RtRequest<'a>) -> Self {
        SubscribeRequest {
            channel: r.channel,
            client: r.client,
            user: r.user,
            info: r.info,
        }
    }
}

impl<'a> PublishRequest<'a> {
    pub(crate) fn from_abi(r: &RtRequest<'a>, data: &'a [u8]) -> Self {
        PublishRequest {
            channel: r.channel,
            client: r.client,
            user: r.user,
            info: r.info,
            data,
        }
    }
}

impl Context {
    /// Answers the rt-subscribe `call` of `conn`.
    pub(crate) fn subscribe_verdict(&mut self, conn: ConnectionId, call: u64, d: SubDecision) {
        let code = match d {
            SubDecision::Allow => 0,
            SubDecision::Refuse(0) => PERMISSION_DENIED,
            SubDecision::Refuse(code) => code,
        };
        let meta = self.put(&call.to_le_bytes());
        self.push(conn, CommandKind::RtSubscribeVerdict, code, meta, (0, 0));
    }

    /// Answers the rt-publish `call` of `conn`.
    pub(crate) fn publish_verdict(&mut self, conn: ConnectionId, call: u64, d: &PubDecision) {
        let meta = self.put(&call.to_le_bytes());
        let (decision, code, payload) = match d {
            PubDecision::Pass => (RT_PASS, 0, (0, 0)),
            PubDecision::Replace(data) => (RT_REPLACE, 0, self.put(data)),
            PubDecision::Drop(code) => (RT_DROP, *code, (0, 0)),
        };
        let mut header = weir_abi::CommandHeader::new(
            conn,
            CommandKind::RtPublishVerdict as u8,
            code,
            meta,
            payload,
        );
        header.reserved = decision;
        self.commands.extend_from_slice(&header.encode());
    }
}
