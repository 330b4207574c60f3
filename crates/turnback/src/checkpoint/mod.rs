//! Checkpoints: self-sufficient records of single file mutations, and their lifecycle.
//!
//! This module holds the record types; [`lifecycle`] stages, dispatches, commits and
//! finishes them, [`query`] reads them (verified), [`reconcile`] recovers what a crash left,
//! [`eviction`] applies retention and deletes a session's checkpoints.
//!
//! Invariants:
//! - A checkpoint record is sealed as a whole (paths included) under its own id; the
//!   only plain traces are index keys made of ids.
//! - The record, its pre-image artifacts, its indexes and the usage counter are written in
//!   **one** transaction (`stage`); there is no separate staging marker to lose. The
//!   record's `stageState` goes `staging` (pre-images durable, nothing dispatched) →
//!   `staged` (journal dispatch written: the mutation may have happened) → `committed`
//!   (post-images captured, terminal journal event written, same transaction).
//! - A record that is not `committed` is never returned as a checkpoint by [`get`] or
//!   [`read_image`]: `recovery-locked`.
//! - [`reconcile`] turns a non-committed record whose owner process is gone into
//!   `unreachable` + `recovery-locked` (with `OperationUnknownOutcome` if it was
//!   dispatched) and removes the temporary file the crash may have left. It never touches
//!   a committed record, a record whose owner still runs, or an external stage waiting for
//!   its `commit`.
//! - Every target carries its path, effect, and pre-/post-image digest, size, class,
//!   artifact and file identity: rollback needs nothing else.

pub(crate) mod artifact;
pub(crate) mod journal;
pub(crate) mod retention;

mod eviction;
mod lifecycle;
mod query;
mod reconcile;

pub use eviction::EvictionReport;
pub(crate) use eviction::{delete_session_in, evict_expired};
pub(crate) use lifecycle::{
    PlannedWrite, PostState, commit, dispatch, finish, finish_written, over_cap_error, record_before_writes, stage,
};
pub use query::Unreadable;
pub(crate) use query::{
    ListFilter, all_ids, by_operation, cross_check, get, image_body, list, load, made_after, read_image,
};
pub use reconcile::{ReconcileReport, ReconciledCheckpoint};
pub(crate) use reconcile::{own_temp, reconcile};

use serde::{Deserialize, Serialize};

use crate::checkpoint::retention::RetentionVerdict;
use crate::error::{Error, Result};
use crate::fs::files::{Current, FileIdentity};
use crate::fs::relpath::RelPath;
use crate::storage::content::ContentClass;
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::Store;

const USAGE_ARTIFACT_BYTES: &[u8] = b"artifact-bytes";
const CHECKPOINT_SCHEMA: u16 = 1;

/// Effects no checkpoint can take back; listed with every checkpoint and rollback. A shell
/// command's or a sub-agent's effects on the workspace's files are not among them: their
/// windows make checkpoints of those. What they did elsewhere is: other machines
/// (`remote`, `network`), processes they started, systems outside turnback's reach
/// (`external`), files outside the workspace or excluded from its snapshots, and symlinks
/// (a window records regular files only; every write refuses to go through one).
pub(crate) const EXCLUDED_EFFECTS: [&str; 7] =
    ["remote", "network", "process", "external", "outside-workspace", "excluded-path", "symlink-side"];

