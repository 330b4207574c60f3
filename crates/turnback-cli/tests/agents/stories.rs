//! The stories, for every agent that can play them.

use serde_json::Value;

use crate::agents::Agent;
use crate::model::{Script, Step, text};
use crate::story::{Ctx, Story, Tools, steps, tree_bytes};

/// Every story of the suite.
pub fn all() -> Vec<Story> {
    let mut out = Vec::new();
    for agent in Agent::ALL {
        out.push(Story { agent, name: "turns_checkpoints_rewind_and_undo_hold", script: core_script, body: core });
    }
    for agent in Agent::ALL {
        out.push(Story {
            agent,
            name: "rewound_turns_stay_rewound_when_the_conversation_resumes",
            script: resumed_script,
            body: resumed,
        });
    }
    out.push(Story {
        agent: Agent::Codex,
        name: "a_patch_that_moves_a_file_is_taken_back_whole",
        script: moved_script,
        body: moved,
    });
    out.push(Story {
        agent: Agent::ClaudeCode,
        name: "compaction_is_no_turn_and_thins_no_history",
        script: compaction_script,
        body: compaction,
    });
    out.push(Story {
        agent: Agent::ClaudeCode,
        name: "an_api_error_ends_the_turn",
        script: api_error_script,
        body: api_error,
    });
    for agent in Agent::ALL {
        out.push(Story { agent, name: "an_interrupt_ends_the_turn", script: interrupt_script, body: interrupt });
    }
    out.push(Story {
        agent: Agent::Opencode,
        name: "a_subagents_edit_is_its_own_and_rolls_back_alone",
        script: subagent_script,
        body: subagent,
    });
    out.push(Story {
        agent: Agent::Opencode,
        name: "installed_at_both_scopes_each_reply_is_recorded_once",
        script: both_scopes_script,
        body: both_scopes,
    });
    out.push(Story {
        agent: Agent::Codex,
        name: "doctor_reads_codexs_own_trust_in_the_hooks",
        script: trust_script,
        body: trust,
    });
    out.push(Story {
        agent: Agent::ClaudeCode,
        name: "a_denied_write_reads_as_failed_and_changed_nothing",
        script: denied_script,
        body: denied,
    });
    out.push(Story {
        agent: Agent::ClaudeCode,
        name: "background_subagent_edit_survives_the_main_stop_and_its_notice_is_no_turn",
        script: background_subagent_script,
        body: background_subagent,
    });
    out
}

/// Three prompts: a create and two shell commands (one failing); an edit and a create; an
/// edit after a person's own edit.
fn core_script(t: &Tools) -> Script {
    Script::new()
        .prompt(
            "1",
            steps(vec![
                t.create("notes.md", "one\n"),
                t.shell("echo built > build.txt"),
                t.shell("cat missing-file.txt"),
                vec![text("Turn one done.")],
            ]),
        )
        .prompt(
            "2",
            steps(vec![
                t.edit("notes.md", "one", "two"),
                t.create("second.txt", "second\n"),
                vec![text("Turn two done.")],
            ]),
        )
        .prompt("3", steps(vec![t.edit("second.txt", "second", "third"), vec![text("Turn three done.")]]))
}

fn array(v: &Value, key: &str) -> Vec<Value> {
    v[key].as_array().cloned().unwrap_or_default()
}

fn paths(checkpoints: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = checkpoints
        .iter()
        .flat_map(|c| array(c, "targets"))
        .filter_map(|t| t["path"].as_str().map(|p| format!("{} {p}", t["effect"].as_str().unwrap_or("?"))))
        .collect();
    out.sort();
    out
}

