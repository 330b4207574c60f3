//! Claude Code: hooks in `.claude/settings.json` (project) or `~/.claude/settings.json`
//! (user), per its hooks reference (code.claude.com/docs/en/hooks).

use serde_json::json;
use turnback::Result;

use super::{Change, Places, Plan, is_our_command, json_hooks};
use crate::cli::HookAgent;

/// The tools whose calls turnback hears of: file tools, shell tools, MCP tools.
const TOOLS: &str = "Write|Edit|MultiEdit|NotebookEdit|Bash|PowerShell|mcp__.*";

/// The events turnback hooks, with their tool matcher.
const EVENTS: [(&str, Option<&str>); 11] = [
    ("SessionStart", None),
    ("UserPromptSubmit", None),
    ("PreToolUse", Some(TOOLS)),
    ("PostToolUse", Some(TOOLS)),
    ("PostToolUseFailure", Some(TOOLS)),
    ("Stop", None),
    ("StopFailure", None),
    ("SubagentStart", None),
    ("SubagentStop", None),
    ("PreCompact", None),
    ("SessionEnd", None),
];

pub fn plan(places: &Places, command: &str, uninstall: bool) -> Result<Plan> {
    let file = places.dir(".claude").join("settings.json");
    let what = file.display().to_string();
    let handler = json!({ "type": "command", "command": command, "timeout": 30 });
    let edit = move |text: Option<&str>| {
        let ours = |c: &str| is_our_command(c, HookAgent::ClaudeCode);
        json_hooks::edit(text, &what, &EVENTS, &handler, &ours, uninstall)
    };
    Ok(Plan { changes: vec![Change { file, edit: Box::new(edit) }], notes: Vec::new() })
}
