//! One guest route, loaded: its compiled component linked once
//! (`InstancePre`, shared by every worker), its limits, and the count of live
//! instances that enforces the route's `instances` cap across workers.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;

use sha2::{Digest, Sha256};

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre};
use wasmtime::Store;

use crate::runtime::abi::bindings::GatewayHandlerPre;
use crate::runtime::abi::bindings_v3::GatewayHandlerPre as GatewayHandlerPreV3;
use crate::runtime::engine::{GuestEngine, POOL_COMPONENT_INSTANCES};
use crate::runtime::error::GuestError;
use crate::runtime::host::StoreState;
use crate::runtime::log::RouteLog;
use weir_config::GUEST_MEMORY_MAX_BYTES;
use weir_config::{Behaviour, Config, GuestConfig, Isolation};

/// Smallest `memory` that makes sense: one wasm page.
const MIN_MEMORY_BYTES: usize = 64 << 10;

/// A guest route ready to instantiate. `Send + Sync`; share it with `Arc`.
pub struct Program {
    pub(crate) engine: Arc<GuestEngine>,
    pub(crate) pre: Pre,
    /// The route path, for logs.
    pub(crate) route: Arc<str>,
    /// What the route's guests may write to the gateway log, shared by all
    /// its instances.
    pub(crate) log: Arc<RouteLog>,
    pub(crate) cfg: GuestConfig,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) deadline_ticks: u64,
    /// Live instances of this route across workers (≤ `cfg.instances`).
    live: AtomicUsize,
    /// The route's version this program is (1 at startup, one more per
    /// deploy): runners compare it with the version serving now at each
    /// batch (`kind::deploy`).
    pub(crate) version: u64,
    /// SHA-256 of the component's bytes, hex: what `GET /routes` shows, so
    /// an operator can tell which build is serving.
    pub(crate) hash: String,
    /// This version's calls, batches and faults, per worker.
    pub(crate) stats: weir_reactor::stats::GuestStats,
    /// The optional `check-state` export (`kind::inherit`): a deploy asks
    /// it whether this version reads the live connections' state.
    pub(crate) state_export: Option<ComponentExportIndex>,
}

impl Program {
    /// Read, compile (or load from the cache) and link `cfg.wasm` for the
    /// route at `route_path`, then start one instance as a trial so a
    /// component that cannot start within its limits fails here, not on
    /// the first connection.
    pub fn load(
        engine: &Arc<GuestEngine>,
        route_path: &str,
        cfg: &GuestConfig,
    ) -> Result<Arc<Program>, GuestError> {
        let path = cfg.wasm.as_path();
        let wasm = std::fs::read(path).map_err(|source| GuestError::Unreadable {
            route: route_path.to_string(),
            path: path.to_path_buf(),
            source,
        })?;
        Program::from_bytes(engine, route_path, cfg, &wasm, path, None, 1)
    }

    /// Like [`Program::load`], from bytes already read (`path` names them
    /// in errors), as version `version` of the route; `log` is the route's
    /// log when an earlier version has one (its budget and counts go on).
    pub(crate) fn from_bytes(
        engine: &Arc<GuestEngine>,
        route_path: &str,
        cfg: &GuestConfig,
        wasm: &[u8],
        path: &Path,
        log: Option<Arc<RouteLog>>,
        version: u64,
    ) -> Result<Arc<Program>, GuestError> {
        let route = route_path.to_string();
        check_limits(&route, cfg)?;
        check_header(&route, path, wasm)?;
        let component = engine.compile(wasm).map_err(|e| GuestError::Compile {
            route: route.clone(),
            path: path.to_path_buf(),
            detail: format!("{e:#}"),
        })?;
        let abi_error = |detail: String| GuestError::Abi {
            route: route.clone(),
            path: path.to_path_buf(),
            package: crate::runtime::abi::WIT_PACKAGE,
            rebuild: rebuild_hint(engine, &component),
            detail,
        };
        let instance_pre = engine
            .linker
            .instantiate_pre(&component)
            .map_err(|e| abi_error(format!("{e:#}")))?;
        let state_export = component
            .get_export_index(None, crate::runtime::abi::STATE_INTERFACE)
            .and_then(|i| component.get_export_index(Some(&i), "check-state"));
        let pre = match GatewayHandlerPre::new(instance_pre.clone()) {
            Ok(pre) => Pre::V4(pre),
            Err(e) => match GatewayHandlerPreV3::new(instance_pre) {
                Ok(pre) => Pre::V3(pre),
                Err(_) => {
                    return Err(abi_error(format!(
                        "{e:#}; the component exports {} (this gateway runs components \
                         built for {} or {})",
                        exports_of(engine, &component),
                        crate::runtime::abi::WIT_PACKAGE,
                        crate::runtime::abi::WIT_PACKAGE_V3
                    )))
                }
            },
        };

        if matches!(pre, Pre::V3(_)) {
            let unusable = settings_needing_io(cfg);
            if !unusable.is_empty() {
                warn!(
                    route = %route,
                    "{} set on the route, but {} was built for {}, which has no I/O \
                     imports: the guest cannot use {}; rebuild it with an SDK for {}",
                    unusable.join(" and "),
                    path.display(),
                    crate::runtime::abi::WIT_PACKAGE_V3,
                    if unusable.len() == 1 { "it" } else { "them" },
                    crate::runtime::abi::WIT_PACKAGE
                );
            }
        }
        // A 0.3.0 component predates the state check.
        let state_export = state_export.filter(|_| matches!(pre, Pre::V4(_)));
        let program = Arc::new(Program {
            engine: engine.clone(),
            pre,
            route: route.as_str().into(),
            log: log.unwrap_or_else(|| Arc::new(RouteLog::new(route.as_str().into(), cfg.log))),
            cfg: cfg.clone(),
            env: cfg
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            deadline_ticks: GuestEngine::deadline_ticks(cfg.timeout),
            live: AtomicUsize::new(0),
            version,
            hash: hex_sha256(wasm),
            stats: Default::default(),
            state_export,
        });
        let mut store = program.new_store();
        program.instantiate(&mut store).map_err(|e| {
            let detail = if store.data().memory_refused {
                format!(
                    "the component needs more than the route's memory limit of {} bytes to start",
                    cfg.memory
                )
            } else {
                format!("the component fails to start: {e:#}")
            };
            GuestError::Limits {
                route: route.clone(),
                detail,
            }
        })?;
        Ok(program)
    }

