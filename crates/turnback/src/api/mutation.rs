//! Checkpointed mutations: `fs create|write|edit|delete` (those made by someone else are
//! staged and committed by [`external`](super::external)).
//!
//! The sequence of an in-process mutation, each step a failpoint name for crash tests:
//! resolve and validate the path (`resolved`) → capacity preflight (`preflighted`) →
//! stage the checkpoint with its pre-image (`staged`) → journal the dispatch with the
//! intended result's digest (`dispatched`) → compare-and-swap write or unlink
//! (`write-temp-synced`, `write-renamed`, `remove-moved-aside`, `remove-unlinked`, then
//! `mutated`) → commit the checkpoint with the post-image and the journal's outcome in one
//! transaction (`committed`). turnback's writers to one workspace hold its lock throughout;
//! anyone else who changes the file in between makes the swap refuse (`conflict`).
//!
//! Invariants: a crash anywhere leaves the workspace file wholly old or wholly new; the
//! checkpoint is either committed or, after the next reconcile, `unreachable` +
//! `recovery-locked`; nothing changes in the workspace before the checkpoint (with its
//! pre-image) is durable.

use std::path::{Path, PathBuf};

use std::io::Read;

use serde::Serialize;

use crate::api::Turnback;
use crate::api::edit::{check_edit, replace_exact};
use crate::base::failpoint;
use crate::checkpoint::retention::{self, Breach, CapacityVerdict};
use crate::checkpoint::{
    self, CheckpointRecord, CommitState, CoverageState, EffectKind, OperationKind, PostState, PreparedTarget,
    StageRequest, StageState,
};
use crate::error::{Error, ErrorCode, Hint, Result};
use crate::fs::body::{Body, HELD_MAX};
use crate::fs::files::{self, Current, Expect, FileIdentity, Parent, Swap};
use crate::fs::lock::NamedLock;
use crate::fs::relpath::RelPath;
use crate::session::Session;
use crate::session::workspace::Workspace;
use crate::storage::body::{self as storage_body, Pour};
use crate::storage::content::ContentId;
use crate::storage::kv::Txn;
use crate::storage::store::Store;

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

/// What a mutation does to its file, as [`apply`] carries it: new content is a [`Body`]
/// (held, or kept in the store as it was read from a stream: [`Turnback::write_from`]).
#[derive(Debug)]
pub(crate) enum Change {
    /// Put this content at the path; with `create_only`, only where no file is.
    Put { create_only: bool, body: Body },
    /// Replace an exact string.
    Edit { old: String, new: String, all: bool },
    /// Remove the file.
    Delete,
}

impl Mutation {
    /// The path, the operation and the change.
    fn into_parts(self) -> (PathBuf, OperationKind, Change) {
        match self {
            Mutation::Create { path, content } => {
                (path, OperationKind::CreateFile, Change::Put { create_only: true, body: Body::Held(content) })
            }
            Mutation::Write { path, content } => {
                (path, OperationKind::WriteFile, Change::Put { create_only: false, body: Body::Held(content) })
            }
            Mutation::Edit { path, old, new, all } => (path, OperationKind::EditFile, Change::Edit { old, new, all }),
            Mutation::Delete { path } => (path, OperationKind::DeleteFile, Change::Delete),
        }
    }
}

/// Where a mutation happens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context<'a> {
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
    /// The sub-agent making the change, if any.
    pub subagent: Option<&'a str>,
}

/// Where a checkpoint made in `ctx` comes from; `round` reads the session's round inside
/// the staging transaction ([`round_reader`]).
pub(super) fn origin<'a>(ctx: &Context<'a>, round: &'a dyn Fn(&mut dyn Txn) -> Result<u64>) -> checkpoint::Origin<'a> {
    checkpoint::Origin {
        session_id: &ctx.session.id,
        workspace_id: &ctx.workspace.id,
        prompt_round: round,
        subagent: ctx.subagent,
    }
}

/// Reads the round of `ctx`'s session inside a transaction.
pub(super) fn round_reader<'a>(ctx: &Context<'a>) -> impl Fn(&mut dyn Txn) -> Result<u64> + 'a {
    let (store, session): (&'a Store, &'a Session) = (ctx.store, ctx.session);
    move |txn| Session::round_in(store, txn, &session.id)
}

