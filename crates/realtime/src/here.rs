//! One node's side of a channel: its state (history, presence, the
//! subscribers' topic), found or made under the namespace's cap, and each
//! operation done here under the channel's lock. With `[cluster]` the
//! public calls in `lib.rs` go through `across.rs` first.

use super::*;

/// One channel's state.
#[derive(Default)]
pub(crate) struct ChannelState {
    pub(crate) stream: Stream,
    /// With `[cluster]`: `stream` follows the channel's positions in Redis
    /// (it is watched, and a subscribe or a message gave it a position).
    pub(crate) seeded: bool,
    /// This node's members (with `[cluster]`, the ones it refreshes).
    pub(crate) presence: Presence,
    /// With `[cluster]`, while the channel is watched: every node's
    /// members as this node follows them (presence namespaces only).
    pub(crate) roster: Roster,
    /// Subscribers in every adapter: a channel with any is never swept.
    pub(crate) subscribers: usize,
    /// Recent publishes' idempotency keys and their positions.
    pub(crate) idempotent: VecDeque<(String, u64, Instant)>,
}

impl ChannelState {
    /// With `[cluster]`: the node's copies of the stream and the members
    /// no longer follow Redis (nobody here needs them, or what they missed
    /// is unknown).
    pub(crate) fn forget_copy(&mut self) {
        self.seeded = false;
        self.stream.clear();
        self.roster.reset();
    }
}

/// The channels this node holds, and how many of each namespace (bounded
/// by its `max_channels`).
#[derive(Default)]
pub(crate) struct Channels {
    pub(crate) states: HashMap<Arc<str>, Arc<Mutex<ChannelState>>>,
    pub(crate) held: HashMap<Box<str>, usize>,
}

impl Channels {
    pub(crate) fn full(&self, channel: &str, max: usize) -> bool {
        self.held
            .get(Namespaces::name_of(channel))
            .is_some_and(|&n| n >= max)
    }

    pub(crate) fn insert(&mut self, channel: &str) -> Arc<Mutex<ChannelState>> {
        let state = Arc::<Mutex<ChannelState>>::default();
        self.states.insert(channel.into(), state.clone());
        *self
            .held
            .entry(Namespaces::name_of(channel).into())
            .or_default() += 1;
        state
    }

    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&str, &Arc<Mutex<ChannelState>>) -> bool) {
        let held = &mut self.held;
        self.states.retain(|name, state| {
            let kept = keep(name, state);
            if !kept {
                if let Some(n) = held.get_mut(Namespaces::name_of(name)) {
                    *n -= 1;
                }
            }
            kept
        });
    }
}

/// At most one sweep per this interval is made for a publish or subscribe
/// refused because its namespace is full (a sweep walks every channel).
pub(crate) const SWEEP_WHEN_FULL_EVERY: Duration = Duration::from_secs(1);

/// An adapter's topic namespace and how it frames events.
pub(crate) struct Adapter {
    pub(crate) topics: Arc<Topics>,
    pub(crate) framer: Arc<dyn Framer>,
}

impl Realtime {
    /// `channel`'s state, made if this node holds none, unless its
    /// namespace holds `max` channels already and a sweep frees none.
    pub(crate) fn channel(
        &self,
        channel: &str,
        max: usize,
    ) -> Result<Arc<Mutex<ChannelState>>, RealtimeError> {
        let mut channels = self.channels.lock().expect("channels lock");
        if let Some(state) = channels.states.get(channel) {
            return Ok(state.clone());
        }
        if channels.full(channel, max) {
            drop(channels);
            let now = Instant::now();
            {
                let mut last = self.swept_when_full.lock().expect("sweep lock");
                if last.is_some_and(|at| now.duration_since(at) < SWEEP_WHEN_FULL_EVERY) {
                    return Err(RealtimeError::TooManyChannels);
                }
                *last = Some(now);
            }
            self.sweep(now);
            channels = self.channels.lock().expect("channels lock");
            if let Some(state) = channels.states.get(channel) {
                return Ok(state.clone());
            }
            if channels.full(channel, max) {
                return Err(RealtimeError::TooManyChannels);
            }
        }
        Ok(channels.insert(channel))
    }

