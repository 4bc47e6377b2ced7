//! Changing a running gateway: deploys and rollbacks of one guest route,
//! and reloads of the whole routes file (SIGHUP, `POST /reload`). One
//! change at a time (a lock); a reload compiles every changed component
//! before it changes anything, so a file with one bad route changes
//! nothing.
//!
//! What a reload applies: a guest route's changed component or guest
//! settings (a new version, at each runner's next batch) and any route's
//! changed limits (to connections opened from then on). What it does not
//! (yet): routes added or removed, a route changing kind, and `[server]` /
//! `[admin]` settings; those are reported and need a restart.

use super::Shared;
use crate::config::{Behaviour, Config, ConfigError};
use crate::guest::deploy::NoEarlierVersion;
use crate::guest::{GuestError, Program};
use std::path::Path;
use std::sync::Arc;
use tracing::{info, warn};

/// Why a change was not made; the gateway serves on as before.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error("no route {0}")]
    NoRoute(String),
    #[error("route {0} is not a guest route; only guest routes take components")]
    NotGuest(String),
    #[error(transparent)]
    Guest(#[from] GuestError),
    #[error(transparent)]
    NoEarlierVersion(#[from] NoEarlierVersion),
    #[error("the gateway was started without a routes file: nothing to reload")]
    NoFile,
    #[error("{0}")]
    Config(#[from] ConfigError),
}

impl ChangeError {
    /// The admin API's status for it.
    pub fn status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            ChangeError::NoRoute(_) => S::NOT_FOUND,
            ChangeError::NotGuest(_) | ChangeError::NoEarlierVersion(_) | ChangeError::NoFile => {
                S::CONFLICT
            }
            ChangeError::Guest(_) | ChangeError::Config(_) => S::UNPROCESSABLE_ENTITY,
        }
    }
}

/// What a reload did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    /// Routes that got a new version: (path, version).
    pub deployed: Vec<(String, u64)>,
    /// Routes whose limits changed (for new connections).
    pub limits: Vec<String>,
    /// Changes in the file that were not applied, and why.
    pub not_applied: Vec<String>,
}

/// Deploys, rollbacks and reloads of a running gateway (cheap to clone;
/// `Server::changes`).
#[derive(Clone)]
pub struct Changes {
    pub(super) shared: Arc<Shared>,
}

impl Changes {
    fn guest(&self, path: &str) -> Result<&Arc<crate::guest::GuestRoute>, ChangeError> {
        let route = self
            .shared
            .routes
            .routes
            .iter()
            .find(|r| r.path == path)
            .ok_or_else(|| ChangeError::NoRoute(path.to_string()))?;
        route
            .guest
            .as_ref()
            .ok_or_else(|| ChangeError::NotGuest(path.to_string()))
    }

    /// Deploys `wasm` as route `path`'s next version (its guest settings
    /// unchanged).
    pub fn deploy(&self, path: &str, wasm: &[u8]) -> Result<Arc<Program>, ChangeError> {
        let _one = self.shared.changing.lock().expect("change lock");
        let guest = self.guest(path)?;
        let cfg = guest.program().config().clone();
        let label = format!("the uploaded component ({} bytes)", wasm.len());
        let program = guest.versions().deploy(
            &cfg,
            wasm,
            Path::new(&label),
            format!("upload of {} bytes", wasm.len()),
        )?;
        Ok(program)
    }

    /// Puts route `path`'s previous version back.
    pub fn rollback(&self, path: &str) -> Result<Arc<Program>, ChangeError> {
        let _one = self.shared.changing.lock().expect("change lock");
        Ok(self.guest(path)?.versions().rollback()?)
    }

    /// Re-reads the routes file and applies what changed (see the module
    /// docs); an invalid file or component changes nothing.
    pub fn reload(&self) -> Result<ReloadReport, ChangeError> {
        let _one = self.shared.changing.lock().expect("change lock");
        let file = self.shared.source.as_ref().ok_or(ChangeError::NoFile)?;
        let result = self.reload_from(&Config::load(file).inspect_err(
            |e| warn!(file = %file.display(), "reload refused, nothing changed: {e}"),
        )?);
        match &result {
            Ok(report) => info!(
                file = %file.display(),
                deployed = report.deployed.len(),
                limits = report.limits.len(),
                not_applied = ?report.not_applied,
                "routes file reloaded"
            ),
            Err(e) => warn!(file = %file.display(), "reload refused, nothing changed: {e}"),
        }
        result
    }

    fn reload_from(&self, config: &Config) -> Result<ReloadReport, ChangeError> {
        let mut report = ReloadReport::default();
        let mut prepared = Vec::new();
        let mut errors = Vec::new();
        let mut limits = Vec::new();
        let routes = &self.shared.routes.routes;
        for new in &config.routes {
            let Some(old) = routes.iter().find(|r| r.path == new.path) else {
                report.not_applied.push(format!(
                    "route {} is new: restart the gateway to serve it",
                    new.path
                ));
                continue;
            };
            let kind = crate::routes::behaviour_name(&new.behaviour);
            if kind != old.behaviour {
                report.not_applied.push(format!(
                    "route {} changes from {} to {kind}: restart the gateway to apply it",
                    new.path, old.behaviour
                ));
                continue;
            }
            if *old.limits() != new.limits {
                limits.push((old, new.limits.clone()));
            }
            let (Behaviour::Guest(cfg), Some(guest)) = (&new.behaviour, &old.guest) else {
                continue;
            };
            let current = guest.program();
            let wasm = match std::fs::read(&cfg.wasm) {
                Ok(wasm) => wasm,
                Err(source) => {
                    errors.push(GuestError::Unreadable {
                        route: new.path.clone(),
                        path: cfg.wasm.clone(),
                        source,
                    });
                    continue;
                }
            };
            let same_bytes = crate::guest::program::hex_sha256(&wasm) == current.hash();
            if same_bytes && current.config() == cfg {
                continue;
            }
            match guest.versions().prepare(cfg, &wasm, &cfg.wasm) {
                Ok(program) => prepared.push((guest, program, cfg.wasm.display().to_string())),
                Err(e) => errors.push(e),
            }
        }
        for old in routes {
            if !config.routes.iter().any(|r| r.path == old.path) {
                report.not_applied.push(format!(
                    "route {} was removed: restart the gateway to stop serving it",
                    old.path
                ));
            }
        }
        match errors.len() {
            0 => {}
            1 => return Err(errors.remove(0).into()),
            _ => return Err(GuestError::Many(errors).into()),
        }
        for (guest, program, source) in prepared {
            report
                .deployed
                .push((guest.path.to_string(), program.version()));
            guest.versions().install(program, source);
        }
        for (route, new) in limits {
            report.limits.push(route.path.clone());
            route.set_limits(new);
        }
        Ok(report)
    }
}
