//! Rewind: the workspace back to the start of a turn, undoing that turn and every later
//! one, without overwriting anyone else's work.
//!
//! Invariants:
//! - The target is the start snapshot of turn T; the current state is a snapshot taken now
//!   (kind `pre-rewind`), so both sides are complete, verified trees.
//! - A path is changed only if every difference between the target and now is the agents'
//!   work: its state must be carried unchanged from each turn's end snapshot to the next
//!   turn's start, and from the last turn's end to now. Anything else is a hand edit (a
//!   conflict, left alone unless `--force PATH`). A needed end snapshot that is missing
//!   (late, skipped or pruned) makes the path `unverified`, also left alone.
//! - Nothing is deleted that the current snapshot does not hold, so a file ignored or
//!   excluded at snapshot time is never deleted; nothing is written through a symlinked
//!   parent; nested repositories are never changed. A file left out of the target, the
//!   current or any snapshot along the chain for its size is never deleted or restored,
//!   forced or not; the plan lists the files left out of the target and now.
//! - Another session's work is left alone unless forced: every path its checkpoints wrote
//!   since turn T began, and every path that changed inside one of its turns (start to end
//!   snapshot) that ended after turn T began — a formatter it ran is its work too. Its
//!   turns still running, or whose snapshots are missing, cannot be told apart from this
//!   session's work: only their checkpoints count.
//! - Before any write, a checkpoint holding the current bytes of everything to be
//!   overwritten or deleted is committed (roll it back to undo the rewind), and the
//!   pre-rewind snapshot is kept; every write is a compare-and-swap against the state the
//!   plan saw.
//! - The plan id digests the target, the current tree, the turns and the forced paths:
//!   an unchanged workspace gives the same id, so `--apply --plan` refuses if anything moved.
//! - The conversation history goes back with the files, under the same workspace lock,
//!   after the writes: cut before turn T — unless the rewind was blocked (nothing taken
//!   back), when it stays as the files do.

mod hidden;

use crate::fs::body::Body;
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use hidden::HiddenAtTarget;

use crate::base::hex::hex;
use crate::checkpoint;
use crate::error::{Error, ErrorCode, Result};
use crate::fs::files::{self, Current, FileIdentity};
use crate::fs::relpath::RelPath;
use crate::session::Session;
use crate::session::turn::{self, Turn};
use crate::session::workspace::Workspace;
use crate::snapshot::tree::{Node, NodeKind};
use crate::snapshot::{self, LeftOut, SnapshotKind, SnapshotRecord};
use crate::storage::content::ContentId;
use crate::storage::store::Store;
use crate::undo::guarded::{self, Expected, Intended, Refused, ResultType, Write};

/// What a rewind does with one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Written back to its content at the target turn's start.
    Restore,
    /// Removed: it did not exist at the target turn's start.
    Delete,
    /// Left as it is (a conflict, unverified, or a nested repository).
    LeaveAlone,
}

/// Why a path is left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// Changed by someone else between two turns.
    HandEditBetweenTurns,
    /// Changed by someone else after the last turn.
    HandEditAfterLastTurn,
    /// An end snapshot needed to tell is missing.
    Unverified,
    /// A nested repository: its own history is not turnback's to change.
    NestedRepository,
    /// Changed between the plan and the write.
    ChangedDuringRewind,
    /// A symlinked parent or another obstacle on the way.
    BehindSymlink,
    /// A symlink on either side: restore it by hand (the plan shows its target).
    Symlink,
    /// Absent from the target snapshot because it was ignored, excluded or inside a nested
    /// repository then — it may well have existed, so it is never deleted.
    NotSnapshotted,
    /// Another session changed it after the target turn began: a checkpointed mutation,
    /// or a change inside one of its turns (a command it ran).
    OtherSession,
    /// Left out of a snapshot it needs for its size (over `max-file-size`, or alone more
    /// than a snapshot may take): never deleted or restored.
    TooLarge,
}

/// One path of the plan.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PathPlan {
    /// The path.
    pub path: String,
    /// What happens to it.
    pub action: Action,
    /// Why it is left alone.
    pub reason: Option<Reason>,
    /// For people.
    pub detail: Option<String>,
    /// Forced over a conflict with `--force`.
    pub forced: bool,
    #[serde(skip)]
    raw: Vec<u8>,
    #[serde(skip)]
    target: Option<Node>,
    #[serde(skip)]
    current: Option<Node>,
}