/// What a mutation did.
#[derive(Debug, Clone)]
pub(crate) struct MutationOutcome {
    /// The committed checkpoint.
    pub checkpoint: CheckpointRecord,
    /// For edits, how many occurrences were replaced.
    pub replacements: usize,
    /// When it went ahead unprotected over a cap (confirmed): the exact figures.
    pub capacity: Option<CapacityVerdict>,
}

pub(super) fn open_existing_parent(ws: &Workspace, rel: &RelPath) -> Result<Option<Parent>> {
    match files::open_parent(&ws.root, rel, false) {
        Ok(p) => Ok(Some(p)),
        Err(e) if e.code == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

pub(super) fn read_current(parent: Option<&Parent>) -> Result<Current> {
    match parent {
        Some(p) => p.read(),
        None => Ok(Current::Absent),
    }
}

/// Computes the new content (or `None` for a delete) from the current state. An edit
/// reads the file whole (it finds and replaces a string in it); nothing else does.
fn plan(change: Change, current: &Current, shown: &Path) -> Result<(Option<Body>, usize, EffectKind)> {
    let missing = || Error::new(ErrorCode::NotFound, format!("{}: no such file", shown.display()));
    match (change, current) {
        (Change::Put { create_only: true, .. }, Current::File { .. }) => {
            Err(Error::new(ErrorCode::AlreadyExists, format!("{}: already exists", shown.display()))
                .with_hint(Hint::Overwrite))
        }
        (Change::Put { body, .. }, Current::Absent) => Ok((Some(body), 0, EffectKind::Create)),
        (Change::Put { body, .. }, Current::File { .. }) => Ok((Some(body), 0, EffectKind::Edit)),
        (Change::Edit { .. } | Change::Delete, Current::Absent) => Err(missing()),
        (Change::Delete, Current::File { .. }) => Ok((None, 0, EffectKind::Delete)),
        (Change::Edit { old, new, all }, Current::File { body, .. }) => {
            let bytes = crate::fs::body::read_whole(body)?.unwrap_or_default();
            let (content, n) = replace_exact(&bytes, old.as_bytes(), new.as_bytes(), all, shown)?;
            Ok((Some(Body::Held(content)), n, EffectKind::Edit))
        }
    }
}

/// Runs the capacity preflight: evicts expired checkpoints if the store cap is the
/// problem, then decides. `Ok(true)`: store the images; `Ok(false)`: confirmed unprotected.
///
/// # Errors
/// `over-cap` with the exact usage and the unprotected scope when a cap would be
/// exceeded and `confirm_unprotected` is false. No flag suppresses the disclosure.
pub(super) fn preflight(
    store: &Store,
    paths: &[&RelPath],
    bytes: u64,
    confirm_unprotected: bool,
) -> Result<(bool, Option<CapacityVerdict>)> {
    let mut verdict = retention::evaluate_capacity(store.settings(), checkpoint::usage(store)?, bytes);
    if verdict.breach == Some(Breach::Store) {
        let needed = verdict.store_usage + bytes - store.settings().store_cap;
        if checkpoint::evict_expired(store, Some(needed), &|id| Session::round_of(store, id))?.evicted > 0 {
            // Not waited for: this very mutation may hold the objects lock (content it
            // kept from a stream); the space comes free at the next sweep then.
            super::sweep_objects_if_free(store)?;
        }
        verdict = retention::evaluate_capacity(store.settings(), checkpoint::usage(store)?, bytes);
    }
    if verdict.fits() {
        Ok((true, None))
    } else if confirm_unprotected {
        // Proceeding unprotected still discloses the exact figures.
        Ok((false, Some(verdict)))
    } else {
        Err(checkpoint::over_cap_error(&verdict, paths.iter().copied()))
    }
}

pub(super) fn current_size(c: &Current) -> u64 {
    match c {
        Current::File { body, .. } => body.size(),
        Current::Absent => 0,
    }
}

/// Applies `mutation` with a checkpoint around it (see the module docs for the sequence).
///
/// # Errors
/// Path, edit and capacity errors before anything is written. `conflict` if the file
/// changed between the read and the write (nothing written; the checkpoint records a
/// failed operation). An I/O error during the write is returned after the checkpoint is
/// committed as failed with what is really on disk; `unknown-outcome` if even that
/// cannot be established.
pub(crate) fn apply(ctx: Context<'_>, mutation: Mutation) -> Result<MutationOutcome> {
    let (path, kind, change) = mutation.into_parts();
    apply_change(ctx, &path, kind, change)
}

/// [`apply`] of a change to `path`, recorded as operation `kind`.
pub(crate) fn apply_change(
    ctx: Context<'_>,
    path: &Path,
    kind: OperationKind,
    change: Change,
) -> Result<MutationOutcome> {
    let store = ctx.store;
    let rel = ctx.workspace.resolve(path, ctx.cwd, store.protected_paths())?;
    // turnback's own writers to this workspace take turns; anyone else is caught by the
    // compare-and-swap below.
    let _turn = crate::fs::lock::workspace(&store.locks_dir(), &ctx.workspace.id)?;
    let probe = open_existing_parent(ctx.workspace, &rel)?;
    let current = read_current(probe.as_ref())?;
    let shown = ctx.workspace.absolute(&rel);
    let m = Applying { ctx, rel, shown, current };
    let planned = m.plan(change)?;
    failpoint::hit("resolved");

    let bytes = current_size(&m.current) + planned.content.as_ref().map_or(0, Body::size);
    let (protect, capacity) = preflight(store, &[&m.rel], bytes, ctx.confirm_unprotected)?;
    failpoint::hit("preflighted");

    let staged = m.stage(kind, probe.is_none(), &planned, protect)?;
    failpoint::hit("staged");
    m.dispatch(&staged.checkpoint_id, planned.content.as_ref())?;
    failpoint::hit("dispatched");

    let written = m.write(&staged, planned.original, planned.content);
    failpoint::hit("mutated");
    let (post, failure) = m.post(written)?;
    let checkpoint = m.commit(&staged.checkpoint_id, post, failure)?;
    failpoint::hit("committed");
    Ok(MutationOutcome { checkpoint, replacements: planned.replacements, capacity })
}

/// One in-process mutation under way: the file it changes, as read under the workspace
/// lock.
struct Applying<'a> {
    ctx: Context<'a>,
    rel: RelPath,
    /// Its absolute path, as messages show it.
    shown: PathBuf,
    current: Current,
}

/// What a change makes of the file, planned before anything is staged.
struct Planned {
    /// The new content (`None`: the file is removed).
    content: Option<Body>,
    /// For an edit, how many occurrences it replaces.
    replacements: usize,
    effect: EffectKind,
    /// For an edit streamed into the store, the keyed id of the original it was made from.
    original: Option<ContentId>,
    /// Keeps `gc` out of a streamed edit's content until the checkpoint naming it commits.
    _objects: Option<NamedLock>,
}

impl Applying<'_> {
    /// Plans `change` against the file as read. An edit of a file too large to hold is
    /// streamed into the store first; the objects lock keeps `gc` out of it until the
    /// checkpoint naming it commits.
    fn plan(&self, change: Change) -> Result<Planned> {
        let store = self.ctx.store;
        let (change, edited, objects) = match (change, &self.current) {
            (Change::Edit { old, new, all }, Current::File { body: Body::Open { file, size }, .. }) => {
                check_edit(old.as_bytes(), new.as_bytes())?;
                let objects = crate::fs::lock::objects(&store.locks_dir(), false)?;
                let e =
                    super::edit::edit_open(store, (file, *size), (old.as_bytes(), new.as_bytes(), all), &self.shown)?;
                let body = Body::Stored { id: e.kept.id.0, size: e.kept.size };
                (Change::Put { create_only: false, body }, Some((e.replacements, e.original)), Some(objects))
            }
            (change, _) => (change, None, None),
        };
        let (content, replacements, effect) = plan(change, &self.current, &self.shown)?;
        Ok(Planned {
            content,
            replacements: edited.map_or(replacements, |(n, _)| n),
            effect,
            original: edited.map(|(_, original)| original),
            _objects: objects,
        })
    }

    /// Stages the change's checkpoint (operation `kind`, owned by this process; with
    /// `protect`, its images kept). A file made where its parent is missing
    /// (`parent_missing`) plans the directories its path needs.
    fn stage(
        &self,
        kind: OperationKind,
        parent_missing: bool,
        planned: &Planned,
        protect: bool,
    ) -> Result<CheckpointRecord> {
        let (ctx, store) = (&self.ctx, self.ctx.store);
        let owner = store.owner()?.id().to_string();
        let planned_dirs = match (parent_missing, &planned.content) {
            (true, Some(_)) => files::missing_parents(&ctx.workspace.root, &self.rel)?,
            _ => Vec::new(),
        };
        let target = PreparedTarget {
            path: self.rel.clone(),
            effect: planned.effect,
            current: self.current.clone(),
            planned_dirs,
        };
        let round = round_reader(ctx);
        let request = StageRequest {
            cap_bytes: None,
            origin: origin(ctx, &round),
            kind,
            targets: vec![target],
            protect,
            owner: Some(owner),
            also: None,
            shell: None,
            subagent_window: None,
        };
        checkpoint::stage(store, request)
    }

    /// Journals the dispatch of checkpoint `checkpoint_id`, with the digest of the content
    /// it intends (`None`: a delete).
    fn dispatch(&self, checkpoint_id: &str, content: Option<&Body>) -> Result<()> {
        let store = self.ctx.store;
        let intended = content.map(|c| storage_body::id(store.keys(), c).map(|id| id.to_hex())).transpose()?;
        checkpoint::dispatch(store, checkpoint_id, &[intended]).map(|_| ())
    }

    /// Writes `content` (removes the file for `None`) by compare-and-swap, expecting the
    /// original a large edit was made from (`original`), else the pre-image's digest as
    /// `staged` (no second pass over a large file).
    fn write(
        &self,
        staged: &CheckpointRecord,
        original: Option<ContentId>,
        content: Option<Body>,
    ) -> Result<(Current, Vec<RelPath>)> {
        let expected = original.map(|o| o.to_hex()).or_else(|| staged.targets[0].pre_image.digest.clone());
        write_checked(self.ctx, &self.rel, &staged.checkpoint_id, (&self.current, expected.as_deref()), content)
    }

    /// The post-image of the file after the write: as `written`, or — when the write failed,
    /// and nothing or something happened — what is really there, with the write's error.
    /// `unknown-outcome` if even that cannot be read.
    fn post(&self, written: Result<(Current, Vec<RelPath>)>) -> Result<(PostState, Option<Error>)> {
        let (post, created_dirs, failure) = match written {
            Ok((post, created_dirs)) => (post, created_dirs, None),
            Err(e) => {
                let Ok(now) =
                    open_existing_parent(self.ctx.workspace, &self.rel).and_then(|p| read_current(p.as_ref()))
                else {
                    return Err(unknown_outcome(&self.shown, &e));
                };
                (now, Vec::new(), Some(e))
            }
        };
        Ok((PostState { current: post, created_dirs, identity_known: true }, failure))
    }

    /// Commits checkpoint `checkpoint_id` with `post`, as failed if the write did (then
    /// the write's error is returned); `unknown-outcome` if the commit fails.
    fn commit(&self, checkpoint_id: &str, post: PostState, failure: Option<Error>) -> Result<CheckpointRecord> {
        let committed = checkpoint::commit(self.ctx.store, checkpoint_id, vec![post], failure.is_some());
        match (committed, failure) {
            (Ok(_), Some(e)) => Err(e),
            (Ok(c), None) => Ok(c),
            (Err(e), _) => Err(unknown_outcome(&self.shown, &e)),
        }
    }
}

