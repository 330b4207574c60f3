//! Claude Code, through its hooks as its hooks reference documents them
//! (code.claude.com/docs/en/hooks): the lifecycle cases real sessions produce — a failed
//! `Bash`, a sub-agent's edits taken back alone, a turn ended by an API error, the reply
//! brought in from the transcript at `Stop` — and `turnback doctor` reading the result.

use serde_json::{Value, json};

use crate::common::{Env, claude_event, claude_transcript, hook, parse_json, show_output, stamp, str_at, with};

/// A `Write` through the hooks: PreToolUse, the file written, PostToolUse.
fn write(env: &Env, session: &str, rel: &str, content: &str, id: &str, extra: Value) {
    let mut call = json!({ "tool_name": "Write", "tool_input": { "file_path": env.ws.join(rel), "content": content }, "tool_use_id": id });
    for (k, v) in extra.as_object().unwrap() {
        call[k] = v.clone();
    }
    hook(env, "claude-code", &claude_event(env, session, "PreToolUse", call.clone()));
    env.write(rel, content);
    hook(env, "claude-code", &claude_event(env, session, "PostToolUse", call));
}

#[test]
fn a_failed_bash_command_is_recorded_as_failed_in_its_turn() {
    let env = Env::new();
    let session = "cc-bash";
    hook(&env, "claude-code", &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "fix the config" })));
    // PostToolUseFailure for Bash (hooks reference): the command changed a file, then failed.
    let bash = json!({ "tool_name": "Bash", "tool_input": { "command": "sed -i s/a/b/ conf.ini && false" }, "tool_use_id": "toolu_bash" });
    hook(&env, "claude-code", &claude_event(&env, session, "PreToolUse", bash.clone()));
    env.write("conf.ini", "b\n");
    let mut failed = bash;
    failed["error"] = json!("Exit code 1");
    hook(&env, "claude-code", &claude_event(&env, session, "PostToolUseFailure", failed));
    hook(&env, "claude-code", &claude_event(&env, session, "Stop", json!({ "stop_hook_active": false })));
    let plan = parse_json(&env.run(&["--json", "--session", session, "rewind", "--to", "1"], None));
    assert_eq!(plan["shellEffects"], json!(["sed -i s/a/b/ conf.ini && false"]), "{plan:#}");
    let turns = env.json(&["--session", session, "turns"]);
    assert!(turns["turns"][0]["endedAt"].is_string());
    // The shell's file change is in the turn's snapshots: the rewind takes it back.
    let del = plan["paths"].as_array().unwrap().iter().find(|p| p["path"] == "conf.ini").cloned();
    assert_eq!(del.map(|p| p["action"].clone()), Some(json!("delete")), "{plan:#}");
}

#[test]
fn a_sub_agents_edits_are_rolled_back_alone() {
    let env = Env::new();
    env.write("main.rs", "v0\n");
    env.write("notes.md", "n0\n");
    let session = "cc-sub";
    hook(
        &env,
        "claude-code",
        &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "refactor and document" })),
    );
    write(&env, session, "main.rs", "v1\n", "toolu_main", json!({}));
    // A sub-agent's events carry its agent_id (hooks reference: SubagentStart input).
    let sub = json!({ "agent_id": "a8a5aea3b68767861", "agent_type": "general-purpose" });
    hook(&env, "claude-code", &claude_event(&env, session, "SubagentStart", sub.clone()));
    write(&env, session, "notes.md", "n1\n", "toolu_sub1", sub.clone());
    write(&env, session, "docs.md", "d1\n", "toolu_sub2", sub.clone());
    hook(&env, "claude-code", &claude_event(&env, session, "SubagentStop", sub));
    hook(&env, "claude-code", &claude_event(&env, session, "Stop", json!({ "stop_hook_active": false })));

    let listed = env.run(&["--session", session, "checkpoints"], None);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("(sub-agent a8a5aea3b68767861)"),
        "{}",
        show_output(&listed)
    );
    let preview = env.json(&["--session", session, "rollback", "--agent", "a8a5aea3b68767861"]);
    assert_eq!(preview["targets"].as_array().unwrap().len(), 2, "{preview:#}");
    let plan = str_at(&preview, "/planId").to_string();
    env.ok(&["--session", session, "rollback", "--agent", "a8a5aea3b68767861", "--apply", "--plan", &plan], None);
    assert_eq!(env.read("notes.md").unwrap(), b"n0\n", "the sub-agent's edit is taken back");
    assert!(env.read("docs.md").is_none(), "and its new file removed");
    assert_eq!(env.read("main.rs").unwrap(), b"v1\n", "the main agent's edit stays");
    let unknown = env.fail(&["--session", session, "rollback", "--agent", "nobody"], None);
    assert_eq!(unknown.code, "not-found", "{unknown:?}");
}

