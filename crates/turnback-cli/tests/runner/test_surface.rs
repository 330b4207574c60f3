//! What a person or a program sees at the edges: errors typed by what went wrong (a damaged
//! database, a key file of the wrong shape, a full disk, a missing directory), human output
//! that a file name cannot take over, nothing plain in the hook log, quiet ends into closed
//! pipes, malformed history refused, and installers that do not write outside the project
//! through a symlink.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::common::{Env, claude_event, files_under, hook, mode_of, show_output, unique};

// ---------------------------------------------------------------------------------------
// Item 3: errors typed by what went wrong.

#[test]
fn a_truncated_store_database_is_corrupt_and_not_retryable() {
    for keep in [100u64, 0] {
        let env = Env::new();
        env.ok(&["init"], None);
        for i in 0..40 {
            env.ok(&["fs", "create", &format!("f{i}.txt")], Some(format!("{i}\n").repeat(200).as_bytes()));
        }
        let db = env.store.join("store.db");
        assert!(!env.store.join("store.db-wal").exists(), "the last process checkpointed the WAL");
        let len = std::fs::metadata(&db).unwrap().len();
        // Cut to the first 100 bytes (no whole header), or to half (pages missing).
        let cut = if keep == 0 { len / 2 } else { keep };
        std::fs::OpenOptions::new().write(true).open(&db).unwrap().set_len(cut).unwrap();
        let f = env.fail(&["checkpoints", "--all"], None);
        assert_eq!(f.code, "corrupt", "cut to {cut} of {len} bytes: {:#}", f.doc);
        assert_eq!(f.doc["error"]["retryable"], json!(false), "{:#}", f.doc);
        assert!(!f.doc["error"]["recoveryActions"].as_array().unwrap().is_empty(), "{:#}", f.doc);
        assert!(f.message.contains(&db.display().to_string()), "names the damaged file: {}", f.message);
    }
}

/// A database cut to nothing is an empty SQLite file: without the store's own marker it
/// would silently become a new store (new keys, the history gone without a word).
#[test]
fn a_store_database_emptied_is_corrupt_not_a_new_store() {
    let env = Env::new();
    env.ok(&["init"], None);
    env.ok(&["fs", "create", "a.txt"], Some(b"a\n"));
    let db = env.store.join("store.db");
    std::fs::OpenOptions::new().write(true).open(&db).unwrap().set_len(0).unwrap();
    for args in [&["checkpoints", "--all"][..], &["init"], &["fs", "create", "b.txt"]] {
        let f = env.fail(args, Some(b"b\n"));
        assert_eq!(f.code, "corrupt", "{args:?}: {:#}", f.doc);
        assert!(f.message.contains("emptied or truncated"), "{}", f.message);
    }
    // Each of those found it still empty: none of them made a key or wrote a record.
    // A store whose initialisation never finished (no marker yet) is initialised again.
    std::fs::remove_file(env.store.join("initialized")).unwrap();
    env.ok(&["init"], None);
    assert!(env.store.join("initialized").exists());
}

#[test]
fn a_key_file_of_raw_bytes_is_key_unavailable_saying_what_the_file_must_hold() {
    let mut env = Env::without_key();
    let key = env.root.join("raw.key");
    let mut raw = [0u8; 32];
    raw[0] = 0xff;
    raw[1] = 0xfe;
    std::fs::write(&key, raw).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    env.set_var("TURNBACK_KEY_FILE", &key.display().to_string());
    let f = env.fail(&["init"], None);
    assert_eq!(f.code, "key-unavailable", "{:#}", f.doc);
    assert!(f.message.contains("base64"), "says what the file must hold: {}", f.message);
    assert!(!f.message.contains("UTF-8"), "{}", f.message);
}

