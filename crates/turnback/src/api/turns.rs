//! Turns, snapshots and diffs through the facade.

use std::sync::atomic::AtomicBool;

use serde::Serialize;

use crate::api::Closing;
use crate::api::Turnback;
use crate::api::views::{self, Begun};
use crate::error::{Error, ErrorCode, Hint, Result};
use crate::session::begin::{self, BeginRequest};
use crate::session::turn::{self, Shell, Turn, TurnKind};
use crate::snapshot::diff::{self, NumStat};
use crate::snapshot::{self, LeftOut, SnapshotKind, SnapshotRecord, TakeOptions};
use crate::storage::content::ContentId;

/// A session's turns, as `turns` lists them.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TurnList {
    /// The session.
    pub session_id: String,
    /// Its turns, oldest first.
    pub turns: Vec<TurnSummary>,
}

/// One turn in a list.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TurnSummary {
    /// 1-based position in the session.
    pub index: u64,
    /// Stable id.
    pub turn_id: String,
    /// Prompt or background.
    pub kind: TurnKind,
    /// The prompt's first line.
    pub preview: String,
    /// When it started.
    pub started_at: String,
    /// When it ended (none while it runs).
    pub ended_at: Option<String>,
    /// Its start snapshot.
    pub snapshot: views::SnapshotRef,
    /// Its end snapshot.
    pub end_snapshot: Option<views::SnapshotRef>,
    /// The shell commands the agent ran in it, with their exit status when known.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shell_effects: Vec<views::ShellEffect>,
    /// Set when a rewind took it back (its history is cut; undoing the rewind gives it
    /// back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewound: Option<views::RewoundBy>,
}

/// Which two states to compare.
#[derive(Debug, Clone, Default)]
pub struct DiffRequest {
    /// A turn's 1-based index: its start against its end (or the live tree while it
    /// runs). Without it and without `from`: the newest turn.
    pub turn: Option<u64>,
    /// A snapshot id (or `live`) to compare from…
    pub from: Option<String>,
    /// …and to (`None`: the live tree).
    pub to: Option<String>,
    /// Include the unified diff of text files.
    pub patch: bool,
}

/// What changed between two snapshots.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DiffReport {
    /// The older snapshot.
    pub from: String,
    /// The newer snapshot.
    pub to: String,
    /// Every changed path, with lines added and deleted.
    pub changes: Vec<NumStat>,
    /// Files either snapshot left out for their size (the newer one's reason first): what
    /// happened to them is not known.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
    /// The unified diff, when asked for (binary files named, not shown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

/// A shell command recorded in the running turn.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct ShellRecorded {
    /// The turn, with the command among its shell effects.
    pub turn: views::Turn,
}

impl Turnback {
    /// Begins a turn. Tool calls still waiting for their "after" event are closed first,
    /// as failed (a call the person denied never gets one). A message sent while a prompt
    /// turn runs joins it, into its history, unless `req.new` or background work; the same
    /// prompt delivered again within a minute of its turn's start joins it and records
    /// nothing. Otherwise a start
    /// snapshot is taken — waited for at most as long as
    /// the [`Runtime`](crate::Runtime)'s start snapshot says, if it set a process to take
    /// it, after which the turn goes on with its snapshot marked late — and the turn is
    /// recorded, its prompt in the session's history with it; a running prompt turn it
    /// supersedes ends where it starts. With `cancel` set meanwhile, no turn is recorded.
    ///
    /// # Errors
    /// `cancelled` (no turn recorded); store errors.
    pub fn begin_turn(&self, req: &BeginRequest, cancel: Option<&AtomicBool>) -> Result<Begun> {
        let never = AtomicBool::new(false);
        self.ensure_watcher();
        let closed = self.finish_abandoned_tool_calls(Closing::MainAgent)?;
        let (ws, session) = (self.workspace_record()?, self.session_record()?);
        let starter = self.runtime.start_snapshot.as_ref().map(|(s, wait)| (&**s as &dyn begin::StartSnapshot, *wait));
        let begun = begin::begin(&self.store, ws, session, req, starter, cancel.unwrap_or(&never))?;
        Ok(Begun { joined: begun.joined, turn: (&begun.turn).into(), abandoned_calls_closed: closed })
    }

    /// Ends the running turn with its end snapshot, first closing, as failed, every tool
    /// call whose "after" event never came (a denied or failed call). `progress` is told
    /// how the snapshot's reading goes (bytes read, to read).
    ///
    /// # Errors
    /// `not-found` if no turn is running.
    pub fn end_turn(&self, progress: Option<&(dyn Fn(u64, u64) + Sync)>) -> Result<views::Turn> {
        self.close_turn(progress)?
            .0
            .as_ref()
            .map(Into::into)
            .ok_or_else(|| Error::not_found("a running turn").with_hint(Hint::BeginTurn))
    }

