//! Apply: the analysis made again under the workspace lock, each path to write observed
//! once more and re-classified through the same decision if it moved, the caller's safe
//! choices carried out, then the writes through the guarded-apply engine
//! ([`guarded`](crate::undo::guarded)).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::analysis::*;
use super::choice::{PreparedChoice, prepare_choice, write_choice};
use super::decision::*;
use super::*;
use crate::checkpoint::CheckpointRecord;
use crate::error::{ErrorCode, Result};
use crate::fs::files;
use crate::fs::relpath::RelPath;
use crate::undo::guarded::{self, Refused, Write};

/// Applies the rollback of `selection`. With `plan`, refuses (changing nothing) unless the
/// analysis made now has that plan id.
///
/// # Errors
/// `conflict` if `plan` no longer matches; `over-cap` if the rollback's own checkpoint
/// would break a cap; I/O errors.
pub(crate) fn apply(
    ctx: Context<'_>,
    selection: &Selection,
    choices: &BTreeMap<RelPath, Choice>,
    plan: Option<&str>,
) -> Result<RollbackResult> {
    let target =
        guarded::Target { store: ctx.store, workspace: ctx.workspace, session: ctx.session, failpoints: FAILPOINTS };
    let make = || {
        let (records, analysis) = analyze_records(ctx, selection, choices)?;
        Ok(Applying {
            ctx,
            choices,
            records,
            analysis,
            order: Vec::new(),
            applied: Vec::new(),
            prepared: Vec::new(),
            choice_files: Vec::new(),
        })
    };
    let (done, checkpoint_id) = guarded::apply(target, plan, make, Applying::prepare)?;
    Ok(done.result(checkpoint_id))
}

/// The failpoints of a rollback's writes.
const FAILPOINTS: [&str; 3] = ["rollback-committed", "rollback-before-swap", "rollback-written"];

/// A rollback being applied: its records, its analysis (re-classified as paths move) and
/// what was done so far.
struct Applying<'a> {
    ctx: Context<'a>,
    choices: &'a BTreeMap<RelPath, Choice>,
    records: Vec<CheckpointRecord>,
    analysis: Analysis,
    /// The path index of each write, in the order the writes were handed out.
    order: Vec<usize>,
    applied: Vec<RelPath>,
    /// The caller's choices, checked and computed before the undo, written after it.
    prepared: Vec<PreparedChoice>,
    choice_files: Vec<ChoiceFile>,
}

