//! Shell calls as checkpoints, through an agent's hooks: the files a command creates,
//! modifies, deletes, renames and chmods become one `shell` checkpoint, taken back by
//! `rollback` byte for byte and mode for mode, leaving a person's later edit alone, and
//! itself undoable; a command that changes nothing leaves none.

use std::os::unix::fs::PermissionsExt;

use serde_json::{Value, json};

use crate::common::{Env, claude_event, hook, str_at};

/// A Claude Code `Bash` call through the hooks: PreToolUse, `run` (what the command does
/// to the workspace), PostToolUse.
fn bash(env: &Env, session: &str, id: &str, command: &str, run: impl FnOnce()) {
    let call = json!({ "tool_name": "Bash", "tool_input": { "command": command }, "tool_use_id": id });
    hook(env, "claude-code", &claude_event(env, session, "PreToolUse", call.clone()));
    run();
    let mut done = call;
    done["tool_response"] = json!({ "stdout": "", "stderr": "", "interrupted": false });
    hook(env, "claude-code", &claude_event(env, session, "PostToolUse", done));
}

fn mode(env: &Env, rel: &str) -> u32 {
    std::fs::metadata(env.ws.join(rel)).unwrap().permissions().mode() & 0o7777
}

fn shell_checkpoints(env: &Env, session: &str) -> Vec<Value> {
    let all = env.json(&["--session", session, "checkpoints"])["checkpoints"].as_array().unwrap().clone();
    all.into_iter().filter(|c| c["mutation"]["kind"] == "shell").collect()
}

