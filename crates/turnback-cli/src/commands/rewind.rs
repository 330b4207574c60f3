//! `turnback rewind`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::json;
use turnback::Result;
use turnback::rewind::{self, Action, Plan};

use crate::app::Ctx;
use crate::output::{Outcome, exit};

pub fn run(ctx: &Ctx, to: u64, apply: bool, plan_id: Option<String>, force: Vec<PathBuf>) -> Result<Outcome> {
    let store = ctx.open(false)?;
    let ws = ctx.workspace(&store)?;
    let session = ctx.session(&store, &ws)?;
    let cwd = ctx.cwd()?;
    let mut forced = BTreeSet::new();
    for f in &force {
        forced.insert(ws.resolve(f, &cwd, store.protected_paths())?.display());
    }
    if apply {
        let done = rewind::apply(&store, &ws, &session, to, &forced, plan_id.as_deref())?;
        let mut text = format!("rewound to the start of turn {}\n", to);
        text.push_str(&paths_text(&done.plan));
        if let Some(id) = &done.checkpoint_id {
            text.push_str(&format!("undo it with `turnback rollback {id} --apply`\n"));
        }
        if done.history_entries_removed > 0 {
            text.push_str(&format!("history: {} entries of the rewound turns removed\n", done.history_entries_removed));
        }
        if let Some(prompt) = &done.restored_prompt {
            text.push_str(&format!("turn {to}'s prompt, to send again:\n{prompt}\n"));
        }
        let code = exit_for(&done.plan);
        Ok(Outcome::ok(json!(done), text).with_exit(code))
    } else {
        let plan = rewind::plan(&store, &ws, &session, to, &forced)?;
        let mut text = format!("rewind to the start of turn {} (plan {})\n", to, plan.plan_id);
        text.push_str(&paths_text(&plan));
        text.push_str(&format!("apply with --apply --plan {}\n", plan.plan_id));
        let code = exit_for(&plan);
        Ok(Outcome::ok(json!(plan), text).with_exit(code))
    }
}

fn exit_for(plan: &Plan) -> i32 {
    let left = plan.paths.iter().filter(|p| p.action == Action::LeaveAlone).count();
    match (left, plan.paths.len() - left) {
        (0, _) => exit::SUCCESS,
        (_, 0) => exit::BLOCKED,
        _ => exit::PARTIAL,
    }
}

fn paths_text(plan: &Plan) -> String {
    let mut text = String::new();
    if plan.target_late {
        text.push_str("  note: this turn's start snapshot was taken late; edits made before it cannot be rewound\n");
    }
    if plan.paths.is_empty() {
        text.push_str("  nothing to change\n");
    }
    for p in &plan.paths {
        let what = match p.action {
            Action::Restore => "restore",
            Action::Delete => "delete",
            Action::LeaveAlone => "LEAVE ALONE",
        };
        let why = p.detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
        let forced = if p.forced { " [forced]" } else { "" };
        text.push_str(&format!("  {what:<12} {}{why}{forced}\n", p.path));
    }
    text.push_str("  never reversible (never-protected): shell, remote, permission, process, symlink-side, external\n");
    for command in &plan.shell_effects {
        text.push_str(&format!("  ran in these turns, not undone: $ {command}\n"));
    }
    text
}
