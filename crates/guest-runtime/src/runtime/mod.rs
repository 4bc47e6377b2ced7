//! Loading and calling a component: the one wasmtime engine and its
//! component cache, a route's loaded program, the per-worker instance that
//! runs one call with its limits, the `weir:gateway` ABI's batch and
//! commands, what an instance sees of the host, the route's log limiter,
//! and what can go wrong.

pub(crate) mod abi;
pub(crate) mod cache;
pub(crate) mod engine;
pub(crate) mod error;
pub(crate) mod host;
pub(crate) mod log;
pub(crate) mod program;
pub(crate) mod runner;
