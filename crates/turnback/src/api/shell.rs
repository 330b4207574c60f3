//! Shell calls and sub-agents as checkpoints: a snapshot as an agent's shell command
//! starts opens its window, another as it finishes closes it, and the regular files that
//! differ between the two become one `shell` checkpoint — taken back by `rollback` like any
//! edit. A sub-agent's start and stop bound a window the same way; its `subagent`
//! checkpoint holds what no checkpoint made inside the window names.
//!
//! Invariants:
//! - A window opens only inside a running turn, only when a snapshot is cheap now
//!   ([`window_cost`]: the workspace's watcher answered the newest snapshot, or its last
//!   walk — the walk alone, not the reads or the commit — took at most [`CHEAP_WALK_MS`],
//!   or the tree has at most [`SMALL_TREE_FILES`] files);
//!   otherwise the call is recorded as before, its effects covered by the turn's snapshots.
//! - The checkpoint's images are the snapshots' own content (no copy is stored); its
//!   artifacts keep that content alive after the snapshots are pruned. Over a cap, it is
//!   recorded unprotected (digests only), as any checkpoint over a cap.
//! - Whatever changed inside the window is the window's: a person's edit or a background
//!   sub-agent's made meanwhile too. Rollback's three-way analysis leaves alone any path
//!   whose content is no longer the command's result.
//! - A window is opened once per call and closed once; a call that changed nothing leaves
//!   no checkpoint; a shell window whose end never comes closes at the turn's end, with
//!   none; a sub-agent's stays open past the main agent's stop, until its own stop or the
//!   session's end.
//! - Each change is one checkpoint's: a sub-agent's window leaves to the checkpoints made
//!   inside it (ids between its two snapshots') every path they name, since rollback's
//!   chain of images on a path must link up.

use std::ops::ControlFlow;

use crate::api::Turnback;
use crate::api::calls;
use crate::api::mutation::CheckpointSummary;
use crate::checkpoint::retention;
use crate::checkpoint::{
    self, CheckpointRecord, EffectKind, OperationKind, PostState, PreparedTarget, ShellCall, StageRequest,
    SubagentWindow,
};
use crate::error::Result;
use crate::fs::body::Body;
use crate::fs::files::{Current, FileIdentity};
use crate::fs::relpath::RelPath;
use crate::session::Session;
use crate::snapshot::diff::{FileChange, FileState};
use crate::snapshot::{self, SnapshotKind, SnapshotRecord};
use crate::storage::store::Store;

/// Why a command reported on its own, after it ran, has no window.
pub(crate) const REPORTED_AFTER: &str = "reported after it ran: nothing was snapshotted before it";

/// Why a command whose finish came without its start has no window.
pub(crate) const NO_START: &str = "its start was not reported: nothing was snapshotted before it";

/// A walk this fast (milliseconds) may run twice around a shell call.
pub(crate) const CHEAP_WALK_MS: u64 = 150;

/// A tree of at most this many files walks in a few milliseconds on any local disk.
pub(crate) const SMALL_TREE_FILES: u64 = 2_000;

/// Why a shell call gets no window now (`None`: it does). `newest` is the session's newest
/// snapshot that was not skipped.
pub(crate) fn window_cost(newest: Option<&SnapshotRecord>) -> Option<String> {
    match newest {
        None => Some("no snapshot of the workspace yet".into()),
        // The walk alone, not the whole snapshot: a first snapshot reads every file, and
        // the time to commit depends on the disk's load of the moment, neither of which a
        // window's snapshots repeat when a command changes little. A small tree is cheap
        // whatever its last walk took: that says more about the machine's load then.
        Some(s) if s.watched || s.files <= SMALL_TREE_FILES || s.walk_ms <= CHEAP_WALK_MS => None,
        Some(s) => Some(format!(
            "no watcher answered and a walk of the workspace takes {} ms (over {CHEAP_WALK_MS} ms)",
            s.walk_ms
        )),
    }
}

