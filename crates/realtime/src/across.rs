//! A channel across nodes (`[cluster]`): Redis holds its positions,
//! history and presence; a node joins Redis's copy to live delivery
//! without a gap or a repeat, takes other nodes' publications, joins,
//! leaves and presence changes as they arrive (the last into its copy of
//! the members), and closes its positioned subscribers when a channel's
//! positions jump.

use super::*;

impl Realtime {
    /// One subscriber fewer on this node: the last one's leaving stops the
    /// watch (and the node's copy of the stream, which would go stale).
    pub(crate) fn release(&self, cluster: &Cluster, channel: &str, state: &mut ChannelState) {
        state.subscribers = state.subscribers.saturating_sub(1);
        if state.subscribers == 0 {
            cluster.broker.unwatch_realtime(cluster.scope(), channel);
            state.forget_copy();
        }
    }

    /// [`subscribe`](Self::subscribe) with `[cluster]`. The channel is
    /// watched first and Redis confirms it, so every publication after the
    /// read below reaches this node; then, under the channel's lock, the
    /// read is joined to what arrived meanwhile (the node's stream has it):
    /// the reply carries everything up to the newest position seen, and
    /// live delivery skips what the reply has.
    pub(crate) async fn subscribe_across(
        self: Arc<Self>,
        req: &Subscribe,
        reject_unrecovered: bool,
        reply: Reply,
    ) -> Result<(), RealtimeError> {
        let cluster = self.cluster().expect("clustered");
        let options = self.namespaces.of(&req.channel)?.clone();
        self.tick();
        let state = self.channel(&req.channel, options.max_channels)?;
        {
            let mut state = state.lock().expect("channel lock");
            state.subscribers += 1;
            if state.subscribers == 1 {
                cluster.broker.watch_realtime(cluster.scope(), &req.channel);
            }
        }
        let result = self
            .clone()
            .join_across(cluster, &state, &options, req, reject_unrecovered, reply)
            .await;
        let joined = matches!(result, Ok(true));
        if !joined {
            // Refused, failed or called off: undo what this subscribe did.
            {
                let mut locked = state.lock().expect("channel lock");
                self.release(cluster, &req.channel, &mut locked);
            }
            if options.presence && !matches!(result, Err(RealtimeError::Presence(_))) {
                cluster
                    .store
                    .presence_remove(&req.channel, &req.member.client)
                    .await;
            }
        } else if options.join_leave {
            cluster
                .store
                .join_leave(&req.channel, &req.member, true)
                .await;
        }
        result.map(|_| ())
    }

    /// The Redis half of [`subscribe_across`](Self::subscribe_across):
    /// true once joined, false if the client left meanwhile.
    pub(crate) async fn join_across(
        self: Arc<Self>,
        cluster: &Cluster,
        state: &Mutex<ChannelState>,
        options: &NamespaceOptions,
        req: &Subscribe,
        reject_unrecovered: bool,
        reply: Reply,
    ) -> Result<bool, RealtimeError> {
        let channel = req.channel.as_str();
        if !cluster
            .broker
            .wait_subscribed(cluster.scope(), channel, redis::REDIS_TIMEOUT)
            .await
        {
            return Err(RealtimeError::Unavailable);
        }
        if options.presence {
            let added = cluster
                .store
                .presence_add(
                    channel,
                    std::slice::from_ref(&req.member),
                    options.presence_max,
                )
                .await?;
            if !added {
                return Err(PresenceError::PresenceFull.into());
            }
        }
        let history = options.keeps_history();
        let recoverable = history && (req.recoverable || options.force_recovery);
        let recover = req.recover.as_ref().filter(|_| recoverable);
        // A few tries: a read may find the node's stream ahead of it by
        // more than the stream keeps (a burst between the read and now).
        for _ in 0..3 {
            let read = match (history, recover) {
                (false, _) => None,
                (true, from) => Some(
                    cluster
                        .store
                        .read(
                            channel,
                            from.map_or(ReadFrom::PositionOnly, |p| ReadFrom::After(p.offset)),
                            options.history_size,
                            false,
                            options.history_ttl,
                        )
                        .await?,
                ),
            };
            let mut locked = state.lock().expect("channel lock");
            let mut top = StreamPosition::default();
            let mut later = Vec::new();
            if let Some(read) = &read {
                top = read.top.clone();
                if !locked.seeded {
                    locked.stream = Stream::at(top.clone());
                    locked.seeded = true;
                } else if locked.stream.epoch() != top.epoch {
                    // Redis started a new epoch: this node's subscribers
                    // hold positions of the old one.
                    self.discontinuity(channel);
                    locked.stream = Stream::at(top.clone());
                } else if locked.stream.position().offset > top.offset {
                    match locked.stream.since(top.offset) {
                        Some(missed) => later = missed,
                        None => continue,
                    }
                    top.offset = locked.stream.position().offset;
                }
            }
            let recovery = match (recover, &read) {
                (Some(since), Some(read)) => Some(recovery_of(since, read, later, &top)),
                _ => None,
            };
            if reject_unrecovered && recovery.as_ref().is_some_and(|r| !r.recovered) {
                return Err(HistoryError::UnrecoverablePosition.into());
            }
            if !req.subscription.activate() {
                return Ok(false);
            }
            let found = Subscribed {
                positioned: history,
                recoverable,
                recovery,
                top,
            };
            let reply = reply(&found);
            if !reply.is_empty() {
                req.outbound.send_frames(&reply);
            }
            req.topics.join(
                channel,
                Subscriber {
                    conn: req.conn,
                    outbound: req.outbound.clone(),
                    slow: weir_config::SlowSubscriber::Close,
                    since: found.top.offset,
                    positioned: history,
                },
            );
            if options.presence {
                let _ = locked.presence.add(req.member.clone(), 0);
                let until = redis::unix_secs() + redis::PRESENCE_TTL.as_secs();
                locked
                    .roster
                    .own(Change::Present(req.member.clone(), until));
            }
            return Ok(true);
        }
        Err(RealtimeError::Unavailable)
    }

