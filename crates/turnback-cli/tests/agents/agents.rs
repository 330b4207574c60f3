//! The real agents: installed from npm into a cache directory at the versions pinned in
//! `pinned/package.json` (with its lockfile), or at the newest published versions
//! (`TURNBACK_AGENTS=latest`), and run non-interactively against the scripted model server
//! in a story's hermetic environment.
//!
//! Invariants: nothing is installed inside the repository; an install is reused only when
//! the cache holds exactly the lockfile it was made from; every agent run has its own
//! `HOME` (the story's), its own configuration there, and no variable of the developer's
//! that could reach a real service.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::Env;
use crate::model::ModelServer;

/// The four agents the suite drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    ClaudeCode,
    Codex,
    Gemini,
    Opencode,
}

impl Agent {
    /// Every agent, in the table's order.
    pub const ALL: [Agent; 4] = [Agent::ClaudeCode, Agent::Codex, Agent::Gemini, Agent::Opencode];

    /// The name `turnback install`/`hook` takes.
    pub fn hook_name(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
            Agent::Opencode => "opencode",
        }
    }

    /// The npm package.
    pub fn package(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "@anthropic-ai/claude-code",
            Agent::Codex => "@openai/codex",
            Agent::Gemini => "@google/gemini-cli",
            Agent::Opencode => "opencode-ai",
        }
    }

    /// The command the package installs.
    pub fn bin(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
            Agent::Opencode => "opencode",
        }
    }

    /// The name people know it by.
    pub fn title(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "Claude Code",
            Agent::Codex => "Codex CLI",
            Agent::Gemini => "Gemini CLI",
            Agent::Opencode => "opencode",
        }
    }
}

/// Which versions the suite runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pinned,
    Latest,
}

/// An install of the four agents.
#[derive(Debug)]
pub struct Installed {
    /// `node_modules/.bin` of the install.
    pub bin: PathBuf,
    /// The version of each agent, from its installed `package.json`.
    pub versions: Vec<(Agent, String)>,
    pub mode: Mode,
}

impl Installed {
    /// The installed version of `agent`.
    pub fn version(&self, agent: Agent) -> &str {
        self.versions.iter().find(|(a, _)| *a == agent).map(|(_, v)| v.as_str()).unwrap_or("?")
    }
}

fn pinned_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/pinned")
}

/// The cache directory installs go to: `$TURNBACK_AGENTS_CACHE`, else
/// `$XDG_CACHE_HOME/turnback-agents`, else `~/.cache/turnback-agents`.
fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("TURNBACK_AGENTS_CACHE").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"));
    base.join("turnback-agents")
}

