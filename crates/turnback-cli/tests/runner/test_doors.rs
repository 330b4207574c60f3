//! One story through each door — the command line, Claude Code's hooks, the MCP server —
//! tells the same: what happens around a turn is the library's (the bounded start
//! snapshot, the watcher `[snapshots] watch = "auto"` starts, the push to the
//! `[remote] auto-push` remote at every turn end), and each door only installs how
//! (`src/runtime.rs`; `turnback mcp` inherits it). Each door plays two turns, each with a
//! prompt, a file written and a file edited, in its own workspace and store on one Garage;
//! then the turns, snapshots, checkpoints, history, watcher, the remote's copy of the
//! session (pulled into a fresh store) and the objects in the bucket are read back,
//! normalised, and compared across the doors, so a door that does less than the library
//! promises fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::garage::{self, Garage};
use crate::common::tools::{self, Tool};
use crate::common::{Env, claude_event, files_under, hook, str_at, unique};

/// The files every workspace starts with, before any door.
const START: [(&str, &str); 2] = [("README.md", "# app\n"), ("src/lib.rs", "pub fn one() {}\n")];

/// The story: per turn, its prompt, the file it writes (new) and the edit it makes.
struct Turn {
    prompt: &'static str,
    write: (&'static str, &'static str),
    edit: Edit,
}

/// An exact replacement in a file, and the file's content after it.
struct Edit {
    path: &'static str,
    old: &'static str,
    new: &'static str,
    after: &'static str,
}

const STORY: [Turn; 2] = [
    Turn {
        prompt: "write the parser",
        write: ("src/parser.rs", "fn parse() {}\n"),
        edit: Edit { path: "README.md", old: "# app", new: "# App", after: "# App\n" },
    },
    Turn {
        prompt: "rename parse to load",
        write: ("notes.md", "parse is now load\n"),
        edit: Edit { path: "src/parser.rs", old: "parse", new: "load", after: "fn load() {}\n" },
    },
];

/// How long anything detached (a start snapshot, a watcher, an auto-push) may take to
/// settle before the test says it never did.
const SETTLE: Duration = Duration::from_secs(30);

/// A door's workspace and store, with remote `team` on Garage as its auto-push remote and
/// the watcher in auto mode. Dropped, it stops its watcher (a failing test leaks none).
struct Door {
    name: &'static str,
    env: Env,
    prefix: String,
}

impl Door {
    fn new(name: &'static str, garage: &Garage) -> Door {
        let mut env = Env::new();
        // The harness turns the watcher off for every test; this one wants the default.
        env.set_var("TURNBACK_WATCH", "auto");
        let prefix = unique(&format!("doors-{name}/"));
        garage.connect(&mut env, "team", &prefix);
        env.ok(&["init"], None);
        let settings = env.store.join("settings.toml");
        let text = std::fs::read_to_string(&settings).unwrap();
        assert!(text.contains("watch = \"auto\""), "the watcher's setting: {text}");
        std::fs::write(&settings, format!("{text}\n[remote]\nauto-push = \"team\"\n")).unwrap();
        for (path, content) in START {
            env.write(path, content);
        }
        Door { name, env, prefix }
    }

    /// The workspace's session (each door names its own; the command line's and the MCP
    /// server's are new ones, the hook's is the agent's).
    fn session(&self) -> String {
        let listed = self.env.json(&["session", "list"]);
        let sessions = listed["sessions"].as_array().unwrap();
        assert_eq!(sessions.len(), 1, "{}: one session: {listed:#}", self.name);
        str_at(&sessions[0], "/id").to_string()
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        let _ = self.env.run(&["watch", "stop"], None);
    }
}

/// Door 1: the command line, as a person or a script drives it.
fn through_the_command_line(door: &Door) {
    let env = &door.env;
    for turn in &STORY {
        env.ok(&["turn", "begin", "--prompt", turn.prompt], None);
        env.ok(&["fs", "write", turn.write.0], Some(turn.write.1.as_bytes()));
        env.ok(&["fs", "edit", turn.edit.path, "--old", turn.edit.old, "--new", turn.edit.new], None);
        env.ok(&["turn", "end"], None);
    }
}

