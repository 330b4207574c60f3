//! The real agents, verified: the published Claude Code, Codex CLI, Gemini CLI and opencode
//! (npm packages, versions pinned in `pinned/`) run non-interactively against a scripted
//! model server on 127.0.0.1, with turnback's hooks installed as a person would install
//! them; each story then checks what turnback recorded and what it can take back.
//!
//! `TURNBACK_AGENTS=pinned` (or `latest`: the newest published versions) runs the suite;
//! `TURNBACK_REQUIRE_AGENTS=1` (CI) runs the pinned one and fails if an agent cannot be
//! installed or run. Without either, the suite says so in one line and passes. Arguments
//! filter stories by name (`cargo test --test agents -- codex`). A run of every story in
//! pinned mode writes the compatibility table into docs/agents.md.
//!
//! Its own harness (not libtest): every story and every check is printed, and the last
//! line is `agents: N passed, N failed`.

#[allow(dead_code)]
#[path = "../runner/common/mod.rs"]
mod common;

mod agents;
mod model;
mod stories;
mod story;

use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agents::{Agent, Installed, Mode};
use story::{Ctx, Story, Tools};

/// What one story did.
struct Outcome {
    id: String,
    agent: Agent,
    passed: bool,
    lines: Vec<String>,
    hook_times: Vec<(String, Duration)>,
}

fn main() {
    let mode = match std::env::var("TURNBACK_AGENTS").as_deref() {
        Ok("latest") => Some(Mode::Latest),
        Ok("pinned") => Some(Mode::Pinned),
        _ if std::env::var_os("TURNBACK_REQUIRE_AGENTS").is_some_and(|v| v == "1") => Some(Mode::Pinned),
        _ => None,
    };
    let Some(mode) = mode else {
        println!(
            "agents: skipped; TURNBACK_AGENTS=pinned cargo test --test agents runs the real agents (installs them with npm)"
        );
        return;
    };
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let started = Instant::now();
    let installed = match agents::install(mode) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("agents: could not install the agents: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "agents: {} versions ({}) installed in {:.1} s",
        if mode == Mode::Pinned { "pinned" } else { "latest" },
        installed.versions.iter().map(|(a, v)| format!("{} {v}", a.title())).collect::<Vec<_>>().join(", "),
        started.elapsed().as_secs_f64()
    );
    if mode == Mode::Latest {
        for ((agent, pinned), (_, latest)) in agents::pinned_versions().iter().zip(&installed.versions) {
            let said =
                if pinned == latest { "unchanged".to_string() } else { format!("pinned {pinned}, now {latest}") };
            println!("agents: {}: {said}", agent.title());
        }
    }
    let all = stories::all();
    let chosen: Vec<&Story> =
        all.iter().filter(|s| filters.is_empty() || filters.iter().any(|f| s.id().contains(f.as_str()))).collect();
    let jobs: usize = std::env::var("TURNBACK_AGENTS_JOBS").ok().and_then(|j| j.parse().ok()).unwrap_or(2).max(1);
    let queue = Mutex::new(chosen.to_vec());
    let outcomes = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let Some(story) = queue.lock().unwrap().pop() else { break };
                    let outcome = run_story(story, &installed);
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "story {} ... {}", outcome.id, if outcome.passed { "ok" } else { "FAILED" });
                    for line in &outcome.lines {
                        let _ = writeln!(out, "    {line}");
                    }
                    drop(out);
                    outcomes.lock().unwrap().push(outcome);
                }
            });
        }
    });
    let outcomes = outcomes.into_inner().unwrap();
    let failed = outcomes.iter().filter(|o| !o.passed).count();
    report_hook_times(&outcomes);
    if filters.is_empty() {
        table(&installed, &outcomes);
    }
    println!("agents: {} passed, {failed} failed ({:.0} s)", outcomes.len() - failed, started.elapsed().as_secs_f64());
    if failed > 0 {
        std::process::exit(1);
    }
}