impl PathPlan {
    /// The path's exact bytes, for showing it to people with
    /// [`quote_name`](crate::quote_name): [`path`](Self::path) is lossy when they are not
    /// UTF-8, so two names could read the same there.
    pub fn path_bytes(&self) -> &[u8] {
        &self.raw
    }
}

/// A rewind plan (the preview).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Digest of everything the plan depends on.
    pub plan_id: String,
    /// The turn rewound to (its start).
    pub to_turn: u64,
    /// The turns undone.
    pub turns: Vec<String>,
    /// The target snapshot.
    pub target_snapshot: String,
    /// The snapshot of the workspace now.
    pub current_snapshot: String,
    /// The target snapshot was taken late (after the turn had begun): it may already hold
    /// some of that turn's own edits, which the rewind then cannot take back.
    pub target_late: bool,
    /// Every path that differs, with what happens to it.
    pub paths: Vec<PathPlan>,
    /// Files left out of the target snapshot or of the snapshot taken now for their size:
    /// never deleted or restored (what happened to them is not known).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
    /// Counts by action.
    pub counts: BTreeMap<String, u64>,
    /// `full`, `partial` or `blocked` if applied now (after apply: what it did).
    pub result_type: ResultType,
    /// Effects no rewind takes back (shell commands and the like), never protected.
    pub excluded_effects: Vec<crate::undo::rollback::ExcludedEffect>,
    /// The shell commands the undone turns ran (secrets redacted): their effects stay.
    pub shell_effects: Vec<String>,
}

/// The result of applying a rewind.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Rewound {
    /// The plan, with the outcome of every path.
    pub plan: Plan,
    /// The checkpoint holding what the rewind overwrote (roll it back to undo the rewind).
    pub checkpoint_id: Option<String>,
    /// The prompt that started the turn rewound to, so it can be offered again.
    pub restored_prompt: Option<String>,
    /// History entries removed (those of the rewound turns).
    pub history_entries_removed: u64,
}

fn root_of(r: &SnapshotRecord) -> Result<ContentId> {
    r.root.as_deref().and_then(ContentId::from_hex).ok_or_else(|| {
        Error::new(
            ErrorCode::NotFound,
            format!("snapshot {} was skipped ({})", r.snapshot_id, r.skipped.as_deref().unwrap_or("no tree")),
        )
    })
}

