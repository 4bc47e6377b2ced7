//! The connection loop and what every route kind plugs into: read, decode,
//! hand pieces to the route's behaviour, write, backpressure, timeouts,
//! close. `decode` turns reads into pieces, `behaviour` is the interface
//! every connection's behaviour implements, `buffer` owns receive buffers
//! and the gather list of replies, `outbound` is the queue other
//! connections and guests write into, `socket` says who may touch a
//! connection's socket, `transport` is what the loop reads and writes (TCP,
//! TLS or an HTTP/2 stream), `conn` is the loop itself, `idle` the
//! per-worker wheel of idle deadlines, `rate` a connection's message
//! rates and the paced drain's slices.
//!
//! Beside the loop: `registry`, the one map of live connections; `stats`,
//! per-route and per-guest-version counters kept per worker; `kind`, the
//! route-kind interface (what a kind shares, what it is on one worker, how
//! it answers an upgrade); `attached`, where a native kind meets the guest
//! attached to it without naming the guest crate.

pub mod attached;
pub mod behaviour;
pub mod buffer;
pub mod conn;
pub mod decode;
pub mod idle;
pub mod kind;
pub mod outbound;
pub mod plane;
pub mod rate;
pub mod registry;
pub mod socket;
pub mod start;
pub mod stats;
pub mod transport;
