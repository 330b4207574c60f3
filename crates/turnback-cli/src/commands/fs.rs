//! `turnback fs …`, `turnback stage` and `turnback commit`: checkpointed mutations.

use std::path::PathBuf;

use turnback::{CheckpointSummary, CoverageState, EffectKind, Error, ErrorCode, Mutation, Result, quote_name};

use crate::app::Ctx;
use crate::cli::FsCommand;
use crate::output::Outcome;

/// A file's new content from stdin. Over the checkpoint cap it is refused as soon as the
/// count passes the cap, keeping nothing (unless the person confirmed going unprotected).
fn stdin_bytes(checkpoint_cap: u64, confirm_unprotected: bool) -> Result<Vec<u8>> {
    let cap = if confirm_unprotected { u64::MAX } else { checkpoint_cap };
    turnback::read_at_most(std::io::stdin().lock(), cap)?.ok_or_else(|| {
        Error::new(
            ErrorCode::OverCap,
            format!(
                "the content on stdin is over the checkpoint cap ({} bytes); nothing was changed. \
                 Rerun with --confirm-unprotected to write it without rollback protection",
                checkpoint_cap
            ),
        )
    })
}

pub fn run(ctx: &Ctx, command: FsCommand) -> Result<Outcome> {
    let tb = ctx.open(true)?;
    let cap = tb.settings().checkpoint_cap;
    let (m, confirm) = match command {
        FsCommand::Create(t) => (
            Mutation::Create { path: t.path, content: stdin_bytes(cap, t.confirm_unprotected)? },
            t.confirm_unprotected,
        ),
        FsCommand::Write(t) => {
            (Mutation::Write { path: t.path, content: stdin_bytes(cap, t.confirm_unprotected)? }, t.confirm_unprotected)
        }
        FsCommand::Edit { target, old, new, all } => {
            (Mutation::Edit { path: target.path, old, new, all }, target.confirm_unprotected)
        }
        FsCommand::Delete(t) => (Mutation::Delete { path: t.path }, t.confirm_unprotected),
    };
    let done = tb.mutate(m, confirm)?;
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
