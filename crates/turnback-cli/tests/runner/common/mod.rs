//! A hermetic environment for running the `turnback` binary.
//!
//! Every [`Env`] owns a temporary directory with `ws/` (the workspace and the current
//! directory of every command), `store/` (`TURNBACK_HOME`), `conf/` (`XDG_CONFIG_HOME`)
//! and `home/` (`HOME`). Every variable turnback reads is removed from the inherited
//! environment, so a test never sees the developer's store, key or session.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub mod garage;
pub mod tools;

use base64::Engine;
use serde_json::Value;

/// The environment variables turnback reads; all are removed before each command.
const SCRUBBED: &[&str] = &[
    "TURNBACK_KEY",
    "TURNBACK_KEY_FILE",
    "TURNBACK_SESSION",
    "TURNBACK_FAILPOINT",
    "TURNBACK_HOME",
    "XDG_DATA_HOME",
    "XDG_CONFIG_HOME",
];

/// How long a spawned process may take to reach its failpoint.
const FAILPOINT_TIMEOUT: Duration = Duration::from_secs(30);

/// The fixed master key most tests use, base64 as `TURNBACK_KEY` takes it.
pub fn test_key() -> String {
    key_b64(0x5a)
}

/// A 32-byte key made of `byte`, base64-encoded.
pub fn key_b64(byte: u8) -> String {
    base64::engine::general_purpose::STANDARD.encode([byte; 32])
}

/// A string no other test (or run) uses: for canaries and unique names.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}{nanos:x}q{}z{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// One hermetic turnback environment.
#[derive(Debug)]
pub struct Env {
    _tmp: tempfile::TempDir,
    /// The temporary directory holding everything below.
    pub root: PathBuf,
    /// The workspace, and the current directory of every command.
    pub ws: PathBuf,
    /// `TURNBACK_HOME`.
    pub store: PathBuf,
    /// `XDG_CONFIG_HOME`.
    pub conf: PathBuf,
    /// `HOME`.
    pub home: PathBuf,
    vars: Vec<(String, String)>,
}

impl Env {
    /// An environment whose master key comes from `TURNBACK_KEY` (the fixed test key).
    pub fn new() -> Self {
        let mut env = Env::without_key();
        env.set_var("TURNBACK_KEY", &test_key());
        env
    }

    /// An environment with no `TURNBACK_KEY`: the key comes from the default key file
    /// `$XDG_CONFIG_HOME/turnback/master.key` unless a test sets `TURNBACK_KEY_FILE`.
    pub fn without_key() -> Self {
        let tmp = tempfile::tempdir().expect("temporary directory");
        let root = tmp.path().canonicalize().expect("canonical temporary directory");
        let [ws, store, conf, home] = ["ws", "store", "conf", "home"].map(|d| root.join(d));
        for d in [&ws, &store, &conf, &home] {
            std::fs::create_dir(d).expect("create test directory");
        }
        Env { _tmp: tmp, root, ws, store, conf, home, vars: Vec::new() }
    }

    /// Sets (or replaces) an environment variable for every later command.
    pub fn set_var(&mut self, name: &str, value: &str) {
        self.remove_var(name);
        self.vars.push((name.to_string(), value.to_string()));
    }

    /// Stops setting an environment variable set with [`set_var`](Self::set_var).
    pub fn remove_var(&mut self, name: &str) {
        self.vars.retain(|(n, _)| n != name);
    }

    /// The default key file (`$XDG_CONFIG_HOME/turnback/master.key`).
    pub fn default_key_file(&self) -> PathBuf {
        self.conf.join("turnback").join("master.key")
    }

