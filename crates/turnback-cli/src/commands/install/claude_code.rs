//! Claude Code: hooks in `.claude/settings.json` (project) or `~/.claude/settings.json`
//! (user), per its hooks reference (code.claude.com/docs/en/hooks).

use serde_json::json;
use turnback::Result;

use super::{Places, Plan, json_hooks};
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
    let handler = json!({ "type": "command", "command": command, "timeout": 30 });
    let change = json_hooks::change(file, HookAgent::ClaudeCode, &EVENTS, handler, uninstall);
    Ok(Plan { changes: vec![change], notes: Vec::new() })
}

/// Whether Claude Code's settings turn every hook off (`disableAllHooks`).
pub fn turned_off(places: &Places) -> Vec<String> {
    let (path, settings) = super::json_settings(places, ".claude", "settings.json");
    let off = settings.and_then(|v| v.get("disableAllHooks")?.as_bool()) == Some(true);
    off.then(|| format!("{} sets disableAllHooks", path.display())).into_iter().collect()
}
