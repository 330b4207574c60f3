//! Codex CLI: hooks in `.codex/hooks.json` (project) or `$CODEX_HOME/hooks.json` (user,
//! default `~/.codex`), and the hooks feature turned on in the `config.toml` beside it, per
//! the official hooks reference (developers.openai.com/codex/hooks).
//!
//! The feature: `hooks = true` under `[features]` — the current key (hooks are on by
//! default since 0.124; the older `codex_hooks` still works but makes every run print a
//! deprecation warning) — written with a comment that marks it as turnback's, so
//! uninstalling removes it only if turnback added it (also the `codex_hooks` of an install
//! by an older turnback).

use std::path::PathBuf;

use serde_json::json;
use toml_edit::{DocumentMut, Item, Table, value};
use turnback::{Error, Result};

use super::{Change, Places, Plan, json_hooks};
use crate::cli::{HookAgent, Scope};

/// Codex's file tool and shell tools as hooks see them, and MCP tools.
const TOOLS: &str = "^(apply_patch|Bash)$|^mcp__";

const EVENTS: [(&str, Option<&str>); 10] = [
    ("SessionStart", None),
    ("UserPromptSubmit", None),
    ("PreToolUse", Some(TOOLS)),
    ("PostToolUse", Some(TOOLS)),
    ("Stop", None),
    ("Interrupt", None),
    ("SessionEnd", None),
    ("SubagentStart", None),
    ("SubagentStop", None),
    ("PreCompact", None),
];

/// The comment that marks the feature flag as turnback's.
const MARK: &str = " # turned on by turnback install codex";

pub fn plan(places: &Places, command: &str, uninstall: bool) -> Result<Plan> {
    let dir = dir(places);
    let hooks = dir.join("hooks.json");
    let handler = json!({ "type": "command", "command": command, "timeout": 30 });
    let hooks = json_hooks::change(hooks, HookAgent::Codex, &EVENTS, handler, uninstall);
    let config = dir.join("config.toml");
    let config_what = config.display().to_string();
    let edit_config = move |text: Option<&str>| feature(text, &config_what, uninstall);
    let mut notes = Vec::new();
    if !uninstall {
        notes.push("Codex before 0.124 needs hooks turned on: turnback sets `hooks = true` under [features] unless config.toml sets it, or writes [features] as an inline table (then add it there yourself)".to_string());
        notes.push(format!(
            "Codex runs a new hook only once you trust it, and skips an untrusted one without a word: start Codex here, type /hooks, and trust each of turnback's {} hooks (again after any reinstall that changes them); `turnback doctor` says whether Codex has them as trusted. For automation that vets its hooks, `codex --dangerously-bypass-hook-trust` runs them untrusted",
            EVENTS.len()
        ));
        if places.scope == Scope::Project {
            notes.push("Codex reads a project's .codex/ only when it trusts the project".to_string());
        }
    }
    Ok(Plan { changes: vec![hooks, Change { file: config, edit: Box::new(edit_config) }], notes })
}

/// Where the person's `config.toml` turns Codex's hooks off (`[features] hooks = false` or
/// `codex_hooks = false`).
pub fn turned_off(places: &Places) -> Vec<String> {
    let file = dir(places).join("config.toml");
    let Ok(Some(text)) = super::read(&file) else { return Vec::new() };
    let Ok(doc) = text.parse::<DocumentMut>() else { return Vec::new() };
    let features = doc.get("features").and_then(Item::as_table_like);
    let off =
        ["hooks", "codex_hooks"].iter().any(|k| features.and_then(|f| f.get(k)).and_then(Item::as_bool) == Some(false));
    off.then(|| format!("{} sets hooks = false under [features]", file.display())).into_iter().collect()
}

/// Codex's own record of which of turnback's hooks in the scope's `hooks.json` the person
/// trusted: `(trusted, all)` of turnback's handlers there, `None` when there are none.
///
/// Codex runs a hook only once trusted, and skips an untrusted one silently. It keeps the
/// trust in the person's `config.toml` (`$CODEX_HOME`, default `~/.codex`), as
/// `[hooks.state."<hooks.json>:<event>:<group>:<handler>"] trusted_hash = "sha256:…"`, the
/// event in snake case and both indexes from 0 (as its app-server's `hooks/list` names the
/// hooks). A recorded hash is taken as trust; Codex asks again when the hook changed since,
/// which this cannot tell.
pub fn trusted(places: &Places) -> Option<(usize, usize)> {
    let hooks_file = dir(places).join("hooks.json");
    let hooks: serde_json::Value = serde_json::from_str(&super::read(&hooks_file).ok()??).ok()?;
    let user = Places { scope: Scope::User, ..places.clone() };
    let config = super::read(&dir(&user).join("config.toml")).ok().flatten().unwrap_or_default();
    let doc: DocumentMut = config.parse().unwrap_or_default();
    let state = doc.get("hooks").and_then(|h| h.get("state")).and_then(Item::as_table_like);
    let (mut trusted, mut all) = (0, 0);
    for (event, groups) in hooks.get("hooks")?.as_object()? {
        let groups = groups.as_array().map(Vec::as_slice).unwrap_or_default();
        for (g, h, handler) in super::json_hooks::handlers(groups) {
            if super::json_hooks::ours(handler, HookAgent::Codex).is_none() {
                continue;
            }
            all += 1;
            let key = format!("{}:{}:{g}:{h}", hooks_file.display(), snake(event));
            let hash = state.and_then(|s| s.get(&key)).and_then(|e| e.get("trusted_hash")).and_then(Item::as_str);
            trusted += usize::from(hash.is_some_and(|h| !h.is_empty()));
        }
    }
    (all > 0).then_some((trusted, all))
}

