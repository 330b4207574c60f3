//! The consequences of a rewind or a rollback, before and after it is applied: every path
//! with its outcome, why a path is left alone, and what no undo takes back; and two
//! sessions' results side by side; what each checkpoint did, in one line. Text only: the
//! frame (`render`) lays it out.
//!
//! Invariants: the words come from the facade's own plan (the one decision function's
//! outcome), never from a second judgement made here; names are quoted and free text
//! escaped, so nothing in a file name or a command can move the cursor.

use turnback::{
    Checkpoint, Choice, Comparison, RewindAction, RewindPlan, RewindReason, TargetAnalysis, TargetOutcome,
    escape_controls, quote_name,
};

use super::state::{CheckpointPick, Did, Done, RollbackView};
use super::style::clock;
use crate::commands::fs::effect_word;

/// Why a rewind leaves a path alone, in a person's words.
fn reason_words(reason: Option<RewindReason>) -> &'static str {
    match reason {
        Some(RewindReason::HandEditBetweenTurns | RewindReason::HandEditAfterLastTurn) => "a person's edit",
        Some(RewindReason::OtherSession) => "another session's change",
        Some(RewindReason::Unverified) => "unverified",
        Some(RewindReason::NestedRepository) => "nested repository",
        Some(RewindReason::Symlink) => "symlink",
        Some(RewindReason::BehindSymlink) => "behind a symlink",
        Some(RewindReason::NotSnapshotted) => "not snapshotted",
        Some(RewindReason::ChangedDuringRewind) => "changed during the rewind",
        Some(RewindReason::TooLarge) => "too large to snapshot",
        None => "",
    }
}

/// One line per path of a rewind plan, then what it leaves out and cannot undo.
pub fn rewind_lines(plan: &RewindPlan) -> Vec<String> {
    let mut lines = Vec::new();
    if plan.target_late {
        lines.push("note: this turn's start snapshot was late; edits made before it stay".into());
    }
    if plan.paths.is_empty() {
        lines.push("nothing to change".into());
    }
    for p in &plan.paths {
        let name = quote_name(p.path_bytes());
        let line = match p.action {
            RewindAction::Restore => format!("  restore      {name}"),
            RewindAction::Delete => format!("  delete       {name}"),
            RewindAction::LeaveAlone => {
                let why = reason_words(p.reason);
                let detail = p.detail.as_deref().map(|d| format!(": {}", escape_controls(d))).unwrap_or_default();
                format!("! leave alone {name} ({why}{detail})")
            }
        };
        lines.push(line);
    }
    for l in &plan.left_out {
        lines.push(format!(
            "  left out     {} ({}; never deleted or restored)",
            quote_name(l.path.as_bytes()),
            l.reason
        ));
    }
    for command in &plan.shell_effects {
        lines.push(format!("  not undone   $ {}", escape_controls(command)));
    }
    lines
}

/// One line per target of a rollback: its outcome and, for a conflict, the safe choices.
pub fn rollback_lines(targets: &[TargetAnalysis]) -> Vec<String> {
    if targets.is_empty() {
        return vec!["no checkpoint to take back in this turn".into()];
    }
    targets
        .iter()
        .map(|t| {
            let name = quote_name(t.path.as_bytes()).into_owned();
            match &t.outcome {
                TargetOutcome::AppliedEligible { no_op: true, .. } => {
                    format!("  unchanged    {name} (already as before)")
                }
                TargetOutcome::AppliedEligible { .. } => format!("  take back    {name}"),
                TargetOutcome::Conflict { detail, safe_choices, .. } => {
                    let choices: Vec<String> = safe_choices
                        .iter()
                        .filter_map(|c| serde_json::to_value(c).ok().and_then(|v| v.as_str().map(String::from)))
                        .collect();
                    format!("! conflict    {name} ({}; choices: {})", escape_controls(detail), choices.join(", "))
                }
                other => format!("! {:<11} {name}", other.category()),
            }
        })
        .collect()
}

/// What an apply (or an undo) did: the words the status line says, then one line per path
/// (and per file a choice wrote).
pub fn done_lines(done: &Done) -> Vec<String> {
    let mut lines = vec![done.what.clone()];
    match &done.did {
        Did::Rewind(plan) => lines.extend(rewind_lines(plan)),
        Did::Rollback { targets, choice_files } => {
            lines.extend(rollback_lines(targets));
            for f in choice_files {
                lines.push(format!("  wrote {} for {}", quote_name(f.file.as_bytes()), quote_name(f.path.as_bytes())));
            }
        }
    }
    lines
}

