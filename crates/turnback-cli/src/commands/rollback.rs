//! `turnback rollback`: preview, apply, and `rollback resolve`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;
use turnback::rollback::{self, Choice, Outcome, ResultType, Selection, TargetAnalysis};
use turnback::{Error, RelPath, Result};

use crate::app::Ctx;
use crate::cli::{RollbackArgs, RollbackCommand};
use crate::output::{Outcome as Printed, exit};

pub fn run(ctx: &Ctx, args: RollbackArgs) -> Result<Printed> {
    let store = ctx.open(false)?;
    let ws = ctx.workspace(&store)?;
    let session = ctx.session(&store, &ws)?;
    let cwd = ctx.cwd()?;
    let rb = rollback::Context { store: &store, workspace: &ws, session: &session };
    if let Some(RollbackCommand::Resolve { path }) = args.command {
        let rel = ws.resolve(&path, &cwd, store.protected_paths())?;
        let done = rollback::resolve(rb, &rel)?;
        let text = format!(
            "applied your resolution of {} (checkpoint {}; roll it back to undo)",
            done.path.display(),
            done.checkpoint_id
        );
        return Ok(Printed::ok(json!(done), text));
    }
    let selection = match (args.turn, args.since_turn) {
        (Some(t), _) => Selection::Turn(t),
        (_, Some(t)) => Selection::SinceTurn(t),
        _ => Selection::Checkpoints(args.ids),
    };
    let mut choices = BTreeMap::new();
    for spec in &args.choose {
        let (path, choice) = spec
            .rsplit_once('=')
            .ok_or_else(|| Error::invalid(format!("--choose takes PATH=skip|patch|resolve, got {spec:?}")))?;
        choices.insert(ws.resolve(Path::new(path), &cwd, store.protected_paths())?, Choice::parse(choice)?);
    }
    if args.apply {
        let result = rollback::apply(rb, &selection, &choices, args.plan.as_deref())?;
        let mut text = format!("rollback {}: ", result_word(result.result_type));
        text.push_str(&format!("{} path(s) restored", result.applied_paths.len()));
        if let Some(id) = &result.rollback_checkpoint_id {
            text.push_str(&format!("; undo it with `turnback rollback {id} --apply`"));
        }
        text.push('\n');
        text.push_str(&targets_text(&result.targets).replace("eligible: ", "taken back: "));
        for f in &result.choice_files {
            text.push_str(&format!("wrote {} for {}\n", f.file.display(), f.path.display()));
        }
        text.push_str(&excluded_text());
        Ok(Printed::ok(json!(result), text).with_exit(exit_for(result.result_type)))
    } else {
        let analysis = rollback::analyze(rb, &selection, &choices)?;
        let mut text = format!("preview ({}): plan {}\n", result_word(analysis.result_type), analysis.plan_id);
        text.push_str(&targets_text(&analysis.targets));
        if analysis.targets.is_empty() {
            text.push_str("nothing to roll back\n");
        }
        text.push_str(&excluded_text());
        text.push_str(&format!("apply with --apply --plan {}\n", analysis.plan_id));
        let mut json = json!(analysis);
        json["excludedEffects"] = json!(rollback::excluded_effects());
        Ok(Printed::ok(json, text).with_exit(exit_for(analysis.result_type)))
    }
}

fn exit_for(r: ResultType) -> i32 {
    match r {
        ResultType::Full => exit::SUCCESS,
        ResultType::Partial => exit::PARTIAL,
        ResultType::Blocked => exit::BLOCKED,
    }
}

fn result_word(r: ResultType) -> &'static str {
    match r {
        ResultType::Full => "full",
        ResultType::Partial => "partial",
        ResultType::Blocked => "blocked",
    }
}

fn outcome_text(o: &Outcome) -> String {
    match o {
        Outcome::AppliedEligible { no_op: true, .. } => "eligible (already as before)".into(),
        Outcome::AppliedEligible { inverse_operation, .. } => {
            let v = serde_json::to_value(inverse_operation).unwrap_or_default();
            format!("eligible: {}", v["kind"].as_str().unwrap_or("?"))
        }
        Outcome::Conflict { reason_code, detail, .. } => {
            let v = serde_json::to_value(reason_code).unwrap_or_default();
            format!("CONFLICT {}: {detail}", v.as_str().unwrap_or("?"))
        }
        Outcome::Skipped { reason } => format!("skipped: {reason}"),
        Outcome::Inaccessible { cause_code } => format!("INACCESSIBLE: {cause_code}"),
        Outcome::Mismatch { reason_code, detail } => format!("MISMATCH {reason_code}: {detail}"),
        Outcome::UnknownOutcome { reason } => format!("UNKNOWN: {reason}"),
    }
}

fn targets_text(targets: &[TargetAnalysis]) -> String {
    let mut text = String::new();
    for t in targets {
        text.push_str(&format!("  {:<40} {}  ({})\n", t.path.display(), outcome_text(&t.outcome), &t.checkpoint_id));
        if t.outcome.category() == "conflict" {
            text.push_str(&format!(
                "  {:<40} choices: --choose {}=skip | =patch | =resolve\n",
                "",
                RelPath::display(&t.path)
            ));
        }
    }
    text
}

fn excluded_text() -> String {
    "never reversible (never-protected): shell, remote, permission, process, symlink-side, external\n".into()
}