/// Door 2: Claude Code's hook events as the installed hook delivers them (hooks
/// reference), the files written by the agent's own tools between each Pre and Post.
fn through_the_hooks(door: &Door) {
    let env = &door.env;
    let session = "5b1c0d2e-7f3a-4e8b-9c6d-doors";
    let event = |name: &str, extra: Value| claude_event(env, session, name, extra);
    hook(env, "claude-code", &event("SessionStart", json!({ "source": "startup" })));
    for (n, turn) in STORY.iter().enumerate() {
        hook(env, "claude-code", &event("UserPromptSubmit", json!({ "prompt": turn.prompt })));
        let (path, content) = turn.write;
        let write = json!({ "file_path": env.ws.join(path), "content": content });
        let edit = json!({ "file_path": env.ws.join(turn.edit.path), "old_string": turn.edit.old, "new_string": turn.edit.new });
        let calls = [("Write", write, path, content), ("Edit", edit, turn.edit.path, turn.edit.after)];
        for (i, (tool, input, path, content)) in calls.into_iter().enumerate() {
            let id = format!("toolu_{n}{i}");
            let call = json!({ "tool_name": tool, "tool_input": input, "tool_use_id": id });
            hook(env, "claude-code", &event("PreToolUse", call.clone()));
            env.write(path, content);
            let response = json!({ "filePath": env.ws.join(path), "success": true });
            hook(
                env,
                "claude-code",
                &event("PostToolUse", crate::common::with(call, json!({ "tool_response": response }))),
            );
        }
        hook(env, "claude-code", &event("Stop", json!({ "stop_hook_active": false })));
    }
}

/// Door 3: `turnback mcp` through the official MCP Python SDK, one client session.
fn through_the_mcp_server(door: &Door) {
    let mut calls = Vec::new();
    for turn in &STORY {
        calls.push(("begin_turn", json!({ "prompt": turn.prompt })));
        calls.push(("write_file", json!({ "path": turn.write.0, "content": turn.write.1 })));
        calls.push((
            "edit_file",
            json!({ "path": turn.edit.path, "old_string": turn.edit.old, "new_string": turn.edit.new }),
        ));
        calls.push(("end_turn", json!({})));
    }
    let got = door.env.mcp_calls(&calls);
    for (value, (name, _)) in got[1..].iter().zip(&calls) {
        assert!(value.get("isError").is_none(), "mcp {name}: {value}");
    }
}

/// A snapshot of a turn as `turns --json` states it. Whether a start snapshot was late
/// (past its door's wait) depends on the machine's load, not on the door: not compared.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    taken: bool,
    skipped: Option<String>,
}

impl Snapshot {
    fn of(v: &Value) -> Snapshot {
        Snapshot { taken: v["id"].is_string(), skipped: v["skipped"].as_str().map(str::to_string) }
    }

    /// Taken, whole.
    const SETTLED: Snapshot = Snapshot { taken: true, skipped: None };
}

/// A turn as `turns --json` states it, without its ids and times.
#[derive(Debug, PartialEq, Eq)]
struct TurnSeen {
    index: u64,
    kind: String,
    preview: String,
    ended: bool,
    start: Snapshot,
    end: Option<Snapshot>,
}

/// What a store says of the door's session, ids and times left out.
#[derive(Debug, PartialEq, Eq)]
struct Recorded {
    turns: Vec<TurnSeen>,
    /// Each turn's diff (start to end snapshot): the changes and the patch.
    diffs: Vec<Value>,
    /// The history as (role, content).
    history: Vec<(String, String)>,
}

/// What `watch status` says of the workspace's watcher.
#[derive(Debug, PartialEq, Eq)]
struct Watcher {
    running: bool,
    /// It answered at least one snapshot (a sync): the door's snapshots asked it.
    answered: bool,
    overflows: u64,
}

/// Everything one door left behind, normalised so that doors compare.
#[derive(Debug, PartialEq, Eq)]
struct Story {
    local: Recorded,
    /// Each checkpoint's targets as (path, effect), in order.
    checkpoints: Vec<Vec<(String, String)>>,
    /// The workspace's files.
    files: BTreeMap<String, String>,
    watcher: Watcher,
    /// How many turns the remote's manifest of the session names.
    remote_turns: Option<u64>,
    /// The kinds of object in the bucket under the door's prefix (`p`acks and their
    /// inde`x`es, `t`urn records, `s`ession manifests, the `turnback-remote` canary).
    remote_kinds: BTreeSet<String>,
    /// Manifests in the bucket: every push writes one, so one per turn end.
    remote_manifests: usize,
    /// The session pulled from the remote into a fresh store (none: the pull failed).
    pulled: Option<Recorded>,
}

