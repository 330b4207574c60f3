//! Analysis (the preview): select checkpoints, observe every path without following
//! symlinks, and run the decision over each path's mutations newest first.

use crate::fs::body::Body;
use crate::storage::body as storage_body;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use unicode_normalization::UnicodeNormalization;

use super::decision::*;
use super::*;
use crate::base::hex::hex;
use crate::checkpoint::artifact::ImageRole;
use crate::checkpoint::{
    self, CheckpointRecord, ImageRecord, ListFilter, OperationKind, RetentionState, TargetRecord, Unreadable,
};
use crate::error::{Error, ErrorCode, Result};
use crate::fs::files::{self, Current, FileIdentity, Observed};
use crate::fs::handles;
use crate::fs::relpath::RelPath;
use crate::session::workspace::Workspace;
use crate::storage::store::Store;
use crate::undo::guarded::{Expected, Intended, Write};

/// Each step's stored pre-image (by record and target index), read once.
pub(super) type PreCache = HashMap<(usize, usize), (PreBytes, Option<Body>)>;

/// One path as observed, before deciding.
pub(super) struct Observation {
    pub(super) path: RelPath,
    pub(super) steps: Vec<(usize, usize)>,
    pub(super) seen: Seen,
    pub(super) bytes: Option<Body>,
}

/// What one path will become.
#[derive(Debug, Clone)]
pub(super) enum Final {
    File { body: Body, mode: Option<u32> },
    Absent,
}

/// One path: its real current state, the steps on it (newest first), and the write.
#[derive(Debug, Clone)]
pub(super) struct PathPlan {
    pub(super) path: RelPath,
    pub(super) real: Seen,
    pub(super) real_bytes: Option<Body>,
    pub(super) steps: Vec<TargetAnalysis>,
    pub(super) write: Option<Final>,
}

/// The checkpoints a selection takes back, newest first: the records that open, and
/// those of the selection that do not (altered or gone, named by the session's index).
pub(super) fn select(ctx: Context<'_>, selection: &Selection) -> Result<(Vec<CheckpointRecord>, Vec<Unreadable>)> {
    let (mut records, mut unreadable) = match selection {
        Selection::Checkpoints(ids) => {
            if ids.is_empty() {
                return Err(Error::invalid("name at least one checkpoint, or use --turn / --since-turn"));
            }
            let mut out = Vec::new();
            for id in ids {
                let r = checkpoint::load(ctx.store, id)?;
                if r.workspace_id != ctx.workspace.id {
                    return Err(Error::invalid(format!("checkpoint {id} belongs to another workspace")));
                }
                out.push(r);
            }
            (out, Vec::new())
        }
        Selection::Turn(t) | Selection::SinceTurn(t) => {
            let all = checkpoint::list(ctx.store, &ctx.session.id, ListFilter { prompt_round: None, all: true })?;
            let since = matches!(selection, Selection::SinceTurn(_));
            let in_selection = |p: u64| if since { p >= *t } else { p == *t };
            // A turn's own mutations; earlier rollbacks are taken back only when named.
            let records = all
                .records
                .into_iter()
                .filter(|r| r.mutation.kind != OperationKind::Rollback)
                .filter(|r| r.prompt_round.is_some_and(in_selection))
                .collect();
            // A record that cannot be opened may be one of them (its round from the
            // index, or unknown): it can only make the rollback partial, never `full`.
            let unreadable = all.unreadable.into_iter().filter(|u| u.prompt_round.is_none_or(in_selection)).collect();
            (records, unreadable)
        }
        Selection::Subagent(id) => {
            let all = checkpoint::list(ctx.store, &ctx.session.id, ListFilter { prompt_round: None, all: true })?;
            let made: Vec<CheckpointRecord> = all
                .records
                .into_iter()
                .filter(|r| r.mutation.kind != OperationKind::Rollback && r.subagent.as_deref() == Some(id))
                .collect();
            if made.is_empty() {
                return Err(Error::not_found(format!("checkpoints of sub-agent {id} in this session")));
            }
            // Who made a record that cannot be opened is unknown: it may be this sub-agent
            // if it is of a round the sub-agent worked in (the index keeps each record's
            // round; a row without one may be of any round).
            let rounds: std::collections::BTreeSet<u64> = made.iter().filter_map(|r| r.prompt_round).collect();
            let unreadable =
                all.unreadable.into_iter().filter(|u| u.prompt_round.is_none_or(|r| rounds.contains(&r))).collect();
            (made, unreadable)
        }
    };
    // UUID v7 ids sort by creation time: newest first.
    records.sort_by(|a, b| b.checkpoint_id.cmp(&a.checkpoint_id));
    records.dedup_by(|a, b| a.checkpoint_id == b.checkpoint_id);
    unreadable.sort_by(|a, b| b.checkpoint_id.cmp(&a.checkpoint_id));
    Ok((records, unreadable))
}