/// What a snapshot recorded of a file, as an image.
fn image(state: Option<FileState>) -> Current {
    match state {
        Some(f) => Current::File {
            body: Body::Stored { id: f.id.0, size: f.size },
            identity: FileIdentity { device: 0, inode: 0, mode: f.mode, size: f.size, mtime_ns: 0, ctime_ns: 0 },
        },
        None => Current::Absent,
    }
}

fn effect(c: &FileChange) -> EffectKind {
    match (&c.before, &c.after) {
        (None, _) => EffectKind::Create,
        (_, None) => EffectKind::Delete,
        _ => EffectKind::Edit,
    }
}

/// Whose window closes: one shell call's, or a sub-agent's whole run.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WindowOf<'a> {
    /// A shell call (made by `subagent`, if one).
    Shell { command: &'a str, call_id: Option<&'a str>, exit_status: Option<i32>, subagent: Option<&'a str> },
    /// Sub-agent `id`, from its start to its stop.
    Subagent { id: &'a str },
}

/// How a call's window ended.
#[derive(Debug)]
pub(crate) enum WindowClosed {
    /// Files changed in it: its checkpoint.
    Checkpoint(CheckpointSummary),
    /// Nothing changed in it.
    Unchanged,
    /// It had no window, or it could not close (why): its effects are in the turn's
    /// snapshots only.
    Without(String),
}

impl WindowClosed {
    /// Its checkpoint, if it made one.
    pub(crate) fn checkpoint(self) -> Option<CheckpointSummary> {
        match self {
            WindowClosed::Checkpoint(c) => Some(c),
            _ => None,
        }
    }
}

impl Turnback {
    /// Opens the window of call `key` (a shell call's, or [`subagent_key`]) — a snapshot
    /// now — if a turn runs and a snapshot is cheap; `true` if it opened.
    ///
    /// # Errors
    /// Store and workspace errors.
    pub(crate) fn open_window(&self, key: &str) -> Result<bool> {
        let session = self.session_record()?;
        if self.running_turn()?.is_none() || calls::window(&self.store, &session.id, key)?.is_some() {
            return Ok(false);
        }
        if let Some(why) = window_cost(snapshot::latest(&self.store, &session.id)?.as_ref()) {
            return calls::refuse_window(&self.store, &session.id, key, &why).map(|()| false);
        }
        let before = self.take_snapshot(SnapshotKind::Shell, None)?;
        if let Some(skipped) = before.skipped.as_deref().or(before.root.is_none().then_some("no tree")) {
            let why = format!("the snapshot as it started was skipped ({skipped})");
            return calls::refuse_window(&self.store, &session.id, key, &why).map(|()| false);
        }
        calls::open_window(&self.store, &session.id, key, &before.snapshot_id)
    }

    /// Closes the window of call `key`, if open: a snapshot now, and a checkpoint of the
    /// files that differ from the window's start (none if nothing did) — a `shell` one for
    /// a shell call; for a sub-agent, a `subagent` one of what no checkpoint made inside
    /// the window covers. A call whose window did not open, or could not close, is
    /// [`WindowClosed::Without`] a checkpoint, and says why.
    ///
    /// # Errors
    /// Store and workspace errors.
    pub(crate) fn close_window(&self, key: &str, of: WindowOf<'_>) -> Result<WindowClosed> {
        let (store, session, ws) = (&self.store, self.session_record()?, self.workspace_record()?);
        let mut window = match self.window_changes(&session.id, key)? {
            ControlFlow::Continue(window) => window,
            ControlFlow::Break(closed) => return Ok(closed),
        };
        let whose = window.attribute(store, &session.id, of)?;
        if window.changes.is_empty() {
            return calls::close_window(store, &session.id, key, "").map(|()| WindowClosed::Unchanged);
        }
        let committed = window.checkpoint(store, &session.id, &ws.id, whose)?;
        calls::close_window(store, &session.id, key, &committed.mutation.operation_id)?;
        Ok(WindowClosed::Checkpoint(CheckpointSummary::from(&committed)))
    }

    /// The window of call `key` closed by a snapshot now, with the files that differ from
    /// its start; or how it ended without (its window did not open, or its start's
    /// snapshot is gone or its end's skipped: then it is closed, with no checkpoint).
    fn window_changes(&self, session_id: &str, key: &str) -> Result<ControlFlow<WindowClosed, Window>> {
        let store = &self.store;
        let Some(before_id) = calls::window(store, session_id, key)? else {
            let why = calls::no_window(store, session_id, key)?;
            return Ok(ControlFlow::Break(WindowClosed::Without(why.unwrap_or_else(|| NO_START.to_string()))));
        };
        let without = |why: String| {
            calls::close_window(store, session_id, key, "").map(|()| ControlFlow::Break(WindowClosed::Without(why)))
        };
        // Pruned meanwhile (a session keeps so many snapshots): the turn's cover it.
        let Ok(before) = snapshot::get(store, &before_id) else {
            return without("the snapshot as it started was pruned before it finished".into());
        };
        let after = self.take_snapshot(SnapshotKind::Shell, None)?;
        let (Ok(from), Ok(to)) = (crate::api::turns::root(&before), crate::api::turns::root(&after)) else {
            let skipped = after.skipped.as_deref().unwrap_or("no tree");
            return without(format!("the snapshot as it finished was skipped ({skipped})"));
        };
        let changes = snapshot::diff::file_changes(store, &from, &to)?;
        Ok(ControlFlow::Continue(Window { before, after, changes }))
    }
}

/// A call's window as it closes: its two snapshots, and the files that differ between them.
struct Window {
    before: SnapshotRecord,
    after: SnapshotRecord,
    changes: Vec<FileChange>,
}

/// Whose a window's changes are, as its checkpoint records it.
struct Whose<'a> {
    kind: OperationKind,
    /// The sub-agent that made them, if one did.
    subagent: Option<&'a str>,
    /// A shell call's command and what else wrote its files.
    shell: Option<ShellCall>,
    /// A sub-agent's window and the paths it leaves to checkpoints made inside it.
    subagent_window: Option<SubagentWindow>,
}