    /// Closes the positioned subscribers of `channel` on this node (their
    /// positions no longer follow the channel's).
    pub(crate) fn discontinuity(&self, channel: &str) {
        for adapter in self.adapters.read().expect("adapters lock").iter() {
            if let Some((code, reason)) = adapter.framer.discontinuity() {
                adapter.topics.close_positioned(channel, code, reason);
            }
        }
    }

    /// Who is in `channel` across nodes. While this node has subscribers
    /// there, from its copy ([`Roster`]), seeded by one read: the read is
    /// sent once the channel's watch is in place, so every change after it
    /// reaches the copy, and the changes that arrived meanwhile are
    /// replayed over it. Otherwise (or while the link is down) read from
    /// Redis.
    pub(crate) async fn presence_across(
        &self,
        cluster: &Cluster,
        channel: &str,
    ) -> Result<Vec<Arc<ClientInfo>>, RealtimeError> {
        let members_of = |read: Vec<(Arc<ClientInfo>, u64)>| -> Vec<Arc<ClientInfo>> {
            read.into_iter().map(|(m, _)| m).collect()
        };
        let Some(state) = self.existing(channel) else {
            return Ok(members_of(cluster.store.presence(channel).await?));
        };
        let id = {
            let mut locked = state.lock().expect("channel lock");
            if locked.subscribers == 0 {
                None
            } else if let Some(members) = locked.roster.members(redis::unix_secs()) {
                return Ok(members);
            } else {
                Some(locked.roster.begin_read())
            }
        };
        let Some(id) = id else {
            return Ok(members_of(cluster.store.presence(channel).await?));
        };
        if !cluster
            .broker
            .wait_subscribed(cluster.scope(), channel, redis::REDIS_TIMEOUT)
            .await
        {
            return Ok(members_of(cluster.store.presence(channel).await?));
        }
        let read = cluster.store.presence(channel).await?;
        let mut locked = state.lock().expect("channel lock");
        let now = redis::unix_secs();
        Ok(match locked.roster.install(id, read) {
            Ok(()) => locked.roster.members(now).unwrap_or_default(),
            // Another read was installed first (its copy is as new), or
            // the copy was reset meanwhile (this read is the answer).
            Err(read) => locked
                .roster
                .members(now)
                .unwrap_or_else(|| members_of(read)),
        })
    }

    /// Presence changes from Redis for `channel`, into its copy while this
    /// node has subscribers there.
    fn roster_changed(&self, channel: &str, changes: impl IntoIterator<Item = Change>) {
        let Some(state) = self.existing(channel) else {
            return;
        };
        let mut state = state.lock().expect("channel lock");
        if state.subscribers == 0 {
            return;
        }
        for change in changes {
            state.roster.apply(change);
        }
    }

