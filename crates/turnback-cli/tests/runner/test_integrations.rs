//! Agent integrations: `turnback run` around any command, Claude Code hooks fed the
//! documented event payloads in order, the settings installer, shell completions.

use serde_json::{Value, json};

use crate::common::{Env, claude_event, mcp_client_available, parse_json, show_output, str_at};

fn hook(env: &Env, event: &Value) {
    let out = env.run(&["hook", "claude-code"], Some(event.to_string().as_bytes()));
    assert_eq!(out.status.code(), Some(0), "a hook always exits 0: {}", show_output(&out));
    assert!(out.stdout.is_empty(), "a hook prints nothing on stdout: {}", show_output(&out));
}

/// A Claude Code hook event of this file's one session.
fn event(env: &Env, name: &str, extra: Value) -> Value {
    claude_event(env, "cc-3f2c9a", name, extra)
}

fn tool(env: &Env, when: &str, id: &str, name: &str, input: Value) -> Value {
    let mut extra = json!({ "tool_name": name, "tool_input": input, "tool_use_id": id });
    if when == "PostToolUse" {
        extra["tool_response"] = json!({ "success": true });
    }
    event(env, when, extra)
}

#[test]
fn run_wraps_any_command_in_a_turn_passes_its_exit_code_and_the_turn_rewinds() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    let out = env
        .run(&["run", "--prompt", "edit things", "--", "sh", "-c", "echo two > a.txt; echo new > b.txt; exit 3"], None);
    assert_eq!(out.status.code(), Some(3), "the command's exit code: {}", show_output(&out));
    let turns = env.json(&["turns"])["turns"].as_array().unwrap().clone();
    assert_eq!(turns.len(), 1);
    assert!(turns[0]["snapshot"]["id"].is_string() && turns[0]["endSnapshot"]["id"].is_string(), "{turns:#?}");
    assert_eq!(turns[0]["preview"], "edit things");
    let history = env.json(&["history", "show"]);
    assert_eq!(history["entries"][0]["content"], "edit things");
    let plan = env.json(&["rewind", "--to", "1"]);
    env.ok(&["rewind", "--to", "1", "--apply", "--plan", str_at(&plan, "/planId")], None);
    assert_eq!(env.read("a.txt").unwrap(), b"one\n");
    assert!(env.read("b.txt").is_none());
}

