//! Hooks in the shape Claude Code, Codex and Gemini CLI share: a JSON object whose
//! `hooks` maps an event name to groups `{matcher?, hooks: [{type: "command", command,
//! …}]}`. Merging adds one group per event for turnback; removing takes out every handler
//! whose command is turnback's, then the groups and events left empty.

use serde_json::{Map, Value, json};
use turnback::{Error, Result};

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
    remove(&mut settings, ours);
    if !uninstall {
        add(&mut settings, events, handler);
    }
    Ok(render(&settings))
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

/// The file's new text: `None` when nothing is left in it (the file goes).
pub fn render(settings: &Value) -> Option<String> {
    if settings.as_object().is_some_and(Map::is_empty) {
        return None;
    }
    let mut after = serde_json::to_string_pretty(settings).expect("JSON values serialize");
    after.push('\n');
    Some(after)
}

fn remove(settings: &mut Value, ours: &dyn Fn(&str) -> bool) {
    let Some(hooks) = settings.get_mut("hooks").and_then(Value::as_object_mut) else { return };
    for groups in hooks.values_mut() {
        if let Some(groups) = groups.as_array_mut() {
            for group in groups.iter_mut() {
                if let Some(list) = group.get_mut("hooks").and_then(Value::as_array_mut) {
                    list.retain(|h| !h.get("command").and_then(Value::as_str).is_some_and(ours));
                }
            }
            groups.retain(|g| g.get("hooks").and_then(Value::as_array).is_none_or(|l| !l.is_empty()));
        }
    }
    hooks.retain(|_, groups| groups.as_array().is_none_or(|g| !g.is_empty()));
    if hooks.is_empty() {
        settings.as_object_mut().expect("an object").remove("hooks");
    }
}

fn add(settings: &mut Value, events: &[(&str, Option<&str>)], handler: &Value) {
    let root = settings.as_object_mut().expect("an object");
    let hooks = root.entry("hooks").or_insert_with(|| Value::Object(Map::new()));
    if !hooks.is_object() {
        *hooks = Value::Object(Map::new());
    }
    let hooks = hooks.as_object_mut().expect("an object");
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