    /// A `turnback` command with the hermetic environment, run in the workspace.
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_turnback"));
        for name in SCRUBBED {
            cmd.env_remove(name);
        }
        cmd.env("TURNBACK_HOME", &self.store)
            .env("XDG_CONFIG_HOME", &self.conf)
            .env("HOME", &self.home)
            // Never reach for a real OS keychain, even in a build with the feature.
            .env("TURNBACK_NO_KEYCHAIN", "1")
            // No file watcher unless a test asks for one (`set_var("TURNBACK_WATCH", "auto")`).
            .env("TURNBACK_WATCH", "off")
            .current_dir(&self.ws)
            .args(args);
        for (name, value) in &self.vars {
            cmd.env(name, value);
        }
        cmd
    }

    /// Runs `turnback ARGS` with `stdin` (none: empty stdin) and returns what it did.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S], stdin: Option<&[u8]>) -> Output {
        run_command(self.command(args), stdin)
    }

    /// Runs `turnback ARGS` in `dir` instead of the workspace root.
    pub fn run_in<S: AsRef<OsStr>>(&self, dir: &Path, args: &[S], stdin: Option<&[u8]>) -> Output {
        let mut cmd = self.command(args);
        cmd.current_dir(dir);
        run_command(cmd, stdin)
    }

    /// Runs `turnback ARGS`, asserting it succeeds.
    pub fn ok<S: AsRef<OsStr>>(&self, args: &[S], stdin: Option<&[u8]>) -> Output {
        let out = self.run(args, stdin);
        assert_success(&out, args);
        out
    }

    /// Runs `turnback --json ARGS`, asserting success, and parses the document it prints.
    pub fn json<S: AsRef<OsStr>>(&self, args: &[S]) -> Value {
        self.json_with(args, None)
    }

    /// [`json`](Self::json) with content on stdin.
    pub fn json_with<S: AsRef<OsStr>>(&self, args: &[S], stdin: Option<&[u8]>) -> Value {
        let out = self.run(&with_json(args), stdin);
        assert_success(&out, args);
        parse_json(&out)
    }

    /// [`json`](Self::json) run in `dir` instead of the workspace root.
    pub fn json_in<S: AsRef<OsStr>>(&self, dir: &Path, args: &[S]) -> Value {
        let out = self.run_in(dir, &with_json(args), None);
        assert_success(&out, args);
        parse_json(&out)
    }

    /// Runs `turnback --json ARGS`, asserting it fails, and returns the exit code and error.
    pub fn fail<S: AsRef<OsStr>>(&self, args: &[S], stdin: Option<&[u8]>) -> Failure {
        let out = self.run(&with_json(args), stdin);
        Failure::of(&out, args)
    }

    /// Writes a workspace file directly (not through turnback), creating its directories.
    pub fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) {
        let path = self.ws.join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create directories");
        }
        std::fs::write(&path, bytes).expect("write workspace file");
    }

    /// A workspace file's bytes, or `None` if it does not exist.
    pub fn read(&self, rel: &str) -> Option<Vec<u8>> {
        match std::fs::read(self.ws.join(rel)) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => panic!("read {rel}: {e}"),
        }
    }

    /// The checkpoints the default listing shows (`checkpoints --json`).
    pub fn checkpoints(&self) -> Vec<Value> {
        self.json(&["checkpoints"])["checkpoints"].as_array().expect("checkpoints array").clone()
    }

    /// Every checkpoint record (`checkpoints --all --json`).
    pub fn all_checkpoints(&self) -> Vec<Value> {
        self.json(&["checkpoints", "--all"])["checkpoints"].as_array().expect("checkpoints array").clone()
    }

    /// Runs `verify --deep --json` and asserts the store is clean; returns the report.
    pub fn assert_verify_clean(&self) -> Value {
        let out = self.run(&["--json", "verify", "--deep"], None);
        let report = parse_json(&out);
        assert_eq!(report["clean"], Value::Bool(true), "verify --deep found problems: {report:#}");
        assert_eq!(out.status.code(), Some(0), "verify --deep exit code with a clean report: {report:#}");
        report
    }

    /// Spawns `turnback ARGS` with `TURNBACK_FAILPOINT=failpoint` and waits until it
    /// reports reaching the failpoint, where it stays until killed (dropping the returned
    /// handle kills it too, so a failing test never leaves a process behind).
    ///
    /// Panics (after killing it) if the process exits first or takes over 30 s.
    pub fn spawn_at_failpoint<S: AsRef<OsStr>>(&self, args: &[S], stdin: Option<&[u8]>, failpoint: &str) -> Stopped {
        let mut cmd = self.command(args);
        cmd.env("TURNBACK_FAILPOINT", failpoint)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut stopped = Stopped { child: cmd.spawn().expect("spawn turnback") };
        if let Some(bytes) = stdin {
            let mut pipe = stopped.child.stdin.take().expect("stdin pipe");
            pipe.write_all(bytes).expect("write stdin");
        }
        let stderr = stopped.child.stderr.take().expect("stderr pipe");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let expected = format!("turnback: failpoint {failpoint} reached");
        let deadline = Instant::now() + FAILPOINT_TIMEOUT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line == expected => return stopped,
                Ok(line) => seen.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = stopped.kill();
                    panic!("turnback exited ({status}) before failpoint {failpoint}; stderr: {seen:?}");
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    stopped.kill();
                    panic!("turnback did not reach failpoint {failpoint} within 30 s; stderr: {seen:?}");
                }
            }
        }
    }

    /// Runs `turnback ARGS` until it reaches `failpoint`, then kills it with SIGKILL.
    pub fn kill_at_failpoint<S: AsRef<OsStr>>(&self, args: &[S], stdin: Option<&[u8]>, failpoint: &str) {
        self.spawn_at_failpoint(args, stdin, failpoint).kill();
    }
}

