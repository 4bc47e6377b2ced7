//! What a node does with the fleet's versions: a deploy and a rollback
//! through its admin API (checked here, recorded in Redis, then installed)
//! and the reconcile that takes every desired version it has not taken.

use super::store::{Desired, StoreError};
use super::{short, who, Applied, Fleet, FleetError};
use crate::server::reload::{checked, ChangeError, Changes};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tracing::{info, warn};
use weir_guest_runtime::{GuestRoute, Inherited, Program};

/// What a fleet deploy or rollback answers: the program now serving here,
/// what its live connections' state inherited, and the desired version
/// recorded in Redis.
pub type FleetChanged = (Arc<Program>, Inherited, Desired);

/// What a node does to serve a desired version (see [`Changes`]'s fleet
/// methods): nothing, put back the kept previous program, or install a
/// new one; each already checked against the live connections' state.
enum Ready {
    Serving(Arc<Program>),
    Previous(Arc<Program>, Inherited),
    New(Arc<Program>, Inherited),
}

impl Changes {
    fn fleet(&self) -> Result<&Arc<Fleet>, FleetError> {
        self.shared
            .change
            .fleet
            .get()
            .ok_or(FleetError::NotClustered)
    }

    /// Whether deploys and rollbacks here go to the whole fleet.
    pub fn clustered(&self) -> bool {
        self.shared.change.fleet.get().is_some()
    }

    /// `route`'s program for `desired`, ready to install: the serving one
    /// if it is that component, the previous kept one if it is, else the
    /// component fetched from the fleet (its SHA-256 checked), compiled and
    /// trial-started.
    fn ready(&self, guest: &GuestRoute, desired: &Desired) -> Result<Ready, ChangeError> {
        let current = guest.program();
        if current.hash() == desired.digest {
            return Ok(Ready::Serving(current));
        }
        let versions = guest.versions();
        if let Some(previous) = versions.previous().filter(|p| p.hash() == desired.digest) {
            let inherited = checked(guest, &previous, desired.reset_state)?;
            return Ok(Ready::Previous(previous, inherited));
        }
        let fleet = self.fleet()?;
        let wasm = fleet
            .store
            .get_blob(&desired.route, &desired.digest)
            .map_err(FleetError::from)?;
        let cfg = current.config().clone();
        let label = format!(
            "fleet version {} ({})",
            desired.version,
            short(&desired.digest)
        );
        let program = versions.prepare(&cfg, &wasm, std::path::Path::new(&label))?;
        let inherited = checked(guest, &program, desired.reset_state)?;
        Ok(Ready::New(program, inherited))
    }

    /// Installs what [`Changes::ready`] prepared; the program that serves.
    fn install_ready(
        &self,
        guest: &GuestRoute,
        ready: Ready,
        desired: &Desired,
    ) -> (Arc<Program>, Inherited) {
        let source = format!(
            "fleet version {} ({} by {})",
            desired.version, desired.action, desired.who
        );
        match ready {
            Ready::Serving(program) => (program, Inherited::default()),
            Ready::Previous(program, inherited) => {
                // The kept program is the very component: no compile.
                match guest.versions().rollback() {
                    Ok(program) => {
                        guest.versions().unpin();
                        (program, inherited)
                    }
                    Err(_) => (program, inherited),
                }
            }
            Ready::New(program, inherited) => {
                guest.versions().install(program.clone(), source);
                (program, inherited)
            }
        }
    }

    /// A change of route `path` for the whole fleet, under the change
    /// lock: `change` gets the fleet and the route's guest, and records the
    /// route's new desired version in Redis and installs it here; this node
    /// then notes that it serves that version and renews its report.
    fn change_fleet(
        &self,
        path: &str,
        change: impl FnOnce(&Fleet, &GuestRoute) -> Result<FleetChanged, ChangeError>,
    ) -> Result<FleetChanged, ChangeError> {
        let fleet = self.fleet()?.clone();
        let _one = self.shared.change.changing.lock().expect("change lock");
        let guest = self.guest(path)?;
        let (program, inherited, desired) = change(&fleet, &guest)?;
        fleet.note(
            path,
            Applied {
                serving: Some(desired.version),
                refused: None,
            },
        );
        fleet.publish_report(self);
        Ok((program, inherited, desired))
    }