impl Window {
    /// Whose the changes are: a shell call's, which says the tool calls inside the window
    /// that wrote the same files; or a sub-agent's, which leaves every path a checkpoint
    /// made inside the window names to that checkpoint (and drops it from `changes`).
    fn attribute<'a>(&mut self, store: &Store, session_id: &str, of: WindowOf<'a>) -> Result<Whose<'a>> {
        // The checkpoints made inside the window.
        let inside: Vec<_> = checkpoint::made_after(store, session_id, &self.before.snapshot_id)?
            .into_iter()
            .filter(|r| r.checkpoint_id.as_str() < self.after.snapshot_id.as_str())
            .collect();
        Ok(match of {
            WindowOf::Shell { command, call_id, exit_status, subagent } => {
                let shell = ShellCall {
                    // Kept as the turn keeps it: secrets redacted.
                    command: crate::base::redact::redact(command),
                    exit_status,
                    call_id: call_id.map(str::to_string),
                    before_snapshot: self.before.snapshot_id.clone(),
                    after_snapshot: self.after.snapshot_id.clone(),
                    // Edit tool calls made inside the window on the same files: said, not
                    // separated (the window cannot tell who wrote what).
                    also_by_tool_calls: named_inside(&inside, &self.changes, &|k| k != OperationKind::Shell),
                };
                Whose { kind: OperationKind::Shell, subagent, shell: Some(shell), subagent_window: None }
            }
            WindowOf::Subagent { id } => {
                // Each change is taken back by one checkpoint: a path a checkpoint made
                // inside the window names is that checkpoint's (a chain of two images of
                // one change would not link up).
                let left = named_inside(&inside, &self.changes, &|_| true);
                self.changes.retain(|c| !left.iter().any(|p| p.as_bytes() == c.path.as_slice()));
                let window = SubagentWindow {
                    before_snapshot: self.before.snapshot_id.clone(),
                    after_snapshot: self.after.snapshot_id.clone(),
                    left_to_checkpoints: left,
                };
                Whose { kind: OperationKind::Subagent, subagent: Some(id), shell: None, subagent_window: Some(window) }
            }
        })
    }

    /// The changes as one checkpoint of `whose`, staged and committed: protected if their
    /// content fits the store's caps, each change's pre- and post-image the snapshots' own.
    fn checkpoint(
        &self,
        store: &Store,
        session_id: &str,
        workspace_id: &str,
        whose: Whose<'_>,
    ) -> Result<CheckpointRecord> {
        let changes = &self.changes;
        let total: u64 = changes.iter().flat_map(|c| [c.before, c.after]).flatten().map(|f| f.size).sum();
        let protect = retention::evaluate_capacity(store.settings(), checkpoint::usage(store)?, total).fits();
        let mut targets = Vec::with_capacity(changes.len());
        let mut posts = Vec::with_capacity(changes.len());
        for c in changes {
            let path = RelPath::new(c.path.clone())?;
            // The directories a created file's path needed that the window's start did not
            // have: a rollback that takes the file back removes them once empty.
            let created_dirs = c.new_dirs.iter().map(|d| RelPath::new(d.clone())).collect::<Result<Vec<_>>>()?;
            targets.push(PreparedTarget {
                path,
                effect: effect(c),
                current: image(c.before),
                planned_dirs: created_dirs.clone(),
            });
            posts.push(PostState { current: image(c.after), created_dirs, identity_known: true });
        }
        let round = |txn: &mut dyn crate::storage::kv::Txn| Session::round_in(store, txn, session_id);
        let origin = checkpoint::Origin { session_id, workspace_id, prompt_round: &round, subagent: whose.subagent };
        let request = StageRequest {
            origin,
            kind: whose.kind,
            targets,
            protect,
            cap_bytes: Some(total),
            owner: None,
            also: None,
            shell: whose.shell,
            subagent_window: whose.subagent_window,
        };
        let staged = checkpoint::stage(store, request)?;
        checkpoint::commit(store, &staged.checkpoint_id, posts, false)
    }
}

