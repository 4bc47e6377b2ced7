//! A guest route's settings: isolation, limits, its log budget, what it may
//! reach (outbound HTTP, key-value stores) and the namespaces' guests.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// One instance per (worker thread, route), recycled after `recycle_after` batches.
    Worker,
    /// A fresh instance for every batch.
    Batch,
}

/// A real-time namespace's guest: asked about each client subscribe and
/// publication of the namespace's channels on centrifugo routes.
#[derive(Debug, Clone, PartialEq)]
pub struct NamespaceGuest {
    pub namespace: String,
    pub guest: GuestConfig,
    /// The `[[namespaces]]` table's line, for errors.
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GuestConfig {
    /// The component, resolved relative to the routes file's directory;
    /// for an `oci://` guest, the cached file the host pulled it to (empty
    /// until then).
    pub wasm: PathBuf,
    /// Where the component comes from when the routes file names a
    /// registry (`guest = "oci://…"`); None for a file. Boxed: most
    /// guests are files, and the config's route enum stays small.
    pub oci: Option<Box<OciRef>>,
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
    /// What the route's guests may write to the gateway log.
    pub log: GuestLog,
    /// Percent of one core the route may use on its guest thread, once its
    /// calls were too slow for the worker thread (`weir_guest_runtime`'s slot, `kind/slot.rs`).
    pub cpu_share: u32,
    /// What the route's guests may reach with `http-request` (nothing by
    /// default) and how far. Boxed: most routes have none, and the
    /// config's route enum stays small.
    pub outbound: Box<OutboundPolicy>,
    /// The route's key-value store, if it has one (`kv`).
    pub kv: Option<KvName>,
    /// How much that store may hold (`kv_max_bytes`, `kv_max_keys`).
    pub kv_quota: KvQuota,
    /// `realtime = true`: the guest's topics are the real-time core's
    /// channels. Its subscribes join channels (API and centrifugo
    /// publications arrive as plain text frames), its publishes go through
    /// the core (offsets, history, centrifugo subscribers, other nodes),
    /// and it may read history and presence (`guest::realtime`).
    pub realtime: bool,
}

/// A guest route's outbound HTTP policy (`allow_outbound`,
/// `outbound_timeout`, `outbound_max_concurrent`, `outbound_max_response`).
#[derive(Debug, Clone, PartialEq)]
pub struct OutboundPolicy {
    /// URL prefixes a request must start with; empty: every request is
    /// refused (deny by default).
    pub allow: Vec<OutboundPrefix>,
    /// Whole request, connect to last body byte.
    pub timeout: Duration,
    /// Requests of the route in flight at once; past it: http-error busy.
    pub max_concurrent: usize,
    /// Largest response body accepted; past it: http-error too-large.
    pub max_response: usize,
    /// The CA certificates (PEM) https servers are checked against
    /// (`outbound_ca`, for private services); None: webpki-roots, the
    /// Mozilla set.
    pub ca: Option<PathBuf>,
    /// `allow_private = true`: an allowed host *name* may resolve to a
    /// loopback, private, link-local or other non-global address. Off by
    /// default, so a name (or a DNS answer an attacker controls) cannot
    /// lead a guest to the gateway's own network; an entry that names an
    /// IP address is the operator's explicit choice and needs no opt-in.
    pub allow_private: bool,
}

/// Long enough for a remote API, short enough that a stuck backend does
/// not hold the route's `outbound_max_concurrent` slots for long.
pub const DEFAULT_OUTBOUND_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests in flight per route by default.
pub const DEFAULT_OUTBOUND_MAX_CONCURRENT: usize = 64;
/// Response bodies are handed to the guest whole: 1 MiB keeps a batch small.
pub const DEFAULT_OUTBOUND_MAX_RESPONSE_BYTES: usize = 1 << 20;

impl Default for OutboundPolicy {
    fn default() -> Self {
        OutboundPolicy {
            allow: Vec::new(),
            timeout: DEFAULT_OUTBOUND_TIMEOUT,
            max_concurrent: DEFAULT_OUTBOUND_MAX_CONCURRENT,
            max_response: DEFAULT_OUTBOUND_MAX_RESPONSE_BYTES,
            ca: None,
            allow_private: false,
        }
    }
}

/// One `allow_outbound` entry: a URL must have this scheme, host and port
/// (the scheme's default when the entry names none) and a path that, once
/// normalised (`url_check::normalize_path`), lies under `path` on a
/// segment boundary (`url_check::path_within`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundPrefix {
    pub scheme: String,
    /// Lower-case.
    pub host: String,
    pub port: u16,
    /// Normalised; starts with `/`.
    pub path: String,
}