fn unknown_outcome(shown: &Path, cause: &Error) -> Error {
    Error::new(
        ErrorCode::UnknownOutcome,
        format!(
            "{}: the write may or may not have happened ({cause}); the checkpoint will be marked unknown-outcome",
            shown.display()
        ),
    )
}

/// Writes `content` (or removes the file for `None`) only if the file is still exactly
/// `expected`: a compare-and-swap. Returns the new state and the directories created.
fn write_checked(
    ctx: Context<'_>,
    rel: &RelPath,
    checkpoint_id: &str,
    (expected, expected_digest): (&Current, Option<&str>),
    content: Option<Body>,
) -> Result<(Current, Vec<RelPath>)> {
    let temp = files::temp_name(rel, checkpoint_id);
    let keys = ctx.store.keys();
    let expected_identity = match expected {
        Current::File { identity, .. } => Some(*identity),
        Current::Absent => None,
    };
    let matcher = |body: &Body, identity: &FileIdentity| {
        expected_identity.is_some_and(|e| e.inode == identity.inode)
            && expected_digest.is_some_and(|d| storage_body::id(keys, body).is_ok_and(|id| id.to_hex() == d))
    };
    let changed = || {
        Error::new(
            ErrorCode::Conflict,
            format!(
                "{}: the file changed while turnback was about to write it; nothing was written",
                ctx.workspace.absolute(rel).display()
            ),
        )
    };
    let parent = files::open_parent(&ctx.workspace.root, rel, content.is_some())?;
    match content {
        Some(body) => {
            let expect = if expected_identity.is_some() { Expect::File(&matcher) } else { Expect::Absent };
            let mode = expected_identity.map(|i| i.mode);
            let source = Pour { keys, kv: ctx.store.kv(), body: &body };
            match parent.swap_in(&temp, &source, mode, &expect)? {
                (Swap::Done, Some(identity)) => Ok((Current::File { body, identity }, parent.created_dirs)),
                _ => Err(changed()),
            }
        }
        None => match parent.remove_if(&temp, &matcher)? {
            Swap::Done => Ok((Current::Absent, Vec::new())),
            Swap::Changed => Err(changed()),
        },
    }
}

