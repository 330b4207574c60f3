//! `turnback rollback`: preview, apply, and `rollback resolve`.

use std::path::PathBuf;

use turnback::{
    Choice, Error, ExcludedEffect, Result, RollbackSelection, TargetAnalysis, TargetOutcome, UnreadableCheckpoint,
    escape_controls, quote_name,
};

use crate::cli::{RollbackArgs, RollbackCommand};
use crate::ctx::Ctx;
use crate::output::{Outcome, exit_for, result_word};

pub fn run(ctx: &Ctx, args: RollbackArgs) -> Result<Outcome> {
    let tb = ctx.open(false)?;
    if let Some(RollbackCommand::Resolve { path }) = args.command {
        let done = tb.rollback_resolve(&path)?;
        let text = format!(
            "applied your resolution of {} (checkpoint {}; roll it back to undo)",
            quote_name(done.path.as_bytes()),
            done.checkpoint_id
        );
        return Ok(Outcome::of(&done, text));
    }
    let selection = RollbackSelection::from_parts(args.ids, args.turn, args.since_turn, args.agent)?;
    let mut choices = Vec::new();
    for spec in &args.choose {
        let (path, choice) = spec
            .rsplit_once('=')
            .ok_or_else(|| Error::invalid(format!("--choose takes PATH=skip|patch|resolve, got {spec:?}")))?;
        choices.push((PathBuf::from(path), Choice::parse(choice)?));
    }
    if args.apply {
        let result = tb.rollback_apply(&selection, &choices, args.plan.as_deref())?;
        let mut text = format!("rollback {}: ", result_word(result.result_type));
        text.push_str(&format!("{} path(s) restored", result.applied_paths.len()));
        if let Some(id) = &result.rollback_checkpoint_id {
            text.push_str(&format!("; undo it with `turnback rollback {id} --apply`"));
        }
        text.push('\n');
        text.push_str(&targets_text(&result.targets).replace("eligible: ", "taken back: "));
        text.push_str(&unreadable_text(&result.unreadable_checkpoints));
        for f in &result.choice_files {
            text.push_str(&format!("wrote {} for {}\n", quote_name(f.file.as_bytes()), quote_name(f.path.as_bytes())));
        }
        text.push_str(&excluded_text(&result.excluded_effects));
        Ok(Outcome::of(&result, text).with_exit(exit_for(result.result_type)))
    } else {
        let analysis = tb.rollback_preview(&selection, &choices)?;
        let mut text = format!("preview ({}): plan {}\n", result_word(analysis.result_type), analysis.plan_id);
        text.push_str(&targets_text(&analysis.targets));
        text.push_str(&unreadable_text(&analysis.unreadable_checkpoints));
        if analysis.targets.is_empty() && analysis.unreadable_checkpoints.is_empty() {
            text.push_str("nothing to roll back\n");
        }
        text.push_str(&excluded_text(&analysis.excluded_effects));
        text.push_str(&format!("apply with --apply --plan {}\n", analysis.plan_id));
        Ok(Outcome::of(&analysis, text).with_exit(exit_for(analysis.result_type)))
    }
}

fn outcome_text(o: &TargetOutcome) -> String {
    match o {
        TargetOutcome::AppliedEligible { no_op: true, .. } => "eligible (already as before)".into(),
        TargetOutcome::AppliedEligible { inverse_operation, .. } => {
            let v = serde_json::to_value(inverse_operation).unwrap_or_default();
            format!("eligible: {}", v["kind"].as_str().unwrap_or("?"))
        }
        TargetOutcome::Conflict { reason_code, detail, .. } => {
            let v = serde_json::to_value(reason_code).unwrap_or_default();
            format!("CONFLICT {}: {}", v.as_str().unwrap_or("?"), escape_controls(detail))
        }
        TargetOutcome::Skipped { reason } => format!("skipped: {}", escape_controls(reason)),
        TargetOutcome::Inaccessible { cause_code } => format!("INACCESSIBLE: {cause_code}"),
        TargetOutcome::Mismatch { reason_code, detail } => {
            format!("MISMATCH {reason_code}: {}", escape_controls(detail))
        }
        TargetOutcome::UnknownOutcome { reason } => format!("UNKNOWN: {}", escape_controls(reason)),
    }
}

fn targets_text(targets: &[TargetAnalysis]) -> String {
    let mut text = String::new();
    for t in targets {
        let name = quote_name(t.path.as_bytes());
        text.push_str(&format!("  {name:<40} {}  ({})\n", outcome_text(&t.outcome), &t.checkpoint_id));
        if t.outcome.category() == "conflict" {
            text.push_str(&format!("  {:<40} choices: --choose {name}=skip | =patch | =resolve\n", ""));
        }
    }
    text
}

/// The checkpoints of a selection that cannot be read, one line each.
fn unreadable_text(unreadable: &[UnreadableCheckpoint]) -> String {
    unreadable
        .iter()
        .map(|u| {
            format!(
                "  CORRUPT checkpoint {} ({}): {}; nothing of it can be taken back\n",
                u.checkpoint_id,
                u.code,
                escape_controls(&u.message)
            )
        })
        .collect()
}

/// The effects a result says are never reversible, as one line.
pub fn excluded_text(excluded: &[ExcludedEffect]) -> String {
    let Some(status) = excluded.first().map(|e| e.status) else { return String::new() };
    let effects: Vec<&str> = excluded.iter().map(|e| e.effect).collect();
    format!("never reversible ({status}): {}\n", effects.join(", "))
}
