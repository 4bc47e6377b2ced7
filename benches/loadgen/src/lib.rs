//! The library behind `weir-load` (and the `weir-soak` soak test in
//! `benches/soak`): a WebSocket client that verifies every reply byte for byte.
//!
//! Modules: `ws` (RFC 6455 client side), `payload` (what is sent, what must
//! come back), `conn` (one connection: handshake, coalesced writes, close
//! handshake), `stream` (TCP, or TLS driven by hand for `wss://`), `engine`
//! (the measuring epoll loop), `api` (the server-API publisher of
//! `api-fanout`: HTTP/1.1 `POST /api/publish`), `connect`, `idle`, `storm` and `deflate` (their own
//! loops; `deflate`: echo with permessage-deflate), `pusher` (the Pusher Channels modes, on tokio), `over_h2` (WebSockets on
//! HTTP/2 streams, RFC 8441, on tokio), `hist` (latency histogram), `sys`
//! (epoll, pinning, CPU clocks, the server's RSS and open fds), `units`
//! (sizes and durations on the command line).
//!
//! A message's path: `payload::Source` builds its masked frame, `conn::Outbox`
//! writes it, the server's reply is read by `conn::Conn::read_all`, split into
//! frames by `ws::Parser` and compared by `payload::Checker`, and `engine`
//! counts the round trip and sends the next one.

pub mod api;
pub mod conn;
pub mod connect;
pub mod deflate;
pub mod engine;
pub mod failover;
pub mod heartbeat;
pub mod hist;
pub mod idle;
pub mod over_h2;
pub mod payload;
pub mod pusher;
pub mod rooms;
pub mod storm;
pub mod stream;
pub mod sys;
pub mod units;
pub mod ws;
