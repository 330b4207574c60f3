//! Checkpointed mutations: `fs create|write|edit|delete`, and `stage`/`commit` for
//! mutations made by someone else.
//!
//! The sequence of an in-process mutation, each step a failpoint name for crash tests:
//! resolve and validate the path (`resolved`) → capacity preflight (`preflighted`) →
//! stage the checkpoint with its pre-image (`staged`) → journal the dispatch
//! (`dispatched`) → atomic write or unlink (`write-temp-synced`, `write-renamed`,
//! `remove-unlinked`, then `mutated`) → commit the checkpoint with the post-image and the
//! journal's success in one transaction (`committed`).
//!
//! Invariants: a crash anywhere leaves the workspace file wholly old or wholly new; the
//! checkpoint is either committed or, after the next reconcile, `unreachable` +
//! `recovery-locked`; nothing changes in the workspace before the checkpoint (with its
//! pre-image) is durable.

use std::path::{Path, PathBuf};

use crate::checkpoint::{self, CheckpointRecord, EffectKind, OperationKind, PostState, PreparedTarget, StageRequest};
use crate::error::{Error, ErrorCode, Result};
use crate::failpoint;
use crate::files::{self, Current, Parent};
use crate::retention::{self, Breach};
use crate::session::Session;
use crate::store::Store;
use crate::workspace::{RelPath, Workspace};

/// A built-in file mutation.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Create a file that must not exist yet.
    Create {
        /// Target path.
        path: PathBuf,
        /// Its content.
        content: Vec<u8>,
    },
    /// Create or overwrite a file.
    Write {
        /// Target path.
        path: PathBuf,
        /// Its content.
        content: Vec<u8>,
    },
    /// Replace an exact string in an existing file.
    Edit {
        /// Target path.
        path: PathBuf,
        /// The text to find (must occur exactly once unless `all`).
        old: String,
        /// Its replacement.
        new: String,
        /// Replace every occurrence.
        all: bool,
    },
    /// Delete an existing file.
    Delete {
        /// Target path.
        path: PathBuf,
    },
}

impl Mutation {
    fn path(&self) -> &Path {
        match self {
            Mutation::Create { path, .. }
            | Mutation::Write { path, .. }
            | Mutation::Edit { path, .. }
            | Mutation::Delete { path } => path,
        }
    }

    fn kind(&self) -> OperationKind {
        match self {
            Mutation::Create { .. } => OperationKind::CreateFile,
            Mutation::Write { .. } => OperationKind::WriteFile,
            Mutation::Edit { .. } => OperationKind::EditFile,
            Mutation::Delete { .. } => OperationKind::DeleteFile,
        }
    }
}

/// Where a mutation happens.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The open store.
    pub store: &'a Store,
    /// The workspace.
    pub workspace: &'a Workspace,
    /// The session.
    pub session: &'a Session,
    /// The directory relative paths are resolved from.
    pub cwd: &'a Path,
    /// Proceed without rollback protection when a cap would be exceeded.
    pub confirm_unprotected: bool,
}

/// What a mutation did.
#[derive(Debug, Clone)]
pub struct MutationOutcome {
    /// The committed checkpoint.
    pub checkpoint: CheckpointRecord,
    /// For edits, how many occurrences were replaced.
    pub replacements: usize,
}

