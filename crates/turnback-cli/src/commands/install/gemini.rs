//! Gemini CLI: hooks in `.gemini/settings.json` (project) or `~/.gemini/settings.json`
//! (user), per its hooks reference (docs/hooks/reference.md; timeouts in milliseconds).

use serde_json::json;
use turnback::Result;

use super::{Places, Plan, json_hooks};
use crate::cli::HookAgent;

/// The tools whose calls turnback hears of (matchers are unanchored regular expressions:
/// anchored here so that no other tool's name matches by containing one of these).
const TOOLS: &str = "^(write_file|replace|run_shell_command)$|^mcp_";

const EVENTS: [(&str, Option<&str>); 7] = [
    ("SessionStart", None),
    ("BeforeAgent", None),
    ("BeforeTool", Some(TOOLS)),
    ("AfterTool", Some(TOOLS)),
    ("AfterAgent", None),
    ("PreCompress", None),
    ("SessionEnd", None),
];

pub fn plan(places: &Places, command: &str, uninstall: bool) -> Result<Plan> {
    let file = places.dir(".gemini").join("settings.json");
    // Gemini CLI takes a hook's text on stderr with an exit status of 2 or more as "deny"
    // (hookRunner.ts): a turnback that cannot even start (moved, uninstalled) must not
    // block it, so its failure is silenced here too.
    let command = format!("{command} 2>/dev/null || true");
    let handler = json!({ "name": "turnback", "type": "command", "command": command, "timeout": 30000 });
    let change = json_hooks::change(file, HookAgent::Gemini, &EVENTS, handler, uninstall);
    let notes = vec![
        "Gemini CLI runs hooks only in folders it trusts: trust this one when it asks (or set GEMINI_CLI_TRUST_WORKSPACE=true)".to_string(),
        "Gemini CLI before 0.27 also needs \"tools\": {\"enableHooks\": true} in its settings".to_string(),
    ];
    Ok(Plan { changes: vec![change], notes: if uninstall { Vec::new() } else { notes } })
}

/// Whether Gemini CLI's settings turn hooks off (`hooksConfig.enabled`, or `hooks.enabled`
/// before v0.26, set to false).
pub fn turned_off(places: &Places) -> Vec<String> {
    let (path, settings) = super::json_settings(places, ".gemini", "settings.json");
    let off = |p: &str| settings.as_ref().and_then(|v| v.pointer(p)?.as_bool()) == Some(false);
    (off("/hooksConfig/enabled") || off("/hooks/enabled"))
        .then(|| format!("{} turns hooks off (hooksConfig.enabled = false)", path.display()))
        .into_iter()
        .collect()
}
