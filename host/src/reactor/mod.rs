//! The per-connection loop: read, decode, dispatch, write, backpressure, timeouts.
