//! weir — a WebSocket edge gateway.
//!
//! A message's path through the modules:
//!
//! - [`server`] — worker threads, each with its own `SO_REUSEPORT` listener and
//!   current-thread tokio runtime; hyper parses the HTTP/1.1 request, the route
//!   is matched, the upgrade answered, and the raw `TcpStream` taken back.
//! - [`reactor`] — the per-connection loop: read into the connection's buffer,
//!   decode frames ([`ws`]), unmask in place, dispatch, write replies in one
//!   write per read batch, apply backpressure and timeouts.
//! - [`native`] — declared behaviours (echo, relay) that reply without a guest.
//! - [`guest`] — routes served by WebAssembly components: engine, component
//!   cache, per-worker instances, limits, batching of events into one call.
//! - [`pubsub`] — the topic registry shared by all workers.
//! - [`config`] — the routes file.
//! - [`admission`] — global and per-IP connection limits (503 past them).
//! - [`metrics`] — `GET /metrics` in the Prometheus text format.

pub mod admission;
pub mod config;
pub mod guest;
pub mod metrics;
pub mod native;
pub mod pubsub;
pub mod reactor;
pub mod server;
pub mod ws;

pub use config::Config;
pub use server::{serve, Shutdown};