fn npm(dir: &Path, args: &[&str]) -> Result<(), String> {
    let mut last = String::new();
    for attempt in 0..3 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_secs(5));
        }
        let out = Command::new("npm")
            .args(args)
            .args(["--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("npm: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        last = format!("npm {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    }
    Err(last)
}

/// Installs the agents (or finds them installed) for `mode`.
pub fn install(mode: Mode) -> Result<Installed, String> {
    let pinned = pinned_dir();
    let manifest = std::fs::read(pinned.join("package.json")).map_err(|e| format!("pinned/package.json: {e}"))?;
    let lock = std::fs::read(pinned.join("package-lock.json")).map_err(|e| format!("pinned/package-lock.json: {e}"))?;
    let dir = match mode {
        Mode::Pinned => cache_root().join("pinned"),
        Mode::Latest => cache_root().join("latest"),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    match mode {
        Mode::Pinned => {
            let stamp = dir.join(".installed-from-lock");
            if std::fs::read(&stamp).ok().as_deref() != Some(&lock[..]) || !dir.join("node_modules/.bin").is_dir() {
                std::fs::write(dir.join("package.json"), &manifest).map_err(|e| e.to_string())?;
                std::fs::write(dir.join("package-lock.json"), &lock).map_err(|e| e.to_string())?;
                // `npm install` with the lockfile in place keeps every version it records; `npm ci`
                // refuses this lockfile, which (as npm writes it) lacks the other platforms'
                // optional binary packages of opencode.
                npm(&dir, &["install", "--omit-lockfile-registry-resolved"])?;
                std::fs::write(&stamp, &lock).map_err(|e| e.to_string())?;
            }
        }
        Mode::Latest => {
            let manifest: Value = serde_json::from_slice(&manifest).map_err(|e| e.to_string())?;
            let mut latest = manifest.clone();
            for (_, v) in latest["dependencies"].as_object_mut().expect("dependencies").iter_mut() {
                *v = json!("latest");
            }
            std::fs::write(dir.join("package.json"), serde_json::to_vec_pretty(&latest).unwrap())
                .map_err(|e| e.to_string())?;
            let _ = std::fs::remove_file(dir.join("package-lock.json"));
            npm(&dir, &["install", "--omit-lockfile-registry-resolved"])?;
        }
    }
    let versions = Agent::ALL
        .iter()
        .map(|&a| {
            let pkg = dir.join("node_modules").join(a.package()).join("package.json");
            let v: Value = std::fs::read(&pkg).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
            (a, v["version"].as_str().unwrap_or("?").to_string())
        })
        .collect();
    Ok(Installed { bin: dir.join("node_modules/.bin"), versions, mode })
}

/// The versions `pinned/package.json` names.
pub fn pinned_versions() -> Vec<(Agent, String)> {
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(pinned_dir().join("package.json")).expect("pinned/package.json"))
            .expect("json");
    Agent::ALL.iter().map(|&a| (a, manifest["dependencies"][a.package()].as_str().unwrap_or("?").to_string())).collect()
}

/// One agent in one story's environment, talking to one model server.
#[derive(Debug)]
pub struct Driver<'a> {
    pub agent: Agent,
    pub env: &'a Env,
    exe: PathBuf,
    url: String,
    /// Codex: run hooks the person has not trusted (`--dangerously-bypass-hook-trust`).
    pub bypass_hook_trust: std::cell::Cell<bool>,
}

/// What one agent run did.
#[derive(Debug)]
pub struct Run {
    pub output: Output,
    pub elapsed: Duration,
}

impl Run {
    /// stdout and stderr, for a failure message.
    pub fn show(&self) -> String {
        format!(
            "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.output.status,
            String::from_utf8_lossy(&self.output.stdout),
            String::from_utf8_lossy(&self.output.stderr)
        )
    }
}

impl<'a> Driver<'a> {
    /// Writes the agent's configuration (the model server as its provider) into the story's
    /// home directory.
    pub fn new(agent: Agent, installed: &Installed, env: &'a Env, server: &ModelServer) -> Driver<'a> {
        let exe = installed.bin.join(agent.bin());
        let url = server.url.clone();
        let home = &env.home;
        match agent {
            Agent::ClaudeCode => {}
            Agent::Codex => {
                let codex_home = home.join(".codex");
                std::fs::create_dir_all(&codex_home).unwrap();
                let config = format!(
                    "model = \"gpt-5.5\"\nmodel_provider = \"scripted\"\n\n[model_providers.scripted]\nname = \"scripted\"\n\
                     base_url = \"{url}/v1\"\nwire_api = \"responses\"\nenv_key = \"SCRIPTED_API_KEY\"\n\
                     request_max_retries = 0\nstream_max_retries = 0\n"
                );
                std::fs::write(codex_home.join("config.toml"), config).unwrap();
            }
            Agent::Gemini => {
                std::fs::create_dir_all(home.join(".gemini")).unwrap();
                let settings = json!({"security": {"auth": {"selectedType": "gemini-api-key"}},
                    "general": {"disableAutoUpdate": true}, "privacy": {"usageStatisticsEnabled": false}});
                std::fs::write(home.join(".gemini/settings.json"), settings.to_string()).unwrap();
            }
            Agent::Opencode => {
                let dir = env.conf.join("opencode");
                std::fs::create_dir_all(&dir).unwrap();
                let config = json!({"$schema": "https://opencode.ai/config.json", "model": "scripted/scripted-model",
                    "small_model": "scripted/scripted-model", "autoupdate": false, "share": "disabled",
                    "provider": {"scripted": {"npm": "@ai-sdk/openai-compatible", "name": "Scripted",
                        "options": {"baseURL": format!("{url}/v1"), "apiKey": "scripted"},
                        "models": {"scripted-model": {"name": "Scripted", "tool_call": true}}}}});
                std::fs::write(dir.join("opencode.json"), config.to_string()).unwrap();
            }
        }
        Driver { agent, env, exe, url, bypass_hook_trust: std::cell::Cell::new(true) }
    }

    /// The agent's command for `prompt`, with `--continue`/resume when `resume`.
    pub fn command(&self, prompt: &str, resume: bool) -> Command {
        let mut cmd = self.env.command::<&str>(&[]);
        cmd.env_remove("TURNBACK_WATCH");
        cmd.env("TURNBACK_WATCH", "off");
        cmd.stdin(Stdio::null());
        let mut c = Command::new(&self.exe);
        // The story's environment: turnback's variables (the hooks inherit them), HOME.
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        for name in [
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "GEMINI_API_KEY",
            "GOOGLE_API_KEY",
            "CODEX_HOME",
        ] {
            c.env_remove(name);
        }
        // opencode takes its directory from $PWD, as a shell would have set it.
        c.current_dir(&self.env.ws).env("PWD", &self.env.ws).stdin(Stdio::null());
        let url = &self.url;
        match self.agent {
            Agent::ClaudeCode => {
                c.env("ANTHROPIC_BASE_URL", url)
                    .env("ANTHROPIC_API_KEY", "sk-scripted")
                    .env("IS_SANDBOX", "1")
                    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                    .env("DISABLE_AUTOUPDATER", "1")
                    .env("CLAUDE_CODE_MAX_RETRIES", "0");
                c.args(["-p", prompt, "--permission-mode", "bypassPermissions"]);
                if resume {
                    c.arg("--continue");
                }
            }
            Agent::Codex => {
                c.env("CODEX_HOME", self.env.home.join(".codex")).env("SCRIPTED_API_KEY", "scripted");
                c.arg("exec");
                if resume {
                    c.args(["resume", "--last"]);
                }
                c.args(["--trust", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]);
                if self.bypass_hook_trust.get() {
                    c.arg("--dangerously-bypass-hook-trust");
                }
                c.arg(prompt);
            }
            Agent::Gemini => {
                c.env("GOOGLE_GEMINI_BASE_URL", url)
                    .env("GEMINI_API_KEY", "scripted")
                    .env("GEMINI_CLI_TRUST_WORKSPACE", "true");
                c.args(["-p", prompt, "--yolo", "-m", "gemini-2.5-flash"]);
                if resume {
                    c.args(["--resume", "latest"]);
                }
            }
            Agent::Opencode => {
                c.env("OPENCODE_DISABLE_MODELS_FETCH", "1").env("OPENCODE_DISABLE_AUTOUPDATE", "1");
                c.arg("run");
                if resume {
                    c.arg("--continue");
                }
                // WORDS…, as a person types them.
                c.args(prompt.split(' '));
            }
        }
        c
    }

    /// Codex's own list of the hooks it finds for the workspace, each with its `key`,
    /// `command`, `currentHash` and `trustStatus` (its app-server's `hooks/list`).
    pub fn codex_hooks(&self) -> Vec<Value> {
        let mut child = Command::new(&self.exe)
            .arg("app-server")
            .env("HOME", &self.env.home)
            .env("CODEX_HOME", self.env.home.join(".codex"))
            .current_dir(&self.env.ws)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("codex app-server");
        let ws = self.env.ws.to_string_lossy().into_owned();
        let requests = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientInfo": {"name": "turnback-suite", "title": "turnback", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "method": "initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {"cwds": [ws]}}),
        ];
        let mut stdin = child.stdin.take().unwrap();
        for r in requests {
            use std::io::Write;
            writeln!(stdin, "{r}").unwrap();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && v["id"] == 2
                {
                    let _ = tx.send(v);
                    return;
                }
            }
        });
        let answer = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        drop(stdin);
        let _ = child.kill();
        let _ = child.wait();
        answer["result"]["data"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|d| d["hooks"].as_array().cloned().unwrap_or_default())
            .collect()
    }

    /// Runs an agent command to its end (at most three minutes, then it is killed).
    pub fn run_command(&self, mut cmd: Command) -> Run {
        let started = Instant::now();
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.exe.display()));
        let pid = child.id();
        let (done, finished) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if finished.recv_timeout(Duration::from_secs(180)) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            }
        });
        let output = child.wait_with_output().expect("agent output");
        drop(done);
        Run { output, elapsed: started.elapsed() }
    }
}