#[test]
fn a_key_file_in_a_missing_directory_gets_it_made_owner_only() {
    let mut env = Env::without_key();
    let key = env.root.join("keys/turnback/master.key");
    env.set_var("TURNBACK_KEY_FILE", &key.display().to_string());
    let out = env.run(&["init"], None);
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(".tmp-"), "{}", show_output(&out));
    assert_eq!(mode_of(&key), 0o600);
    assert_eq!(mode_of(key.parent().unwrap()), 0o700);
    assert_eq!(mode_of(&env.root.join("keys")), 0o700);
    env.ok(&["fs", "create", "a.txt"], Some(b"a\n"));
}

/// A small tmpfs, unmounted when dropped; `None` (with a message) when mounting is not
/// permitted here.
struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    fn mount(at: &Path, size: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(at).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(at)
            .stderr(Stdio::null())
            .status();
        match status {
            Ok(s) if s.success() => Some(SmallDisk { dir: at.to_path_buf() }),
            _ => {
                crate::common::tools::skipped("the small-disk checks (mounting a tmpfs needs root)");
                None
            }
        }
    }

    /// Fills the disk to the last byte with one file.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.dir.join("filler")).unwrap();
        let block = vec![0x55u8; 4096];
        while f.write_all(&block).is_ok() {}
        let mut byte = [0u8; 1];
        while f.write_all(&byte).is_ok() {
            byte[0] = 1;
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

#[test]
fn a_full_disk_is_reported_as_disk_full_naming_where() {
    let mut env = Env::new();
    let Some(disk) = SmallDisk::mount(&env.root.join("small"), "4m") else { return };
    let store = disk.dir.join("store");
    env.set_var("TURNBACK_HOME", &store.display().to_string());
    env.ok(&["init"], None);
    env.ok(&["fs", "create", "first.txt"], Some(b"first\n"));
    disk.fill();
    // Content that does not compress, so the store has to grow.
    let noise: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(env.ws.join("big.bin"), &noise).unwrap();
    let f = env.fail(&["stage", "big.bin"], None);
    assert_eq!(f.code, "disk-full", "{:#}", f.doc);
    assert!(f.message.contains("disk full"), "{}", f.message);
    assert!(f.message.contains(&store.display().to_string()), "says where: {}", f.message);
    assert_eq!(f.doc["error"]["retryable"], json!(false));
    std::fs::remove_file(disk.dir.join("filler")).unwrap();
    env.ok(&["fs", "create", "after.txt"], Some(b"after\n"));
    drop(disk);
}

#[test]
fn a_full_workspace_disk_is_disk_full_naming_the_file() {
    let env = Env::new();
    let Some(disk) = SmallDisk::mount(&env.ws.join("small"), "1m") else { return };
    disk.fill();
    let f = env.fail(&["fs", "create", "small/new.txt"], Some(&vec![b'x'; 64 * 1024]));
    assert_eq!(f.code, "disk-full", "{:#}", f.doc);
    assert!(f.message.contains("small"), "says where: {}", f.message);
    drop(disk);
}

// ---------------------------------------------------------------------------------------
// Item 5: nothing plain in the hook log.

#[test]
fn the_hook_log_holds_no_path_or_name_from_an_event() {
    let env = Env::new();
    env.ok(&["init"], None);
    let canary = unique("HOOKCANARY");
    let missing = env.root.join(format!("{canary}-project")).join("plan");
    let events = [
        // A workspace that does not exist: an error naming it.
        json!({ "hook_event_name": "PreToolUse", "session_id": "s1", "cwd": missing, "tool_name": "Write",
                "tool_input": { "file_path": missing.join(format!("{canary}.txt")) }, "tool_use_id": "t1" }),
        // A malformed field holding the canary (a parser quotes what it did not expect).
        json!({ "hook_event_name": "PreToolUse", "session_id": "s1", "cwd": env.ws, "tool_name": "Write",
                "tool_input": { "file_path": [canary.clone()] }, "tool_use_id": "t2" }),
        json!({ "hook_event_name": canary.clone(), "session_id": ["x"], "cwd": canary.clone() }),
    ];
    for event in &events {
        let out = env.run(&["hook", "claude-code"], Some(event.to_string().as_bytes()));
        assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    }
    let mut panicking = env.command(&["hook", "claude-code"]);
    panicking.env("TURNBACK_HOOK_PANIC", "1");
    let mut child = panicking.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    {
        use std::io::Write;
        let event = json!({ "hook_event_name": "UserPromptSubmit", "session_id": "s1", "cwd": env.ws,
                            "prompt": format!("work on {canary}") });
        child.stdin.take().unwrap().write_all(event.to_string().as_bytes()).unwrap();
    }
    assert!(child.wait().unwrap().success());

    let log = std::fs::read_to_string(env.store.join("hooks.log")).unwrap();
    assert!(log.lines().count() >= 3, "the failures are logged: {log}");
    for line in log.lines() {
        assert!(line.contains(" claude-code "), "names the agent: {line}");
    }
    for file in files_under(&env.store) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !bytes.windows(canary.len()).any(|w| w == canary.as_bytes()),
            "the canary appears in plaintext in {}:\n{}",
            file.display(),
            String::from_utf8_lossy(&bytes)
        );
    }
}

