//! WebAssembly guest routes: the wasmtime engine and its component cache
//! ([`engine`], [`cache`]), one loaded component per route ([`program`]), the
//! per-worker instance that runs batches with limits ([`runner`]), the
//! batch / command encoding of the `weir:gateway` ABI ([`abi`]), and the
//! I/O 0.4.0 guests ask for by command ([`io`]: outbound HTTP and https
//! through `https`'s connector, timers; [`kv`]: key-value stores, embedded
//! or on Redis through `kv_redis`, bounded by [`kv_quota`]).
//!
//! How the reactor uses it: one [`GuestEngine`] per process; one [`Program`]
//! per guest route, shared by all workers; one [`Runner`] per (worker thread,
//! route). For each read batch the worker fills a [`Batch`], calls
//! [`Runner::handle`] once and applies the returned [`Commands`]. A [`Fault`]
//! means the guest misbehaved: close that batch's connections with
//! [`Fault::close_code`] (1011, or 1013 when the route is at its instance
//! limit); the runner has already thrown the instance away.
//!
//! Contract with the caller:
//! - Connection ids are unique per process and never 0.
//! - Push a connection's `open` before its messages and its `close` last;
//!   after the close, call [`Runner::forget`] (drops its attachment).
//! - Commands may name any connection id: the caller applies a `Send` or
//!   `Close` only to connections of this route that are still open, and
//!   ignores the rest. `Publish::exclude` leaves the sender out.
//! - Text payloads pushed into a batch must be valid UTF-8; text payloads,
//!   topics and close reasons coming out are checked; close codes are
//!   always sendable (an invalid one becomes 1011) and reasons ≤ 123 bytes.
//! - A batch's total payload must stay under 4 GiB (the ABI's u32 offsets);
//!   flush on [`Batch::data_len`] long before that.

pub mod abi;
pub mod cache;
pub mod census;
mod conn;
pub mod deploy;
pub mod engine;
pub mod error;
mod host;
mod https;
pub mod inherit;
pub mod io;
pub mod kv;
pub mod kv_quota;
mod kv_redis;
pub mod log;
pub mod program;
pub mod realtime;
mod request;
pub mod route;
pub mod runner;
pub mod slot;
mod thread;

pub use abi::{Accept, Batch, Command, Commands, UpgradeRequest, UpgradeResponse};
pub use deploy::{Deployment, Versions};
pub use engine::GuestEngine;
pub use error::{Fault, GuestError};
pub use inherit::Inherited;
pub use program::{check_routes, Program};
pub use route::GuestRoute;
pub use runner::Runner;
pub use slot::Scheduler;

/// Identifies one WebSocket connection; unique per process, never 0 (0 marks
/// "no connection" in a publish's exclusion field).
pub type ConnectionId = u64;
