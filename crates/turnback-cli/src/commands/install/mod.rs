//! `turnback install AGENT`: connects an agent to turnback — its hooks (or, for opencode,
//! a plugin) merged into the agent's own configuration — and leaves turnback ready (the
//! store and key made if missing, and where the key is said), so the agent's next prompt
//! is recorded. Each agent's module says which files change and how; this one reads,
//! writes and reports.
//!
//! Invariants: installing keeps every other setting and hook, where it is, and leaves one
//! turnback hook on each event it hooks: a hook of turnback's already there in any form
//! `own_command` recognises counts, and is never installed a second time; a file is
//! rewritten only if its text changes (a second install changes nothing, byte for byte,
//! nor does an uninstall with nothing to take out); uninstalling takes out turnback's
//! hooks in every form recognised, with the keys, lists, tables and files only they filled
//! (what turnback added, empty or not, goes; a file turnback created goes too), moving
//! nothing else; nothing is written when any file cannot be read as the agent's format,
//! nor when any file leads through a symlink outside the scope's root (the project, or the
//! home directory for `--scope user`) unless `--follow-symlinks` says so.

mod claude_code;
mod codex;
mod cursor;
mod gemini;
mod json_hooks;
mod opencode;
mod own_command;

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use turnback::{Error, ErrorCode, Result};

use crate::cli::{HookAgent, Scope};
use crate::commands::hook::agent_name;
use crate::ctx::{Ctx, cwd};
use crate::output::Outcome;

/// A file's text after, from its text now (`None`: no file, before or after).
pub type Edit = Box<dyn Fn(Option<&str>) -> Result<Option<String>>>;

/// One file an installation changes.
pub struct Change {
    pub file: PathBuf,
    pub edit: Edit,
}

/// What installing (or uninstalling) for one agent does.
pub struct Plan {
    pub changes: Vec<Change>,
    /// What the person must know or do (an agent's own trust prompt, say).
    pub notes: Vec<String>,
}

/// Where an agent's configuration lives: the project's root and the person's home.
#[derive(Debug, Clone)]
pub struct Places {
    pub scope: Scope,
    pub project: PathBuf,
    pub home: PathBuf,
}

impl Places {
    /// The directory of the scope's configuration: `<project>/<dir>` or `<home>/<dir>`.
    pub fn dir(&self, dir: &str) -> PathBuf {
        self.root().join(dir)
    }

    /// What the scope's configuration lives under: the project, or the home directory.
    pub fn root(&self) -> &Path {
        match self.scope {
            Scope::Project => &self.project,
            Scope::User => &self.home,
        }
    }
}

/// One file, as reported.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct FileReport {
    path: PathBuf,
    changed: bool,
}

/// What `install` did.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Installed {
    agent: &'static str,
    /// The files it looked at, and whether each was rewritten.
    files: Vec<FileReport>,
    /// Whether turnback's hooks are in place now.
    installed: bool,
    /// The command the hooks run.
    command: String,
    /// The store, when installing.
    #[serde(skip_serializing_if = "Option::is_none")]
    store: Option<PathBuf>,
    /// Where the store's key comes from, when installing.
    #[serde(skip_serializing_if = "Option::is_none")]
    key_source: Option<String>,
    notes: Vec<String>,
}

/// Merges turnback's hooks for `agent` into (or, with `uninstall`, out of) its settings.
pub fn run(ctx: &Ctx, agent: HookAgent, scope: Scope, uninstall: bool, follow_symlinks: bool) -> Result<Outcome> {
    let places = places(ctx, scope)?;
    let command = hook_command(agent)?;
    let mut plan = plan(agent, &places, &command, uninstall)?;
    if !follow_symlinks {
        for change in &plan.changes {
            stays_inside(&change.file, &places)?;
        }
    }
    if !uninstall {
        plan.notes.extend(turned_off(agent, &places).into_iter().map(|why| format!("the hooks will not run: {why}")));
    }
    // Every file is read and edited before any is written.
    let mut writes = Vec::new();
    for change in &plan.changes {
        let before = read(&change.file)?;
        let after = (change.edit)(before.as_deref())?;
        writes.push((change.file.clone(), before, after));
    }
    let mut files = Vec::new();
    for (file, before, after) in writes {
        let changed = before != after;
        if changed {
            match &after {
                Some(text) => write_atomically(&file, text.as_bytes())?,
                None => {
                    std::fs::remove_file(&file).map_err(|e| io(&file, e))?;
                    remove_emptied_dirs(&file, places.root());
                }
            }
        }
        files.push(FileReport { path: file, changed });
    }
    let (store, key_source) = if uninstall {
        (None, None)
    } else {
        let ready = ctx.open(true)?.init()?;
        (Some(ready.store), Some(ready.key_source))
    };
    let text = report_text(agent, uninstall, &files, store.as_deref(), key_source.as_deref(), &plan.notes);
    let installed = Installed {
        agent: agent_name(agent),
        files,
        installed: !uninstall,
        command,
        store,
        key_source,
        notes: plan.notes,
    };
    Ok(Outcome::of(&installed, text))
}

