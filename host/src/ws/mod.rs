//! RFC 6455: frame header parse, the encoder (the one place bytes for the
//! wire are built), unmask, close codes, UTF-8 checks and
//! the opening handshake. Written by hand: this is the hot path weir exists to
//! make fast, and it needs in-place unmasking and replies built in the receive
//! buffer, which general-purpose WebSocket crates do not expose.
//!
//! permessage-deflate (RFC 7692): `deflate` negotiates it per route,
//! `compress` holds a connection's zlib streams (flate2 over zlib-rs).

pub mod close;
pub mod compress;
pub mod deflate;
pub mod encode;
pub mod frame;
pub mod handshake;
pub mod mask;
pub mod utf8;

pub use frame::{OpCode, ProtocolError};
