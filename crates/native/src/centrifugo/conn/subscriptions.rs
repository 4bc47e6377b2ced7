//! A centrifugo connection's subscriptions: client subscribes (token,
//! namespace guest, the core's subscribe with recovery), server-side
//! subscriptions (connection token, server API), refreshes and expiry of
//! subscription tokens, unsubscribes.

use super::*;

impl Centrifugo {
    pub(super) fn server_subscribe(&mut self, channel: &str) {
        if self.route.realtime.options(channel).is_err() {
            return;
        }
        let member = self.member(None);
        self.flush();
        let name = channel.to_string();
        let call = self.join(channel, member, false, None, false, move |found| {
            p::push(&name, "subscribe", |o| {
                o.push(b'{');
                p::write_position(o, &found.top);
                if found.positioned {
                    o.extend_from_slice(b",\"positioned\":true");
                }
                if found.recoverable {
                    o.extend_from_slice(b",\"recoverable\":true");
                }
                o.push(b'}');
            })
        });
        let channel = channel.to_string();
        self.answer(call, move |_, joined| {
            if let Err(e) = joined {
                tracing::debug!(channel, error = %e, "server-side subscription refused");
            }
        });
    }

    /// Runs the server API's commands for this connection: subscribe (as a
    /// server-side subscription; a channel already subscribed, or one past
    /// `max_subscriptions`, is skipped) and unsubscribe (an unsubscribe
    /// push, code 2000, as Centrifugo's).
    pub(super) fn on_user_commands(&mut self) {
        for command in self.inbox.take() {
            if self.closing {
                return;
            }
            let Some(session) = self.session.as_mut() else {
                return;
            };
            match command {
                UserCommand::Subscribe { channel } => {
                    session.subs.retain(|_, s| !s.state.failed());
                    let full = session.subs.len() >= self.route.config.max_subscriptions;
                    if !full && !session.subs.contains_key(&channel) {
                        self.server_subscribe(&channel);
                    }
                }
                UserCommand::Unsubscribe { channel } => {
                    let Some(sub) = session.subs.remove(&channel) else {
                        continue;
                    };
                    let route = &self.route;
                    route
                        .realtime
                        .leave(&channel, &route.topics, self.id, &sub.member, &sub.state);
                    let push = p::push(&channel, "unsubscribe", |o| {
                        o.extend_from_slice(br#"{"code":2000,"reason":"server unsubscribe"}"#)
                    });
                    self.line().extend_from_slice(&push);
                }
                // The clients' table closes the connection itself.
                UserCommand::Disconnect { .. } => {}
            }
        }
        self.flush();
    }

    /// The member this connection is in a channel (with a subscription
    /// token's `info` as `chan_info`).
    pub(super) fn member(&self, chan_info: Option<Bytes>) -> Arc<ClientInfo> {
        let s = self.session.as_ref().expect("connected");
        Arc::new(ClientInfo {
            client: s.client.clone(),
            user: s.user.clone(),
            conn_info: s.conn_info.clone(),
            chan_info,
        })
    }

    /// Subscribes through the core (the subscription counts from now);
    /// `reply` frames the answer (a JSON line, wrapped here in a text
    /// frame). The call is for [`answer`](Self::answer).
    pub(super) fn join(
        &mut self,
        channel: &str,
        member: Arc<ClientInfo>,
        recoverable: bool,
        recover: Option<StreamPosition>,
        reject_unrecovered: bool,
        reply: impl FnOnce(&weir_realtime::Subscribed) -> Vec<u8> + Send + 'static,
    ) -> impl Future<Output = Result<(), RealtimeError>> + Send + 'static {
        let route = self.route.clone();
        let state = Arc::new(Subscription::default());
        let session = self.session.as_mut().expect("connected");
        session.subs.insert(
            channel.to_string(),
            Sub {
                member: member.clone(),
                state: state.clone(),
                expires: None,
            },
        );
        route.realtime.clone().subscribe(
            Subscribe {
                channel: channel.to_string(),
                topics: route.topics.clone(),
                conn: self.id,
                outbound: self.outbound().clone(),
                member,
                recoverable,
                recover,
                subscription: state,
            },
            reject_unrecovered,
            Box::new(move |found| Bytes::from(encode::frame(OpCode::Text, &reply(found)))),
        )
    }