/// A checkpoint as mutation commands report it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CheckpointSummary {
    /// Its id.
    pub checkpoint_id: String,
    /// The operation it records (what `commit` takes).
    pub operation_id: String,
    /// Which operation.
    pub kind: OperationKind,
    /// Its lifecycle state.
    pub stage_state: StageState,
    /// What the journal says.
    pub commit_state: CommitState,
    /// How much is protected.
    pub coverage_state: CoverageState,
    /// The prompt round it was made in.
    pub prompt_round: Option<u64>,
    /// The session.
    pub session_id: String,
    /// The files it covers.
    pub targets: Vec<crate::api::views::Target>,
    /// The sub-agent whose tool call made it, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subagent: Option<String>,
}

impl From<&CheckpointRecord> for CheckpointSummary {
    fn from(r: &CheckpointRecord) -> Self {
        CheckpointSummary {
            checkpoint_id: r.checkpoint_id.clone(),
            operation_id: r.mutation.operation_id.clone(),
            kind: r.mutation.kind,
            stage_state: r.stage_state,
            commit_state: r.mutation.commit_state,
            coverage_state: r.coverage_state,
            prompt_round: r.prompt_round,
            session_id: r.session_id.clone(),
            targets: r.targets.iter().map(Into::into).collect(),
            subagent: r.subagent.clone(),
        }
    }
}