fn core(c: &Ctx) {
    let ws = &c.env.ws;
    // A repository that must stay byte for byte as it is, and a file of the person's.
    for (rel, bytes) in [
        (".git/HEAD", "ref: refs/heads/main\n"),
        (".git/config", "[core]\n\tbare = false\n"),
        (".git/refs/heads/main", "0123456789abcdef0123456789abcdef01234567\n"),
    ] {
        c.env.write(rel, bytes);
    }
    c.env.write("README.md", "hello\n");
    // A workspace of this many more files (TURNBACK_AGENTS_FILES), for the hook times of
    // docs/benchmarks.md.
    let extra: usize = std::env::var("TURNBACK_AGENTS_FILES").ok().and_then(|n| n.parse().ok()).unwrap_or(0);
    for i in 0..extra {
        c.env.write(&format!("src/m{:03}/f{i}.txt", i / 100), format!("file {i}\n"));
    }
    let git_before = tree_bytes(&ws.join(".git"));
    let installed = c.json(&["install", c.agent.hook_name()]);
    let files: Vec<std::path::PathBuf> =
        array(&installed, "files").iter().filter_map(|f| f["path"].as_str().map(std::path::PathBuf::from)).collect();
    c.check("install wrote the agent's configuration", !files.is_empty() && files.iter().all(|f| f.exists()), || {
        format!("{installed:#}")
    });

    c.prompt("1", "Start the notes.", false);
    c.check("turn 1 created notes.md", c.file("notes.md").as_deref() == Some("one\n"), || {
        format!("{:?}", c.file("notes.md"))
    });
    c.prompt("2", "Extend the notes.", true);
    c.env.write("person.txt", "mine\n");
    c.prompt("3", "Touch the second file.", true);
    c.check("turn 3 edited second.txt", c.file("second.txt").as_deref() == Some("third\n"), || {
        format!("{:?}", c.file("second.txt"))
    });

    let turns = c.json(&["turns"]);
    let listed = array(&turns, "turns");
    c.check("three turns, one per prompt", listed.len() == 3, || format!("{turns:#}"));
    for (i, turn) in listed.iter().enumerate() {
        let preview = turn["preview"].as_str().unwrap_or("");
        c.check(
            &format!("turn {} is prompt {} and ended", i + 1, i + 1),
            preview.contains(&format!("(tb-{})", i + 1)) && turn["endedAt"].is_string(),
            || format!("{turn:#}"),
        );
    }

    let listed_text = c.text(&["turns"]);
    let failing = listed_text.lines().find(|l| l.contains("$ cat missing-file.txt")).unwrap_or("").to_string();
    if c.agent == Agent::Codex {
        // Codex's hooks report a shell command's output, not its status; the rollout has it.
        let history = c.json(&["history", "show", "--turn", "1"]);
        let failed_call = array(&history, "entries")
            .iter()
            .flat_map(|e| array(e, "toolCalls"))
            .any(|t| t["error"] == true && t["input"].to_string().contains("missing-file.txt"));
        c.check(
            "turns lists the shell commands, and the history marks the failing one (from the rollout's exit_code)",
            !failing.is_empty() && failed_call,
            || format!("{listed_text}\n{history:#}"),
        );
    } else {
        c.check(
            "turns shows the failing shell command with its exit status",
            failing.contains("(exit 1)") || failing.contains("(failed)"),
            || listed_text.clone(),
        );
    }
    let turn1 = array(&c.json(&["checkpoints", "--turn", "1"]), "checkpoints");
    let turn2 = array(&c.json(&["checkpoints", "--turn", "2"]), "checkpoints");
    let turn3 = array(&c.json(&["checkpoints", "--turn", "3"]), "checkpoints");
    c.check("turn 1's checkpoint: notes.md created", paths(&turn1).contains(&"create notes.md".to_string()), || {
        format!("{turn1:#?}")
    });
    let shells: Vec<Value> = turn1.iter().filter(|c| c["mutation"]["kind"] == "shell").cloned().collect();
    c.check(
        "turn 1's `echo built > build.txt` is a shell checkpoint of build.txt alone; the failing `cat` changed nothing",
        shells.len() == 1
            && paths(&shells) == vec!["create build.txt".to_string()]
            && shells[0]["shell"]["command"].as_str().is_some_and(|cmd| cmd.contains("echo built")),
        || format!("{turn1:#?}"),
    );
    c.check(
        "turn 2's checkpoints: notes.md edited, second.txt created",
        {
            let p = paths(&turn2);
            p.contains(&"edit notes.md".to_string()) && p.contains(&"create second.txt".to_string())
        },
        || format!("{turn2:#?}"),
    );
    c.check("turn 3's checkpoint: second.txt edited", paths(&turn3) == vec!["edit second.txt".to_string()], || {
        format!("{turn3:#?}")
    });

    let history = c.json(&["history", "show", "--turn", "1"]);
    let entries = array(&history, "entries");
    let prompt_ok =
        entries.iter().any(|e| e["role"] == "user" && e["content"].as_str().is_some_and(|s| s.contains("(tb-1)")));
    let reply_ok = entries
        .iter()
        .any(|e| e["role"] == "assistant" && e["content"].as_str().is_some_and(|s| s.contains("Turn one done.")));
    let calls = entries.iter().flat_map(|e| array(e, "toolCalls")).count();
    c.check("turn 1's history: the prompt, the reply and its tool calls", prompt_ok && reply_ok && calls >= 3, || {
        format!("{history:#}")
    });

    let diff = c.text(&["diff", "--turn", "2", "--stat"]);
    c.check(
        "diff --turn 2 names notes.md and second.txt",
        diff.contains("notes.md") && diff.contains("second.txt"),
        || diff.clone(),
    );

    // Rewind to the start of turn 2: the agent's turn 2 and 3 go, the person's file stays.
    let preview = c.json(&["rewind", "--to", "2"]);
    let plan = preview["planId"].as_str().unwrap_or_default().to_string();
    c.check("the rewind preview has a plan", !plan.is_empty(), || format!("{preview:#}"));
    let done = c.json(&["rewind", "--to", "2", "--apply", "--plan", &plan]);
    c.check(
        "rewind to turn 2: notes.md back, second.txt gone, the person's file kept",
        c.file("notes.md").as_deref() == Some("one\n")
            && c.file("second.txt").is_none()
            && c.file("person.txt").as_deref() == Some("mine\n"),
        || {
            format!(
                "{done:#}\nnotes {:?} second {:?} person {:?}",
                c.file("notes.md"),
                c.file("second.txt"),
                c.file("person.txt")
            )
        },
    );
    let undo = done["checkpointId"].as_str().unwrap_or_default().to_string();
    c.json(&["rollback", &undo, "--apply"]);
    c.check(
        "the rewind undone: every file as the agent left it",
        c.file("notes.md").as_deref() == Some("two\n") && c.file("second.txt").as_deref() == Some("third\n"),
        || format!("notes {:?} second {:?}", c.file("notes.md"), c.file("second.txt")),
    );

    let turns_after_undo = array(&c.json(&["turns"]), "turns");
    let history_2 = array(&c.json(&["history", "show", "--turn", "2"]), "entries");
    c.check(
        "the undone rewind brings back the turns and the history it cut",
        turns_after_undo.len() == 3
            && history_2.iter().any(|e| {
                e["role"] == "assistant" && e["content"].as_str().is_some_and(|s| s.contains("Turn two done."))
            }),
        || format!("{turns_after_undo:#?}\n{history_2:#?}"),
    );
    let rollback = c.json(&["rollback", "--turn", "3"]);
    let plan = rollback["planId"].as_str().unwrap_or_default().to_string();
    let applied = c.json(&["rollback", "--turn", "3", "--apply", "--plan", &plan]);
    c.check("rollback --turn 3 takes its edit back", c.file("second.txt").as_deref() == Some("second\n"), || {
        format!("{rollback:#}\n{applied:#}")
    });

    // Healthy but for Codex's trust: these runs bypassed it (its own story covers it).
    let out = c.env.run(&["doctor"], None);
    let doctor = String::from_utf8_lossy(&out.stdout).into_owned();
    let problems: Vec<&str> = doctor.lines().filter(|l| l.starts_with("problem:")).collect();
    let only_trust = problems.iter().all(|p| c.agent == Agent::Codex && p.contains("not trusted in Codex"));
    c.check(
        "doctor sees the agent's hooks installed and its last event, and no other problem",
        doctor.contains("installed")
            && doctor.contains("last event")
            && only_trust
            && (out.status.success() || !problems.is_empty()),
        || doctor.clone(),
    );
    let verify = c.json(&["verify", "--deep"]);
    c.check("verify --deep is clean", verify["ok"] != false, || format!("{verify:#}"));
    c.check_hooks_log_empty();

    c.text(&["install", c.agent.hook_name(), "--uninstall"]);
    // Every file turnback wrote is gone, and each directory it made for them, unless the
    // agent keeps something of its own there (opencode installs its plugin's packages).
    let left: Vec<String> = files
        .iter()
        .flat_map(|f| f.ancestors().take_while(|d| *d != ws.as_path()).map(|d| d.to_path_buf()).collect::<Vec<_>>())
        .filter(|d| {
            d.exists() && (d.is_file() || std::fs::read_dir(d).map(|mut e| e.next().is_none()).unwrap_or(false))
        })
        .map(|d| d.display().to_string())
        .collect();
    c.check("uninstall leaves none of turnback's files or emptied directories behind", left.is_empty(), || {
        format!("{left:?}")
    });
    c.check(".git is byte for byte untouched", tree_bytes(&ws.join(".git")) == git_before, String::new);
    let times = c.hook_times();
    c.check("every hook ran and was timed", !times.is_empty(), String::new);
}

