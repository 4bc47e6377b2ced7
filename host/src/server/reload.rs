//! Changing a running gateway: deploys and rollbacks of one guest route,
//! and reloads of the whole routes file (SIGHUP, `POST /reload`). One
//! change at a time (a lock); a reload compiles every changed or new
//! component before it changes anything, so a file with one bad route
//! changes nothing.
//!
//! What a reload applies: routes added are served (at once, on every
//! worker); routes removed leave the router and their connections get a
//! 1001 close after the replies already due (a guest route's once each
//! worker has run the batches it holds); a route whose kind
//! changed is removed and added again; a guest route's changed component
//! or guest settings become a new version (at each runner's next batch);
//! any route's changed limits apply to connections opened from then on.
//! A reload also reads the TLS certificate and key again (the same
//! files; an invalid pair keeps the old one). Other `[server]` and
//! `[admin]` changes need a restart.

use super::Shared;
use crate::routes::RouteError;
use std::path::Path;
use std::sync::Arc;
use tracing::{info, warn};
use weir_config::{Behaviour, Config, ConfigError};
use weir_guest_runtime::NoEarlierVersion;
use weir_guest_runtime::{GuestError, GuestRoute, Inherited, Program};
use weir_reactor::registry::ROUTE_REMOVED;
use weir_ws::close::GOING_AWAY;

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
    #[error(transparent)]
    Serve(#[from] super::ServeError),
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(transparent)]
    Fleet(#[from] super::fleet::FleetError),
    #[error(transparent)]
    Oci(#[from] crate::oci::OciError),
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
            ChangeError::Guest(_)
            | ChangeError::Config(_)
            | ChangeError::Serve(_)
            | ChangeError::Route(_) => S::UNPROCESSABLE_ENTITY,
            ChangeError::Fleet(e) => e.status(),
            ChangeError::Oci(e) => e.status(),
        }
    }
}

/// What a reload did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    /// Routes served from now on.
    pub added: Vec<String>,
    /// Routes no longer served (their connections were closed with 1001).
    pub removed: Vec<String>,
    /// Routes that got a new version: (path, version).
    pub deployed: Vec<(String, u64)>,
    /// Routes whose limits changed (for new connections).
    pub limits: Vec<String>,
    /// Changes in the file that were not applied, and why.
    pub not_applied: Vec<String>,
    /// The TLS certificate file read again and served from now on (None
    /// without TLS, or when the new one was refused: see `not_applied`).
    pub certificate: Option<String>,
}

/// `guest.check_inherited`, counting a refusal as a failed deploy.
pub(super) fn checked(
    guest: &GuestRoute,
    program: &Program,
    reset_state: bool,
) -> Result<Inherited, GuestError> {
    guest
        .check_inherited(program, reset_state)
        .inspect_err(|e| {
            guest.versions().count_refused();
            warn!(route = program.route(), version = program.version(), error = %e, "change refused; the serving version stays");
        })
}

/// Deploys, rollbacks and reloads of a running gateway (cheap to clone;
/// `Server::changes`).
#[derive(Clone)]
pub struct Changes {
    pub(super) shared: Arc<Shared>,
}

impl Changes {
    pub(super) fn guest(
        &self,
        path: &str,
    ) -> Result<Arc<weir_guest_runtime::GuestRoute>, ChangeError> {
        let table = self.shared.routes.load();
        let (_, route) = table
            .live_route(path)
            .ok_or_else(|| ChangeError::NoRoute(path.to_string()))?;
        route
            .guest
            .clone()
            .ok_or_else(|| ChangeError::NotGuest(path.to_string()))
    }

    /// Deploys `wasm` as route `path`'s next version (its guest settings
    /// unchanged) once it compiled, started and read the state of every
    /// live connection of the route (`guest/kind/inherit.rs`); with
    /// `reset_state`, connections whose state it cannot read start from
    /// their state's Default instead of refusing the deploy.
    pub fn deploy(
        &self,
        path: &str,
        wasm: &[u8],
        reset_state: bool,
    ) -> Result<(Arc<Program>, Inherited), ChangeError> {
        let _one = self.shared.change.changing.lock().expect("change lock");
        let guest = self.guest(path)?;
        let cfg = guest.program().config().clone();
        let label = format!("the uploaded component ({} bytes)", wasm.len());
        let program = guest.versions().prepare(&cfg, wasm, Path::new(&label))?;
        let inherited = checked(&guest, &program, reset_state)?;
        guest
            .versions()
            .install(program.clone(), format!("upload of {} bytes", wasm.len()));
        Ok((program, inherited))
    }

