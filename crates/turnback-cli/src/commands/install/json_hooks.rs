//! Hooks in the shape Claude Code, Codex and Gemini CLI share: a JSON object whose
//! `hooks` maps an event name to groups `{matcher?, hooks: [{type: "command", command,
//! …}]}`.
//!
//! Installing leaves one turnback handler on each event turnback hooks: one already there
//! stays where it is (brought up to date when written as turnback writes it, left as it is
//! when in the person's form; see `own_command`), copies of it as turnback writes it go,
//! and an event without one gets a group of its own after the person's. Uninstalling takes
//! out every handler that is turnback's for the agent, in any form, then the groups, events
//! and `hooks` object that only they filled: what the person left empty stays empty, and
//! what turnback added goes with its last handler (a key the person had left empty and
//! turnback then filled cannot be told from one turnback made: it goes too, which the agent
//! reads alike). Keys are taken out without moving the others.

use std::path::PathBuf;

use serde_json::{Map, Value, json};
use turnback::{Error, Result};

use super::Change;
use super::own_command::{self, OwnCommand};
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
    let edit = move |text: Option<&str>| edit(text, &what, events, &handler, agent, uninstall);
    Change { file, edit: Box::new(edit) }
}

/// The settings `text` (none: no file yet) with turnback's `handler` hooked on `events`
/// (each with its matcher), or, with `uninstall`, without turnback's handlers for `agent`.
/// `None`: a file left with nothing in it, which goes.
///
/// # Errors
/// `invalid-argument` if the text is not a JSON object (nothing is written then).
pub fn edit(
    text: Option<&str>,
    what: &str,
    events: &[(&str, Option<&str>)],
    handler: &Value,
    agent: HookAgent,
    uninstall: bool,
) -> Result<Option<String>> {
    let mut settings = parse(text, what)?;
    let before = settings.clone();
    if uninstall {
        remove(&mut settings, agent);
    } else {
        add(&mut settings, agent, events, handler);
    }
    Ok(rendered(&settings, &before, text))
}

/// The JSON object in `text` (an empty object for no file or an empty one), whose `hooks`,
/// if any, maps events to lists.
///
/// # Errors
/// `invalid-argument` for anything else (not JSON, not an object, `hooks` of another shape).
pub fn parse(text: Option<&str>, what: &str) -> Result<Value> {
    let settings: Value = match text {
        Some(text) if !text.trim().is_empty() => serde_json::from_str(text)
            .map_err(|e| Error::invalid(format!("{what}: not JSON ({e}); nothing was changed")))?,
        _ => json!({}),
    };
    if !settings.is_object() {
        return Err(Error::invalid(format!("{what}: not a JSON object; nothing was changed")));
    }
    // A shape turnback does not know is the person's to fix: nothing is rewritten around it.
    if let Some(hooks) = settings.get("hooks") {
        let hooks = hooks
            .as_object()
            .ok_or_else(|| Error::invalid(format!("{what}: hooks is not an object; nothing was changed")))?;
        if let Some((event, _)) = hooks.iter().find(|(_, v)| !v.is_array()) {
            return Err(Error::invalid(format!("{what}: hooks.{event} is not a list; nothing was changed")));
        }
    }
    Ok(settings)
}

