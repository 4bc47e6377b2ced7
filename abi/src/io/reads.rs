//! The real-time reads of a guest route with `realtime = true`
//! (history-read and presence-read, commands 15 and 16, answered by events
//! 10 and 11): their meta and byte layouts, as the table in [`super`]
//! gives them.

use super::split_tag;

/// A history-read's meta: tag, limit, newest first, channel; None when it
/// does not follow the layout (the channel must be UTF-8 and not empty).
pub fn split_history_read(meta: &[u8]) -> Option<(u64, u32, bool, &str)> {
    let (tag, rest) = split_tag(meta)?;
    let (limit, rest) = rest.split_first_chunk::<4>()?;
    let (&reverse, channel) = rest.split_first()?;
    if reverse > 1 || channel.is_empty() {
        return None;
    }
    let channel = core::str::from_utf8(channel).ok()?;
    Some((tag, u32::from_le_bytes(*limit), reverse == 1, channel))
}

/// A presence-read's meta: tag and channel (UTF-8, not empty).
pub fn split_presence_read(meta: &[u8]) -> Option<(u64, &str)> {
    let (tag, channel) = split_tag(meta)?;
    if channel.is_empty() {
        return None;
    }
    Some((tag, core::str::from_utf8(channel).ok()?))
}

/// Reads a u32 length then that many bytes.
fn split_sized(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = bytes.split_first_chunk::<4>()?;
    let len = u32::from_le_bytes(*len) as usize;
    (len <= rest.len()).then(|| rest.split_at(len))
}

/// A successful history event's answer: the stream's position and the
/// publications read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryAnswer<'a> {
    /// The channel's offset now (its last publication's).
    pub offset: u64,
    /// The stream's epoch (changes when its history was lost).
    pub epoch: &'a str,
    /// The publications, in the order read.
    pub publications: Publications<'a>,
}

/// The publications of a [`HistoryAnswer`]: (offset, data as JSON text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Publications<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Publications<'a> {
    type Item = (u64, &'a str);

    fn next(&mut self) -> Option<(u64, &'a str)> {
        let (offset, rest) = split_tag(self.rest)?;
        let (data, rest) = split_sized(rest)?;
        self.rest = rest;
        // UTF-8 checked by split_history.
        Some((offset, core::str::from_utf8(data).unwrap_or_default()))
    }
}

/// A history event's bytes: the tag and, for code 0, the answer (checked
/// whole, so walking its publications cannot fail); None when they do not
/// follow the layout.
pub fn split_history(code: u16, bytes: &[u8]) -> Option<(u64, Result<HistoryAnswer<'_>, u16>)> {
    let (tag, rest) = split_tag(bytes)?;
    if code != 0 {
        return Some((tag, Err(code)));
    }
    let (offset, rest) = split_tag(rest)?;
    let (epoch, mut walk) = split_sized(rest)?;
    let epoch = core::str::from_utf8(epoch).ok()?;
    let publications = walk;
    while !walk.is_empty() {
        let (_, after) = split_tag(walk)?;
        let (data, after) = split_sized(after)?;
        core::str::from_utf8(data).ok()?;
        walk = after;
    }
    Some((
        tag,
        Ok(HistoryAnswer {
            offset,
            epoch,
            publications: Publications { rest: publications },
        }),
    ))
}

/// One member of a presence answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member<'a> {
    /// Its connection's client id.
    pub client: &'a str,
    /// Its user ("" for anonymous).
    pub user: &'a str,
    /// Its connection token's `info` claim, JSON text ("" for none).
    pub conn_info: &'a str,
}

/// The members of a successful presence event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Members<'a> {
    rest: &'a [u8],
}

impl<'a> Members<'a> {
    fn split(bytes: &'a [u8]) -> Option<(Member<'a>, &'a [u8])> {
        let (client, rest) = split_sized(bytes)?;
        let (user, rest) = split_sized(rest)?;
        let (info, rest) = split_sized(rest)?;
        let member = Member {
            client: core::str::from_utf8(client).ok()?,
            user: core::str::from_utf8(user).ok()?,
            conn_info: core::str::from_utf8(info).ok()?,
        };
        Some((member, rest))
    }
}

impl<'a> Iterator for Members<'a> {
    type Item = Member<'a>;

    fn next(&mut self) -> Option<Member<'a>> {
        let (member, rest) = Members::split(self.rest)?;
        self.rest = rest;
        Some(member)
    }
}

/// A presence event's bytes: the tag and, for code 0, the members
/// (checked whole); None when they do not follow the layout.
pub fn split_presence(code: u16, bytes: &[u8]) -> Option<(u64, Result<Members<'_>, u16>)> {
    let (tag, rest) = split_tag(bytes)?;
    if code != 0 {
        return Some((tag, Err(code)));
    }
    let mut walk = rest;
    while !walk.is_empty() {
        walk = Members::split(walk)?.1;
    }
    Some((tag, Ok(Members { rest })))
}

#[cfg(feature = "alloc")]
pub use owned::*;

#[cfg(feature = "alloc")]
mod owned {
    use alloc::vec::Vec;

    fn sized(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }

    /// Append a history-read's meta.
    pub fn encode_history_read(
        out: &mut Vec<u8>,
        tag: u64,
        limit: u32,
        reverse: bool,
        channel: &str,
    ) {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&limit.to_le_bytes());
        out.push(reverse as u8);
        out.extend_from_slice(channel.as_bytes());
    }

    /// Append a presence-read's meta.
    pub fn encode_presence_read(out: &mut Vec<u8>, tag: u64, channel: &str) {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(channel.as_bytes());
    }

    /// Append a successful history event's bytes: `tag`, the stream's
    /// position, then each (offset, data).
    pub fn encode_history<'p>(
        out: &mut Vec<u8>,
        tag: u64,
        offset: u64,
        epoch: &str,
        publications: impl IntoIterator<Item = (u64, &'p [u8])>,
    ) {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        sized(out, epoch.as_bytes());
        for (offset, data) in publications {
            out.extend_from_slice(&offset.to_le_bytes());
            sized(out, data);
        }
    }

    /// Append a successful presence event's bytes: `tag`, then each
    /// (client, user, conn info).
    pub fn encode_presence<'m>(
        out: &mut Vec<u8>,
        tag: u64,
        members: impl IntoIterator<Item = (&'m str, &'m str, &'m [u8])>,
    ) {
        out.extend_from_slice(&tag.to_le_bytes());
        for (client, user, info) in members {
            sized(out, client.as_bytes());
            sized(out, user.as_bytes());
            sized(out, info);
        }
    }
}