/// Most entries [`through_deletions`] reads of a directory standing at a path.
const THROUGH_ENTRIES: usize = 10_000;

/// `seen` at `path`, or absent if only paths in `deleting` (files this rollback deletes,
/// as bytes) stand in the way: the nearest ancestor that is not a directory is a file it
/// deletes (a directory the undone work replaced with a file), or the directory at the
/// path holds nothing but directories and files it deletes (a file the undone work
/// replaced with a directory; emptied, it gives way to the file coming back).
pub(super) fn through_deletions(root: &Path, path: &RelPath, seen: Seen, deleting: &HashSet<Vec<u8>>) -> Seen {
    let absent = Seen::Absent { moved: None };
    match seen {
        Seen::BehindSymlink => match files::not_a_directory_above(root, path.as_bytes()) {
            Some((ancestor, files::InTheWay::File)) if deleting.contains(ancestor) => absent,
            _ => Seen::BehindSymlink,
        },
        Seen::Other if only_deletions_under(root, path.as_bytes(), deleting) => absent,
        other => other,
    }
}

/// Whether `dir` (relative to `root`) is a real directory holding, at any depth, only
/// directories and files in `deleting` (at most [`THROUGH_ENTRIES`] entries are read).
fn only_deletions_under(root: &Path, dir: &[u8], deleting: &HashSet<Vec<u8>>) -> bool {
    let mut stack = vec![dir.to_vec()];
    let mut read = 0;
    while let Some(d) = stack.pop() {
        let Ok(m) = std::fs::symlink_metadata(root.join(OsStr::from_bytes(&d))) else { return false };
        if !m.is_dir() {
            return false;
        }
        let Ok(entries) = std::fs::read_dir(root.join(OsStr::from_bytes(&d))) else { return false };
        for entry in entries {
            read += 1;
            let Ok(entry) = entry else { return false };
            if read > THROUGH_ENTRIES {
                return false;
            }
            let child = crate::fs::relpath::join(&d, entry.file_name().as_bytes());
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(child),
                Ok(t) if t.is_file() && deleting.contains(&child) => {}
                _ => return false,
            }
        }
    }
    true
}

/// Looks at what is at `path` now, without following symlinks.
pub(super) fn observe(
    store: &Store,
    ws: &Workspace,
    path: &RelPath,
    recorded: Option<&FileIdentity>,
    written: &WrittenBack,
) -> Result<(Seen, Option<Body>)> {
    let parent = match files::open_parent(&ws.root, path, false) {
        Ok(p) => p,
        Err(e) if e.code == ErrorCode::PathRejected => return Ok((Seen::BehindSymlink, None)),
        Err(e) if e.code == ErrorCode::NotFound => return Ok((Seen::Absent { moved: None }, None)),
        Err(e) => return Err(e),
    };
    Ok(match parent.observe()? {
        Observed::Absent => (Seen::Absent { moved: moved_to(&parent, recorded) }, None),
        Observed::File { body, identity } => {
            let digest = storage_body::id(store.keys(), &body)?.to_hex();
            let written_back = written.get(path).is_some_and(|w| {
                w.iter().any(|(dev, ino, d)| (*dev, *ino) == (identity.device, identity.inode) && *d == digest)
            });
            (Seen::File { digest, identity: Some(identity), held_by: Vec::new(), written_back }, Some(body))
        }
        Observed::Symlink => (Seen::BehindSymlink, None),
        Observed::Other => (Seen::Other, None),
        Observed::Unreadable => (Seen::Unreadable, None),
    })
}

/// The files turnback's own rollbacks (and rewinds' undos) left at each path: device,
/// inode and digest of each post-image.
pub(super) type WrittenBack = HashMap<RelPath, Vec<(u64, u64, String)>>;

