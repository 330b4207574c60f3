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
//!   parent; nested repositories are never changed.
//! - Before any write, a checkpoint holding the current bytes of everything to be
//!   overwritten or deleted is committed (roll it back to undo the rewind), and the
//!   pre-rewind snapshot is kept; every write is a compare-and-swap against the state the
//!   plan saw.
//! - The plan id digests the target, the current tree, the turns and the forced paths:
//!   an unchanged workspace gives the same id, so `--apply --plan` refuses if anything moved.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::checkpoint::{self, PlannedWrite};
use crate::error::{Error, ErrorCode, Result};
use crate::fs::files::{self, Current, Expect, FileIdentity, Swap};
use crate::session::Session;
use crate::session::turn::{self, Turn};
use crate::session::workspace::{RelPath, Workspace};
use crate::snapshot::tree::{Node, NodeKind};
use crate::snapshot::{self, SnapshotKind, SnapshotRecord};
use crate::storage::crypto::hex;
use crate::storage::object::ContentId;
use crate::storage::store::Store;

/// What a rewind does with one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
    /// Another session's checkpointed mutation wrote it after the target turn began.
    OtherSession,
}

/// One path of the plan.
#[derive(Debug, Clone, Serialize)]
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

/// A rewind plan (the preview).
#[derive(Debug, Clone, Serialize)]
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
    /// Counts by action.
    pub counts: BTreeMap<String, u64>,
    /// Effects no rewind takes back (shell commands and the like), never protected.
    pub excluded_effects: Vec<crate::undo::rollback::ExcludedEffect>,
    /// The shell commands the undone turns ran (secrets redacted): their effects stay.
    pub shell_effects: Vec<String>,
}

/// The result of applying a rewind.
#[derive(Debug, Clone, Serialize)]
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

