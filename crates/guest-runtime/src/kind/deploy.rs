//! A guest route's versions: the program serving now, the ones before it
//! (for rollback), and the swap between them. A deploy compiles the new
//! component and starts a trial instance first (`Program::from_bytes`);
//! only a program that passed becomes current, so a broken file leaves the
//! old version serving. Every runner compares its program's version with
//! the serving one before each batch and upgrade hook (one relaxed load of
//! a word that only deploys write) and switches there: a batch in flight
//! finishes on the old program, the next one runs on the new one, and the
//! runner's attachments carry over (`Runner::switch`).

use crate::{GuestError, Program, Runner};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;
use tracing::{info, warn};
use weir_config::GuestConfig;

/// Versions kept besides the serving one, for rollback.
pub(crate) const KEPT_VERSIONS: usize = 3;

/// One version of a route as it was deployed.
#[derive(Clone)]
pub struct Deployment {
    pub program: Arc<Program>,
    /// When it became the serving version (last time, after a rollback).
    pub since: SystemTime,
    /// Where its bytes came from: a file, or an upload through the admin API.
    pub source: String,
}

/// The serving version and the ones kept for rollback.
struct History {
    current: Deployment,
    /// Oldest first, at most [`KEPT_VERSIONS`].
    previous: Vec<Deployment>,
    /// The number the next deploy gets.
    next_version: u64,
}

/// A guest route's versions, shared by all workers.
pub struct Versions {
    /// The serving version's number, compared by runners before each call.
    serving: AtomicU64,
    history: RwLock<History>,
    /// Held while a deploy compiles, so two deploys of one route take turns.
    deploying: Mutex<()>,
    deploys: AtomicU64,
    failed_deploys: AtomicU64,
    /// Set by a rollback, cleared by the next deploy or an unpin: while
    /// set, a reload does not deploy the routes file's component (after
    /// `weir rollback`, that file is usually the very build rolled back
    /// from, and a SIGHUP must not quietly bring it back).
    pinned: AtomicBool,
}

/// Why a rollback did not happen.
#[derive(Debug, thiserror::Error)]
#[error("route {route}: no earlier version to roll back to (versions are kept for the last {KEPT_VERSIONS} deploys)")]
pub struct NoEarlierVersion {
    pub route: String,
}

impl Versions {
    /// Versions of a route that starts with `program`.
    pub fn new(program: Arc<Program>) -> Versions {
        let source = program.config().source();
        Versions {
            serving: AtomicU64::new(program.version()),
            history: RwLock::new(History {
                next_version: program.version() + 1,
                current: Deployment {
                    program,
                    since: SystemTime::now(),
                    source,
                },
                previous: Vec::new(),
            }),
            deploying: Mutex::new(()),
            deploys: AtomicU64::new(0),
            failed_deploys: AtomicU64::new(0),
            pinned: AtomicBool::new(false),
        }
    }

    /// Whether a rollback pinned the serving version against reloads.
    pub fn pinned(&self) -> bool {
        self.pinned.load(Ordering::Relaxed)
    }

    /// Lets reloads deploy the routes file's component again; whether the
    /// route was pinned.
    pub fn unpin(&self) -> bool {
        let was = self.pinned.swap(false, Ordering::Relaxed);
        if was {
            let route = self.history().current.program.route().to_string();
            info!(route = %route, "unpinned: a reload deploys the routes file's component again");
        }
        was
    }

