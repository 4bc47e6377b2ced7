//! The one wasmtime engine of the process: its configuration (Cranelift
//! `Speed`, pooling allocator with hard caps, no async support, epoch
//! interruption), the epoch ticker thread that makes deadlines fire, the
//! linker every guest is instantiated against, and the component cache.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig};
use weir_config::GUEST_MEMORY_MAX_BYTES;

use crate::runtime::abi::bindings::GatewayHandler;
use crate::runtime::cache::{default_cache_dir, ComponentCache};
use crate::runtime::error::GuestError;
use crate::runtime::host::StoreState;

/// Period of the epoch ticker. Deadlines are whole ticks, so this is the
/// granularity of `timeout`; 5 ms keeps a 10 ms timeout within 10–15 ms
/// while the ticker costs ~200 wakeups per second.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Component instances the pool holds across all routes and workers. Each
/// live instance takes one. A route's `instances` above this is capped to it
/// (the pool is then the limit); an instance the full pool cannot hold is a
/// [`Fault::Overloaded`](crate::Fault::Overloaded), like a route at its cap.
pub const POOL_COMPONENT_INSTANCES: u32 = 1024;

/// Core instances per component instance: a Rust wasip2 guest has 4 (its
/// module plus adapter shims), with headroom for bigger toolchains.
const CORE_INSTANCES_PER_COMPONENT: u32 = 8;