/// The root of snapshot `id`, if it exists and was not skipped.
fn root_at(store: &Store, id: Option<&str>) -> Result<Option<ContentId>> {
    let Some(id) = id else { return Ok(None) };
    match snapshot::get(store, id) {
        Ok(r) => Ok(r.root.as_deref().and_then(ContentId::from_hex)),
        Err(e) if e.code == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn same(a: Option<&Node>, b: Option<&Node>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => x.kind == y.kind && (x.mode & 0o7777) == (y.mode & 0o7777),
        _ => false,
    }
}

/// Plans rewinding `session` to the start of turn `to` (1-based index), taking a
/// pre-rewind snapshot of the workspace now. Changes no workspace file.
///
/// # Errors
/// `not-found` if the turn or its start snapshot does not exist.
pub fn plan(store: &Store, ws: &Workspace, session: &Session, to: u64, force: &BTreeSet<String>) -> Result<Plan> {
    let turns: Vec<Turn> = turn::list(store, &session.id)?.into_iter().filter(|t| t.index >= to).collect();
    let first = turns.first().filter(|t| t.index == to).ok_or_else(|| Error::not_found(format!("turn {to}")))?;
    let target_id = first.snapshot.id.clone().ok_or_else(|| {
        Error::not_found(format!(
            "turn {to}'s start snapshot ({})",
            first.snapshot.skipped.as_deref().unwrap_or("not taken")
        ))
    })?;
    let target_record = snapshot::get(store, &target_id)?;
    let target_root = root_of(&target_record)?;
    let current_record = snapshot::take(store, ws, session, SnapshotKind::PreRewind)?;
    let current_root = root_of(&current_record)?;

    // The chain each path must follow: start(T) -> end(T) = start(T+1) -> ... -> end(last) = now.
    let mut ends = Vec::new();
    let mut starts = Vec::new();
    for (i, t) in turns.iter().enumerate() {
        let end = match &t.end_snapshot {
            Some(e) => root_at(store, e.id.as_deref())?,
            // A running last turn: its end is now.
            None if i + 1 == turns.len() => Some(current_root),
            None => None,
        };
        ends.push(end);
        if i > 0 {
            starts.push(root_at(store, t.snapshot.id.as_deref())?);
        }
    }
    // Only the paths that differ between the target and now (found by descending into the
    // directories whose ids differ), each looked up along the chain.
    let changed = crate::snapshot::diff::raw(store, &target_root, &current_root)?;
    let mut lookup = snapshot::Lookup::new(store);
    let mut hidden_at_target = HiddenAtTarget::new(store, ws, target_root, &target_record);
    let others = other_sessions_paths(store, ws, session, &first.turn_id)?;
    let mut paths = Vec::new();
    for change in &changed {
        let (p, t, c) = (&change.path, change.old.as_ref(), change.new.as_ref());
        if same(t, c) {
            continue;
        }
        let name = String::from_utf8_lossy(p).into_owned();
        let mut reason = None;
        let mut detail = None;
        for (k, end) in ends.iter().enumerate() {
            let Some(end) = end else {
                reason = Some(Reason::Unverified);
                detail = Some(format!("turn {}'s end snapshot is missing", turns[k].index));
                break;
            };
            let next = if k + 1 < ends.len() {
                match &starts[k] {
                    Some(s) => *s,
                    None => {
                        reason = Some(Reason::Unverified);
                        detail = Some(format!("turn {}'s start snapshot is missing", turns[k + 1].index));
                        break;
                    }
                }
            } else {
                current_root
            };
            let at_end = lookup.node(end, p)?;
            let at_next = if next == current_root { c.cloned() } else { lookup.node(&next, p)? };
            if !same(at_end.as_ref(), at_next.as_ref()) {
                reason =
                    Some(if k + 1 < ends.len() { Reason::HandEditBetweenTurns } else { Reason::HandEditAfterLastTurn });
                detail = Some(if k + 1 < ends.len() {
                    format!("changed by hand between turns {} and {}", turns[k].index, turns[k + 1].index)
                } else {
                    "changed by hand after the last turn".to_string()
                });
                break;
            }
        }
        let nested = matches!(t.map(|n| &n.kind), Some(NodeKind::Gitlink(_)))
            || matches!(c.map(|n| &n.kind), Some(NodeKind::Gitlink(_)));
        if nested {
            reason = Some(Reason::NestedRepository);
            detail = Some("a nested repository is never changed by a rewind".into());
        }
        let is_link = |n: Option<&Node>| matches!(n.map(|n| &n.kind), Some(NodeKind::Symlink(_)));
        if !nested && (is_link(t) || is_link(c)) {
            reason = Some(Reason::Symlink);
            detail = Some("a symlink: rewind restores files only; restore the link by hand".into());
        }
        // Whatever else is said about it (a hand edit, an unverified chain), a path the
        // target could not see is never deleted, forced or not.
        let soft = !matches!(reason, Some(Reason::NestedRepository | Reason::Symlink));
        if soft && t.is_none() && hidden_at_target.hides(p)? {
            reason = Some(Reason::NotSnapshotted);
            detail = Some("not in the target snapshot because it was ignored or excluded then; never deleted".into());
        }
        if reason.is_none() && others.contains(p) {
            reason = Some(Reason::OtherSession);
            detail = Some("written by another session since this turn began".into());
        }
        if reason.is_none()
            && files::open_parent(&ws.root, &RelPath::new(p.clone())?, false)
                .is_err_and(|e| e.code == ErrorCode::PathRejected)
        {
            reason = Some(Reason::BehindSymlink);
            detail = Some("behind a symlink now; never written through".into());
        }
        let hard = matches!(reason, Some(Reason::Symlink | Reason::NotSnapshotted | Reason::BehindSymlink));
        let forced = reason.is_some() && !nested && !hard && force.contains(&name);
        let action = match (reason.is_some() && !forced, t) {
            (true, _) => Action::LeaveAlone,
            (false, Some(_)) => Action::Restore,
            (false, None) => Action::Delete,
        };
        paths.push(PathPlan {
            raw: p.clone(),
            path: name,
            action,
            reason: if forced { None } else { reason },
            detail,
            forced,
            target: t.cloned(),
            current: c.cloned(),
        });
    }
    let material = serde_json::json!({
        "target": target_record.root,
        "current": current_record.root,
        "turns": turns.iter().map(|t| &t.turn_id).collect::<Vec<_>>(),
        "force": force,
        "paths": paths.iter().map(|p| (&p.path, p.action)).collect::<Vec<_>>(),
    });
    let plan_id = hex(&store.keys().lookup_id("rewind-plan", &serde_json::to_vec(&material).expect("json"))[..16]);
    let mut counts = BTreeMap::new();
    for p in &paths {
        let key = serde_json::to_value(p.action).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        *counts.entry(key).or_insert(0) += 1;
    }
    Ok(Plan {
        plan_id,
        to_turn: to,
        turns: turns.iter().map(|t| t.turn_id.clone()).collect(),
        target_snapshot: target_id,
        current_snapshot: current_record.snapshot_id,
        target_late: first.snapshot.late,
        paths,
        counts,
        excluded_effects: crate::undo::rollback::excluded_effects(),
        shell_effects: turns.iter().flat_map(|t| t.shell_effects.iter().map(|e| e.command.clone())).collect(),
    })
}

fn bytes_of(store: &Store, node: &Node) -> Result<Vec<u8>> {
    match &node.kind {
        NodeKind::File(id) | NodeKind::Symlink(id) => Ok(store.read_object(id)?.1),
        _ => Err(Error::invalid("not a file")),
    }
}

/// Applies a rewind of `session` to the start of turn `to`. With `plan_id`, refuses
/// (changing nothing) unless the plan made now has that id.
///
/// # Errors
/// `conflict` for a stale plan; `over-cap` if the undo checkpoint would break a cap.
pub fn apply(
    store: &Store,
    ws: &Workspace,
    session: &Session,
    to: u64,
    force: &BTreeSet<String>,
    plan_id: Option<&str>,
) -> Result<Rewound> {
    let _turn = crate::fs::lock::workspace(&store.locks_dir(), &ws.id)?;
    let mut plan = plan(store, ws, session, to, force)?;
    if let Some(expected) = plan_id
        && expected != plan.plan_id
    {
        return Err(Error::new(
            ErrorCode::Conflict,
            format!(
                "the workspace changed since plan {expected} was made (it is now {}); nothing was changed — preview again",
                plan.plan_id
            ),
        ));
    }
    let work: Vec<usize> = (0..plan.paths.len()).filter(|&i| plan.paths[i].action != Action::LeaveAlone).collect();
    if work.is_empty() {
        let (restored_prompt, history_entries_removed) = cut_history(store, session, to)?;
        return Ok(Rewound { plan, checkpoint_id: None, restored_prompt, history_entries_removed });
    }
    // Symlinks are restored only where nothing is in the way; files go through the
    // checked path with a checkpoint of what they replace.
    let mut writes = Vec::with_capacity(work.len());
    let mut contents = BTreeMap::new();
    for &i in &work {
        let p = &plan.paths[i];
        let current = match &p.current {
            Some(n @ Node { kind: NodeKind::File(_), .. }) => Current::File {
                bytes: bytes_of(store, n)?,
                identity: FileIdentity { device: 0, inode: 0, mode: n.mode, size: n.size, mtime_ns: 0, ctime_ns: 0 },
            },
            _ => Current::Absent,
        };
        let intended = match &p.target {
            Some(n @ Node { kind: NodeKind::File(_), .. }) => Some(bytes_of(store, n)?),
            _ => None,
        };
        contents.insert(i, (current.clone(), intended.clone()));
        writes.push(PlannedWrite { path: RelPath::new(p.raw.clone())?, current, intended });
    }
    let id = checkpoint::record_before_writes(store, session, ws, writes)?.checkpoint_id;
    let mut applied = 0;
    // Deletions deepest first, then restores: a directory that replaced a file is gone
    // before the file comes back.
    let mut order = work.clone();
    order.sort_by_key(|&i| {
        let p = &plan.paths[i];
        (p.action != Action::Delete, std::cmp::Reverse(p.raw.iter().filter(|c| **c == b'/').count()))
    });
    for &i in &order {
        crate::base::failpoint::hit("rewind-before-swap");
        let p = &plan.paths[i];
        let rel = RelPath::new(p.raw.clone())?;
        let (current, intended) = &contents[&i];
        if p.action == Action::Restore && p.current.is_none() {
            // A directory the turns put where this file was, emptied by the deletions
            // above: it gives way (only if empty) so the file can come back.
            let _ = files::remove_empty_dir(&ws.root, &rel);
        }
        let result = write(store, ws, &rel, p, current, intended.as_deref(), &id);
        match result {
            Ok(Swap::Done) => applied += 1,
            Ok(Swap::Changed) => {
                let p = &mut plan.paths[i];
                p.action = Action::LeaveAlone;
                p.reason = Some(Reason::ChangedDuringRewind);
                p.detail = Some("changed between the plan and the write; left as it is".into());
            }
            Err(e) if matches!(e.code, ErrorCode::PathRejected | ErrorCode::NotFound | ErrorCode::Io) => {
                let p = &mut plan.paths[i];
                p.action = Action::LeaveAlone;
                p.reason = Some(Reason::BehindSymlink);
                p.detail = Some(e.message);
            }
            Err(e) => return Err(e),
        }
    }
    // Directories emptied by the deletions are left: an empty directory may have existed
    // before the turn (snapshots record files, not empty directories).
    checkpoint::finish(store, &id, applied == 0)?;
    let mut counts = BTreeMap::new();
    for p in &plan.paths {
        let key = serde_json::to_value(p.action).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        *counts.entry(key).or_insert(0) += 1;
    }
    plan.counts = counts;
    let (restored_prompt, history_entries_removed) = cut_history(store, session, to)?;
    Ok(Rewound { plan, checkpoint_id: Some(id), restored_prompt, history_entries_removed })
}

/// Cuts the conversation history before turn `to` (its entries and every later turn's go)
/// and returns turn `to`'s prompt with how many entries went.
fn cut_history(store: &Store, session: &Session, to: u64) -> Result<(Option<String>, u64)> {
    let turns = crate::session::turn::list(store, &session.id)?;
    let Some(target) = turns.iter().find(|t| t.index == to) else { return Ok((None, 0)) };
    let prompt = crate::session::history::prompt_of(store, &session.id, &target.turn_id)?;
    let cut: std::collections::HashSet<String> =
        turns.iter().filter(|t| t.index >= to).map(|t| t.turn_id.clone()).collect();
    let keyed = crate::session::history::keyed(store, &session.id)?;
    let mut txn = store.kv().begin()?;
    let removed = crate::session::history::cut_in(store, &mut *txn, &session.id, &keyed, &cut)?;
    txn.commit()?;
    Ok((prompt, removed))
}

/// What the target snapshot could not see: paths ignored by its own ignore files (and the
/// workspace's `.git/info/exclude`), excluded by name, inside a nested repository, or left
/// out with a reason when it was taken.
///
/// Only the ignore files of a path's own ancestor directories are looked up and read, once
/// each. One that cannot be read hides everything below it: a rewind then never deletes
/// there.
struct HiddenAtTarget<'a> {
    store: &'a Store,
    root: std::path::PathBuf,
    target: ContentId,
    lookup: snapshot::Lookup<'a>,
    /// Matchers by ignore file path (`None`: none there; `Some(None)`: unreadable).
    matchers: BTreeMap<Vec<u8>, Option<Option<ignore::gitignore::Gitignore>>>,
    /// Ignore rules from outside the snapshot: the workspace's and its parents'
    /// `.git/info/exclude`, and the parents' `.gitignore` and `.ignore`, as on disk now.
    outside: Vec<ignore::gitignore::Gitignore>,
    skipped: Vec<Vec<u8>>,
}