#[test]
fn a_stop_failure_ends_the_turn_and_the_reply_comes_from_the_transcript() {
    let env = Env::new();
    let session = "cc-reply";
    hook(
        &env,
        "claude-code",
        &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "explain the parser" })),
    );
    // The transcript Claude Code wrote meanwhile (its documented JSONL rows: uuid,
    // parentUuid, message.content blocks), which the Stop hook's transcript_path names.
    let rows = [
        json!({ "type": "user", "uuid": "u1", "parentUuid": null, "timestamp": stamp(0),
                "message": { "role": "user", "content": "explain the parser" } }),
        json!({ "type": "assistant", "uuid": "a1", "parentUuid": "u1", "timestamp": stamp(2000),
                "message": { "role": "assistant", "content": [ { "type": "thinking", "thinking": "Read lexer first" },
                  { "type": "tool_use", "id": "toolu_r", "name": "Read", "input": { "file_path": "src/lexer.rs" } } ] } }),
        json!({ "type": "user", "uuid": "u2", "parentUuid": "a1", "timestamp": stamp(3000),
                "message": { "role": "user", "content": [ { "type": "tool_result", "tool_use_id": "toolu_r", "content": "fn lex() {}", "is_error": false } ] } }),
        json!({ "type": "assistant", "uuid": "a2", "parentUuid": "u2", "timestamp": stamp(5000),
                "message": { "role": "assistant", "content": [ { "type": "text", "text": "It lexes, then parses." }, { "type": "text", "text": "  \n" } ] } }),
    ];
    let transcript: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(claude_transcript(&env, session), transcript).unwrap();
    // An API error ended the turn: StopFailure, not Stop.
    hook(&env, "claude-code", &claude_event(&env, session, "StopFailure", json!({ "error": "rate_limit" })));

    let turns = env.json(&["--session", session, "turns"]);
    assert!(turns["turns"][0]["endedAt"].is_string(), "{turns:#}");
    let history = env.json(&["--session", session, "history", "show"]);
    let entries = history["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "the prompt, and its reply once: {history:#}");
    assert_eq!(entries[1]["content"], "It lexes, then parses.", "whitespace-only blocks dropped");
    assert_eq!(entries[1]["thinking"], "Read lexer first");
    assert_eq!(entries[1]["toolCalls"][0]["output"], "fn lex() {}");
    // The same Stop delivered again, and the transcript imported by hand: still once.
    hook(
        &env,
        "claude-code",
        &claude_event(
            &env,
            session,
            "Stop",
            json!({ "stop_hook_active": false, "last_assistant_message": "It lexes, then parses." }),
        ),
    );
    let file = claude_transcript(&env, session);
    let imported = env.json(&["--session", session, "history", "import", "--claude-code", file.to_str().unwrap()]);
    assert_eq!(imported["turns"], 0, "{imported:#}");
    let again = env.json(&["--session", session, "history", "show"]);
    assert_eq!(again["entries"].as_array().unwrap().len(), 2, "{again:#}");
    assert_eq!(env.json(&["--session", session, "turns"])["turns"].as_array().unwrap().len(), 1);
}

#[test]
fn without_a_readable_transcript_the_stop_carries_the_reply() {
    let env = Env::new();
    let session = "cc-last";
    hook(&env, "claude-code", &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "say hi" })));
    hook(
        &env,
        "claude-code",
        &claude_event(&env, session, "Stop", json!({ "stop_hook_active": false, "last_assistant_message": "Hi!" })),
    );
    let history = env.json(&["--session", session, "history", "show"]);
    let said: Vec<&str> =
        history["entries"].as_array().unwrap().iter().map(|e| e["content"].as_str().unwrap()).collect();
    assert_eq!(said, ["say hi", "Hi!"]);
}

