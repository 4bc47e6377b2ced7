//! Walking a checked answer: [`CommandIter`] turns each header that
//! passed [`parse_commands`](super::parse_commands) into a typed
//! [`Command`], without checking again.

use super::*;

/// Iterator over a [`CommandList`]; yields one [`Command`] per header.
#[derive(Debug, Clone)]
pub struct CommandIter<'a> {
    pub(super) headers: core::slice::Iter<'a, [u8; N]>,
    pub(super) data: &'a [u8],
}

impl<'a> CommandIter<'a> {
    /// A header that passed [`check`] against `self.data`, as a command.
    fn view(&self, c: &CommandHeader) -> Command<'a> {
        let data = self.data;
        let bytes = |offset: u32, len: u32| {
            let start = offset as usize;
            // In range: checked by parse_commands.
            &data[start..start + len as usize]
        };
        let payload = bytes(c.offset, c.len);
        // SAFETY: `check` accepted this header, so its topic is UTF-8 for
        // every kind that reads it here, and `data` is unchanged since
        // (borrowed immutably, or private to a CommandBuf).
        let topic = || unsafe { checked_str(bytes(c.topic_offset, c.topic_len)) };
        let conn = c.conn;
        match CommandKind::from_byte(c.kind) {
            Some(CommandKind::SendText) => Command::Send {
                conn,
                text: true,
                payload,
            },
            Some(CommandKind::SendBinary) => Command::Send {
                conn,
                text: false,
                payload,
            },
            Some(CommandKind::Close) => Command::Close {
                conn,
                code: if sendable_close_code(c.code) {
                    c.code
                } else {
                    FALLBACK_CLOSE_CODE
                },
                // SAFETY: as for the topic: `check` found the reason UTF-8.
                reason: short_reason(unsafe { checked_str(payload) }),
            },
            Some(kind @ (CommandKind::PublishText | CommandKind::PublishBinary)) => {
                Command::Publish {
                    topic: topic(),
                    text: kind == CommandKind::PublishText,
                    payload,
                    exclude: (conn != 0).then_some(conn),
                }
            }
            Some(CommandKind::Subscribe) => Command::Subscribe {
                conn,
                topic: topic(),
            },
            Some(CommandKind::Unsubscribe) => Command::Unsubscribe {
                conn,
                topic: topic(),
            },
            Some(CommandKind::SetAttachment) => Command::SetAttachment {
                conn,
                attachment: payload,
            },
            Some(kind) => {
                let meta = bytes(c.topic_offset, c.topic_len);
                let u64_at = |at: usize| {
                    let mut n = [0u8; 8];
                    n.copy_from_slice(&meta[at..at + 8]);
                    u64::from_le_bytes(n)
                };
                // Lengths checked by parse_commands (`check`).
                match kind {
                    CommandKind::HttpRequest => Command::HttpRequest {
                        conn,
                        tag: u64_at(0),
                        // SAFETY: `check` found the head UTF-8.
                        head: unsafe { checked_str(&meta[8..]) },
                        body: payload,
                    },
                    CommandKind::SetTimer => Command::SetTimer {
                        conn,
                        tag: u64_at(0),
                        delay_ms: u64_at(8),
                    },
                    CommandKind::CancelTimer => Command::CancelTimer {
                        conn,
                        tag: u64_at(0),
                    },
                    CommandKind::KvSet => Command::KvSet {
                        key: &meta[8..],
                        value: payload,
                        ttl_ms: u64_at(0),
                    },
                    CommandKind::KvDelete => Command::KvDelete { key: meta },
                    CommandKind::ForwardText | CommandKind::ForwardBinary => Command::Forward {
                        conn,
                        direction: match Direction::from_byte(c.reserved) {
                            Some(direction) => direction,
                            None => unreachable!("checked by parse_commands"),
                        },
                        text: kind == CommandKind::ForwardText,
                        payload,
                    },
                    CommandKind::RtSubscribeVerdict => Command::RtSubscribeVerdict {
                        conn,
                        call: u64_at(0),
                        code: c.code,
                        authorise: c.reserved == RT_AUTHORISE,
                        // SAFETY: `check` accepted this header: its payload is UTF-8.
                        payload: unsafe { checked_str(payload) },
                    },
                    CommandKind::RtPublishVerdict => Command::RtPublishVerdict {
                        conn,
                        call: u64_at(0),
                        verdict: match c.reserved {
                            RT_PASS => RtVerdict::Pass,
                            RT_REPLACE => RtVerdict::Replace(payload),
                            _ => RtVerdict::Drop(c.code),
                        },
                    },
                    CommandKind::HistoryRead => match crate::io::split_history_read(meta) {
                        Some((tag, limit, reverse, channel)) => Command::HistoryRead {
                            conn,
                            tag,
                            limit,
                            reverse,
                            channel,
                        },
                        None => unreachable!("checked by parse_commands"),
                    },
                    CommandKind::PresenceRead => match crate::io::split_presence_read(meta) {
                        Some((tag, channel)) => Command::PresenceRead { conn, tag, channel },
                        None => unreachable!("checked by parse_commands"),
                    },
                    _ => unreachable!("every earlier kind is matched above"),
                }
            }
            None => unreachable!("parse_commands refused unknown kinds"),
        }
    }
}

impl<'a> Iterator for CommandIter<'a> {
    type Item = Command<'a>;

    fn next(&mut self) -> Option<Command<'a>> {
        let h = self.headers.next()?;
        Some(self.view(&CommandHeader::decode(h)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.headers.size_hint()
    }
}

impl ExactSizeIterator for CommandIter<'_> {}