#[test]
fn claude_code_hooks_record_turns_checkpoints_shell_effects_and_history_and_turn_2_rewinds() {
    let env = Env::new();
    env.write("README.md", "# app\n");
    hook(&env, &event(&env, "SessionStart", json!({ "source": "startup" })));
    hook(&env, &event(&env, "UserPromptSubmit", json!({ "prompt": "create the app" })));
    // Write creates a file: the agent's tool writes it between Pre and Post.
    let main_rs = env.ws.join("src/main.rs");
    let write = json!({ "file_path": main_rs, "content": "fn main() {}\n" });
    hook(&env, &tool(&env, "PreToolUse", "toolu_1", "Write", write.clone()));
    env.write("src/main.rs", "fn main() {}\n");
    hook(&env, &tool(&env, "PostToolUse", "toolu_1", "Write", write.clone()));
    hook(&env, &tool(&env, "PostToolUse", "toolu_1", "Write", write)); // twice: harmless
    let edit = json!({ "file_path": env.ws.join("README.md"), "old_string": "# app", "new_string": "# App" });
    hook(&env, &tool(&env, "PreToolUse", "toolu_2", "Edit", edit.clone()));
    env.write("README.md", "# App\n");
    hook(&env, &tool(&env, "PostToolUse", "toolu_2", "Edit", edit));
    let bash = json!({ "command": "API_TOKEN=abc123 cargo build", "description": "build" });
    hook(&env, &tool(&env, "PreToolUse", "toolu_3", "Bash", bash.clone()));
    hook(&env, &tool(&env, "PostToolUse", "toolu_3", "Bash", bash));
    hook(&env, &event(&env, "Stop", json!({ "stop_hook_active": false })));
    hook(&env, &event(&env, "Stop", json!({ "stop_hook_active": false }))); // twice: harmless
    // Out of order: an "after" with no "before".
    hook(&env, &tool(&env, "PostToolUse", "toolu_9", "Edit", json!({ "file_path": env.ws.join("README.md") })));

    hook(&env, &event(&env, "UserPromptSubmit", json!({ "prompt": "now improve it" })));
    let edit = json!({ "file_path": main_rs, "old_string": "{}", "new_string": "{ println!(\"hi\"); }" });
    hook(&env, &tool(&env, "PreToolUse", "toolu_4", "Edit", edit.clone()));
    env.write("src/main.rs", "fn main() { println!(\"hi\"); }\n");
    hook(&env, &tool(&env, "PostToolUse", "toolu_4", "Edit", edit));
    hook(&env, &event(&env, "Stop", json!({ "stop_hook_active": false })));

    let session = ["--session", "cc-3f2c9a"];
    let turns = env.json(&[&session[..], &["turns"]].concat())["turns"].as_array().unwrap().clone();
    assert_eq!(turns.len(), 2, "{turns:#?}");
    assert_eq!(turns[0]["preview"], "create the app");
    assert!(turns.iter().all(|t| t["endSnapshot"]["id"].is_string()), "{turns:#?}");
    let checkpoints = env.json(&[&session[..], &["checkpoints"]].concat())["checkpoints"].as_array().unwrap().clone();
    assert_eq!(checkpoints.len(), 3, "Write, Edit, Edit: {checkpoints:#?}");
    let history = env.json(&[&session[..], &["history", "show"]].concat());
    let prompts: Vec<&str> =
        history["entries"].as_array().unwrap().iter().map(|e| e["content"].as_str().unwrap()).collect();
    assert_eq!(prompts, ["create the app", "now improve it"]);

    // Rewind turn 2: main.rs back to turn 1's version; the plan names turn 1's shell
    // command only when turn 1 is undone too, redacted.
    let plan = env.json(&[&session[..], &["rewind", "--to", "2"]].concat());
    env.ok(&[&session[..], &["rewind", "--to", "2", "--apply", "--plan", str_at(&plan, "/planId")]].concat(), None);
    assert_eq!(env.read("src/main.rs").unwrap(), b"fn main() {}\n");
    assert_eq!(env.read("README.md").unwrap(), b"# App\n");
    let to1 = parse_json(&env.run(&[&session[..], &["--json", "rewind", "--to", "1"]].concat(), None));
    assert_eq!(to1["shellEffects"], json!(["API_TOKEN=[redacted] cargo build"]), "{to1:#}");
}

#[test]
fn a_failing_hook_logs_and_exits_zero_without_output() {
    let env = Env::new();
    for input in [&b"not json"[..], br#"{"hook_event_name":"PreToolUse","session_id":"s","cwd":"/nonexistent/dir","tool_name":"Write","tool_input":{}}"#] {
        let out = env.run(&["hook", "claude-code"], Some(input));
        assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
        assert!(out.stdout.is_empty());
    }
    let log = std::fs::read_to_string(env.store.join("hooks.log")).unwrap();
    assert_eq!(log.lines().count(), 2, "{log}");
}

#[test]
fn the_installer_merges_into_existing_settings_idempotently_and_uninstalls_cleanly() {
    let env = Env::new();
    let file = env.ws.join(".claude/settings.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let original = json!({
        "permissions": { "allow": ["Bash(npm test)"] },
        "model": "opus",
        "hooks": {
            "PreToolUse": [{ "matcher": "Bash", "hooks": [{ "type": "command", "command": "my-linter --check" }] }],
            "Notification": [{ "hooks": [{ "type": "command", "command": "notify-send done" }] }]
        }
    });
    std::fs::write(&file, serde_json::to_string_pretty(&original).unwrap()).unwrap();
    let first = env.json(&["install", "claude-code"]);
    assert_eq!(first["files"][0]["changed"], true, "{first:#}");
    assert!(first["keySource"].is_string() && first["store"].is_string(), "install leaves turnback ready: {first:#}");
    let installed = std::fs::read(&file).unwrap();
    let second = env.json(&["install", "claude-code"]);
    assert_eq!(second["files"][0]["changed"], false, "{second:#}");
    assert_eq!(std::fs::read(&file).unwrap(), installed, "running it twice changes nothing");
    let settings: Value = serde_json::from_slice(&installed).unwrap();
    assert_eq!(settings["model"], "opus");
    assert_eq!(settings["permissions"], original["permissions"]);
    assert_eq!(settings["hooks"]["Notification"], original["hooks"]["Notification"]);
    for event in [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "Stop",
        "SubagentStart",
        "SubagentStop",
        "SessionEnd",
    ] {
        let ours = settings["hooks"][event]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["hooks"].as_array().unwrap().clone())
            .filter(|h| h["command"].as_str().unwrap().ends_with("turnback hook claude-code"))
            .count();
        assert_eq!(ours, 1, "one turnback hook for {event}: {settings:#}");
    }
    assert_eq!(settings["hooks"]["PreToolUse"][0], original["hooks"]["PreToolUse"][0], "the user's hook stays first");
    env.ok(&["install", "claude-code", "--uninstall"], None);
    let after: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(after, original, "uninstall leaves exactly the user's settings");
    assert_eq!(
        String::from_utf8(std::fs::read(&file).unwrap()).unwrap().trim_end(),
        serde_json::to_string_pretty(&original).unwrap(),
        "in the user's key order"
    );

    // A settings file that is a symlink (a dotfiles manager's) leading outside the project
    // is written through, not replaced, when asked for (test_surface: refused otherwise).
    let real = env.root.join("dotfiles-settings.json");
    std::fs::rename(&file, &real).unwrap();
    std::os::unix::fs::symlink(&real, &file).unwrap();
    env.ok(&["install", "claude-code", "--follow-symlinks"], None);
    assert!(std::fs::symlink_metadata(&file).unwrap().file_type().is_symlink(), "still a link");
    assert!(std::fs::read_to_string(&real).unwrap().contains("hook claude-code"));
}

