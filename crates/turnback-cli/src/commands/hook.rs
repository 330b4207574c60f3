//! `turnback hook claude-code` (one hook event from stdin) and `turnback install
//! claude-code` (merging those hooks into Claude Code's settings).
//!
//! Invariants: a hook never fails the agent — whatever goes wrong is appended to
//! `hooks.log` in the store and the exit code is 0, with nothing on stdout (Claude Code
//! adds a prompt hook's stdout to the conversation). Events arriving twice or out of order
//! are harmless: staging is keyed by the tool-use id, a commit without its stage and a
//! stop without a running turn do nothing. Installing keeps every other setting and hook,
//! rewrites the file only if it changes, and uninstalling removes exactly turnback's hooks.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use turnback::history::{self, NewEntry};
use turnback::mutation::{self, Context};
use turnback::turn::{self, BeginRequest};
use turnback::{Error, ErrorCode, Result};

use crate::app::Ctx;
use crate::cli::{HookAgent, Scope};
use crate::output::Outcome;

/// The file tools whose writes are checkpointed.
const FILE_TOOLS: [&str; 4] = ["Write", "Edit", "MultiEdit", "NotebookEdit"];
/// How long a prompt hook waits for the start snapshot before the turn goes on (late).
const PROMPT_WAIT: Duration = Duration::from_millis(1500);
/// The events turnback hooks, with their tool matcher.
const EVENTS: [(&str, Option<&str>); 6] = [
    ("SessionStart", None),
    ("UserPromptSubmit", None),
    ("PreToolUse", Some("Write|Edit|MultiEdit|NotebookEdit|Bash")),
    ("PostToolUse", Some("Write|Edit|MultiEdit|NotebookEdit|Bash")),
    ("PostToolUseFailure", Some("Write|Edit|MultiEdit|NotebookEdit")),
    ("Stop", None),
];

/// One Claude Code hook event (the documented input; unknown fields are ignored).
#[derive(Debug, Deserialize)]
struct Event {
    session_id: Option<String>,
    cwd: Option<PathBuf>,
    hook_event_name: String,
    tool_name: Option<String>,
    tool_input: Option<Value>,
    tool_use_id: Option<String>,
    prompt: Option<String>,
}

/// Handles one event; always exit 0, nothing on stdout.
pub fn run(ctx: &Ctx, agent: HookAgent) -> Outcome {
    let HookAgent::ClaudeCode = agent;
    let mut input = String::new();
    let result = std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| Error::new(ErrorCode::Io, format!("reading the event: {e}")))
        .and_then(|_| serde_json::from_str::<Event>(&input).map_err(|e| Error::invalid(format!("hook event: {e}"))))
        .and_then(|event| {
            let name = event.hook_event_name.clone();
            handle(ctx, event).map_err(|e| Error::new(e.code, format!("{name}: {}", e.message)))
        });
    if let Err(e) = result {
        log(ctx, &e);
    }
    Outcome::raw(String::new())
}

fn log(ctx: &Ctx, e: &Error) {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(dir) = ctx.store_dir() else { return };
    let _ = std::fs::create_dir_all(&dir);
    let line =
        format!("{} claude-code {}: {}\n", turnback::store::format_ms(turnback::store::now_ms()), e.code, e.message);
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(dir.join("hooks.log")) {
        let _ = f.write_all(line.as_bytes());
    }
}