    /// Deploys the component `reference` names to route `path`: pulled
    /// into the OCI cache (or found there by digest), then compiled, tried
    /// and installed as [`Changes::deploy`] does; the route keeps the
    /// pinned reference as its source.
    pub fn deploy_from_registry(
        &self,
        path: &str,
        reference: &weir_config::OciRef,
        reset_state: bool,
    ) -> Result<(Arc<Program>, Inherited), ChangeError> {
        let _one = self.shared.change.changing.lock().expect("change lock");
        let guest = self.guest(path)?;
        let (pulled, wasm) = self.pulled(path, reference)?;
        let mut cfg = guest.program().config().clone();
        cfg.wasm = pulled.file.clone();
        cfg.oci = Some(Box::new(pulled.reference.clone()));
        let program = guest.versions().prepare(&cfg, &wasm, &pulled.file)?;
        let inherited = checked(&guest, &program, reset_state)?;
        guest
            .versions()
            .install(program.clone(), pulled.reference.to_string());
        Ok((program, inherited))
    }

    /// The component `reference` names, for route `path`: the reference
    /// pinned to its digest, and its bytes (a fleet deploy from a registry
    /// stores them, `deploy_to_fleet`).
    pub fn pull(
        &self,
        path: &str,
        reference: &weir_config::OciRef,
    ) -> Result<(String, Vec<u8>), ChangeError> {
        self.guest(path)?;
        let (pulled, wasm) = self.pulled(path, reference)?;
        Ok((pulled.reference.to_string(), wasm))
    }

    /// Pulls `reference` through the node's cache: where it is and its bytes.
    fn pulled(
        &self,
        path: &str,
        reference: &weir_config::OciRef,
    ) -> Result<(crate::oci::Pulled, Vec<u8>), ChangeError> {
        let cache = self.shared.change.oci_cache.clone();
        let wanted = reference.clone();
        let pulled = crate::oci::block_on(async move { crate::oci::pull(&wanted, &cache).await })??;
        let wasm = std::fs::read(&pulled.file).map_err(|source| GuestError::Unreadable {
            route: path.to_string(),
            path: pulled.file.clone(),
            source,
        })?;
        Ok((pulled, wasm))
    }

    /// Puts route `path`'s previous version back, once it read the state
    /// of every live connection (which the newer version may have written
    /// in a shape it does not know), as a deploy does; pinned against
    /// reloads until the next deploy or [`Changes::unpin`].
    pub fn rollback(
        &self,
        path: &str,
        reset_state: bool,
    ) -> Result<(Arc<Program>, Inherited), ChangeError> {
        let _one = self.shared.change.changing.lock().expect("change lock");
        let guest = self.guest(path)?;
        let inherited = match guest.versions().previous() {
            Some(previous) => checked(&guest, &previous, reset_state)?,
            None => Inherited::default(),
        };
        Ok((guest.versions().rollback()?, inherited))
    }

    /// Lets reloads deploy route `path`'s component from the routes file
    /// again; whether it was pinned.
    pub fn unpin(&self, path: &str) -> Result<bool, ChangeError> {
        let _one = self.shared.change.changing.lock().expect("change lock");
        Ok(self.guest(path)?.versions().unpin())
    }

