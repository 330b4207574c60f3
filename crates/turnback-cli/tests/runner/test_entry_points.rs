//! Every door behaves the same: the command line, the Claude Code hook, `turnback run` and
//! the MCP server go through one facade and one agent protocol, so the same request gives
//! the same turns, history, checkpoints and JSON whichever way it came in.

use serde_json::{Value, json};

use crate::common::{Env, claude_event, history, hook, mcp_client_available, previews, show_output, str_at};

#[test]
fn a_prompt_goes_into_the_history_alike_from_turn_begin_the_hook_and_run() {
    let env = Env::new();
    let prompt = "rename the module — ünïcode too";

    env.ok(&["--session", "by-cli", "turn", "begin", "--prompt", prompt], None);
    env.ok(&["--session", "by-cli", "turn", "end"], None);

    hook(&env, "claude-code", &claude_event(&env, "by-hook", "SessionStart", json!({ "source": "startup" })));
    hook(&env, "claude-code", &claude_event(&env, "by-hook", "UserPromptSubmit", json!({ "prompt": prompt })));
    hook(&env, "claude-code", &claude_event(&env, "by-hook", "Stop", json!({ "stop_hook_active": false })));

    env.ok(&["--session", "by-run", "run", "--prompt", prompt, "--", "true"], None);

    let want = vec![("user".to_string(), prompt.to_string())];
    for session in ["by-cli", "by-hook", "by-run"] {
        assert_eq!(history(&env, session), want, "the history of session {session}");
        assert_eq!(previews(&env, session), [prompt], "the turns of session {session}");
    }
}

/// Begins a turn through the hook and stages a `Write` whose "after" event never comes
/// (Claude Code sends none for a call the person denies); the file is left as it was.
fn abandoned_write(env: &Env, session: &str) {
    env.write("a.txt", "before\n");
    hook(env, "claude-code", &claude_event(env, session, "UserPromptSubmit", json!({ "prompt": "write a.txt" })));
    let input = json!({ "file_path": env.ws.join("a.txt"), "content": "after\n" });
    let pre = json!({ "tool_name": "Write", "tool_input": input, "tool_use_id": "toolu_01denied" });
    hook(env, "claude-code", &claude_event(env, session, "PreToolUse", pre));
}

/// The fields of a session's checkpoints that say how each was closed.
fn closed(env: &Env, session: &str) -> Vec<Value> {
    let list = env.json(&["--session", session, "checkpoints", "--all"]);
    list["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            json!({
                "stageState": c["stageState"],
                "commitState": c["mutation"]["commitState"],
                "kind": c["mutation"]["kind"],
                "effect": c["targets"][0]["effect"],
                "post": c["targets"][0]["postImage"]["digest"] == c["targets"][0]["preImage"]["digest"],
            })
        })
        .collect()
}

#[test]
fn turn_end_closes_an_abandoned_tool_call_as_the_hooks_stop_does() {
    let env = Env::new();
    abandoned_write(&env, "stopped-by-hook");
    hook(&env, "claude-code", &claude_event(&env, "stopped-by-hook", "Stop", json!({ "stop_hook_active": false })));
    abandoned_write(&env, "ended-by-cli");
    env.ok(&["--session", "ended-by-cli", "turn", "end"], None);

    let by_hook = closed(&env, "stopped-by-hook");
    let want = json!([{ "stageState": "committed", "commitState": "failed", "kind": "external", "effect": "edit", "post": true }]);
    assert_eq!(json!(by_hook), want, "the hook's Stop closes the call as failed, with the file as it is");
    assert_eq!(closed(&env, "ended-by-cli"), by_hook, "turn end does the same");
    // Closed, the path can be taken back by a later rollback: nothing stays staged.
    env.assert_verify_clean();
}