macro_rules! state_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        #[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
        pub enum $name { $($(#[$vm])* #[serde(rename = $text)] $variant),+ }
        impl $name {
            /// The stable string form.
            pub fn as_str(self) -> &'static str { match self { $($name::$variant => $text),+ } }
        }
    };
}

state_enum!(
    /// Where a checkpoint is in its lifecycle.
    StageState {
        /// Pre-images are durable; the mutation has not been dispatched.
        Staging = "staging",
        /// The dispatch is journaled; the mutation may have happened.
        Staged = "staged",
        /// Post-images captured and the outcome journaled.
        Committed = "committed",
        /// An incomplete stage whose owner died; never shown as a checkpoint.
        Unreachable = "unreachable",
    }
);

state_enum!(
    /// What the journal says about the mutation.
    CommitState {
        /// Not finished yet.
        Pending = "pending",
        /// The mutation completed.
        Succeeded = "succeeded",
        /// The mutation reported failure (the post-image still says what is on disk).
        Failed = "failed",
        /// Dispatched, then the process died: nobody knows whether it happened.
        UnknownOutcome = "unknown-outcome",
        /// The process died before dispatching: the mutation never happened.
        Abandoned = "abandoned",
    }
);

state_enum!(
    /// How much of the mutation can be taken back.
    CoverageState {
        /// Every pre- and post-image is stored.
        FullyProtected = "fully-protected",
        /// Some image could not be stored (over a cap); see the targets.
        PartiallyProtected = "partially-protected",
        /// No image is stored: recorded, not reversible.
        Unprotected = "unprotected",
    }
);

state_enum!(
    /// Whether the content is still kept.
    RetentionState {
        /// Within its retention window.
        Retained = "retained",
        /// Past its window; its content may be evicted to make room.
        EligibleForEviction = "eligible-for-eviction",
        /// Content removed; the record remains for history.
        Evicted = "evicted",
    }
);

state_enum!(
    /// Whether the record can be trusted.
    IntegrityState {
        /// Verified on every read.
        Verified = "verified",
        /// Found altered.
        Corrupt = "corrupt",
        /// An incomplete stage: inspect, then run recovery.
        RecoveryLocked = "recovery-locked",
    }
);

/// The kind of operation a checkpoint records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// `fs create`.
    CreateFile,
    /// `fs edit`.
    EditFile,
    /// `fs write`.
    WriteFile,
    /// `fs delete`.
    DeleteFile,
    /// `stage` + `commit`: a mutation made by someone else (an agent's own tool).
    External,
    /// A rollback (or a resolution) written by turnback; itself undoable.
    Rollback,
    /// The file effects of one shell command an agent ran: what differed between the
    /// workspace's snapshots before and after it ([`ShellCall`](crate::ShellCall) says which command).
    Shell,
    /// What a sub-agent changed between its start and its stop that none of the
    /// checkpoints made meanwhile covers (its commands' effects with no window of their
    /// own, say): [`SubagentWindow`](crate::SubagentWindow).
    Subagent,
}

impl OperationKind {
    /// The stable string form (`create_file`, …, `external`).
    pub fn as_str(self) -> &'static str {
        match self {
            OperationKind::CreateFile => "create_file",
            OperationKind::EditFile => "edit_file",
            OperationKind::WriteFile => "write_file",
            OperationKind::DeleteFile => "delete_file",
            OperationKind::External => "external",
            OperationKind::Rollback => "rollback",
            OperationKind::Shell => "shell",
            OperationKind::Subagent => "subagent",
        }
    }
}

/// The effect of a mutation on one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum EffectKind {
    /// The file did not exist before.
    Create,
    /// The file's content changed.
    Edit,
    /// The file was removed.
    Delete,
}

impl EffectKind {
    /// Parses `create`, `edit`, `delete`.
    ///
    /// # Errors
    /// `invalid-argument` for anything else.
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "create" => Ok(EffectKind::Create),
            "edit" => Ok(EffectKind::Edit),
            "delete" => Ok(EffectKind::Delete),
            other => Err(Error::invalid(format!("unknown kind {other:?}; use create, edit or delete"))),
        }
    }

    fn infer(pre_present: bool, post_present: bool) -> Self {
        match (pre_present, post_present) {
            (false, _) => EffectKind::Create,
            (true, false) => EffectKind::Delete,
            (true, true) => EffectKind::Edit,
        }
    }
}

