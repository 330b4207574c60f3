//! Guarded apply: the one loop that writes an undo (a rollback, a resolution, a rewind)
//! into a workspace.
//!
//! The steps, in order, each named as a failpoint where a crash test stops:
//! 1. take the workspace lock (turnback's writers to one workspace take turns);
//! 2. plan again, under the lock, from what is on disk now;
//! 3. if the caller names the plan it previewed, refuse (`conflict`, nothing changed)
//!    unless the plan made now has that id;
//! 4. let the plan finish its preparations (re-classify what moved, check the caller's
//!    choices can be carried out);
//! 5. commit the undo's own checkpoint — the real bytes of everything it will overwrite or
//!    delete, and the intended results — with the journal's dispatch, before any write
//!    (`rollback-committed`, `rewind-committed`): rolling that checkpoint back undoes the
//!    undo, whatever happens next;
//! 6. write each path with a compare-and-swap against the state the plan saw
//!    (`rollback-before-swap`, `rewind-before-swap`); a path that moved meanwhile, or that something now stands in
//!    the way of, is left as it is and handed back to the plan to re-classify — one
//!    refused path never stops the others; an I/O failure (a full disk) stops the undo:
//!    the journal records `OperationFailed` and the error says what was written and how
//!    to take it back;
//! 7. write the journal's terminal event (`OperationFailed` if nothing was written);
//! 8. let the plan finish, still under the lock, with what happened (write the side files
//!    of the caller's choices, cut a rewind's history) — also when nothing was to be
//!    written.
//!
//! Invariants: nothing in the workspace changes before step 5 is durable (steps 2-4 only
//! read and decide); no write replaces anything but the exact state the plan saw; an undo
//! that writes nothing records no checkpoint.

use std::path::Path;

use serde::Serialize;

use crate::base::failpoint;
use crate::base::hex::hex;
use crate::checkpoint::{self, PlannedWrite};
use crate::error::{Error, ErrorCode, Result};
use crate::fs::files::{self, Current, Expect, FileIdentity, Swap};
use crate::fs::lock;
use crate::fs::relpath::RelPath;
use crate::session::Session;
use crate::session::workspace::Workspace;
use crate::storage::store::Store;

/// What an undo did, in aggregate: the one outcome type of rollbacks and rewinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ResultType {
    /// Everything was taken back (or was back already).
    Full,
    /// Some of it was, some was left alone.
    Partial,
    /// Nothing could be.
    Blocked,
}

impl ResultType {
    /// The result of an undo that takes back `taken` paths or targets and leaves `left`
    /// alone: full if none is left, blocked if none is taken, partial otherwise.
    pub fn of(taken: usize, left: usize) -> Self {
        match (left, taken) {
            (0, _) => ResultType::Full,
            (_, 0) => ResultType::Blocked,
            _ => ResultType::Partial,
        }
    }
}

/// What must be at a path for its write to go ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expected {
    /// Nothing.
    Absent,
    /// A regular file with this keyed digest (and, when known, this inode).
    File { digest: String, inode: Option<u64> },
}

/// What a path is to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Intended {
    /// A file with these bytes and permission bits.
    File { bytes: Vec<u8>, mode: Option<u32> },
    /// Nothing.
    Absent,
}

/// One path an undo writes.
#[derive(Debug, Clone)]
pub(crate) struct Write {
    pub path: RelPath,
    pub expected: Expected,
    /// What is there, with its real bytes (kept in the undo's checkpoint).
    pub current: Current,
    pub intended: Intended,
    /// Missing parent directories are made (a file coming back where none is).
    pub make_parents: bool,
    /// An empty directory standing at the path gives way (one the undone turns put where
    /// the file was).
    pub clear_empty_dir: bool,
}

/// Why a write was not made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The path no longer held the state the plan saw; it was left exactly as found.
    Moved,
    /// Something stands in the way (a symlinked parent, a directory gone, unreadable):
    /// the error's code and message.
    Obstacle(ErrorCode, String),
}