/// Replaces ids, plan ids and file versions (device:inode:mtime), which differ between two
/// workspaces, with their kind.
fn masked(v: &Value) -> Value {
    match v {
        Value::String(s) => {
            let uuid = s.len() == 36 && s.chars().filter(|c| *c == '-').count() == 4;
            let hex = s.len() >= 32 && s.chars().all(|c| c.is_ascii_hexdigit());
            let version = s.split(':').count() == 3 && s.split(':').all(|p| p.parse::<u128>().is_ok());
            if uuid {
                json!("<uuid>")
            } else if version {
                json!("<version>")
            } else if hex {
                json!("<hex>")
            } else if s.len() > 20 && s.starts_with("20") && s.ends_with('Z') {
                json!("<time>")
            } else {
                v.clone()
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(masked).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), masked(v))).collect()),
        other => other.clone(),
    }
}

/// An agent's turn: a checkpointed edit and a create, then a person's own edit of another
/// file the agent also wrote.
fn agents_turn(env: &Env) {
    env.write("kept.txt", "mine\n");
    env.write("edit.txt", "one\n");
    env.ok(&["turn", "begin", "--prompt", "the agent's turn"], None);
    env.ok(&["fs", "edit", "edit.txt", "--old", "one", "--new", "two"], None);
    env.ok(&["fs", "create", "new.txt"], Some(b"new\n"));
    env.ok(&["fs", "write", "kept.txt"], Some(b"agent\n"));
    env.ok(&["turn", "end"], None);
    env.write("kept.txt", "the person's\n");
}

#[test]
fn the_command_line_and_mcp_give_the_same_rollback_and_rewind_json_for_the_same_state() {
    if !mcp_client_available() {
        return;
    }
    let env = Env::new();
    agents_turn(&env);
    let cli_rollback = env.run(&["--json", "rollback", "--turn", "1"], None);
    let cli_rollback: Value = serde_json::from_slice(&cli_rollback.stdout).unwrap();
    let cli_rewind: Value = serde_json::from_slice(&env.run(&["--json", "rewind", "--to", "1"], None).stdout).unwrap();
    let got = env.mcp_calls(&[("rollback_preview", json!({ "turn": 1 })), ("rewind_preview", json!({ "to": 1 }))]);
    assert_eq!(got[0]["server"], json!({ "name": "turnback", "version": env!("CARGO_PKG_VERSION") }));
    assert_eq!(got[1], cli_rollback, "a rollback preview of one state is one document, whichever the door");
    assert_eq!(cli_rollback["resultType"], "partial", "the person's edit is a conflict: {cli_rollback:#}");
    assert!(cli_rollback["excludedEffects"].as_array().is_some_and(|e| e.len() == 7));
    // A rewind preview takes a snapshot of the workspace now: only that snapshot's id differs.
    let without_now = |v: &Value| {
        let mut v = v.clone();
        v["currentSnapshot"] = Value::Null;
        v
    };
    assert_eq!(without_now(&got[2]), without_now(&cli_rewind));
    assert_eq!(got[2]["planId"], cli_rewind["planId"], "the same plan");

    // Applying: the same state reached again in a second workspace gives the same document,
    // up to ids and times.
    let other = Env::new();
    agents_turn(&other);
    let cli =
        env.run(&["--json", "rollback", "--turn", "1", "--apply", "--plan", str_at(&cli_rollback, "/planId")], None);
    assert_eq!(cli.status.code(), Some(3), "partial: {}", show_output(&cli));
    let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
    let preview = other.mcp_calls(&[("rollback_preview", json!({ "turn": 1 }))]);
    let plan = str_at(&preview[1], "/planId").to_string();
    let mcp = other.mcp_calls(&[("rollback_apply", json!({ "turn": 1, "plan_id": plan }))]);
    assert_eq!(masked(&mcp[1]), masked(&cli), "a rollback's result is one document, whichever the door");
    assert_eq!(env.read("kept.txt").unwrap(), b"the person's\n", "never overwritten");
    assert_eq!(other.read("kept.txt").unwrap(), b"the person's\n", "never overwritten");
}

