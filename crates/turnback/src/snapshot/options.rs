//! How a snapshot is taken: its kind and turn, and what its caller may do meanwhile
//! (cancel it, follow its progress, ask for a full walk).
//!
//! Invariant: once the cancel flag is set, nothing of the snapshot is committed: every
//! phase that checks [`cancelled`] stops, and the committing transaction checks it last.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, ErrorCode, Result};
use crate::snapshot::SnapshotKind;

/// How to take a snapshot.
#[derive(Clone, Copy, Default)]
pub(crate) struct TakeOptions<'a> {
    /// Why.
    pub kind: Option<SnapshotKind>,
    /// The turn it belongs to.
    pub turn_id: Option<&'a str>,
    /// Checked between batches and, finally, inside the committing transaction: once set,
    /// the snapshot is abandoned and nothing of it is committed (`cancelled` error).
    pub cancel: Option<&'a AtomicBool>,
    /// Told, after each batch, the bytes read so far and the bytes to read in all.
    pub progress: Option<&'a (dyn Fn(u64, u64) + Sync)>,
    /// Walk the whole tree even if the watcher could say what changed.
    pub full: bool,
}

impl std::fmt::Debug for TakeOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TakeOptions").field("kind", &self.kind).field("turn_id", &self.turn_id).finish()
    }
}

/// `cancelled` once the snapshot's cancel flag is set.
pub(super) fn cancelled(opts: &TakeOptions<'_>) -> Result<()> {
    match opts.cancel {
        Some(flag) if flag.load(Ordering::SeqCst) => {
            Err(Error::new(ErrorCode::Cancelled, "cancelled; nothing of the snapshot was recorded"))
        }
        _ => Ok(()),
    }
}