/// What a checkpointed mutation did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct MutationReport {
    /// Its checkpoint.
    #[serde(flatten)]
    pub checkpoint: CheckpointSummary,
    /// For an edit, how many occurrences were replaced.
    pub replacements: usize,
    /// When it went ahead unprotected over a cap (confirmed): the exact figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityVerdict>,
    /// The paths it left unprotected then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unprotected_scope: Option<Vec<String>>,
}

/// A text file of the workspace, as read.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct FileText {
    /// Its path in the workspace.
    pub path: String,
    /// Its content.
    pub content: String,
}

/// The report of a mutation done.
fn report(done: MutationOutcome) -> MutationReport {
    let record = &done.checkpoint;
    let unprotected_scope = done.capacity.as_ref().map(|_| record.targets.iter().map(|t| t.path.display()).collect());
    MutationReport {
        checkpoint: CheckpointSummary::from(record),
        replacements: done.replacements,
        capacity: done.capacity,
        unprotected_scope,
    }
}

impl Turnback {
    pub(crate) fn mutation_context(&self, confirm_unprotected: bool) -> Result<(Context<'_>, PathBuf)> {
        let cwd = self.cwd()?;
        let ctx = Context {
            store: &self.store,
            workspace: self.workspace_record()?,
            session: self.session_record()?,
            cwd: Path::new(""),
            confirm_unprotected,
            subagent: None,
        };
        Ok((ctx, cwd))
    }