/// What this session's committed rollbacks wrote, per path (see [`Seen::File`]).
pub(super) fn written_back(ctx: Context<'_>) -> Result<WrittenBack> {
    let all = checkpoint::list(ctx.store, &ctx.session.id, ListFilter { prompt_round: None, all: true })?;
    let mut out: WrittenBack = HashMap::new();
    for r in all
        .records
        .iter()
        .filter(|r| r.mutation.kind == OperationKind::Rollback && record_status(r) == RecordStatus::Usable)
    {
        for t in &r.targets {
            let Some(ImageRecord { present: true, digest: Some(d), identity: Some(id), .. }) = &t.post_image else {
                continue;
            };
            out.entry(t.path.clone()).or_default().push((id.device, id.inode, d.clone()));
        }
    }
    Ok(out)
}

/// A sibling that is the recorded file under another name, or a name equal to the
/// target's but for case or Unicode normalisation.
pub(super) fn moved_to(parent: &files::Parent, recorded: Option<&FileIdentity>) -> Option<String> {
    let siblings = parent.siblings().ok()?;
    let fold = |n: &OsStr| String::from_utf8_lossy(n.as_bytes()).nfc().collect::<String>().to_lowercase();
    let target = fold(parent.name());
    siblings
        .iter()
        .find(|(name, ino)| {
            recorded.is_some_and(|r| r.inode == *ino && parent.is_same_file(name, r)) || fold(name) == target
        })
        .map(|(name, _)| String::from_utf8_lossy(name.as_bytes()).into_owned())
}

/// A step's pre-image: read and verified if small, else checked and named by its id.
pub(super) fn pre_bytes(store: &Store, r: &CheckpointRecord, index: usize) -> (PreBytes, Option<Body>) {
    let pre = &r.targets[index].pre_image;
    if !pre.present {
        return (PreBytes::Available, None);
    }
    if r.retention_state == RetentionState::Evicted {
        return (PreBytes::Evicted, None);
    }
    match checkpoint::image_body(store, r, index, ImageRole::Pre) {
        Ok(Some(body)) => (PreBytes::Available, Some(body)),
        Ok(None) => (PreBytes::Available, None),
        Err(e) => match e.code {
            ErrorCode::Corrupt => (PreBytes::Corrupt, None),
            ErrorCode::RecoveryLocked => (PreBytes::Locked, None),
            _ => (PreBytes::Missing, None),
        },
    }
}

/// Runs the decision over the steps of one path, newest first, each against the state
/// the newer ones would leave; returns the analyses and the write (if any).
pub(super) fn decide_path(
    records: &[&CheckpointRecord],
    steps: &[(usize, usize)],
    real: &Seen,
    excluded: bool,
    pre_cache: &PreCache,
) -> (Vec<TargetAnalysis>, Option<Final>) {
    let mut walk = Walk {
        seen: real.clone(),
        virtual_state: false,
        later_not_taken_back: false,
        final_state: None,
        kept_mode: kept_mode(records, steps, real),
    };
    let mut out = Vec::with_capacity(steps.len());
    for &(ri, ti) in steps {
        let pre = pre_cache.get(&(ri, ti)).cloned().unwrap_or((PreBytes::Missing, None));
        out.push(walk.step(records[ri], ti, pre, excluded));
    }
    let write = walk.write(real);
    (out, write)
}

/// The mode to keep on the restored file: permission changes are never the agent's to
/// take back, so if someone changed the mode since the newest mutation (`real`'s differs
/// from the one it left), the restored file keeps their mode.
fn kept_mode(records: &[&CheckpointRecord], steps: &[(usize, usize)], real: &Seen) -> Option<u32> {
    let newest_post_mode = steps
        .first()
        .and_then(|&(ri, ti)| records[ri].targets[ti].post_image.as_ref()?.identity.map(|i| i.permissions()));
    match real {
        Seen::File { identity: Some(id), .. } if newest_post_mode.is_some_and(|m| m != id.permissions()) => {
            Some(id.permissions())
        }
        _ => None,
    }
}

/// One path's steps decided newest first: the state the steps decided so far would leave.
struct Walk {
    /// The path as the newer steps leave it (at first, as it is).
    seen: Seen,
    /// Whether `seen` is a state the newer steps would leave rather than what is on disk.
    virtual_state: bool,
    /// Whether a newer step is not taken back: an older one must not be built on top.
    later_not_taken_back: bool,
    /// What the path becomes, once a step takes something back.
    final_state: Option<Final>,
    /// The mode a person set since the newest mutation ([`kept_mode`]).
    kept_mode: Option<u32>,
}