impl Story {
    /// Each part in which this story differs from `other` (the command line's), both
    /// versions shown.
    fn against(&self, other: &Story) -> String {
        let mut out = String::new();
        macro_rules! parts {
            ($($part:ident),*) => {$(
                if self.$part != other.$part {
                    let name = stringify!($part);
                    out += &format!("{name}, this door: {:#?}\n{name}, the command line: {:#?}\n", self.$part, other.$part);
                }
            )*};
        }
        parts!(local, checkpoints, files, watcher, remote_turns, remote_kinds, remote_manifests, pulled);
        out
    }
}

fn turns(env: &Env, session: &str) -> Vec<TurnSeen> {
    let listed = env.json(&["--session", session, "turns"]);
    listed["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| TurnSeen {
            index: t["index"].as_u64().unwrap(),
            kind: str_at(t, "/kind").to_string(),
            preview: str_at(t, "/preview").to_string(),
            ended: t["endedAt"].is_string(),
            start: Snapshot::of(&t["snapshot"]),
            end: t.get("endSnapshot").filter(|e| !e.is_null()).map(Snapshot::of),
        })
        .collect()
}

fn recorded(env: &Env, session: &str) -> Recorded {
    let turns = turns(env, session);
    let diffs = (1..=turns.len())
        .map(|n| {
            let d = env.json(&["--session", session, "diff", "--turn", &n.to_string()]);
            json!({ "changes": d["changes"], "patch": d["patch"] })
        })
        .collect();
    let history = env.json(&["--session", session, "history", "show"])["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (str_at(e, "/role").to_string(), str_at(e, "/content").to_string()))
        .collect();
    Recorded { turns, diffs, history }
}

/// Polls `done` every 100 ms until it holds, for at most [`SETTLE`]; past that, says on
/// stderr what never settled and how it last stood (the comparison then fails on it).
fn settle(what: &str, mut done: impl FnMut() -> Result<(), String>) -> bool {
    let deadline = Instant::now() + SETTLE;
    loop {
        match done() {
            Ok(()) => return true,
            Err(state) if Instant::now() >= deadline => {
                eprintln!("{what} did not settle in {SETTLE:?}: {state}");
                return false;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The processes (other than zombies) with `store` among their arguments: what this
/// store's door left running (`__turn-snapshot`, `watch run`, `push`).
fn running_on(store: &Path) -> Vec<String> {
    let store = store.as_os_str().as_encoded_bytes();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if cmdline.split(|b| *b == 0).any(|arg| arg == store) {
            found.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    found
}

/// Reads back what `door` left, once its detached work has settled.
fn read_back(door: &Door, garage: &Garage) -> Story {
    let env = &door.env;
    let session = door.session();
    // The start snapshots are taken by detached processes: each attaches itself to its
    // turn when it commits.
    settle(&format!("{}: the turns' snapshots", door.name), || {
        let t = turns(env, &session);
        let all = t.len() == STORY.len() && t.iter().all(|t| t.start.taken && t.end.as_ref().is_some_and(|e| e.taken));
        if all { Ok(()) } else { Err(format!("{t:#?}")) }
    });
    let mut status = Value::Null;
    settle(&format!("{}: the watcher", door.name), || {
        status = env.json(&["watch", "status"]);
        if status["running"] == true { Ok(()) } else { Err(status.to_string()) }
    });
    let watcher = Watcher {
        running: status["running"] == true,
        answered: status["syncs"].as_u64().is_some_and(|n| n > 0),
        overflows: status["overflows"].as_u64().unwrap_or_default(),
    };
    // An auto-push per turn end: once both are done, two manifests, naming both turns.
    let remote_turns = || {
        let listed = env.json(&["session", "list", "--remote", "team"]);
        let found = listed["sessions"].as_array().unwrap().iter().find(|s| s["id"] == session.as_str()).cloned();
        (found.and_then(|s| s["turns"].as_u64()), listed)
    };
    let objects = || -> Vec<String> { garage.objects(&door.prefix).into_iter().map(|(name, _)| name).collect() };
    let count = |names: &[String], kind: &str| names.iter().filter(|n| n.starts_with(kind)).count();
    settle(&format!("{}: the auto-pushes", door.name), || match (remote_turns(), objects()) {
        ((Some(n), _), names) if n == STORY.len() as u64 && count(&names, "s/") == STORY.len() => Ok(()),
        ((_, listed), names) => Err(format!("{listed:#}\nobjects: {names:#?}\nauto-push.log: {}", auto_push_log(env))),
    });
    let checkpoints = env.json(&["--session", &session, "checkpoints"])["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let targets = c["targets"].as_array().unwrap().iter();
            targets.map(|t| (str_at(t, "/path").to_string(), str_at(t, "/effect").to_string())).collect()
        })
        .collect();
    let files = files_under(&env.ws)
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(&env.ws).unwrap().to_string_lossy().into_owned();
            (rel, std::fs::read_to_string(&f).unwrap())
        })
        .collect();
    let names = objects();
    let remote_kinds = names.iter().map(|n| n.split('/').next().unwrap_or_default().to_string()).collect();
    // Another machine with the same key pulls the session: the same story.
    let mut other = Env::new();
    garage.connect(&mut other, "team", &door.prefix);
    let pulled = other.run(&["pull", "team", "--session", &session], None).status.success();
    let pulled = pulled.then(|| recorded(&other, &session));
    Story {
        local: recorded(env, &session),
        checkpoints,
        files,
        watcher,
        remote_turns: remote_turns().0,
        remote_kinds,
        remote_manifests: count(&names, "s/"),
        pulled,
    }
}

fn auto_push_log(env: &Env) -> String {
    std::fs::read_to_string(env.store.join("auto-push.log")).unwrap_or_default()
}

/// Stops the door's watcher and waits until nothing it started runs any more.
fn wind_down(door: &Door) {
    door.env.ok(&["watch", "stop"], None);
    let ended = settle(&format!("{}: its detached processes", door.name), || {
        let left = running_on(&door.env.store);
        if left.is_empty() { Ok(()) } else { Err(format!("{left:#?}")) }
    });
    assert!(ended, "{}: a process it started still runs (above)", door.name);
    assert_eq!(auto_push_log(&door.env), "", "{}: every auto-push succeeded", door.name);
}

#[test]
fn one_story_through_the_command_line_the_hooks_and_the_mcp_server_tells_the_same() {
    if !tools::available(Tool::McpClient) {
        return;
    }
    let Some(garage) = garage::start() else { return };
    let doors = [Door::new("cli", &garage), Door::new("hook", &garage), Door::new("mcp", &garage)];
    through_the_command_line(&doors[0]);
    through_the_hooks(&doors[1]);
    through_the_mcp_server(&doors[2]);

    let stories: Vec<Story> = doors.iter().map(|d| read_back(d, &garage)).collect();
    for door in &doors {
        wind_down(door);
    }

    // What the promise says, checked on the command line's story; then every door's
    // must be the same.
    let cli = &stories[0];
    let prompts: Vec<&str> = STORY.iter().map(|t| t.prompt).collect();
    assert_eq!(cli.local.turns.iter().map(|t| t.preview.as_str()).collect::<Vec<_>>(), prompts, "{cli:#?}");
    for t in &cli.local.turns {
        assert!(t.ended, "{t:#?}");
        assert_eq!((&t.start, t.end.as_ref()), (&Snapshot::SETTLED, Some(&Snapshot::SETTLED)), "{t:#?}");
    }
    let asked: Vec<(String, String)> = prompts.iter().map(|p| ("user".to_string(), p.to_string())).collect();
    assert_eq!(cli.local.history, asked, "the prompts are the history: {cli:#?}");
    assert_eq!(cli.checkpoints.len(), 4, "a write and an edit per turn: {cli:#?}");
    assert_eq!(cli.watcher, Watcher { running: true, answered: true, overflows: 0 }, "{cli:#?}");
    assert_eq!(cli.remote_turns, Some(2), "{cli:#?}");
    assert_eq!(cli.remote_manifests, 2, "a push per turn end: {cli:#?}");
    assert_eq!(cli.pulled.as_ref(), Some(&cli.local), "the remote holds the same session");
    for (door, story) in doors.iter().zip(&stories).skip(1) {
        assert!(
            story == cli,
            "the {} door tells another story than the command line:\n{}",
            door.name,
            story.against(cli)
        );
    }
}
