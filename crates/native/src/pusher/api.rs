//! Pusher's HTTP API on the route's `…/apps/{id}/…` paths: triggers
//! (`events`, `batch_events`), channel queries (`channels`,
//! `channels/{name}`, `channels/{name}/users`) and
//! `users/{id}/terminate_connections`. Every request is verified with
//! `weir_pusher::http_api::verify_request` against the app its path names
//! (401 or 400 as that says); bodies come read whole and bounded by the
//! server (`WorkerRoute::http_body_limit`). Answers cover every node: a
//! trigger reaches other nodes' subscribers through the route's topics (a
//! cache channel's through the core, which keeps it in Redis), queries
//! count from the route's [`Census`](super::census::Census) and
//! `terminate_connections` is a user command of the core, which crosses
//! nodes on its control channel. With `[cluster]` a query waits on Redis
//! on the core's runtime; one Redis does not answer is a 503.

use super::{App, PusherRoute};
use http::{Method, StatusCode};
use std::collections::BTreeMap;
use weir_pusher::api::{self, ApiLimits, ChannelCounts, Trigger};
use weir_pusher::http_api::{self, SignedRequest, DEFAULT_TIMESTAMP_WINDOW_SECS};
use weir_pusher::{codes, server, Channel};
use weir_reactor::kind::{HttpAnswer, HttpRequest};
use weir_realtime::{RealtimeError, UserCommand};

/// Refusal bodies are JSON `{"error": ...}`, as the libraries print them.
fn refuse(status: u16, why: impl std::fmt::Display) -> HttpAnswer {
    let body = serde_json::json!({ "error": why.to_string() }).to_string();
    HttpAnswer::json(
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        body,
    )
}

fn ok(body: impl serde::Serialize) -> HttpAnswer {
    HttpAnswer::json(
        StatusCode::OK,
        serde_json::to_vec(&body).expect("API answers serialise"),
    )
}

/// Percent-decodes one path segment (a channel name or user id).
fn decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// What a request asks, from its path after `…/apps/`.
enum Call {
    Events,
    BatchEvents,
    Channels,
    Channel(String),
    Users(String),
    Terminate(String),
}

fn call_of(method: &Method, rest: &[&str]) -> Result<Call, HttpAnswer> {
    let call = match (method, rest) {
        (&Method::POST, ["events"]) => Call::Events,
        (&Method::POST, ["batch_events"]) => Call::BatchEvents,
        (&Method::GET, ["channels"]) => Call::Channels,
        (&Method::GET, ["channels", name]) => Call::Channel(decode(name).unwrap_or_default()),
        (&Method::GET, ["channels", name, "users"]) => {
            Call::Users(decode(name).unwrap_or_default())
        }
        (&Method::POST, ["users", user, "terminate_connections"]) => {
            Call::Terminate(decode(user).unwrap_or_default())
        }
        _ => return Err(refuse(404, "no such HTTP API endpoint")),
    };
    Ok(call)
}

/// The answer when the cluster's store does not answer a query.
fn unavailable() -> HttpAnswer {
    refuse(503, "the cluster's store (Redis) did not answer; try again")
}

/// Answers one HTTP API request.
pub async fn answer(route: &PusherRoute, req: &HttpRequest<'_>) -> HttpAnswer {
    let path = req.uri.path();
    let Some((_, after)) = path.split_once("/apps/") else {
        return refuse(404, "no such HTTP API endpoint");
    };
    let mut segments = after.split('/');
    let id = segments.next().unwrap_or_default();
    let rest: Vec<&str> = segments.collect();
    let Some(app) = route.app_by_id(id) else {
        return refuse(404, "no app has this id");
    };
    let answer = answer_app(route, app, req, &rest).await;
    app.counters.api_answered(answer.status.as_u16());
    answer
}