impl Applying<'_> {
    /// Steps 1-3 of the seed (re-resolve, capture, re-validate): every path to write is
    /// observed again, and re-decided if it is not as the analysis saw it. Then the
    /// caller's choices for conflicting paths are checked and their side files computed,
    /// before anything is written, so an impossible choice refuses the whole rollback with
    /// nothing changed; the side files are written once the writes are done.
    fn prepare(&mut self) -> Result<()> {
        let ctx = self.ctx;
        let refs: Vec<&CheckpointRecord> = self.records.iter().collect();
        let written = written_back(ctx)?;
        let deleting: std::collections::HashSet<Vec<u8>> = self
            .analysis
            .paths
            .iter()
            .filter(|p| matches!(p.real, Seen::File { .. }) && matches!(p.write, Some(Final::Absent)))
            .map(|p| p.path.as_bytes().to_vec())
            .collect();
        for plan in self.analysis.paths.iter_mut().filter(|p| p.write.is_some()) {
            let first = &plan.steps[0];
            let recorded = refs
                .iter()
                .find(|r| r.checkpoint_id == first.checkpoint_id)
                .and_then(|r| r.targets[first.target_index].post_image.as_ref().and_then(|p| p.identity));
            let (seen, bytes) = observe(ctx.store, ctx.workspace, &plan.path, recorded.as_ref(), &written)?;
            let mut seen = through_deletions(&ctx.workspace.root, &plan.path, seen, &deleting);
            mark_open_handles(&mut [&mut seen]);
            if seen == plan.real {
                continue;
            }
            let steps = step_indices(&refs, &plan.steps);
            let excluded = self.choices.get(&plan.path) == Some(&Choice::Skip);
            let cache: PreCache = steps
                .iter()
                .filter(|&&(ri, _)| record_status(refs[ri]) == RecordStatus::Usable)
                .map(|&(ri, ti)| ((ri, ti), pre_bytes(ctx.store, refs[ri], ti)))
                .collect::<HashMap<_, _>>();
            let (analyses, write) = decide_path(&refs, &steps, &seen, excluded, &cache);
            plan.steps = analyses;
            plan.write = write;
            plan.real = seen;
            plan.real_bytes = bytes;
        }
        for p in &self.analysis.paths {
            let Some(choice) = self.choices.get(&p.path) else { continue };
            if *choice == Choice::Skip || !p.steps.iter().any(|s| s.outcome.residual()) {
                continue;
            }
            if let Some(prepared) = prepare_choice(ctx, &refs, p, *choice)? {
                self.prepared.push(prepared);
            }
        }
        self.order = (0..self.analysis.paths.len()).filter(|&i| self.analysis.paths[i].write.is_some()).collect();
        Ok(())
    }

    /// The result, once every write was tried.
    fn result(self, rollback_checkpoint_id: Option<String>) -> RollbackResult {
        let Analysis { plan_id, checkpoint_ids, unreadable_checkpoints, paths, .. } = self.analysis;
        let summary = summarize(plan_id.clone(), checkpoint_ids, unreadable_checkpoints, paths);
        let residual_conflicts = summary
            .targets
            .iter()
            .filter(|t| t.outcome.residual())
            .map(|t| Residual {
                path: t.path.clone(),
                checkpoint_id: t.checkpoint_id.clone(),
                category: t.outcome.category().to_string(),
                outcome: t.outcome.clone(),
                safe_choices: SAFE_CHOICES.to_vec(),
            })
            .collect();
        RollbackResult {
            result_type: summary.result_type,
            plan_id,
            targets: summary.targets,
            applied_paths: self.applied,
            counts: summary.counts,
            residual_conflicts,
            unreadable_checkpoints: summary.unreadable_checkpoints,
            choice_files: self.choice_files,
            excluded_effects: excluded_effects(),
            rollback_checkpoint_id,
        }
    }
}

impl guarded::Plan for Applying<'_> {
    fn plan_id(&self) -> &str {
        &self.analysis.plan_id
    }

    fn writes(&self) -> Vec<Write> {
        self.order.iter().map(|&i| write_of(&self.analysis.paths[i])).collect()
    }

    fn written(&mut self, root: &Path, index: usize, refused: Option<Refused>) {
        let at = self.order[index];
        let refs: Vec<&CheckpointRecord> = self.records.iter().collect();
        let plan = &mut self.analysis.paths[at];
        let Some(refused) = refused else {
            self.applied.push(plan.path.clone());
            if matches!(plan.write, Some(Final::Absent)) {
                remove_created_dirs(root, &refs, plan);
            }
            return;
        };
        // A target that cannot be written any more (it moved, a parent was swapped for a
        // symlink, a directory removed) becomes a conflict; the other targets go on.
        let (reason, detail) = match refused {
            Refused::Moved => (
                ConflictReason::ContentConflict,
                "the file changed between the analysis and the write; it was left as it is".to_string(),
            ),
            Refused::Obstacle(ErrorCode::PathRejected, message) => (ConflictReason::BehindSymlink, message),
            Refused::Obstacle(_, message) => (ConflictReason::ContentConflict, message),
        };
        for step in plan.steps.iter_mut().filter(|s| s.outcome.eligible()) {
            step.outcome = conflict(reason, detail.clone());
        }
        plan.write = None;
    }

    /// Writes the side files of the caller's choices; a rewind taken back gives back the
    /// history it cut (to the rewind's session, whichever session rolls it back).
    fn finish(&mut self, _checkpoint: Option<&str>) -> Result<()> {
        for prepared in std::mem::take(&mut self.prepared) {
            self.choice_files.push(write_choice(self.ctx, prepared)?);
        }
        if !self.applied.is_empty() {
            for r in &self.records {
                crate::session::history::restore_cut(self.ctx.store, &r.session_id, &r.checkpoint_id)?;
            }
        }
        Ok(())
    }
}

/// After taking back a create, removes the directories that create made, if empty.
fn remove_created_dirs(root: &Path, refs: &[&CheckpointRecord], p: &PathPlan) {
    for (ri, ti) in step_indices(refs, &p.steps) {
        for dir in refs[ri].targets[ti].created_dirs.iter().rev() {
            let _ = files::remove_empty_dir(root, dir);
        }
    }
}
