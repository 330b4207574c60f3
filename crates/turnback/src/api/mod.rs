//! The API layer: [`Turnback`], the one facade every entry point calls — the command line,
//! the agent hooks, the MCP server and any Rust program.
//!
//! Opening it opens the store and runs every layer's recovery before anything else can
//! read: incomplete checkpoint stages of dead processes become `recovery-locked`, and
//! turns whose late start snapshot's process died are told so. Then there is one method
//! per capability of the command line, each returning a `Serialize` result type that the
//! command line renders as text or JSON and the MCP server returns as it is.
//!
//! The rules an entry point must not get wrong live here once:
//! - a turn's prompt goes into the history when the turn begins ([`Turnback::begin_turn`]);
//! - a turn boundary closes, as failed, every tool call whose "after" event never came
//!   ([`Turnback::end_turn`], and a new prompt);
//! - the plan-id rule of applies ([`Actor`], [`Turnback::rollback_apply`]);
//! - every rollback and rewind result lists the effects no undo takes back.
//!
//! Invariants: the workspace is registered and the session resolved (created if new) the
//! first time a method needs them, never by methods that do not (`verify` creates no
//! session).

mod calls;
pub(crate) use calls::Closing;
pub(crate) use calls::subagent_key;
pub(crate) use shell::{NO_START, REPORTED_AFTER, WindowClosed, WindowOf};
mod compare;
mod edit;
mod external;
mod keys;
pub(crate) mod maintenance;
pub(crate) mod mutation;
#[cfg(feature = "remote")]
mod remote;
mod runtime;
mod sessions;
mod shell;
mod turns;
mod undo;
pub(crate) mod views;
mod watching;

pub use compare::{CompareRequest, CompareSide, Comparison, ForkPoint};
pub use keys::KeyImport;
pub use maintenance::{
    Deleted, DuReport, GcReport, KeyStatus, KeyVersion, ObjectUsage, Problem, SessionUsage, VerifyCounts, VerifyReport,
};
pub use mutation::{CheckpointSummary, FileText, Mutation, MutationReport};
#[cfg(feature = "remote")]
pub use remote::{PullReports, PushReports, REMOTE_GC_GRACE, RemoteList, RemoteSessionList, SessionChoice};
pub use runtime::{Push, Runtime};

pub use sessions::{Appended, SessionInfo, SessionList};
pub use turns::{DiffReport, DiffRequest, ShellRecorded, TurnList, TurnSummary};
pub use undo::{ArtifactView, CheckpointList, CheckpointView, Encryption, Inspection, InspectionProblem};

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Serialize;

use crate::checkpoint::{self, ReconcileReport, artifact};
use crate::error::{Error, ErrorCode, Result};
use crate::session::workspace::Workspace;
use crate::session::{Session, turn};
use crate::storage::gc;
use crate::storage::keys::KeyConfig;
use crate::storage::settings::{Settings, SettingsOverrides};
use crate::storage::store::{Store, StoreOptions};

/// Reads a JSON document a caller does not control the size of (an agent's hook event, a
/// history entry on stdin) in memory bounded by what is kept: every string over 4 MiB keeps
/// its start and a marker saying how much text went (the history counts it in its notes),
/// and a document still over 64 MiB is refused without being read whole.
///
/// # Errors
/// `invalid-argument` for a document over the cap or not UTF-8; `io` for reading errors.
pub fn read_json_input(input: impl std::io::Read) -> Result<BoundedInput> {
    crate::base::bounded::read_json(input).map_err(|e| match e.kind() {
        std::io::ErrorKind::FileTooLarge | std::io::ErrorKind::InvalidData => Error::invalid(e.to_string()),
        _ => Error::new(ErrorCode::Io, format!("reading the input: {e}")),
    })
}

pub use crate::base::bounded::Bounded as BoundedInput;

/// Reads at most `cap` bytes of an input a caller does not control the size of (a prompt
/// file, a file's new content on stdin): `None` as soon as the input passes the cap, having
/// kept no more than `cap + 1` bytes — never the whole of a larger input, nor an endless one.
///
/// # Errors
/// `io` for reading errors.
pub fn read_at_most(input: impl std::io::Read, cap: u64) -> Result<Option<Vec<u8>>> {
    crate::base::bounded::read_at_most(input, cap)
        .map_err(|e| Error::new(ErrorCode::Io, format!("reading the input: {e}")))
}

/// Who is asking. It decides one thing, the plan-id rule of applies: an apply always
/// plans again under the workspace lock and applies that plan, and refuses (changing
/// nothing) if the caller names a plan id that is no longer the plan's. A person may
/// apply without naming one (they typed `--apply`); an agent acting for a person (the MCP
/// server's clients) must name the plan id of a preview, so that the person could have
/// seen what is about to change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Actor {
    /// A person at the command line or in the terminal UI.
    #[default]
    Person,
    /// An agent acting for a person (MCP).
    Agent,
}

