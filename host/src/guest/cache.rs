//! The on-disk cache of precompiled components, so a restart loads a route
//! in ~0.2 ms instead of compiling it for ~100 ms.
//!
//! An artifact is named by SHA-256 over the component's bytes and the
//! engine's `precompile_compatibility_hash` (wasmtime version, target and
//! every codegen setting), so a changed guest or a changed engine simply
//! misses. Loading an artifact trusts it (`Component::deserialize_file` is
//! unsafe): the directory must be writable only by the gateway's user, as
//! with wasmtime's own cache.

use std::hash::Hasher;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

/// Environment variable naming the cache directory; an empty value turns
/// the cache off.
pub const CACHE_DIR_ENV: &str = "WEIR_CACHE_DIR";

/// Where artifacts go unless told otherwise: `$WEIR_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/weir`, else `~/.cache/weir`. None when the cache is off
/// or no home is known.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(CACHE_DIR_ENV) {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(xdg).join("weir"));
    }
    std::env::var_os("HOME")
        .filter(|d| !d.is_empty())
        .map(|h| PathBuf::from(h).join(".cache").join("weir"))
}

/// Feeds `Hash` output into SHA-256, so the engine's compatibility hash
/// becomes part of the artifact name in a way that is stable across runs
/// (std's `DefaultHasher` promises no such thing).
struct ShaHasher<'a>(&'a mut Sha256);

impl Hasher for ShaHasher<'_> {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// A directory of `<sha256>.cwasm` files for one engine configuration.
pub struct ComponentCache {
    dir: PathBuf,
}

impl ComponentCache {
    /// Use `dir` (created if missing). None, with a warning, when it cannot
    /// be created: the gateway then compiles on every start.
    pub fn open(dir: PathBuf) -> Option<Self> {
        match std::fs::create_dir_all(&dir) {
            Ok(()) => Some(ComponentCache { dir }),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "component cache disabled: {e}");
                None
            }
        }
    }

    /// The artifact path for `wasm` under `engine`.
    pub fn artifact_path(&self, engine: &Engine, wasm: &[u8]) -> PathBuf {
        let mut sha = Sha256::new();
        sha.update(b"weir-component-cache-v1\0");
        sha.update(wasm);
        std::hash::Hash::hash(
            &engine.precompile_compatibility_hash(),
            &mut ShaHasher(&mut sha),
        );
        let digest = sha.finalize();
        let mut name = String::with_capacity(70);
        for b in digest {
            name.push_str(&format!("{b:02x}"));
        }
        name.push_str(".cwasm");
        self.dir.join(name)
    }

    /// Load `wasm` from its artifact, or compile it and store the artifact.
    /// Cache trouble (unwritable dir, stale file) never fails a load; only a
    /// compile error does.
    pub fn load(&self, engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Component> {
        let path = self.artifact_path(engine, wasm);
        if path.exists() {
            // SAFETY: the file was written by `store` below from
            // `Engine::precompile_component` output, under a name that binds
            // it to these exact bytes and this engine configuration; the
            // directory is the operator's and trusted (module doc).
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(c) => return Ok(c),
                Err(e) => {
                    tracing::warn!(artifact = %path.display(), "stale component artifact, recompiling: {e}")
                }
            }
        }
        let artifact = engine.precompile_component(wasm)?;
        self.store(&path, &artifact);
        // SAFETY: these bytes came from `precompile_component` on this engine
        // just above.
        unsafe { Component::deserialize(engine, &artifact) }
    }

    /// Write atomically (temp file + rename) so a concurrent start never
    /// reads half an artifact.
    fn store(&self, path: &Path, artifact: &[u8]) {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let result = std::fs::write(&tmp, artifact).and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(artifact = %path.display(), "cannot write component artifact: {e}");
        }
    }
}