/// The main agent starts a sub-agent (in the background, Claude Code's default) and ends
/// its reply a second and a half later; the sub-agent writes a file, which a person's own
/// hook holds for three seconds before it runs, so the main agent's `Stop` arrives between
/// the write's `PreToolUse` and `PostToolUse`. Claude Code then tells the main agent the sub-agent finished, as a
/// `<task-notification>` prompt.
fn background_subagent_script(t: &Tools) -> Script {
    let task = serde_json::json!({"description": "Write the sub file", "prompt": "Write the sub file. (tb-sub)",
        "subagent_type": "general-purpose"});
    Script::new()
        .prompt(
            "main",
            vec![crate::model::call("Agent", task), Step::After(1500, Box::new(text("The helper is on it.")))],
        )
        .prompt("sub", steps(vec![t.create("sub.txt", "from the sub-agent\n"), vec![text("Sub file written.")]]))
}

fn background_subagent(c: &Ctx) {
    // A person's own PreToolUse hook that takes its time before a Write runs.
    c.env.write(
        ".claude/settings.json",
        serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "Write",
            "hooks": [{"type": "command", "command": "sleep 3"}]}]}})
        .to_string(),
    );
    c.text(&["install", "claude-code"]);
    c.env.write("main.txt", "the person's\n");
    c.prompt("main", "Get the sub file written by a helper.", false);
    c.check("the sub-agent wrote its file", c.file("sub.txt").as_deref() == Some("from the sub-agent\n"), || {
        format!("{:?}", c.file("sub.txt"))
    });
    let turns = array(&c.json(&["turns"]), "turns");
    c.check("one typed prompt is one turn (the task notification is not a turn)", turns.len() == 1, || {
        format!("{turns:#?}")
    });
    let all = array(&c.json(&["checkpoints", "--all"]), "checkpoints");
    let sub = all.iter().find(|cp| paths(std::slice::from_ref(cp)).contains(&"create sub.txt".to_string()));
    let state = sub.map(|cp| cp["mutation"]["commitState"].as_str().unwrap_or("").to_string()).unwrap_or_default();
    c.check(
        "the sub-agent's write is a committed checkpoint, not closed as failed by the main Stop",
        state == "succeeded",
        || format!("{all:#?}"),
    );
    let agent = sub.and_then(|cp| cp["subagent"].as_str()).unwrap_or_default().to_string();
    c.check("the checkpoint names its sub-agent", !agent.is_empty(), || format!("{sub:#?}"));
    let preview = c.json(&["rollback", "--agent", &agent]);
    let plan = preview["planId"].as_str().unwrap_or_default().to_string();
    let done = c.json(&["rollback", "--agent", &agent, "--apply", "--plan", &plan]);
    c.check(
        "rollback --agent takes back exactly the sub-agent's file",
        c.file("sub.txt").is_none() && c.file("main.txt").as_deref() == Some("the person's\n"),
        || format!("{preview:#}\n{done:#}"),
    );
    let history = array(&c.json(&["history", "show"]), "entries");
    let replies = history
        .iter()
        .filter(|e| {
            e["role"] == "assistant" && e["content"].as_str().is_some_and(|s| s.contains("The helper is on it."))
        })
        .count();
    c.check("the main reply is in the history once", replies == 1, || format!("{history:#?}"));
    c.check_hooks_log_empty();
    let order: Vec<String> = c.hook_times().into_iter().map(|(e, _)| e).collect();
    let at = |name: &str| order.iter().position(|e| e == name);
    c.check(
        "the main Stop came between the sub-agent's PreToolUse and PostToolUse (the case of B1)",
        matches!((at("PreToolUse"), at("Stop"), at("PostToolUse")), (Some(a), Some(b), Some(c)) if a < b && b < c),
        || format!("{order:?}"),
    );
}

