//! RFC 6455: frame header parse/encode, unmask, close codes, UTF-8 checks and
//! the opening handshake. Written by hand: this is the hot path.
