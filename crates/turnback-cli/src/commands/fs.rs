//! `turnback fs …`, `turnback stage` and `turnback commit`: checkpointed mutations.

use std::path::PathBuf;

use turnback::{CheckpointSummary, CoverageState, EffectKind, Mutation, Result, quote_name};

use crate::cli::FsCommand;
use crate::ctx::Ctx;
use crate::output::Outcome;

pub fn run(ctx: &Ctx, command: FsCommand) -> Result<Outcome> {
    let tb = ctx.open(true)?;
    // New content comes from stdin, read as it is written: never held whole.
    let stdin = || std::io::stdin().lock();
    let done = match command {
        FsCommand::Create(t) => tb.write_from(&t.path, true, &mut stdin(), t.confirm_unprotected)?,
        FsCommand::Write(t) => tb.write_from(&t.path, false, &mut stdin(), t.confirm_unprotected)?,
        FsCommand::Edit { target, old, new, all } => {
            tb.mutate(Mutation::Edit { path: target.path, old, new, all }, target.confirm_unprotected)?
        }
        FsCommand::Delete(t) => tb.mutate(Mutation::Delete { path: t.path }, t.confirm_unprotected)?,
    };
    let record = &done.checkpoint;
    let target = &record.targets[0];
    let mut text = format!(
        "{} {}  (checkpoint {})",
        effect_word(target.effect),
        quote_name(target.path.as_bytes()),
        record.checkpoint_id
    );
    if done.replacements > 1 {
        text.push_str(&format!(", {} replacements", done.replacements));
    }
    text.push_str(&coverage_note(record));
    if let Some(capacity) = &done.capacity {
        text.push_str(&format!("\n  over-cap: {}", capacity.disclosure()));
    }
    Ok(Outcome::of(&done, text))
}

pub fn stage(ctx: &Ctx, paths: &[PathBuf], kind: Option<&str>, confirm: bool) -> Result<Outcome> {
    let kind = kind.map(EffectKind::parse).transpose()?;
    let staged = ctx.open(true)?.stage(paths, kind, confirm)?;
    let text = staged.operation_id.clone();
    Ok(Outcome::of(&staged, text))
}

pub fn commit(ctx: &Ctx, operation_id: &str, failed: bool) -> Result<Outcome> {
    let record = ctx.open(false)?.commit(operation_id, failed)?;
    let paths: Vec<String> =
        record.targets.iter().map(|t| format!("{} {}", effect_word(t.effect), quote_name(t.path.as_bytes()))).collect();
    let text = format!(
        "committed {} ({}): {}{}",
        record.checkpoint_id,
        record.commit_state.as_str(),
        paths.join(", "),
        coverage_note(&record)
    );
    Ok(Outcome::of(&record, text))
}

pub fn effect_word(e: EffectKind) -> &'static str {
    match e {
        EffectKind::Create => "created",
        EffectKind::Edit => "edited",
        EffectKind::Delete => "deleted",
    }
}

fn coverage_note(record: &CheckpointSummary) -> String {
    match record.coverage_state {
        CoverageState::FullyProtected => String::new(),
        CoverageState::PartiallyProtected => "\n  note: partially protected (a post-image was over a cap)".into(),
        CoverageState::Unprotected => {
            "\n  note: UNPROTECTED (over cap, confirmed): this change cannot be rolled back".into()
        }
    }
}