/// Answers one request naming `app` (`rest`: its path after the app id).
async fn answer_app(
    route: &PusherRoute,
    app: &App,
    req: &HttpRequest<'_>,
    rest: &[&str],
) -> HttpAnswer {
    let path = req.uri.path();
    let call = match call_of(req.method, rest) {
        Ok(call) => call,
        Err(answer) => return answer,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let signed = SignedRequest {
        method: req.method.as_str(),
        path,
        query: req.uri.query().unwrap_or(""),
        body: &req.body,
    };
    if let Err(e) =
        http_api::verify_request(&app.key(), &signed, now, DEFAULT_TIMESTAMP_WINDOW_SECS)
    {
        return refuse(e.status(), e);
    }
    let limits = ApiLimits {
        max_event_data_bytes: app.config.max_payload,
        ..ApiLimits::default()
    };
    match call {
        Call::Events => match api::parse_trigger(&req.body, &limits) {
            Ok(trigger) => {
                let info = trigger.info.clone();
                trigger_one(route, app, &trigger);
                let Some(info) = info else {
                    return ok(serde_json::json!({}));
                };
                let mut channels = BTreeMap::new();
                for c in &trigger.channels {
                    match counts(route, app, c, &info).await {
                        Ok(counts) => channels.insert(c.name().to_string(), counts),
                        Err(_) => return unavailable(),
                    };
                }
                ok(api::ChannelsResponse { channels })
            }
            Err(e) => refuse(e.status(), e),
        },
        Call::BatchEvents => match api::parse_batch(&req.body, &limits) {
            Ok(batch) => {
                for trigger in &batch {
                    trigger_one(route, app, trigger);
                }
                if batch.iter().all(|t| t.info.is_none()) {
                    return ok(serde_json::json!({}));
                }
                let mut answers = Vec::with_capacity(batch.len());
                for t in &batch {
                    let counted = match (&t.info, t.channels.first()) {
                        (Some(info), Some(c)) => counts(route, app, c, info).await,
                        _ => Ok(ChannelCounts::default()),
                    };
                    match counted {
                        Ok(counted) => answers.push(counted),
                        Err(_) => return unavailable(),
                    }
                }
                ok(api::BatchResponse { batch: answers })
            }
            Err(e) => refuse(e.status(), e),
        },
        Call::Channels => channels(route, app, req.uri.query().unwrap_or(""))
            .await
            .unwrap_or_else(|_| unavailable()),
        Call::Channel(name) => {
            let Ok(channel) = Channel::parse(&name) else {
                return refuse(400, "not a channel name");
            };
            let info = param(req.uri.query().unwrap_or(""), "info").unwrap_or_default();
            if info.split(',').any(|a| a.trim() == "user_count") && !channel.is_presence() {
                return refuse(400, "user_count is only for presence channels");
            }
            let Ok((subs, users)) = tally(route, app, &channel).await else {
                return unavailable();
            };
            ok(api::ChannelResponse {
                occupied: subs > 0,
                counts: counts_of(&channel, &info, subs, users.len() as u64),
            })
        }
        Call::Users(name) => {
            let Ok(channel) = Channel::parse(&name) else {
                return refuse(400, "not a channel name");
            };
            if !channel.is_presence() {
                return refuse(400, "users are only listed for presence channels");
            }
            let Ok((_, users)) = tally(route, app, &channel).await else {
                return unavailable();
            };
            ok(api::UsersResponse {
                users: users.into_iter().map(|id| api::UserId { id }).collect(),
            })
        }
        Call::Terminate(user) => {
            let command = UserCommand::Disconnect {
                code: codes::UNAUTHORIZED,
                reason: "terminated by the app".into(),
            };
            let key = route.user_key(app.index, &user);
            let call = route.realtime.clone().user_command(key, None, command);
            match route.ask(call).await {
                Some(Ok(())) => ok(serde_json::json!({})),
                _ => unavailable(),
            }
        }
    }
}

/// Delivers a trigger's event on each of its channels.
fn trigger_one(route: &PusherRoute, app: &App, trigger: &Trigger) {
    let exclude = trigger
        .socket_id
        .as_ref()
        .and_then(|s| route.socket(s.as_str()));
    for channel in &trigger.channels {
        let json = server::event(&trigger.name, channel.name(), &trigger.data, None);
        route.deliver(app, channel, json, exclude);
    }
}

/// A query parameter's value (decoded form-style), if given.
fn param(query: &str, key: &str) -> Option<String> {
    http_api::query_params(query)
        .ok()?
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// (subscriptions, presence users) of `channel`, on every node.
async fn tally(
    route: &PusherRoute,
    app: &App,
    channel: &Channel,
) -> Result<(u64, Vec<String>), RealtimeError> {
    let (census, core) = (route.census.clone(), app.core_name(channel));
    route
        .ask(async move { census.tally(&core).await })
        .await
        .unwrap_or(Err(RealtimeError::Unavailable))
}

/// The counts `info` (comma-separated attributes) asks for.
fn counts_of(channel: &Channel, info: &str, subs: u64, users: u64) -> ChannelCounts {
    let wants = |attr: &str| info.split(',').any(|a| a.trim() == attr);
    ChannelCounts {
        user_count: (wants("user_count") && channel.is_presence()).then_some(users),
        subscription_count: wants("subscription_count").then_some(subs),
    }
}

async fn counts(
    route: &PusherRoute,
    app: &App,
    channel: &Channel,
    info: &str,
) -> Result<ChannelCounts, RealtimeError> {
    let (subs, users) = tally(route, app, channel).await?;
    Ok(counts_of(channel, info, subs, users.len() as u64))
}

/// `GET /channels`: occupied channels, optionally by prefix, with counts.
async fn channels(
    route: &PusherRoute,
    app: &App,
    query: &str,
) -> Result<HttpAnswer, RealtimeError> {
    let prefix = param(query, "filter_by_prefix").unwrap_or_default();
    let info = param(query, "info").unwrap_or_default();
    if info.split(',').any(|a| a.trim() == "user_count") && !prefix.starts_with("presence-") {
        return Ok(refuse(
            400,
            "info=user_count needs filter_by_prefix=presence- (as Pusher's API)",
        ));
    }
    let census = route.census.clone();
    let listed = route
        .ask(async move { census.occupied().await })
        .await
        .unwrap_or(Err(RealtimeError::Unavailable))?;
    let mut out = BTreeMap::new();
    for core in listed {
        let Some(name) = app.pusher_name(&core) else {
            continue;
        };
        if !name.starts_with(&prefix) {
            continue;
        }
        let Ok(channel) = Channel::parse(name) else {
            continue;
        };
        // Listed by a node's lease; counted now (it may have emptied).
        let (subs, users) = tally(route, app, &channel).await?;
        if subs > 0 {
            out.insert(
                name.to_string(),
                counts_of(&channel, &info, subs, users.len() as u64),
            );
        }
    }
    Ok(ok(api::ChannelsResponse { channels: out }))
}
