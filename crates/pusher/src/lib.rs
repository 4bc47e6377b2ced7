//! weir's Pusher Channels protocol layer (protocol 7): what pusher-js,
//! Laravel Echo and the `pusher` server libraries put on the wire, parsed
//! and built without I/O or a runtime, so the `pusher` route kind above it
//! stays a thin adapter over weir's real-time core (docs/architecture.md:
//! an adapter parses and frames; it never owns delivery, history or presence).
//!
//! A message's path: a client's text frame → `client::parse_client_message`
//! (shape, `channel::Channel` name and kind) → `auth` (subscription and
//! signin signatures, presence `channel_data`) → the core → `server::*`
//! builders (one `String` per frame). The app server's side: `http_api`
//! verifies a signed request, `api` parses trigger and batch bodies and
//! shapes the answers; `webhook` builds and signs what weir posts back.
//! `connect` reads the connection URL (app key, protocol version);
//! `codes` holds the error codes every refusal maps to; `socket_id` makes
//! connection ids; `sign` is the one HMAC; `json` writes nested JSON.
//!
//! Dependencies point one way: `sign`, `json`, `codes` ← `socket_id`,
//! `channel` ← `auth`, `client`, `connect`, `server`, `api`; and `auth`
//! (the app's key and secret) ← `http_api`, `webhook`.

pub mod api;
pub mod auth;
pub mod channel;
pub mod client;
pub mod codes;
pub mod connect;
pub mod http_api;
mod json;
pub mod server;
pub mod sign;
pub mod socket_id;
pub mod webhook;

pub use auth::AppKey;
pub use channel::{Channel, ChannelKind};
pub use client::{parse_client_message, ClientMessage};
pub use socket_id::SocketId;