/// Snapshot `id`, if it exists.
fn record_at(store: &Store, id: Option<&str>) -> Result<Option<SnapshotRecord>> {
    let Some(id) = id else { return Ok(None) };
    match snapshot::get(store, id) {
        Ok(r) => Ok(Some(r)),
        Err(e) if e.code == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The root of snapshot `id`, if it exists and was not skipped.
fn root_at(store: &Store, id: Option<&str>) -> Result<Option<ContentId>> {
    Ok(record_at(store, id)?.and_then(|r| r.root.as_deref().and_then(ContentId::from_hex)))
}

fn same(a: Option<&Node>, b: Option<&Node>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => x.kind == y.kind && (x.mode & 0o7777) == (y.mode & 0o7777),
        _ => false,
    }
}

/// The turns a rewind undoes and the snapshots along them: the chain every path must
/// follow, start(T) → end(T) = start(T+1) → … → end(last) = now.
struct Chain {
    turns: Vec<Turn>,
    target: SnapshotRecord,
    target_root: ContentId,
    current: SnapshotRecord,
    current_root: ContentId,
    /// Each turn's end (`None`: missing); a running last turn ends now.
    ends: Vec<Option<ContentId>>,
    /// Each turn's start after the first (`None`: missing).
    starts: Vec<Option<ContentId>>,
    /// Paths a snapshot of the chain (target, ends, starts, now) left out for their size,
    /// with why: the chain cannot vouch for them.
    too_large: BTreeMap<Vec<u8>, String>,
}

impl Chain {
    /// Loads the turns from `to` on and their snapshots, and takes the pre-rewind snapshot.
    fn load(store: &Store, ws: &Workspace, session: &Session, to: u64) -> Result<Self> {
        let turns: Vec<Turn> = turn::list(store, &session.id)?.into_iter().filter(|t| t.index >= to).collect();
        let first = turns.first().filter(|t| t.index == to).ok_or_else(|| Error::not_found(format!("turn {to}")))?;
        let target_id = first.snapshot.id.clone().ok_or_else(|| {
            Error::not_found(format!(
                "turn {to}'s start snapshot ({})",
                first.snapshot.skipped.as_deref().unwrap_or("not taken")
            ))
        })?;
        let target = snapshot::get(store, &target_id)?;
        let target_root = root_of(&target)?;
        let opts = snapshot::TakeOptions { kind: Some(SnapshotKind::PreRewind), ..Default::default() };
        let current = snapshot::take(store, turn::source(ws, session), &opts, &turn::Hooks::new(store))?;
        let current_root = root_of(&current)?;
        let mut too_large = BTreeMap::new();
        let mut note = |r: &SnapshotRecord, which: String| {
            for l in &r.left_out {
                too_large.entry(l.path.as_bytes().to_vec()).or_insert_with(|| format!("{which}: {}", l.reason));
            }
        };
        note(&current, "now".into());
        note(&target, format!("turn {to}'s start"));
        // A snapshot of the chain, noted for what it left out; its root (none: missing).
        let mut root_noting = |id: Option<&str>, which: String| -> Result<Option<ContentId>> {
            let record = record_at(store, id)?;
            if let Some(r) = &record {
                note(r, which);
            }
            Ok(record.and_then(|r| r.root.as_deref().and_then(ContentId::from_hex)))
        };
        let mut ends = Vec::new();
        let mut starts = Vec::new();
        for (i, t) in turns.iter().enumerate() {
            ends.push(match &t.end_snapshot {
                Some(e) => root_noting(e.id.as_deref(), format!("turn {}'s end", t.index))?,
                None if i + 1 == turns.len() => Some(current_root),
                None => None,
            });
            if i > 0 {
                starts.push(root_noting(t.snapshot.id.as_deref(), format!("turn {}'s start", t.index))?);
            }
        }
        Ok(Chain { turns, target, target_root, current, current_root, ends, starts, too_large })
    }

    /// Where the chain breaks for path `p` (whose state now is `now`): a hand edit between
    /// two turns or after the last, or a missing snapshot that makes it unverifiable.
    fn break_at(
        &self,
        lookup: &mut snapshot::Lookup<'_>,
        p: &[u8],
        now: Option<&Node>,
    ) -> Result<Option<(Reason, String)>> {
        let last = self.ends.len();
        for (k, end) in self.ends.iter().enumerate() {
            let Some(end) = end else {
                return Ok(Some((
                    Reason::Unverified,
                    format!("turn {}'s end snapshot is missing", self.turns[k].index),
                )));
            };
            let at_next = if k + 1 < last {
                let Some(next) = &self.starts[k] else {
                    let why = format!("turn {}'s start snapshot is missing", self.turns[k + 1].index);
                    return Ok(Some((Reason::Unverified, why)));
                };
                lookup.node(next, p)?
            } else {
                now.cloned()
            };
            if !same(lookup.node(end, p)?.as_ref(), at_next.as_ref()) {
                return Ok(Some(if k + 1 < last {
                    let why = format!(
                        "changed by hand between turns {} and {}",
                        self.turns[k].index,
                        self.turns[k + 1].index
                    );
                    (Reason::HandEditBetweenTurns, why)
                } else {
                    (Reason::HandEditAfterLastTurn, "changed by hand after the last turn".to_string())
                }));
            }
        }
        Ok(None)
    }
}

/// Decides, path by path, what a rewind does: the one decision of rewind, used by its
/// preview and its apply alike.
struct Judge<'a> {
    ws: &'a Workspace,
    lookup: snapshot::Lookup<'a>,
    hidden: HiddenAtTarget<'a>,
    /// Paths other sessions changed since the target turn began, with how.
    others: BTreeMap<Vec<u8>, String>,
    force: &'a BTreeSet<String>,
    /// The paths decided so far to be deleted (ancestors are decided before what is
    /// below them: the changes come sorted).
    deleting: BTreeSet<Vec<u8>>,
}

