//! weir — a WebSocket edge gateway.
//!
//! A message's path through the modules:
//!
//! - [`server`] — worker threads, each with its own `SO_REUSEPORT` listener and
//!   current-thread tokio runtime; TLS is terminated when configured
//!   ([`tls`]), hyper parses the HTTP/1.1 or HTTP/2 request, the route is
//!   matched ([`routes`]), its kind answers the upgrade, and the raw
//!   `TcpStream` (with its TLS session), or the HTTP/2 stream, is taken back.
//! - [`reactor`] — the per-connection loop, generic over the route's
//!   behaviour: read into the connection's buffer, decode frames ([`ws`]),
//!   unmask in place, hand pieces to the behaviour, write replies in one
//!   write per read batch, apply backpressure, timeouts and the close.
//! - [`native`] — declared behaviours (echo, relay, pubsub, centrifugo, proxy to an
//!   upstream WebSocket server over ws:// or wss://, optionally through a
//!   guest filter) that need no guest of their own.
//! - [`guest`] — routes served by WebAssembly components: engine, component
//!   cache, per-worker instances and scheduler, limits, batching of events
//!   into one call, commands applied to connections.
//! - [`ws::encode`] — the one place a message becomes wire bytes.
//! - [`registry`] — the one map of live connections (shutdown, guest sends,
//!   subscriptions, `/metrics`).
//! - [`pubsub`] — topic namespaces (one per route unless shared), fan-out of
//!   a publish to each worker's subscribers (compressed once per
//!   permessage-deflate form for subscribers without context takeover), and
//!   the broker that carries publishes to other nodes (in-process by
//!   default, Redis with `[cluster]`).
//! - [`realtime`] — channels with positions (offset + epoch), history and
//!   presence, shared by the centrifugo route kind (`native::centrifugo`),
//!   the server API (`[api]`) and pubsub routes with `realtime = true`;
//!   it publishes through [`pubsub`]'s fan-out.
//! - [`config`] — the routes file.
//! - [`tls`] — TLS termination's certificates and settings (rustls); the
//!   loop reads and writes a TLS connection through `reactor::transport`.
//! - [`url_check`] — URL paths as their receiver reads them: a guest's
//!   outbound URL normalised and matched on segment boundaries, a proxy's
//!   path parameter kept to one segment, non-global addresses told apart.
//! - [`admission`] — global and per-IP limits on WebSockets and
//!   connections still in their handshake (503 past them); [`hosts`] —
//!   the names the gateway answers to (421 otherwise); [`origin`] — which
//!   browser pages may open a route (403 otherwise).
//! - [`metrics`] — `GET /metrics` in the Prometheus text format; [`stats`]
//!   — per-route counters kept per worker and summed when read.
//! - [`logging`] — the gateway's log, written by a thread of its own.
//! - [`scaffold`] — `weir new` / `weir build`: guest projects, with the SDK
//!   this binary carries.
//! - [`client`] — the admin API's client (`weir deploy`, `rollback`,
//!   `routes`); the admin listener itself is in [`server`], deploys and
//!   reloads in `server::reload` and `guest::deploy`.
//!
//! `docs/architecture.md` tells the whole story: layers, a message's path
//! for echo, relay and a guest route, socket ownership and threading.

pub mod admission;
pub mod client;
pub mod logging;
pub mod metrics;
pub mod routes;
pub mod scaffold;
pub mod server;

// The layers beneath, under the names the library has always used.
pub use weir_config as config;
pub use weir_config::{hosts, origin, tls, url_check};
pub use weir_guest_runtime as guest;
pub use weir_native as native;
pub use weir_pubsub as pubsub;
pub use weir_reactor as reactor;
pub use weir_reactor::{registry, stats};
pub use weir_realtime as realtime;

pub use server::{serve, Shutdown};
pub use weir_config::Config;