#[test]
fn a_transcript_path_naming_a_fifo_never_blocks_the_stop_hook() {
    let env = Env::new();
    let session = "cc-fifo";
    let fifo = claude_transcript(&env, session);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    hook(&env, "claude-code", &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "say hi" })));
    // Nothing ever writes to the FIFO: opening it to read would wait forever.
    let stop =
        claude_event(&env, session, "Stop", json!({ "stop_hook_active": false, "last_assistant_message": "Hi!" }));
    let started = std::time::Instant::now();
    let out = env.run(&["hook", "claude-code"], Some(stop.to_string().as_bytes()));
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "the hook returned: {:?}", started.elapsed());
    let turns = env.json(&["--session", session, "turns"]);
    assert!(turns["turns"][0]["endedAt"].is_string(), "the turn ended: {turns:#}");
    let history = env.json(&["--session", session, "history", "show"]);
    assert_eq!(history["entries"][1]["content"], "Hi!", "the stop's reply stands in: {history:#}");
    let log = std::fs::read_to_string(env.store.join("hooks.log")).unwrap_or_default();
    // The log names the code and the event, never the path (it may be anything).
    assert!(log.contains("claude-code invalid-argument: Stop failed"), "the refusal is logged: {log}");
    // The same file given to `history import` is refused at once.
    let out = env.run(&["--session", session, "history", "import", "--claude-code", fifo.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2), "{}", show_output(&out));
}

#[test]
fn a_transcript_path_naming_a_device_or_a_directory_never_blocks_the_stop_hook() {
    let env = Env::new();
    let dir = env.root.join("a-directory.jsonl");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, path) in [std::path::PathBuf::from("/dev/zero"), dir].into_iter().enumerate() {
        let session = format!("cc-odd-{i}");
        let prompt = with(
            claude_event(&env, &session, "UserPromptSubmit", json!({ "prompt": "hi" })),
            json!({
            "transcript_path": path }),
        );
        let out = env.run(&["hook", "claude-code"], Some(prompt.to_string().as_bytes()));
        assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
        let stop = with(prompt, json!({ "hook_event_name": "Stop", "stop_hook_active": false }));
        let started = std::time::Instant::now();
        let out = env.run(&["hook", "claude-code"], Some(stop.to_string().as_bytes()));
        assert_eq!(out.status.code(), Some(0), "{}: {}", path.display(), show_output(&out));
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{}: {:?}", path.display(), started.elapsed());
        let turns = env.json(&["--session", &session, "turns"]);
        assert!(turns["turns"][0]["endedAt"].is_string(), "{}: the turn ended: {turns:#}", path.display());
    }
    let log = std::fs::read_to_string(env.store.join("hooks.log")).unwrap_or_default();
    assert_eq!(log.matches("claude-code invalid-argument: Stop failed").count(), 2, "each refusal logged: {log}");
}