impl Walk {
    /// Decides step `ti` of `r` (`pre`: its pre-image, read) against the state the newer
    /// steps leave, and moves the walk past it.
    fn step(
        &mut self,
        r: &CheckpointRecord,
        ti: usize,
        pre: (PreBytes, Option<Body>),
        excluded: bool,
    ) -> TargetAnalysis {
        let t = &r.targets[ti];
        let (pre_bytes, bytes) = pre;
        let status = record_status(r);
        let inputs = Inputs {
            status,
            pre: &t.pre_image,
            post: t.post_image.as_ref(),
            seen: &self.seen,
            virtual_state: self.virtual_state,
            pre_bytes,
            excluded,
            later_not_taken_back: self.later_not_taken_back,
        };
        let outcome = decide(&inputs);
        let mut analysis = TargetAnalysis {
            checkpoint_id: r.checkpoint_id.clone(),
            target_index: ti,
            path: t.path.clone(),
            effect: t.effect,
            pre_image: image_state(Some(&t.pre_image)),
            post_image: image_state(t.post_image.as_ref()),
            current_state: self.seen.state(),
            outcome: outcome.clone(),
        };
        let never_happened = status == RecordStatus::Abandoned;
        if !outcome.eligible() && !never_happened {
            self.later_not_taken_back = true;
        }
        if let Outcome::AppliedEligible { no_op, .. } = outcome
            && self.take_back(t, no_op, bytes)
            && let Outcome::AppliedEligible { no_op, .. } = &mut analysis.outcome
        {
            // What the preview says is what the apply does: the mode is written.
            *no_op = false;
        }
        analysis
    }

    /// Takes back `t`, an eligible step (`no_op`: on disk it is at its pre-image already;
    /// `bytes`: that pre-image): the path becomes its pre-image. Returns whether the bytes
    /// are back already but the mode the step changed goes back (so it is no no-op).
    fn take_back(&mut self, t: &TargetRecord, no_op: bool, bytes: Option<Body>) -> bool {
        if no_op && !self.virtual_state && self.seen.state() != image_state(t.post_image.as_ref()) {
            // On disk it is already back at this mutation's pre-image, but not because
            // of this rollback: older mutations must not build on someone else's state.
            self.later_not_taken_back = true;
        }
        // The bytes already as before, but not the mode the mutation changed (a rewind
        // or a rollback may change only a mode): the mode goes back.
        let pre_mode = t.pre_image.identity.map(|i| i.permissions());
        let post_mode = t.post_image.as_ref().and_then(|p| p.identity).map(|i| i.permissions());
        // Only a mode the mutation changed (a file before and after) and that is not
        // back already.
        let mode_now = match &self.seen {
            Seen::File { identity: Some(id), .. } => Some(id.permissions()),
            _ => None,
        };
        let mode_back = no_op
            && bytes.is_some()
            && pre_mode.is_some()
            && post_mode.is_some()
            && pre_mode != post_mode
            && mode_now != pre_mode;
        if !no_op || mode_back {
            self.final_state = Some(match bytes {
                Some(body) => Final::File { body, mode: self.kept_mode.or(pre_mode) },
                None => Final::Absent,
            });
        }
        self.seen = match &t.pre_image {
            ImageRecord { present: true, digest: Some(d), .. } => {
                Seen::File { digest: d.clone(), identity: None, held_by: Vec::new(), written_back: false }
            }
            _ => Seen::Absent { moved: None },
        };
        self.virtual_state = true;
        mode_back
    }

    /// The write the steps call for: none if the path (`real`) already is what they
    /// would make it, mode and all.
    fn write(self, real: &Seen) -> Option<Final> {
        let seen = self.seen;
        self.final_state.filter(|f| match (f, real) {
            (Final::Absent, Seen::Absent { .. }) => false,
            (Final::File { mode, .. }, Seen::File { digest, identity, .. }) => {
                Some(digest.as_str()) != seen.digest()
                    || mode.is_some_and(|m| identity.is_some_and(|i| i.permissions() != m))
            }
            _ => true,
        })
    }
}

pub(super) fn plan_id(
    store: &Store,
    checkpoint_ids: &[String],
    unreadable: &[Unreadable],
    paths: &[(RelPath, ThreeWayState, Vec<Outcome>)],
) -> String {
    let unreadable: Vec<&str> = unreadable.iter().map(|u| u.checkpoint_id.as_str()).collect();
    let material = serde_json::json!({ "checkpoints": checkpoint_ids, "unreadable": unreadable, "paths": paths });
    let bytes = serde_json::to_vec(&material).expect("plan material serializes");
    hex(&store.keys().lookup_id("rollback-plan", &bytes)[..16])
}