#[test]
fn the_plan_id_rule_a_person_may_apply_without_one_an_agent_may_not() {
    if !mcp_client_available() {
        return;
    }
    let env = Env::new();
    env.write("a.txt", "one\n");
    env.ok(&["turn", "begin", "--prompt", "edit"], None);
    env.ok(&["fs", "edit", "a.txt", "--old", "one", "--new", "two"], None);
    env.ok(&["turn", "end"], None);

    let refused = env.mcp_calls(&[("rollback_apply", json!({ "turn": 1 })), ("rewind_apply", json!({ "to": 1 }))]);
    for r in &refused[1..] {
        assert_eq!(r["isError"], true, "{r}");
        assert_eq!(str_at(r, "/error/code"), "invalid-argument", "{r}");
        assert!(str_at(r, "/error/message").starts_with("preview first"), "{r}");
    }
    assert_eq!(env.read("a.txt").unwrap(), b"two\n", "an agent's apply without a plan changes nothing");

    // A stale plan is refused on both doors alike, changing nothing.
    let stale =
        env.mcp_calls(&[("rollback_apply", json!({ "turn": 1, "plan_id": "0123456789abcdef0123456789abcdef" }))]);
    let cli = env.fail(&["rollback", "--turn", "1", "--apply", "--plan", "0123456789abcdef0123456789abcdef"], None);
    assert_eq!((cli.exit, cli.code.as_str()), (20, "conflict"), "{cli:?}");
    // Both doors report it as the same error document.
    assert_eq!(stale[1]["error"], cli.doc["error"], "the MCP error is the CLI's --json error");

    // A person at the command line may apply without naming the plan.
    env.ok(&["rollback", "--turn", "1", "--apply"], None);
    assert_eq!(env.read("a.txt").unwrap(), b"one\n");
}

#[test]
fn a_stop_that_another_hook_blocks_keeps_the_agents_later_edits_in_its_turn() {
    let env = Env::new();
    env.write("app.py", "v0\n");
    let session = "cc-continued";
    hook(&env, "claude-code", &claude_event(&env, session, "SessionStart", json!({ "source": "startup" })));
    hook(&env, "claude-code", &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "fix it" })));
    let write = |content: &str, id: &str| {
        let input = json!({ "file_path": env.ws.join("app.py"), "content": content });
        let call = json!({ "tool_name": "Write", "tool_input": input, "tool_use_id": id });
        hook(&env, "claude-code", &claude_event(&env, session, "PreToolUse", call.clone()));
        env.write("app.py", content);
        let mut post = call;
        post["tool_response"] = json!({ "success": true });
        hook(&env, "claude-code", &claude_event(&env, session, "PostToolUse", post));
    };
    write("v1\n", "toolu_01");
    // A "run the tests first" Stop hook blocks this stop: Claude carries on in the same turn.
    hook(&env, "claude-code", &claude_event(&env, session, "Stop", json!({ "stop_hook_active": false })));
    write("v2\n", "toolu_02");
    let bash =
        json!({ "tool_name": "Bash", "tool_input": { "command": "echo v3 > app.py" }, "tool_use_id": "toolu_03" });
    env.write("app.py", "v3\n");
    let mut post = bash;
    post["tool_response"] = json!({ "stdout": "" });
    hook(&env, "claude-code", &claude_event(&env, session, "PostToolUse", post));
    hook(&env, "claude-code", &claude_event(&env, session, "Stop", json!({ "stop_hook_active": true })));

    let turns = env.json(&["--session", session, "turns"]);
    assert_eq!(turns["turns"].as_array().unwrap().len(), 1, "still one turn: {turns:#}");
    let plan = env.json(&["--session", session, "rewind", "--to", "1"]);
    assert_eq!(plan["resultType"], "full", "everything after the blocked stop is the agent's: {plan:#}");
    let out =
        env.run(&["--session", session, "rewind", "--to", "1", "--apply", "--plan", str_at(&plan, "/planId")], None);
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert_eq!(env.read("app.py").unwrap(), b"v0\n");
}