/// The model writes a secret file; the person's own hook denies the call.
fn denied_script(t: &Tools) -> Script {
    Script::new().prompt("deny", steps(vec![t.create("secret.txt", "hunter2\n"), vec![text("The write was refused.")]]))
}

fn denied(c: &Ctx) {
    c.env.write(
        ".claude/settings.json",
        serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "Write",
            "hooks": [{"type": "command", "command": "echo 'no secrets here' >&2; exit 2"}]}]}})
        .to_string(),
    );
    c.text(&["install", "claude-code"]);
    c.prompt("deny", "Store the password.", false);
    c.check("the person's hook kept the file from being written", c.file("secret.txt").is_none(), String::new);
    let listed = c.text(&["checkpoints", "--all"]);
    let line = listed.lines().find(|l| l.contains("secret.txt")).unwrap_or("").to_string();
    c.check(
        "checkpoints says the denied call failed and changed nothing",
        line.contains("failed, changed nothing"),
        || listed.clone(),
    );
    c.check_hooks_log_empty();
}

/// The model writes a file, then its API fails for good.
fn api_error_script(t: &Tools) -> Script {
    Script::new().prompt("fail", steps(vec![t.create("half.txt", "half\n"), vec![Step::Fail]]))
}

fn api_error(c: &Ctx) {
    c.text(&["install", "claude-code"]);
    let run = c.run_agent("fail", "Write half a file.", false);
    c.check(
        "the agent reports the API error",
        !run.output.status.success() || !run.output.stderr.is_empty() || !run.output.stdout.is_empty(),
        || run.show(),
    );
    let turns = array(&c.json(&["turns"]), "turns");
    c.check("the turn ended with the error (StopFailure)", turns.len() == 1 && turns[0]["endedAt"].is_string(), || {
        format!("{turns:#?}")
    });
    let cps = array(&c.json(&["checkpoints", "--turn", "1"]), "checkpoints");
    c.check("the write before the error is a checkpoint", paths(&cps) == vec!["create half.txt".to_string()], || {
        format!("{cps:#?}")
    });
    c.check_hooks_log_empty();
}

/// The model writes a file, then never answers: the person interrupts.
fn interrupt_script(t: &Tools) -> Script {
    Script::new()
        .prompt("stuck", steps(vec![t.create("begun.txt", "begun\n"), vec![Step::Hang]]))
        .prompt("next", vec![text("Carried on.")])
}

