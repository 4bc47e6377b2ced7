//! The on-disk cache of precompiled components, so a restart loads a route
//! in ~0.2 ms instead of compiling it for ~100 ms.
//!
//! An artifact is named by SHA-256 over the component's bytes and the
//! engine's `precompile_compatibility_hash` (wasmtime version, target and
//! every codegen setting), so a changed guest or a changed engine simply
//! misses. Loading an artifact trusts it (`Component::deserialize` runs
//! its bytes as native code), so: the directory must belong to the
//! gateway's user and not be writable by group or others (else the
//! gateway refuses to start, naming it; a directory it creates is 0700);
//! an artifact is loaded only if it is a regular file of ours that
//! group and others cannot write, read through the descriptor that was
//! checked; anything else is logged, ignored and compiled again. Artifacts
//! are written 0600 under a random temporary name with exclusive create,
//! then renamed into place.

use std::fmt;
use std::fs::{DirBuilder, File, OpenOptions};
use std::hash::Hasher;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

/// Environment variable naming the cache directory; an empty value turns
/// the cache off.
pub(crate) const CACHE_DIR_ENV: &str = "WEIR_CACHE_DIR";

/// Where artifacts go unless told otherwise: `$WEIR_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/weir`, else `~/.cache/weir`. None when the cache is off
/// or no home is known.
pub(crate) fn default_cache_dir() -> Option<PathBuf> {
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

/// Permission bits that let someone other than the owner write.
const GROUP_OTHER_WRITE: u32 = 0o022;
/// Mode of a directory the cache creates: the gateway's user alone.
const DIR_MODE: u32 = 0o700;
/// Mode of an artifact: read and written by the gateway's user alone.
const ARTIFACT_MODE: u32 = 0o600;
/// Random bytes in a temporary file's name (hex-encoded): another user
/// cannot guess it to plant a file or a link there first.
const TEMP_NAME_RANDOM_BYTES: usize = 8;

/// Why a cache directory is not used: a file in it would run as native
/// code in the gateway, so it must be the gateway user's alone.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Another user could replace what the gateway runs.
    #[error("the component cache directory {} belongs to uid {owner}, not to this gateway's user (uid {us}); its files would run as native code in the gateway: chown it, or set another with [server] cache_dir or WEIR_CACHE_DIR (WEIR_CACHE_DIR=\"\" turns the cache off)", dir.display())]
    DirOwnedByOther { dir: PathBuf, owner: u32, us: u32 },
    /// Anyone in the group (or anyone at all) could plant an artifact.
    #[error("the component cache directory {} is writable by group or others (mode {mode:o}); its files would run as native code in the gateway: chmod go-w it, or set another with [server] cache_dir or WEIR_CACHE_DIR (WEIR_CACHE_DIR=\"\" turns the cache off)", dir.display())]
    DirWritableByOthers { dir: PathBuf, mode: u32 },
    /// The path names a file, not a directory.
    #[error("the component cache directory {} is not a directory", dir.display())]
    NotADirectory { dir: PathBuf },
}

/// Why an artifact in the cache is not loaded (it is compiled again).
#[derive(Debug)]
pub(crate) enum UntrustedArtifact {
    /// Another user's file: not ours to run.
    OwnedByOther { owner: u32 },
    /// Group or others may write it.
    WritableByOthers { mode: u32 },
    /// A link, a directory, a device: not something `store` wrote.
    NotARegularFile,
    /// Opening or reading it failed.
    Unreadable(std::io::Error),
}

impl fmt::Display for UntrustedArtifact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UntrustedArtifact::OwnedByOther { owner } => {
                write!(f, "it belongs to uid {owner}, not to this gateway's user")
            }
            UntrustedArtifact::WritableByOthers { mode } => {
                write!(f, "group or others may write it (mode {mode:o})")
            }
            UntrustedArtifact::NotARegularFile => write!(f, "it is not a regular file"),
            UntrustedArtifact::Unreadable(e) => write!(f, "cannot read it: {e}"),
        }
    }
}