    pub(crate) fn existing(&self, channel: &str) -> Option<Arc<Mutex<ChannelState>>> {
        self.channels
            .lock()
            .expect("channels lock")
            .states
            .get(channel)
            .cloned()
    }

    /// Publishes `data` (JSON text) into `channel`: its position (offset 0
    /// and no epoch in a channel without history). A repeated
    /// `idempotency_key` within [`IDEMPOTENCY_TTL`] answers the first
    /// publish's position and publishes nothing.
    pub(crate) fn publish_here(
        &self,
        channel: &str,
        data: Bytes,
        info: Option<Arc<ClientInfo>>,
        idempotency_key: Option<&str>,
    ) -> Result<StreamPosition, RealtimeError> {
        let options = self.namespaces.of(channel)?;
        self.tick();
        let now = Instant::now();
        let history = options.keeps_history();
        if !history && idempotency_key.is_none() {
            // Nothing to keep: no channel state, no lock beyond the fan-out's.
            let publication = Publication {
                offset: 0,
                data,
                info,
                time: now,
            };
            self.deliver(channel, &publication);
            return Ok(StreamPosition::default());
        }
        let state = self.channel(channel, options.max_channels)?;
        let mut state = state.lock().expect("channel lock");
        if let Some(key) = idempotency_key {
            while state
                .idempotent
                .front()
                .is_some_and(|(_, _, at)| now.saturating_duration_since(*at) >= IDEMPOTENCY_TTL)
            {
                state.idempotent.pop_front();
            }
            if let Some((_, offset, _)) = state.idempotent.iter().find(|(k, _, _)| k == key) {
                let offset = *offset;
                return Ok(position(history, offset, &state.stream));
            }
        }
        let offset = if history {
            state.stream.expire(now, options.history_ttl);
            state.stream.next_offset()
        } else {
            0
        };
        let publication = Publication {
            offset,
            data,
            info,
            time: now,
        };
        self.deliver(channel, &publication);
        if history {
            state
                .stream
                .append(publication, options.history_size, options.history_max_bytes);
        }
        if let Some(key) = idempotency_key {
            if state.idempotent.len() >= IDEMPOTENCY_KEYS_PER_CHANNEL {
                state.idempotent.pop_front();
            }
            state.idempotent.push_back((key.to_string(), offset, now));
        }
        Ok(position(history, offset, &state.stream))
    }

    /// Hands a publication to every adapter, framed once each.
    pub(crate) fn deliver(&self, channel: &str, publication: &Publication) {
        self.published.fetch_add(1, Ordering::Relaxed);
        for adapter in self.adapters.read().expect("adapters lock").iter() {
            let frames = adapter.framer.publication(channel, publication);
            adapter
                .topics
                .publish_positioned(channel, &frames, publication.offset);
        }
    }

    /// A join or leave push to every adapter that has them.
    pub(crate) fn join_leave(&self, channel: &str, info: &ClientInfo, join: bool) {
        for adapter in self.adapters.read().expect("adapters lock").iter() {
            if let Some(frames) = adapter.framer.join_leave(channel, info, join) {
                adapter.topics.publish_positioned(channel, &frames, 0);
            }
        }
    }

