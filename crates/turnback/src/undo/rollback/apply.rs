//! Apply: re-validate, commit the rollback's own checkpoint, then compare-and-swap each
//! path, in the seed's seven steps.

use std::collections::{BTreeMap, HashMap};

use super::analysis::*;
use super::choice::*;
use super::decision::*;
use super::*;
use crate::base::failpoint;
use crate::checkpoint::{self, CheckpointRecord, PlannedWrite};
use crate::error::{Error, ErrorCode, Result};
use crate::fs::files::{self, Current, Expect, FileIdentity, Swap};
use crate::session::workspace::RelPath;
use crate::storage::crypto::hex;

/// Applies the rollback of `selection`. With `plan`, refuses (changing nothing) unless the
/// analysis made now has that plan id.
///
/// # Errors
/// `conflict` if `plan` no longer matches; `over-cap` if the rollback's own checkpoint
/// would break a cap; I/O errors.
pub fn apply(
    ctx: Context<'_>,
    selection: &Selection,
    choices: &BTreeMap<RelPath, Choice>,
    plan: Option<&str>,
) -> Result<RollbackResult> {
    // turnback's writers to this workspace take turns (see `mutation::apply`).
    let _turn = crate::fs::lock::workspace(&ctx.store.locks_dir(), &ctx.workspace.id)?;
    let analysis = analyze(ctx, selection, choices)?;
    if let Some(plan) = plan
        && plan != analysis.plan_id
    {
        return Err(Error::new(
            ErrorCode::Conflict,
            format!(
                "the workspace or the checkpoints changed since plan {plan} was made (it is now {}); nothing was changed — preview again",
                analysis.plan_id
            ),
        )
        .with_details(serde_json::json!({ "expectedPlanId": plan, "currentPlanId": analysis.plan_id })));
    }
    let records = select(ctx, selection)?;
    let refs: Vec<&CheckpointRecord> = records.iter().collect();
    let mut paths = analysis.paths;

    // Steps 1-3: re-resolve, capture, re-validate (re-classify through the same decision).
    for plan in paths.iter_mut().filter(|p| p.write.is_some()) {
        let first = &plan.steps[0];
        let recorded = refs
            .iter()
            .find(|r| r.checkpoint_id == first.checkpoint_id)
            .and_then(|r| r.targets[first.target_index].post_image.as_ref().and_then(|p| p.identity));
        let (mut seen, bytes) = observe(ctx.store, ctx.workspace, &plan.path, recorded.as_ref())?;
        mark_open_handles(&mut [&mut seen]);
        if seen != plan.real {
            let steps = step_indices(&refs, &plan.steps);
            let excluded = choices.get(&plan.path) == Some(&Choice::Skip);
            let mut cache = HashMap::new();
            for &(ri, ti) in &steps {
                if record_status(refs[ri]) == RecordStatus::Usable {
                    cache.insert((ri, ti), pre_bytes(ctx.store, refs[ri], ti));
                }
            }
            let (analyses, write) = decide_path(&refs, &steps, &seen, excluded, &cache);
            plan.steps = analyses;
            plan.write = write;
            plan.real = seen;
            plan.real_bytes = bytes;
        }
    }

    // The caller's choices for conflicting paths are carried out before anything is
    // written, so an impossible choice refuses the whole rollback with nothing changed.
    let mut choice_files = Vec::new();
    for p in &paths {
        let Some(choice) = choices.get(&p.path) else { continue };
        if *choice == Choice::Skip || !p.steps.iter().any(|s| s.outcome.residual()) {
            continue;
        }
        if let Some(file) = write_choice_file(ctx, &refs, p, *choice)? {
            choice_files.push(file);
        }
    }

    let writes: Vec<usize> = (0..paths.len()).filter(|i| paths[*i].write.is_some()).collect();
    let mut applied_paths = Vec::new();
    let mut rollback_checkpoint_id = None;
    if !writes.is_empty() {
        // Steps 4-5: the rollback's own checkpoint, committed before any write.
        let id = record_rollback(ctx, &writes.iter().map(|&i| &paths[i]).collect::<Vec<_>>())?;
        failpoint::hit("rollback-committed");

        // Step 6: each write a compare-and-swap against what was captured.
        for &i in &writes {
            failpoint::hit("rollback-before-swap");
            let p = &paths[i];
            // A target that cannot be written any more (a parent swapped for a symlink,
            // a directory removed) becomes a conflict; the other targets go on.
            let refused = match write_one(ctx, p, &id) {
                Ok(Swap::Done) => None,
                Ok(Swap::Changed) => Some((
                    ConflictReason::ContentConflict,
                    "the file changed between the analysis and the write; it was left as it is".to_string(),
                )),
                Err(e) if e.code == ErrorCode::PathRejected => Some((ConflictReason::BehindSymlink, e.message)),
                Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::Io | ErrorCode::Inaccessible) => {
                    Some((ConflictReason::ContentConflict, e.message))
                }
                Err(e) => return Err(e),
            };
            match refused {
                None => {
                    applied_paths.push(p.path.clone());
                    if p.write == Some(Final::Absent) {
                        remove_created_dirs(ctx, &refs, p);
                    }
                }
                Some((reason, detail)) => {
                    let plan = &mut paths[i];
                    for step in plan.steps.iter_mut().filter(|s| s.outcome.eligible()) {
                        step.outcome = conflict(reason, detail.clone());
                    }
                    plan.write = None;
                }
            }
        }
        // Step 7: the terminal event.
        checkpoint::finish(ctx.store, &id, applied_paths.is_empty())?;
        rollback_checkpoint_id = Some(id);
    }

    let summary = summarize(analysis.plan_id.clone(), analysis.checkpoint_ids.clone(), paths.clone());
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
    Ok(RollbackResult {
        result_type: summary.result_type,
        plan_id: analysis.plan_id,
        targets: summary.targets,
        applied_paths,
        counts: summary.counts,
        residual_conflicts,
        choice_files,
        excluded_effects: excluded_effects(),
        rollback_checkpoint_id,
    })
}

