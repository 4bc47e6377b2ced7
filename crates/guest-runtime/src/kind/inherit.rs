//! What a version inherits: before a deploy or rollback makes a program
//! serve, every live connection's attachment of the route (gathered from
//! the workers by `census`) goes through the program's optional
//! `weir:gateway/state` export (`check-state`) on a fresh instance. If
//! some would not decode, the change is refused with their count unless
//! the operator resets state; a component without the export is let
//! through with a warning (its state was not checked).

use crate::kind::census::Gathered;
use crate::runtime::abi::STATE_INTERFACE;
use crate::{GuestError, GuestRoute, Program};
use tracing::warn;

/// Attachment bytes handed to one `check-state` call at most (one
/// attachment larger than this goes alone): the call runs within the
/// route's memory and deadline like any other.
pub(crate) const STATE_CHECK_CHUNK_BYTES: usize = 256 << 10;
/// Attachments per `check-state` call at most.
pub(crate) const STATE_CHECK_CHUNK_ATTACHMENTS: usize = 1024;

/// What a deploy or rollback found in the state it inherits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inherited {
    /// Live connections with state (an attachment).
    pub live: usize,
    /// Of those, the connections the new version cannot read: they start
    /// from their state's `Default` (only with `reset_state`; otherwise
    /// the change was refused).
    pub reset: usize,
    /// The program exports `check-state` (false: nothing was checked).
    pub checked: bool,
}

impl GuestRoute {
    /// Checks that `program` reads the state of every live connection of
    /// the route. Unreadable state refuses the change
    /// ([`GuestError::StateWouldBeLost`]) unless `reset_state`. Blocks
    /// while the workers answer: call it off the workers.
    pub fn check_inherited(
        &self,
        program: &Program,
        reset_state: bool,
    ) -> Result<Inherited, GuestError> {
        let route = program.route().to_string();
        if !program.checks_state() {
            warn!(
                route,
                version = program.version(),
                "the component does not export {STATE_INTERFACE} (built with an older SDK, or \
                 for weir:gateway 0.3.0): the state of live connections was not checked"
            );
            return Ok(Inherited::default());
        }
        let gathered =
            self.census
                .gather(&self.wakers())
                .map_err(|e| GuestError::StateUnchecked {
                    route: route.clone(),
                    detail: e.to_string(),
                })?;
        if gathered.unchecked > 0 {
            warn!(
                route,
                unchecked = gathered.unchecked,
                "connections' state over the census budget was not checked"
            );
        }
        let (unreadable, first) = match program.trial_decode(&gathered) {
            Ok(found) => found,
            Err(detail) if reset_state => {
                warn!(route, error = %detail, "check-state failed; resetting every connection's state as asked");
                (gathered.live, Some(detail))
            }
            Err(detail) => return Err(GuestError::StateUnchecked { route, detail }),
        };
        if unreadable > 0 && !reset_state {
            return Err(GuestError::StateWouldBeLost {
                route,
                version: program.version(),
                unreadable,
                live: gathered.live,
                first: first.unwrap_or_default(),
            });
        }
        if unreadable > 0 {
            warn!(
                route,
                version = program.version(),
                reset = unreadable,
                live = gathered.live,
                first = first.as_deref().unwrap_or(""),
                "state reset as asked: these connections start from their state's Default"
            );
        }
        Ok(Inherited {
            live: gathered.live,
            reset: unreadable,
            checked: true,
        })
    }
}

impl Program {
    /// Whether the component exports [`STATE_INTERFACE`].
    pub(crate) fn checks_state(&self) -> bool {
        self.state_export.is_some()
    }

    /// Runs `check-state` over `gathered` on a fresh instance: how many
    /// connections hold state it cannot read, and the first error. `Err`:
    /// the check itself failed (instantiation, trap, deadline, a wrong
    /// answer).
    pub(crate) fn trial_decode(
        &self,
        gathered: &Gathered,
    ) -> Result<(usize, Option<String>), String> {
        let Some(export) = &self.state_export else {
            return Ok((0, None));
        };
        let mut store = self.new_store();
        let instance = self
            .instance_pre()
            .instantiate(&mut store)
            .map_err(|e| format!("the component fails to start: {e:#}"))?;
        let check = instance
            .get_typed_func::<(&[Vec<u8>],), (Vec<Option<String>>,)>(&mut store, export)
            .map_err(|e| format!("{STATE_INTERFACE} check-state has another type: {e:#}"))?;
        let (mut unreadable, mut first) = (0, None);
        let mut start = 0;
        while start < gathered.attachments.len() {
            let end = chunk_end(&gathered.attachments, start);
            let chunk = &gathered.attachments[start..end];
            store.set_epoch_deadline(self.deadline_ticks);
            let (answers,) = check
                .call(&mut store, (chunk,))
                .map_err(|e| format!("check-state failed: {e:#}"))?;
            if answers.len() != chunk.len() {
                return Err(format!(
                    "check-state answered {} results for {} attachments",
                    answers.len(),
                    chunk.len()
                ));
            }
            for (answer, holders) in answers.into_iter().zip(&gathered.holders[start..end]) {
                if let Some(error) = answer {
                    unreadable += holders;
                    first.get_or_insert(error);
                }
            }
            start = end;
        }
        Ok((unreadable, first))
    }
}

/// Where the chunk that starts at `start` ends.
fn chunk_end(attachments: &[Vec<u8>], start: usize) -> usize {
    let mut bytes = 0;
    let mut end = start;
    while end < attachments.len() && end - start < STATE_CHECK_CHUNK_ATTACHMENTS {
        bytes += attachments[end].len();
        if bytes > STATE_CHECK_CHUNK_BYTES && end > start {
            break;
        }
        end += 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_bounded_in_bytes_and_count_but_never_empty() {
        let big = vec![vec![0u8; STATE_CHECK_CHUNK_BYTES + 1]; 2];
        assert_eq!(chunk_end(&big, 0), 1);
        assert_eq!(chunk_end(&big, 1), 2);
        let small = vec![vec![1u8; 4]; STATE_CHECK_CHUNK_ATTACHMENTS + 5];
        assert_eq!(chunk_end(&small, 0), STATE_CHECK_CHUNK_ATTACHMENTS);
        assert_eq!(
            chunk_end(&small, STATE_CHECK_CHUNK_ATTACHMENTS),
            small.len()
        );
        let half = vec![vec![2u8; STATE_CHECK_CHUNK_BYTES / 2]; 3];
        assert_eq!(chunk_end(&half, 0), 2);
    }
}