/// The effective user id of this process.
fn our_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A directory of `<sha256>.cwasm` files for one engine configuration.
pub(crate) struct ComponentCache {
    dir: PathBuf,
}

impl ComponentCache {
    /// Use `dir`, created (0700) if missing. `Ok(None)`, with a warning,
    /// when it cannot be created: the gateway then compiles on every start.
    /// An error when it exists but is not the gateway user's alone.
    pub fn open(dir: PathBuf) -> Result<Option<Self>, CacheError> {
        let made = DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&dir)
            .and_then(|()| std::fs::metadata(&dir));
        let meta = match made {
            Ok(meta) => meta,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "component cache disabled: {e}");
                return Ok(None);
            }
        };
        if !meta.is_dir() {
            return Err(CacheError::NotADirectory { dir });
        }
        let us = our_uid();
        if meta.uid() != us {
            return Err(CacheError::DirOwnedByOther {
                dir,
                owner: meta.uid(),
                us,
            });
        }
        if meta.mode() & GROUP_OTHER_WRITE != 0 {
            return Err(CacheError::DirWritableByOthers {
                dir,
                mode: meta.mode() & 0o7777,
            });
        }
        Ok(Some(ComponentCache { dir }))
    }

    /// The artifact path for `wasm` under `engine`.
    pub(crate) fn artifact_path(&self, engine: &Engine, wasm: &[u8]) -> PathBuf {
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
    /// Cache trouble (unwritable dir, stale or untrusted file) never fails a
    /// load; only a compile error does.
    pub fn load(&self, engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Component> {
        let path = self.artifact_path(engine, wasm);
        match trusted_artifact(&path) {
            Ok(Some(bytes)) => {
                // SAFETY: the bytes come from a regular file of this
                // gateway's user that nobody else may write, in a directory
                // that is the user's alone (checked in `open`), read through
                // the descriptor that was checked; `store` wrote it from
                // `precompile_component` output under a name that binds it
                // to these exact bytes and this engine configuration.
                match unsafe { Component::deserialize(engine, &bytes) } {
                    Ok(c) => return Ok(c),
                    Err(e) => {
                        tracing::warn!(artifact = %path.display(), "stale component artifact, recompiling: {e}")
                    }
                }
            }
            Ok(None) => {}
            Err(why) => {
                tracing::warn!(artifact = %path.display(), "component artifact not loaded, recompiling: {why}")
            }
        }
        let artifact = engine.precompile_component(wasm)?;
        self.store(&path, &artifact);
        // SAFETY: these bytes came from `precompile_component` on this engine
        // just above.
        unsafe { Component::deserialize(engine, &artifact) }
    }

    fn store(&self, path: &Path, artifact: &[u8]) {
        store(path, artifact);
    }

    /// The directory of compiled functions beside the artifacts (see
    /// [`FunctionCache`]), created 0700.
    pub(crate) fn functions(&self) -> Option<FunctionCache> {
        FunctionCache::open(self.dir.join(FUNCTIONS_DIR))
    }
}

/// Where [`FunctionCache`] keeps its entries, under the cache directory.
const FUNCTIONS_DIR: &str = "functions";

/// Cranelift's incremental cache on disk: one file per compiled function,
/// named by SHA-256 of the key Cranelift computes (the function's code,
/// the target and every codegen flag; the entry itself carries Cranelift's
/// version and is a miss under another). Components built by one toolchain
/// share most of their code: every componentize-py component holds the
/// same CPython and every jco component the same QuickJS, with only data
/// (the handler, its snapshot) differing, so a new handler's compile finds
/// almost every function here and does only the rest. Entries run as
/// native code, so they are read and written exactly as artifacts are
/// (`trusted_artifact`, `store`): the gateway user's files alone, in a
/// directory that is its alone.
#[derive(Debug)]
pub(crate) struct FunctionCache {
    dir: PathBuf,
}

impl FunctionCache {
    fn open(dir: PathBuf) -> Option<FunctionCache> {
        let made = DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&dir)
            .and_then(|()| std::fs::symlink_metadata(&dir));
        match made {
            Ok(meta)
                if meta.is_dir()
                    && meta.uid() == our_uid()
                    && meta.mode() & GROUP_OTHER_WRITE == 0 =>
            {
                Some(FunctionCache { dir })
            }
            Ok(_) => {
                tracing::warn!(dir = %dir.display(), "function cache not used: not a directory of this gateway's user alone");
                None
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "function cache disabled: {e}");
                None
            }
        }
    }

    fn path(&self, key: &[u8]) -> PathBuf {
        let mut sha = Sha256::new();
        sha.update(b"weir-function-cache-v1\0");
        sha.update(key);
        let mut name = String::with_capacity(64);
        for b in sha.finalize() {
            name.push_str(&format!("{b:02x}"));
        }
        self.dir.join(name)
    }
}