#[test]
fn completions_are_printed_for_common_shells() {
    let env = Env::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = env.ok(&["completions", shell], None);
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("turnback") && text.contains("rewind"), "{shell}: {}", &text[..text.len().min(200)]);
    }
}

#[test]
fn the_demo_tells_its_story_and_leaves_nothing_behind() {
    let env = Env::new();
    let tmp = env.root.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut cmd = env.command(&["demo"]);
    cmd.env("TMPDIR", &tmp).env_remove("TURNBACK_KEY");
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    for expected in [
        "$ turnback turn begin --prompt \"Create a greeting app\"",
        "LEAVE ALONE  app.py (changed by hand after the last turn)",
        "delete       test_app.py",
        "ran in these turns, not undone: $ pytest > results.txt",
        "return 'Goodbye, ' + name", // the person's fix survived the rewind
        "Says hello, politely.",     // and so did their README edit
        "cat: test_app.py: No such file or directory",
        "rollback full: 2 path(s) restored",
        "1 passed", // restored by undoing the rewind
        "clean: 7 checkpoints",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "the demo's workspace and store are removed");
    assert!(std::fs::read_dir(&env.store).unwrap().next().is_none(), "the user's store is untouched");
}

#[test]
fn an_mcp_client_we_did_not_write_lists_tools_edits_files_and_rolls_back() {
    if !mcp_client_available() {
        return;
    }
    let env = Env::new();
    std::fs::write(env.root.join("outside.txt"), "secret").unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(&script).arg(env!("CARGO_BIN_EXE_turnback")).arg(&env.ws);
    cmd.env("TURNBACK_HOME", &env.store)
        .env("XDG_CONFIG_HOME", &env.conf)
        .env("HOME", &env.home)
        .env("TURNBACK_KEY", crate::common::test_key())
        .env("TURNBACK_NO_KEYCHAIN", "1");
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", show_output(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(r#""rolledBack""#), "{stdout}");
    // The files on disk are back where they were before the client's changes.
    assert!(env.read("notes.md").is_none(), "created then rolled back");
    assert!(env.read("src/app.py").is_none());
    env.assert_verify_clean();
}

#[test]
fn a_slow_snapshot_shows_progress_on_a_terminal_and_never_in_a_pipe() {
    let env = Env::new();
    env.write("big.bin", vec![7u8; 256 * 1024]);
    let flag = env.root.join("go");
    let exe = env!("CARGO_BIN_EXE_turnback");
    // Held after the walk for a second, the snapshot is "more than a moment".
    let release = |flag: std::path::PathBuf| {
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(1200));
            std::fs::write(flag, "").unwrap();
        })
    };
    let waiter = release(flag.clone());
    let mut on_tty = std::process::Command::new("script");
    on_tty.args(["-qec", &format!("'{exe}' snapshot"), "/dev/null"]);
    let mut cmd = env.command::<&str>(&[]);
    for (k, v) in cmd.get_envs().filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))).collect::<Vec<_>>() {
        on_tty.env(k, v);
    }
    on_tty.current_dir(&env.ws).env("TURNBACK_PAUSE", format!("snapshot-walked={}", flag.display()));
    let out = on_tty.output().unwrap();
    waiter.join().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", show_output(&out));
    assert!(shown.contains("snapshot [") && shown.contains('\r'), "no progress bar on a terminal: {shown:?}");

    std::fs::remove_file(&flag).unwrap();
    let waiter = release(flag.clone());
    cmd.arg("snapshot").env("TURNBACK_PAUSE", format!("snapshot-walked={}", flag.display()));
    let piped = cmd.output().unwrap();
    waiter.join().unwrap();
    assert!(piped.status.success(), "{}", show_output(&piped));
    assert!(!String::from_utf8_lossy(&piped.stderr).contains("snapshot ["), "{}", show_output(&piped));
}