    /// Subscribes a client: recovers what it missed if it asks, queues the
    /// adapter's reply (`reply` frames it from what was found) and joins the
    /// topic, all under the channel's lock (see the module head). Refused
    /// when the channel's presence is full, or (`reject_unrecovered`) when
    /// the recovery failed.
    pub(crate) fn subscribe_here(
        &self,
        join: Join<'_>,
        reject_unrecovered: bool,
        reply: impl FnOnce(&Subscribed) -> Bytes,
    ) -> Result<(), RealtimeError> {
        let options = self.namespaces.of(join.channel)?;
        self.tick();
        let state = self.channel(join.channel, options.max_channels)?;
        let mut state = state.lock().expect("channel lock");
        if options.presence {
            state
                .presence
                .add(join.member.clone(), options.presence_max)?;
        }
        let history = options.keeps_history();
        if history {
            state.stream.expire(Instant::now(), options.history_ttl);
        }
        let recoverable = history && (join.recoverable || options.force_recovery);
        let recovery = match (&join.recover, recoverable) {
            (Some(since), true) => Some(state.stream.recover(since)),
            _ => None,
        };
        if reject_unrecovered && recovery.as_ref().is_some_and(|r| !r.recovered) {
            if options.presence {
                state.presence.remove(&join.member.client);
            }
            return Err(HistoryError::UnrecoverablePosition.into());
        }
        let top = if history {
            state.stream.position()
        } else {
            StreamPosition::default()
        };
        let found = Subscribed {
            positioned: history,
            recoverable,
            recovery,
            top,
        };
        // An adapter that answers after the join (pusher: the presence
        // list) frames nothing here.
        let reply = reply(&found);
        if !reply.is_empty() {
            join.outbound.send_frames(&reply);
        }
        join.topics.join(
            join.channel,
            Subscriber {
                conn: join.conn,
                outbound: join.outbound.clone(),
                slow: weir_config::SlowSubscriber::Close,
                since: found.top.offset,
                positioned: history,
            },
        );
        state.subscribers += 1;
        if options.join_leave {
            self.join_leave(join.channel, &join.member, true);
        }
        Ok(())
    }

    /// Ends a client's subscription (from [`subscribe`](Self::subscribe)).
    pub(crate) fn unsubscribe_here(
        &self,
        channel: &str,
        topics: &Topics,
        conn: ConnId,
        client: &str,
    ) {
        topics.unsubscribe(channel, conn);
        let Some(state) = self.existing(channel) else {
            return;
        };
        let mut state = state.lock().expect("channel lock");
        state.subscribers = state.subscribers.saturating_sub(1);
        let left = state.presence.remove(client);
        let join_leave = self
            .namespaces
            .of(channel)
            .is_ok_and(|options| options.join_leave);
        if let (Some(info), true) = (left, join_leave) {
            self.join_leave(channel, &info, false);
        }
    }

    /// Who is in `channel` (namespaces with `presence` only).
    pub(crate) fn presence_here(
        &self,
        channel: &str,
    ) -> Result<Vec<Arc<ClientInfo>>, RealtimeError> {
        if !self.namespaces.of(channel)?.presence {
            return Err(RealtimeError::NotAvailable);
        }
        Ok(match self.existing(channel) {
            Some(state) => {
                let state = state.lock().expect("channel lock");
                state.presence.members().cloned().collect()
            }
            None => Vec::new(),
        })
    }

    pub(crate) fn presence_stats_here(
        &self,
        channel: &str,
    ) -> Result<PresenceStats, RealtimeError> {
        if !self.namespaces.of(channel)?.presence {
            return Err(RealtimeError::NotAvailable);
        }
        Ok(match self.existing(channel) {
            Some(state) => state.lock().expect("channel lock").presence.stats(),
            None => PresenceStats::default(),
        })
    }

    /// `channel`'s history and its position (namespaces with history only).
    pub(crate) fn history_here(
        &self,
        channel: &str,
        query: &HistoryQuery,
    ) -> Result<(Vec<Publication>, StreamPosition), RealtimeError> {
        let options = self.namespaces.of(channel)?;
        if !options.keeps_history() {
            return Err(RealtimeError::NotAvailable);
        }
        let state = self.channel(channel, options.max_channels)?;
        let mut state = state.lock().expect("channel lock");
        state.stream.expire(Instant::now(), options.history_ttl);
        let pubs = state.stream.query(query)?;
        Ok((pubs, state.stream.position()))
    }

    /// Forgets `channel`'s publications; its position stays.
    pub(crate) fn history_remove_here(&self, channel: &str) -> Result<(), RealtimeError> {
        if !self.namespaces.of(channel)?.keeps_history() {
            return Err(RealtimeError::NotAvailable);
        }
        if let Some(state) = self.existing(channel) {
            state.lock().expect("channel lock").stream.clear();
        }
        Ok(())
    }
}