impl Judge<'_> {
    /// What happens to path `p`, whose state at the target is `t` and now `c`.
    fn path(&mut self, chain: &Chain, p: &[u8], t: Option<&Node>, c: Option<&Node>) -> Result<PathPlan> {
        let name = String::from_utf8_lossy(p).into_owned();
        let mut why = chain.break_at(&mut self.lookup, p, c)?;
        let nested =
            is_kind(t, |k| matches!(k, NodeKind::Gitlink(_))) || is_kind(c, |k| matches!(k, NodeKind::Gitlink(_)));
        if let Some(detail) = chain.too_large.get(p) {
            why = Some((
                Reason::TooLarge,
                format!("left out of a snapshot for its size ({detail}); never deleted or restored"),
            ));
        } else if nested {
            why = Some((Reason::NestedRepository, "a nested repository is never changed by a rewind".into()));
        } else if is_kind(t, is_link) || is_kind(c, is_link) {
            why = Some((Reason::Symlink, "a symlink: rewind restores files only; restore the link by hand".into()));
        }
        // Whatever else is said about it (a hand edit, an unverified chain), a path the
        // target could not see is never deleted, forced or not.
        let soft = !matches!(why, Some((Reason::NestedRepository | Reason::Symlink | Reason::TooLarge, _)));
        if soft && t.is_none() && self.hidden.hides(p)? {
            let detail = "not in the target snapshot because it was ignored or excluded then; never deleted";
            why = Some((Reason::NotSnapshotted, detail.into()));
        }
        // A change the chain of snapshots cannot attribute (a hand edit, by what it sees) is
        // named for who made it when another session's records say it was that session.
        if matches!(why, None | Some((Reason::HandEditBetweenTurns | Reason::HandEditAfterLastTurn, _)))
            && let Some(how) = self.others.get(p)
        {
            why = Some((Reason::OtherSession, how.clone()));
        }
        if why.is_none()
            && let Some(detail) = self.obstacle(p)?
        {
            why = Some((Reason::BehindSymlink, detail));
        }
        let hard = matches!(
            why,
            Some((Reason::Symlink | Reason::NotSnapshotted | Reason::BehindSymlink | Reason::TooLarge, _))
        );
        let forced = why.is_some() && !nested && !hard && self.force.contains(&name);
        let action = match (why.is_some() && !forced, t) {
            (true, _) => Action::LeaveAlone,
            (false, Some(_)) => Action::Restore,
            (false, None) => Action::Delete,
        };
        let (reason, detail) = match why {
            Some((reason, detail)) => ((!forced).then_some(reason), Some(detail)),
            None => (None, None),
        };
        if action == Action::Delete {
            self.deleting.insert(p.to_vec());
        }
        Ok(PathPlan {
            raw: p.to_vec(),
            path: name,
            action,
            reason,
            detail,
            forced,
            target: t.cloned(),
            current: c.cloned(),
        })
    }
}

impl Judge<'_> {
    /// What stands in the way of writing `p` now, if anything does: an ancestor on disk
    /// that is a symlink (never written through) or a file — unless that file is one this
    /// plan deletes first (a directory the undone turns replaced with a file comes back
    /// once the file is gone: deletions go first).
    fn obstacle(&self, p: &[u8]) -> Result<Option<String>> {
        let blocked = files::open_parent(&self.ws.root, &RelPath::new(p.to_vec())?, false)
            .is_err_and(|e| e.code == ErrorCode::PathRejected);
        if !blocked {
            return Ok(None);
        }
        Ok(match files::not_a_directory_above(&self.ws.root, p) {
            Some((ancestor, files::InTheWay::Symlink)) => {
                Some(format!("behind a symlink now ({}); never written through", String::from_utf8_lossy(ancestor)))
            }
            Some((ancestor, _)) if self.deleting.contains(ancestor) => None,
            Some((ancestor, _)) => Some(format!(
                "{}, where its directory was, is a file now that this rewind leaves as it is",
                String::from_utf8_lossy(ancestor)
            )),
            None => Some("something on its way is not a directory; never written through".into()),
        })
    }
}

