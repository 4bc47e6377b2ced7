//! What guests ask for by command, one module per backend: the route's I/O
//! and where its answers go (`io`), outbound HTTP (`http`, its requests
//! checked by `request` and sent by `weir-outbound`), timers (`timers`),
//! key-value stores (`kv`: embedded, on Redis, bounded by a quota), and the
//! real-time core's channels (`realtime`). Answers come back as events in a
//! later batch, through the worker's inbox.

pub(crate) mod http;
pub(crate) mod io;
pub mod kv;
pub(crate) mod realtime;
pub(crate) mod request;
pub(crate) mod timers;
