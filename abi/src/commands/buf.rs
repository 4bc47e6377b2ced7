//! [`CommandBuf`]: a checked answer that owns its buffers (feature
//! `alloc`), so the host keeps and walks it without parsing again.

use alloc::vec::Vec;

use super::*;

/// A validated answer that owns the guest's two buffers, so the host can
/// keep it (and walk it) without parsing again. The buffers are private:
/// the only change allowed after the parse is
/// [`replace_with_close`](CommandBuf::replace_with_close), which keeps
/// the answer valid.
#[derive(Debug, Clone, Default)]
pub struct CommandBuf {
    headers: Vec<u8>,
    data: Vec<u8>,
    set_attachments: usize,
}

impl CommandBuf {
    /// An answer with no commands.
    pub fn new() -> Self {
        Self::default()
    }

    /// Check `headers` and `data` as [`parse_commands`] does and keep them.
    pub fn parse(headers: Vec<u8>, data: Vec<u8>) -> Result<Self, AbiError> {
        let set_attachments = parse_commands(&headers, &data)?.set_attachments;
        Ok(CommandBuf {
            headers,
            data,
            set_attachments,
        })
    }

    /// The checked commands (no second check: the buffers have not
    /// changed since [`parse`](Self::parse)).
    pub fn list(&self) -> CommandList<'_> {
        let (headers, rest) = self.headers.as_chunks::<N>();
        debug_assert!(rest.is_empty(), "parse checked whole headers");
        CommandList {
            headers,
            data: &self.data,
            set_attachments: self.set_attachments,
        }
    }

    /// Turn command `index` into `close(conn, code)` with no reason
    /// (the host does this to an attachment over its route's cap: it
    /// costs that connection, not the batch). `code` is made sendable
    /// like any guest close code.
    ///
    /// # Panics
    ///
    /// If `index` is not below [`CommandList::len`].
    pub fn replace_with_close(&mut self, index: usize, code: u16) {
        let at = index * COMMAND_HEADER_BYTES;
        let slot: &mut [u8; N] = (&mut self.headers[at..at + COMMAND_HEADER_BYTES])
            .try_into()
            .expect("a slice of exactly one header");
        let old = CommandHeader::decode(slot);
        if old.kind == CommandKind::SetAttachment as u8 {
            self.set_attachments -= 1;
        }
        *slot = CommandHeader {
            conn: old.conn,
            kind: CommandKind::Close as u8,
            code,
            ..CommandHeader::default()
        }
        .encode();
    }
}