fn interrupt(c: &Ctx) {
    c.text(&["install", c.agent.hook_name()]);
    let mut cmd = c.driver.command(&format!("Start something long. {}", crate::model::marker("stuck")), false);
    cmd.env("TURNBACK_HOOK_TIMINGS", &c.timings);
    let mut child =
        cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().expect("start codex");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while c.file("begun.txt").is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // The model is now thinking forever; the person presses Ctrl-C.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let _ = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    let waited = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while child.try_wait().ok().flatten().is_none() && std::time::Instant::now() < waited {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    let events: Vec<String> = c.hook_times().into_iter().map(|(e, _)| e).collect();
    if c.agent == Agent::Codex {
        c.check(
            "Codex told the hooks turnback installs for it (Interrupt, SessionEnd), and no Stop came",
            events.iter().any(|e| e == "Interrupt" || e == "SessionEnd") && !events.iter().any(|e| e == "Stop"),
            || format!("{events:?}"),
        );
    }
    let turns = array(&c.json(&["turns"]), "turns");
    if matches!(c.agent, Agent::ClaudeCode | Agent::Codex) {
        c.check(
            "after Ctrl-C the turn is ended, not left running until the next prompt",
            turns.len() == 1 && turns[0]["endedAt"].is_string(),
            || format!("hook events {events:?}\n{turns:#?}"),
        );
    } else {
        // Gemini CLI and opencode run no hook, and no plugin event, when interrupted
        // headless: the turn runs on until the next prompt, which ends it.
        c.check(
            "after Ctrl-C the agent told nothing: the turn still runs, with its write recorded",
            turns.len() == 1 && turns[0]["endedAt"].is_null(),
            || format!("hook events {events:?}\n{turns:#?}"),
        );
        c.prompt("next", "Carry on.", true);
        let turns = array(&c.json(&["turns"]), "turns");
        c.check(
            "the next prompt ends the interrupted turn, with its end snapshot, and is a turn of its own",
            turns.len() == 2 && turns[0]["endedAt"].is_string() && turns[0]["endSnapshot"]["id"].is_string(),
            || format!("{turns:#?}"),
        );
    }
    let cps = array(&c.json(&["checkpoints", "--turn", "1"]), "checkpoints");
    c.check(
        "the write before the interrupt is a checkpoint of turn 1",
        paths(&cps) == vec!["create begun.txt".to_string()],
        || format!("{cps:#?}"),
    );
    c.check_hooks_log_empty();
}

fn trust_script(t: &Tools) -> Script {
    Script::new()
        .prompt("1", steps(vec![t.create("one.txt", "one\n"), vec![text("Done.")]]))
        .prompt("2", steps(vec![t.create("two.txt", "two\n"), vec![text("Done again.")]]))
}

/// Codex skips hooks the person has not trusted, silently. doctor must say so even after
/// events arrived (from a run that bypassed trust), agree with Codex's own list, and stop
/// saying so once the person trusted them — after which Codex runs them untrusted no more.
fn trust(c: &Ctx) {
    c.text(&["install", "codex"]);
    c.prompt("1", "Write one.", false);
    let doctor = c.env.run(&["doctor"], None);
    let said = String::from_utf8_lossy(&doctor.stdout).into_owned();
    c.check(
        "after events arrived, doctor still reports turnback's hooks as untrusted in Codex (exit 1)",
        !doctor.status.success() && said.contains("not trusted in Codex") && said.contains("/hooks"),
        || said.clone(),
    );
    let ours: Vec<Value> = c
        .driver
        .codex_hooks()
        .into_iter()
        .filter(|h| h["command"].as_str().is_some_and(|s| s.contains("hook codex")))
        .collect();
    c.check(
        "Codex's own hooks/list agrees: every one of turnback's hooks is untrusted",
        !ours.is_empty() && ours.iter().all(|h| h["trustStatus"] == "untrusted"),
        || format!("{ours:#?}"),
    );
    // The person trusts them, as Codex's /hooks records it.
    let config = c.env.home.join(".codex/config.toml");
    let mut toml = std::fs::read_to_string(&config).unwrap_or_default();
    for h in &ours {
        toml.push_str(&format!("\n[hooks.state.{}]\ntrusted_hash = {}\n", h["key"], h["currentHash"]));
    }
    std::fs::write(&config, toml).unwrap();
    let now: Vec<Value> = c
        .driver
        .codex_hooks()
        .into_iter()
        .filter(|h| h["command"].as_str().is_some_and(|s| s.contains("hook codex")))
        .collect();
    c.check(
        "Codex now lists them as trusted",
        !now.is_empty() && now.iter().all(|h| h["trustStatus"] == "trusted"),
        || format!("{now:#?}"),
    );
    let said = c.text(&["doctor"]);
    c.check("doctor no longer reports them", !said.contains("not trusted in Codex"), || said.clone());
    c.driver.bypass_hook_trust.set(false);
    c.prompt("2", "Write two.", true);
    let turns = array(&c.json(&["turns"]), "turns");
    c.check(
        "trusted, Codex runs the hooks without the bypass flag: the second prompt is a turn",
        turns.len() == 2,
        || format!("{turns:#?}"),
    );
    c.check_hooks_log_empty();
}

/// Two turns, a third after a rewind of the second, and a fourth in a new conversation.
fn resumed_script(t: &Tools) -> Script {
    Script::new()
        .prompt(
            "1",
            steps(vec![t.create("a.txt", "one\n"), t.shell("echo built > built.txt"), vec![text("Turn one done.")]]),
        )
        .prompt("2", steps(vec![t.edit("a.txt", "one", "two"), vec![text("Turn two done.")]]))
        .prompt("3", steps(vec![t.create("c.txt", "three\n"), vec![text("Turn three done.")]]))
        .prompt("4", steps(vec![t.create("d.txt", "four\n"), vec![text("A new conversation.")]]))
}