/// How to open turnback.
#[derive(Debug, Clone)]
pub struct Options {
    /// The store directory (`None`: `$TURNBACK_HOME`, else `$XDG_DATA_HOME/turnback`, else
    /// `~/.local/share/turnback`).
    pub store: Option<PathBuf>,
    /// The workspace directory.
    pub workspace: PathBuf,
    /// The directory relative paths are resolved from (`None`: the workspace).
    pub cwd: Option<PathBuf>,
    /// The session (`None`: the workspace's latest, else a new one).
    pub session: Option<String>,
    /// Where to look for the master key.
    pub keys: KeyConfig,
    /// Settings given as flags, over the store's `settings.toml`.
    pub settings: SettingsOverrides,
    /// Create the store (and a key) if it does not exist yet.
    pub create: bool,
    /// Who is asking.
    pub actor: Actor,
    /// The agent working through this handle (`claude-code`, `codex`, `gemini`, `cursor`,
    /// `opencode`, `mcp`, `run`); recorded on a session it creates or finds without one.
    /// `None` for a person's own commands.
    pub agent: Option<String>,
    /// How the work around turns runs in the background (see [`Runtime`]).
    pub runtime: Runtime,
}

impl Options {
    /// Options for `workspace`, with the store, keys and settings from the environment.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Options {
            store: None,
            workspace: workspace.into(),
            cwd: None,
            session: None,
            keys: KeyConfig::from_env(),
            settings: SettingsOverrides::default(),
            create: false,
            actor: Actor::Person,
            agent: None,
            runtime: Runtime::default(),
        }
    }
}

/// turnback, opened on a store, a workspace and a session.
pub struct Turnback {
    store: Store,
    workspace_dir: PathBuf,
    cwd: Option<PathBuf>,
    requested_session: Option<String>,
    workspace: OnceLock<Workspace>,
    session: OnceLock<Session>,
    reconciled: ReconcileReport,
    runtime: Runtime,
    progress: Option<Box<Progress>>,
    actor: Actor,
    agent: Option<String>,
}

/// Told, while a snapshot reads, the bytes read so far and the bytes to read in all.
pub type Progress = dyn Fn(u64, u64) + Send + Sync;

impl std::fmt::Debug for Turnback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turnback")
            .field("store", &self.store.dir())
            .field("workspace", &self.workspace_dir)
            .field("session", &self.requested_session)
            .finish()
    }
}

/// What `init` set up.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct InitReport {
    /// The store directory.
    pub store: PathBuf,
    /// The workspace root.
    pub workspace: PathBuf,
    /// Its id.
    pub workspace_id: String,
    /// Where the master key was found (or created).
    pub key_source: String,
    /// The data-key version new writes use.
    pub data_key_version: u32,
    /// The limits in force.
    pub settings: InitSettings,
}

/// The limits `init` reports.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct InitSettings {
    /// Checkpoint retention, in prompt rounds.
    pub retention_prompt_rounds: u32,
    /// Bytes one checkpoint may hold.
    pub checkpoint_cap: u64,
    /// Bytes all retained checkpoints may hold.
    pub store_cap: u64,
}

impl Turnback {
    /// Opens the store and recovers what crashed processes left (see the module docs).
    ///
    /// # Errors
    /// `not-found` if the store does not exist and `create` is false; `key-unavailable` if
    /// the store holds data and no key is found; `key-mismatch` for the wrong key;
    /// `invalid-argument` for a malformed setting.
    pub fn open(opts: &Options) -> Result<Self> {
        let dir = match &opts.store {
            Some(d) => d.clone(),
            None => crate::storage::store::default_dir()
                .ok_or_else(|| Error::invalid("no store directory: set TURNBACK_HOME or HOME, or pass --store"))?,
        };
        let store_opts = StoreOptions {
            dir: absolute(&dir)?,
            keys: opts.keys.clone(),
            overrides: opts.settings.clone(),
            create: opts.create,
        };
        let store = Store::open(&store_opts)?;
        let reconciled = reconcile(&store)?;
        Ok(Turnback {
            store,
            workspace_dir: opts.workspace.clone(),
            cwd: opts.cwd.clone(),
            requested_session: opts.session.clone(),
            workspace: OnceLock::new(),
            session: OnceLock::new(),
            reconciled,
            runtime: opts.runtime.clone(),
            progress: None,
            actor: opts.actor,
            agent: opts.agent.clone(),
        })
    }

    /// Tells `progress` how the reading goes of end snapshots taken for agent events
    /// ([`record_event`](Self::record_event)), for a progress bar.
    pub fn with_progress(mut self, progress: Box<Progress>) -> Self {
        self.progress = Some(progress);
        self
    }

    /// The store directory.
    pub fn store_dir(&self) -> &Path {
        self.store.dir()
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        self.store.settings()
    }

    /// What recovery found and did when this was opened.
    pub fn reconciled(&self) -> &ReconcileReport {
        &self.reconciled
    }

    /// The workspace, registered on first use.
    ///
    /// # Errors
    /// `io` if its directory does not exist.
    pub fn workspace(&self) -> Result<views::Workspace> {
        self.workspace_record().map(Into::into)
    }