    /// Closes, as failed, every tool call still waiting for its "after" event, then ends
    /// the running turn if there is one: the turn (if one ended) and how many calls were
    /// closed.
    pub(crate) fn close_turn(&self, progress: Option<&(dyn Fn(u64, u64) + Sync)>) -> Result<(Option<Turn>, u64)> {
        self.close_turn_with(progress, Closing::MainAgent)
    }

    /// [`close_turn`](Self::close_turn), closing the calls `closing` names.
    pub(crate) fn close_turn_with(
        &self,
        progress: Option<&(dyn Fn(u64, u64) + Sync)>,
        closing: Closing<'_>,
    ) -> Result<(Option<Turn>, u64)> {
        let closed = self.finish_abandoned_tool_calls(closing)?;
        if self.running_turn()?.is_none() {
            return Ok((None, closed));
        }
        match turn::end(&self.store, self.workspace_record()?, self.session_record()?, progress) {
            Ok(ended) => {
                self.auto_push(&ended.session_id);
                Ok((Some(ended), closed))
            }
            // The same stop delivered twice at once: the other delivery ended it meanwhile.
            Err(e) if e.code == ErrorCode::NotFound && self.running_turn()?.is_none() => Ok((None, closed)),
            Err(e) => Err(e),
        }
    }

    /// At a turn's end, starts pushing the session to the `[remote] auto-push` remote, if
    /// one is set and the runtime can push. Never fails the turn end: a settings file that
    /// does not read, or a push that does not start, leaves the turn ended as it is.
    /// Without the `remote` feature there are no remotes to push to.
    fn auto_push(&self, session: &str) {
        #[cfg(feature = "remote")]
        {
            let Some(push) = self.runtime.push.as_deref() else { return };
            let settings = self.store.dir().join("settings.toml");
            let Ok(Some(remote)) = crate::storage::settings::auto_push(&settings) else { return };
            let _ = push.push(self.store.dir(), &remote, session);
        }
        #[cfg(not(feature = "remote"))]
        let _ = session;
    }

    /// Takes the start snapshot of turn `turn_id`, which a begin elsewhere is waiting for
    /// (the detached process a [`StartSnapshot`](begin::StartSnapshot) spawns).
    ///
    /// # Errors
    /// Store and workspace errors; the turn is then told its snapshot failed.
    pub fn take_turn_start_snapshot(&self, turn_id: &str) -> Result<views::Snapshot> {
        let (ws, session) = (self.workspace_record()?, self.session_record()?);
        turn::take_start_snapshot(&self.store, ws, session, turn_id, None).map(|r| (&r).into())
    }

    /// Records a shell command the agent ran in the running turn (secrets redacted).
    ///
    /// # Errors
    /// `not-found` if no turn is running.
    pub fn record_shell(&self, shell: Shell<'_>) -> Result<ShellRecorded> {
        // Reported on its own, after it ran: no window could be taken around it.
        let no_window = shell.no_window.or(shell.checkpoint_id.is_none().then_some(crate::api::REPORTED_AFTER));
        let shell = Shell { no_window, ..shell };
        let turn = turn::record_shell(&self.store, &self.session_record()?.id, shell)?
            .ok_or_else(|| Error::not_found("a running turn").with_hint(Hint::BeginTurn))?;
        Ok(ShellRecorded { turn: (&turn).into() })
    }

    /// The progress callback set by [`with_progress`](Self::with_progress).
    pub(crate) fn progress(&self) -> Option<&(dyn Fn(u64, u64) + Sync)> {
        self.progress.as_deref().map(|p| p as &(dyn Fn(u64, u64) + Sync))
    }

    /// The session's running turn, if any.
    pub(crate) fn running_turn(&self) -> Result<Option<Turn>> {
        turn::running(&self.store, &self.session_record()?.id)
    }

    /// Reopens the session's newest turn if it has ended and none runs.
    pub(crate) fn reopen_turn(&self) -> Result<Option<Turn>> {
        turn::reopen(&self.store, &self.session_record()?.id)
    }

    /// Records a shell command in the running turn, if one runs.
    pub(crate) fn record_shell_if_running(&self, shell: Shell<'_>) -> Result<Option<Turn>> {
        turn::record_shell(&self.store, &self.session_record()?.id, shell)
    }

    /// Records a sub-agent's start (or stop) in the running turn, if one runs.
    pub(crate) fn record_subagent(&self, id: &str, kind: Option<&str>, stopped: bool) -> Result<Option<Turn>> {
        turn::record_subagent(&self.store, &self.session_record()?.id, id, kind, stopped)
    }

    /// Takes an ad hoc snapshot of the whole workspace.
    ///
    /// # Errors
    /// Store and workspace errors (a snapshot over a limit is recorded as skipped).
    pub fn snapshot(&self, progress: Option<&(dyn Fn(u64, u64) + Sync)>) -> Result<views::Snapshot> {
        self.take_snapshot(SnapshotKind::AdHoc, progress).map(|r| (&r).into())
    }