fn run_story(story: &Story, installed: &Installed) -> Outcome {
    let env = common::Env::new();
    let tools = Tools { agent: story.agent, ws: env.ws.clone() };
    let server = model::ModelServer::start((story.script)(&tools));
    let ctx = Ctx::new(story.agent, installed, &env, &server);
    let started = Instant::now();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| (story.body)(&ctx)));
    let mut lines = ctx.checks.borrow().clone();
    if let Err(panic) = &result {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        lines.extend(message.lines().map(str::to_string));
        for output in ctx.outputs.borrow().iter() {
            lines.extend(output.lines().take(40).map(|l| format!("| {l}")));
        }
        lines.push("what the model server was asked:".to_string());
        lines.extend(server.requests().iter().map(|r| format!("  {} -> {}", r.path, r.played)));
        // Kept for a look: the workspace, the store and the agent's home.
        let kept = env.root.with_extension("kept");
        if std::process::Command::new("cp").arg("-a").arg(&env.root).arg(&kept).status().is_ok() {
            lines.push(format!("(the story's directories are kept in {})", kept.display()));
        }
    }
    lines.push(format!("({:.1} s)", started.elapsed().as_secs_f64()));
    Outcome { id: story.id(), agent: story.agent, passed: result.is_ok(), lines, hook_times: ctx.hook_times() }
}

/// The events around one tool call, in each agent's words: the per-edit hooks.
const PER_EDIT: [&str; 6] = ["PreToolUse", "PostToolUse", "BeforeTool", "AfterTool", "tool-before", "tool-after"];

/// The hook times of the real runs, per agent: median, 90th percentile and slowest of the
/// per-edit hooks (before and after a tool call) and of every hook.
fn report_hook_times(outcomes: &[Outcome]) {
    for agent in Agent::ALL {
        let times: Vec<&(String, Duration)> =
            outcomes.iter().filter(|o| o.agent == agent).flat_map(|o| o.hook_times.iter()).collect();
        let per_edit: Vec<Duration> =
            times.iter().filter(|(e, _)| PER_EDIT.contains(&e.as_str())).map(|(_, d)| *d).collect();
        let all: Vec<Duration> = times.iter().map(|(_, d)| *d).collect();
        for (which, mut list) in [("per-edit hooks", per_edit), ("all hooks", all)] {
            if list.is_empty() {
                continue;
            }
            list.sort();
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!(
                "agents: {} {which}: {} events, median {:.1} ms, 90th percentile {:.1} ms, slowest {:.1} ms",
                agent.title(),
                list.len(),
                ms(list[list.len() / 2]),
                ms(list[list.len() * 9 / 10]),
                ms(list[list.len() - 1])
            );
        }
    }
}

const TABLE_START: &str = "<!-- compatibility table: written by `cargo test --test agents` -->";
const TABLE_END: &str = "<!-- end of compatibility table -->";

/// The compatibility table (agent, version, stories passed): printed, and in pinned mode
/// written into docs/agents.md between its markers.
fn table(installed: &Installed, outcomes: &[Outcome]) {
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut text = format!("{TABLE_START}\n| agent | version | stories passed | run |\n|---|---|---|---|\n");
    for agent in Agent::ALL {
        let mine: Vec<&Outcome> = outcomes.iter().filter(|o| o.agent == agent).collect();
        let passed = mine.iter().filter(|o| o.passed).count();
        let failed: Vec<&str> = mine.iter().filter(|o| !o.passed).map(|o| o.id.as_str()).collect();
        let note = if failed.is_empty() { String::new() } else { format!(" (failed: {})", failed.join(", ")) };
        text.push_str(&format!(
            "| {} | {} | {passed}/{}{note} | {date} |\n",
            agent.title(),
            installed.version(agent),
            mine.len()
        ));
    }
    text.push_str(TABLE_END);
    println!("{text}");
    if installed.mode != Mode::Pinned {
        return;
    }
    let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/agents.md");
    let Ok(current) = std::fs::read_to_string(&doc) else { return };
    if let (Some(a), Some(b)) = (current.find(TABLE_START), current.find(TABLE_END)) {
        let updated = format!("{}{text}{}", &current[..a], &current[b + TABLE_END.len()..]);
        let _ = std::fs::write(&doc, updated);
    }
}