/// A preview: every target's decision and the plan id apply must match.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Analysis {
    /// Digest of everything the plan depends on.
    pub plan_id: String,
    /// The checkpoints taken back, newest first.
    pub checkpoint_ids: Vec<String>,
    /// Every target, newest mutation first per path.
    pub targets: Vec<TargetAnalysis>,
    /// Counts by outcome category.
    pub counts: BTreeMap<String, u64>,
    /// Checkpoints of the selection whose records cannot be opened (altered or gone),
    /// newest first: nothing of them can be taken back, so the result is never `full`.
    pub unreadable_checkpoints: Vec<Unreadable>,
    /// `full`, `partial` or `blocked` if applied now.
    pub result_type: ResultType,
    /// Whether open handles could be checked on this system.
    pub open_handles_checked: bool,
    /// Effects no rollback takes back, never protected.
    pub excluded_effects: Vec<ExcludedEffect>,
    #[serde(skip)]
    pub(super) paths: Vec<PathPlan>,
}

/// Analyses taking back `selection` (the preview). Changes nothing.
///
/// # Errors
/// `not-found` for an unknown checkpoint id; `corrupt` if a selected record was altered.
pub(crate) fn analyze(
    ctx: Context<'_>,
    selection: &Selection,
    choices: &BTreeMap<RelPath, Choice>,
) -> Result<Analysis> {
    Ok(analyze_records(ctx, selection, choices)?.1)
}

/// [`analyze`], with the records it selected.
pub(super) fn analyze_records(
    ctx: Context<'_>,
    selection: &Selection,
    choices: &BTreeMap<RelPath, Choice>,
) -> Result<(Vec<CheckpointRecord>, Analysis)> {
    let (records, unreadable) = select(ctx, selection)?;
    let refs: Vec<&CheckpointRecord> = records.iter().collect();
    let mut by_path: BTreeMap<RelPath, Vec<(usize, usize)>> = BTreeMap::new();
    for (ri, r) in refs.iter().enumerate() {
        for (ti, t) in r.targets.iter().enumerate() {
            by_path.entry(t.path.clone()).or_default().push((ri, ti));
        }
    }
    for path in choices.keys() {
        if !by_path.contains_key(path) {
            return Err(Error::invalid(format!("--choose {}: not a target of this rollback", path.display())));
        }
    }
    let mut pre_cache = HashMap::new();
    for steps in by_path.values() {
        for &(ri, ti) in steps {
            if record_status(refs[ri]) == RecordStatus::Usable {
                pre_cache.insert((ri, ti), pre_bytes(ctx.store, refs[ri], ti));
            }
        }
    }
    let mut observed = Vec::with_capacity(by_path.len());
    let written = written_back(ctx)?;
    for (path, steps) in &by_path {
        let (ri, ti) = steps[0];
        let recorded = refs[ri].targets[ti].post_image.as_ref().and_then(|p| p.identity);
        let (seen, bytes) = observe(ctx.store, ctx.workspace, path, recorded.as_ref(), &written)?;
        observed.push(Observation { path: path.clone(), steps: steps.clone(), seen, bytes });
    }
    mark_open_handles(&mut observed.iter_mut().map(|o| &mut o.seen).collect::<Vec<_>>());
    // What stands in the way only because of this rollback's own deletions (a type
    // change the undone work made) is seen as absent: the deletions go first.
    let deleting: HashSet<Vec<u8>> = observed
        .iter()
        .filter(|o| matches!(o.seen, Seen::File { .. }))
        .filter(|o| {
            let excluded = choices.get(&o.path) == Some(&Choice::Skip);
            matches!(decide_path(&refs, &o.steps, &o.seen, excluded, &pre_cache).1, Some(Final::Absent))
        })
        .map(|o| o.path.as_bytes().to_vec())
        .collect();
    for o in &mut observed {
        o.seen =
            through_deletions(&ctx.workspace.root, &o.path, std::mem::replace(&mut o.seen, Seen::Other), &deleting);
    }
    let mut paths = Vec::with_capacity(observed.len());
    let mut plan_material = Vec::with_capacity(observed.len());
    for Observation { path, steps, seen, bytes } in observed {
        let excluded = choices.get(&path) == Some(&Choice::Skip);
        let (analyses, write) = decide_path(&refs, &steps, &seen, excluded, &pre_cache);
        // The plan id covers what the workspace and the checkpoints say, not the caller's
        // choices: choosing to skip or export a conflict after the preview is the point.
        let unchosen = if excluded { decide_path(&refs, &steps, &seen, false, &pre_cache).0 } else { analyses.clone() };
        plan_material.push((path.clone(), seen.state(), unchosen.into_iter().map(|a| a.outcome).collect()));
        paths.push(PathPlan { path, real: seen, real_bytes: bytes, steps: analyses, write });
    }
    let checkpoint_ids: Vec<String> = records.iter().map(|r| r.checkpoint_id.clone()).collect();
    let plan_id = plan_id(ctx.store, &checkpoint_ids, &unreadable, &plan_material);
    let analysis = summarize(plan_id, checkpoint_ids, unreadable, paths);
    Ok((records, analysis))
}

