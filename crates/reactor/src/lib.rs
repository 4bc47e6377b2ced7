//! The per-connection loop: read, decode, hand pieces to the route's
//! behaviour, write, backpressure, timeouts, close. `decode` turns reads into
//! pieces, `behaviour` is the interface every route kind implements,
//! `buffer` owns receive buffers and the gather list of replies, `outbound`
//! is the queue other connections and guests write into, `socket` says who
//! may touch a connection's socket, `transport` is what the loop reads and
//! writes (TCP or TLS), `conn` is the loop itself.

pub mod attached;
pub mod behaviour;
pub mod buffer;
pub mod conn;
pub mod decode;
pub mod idle;
pub mod kind;
pub mod outbound;
pub mod registry;
pub mod socket;
pub mod start;
pub mod stats;
pub mod transport;