/// The rollback preview: one line per target, the one under the cursor marked `>`, the
/// choice made for a path beside it, and the keys that choose.
pub fn rollback_view_lines(view: &RollbackView) -> Vec<String> {
    let mut lines = rollback_lines(&view.analysis.targets);
    for (i, (line, t)) in lines.iter_mut().zip(&view.analysis.targets).enumerate() {
        if let Some((_, c)) = view.choices.iter().find(|(p, _)| *p == t.path) {
            line.push_str(&format!("  [your choice: {}]", choice_word(*c)));
        }
        if i == view.cursor {
            line.insert_str(0, "> ");
        } else {
            line.insert_str(0, "  ");
        }
    }
    if view.analysis.targets.iter().any(|t| matches!(t.outcome, TargetOutcome::Conflict { .. }))
        || !view.choices.is_empty()
    {
        lines
            .push("on a conflict: s skip it · p write a sanitized patch beside it · m write a merge to resolve".into());
    }
    for u in &view.analysis.unreadable_checkpoints {
        lines.push(format!(
            "! unreadable checkpoint {} ({}): nothing of it can be taken back",
            u.checkpoint_id,
            escape_controls(&u.message)
        ));
    }
    lines
}

fn choice_word(c: Choice) -> &'static str {
    match c {
        Choice::Skip => "skip",
        Choice::Patch => "sanitized patch",
        Choice::Resolve => "resolve (merge)",
    }
}

/// Most file names one checkpoint's line shows; the rest are counted.
const NAMES_SHOWN: usize = 4;

/// What a checkpoint did, in one line: a shell command (`$ …`, its files counted and the
/// first named), a sub-agent's window, or each file with its effect; and the sub-agent
/// that made it.
pub fn checkpoint_words(c: &Checkpoint) -> String {
    let names: Vec<String> =
        c.targets.iter().take(NAMES_SHOWN).map(|t| quote_name(t.path.as_bytes()).into_owned()).collect();
    let more = c.targets.len().saturating_sub(NAMES_SHOWN);
    let files = || {
        let count = format!("{} file{}", c.targets.len(), if c.targets.len() == 1 { "" } else { "s" });
        let rest = if more > 0 { format!(", +{more} more") } else { String::new() };
        format!("{count}: {}{rest}", names.join(", "))
    };
    let what = match (&c.shell, &c.subagent_window) {
        (Some(shell), _) => format!("shell $ {}  ({})", escape_controls(&shell.command), files()),
        (None, Some(_)) => format!("sub-agent window  ({})", files()),
        (None, None) => {
            let each: Vec<String> = c
                .targets
                .iter()
                .take(NAMES_SHOWN)
                .map(|t| format!("{} {}", effect_word(t.effect), quote_name(t.path.as_bytes())))
                .collect();
            let rest = if more > 0 { format!(", +{more} more") } else { String::new() };
            format!("{}{rest}", each.join(", "))
        }
    };
    let by = c.subagent.as_deref().map(|s| format!("  [sub-agent {}]", escape_controls(s))).unwrap_or_default();
    format!("{what}{by}")
}

/// The checkpoints of a turn, one line each, the chosen one marked `>`.
pub fn checkpoint_lines(pick: &CheckpointPick) -> Vec<String> {
    pick.checkpoints
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mark = if i == pick.cursor { ">" } else { " " };
            format!(
                "{mark} {}  {}  {}",
                c.checkpoint_id.get(..12).unwrap_or(&c.checkpoint_id),
                clock(&c.created_at),
                checkpoint_words(c)
            )
        })
        .collect()
}

/// Two sessions' results: where they differ, what each changed since the fork point, and
/// the diff from the first one's result to the second's.
pub fn compare_lines(c: &Comparison) -> Vec<String> {
    let counts = |changes: &[turnback::NumStat]| -> Vec<String> {
        changes
            .iter()
            .map(|n| {
                let count = match (n.added, n.deleted) {
                    (Some(a), Some(d)) => format!("+{a} -{d}"),
                    _ => "binary".into(),
                };
                format!("  {count:>10}  {}", quote_name(n.path_bytes()))
            })
            .collect()
    };
    let mut lines = vec![format!("fork point: turn {} {}", c.fork_point.turn, escape_controls(&c.fork_point.preview))];
    lines.push(format!("differ in {} file(s), from A's result to B's:", c.differences.len()));
    lines.extend(counts(&c.differences));
    for (label, side) in [("A", &c.a), ("B", &c.b)] {
        lines.push(format!(
            "{label} {} (turn {} {}) changed since the fork point:",
            quote_name(side.session_id.as_bytes()),
            side.turn,
            escape_controls(&side.preview)
        ));
        lines.extend(counts(&side.changes));
    }
    if let Some(patch) = &c.patch {
        lines.push("diff from A's result to B's:".into());
        lines.extend(patch.lines().map(|l| escape_controls(l).into_owned()));
    }
    lines
}
