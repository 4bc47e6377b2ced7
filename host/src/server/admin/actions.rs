//! What the API does to routes: deploy (an upload, or a pull from an OCI
//! registry), rollback, pin and unpin, drain and resume (`PUT`/`POST
//! /routes/{path}/…`), and the JSON of `GET /routes` and of a reload's
//! report.

use super::{error, json_reply, percent_decode};
use crate::server::reload::{ChangeError, Changes, ReloadReport};
use crate::server::Shared;
use bytes::Bytes;
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use tracing::info;
use weir_guest_runtime::{Inherited, Program};
use weir_reactor::rate::{drain_window, Pace};

/// The query parameter that lets a deploy or rollback reset the state of
/// connections the new version cannot read (`weir deploy --reset-state`).
pub const RESET_STATE_PARAM: &str = "reset_state";

/// The query parameter that makes a deploy or rollback fail (409) unless it
/// reaches the whole fleet (`weir deploy --cluster`): a gateway without
/// `[cluster] redis` would otherwise change itself alone, unnoticed.
pub const CLUSTER_PARAM: &str = "cluster";

/// What a deploy's or rollback's query asks.
#[derive(Debug, Default, PartialEq, Eq)]
struct Params {
    reset_state: bool,
    cluster: bool,
}

/// `reset_state=true` (or `1`) and `cluster=true`; another key or value is
/// an error, so a typo does not deploy unchecked.
fn params(query: &str) -> Result<Params, String> {
    let mut params = Params::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, "true"));
        let flag = match key {
            RESET_STATE_PARAM => &mut params.reset_state,
            CLUSTER_PARAM => &mut params.cluster,
            _ => {
                return Err(format!(
                    "unknown query parameter `{key}` (this endpoint takes `{RESET_STATE_PARAM}=true` and `{CLUSTER_PARAM}=true`)"
                ))
            }
        };
        *flag = match value {
            "true" | "1" => true,
            "false" | "0" => false,
            other => return Err(format!("`{key}={other}`: write `{key}=true` or `false`")),
        };
    }
    Ok(params)
}

