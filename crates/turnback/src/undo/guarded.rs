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
//!    (`rollback-before-swap`, `rewind-before-swap` before the first), batched
//!    ([`batch`](crate::undo::batch): removals first, then the new files, written and
//!    synced together, each swapped in; `rollback-written`, `rewind-written` once all are
//!    made; then every directory touched synced once); a path that moved meanwhile, or
//!    that something now stands in the way of, is left as it is and handed back to the
//!    plan to re-classify — one refused path never stops the others; an I/O failure (a
//!    full disk) stops the undo: the journal records `OperationFailed` and the error says
//!    what was written and how to take it back;
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
use crate::checkpoint::{self, PlannedWrite};
use crate::error::{Error, ErrorCode, Hint, Result};
use crate::fs::files::Swap;
use crate::fs::lock;
use crate::session::Session;
use crate::session::workspace::Workspace;
use crate::storage::store::Store;
use crate::undo::batch;
pub(crate) use crate::undo::batch::{Expected, Intended, Write};

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
    /// Whether the store already holds every image of the writes — what they replace and
    /// what they put — so the undo's checkpoint keeps nothing new (a rewind: both sides
    /// are in its snapshots). Otherwise what the writes replace is kept anew.
    fn images_held(&self) -> bool {
        false
    }
    /// Told the outcome of write `index` (`None`: made) once it was tried.
    fn written(&mut self, root: &Path, index: usize, refused: Option<Refused>);
    /// Step 8: what the plan does once every write was tried, under the lock; `checkpoint`
    /// is the undo's own checkpoint (`None`: nothing was to be written).
    ///
    /// # Errors
    /// Whatever it fails with (the writes stand; the undo's checkpoint takes them back).
    fn finish(&mut self, checkpoint: Option<&str>) -> Result<()> {
        let _ = checkpoint;
        Ok(())
    }
}

/// Where an undo happens, and the names of its failpoints.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub store: &'a Store,
    pub workspace: &'a Workspace,
    pub session: &'a Session,
    /// Hit once the undo's checkpoint is committed, before the first write, and once
    /// every write was made (before the directories are synced).
    pub failpoints: [&'static str; 3],
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
        plan.finish(None)?;
        return Ok((plan, None));
    }
    let kept = if plan.images_held() { 0 } else { not_held(target.store, &writes)? };
    let id = record(target, &writes, kept)?;
    failpoint::hit(target.failpoints[0]);
    failpoint::hit(target.failpoints[1]);
    let outcomes = match batch::write_all(
        target.store.keys(),
        target.store.kv(),
        &target.workspace.root,
        &writes,
        &id,
        target.failpoints[2],
    ) {
        Ok(outcomes) => outcomes,
        Err(e) => {
            checkpoint::finish(target.store, &id, true)?;
            return Err(unsynced(e, writes.len(), &id));
        }
    };
    let made = outcomes.iter().filter(|o| matches!(o, Some(Ok(Swap::Done)))).count();
    let identities = written_identities(&target.workspace.root, &writes, &outcomes);
    let mut failure = None;
    for (index, outcome) in outcomes.into_iter().enumerate() {
        let refused = match outcome {
            Some(Ok(Swap::Done)) => None,
            Some(Ok(Swap::Changed)) => Some(Refused::Moved),
            Some(Err(e)) if batch::is_obstacle(e.code) => Some(Refused::Obstacle(e.code, e.message)),
            Some(Err(e)) => {
                failure.get_or_insert(e);
                continue;
            }
            None => continue,
        };
        plan.written(&target.workspace.root, index, refused);
    }
    if let Some(e) = failure {
        checkpoint::finish(target.store, &id, true)?;
        return Err(stopped(e, made, writes.len(), &id));
    }
    checkpoint::finish_written(target.store, &id, made == 0, &identities)?;
    plan.finish(Some(&id))?;
    Ok((plan, Some(id)))
}

/// The bytes of what `writes` replace that the store does not hold already (a file an
/// earlier snapshot or checkpoint holds costs the undo's checkpoint nothing new).
fn not_held(store: &Store, writes: &[Write]) -> Result<u64> {
    let mut kept = 0;
    for w in writes {
        if let crate::fs::files::Current::File { body, .. } = &w.current {
            // The plan's compare-and-swap digest is the content's id: no second hash.
            let id = match &w.expected {
                Expected::File { digest, .. } => crate::storage::content::ContentId::from_hex(digest),
                Expected::Absent => None,
            };
            let id = match id {
                Some(id) => id,
                None => crate::storage::body::id(store.keys(), body)?,
            };
            if !crate::storage::object::exists(store.kv(), &id)? {
                kept += body.size();
            }
        }
    }
    Ok(kept)
}

/// The device and inode of each file the undo wrote, read right after the writes: kept as
/// its checkpoint's post-image identities, so that a later rollback knows a file this undo
/// put back (another inode than the agent's, the agent's very bytes) for the agent's result.
fn written_identities(
    root: &Path,
    writes: &[batch::Write],
    outcomes: &[batch::Outcome],
) -> Vec<(crate::fs::relpath::RelPath, crate::fs::files::FileIdentity)> {
    writes
        .iter()
        .zip(outcomes)
        .filter(|(w, o)| matches!(o, Some(Ok(Swap::Done))) && matches!(w.intended, Intended::File { .. }))
        .filter_map(|(w, _)| {
            Some((w.path.clone(), crate::fs::files::open_parent(root, &w.path, false).ok()?.identity()?))
        })
        .collect()
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

/// The error of an undo that a failed write stopped, after `made` of `total` writes: the
/// failure itself (its code, message and cause kept), what was written, and how to take
/// that back.
fn stopped(mut e: Error, made: usize, total: usize, checkpoint_id: &str) -> Error {
    let after = if made == 0 {
        "nothing was changed".to_string()
    } else {
        format!("{made} of {total} path(s) were written before it")
    };
    e.message = format!("{}; the undo stopped there: {after}", e.message);
    let e = e.with_details(serde_json::json!({ "checkpointId": checkpoint_id, "written": made, "paths": total }));
    if made == 0 { e } else { e.with_hint(Hint::RollBack { checkpoint_id: checkpoint_id.to_string() }) }
}

/// The error of an undo whose writes were made but whose directories could not all be
/// synced: a power cut could still take some of them back.
fn unsynced(mut e: Error, total: usize, checkpoint_id: &str) -> Error {
    e.message = format!("{}; the undo's writes were made but not all are durable", e.message);
    e.with_details(serde_json::json!({ "checkpointId": checkpoint_id, "paths": total }))
        .with_hint(Hint::RollBack { checkpoint_id: checkpoint_id.to_string() })
}

/// Step 5: the undo's own checkpoint, committed before any write; `kept` is what it must
/// keep that the store does not hold already (what the caps are held to).
fn record(target: Target<'_>, writes: &[Write], kept: u64) -> Result<String> {
    let planned = writes
        .iter()
        .map(|w| PlannedWrite {
            path: w.path.clone(),
            current: w.current.clone(),
            intended: match &w.intended {
                Intended::File { body, .. } => Some(body.clone()),
                Intended::Absent => None,
            },
        })
        .collect();
    let round = crate::undo::round_reader(target.store, target.session);
    let origin = crate::undo::undo_origin(target.session, target.workspace, &round);
    Ok(checkpoint::record_before_writes(target.store, origin, &target.workspace.root, planned, kept)?.checkpoint_id)
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