/// `(path, effect)` of each target, by path.
fn targets(checkpoint: &Value) -> Vec<(String, String)> {
    checkpoint["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (str_at(t, "/path").to_string(), str_at(t, "/effect").to_string()))
        .collect()
}

#[test]
fn a_claude_code_bash_call_is_one_checkpoint_of_exactly_its_files_and_rolls_back_around_a_persons_edit() {
    let env = Env::new();
    env.write("keep.txt", "untouched\n");
    env.write("edit.txt", "e0\n");
    env.write("gone.txt", "d0\n");
    env.write("old-name.txt", "m0\n");
    env.write("run.sh", "#!/bin/sh\n");
    env.write("olddir/deep/x.txt", "x0\n");
    std::fs::set_permissions(env.ws.join("run.sh"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let session = "cc-shell";
    hook(&env, "claude-code", &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "tidy up" })));
    bash(&env, session, "toolu_sh1", "./tidy.sh && chmod +x run.sh", || {
        env.write("new.txt", "n1\n");
        env.write("edit.txt", "e1\n");
        std::fs::remove_file(env.ws.join("gone.txt")).unwrap();
        std::fs::rename(env.ws.join("old-name.txt"), env.ws.join("new-name.txt")).unwrap();
        std::fs::set_permissions(env.ws.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        env.write("gen/sub/out.txt", "generated\n");
        std::fs::remove_dir_all(env.ws.join("olddir")).unwrap();
    });
    // A command that changes nothing leaves no checkpoint.
    bash(&env, session, "toolu_sh2", "git status", || {});

    let shells = shell_checkpoints(&env, session);
    assert_eq!(shells.len(), 1, "one checkpoint, for the command that changed files: {shells:#?}");
    let shell = &shells[0];
    let want = [
        ("edit.txt", "edit"),
        ("gen/sub/out.txt", "create"),
        ("gone.txt", "delete"),
        ("new-name.txt", "create"),
        ("new.txt", "create"),
        ("old-name.txt", "delete"),
        ("olddir/deep/x.txt", "delete"),
        ("run.sh", "edit"),
    ];
    let want: Vec<(String, String)> = want.iter().map(|(p, e)| (p.to_string(), e.to_string())).collect();
    assert_eq!(targets(shell), want, "exactly the command's files: {shell:#}");
    let out_target = shell["targets"].as_array().unwrap().iter().find(|t| t["path"] == "gen/sub/out.txt").unwrap();
    assert_eq!(out_target["createdDirs"], json!(["gen", "gen/sub"]), "the directories it made: {out_target:#}");
    assert_eq!(shell["shell"]["command"], "./tidy.sh && chmod +x run.sh", "{shell:#}");
    assert_eq!(shell["shell"]["callId"], "toolu_sh1", "{shell:#}");
    let listed = String::from_utf8(env.ok(&["--session", session, "checkpoints"], None).stdout).unwrap();
    assert!(listed.contains("shell") && listed.contains("8 files") && listed.contains("./tidy.sh"), "{listed}");

    // A person edits one of its files afterwards: that one is theirs now.
    env.write("edit.txt", "the person's\n");
    let id = str_at(shell, "/checkpointId").to_string();
    let out = env.run(&["--json", "--session", session, "rollback", &id, "--apply"], None);
    assert_eq!(out.status.code(), Some(3), "partial: one path is someone's now; {}", crate::common::show_output(&out));
    let done = crate::common::parse_json(&out);
    assert_eq!(done["resultType"], "partial", "{done:#}");
    assert_eq!(env.read("edit.txt").unwrap(), b"the person's\n", "a person's later edit is left alone");
    let left = done["targets"].as_array().unwrap().iter().find(|t| t["path"] == "edit.txt").unwrap();
    assert_eq!(left["outcome"]["kind"], "conflict", "and reported as someone's later work: {left:#}");
    assert_eq!(env.read("gone.txt").unwrap(), b"d0\n", "a deleted file comes back");
    assert_eq!(env.read("old-name.txt").unwrap(), b"m0\n", "a renamed file comes back under its name");
    assert!(env.read("new-name.txt").is_none() && env.read("new.txt").is_none(), "created files go");
    assert_eq!(mode(&env, "run.sh"), 0o644, "the mode goes back");
    assert!(!env.ws.join("gen").exists(), "the directories it made go with the file it made there");
    assert_eq!(env.read("olddir/deep/x.txt").unwrap(), b"x0\n", "a removed directory's file comes back");
    assert_eq!(env.read("keep.txt").unwrap(), b"untouched\n");

    // The rollback is itself undoable: its undo brings the command's results back.
    let undo = str_at(&done, "/rollbackCheckpointId").to_string();
    env.ok(&["--session", session, "rollback", &undo, "--apply"], None);
    assert_eq!(env.read("new.txt").unwrap(), b"n1\n");
    assert_eq!(env.read("new-name.txt").unwrap(), b"m0\n");
    assert!(env.read("gone.txt").is_none() && env.read("old-name.txt").is_none());
    assert_eq!(mode(&env, "run.sh"), 0o755);
    assert_eq!(env.read("gen/sub/out.txt").unwrap(), b"generated\n");
    assert!(!env.ws.join("olddir/deep/x.txt").exists());
    assert_eq!(env.read("edit.txt").unwrap(), b"the person's\n");
    env.assert_verify_clean();
}

#[test]
fn a_shell_checkpoint_names_its_files_that_an_edit_tool_call_also_changed_inside_its_window() {
    let env = Env::new();
    env.write("a.txt", "a0\n");
    let session = "cc-overlap";
    hook(&env, "claude-code", &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "build" })));
    bash(&env, session, "toolu_build", "make", || {
        env.write("out.txt", "built\n");
        // A background sub-agent's Write lands while the command runs.
        let sub = json!({ "agent_id": "bg1", "agent_type": "general-purpose" });
        let write = json!({ "tool_name": "Write", "tool_input": { "file_path": env.ws.join("a.txt"), "content": "a1\n" }, "tool_use_id": "toolu_w", "agent_id": sub["agent_id"] });
        hook(&env, "claude-code", &claude_event(&env, session, "PreToolUse", write.clone()));
        env.write("a.txt", "a1\n");
        hook(&env, "claude-code", &claude_event(&env, session, "PostToolUse", write));
    });
    let shells = shell_checkpoints(&env, session);
    assert_eq!(shells.len(), 1, "{shells:#?}");
    let want: Vec<(String, String)> =
        [("a.txt", "edit"), ("out.txt", "create")].iter().map(|(p, e)| (p.to_string(), e.to_string())).collect();
    assert_eq!(targets(&shells[0]), want, "the window holds whatever changed in it");
    assert_eq!(shells[0]["shell"]["alsoByToolCalls"], json!(["a.txt"]), "{:#}", shells[0]);
    let id = str_at(&shells[0], "/checkpointId").to_string();
    let shown = String::from_utf8(env.ok(&["--session", session, "inspect", &id], None).stdout).unwrap();
    assert!(shown.contains("also edited by tool calls inside the window") && shown.contains("a.txt"), "{shown}");
    assert!(shown.contains("command     make"), "{shown}");
}