/// The process-wide engine. Create one with [`GuestEngine::new`] and share
/// it (`Arc`) between every [`Program`](crate::Program).
pub struct GuestEngine {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<StoreState>,
    cache: Option<ComponentCache>,
    ticker: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl GuestEngine {
    /// Build the engine and start its ticker. `cache_dir` None means the
    /// default ([`default_cache_dir`]: `$WEIR_CACHE_DIR`, `$XDG_CACHE_HOME/weir`
    /// or `~/.cache/weir`; `WEIR_CACHE_DIR=""` turns caching off). A cache
    /// directory that is not the gateway user's alone is an error.
    pub fn new(cache_dir: Option<PathBuf>) -> Result<Arc<GuestEngine>, GuestError> {
        let cache = match cache_dir.or_else(default_cache_dir) {
            Some(dir) => ComponentCache::open(dir)?,
            None => None,
        };
        let mut config = engine_config();
        // Compiled functions shared between components (see `FunctionCache`).
        if let Some(functions) = cache.as_ref().and_then(ComponentCache::functions) {
            config
                .enable_incremental_compilation(Arc::new(functions))
                .map_err(|e| GuestError::Engine(format!("{e:#}")))?;
        }
        let engine = Engine::new(&config).map_err(|e| GuestError::Engine(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        // std-built guests import a dozen WASI interfaces even when unused;
        // the context behind them (host.rs) grants no files and no sockets.
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| GuestError::Engine(format!("{e:#}")))?;
        // Both worlds' imports: 0.4.0, and 0.3.0 for components built
        // against it (different package versions, so no name clashes).
        GatewayHandler::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(|e| GuestError::Engine(format!("{e:#}")))?;
        crate::runtime::abi::bindings_v3::GatewayHandler::add_to_linker::<_, HasSelf<_>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| GuestError::Engine(format!("{e:#}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let (engine, stop) = (engine.clone(), stop.clone());
            std::thread::Builder::new()
                .name("weir-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| GuestError::Engine(format!("cannot start the epoch ticker: {e}")))?
        };
        Ok(Arc::new(GuestEngine {
            engine,
            linker,
            cache,
            ticker: Some(ticker),
            stop,
        }))
    }

    /// Compile `wasm` (a component), through the cache when there is one.
    pub(crate) fn compile(&self, wasm: &[u8]) -> wasmtime::Result<Component> {
        match &self.cache {
            Some(cache) => cache.load(&self.engine, wasm),
            None => Component::new(&self.engine, wasm),
        }
    }

    /// Epoch ticks to allow for `timeout`: rounded up, plus one because the
    /// first tick may land at once (a deadline of N ticks fires after
    /// (N−1)..N periods), and never fewer than 2.
    pub(crate) fn deadline_ticks(timeout: Duration) -> u64 {
        let tick = EPOCH_TICK.as_nanos();
        let ticks = timeout.as_nanos().div_ceil(tick) as u64;
        (ticks + 1).max(2)
    }
}

impl Drop for GuestEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

fn engine_config() -> Config {
    let mut c = Config::new();
    c.cranelift_opt_level(OptLevel::Speed);
    // Sync embedding: async support adds ~350 ns to every call (measured).
    c.concurrency_support(false);
    // Deadlines by epoch, not fuel: cheaper per call (measured 9–32 % vs 14–42 %).
    c.epoch_interruption(true);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(POOL_COMPONENT_INSTANCES)
        .total_core_instances(POOL_COMPONENT_INSTANCES * CORE_INSTANCES_PER_COMPONENT)
        // Rust guests have one memory; room for toolchains that use two.
        .total_memories(POOL_COMPONENT_INSTANCES * 2)
        .total_tables(POOL_COMPONENT_INSTANCES * 4)
        .max_memory_size(GUEST_MEMORY_MAX_BYTES);
    c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &std::path::Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    }

    /// A compile leaves its functions in the cache directory; a fresh
    /// engine compiling the same code without its artifact finds them
    /// there (none is written again), and an entry another user could
    /// have written is not used.
    #[test]
    fn compiled_functions_are_kept_and_found_again() {
        use std::os::unix::fs::PermissionsExt;
        let wasm = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/wasm/echo.wasm");
        let wasm =
            std::fs::read(&wasm).expect("examples/wasm/echo.wasm: run scripts/build-guests.sh");
        let dir = std::env::temp_dir().join(format!("weir-functions-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let functions = dir.join("functions");
        let compile_afresh = || {
            for artifact in files(&dir) {
                if artifact.extension().is_some_and(|e| e == "cwasm") {
                    std::fs::remove_file(artifact).unwrap();
                }
            }
            let engine = GuestEngine::new(Some(dir.clone())).expect("engine");
            engine.compile(&wasm).expect("compile");
        };
        compile_afresh();
        let first = files(&functions);
        assert!(first.len() > 10, "{} functions kept", first.len());
        let before: Vec<_> = first
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().modified().unwrap())
            .collect();
        compile_afresh();
        let second = files(&functions);
        // A few keys differ from compile to compile (wasmtime's glue
        // between component functions): those are new entries; the rest
        // are found, and a found entry is not written again.
        let new = second.len() - first.len();
        assert!(
            new * 4 < first.len(),
            "{new} of {} compiled again",
            first.len()
        );
        for (f, at) in first.iter().zip(&before) {
            let now = std::fs::metadata(f).unwrap().modified().unwrap();
            assert_eq!(now, *at, "{} written again: it was not used", f.display());
        }
        // Writable by others: not trusted, compiled again and rewritten.
        let planted = &first[0];
        std::fs::set_permissions(planted, std::fs::Permissions::from_mode(0o666)).unwrap();
        compile_afresh();
        let mode = std::fs::metadata(planted).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the untrusted entry was replaced by a compile");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn deadlines_get_at_least_two_ticks_and_round_up() {
        // A tick may land right after the deadline is set, so N ticks give
        // (N-1)..N periods: one extra tick keeps the full timeout.
        assert_eq!(GuestEngine::deadline_ticks(Duration::from_millis(1)), 2);
        assert_eq!(GuestEngine::deadline_ticks(Duration::from_millis(10)), 3);
        assert_eq!(GuestEngine::deadline_ticks(Duration::from_millis(11)), 4);
        assert_eq!(GuestEngine::deadline_ticks(Duration::from_secs(1)), 201);
    }
}