/// The person rewinds turn 2 with turnback, then carries on the agent's conversation, which
/// still remembers turn 2 (B11): turn 2 stays rewound, its reply never comes back, and an
/// import of the agent's own record adds nothing. That record, imported into a session of
/// no agent, holds every turn with its tool calls and times (B13: Gemini CLI rewrites it
/// with `$set` when resumed within the minute); imported into another session of the
/// agent's, it is refused.
fn resumed(c: &Ctx) {
    c.text(&["install", c.agent.hook_name()]);
    c.prompt("1", "Start a.", false);
    c.prompt("2", "Change a.", true);
    let preview = c.json(&["rewind", "--to", "2"]);
    let plan = preview["planId"].as_str().unwrap_or_default().to_string();
    c.json(&["rewind", "--to", "2", "--apply", "--plan", &plan]);
    c.check("the rewind took turn 2 back", c.file("a.txt").as_deref() == Some("one\n"), || {
        format!("{:?}", c.file("a.txt"))
    });
    c.prompt("3", "Add c.", true);
    c.check("turn 3 created c.txt", c.file("c.txt").as_deref() == Some("three\n"), String::new);

    let listed = c.json(&["turns"]);
    let session = listed["sessionId"].as_str().unwrap_or_default().to_string();
    let turns = array(&listed, "turns");
    let marks: Vec<bool> = turns.iter().map(|t| t["rewound"]["at"].is_string()).collect();
    c.check("three turns, only turn 2 marked rewound", marks == [false, true, false], || format!("{listed:#}"));
    let history = c.json(&["history", "show"]);
    let entries = array(&history, "entries");
    let said = |e: &Value, what: &str| e["content"].as_str().is_some_and(|s| s.contains(what));
    c.check(
        "turn 2's reply did not come back as the agent carried on",
        !entries.iter().any(|e| said(e, "Turn two done.")),
        || format!("{history:#}"),
    );
    let orphan = entries
        .iter()
        .filter(|e| e["role"] == "assistant")
        .find(|reply| !entries.iter().any(|e| e["role"] == "user" && e["turnId"] == reply["turnId"]));
    c.check("every reply in the history has its prompt", orphan.is_none(), || format!("{history:#}"));
    c.check(
        "turns 1 and 3 have their replies",
        entries.iter().any(|e| said(e, "Turn one done.")) && entries.iter().any(|e| said(e, "Turn three done.")),
        || format!("{history:#}"),
    );

    let source = c.transcript_args(&session);
    let source: Vec<&str> = source.iter().map(String::as_str).collect();
    let report = c.json(&[&["history", "import"], &source[..]].concat());
    let after = array(&c.json(&["history", "show"]), "entries");
    c.check(
        "importing the agent's own record adds nothing and says turn 2 was rewound",
        report["turns"] == 0
            && report["rewoundTurns"].as_u64().is_some_and(|n| n >= 1)
            && after.len() == entries.len()
            && array(&c.json(&["turns"]), "turns").len() == 3,
        || format!("{report:#}"),
    );

    c.text(&["session", "new", "--id", "imported"]);
    let whole = c.json(&[&["--session", "imported", "history", "import"], &source[..]].concat());
    let imported = array(&c.json(&["--session", "imported", "turns"]), "turns");
    let starts: Vec<&str> = imported.iter().filter_map(|t| t["startedAt"].as_str()).collect();
    let first = array(&c.json(&["--session", "imported", "history", "show", "--turn", "1"]), "entries");
    let calls = first.iter().flat_map(|e| array(e, "toolCalls")).count();
    c.check(
        "into a session of no agent, the record imports whole: three turns in time order, turn 1 with its tool calls",
        imported.len() == 3 && starts.len() == 3 && starts.windows(2).all(|w| w[0] < w[1]) && calls >= 2,
        || format!("{whole:#}\n{imported:#?}\n{first:#?}\n{}", std::fs::read_to_string(source[1]).unwrap_or_default()),
    );

    // A copy of the first conversation's record: Gemini CLI 0.61.0 may delete it when the
    // next conversation starts (its session cleanup drops a record it does not read back as
    // resumable), and the refusal is about what the record says, not where it is.
    let kept: Vec<String> = source
        .iter()
        .map(|a| match std::path::Path::new(a).file_name() {
            Some(name) if std::path::Path::new(a).is_file() => {
                let copy = c.env.root.join(name);
                std::fs::copy(a, &copy).expect("copy the record");
                copy.to_string_lossy().into_owned()
            }
            _ => (*a).to_string(),
        })
        .collect();
    let source: Vec<&str> = kept.iter().map(String::as_str).collect();
    c.prompt("4", "Start anew.", false);
    let newest = c.json(&["turns"]);
    let out = c.env.run(&[&["history", "import"], &source[..]].concat(), None);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    c.check(
        "a new conversation is a new session, and importing the first one's record into it is refused (exit 2)",
        newest["sessionId"] != session.as_str() && out.status.code() == Some(2) && stderr.contains(&session),
        || {
            let records = crate::common::files_under(&c.env.home);
            format!("{newest:#}\n{}\nthe agent's records: {records:#?}", crate::common::show_output(&out))
        },
    );
    c.check_hooks_log_empty();
}

