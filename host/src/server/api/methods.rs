//! The server API's methods: each one's parameters (Centrifugo's names,
//! absent fields at their defaults), what it asks of the real-time core,
//! and the answer's JSON.

use super::*;

#[derive(Deserialize)]
struct PublishParams {
    #[serde(default)]
    channel: String,
    #[serde(default)]
    channels: Vec<String>,
    data: Option<Value>,
    b64data: Option<String>,
    idempotency_key: Option<String>,
}

#[derive(Deserialize)]
struct PatternParams {
    #[serde(default)]
    pattern: String,
}

#[derive(Deserialize)]
struct ChannelParams {
    #[serde(default)]
    channel: String,
}

#[derive(Deserialize)]
struct HistoryParams {
    #[serde(default)]
    channel: String,
    #[serde(default)]
    limit: i64,
    since: Option<Position>,
    #[serde(default)]
    reverse: bool,
}

#[derive(Deserialize)]
struct Position {
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    epoch: String,
}

#[derive(Deserialize)]
struct DisconnectParams {
    #[serde(default)]
    user: String,
    client: Option<String>,
    disconnect: Option<DisconnectCode>,
}

/// `subscribe` and `unsubscribe` of a user (Centrifugo's `info`,
/// `recover_since`, `override` and `session` are not supported, and
/// ignored).
#[derive(Deserialize)]
struct UserChannelParams {
    #[serde(default)]
    user: String,
    #[serde(default)]
    channel: String,
    client: Option<String>,
}

#[derive(Deserialize)]
struct DisconnectCode {
    code: u16,
    #[serde(default)]
    reason: String,
}

pub(super) fn params<T: for<'de> Deserialize<'de>>(v: Value) -> Result<T, p::ErrorReply> {
    serde_json::from_value(v).map_err(|_| p::BAD_REQUEST)
}

pub(super) async fn call(api: &Api, method: &str, v: Value) -> Result<Value, p::ErrorReply> {
    let rt = &api.realtime;
    match method {
        "publish" => {
            let req: PublishParams = params(v)?;
            let at = publish(rt, &req.channel, &req).await?;
            Ok(serde_json::json!({ "offset": at.offset, "epoch": at.epoch }))
        }
        "broadcast" => {
            let req: PublishParams = params(v)?;
            if req.channels.is_empty() {
                return Err(p::BAD_REQUEST);
            }
            let mut responses = Vec::with_capacity(req.channels.len());
            for ch in &req.channels {
                responses.push(match publish(rt, ch, &req).await {
                    Ok(at) => {
                        serde_json::json!({"result": {"offset": at.offset, "epoch": at.epoch}})
                    }
                    Err(e) => serde_json::json!({"error": {"code": e.code, "message": e.message}}),
                });
            }
            Ok(serde_json::json!({ "responses": responses }))
        }
        "presence" => {
            let req: ChannelParams = params(v)?;
            let members = rt.clone().presence(req.channel).await.map_err(error)?;
            let mut out = serde_json::Map::new();
            for m in members {
                let mut info = Vec::new();
                p::write_client_info(&mut info, &m);
                let info: Value = serde_json::from_slice(&info).map_err(|_| p::INTERNAL)?;
                out.insert(m.client.clone(), info);
            }
            Ok(serde_json::json!({ "presence": out }))
        }
        "presence_stats" => {
            let req: ChannelParams = params(v)?;
            let s = rt
                .clone()
                .presence_stats(req.channel)
                .await
                .map_err(error)?;
            Ok(serde_json::json!({ "num_clients": s.num_clients, "num_users": s.num_users }))
        }
        "history" => {
            let req: HistoryParams = params(v)?;
            let limit = match req.limit {
                n if n < 0 => weir_realtime::HISTORY_MAX_PUBLICATION_LIMIT,
                n => (n as usize).min(weir_realtime::HISTORY_MAX_PUBLICATION_LIMIT),
            };
            let query = HistoryQuery {
                limit: Some(limit),
                since: req.since.map(|s| StreamPosition {
                    offset: s.offset,
                    epoch: s.epoch,
                }),
                reverse: req.reverse,
            };
            let (pubs, top) = rt
                .clone()
                .history(req.channel, query)
                .await
                .map_err(error)?;
            let mut out = Vec::new();
            out.push(b'{');
            p::write_publications(&mut out, &pubs);
            out.push(b',');
            p::write_position(&mut out, &top);
            out.push(b'}');
            serde_json::from_slice(&out).map_err(|_| p::INTERNAL)
        }
        "history_remove" => {
            let req: ChannelParams = params(v)?;
            rt.clone()
                .history_remove(req.channel)
                .await
                .map_err(error)?;
            Ok(serde_json::json!({}))
        }
        "channels" => {
            let req: PatternParams = params(v)?;
            let channels: serde_json::Map<String, Value> = rt
                .channels()
                .into_iter()
                .filter(|(name, _)| req.pattern.is_empty() || glob(&req.pattern, name))
                .map(|(name, n)| (name, serde_json::json!({ "num_clients": n })))
                .collect();
            Ok(serde_json::json!({ "channels": channels }))
        }
        "info" => {
            let (clients, users) = rt.clients.counts();
            let (channels, _) = rt.counts();
            Ok(serde_json::json!({ "nodes": [{
                "uid": "weir",
                "name": "weir",
                "version": weir_native::centrifugo::SERVER_VERSION,
                "num_clients": clients,
                "num_users": users,
                "num_channels": channels,
                "uptime": api.started.elapsed().as_secs(),
            }]}))
        }
        "disconnect" => {
            let req: DisconnectParams = params(v)?;
            if req.user.is_empty() {
                return Err(p::BAD_REQUEST);
            }
            let (code, reason) = match &req.disconnect {
                Some(d) if (3000..5000).contains(&d.code) => (d.code, d.reason.as_str()),
                Some(_) => return Err(p::BAD_REQUEST),
                None => (p::DISCONNECT_FORCE.code, p::DISCONNECT_FORCE.reason),
            };
            let command = UserCommand::Disconnect {
                code,
                reason: reason.to_string(),
            };
            rt.clone()
                .user_command(req.user, req.client, command)
                .await
                .map_err(error)?;
            Ok(serde_json::json!({}))
        }
        "subscribe" | "unsubscribe" => {
            let req: UserChannelParams = params(v)?;
            if req.user.is_empty() {
                return Err(p::BAD_REQUEST);
            }
            // The channel's namespace must exist, as for a client's subscribe.
            rt.options(&req.channel).map_err(error)?;
            let command = match method {
                "subscribe" => UserCommand::Subscribe {
                    channel: req.channel,
                },
                _ => UserCommand::Unsubscribe {
                    channel: req.channel,
                },
            };
            rt.clone()
                .user_command(req.user, req.client, command)
                .await
                .map_err(error)?;
            Ok(serde_json::json!({}))
        }
        _ => Err(p::METHOD_NOT_FOUND),
    }
}

