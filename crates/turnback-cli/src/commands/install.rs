//! `turnback install claude-code`: merging turnback's hooks into Claude Code's settings.
//!
//! Invariants: installing keeps every other setting and hook, rewrites the file only if it
//! changes, and uninstalling removes exactly turnback's hooks.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use turnback::{Error, ErrorCode, Result};

use crate::app::{Ctx, cwd};
use crate::cli::{HookAgent, Scope};
use crate::output::Outcome;

/// The events turnback hooks, with their tool matcher.
const EVENTS: [(&str, Option<&str>); 9] = [
    ("SessionStart", None),
    ("UserPromptSubmit", None),
    ("PreToolUse", Some("Write|Edit|MultiEdit|NotebookEdit|Bash")),
    ("PostToolUse", Some("Write|Edit|MultiEdit|NotebookEdit|Bash")),
    ("PostToolUseFailure", Some("Write|Edit|MultiEdit|NotebookEdit|Bash")),
    ("Stop", None),
    ("SubagentStart", None),
    ("SubagentStop", None),
    ("SessionEnd", None),
];

/// What `install` did.
#[derive(Debug, serde::Serialize)]
struct Installed {
    /// The settings file.
    settings: PathBuf,
    /// Whether it was rewritten.
    changed: bool,
    /// Whether turnback's hooks are in it now.
    installed: bool,
    /// The command the hooks run.
    command: String,
}

/// Merges turnback's hooks into (or, with `uninstall`, out of) Claude Code's settings.
pub fn run(ctx: &Ctx, agent: HookAgent, scope: Scope, uninstall: bool) -> Result<Outcome> {
    let HookAgent::ClaudeCode = agent;
    let file = match scope {
        Scope::Project => {
            let root = match &ctx.global.workspace {
                Some(d) => d.clone(),
                None => cwd()?,
            };
            root.join(".claude").join("settings.json")
        }
        Scope::User => {
            let home = std::env::var_os("HOME").ok_or_else(|| Error::invalid("HOME is not set"))?;
            PathBuf::from(home).join(".claude").join("settings.json")
        }
    };
    let before = match std::fs::read_to_string(&file) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::new(ErrorCode::Io, format!("{}: {e}", file.display()))),
    };
    let mut settings: Value = match &before {
        Some(text) if !text.trim().is_empty() => serde_json::from_str(text)
            .map_err(|e| Error::invalid(format!("{}: not JSON ({e}); nothing was changed", file.display())))?,
        _ => json!({}),
    };
    if !settings.is_object() {
        return Err(Error::invalid(format!("{}: not a JSON object; nothing was changed", file.display())));
    }
    let command = hook_command()?;
    remove_ours(&mut settings);
    if !uninstall {
        add_ours(&mut settings, &command);
    }
    let mut after = serde_json::to_string_pretty(&settings).map_err(|e| Error::invalid(e.to_string()))?;
    after.push('\n');
    let changed = before.as_deref() != Some(after.as_str()) && !(before.is_none() && uninstall);
    if changed {
        write_atomically(&file, after.as_bytes())?;
    }
    let what = match (uninstall, changed) {
        (false, true) => format!("installed turnback's Claude Code hooks in {}", file.display()),
        (false, false) => format!("turnback's Claude Code hooks are already in {}", file.display()),
        (true, true) => format!("removed turnback's Claude Code hooks from {}", file.display()),
        (true, false) => format!("no turnback hooks in {}", file.display()),
    };
    Ok(Outcome::of(&Installed { settings: file, changed, installed: !uninstall, command }, what))
}

/// How Claude Code runs the hook: `turnback` when that name on PATH is this very binary
/// (so an upgrade that moves the binary keeps working), else this binary's absolute path.
fn hook_command() -> Result<String> {
    let exe = std::env::current_exe().map_err(|e| Error::new(ErrorCode::Io, format!("own executable: {e}")))?;
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("turnback")).find(|c| c.is_file()))
        .unwrap_or_default()
        .and_then(|c| std::fs::canonicalize(c).ok());
    if on_path.is_some() && on_path == std::fs::canonicalize(&exe).ok() {
        return Ok("turnback hook claude-code".to_string());
    }
    let exe = exe.to_string_lossy();
    let quoted = if exe.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c)) {
        exe.into_owned()
    } else {
        format!("'{}'", exe.replace('\'', r"'\''"))
    };
    Ok(format!("{quoted} hook claude-code"))
}

fn is_ours(hook: &Value) -> bool {
    hook.get("command")
        .and_then(Value::as_str)
        .is_some_and(|c| c.ends_with(" hook claude-code") && c.contains("turnback"))
}

/// Removes every hook entry that runs turnback, and the groups and events left empty.
fn remove_ours(settings: &mut Value) {
    let Some(hooks) = settings.get_mut("hooks").and_then(Value::as_object_mut) else { return };
    for groups in hooks.values_mut() {
        if let Some(groups) = groups.as_array_mut() {
            for group in groups.iter_mut() {
                if let Some(list) = group.get_mut("hooks").and_then(Value::as_array_mut) {
                    list.retain(|h| !is_ours(h));
                }
            }
            groups.retain(|g| g.get("hooks").and_then(Value::as_array).is_none_or(|l| !l.is_empty()));
        }
    }
    hooks.retain(|_, groups| groups.as_array().is_none_or(|g| !g.is_empty()));
    if hooks.is_empty() {
        settings.as_object_mut().expect("checked object").remove("hooks");
    }
}

fn add_ours(settings: &mut Value, command: &str) {
    let root = settings.as_object_mut().expect("checked object");
    let hooks = root.entry("hooks").or_insert_with(|| Value::Object(Map::new()));
    if !hooks.is_object() {
        *hooks = Value::Object(Map::new());
    }
    let hooks = hooks.as_object_mut().expect("object");
    for (event, matcher) in EVENTS {
        let mut group = json!({ "hooks": [{ "type": "command", "command": command, "timeout": 30 }] });
        if let Some(m) = matcher {
            group["matcher"] = json!(m);
        }
        let groups = hooks.entry(event).or_insert_with(|| json!([]));
        if let Some(groups) = groups.as_array_mut() {
            groups.push(group);
        }
    }
}

fn write_atomically(file: &Path, bytes: &[u8]) -> Result<()> {
    // A settings file that is a symlink (dotfiles managers) is written where it points,
    // never replaced by a regular file.
    let file = &std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let io = |e: std::io::Error| Error::new(ErrorCode::Io, format!("{}: {e}", file.display()));
    let dir = file.parent().ok_or_else(|| Error::invalid("settings file has no directory"))?;
    std::fs::create_dir_all(dir).map_err(io)?;
    let temp = dir.join(format!(".settings.json.turnback-{}", std::process::id()));
    let mut f = std::fs::File::create(&temp).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    if let Ok(meta) = std::fs::metadata(file) {
        let _ = std::fs::set_permissions(&temp, meta.permissions());
    }
    std::fs::rename(&temp, file).map_err(io)
}