/// Which key-value store a route uses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KvName {
    /// `kv = "route"`: a store of the route's own (named by its path).
    Route,
    /// `kv = "shared:NAME"`: shared by every route that names it.
    Shared(String),
}

/// How much a key-value store may hold: a write that would take it past
/// either bound is refused (the guest gets a kv-error event). Bytes are
/// key plus value lengths, summed over the store's live keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvQuota {
    /// `kv_max_bytes`.
    pub max_bytes: u64,
    /// `kv_max_keys`.
    pub max_keys: u64,
}

/// A store is for state (rosters, counters, sessions), not blobs: 64 MiB
/// is generous for that and small next to a gateway's memory, which holds
/// a Redis-backed store whole (its mirror).
pub const DEFAULT_KV_MAX_BYTES: u64 = 64 << 20;
/// A presence roster of 100,000 users fits; a guest that stores a key per
/// message does not grow without end.
pub const DEFAULT_KV_MAX_KEYS: u64 = 100_000;

impl Default for KvQuota {
    fn default() -> Self {
        KvQuota {
            max_bytes: DEFAULT_KV_MAX_BYTES,
            max_keys: DEFAULT_KV_MAX_KEYS,
        }
    }
}

/// Half a core: a slow route keeps making progress, and two of them (or one
/// and the machine's other work) still fit on one core.
pub const DEFAULT_GUEST_CPU_SHARE_PERCENT: u32 = 50;

/// A guest route's log budget (`log`, `log_rate`, `log_bytes`, `log_burst`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestLog {
    /// Lines above this level are filtered out.
    pub level: LogLevel,
    /// Sustained lines per second, for all the route's instances together.
    pub lines_per_sec: u32,
    /// Sustained bytes per second (also the bytes a burst may hold).
    pub bytes_per_sec: u64,
    /// Lines that may come at once before the rate applies.
    pub burst: u32,
}

/// A route's `log` level: `off` writes nothing, `debug` everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Off,
    Error,
    Warn,
    Info,
    Debug,
}

/// A developer printing a line per message at moderate load stays under
/// these; a debugging loop printing thousands of lines per message does not.
pub const DEFAULT_GUEST_LOG_LINES_PER_SEC: u32 = 200;
pub const DEFAULT_GUEST_LOG_BYTES_PER_SEC: u64 = 256 << 10;
pub const DEFAULT_GUEST_LOG_BURST: u32 = 1000;

impl Default for GuestLog {
    fn default() -> Self {
        GuestLog {
            level: LogLevel::Info,
            lines_per_sec: DEFAULT_GUEST_LOG_LINES_PER_SEC,
            bytes_per_sec: DEFAULT_GUEST_LOG_BYTES_PER_SEC,
            burst: DEFAULT_GUEST_LOG_BURST,
        }
    }
}

impl GuestConfig {
    /// Where the component comes from, as `GET /routes` and messages name
    /// it: the `oci://` reference (pinned once pulled), or the file.
    pub fn source(&self) -> String {
        match &self.oci {
            Some(reference) => reference.to_string(),
            None => self.wasm.display().to_string(),
        }
    }

    /// A guest route with every optional key at its default.
    pub fn defaults(wasm: PathBuf) -> GuestConfig {
        GuestConfig {
            wasm,
            oci: None,
            isolation: Isolation::Worker,
            memory: DEFAULT_GUEST_MEMORY_BYTES,
            timeout: DEFAULT_GUEST_TIMEOUT,
            instances: DEFAULT_GUEST_INSTANCES,
            recycle_after: DEFAULT_GUEST_RECYCLE_AFTER,
            attachment_max: DEFAULT_ATTACHMENT_MAX_BYTES,
            env: BTreeMap::new(),
            log: GuestLog::default(),
            cpu_share: DEFAULT_GUEST_CPU_SHARE_PERCENT,
            outbound: Box::default(),
            kv: None,
            kv_quota: KvQuota::default(),
            realtime: false,
        }
    }
}