/// What installing (or uninstalling) `agent`'s hooks at `places` changes.
///
/// # Errors
/// What the agent's module refuses (a path it cannot name).
pub fn plan(agent: HookAgent, places: &Places, command: &str, uninstall: bool) -> Result<Plan> {
    match agent {
        HookAgent::ClaudeCode => claude_code::plan(places, command, uninstall),
        HookAgent::Codex => codex::plan(places, command, uninstall),
        HookAgent::Gemini => gemini::plan(places, command, uninstall),
        HookAgent::Cursor => cursor::plan(places, command, uninstall),
        HookAgent::Opencode => opencode::plan(places, command, uninstall),
    }
}

/// What in the agent's own configuration at `places` turns its hooks off, said as a sentence
/// each (Claude Code's `disableAllHooks`, Codex's `[features] hooks = false`, Gemini CLI's
/// `hooksConfig.enabled = false`).
pub fn turned_off(agent: HookAgent, places: &Places) -> Vec<String> {
    match agent {
        HookAgent::ClaudeCode => claude_code::turned_off(places),
        HookAgent::Gemini => gemini::turned_off(places),
        HookAgent::Codex => codex::turned_off(places),
        HookAgent::Cursor | HookAgent::Opencode => Vec::new(),
    }
}

/// The JSON settings file `file` at `places`: where it is, and its value if it is
/// readable JSON.
fn json_settings(places: &Places, dir: &str, file: &str) -> (PathBuf, Option<serde_json::Value>) {
    let path = places.dir(dir).join(file);
    let value = read(&path).ok().flatten().and_then(|t| serde_json::from_str(&t).ok());
    (path, value)
}

/// The places of `scope` for this invocation: the workspace (or the current directory)
/// and `$HOME`.
///
/// # Errors
/// `invalid-argument` without `HOME`.
pub fn places(ctx: &Ctx, scope: Scope) -> Result<Places> {
    let project = match &ctx.global.workspace {
        Some(d) => d.clone(),
        None => cwd()?,
    };
    let home = std::env::var_os("HOME").map(PathBuf::from).ok_or_else(|| Error::invalid("HOME is not set"))?;
    Ok(Places { scope, project, home })
}

fn report_text(
    agent: HookAgent,
    uninstall: bool,
    files: &[FileReport],
    store: Option<&Path>,
    key: Option<&str>,
    notes: &[String],
) -> String {
    let name = agent_name(agent);
    let mut text = String::new();
    for f in files {
        let line = match (uninstall, f.changed) {
            (false, true) => format!("installed turnback's {name} hooks in {}", f.path.display()),
            (false, false) => format!("turnback's {name} hooks are already in {}", f.path.display()),
            (true, true) => format!("removed turnback's {name} hooks from {}", f.path.display()),
            (true, false) => format!("no turnback {name} hooks in {}", f.path.display()),
        };
        text.push_str(&line);
        text.push('\n');
    }
    if let (Some(store), Some(key)) = (store, key) {
        text.push_str(&format!(
            "store  {}\nkey    {key} — back it up: without it, nothing in the store can be read\n",
            store.display()
        ));
    }
    for note in notes {
        text.push_str(&format!("note: {note}\n"));
    }
    text
}