    /// A message from Redis for a channel this node watches (with
    /// `[cluster]`): publications are kept in the node's stream and
    /// delivered at their positions, in the order Redis gave them.
    pub(crate) fn received(&self, channel: &str, message: Message) {
        let (position, publication) = match message {
            Message::Join(info) => return self.join_leave(channel, &info, true),
            Message::Leave(info) => return self.join_leave(channel, &info, false),
            Message::Present(members) => {
                let until = redis::unix_secs() + redis::PRESENCE_TTL.as_secs();
                return self.roster_changed(
                    channel,
                    members
                        .into_iter()
                        .map(|m| Change::Present(Arc::new(m), until)),
                );
            }
            Message::Absent(client) => {
                return self.roster_changed(channel, [Change::Absent(client.into())])
            }
            Message::Publication {
                position,
                publication,
            } => (position, publication),
        };
        if position.offset == 0 {
            return self.deliver(channel, &publication);
        }
        let Ok(options) = self.namespaces.of(channel) else {
            return;
        };
        let Some(state) = self.existing(channel) else {
            // Subscribers that follow no positions (a pubsub route's).
            return self.deliver(channel, &publication);
        };
        let mut state = state.lock().expect("channel lock");
        if state.subscribers == 0 {
            // No positioned subscriber here (the channel is watched for a
            // pubsub route's): no copy to keep, and none left to go stale.
            return self.deliver(channel, &publication);
        }
        let at = state.stream.position();
        if state.seeded && at.epoch == position.epoch && position.offset <= at.offset {
            return; // a subscribe's read already had it
        }
        let follows =
            state.seeded && at.epoch == position.epoch && position.offset == at.offset + 1;
        if !follows {
            if state.seeded {
                // A jump: publications were lost between Redis and here,
                // or Redis started a new epoch.
                tracing::info!(
                    channel,
                    from = at.offset,
                    to = position.offset,
                    "realtime: positions jumped; positioned subscribers reconnect to recover"
                );
                self.discontinuity(channel);
            }
            state.stream = Stream::at(StreamPosition {
                offset: position.offset - 1,
                epoch: position.epoch,
            });
            state.seeded = true;
        }
        self.deliver(channel, &publication);
        state
            .stream
            .record(publication, options.history_size, options.history_max_bytes);
    }
}

impl RealtimeSink for Realtime {
    fn receive(&self, channel: &str, payload: Bytes) {
        if channel == control_channel() {
            match serde_json::from_slice::<Control>(&payload) {
                Ok(c) => {
                    self.clients
                        .command(&c.user, c.client.as_deref(), &c.command);
                }
                Err(_) => tracing::warn!("realtime: dropped a control message that is not weir's"),
            }
            return;
        }
        match redis::decode_message(&payload) {
            Some(message) => self.received(channel, message),
            None => tracing::warn!(
                channel,
                "realtime: dropped a message from Redis that is not weir's"
            ),
        }
    }

    /// Publications made while the link was down never reach this node:
    /// every channel it followed loses its continuity, and its positioned
    /// subscribers reconnect and recover from Redis (or are told they
    /// cannot, when Redis came back empty with a new epoch).
    fn link_up(&self) {
        let channels: Vec<(Arc<str>, Arc<Mutex<ChannelState>>)> = self
            .channels
            .lock()
            .expect("channels lock")
            .states
            .iter()
            .map(|(name, state)| (name.clone(), state.clone()))
            .collect();
        for (name, state) in channels {
            let mut state = state.lock().expect("channel lock");
            if state.seeded {
                self.discontinuity(&name);
                state.forget_copy();
            }
            state.roster.reset();
        }
    }

    /// Presence changes published while the link is down never arrive:
    /// the members' copies are forgotten (presence reads go to Redis until
    /// a copy is seeded again, after the link is back).
    fn link_down(&self) {
        let channels: Vec<Arc<Mutex<ChannelState>>> = self
            .channels
            .lock()
            .expect("channels lock")
            .states
            .values()
            .cloned()
            .collect();
        for state in channels {
            state.lock().expect("channel lock").roster.reset();
        }
    }
}

/// What a recovery from `since` finds in `read` and in the node's `later`
/// publications (those after the read, up to `top`).
pub(crate) fn recovery_of(
    since: &StreamPosition,
    read: &redis::Read,
    later: Vec<Publication>,
    top: &StreamPosition,
) -> Recovery {
    let same_epoch = since.epoch.is_empty() || since.epoch == read.top.epoch;
    let covered = since.offset == read.top.offset
        || (since.offset < read.top.offset
            && read
                .publications
                .first()
                .is_some_and(|p| p.offset == since.offset + 1));
    if !(same_epoch && covered) {
        return Recovery {
            publications: Vec::new(),
            recovered: false,
            top: top.clone(),
        };
    }
    let mut publications = read.publications.clone();
    publications.extend(later);
    Recovery {
        publications,
        recovered: true,
        top: top.clone(),
    }
}

/// Writes this node's members' presence again every
/// [`redis::PRESENCE_REFRESH`], so Redis forgets only the members of a node
/// that stopped ([`redis::PRESENCE_TTL`]).
pub(crate) async fn refresh_presence(realtime: Weak<Realtime>) {
    loop {
        tokio::time::sleep(redis::PRESENCE_REFRESH).await;
        let Some(realtime) = realtime.upgrade() else {
            return;
        };
        let Some(cluster) = realtime.cluster() else {
            return;
        };
        let members: Vec<(Arc<str>, Vec<Arc<ClientInfo>>)> = {
            let channels = realtime.channels.lock().expect("channels lock");
            channels
                .states
                .iter()
                .filter_map(|(name, state)| {
                    let state = state.lock().expect("channel lock");
                    (!state.presence.is_empty())
                        .then(|| (name.clone(), state.presence.members().cloned().collect()))
                })
                .collect()
        };
        for (channel, members) in members {
            let _ = cluster.store.presence_add(&channel, &members, 0).await;
        }
    }
}

#[cfg(test)]
mod tests;