    /// A deploy to every node: `wasm` is compiled, trial-started and
    /// checked against this node's live state first (a component refused
    /// here is stored nowhere), then stored in Redis, then made the
    /// route's desired version in one step, then installed here; the other
    /// nodes follow on the notification. Redis failing at any step leaves
    /// the previous desired version and this node's program as they were.
    pub fn deploy_to_fleet(
        &self,
        path: &str,
        wasm: &[u8],
        reset_state: bool,
        who: Option<&str>,
    ) -> Result<FleetChanged, ChangeError> {
        self.change_fleet(path, |fleet, guest| {
            let cfg = guest.program().config().clone();
            let label = format!("the uploaded component ({} bytes)", wasm.len());
            let program = guest
                .versions()
                .prepare(&cfg, wasm, std::path::Path::new(&label))?;
            let inherited = checked(guest, &program, reset_state)?;
            let who = self::who(who, &fleet.node);
            let store_it = || -> Result<Desired, StoreError> {
                fleet.store.put_blob(path, program.hash(), wasm)?;
                fleet
                    .store
                    .set_desired(path, program.hash(), wasm.len() as u64, &who, reset_state)
            };
            let desired = store_it().map_err(|e| {
                let e = FleetError::refused(e);
                warn!(route = path, error = %e, "fleet deploy failed");
                e
            })?;
            guest.versions().install(
                program.clone(),
                format!("fleet version {} (deploy by {who})", desired.version),
            );
            info!(route = path, version = desired.version, digest = %desired.digest, %who, "fleet deploy recorded; every node follows");
            Ok((program, inherited, desired))
        })
    }

    /// A rollback of every node to the route's previous fleet deploy:
    /// prepared here first (the kept program, or the component fetched
    /// again), recorded in Redis if nobody changed the route meanwhile,
    /// then installed here.
    pub fn rollback_fleet(
        &self,
        path: &str,
        reset_state: bool,
        who: Option<&str>,
    ) -> Result<FleetChanged, ChangeError> {
        self.change_fleet(path, |fleet, guest| {
            let (from, mut target) = fleet
                .store
                .rollback_target(path)
                .map_err(FleetError::from)?;
            target.reset_state = reset_state;
            let ready = self.ready(guest, &target)?;
            let who = self::who(who, &fleet.node);
            let desired = fleet
                .store
                .set_rollback(&from, &target, &who)
                .map_err(FleetError::refused)?;
            let (program, inherited) = self.install_ready(guest, ready, &desired);
            info!(route = path, from = from.version, to = desired.version, digest = %desired.digest, %who, "fleet rollback recorded; every node follows");
            Ok((program, inherited, desired))
        })
    }

    /// Takes every route's desired version this node has not taken or
    /// refused yet, then renews its report. Err: Redis did not answer
    /// (nothing changed; the next reconcile tries again).
    pub fn reconcile(&self) -> Result<(), FleetError> {
        let fleet = self.fleet()?.clone();
        let _one = self.shared.change.changing.lock().expect("change lock");
        let all = fleet.store.desired_all()?;
        for desired in &all {
            let known = fleet
                .routes
                .lock()
                .expect("fleet lock")
                .get(&desired.route)
                .cloned();
            let known = known.unwrap_or_default();
            if known
                .refused
                .as_ref()
                .is_some_and(|(v, _)| *v == desired.version)
            {
                continue;
            }
            let done = self.guest(&desired.route).and_then(|guest| {
                if known.serving == Some(desired.version)
                    && guest.program().hash() == desired.digest
                {
                    return Ok(None);
                }
                let ready = self.ready(&guest, desired)?;
                Ok(Some(self.install_ready(&guest, ready, desired)))
            });
            match done {
                Ok(None) => {}
                Ok(Some((program, _))) => {
                    info!(route = %desired.route, fleet_version = desired.version, version = program.version(), "fleet: converged on the desired version");
                    fleet.note(
                        &desired.route,
                        Applied {
                            serving: Some(desired.version),
                            refused: None,
                        },
                    );
                }
                // Redis went away mid-way: nothing was installed; try
                // again later rather than call the version refused.
                Err(ChangeError::Fleet(FleetError::Store(e @ StoreError::Unavailable { .. }))) => {
                    return Err(FleetError::Store(e));
                }
                Err(e) => {
                    warn!(route = %desired.route, fleet_version = desired.version, error = %e, "fleet: desired version refused; this node keeps serving its previous one and is reported diverged");
                    fleet.note(
                        &desired.route,
                        Applied {
                            serving: known.serving,
                            refused: Some((desired.version, e.to_string())),
                        },
                    );
                }
            }
        }
        if !fleet.converged.swap(true, Ordering::AcqRel) {
            info!(node = %fleet.node, routes = all.len(), "fleet: converged; ready");
        }
        drop(_one);
        fleet.publish_report(self);
        Ok(())
    }
}
