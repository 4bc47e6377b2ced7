//! weir — a WebSocket edge gateway. This crate is the top of its layers:
//! the server and the one table that names every route kind. A message's
//! path through the crates and modules:
//!
//! - [`server`] — worker threads, each with its own `SO_REUSEPORT` listener and
//!   current-thread tokio runtime; TLS is terminated when configured
//!   (`weir_config::tls`), hyper parses the HTTP/1.1 or HTTP/2 request, the
//!   route is matched ([`routes`]), its kind answers the upgrade, and the raw
//!   `TcpStream` (with its TLS session), or the HTTP/2 stream, is taken back.
//! - `weir_reactor` — the per-connection loop, generic over the route's
//!   behaviour: read into the connection's buffer, decode frames
//!   (`weir_ws`), unmask in place, hand pieces to the behaviour, write
//!   replies in one write per read batch, apply backpressure, timeouts and
//!   the close; the registry of live connections, per-worker counters, and
//!   the route-kind interface every kind implements.
//! - `weir_native` — declared behaviours (echo, relay, pubsub, centrifugo, pusher,
//!   proxy to an upstream WebSocket server over ws:// or wss://, optionally
//!   through a guest filter) that need no guest of their own.
//! - `weir_guest_runtime` — routes served by WebAssembly components:
//!   engine, component cache, per-worker instances and scheduler, limits,
//!   batching of events into one call, commands applied to connections.
//! - `weir_pubsub` — topic namespaces, fan-out of a publish to each worker's
//!   subscribers, and the broker that carries publishes to other nodes
//!   (in-process by default, Redis with `[cluster]`); `weir_realtime` —
//!   channels with positions, history and presence above it.
//! - `weir_config` — the routes file, host names, origins, URL checks, TLS.
//! - [`routes`] — the route table: the one place that names every kind and
//!   joins a native kind to its attached guest.
//! - [`admission`] — global and per-IP limits on WebSockets and connections
//!   still in their handshake (503 past them); [`overload`] — upgrades
//!   per second per client address (429) and for the whole gateway (503),
//!   and the jittered `Retry-After` of a drain's refusals.
//! - [`metrics`] — `GET /metrics` in the Prometheus text format.
//! - [`oci`] — `oci://` guests pulled from a registry into a cache by
//!   digest before they are compiled, and `weir push`.
//! - [`logging`] — the gateway's log, written by a thread of its own.
//! - [`scaffold`] — `weir new` / `weir build`: guest projects, with the SDK
//!   this binary carries; [`client`] — the admin API's client (`weir
//!   deploy`, `rollback`, `routes`, each with `--cluster` for the fleet:
//!   `server::fleet`).
//!
//! `docs/architecture.md` tells the whole story: the crates, a message's
//! path for each kind, socket ownership and threading.

pub mod admission;
pub mod client;
pub mod logging;
pub mod metrics;
pub mod oci;
pub mod overload;
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