/// A file that comes back where a directory is now needs that directory gone: if the plan
/// leaves something below it alone, the file is left alone too, named for what stays (the
/// write would find the directory not empty). Decided once every path is, since what is
/// below a path comes after it.
fn keep_directories_holding_what_stays(paths: &mut [PathPlan]) {
    let staying: Vec<Vec<u8>> =
        paths.iter().filter(|p| p.action == Action::LeaveAlone).map(|p| p.raw.clone()).collect();
    for p in paths.iter_mut().filter(|p| p.action == Action::Restore && p.current.is_none()) {
        let below = |s: &&Vec<u8>| s.len() > p.raw.len() && s.starts_with(&p.raw) && s[p.raw.len()] == b'/';
        if let Some(stays) = staying.iter().find(below) {
            p.action = Action::LeaveAlone;
            p.reason = Some(Reason::BehindSymlink);
            p.detail = Some(format!(
                "a directory now, holding {}, which this rewind leaves as it is",
                String::from_utf8_lossy(stays)
            ));
            p.forced = false;
        }
    }
}

fn is_kind(n: Option<&Node>, f: impl Fn(&NodeKind) -> bool) -> bool {
    n.is_some_and(|n| f(&n.kind))
}

fn is_link(k: &NodeKind) -> bool {
    matches!(k, NodeKind::Symlink(_))
}

/// Plans rewinding `session` to the start of turn `to` (1-based index), taking a
/// pre-rewind snapshot of the workspace now. Changes no workspace file.
///
/// # Errors
/// `not-found` if the turn or its start snapshot does not exist.
pub(crate) fn plan(
    store: &Store,
    ws: &Workspace,
    session: &Session,
    to: u64,
    force: &BTreeSet<String>,
) -> Result<Plan> {
    let chain = Chain::load(store, ws, session, to)?;
    // Only the paths that differ between the target and now (found by descending into the
    // directories whose ids differ), each looked up along the chain.
    let changed = crate::snapshot::diff::raw(store, &chain.target_root, &chain.current_root)?;
    let mut judge = Judge {
        ws,
        lookup: snapshot::Lookup::new(store),
        hidden: HiddenAtTarget::new(store, ws, chain.target_root, &chain.target),
        others: other_sessions_paths(store, ws, session, &chain.turns[0].turn_id)?,
        force,
        deleting: BTreeSet::new(),
    };
    let mut paths = Vec::new();
    for change in changed.iter().filter(|c| !same(c.old.as_ref(), c.new.as_ref())) {
        paths.push(judge.path(&chain, &change.path, change.old.as_ref(), change.new.as_ref())?);
    }
    keep_directories_holding_what_stays(&mut paths);
    let material = serde_json::json!({
        "target": chain.target.root,
        "current": chain.current.root,
        "turns": chain.turns.iter().map(|t| &t.turn_id).collect::<Vec<_>>(),
        "force": force,
        "paths": paths.iter().map(|p| (&p.path, p.action)).collect::<Vec<_>>(),
    });
    let plan_id = hex(&store.keys().lookup_id("rewind-plan", &serde_json::to_vec(&material).expect("json"))[..16]);
    let mut plan = Plan {
        plan_id,
        to_turn: to,
        turns: chain.turns.iter().map(|t| t.turn_id.clone()).collect(),
        target_snapshot: chain.target.snapshot_id.clone(),
        current_snapshot: chain.current.snapshot_id.clone(),
        target_late: chain.turns[0].snapshot.late,
        left_out: left_out(&chain),
        paths,
        counts: BTreeMap::new(),
        result_type: ResultType::Full,
        excluded_effects: crate::undo::rollback::excluded_effects(),
        shell_effects: chain.turns.iter().flat_map(|t| t.shell_effects.iter().map(|e| e.command.clone())).collect(),
    };
    plan.count();
    Ok(plan)
}

impl Plan {
    /// Counts the paths by action, and the result they make.
    fn count(&mut self) {
        let mut counts = BTreeMap::new();
        for p in &self.paths {
            let key =
                serde_json::to_value(p.action).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
            *counts.entry(key).or_insert(0) += 1;
        }
        let left = self.paths.iter().filter(|p| p.action == Action::LeaveAlone).count();
        self.result_type = ResultType::of(self.paths.len() - left, left);
        self.counts = counts;
    }
}