/// A `turnback` process held at a failpoint.
#[derive(Debug)]
pub struct Stopped {
    child: Child,
}

impl Stopped {
    /// Kills the process with SIGKILL and reaps it.
    pub fn kill(&mut self) -> std::process::ExitStatus {
        let _ = self.child.kill();
        self.child.wait().expect("wait for turnback")
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A failed `--json` command: its exit code and the fields of its `error` document.
#[derive(Debug)]
pub struct Failure {
    /// The process exit code.
    pub exit: i32,
    /// `error.code`.
    pub code: String,
    /// `error.message`.
    pub message: String,
    /// `error.details`.
    pub details: Value,
    /// The whole error document.
    pub doc: Value,
}

impl Failure {
    fn of<S: AsRef<OsStr>>(out: &Output, args: &[S]) -> Self {
        let exit = out.status.code().expect("turnback exited normally");
        assert_ne!(exit, 0, "expected turnback {} to fail\n{}", show_args(args), show_output(out));
        let doc = parse_json(out);
        let error = &doc["error"];
        Failure {
            exit,
            code: error["code"].as_str().unwrap_or_else(|| panic!("no error.code in {doc:#}")).to_string(),
            message: error["message"].as_str().unwrap_or_default().to_string(),
            details: error["details"].clone(),
            doc: doc.clone(),
        }
    }
}

fn run_command(mut cmd: Command, stdin: Option<&[u8]>) -> Output {
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn turnback");
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        // A command that fails before it reads its input (a broken store) closes the pipe.
        if let Err(e) = pipe.write_all(bytes) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
        }
    }
    child.wait_with_output().expect("wait for turnback")
}

fn with_json<S: AsRef<OsStr>>(args: &[S]) -> Vec<&OsStr> {
    std::iter::once(OsStr::new("--json")).chain(args.iter().map(AsRef::as_ref)).collect()
}

fn show_args<S: AsRef<OsStr>>(args: &[S]) -> String {
    args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
}

/// The exit status, stdout and stderr of a command, for assertion messages.
pub fn show_output(out: &Output) -> String {
    format!(
        "status: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn assert_success<S: AsRef<OsStr>>(out: &Output, args: &[S]) {
    assert!(out.status.success(), "turnback {} failed\n{}", show_args(args), show_output(out));
}

/// Parses the one JSON document a `--json` command prints on stdout.
pub fn parse_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e})\n{}", show_output(out)))
}

