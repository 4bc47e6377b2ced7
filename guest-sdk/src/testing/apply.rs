//! How a [`TestRoute`] carries out its handler's commands, as the gateway
//! would: sends to inboxes, publishes to subscribers, closes recorded,
//! state saved under `attachment_max`, requests, reads and timers queued
//! for the test.

use super::*;

impl<H: Handler> TestRoute<H> {
    /// Apply one command as the gateway would; `batch` is the connection
    /// the batch was about.
    pub(super) fn apply(&mut self, batch: ConnectionId, command: Command<'_>) {
        match command {
            Command::Send {
                conn,
                text,
                payload,
            } => {
                if let Some(c) = open(&mut self.clients, conn) {
                    c.inbox.push_back(received(text, payload));
                }
            }
            Command::Close { conn, code, reason } => {
                if let Some(c) = open(&mut self.clients, conn) {
                    c.closed_by_handler = Some((code, reason.to_string()));
                    self.closing.push((conn, code, reason.to_string()));
                }
            }
            Command::Publish {
                topic,
                text,
                payload,
                exclude,
            } => {
                for (&id, c) in &mut self.clients {
                    let live = !c.gone && c.closed_by_handler.is_none();
                    if live && Some(id) != exclude && c.topics.contains(topic) {
                        c.inbox.push_back(received(text, payload));
                    }
                }
            }
            Command::Subscribe { conn, topic } => {
                if let Some(c) = open(&mut self.clients, conn) {
                    c.topics.insert(topic.to_string());
                }
            }
            Command::Unsubscribe { conn, topic } => {
                if let Some(c) = open(&mut self.clients, conn) {
                    c.topics.remove(topic);
                }
            }
            Command::SetAttachment { conn, attachment } => {
                if conn != batch {
                    // The gateway ignores (and logs) an attachment for a
                    // connection outside the batch.
                    eprintln!(
                        "weir-guest testing: attachment for {conn} outside its batch ignored"
                    );
                    return;
                }
                let max = self.attachment_max;
                let Some(c) = self.clients.get_mut(&conn).filter(|c| !c.gone) else {
                    return;
                };
                if attachment.len() > max {
                    eprintln!(
                        "weir-guest testing: attachment of {} bytes over attachment_max {max}; closing {conn} with 1011",
                        attachment.len()
                    );
                    if c.closed_by_handler.is_none() {
                        c.closed_by_handler = Some((1011, String::new()));
                        self.closing.push((conn, 1011, String::new()));
                    }
                    return;
                }
                c.attachment = attachment.to_vec();
            }
            Command::HttpRequest {
                conn,
                tag,
                head,
                body,
            } => {
                if conn != 0 && open(&mut self.clients, conn).is_none() {
                    return;
                }
                let (method, url, headers) = split_request_head(head)
                    .unwrap_or_else(|| panic!("request head {head:?} has no `METHOD URL`"));
                self.requests.push(SentRequest {
                    conn,
                    tag,
                    method: method.to_string(),
                    url: url.to_string(),
                    headers: headers
                        .map(|(n, v)| (n.to_string(), v.to_string()))
                        .collect(),
                    body: body.to_vec(),
                });
            }
            Command::SetTimer {
                conn,
                tag,
                delay_ms,
            } => {
                if conn == 0 || open(&mut self.clients, conn).is_some() {
                    self.timers
                        .insert((conn, tag), Duration::from_millis(delay_ms));
                }
            }
            Command::CancelTimer { conn, tag } => {
                self.timers.remove(&(conn, tag));
            }
            Command::KvSet { key, value, .. } => {
                let full = self
                    .kv_max_keys
                    .is_some_and(|max| self.kv.len() >= max && !self.kv.contains_key(key));
                if full {
                    self.kv_refused
                        .push((key.to_vec(), KvErrorReason::OverMaxKeys));
                } else {
                    self.kv.insert(key.to_vec(), value.to_vec());
                }
            }
            Command::KvDelete { key } => {
                self.kv.remove(key);
            }
            Command::Forward {
                conn,
                direction,
                text,
                payload,
            } => {
                if let Some(c) = open(&mut self.clients, conn) {
                    c.forwarded.push_back((direction, received(text, payload)));
                }
            }
            Command::RtSubscribeVerdict {
                call,
                code,
                authorise,
                payload,
                ..
            } => {
                let answer = RtAnswer::Subscribe(call, code, authorise, payload.to_string());
                self.rt_verdicts.push(answer);
            }
            Command::RtPublishVerdict { call, verdict, .. } => {
                let d = match verdict {
                    RtVerdict::Pass => PubDecision::Pass,
                    RtVerdict::Replace(data) => PubDecision::Replace(data.to_vec()),
                    RtVerdict::Drop(code) => PubDecision::Drop(code),
                };
                self.rt_verdicts.push(RtAnswer::Publish(call, d));
            }
            Command::HistoryRead {
                conn,
                tag,
                limit,
                reverse,
                channel,
            } => {
                if conn == 0 || open(&mut self.clients, conn).is_some() {
                    self.reads.push(SentRead {
                        conn,
                        tag,
                        channel: channel.to_string(),
                        limit: Some(limit),
                        reverse,
                    });
                }
            }
            Command::PresenceRead { conn, tag, channel } => {
                if conn == 0 || open(&mut self.clients, conn).is_some() {
                    self.reads.push(SentRead {
                        conn,
                        tag,
                        channel: channel.to_string(),
                        limit: None,
                        reverse: false,
                    });
                }
            }
        }
    }
}