    /// Applies a built-in file mutation with a checkpoint around it: the checkpoint (with
    /// the file's pre-image) is durable before the file changes, and the change is a
    /// compare-and-swap against what was read. Over a cap, it is refused unless
    /// `confirm_unprotected`, and then goes ahead with the exact figures disclosed.
    ///
    /// # Errors
    /// `path-rejected`, `already-exists`, `not-found`, `edit-no-match`, `edit-not-unique`,
    /// `over-cap` before anything is written; `conflict` if the file changed meanwhile;
    /// `unknown-outcome` if what happened cannot be established.
    pub fn mutate(&self, mutation: Mutation, confirm_unprotected: bool) -> Result<MutationReport> {
        let (ctx, cwd) = self.mutation_context(confirm_unprotected)?;
        let done = apply(Context { cwd: &cwd, ..ctx }, mutation)?;
        Ok(report(done))
    }

    /// Creates (`create_only`: only where no file is) or overwrites the file at `path` with
    /// what `input` yields, with a checkpoint around it as [`mutate`](Self::mutate) makes.
    /// Memory stays bounded whatever the input's size: content over a few MiB is kept in
    /// the store (encrypted, packed) as it is read, and written from there in pieces. Over
    /// the checkpoint cap, the input is refused as soon as the count passes the cap,
    /// keeping nothing — unless `confirm_unprotected`.
    ///
    /// # Errors
    /// As [`mutate`](Self::mutate); `over-cap` for input over the cap.
    pub fn write_from(
        &self,
        path: &Path,
        create_only: bool,
        input: &mut dyn std::io::Read,
        confirm_unprotected: bool,
    ) -> Result<MutationReport> {
        let store = &self.store;
        let cap = store.settings().checkpoint_cap;
        let limit = if confirm_unprotected { u64::MAX } else { cap };
        let over = || {
            Error::new(
                ErrorCode::OverCap,
                format!(
                    "the content on stdin is over the checkpoint cap ({cap} bytes); nothing was changed. \
                     Rerun with --confirm-unprotected to write it without rollback protection"
                ),
            )
        };
        let mut head = Vec::new();
        std::io::Read::take(&mut *input, HELD_MAX + 1)
            .read_to_end(&mut head)
            .map_err(|e| Error::new(ErrorCode::Io, format!("reading the input: {e}")).with_source(e))?;
        // The objects lock is held until the checkpoint that names the kept content is
        // committed: `gc` keeps out of content no record names yet.
        let (body, _objects) = if head.len() as u64 <= HELD_MAX {
            if head.len() as u64 > limit {
                return Err(over());
            }
            (Body::Held(head), None)
        } else {
            let objects = crate::fs::lock::objects(&store.locks_dir(), false)?;
            let mut all = std::io::Cursor::new(head).chain(input);
            let kept =
                storage_body::keep_input(store.keys(), store.kv(), &mut all, limit).map_err(|e| match e.code {
                    ErrorCode::OverCap => over(),
                    _ => e,
                })?;
            (Body::Stored { id: kept.id.0, size: kept.size }, Some(objects))
        };
        let kind = if create_only { OperationKind::CreateFile } else { OperationKind::WriteFile };
        let (ctx, cwd) = self.mutation_context(confirm_unprotected)?;
        let done = apply_change(Context { cwd: &cwd, ..ctx }, path, kind, Change::Put { create_only, body })?;
        Ok(report(done))
    }

    /// Reads a UTF-8 text file of the workspace, never through a symlink.
    ///
    /// # Errors
    /// `path-rejected`; `not-found`; `invalid-argument` if it is not UTF-8 text.
    pub fn read_file(&self, path: &Path) -> Result<FileText> {
        let rel = self.resolve(path)?;
        let parent = files::open_parent(&self.workspace_record()?.root, &rel, false)?;
        match parent.read()? {
            Current::File { body, .. } => {
                let bytes = crate::fs::body::read_whole(&body)?.unwrap_or_default();
                let content = String::from_utf8(bytes)
                    .map_err(|_| Error::invalid(format!("{}: not UTF-8 text", path.display())))?;
                Ok(FileText { path: rel.display(), content })
            }
            Current::Absent => Err(Error::not_found(format!("{}: no such file", path.display()))),
        }
    }
}
