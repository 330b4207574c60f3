//! A story: one agent, one hermetic environment, one scripted model, and the checks made
//! afterwards. Every check is printed as it passes; the first that fails ends the story
//! with what the agent printed and what the model server was asked.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::agents::{Agent, Driver, Installed, Run};
use crate::common::{Env, parse_json, show_output};
use crate::model::{ModelServer, Script, Step, call, marker};

/// The context a story's body runs in.
pub struct Ctx<'a> {
    pub agent: Agent,
    pub env: &'a Env,
    pub server: &'a ModelServer,
    pub driver: Driver<'a>,
    /// The lines printed for the checks passed so far.
    pub checks: RefCell<Vec<String>>,
    /// The file each hook appends its time to.
    pub timings: PathBuf,
    /// What each agent run printed, for a failure's report.
    pub outputs: RefCell<Vec<String>>,
}

impl<'a> Ctx<'a> {
    pub fn new(agent: Agent, installed: &Installed, env: &'a Env, server: &'a ModelServer) -> Ctx<'a> {
        let timings = env.root.join("hook-times.tsv");
        let driver = Driver::new(agent, installed, env, server);
        Ctx { agent, env, server, driver, checks: RefCell::new(Vec::new()), timings, outputs: RefCell::new(Vec::new()) }
    }

    /// Records a check: prints it when it holds, ends the story when it does not.
    pub fn check(&self, what: &str, holds: bool, detail: impl FnOnce() -> String) {
        if holds {
            self.checks.borrow_mut().push(format!("ok    {what}"));
        } else {
            self.checks.borrow_mut().push(format!("FAIL  {what}"));
            panic!("check failed: {what}\n{}", detail());
        }
    }

    /// Runs the agent on `words (tb-NAME)`, resuming the conversation when `resume`, and
    /// checks that it finished.
    pub fn prompt(&self, name: &str, words: &str, resume: bool) -> Run {
        let run = self.run_agent(name, words, resume);
        self.check(
            &format!("the agent finished prompt {name} ({:.1} s)", run.elapsed.as_secs_f64()),
            run.output.status.success(),
            || format!("{}\nmodel requests: {:#?}", run.show(), self.server.requests()),
        );
        run
    }

    /// Runs the agent without checking how it ended.
    pub fn run_agent(&self, name: &str, words: &str, resume: bool) -> Run {
        let text = format!("{words} {}", marker(name));
        let mut cmd = self.driver.command(&text, resume);
        cmd.env("TURNBACK_HOOK_TIMINGS", &self.timings)
            .env("TURNBACK_HOOK_CAPTURE", self.env.root.join("hook-events.jsonl"));
        let run = self.driver.run_command(cmd);
        self.outputs.borrow_mut().push(format!("prompt {name}: {}", run.show()));
        run
    }

    /// `turnback --json ARGS`, which must succeed, perhaps partly (exit 3: a preview or an
    /// apply that leaves someone's work alone).
    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.env.run(&[&["--json"], args].concat(), None);
        assert!(matches!(out.status.code(), Some(0 | 3)), "turnback {args:?}: {}", show_output(&out));
        parse_json(&out)
    }

    /// `turnback ARGS` (text), which must succeed.
    pub fn text(&self, args: &[&str]) -> String {
        let out = self.env.run(args, None);
        assert!(out.status.success(), "turnback {args:?}: {}", show_output(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The workspace file `rel`, as text (`None` when absent).
    pub fn file(&self, rel: &str) -> Option<String> {
        std::fs::read(self.env.ws.join(rel)).ok().map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// Every hook time recorded: (event, duration).
    pub fn hook_times(&self) -> Vec<(String, Duration)> {
        std::fs::read_to_string(&self.timings)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.split('\t');
                let (_, event, micros) = (f.next()?, f.next()?, f.next()?.parse().ok()?);
                Some((event.to_string(), Duration::from_micros(micros)))
            })
            .collect()
    }

    /// The `history import` arguments that name the agent's own record of its session
    /// `session` (its transcript file, or opencode's session), found where the agent keeps it.
    pub fn transcript_args(&self, session: &str) -> Vec<String> {
        let home = &self.env.home;
        let find = |dir: PathBuf, pick: &dyn Fn(&Path) -> bool| {
            files_under(&dir).into_iter().find(|f| pick(f)).unwrap_or_else(|| dir.join("no-transcript-found"))
        };
        let named = |f: &Path| f.file_name().is_some_and(|n| n.to_string_lossy().contains(session));
        let (flag, file) = match self.agent {
            Agent::ClaudeCode => ("--claude-code", find(home.join(".claude/projects"), &named)),
            Agent::Codex => ("--codex", find(home.join(".codex/sessions"), &named)),
            Agent::Gemini => (
                "--gemini",
                find(home.join(".gemini/tmp"), &|f: &Path| {
                    f.parent().is_some_and(|d| d.ends_with("chats"))
                        && std::fs::read_to_string(f).is_ok_and(|t| t.contains(session))
                }),
            ),
            Agent::Opencode => return vec!["--opencode".to_string(), session.to_string()],
        };
        vec![flag.to_string(), file.to_string_lossy().into_owned()]
    }

    /// Checks that `hooks.log` in the store is empty: turnback never failed in a hook.
    pub fn check_hooks_log_empty(&self) {
        let log = std::fs::read_to_string(self.env.store.join("hooks.log")).unwrap_or_default();
        self.check("hooks.log is empty", log.is_empty(), || log.clone());
    }
}

/// The agent's tools, as its model calls them, in one workspace.
#[derive(Debug, Clone)]
pub struct Tools {
    pub agent: Agent,
    pub ws: PathBuf,
}

impl Tools {
    /// The absolute path of workspace file `rel`.
    pub fn abs(&self, rel: &str) -> String {
        self.ws.join(rel).to_string_lossy().into_owned()
    }

    /// A call that creates `rel` with `content`.
    pub fn create(&self, rel: &str, content: &str) -> Vec<Step> {
        vec![match self.agent {
            Agent::ClaudeCode => call("Write", json!({"file_path": self.abs(rel), "content": content})),
            Agent::Codex => call("apply_patch", json!(patch(&format!("*** Add File: {rel}\n{}", plus_lines(content))))),
            Agent::Gemini => call("write_file", json!({"file_path": self.abs(rel), "content": content})),
            Agent::Opencode => call("write", json!({"filePath": self.abs(rel), "content": content})),
        }]
    }

    /// Calls that replace `old` by `new` in `rel` (reading it first where the agent insists).
    pub fn edit(&self, rel: &str, old: &str, new: &str) -> Vec<Step> {
        match self.agent {
            Agent::ClaudeCode => vec![
                call("Read", json!({"file_path": self.abs(rel)})),
                call(
                    "Edit",
                    json!({"file_path": self.abs(rel), "old_string": old, "new_string": new, "replace_all": false}),
                ),
            ],
            Agent::Codex => {
                vec![call("apply_patch", json!(patch(&format!("*** Update File: {rel}\n@@\n-{old}\n+{new}\n"))))]
            }
            Agent::Gemini => vec![call(
                "replace",
                json!({"file_path": self.abs(rel), "instruction": "Replace the line.", "old_string": old, "new_string": new}),
            )],
            Agent::Opencode => vec![
                call("read", json!({"filePath": self.abs(rel)})),
                call("edit", json!({"filePath": self.abs(rel), "oldString": old, "newString": new})),
            ],
        }
    }

    /// A shell call running `command` in the workspace.
    pub fn shell(&self, command: &str) -> Vec<Step> {
        vec![match self.agent {
            Agent::ClaudeCode => call("Bash", json!({"command": command, "description": "Run a command"})),
            Agent::Codex => call("exec_command", json!({"cmd": command})),
            Agent::Gemini => call("run_shell_command", json!({"command": command, "description": "Run a command"})),
            Agent::Opencode => call("bash", json!({"command": command, "description": "Run a command"})),
        }]
    }
}

/// Codex's patch envelope around `body`.
pub fn patch(body: &str) -> String {
    format!("*** Begin Patch\n{body}*** End Patch\n")
}

fn plus_lines(content: &str) -> String {
    content.lines().map(|l| format!("+{l}\n")).collect()
}

/// The steps of a prompt, concatenated.
pub fn steps(parts: Vec<Vec<Step>>) -> Vec<Step> {
    parts.into_iter().flatten().collect()
}

/// Every file under `dir`, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    tree_bytes(dir).into_iter().filter(|(_, b)| b != b"<dir>").map(|(p, _)| dir.join(p)).collect()
}

/// Every file under `dir` with its bytes, sorted: for byte-for-byte comparisons of a
/// directory tree (`.git`, an agent's configuration).
pub fn tree_bytes(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    if !dir.exists() {
        return out;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.push((path.strip_prefix(dir).unwrap().to_path_buf(), b"<dir>".to_vec()));
                stack.push(path);
            } else {
                out.push((path.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

/// A story to run.
pub struct Story {
    pub agent: Agent,
    pub name: &'static str,
    pub script: fn(&Tools) -> Script,
    pub body: fn(&Ctx),
}

impl Story {
    /// `agent::name`, as the output lists it.
    pub fn id(&self) -> String {
        format!("{}::{}", self.agent.hook_name().replace('-', "_"), self.name)
    }
}