    /// The route path this program serves.
    pub fn route(&self) -> &str {
        &self.route
    }

    /// The route's guest log: its limiter and dropped-line counts.
    pub fn log(&self) -> &Arc<RouteLog> {
        &self.log
    }

    pub fn config(&self) -> &GuestConfig {
        &self.cfg
    }

    /// The route's version this program is.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// SHA-256 of the component's bytes, hex.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// This version's call counters, summed over workers.
    pub fn stats(&self) -> weir_reactor::stats::GuestTotals {
        self.stats.sum()
    }

    /// Live instances of this route right now, across workers.
    pub fn live_instances(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// A fresh Store with the route's environment, limits and deadline.
    pub(crate) fn new_store(&self) -> Store<StoreState> {
        let state = StoreState::new(self.log.clone(), &self.env, self.cfg.memory);
        let mut store = Store::new(&self.engine.engine, state);
        store.limiter(|s| s);
        store.epoch_deadline_trap();
        store.set_epoch_deadline(self.deadline_ticks);
        store
    }

    /// Instantiate in `store` (whose deadline is already set).
    pub(crate) fn instantiate(&self, store: &mut Store<StoreState>) -> wasmtime::Result<Handler> {
        Ok(match &self.pre {
            Pre::V4(pre) => Handler::V4(pre.instantiate(store)?),
            Pre::V3(pre) => Handler::V3(pre.instantiate(store)?),
        })
    }

    /// The linked component, for exports the bindings do not name.
    pub(crate) fn instance_pre(&self) -> &InstancePre<StoreState> {
        match &self.pre {
            Pre::V4(pre) => pre.instance_pre(),
            Pre::V3(pre) => pre.instance_pre(),
        }
    }

    /// Whether the component was built for weir:gateway 0.3.0 (no I/O).
    pub fn is_v3(&self) -> bool {
        matches!(self.pre, Pre::V3(_))
    }

    /// Take one of the route's instance slots, if any is free.
    pub(crate) fn try_acquire(self: &Arc<Self>) -> Option<InstancePermit> {
        let max = self.max_instances();
        self.live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| InstancePermit {
                program: self.clone(),
            })
    }

    /// The route's `instances`, capped to the engine's pool.
    pub fn max_instances(&self) -> usize {
        self.cfg.instances.min(POOL_COMPONENT_INSTANCES as usize)
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.cfg.timeout
    }
}

/// The route settings (routes-file keys) that only a component with the
/// I/O imports (outbound HTTP, timers, key-value) can use.
fn settings_needing_io(cfg: &GuestConfig) -> Vec<&'static str> {
    let mut keys = Vec::new();
    if !cfg.outbound.allow.is_empty() {
        keys.push("allow_outbound");
    }
    if cfg.kv.is_some() {
        keys.push("kv");
    }
    keys
}