/// A snapshot file's content as a body: named by its id, read from the store in pieces
/// when it is written (a rewind never holds a file whole).
fn stored_body(node: &Node) -> Result<Body> {
    match &node.kind {
        NodeKind::File(id) => Ok(Body::Stored { id: id.0, size: node.size }),
        _ => Err(Error::invalid("not a file")),
    }
}

/// Applies a rewind of `session` to the start of turn `to` through the guarded-apply
/// engine. With `plan_id`, refuses (changing nothing) unless the plan made now has that id.
///
/// # Errors
/// `conflict` for a stale plan; `over-cap` if the undo checkpoint would break a cap.
pub(crate) fn apply(
    store: &Store,
    ws: &Workspace,
    session: &Session,
    to: u64,
    force: &BTreeSet<String>,
    plan_id: Option<&str>,
) -> Result<Rewound> {
    let target = guarded::Target {
        store,
        workspace: ws,
        session,
        failpoints: ["rewind-committed", "rewind-before-swap", "rewind-written"],
    };
    let make = || {
        let plan = plan(store, ws, session, to, force)?;
        Ok(Rewinding { store, session, to, plan, writes: Vec::new(), cut: (None, 0) })
    };
    let prepare = |r: &mut Rewinding| r.prepare();
    let (done, checkpoint_id) = guarded::apply(target, plan_id, make, prepare)?;
    let (restored_prompt, history_entries_removed) = done.cut;
    Ok(Rewound { plan: done.plan, checkpoint_id, restored_prompt, history_entries_removed })
}

/// A rewind being applied: its plan and its writes (with the path each belongs to).
struct Rewinding<'a> {
    store: &'a Store,
    session: &'a Session,
    to: u64,
    plan: Plan,
    writes: Vec<(usize, Write)>,
    /// The history cut, once done: the prompt given back and the entries removed.
    cut: (Option<String>, u64),
}

impl Rewinding<'_> {
    /// Reads what every path to change holds now and is to hold, from the snapshots;
    /// orders the writes: deletions deepest first, then restores (a directory that
    /// replaced a file is gone before the file comes back).
    fn prepare(&mut self) -> Result<()> {
        let mut work: Vec<usize> =
            (0..self.plan.paths.len()).filter(|&i| self.plan.paths[i].action != Action::LeaveAlone).collect();
        work.sort_by_key(|&i| {
            let p = &self.plan.paths[i];
            (p.action != Action::Delete, std::cmp::Reverse(p.raw.iter().filter(|c| **c == b'/').count()))
        });
        for i in work {
            let p = &self.plan.paths[i];
            let (expected, current) = match &p.current {
                Some(n @ Node { kind: NodeKind::File(id), .. }) => (
                    Expected::File { digest: id.to_hex(), inode: None },
                    Current::File {
                        body: stored_body(n)?,
                        identity: FileIdentity {
                            device: 0,
                            inode: 0,
                            mode: n.mode,
                            size: n.size,
                            mtime_ns: 0,
                            ctime_ns: 0,
                        },
                    },
                ),
                _ => (Expected::Absent, Current::Absent),
            };
            let intended = match &p.target {
                Some(n @ Node { kind: NodeKind::File(_), .. }) => {
                    Intended::File { body: stored_body(n)?, mode: Some(n.mode) }
                }
                _ => Intended::Absent,
            };
            let write = Write {
                path: RelPath::new(p.raw.clone())?,
                expected,
                current,
                intended,
                make_parents: true,
                clear_empty_dir: p.action == Action::Restore && p.current.is_none(),
            };
            self.writes.push((i, write));
        }
        Ok(())
    }
}

