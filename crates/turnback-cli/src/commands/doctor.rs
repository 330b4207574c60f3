//! `turnback doctor`: for this workspace, whether turnback is ready and each agent reaches
//! it — the store and its key, each agent's hooks (installed, current, pointing at a binary
//! that exists) in the project's and the person's configuration, the last event each
//! agent's hooks delivered, the hook failures logged — with advice for every problem.
//!
//! Invariants: it changes nothing (it opens the store without creating it, and reads the
//! agents' configuration files only); every problem comes with what to do about it; the
//! exit code is 0 only when there is no problem.

use std::path::{Path, PathBuf};

use serde::Serialize;
use turnback::{ErrorCode, Result};

use crate::cli::{HookAgent, Scope};
use crate::commands::hook::{agent_name, seen_file};
use crate::commands::install::{self, Places};
use crate::ctx::Ctx;
use crate::output::{Outcome, exit};

const AGENTS: [HookAgent; 5] =
    [HookAgent::ClaudeCode, HookAgent::Codex, HookAgent::Gemini, HookAgent::Cursor, HookAgent::Opencode];

/// The agents' own programs, to tell whether one is on this machine.
fn program(agent: HookAgent) -> &'static str {
    match agent {
        HookAgent::ClaudeCode => "claude",
        HookAgent::Codex => "codex",
        HookAgent::Gemini => "gemini",
        HookAgent::Cursor => "cursor",
        HookAgent::Opencode => "opencode",
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    healthy: bool,
    store: StoreReport,
    agents: Vec<AgentReport>,
    hook_failures: HookFailures,
    problems: Vec<Problem>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct StoreReport {
    dir: PathBuf,
    exists: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clean: Option<bool>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct AgentReport {
    agent: &'static str,
    /// The agent's program on PATH, when it is there.
    #[serde(skip_serializing_if = "Option::is_none")]
    program: Option<PathBuf>,
    hooks: Vec<HooksReport>,
    /// The last event its hooks delivered: time and name.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_event: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct HooksReport {
    scope: &'static str,
    file: PathBuf,
    /// `installed` (as install writes them now), `outdated` (turnback's, but not all of
    /// them, or not as now), `absent`, or `unreadable`.
    state: &'static str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct HookFailures {
    count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    last: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Problem {
    what: String,
    advice: String,
}

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let mut problems = Vec::new();
    let dir = ctx.store_dir()?;
    let store = store_report(ctx, &dir, &mut problems);
    // Events are noted per workspace: only this one's say its hooks reach turnback.
    let workspace = ctx.open(false).ok().and_then(|tb| tb.registered_workspace().ok().flatten()).map(|w| w.id);
    let mut agents = Vec::new();
    for agent in AGENTS {
        agents.push(agent_report(ctx, agent, &dir, workspace.as_deref(), &mut problems)?);
    }
    let hook_failures = failures(&dir);
    if hook_failures.count > 0 {
        problems.push(Problem {
            what: format!("{} hook failure(s) logged", hook_failures.count),
            advice: format!("read {} (the newest last); remove it once dealt with", dir.join("hooks.log").display()),
        });
    }
    let healthy = problems.is_empty();
    let text = text(&store, &agents, &hook_failures, &problems);
    let report = Report { healthy, store, agents, hook_failures, problems };
    let code = if healthy { exit::SUCCESS } else { exit::FAILURE };
    Ok(Outcome::of(&report, text).with_exit(code))
}

fn store_report(ctx: &Ctx, dir: &Path, problems: &mut Vec<Problem>) -> StoreReport {
    let mut report = StoreReport { dir: dir.to_path_buf(), exists: true, key_source: None, clean: None };
    match ctx.open(false).and_then(|tb| Ok((tb.key_status()?.master_key_source, tb.verify(false)?))) {
        Err(e) if e.code == ErrorCode::NotFound => {
            report.exists = false;
            problems.push(Problem {
                what: format!("no store at {}", dir.display()),
                advice: "run `turnback install AGENT` (or `turnback init`): it makes the store and its key".into(),
            });
        }
        Ok((key, verify)) => {
            report.key_source = Some(key);
            report.clean = Some(verify.clean);
            for p in verify.problems {
                let advice =
                    p.recovery_actions.first().cloned().unwrap_or_else(|| "run `turnback verify --deep`".into());
                problems.push(Problem { what: format!("store: {}: {}", p.what, p.message), advice });
            }
        }
        Err(e) => {
            let advice = e.recovery_actions().first().map_or("see `turnback key status`", |a| a).to_string();
            problems.push(Problem { what: format!("the store does not open: {}: {}", e.code, e.message), advice });
        }
    }
    report
}

fn agent_report(
    ctx: &Ctx,
    agent: HookAgent,
    store: &Path,
    workspace: Option<&str>,
    problems: &mut Vec<Problem>,
) -> Result<AgentReport> {
    let name = agent_name(agent);
    let program = install::on_path(program(agent));
    let command = install::hook_command(agent)?;
    let mut hooks = Vec::new();
    for scope in [Scope::Project, Scope::User] {
        let places: Places = install::places(ctx, scope)?;
        let scope_name = if scope == Scope::Project { "project" } else { "user" };
        for change in install::plan(agent, &places, &command, false)?.changes {
            let state = match install::read(&change.file) {
                Err(_) => "unreadable",
                Ok(None) => "absent",
                Ok(Some(text)) => match (change.edit)(Some(&text)) {
                    Ok(after) if after.as_deref() == Some(text.as_str()) => "installed",
                    Ok(_) if mentions(&text, agent) => "outdated",
                    Ok(_) => "absent",
                    Err(_) => "unreadable",
                },
            };
            hooks.push(HooksReport { scope: scope_name, file: change.file, state });
        }
    }
    let last_event = workspace
        .and_then(|id| std::fs::read_to_string(seen_file(store, agent, id)).ok())
        .map(|s| s.trim().to_string());
    for scope in [Scope::Project, Scope::User] {
        for why in install::turned_off(agent, &install::places(ctx, scope)?) {
            problems.push(Problem {
                what: format!("{name}: its hooks are turned off: {why}"),
                advice: "turn them on again in that file, or remove the setting".into(),
            });
        }
    }
    for h in hooks.iter().filter(|h| matches!(h.state, "outdated" | "unreadable")) {
        let scope = if h.scope == "user" { " --scope user" } else { "" };
        problems.push(Problem {
            what: format!("{name}: turnback's hooks in {} are {}", h.file.display(), h.state),
            advice: format!("run `turnback install {name}{scope}` (it rewrites only turnback's part)"),
        });
    }
    if agent == HookAgent::Codex {
        for scope in [Scope::Project, Scope::User] {
            let places = install::places(ctx, scope)?;
            if let Some((trusted, all)) = install::codex_trusted(&places).filter(|(t, a)| t < a) {
                problems.push(Problem {
                    what: format!(
                        "codex: {} of turnback's {all} hooks ({} scope) are not trusted in Codex, which skips them without a word",
                        all - trusted,
                        if scope == Scope::Project { "project" } else { "user" }
                    ),
                    advice: "start Codex in this project, type /hooks and trust turnback's hooks (or run Codex with --dangerously-bypass-hook-trust)".into(),
                });
            }
        }
    }
    let installed = hooks.iter().any(|h| h.state != "absent");
    if installed && last_event.is_none() {
        problems.push(Problem {
            what: format!("{name}: hooks are installed but no event has reached turnback yet"),
            advice: match agent {
                HookAgent::Codex => {
                    "send Codex a prompt; if still nothing, trust turnback's hooks in Codex (/hooks)".into()
                }
                HookAgent::Gemini => "send Gemini a prompt; Gemini runs hooks only in folders it trusts".into(),
                HookAgent::Cursor => "start a new Cursor chat in a trusted workspace".into(),
                _ => format!("send {name} a prompt, then run doctor again"),
            },
        });
    }
    Ok(AgentReport { agent: name, program, hooks, last_event })
}

/// Whether a configuration mentions turnback's hook for `agent` at all.
fn mentions(text: &str, agent: HookAgent) -> bool {
    text.contains(&format!("hook {}", agent_name(agent))) || text.contains("// turnback: undo")
}

fn failures(store: &Path) -> HookFailures {
    let log = std::fs::read_to_string(store.join("hooks.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    HookFailures { count: lines.len(), last: lines.last().map(|l| l.to_string()) }
}

fn text(store: &StoreReport, agents: &[AgentReport], failures: &HookFailures, problems: &[Problem]) -> String {
    let mut t = format!("store    {}", store.dir.display());
    match (&store.key_source, store.clean) {
        (Some(key), Some(clean)) => {
            t.push_str(&format!(" ({})\nkey      {key}\n", if clean { "verified" } else { "PROBLEMS" }));
        }
        _ => t.push_str(if store.exists { " (does not open)\n" } else { " (none yet)\n" }),
    }
    for a in agents {
        let found =
            a.program.as_ref().map(|p| format!("found at {}", p.display())).unwrap_or_else(|| "not on PATH".into());
        t.push_str(&format!("{:<12} {found}\n", a.agent));
        for h in a.hooks.iter().filter(|h| h.state != "absent") {
            t.push_str(&format!("  {:<8} {:<10} {}\n", h.scope, h.state, h.file.display()));
        }
        if let Some(last) = &a.last_event {
            t.push_str(&format!("  last event {last}\n"));
        }
    }
    if let Some(last) = &failures.last {
        t.push_str(&format!("hook failures: {} (last: {last})\n", failures.count));
    }
    if problems.is_empty() {
        t.push_str("no problems found\n");
    }
    for p in problems {
        t.push_str(&format!("problem: {}\n  do: {}\n", p.what, p.advice));
    }
    t
}
