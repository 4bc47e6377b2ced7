//! WebAssembly guest routes, in three stages:
//!
//! Adapted from a plain split where the code says otherwise: the log
//! limiter is in `runtime` (the host imports and the program use it), and
//! `realtime` in `services` (below).
//!
//! - `runtime/` — loading and calling a component: the one wasmtime engine
//!   and its component cache (`engine`, `cache`), one loaded component per
//!   route ([`Program`]), the per-worker instance that runs one call with
//!   its limits ([`Runner`]), the batch / command encoding of the
//!   `weir:gateway` ABI (`abi`), what an instance sees of the host (`host`,
//!   and the route's log limiter, `log`: the guest's stdout and `log` import
//!   are part of calling it), and what can go wrong (`error`).
//! - `kind/` — the guest route kind on the workers: a connection's side
//!   (`conn`), the route's pending work on one worker and the worker's
//!   [`Scheduler`] (`slot`), the one turn that runs that work (`turn`),
//!   inline or, once a call held the worker too long (`offload`), on the
//!   route's guest thread (`thread`), the route's state
//!   shared by all workers ([`GuestRoute`]) and how its guests' commands are
//!   applied to connections (`apply`), deploys and what they inherit
//!   (`deploy`, `census`, `inherit`).
//! - `services/` — what guests ask for by command, one module per backend:
//!   the route's I/O and where its answers go (`io`), outbound HTTP
//!   (`http`, through `request`'s checks and `https`'s connector), timers
//!   (`timers`), key-value stores ([`kv`]: embedded, on Redis,
//!   bounded by `kv::quota`), and the real-time core's channels
//!   (`realtime`: publish, history and presence reads; it is a service like
//!   the others, answered through the worker's inbox, so it lives here
//!   rather than with the kind).
//!
//! The layers point one way: `services` names neither of the others (the
//! ABI's batch takes its I/O events, the runner's host imports read `kv`);
//! `runtime` names only `services`; `kind` sits on both.
//!
//! One message's path: the connection's behaviour (`kind::conn`) queues
//! it into its route's pending batch on this worker (`kind::slot`); at the
//! worker's next scheduler turn the slot runs its pending work
//! (`kind::turn`) inline or hands it to the route's guest thread
//! (`kind::thread`), which runs the same turn; each batch is one guest call
//! ([`Runner::handle`] in `runtime::runner`, through `runtime::abi` and
//! `runtime::host`), and the commands it returns are applied to the
//! route's connections on any worker (`kind::apply`), the I/O ones handed
//! to `services`.
//!
//! Contract with the caller of a [`Runner`] (the slot, the tests, the
//! benchmarks):
//! - Connection ids are unique per process and never 0.
//! - Push a connection's `open` before its messages and its `close` last;
//!   after the close, call [`Runner::forget`] (drops its attachment).
//! - Commands may name any connection id: the caller applies a `Send` or
//!   `Close` only to connections of this route that are still open, and
//!   ignores the rest. `Publish::exclude` leaves the sender out.
//! - Text payloads pushed into a batch must be valid UTF-8; text payloads,
//!   topics and close reasons coming out are checked; close codes are
//!   always sendable (an invalid one becomes 1011) and reasons ≤ 123 bytes.
//!   A [`Fault`] means the guest misbehaved: close that batch's connections
//!   with [`Fault::close_code`] (1011, or 1013 when the route is at its
//!   instance limit); the runner has already thrown the instance away.
//! - A batch's total payload must stay under 4 GiB (the ABI's u32 offsets);
//!   flush on [`Batch::data_len`] long before that.

mod kind;
mod runtime;
mod services;

pub use kind::deploy::{Deployment, NoEarlierVersion, Versions};
pub use kind::inherit::Inherited;
pub use kind::route::{GuestKind, GuestRoute};
pub use kind::slot::Scheduler;
pub use runtime::abi::{Accept, Batch, Command, Commands, UpgradeRequest, UpgradeResponse};
pub use runtime::engine::{GuestEngine, POOL_COMPONENT_INSTANCES};
pub use runtime::error::{Fault, GuestError};
pub use runtime::program::{check_routes, hex_sha256, Program};
pub use runtime::runner::Runner;
pub use services::http::check_outbound_ca;
pub use services::kv;
pub use services::realtime::GuestRealtime;
pub use weir_outbound::OutboundCaError;

/// Identifies one WebSocket connection; unique per process, never 0 (0 marks
/// "no connection" in a publish's exclusion field).
pub type ConnectionId = u64;