/// Runs a `Stop` hook that stops dead at the end snapshot's failpoint (test builds), with
/// `vars`; returns it once it is there.
fn stuck_stop_hook(env: &Env, session: &str, vars: &[(&str, &str)]) -> std::process::Child {
    use std::io::{BufRead, Write};
    let prompt = claude_event(env, session, "UserPromptSubmit", json!({ "prompt": "hi" }));
    let out = env.run(&["hook", "claude-code"], Some(prompt.to_string().as_bytes()));
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    let stop = claude_event(env, session, "Stop", json!({ "stop_hook_active": false }));
    let mut cmd = env.command(&["hook", "claude-code"]);
    cmd.env("TURNBACK_FAILPOINT", "snapshot-walked");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stop.to_string().as_bytes()).unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("failpoint snapshot-walked reached"), "{line}");
    child
}

#[test]
fn a_hook_ends_within_a_second_of_sigterm_and_within_its_time_bound() {
    let env = Env::new();
    let mut child = stuck_stop_hook(&env, "cc-term", &[]);
    let signalled = std::time::Instant::now();
    let killed = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(0), "a hook always exits 0");
    // One second, and a little for a loaded machine to schedule the process.
    assert!(took < std::time::Duration::from_millis(1500), "SIGTERM ended the hook in {took:?}");
    let log = std::fs::read_to_string(env.store.join("hooks.log")).unwrap_or_default();
    assert!(log.contains("claude-code cancelled: hook ended, stopped by a signal"), "{log}");

    let mut child = stuck_stop_hook(&env, "cc-bound", &[("TURNBACK_HOOK_TIMEOUT_MS", "700")]);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let log = std::fs::read_to_string(env.store.join("hooks.log")).unwrap_or_default();
    assert!(log.contains("claude-code cancelled: hook ended, over its time bound"), "{log}");
    // What the stuck hook did not record, the next event does: the turn ends.
    let stop = claude_event(&env, "cc-bound", "Stop", json!({ "stop_hook_active": false }));
    let out = env.run(&["hook", "claude-code"], Some(stop.to_string().as_bytes()));
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    let turns = env.json(&["--session", "cc-bound", "turns"]);
    assert!(turns["turns"][0]["endedAt"].is_string(), "{turns:#}");
}