/// A file written, then one patch that edits and moves it and adds another.
fn moved_script(t: &Tools) -> Script {
    let patch = crate::story::patch(
        "*** Update File: old.txt\n*** Move to: sub/new.txt\n@@\n-one\n+two\n*** Add File: extra.txt\n+extra\n",
    );
    Script::new()
        .prompt("1", steps(vec![t.create("old.txt", "one\n"), vec![text("Written.")]]))
        .prompt("2", vec![crate::model::call("apply_patch", serde_json::json!(patch)), text("Moved.")])
}

/// Codex's patch with a move: one call deletes a file, creates another (in a new
/// directory) and adds a third; `rollback --turn` takes all of it back, and its undo
/// brings all of it again.
fn moved(c: &Ctx) {
    c.text(&["install", "codex"]);
    c.prompt("1", "Write old.", false);
    c.prompt("2", "Move old.", true);
    c.check(
        "the patch moved and edited old.txt and added extra.txt",
        c.file("old.txt").is_none()
            && c.file("sub/new.txt").as_deref() == Some("two\n")
            && c.file("extra.txt").as_deref() == Some("extra\n"),
        || format!("{:?} {:?} {:?}", c.file("old.txt"), c.file("sub/new.txt"), c.file("extra.txt")),
    );
    let cps = array(&c.json(&["checkpoints", "--turn", "2"]), "checkpoints");
    let p = paths(&cps);
    c.check(
        "turn 2's checkpoints: old.txt deleted, sub/new.txt and extra.txt created",
        p.contains(&"delete old.txt".to_string())
            && p.contains(&"create sub/new.txt".to_string())
            && p.contains(&"create extra.txt".to_string()),
        || format!("{p:?}\n{cps:#?}"),
    );
    let preview = c.json(&["rollback", "--turn", "2"]);
    let plan = preview["planId"].as_str().unwrap_or_default().to_string();
    let done = c.json(&["rollback", "--turn", "2", "--apply", "--plan", &plan]);
    c.check(
        "rollback --turn 2: old.txt back as it was, the moved and the added file gone (and the directory made for them)",
        c.file("old.txt").as_deref() == Some("one\n")
            && c.file("sub/new.txt").is_none()
            && !c.env.ws.join("sub").exists()
            && c.file("extra.txt").is_none(),
        || format!("{done:#}"),
    );
    let undo = done["rollbackCheckpointId"].as_str().unwrap_or_default().to_string();
    c.json(&["rollback", &undo, "--apply"]);
    c.check(
        "its undo brings the move back",
        c.file("old.txt").is_none() && c.file("sub/new.txt").as_deref() == Some("two\n"),
        || format!("{:?} {:?}", c.file("old.txt"), c.file("sub/new.txt")),
    );
    c.check_hooks_log_empty();
}

/// Two turns, then (after the person compacts the conversation) a third.
fn compaction_script(t: &Tools) -> Script {
    Script::new()
        .prompt("1", steps(vec![t.create("a.txt", "one\n"), vec![text("Turn one done.")]]))
        .prompt("2", steps(vec![t.edit("a.txt", "one", "two"), vec![text("Turn two done.")]]))
        .prompt("3", steps(vec![t.create("b.txt", "three\n"), vec![text("Turn three done.")]]))
}

/// The person compacts the conversation (`/compact`) between turns 2 and 3: the agent
/// replaces its record with a summary, but turnback's turns, history and checkpoints stay
/// as they were, the compaction is no turn, and the next turn records as any other.
fn compaction(c: &Ctx) {
    c.text(&["install", "claude-code"]);
    c.prompt("1", "Start a.", false);
    c.prompt("2", "Change a.", true);
    let before = array(&c.json(&["history", "show"]), "entries");
    let mut cmd = c.driver.command("/compact", true);
    cmd.env("TURNBACK_HOOK_TIMINGS", &c.timings);
    let run = c.driver.run_command(cmd);
    c.outputs.borrow_mut().push(format!("/compact: {}", run.show()));
    let events: Vec<String> = c.hook_times().into_iter().map(|(e, _)| e).collect();
    c.check("the agent compacted (PreCompact reached the hooks)", events.iter().any(|e| e == "PreCompact"), || {
        format!("{events:?}\n{}", run.show())
    });
    c.prompt("3", "Add b.", true);
    let turns = array(&c.json(&["turns"]), "turns");
    let previews: Vec<&str> = turns.iter().filter_map(|t| t["preview"].as_str()).collect();
    c.check(
        "three turns, one per prompt: the compaction is none",
        turns.len() == 3 && previews.iter().all(|p| p.contains("(tb-")),
        || format!("{turns:#?}"),
    );
    let after = array(&c.json(&["history", "show"]), "entries");
    let kept = before.iter().all(|e| after.iter().any(|a| a["content"] == e["content"] && a["role"] == e["role"]));
    let third = after.iter().any(|e| e["content"].as_str().is_some_and(|s| s.contains("Turn three done.")));
    c.check("the history before compaction is all still there, and turn 3's reply joined it", kept && third, || {
        format!("{after:#?}")
    });
    let cps = array(&c.json(&["checkpoints", "--all"]), "checkpoints");
    c.check("every edit is a checkpoint", paths(&cps).len() == 3, || format!("{:?}", paths(&cps)));
    let preview = c.json(&["rewind", "--to", "2"]);
    let plan = preview["planId"].as_str().unwrap_or_default().to_string();
    c.json(&["rewind", "--to", "2", "--apply", "--plan", &plan]);
    c.check(
        "a rewind across the compaction takes turns 2 and 3 back",
        c.file("a.txt").as_deref() == Some("one\n") && c.file("b.txt").is_none(),
        || format!("{:?} {:?}", c.file("a.txt"), c.file("b.txt")),
    );
    c.check_hooks_log_empty();
}