    pub(crate) fn take_snapshot(
        &self,
        kind: SnapshotKind,
        progress: Option<&(dyn Fn(u64, u64) + Sync)>,
    ) -> Result<SnapshotRecord> {
        let (ws, session) = (self.workspace_record()?, self.session_record()?);
        let opts = TakeOptions { kind: Some(kind), progress, ..TakeOptions::default() };
        snapshot::take(&self.store, turn::source(ws, session), &opts, &turn::Hooks::new(&self.store))
    }

    /// The session's turns.
    ///
    /// # Errors
    /// Store errors.
    pub fn turns(&self) -> Result<TurnList> {
        // Listing makes nothing: a workspace without a session has no turns.
        if self.session.get().is_none() && self.requested_session.is_none() {
            let none = crate::session::Session::latest(&self.store, self.workspace_record()?)?.is_none();
            if none {
                return Ok(TurnList { session_id: String::new(), turns: Vec::new() });
            }
        }
        let session = self.session_record()?;
        let turns = turn::list(&self.store, &session.id)?
            .into_iter()
            .map(|t| TurnSummary {
                index: t.index,
                turn_id: t.turn_id,
                kind: t.kind,
                preview: t.preview,
                started_at: t.started_at,
                ended_at: t.ended_at,
                snapshot: (&t.snapshot).into(),
                end_snapshot: t.end_snapshot.as_ref().map(Into::into),
                shell_effects: t.shell_effects.iter().map(Into::into).collect(),
                rewound: t.rewound.as_ref().map(Into::into),
            })
            .collect();
        Ok(TurnList { session_id: session.id.clone(), turns })
    }

    /// The full records of the session's turns, oldest first.
    ///
    /// # Errors
    /// Store errors.
    pub fn turn_records(&self) -> Result<Vec<views::Turn>> {
        Ok(turn::list(&self.store, &self.session_record()?.id)?.iter().map(Into::into).collect())
    }

    /// A turn of the session, by 1-based index or by id.
    ///
    /// # Errors
    /// `not-found`.
    pub fn turn(&self, which: &str) -> Result<views::Turn> {
        let session = &self.session_record()?.id;
        let turn = match which.parse::<u64>() {
            Ok(index) => turn::by_index(&self.store, session, index)?,
            Err(_) => turn::get(&self.store, which)?,
        };
        if turn.session_id != *session {
            return Err(Error::not_found(format!("turn {which} in session {session}")));
        }
        Ok((&turn).into())
    }

    /// What changed between two snapshots, or in a turn.
    ///
    /// # Errors
    /// `not-found` for an unknown turn or snapshot; `invalid-argument` for a skipped one.
    pub fn diff(&self, req: &DiffRequest) -> Result<DiffReport> {
        let (a, b) = match (&req.from, &req.to) {
            (Some(f), Some(t)) => (self.snapshot_or_live(f)?, self.snapshot_or_live(t)?),
            (Some(f), None) => (self.snapshot_or_live(f)?, self.take_snapshot(SnapshotKind::AdHoc, None)?),
            _ => {
                let t = match req.turn {
                    Some(i) => turn::by_index(&self.store, &self.session_record()?.id, i)?,
                    None => turn::list(&self.store, &self.session_record()?.id)?
                        .pop()
                        .ok_or_else(|| Error::not_found("a turn"))?,
                };
                let start = t
                    .snapshot
                    .id
                    .as_deref()
                    .ok_or_else(|| Error::not_found(format!("turn {}'s start snapshot", t.index)))?;
                let end = match t.end_snapshot.as_ref().and_then(|e| e.id.clone()) {
                    Some(id) => snapshot::get(&self.store, &id)?,
                    None => self.take_snapshot(SnapshotKind::AdHoc, None)?,
                };
                (snapshot::get(&self.store, start)?, end)
            }
        };
        let changes = diff::trees(&self.store, &root(&a)?, &root(&b)?)?;
        let (counts, patch) = diff::report(&self.store, &changes, req.patch)?;
        let mut left_out = b.left_out.clone();
        left_out.extend(a.left_out.iter().filter(|l| !b.left_out.iter().any(|n| n.path == l.path)).cloned());
        left_out.sort_by(|x, y| x.path.cmp(&y.path));
        Ok(DiffReport {
            from: a.snapshot_id,
            to: b.snapshot_id,
            changes: counts,
            left_out,
            patch: req.patch.then_some(patch),
        })
    }

    fn snapshot_or_live(&self, id: &str) -> Result<SnapshotRecord> {
        if id == "live" { self.take_snapshot(SnapshotKind::AdHoc, None) } else { snapshot::get(&self.store, id) }
    }
}

pub(crate) fn root(r: &SnapshotRecord) -> Result<ContentId> {
    r.root.as_deref().and_then(ContentId::from_hex).ok_or_else(|| {
        Error::new(
            ErrorCode::InvalidArgument,
            format!("snapshot {} was skipped ({})", r.snapshot_id, r.skipped.as_deref().unwrap_or("?")),
        )
    })
}