/// The file's text after an edit that left `settings` from `parsed`, read from `text`: the
/// text as it was when nothing changed (never rewritten in turnback's style, never removed
/// for being empty), else [`render`]ed.
pub fn rendered(settings: &Value, parsed: &Value, text: Option<&str>) -> Option<String> {
    if settings == parsed {
        return text.map(str::to_string);
    }
    render(settings, text)
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

/// Takes out turnback's handlers for `agent`, and the groups, events and `hooks` object
/// that only they filled (what the person left empty stays empty).
fn remove(settings: &mut Value, agent: HookAgent) {
    let Some(hooks) = settings.get_mut("hooks").and_then(Value::as_object_mut) else { return };
    let was_empty = hooks.is_empty();
    let events: Vec<String> = hooks.keys().cloned().collect();
    for event in events {
        take_out(hooks, &event, agent, |_| true);
    }
    if hooks.is_empty() && !was_empty {
        settings.as_object_mut().expect("an object").shift_remove("hooks");
    }
}

/// Hooks `handler` on each of `events`, once (see the module's header).
fn add(settings: &mut Value, agent: HookAgent, events: &[(&str, Option<&str>)], handler: &Value) {
    let root = settings.as_object_mut().expect("an object");
    let hooks = root.entry("hooks").or_insert_with(|| Value::Object(Map::new()));
    let hooks = hooks.as_object_mut().expect("checked: an object");
    // Events turnback no longer hooks lose the handlers an older turnback wrote there.
    let others: Vec<String> = hooks.keys().filter(|k| !events.iter().any(|(e, _)| e == k)).cloned().collect();
    for event in others {
        take_out(hooks, &event, agent, |c| c.as_written);
    }
    for (event, matcher) in events {
        let mut group = json!({ "hooks": [handler] });
        if let Some(m) = matcher {
            group["matcher"] = json!(m);
        }
        let groups = hooks.entry(*event).or_insert_with(|| json!([]));
        place(groups.as_array_mut().expect("checked: a list"), agent, &group);
    }
}

/// Leaves one of turnback's handlers in `groups`, one event's: the one that stays (see
/// [`own_command::stays`]), brought up to date from `group` when written as turnback
/// writes it, without the other copies written so; or `group`, added after the others.
fn place(groups: &mut Vec<Value>, agent: HookAgent, group: &Value) {
    let found: Vec<OwnCommand> = handlers(groups).filter_map(|(_, _, h)| ours(h, agent)).collect();
    let Some(stays) = own_command::stays(&found) else {
        groups.push(group.clone());
        return;
    };
    // turnback's other copies as written go; the person's forms stay.
    let mut n = 0;
    drop_handlers(groups, |h| {
        let Some(own) = ours(h, agent) else { return false };
        n += 1;
        own.as_written && n != stays + 1
    });
    if !found[stays].as_written {
        return;
    }
    // The one that stays is now turnback's only handler as written.
    let as_written = |(_, _, h): &(usize, usize, &Value)| ours(h, agent).is_some_and(|c| c.as_written);
    let Some((g, h, _)) = handlers(groups).find(as_written) else { return };
    let alone = groups[g]["hooks"].as_array().is_some_and(|l| l.len() == 1);
    refresh(&mut groups[g]["hooks"][h], &group["hooks"][0]);
    if alone {
        let target = groups[g].as_object_mut().expect("a group with handlers is an object");
        match group.get("matcher") {
            Some(m) => {
                target.insert("matcher".into(), m.clone());
            }
            None => {
                target.shift_remove("matcher");
            }
        }
    }
}

/// Takes out of `hooks[event]` turnback's handlers for `agent` that `which` picks, the
/// groups only they filled, and the event if only they filled it.
fn take_out(hooks: &mut Map<String, Value>, event: &str, agent: HookAgent, which: impl Fn(OwnCommand) -> bool) {
    let Some(groups) = hooks.get_mut(event).and_then(Value::as_array_mut) else { return };
    let had = groups.len();
    drop_handlers(groups, |h| ours(h, agent).is_some_and(&which));
    if had > 0 && groups.is_empty() {
        hooks.shift_remove(event);
    }
}

/// Takes out of `groups` the handlers `drop` picks (asked in order), and the groups that
/// only they filled.
fn drop_handlers(groups: &mut Vec<Value>, mut drop: impl FnMut(&Value) -> bool) {
    groups.retain_mut(|group| {
        let Some(list) = group.get_mut("hooks").and_then(Value::as_array_mut) else { return true };
        let before = list.len();
        list.retain(|h| !drop(h));
        !(list.is_empty() && before > 0)
    });
}

/// Every handler in `groups`, with its group's and its own index.
pub(super) fn handlers(groups: &[Value]) -> impl Iterator<Item = (usize, usize, &Value)> {
    groups.iter().enumerate().flat_map(|(g, group)| {
        group.get("hooks").and_then(Value::as_array).into_iter().flatten().enumerate().map(move |(h, v)| (g, h, v))
    })
}

/// The handler's command, if it is turnback's for `agent`.
pub fn ours(handler: &Value, agent: HookAgent) -> Option<OwnCommand> {
    own_command::recognise(handler.get("command")?.as_str()?).filter(|c| c.agent == agent)
}

/// `handler` with what `fresh` sets (command, type, timeout…) set so; what else it holds
/// stays.
pub fn refresh(handler: &mut Value, fresh: &Value) {
    if let (Some(handler), Some(fresh)) = (handler.as_object_mut(), fresh.as_object()) {
        for (k, v) in fresh {
            handler.insert(k.clone(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::edit;
    use crate::cli::HookAgent::ClaudeCode;

    #[test]
    fn a_file_comes_back_as_it_was_written_indentation_and_last_newline_included() {
        let handler = json!({ "type": "command", "command": "turnback hook claude-code" });
        for original in [
            "{\n    \"model\": \"opus\",\n    \"hooks\": {\n        \"Stop\": [\n            {\n                \"hooks\": []\n            }\n        ],\n        \"Notification\": [\n            {\n                \"hooks\": [\n                    {\n                        \"type\": \"command\",\n                        \"command\": \"notify-send\"\n                    }\n                ]\n            }\n        ]\n    }\n}",
            "{\n\t\"model\": \"opus\"\n}\n",
            "{\n  \"model\": \"opus\"\n}\n",
        ] {
            let installed = edit(Some(original), "f", &[("Stop", None)], &handler, ClaudeCode, false).unwrap().unwrap();
            let indent = &original[2..original[2..].find('"').unwrap() + 2];
            assert!(installed.contains(&format!("\n{indent}\"hooks\"")), "{installed}");
            let removed = edit(Some(&installed), "f", &[("Stop", None)], &handler, ClaudeCode, true).unwrap();
            assert_eq!(
                removed.as_deref(),
                Some(original),
                "uninstall gives the file back, what the person left empty too"
            );
        }
    }
}