/// `PUT /routes/{path}/component`, `POST /routes/{path}/pull` (the body
/// an `oci://` reference the node pulls) and `POST /routes/{path}/rollback`
/// (`?reset_state=true`: see [`RESET_STATE_PARAM`]; `?cluster=true`: see
/// [`CLUSTER_PARAM`]). With `[cluster] redis` all three go to the whole
/// fleet (`server/fleet.rs`; a pull stores the bytes the node pulled),
/// recorded as made by `who` (`X-Weir-Who`).
pub(super) async fn route_action(
    method: &Method,
    path: &str,
    query: &str,
    body: Bytes,
    changes: &Changes,
    who: Option<String>,
) -> Response<Full<Bytes>> {
    let not_found = || {
        error(StatusCode::NOT_FOUND, "no such admin endpoint; see GET /routes, PUT /routes/{path}/component, POST /routes/{path}/pull|rollback|unpin|drain|resume, POST /reload, GET /metrics, GET /api/overview")
    };
    let Some(rest) = path.strip_prefix("/routes/") else {
        return not_found();
    };
    let (encoded, action) = match rest.rsplit_once('/') {
        Some(split) => split,
        None => return not_found(),
    };
    let Some(route) = percent_decode(encoded) else {
        return error(
            StatusCode::BAD_REQUEST,
            "the route path is not valid percent-encoded UTF-8",
        );
    };
    if let (&Method::POST, "drain" | "resume") = (method, action) {
        return drain(&route, action == "drain", changes);
    }
    if let (&Method::POST, "unpin") = (method, action) {
        let changes = changes.clone();
        return match tokio::task::spawn_blocking(move || changes.unpin(&route)).await {
            Ok(Ok(was)) => json_reply(StatusCode::OK, json!({ "unpinned": was })),
            Ok(Err(e)) => error(e.status(), e),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        };
    }
    let Params {
        reset_state: reset,
        cluster,
    } = match params(query) {
        Ok(params) => params,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let changes = changes.clone();
    if changes.clustered() {
        let done = match (method, action) {
            (&Method::PUT, "component") => {
                tokio::task::spawn_blocking(move || {
                    changes
                        .deploy_to_fleet(&route, &body, reset, who.as_deref())
                        .map(|done| (done, None))
                })
                .await
            }
            (&Method::POST, "pull") => {
                let reference = match oci_reference(&body) {
                    Ok(reference) => reference,
                    Err(why) => return error(StatusCode::BAD_REQUEST, why),
                };
                tokio::task::spawn_blocking(move || {
                    let (pinned, wasm) = changes.pull(&route, &reference)?;
                    changes
                        .deploy_to_fleet(&route, &wasm, reset, who.as_deref())
                        .map(|done| (done, Some(pinned)))
                })
                .await
            }
            (&Method::POST, "rollback") => {
                tokio::task::spawn_blocking(move || {
                    changes
                        .rollback_fleet(&route, reset, who.as_deref())
                        .map(|done| (done, None))
                })
                .await
            }
            _ => return not_found(),
        };
        return match done {
            Ok(Ok(((program, inherited, desired), source))) => {
                let mut answer = change_json(&program, &inherited, false);
                answer["fleet"] = json!(desired);
                // A pull's pinned reference (null for an upload or rollback).
                answer["source"] = json!(source);
                json_reply(StatusCode::OK, answer)
            }
            Ok(Err(e)) => error(e.status(), e),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        };
    }
    if cluster {
        let e = ChangeError::from(crate::server::fleet::FleetError::NotClustered);
        return error(e.status(), e);
    }
    let done: Result<Result<(Arc<Program>, Inherited), ChangeError>, _> = match (method, action) {
        (&Method::PUT, "component") => {
            tokio::task::spawn_blocking(move || changes.deploy(&route, &body, reset)).await
        }
        (&Method::POST, "pull") => {
            let reference = match oci_reference(&body) {
                Ok(reference) => reference,
                Err(why) => return error(StatusCode::BAD_REQUEST, why),
            };
            tokio::task::spawn_blocking(move || {
                changes.deploy_from_registry(&route, &reference, reset)
            })
            .await
        }
        (&Method::POST, "rollback") => {
            tokio::task::spawn_blocking(move || changes.rollback(&route, reset)).await
        }
        _ => return not_found(),
    };
    let pinned = action == "rollback";
    match done {
        Ok(Ok((program, inherited))) => {
            let mut answer = change_json(&program, &inherited, pinned);
            // A pull's pinned reference (null for an upload or rollback).
            answer["source"] = json!((action == "pull").then(|| program.config().source()));
            json_reply(StatusCode::OK, answer)
        }
        Ok(Err(e)) => error(e.status(), e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// A pull's body: an `oci://` reference, or why not (a 400).
fn oci_reference(body: &[u8]) -> Result<weir_config::OciRef, String> {
    std::str::from_utf8(body)
        .map_err(|_| "the body is not UTF-8".to_string())
        .and_then(|text| weir_config::OciRef::parse(text.trim()))
        .map_err(|why| format!("the body must be an oci:// reference: {why}"))
}

/// The answer to a deploy or rollback: the version that serves here.
fn change_json(program: &Program, inherited: &Inherited, pinned: bool) -> serde_json::Value {
    json!({
        "route": program.route(),
        "version": program.version(),
        "hash": program.hash(),
        "pinned": pinned,
        "state": {
            "checked": inherited.checked,
            "live": inherited.live,
            "reset": inherited.reset,
        },
    })
}

/// Reason of the 1001 a drained route's connections get.
pub const DRAINED_REASON: &str = "route drained";
/// When a drain closes the route's connections again, after the paced
/// closes: upgrades that passed the draining check just before the flag
/// was set register their connections right after their 101.
const DRAIN_SWEEPS: [Duration; 2] = [Duration::from_millis(100), Duration::from_secs(1)];

/// `POST /routes/{path}/drain`: upgrades to the route are refused (503,
/// `Retry-After` jittered) and its open connections closed with 1001 in
/// slices over the drain window (see [`drain_route_paced`]); `/resume`
/// takes upgrades again and stops the closes not yet made.
fn drain(route: &str, draining: bool, changes: &Changes) -> Response<Full<Bytes>> {
    let shared = &changes.shared;
    let table = shared.routes.load();
    let Some((index, r)) = table.live_route(route) else {
        return error(StatusCode::NOT_FOUND, format!("no route {route}"));
    };
    r.set_draining(draining);
    let open = r.stats.sum();
    let closing = open.accepted.saturating_sub(open.closed);
    if draining {
        let window = drain_window(shared.drain.drain_timeout);
        tokio::spawn(drain_route_paced(shared.clone(), index, window));
        info!(route, connections = closing, ?window, "route drained");
    } else {
        info!(route, "route resumed");
    }
    json_reply(
        StatusCode::OK,
        json!({ "route": route, "draining": draining, "closing": if draining { closing } else { 0 } }),
    )
}

/// Closes route `index`'s open connections with 1001 a slice at a time
/// over `window` ([`Pace`]), so their clients do not all come back at once;
/// stops if the route is resumed. Then sweeps for connections that raced
/// the flag.
async fn drain_route_paced(shared: Arc<Shared>, index: usize, window: Duration) {
    let still_drained = |shared: &Shared| {
        let table = shared.routes.load();
        table.routes.get(index).is_some_and(|r| r.draining())
    };
    let registry = &shared.registry;
    let ids: Vec<_> = (0..registry.workers())
        .flat_map(|w| registry.ids_on(w, Some(index)))
        .collect();
    let mut pace = Pace::new(ids.len(), window);
    let (mut next, mut closed) = (tokio::time::Instant::now(), 0);
    while !pace.done() {
        if !still_drained(&shared) {
            return;
        }
        let n = pace.next_slice();
        registry.close_ids(
            &ids[closed..closed + n],
            index,
            weir_ws::close::GOING_AWAY,
            DRAINED_REASON,
        );
        closed += n;
        next += Pace::SLICE;
        tokio::time::sleep_until(next).await;
    }
    for wait in DRAIN_SWEEPS {
        tokio::time::sleep(wait).await;
        if still_drained(&shared) {
            registry.close_route(index, weir_ws::close::GOING_AWAY, DRAINED_REASON);
        }
    }
}

/// `GET /routes`: every route, with its guest versions.
pub(super) fn routes(shared: &Shared) -> serde_json::Value {
    let secs = |t: std::time::SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let table = shared.routes.load();
    let list: Vec<_> = table
        .live_routes()
        .map(|(_, r)| {
            let c = r.stats.sum();
            let mut entry = json!({
                "path": r.path,
                "behaviour": r.behaviour,
                "connections": c.accepted.saturating_sub(c.closed),
            });
            if let Some(guest) = &r.guest {
                let (current, kept) = guest.versions().list();
                let p = &current.program;
                entry["version"] = json!(p.version());
                entry["hash"] = json!(p.hash());
                entry["deployed_at"] = json!(secs(current.since));
                entry["source"] = json!(current.source);
                entry["pinned"] = json!(guest.versions().pinned());
                entry["kept_versions"] = json!(kept
                    .iter()
                    .map(|d| json!({ "version": d.program.version(), "hash": d.program.hash() }))
                    .collect::<Vec<_>>());
            }
            entry
        })
        .collect();
    json!({ "routes": list })
}

pub(super) fn report_json(report: &ReloadReport) -> serde_json::Value {
    json!({
        "added": report.added,
        "removed": report.removed,
        "deployed": report.deployed.iter().map(|(route, version)| json!({ "route": route, "version": version })).collect::<Vec<_>>(),
        "limits_changed": report.limits,
        "not_applied": report.not_applied,
        "certificate": report.certificate,
    })
}

#[cfg(test)]
mod tests {
    use super::{params, Params};

    #[test]
    fn a_deploys_query_takes_reset_state_and_cluster_and_nothing_else() {
        assert_eq!(params(""), Ok(Params::default()));
        assert_eq!(
            params("reset_state=true&cluster=1"),
            Ok(Params {
                reset_state: true,
                cluster: true
            })
        );
        assert_eq!(
            params("cluster"),
            Ok(Params {
                reset_state: false,
                cluster: true
            })
        );
        assert!(params("cluster=yes").unwrap_err().contains("cluster=true"));
        assert!(params("clutser=true").unwrap_err().contains("unknown"));
    }
}