/// A Claude Code tool call by sub-agent `agent` through the hooks: PreToolUse, `run`,
/// PostToolUse.
fn subagent_call(env: &Env, session: &str, agent: &str, call: Value, run: impl FnOnce()) {
    let mut call = call;
    call["agent_id"] = json!(agent);
    call["agent_type"] = json!("general-purpose");
    hook(env, "claude-code", &claude_event(env, session, "PreToolUse", call.clone()));
    run();
    call["tool_response"] = json!({ "stdout": "", "stderr": "", "interrupted": false });
    hook(env, "claude-code", &claude_event(env, session, "PostToolUse", call));
}

#[test]
fn rollback_of_a_subagent_takes_back_its_edits_its_commands_and_what_changed_in_its_window_and_nothing_of_the_main_agents()
 {
    let env = Env::new();
    env.write("main.txt", "m0\n");
    env.write("sub-edit.txt", "s0\n");
    env.write("sub-shell.txt", "c0\n");
    env.write("untracked.txt", "u0\n");
    let session = "cc-subagent";
    let sub = json!({ "agent_id": "agent-7", "agent_type": "general-purpose" });
    hook(&env, "claude-code", &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "delegate" })));
    // The main agent works before the sub-agent starts…
    bash(&env, session, "toolu_main1", "echo main > main.txt", || env.write("main.txt", "m1\n"));
    hook(&env, "claude-code", &claude_event(&env, session, "SubagentStart", sub.clone()));
    // …the sub-agent edits with a tool, runs a command, and changes a file through a
    // call no hook reports (its window is the only record of that)…
    let write = json!({ "tool_name": "Write", "tool_input": { "file_path": env.ws.join("sub-edit.txt"), "content": "s1\n" }, "tool_use_id": "toolu_s1" });
    subagent_call(&env, session, "agent-7", write, || env.write("sub-edit.txt", "s1\n"));
    let shell = json!({ "tool_name": "Bash", "tool_input": { "command": "sed -i s/c0/c1/ sub-shell.txt && touch sub-new.txt" }, "tool_use_id": "toolu_s2" });
    subagent_call(&env, session, "agent-7", shell, || {
        env.write("sub-shell.txt", "c1\n");
        env.write("sub-new.txt", "");
    });
    env.write("untracked.txt", "u1\n");
    std::fs::create_dir_all(env.ws.join("gen")).unwrap();
    env.write("gen/out.txt", "generated\n");
    hook(&env, "claude-code", &claude_event(&env, session, "SubagentStop", sub.clone()));
    // …and the main agent goes on after it.
    bash(&env, session, "toolu_main2", "echo later > main-later.txt", || env.write("main-later.txt", "later\n"));

    let all = env.json(&["--session", session, "checkpoints"])["checkpoints"].as_array().unwrap().clone();
    let of_sub: Vec<&Value> = all.iter().filter(|c| c["subagent"] == "agent-7").collect();
    let kinds: Vec<&str> = of_sub.iter().map(|c| str_at(c, "/mutation/kind")).collect();
    assert_eq!(kinds, ["external", "shell", "subagent"], "its edit, its command, its window: {of_sub:#?}");
    let window = of_sub[2];
    let want: Vec<(String, String)> = [("gen/out.txt", "create"), ("untracked.txt", "edit")]
        .iter()
        .map(|(p, e)| (p.to_string(), e.to_string()))
        .collect();
    assert_eq!(targets(window), want, "the window holds only what no checkpoint inside it covers: {window:#}");
    assert_eq!(
        window["subagentWindow"]["leftToCheckpoints"],
        json!(["sub-edit.txt", "sub-new.txt", "sub-shell.txt"]),
        "{window:#}"
    );
    let listed = String::from_utf8(env.ok(&["--session", session, "checkpoints"], None).stdout).unwrap();
    assert!(listed.contains("sub-agent window  2 files") && listed.contains("(sub-agent agent-7)"), "{listed}");
    let id = str_at(window, "/checkpointId").to_string();
    let shown = String::from_utf8(env.ok(&["--session", session, "inspect", &id], None).stdout).unwrap();
    assert!(shown.contains("from the sub-agent's start to its stop") && shown.contains("sub-shell.txt"), "{shown}");

    let out = env.run(&["--json", "--session", session, "rollback", "--agent", "agent-7", "--apply"], None);
    assert_eq!(out.status.code(), Some(0), "{}", crate::common::show_output(&out));
    let done = crate::common::parse_json(&out);
    assert_eq!(done["resultType"], "full", "{done:#}");
    assert_eq!(env.read("sub-edit.txt").unwrap(), b"s0\n", "its tool edit is taken back");
    assert_eq!(env.read("sub-shell.txt").unwrap(), b"c0\n", "its command's effects are taken back");
    assert!(env.read("sub-new.txt").is_none(), "a file its command created goes");
    assert_eq!(env.read("untracked.txt").unwrap(), b"u0\n", "what changed in its window is taken back");
    assert!(env.read("gen/out.txt").is_none());
    assert_eq!(env.read("main.txt").unwrap(), b"m1\n", "nothing of the main agent's before it");
    assert_eq!(env.read("main-later.txt").unwrap(), b"later\n", "nor after it");

    // Undone, the sub-agent's work is all back.
    let undo = str_at(&done, "/rollbackCheckpointId").to_string();
    env.ok(&["--session", session, "rollback", &undo, "--apply"], None);
    assert_eq!(env.read("sub-edit.txt").unwrap(), b"s1\n");
    assert_eq!(env.read("sub-shell.txt").unwrap(), b"c1\n");
    assert_eq!(env.read("untracked.txt").unwrap(), b"u1\n");
    assert_eq!(env.read("gen/out.txt").unwrap(), b"generated\n");
    env.assert_verify_clean();
}