// ---------------------------------------------------------------------------------------
// Item 6: file names cannot take over the terminal.

/// Names that a raw print would turn into terminal commands or forged lines.
fn hostile_names() -> Vec<Vec<u8>> {
    vec![
        b"clear\x1b[2Jscreen.txt".to_vec(),
        b"forged\r  restore      harmless.txt".to_vec(),
        b"two\nlines.txt".to_vec(),
        b"bad-\xff\xfe-utf8.txt".to_vec(),
        "bidi-\u{202e}txt.exe".as_bytes().to_vec(),
    ]
}

fn create_named(env: &Env, name: &[u8], content: &[u8]) {
    std::fs::write(env.ws.join(std::ffi::OsStr::from_bytes(name)), content).unwrap();
}

fn assert_no_control(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    assert!(!bytes.contains(&0x1b), "{what}: an escape reached the terminal:\n{text}");
    assert!(!bytes.contains(&b'\r'), "{what}: a carriage return reached the terminal:\n{text}");
    assert!(!text.contains('\u{202e}'), "{what}: a bidi override reached the terminal:\n{text}");
    assert!(std::str::from_utf8(bytes).is_ok(), "{what}: invalid UTF-8 reached the terminal:\n{text}");
    for line in text.lines() {
        assert!(!line.starts_with("lines.txt"), "{what}: a name broke the layout:\n{text}");
    }
}

/// An error's message may carry a name the caller gave: on a terminal it is escaped like
/// every name; the `--json` report keeps it exact.
#[test]
fn error_messages_escape_control_characters_and_json_keeps_them() {
    let env = Env::new();
    env.ok(&["init"], None);
    let name = "gone\u{1b}[2J\rforged.txt";
    let out = env.run(&["fs", "edit", name, "--old", "a", "--new", "b"], None);
    assert_ne!(out.status.code(), Some(0));
    assert!(!out.stderr.contains(&0x1b) && !out.stderr.contains(&b'\r'), "{}", show_output(&out));
    let f = env.fail(&["fs", "edit", name, "--old", "a", "--new", "b"], None);
    assert!(f.message.contains(name), "JSON keeps the exact name: {}", f.message);
}