impl<'a> HiddenAtTarget<'a> {
    fn new(store: &'a Store, ws: &Workspace, target: ContentId, record: &SnapshotRecord) -> Self {
        // The walk also honoured ignore files in the directories above the workspace and
        // the enclosing repository's exclude file; their rules now stand in for then's.
        let mut outside = Vec::new();
        for dir in ws.root.ancestors() {
            let files = [dir.join(".git/info/exclude"), dir.join(".gitignore"), dir.join(".ignore")];
            for (i, file) in files.iter().enumerate() {
                if i > 0 && dir == ws.root {
                    continue; // the workspace's own ignore files come from the snapshot
                }
                if let Ok(text) = std::fs::read_to_string(file)
                    && let Some(g) = matcher(dir, text.lines())
                {
                    outside.push(g);
                }
            }
        }
        HiddenAtTarget {
            store,
            root: ws.root.clone(),
            target,
            lookup: snapshot::Lookup::new(store),
            matchers: BTreeMap::new(),
            outside,
            skipped: record.skipped_paths.iter().map(|s| s.path.as_bytes().to_vec()).collect(),
        }
    }

    fn hides(&mut self, path: &[u8]) -> Result<bool> {
        use std::os::unix::ffi::OsStrExt;
        let below = |u: &[u8]| path == u || (path.starts_with(u) && path.get(u.len()) == Some(&b'/'));
        if self.skipped.iter().any(|u| below(u)) || self.lookup.under_gitlink(&self.target, path)? {
            return Ok(true);
        }
        let name = path.rsplit(|c| *c == b'/').next().unwrap_or_default();
        let parent = path[..path.len() - name.len()]
            .strip_suffix(b"/")
            .map(|p| p.rsplit(|c| *c == b'/').next().unwrap_or_default());
        if crate::fs::walk::excluded(name, parent) {
            return Ok(true);
        }
        let ignored = |dir: &[u8], g: &ignore::gitignore::Gitignore| {
            let rel = std::path::Path::new(std::ffi::OsStr::from_bytes(&path[dir.len()..]));
            g.matched_path_or_any_parents(rel, false).is_ignore()
        };
        let absolute = self.root.join(std::ffi::OsStr::from_bytes(path));
        if self.outside.iter().any(|g| g.matched_path_or_any_parents(&absolute, false).is_ignore()) {
            return Ok(true);
        }
        // Every ancestor directory ("", "a/", "a/b/", …) and its ignore files.
        let dirs = std::iter::once(0).chain(path.iter().enumerate().filter(|(_, c)| **c == b'/').map(|(i, _)| i + 1));
        for end in dirs.collect::<Vec<_>>() {
            let dir = &path[..end];
            for file in [&b".gitignore"[..], b".ignore"] {
                let key = [dir, file].concat();
                if !self.matchers.contains_key(&key) {
                    let built = match self.lookup.node(&self.target, &key)? {
                        Some(node @ Node { kind: NodeKind::File(_), .. }) => {
                            Some(bytes_of(self.store, &node).ok().and_then(|text| {
                                matcher(
                                    &self.root.join(std::ffi::OsStr::from_bytes(dir)),
                                    String::from_utf8_lossy(&text).lines(),
                                )
                            }))
                        }
                        // The walk followed a symlinked ignore file; its rules are not in
                        // the snapshot, so everything below counts as hidden.
                        Some(_) => Some(None),
                        None => None,
                    };
                    self.matchers.insert(key.clone(), built);
                }
                match &self.matchers[&key] {
                    Some(Some(g)) if ignored(dir, g) => return Ok(true),
                    Some(None) => return Ok(true),
                    _ => {}
                }
            }
        }
        Ok(false)
    }
}