#[test]
fn an_agents_relative_paths_are_relative_to_its_own_directory_not_the_processs() {
    let mut env = Env::new();
    std::fs::create_dir_all(env.ws.join("src")).unwrap();
    env.write("src/a.txt", "before\n");
    // Claude Code: hooks run with CLAUDE_PROJECT_DIR set to the project (the workspace);
    // a relative file_path is relative to the event's cwd, here a subdirectory.
    let project = env.ws.to_str().unwrap().to_string();
    env.set_var("CLAUDE_PROJECT_DIR", &project);
    let session = "cc-relative";
    let agent_dir = env.ws.join("src");
    let mut prompt = claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "edit" }));
    prompt["cwd"] = json!(agent_dir);
    hook(&env, "claude-code", &prompt);
    let mut pre = claude_event(
        &env,
        session,
        "PreToolUse",
        json!({ "tool_name": "Edit", "tool_input": { "file_path": "a.txt", "old_string": "before", "new_string": "after" }, "tool_use_id": "toolu_rel" }),
    );
    pre["cwd"] = json!(agent_dir);
    // The hook process itself runs elsewhere.
    let out = env.run_in(&env.root, &["hook", "claude-code"], Some(pre.to_string().as_bytes()));
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    let log = std::fs::read_to_string(env.store.join("hooks.log")).unwrap_or_default();
    assert!(log.is_empty(), "{log}");
    let staged = env.json(&["--session", session, "checkpoints", "--all"]);
    assert_eq!(staged["checkpoints"][0]["targets"][0]["path"], "src/a.txt", "{staged:#}");

    // MCP: a relative path is relative to the workspace root, wherever the server started.
    if !mcp_client_available() {
        return;
    }
    let elsewhere = env.root.to_str().unwrap().to_string();
    env.set_var("SERVER_CWD", &elsewhere);
    let got = env.mcp_calls(&[("read_file", json!({ "path": "src/a.txt" }))]);
    assert_eq!(got[1]["content"], "before\n", "{:?}", got[1]);
}

#[test]
fn a_prompt_while_a_turn_runs_a_new_turn_by_the_hook_and_by_turn_begin_new_a_message_otherwise() {
    let env = Env::new();
    // The hook: Claude Code reports a prompt as it starts replying; the one before was
    // interrupted (no Stop), and a call in it was left waiting.
    abandoned_write(&env, "by-hook");
    hook(&env, "claude-code", &claude_event(&env, "by-hook", "UserPromptSubmit", json!({ "prompt": "second" })));
    // The command line, asked for a new turn, does the same.
    abandoned_write(&env, "by-cli");
    let begun = env.json(&["--session", "by-cli", "turn", "begin", "--new", "--prompt", "second"]);
    assert_eq!(begun["abandonedCallsClosed"], 1, "turn begin closes the waiting call too: {begun:#}");
    for session in ["by-hook", "by-cli"] {
        assert_eq!(previews(&env, session), ["write a.txt", "second"], "session {session}");
        let want = [("user", "write a.txt"), ("user", "second")].map(|(r, c)| (r.to_string(), c.to_string()));
        assert_eq!(history(&env, session), want, "session {session}");
    }
    assert_eq!(closed(&env, "by-cli"), closed(&env, "by-hook"), "the waiting call closed alike");

    // Without --new, a message sent while the turn runs joins it, into its history.
    let joined = env.json(&["--session", "by-cli", "turn", "begin", "--prompt", "and the docs"]);
    assert_eq!(joined["joined"], true);
    assert_eq!(previews(&env, "by-cli"), ["write a.txt", "second"]);
    assert_eq!(history(&env, "by-cli").last().unwrap().1, "and the docs");
}

#[test]
fn the_command_line_and_mcp_give_the_same_rewind_result() {
    if !mcp_client_available() {
        return;
    }
    let (cli_env, mcp_env) = (Env::new(), Env::new());
    agents_turn(&cli_env);
    agents_turn(&mcp_env);
    let plan: Value = serde_json::from_slice(&cli_env.run(&["--json", "rewind", "--to", "1"], None).stdout).unwrap();
    let cli = cli_env.run(&["--json", "rewind", "--to", "1", "--apply", "--plan", str_at(&plan, "/planId")], None);
    assert_eq!(cli.status.code(), Some(3), "partial: the person's edit is left alone: {}", show_output(&cli));
    let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
    let preview = mcp_env.mcp_calls(&[("rewind_preview", json!({ "to": 1 }))]);
    let mcp = mcp_env.mcp_calls(&[("rewind_apply", json!({ "to": 1, "plan_id": str_at(&preview[1], "/planId") }))]);
    assert_eq!(masked(&mcp[1]), masked(&cli), "a rewind's result is one document, whichever the door");
    for env in [&cli_env, &mcp_env] {
        assert_eq!(env.read("kept.txt").unwrap(), b"the person's\n", "never overwritten");
        assert_eq!(env.read("edit.txt").unwrap(), b"one\n");
        assert!(env.read("new.txt").is_none());
    }
}