/// Every regular file under `dir`, recursively (symlinks are not followed).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("read_dir {}: {e}", d.display())) {
            let entry = entry.expect("directory entry");
            let ty = entry.file_type().expect("file type");
            if ty.is_dir() {
                stack.push(entry.path());
            } else {
                out.push(entry.path());
            }
        }
    }
    out.sort();
    out
}

/// The permission bits of `path`.
pub fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display())).permissions().mode() & 0o7777
}

/// Sets the permission bits of `path`.
pub fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// The string at `pointer` (JSON pointer) in `v`, panicking with the document if absent.
pub fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_else(|| panic!("no string at {pointer} in {v:#}"))
}

/// The peak resident memory of the running process `pid` so far, in KiB (`VmHWM`; 0 once
/// it is gone). The kernel's high-water mark never falls, so a poll any time before the
/// process exits sees its peak up to then.
pub fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().strip_suffix("kB"));
    kib.and_then(|k| k.trim().parse().ok()).unwrap_or(0)
}

/// Whether the official MCP Python SDK is importable. `.ci/run` installs it and sets
/// `TURNBACK_REQUIRE_MCP_CLIENT=1`, so CI never skips the end-to-end test.
pub fn mcp_client_available() -> bool {
    tools::available(tools::Tool::McpClient)
}

impl Env {
    /// Calls tools of `turnback mcp` through the official MCP Python SDK (`tests/mcp/call.py`)
    /// in this environment; returns the server's identity and then one value per call (its
    /// structured content, or `{"isError": true, "text": ...}`).
    pub fn mcp_calls(&self, calls: &[(&str, Value)]) -> Vec<Value> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/call.py");
        let mut cmd = Command::new("python3");
        cmd.arg(&script).arg(env!("CARGO_BIN_EXE_turnback")).arg(&self.ws);
        for (name, args) in calls {
            cmd.arg(name).arg(args.to_string());
        }
        for name in SCRUBBED {
            cmd.env_remove(name);
        }
        cmd.env("TURNBACK_HOME", &self.store)
            .env("XDG_CONFIG_HOME", &self.conf)
            .env("HOME", &self.home)
            .env("TURNBACK_NO_KEYCHAIN", "1")
            .env("TURNBACK_WATCH", "off");
        for (name, value) in &self.vars {
            cmd.env(name, value);
        }
        let out = cmd.output().expect("python3 runs");
        assert!(out.status.success(), "{}", show_output(&out));
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
    }
}

/// An RFC 3339 time `offset_ms` after now: what an agent stamps its records with as they
/// happen (turnback joins a transcript's turn to a hook's only if it is not much older).
pub fn stamp(offset_ms: i64) -> String {
    turnback::format_ms(turnback::now_ms() + offset_ms)
}

/// Runs `turnback hook AGENT` with `event` on stdin; asserts exit 0 and that nothing went
/// to `hooks.log`. Returns what the hook printed.
pub fn deliver(env: &Env, agent: &str, event: &Value) -> String {
    let out = env.run(&["hook", agent], Some(event.to_string().as_bytes()));
    assert_eq!(out.status.code(), Some(0), "a hook always exits 0: {}", show_output(&out));
    let log = std::fs::read_to_string(env.store.join("hooks.log")).unwrap_or_default();
    assert!(log.is_empty(), "the {agent} hook logged a failure for {event}:\n{log}");
    String::from_utf8(out.stdout).unwrap()
}

/// [`deliver`] for agents that read nothing back: the hook prints nothing.
pub fn hook(env: &Env, agent: &str, event: &Value) {
    let out = deliver(env, agent, event);
    assert!(out.is_empty(), "the {agent} hook prints nothing on stdout, got {out:?} for {event}");
}