/// A gitignore matcher rooted at `root` from `lines` (`None` if it cannot be built).
fn matcher<'l>(root: &std::path::Path, lines: impl Iterator<Item = &'l str>) -> Option<ignore::gitignore::Gitignore> {
    let mut b = ignore::gitignore::GitignoreBuilder::new(root);
    for line in lines {
        let _ = b.add_line(None, line);
    }
    b.build().ok()
}

/// Paths that checkpoints of *other* sessions in this workspace wrote since the turn
/// `since` began (UUID v7 ids sort by creation time).
fn other_sessions_paths(store: &Store, ws: &Workspace, session: &Session, since: &str) -> Result<BTreeSet<Vec<u8>>> {
    let mut out = BTreeSet::new();
    for id in checkpoint::all_ids(store)?.into_iter().filter(|id| id.as_str() >= since) {
        let Ok(r) = checkpoint::load(store, &id) else { continue };
        if r.workspace_id == ws.id && r.session_id != session.id {
            out.extend(r.targets.iter().map(|t| t.path.as_bytes().to_vec()));
        }
    }
    Ok(out)
}

/// Writes one path back with a compare-and-swap against what the plan saw now.
fn write(
    store: &Store,
    ws: &Workspace,
    rel: &RelPath,
    p: &PathPlan,
    current: &Current,
    intended: Option<&[u8]>,
    checkpoint_id: &str,
) -> Result<Swap> {
    let temp = files::temp_name(rel, checkpoint_id);
    let expected = match current {
        Current::File { bytes, .. } => Some(hex(&store.keys().content_id(bytes))),
        Current::Absent => None,
    };
    let matcher =
        |bytes: &[u8], _: &FileIdentity| expected.as_deref() == Some(hex(&store.keys().content_id(bytes)).as_str());
    match intended {
        Some(bytes) => {
            let parent = files::open_parent(&ws.root, rel, true)?;
            let expect = if expected.is_some() { Expect::File(&matcher) } else { Expect::Absent };
            let mode = p.target.as_ref().map(|n| n.mode);
            parent.swap_in(&temp, bytes, mode, &expect).map(|(s, _)| s)
        }
        None => match files::open_parent(&ws.root, rel, false) {
            Ok(parent) => parent.remove_if(&temp, &matcher),
            Err(e) if e.code == ErrorCode::NotFound => Ok(Swap::Done),
            Err(e) => Err(e),
        },
    }
}