/// A component linked for the world version it was built for.
pub(crate) enum Pre {
    /// weir:gateway 0.4.0 (I/O, deferred upgrade).
    V4(GatewayHandlerPre<StoreState>),
    /// weir:gateway 0.3.0: runs as before; gets no I/O events.
    V3(GatewayHandlerPreV3<StoreState>),
}

/// A live instance's exports, for the version it was built for.
pub(crate) enum Handler {
    V4(crate::runtime::abi::bindings::GatewayHandler),
    V3(crate::runtime::abi::bindings_v3::GatewayHandler),
}

/// One of a route's `instances` slots; given back on drop.
pub(crate) struct InstancePermit {
    program: Arc<Program>,
}

impl Drop for InstancePermit {
    fn drop(&mut self) {
        self.program.live.fetch_sub(1, Ordering::AcqRel);
    }
}

fn check_limits(route: &str, cfg: &GuestConfig) -> Result<(), GuestError> {
    let fail = |detail: String| {
        Err(GuestError::Limits {
            route: route.to_string(),
            detail,
        })
    };
    if cfg.memory < MIN_MEMORY_BYTES || cfg.memory > GUEST_MEMORY_MAX_BYTES {
        return fail(format!(
            "memory = {} bytes is outside {MIN_MEMORY_BYTES}..={GUEST_MEMORY_MAX_BYTES} (write e.g. memory = \"16MiB\")",
            cfg.memory
        ));
    }
    if cfg.instances == 0 {
        return fail("instances must be at least 1".into());
    }
    if cfg.timeout.is_zero() {
        return fail("timeout must be above zero (write e.g. timeout = \"10ms\")".into());
    }
    if cfg.isolation == Isolation::Worker && cfg.recycle_after == 0 {
        return fail("recycle_after must be at least 1".into());
    }
    Ok(())
}

/// Tell a component from a core module or a stray file before wasmtime
/// gives a less direct error. Binary format: `\0asm`, a 2-byte version,
/// then a 2-byte layer (0 = core module, 1 = component).
fn check_header(route: &str, path: &Path, wasm: &[u8]) -> Result<(), GuestError> {
    let (route, path) = (route.to_string(), path.to_path_buf());
    if wasm.len() < 8 || &wasm[..4] != b"\0asm" {
        return Err(GuestError::NotWasm { route, path });
    }
    if wasm[6..8] == [0, 0] {
        return Err(GuestError::CoreModule { route, path });
    }
    Ok(())
}

/// SHA-256 of `bytes` in lower-case hex.
pub fn hex_sha256(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut hex = String::with_capacity(64);
    for b in Sha256::digest(bytes) {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// How to rebuild a component that does not fit, told by the extra export
/// its toolchain leaves in (they are allowed: the gateway only looks up
/// `weir:gateway/handler`): componentize-py keeps an `exports` interface
/// (its `init`), componentize-qjs an `init` function.
fn rebuild_hint(engine: &GuestEngine, component: &Component) -> &'static str {
    let ty = component.component_type();
    let mut exports = ty.exports(&engine.engine);
    match exports.find_map(|(name, _)| match name {
        "exports" => Some(true),
        "init" => Some(false),
        _ => None,
    }) {
        Some(true) => "`python3 guest-sdk/python/build.py APP.py` (Python, componentize-py)",
        Some(false) => "`node guest-sdk/js/build.mjs APP.js` (JavaScript, componentize-qjs)",
        None => "`weir build`",
    }
}

/// The component's top-level exports, for an error message.
fn exports_of(engine: &GuestEngine, component: &Component) -> String {
    let ty = component.component_type();
    let names: Vec<String> = ty
        .exports(&engine.engine)
        .map(|(name, item)| match item.ty {
            ComponentItem::ComponentFunc(_) => format!("func `{name}`"),
            ComponentItem::ComponentInstance(_) => format!("interface `{name}`"),
            _ => format!("`{name}`"),
        })
        .collect();
    if names.is_empty() {
        "nothing".into()
    } else {
        names.join(", ")
    }
}

/// Load every guest route of `config` (for `weir check` and startup), with
/// one engine. Reports every failing route, not just the first.
pub fn check_routes(config: &Config) -> Result<(), GuestError> {
    let guests: Vec<_> = config
        .routes
        .iter()
        .filter_map(|r| match &r.behaviour {
            Behaviour::Guest(g) => Some((r.path.as_str(), r.line, g)),
            Behaviour::Native(_) => None,
        })
        .collect();
    if guests.is_empty() {
        return Ok(());
    }
    let engine = GuestEngine::new(config.server.cache_dir.clone())?;
    let mut errors: Vec<GuestError> = guests
        .into_iter()
        .filter_map(|(path, line, g)| {
            Program::load(&engine, path, g)
                .err()
                .map(|e| e.at_line(line))
        })
        .collect();
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(GuestError::Many(errors)),
    }
}
