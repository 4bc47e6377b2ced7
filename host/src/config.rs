//! The routes file: parse, validate, apply defaults. Sizes are written like
//! `"32MiB"`, durations like `"30s"`; every error names its line and what to
//! write instead.
//!
//! OWNER: config helper. The types below are the contract the server, reactor
//! and guest runner use; add fields, do not rename them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Largest message a client may send, assembled (RFC 6455 allows 2^63).
/// 32 MiB fits the biggest payload of the benchmark sweep with room to spare.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 32 << 20;
/// Bytes queued toward one client before the gateway stops reading from
/// whoever is producing them.
pub const DEFAULT_OUTBOUND_BUDGET_BYTES: usize = 4 << 20;
/// Silence after which the server pings; a second silent period closes.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Time a client has to finish its HTTP upgrade request.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default listen address of `weir serve` without a file.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9001";

/// A whole routes file, validated, with defaults applied.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    pub routes: Vec<RouteConfig>,
    /// Where the file was read from (None for the built-in default).
    pub source: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Worker threads; already resolved (0 in the file = one per core).
    pub workers: usize,
    pub handshake_timeout: Duration,
    /// Server-wide defaults; each route's `limits` starts from these.
    pub limits: Limits,
}

/// Per-connection limits: `[server]` gives defaults, a route may override.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub max_message: usize,
    pub outbound_budget: usize,
    pub idle_timeout: Duration,
    /// Subprotocols offered, in server preference order.
    pub subprotocols: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// matchit syntax: `/echo`, `/chat/{room}`, `/files/{*rest}`.
    /// The file's `/chat/*` form is translated to matchit's `/chat/{*rest}`.
    pub path: String,
    /// Line of the `[[route]]` header in the file, for messages.
    pub line: usize,
    pub behaviour: Behaviour,
    pub limits: Limits,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Behaviour {
    Native(NativeKind),
    Guest(GuestConfig),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeKind {
    Echo,
    Relay,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// One instance per (worker thread, route), recycled after `recycle_after` batches.
    Worker,
    /// A fresh instance for every batch.
    Batch,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GuestConfig {
    /// The component, resolved relative to the routes file's directory.
    pub wasm: PathBuf,
    pub isolation: Isolation,
    /// Max linear memory per instance.
    pub memory: usize,
    /// CPU deadline per guest call.
    pub timeout: Duration,
    /// Max live instances of this route across all workers.
    pub instances: usize,
    /// Batches an instance serves before it is replaced (worker isolation).
    pub recycle_after: u64,
    /// Cap on one connection's attachment.
    pub attachment_max: usize,
    /// Environment variables the guest may see (nothing else is visible).
    pub env: BTreeMap<String, String>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message: DEFAULT_MAX_MESSAGE_BYTES,
            outbound_budget: DEFAULT_OUTBOUND_BUDGET_BYTES,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            subprotocols: Vec::new(),
        }
    }
}

/// One worker per core the process may run on.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Config {
    /// `weir serve` without a file: native /echo and /relay on 127.0.0.1:9001.
    pub fn builtin_default() -> Config {
        let limits = Limits::default();
        let route = |path: &str, kind| RouteConfig {
            path: path.to_string(),
            line: 0,
            behaviour: Behaviour::Native(kind),
            limits: limits.clone(),
        };
        Config {
            server: ServerConfig {
                listen: DEFAULT_LISTEN.parse().expect("valid default address"),
                workers: default_workers(),
                handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
                limits: limits.clone(),
            },
            routes: vec![
                route("/echo", NativeKind::Echo),
                route("/relay", NativeKind::Relay),
            ],
            source: None,
        }
    }

    pub fn load(_path: &Path) -> Result<Config, ConfigError> {
        todo!("config helper")
    }
}

/// A problem in the routes file, with the line it is on and what to write instead.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    pub message: String,
}