/// One publish of `publish` or `broadcast`: `data` (JSON) or `b64data`
/// (base64 of JSON text: the JSON protocol carries nothing else).
async fn publish(
    rt: &Arc<Realtime>,
    channel: &str,
    req: &PublishParams,
) -> Result<StreamPosition, p::ErrorReply> {
    use base64::Engine;
    let data = match (&req.data, &req.b64data) {
        (Some(data), None) => serde_json::to_vec(data).map_err(|_| p::BAD_REQUEST)?,
        (None, Some(b64)) => {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| p::BAD_REQUEST)?;
            serde_json::from_slice::<Value>(&raw).map_err(|_| p::BAD_REQUEST)?;
            raw
        }
        _ => return Err(p::BAD_REQUEST),
    };
    rt.clone()
        .publish(
            channel.to_string(),
            Bytes::from(data),
            None,
            req.idempotency_key.clone(),
        )
        .await
        .map_err(error)
}

/// `name` matches `pattern`: `*` any run of characters, `?` any one, the
/// rest literally (the part of Centrifugo's glob syntax channel filters use).
fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Where the last `*` was, and the name position it covers up to.
    let (mut star, mut i, mut j) = (None, 0, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

fn error(e: RealtimeError) -> p::ErrorReply {
    use weir_realtime::history::HistoryError;
    use weir_realtime::namespace::ChannelNameError;
    match e {
        RealtimeError::ChannelName(ChannelNameError::UnknownNamespace) => p::UNKNOWN_CHANNEL,
        RealtimeError::ChannelName(_) => p::BAD_REQUEST,
        RealtimeError::Presence(_) => p::LIMIT_EXCEEDED,
        RealtimeError::TooManyChannels => p::LIMIT_EXCEEDED,
        RealtimeError::History(HistoryError::UnrecoverablePosition) => p::UNRECOVERABLE_POSITION,
        RealtimeError::NotAvailable => p::NOT_AVAILABLE,
        RealtimeError::Unavailable => p::INTERNAL,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn channel_patterns_match_as_globs() {
        use super::glob;
        assert!(glob("chat:*", "chat:room"));
        assert!(glob("chat:*", "chat:"));
        assert!(!glob("chat:*", "news:room"));
        assert!(glob("*:room?", "chat:room1"));
        assert!(!glob("*:room?", "chat:room12"));
        assert!(glob("a*b*c", "aXbYbZc"));
        assert!(!glob("a*b*c", "aXbYbZ"));
        assert!(glob("exact", "exact"));
        assert!(!glob("exact", "exactly"));
    }
}