fn handle(ctx: &Ctx, event: Event) -> Result<()> {
    let workspace = std::env::var_os("CLAUDE_PROJECT_DIR").map(PathBuf::from).or(event.cwd.clone());
    let mut global = ctx.global.clone();
    global.workspace = workspace.or(global.workspace);
    global.session = event.session_id.clone().or(global.session);
    global.json = false;
    let ctx = Ctx { global };
    match event.hook_event_name.as_str() {
        "SessionStart" => {
            // Opening reconciles; resolving creates the session under Claude Code's id.
            let store = ctx.open(true)?;
            let ws = ctx.workspace(&store)?;
            ctx.session(&store, &ws)?;
        }
        "UserPromptSubmit" => {
            let prompt = event.prompt.unwrap_or_default();
            let store = ctx.open(true)?;
            let ws = ctx.workspace(&store)?;
            let session = ctx.session(&store, &ws)?;
            mutation::finish_abandoned_keyed(&store, &session.id)?;
            // A new prompt is a new turn, even when the last one got no Stop (interrupted);
            // the same prompt delivered twice joins the turn it began.
            let new = !turn::running(&store, &session.id)?.is_some_and(|t| turn::repeats(&t, &prompt));
            let req = BeginRequest { prompt: Some(prompt.clone()), background: false, new };
            let (t, joined) = super::turn::begin_turn(&ctx, req, PROMPT_WAIT)?;
            if joined {
                return Ok(());
            }
            history::append(&store, &session, NewEntry::prompt(&t.turn_id, prompt))?;
        }
        "PreToolUse" | "PostToolUse" => {
            let tool = event.tool_name.as_deref().unwrap_or("");
            let input = event.tool_input.unwrap_or(Value::Null);
            let key = event.tool_use_id.clone().unwrap_or_else(|| fallback_key(tool, &input));
            let store = ctx.open(true)?;
            let ws = ctx.workspace(&store)?;
            let session = ctx.session(&store, &ws)?;
            let pre = event.hook_event_name == "PreToolUse";
            if FILE_TOOLS.contains(&tool) {
                if pre {
                    let path = ["file_path", "notebook_path"]
                        .iter()
                        .find_map(|k| input.get(*k).and_then(Value::as_str))
                        .ok_or_else(|| Error::invalid(format!("{tool}: no file_path in tool_input")))?;
                    let cwd = ws.root.clone();
                    let c = Context {
                        store: &store,
                        workspace: &ws,
                        session: &session,
                        cwd: &cwd,
                        confirm_unprotected: true,
                    };
                    mutation::stage_external_keyed(c, &key, &[PathBuf::from(path)], None)?;
                } else {
                    mutation::commit_external_keyed(&store, &session.id, &key, false)?;
                }
            } else if tool == "Bash" && !pre {
                let command = input.get("command").and_then(Value::as_str).unwrap_or("");
                turn::record_shell(&store, &session.id, command, Some(&key))?;
            }
        }
        "PostToolUseFailure" => {
            let store = ctx.open(true)?;
            let ws = ctx.workspace(&store)?;
            let session = ctx.session(&store, &ws)?;
            let input = event.tool_input.unwrap_or(Value::Null);
            let tool = event.tool_name.as_deref().unwrap_or("");
            let key = event.tool_use_id.clone().unwrap_or_else(|| fallback_key(tool, &input));
            mutation::commit_external_keyed(&store, &session.id, &key, true)?;
        }
        "Stop" => {
            let store = ctx.open(true)?;
            let ws = ctx.workspace(&store)?;
            let session = ctx.session(&store, &ws)?;
            mutation::finish_abandoned_keyed(&store, &session.id)?;
            if turn::running(&store, &session.id)?.is_some() {
                turn::end(&store, &ws, &session)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// A key for a tool call whose event carries no tool-use id: its name and input, which
/// the "before" and "after" events share.
fn fallback_key(tool: &str, input: &Value) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tool.hash(&mut h);
    input.to_string().hash(&mut h);
    format!("input-{:016x}", h.finish())
}

// ---------------------------------------------------------------------------------------
// Installing
// ---------------------------------------------------------------------------------------

/// Merges turnback's hooks into (or, with `uninstall`, out of) Claude Code's settings.
pub fn install(ctx: &Ctx, agent: HookAgent, scope: Scope, uninstall: bool) -> Result<Outcome> {
    let HookAgent::ClaudeCode = agent;
    let file = match scope {
        Scope::Project => {
            let root = match &ctx.global.workspace {
                Some(d) => d.clone(),
                None => ctx.cwd()?,
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
    Ok(Outcome::ok(json!({ "settings": file, "changed": changed, "installed": !uninstall, "command": command }), what))
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
