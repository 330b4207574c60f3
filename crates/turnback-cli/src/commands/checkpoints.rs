//! `turnback checkpoints` and `turnback inspect`.

use turnback::{Image, Inspection, Result, escape_controls, format_size, quote_name};

use crate::commands::fs::effect_word;
use crate::ctx::Ctx;
use crate::output::{Outcome, short};

pub fn list(ctx: &Ctx, turn: Option<u64>, all: bool) -> Result<Outcome> {
    let list = ctx.open(false)?.checkpoints(turn, all)?;
    let mut text = format!("session {} (prompt round {})\n", list.session_id, list.prompt_round);
    if list.checkpoints.is_empty() && list.corrupt.is_empty() {
        text.push_str("no checkpoints\n");
    }
    for c in &list.checkpoints {
        let r = &c.record;
        let files = format!("{} file{}", r.targets.len(), if r.targets.len() == 1 { "" } else { "s" });
        let targets: Vec<String> = match (&r.shell, &r.subagent_window) {
            // A command's files are many: counted, with the command (redacted when kept).
            (Some(shell), _) => vec![format!("shell  {files}  {}", escape_controls(&shell.command))],
            // A sub-agent's window: counted; the sub-agent is named below.
            (None, Some(_)) => vec![format!("sub-agent window  {files}")],
            (None, None) => r
                .targets
                .iter()
                .map(|t| format!("{} {}", effect_word(t.effect), quote_name(t.path.as_bytes())))
                .collect(),
        };
        // The sub-agent's id is the agent's own: escaped like any text it sends.
        let by = r.subagent.as_deref().map(|s| format!("  (sub-agent {})", escape_controls(s))).unwrap_or_default();
        text.push_str(&format!(
            "{}  round {:<3} {:<11} {:<10} {}{}{by}\n",
            r.checkpoint_id,
            r.prompt_round.unwrap_or(0),
            r.stage_state.as_str(),
            c.effective_retention.as_str(),
            outcome_word(r),
            targets.join(", ")
        ));
    }
    for c in &list.corrupt {
        let round = c.prompt_round.map_or_else(|| "?".to_string(), |r| r.to_string());
        let message = escape_controls(&c.message);
        text.push_str(&format!("{}  round {round:<3} CORRUPT ({}): {message}\n", c.checkpoint_id, c.code));
    }
    Ok(Outcome::of(&list, text))
}

/// How the mutation ended, when it did not simply succeed: a call the person denied, or
/// one that failed, must not read like an edit that was made. Its targets' effects are
/// what it was about to do; "changed nothing" when every file is as it was before.
fn outcome_word(r: &turnback::Checkpoint) -> String {
    use turnback::CommitState;
    let unchanged = r.targets.iter().all(|t| {
        let post = t.post_image.as_ref();
        post.is_some_and(|p| p.present == t.pre_image.present && p.digest == t.pre_image.digest)
    });
    match r.mutation.commit_state {
        CommitState::Succeeded => String::new(),
        CommitState::Failed if unchanged => "failed, changed nothing: ".to_string(),
        CommitState::Failed => "failed (files changed): ".to_string(),
        other => format!("{}: ", other.as_str()),
    }
}

fn image_text(label: &str, image: &Image) -> String {
    if !image.present {
        return format!("{label} absent");
    }
    let class = image.content_class.map(|c| c.as_str()).unwrap_or("?");
    let digest = image.digest.as_deref().map(short).unwrap_or("none");
    let stored = if image.artifact_id.is_some() { "" } else { ", NOT STORED" };
    format!("{label} {} ({class}, digest {digest}{stored})", format_size(image.size))
}

pub fn inspect(ctx: &Ctx, id: &str) -> Result<Outcome> {
    let inspection = ctx.open(false)?.inspect(id)?;
    let text = inspect_text(&inspection);
    Ok(Outcome::of(&inspection, text))
}