/// One side (pre or post) of a target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ImageRecord {
    /// Whether a file was there.
    pub(crate) present: bool,
    /// Keyed digest of its content, hex (absent file: none).
    pub(crate) digest: Option<String>,
    /// Its size in bytes.
    pub(crate) size: u64,
    /// Its content class.
    pub(crate) content_class: Option<ContentClass>,
    /// The artifact holding its bytes (none: absent file, or not protected).
    pub(crate) artifact_id: Option<String>,
    /// Device, inode, mode, size and times of the file.
    pub(crate) identity: Option<FileIdentity>,
}

impl ImageRecord {
    fn absent() -> Self {
        ImageRecord { present: false, digest: None, size: 0, content_class: None, artifact_id: None, identity: None }
    }
}

/// One file a checkpoint covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TargetRecord {
    /// The path, relative to the workspace root.
    pub(crate) path: RelPath,
    /// What the mutation did to it.
    pub(crate) effect: EffectKind,
    /// Before.
    pub(crate) pre_image: ImageRecord,
    /// After (none until committed).
    pub(crate) post_image: Option<ImageRecord>,
    /// Parent directories the mutation created.
    #[serde(default)]
    pub(crate) created_dirs: Vec<RelPath>,
    /// The digest of the content the mutation meant to write, recorded with the dispatch
    /// (so reconcile can tell its temporary file from someone else's content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) intended_digest: Option<String>,
}

/// The seed's mutation metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MutationMetadata {
    /// The journal's operation id.
    pub(crate) operation_id: String,
    /// Incremented on every change of the record.
    pub(crate) aggregate_version: u64,
    /// What the journal says.
    pub(crate) commit_state: CommitState,
    /// Which operation.
    pub(crate) kind: OperationKind,
}

/// A checkpoint: everything needed to take one mutation back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CheckpointRecord {
    /// Its id (UUID v7).
    pub(crate) checkpoint_id: String,
    /// The mutation it records.
    pub(crate) mutation: MutationMetadata,
    /// Every artifact it holds.
    pub(crate) artifact_ids: Vec<String>,
    /// The session's previous checkpoint.
    pub(crate) parent_checkpoint_ids: Vec<String>,
    /// How much is protected.
    pub(crate) coverage_state: CoverageState,
    /// Retention as stored (`retained` or `evicted`; eligibility is computed).
    pub(crate) retention_state: RetentionState,
    /// Integrity.
    pub(crate) integrity_state: IntegrityState,
    /// Lifecycle.
    pub(crate) stage_state: StageState,
    /// When it was staged (RFC 3339).
    pub(crate) created_at: String,
    /// When it was committed (RFC 3339).
    pub(crate) committed_at: Option<String>,
    /// The prompt round it was made in.
    pub(crate) prompt_round: Option<u64>,
    /// The session.
    pub(crate) session_id: String,
    /// The workspace.
    pub(crate) workspace_id: String,
    /// The files it covers.
    pub(crate) targets: Vec<TargetRecord>,
    /// The live process working on it (none: an external stage waiting for `commit`).
    pub(crate) owner: Option<String>,
    /// The sub-agent whose tool call made it (none: the agent itself, or a person).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) subagent: Option<String>,
    /// For a `shell` checkpoint: the command whose window it covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) shell: Option<ShellCall>,
    /// For a `subagent` checkpoint: the sub-agent's window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) subagent_window: Option<SubagentWindow>,
}

/// The window a `subagent` checkpoint covers: from the sub-agent's start to its stop.
/// Whatever changed in it is the sub-agent's unless a checkpoint made inside it covers the
/// path (the sub-agent's own edits and commands, the main agent's, a rollback): those
/// paths are left to their checkpoints, so each change is taken back by one checkpoint
/// only. A background sub-agent shares its window with whoever else worked meanwhile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SubagentWindow {
    /// The snapshot taken as it started.
    pub(crate) before_snapshot: String,
    /// The snapshot taken as it stopped.
    pub(crate) after_snapshot: String,
    /// Paths that changed in the window but are left to the checkpoints made inside it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) left_to_checkpoints: Vec<String>,
}

