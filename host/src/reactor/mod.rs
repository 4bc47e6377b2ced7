//! The per-connection loop: read, decode, dispatch, write, backpressure,
//! timeouts. `decode` turns reads into pieces, `buffer` owns receive buffers
//! and the gather list of replies, `outbound` is the queue other connections
//! and guests write into, `conn` is the loop itself.

pub mod buffer;
pub mod conn;
pub mod decode;
pub mod outbound;