/// Steps 4 and 5: commits the rollback's own checkpoint — the real bytes of everything it
/// is about to overwrite or delete, and the intended results — with its dispatch
/// journaled, before anything is written. Returns the checkpoint id.
///
/// # Errors
/// `over-cap` if the checkpoint would break a cap (a rollback is never unprotected).
pub(super) fn record_rollback(ctx: Context<'_>, plans: &[&PathPlan]) -> Result<String> {
    let writes = plans
        .iter()
        .map(|p| PlannedWrite {
            path: p.path.clone(),
            current: match (&p.real, &p.real_bytes) {
                (Seen::File { identity: Some(identity), .. }, Some(bytes)) => {
                    Current::File { bytes: bytes.clone(), identity: *identity }
                }
                _ => Current::Absent,
            },
            intended: match &p.write {
                Some(Final::File { bytes, .. }) => Some(bytes.clone()),
                _ => None,
            },
        })
        .collect();
    Ok(checkpoint::record_before_writes(ctx.store, ctx.session, ctx.workspace, writes)?.checkpoint_id)
}

/// After taking back a create, removes the directories that create made, if empty.
pub(super) fn remove_created_dirs(ctx: Context<'_>, refs: &[&CheckpointRecord], p: &PathPlan) {
    for (ri, ti) in step_indices(refs, &p.steps) {
        for dir in refs[ri].targets[ti].created_dirs.iter().rev() {
            let _ = files::remove_empty_dir(&ctx.workspace.root, dir);
        }
    }
}

/// Writes one path's final state with a compare-and-swap against its captured state.
pub(super) fn write_one(ctx: Context<'_>, p: &PathPlan, checkpoint_id: &str) -> Result<Swap> {
    let store = ctx.store;
    let temp = files::temp_name(&p.path, checkpoint_id);
    let (expected_digest, expected_inode) = match &p.real {
        Seen::File { digest, identity, .. } => (Some(digest.clone()), identity.map(|i| i.inode)),
        _ => (None, None),
    };
    let matcher = move |bytes: &[u8], identity: &FileIdentity| {
        expected_digest.as_deref() == Some(hex(&store.keys().content_id(bytes)).as_str())
            && expected_inode.is_none_or(|ino| ino == identity.inode)
    };
    match p.write.as_ref().expect("only paths with a write") {
        Final::File { bytes, mode } => {
            // Parents are recreated only for a file that is to come back where none is;
            // a directory someone removed meanwhile is not brought back for an edit.
            let recreate = matches!(p.real, Seen::Absent { .. });
            let parent = match files::open_parent(&ctx.workspace.root, &p.path, recreate) {
                Ok(parent) => parent,
                Err(e) if e.code == ErrorCode::NotFound => return Ok(Swap::Changed),
                Err(e) => return Err(e),
            };
            let expect = match p.real {
                Seen::Absent { .. } => Expect::Absent,
                _ => Expect::File(&matcher),
            };
            parent.swap_in(&temp, bytes, *mode, &expect).map(|(swap, _)| swap)
        }
        Final::Absent => match files::open_parent(&ctx.workspace.root, &p.path, false) {
            Ok(parent) => parent.remove_if(&temp, &matcher),
            Err(e) if e.code == ErrorCode::NotFound => Ok(Swap::Done),
            Err(e) => Err(e),
        },
    }
}