impl wasmtime::CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
        match trusted_artifact(&self.path(key)) {
            Ok(entry) => entry.map(std::borrow::Cow::Owned),
            Err(why) => {
                tracing::debug!("compiled function not used: {why}");
                None
            }
        }
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        store(&self.path(key), &value)
    }
}

/// Writes atomically (temp file + rename) so a concurrent start never
/// reads half an artifact. The temporary name is random and created
/// exclusively (`O_EXCL`, never through a link), mode 0600. False (and a
/// warning) when it could not.
fn store(path: &Path, artifact: &[u8]) -> bool {
    let tmp = match temp_path(path) {
        Ok(tmp) => tmp,
        Err(e) => {
            tracing::warn!(artifact = %path.display(), "cannot write component artifact: no randomness for its name: {e}");
            return false;
        }
    };
    let result = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(ARTIFACT_MODE)
        .open(&tmp)
        .and_then(|mut file| file.write_all(artifact))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!(artifact = %path.display(), "cannot write component artifact: {e}");
        return false;
    }
    true
}

/// `.<artifact name>.<16 random hex digits>.tmp` beside `path`.
fn temp_path(path: &Path) -> Result<PathBuf, getrandom::Error> {
    let mut random = [0u8; TEMP_NAME_RANDOM_BYTES];
    getrandom::fill(&mut random)?;
    let mut name = String::from(".");
    name.push_str(&path.file_name().unwrap_or_default().to_string_lossy());
    name.push('.');
    for b in random {
        name.push_str(&format!("{b:02x}"));
    }
    name.push_str(".tmp");
    Ok(path.with_file_name(name))
}