#[test]
fn doctor_says_what_is_missing_and_what_reaches_turnback() {
    let env = Env::new();
    let before = env.run(&["--json", "doctor"], None);
    assert_eq!(before.status.code(), Some(1), "no store yet is a problem: {}", show_output(&before));
    let report = parse_json(&before);
    assert_eq!(report["healthy"], false);
    assert!(report["problems"][0]["advice"].as_str().unwrap().contains("turnback install"), "{report:#}");

    env.ok(&["install", "claude-code"], None);
    let installed = parse_json(&env.run(&["--json", "doctor"], None));
    let claude = installed["agents"].as_array().unwrap().iter().find(|a| a["agent"] == "claude-code").unwrap().clone();
    assert_eq!(claude["hooks"][0]["state"], "installed", "{installed:#}");
    assert!(
        installed["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["what"].as_str().unwrap().contains("no event has reached")),
        "installed but silent is a problem: {installed:#}"
    );
    hook(&env, "claude-code", &claude_event(&env, "cc-doctor", "SessionStart", json!({ "source": "startup" })));
    let healthy = env.run(&["--json", "doctor"], None);
    assert_eq!(healthy.status.code(), Some(0), "{}", show_output(&healthy));
    let healthy = parse_json(&healthy);
    let claude = healthy["agents"].as_array().unwrap().iter().find(|a| a["agent"] == "claude-code").unwrap().clone();
    assert!(claude["lastEvent"].as_str().unwrap().ends_with("SessionStart"), "{healthy:#}");
    assert_eq!(healthy["store"]["clean"], true);

    // Hooks from an older turnback (fewer events): outdated, with the fix named.
    let file = env.ws.join(".claude/settings.json");
    let mut settings: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    settings["hooks"].as_object_mut().unwrap().remove("SessionEnd");
    std::fs::write(&file, serde_json::to_string_pretty(&settings).unwrap()).unwrap();
    let outdated = parse_json(&env.run(&["--json", "doctor"], None));
    let problem =
        outdated["problems"].as_array().unwrap().iter().find(|p| p["what"].as_str().unwrap().contains("outdated"));
    assert!(
        problem.is_some_and(|p| p["advice"].as_str().unwrap().contains("turnback install claude-code")),
        "{outdated:#}"
    );
    // A hook failure is reported, with where to read it.
    let out = env.run(&["hook", "claude-code"], Some(b"not json"));
    assert_eq!(out.status.code(), Some(0));
    let failing = parse_json(&env.run(&["--json", "doctor"], None));
    assert_eq!(failing["hookFailures"]["count"], 1, "{failing:#}");
}

#[test]
fn a_reply_joins_the_turn_it_answers_not_an_older_one_with_the_same_words() {
    // A session resumed after turnback was installed: its transcript already holds a "yes"
    // from ten minutes ago; the hooks record only the new "yes".
    let env = Env::new();
    let session = "cc-yes";
    let row = |uuid: &str, parent: Option<&str>, at: i64, role: &str, content: Value| json!({ "type": role, "uuid": uuid, "parentUuid": parent, "timestamp": stamp(at), "message": { "role": role, "content": content } });
    let text = |t: &str| json!([{ "type": "text", "text": t }]);
    let rows = [
        row("u1", None, -600_000, "user", json!("yes")),
        row("a1", Some("u1"), -599_000, "assistant", text("OLD reply: deleted the build dir.")),
        row("u2", Some("a1"), -300_000, "user", json!("fix the test")),
        row("a2", Some("u2"), -299_000, "assistant", text("Fixed it.")),
        row("u3", Some("a2"), 0, "user", json!("yes")),
        row("a3", Some("u3"), 1_000, "assistant", text("NEW reply: pushed.")),
    ];
    hook(&env, "claude-code", &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "yes" })));
    let transcript: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(claude_transcript(&env, session), transcript).unwrap();
    hook(&env, "claude-code", &claude_event(&env, session, "Stop", json!({ "stop_hook_active": false })));
    let history = env.json(&["--session", session, "history", "show"]);
    let said: Vec<&str> =
        history["entries"].as_array().unwrap().iter().map(|e| e["content"].as_str().unwrap()).collect();
    assert_eq!(said, ["yes", "NEW reply: pushed."], "{history:#}");
}

#[test]
fn powershell_and_mcp_tools_are_shell_records_with_secrets_redacted() {
    let env = Env::new();
    let session = "cc-ps";
    hook(&env, "claude-code", &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "clean up" })));
    for (tool, input, id) in [
        ("PowerShell", json!({ "command": "Remove-Item build -Recurse" }), "toolu_ps"),
        ("mcp__github__create_file", json!({ "path": "x", "token": "ghp_secretsecret" }), "toolu_mcp"),
        ("mcp__turnback__write_file", json!({ "path": "y", "content": "z" }), "toolu_own"),
    ] {
        let call = json!({ "tool_name": tool, "tool_input": input, "tool_use_id": id });
        hook(&env, "claude-code", &claude_event(&env, session, "PreToolUse", call.clone()));
        hook(&env, "claude-code", &claude_event(&env, session, "PostToolUse", call));
    }
    hook(&env, "claude-code", &claude_event(&env, session, "Stop", json!({ "stop_hook_active": false })));
    let plan = parse_json(&env.run(&["--json", "--session", session, "rewind", "--to", "1"], None));
    let effects: Vec<String> =
        plan["shellEffects"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_string()).collect();
    assert_eq!(effects.len(), 2, "turnback's own MCP tools checkpoint themselves: {effects:?}");
    assert_eq!(effects[0], "Remove-Item build -Recurse");
    assert!(
        effects[1].starts_with("mcp__github__create_file ") && !effects[1].contains("ghp_secretsecret"),
        "{effects:?}"
    );
}