/// The shell command a `shell` checkpoint covers. Whatever changed in the workspace between
/// the snapshots taken as it started and as it finished is in its window: a person's edit
/// or a background sub-agent's made meanwhile too (the watcher cannot tell writers apart).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ShellCall {
    /// The command line, as the agent reported it.
    pub(crate) command: String,
    /// Its exit status, when the agent said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) exit_status: Option<i32>,
    /// The agent's id for the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) call_id: Option<String>,
    /// The snapshot taken as it started.
    pub(crate) before_snapshot: String,
    /// The snapshot taken as it finished.
    pub(crate) after_snapshot: String,
    /// Its paths that an edit tool call (the agent's, a sub-agent's) also changed inside
    /// the window: the window cannot tell which wrote what, so a rollback of it takes
    /// those edits back too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) also_by_tool_calls: Vec<String>,
}

impl CheckpointRecord {
    /// Plaintext bytes of the artifacts it holds.
    pub(crate) fn artifact_bytes(&self) -> u64 {
        self.targets
            .iter()
            .flat_map(|t| std::iter::once(&t.pre_image).chain(t.post_image.as_ref()))
            .filter(|i| i.artifact_id.is_some())
            .map(|i| i.size)
            .sum()
    }

    /// Retention verdict at the session's current round under `window`.
    pub(crate) fn retention(&self, current_round: u64, window: u32) -> RetentionVerdict {
        retention::evaluate(self.prompt_round.unwrap_or(0), current_round, window)
    }

    /// The retention state to show: stored `evicted`, else computed from the verdict.
    pub(crate) fn effective_retention(&self, verdict: &RetentionVerdict) -> RetentionState {
        match self.retention_state {
            RetentionState::Evicted => RetentionState::Evicted,
            _ if !verdict.retained => RetentionState::EligibleForEviction,
            other => other,
        }
    }

    fn save(&self, store: &Store, txn: &mut dyn Txn) -> Result<()> {
        let key = self.checkpoint_id.as_bytes();
        txn.put(schema::CHECKPOINTS, key, &store.seal_record(schema::CHECKPOINTS, key, CHECKPOINT_SCHEMA, self)?)
    }

    fn bump(&mut self) {
        self.mutation.aggregate_version += 1;
    }
}

/// Where a checkpoint comes from: its session and workspace, the prompt round it is made in
/// (retention counts rounds from it) and the sub-agent whose tool call made it.
#[derive(Clone, Copy)]
pub(crate) struct Origin<'a> {
    pub session_id: &'a str,
    pub workspace_id: &'a str,
    /// Reads the session's current round inside the staging transaction (the session's
    /// owner supplies it), so a turn that began a moment before counts.
    pub prompt_round: &'a dyn Fn(&mut dyn Txn) -> Result<u64>,
    pub subagent: Option<&'a str>,
}

impl std::fmt::Debug for Origin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Origin")
            .field("session_id", &self.session_id)
            .field("workspace_id", &self.workspace_id)
            .finish()
    }
}

/// Written inside the transaction that stages a checkpoint (a caller's own index of it).
pub(crate) type AlsoInStage<'a> = &'a dyn Fn(&mut dyn Txn, &CheckpointRecord) -> Result<()>;

/// A target as seen just before staging.
#[derive(Debug)]
pub(crate) struct PreparedTarget {
    pub path: RelPath,
    pub effect: EffectKind,
    pub current: Current,
    /// Parent directories the mutation will create (recorded before it creates them, so
    /// reconcile can remove them again if the mutation is interrupted).
    pub planned_dirs: Vec<RelPath>,
}