/// A plan the engine can apply.
pub(crate) trait Plan {
    /// Its id: a digest of everything it depends on.
    fn plan_id(&self) -> &str;
    /// The writes, in the order they are to be made.
    fn writes(&self) -> Vec<Write>;
    /// Told the outcome of write `index` (`None`: made) once it was tried.
    fn written(&mut self, root: &Path, index: usize, refused: Option<Refused>);
    /// Step 8: what the plan does once every write was tried, under the lock.
    ///
    /// # Errors
    /// Whatever it fails with (the writes stand; the undo's checkpoint takes them back).
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Where an undo happens, and the names of its failpoints.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub store: &'a Store,
    pub workspace: &'a Workspace,
    pub session: &'a Session,
    /// Hit once the undo's checkpoint is committed, and before each write.
    pub failpoints: [&'static str; 2],
}

/// Applies the plan `make` makes under the workspace lock (see the module docs). With
/// `expected`, refuses unless the plan has that id. `prepare` runs after the check and
/// before the undo's checkpoint. Returns the plan, told every outcome, and the id of the
/// undo's checkpoint (`None`: nothing was to be written).
///
/// # Errors
/// `conflict` for a stale plan (nothing changed); `over-cap` if the undo's checkpoint
/// would break a cap; whatever `make` or `prepare` return; store errors.
pub(crate) fn apply<P: Plan>(
    target: Target<'_>,
    expected: Option<&str>,
    make: impl FnOnce() -> Result<P>,
    prepare: impl FnOnce(&mut P) -> Result<()>,
) -> Result<(P, Option<String>)> {
    let _turn = lock::workspace(&target.store.locks_dir(), &target.workspace.id)?;
    let mut plan = make()?;
    if let Some(expected) = expected
        && expected != plan.plan_id()
    {
        return Err(stale(expected, plan.plan_id()));
    }
    prepare(&mut plan)?;
    let writes = plan.writes();
    if writes.is_empty() {
        plan.finish()?;
        return Ok((plan, None));
    }
    let id = record(target, &writes)?;
    failpoint::hit(target.failpoints[0]);
    let mut made = 0;
    for (index, write) in writes.iter().enumerate() {
        failpoint::hit(target.failpoints[1]);
        let refused = match swap(target, write, &id) {
            Ok(Swap::Done) => None,
            Ok(Swap::Changed) => Some(Refused::Moved),
            Err(e) if is_obstacle(e.code) => Some(Refused::Obstacle(e.code, e.message)),
            Err(e) => {
                checkpoint::finish(target.store, &id, true)?;
                return Err(stopped(e, made, writes.len(), &id));
            }
        };
        made += usize::from(refused.is_none());
        plan.written(&target.workspace.root, index, refused);
    }
    checkpoint::finish(target.store, &id, made == 0)?;
    plan.finish()?;
    Ok((plan, Some(id)))
}

/// The refusal of an apply whose plan moved.
fn stale(expected: &str, now: &str) -> Error {
    Error::new(
        ErrorCode::Conflict,
        format!(
            "the workspace or the checkpoints changed since plan {expected} was made (it is now {now}); nothing was changed — preview again"
        ),
    )
    .with_details(serde_json::json!({ "expectedPlanId": expected, "currentPlanId": now }))
}

/// Errors that leave one path alone rather than stopping the undo: something about that
/// path stands in the way. An I/O failure (a full disk, a read-only or failing device) is
/// not one: it is no conflict with anyone's work and no choice resolves it, so it stops the
/// undo and is reported as what it is.
fn is_obstacle(code: ErrorCode) -> bool {
    matches!(code, ErrorCode::PathRejected | ErrorCode::NotFound | ErrorCode::Inaccessible)
}

/// The error of an undo that a failed write stopped, after `made` of `total` writes: the
/// failure itself (its code, message and cause kept), what was written, and how to take
/// that back.
fn stopped(mut e: Error, made: usize, total: usize, checkpoint_id: &str) -> Error {
    let after = if made == 0 {
        "nothing was changed".to_string()
    } else {
        format!("{made} of {total} path(s) were written before it; `turnback rollback {checkpoint_id}` takes them back")
    };
    e.message = format!("{}; the undo stopped there: {after}", e.message);
    e.with_details(serde_json::json!({ "checkpointId": checkpoint_id, "written": made, "paths": total }))
}

/// Step 5: the undo's own checkpoint, committed before any write.
fn record(target: Target<'_>, writes: &[Write]) -> Result<String> {
    let planned = writes
        .iter()
        .map(|w| PlannedWrite {
            path: w.path.clone(),
            current: w.current.clone(),
            intended: match &w.intended {
                Intended::File { bytes, .. } => Some(bytes.clone()),
                Intended::Absent => None,
            },
        })
        .collect();
    let round = crate::undo::round_reader(target.store, target.session);
    let origin = crate::undo::undo_origin(target.session, target.workspace, &round);
    Ok(checkpoint::record_before_writes(target.store, origin, &target.workspace.root, planned)?.checkpoint_id)
}

/// Step 6 for one path: a compare-and-swap against `write.expected`.
fn swap(target: Target<'_>, write: &Write, checkpoint_id: &str) -> Result<Swap> {
    let root = &target.workspace.root;
    let keys = target.store.keys();
    let temp = files::temp_name(&write.path, checkpoint_id);
    let matcher = |bytes: &[u8], identity: &FileIdentity| match &write.expected {
        Expected::File { digest, inode } => {
            *digest == hex(&keys.content_id(bytes)) && inode.is_none_or(|ino| ino == identity.inode)
        }
        Expected::Absent => false,
    };
    match &write.intended {
        Intended::File { bytes, mode } => {
            if write.clear_empty_dir {
                let _ = files::remove_empty_dir(root, &write.path);
            }
            let parent = match files::open_parent(root, &write.path, write.make_parents) {
                Ok(parent) => parent,
                Err(e) if e.code == ErrorCode::NotFound => return Ok(Swap::Changed),
                Err(e) => return Err(e),
            };
            let expect = match write.expected {
                Expected::Absent => Expect::Absent,
                Expected::File { .. } => Expect::File(&matcher),
            };
            parent.swap_in(&temp, bytes, *mode, &expect).map(|(swapped, _)| swapped)
        }
        Intended::Absent => match files::open_parent(root, &write.path, false) {
            Ok(parent) => parent.remove_if(&temp, &matcher),
            Err(e) if e.code == ErrorCode::NotFound => Ok(Swap::Done),
            Err(e) => Err(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_type_is_full_partial_or_blocked() {
        assert_eq!(ResultType::of(0, 0), ResultType::Full);
        assert_eq!(ResultType::of(3, 0), ResultType::Full);
        assert_eq!(ResultType::of(2, 1), ResultType::Partial);
        assert_eq!(ResultType::of(0, 1), ResultType::Blocked);
    }
}
