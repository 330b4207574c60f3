//! Hooks in the shape Claude Code, Codex and Gemini CLI share: a JSON object whose
//! `hooks` maps an event name to groups `{matcher?, hooks: [{type: "command", command,
//! …}]}`. Merging adds one group per event for turnback; removing takes out every handler
//! whose command is turnback's, then the groups and events left empty.

use std::path::PathBuf;

use serde_json::{Map, Value, json};
use turnback::{Error, Result};

use super::{Change, is_our_command};
use crate::cli::HookAgent;

/// The change to `file` that hooks `handler` for `agent` on `events` (or, with
/// `uninstall`, takes turnback's handlers out).
pub fn change(
    file: PathBuf,
    agent: HookAgent,
    events: &'static [(&'static str, Option<&'static str>)],
    handler: Value,
    uninstall: bool,
) -> Change {
    let what = file.display().to_string();
    let edit = move |text: Option<&str>| {
        let ours = |c: &str| is_our_command(c, agent);
        edit(text, &what, events, &handler, &ours, uninstall)
    };
    Change { file, edit: Box::new(edit) }
}

/// The settings `text` (none: no file yet) with turnback's `handler` hooked on `events`
/// (each with its matcher), or, with `uninstall`, without turnback's handlers. `None`: a
/// file left with nothing in it, which goes.
///
/// # Errors
/// `invalid-argument` if the text is not a JSON object (nothing is written then).
pub fn edit(
    text: Option<&str>,
    what: &str,
    events: &[(&str, Option<&str>)],
    handler: &Value,
    ours: &dyn Fn(&str) -> bool,
    uninstall: bool,
) -> Result<Option<String>> {
    let mut settings = parse(text, what)?;
    // A shape turnback does not know is the person's to fix: nothing is rewritten around it.
    if let Some(hooks) = settings.get("hooks") {
        let hooks = hooks
            .as_object()
            .ok_or_else(|| Error::invalid(format!("{what}: hooks is not an object; nothing was changed")))?;
        if let Some((event, _)) = hooks.iter().find(|(_, v)| !v.is_array()) {
            return Err(Error::invalid(format!("{what}: hooks.{event} is not a list; nothing was changed")));
        }
    }
    remove(&mut settings, ours);
    if !uninstall {
        add(&mut settings, events, handler);
    }
    Ok(render(&settings, text))
}

/// The JSON object in `text` (an empty object for no file or an empty one).
pub fn parse(text: Option<&str>, what: &str) -> Result<Value> {
    let settings: Value = match text {
        Some(text) if !text.trim().is_empty() => serde_json::from_str(text)
            .map_err(|e| Error::invalid(format!("{what}: not JSON ({e}); nothing was changed")))?,
        _ => json!({}),
    };
    if !settings.is_object() {
        return Err(Error::invalid(format!("{what}: not a JSON object; nothing was changed")));
    }
    Ok(settings)
}

/// The file's new text, written as `before` was (its indentation, and whether it ends
/// with a newline; two spaces and a newline for a new file): `None` when nothing is left
/// in it (the file goes).
pub fn render(settings: &Value, before: Option<&str>) -> Option<String> {
    use serde::Serialize;
    if settings.as_object().is_some_and(Map::is_empty) {
        return None;
    }
    let indent = before
        .and_then(|b| b.lines().skip(1).map(|l| &l[..l.len() - l.trim_start().len()]).find(|w| !w.is_empty()))
        .unwrap_or("  ");
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    settings.serialize(&mut serializer).expect("JSON values serialize");
    let mut after = String::from_utf8(out).expect("JSON is UTF-8");
    if before.is_none_or(|b| b.ends_with('\n')) {
        after.push('\n');
    }
    Some(after)
}

/// Takes out turnback's handlers, and the groups, events and `hooks` object that only they
/// filled (what the person left empty stays empty).
fn remove(settings: &mut Value, ours: &dyn Fn(&str) -> bool) {
    let Some(hooks) = settings.get_mut("hooks").and_then(Value::as_object_mut) else { return };
    let was_empty = hooks.is_empty();
    let mut emptied_events = Vec::new();
    for (event, groups) in hooks.iter_mut() {
        let Some(groups) = groups.as_array_mut() else { continue };
        let had = groups.len();
        groups.retain_mut(|group| {
            let Some(list) = group.get_mut("hooks").and_then(Value::as_array_mut) else { return true };
            let before = list.len();
            list.retain(|h| !h.get("command").and_then(Value::as_str).is_some_and(ours));
            !(list.is_empty() && before > 0)
        });
        if had > 0 && groups.is_empty() {
            emptied_events.push(event.clone());
        }
    }
    for event in emptied_events {
        hooks.remove(&event);
    }
    if hooks.is_empty() && !was_empty {
        settings.as_object_mut().expect("an object").remove("hooks");
    }
}

fn add(settings: &mut Value, events: &[(&str, Option<&str>)], handler: &Value) {
    let root = settings.as_object_mut().expect("an object");
    let hooks = root.entry("hooks").or_insert_with(|| Value::Object(Map::new()));
    let hooks = hooks.as_object_mut().expect("checked: an object");
    for (event, matcher) in events {
        let mut group = json!({ "hooks": [handler] });
        if let Some(m) = matcher {
            group["matcher"] = json!(m);
        }
        let groups = hooks.entry(*event).or_insert_with(|| json!([]));
        if let Some(groups) = groups.as_array_mut() {
            groups.push(group);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::edit;

    #[test]
    fn a_file_comes_back_as_it_was_written_indentation_and_last_newline_included() {
        let ours = |c: &str| c.ends_with(" hook x");
        let handler = json!({ "type": "command", "command": "turnback hook x" });
        for original in [
            "{\n    \"model\": \"opus\",\n    \"hooks\": {\n        \"Stop\": [\n            {\n                \"hooks\": []\n            }\n        ],\n        \"Notification\": [\n            {\n                \"hooks\": [\n                    {\n                        \"type\": \"command\",\n                        \"command\": \"notify-send\"\n                    }\n                ]\n            }\n        ]\n    }\n}",
            "{\n\t\"model\": \"opus\"\n}\n",
            "{\n  \"model\": \"opus\"\n}\n",
        ] {
            let installed = edit(Some(original), "f", &[("Stop", None)], &handler, &ours, false).unwrap().unwrap();
            let indent = &original[2..original[2..].find('"').unwrap() + 2];
            assert!(installed.contains(&format!("\n{indent}\"hooks\"")), "{installed}");
            let removed = edit(Some(&installed), "f", &[("Stop", None)], &handler, &ours, true).unwrap();
            assert_eq!(
                removed.as_deref(),
                Some(original),
                "uninstall gives the file back, what the person left empty too"
            );
        }
    }
}
