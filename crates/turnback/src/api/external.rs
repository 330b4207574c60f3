//! Checkpointed mutations made by someone else (an agent's own tools): `stage` records
//! the pre-images of the files about to change and journals the dispatch at once; `commit`
//! captures their post-images afterwards and journals the outcome.
//!
//! Invariants: nothing is written to the workspace here; a stage is durable (record,
//! pre-images and dispatch in one transaction) before the caller's tool runs; a commit is
//! idempotent, refuses a stage that reconcile made `recovery-locked`, and never commits an
//! in-process (`fs`) mutation, which commits itself after its write.

use std::path::PathBuf;

use crate::api::Turnback;
use crate::api::mutation::{
    CheckpointSummary, Context, current_size, open_existing_parent, origin, preflight, read_current, round_reader,
};
use crate::checkpoint::{self, CheckpointRecord, EffectKind, OperationKind, PostState, PreparedTarget, StageRequest};
use crate::error::{Error, ErrorCode, Hint, Result};
use crate::fs::files::{self, Current};
use crate::fs::relpath::RelPath;
use crate::session::workspace::Workspace;
use crate::storage::store::Store;

/// Stages a checkpoint for a mutation someone else is about to make (an agent's own
/// tool): captures pre-images and journals the dispatch. Returns the record; its
/// `mutation.operationId` is what [`commit_external`] takes.
///
/// # Errors
/// Path errors; `already-exists` for `kind` create on an existing file, `not-found` for
/// edit or delete of a missing one; `over-cap` as for in-process mutations.
pub(crate) fn stage_external(
    ctx: Context<'_>,
    paths: &[PathBuf],
    kind: Option<EffectKind>,
    also: Option<checkpoint::AlsoInStage<'_>>,
) -> Result<CheckpointRecord> {
    if paths.is_empty() {
        return Err(Error::invalid("stage needs at least one path"));
    }
    let mut targets: Vec<PreparedTarget> = Vec::with_capacity(paths.len());
    for path in paths {
        let rel = ctx.workspace.resolve(path, ctx.cwd, ctx.store.protected_paths())?;
        if targets.iter().any(|t| t.path == rel) {
            continue;
        }
        let current = read_current(open_existing_parent(ctx.workspace, &rel)?.as_ref())?;
        let present = matches!(current, Current::File { .. });
        let shown = ctx.workspace.absolute(&rel);
        let effect = match (kind, present) {
            (Some(EffectKind::Create), true) => {
                return Err(Error::new(ErrorCode::AlreadyExists, format!("{}: already exists", shown.display())));
            }
            (Some(EffectKind::Edit | EffectKind::Delete), false) => {
                return Err(Error::new(ErrorCode::NotFound, format!("{}: no such file", shown.display())));
            }
            (Some(k), _) => k,
            (None, true) => EffectKind::Edit,
            (None, false) => EffectKind::Create,
        };
        // The directories the agent's write will have to make (known at commit: those that
        // then exist), so taking its create back removes them again.
        let planned_dirs =
            if present { Vec::new() } else { files::missing_parents(&ctx.workspace.root, &rel).unwrap_or_default() };
        targets.push(PreparedTarget { path: rel, effect, current, planned_dirs });
    }
    // The post-images are not known yet: a delete adds none, anything else is assumed
    // to be about the size of its pre-image.
    let estimate: u64 =
        targets.iter().map(|t| current_size(&t.current) * if t.effect == EffectKind::Delete { 1 } else { 2 }).sum();
    let paths: Vec<&RelPath> = targets.iter().map(|t| &t.path).collect();
    let (protect, _) = preflight(ctx.store, &paths, estimate, ctx.confirm_unprotected)?;
    let round = round_reader(&ctx);
    let origin = origin(&ctx, &round);
    let request = StageRequest {
        origin,
        kind: OperationKind::External,
        targets,
        protect,
        cap_bytes: None,
        owner: None,
        also,
        shell: None,
        subagent_window: None,
    };
    checkpoint::stage(ctx.store, request)
}

/// Commits the external operation `operation_id`: captures every target's post-image now
/// and journals success (or failure with `failed`). Idempotent.
///
/// # Errors
/// `not-found` for an unknown operation; `recovery-locked` if it was reconciled away.
pub(crate) fn commit_external(store: &Store, operation_id: &str, failed: bool) -> Result<CheckpointRecord> {
    let id = checkpoint::by_operation(store, operation_id)?;
    let record = checkpoint::load(store, &id)?;
    match record.stage_state {
        checkpoint::StageState::Committed => return Ok(record),
        checkpoint::StageState::Unreachable => {
            return Err(Error::new(
                ErrorCode::RecoveryLocked,
                format!("operation {operation_id} was interrupted and is recovery-locked"),
            )
            .with_hint(Hint::Inspect { checkpoint_id: id.clone() }));
        }
        _ if record.mutation.kind != OperationKind::External => {
            // An `fs` mutation still running in its own process: it commits itself after its
            // write; committing it from here would record the file before the write.
            return Err(Error::new(
                ErrorCode::Conflict,
                format!("operation {operation_id} is in progress in another turnback process, which commits it itself"),
            ));
        }
        _ => {}
    }
    let ws = Workspace::by_id(store, &record.workspace_id)?;
    let mut posts = Vec::with_capacity(record.targets.len());
    for t in &record.targets {
        let current = read_current(open_existing_parent(&ws, &t.path)?.as_ref())?;
        // Of the directories missing at stage time, those the agent made (none when the
        // path is no longer one a directory walk can follow).
        let created_dirs = match files::missing_parents(&ws.root, &t.path) {
            Ok(still) if !t.created_dirs.is_empty() => {
                t.created_dirs.iter().filter(|d| !still.contains(d)).cloned().collect()
            }
            _ => Vec::new(),
        };
        posts.push(PostState { current, created_dirs, identity_known: true });
    }
    checkpoint::commit(store, &id, posts, failed)
}

impl Turnback {
    /// Records the pre-images of `paths` before someone else (an agent's own tool) changes
    /// them; [`commit`](Self::commit) takes the returned operation id afterwards.
    ///
    /// # Errors
    /// As [`mutate`](Self::mutate) before anything is written.
    pub fn stage(
        &self,
        paths: &[PathBuf],
        kind: Option<EffectKind>,
        confirm_unprotected: bool,
    ) -> Result<CheckpointSummary> {
        let (ctx, cwd) = self.mutation_context(confirm_unprotected)?;
        stage_external(Context { cwd: &cwd, ..ctx }, paths, kind, None).map(|r| CheckpointSummary::from(&r))
    }

    /// Captures the post-images of a staged operation and commits it (idempotent).
    ///
    /// # Errors
    /// `not-found` for an unknown operation; `recovery-locked` if it was reconciled away.
    pub fn commit(&self, operation_id: &str, failed: bool) -> Result<CheckpointSummary> {
        commit_external(&self.store, operation_id, failed).map(|r| CheckpointSummary::from(&r))
    }
}
