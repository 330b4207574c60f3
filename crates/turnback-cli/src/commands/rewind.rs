//! `turnback rewind`.

use std::path::PathBuf;

use turnback::{Result, RewindAction, RewindPlan, escape_controls, quote_name};

use crate::ctx::Ctx;
use crate::output::{Outcome, exit_for};

pub fn run(ctx: &Ctx, to: u64, apply: bool, plan_id: Option<String>, force: Vec<PathBuf>) -> Result<Outcome> {
    let tb = ctx.open(false)?;
    if apply {
        let done = tb.rewind_apply(to, &force, plan_id.as_deref())?;
        let mut text = format!("rewound to the start of turn {}\n", to);
        text.push_str(&paths_text(&done.plan));
        if let Some(id) = &done.checkpoint_id {
            text.push_str(&format!("undo it with `turnback rollback {id} --apply`\n"));
        }
        if done.history_entries_removed > 0 {
            text.push_str(&format!("history: {} entries of the rewound turns removed\n", done.history_entries_removed));
        }
        if let Some(prompt) = &done.restored_prompt {
            text.push_str(&format!("turn {to}'s prompt, to send again:\n{}\n", escape_controls(prompt)));
        }
        let code = exit_for(done.plan.result_type);
        Ok(Outcome::of(&done, text).with_exit(code))
    } else {
        let plan = tb.rewind_preview(to, &force)?;
        let mut text = format!("rewind to the start of turn {} (plan {})\n", to, plan.plan_id);
        text.push_str(&paths_text(&plan));
        text.push_str(&format!("apply with --apply --plan {}\n", plan.plan_id));
        let code = exit_for(plan.result_type);
        Ok(Outcome::of(&plan, text).with_exit(code))
    }
}

fn paths_text(plan: &RewindPlan) -> String {
    let mut text = String::new();
    if plan.target_late {
        text.push_str("  note: this turn's start snapshot was taken late; edits made before it cannot be rewound\n");
    }
    if plan.paths.is_empty() {
        text.push_str("  nothing to change\n");
    }
    for p in &plan.paths {
        let what = match p.action {
            RewindAction::Restore => "restore",
            RewindAction::Delete => "delete",
            RewindAction::LeaveAlone => "LEAVE ALONE",
        };
        let why = p.detail.as_deref().map(|d| format!(" ({})", escape_controls(d))).unwrap_or_default();
        let forced = if p.forced { " [forced]" } else { "" };
        text.push_str(&format!("  {what:<12} {}{why}{forced}\n", quote_name(p.path_bytes())));
    }
    for l in &plan.left_out {
        text.push_str(&format!(
            "  left out     {} ({}; never deleted or restored)\n",
            quote_name(l.path.as_bytes()),
            l.reason
        ));
    }
    text.push_str(&format!("  {}", super::rollback::excluded_text(&plan.excluded_effects)));
    for command in &plan.shell_effects {
        text.push_str(&format!("  ran in these turns, not undone: $ {}\n", escape_controls(command)));
    }
    text
}