impl guarded::Plan for Rewinding<'_> {
    fn plan_id(&self) -> &str {
        &self.plan.plan_id
    }

    /// What a rewind replaces is in the snapshot taken for its plan, what it puts back in
    /// the turn's start snapshot: its checkpoint keeps nothing the store does not hold.
    fn images_held(&self) -> bool {
        true
    }

    fn writes(&self) -> Vec<Write> {
        self.writes.iter().map(|(_, w)| w.clone()).collect()
    }

    fn written(&mut self, _root: &std::path::Path, index: usize, refused: Option<Refused>) {
        let p = &mut self.plan.paths[self.writes[index].0];
        let (reason, detail) = match refused {
            None => return,
            Some(Refused::Moved) => {
                (Reason::ChangedDuringRewind, "changed between the plan and the write; left as it is".to_string())
            }
            Some(Refused::Obstacle(_, message)) => (Reason::BehindSymlink, message),
        };
        p.action = Action::LeaveAlone;
        p.reason = Some(reason);
        p.detail = Some(detail);
    }

    /// Counts what was done; cuts the history before the turn rewound to, under the lock,
    /// unless the rewind was blocked (the files are as they were, and so is the history).
    fn finish(&mut self, checkpoint: Option<&str>) -> Result<()> {
        self.plan.count();
        if self.plan.result_type != ResultType::Blocked {
            self.cut = cut_history(self.store, self.session, self.to, checkpoint)?;
        }
        Ok(())
    }
}

/// Cuts the conversation history before turn `to` (its entries and every later turn's go),
/// marks those turns rewound, and returns turn `to`'s prompt with how many entries went.
/// The entries cut are kept with the rewind's `checkpoint`, so that undoing the rewind
/// gives them back (and clears the marks).
fn cut_history(store: &Store, session: &Session, to: u64, checkpoint: Option<&str>) -> Result<(Option<String>, u64)> {
    let turns = crate::session::turn::list(store, &session.id)?;
    let Some(target) = turns.iter().find(|t| t.index == to) else { return Ok((None, 0)) };
    let prompt = crate::session::history::prompt_of(store, &session.id, &target.turn_id)?;
    let cut: std::collections::HashSet<String> =
        turns.iter().filter(|t| t.index >= to).map(|t| t.turn_id.clone()).collect();
    let keyed = crate::session::history::keyed(store, &session.id)?;
    let now = crate::base::time::format_ms(crate::base::time::now_ms());
    let mut txn = store.kv().begin()?;
    let removed = crate::session::history::cut_in(store, &mut *txn, &session.id, &keyed, &cut, checkpoint)?;
    crate::session::turn::mark_rewound_in(store, &mut *txn, &turns, to, &now, checkpoint)?;
    txn.commit()?;
    Ok((prompt, removed))
}

/// The files left out for their size of the snapshot taken now, then of the target.
fn left_out(chain: &Chain) -> Vec<LeftOut> {
    let mut out = chain.current.left_out.clone();
    out.extend(
        chain.target.left_out.iter().filter(|l| !out.iter().any(|n| n.path == l.path)).cloned().collect::<Vec<_>>(),
    );
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Paths *other* sessions in this workspace changed since the turn `since` began, with
/// how: those their checkpoints wrote, and those that changed between the start and end
/// snapshots of their turns that ended after it (UUID v7 ids sort by creation time, so a
/// snapshot id at or after `since` was taken after it).
fn other_sessions_paths(
    store: &Store,
    ws: &Workspace,
    session: &Session,
    since: &str,
) -> Result<BTreeMap<Vec<u8>, String>> {
    let mut out = BTreeMap::new();
    for id in checkpoint::all_ids(store)?.into_iter().filter(|id| id.as_str() >= since) {
        let Ok(r) = checkpoint::load(store, &id) else { continue };
        if r.workspace_id == ws.id && r.session_id != session.id {
            for t in &r.targets {
                let how = format!("written by session {} since this turn began", r.session_id);
                out.entry(t.path.as_bytes().to_vec()).or_insert(how);
            }
        }
    }
    for other in Session::list(store, ws)?.into_iter().filter(|s| s.id != session.id) {
        for t in turn::list(store, &other.id)? {
            let Some(end) = t.end_snapshot.as_ref().and_then(|e| e.id.as_deref()).filter(|e| *e >= since) else {
                continue;
            };
            let (Some(start), Some(end)) = (root_at(store, t.snapshot.id.as_deref())?, root_at(store, Some(end))?)
            else {
                continue;
            };
            for change in crate::snapshot::diff::raw(store, &start, &end)? {
                let how =
                    format!("changed in session {}'s turn {}, which overlaps the turns rewound", other.id, t.index);
                out.entry(change.path).or_insert(how);
            }
        }
    }
    Ok(out)
}
