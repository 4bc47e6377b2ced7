//! What the store reads and writes as bytes: a history read's reply, the
//! messages on a channel's Redis channel (publications, joins and leaves),
//! and a client's info inside them.

use super::*;

/// A stream entry's field and its value.
type Field = (Vec<u8>, Vec<u8>);

/// `{top, epoch, {{id, {field, value, ...}}, ...}}` from [`READ`].
pub(super) fn parse_read(value: Value) -> Option<Read> {
    let Value::Array(parts) = value else {
        return None;
    };
    let mut parts = parts.into_iter();
    let top: u64 = redis::from_redis_value(parts.next()?).ok()?;
    let epoch: String = redis::from_redis_value(parts.next()?).ok()?;
    let Value::Array(entries) = parts.next()? else {
        return None;
    };
    let now = Instant::now();
    let mut publications = Vec::with_capacity(entries.len());
    for entry in entries {
        let (id, fields): (String, Vec<Field>) = redis::from_redis_value(entry).ok()?;
        let offset: u64 = id.split('-').next()?.parse().ok()?;
        let mut publication = Publication {
            offset,
            data: Bytes::new(),
            info: None,
            time: now,
        };
        for (field, value) in fields {
            match field.as_slice() {
                b"d" => publication.data = Bytes::from(value),
                b"i" if !value.is_empty() => publication.info = decode_info(&value).map(Arc::new),
                _ => {}
            }
        }
        publications.push(publication);
    }
    Some(Read {
        top: StreamPosition { offset: top, epoch },
        publications,
    })
}

/// A message from the channel's Redis channel.
#[derive(Debug)]
pub enum Message {
    Publication {
        position: StreamPosition,
        publication: Publication,
    },
    Join(ClientInfo),
    Leave(ClientInfo),
    /// Members added or refreshed in the channel's presence (by a join or
    /// a node's refresh, [`PRESENCE_ADD`]).
    Present(Vec<ClientInfo>),
    /// A client removed from the channel's presence ([`PRESENCE_REMOVE`]).
    Absent(String),
}

/// Reads a message published by [`PUBLISH`] (`p<offset>;<epoch>;<info
/// length>;<info><data>`), by [`RedisStore::join_leave`] (`j` or `l` and
/// an info), by [`PRESENCE_ADD`] (`a` and infos one after another) or by
/// [`PRESENCE_REMOVE`] (`r` and a client id).
pub(crate) fn decode_message(payload: &Bytes) -> Option<Message> {
    let (&kind, rest) = payload.split_first()?;
    match kind {
        b'p' => {
            let mut at = 1;
            let mut field = || {
                let end = at + payload[at..].iter().position(|&b| b == b';')?;
                let text = std::str::from_utf8(&payload[at..end]).ok()?;
                at = end + 1;
                Some(text.to_string())
            };
            let offset: u64 = field()?.parse().ok()?;
            let epoch = field()?;
            let info_len: usize = field()?.parse().ok()?;
            let info_end = at.checked_add(info_len).filter(|&e| e <= payload.len())?;
            let info = match info_len {
                0 => None,
                _ => Some(Arc::new(decode_info(&payload[at..info_end])?)),
            };
            Some(Message::Publication {
                position: StreamPosition {
                    offset,
                    epoch: epoch.clone(),
                },
                publication: Publication {
                    offset,
                    data: payload.slice(info_end..),
                    info,
                    time: Instant::now(),
                },
            })
        }
        b'j' => Some(Message::Join(decode_info(rest)?)),
        b'l' => Some(Message::Leave(decode_info(rest)?)),
        b'a' => {
            let mut members = Vec::new();
            let mut raw = rest;
            while !raw.is_empty() {
                let (info, after) = decode_info_prefix(raw)?;
                members.push(info);
                raw = after;
            }
            Some(Message::Present(members))
        }
        b'r' => Some(Message::Absent(String::from_utf8(rest.to_vec()).ok()?)),
        _ => None,
    }
}

/// A member as Redis keeps it: each field as `<length>:<bytes>`, `-:` for
/// an absent one (client, user, connection info, channel info).
pub(crate) fn encode_info(info: &ClientInfo) -> Vec<u8> {
    let mut out = Vec::new();
    let mut field = |v: Option<&[u8]>| match v {
        Some(v) => {
            out.extend_from_slice(format!("{}:", v.len()).as_bytes());
            out.extend_from_slice(v);
        }
        None => out.extend_from_slice(b"-:"),
    };
    field(Some(info.client.as_bytes()));
    field(Some(info.user.as_bytes()));
    field(info.conn_info.as_deref());
    field(info.chan_info.as_deref());
    out
}

pub(crate) fn decode_info(raw: &[u8]) -> Option<ClientInfo> {
    decode_info_prefix(raw).map(|(info, _)| info)
}

/// The info at the start of `raw`, and what follows it.
fn decode_info_prefix(mut raw: &[u8]) -> Option<(ClientInfo, &[u8])> {
    let mut field = || -> Option<Option<Vec<u8>>> {
        let colon = raw.iter().position(|&b| b == b':')?;
        let len = &raw[..colon];
        if len == b"-" {
            raw = &raw[colon + 1..];
            return Some(None);
        }
        let len: usize = std::str::from_utf8(len).ok()?.parse().ok()?;
        let end = (colon + 1).checked_add(len).filter(|&e| e <= raw.len())?;
        let value = raw[colon + 1..end].to_vec();
        raw = &raw[end..];
        Some(Some(value))
    };
    let client = String::from_utf8(field()??).ok()?;
    let user = String::from_utf8(field()??).ok()?;
    let conn_info = field()?.map(Bytes::from);
    let chan_info = field()?.map(Bytes::from);
    Some((
        ClientInfo {
            client,
            user,
            conn_info,
            chan_info,
        },
        raw,
    ))
}