#[test]
fn a_denied_edit_and_an_interrupted_turn_leave_every_turn_undoable() {
    let env = Env::new();
    env.write("f.txt", "v0\n");
    let session = ["--session", "cc-3f2c9a"];
    let edit = |id: &str, old: &str, new: &str| json!({ "file_path": env.ws.join("f.txt"), "old_string": old, "new_string": new, "x": id });
    hook(&env, &event(&env, "UserPromptSubmit", json!({ "prompt": "first" })));
    hook(&env, &tool(&env, "PreToolUse", "t1", "Edit", edit("t1", "v0", "v1")));
    env.write("f.txt", "v1\n");
    hook(&env, &tool(&env, "PostToolUse", "t1", "Edit", edit("t1", "v0", "v1")));
    // The person denies this one: Claude Code sends no PostToolUse.
    hook(&env, &tool(&env, "PreToolUse", "t2", "Edit", edit("t2", "v1", "nope")));
    hook(&env, &tool(&env, "PreToolUse", "t3", "Edit", edit("t3", "v1", "v2")));
    env.write("f.txt", "v2\n");
    hook(&env, &tool(&env, "PostToolUse", "t3", "Edit", edit("t3", "v1", "v2")));
    hook(&env, &event(&env, "Stop", json!({})));
    let preview = parse_json(&env.run(&[&session[..], &["--json", "rollback", "--turn", "1"]].concat(), None));
    assert_eq!(preview["resultType"], "full", "the denied edit does not block the turn's rollback: {preview:#}");

    // Interrupted (no Stop), then a new prompt: a new turn, not merged into the old one.
    hook(&env, &event(&env, "UserPromptSubmit", json!({ "prompt": "second" })));
    hook(&env, &tool(&env, "PreToolUse", "t4", "Edit", edit("t4", "v2", "v3")));
    env.write("f.txt", "v3\n");
    hook(&env, &tool(&env, "PostToolUse", "t4", "Edit", edit("t4", "v2", "v3")));
    hook(&env, &event(&env, "UserPromptSubmit", json!({ "prompt": "third" })));
    hook(&env, &event(&env, "UserPromptSubmit", json!({ "prompt": "third" }))); // delivered twice
    hook(&env, &tool(&env, "PreToolUse", "t5", "Edit", edit("t5", "v3", "v4")));
    env.write("f.txt", "v4\n");
    hook(&env, &tool(&env, "PostToolUse", "t5", "Edit", edit("t5", "v3", "v4")));
    hook(&env, &event(&env, "Stop", json!({})));
    let turns = env.json(&[&session[..], &["turns"]].concat())["turns"].as_array().unwrap().clone();
    let previews: Vec<&str> = turns.iter().map(|t| t["preview"].as_str().unwrap()).collect();
    assert_eq!(previews, ["first", "second", "third"]);
    let plan = env.json(&[&session[..], &["rewind", "--to", "3"]].concat());
    env.ok(&[&session[..], &["rewind", "--to", "3", "--apply", "--plan", str_at(&plan, "/planId")]].concat(), None);
    assert_eq!(env.read("f.txt").unwrap(), b"v3\n", "rewinding turn 3 alone keeps turn 2's edit");
}

#[test]
fn run_passes_sigterm_to_the_command_and_still_ends_the_turn() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    let marker = env.root.join("started");
    let script = format!("touch '{}'; exec sleep 30", marker.display());
    let mut child = env
        .command(&["run", "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !marker.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(marker.exists(), "the command never started");
    let started = std::time::Instant::now();
    std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let status = child.wait().unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "the command kept running");
    assert_eq!(status.code(), Some(128 + 15), "the command's own ending, passed through");
    let turns = env.json(&["turns"])["turns"].as_array().unwrap().clone();
    assert!(turns[0]["endedAt"].is_string(), "the turn was ended: {turns:#?}");
}
