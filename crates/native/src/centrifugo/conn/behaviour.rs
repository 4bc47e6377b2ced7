//! A centrifugo connection as the loop drives it: commands from each
//! message, the user commands and deadlines beside reads, the close.

use super::*;

impl Behaviour for Centrifugo {
    /// Pushes from publishers on any worker write straight into this socket.
    const DIRECT_WRITES: bool = true;
    /// The connection's clocks (`beside`).
    const HAS_BESIDE: bool = true;

    fn on_open(&mut self, id: u64, outbound: &Arc<Outbound>) {
        self.id = id;
        self.outbound = Some(outbound.clone());
    }

    /// Not read while a worker's fan-out backlog is over its budget, or
    /// while [`MAX_PENDING_CALLS`] of this connection's calls wait on Redis.
    #[inline]
    fn reads_blocked(&self, _own: &Outbound) -> bool {
        self.route.topics.congested()
            || self.pending.count.load(Ordering::Acquire) >= MAX_PENDING_CALLS
    }

    async fn unblocked(&mut self, _own: &Outbound) -> Result<(), Stop> {
        if self.route.topics.congested() {
            self.route.topics.fanout().wait_drained().await;
        }
        loop {
            let answered = self.pending.done.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            if self.pending.count.load(Ordering::Acquire) < MAX_PENDING_CALLS {
                return Ok(());
            }
            answered.await;
        }
    }

    async fn beside(&mut self) -> Result<(), Stop> {
        let inbox = self.inbox.clone();
        tokio::select! {
            () = tokio::time::sleep_until(self.next_deadline().into()) => {}
            () = inbox.wait() => {
                self.on_user_commands();
                return Ok(());
            }
        }
        let now = Instant::now();
        let Some(session) = &self.session else {
            if self.closing {
                // The close is queued; the loop ends the connection.
                return std::future::pending().await;
            }
            self.closing = true;
            return Err(Stop::Close(
                p::DISCONNECT_STALE.code,
                p::DISCONNECT_STALE.reason,
            ));
        };
        if session.expires.is_some_and(|at| at <= now) {
            self.closing = true;
            return Err(Stop::Close(
                p::DISCONNECT_EXPIRED.code,
                p::DISCONNECT_EXPIRED.reason,
            ));
        }
        if self.pong_due.is_some_and(|at| at <= now) {
            self.closing = true;
            return Err(Stop::Close(
                p::DISCONNECT_NO_PONG.code,
                p::DISCONNECT_NO_PONG.reason,
            ));
        }
        self.expire_subscriptions(now);
        if self.next_ping <= now {
            self.outbound()
                .send_frames(&encode::frame(OpCode::Text, b"{}"));
            self.next_ping = now + self.route.config.ping_interval;
            if self.pong_due.is_none() {
                self.pong_due = Some(now + self.route.config.pong_timeout);
            }
        }
        Ok(())
    }

    fn on_data(&mut self, buf: &mut [u8], piece: &DataPiece, _out: &mut Output) {
        if self.closing {
            return;
        }
        let payload = &buf[piece.payload.clone()];
        if self.message.len() + payload.len() > self.route.config.max_command_bytes {
            self.oversized = true;
        } else if !self.oversized {
            self.message.extend_from_slice(payload);
        }
        if !piece.message_end() {
            return;
        }
        if self.oversized {
            self.message.clear();
            return self.disconnect(p::DISCONNECT_MESSAGE_SIZE);
        }
        if piece.message != OpCode::Text {
            // The JSON protocol is text; Protobuf (binary) is not served yet.
            self.message.clear();
            return self.disconnect(p::DISCONNECT_BAD_REQUEST);
        }
        self.on_message();
    }

    fn end_of_read(&mut self) -> Result<(), Stop> {
        self.flush();
        Ok(())
    }

    fn on_close(&mut self, id: u64) {
        if let Some(session) = self.session.take() {
            let route = &self.route;
            route.realtime.clients.remove(&session.user, id);
            for (channel, sub) in session.subs {
                route
                    .realtime
                    .leave(&channel, &route.topics, id, &sub.member, &sub.state);
            }
        }
    }
}
