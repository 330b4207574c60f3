//! `turnback fs …`, `turnback stage` and `turnback commit`: checkpointed mutations.

use std::io::Read;
use std::path::PathBuf;

use serde_json::json;
use turnback::checkpoint::{CheckpointRecord, CoverageState, EffectKind};
use turnback::mutation::{self, Context, Mutation};
use turnback::{Error, ErrorCode, Result};

use crate::app::Ctx;
use crate::cli::FsCommand;
use crate::output::Outcome;

fn stdin_bytes() -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    std::io::stdin().read_to_end(&mut buf).map_err(|e| Error::new(ErrorCode::Io, format!("reading stdin: {e}")))?;
    Ok(buf)
}

pub fn run(ctx: &Ctx, command: FsCommand) -> Result<Outcome> {
    let (m, confirm) = match command {
        FsCommand::Create(t) => (Mutation::Create { path: t.path, content: stdin_bytes()? }, t.confirm_unprotected),
        FsCommand::Write(t) => (Mutation::Write { path: t.path, content: stdin_bytes()? }, t.confirm_unprotected),
        FsCommand::Edit { target, old, new, all } => {
            (Mutation::Edit { path: target.path, old, new, all }, target.confirm_unprotected)
        }
        FsCommand::Delete(t) => (Mutation::Delete { path: t.path }, t.confirm_unprotected),
    };
    let store = ctx.open(true)?;
    let ws = ctx.workspace(&store)?;
    let session = ctx.session(&store, &ws)?;
    let cwd = ctx.cwd()?;
    let c = Context { store: &store, workspace: &ws, session: &session, cwd: &cwd, confirm_unprotected: confirm };
    let done = mutation::apply(c, m)?;
    let record = &done.checkpoint;
    let mut json = summary_json(record);
    json["replacements"] = json!(done.replacements);
    if let Some(capacity) = &done.capacity {
        json["capacity"] = json!(capacity);
        json["unprotectedScope"] = json!(record.targets.iter().map(|t| t.path.display()).collect::<Vec<_>>());
    }
    let target = &record.targets[0];
    let mut text =
        format!("{} {}  (checkpoint {})", effect_word(target.effect), target.path.display(), record.checkpoint_id);
    if done.replacements > 1 {
        text.push_str(&format!(", {} replacements", done.replacements));
    }
    text.push_str(&coverage_note(record));
    if let Some(capacity) = &done.capacity {
        text.push_str(&format!("\n  over-cap: {}", capacity.disclosure()));
    }
    Ok(Outcome::ok(json, text))
}

pub fn stage(ctx: &Ctx, paths: &[PathBuf], kind: Option<&str>, confirm: bool) -> Result<Outcome> {
    let kind = kind.map(EffectKind::parse).transpose()?;
    let store = ctx.open(true)?;
    let ws = ctx.workspace(&store)?;
    let session = ctx.session(&store, &ws)?;
    let cwd = ctx.cwd()?;
    let c = Context { store: &store, workspace: &ws, session: &session, cwd: &cwd, confirm_unprotected: confirm };
    let record = mutation::stage_external(c, paths, kind)?;
    Ok(Outcome::ok(summary_json(&record), record.mutation.operation_id.clone()))
}

pub fn commit(ctx: &Ctx, operation_id: &str, failed: bool) -> Result<Outcome> {
    let store = ctx.open(false)?;
    let record = mutation::commit_external(&store, operation_id, failed)?;
    let paths: Vec<String> =
        record.targets.iter().map(|t| format!("{} {}", effect_word(t.effect), t.path.display())).collect();
    let text = format!(
        "committed {} ({}): {}{}",
        record.checkpoint_id,
        record.mutation.commit_state.as_str(),
        paths.join(", "),
        coverage_note(&record)
    );
    Ok(Outcome::ok(summary_json(&record), text))
}

pub fn effect_word(e: EffectKind) -> &'static str {
    match e {
        EffectKind::Create => "created",
        EffectKind::Edit => "edited",
        EffectKind::Delete => "deleted",
    }
}

fn coverage_note(record: &CheckpointRecord) -> String {
    match record.coverage_state {
        CoverageState::FullyProtected => String::new(),
        CoverageState::PartiallyProtected => "\n  note: partially protected (a post-image was over a cap)".into(),
        CoverageState::Unprotected => {
            "\n  note: UNPROTECTED (over cap, confirmed): this change cannot be rolled back".into()
        }
    }
}

/// The JSON of a checkpoint as mutation commands report it.
pub fn summary_json(record: &CheckpointRecord) -> serde_json::Value {
    json!({
        "checkpointId": record.checkpoint_id,
        "operationId": record.mutation.operation_id,
        "kind": record.mutation.kind,
        "stageState": record.stage_state,
        "commitState": record.mutation.commit_state,
        "coverageState": record.coverage_state,
        "promptRound": record.prompt_round,
        "sessionId": record.session_id,
        "targets": record.targets,
    })
}