/// Everything `stage` needs.
pub(crate) struct StageRequest<'a> {
    pub origin: Origin<'a>,
    pub kind: OperationKind,
    pub targets: Vec<PreparedTarget>,
    /// Whether to store pre-images (false: over cap, confirmed unprotected).
    pub protect: bool,
    /// The bytes the caps are held to, when not the pre-images' size: an undo's, which
    /// counts only what the store does not hold already.
    pub cap_bytes: Option<u64>,
    /// The owning process (none for an external stage, which is dispatched at once).
    pub owner: Option<String>,
    /// Written in the same transaction.
    pub also: Option<AlsoInStage<'a>>,
    /// The shell command of a `shell` checkpoint.
    pub shell: Option<ShellCall>,
    /// The window of a `subagent` checkpoint.
    pub subagent_window: Option<SubagentWindow>,
}

fn load_in(store: &Store, txn: &mut dyn Txn, id: &str) -> Result<CheckpointRecord> {
    let value =
        txn.get(schema::CHECKPOINTS, id.as_bytes())?.ok_or_else(|| Error::not_found(format!("checkpoint {id}")))?;
    let record: CheckpointRecord = store.open_record(schema::CHECKPOINTS, id.as_bytes(), &value)?;
    check_identity(id, &record)?;
    Ok(record)
}

fn check_identity(id: &str, record: &CheckpointRecord) -> Result<()> {
    if record.checkpoint_id != id {
        return Err(Error::corrupt(format!("checkpoint {id}"), "record id does not match the requested id"));
    }
    if record.mutation.operation_id.is_empty() {
        return Err(Error::corrupt(format!("checkpoint {id}"), "no operation id"));
    }
    Ok(())
}

fn add_usage(txn: &mut dyn Txn, delta: i128) -> Result<()> {
    let now = usage_in(txn)?;
    let next = (i128::from(now) + delta).max(0) as u64;
    txn.put(schema::USAGE, USAGE_ARTIFACT_BYTES, &next.to_be_bytes())
}

fn usage_in(txn: &mut dyn Txn) -> Result<u64> {
    Ok(match txn.get(schema::USAGE, USAGE_ARTIFACT_BYTES)? {
        Some(v) => u64::from_be_bytes(v.as_slice().try_into().map_err(|_| Error::corrupt("usage", "bad counter"))?),
        None => 0,
    })
}