/// `PreToolUse` → `pre_tool_use`.
fn snake(event: &str) -> String {
    let mut out = String::new();
    for (i, c) in event.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// The directory of Codex's configuration for the scope.
fn dir(places: &Places) -> PathBuf {
    match places.scope {
        Scope::Project => places.project.join(".codex"),
        Scope::User => std::env::var_os("CODEX_HOME").map(PathBuf::from).unwrap_or_else(|| places.home.join(".codex")),
    }
}

/// `config.toml` with the hooks feature on (unless it is set already), or, uninstalling,
/// without the setting turnback added. `None`: a file turnback created, left empty.
fn feature(text: Option<&str>, what: &str, uninstall: bool) -> Result<Option<String>> {
    let mut doc: DocumentMut = text
        .unwrap_or("")
        .parse()
        .map_err(|e| Error::invalid(format!("{what}: not TOML ({e}); nothing was changed")))?;
    let features = doc.get("features").and_then(Item::as_table_like);
    let set = |k: &str| features.is_some_and(|f| f.get(k).is_some());
    let ours = |k: &str| {
        features
            .and_then(|f| f.get(k))
            .and_then(Item::as_value)
            .is_some_and(|v| v.decor().suffix().and_then(|s| s.as_str()).is_some_and(|s| s.contains("turnback")))
    };
    let ours: Vec<&str> = ["hooks", "codex_hooks"].into_iter().filter(|k| ours(k)).collect();
    if uninstall {
        if ours.is_empty() {
            return Ok(text.map(str::to_string));
        }
        let table = doc["features"].as_table_like_mut().expect("features is a table");
        for key in ours {
            table.remove(key);
        }
        if table.is_empty() {
            doc.remove("features");
        } else if let Some(table) = doc["features"].as_table_mut().filter(|t| t.iter().all(|(_, v)| !v.is_value())) {
            // Only `[features.…]` tables are left: the `[features]` header turnback's key
            // needed goes with it (as it was before, implied by them).
            table.set_implicit(true);
        }
    } else {
        // Set by the person already, or an inline table (a comment cannot mark a key in one,
        // so turnback would not know to remove it): left as it is.
        let inline = doc.get("features").is_some_and(|f| f.as_inline_table().is_some());
        if set("codex_hooks") || set("hooks") || inline {
            return Ok(text.map(str::to_string));
        }
        if doc.get("features").is_none() {
            doc.insert("features", Item::Table(Table::new()));
        }
        let table = doc["features"]
            .as_table_mut()
            .ok_or_else(|| Error::invalid(format!("{what}: features is not a table; nothing was changed")))?;
        let mut on = value(true);
        if let Some(v) = on.as_value_mut() {
            v.decor_mut().set_suffix(MARK);
        }
        table.insert("hooks", on);
    }
    let out = doc.to_string();
    Ok(if out.trim().is_empty() { None } else { Some(out) })
}

#[cfg(test)]
mod tests {
    use super::feature;

    #[test]
    fn the_feature_is_added_marked_kept_when_set_and_removed_only_when_ours() {
        let mine = "model = \"gpt-5-codex\"\n\n[features]\nweb_search = true\n";
        let on = feature(Some(mine), "c", false).unwrap().unwrap();
        assert!(on.contains("\nhooks = true # turned on by turnback"), "{on}");
        assert!(on.starts_with("model = \"gpt-5-codex\"\n\n[features]\nweb_search = true\n"), "{on}");
        assert_eq!(feature(Some(&on), "c", false).unwrap().as_deref(), Some(on.as_str()), "twice changes nothing");
        assert_eq!(feature(Some(&on), "c", true).unwrap().as_deref(), Some(mine), "uninstall gives the original back");
        // Set by the person: left alone both ways.
        let theirs = "[features]\nhooks = true\n";
        assert_eq!(feature(Some(theirs), "c", false).unwrap().as_deref(), Some(theirs));
        let theirs = "[features]\ncodex_hooks = true\n";
        assert_eq!(feature(Some(theirs), "c", true).unwrap().as_deref(), Some(theirs));
        // An inline table is left alone (a comment cannot mark a key in it).
        let inline = "model = \"o3\"\nfeatures = { web_search_request = true }\n";
        assert_eq!(feature(Some(inline), "c", false).unwrap().as_deref(), Some(inline));
        // A file turnback made goes when turnback's setting goes.
        let made = feature(None, "c", false).unwrap().unwrap();
        assert_eq!(feature(Some(&made), "c", true).unwrap(), None);
        assert!(feature(Some("not = [toml"), "c", false).is_err());
        // An older turnback's deprecated key goes at uninstall too.
        let old = "[features]\ncodex_hooks = true # turned on by turnback install codex\n";
        assert_eq!(feature(Some(old), "c", true).unwrap(), None);
    }

    #[test]
    fn uninstall_takes_out_the_features_header_turnbacks_key_needed() {
        // `[features]` implied by its sub-tables alone: installing writes the header for
        // turnback's key, uninstalling leaves it implied again.
        let implied = "model = \"o3\"\n\n[features.x]\ny = 1\n";
        let on = feature(Some(implied), "c", false).unwrap().unwrap();
        assert!(on.contains("[features]\nhooks = true"), "{on}");
        assert_eq!(feature(Some(&on), "c", true).unwrap().as_deref(), Some(implied));
    }
}