/// Where a Claude Code session's transcript is (a directory need not exist: a hook may
/// run before the agent writes it).
pub fn claude_transcript(env: &Env, session: &str) -> PathBuf {
    env.root.join(format!("{session}.jsonl"))
}

/// A Claude Code hook event as documented (hooks reference): the common fields every
/// event carries, then its own.
pub fn claude_event(env: &Env, session: &str, name: &str, extra: Value) -> Value {
    let base = serde_json::json!({
        "session_id": session,
        "transcript_path": claude_transcript(env, session),
        "cwd": env.ws,
        "hook_event_name": name,
    });
    with(base, extra)
}

/// `base` with the fields of `extra` set over it.
pub fn with(base: Value, extra: Value) -> Value {
    let mut e = base;
    for (k, v) in extra.as_object().unwrap() {
        e[k] = v.clone();
    }
    e
}

/// A session's history as (role, content), without the times.
pub fn history(env: &Env, session: &str) -> Vec<(String, String)> {
    let view = env.json(&["--session", session, "history", "show"]);
    view["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (str_at(e, "/role").to_string(), str_at(e, "/content").to_string()))
        .collect()
}

/// A session's turns as `turns` previews them.
pub fn previews(env: &Env, session: &str) -> Vec<String> {
    let turns = env.json(&["--session", session, "turns"]);
    turns["turns"].as_array().unwrap().iter().map(|t| str_at(t, "/preview").to_string()).collect()
}

/// Tampers with the store's database directly, as an attacker with write access to
/// `store.db` would: `f` gets a connection to it (the CLI runs no process meanwhile).
/// Rows live in `kv` (small values) and `kv_large` (content, history, stat caches), each
/// keyed by `(ns, key)`.
pub fn tamper<T>(env: &Env, f: impl FnOnce(&rusqlite::Connection) -> T) -> T {
    let conn = rusqlite::Connection::open(env.store.join("store.db")).expect("open store.db to tamper with it");
    let out = f(&conn);
    drop(conn);
    out
}

/// Flips one bit of the byte at `at(len)` in the value of every row of table `ns` (a
/// large-value table: content, history, stat caches); returns how many rows.
pub fn flip_byte_in_rows(env: &Env, ns: &str, at: impl Fn(usize) -> usize) -> u64 {
    tamper(env, |c| {
        let mut stmt = c.prepare("SELECT key, value FROM kv_large WHERE ns = ?1").expect("select");
        let rows: Vec<(Vec<u8>, Vec<u8>)> =
            stmt.query_map([ns], |r| Ok((r.get(0)?, r.get(1)?))).expect("query").map(|r| r.expect("row")).collect();
        for (key, mut value) in rows.iter().cloned() {
            let i = at(value.len());
            value[i] ^= 0x01;
            c.execute("UPDATE kv_large SET value = ?1 WHERE ns = ?2 AND key = ?3", rusqlite::params![value, ns, key])
                .expect("update");
        }
        rows.len() as u64
    })
}

/// The keys of every row of table `ns` in the store, in key order.
pub fn raw_keys(env: &Env, ns: &str) -> Vec<Vec<u8>> {
    tamper(env, |c| {
        let mut keys = Vec::new();
        for table in ["kv", "kv_large"] {
            let mut stmt = c.prepare(&format!("SELECT key FROM {table} WHERE ns = ?1 ORDER BY key")).expect("select");
            let rows = stmt.query_map([ns], |r| r.get::<_, Vec<u8>>(0)).expect("query");
            keys.extend(rows.map(|r| r.expect("row")));
        }
        keys
    })
}

impl Env {
    /// Runs `turnback ARGS` in `dir`, asserting it succeeds.
    pub fn ok_in<S: AsRef<OsStr>>(&self, dir: &Path, args: &[S]) -> Output {
        let out = self.run_in(dir, args, None);
        assert!(out.status.success(), "turnback failed in {}: {}", dir.display(), show_output(&out));
        out
    }
}