    /// The workspace's record, registered on first use.
    pub(crate) fn workspace_record(&self) -> Result<&Workspace> {
        if let Some(ws) = self.workspace.get() {
            return Ok(ws);
        }
        let ws = Workspace::ensure(&self.store, &self.workspace_dir)?;
        Ok(self.workspace.get_or_init(|| ws))
    }

    /// The workspace if it is registered already (this registers nothing).
    ///
    /// # Errors
    /// Store errors; `io` if its directory does not exist.
    pub fn registered_workspace(&self) -> Result<Option<views::Workspace>> {
        Ok(self.registered_workspace_record()?.as_ref().map(Into::into))
    }

    /// The workspace's record if it is registered already.
    pub(crate) fn registered_workspace_record(&self) -> Result<Option<Workspace>> {
        match self.workspace.get() {
            Some(ws) => Ok(Some(ws.clone())),
            None => Workspace::find(&self.store, &self.workspace_dir),
        }
    }

    /// The session: the one asked for (created if new), else the workspace's latest, else
    /// a new one. Its prompt round is as it was when first resolved.
    ///
    /// # Errors
    /// `invalid-argument` if the session asked for belongs to another workspace.
    pub fn session(&self) -> Result<views::Session> {
        self.session_record().map(Into::into)
    }

    /// The session's record, resolved on first use (see [`session`](Self::session)).
    pub(crate) fn session_record(&self) -> Result<&Session> {
        if let Some(s) = self.session.get() {
            return Ok(s);
        }
        let ws = self.workspace_record()?;
        let s = Session::resolve_for(&self.store, ws, self.requested_session.as_deref(), self.agent.as_deref())?;
        Ok(self.session.get_or_init(|| s))
    }

    /// The directory relative paths are resolved from.
    fn cwd(&self) -> Result<PathBuf> {
        match &self.cwd {
            Some(c) => Ok(c.clone()),
            None => Ok(self.workspace_record()?.root.clone()),
        }
    }

    /// Resolves a path given by a person or agent to one inside the workspace.
    fn resolve(&self, path: &Path) -> Result<crate::fs::relpath::RelPath> {
        self.workspace_record()?.resolve(path, &self.cwd()?, self.store.protected_paths())
    }

    /// Creates the store and key if needed and registers the workspace.
    ///
    /// # Errors
    /// As [`open`](Self::open) and [`workspace`](Self::workspace).
    pub fn init(&self) -> Result<InitReport> {
        let ws = self.workspace_record()?;
        let s = self.store.settings();
        Ok(InitReport {
            store: self.store.dir().to_path_buf(),
            workspace: ws.root.clone(),
            workspace_id: ws.id.clone(),
            key_source: self.store.keys().source.describe(),
            data_key_version: self.store.keys().current_version(),
            settings: InitSettings {
                retention_prompt_rounds: s.retention_prompt_rounds,
                checkpoint_cap: s.checkpoint_cap,
                store_cap: s.store_cap,
            },
        })
    }

    /// The plan-id rule (see [`Actor`]).
    fn check_plan(&self, plan: Option<&str>, preview: &str) -> Result<()> {
        if plan.is_none() && self.actor == Actor::Agent {
            return Err(Error::invalid(format!("preview first: pass the planId that {preview} returned")));
        }
        Ok(())
    }
}

/// Every layer's recovery, in order: checkpoint stages of dead processes, then turns whose
/// late start snapshot's process died.
pub(crate) fn reconcile(store: &Store) -> Result<ReconcileReport> {
    let root_of = |id: &str| Workspace::by_id(store, id).ok().map(|w| w.root);
    let mut report = checkpoint::reconcile(store, &root_of)?;
    report.late_snapshots_failed = turn::reconcile(store)?;
    Ok(report)
}

/// Removes every content object nothing keeps alive: no snapshot reaches it and no
/// checkpoint artifact names it. Returns how many objects and stored bytes went.
fn sweep_objects(store: &Store) -> Result<(u64, u64)> {
    let swept = with_live_roots(store, |roots| gc::sweep(store, roots))?;
    Ok((swept.objects, swept.bytes))
}

/// [`sweep_objects`] unless a writer holds the objects lock (then nothing is swept).
fn sweep_objects_if_free(store: &Store) -> Result<()> {
    with_live_roots(store, |roots| gc::sweep_if_free(store, roots)).map(drop)
}

/// Runs `f` with what keeps content alive in `store`.
fn with_live_roots<T>(store: &Store, f: impl FnOnce(&gc::LiveRoots<'_>) -> T) -> T {
    let roots = gc::LiveRoots {
        reached: &|| crate::snapshot::live_objects(store),
        named_in: &artifact::content_in,
        sweep_stored_ahead: &|| crate::snapshot::statcache::sweep_pieces(store),
    };
    f(&roots)
}

fn absolute(p: &Path) -> Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    let cwd = std::env::current_dir().map_err(|e| Error::new(ErrorCode::Io, format!("current directory: {e}")))?;
    Ok(cwd.join(p))
}