/// The main agent hands a write to a sub-agent (opencode's `task` tool) and then writes a
/// file of its own.
fn subagent_script(t: &Tools) -> Script {
    let task = serde_json::json!({"description": "Write the sub file", "prompt": format!("Write the sub file. {}", crate::model::marker("sub")),
        "subagent_type": "general"});
    Script::new()
        .prompt(
            "main",
            steps(vec![
                vec![crate::model::call("task", task)],
                t.create("main.txt", "main\n"),
                vec![text("Both written.")],
            ]),
        )
        .prompt("sub", steps(vec![t.create("sub.txt", "from the sub-agent\n"), vec![text("Sub file written.")]]))
}

/// The sub-agent's session is opencode's child session: its write is a checkpoint of the
/// person's turn that names the sub-agent, and `rollback --agent` takes back exactly it.
fn subagent(c: &Ctx) {
    c.text(&["install", "opencode"]);
    c.prompt("main", "Get the sub file written by a helper.", false);
    c.check(
        "the sub-agent and the main agent wrote their files",
        c.file("sub.txt").is_some() && c.file("main.txt").is_some(),
        || format!("{:?} {:?}", c.file("sub.txt"), c.file("main.txt")),
    );
    let turns = array(&c.json(&["turns"]), "turns");
    c.check("one prompt is one turn (the sub-agent's task is none)", turns.len() == 1, || format!("{turns:#?}"));
    let all = array(&c.json(&["checkpoints", "--all"]), "checkpoints");
    let sub = all.iter().find(|cp| paths(std::slice::from_ref(cp)).contains(&"create sub.txt".to_string()));
    let agent = sub.and_then(|cp| cp["subagent"].as_str()).unwrap_or_default().to_string();
    c.check("the sub-agent's write is a checkpoint naming it", !agent.is_empty(), || format!("{all:#?}"));
    let preview = c.json(&["rollback", "--agent", &agent]);
    let plan = preview["planId"].as_str().unwrap_or_default().to_string();
    let done = c.json(&["rollback", "--agent", &agent, "--apply", "--plan", &plan]);
    c.check(
        "rollback --agent takes back the sub-agent's file and nothing else",
        c.file("sub.txt").is_none() && c.file("main.txt").as_deref() == Some("main\n"),
        || format!("{preview:#}\n{done:#}"),
    );
    c.check_hooks_log_empty();
}

fn both_scopes_script(t: &Tools) -> Script {
    Script::new()
        .prompt("1", steps(vec![t.create("a.txt", "one\n"), vec![text("Turn one done.")]]))
        .prompt("2", steps(vec![t.edit("a.txt", "one", "two"), vec![text("Turn two done.")]]))
}

/// The plugin installed for the project and for the user: opencode loads both, so every
/// event arrives twice, at once (B12). One turn per prompt, one checkpoint per edit, each
/// reply once.
fn both_scopes(c: &Ctx) {
    c.text(&["install", "opencode"]);
    c.text(&["install", "opencode", "--scope", "user"]);
    c.prompt("1", "Start a.", false);
    c.prompt("2", "Change a.", true);
    let turns = array(&c.json(&["turns"]), "turns");
    c.check("two turns, one per prompt", turns.len() == 2, || format!("{turns:#?}"));
    let history = array(&c.json(&["history", "show"]), "entries");
    let count = |what: &str| history.iter().filter(|e| e["content"].as_str().is_some_and(|s| s.contains(what))).count();
    c.check("each reply is in the history once", count("Turn one done.") == 1 && count("Turn two done.") == 1, || {
        format!("{history:#?}")
    });
    let cps = array(&c.json(&["checkpoints", "--all"]), "checkpoints");
    c.check(
        "one checkpoint per edit",
        paths(&cps) == vec!["create a.txt".to_string(), "edit a.txt".to_string()],
        || format!("{:?}", paths(&cps)),
    );
    c.check_hooks_log_empty();
}