#[test]
fn diff_rewind_and_rollback_quote_control_characters_in_names() {
    let env = Env::new();
    env.ok(&["init"], None);
    env.ok(&["turn", "begin", "--prompt", "one"], None);
    for name in hostile_names() {
        create_named(&env, &name, b"one\n");
    }
    env.ok(&["turn", "end"], None);
    env.ok(&["turn", "begin", "--prompt", "two"], None);
    for name in hostile_names() {
        create_named(&env, &name, b"two\n");
    }
    let created = env.ok(&["fs", "create", "plain\x1b[31mred.txt"], Some(b"red\n"));
    assert_no_control("fs create", &created.stdout);
    env.ok(&["turn", "end"], None);
    for args in [vec!["checkpoints"], vec!["turns"]] {
        let out = env.ok(&args, None);
        assert_no_control(&format!("{args:?}"), &out.stdout);
    }

    for (args, name) in [
        (vec!["diff", "--turn", "2"], r"clear\033[2Jscreen.txt"),
        (vec!["diff", "--turn", "2", "--stat"], r"clear\033[2Jscreen.txt"),
        (vec!["diff", "--turn", "2", "--numstat"], r"clear\033[2Jscreen.txt"),
        (vec!["rewind", "--to", "2"], r"clear\033[2Jscreen.txt"),
        // The one checkpointed file (the others came in by hand).
        (vec!["rollback", "--turn", "2"], r"plain\033[31mred.txt"),
    ] {
        let out = env.run(&args, None);
        assert!(matches!(out.status.code(), Some(0 | 3 | 20)), "{args:?}: {}", show_output(&out));
        assert_no_control(&format!("{args:?}"), &out.stdout);
        let shown = String::from_utf8_lossy(&out.stdout);
        // Quoted whole, as git does (`"a/clear\033…"` in a patch's headers).
        assert!(shown.contains(name), "{args:?} shows the name quoted:\n{shown}");
    }
    let out = env.run(&["rewind", "--to", "2"], None);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains(r#""forged\r  restore      harmless.txt""#), "{shown}");
    assert!(shown.contains(r#""two\nlines.txt""#), "{shown}");

    // JSON keeps the names exact.
    let diff = env.json(&["diff", "--turn", "2", "--stat"]);
    let paths: Vec<&str> = diff["changes"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
    assert!(paths.contains(&"clear\x1b[2Jscreen.txt"), "{paths:?}");
    assert!(paths.contains(&"two\nlines.txt"), "{paths:?}");
    let rollback = env.json(&["rollback", "--turn", "2"]);
    assert_eq!(rollback["targets"][0]["path"], json!("plain\x1b[31mred.txt"), "{rollback:#}");

    // Applying prints the same quoted names.
    let out = env.run(&["rewind", "--to", "2", "--apply"], None);
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert_no_control("rewind --apply", &out.stdout);

    // A prompt is shown in `turns` with its controls escaped too.
    env.ok(&["turn", "begin", "--prompt", "evil\x1b[2J\rprompt"], None);
    let out = env.ok(&["turns"], None);
    assert_no_control("turns", &out.stdout);
    assert!(String::from_utf8_lossy(&out.stdout).contains(r"evil\033[2J\rprompt"));
}

/// Two names that differ only in bytes that are not UTF-8 never print the same (as U+FFFD):
/// every human listing shows each such byte in octal, in double quotes, as git does.
#[test]
fn names_differing_only_in_invalid_utf8_print_apart_in_octal() {
    use std::ffi::OsStr;
    let env = Env::new();
    env.ok(&["init"], None);
    let (ff, fe): (&[u8], &[u8]) = (b"a\xff.txt", b"a\xfe.txt");
    env.ok(&["turn", "begin", "--prompt", "one"], None);
    create_named(&env, ff, b"by hand\n");
    env.ok(&[OsStr::new("fs"), OsStr::new("write"), OsStr::from_bytes(fe)], Some(b"checkpointed\n"));
    env.ok(&["turn", "end"], None);

    let both = [r#""a\377.txt""#, r#""a\376.txt""#];
    for (args, shown) in [
        (vec!["diff", "--turn", "1"], [r#""a/a\377.txt""#, r#""b/a\376.txt""#]),
        (vec!["diff", "--turn", "1", "--stat"], both),
        (vec!["diff", "--turn", "1", "--numstat"], both),
        (vec!["rewind", "--to", "1"], both),
        (vec!["checkpoints"], [r#""a\376.txt""#; 2]),
        (vec!["rollback", "--turn", "1"], [r#""a\376.txt""#; 2]),
    ] {
        let out = env.run(&args, None);
        assert!(matches!(out.status.code(), Some(0 | 3 | 20)), "{args:?}: {}", show_output(&out));
        assert_no_control(&format!("{args:?}"), &out.stdout);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains('\u{fffd}'), "{args:?} shows a name lossily:\n{text}");
        for name in shown {
            assert!(text.contains(name), "{args:?} shows {name}:\n{text}");
        }
    }
    let out = env.ok(&["rewind", "--to", "1"], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(r#"delete       "a\377.txt""#) && text.contains(r#"delete       "a\376.txt""#), "{text}");

    // `--json` keeps its fields: the exact bytes are for people's output only.
    let diff = env.json(&["diff", "--turn", "1", "--stat"]);
    for c in diff["changes"].as_array().unwrap() {
        let mut keys: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["added", "change", "deleted", "path"], "{c}");
    }
}

/// A shell command and a sub-agent's id come from the agent as they are: `turn shell` and
/// `checkpoints` escape them like a prompt; `--json` keeps them exact.
#[test]
fn turn_shell_and_checkpoints_escape_what_the_agent_sent() {
    let env = Env::new();
    env.ok(&["init"], None);
    env.ok(&["turn", "begin", "--prompt", "one"], None);
    let command = "printf '\x1b]0;pwned\x07'; ls\x1b[2J";
    let out = env.ok(&["turn", "shell", command], None);
    assert_no_control("turn shell", &out.stdout);
    assert!(!out.stdout.contains(&0x07), "a bell reached the terminal: {}", show_output(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(r"printf '\033]0;pwned\a'; ls\033[2J"),
        "{}",
        show_output(&out)
    );
    assert_eq!(env.json(&["turns"])["turns"][0]["shellEffects"][0]["command"], command);

    let session = "cc-hostile";
    env.write("a.txt", "zero\n");
    hook(&env, "claude-code", &claude_event(&env, session, "UserPromptSubmit", json!({ "prompt": "delegate" })));
    let agent_id = "sub\x1b]0;pwned\x07\x1b[2J";
    let write = json!({
        "tool_name": "Write",
        "tool_input": { "file_path": env.ws.join("a.txt"), "content": "one\n" },
        "tool_use_id": "toolu_sub",
        "agent_id": agent_id,
        "agent_type": "general-purpose",
    });
    hook(&env, "claude-code", &claude_event(&env, session, "PreToolUse", write.clone()));
    env.write("a.txt", "one\n");
    hook(&env, "claude-code", &claude_event(&env, session, "PostToolUse", write));
    let out = env.ok(&["--session", session, "checkpoints", "--all"], None);
    assert_no_control("checkpoints", &out.stdout);
    assert!(!out.stdout.contains(&0x07), "a bell reached the terminal: {}", show_output(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains(r"(sub-agent sub\033]0;pwned\a\033[2J)"), "{shown}");
    let list = env.json(&["--session", session, "checkpoints", "--all"]);
    assert_eq!(list["checkpoints"][0]["subagent"], agent_id, "{list:#}");
}

// ---------------------------------------------------------------------------------------
// Item 9: history entries need their content.

#[test]
fn history_append_refuses_an_entry_without_content() {
    let env = Env::new();
    env.ok(&["init"], None);
    env.ok(&["turn", "begin", "--prompt", "p"], None);
    for input in [r#"{"role":"user"}"#, r#"[{"role":"assistant","content":"ok"},{"role":"assistant"}]"#] {
        let f = env.fail(&["history", "append"], Some(input.as_bytes()));
        assert_eq!((f.exit, f.code.as_str()), (2, "invalid-argument"), "{input}: {:#}", f.doc);
        assert!(f.message.contains("content"), "{}", f.message);
    }
    let view = env.json(&["history", "show"]);
    assert_eq!(view["entries"].as_array().unwrap().len(), 1, "only the prompt: {view:#}");
    env.ok(&["history", "append"], Some(br#"{"role":"assistant","content":""}"#));
}

// ---------------------------------------------------------------------------------------
// Item 13: output into a closed pipe ends quietly.

/// Runs `turnback ARGS` with stdout (and, with `close_stderr`, stderr) a pipe whose reader
/// is already gone.
fn into_closed_pipe(env: &Env, args: &[&str], close_stderr: bool) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut cmd = env.command(args);
    cmd.stdin(Stdio::null()).stdout(Stdio::from(writer.try_clone().unwrap()));
    if close_stderr {
        cmd.stderr(Stdio::from(writer));
    } else {
        drop(writer);
        cmd.stderr(Stdio::piped());
    }
    cmd.output().unwrap()
}

#[test]
fn output_into_a_closed_pipe_ends_quietly_from_every_command() {
    let env = Env::new();
    env.ok(&["init"], None);
    env.ok(&["turn", "begin", "--prompt", "p"], None);
    for i in 0..50 {
        env.write(&format!("f{i}.txt"), format!("{i}\n").repeat(100));
    }
    env.ok(&["turn", "end"], None);
    let cases: Vec<Vec<&str>> = vec![
        vec!["--json", "diff", "--turn", "1"],
        vec!["diff", "--turn", "1"],
        vec!["turns"],
        vec!["--json", "history", "show"],
        vec!["history", "export"],
        vec!["completions", "bash"],
        vec!["--help"],
        vec!["--json", "inspect", "no-such-checkpoint"],
        vec!["inspect", "no-such-checkpoint"],
        vec!["no-such-command"],
    ];
    for args in &cases {
        for close_stderr in [false, true] {
            let out = into_closed_pipe(&env, args, close_stderr);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{args:?}: {stderr}");
            assert_ne!(out.status.code(), Some(101), "{args:?} panicked: {stderr}");
            assert!(out.status.code().is_some(), "{args:?} ended by a signal: {:?}", out.status);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Install: no writes outside the project through a symlink.

#[test]
fn install_refuses_a_settings_symlink_pointing_outside_the_project() {
    let env = Env::new();
    let outside = env.root.join("elsewhere/settings.json");
    std::fs::create_dir_all(outside.parent().unwrap()).unwrap();
    std::fs::write(&outside, "{\"theme\": \"dark\"}\n").unwrap();
    std::fs::create_dir_all(env.ws.join(".claude")).unwrap();
    std::os::unix::fs::symlink(&outside, env.ws.join(".claude/settings.json")).unwrap();

    let f = env.fail(&["install", "claude-code"], None);
    assert_eq!(f.code, "path-rejected", "{:#}", f.doc);
    assert!(f.message.contains("--follow-symlinks"), "{}", f.message);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "{\"theme\": \"dark\"}\n", "nothing written");

    // A whole .claude directory linked outside is the same.
    std::fs::remove_dir_all(env.ws.join(".claude")).unwrap();
    std::os::unix::fs::symlink(outside.parent().unwrap(), env.ws.join(".claude")).unwrap();
    let f = env.fail(&["install", "claude-code"], None);
    assert_eq!(f.code, "path-rejected", "{:#}", f.doc);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "{\"theme\": \"dark\"}\n", "nothing written");

    // Asked for, it writes where the link points (and keeps the link).
    let done = env.json(&["install", "claude-code", "--follow-symlinks"]);
    assert_eq!(done["installed"], json!(true), "{done:#}");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&outside).unwrap()).unwrap();
    assert_eq!(written["theme"], json!("dark"));
    assert!(written["hooks"]["PreToolUse"].is_array(), "{written:#}");
    assert!(std::fs::symlink_metadata(env.ws.join(".claude")).unwrap().file_type().is_symlink());
}

#[test]
fn install_writes_through_a_symlink_that_stays_inside_the_project() {
    let env = Env::new();
    let target = env.ws.join("config/claude.json");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::write(&target, "{}\n").unwrap();
    std::fs::create_dir_all(env.ws.join(".claude")).unwrap();
    std::os::unix::fs::symlink("../config/claude.json", env.ws.join(".claude/settings.json")).unwrap();
    env.ok(&["install", "claude-code"], None);
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&target).unwrap()).unwrap();
    assert!(written["hooks"]["PreToolUse"].is_array(), "{written:#}");
    assert!(std::fs::symlink_metadata(env.ws.join(".claude/settings.json")).unwrap().file_type().is_symlink());
}