pub(super) fn summarize(
    plan_id: String,
    checkpoint_ids: Vec<String>,
    unreadable: Vec<Unreadable>,
    paths: Vec<PathPlan>,
) -> Analysis {
    let targets: Vec<TargetAnalysis> = paths.iter().flat_map(|p| p.steps.iter().cloned()).collect();
    let mut counts = BTreeMap::new();
    for t in &targets {
        *counts.entry(t.outcome.category().to_string()).or_insert(0) += 1;
    }
    let result_type = result_type(&targets, unreadable.len());
    Analysis {
        plan_id,
        checkpoint_ids,
        targets,
        counts,
        unreadable_checkpoints: unreadable,
        result_type,
        open_handles_checked: handles::available(),
        excluded_effects: excluded_effects(),
        paths,
    }
}

/// The result of taking back `targets`, when `unreadable` more checkpoints of the
/// selection cannot be read at all (each is left as it is, like a residual target).
pub(super) fn result_type(targets: &[TargetAnalysis], unreadable: usize) -> ResultType {
    let residual = targets.iter().filter(|t| t.outcome.residual()).count() + unreadable;
    let eligible = targets.iter().filter(|t| t.outcome.eligible()).count();
    ResultType::of(eligible, residual)
}

/// Marks every observed file that another process holds open.
pub(super) fn mark_open_handles(seen: &mut [&mut Seen]) {
    let keys: HashSet<(u64, u64)> = seen
        .iter()
        .filter_map(|s| match &**s {
            Seen::File { identity: Some(id), .. } => Some((id.device, id.inode)),
            _ => None,
        })
        .collect();
    let held = handles::holders(&keys);
    for s in seen.iter_mut() {
        if let Seen::File { identity: Some(id), held_by, .. } = &mut **s
            && let Some(pids) = held.get(&(id.device, id.inode))
        {
            *held_by = pids.clone();
        }
    }
}

pub(super) fn step_indices(refs: &[&CheckpointRecord], steps: &[TargetAnalysis]) -> Vec<(usize, usize)> {
    steps
        .iter()
        .filter_map(|s| refs.iter().position(|r| r.checkpoint_id == s.checkpoint_id).map(|ri| (ri, s.target_index)))
        .collect()
}

/// The write of one path: its final state, against the state the analysis captured.
pub(super) fn write_of(p: &PathPlan) -> Write {
    let expected = match &p.real {
        Seen::File { digest, identity, .. } => {
            Expected::File { digest: digest.clone(), inode: identity.map(|i| i.inode) }
        }
        _ => Expected::Absent,
    };
    let current = match (&p.real, &p.real_bytes) {
        (Seen::File { identity: Some(identity), .. }, Some(body)) => {
            Current::File { body: body.clone(), identity: *identity }
        }
        _ => Current::Absent,
    };
    let intended = match p.write.as_ref().expect("only paths with a write") {
        Final::File { body, mode } => Intended::File { body: body.clone(), mode: *mode },
        Final::Absent => Intended::Absent,
    };
    // Parents are recreated only for a file that is to come back where none is; a
    // directory someone removed meanwhile is not brought back for an edit.
    let make_parents = matches!(p.real, Seen::Absent { .. });
    // A directory of nothing but directories where the file comes back is what the
    // undone work left once this rollback's deletions went: it gives way.
    Write { path: p.path.clone(), expected, current, intended, make_parents, clear_empty_dir: make_parents }
}
