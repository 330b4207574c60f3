//! Cursor: hooks in `.cursor/hooks.json` (project) or `~/.cursor/hooks.json` (user):
//! `{"version": 1, "hooks": {"event": [{"command", "matcher"?}]}}`, per Cursor's hooks
//! reference (cursor.com/docs/reference/hooks).

use serde_json::{Map, Value, json};
use turnback::Result;

use super::own_command::{self, OwnCommand};
use super::{Change, Places, Plan, json_hooks};
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

/// `hooks.json` with turnback's handler on each of `EVENTS` once, or, with `uninstall`,
/// without turnback's handlers; `None`: a file left with nothing in it, which goes.
///
/// Handlers sit straight in each event's list (the matcher on the handler), so turnback's
/// handler stays where it is, is brought up to date or left as the person wrote it, just
/// as in the shape `json_hooks` edits. `version: 1` is written only into a file turnback
/// makes (a file of the person's that has none reads the same without it), and taken out
/// with the last of turnback's handlers when nothing else is left.
fn edit(text: Option<&str>, what: &str, command: &str, uninstall: bool) -> Result<Option<String>> {
    let mut config = json_hooks::parse(text, what)?;
    let before = config.clone();
    let root = config.as_object_mut().expect("an object");
    if uninstall {
        if let Some(hooks) = root.get_mut("hooks").and_then(Value::as_object_mut) {
            let was_empty = hooks.is_empty();
            let events: Vec<String> = hooks.keys().cloned().collect();
            for event in events {
                take_out(hooks, &event, |_| true);
            }
            if hooks.is_empty() && !was_empty {
                root.shift_remove("hooks");
                // The version turnback wrote with its hooks, when nothing else is left.
                if root.len() == 1 && root.get("version") == Some(&json!(1)) {
                    root.shift_remove("version");
                }
            }
        }
    } else {
        if root.is_empty() {
            root.insert("version".into(), json!(1));
        }
        let hooks = root.entry("hooks").or_insert_with(|| Value::Object(Map::new()));
        let hooks = hooks.as_object_mut().expect("checked: an object");
        // Events turnback no longer hooks lose the handlers an older turnback wrote there.
        let others: Vec<String> = hooks.keys().filter(|k| !EVENTS.iter().any(|(e, _)| e == k)).cloned().collect();
        for event in others {
            take_out(hooks, &event, |c| c.as_written);
        }
        for (event, matcher) in EVENTS {
            let mut handler = json!({ "command": command, "timeout": 30 });
            if let Some(m) = matcher {
                handler["matcher"] = json!(m);
            }
            let list = hooks.entry(event).or_insert_with(|| json!([]));
            place(list.as_array_mut().expect("checked: a list"), &handler);
        }
    }
    Ok(json_hooks::rendered(&config, &before, text))
}

/// Leaves one of turnback's handlers in an event's `list`: the one that stays (see
/// [`own_command::stays`]), brought up to date from `handler` when written as turnback
/// writes it, without the other copies written so; or `handler`, added after the others.
fn place(list: &mut Vec<Value>, handler: &Value) {
    let found: Vec<OwnCommand> = list.iter().filter_map(ours).collect();
    let Some(stays) = own_command::stays(&found) else {
        list.push(handler.clone());
        return;
    };
    // turnback's other copies as written go; the person's forms stay.
    let mut n = 0;
    list.retain(|h| {
        let Some(own) = ours(h) else { return true };
        n += 1;
        !(own.as_written && n != stays + 1)
    });
    if !found[stays].as_written {
        return;
    }
    // The one that stays is now turnback's only handler as written.
    if let Some(h) = list.iter_mut().find(|h| ours(h).is_some_and(|c| c.as_written)) {
        json_hooks::refresh(h, handler);
        if handler.get("matcher").is_none() {
            h.as_object_mut().expect("a handler with a command is an object").shift_remove("matcher");
        }
    }
}

/// Takes out of `hooks[event]` turnback's handlers that `which` picks, and the event if
/// only they filled it.
fn take_out(hooks: &mut Map<String, Value>, event: &str, which: impl Fn(OwnCommand) -> bool) {
    let Some(list) = hooks.get_mut(event).and_then(Value::as_array_mut) else { return };
    let before = list.len();
    list.retain(|h| !ours(h).is_some_and(&which));
    if before > 0 && list.is_empty() {
        hooks.shift_remove(event);
    }
}

/// The handler's command, if it is turnback's Cursor hook.
fn ours(handler: &Value) -> Option<OwnCommand> {
    json_hooks::ours(handler, HookAgent::Cursor)
}