#[test]
fn claude_codes_session_end_and_sub_agents_reach_the_protocol() {
    let env = Env::new();
    env.write("a.txt", "zero\n");
    let session = "cc-subagents";
    hook(&env, "claude-code", &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "delegate" })));
    // Payloads as Claude Code sends them (hooks reference: SubagentStart carries agent_id
    // and agent_type; a sub-agent's tool events carry its agent_id).
    let sub = json!({ "agent_id": "a8a5aea3b68767861", "agent_type": "general-purpose" });
    hook(&env, "claude-code", &claude_event(&env, session, "SubagentStart", sub.clone()));
    let mut pre = json!({ "tool_name": "Write", "tool_input": { "file_path": env.ws.join("a.txt"), "content": "one\n" }, "tool_use_id": "toolu_sub" });
    pre["agent_id"] = sub["agent_id"].clone();
    pre["agent_type"] = sub["agent_type"].clone();
    hook(&env, "claude-code", &claude_event(&env, session, "PreToolUse", pre.clone()));
    env.write("a.txt", "one\n");
    hook(&env, "claude-code", &claude_event(&env, session, "PostToolUse", pre));
    hook(&env, "claude-code", &claude_event(&env, session, "SubagentStop", sub));
    // Esc, then quitting: no Stop, only SessionEnd.
    hook(&env, "claude-code", &claude_event(&env, session, "SessionEnd", json!({ "reason": "prompt_input_exit" })));

    let turns = env.json(&["--session", session, "turns"]);
    assert!(turns["turns"][0]["endedAt"].is_string(), "the session's end ended the turn: {turns:#}");
    let list = env.json(&["--session", session, "checkpoints", "--all"]);
    assert_eq!(list["checkpoints"][0]["subagent"], "a8a5aea3b68767861", "{list:#}");
    // A person's edit after quitting is theirs: rewinding the turn leaves it alone.
    env.write("a.txt", "the person's\n");
    let plan = env.run(&["--json", "--session", session, "rewind", "--to", "1"], None);
    assert_eq!(plan.status.code(), Some(20), "blocked: {}", show_output(&plan));
}

/// A library error that points to a next step carries it as a structured hint, and each
/// door words it as its own: the command line names a command, the MCP server a tool —
/// neither rewrites the other's sentences.
#[test]
fn each_door_words_an_errors_hint_in_its_own_terms_and_both_carry_it_structured() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.ok(&["init"], None);
    let cli = env.fail(&["fs", "create", "a.txt"], Some(b"again\n"));
    assert_eq!(cli.code, "already-exists");
    assert!(cli.message.ends_with("a.txt: already exists (use `turnback fs write` to overwrite)"), "{}", cli.message);
    assert_eq!(cli.doc["error"]["hint"], json!({ "code": "overwrite" }), "{:#}", cli.doc);
    let ended = env.fail(&["turn", "end"], None);
    assert!(ended.message.ends_with("(begin one with `turnback turn begin`)"), "{}", ended.message);
    assert_eq!(ended.doc["error"]["hint"], json!({ "code": "begin-turn" }));
    if !mcp_client_available() {
        return;
    }
    let got =
        env.mcp_calls(&[("create_file", json!({ "path": "a.txt", "content": "again\n" })), ("end_turn", json!({}))]);
    let (created, ended) = (&got[1], &got[2]);
    assert_eq!((created["isError"].clone(), ended["isError"].clone()), (json!(true), json!(true)));
    let message = created["error"]["message"].as_str().unwrap();
    assert!(message.ends_with("a.txt: already exists (use the write_file tool to overwrite)"), "{message}");
    assert_eq!(created["error"]["hint"], json!({ "code": "overwrite" }));
    assert!(ended["error"]["message"].as_str().unwrap().ends_with("(begin one with the begin_turn tool)"), "{ended:#}");
    assert_eq!(env.read("a.txt").unwrap(), b"a\n");
}