/// Bytes all retained checkpoint artifacts use now.
pub(crate) fn usage(store: &Store) -> Result<u64> {
    Ok(match store.kv().get(schema::USAGE, USAGE_ARTIFACT_BYTES)? {
        Some(v) => u64::from_be_bytes(v.as_slice().try_into().map_err(|_| Error::corrupt("usage", "bad counter"))?),
        None => 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    use crate::checkpoint::artifact::ImageRole;
    use crate::checkpoint::journal::{self, JournalEvent};
    use crate::error::ErrorCode;
    use crate::storage::crypto::SecretKey;
    use crate::storage::kv::MemoryKv;
    use crate::storage::settings::Settings;

    struct Fixture {
        _dir: tempfile::TempDir,
        store: Store,
        /// The session's current prompt round.
        round: Cell<u64>,
    }

    impl Fixture {
        fn advance_round(&self) {
            self.round.set(self.round.get() + 1);
        }

        fn evict(&self) -> EvictionReport {
            evict_expired(&self.store, None, &|_| Ok(Some(self.round.get()))).unwrap()
        }
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        let store = Store::with_backend(
            dir.path().join("store"),
            Box::new(MemoryKv::new()),
            SecretKey([3u8; 32]),
            Settings::default(),
        )
        .unwrap();
        Fixture { _dir: dir, store, round: Cell::new(0) }
    }

    fn stage_one(f: &Fixture, owner: Option<String>) -> CheckpointRecord {
        let current = Current::File { body: crate::fs::body::Body::Held(b"before".to_vec()), identity: identity() };
        let target = PreparedTarget {
            path: RelPath::new("a.txt").unwrap(),
            effect: EffectKind::Edit,
            current,
            planned_dirs: vec![],
        };
        let req = StageRequest {
            cap_bytes: None,
            origin: Origin {
                session_id: "s1",
                workspace_id: "w1",
                prompt_round: &|_| Ok(f.round.get()),
                subagent: None,
            },
            kind: OperationKind::EditFile,
            targets: vec![target],
            protect: true,
            owner,
            also: None,
            shell: None,
            subagent_window: None,
        };
        stage(&f.store, req).unwrap()
    }

    fn identity() -> FileIdentity {
        FileIdentity { device: 1, inode: 2, mode: 0o100644, size: 6, mtime_ns: 0, ctime_ns: 0 }
    }

    fn post(bytes: &[u8]) -> Vec<PostState> {
        vec![PostState {
            current: Current::File { body: crate::fs::body::Body::Held(bytes.to_vec()), identity: identity() },
            created_dirs: vec![],
            identity_known: true,
        }]
    }

    #[test]
    fn stage_writes_record_and_pending_marker_together_in_staging_state() {
        let f = fixture();
        let owner = f.store.owner().unwrap().id().to_string();
        let r = stage_one(&f, Some(owner));
        let loaded = load(&f.store, &r.checkpoint_id).unwrap();
        assert_eq!(loaded.stage_state, StageState::Staging);
        assert!(f.store.kv().get(schema::CHECKPOINTS_PENDING, r.checkpoint_id.as_bytes()).unwrap().is_some());
        assert_eq!(get(&f.store, &r.checkpoint_id).unwrap_err().code, ErrorCode::RecoveryLocked);
    }

    #[test]
    fn only_the_temporary_names_of_a_pending_checkpoint_are_turnbacks_own() {
        let f = fixture();
        let r = stage_one(&f, Some("deadbeef".into()));
        dispatch(&f.store, &r.checkpoint_id, &[None]).unwrap();
        let hex = r.checkpoint_id.replace('-', "");
        let own = |rel: &str| own_temp(&f.store, "w1", rel.as_bytes()).unwrap();
        assert_eq!(own(&format!(".a.txt.turnback-{hex}.part")), Some(crate::fs::files::TempPhase::Writing));
        assert_eq!(own(&format!(".a.txt.turnback-{hex}.tmp")), Some(crate::fs::files::TempPhase::Swapping));
        // The same shape is anyone's file: another id, target, directory or workspace.
        assert_eq!(own(".a.txt.turnback-0123456789abcdef0123456789abcdef.part"), None);
        assert_eq!(own(&format!(".b.txt.turnback-{hex}.part")), None);
        assert_eq!(own(&format!("sub/.a.txt.turnback-{hex}.part")), None);
        assert_eq!(own_temp(&f.store, "w2", format!(".a.txt.turnback-{hex}.part").as_bytes()).unwrap(), None);
        // Once reconcile has settled the interrupted write, its names are nobody's any more.
        reconcile(&f.store, &|_| None).unwrap();
        assert_eq!(own(&format!(".a.txt.turnback-{hex}.part")), None);
    }

    #[test]
    fn reconcile_leaves_live_owners_and_external_stages_alone() {
        let f = fixture();
        let owner = f.store.owner().unwrap().id().to_string();
        let live = stage_one(&f, Some(owner));
        let external = stage_one(&f, None);
        let report = reconcile(&f.store, &|_| None).unwrap();
        assert_eq!((report.in_progress, report.awaiting_commit, report.reconciled.len()), (1, 1, 0));
        assert_eq!(load(&f.store, &live.checkpoint_id).unwrap().stage_state, StageState::Staging);
        assert_eq!(load(&f.store, &external.checkpoint_id).unwrap().stage_state, StageState::Staged);
    }

    #[test]
    fn reconcile_locks_dead_owners_stages_and_records_unknown_outcome_after_dispatch() {
        let f = fixture();
        let never_dispatched = stage_one(&f, Some("deadbeef".into()));
        let dispatched = stage_one(&f, Some("deadbeef".into()));
        dispatch(&f.store, &dispatched.checkpoint_id, &[None]).unwrap();
        let report = reconcile(&f.store, &|_| None).unwrap();
        assert_eq!(report.reconciled.len(), 2);
        let a = load(&f.store, &never_dispatched.checkpoint_id).unwrap();
        assert_eq!((a.stage_state, a.integrity_state), (StageState::Unreachable, IntegrityState::RecoveryLocked));
        assert_eq!(a.mutation.commit_state, CommitState::Abandoned);
        let b = load(&f.store, &dispatched.checkpoint_id).unwrap();
        assert_eq!(b.mutation.commit_state, CommitState::UnknownOutcome);
        let events: Vec<_> =
            journal::events(f.store.kv(), &b.mutation.operation_id).unwrap().into_iter().map(|e| e.event).collect();
        assert_eq!(events, [JournalEvent::EffectDispatchCommitted, JournalEvent::OperationUnknownOutcome]);
        // An unreachable record can never be committed afterwards.
        let err = commit(&f.store, &b.checkpoint_id, post(b"after"), false).unwrap_err();
        assert_eq!(err.code, ErrorCode::RecoveryLocked);
        assert!(list(&f.store, "s1", ListFilter::default()).unwrap().records.is_empty());
    }

    #[test]
    fn reconcile_never_touches_committed_records_and_commit_is_idempotent() {
        let f = fixture();
        let r = stage_one(&f, None);
        let committed = commit(&f.store, &r.checkpoint_id, post(b"after"), false).unwrap();
        assert_eq!(committed.stage_state, StageState::Committed);
        let again = commit(&f.store, &r.checkpoint_id, post(b"something else"), false).unwrap();
        assert_eq!(again, committed);
        let events = journal::events(f.store.kv(), &r.mutation.operation_id).unwrap();
        assert_eq!(events.len(), 2);
        reconcile(&f.store, &|_| None).unwrap();
        assert_eq!(load(&f.store, &r.checkpoint_id).unwrap(), committed);
        let (meta, bytes) = read_image(&f.store, &committed, 0, ImageRole::Post).unwrap().unwrap();
        assert_eq!(bytes, b"after");
        assert_eq!(meta.key_version, 1);
    }

    #[test]
    fn an_external_stage_never_committed_is_evicted_after_its_window() {
        let f = fixture();
        let r = stage_one(&f, None);
        assert_eq!(usage(&f.store).unwrap(), 6);
        for _ in 0..5 {
            f.advance_round();
        }
        assert_eq!(f.evict().evicted, 1);
        assert_eq!(usage(&f.store).unwrap(), 0);
        let gone = load(&f.store, &r.checkpoint_id).unwrap();
        assert_eq!(
            (gone.stage_state, gone.mutation.commit_state),
            (StageState::Unreachable, CommitState::UnknownOutcome)
        );
        assert_eq!(reconcile(&f.store, &|_| None).unwrap().awaiting_commit, 0);
    }

    #[test]
    fn usage_counts_stored_bytes_and_eviction_frees_them() {
        let f = fixture();
        let r = stage_one(&f, None);
        commit(&f.store, &r.checkpoint_id, post(b"after!"), false).unwrap();
        assert_eq!(usage(&f.store).unwrap(), 12);
        for _ in 0..4 {
            f.advance_round();
        }
        assert_eq!(f.evict().evicted, 0, "round 4 is inside a 5-round window");
        f.advance_round();
        let report = f.evict();
        assert_eq!((report.evicted, report.bytes_freed), (1, 12));
        assert_eq!(usage(&f.store).unwrap(), 0);
        let evicted = load(&f.store, &r.checkpoint_id).unwrap();
        assert_eq!(evicted.retention_state, RetentionState::Evicted);
        assert_eq!(read_image(&f.store, &evicted, 0, ImageRole::Pre).unwrap_err().code, ErrorCode::NotFound);
    }
}