/// After removing `file`, a file turnback had created (it is removed only when nothing but
/// turnback's part was in it), removes the directories above it that are left empty, up
/// to (not including) `root`: `.claude/`, `.codex/`, `.opencode/plugin/` made by the
/// install go with it. A directory that holds anything stays.
fn remove_emptied_dirs(file: &Path, root: &Path) {
    let mut dir = file.parent();
    while let Some(d) = dir.filter(|d| d.starts_with(root) && *d != root) {
        if std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

/// Codex's record of trust in turnback's hooks (see [`codex::trusted`]).
pub fn codex_trusted(places: &Places) -> Option<(usize, usize)> {
    codex::trusted(places)
}

/// How an agent runs the hook: `turnback hook AGENT` when that name on PATH is this very
/// binary (so an upgrade that moves the binary keeps working), else this binary's absolute
/// path — always the absolute path for Cursor, an application that may not share the
/// shell's PATH.
pub fn hook_command(agent: HookAgent) -> Result<String> {
    let name = agent_name(agent);
    let exe = own_exe()?;
    let on_path = on_path("turnback").and_then(|c| std::fs::canonicalize(c).ok());
    if agent != HookAgent::Cursor && on_path.is_some() && on_path == std::fs::canonicalize(&exe).ok() {
        return Ok(format!("turnback hook {name}"));
    }
    Ok(format!("{} hook {name}", shell_quoted(&exe.to_string_lossy())))
}

/// The program `name` on `PATH`, where the shell would find it.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|c| c.is_file())
}

/// This binary.
pub fn own_exe() -> Result<PathBuf> {
    std::env::current_exe().map_err(|e| Error::new(ErrorCode::Io, format!("own executable: {e}")))
}

fn shell_quoted(s: &str) -> String {
    if s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Refuses `file` if, through a symlink (the file's own or a directory's on the way), it
/// leads outside the root of `places`' scope (the project; the home directory): writing
/// there would change something the scope does not hold (another project, a shared
/// dotfile), which a person must ask for.
///
/// # Errors
/// `path-rejected` naming the file, where it leads and the flag that allows it.
fn stays_inside(file: &Path, places: &Places) -> Result<()> {
    // A user-scope file the agent keeps outside the home directory (CODEX_HOME,
    // XDG_CONFIG_HOME set elsewhere) is bounded by the directory the person named for it.
    let (boundary, inside) = match places.scope {
        Scope::Project => (places.root(), "the project"),
        Scope::User if file.starts_with(places.root()) => (places.root(), "your home directory"),
        Scope::User => (file.parent().unwrap_or(file), "the agent's configuration directory"),
    };
    let root = resolved(boundary);
    let resolved = resolved(file);
    if resolved.starts_with(&root) {
        return Ok(());
    }
    Err(Error::new(
        ErrorCode::PathRejected,
        format!(
            "{} leads outside {inside} through a symlink (to {}); nothing was written. \
             Repeat with --follow-symlinks to write there",
            file.display(),
            resolved.display()
        ),
    ))
}

/// Where `path` really is: symlinks resolved through its longest existing ancestor, the
/// rest appended (a file still to be made).
fn resolved(path: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut existing = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return missing.iter().rev().fold(real, |p: PathBuf, name| p.join(name));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_os_string());
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// The file's text now (`None`: there is none).
///
/// # Errors
/// `io` if it exists and cannot be read.
pub fn read(file: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(file) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(file, e)),
    }
}

fn io(file: &Path, e: std::io::Error) -> Error {
    Error::new(ErrorCode::Io, format!("{}: {e}", file.display()))
}

fn write_atomically(file: &Path, bytes: &[u8]) -> Result<()> {
    // A settings file that is a symlink (dotfiles managers) is written where it points,
    // never replaced by a regular file.
    let file = &std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let dir = file.parent().ok_or_else(|| Error::invalid("settings file has no directory"))?;
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = dir.join(format!(".{name}.turnback-{}", std::process::id()));
    let mut f = std::fs::File::create(&temp).map_err(|e| io(&temp, e))?;
    f.write_all(bytes).map_err(|e| io(&temp, e))?;
    f.sync_all().map_err(|e| io(&temp, e))?;
    if let Ok(meta) = std::fs::metadata(file) {
        let _ = std::fs::set_permissions(&temp, meta.permissions());
    }
    std::fs::rename(&temp, file).map_err(|e| io(file, e))
}
