//! What a connection writes besides its replies: messages others queued
//! for it (under the write turn), its own frames with a stall limit, and
//! its close with the linger that lets the close frame reach a client that
//! is still sending.

use super::*;

impl<T: Transport> Conn<T> {
    /// Writes frames other connections or the guest queued for this one.
    pub(super) async fn deliver(&mut self) -> Flow {
        let outbound = &self.env.outbound;
        // Messages are taken under the write turn, so a direct write from
        // a producer cannot overtake them.
        let _turn = outbound.direct().then(|| outbound.write_turn());
        outbound.clear_remainder();
        let (frames, taken, closing) = take_queued(outbound);
        let total: usize = frames.iter().map(|f| f.len()).sum();
        let stall_limit = self.env.limits.idle_timeout;
        let stream = &mut self.stream;
        let mut written = Ok(());
        if !frames.is_empty() {
            let mut slices: Vec<IoSlice<'_>> = frames.iter().map(|f| IoSlice::new(f)).collect();
            let mut cursor = slices.as_mut_slice();
            let mut flushing = false;
            written = unless_stalled_poll(stall_limit, |cx| {
                let mut writer = stream.writer();
                if !flushing {
                    ready!(poll_write_all_vectored(&mut writer, &mut cursor, cx))?;
                    flushing = true;
                }
                tokio::io::AsyncWrite::poll_flush(std::pin::Pin::new(&mut writer), cx)
            })
            .await;
        }
        outbound.written(total);
        outbound.delivered(taken);
        match written {
            Err(_) => Flow::Done,
            Ok(()) => closing,
        }
    }

    /// Writes bytes of the connection's own (a ping, its close) to its
    /// socket, taking the write turn when a producer may write too.
    pub(super) async fn write_own(
        &mut self,
        bytes: &[u8],
        stall_limit: Duration,
    ) -> std::io::Result<()> {
        let outbound = &self.env.outbound;
        let _turn = outbound.direct().then(|| outbound.write_turn());
        if let Some(rest) = outbound.take_remainder() {
            write_all(&mut self.stream, &rest, stall_limit).await?;
            outbound.written(rest.len());
        }
        write_all(&mut self.stream, bytes, stall_limit).await
    }

    /// Sends a close frame and FIN, then reads and discards whatever the
    /// client still sends until its EOF (bounded by [`CLOSE_LINGER`] and
    /// [`CLOSE_DRAIN_MAX_BYTES`]). Closing a socket with unread bytes makes
    /// the kernel answer with a reset, and a reset destroys the close frame
    /// in the client's receive queue: a client still sending (its message
    /// went over `max_message`, a protocol error, the drain) would never
    /// learn why it was closed. RFC 6455 §7.1.1.
    pub(super) async fn close_and_linger(&mut self, code: u16, reason: &str) {
        // No direct writes after the close frame.
        self.env.outbound.end_direct();
        let frame = encode::close_frame(code, reason);
        if self.write_own(&frame, CLOSE_LINGER).await.is_err() {
            return;
        }
        self.stream.shutdown_write();
        if self.decoder.peer_closed() {
            // The client's close came first: it sends nothing more.
            return;
        }
        let _ = tokio::time::timeout(CLOSE_LINGER, self.discard_until_eof()).await;
    }

    /// A receive buffer is held only while bytes are read (see
    /// `drop_buffer`).
    pub(super) async fn discard_until_eof(&mut self) {
        self.drop_buffer();
        let mut discarded = 0;
        while discarded < CLOSE_DRAIN_MAX_BYTES {
            if self.stream.readable().await.is_err() {
                return;
            }
            let buf = self.buf.get_or_insert_with(|| self.env.pool.take(false));
            match self.stream.read(&mut buf[HEADROOM_BYTES..]) {
                Ok(0) => return,
                Ok(n) => discarded += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.drop_buffer(),
                Err(_) => return,
            }
        }
    }
}

/// Takes up to [`OUTBOUND_BATCH`] queued messages (the consumer holds the
/// write turn when direct writes are on): their frames, how many were
/// taken, and what follows them (a queued close or drain ends the batch).
pub(crate) fn take_queued(outbound: &Outbound) -> (Vec<bytes::Bytes>, usize, Flow) {
    let mut frames = Vec::new();
    let mut taken = 0;
    while frames.len() < OUTBOUND_BATCH {
        let Some(msg) = outbound.try_recv() else {
            break;
        };
        taken += 1;
        match msg {
            OutMsg::Frames(f) => frames.push(f),
            OutMsg::Close(code, reason) => return (frames, taken, Flow::Close(code, reason)),
            OutMsg::Drain => return (frames, taken, Flow::Drain),
        }
    }
    (frames, taken, Flow::Continue)
}

/// Writes and flushes `bytes`; gives up if the socket takes none of them
/// for `stall_limit` (see [`crate::socket::unless_stalled_poll`]).
pub(super) async fn write_all<T: Transport>(
    stream: &mut T,
    bytes: &[u8],
    stall_limit: Duration,
) -> std::io::Result<()> {
    let mut sent = 0;
    unless_stalled_poll(stall_limit, |cx| {
        poll_write_all(&mut stream.writer(), bytes, &mut sent, cx)
    })
    .await
}
