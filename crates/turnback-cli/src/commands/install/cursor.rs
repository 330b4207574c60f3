//! Cursor: hooks in `.cursor/hooks.json` (project) or `~/.cursor/hooks.json` (user):
//! `{"version": 1, "hooks": {"event": [{"command", "matcher"?}]}}`, per Cursor's hooks
//! reference (cursor.com/docs/reference/hooks).

use serde_json::{Map, Value, json};
use turnback::{Error, Result};

use super::{Change, Places, Plan, is_our_command, json_hooks};
use crate::cli::HookAgent;

/// The file tools turnback stages (Cursor calls every edit `Write`).
const FILE_TOOLS: &str = "Write|Delete|Edit|StrReplace|MultiEdit";

const EVENTS: [(&str, Option<&str>); 11] = [
    ("sessionStart", None),
    ("beforeSubmitPrompt", None),
    ("preToolUse", Some(FILE_TOOLS)),
    ("postToolUse", Some(FILE_TOOLS)),
    ("postToolUseFailure", Some(FILE_TOOLS)),
    ("afterShellExecution", None),
    ("afterAgentResponse", None),
    ("subagentStart", None),
    ("subagentStop", None),
    ("stop", None),
    ("sessionEnd", None),
];

pub fn plan(places: &Places, command: &str, uninstall: bool) -> Result<Plan> {
    let file = places.dir(".cursor").join("hooks.json");
    let what = file.display().to_string();
    let command = command.to_string();
    let edit = move |text: Option<&str>| edit(text, &what, &command, uninstall);
    let notes =
        vec!["Cursor runs project hooks only in a trusted workspace; start a new chat for them to apply".to_string()];
    Ok(Plan { changes: vec![Change { file, edit: Box::new(edit) }], notes: if uninstall { Vec::new() } else { notes } })
}

fn edit(text: Option<&str>, what: &str, command: &str, uninstall: bool) -> Result<Option<String>> {
    let mut config = json_hooks::parse(text, what)?;
    let root = config.as_object_mut().expect("an object");
    if let Some(hooks) = root.get_mut("hooks") {
        let hooks = hooks.as_object_mut().ok_or_else(|| Error::invalid(format!("{what}: hooks is not an object")))?;
        // Only what turnback's handlers alone filled goes (what the person left empty stays).
        let was_empty = hooks.is_empty();
        let mut emptied = Vec::new();
        for (event, handlers) in hooks.iter_mut() {
            if let Some(list) = handlers.as_array_mut() {
                let before = list.len();
                list.retain(|h| {
                    !h.get("command").and_then(Value::as_str).is_some_and(|c| is_our_command(c, HookAgent::Cursor))
                });
                if before > 0 && list.is_empty() {
                    emptied.push(event.clone());
                }
            }
        }
        for event in emptied {
            hooks.remove(&event);
        }
        if hooks.is_empty() && !was_empty {
            root.remove("hooks");
        }
    }
    if !uninstall {
        root.entry("version").or_insert(json!(1));
        let hooks = root.entry("hooks").or_insert_with(|| Value::Object(Map::new()));
        let hooks = hooks.as_object_mut().ok_or_else(|| Error::invalid(format!("{what}: hooks is not an object")))?;
        for (event, matcher) in EVENTS {
            let mut handler = json!({ "command": command, "timeout": 30 });
            if let Some(m) = matcher {
                handler["matcher"] = json!(m);
            }
            let list = hooks.entry(event).or_insert_with(|| json!([]));
            if let Some(list) = list.as_array_mut() {
                list.push(handler);
            }
        }
    } else if root.len() == 1 && root.get("version") == Some(&json!(1)) {
        // Only the version turnback wrote is left.
        root.remove("version");
    }
    Ok(json_hooks::render(&config, text))
}