fn open_existing_parent(ws: &Workspace, rel: &RelPath) -> Result<Option<Parent>> {
    match files::open_parent(&ws.root, rel, false) {
        Ok(p) => Ok(Some(p)),
        Err(e) if e.code == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn read_current(parent: Option<&Parent>) -> Result<Current> {
    match parent {
        Some(p) => p.read(),
        None => Ok(Current::Absent),
    }
}

/// Computes the new content (or `None` for a delete) from the current state.
fn plan(mutation: &Mutation, current: &Current, shown: &Path) -> Result<(Option<Vec<u8>>, usize, EffectKind)> {
    let missing = || Error::new(ErrorCode::NotFound, format!("{}: no such file", shown.display()));
    match (mutation, current) {
        (Mutation::Create { .. }, Current::File { .. }) => Err(Error::new(
            ErrorCode::AlreadyExists,
            format!("{}: already exists (use `fs write` to overwrite)", shown.display()),
        )),
        (Mutation::Create { content, .. }, Current::Absent) => Ok((Some(content.clone()), 0, EffectKind::Create)),
        (Mutation::Write { content, .. }, Current::Absent) => Ok((Some(content.clone()), 0, EffectKind::Create)),
        (Mutation::Write { content, .. }, Current::File { .. }) => Ok((Some(content.clone()), 0, EffectKind::Edit)),
        (Mutation::Edit { .. } | Mutation::Delete { .. }, Current::Absent) => Err(missing()),
        (Mutation::Delete { .. }, Current::File { .. }) => Ok((None, 0, EffectKind::Delete)),
        (Mutation::Edit { old, new, all, .. }, Current::File { bytes, .. }) => {
            let (content, n) = replace_exact(bytes, old.as_bytes(), new.as_bytes(), *all, shown)?;
            Ok((Some(content), n, EffectKind::Edit))
        }
    }
}

/// Replaces `old` by `new` in `bytes`: exactly one occurrence, or all with `all`.
///
/// # Errors
/// `edit-no-match` if `old` does not occur, `edit-not-unique` if it occurs more than once
/// without `all`, `invalid-argument` if `old` is empty or equal to `new`.
pub fn replace_exact(bytes: &[u8], old: &[u8], new: &[u8], all: bool, shown: &Path) -> Result<(Vec<u8>, usize)> {
    if old.is_empty() {
        return Err(Error::invalid("the string to replace (--old) must not be empty"));
    }
    if old == new {
        return Err(Error::invalid("--old and --new are the same; nothing would change"));
    }
    let positions: Vec<usize> = find_all(bytes, old);
    match positions.len() {
        0 => {
            Err(Error::new(ErrorCode::EditNoMatch, format!("{}: the string to replace was not found", shown.display())))
        }
        n if n > 1 && !all => Err(Error::new(
            ErrorCode::EditNotUnique,
            format!(
                "{}: the string to replace occurs {n} times; give more context to make it unique, or use --all",
                shown.display()
            ),
        )),
        n => {
            let mut out = Vec::with_capacity(bytes.len() + n * new.len());
            let mut last = 0;
            for p in &positions {
                out.extend_from_slice(&bytes[last..*p]);
                out.extend_from_slice(new);
                last = p + old.len();
            }
            out.extend_from_slice(&bytes[last..]);
            Ok((out, n))
        }
    }
}

fn find_all(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + needle.len() <= haystack.len() {
        if &haystack[i..i + needle.len()] == needle {
            out.push(i);
            i += needle.len();
        } else {
            i += 1;
        }
    }
    out
}

/// Runs the capacity preflight: evicts expired checkpoints if the store cap is the
/// problem, then decides. `Ok(true)`: store the images; `Ok(false)`: confirmed unprotected.
///
/// # Errors
/// `over-cap` with the exact usage and the unprotected scope when a cap would be
/// exceeded and `confirm_unprotected` is false. No flag suppresses the disclosure.
fn preflight(store: &Store, paths: &[&RelPath], bytes: u64, confirm_unprotected: bool) -> Result<bool> {
    let mut verdict = retention::evaluate_capacity(store.settings(), checkpoint::usage(store)?, bytes);
    if verdict.breach == Some(Breach::Store) {
        let needed = verdict.store_usage + bytes - store.settings().store_cap;
        checkpoint::evict_expired(store, Some(needed))?;
        verdict = retention::evaluate_capacity(store.settings(), checkpoint::usage(store)?, bytes);
    }
    if verdict.fits() {
        Ok(true)
    } else if confirm_unprotected {
        Ok(false)
    } else {
        Err(checkpoint::over_cap_error(&verdict, paths.iter().copied()))
    }
}

fn current_size(c: &Current) -> u64 {
    match c {
        Current::File { bytes, .. } => bytes.len() as u64,
        Current::Absent => 0,
    }
}

/// Applies `mutation` with a checkpoint around it (see the module docs for the sequence).
///
/// # Errors
/// Path, edit and capacity errors before anything is written; I/O errors after the stage
/// leave a checkpoint that reconcile will mark `recovery-locked`.
pub fn apply(ctx: Context<'_>, mutation: Mutation) -> Result<MutationOutcome> {
    let store = ctx.store;
    let rel = ctx.workspace.resolve(mutation.path(), ctx.cwd, store.dir())?;
    let probe = open_existing_parent(ctx.workspace, &rel)?;
    let current = read_current(probe.as_ref())?;
    let shown = ctx.workspace.absolute(&rel);
    let (content, replacements, effect) = plan(&mutation, &current, &shown)?;
    failpoint::hit("resolved");

    let bytes = current_size(&current) + content.as_ref().map_or(0, |c| c.len() as u64);
    let protect = preflight(store, &[&rel], bytes, ctx.confirm_unprotected)?;
    failpoint::hit("preflighted");

    let owner = store.owner()?.id().to_string();
    let mode = match &current {
        Current::File { identity, .. } => Some(identity.mode),
        Current::Absent => None,
    };
    let planned_dirs = match (&probe, &content) {
        (None, Some(_)) => files::missing_parents(&ctx.workspace.root, &rel)?,
        _ => Vec::new(),
    };
    let target = PreparedTarget { path: rel.clone(), effect, current, planned_dirs };
    let request = StageRequest {
        session: ctx.session,
        workspace: ctx.workspace,
        kind: mutation.kind(),
        targets: vec![target],
        protect,
        owner: Some(owner),
    };
    let staged = checkpoint::stage(store, request)?;
    failpoint::hit("staged");
    checkpoint::dispatch(store, &staged.checkpoint_id)?;
    failpoint::hit("dispatched");

    let parent = files::open_parent(&ctx.workspace.root, &rel, content.is_some())?;
    let post = match content {
        Some(bytes) => {
            let identity = parent.replace(&files::temp_name(&rel, &staged.checkpoint_id), &bytes, mode)?;
            Current::File { bytes, identity }
        }
        None => {
            parent.remove()?;
            Current::Absent
        }
    };
    failpoint::hit("mutated");
    let posts = vec![PostState { current: post, created_dirs: parent.created_dirs, identity_known: true }];
    let checkpoint = checkpoint::commit(store, &staged.checkpoint_id, posts, false)?;
    failpoint::hit("committed");
    Ok(MutationOutcome { checkpoint, replacements })
}

/// Stages a checkpoint for a mutation someone else is about to make (an agent's own
/// tool): captures pre-images and journals the dispatch. Returns the record; its
/// `mutation.operationId` is what [`commit_external`] takes.
///
/// # Errors
/// Path errors; `already-exists` for `kind` create on an existing file, `not-found` for
/// edit or delete of a missing one; `over-cap` as for in-process mutations.
pub fn stage_external(ctx: Context<'_>, paths: &[PathBuf], kind: Option<EffectKind>) -> Result<CheckpointRecord> {
    if paths.is_empty() {
        return Err(Error::invalid("stage needs at least one path"));
    }
    let mut targets: Vec<PreparedTarget> = Vec::with_capacity(paths.len());
    for path in paths {
        let rel = ctx.workspace.resolve(path, ctx.cwd, ctx.store.dir())?;
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
        targets.push(PreparedTarget { path: rel, effect, current, planned_dirs: Vec::new() });
    }
    // The post-images are not known yet; assume they are about the size of the pre-images.
    let pre: u64 = targets.iter().map(|t| current_size(&t.current)).sum();
    let paths: Vec<&RelPath> = targets.iter().map(|t| &t.path).collect();
    let protect = preflight(ctx.store, &paths, pre * 2, ctx.confirm_unprotected)?;
    let request = StageRequest {
        session: ctx.session,
        workspace: ctx.workspace,
        kind: OperationKind::External,
        targets,
        protect,
        owner: None,
    };
    checkpoint::stage(ctx.store, request)
}

/// Commits the external operation `operation_id`: captures every target's post-image now
/// and journals success (or failure with `failed`). Idempotent.
///
/// # Errors
/// `not-found` for an unknown operation; `recovery-locked` if it was reconciled away.
pub fn commit_external(store: &Store, operation_id: &str, failed: bool) -> Result<CheckpointRecord> {
    let id = checkpoint::by_operation(store, operation_id)?;
    let record = checkpoint::load(store, &id)?;
    match record.stage_state {
        checkpoint::StageState::Committed => return Ok(record),
        checkpoint::StageState::Unreachable => {
            return Err(Error::new(
                ErrorCode::RecoveryLocked,
                format!("operation {operation_id} was interrupted and is recovery-locked (turnback inspect {id})"),
            ));
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
        posts.push(PostState { current, created_dirs: Vec::new(), identity_known: true });
    }
    checkpoint::commit(store, &id, posts, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_replacement_rules() {
        let p = Path::new("f");
        assert_eq!(replace_exact(b"a b a", b"b", b"c", false, p).unwrap(), (b"a c a".to_vec(), 1));
        assert_eq!(replace_exact(b"a b a", b"a", b"x", false, p).unwrap_err().code, ErrorCode::EditNotUnique);
        assert_eq!(replace_exact(b"a b a", b"a", b"x", true, p).unwrap(), (b"x b x".to_vec(), 2));
        assert_eq!(replace_exact(b"a b a", b"z", b"x", false, p).unwrap_err().code, ErrorCode::EditNoMatch);
        assert_eq!(replace_exact(b"aaa", b"aa", b"b", true, p).unwrap(), (b"ba".to_vec(), 1));
        assert!(replace_exact(b"a", b"", b"x", false, p).is_err());
        assert!(replace_exact(b"a", b"a", b"a", false, p).is_err());
    }
}