    pub(super) fn subscribe(&mut self, id: u32, req: p::SubscribeRequest) {
        let channel = req.channel.as_str();
        let options = match self.route.realtime.options(channel) {
            Ok(options) => options.clone(),
            Err(e) => return self.error(id, channel_error(e)),
        };
        let session = self.session.as_mut().expect("connected");
        session.subs.retain(|_, s| !s.state.failed());
        if session.subs.contains_key(channel) {
            return self.error(id, p::ALREADY_SUBSCRIBED);
        }
        if session.subs.len() >= self.route.config.max_subscriptions {
            return self.error(id, p::LIMIT_EXCEEDED);
        }
        let mut ttl = None;
        let chan_info = if req.token.is_empty() {
            if !options.allow_subscribe_for_client {
                return self.error(id, p::PERMISSION_DENIED);
            }
            None
        } else {
            match self.route.verifier.load().subscription(&req.token) {
                Ok(grant) if grant.channel == channel && grant.user == session.user => {
                    ttl = grant.expires_at.map(|at| at.saturating_sub(unix_now()));
                    grant.info
                }
                Ok(_) | Err(TokenError::Invalid) => {
                    return self.disconnect(p::DISCONNECT_INVALID_TOKEN)
                }
                Err(TokenError::Expired) => return self.error(id, p::TOKEN_EXPIRED),
            }
        };
        let member = self.member(chan_info);
        let recover = req.recover.then(|| StreamPosition {
            offset: req.offset,
            epoch: req.epoch.clone(),
        });
        let asked_offset = req.offset;
        let reject = req.flag & p::FLAG_REJECT_UNRECOVERED != 0;
        let recoverable = req.recoverable || options.allow_recovery && req.recover;
        let recoverable = recoverable && (options.allow_recovery || options.force_recovery);
        self.flush();
        // The namespace's guest, if it has one, is asked first; the join
        // runs once it allows.
        let verdict = self
            .hooks
            .of(channel)
            .map(|hook| hook.ask(self.id, self.question(channel), None));
        let call = self.join(
            channel,
            member,
            recoverable,
            recover,
            reject,
            move |found| {
                let mut line = Vec::new();
                p::write_reply(&mut line, id, "subscribe", |o| {
                    o.push(b'{');
                    let mut at = found.top.clone();
                    if let Some(r) = found.recovery.as_ref().filter(|r| r.recovered) {
                        // Centrifugo answers a recovery with the client's own
                        // offset; the recovered publications move it on.
                        at.offset = asked_offset;
                        p::write_publications(o, &r.publications);
                        o.extend_from_slice(b",\"recovered\":true,");
                    }
                    p::write_position(o, &at);
                    if found.recovery.is_some() {
                        o.extend_from_slice(b",\"was_recovering\":true");
                    }
                    if found.positioned {
                        o.extend_from_slice(b",\"positioned\":true");
                    }
                    if found.recoverable {
                        o.extend_from_slice(b",\"recoverable\":true");
                    }
                    if let Some(ttl) = ttl {
                        o.extend_from_slice(format!(",\"expires\":true,\"ttl\":{ttl}").as_bytes());
                    }
                    o.push(b'}');
                });
                line
            },
        );
        let grace = self.route.config.expired_close_delay;
        if let Some(sub) = self.session.as_mut().and_then(|s| s.subs.get_mut(channel)) {
            sub.expires = ttl.map(|s| Instant::now() + Duration::from_secs(s) + grace);
        }
        let Some(verdict) = verdict else {
            return self.answer(call, move |line, joined| {
                if let Err(e) = joined {
                    p::write_error(line, id, core_error(e));
                }
            });
        };
        let state = self.session.as_ref().expect("connected").subs[channel]
            .state
            .clone();
        let call = async move {
            match verdict.await.unwrap_or(RtAnswer::Failed) {
                RtAnswer::Allow => call.await.map_err(core_error),
                answer => {
                    // Refused before the core saw it: the channel may be
                    // subscribed again.
                    state.fail();
                    Err(refusal(answer))
                }
            }
        };
        self.answer_later(call, move |line, joined| {
            if let Err(e) = joined {
                p::write_error(line, id, e);
            }
        });
    }

    /// A subscription token refreshed: the subscription's new expiry (an
    /// expired token: 109; another user's or channel's: disconnect 3500).
    pub(super) fn sub_refresh(&mut self, id: u32, req: &p::SubRefreshRequest) {
        let grant = match self.route.verifier.load().subscription(&req.token) {
            Ok(grant) => grant,
            Err(TokenError::Expired) => return self.error(id, p::TOKEN_EXPIRED),
            Err(TokenError::Invalid) => return self.disconnect(p::DISCONNECT_INVALID_TOKEN),
        };
        let session = self.session.as_mut().expect("connected");
        if grant.channel != req.channel || grant.user != session.user {
            return self.disconnect(p::DISCONNECT_INVALID_TOKEN);
        }
        let Some(sub) = session
            .subs
            .get_mut(&req.channel)
            .filter(|s| !s.state.failed())
        else {
            return self.error(id, p::PERMISSION_DENIED);
        };
        let ttl = grant.expires_at.map(|at| at.saturating_sub(unix_now()));
        let grace = self.route.config.expired_close_delay;
        sub.expires = ttl.map(|s| Instant::now() + Duration::from_secs(s) + grace);
        p::write_reply(self.line(), id, "sub_refresh", |o| match ttl {
            Some(ttl) => {
                o.extend_from_slice(format!("{{\"expires\":true,\"ttl\":{ttl}}}").as_bytes())
            }
            None => o.extend_from_slice(b"{}"),
        });
    }

    /// Ends the subscriptions whose token expired without a refresh, with
    /// an unsubscribe push (2501: the client subscribes again, with a new
    /// token).
    pub(super) fn expire_subscriptions(&mut self, now: Instant) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        let expired: Vec<String> = session
            .subs
            .iter()
            .filter(|(_, s)| !s.state.failed() && s.expires.is_some_and(|at| at <= now))
            .map(|(channel, _)| channel.clone())
            .collect();
        for channel in expired {
            let Some(sub) = session.subs.remove(&channel) else {
                continue;
            };
            let route = &self.route;
            route
                .realtime
                .leave(&channel, &route.topics, self.id, &sub.member, &sub.state);
            let push = p::push(&channel, "unsubscribe", |o| {
                o.extend_from_slice(br#"{"code":2501,"reason":"subscription expired"}"#)
            });
            if !self.replies.is_empty() {
                self.replies.push(b'\n');
            }
            self.replies.extend_from_slice(&push);
        }
        self.flush();
    }

    pub(super) fn unsubscribe(&mut self, id: u32, channel: &str) {
        let session = self.session.as_mut().expect("connected");
        if let Some(sub) = session.subs.remove(channel) {
            let route = &self.route;
            route
                .realtime
                .leave(channel, &route.topics, self.id, &sub.member, &sub.state);
        }
        p::write_reply(self.line(), id, "unsubscribe", |o| {
            o.extend_from_slice(b"{}")
        });
    }
}
