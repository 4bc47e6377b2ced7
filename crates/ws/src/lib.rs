//! weir's WebSocket protocol layer, RFC 6455: frame header parse, the
//! encoder (the one place bytes for the wire are built), unmask, close
//! codes, UTF-8 checks and the opening handshake. Written by hand: this is
//! the hot path weir exists to make fast, and it needs in-place unmasking
//! and replies built in the receive buffer, which general-purpose WebSocket
//! crates do not expose.
//!
//! permessage-deflate (RFC 7692): `deflate` negotiates it per route,
//! `compress` holds a connection's zlib streams (flate2 over zlib-rs),
//! `send_deflate` compresses for producers outside a connection's loop.
//!
//! A crate of its own, below everything else in the gateway: no I/O, no
//! runtime (no tokio), nothing from the host, so the protocol can be read,
//! tested and fuzzed on its own. Inside it dependencies point one way:
//! `frame` ← `close`, `utf8`, `compress` ← `encode` ← `send_deflate`;
//! `mask`, `deflate` and `handshake` stand alone.

pub mod close;
pub mod compress;
pub mod deflate;
pub mod encode;
pub mod frame;
pub mod handshake;
pub mod mask;
pub mod send_deflate;
pub mod utf8;

pub use frame::{OpCode, ProtocolError};