#[test]
fn a_background_subagents_window_outlives_the_main_agents_stop() {
    let env = Env::new();
    env.write("a.txt", "a0\n");
    let session = "cc-background";
    let sub = json!({ "agent_id": "bg-2", "agent_type": "general-purpose" });
    hook(
        &env,
        "claude-code",
        &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "in the background" })),
    );
    hook(&env, "claude-code", &claude_event(&env, session, "SubagentStart", sub.clone()));
    hook(&env, "claude-code", &claude_event(&env, session, "Stop", json!({ "stop_hook_active": false })));
    // The sub-agent works on after the main agent's stop.
    env.write("a.txt", "a1\n");
    hook(&env, "claude-code", &claude_event(&env, session, "SubagentStop", sub));
    let all = env.json(&["--session", session, "checkpoints"])["checkpoints"].as_array().unwrap().clone();
    let windows: Vec<&Value> = all.iter().filter(|c| c["mutation"]["kind"] == "subagent").collect();
    assert_eq!(windows.len(), 1, "{all:#?}");
    assert_eq!(targets(windows[0]), [("a.txt".to_string(), "edit".to_string())]);
    env.ok(&["--session", session, "rollback", "--agent", "bg-2", "--apply"], None);
    assert_eq!(env.read("a.txt").unwrap(), b"a0\n");
}

#[test]
fn the_turn_names_each_commands_checkpoint_or_says_why_it_had_no_window() {
    let env = Env::new();
    env.write("a.txt", "a0\n");
    let session = "cc-why";
    hook(&env, "claude-code", &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "build" })));
    bash(&env, session, "toolu_w1", "make", || env.write("b.txt", "built\n"));
    // Every snapshot from here on that reads a changed file is over its limit: the next
    // command's window opens (nothing changed yet) but cannot close.
    std::fs::write(env.store.join("settings.toml"), "[snapshots]\nlater-max-files = 0\n").unwrap();
    bash(&env, session, "toolu_w2", "make again", || env.write("c.txt", "built again\n"));
    env.ok(&["--session", session, "turn", "shell", "echo reported afterwards"], None);

    let shells = shell_checkpoints(&env, session);
    assert_eq!(shells.len(), 1, "only the first command has a window: {shells:#?}");
    let turns = env.json(&["--session", session, "turns"]);
    let effects = turns["turns"][0]["shellEffects"].as_array().unwrap().clone();
    assert_eq!(effects.len(), 3, "{effects:#?}");
    assert_eq!(effects[0]["checkpointId"], shells[0]["checkpointId"], "{effects:#?}");
    assert!(effects[0].get("noWindow").is_none(), "{effects:#?}");
    let why = str_at(&effects[1], "/noWindow");
    assert!(why.contains("as it finished was skipped"), "{why}");
    assert!(effects[1].get("checkpointId").is_none());
    assert!(str_at(&effects[2], "/noWindow").contains("reported after it ran"), "{effects:#?}");
    let text = String::from_utf8(env.ok(&["--session", session, "turns"], None).stdout).unwrap();
    assert!(text.contains("$ make  (exit status unknown)  checkpoint "), "{text}");
    assert!(
        text.contains("$ make again  (exit status unknown)  no window: the snapshot as it finished was skipped"),
        "{text}"
    );
    assert!(
        text.contains("$ echo reported afterwards  (exit status unknown)  no window: reported after it ran"),
        "{text}"
    );
}