/// The bytes of the artifact at `path` if it may be run: a regular file
/// (not followed through a link) of this gateway's user that group and
/// others cannot write. `Ok(None)` when there is none.
pub(crate) fn trusted_artifact(path: &Path) -> Result<Option<Vec<u8>>, UntrustedArtifact> {
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(UntrustedArtifact::NotARegularFile)
        }
        Err(e) => return Err(UntrustedArtifact::Unreadable(e)),
    };
    let meta = file.metadata().map_err(UntrustedArtifact::Unreadable)?;
    if !meta.is_file() {
        return Err(UntrustedArtifact::NotARegularFile);
    }
    if meta.uid() != our_uid() {
        return Err(UntrustedArtifact::OwnedByOther { owner: meta.uid() });
    }
    if meta.mode() & GROUP_OTHER_WRITE != 0 {
        return Err(UntrustedArtifact::WritableByOthers {
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(Some(read_all(&mut file, meta.len())?))
}

fn read_all(file: &mut File, len: u64) -> Result<Vec<u8>, UntrustedArtifact> {
    let mut bytes = Vec::with_capacity(len as usize);
    file.read_to_end(&mut bytes)
        .map_err(UntrustedArtifact::Unreadable)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The smallest component: its preamble (magic, version 0x0d, layer 1).
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";
    /// A user that is not us (`nobody`); the tests run as root here, and
    /// root may give files away.
    const OTHER_UID: u32 = 65534;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("weir-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o777
    }

    fn engine() -> Engine {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true);
        Engine::new(&config).unwrap()
    }

    #[test]
    fn a_new_directory_is_0700_and_a_world_writable_one_is_refused_by_name() {
        let dir = scratch("modes").join("nested");
        let cache = ComponentCache::open(dir.clone()).unwrap();
        assert!(cache.is_some());
        assert_eq!(mode(&dir), 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = ComponentCache::open(dir.clone()).err().expect("refused");
        assert!(
            matches!(err, CacheError::DirWritableByOthers { .. }),
            "{err}"
        );
        let text = err.to_string();
        assert!(text.contains(&dir.display().to_string()), "{text}");
        assert!(text.contains("777"), "{text}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert!(
            ComponentCache::open(dir.clone()).is_err(),
            "group-writable too"
        );
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    #[test]
    fn a_directory_of_another_user_is_refused_by_name() {
        if our_uid() != 0 {
            return; // only root can give a directory away
        }
        let dir = scratch("owner");
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(OTHER_UID), None).unwrap();
        let err = ComponentCache::open(dir.clone()).err().expect("refused");
        assert!(
            matches!(
                err,
                CacheError::DirOwnedByOther {
                    owner: OTHER_UID,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains(&dir.display().to_string()),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn artifacts_are_0600_under_random_temporary_names() {
        let dir = scratch("store");
        let cache = ComponentCache::open(dir.clone()).unwrap().unwrap();
        let engine = engine();
        let path = cache.artifact_path(&engine, EMPTY_COMPONENT);
        let (a, b) = (temp_path(&path).unwrap(), temp_path(&path).unwrap());
        assert_ne!(a, b, "two writes use two names");
        assert_eq!(a.parent(), Some(dir.as_path()));
        cache.load(&engine, EMPTY_COMPONENT).unwrap();
        assert_eq!(mode(&path), 0o600);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
        assert!(trusted_artifact(&path).unwrap().is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_artifact_not_ours_or_writable_by_others_is_recompiled_not_loaded() {
        let dir = scratch("untrusted");
        let cache = ComponentCache::open(dir.clone()).unwrap().unwrap();
        let engine = engine();
        let path = cache.artifact_path(&engine, EMPTY_COMPONENT);
        cache.load(&engine, EMPTY_COMPONENT).unwrap();
        let ours = std::fs::metadata(&path).unwrap().ino();

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            trusted_artifact(&path),
            Err(UntrustedArtifact::WritableByOthers { .. })
        ));
        cache.load(&engine, EMPTY_COMPONENT).unwrap();
        let replaced = std::fs::metadata(&path).unwrap();
        assert_ne!(replaced.ino(), ours, "compiled and stored again");
        assert_eq!(replaced.mode() & 0o777, 0o600);

        if our_uid() == 0 {
            std::os::unix::fs::chown(&path, Some(OTHER_UID), None).unwrap();
            let planted = std::fs::metadata(&path).unwrap().ino();
            assert!(matches!(
                trusted_artifact(&path),
                Err(UntrustedArtifact::OwnedByOther { owner: OTHER_UID })
            ));
            cache.load(&engine, EMPTY_COMPONENT).unwrap();
            let after = std::fs::metadata(&path).unwrap();
            assert_ne!(after.ino(), planted, "the other user's file was replaced");
            assert_eq!(after.uid(), our_uid());
        }

        // A link to an artifact of ours is not followed.
        std::fs::rename(&path, dir.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere"), &path).unwrap();
        assert!(matches!(
            trusted_artifact(&path),
            Err(UntrustedArtifact::NotARegularFile)
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