    fn history(&self) -> std::sync::RwLockReadGuard<'_, History> {
        self.history.read().expect("versions lock")
    }

    /// The program serving now.
    pub fn current(&self) -> Arc<Program> {
        self.history().current.program.clone()
    }

    /// The serving deployment and the kept ones (newest first).
    pub fn list(&self) -> (Deployment, Vec<Deployment>) {
        let h = self.history();
        (
            h.current.clone(),
            h.previous.iter().rev().cloned().collect(),
        )
    }

    /// Deploys so far, and deploys refused (broken component).
    pub fn deploy_counts(&self) -> (u64, u64) {
        (
            self.deploys.load(Ordering::Relaxed),
            self.failed_deploys.load(Ordering::Relaxed),
        )
    }

    /// Switches `runner` to the serving program if it runs another one.
    /// Called at a batch boundary (before a call), so a batch never mixes
    /// versions.
    #[inline]
    pub(crate) fn refresh(&self, runner: &mut Runner) {
        if runner.program().version() != self.serving.load(Ordering::Acquire) {
            runner.switch(self.current());
        }
    }

    /// The version a rollback would put back, if any.
    pub fn previous(&self) -> Option<Arc<Program>> {
        self.history().previous.last().map(|d| d.program.clone())
    }

    /// Counts a deploy refused after it compiled (the state it would
    /// inherit, `kind::inherit`).
    pub fn count_refused(&self) {
        self.failed_deploys.fetch_add(1, Ordering::Relaxed);
    }

    /// The first half of a deploy: compiles and tries the next version
    /// without installing it (a reload prepares every route before it
    /// changes any). Counts a failure.
    pub fn prepare(
        &self,
        cfg: &GuestConfig,
        wasm: &[u8],
        path: &Path,
    ) -> Result<Arc<Program>, GuestError> {
        let _turn = self.deploying.lock().expect("deploy lock");
        let (old, version) = {
            let h = self.history();
            (h.current.program.clone(), h.next_version)
        };
        // The route's log (budget, dropped-line counts) goes on unless its
        // settings changed.
        let log = (old.config().log == cfg.log).then(|| old.log().clone());
        let built = Program::from_bytes(&old.engine, old.route(), cfg, wasm, path, log, version);
        if let Err(e) = &built {
            self.failed_deploys.fetch_add(1, Ordering::Relaxed);
            warn!(route = old.route(), version, error = %e, "deploy refused; the serving version stays");
        }
        built
    }

    /// The second half: `program` (from [`Versions::prepare`]) serves from
    /// each runner's next batch on.
    pub fn install(&self, program: Arc<Program>, source: String) {
        let _turn = self.deploying.lock().expect("deploy lock");
        let version = program.version();
        {
            let mut h = self.history.write().expect("versions lock");
            let replaced = std::mem::replace(
                &mut h.current,
                Deployment {
                    program: program.clone(),
                    since: SystemTime::now(),
                    source,
                },
            );
            h.previous.push(replaced);
            if h.previous.len() > KEPT_VERSIONS {
                h.previous.remove(0);
            }
            h.next_version = h.next_version.max(version + 1);
            self.serving.store(version, Ordering::Release);
        }
        self.pinned.store(false, Ordering::Relaxed);
        self.deploys.fetch_add(1, Ordering::Relaxed);
        info!(
            route = program.route(),
            version,
            hash = program.hash(),
            "deployed; open connections switch at their next batch"
        );
    }

    /// Makes the previous kept version serve again (the current one is
    /// dropped from the history).
    pub fn rollback(&self) -> Result<Arc<Program>, NoEarlierVersion> {
        let _turn = self.deploying.lock().expect("deploy lock");
        let mut h = self.history.write().expect("versions lock");
        let Some(mut previous) = h.previous.pop() else {
            return Err(NoEarlierVersion {
                route: h.current.program.route().to_string(),
            });
        };
        previous.since = SystemTime::now();
        let program = previous.program.clone();
        let dropped = std::mem::replace(&mut h.current, previous);
        self.serving.store(program.version(), Ordering::Release);
        self.pinned.store(true, Ordering::Relaxed);
        info!(
            route = program.route(),
            from = dropped.program.version(),
            to = program.version(),
            "rolled back and pinned (reloads keep this version until the next deploy or an unpin); open connections switch at their next batch"
        );
        Ok(program)
    }
}
