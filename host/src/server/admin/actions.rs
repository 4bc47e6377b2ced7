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

/// Whether `query` asks to reset state: `reset_state=true` (or `1`);
/// another value is an error, so a typo does not deploy unchecked.
fn reset_state(query: &str) -> Result<bool, String> {
    let mut reset = false;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, "true"));
        if key != RESET_STATE_PARAM {
            return Err(format!(
                "unknown query parameter `{key}` (this endpoint takes `{RESET_STATE_PARAM}=true`)"
            ));
        }
        reset = match value {
            "true" | "1" => true,
            "false" | "0" => false,
            other => {
                return Err(format!(
                    "`{RESET_STATE_PARAM}={other}`: write `{RESET_STATE_PARAM}=true` or `false`"
                ))
            }
        };
    }
    Ok(reset)
}

/// `PUT /routes/{path}/component`, `POST /routes/{path}/pull` (the body
/// an `oci://` reference the node pulls) and `POST /routes/{path}/rollback`
/// (`?reset_state=true`: see [`RESET_STATE_PARAM`]).
pub(super) async fn route_action(
    method: &Method,
    path: &str,
    query: &str,
    body: Bytes,
    changes: &Changes,
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
    let reset = match reset_state(query) {
        Ok(reset) => reset,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let changes = changes.clone();
    let done: Result<Result<(Arc<Program>, Inherited), ChangeError>, _> = match (method, action) {
        (&Method::PUT, "component") => {
            tokio::task::spawn_blocking(move || changes.deploy(&route, &body, reset)).await
        }
        (&Method::POST, "pull") => {
            let reference = match std::str::from_utf8(&body)
                .map_err(|_| "the body is not UTF-8".to_string())
                .and_then(|text| weir_config::OciRef::parse(text.trim()))
            {
                Ok(reference) => reference,
                Err(why) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("the body must be an oci:// reference: {why}"),
                    )
                }
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
        Ok(Ok((program, inherited))) => json_reply(
            StatusCode::OK,
            json!({
                "route": program.route(),
                "version": program.version(),
                "hash": program.hash(),
                // A pull's pinned reference (null for an upload or rollback).
                "source": (action == "pull").then(|| program.config().source()),
                "pinned": pinned,
                "state": {
                    "checked": inherited.checked,
                    "live": inherited.live,
                    "reset": inherited.reset,
                },
            }),
        ),
        Ok(Err(e)) => error(e.status(), e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
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