fn inspect_text(i: &Inspection) -> String {
    let r = &i.checkpoint;
    let mut t = format!("checkpoint {}\n", r.checkpoint_id);
    t.push_str(&format!(
        "  operation   {} ({}, {}, version {})\n",
        r.mutation.operation_id,
        r.mutation.kind.as_str(),
        r.mutation.commit_state.as_str(),
        r.mutation.aggregate_version
    ));
    t.push_str(&format!("  session     {}  prompt round {}\n", r.session_id, r.prompt_round.unwrap_or(0)));
    t.push_str(&format!("  created     {}", r.created_at));
    if let Some(c) = &r.committed_at {
        t.push_str(&format!("  committed {c}"));
    }
    t.push('\n');
    t.push_str(&format!("  stage       {}\n", r.stage_state.as_str()));
    t.push_str(&format!("  coverage    {}\n", r.coverage_state.as_str()));
    t.push_str(&format!("  integrity   {}\n", r.integrity_state.as_str()));
    if let Some(p) = &i.problem {
        t.push_str(&format!("  usable      no: {}: {}\n", p.code, escape_controls(&p.message)));
    }
    t.push_str(&format!(
        "  encryption  AES-256-GCM after zstd, random nonce per object; data key v{} for new writes\n",
        i.encryption.current_key_version
    ));
    let v = &i.retention;
    t.push_str(&format!(
        "  retention   {} (made in round {}, kept while round < {}, window {})\n",
        i.effective_retention.as_str(),
        v.creation_prompt_round,
        v.expiry_prompt_round,
        v.window_prompt_rounds
    ));
    if let Some(shell) = &r.shell {
        let status = shell.exit_status.map_or_else(|| "exit status not reported".to_string(), |s| format!("exit {s}"));
        t.push_str(&format!("  command     {} ({status})\n", escape_controls(&shell.command)));
        t.push_str(&format!(
            "  window      snapshots {} → {}: every file that changed between them, whoever changed it\n",
            short(&shell.before_snapshot),
            short(&shell.after_snapshot)
        ));
        if !shell.also_by_tool_calls.is_empty() {
            let paths: Vec<String> =
                shell.also_by_tool_calls.iter().map(|p| quote_name(p.as_bytes()).into_owned()).collect();
            t.push_str(&format!(
                "  also edited by tool calls inside the window (taken back with it): {}\n",
                paths.join(", ")
            ));
        }
    }
    if let Some(w) = &r.subagent_window {
        t.push_str(&format!(
            "  window      snapshots {} → {}: what changed from the sub-agent's start to its stop, whoever changed it\n",
            short(&w.before_snapshot),
            short(&w.after_snapshot)
        ));
        if !w.left_to_checkpoints.is_empty() {
            let paths: Vec<String> =
                w.left_to_checkpoints.iter().map(|p| quote_name(p.as_bytes()).into_owned()).collect();
            t.push_str(&format!(
                "  left to the checkpoints made inside the window (each change is taken back once): {}\n",
                paths.join(", ")
            ));
        }
    }
    t.push_str(&format!("  size        {}\n  targets\n", format_size(i.bytes)));
    for target in &r.targets {
        t.push_str(&format!("    {} {}\n", effect_word(target.effect), quote_name(target.path.as_bytes())));
        t.push_str(&format!("      {}\n", image_text("before", &target.pre_image)));
        match &target.post_image {
            Some(p) => t.push_str(&format!("      {}\n", image_text("after ", p))),
            None => t.push_str("      after  not captured (not committed)\n"),
        }
    }
    if !i.journal.is_empty() {
        let events: Vec<String> = i.journal.iter().map(|e| format!("{:?}", e.event)).collect();
        t.push_str(&format!("  journal     {}\n", events.join(" → ")));
    }
    let excluded: Vec<&str> = i.excluded_effects.iter().map(|e| e.effect).collect();
    t.push_str(&format!("  never protected: {}\n", excluded.join(", ")));
    t
}