    /// Re-reads the routes file and applies what changed (see the module
    /// docs); an invalid file or component changes nothing.
    pub fn reload(&self) -> Result<ReloadReport, ChangeError> {
        let _one = self.shared.change.changing.lock().expect("change lock");
        // The certificate first, on its own: a renewed certificate must
        // not wait for a routes file that does not parse.
        let certificate = reload_certificate(self.shared.front.tls.as_ref(), "TLS");
        let admin_tls = self.shared.change.admin_tls.as_ref();
        let admin_certificate = reload_certificate(admin_tls, "admin TLS");
        let file = self
            .shared
            .change
            .source
            .as_ref()
            .ok_or(ChangeError::NoFile)?;
        let mut config = Config::load(file).inspect_err(
            |e| warn!(file = %file.display(), "reload refused, nothing changed: {e}"),
        )?;
        // A tag is resolved again: a reload serves what it names now.
        crate::oci::resolve_guests(&mut config).inspect_err(
            |e| warn!(file = %file.display(), "reload refused, nothing changed: {e}"),
        )?;
        let result = self.reload_from(&config).map(|mut report| {
            match certificate {
                Some(Ok(path)) => report.certificate = Some(path),
                Some(Err(why)) => report.not_applied.push(why),
                None => {}
            }
            if let Some(Err(why)) = admin_certificate {
                report.not_applied.push(why);
            }
            report
        });
        match &result {
            Ok(report) => info!(
                file = %file.display(),
                added = ?report.added,
                removed = ?report.removed,
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
        let old = self.shared.routes.load_full();
        let mut next = old.next();
        let mut prepared = Vec::new();
        let mut errors = Vec::new();
        let mut limits = Vec::new();
        for new in &config.routes {
            let kept = old
                .live_route(&new.path)
                .filter(|(_, r)| r.behaviour == crate::routes::behaviour_name(&new.behaviour));
            let Some((index, route)) = kept else {
                // New, or of another kind than before: a route of its own.
                match next.add(new, &self.shared.registry) {
                    Ok(index) => {
                        next.serve(&new.path, index, new.line)?;
                        report.added.push(new.path.clone());
                    }
                    Err(RouteError::Guest(e)) => errors.push(e),
                    Err(e) => errors.push(GuestError::Limits {
                        route: new.path.clone(),
                        detail: e.to_string(),
                    }),
                }
                continue;
            };
            next.serve(&new.path, index, new.line)?;
            if let Err(detail) = route.kind.reload(&new.behaviour) {
                errors.push(GuestError::Limits {
                    route: new.path.clone(),
                    detail,
                });
                continue;
            }
            if *route.limits() != new.limits {
                limits.push((route.clone(), new.limits.clone()));
            }
            // A guest route's component, or a proxy route's filter.
            let cfg = match &new.behaviour {
                Behaviour::Guest(cfg) => Some(cfg),
                Behaviour::Native(weir_config::NativeKind::Proxy(p)) => p.filter.as_ref(),
                Behaviour::Native(_) => None,
            };
            let (Some(cfg), Some(guest)) = (cfg, &route.guest) else {
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
            let same_bytes = weir_guest_runtime::hex_sha256(&wasm) == current.hash();
            if same_bytes && current.config() == cfg {
                continue;
            }
            if self
                .shared
                .change
                .fleet
                .get()
                .is_some_and(|f| f.governs(&new.path))
            {
                let why = format!(
                    "{}: its component is the fleet's (version {} serves); {} was not deployed; \
                     deploy it to the fleet (`weir deploy --cluster {} {}`)",
                    new.path,
                    current.version(),
                    cfg.wasm.display(),
                    new.path,
                    cfg.wasm.display()
                );
                warn!(route = %new.path, "reload: {why}");
                report.not_applied.push(why);
                continue;
            }
            if guest.versions().pinned() {
                let why = format!(
                    "{}: pinned to version {} by a rollback, so {} was not deployed; \
                     deploy it, or unpin the route (`weir unpin {}`) and reload",
                    new.path,
                    current.version(),
                    cfg.source(),
                    new.path
                );
                warn!(route = %new.path, "reload: {why}");
                report.not_applied.push(why);
                continue;
            }
            // A reload never resets state: a version that cannot read it
            // is refused (deploy it with --reset-state instead).
            let ready = guest
                .versions()
                .prepare(cfg, &wasm, &cfg.wasm)
                .and_then(|program| checked(guest, &program, false).map(|_| program));
            match ready {
                Ok(program) => prepared.push((guest.clone(), program, cfg.source())),
                Err(e) => errors.push(e),
            }
        }
        let removed: Vec<usize> = old
            .live
            .iter()
            .copied()
            .filter(|i| !next.live.contains(i))
            .collect();
        match errors.len() {
            0 => {}
            1 => return Err(errors.remove(0).into()),
            _ => return Err(GuestError::Many(errors).into()),
        }
        for (guest, program, source) in prepared {
            report
                .deployed
                .push((guest.path().to_string(), program.version()));
            guest.versions().install(program, source);
        }
        for (route, new) in limits {
            report.limits.push(route.path.clone());
            route.set_limits(new);
        }
        self.shared.routes.store(Arc::new(next));
        for index in removed {
            let route = &old.routes[index];
            match &route.guest {
                // Each worker closes them once their pending batches ran,
                // so replies already due go first.
                Some(guest) => guest.retire(),
                None => self
                    .shared
                    .registry
                    .close_route(index, GOING_AWAY, ROUTE_REMOVED),
            }
            info!(route = %route.path, "route removed; its connections are closed with 1001");
            report.removed.push(route.path.clone());
        }
        Ok(report)
    }
}

/// Reads a listener's certificate files again (`what`: "TLS" for
/// `[server] tls`, "admin TLS" for `[admin] tls`); a valid pair serves new
/// handshakes from now on (open connections keep their sessions), an
/// invalid one keeps the old certificate. None without TLS; Ok: the
/// certificate file; Err: the line the reload report's `not_applied` gets.
fn reload_certificate(
    tls: Option<&weir_config::tls::Tls>,
    what: &str,
) -> Option<Result<String, String>> {
    let tls = tls?;
    let path = tls.cert_path().display().to_string();
    Some(match tls.reload() {
        Ok(()) => {
            info!(cert = %path, "{what} certificate reloaded");
            Ok(path)
        }
        Err(e) => {
            warn!("{what} certificate not reloaded, the old one serves on: {e}");
            Err(format!("{what} certificate (the old one serves on): {e}"))
        }
    })
}