/// The changed paths (of `changes`) that the checkpoints of `kinds` among `inside` name,
/// sorted, once each.
fn named_inside(
    inside: &[CheckpointRecord],
    changes: &[FileChange],
    kinds: &dyn Fn(OperationKind) -> bool,
) -> Vec<String> {
    let mut named: Vec<String> = inside
        .iter()
        .filter(|r| kinds(r.mutation.kind))
        .flat_map(|r| r.targets.iter())
        .filter(|t| changes.iter().any(|c| c.path == t.path.as_bytes()))
        .map(|t| t.path.display())
        .collect();
    named.sort();
    named.dedup();
    named
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(watched: bool, walk_ms: u64) -> SnapshotRecord {
        let mut s: SnapshotRecord = serde_json::from_value(serde_json::json!({
            "snapshotId": "s", "sessionId": "x", "workspaceId": "w", "kind": "ad-hoc", "root": "00",
            "createdAt": "", "files": 100000, "bytes": 0, "readFiles": 0, "readBytes": 0, "storedBytes": 0,
            "excluded": 0, "nestedRepos": [], "skippedPaths": [], "leftOut": [], "skipped": null,
            "statCacheDropped": null, "durationMs": 0, "turnId": null, "watch": null, "watched": false
        }))
        .unwrap();
        s.watched = watched;
        s.walk_ms = walk_ms;
        s.duration_ms = 10 * walk_ms + 1_000;
        s
    }

    #[test]
    fn a_window_opens_only_when_a_snapshot_is_cheap() {
        assert!(window_cost(Some(&snap(true, 5_000))).is_none(), "a watcher answered: what changed is cheap");
        assert!(window_cost(Some(&snap(false, CHEAP_WALK_MS))).is_none(), "a quick walk");
        let mut small = snap(false, 10 * CHEAP_WALK_MS);
        small.files = SMALL_TREE_FILES;
        assert!(window_cost(Some(&small)).is_none(), "a small tree, walked on a loaded machine");
        let why = window_cost(Some(&snap(false, CHEAP_WALK_MS + 1))).unwrap();
        assert!(why.contains("151 ms"), "{why}");
        assert!(window_cost(None).is_some());
    }
}
