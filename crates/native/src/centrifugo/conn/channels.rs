//! A centrifugo connection's reads and writes on a channel it is in:
//! publish (through the namespace's guest when it has one), presence,
//! history.

use super::*;

impl Centrifugo {
    pub(super) fn publish(&mut self, id: u32, req: p::PublishRequest) {
        let options = match self.route.realtime.options(&req.channel) {
            Ok(options) => options.clone(),
            Err(e) => return self.error(id, channel_error(e)),
        };
        let session = self.session.as_ref().expect("connected");
        let member = session.sub(&req.channel).map(|s| s.member.clone());
        let allowed = options.allow_publish_for_client
            || (member.is_some() && options.allow_publish_for_subscriber);
        if !allowed {
            return self.error(id, p::PERMISSION_DENIED);
        }
        let data = serde_json::to_vec(&req.data).expect("a JSON value serialises");
        if data.len() > self.route.config.max_publication_bytes {
            return self.error(id, p::LIMIT_EXCEEDED);
        }
        let info = member.unwrap_or_else(|| self.member(None));
        let realtime = self.route.realtime.clone();
        let Some(hook) = self.hooks.of(&req.channel) else {
            let call = realtime.publish(req.channel, Bytes::from(data), Some(info), None);
            return self.answer(call, move |line, published| match published {
                Ok(_) => p::write_reply(line, id, "publish", |o| o.extend_from_slice(b"{}")),
                Err(e) => p::write_error(line, id, core_error(e)),
            });
        };
        // Only what the namespace's guest passes is published.
        let verdict = hook.ask(self.id, self.question(&req.channel), Some(&data));
        let max = self.route.config.max_publication_bytes;
        let call = async move {
            let data = match verdict.await.unwrap_or(RtAnswer::Failed) {
                RtAnswer::Pass => Bytes::from(data),
                RtAnswer::Replace(new) if is_json(&new) && new.len() <= max => new,
                RtAnswer::Replace(_) => {
                    tracing::warn!(
                        channel = %req.channel,
                        "a namespace guest replaced a publication with bytes that are not \
                         JSON or over max_publication_bytes; refused"
                    );
                    return Err(p::INTERNAL);
                }
                answer => return Err(refusal(answer)),
            };
            realtime
                .publish(req.channel, data, Some(info), None)
                .await
                .map_err(core_error)
        };
        self.answer_later(call, move |line, published| match published {
            Ok(_) => p::write_reply(line, id, "publish", |o| o.extend_from_slice(b"{}")),
            Err(e) => p::write_error(line, id, e),
        });
    }

    /// `presence` (or `presence_stats`): subscribers of namespaces that allow it.
    pub(super) fn presence(&mut self, id: u32, channel: &str, stats: bool) {
        if let Err(e) = self.may_read(channel, |o| o.allow_presence_for_subscriber) {
            return self.error(id, e);
        }
        let realtime = self.route.realtime.clone();
        if stats {
            let call = realtime.presence_stats(channel.to_string());
            return self.answer(call, move |line, stats| match stats {
                Ok(s) => p::write_reply(line, id, "presence_stats", |o| {
                    o.extend_from_slice(
                        format!(
                            "{{\"num_clients\":{},\"num_users\":{}}}",
                            s.num_clients, s.num_users
                        )
                        .as_bytes(),
                    )
                }),
                Err(e) => p::write_error(line, id, core_error(e)),
            });
        }
        let call = realtime.presence(channel.to_string());
        self.answer(call, move |line, members| match members {
            Ok(members) => p::write_reply(line, id, "presence", |o| {
                o.extend_from_slice(b"{\"presence\":{");
                for (i, m) in members.iter().enumerate() {
                    if i > 0 {
                        o.push(b',');
                    }
                    p::write_str(o, &m.client);
                    o.push(b':');
                    p::write_client_info(o, m);
                }
                o.extend_from_slice(b"}}");
            }),
            Err(e) => p::write_error(line, id, core_error(e)),
        });
    }

    pub(super) fn history(&mut self, id: u32, req: p::HistoryRequest) {
        if let Err(e) = self.may_read(&req.channel, |o| o.allow_history_for_subscriber) {
            return self.error(id, e);
        }
        let limit = match req.limit {
            n if n < 0 => HISTORY_MAX_PUBLICATION_LIMIT,
            n => (n as usize).min(HISTORY_MAX_PUBLICATION_LIMIT),
        };
        let query = HistoryQuery {
            limit: Some(limit),
            since: req.since.map(|s| StreamPosition {
                offset: s.offset,
                epoch: s.epoch,
            }),
            reverse: req.reverse,
        };
        let call = self.route.realtime.clone().history(req.channel, query);
        self.answer(call, move |line, history| match history {
            Ok((pubs, top)) => p::write_reply(line, id, "history", |o| {
                o.push(b'{');
                p::write_publications(o, &pubs);
                o.push(b',');
                p::write_position(o, &top);
                o.push(b'}');
            }),
            Err(e) => p::write_error(line, id, core_error(e)),
        });
    }

    /// Presence and history are for subscribers of namespaces that allow them.
    pub(super) fn may_read(
        &self,
        channel: &str,
        allowed: impl Fn(&weir_realtime::NamespaceOptions) -> bool,
    ) -> Result<(), ErrorReply> {
        let options = self
            .route
            .realtime
            .options(channel)
            .map_err(channel_error)?;
        let session = self.session.as_ref().expect("connected");
        if session.sub(channel).is_none() || !allowed(options) {
            return Err(p::PERMISSION_DENIED);
        }
        Ok(())
    }
}
