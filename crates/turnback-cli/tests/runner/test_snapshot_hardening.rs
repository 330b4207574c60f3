//! Snapshots that keep protecting the workspace when something goes wrong with them: a
//! stat cache that no longer verifies, a file too large to keep, another session's shell
//! changes inside a rewound range, and agent payloads far larger than anything kept.

use std::process::Command;

use serde_json::{Value, json};

use crate::common::{Env, flip_byte_in_rows, parse_json, raw_keys, show_output, str_at};

/// Flips one byte in the middle of every stat cache's own row in `store.db` (a whole cache's
/// manifest, in the current layout); returns how many.
fn corrupt_stat_caches(env: &Env) -> u64 {
    flip_byte_in_rows(env, "statcache", |len| len / 2)
}

fn turn(env: &Env, prompt: &str, work: impl FnOnce(&Env)) {
    env.ok(&["turn", "begin", "--prompt", prompt], None);
    work(env);
    env.ok(&["turn", "end"], None);
}

/// A sparse file of `len` bytes: as large as a disk image to every stat, nothing on disk.
fn sparse(env: &Env, rel: &str, len: u64) {
    let f = std::fs::File::create(env.ws.join(rel)).unwrap();
    f.set_len(len).unwrap();
}

fn set_settings(env: &Env, snapshots: &str) {
    env.ok(&["init"], None);
    std::fs::write(env.store.join("settings.toml"), format!("[snapshots]\n{snapshots}\n")).unwrap();
}

fn path_of<'a>(plan: &'a Value, p: &str) -> Option<&'a Value> {
    plan["paths"].as_array().unwrap().iter().find(|x| x["path"] == p)
}

// ---------------------------------------------------------------------------------------
// A corrupt stat cache
// ---------------------------------------------------------------------------------------

#[test]
fn a_corrupt_stat_cache_is_reported_once_dropped_and_every_file_read_again() {
    let env = Env::new();
    env.write("a.txt", "a0\n");
    env.write("src/b.txt", "b0\n");
    turn(&env, "one", |env| env.write("a.txt", "a1\n"));
    assert!(corrupt_stat_caches(&env) > 0, "the session has a stat cache");
    // verify reports it, as derived data that needs no backup.
    let out = env.run(&["--json", "verify", "--deep"], None);
    let report = parse_json(&out);
    let problem = report["problems"].as_array().unwrap().iter().find(|p| str_at(p, "/what").starts_with("statcache"));
    let actions = problem.unwrap_or_else(|| panic!("{report:#}"))["recoveryActions"].to_string();
    assert!(actions.contains("rebuilt by the next snapshot") && !actions.contains("backup"), "{actions}");

    // The preview (which takes a pre-rewind snapshot) works, and says what happened.
    let out = env.run(&["--json", "rewind", "--to", "1"], None);
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    let plan = parse_json(&out);
    assert_eq!(path_of(&plan, "a.txt").unwrap()["action"], "restore", "{plan:#}");

    // Reported once: the next snapshot finds a good cache again (the one just written).
    let snap = env.json(&["snapshot"]);
    assert!(snap.get("statCacheDropped").is_none(), "reported once only: {snap:#}");

    // Dropped where it is found, by a plain snapshot too: reported, every file read.
    assert!(corrupt_stat_caches(&env) > 0);
    let snap = env.json(&["snapshot"]);
    assert!(str_at(&snap, "/statCacheDropped").contains("did not verify"), "{snap:#}");
    assert_eq!(snap["readFiles"], 2, "every file read in full: {snap:#}");
    assert!(snap["skipped"].is_null());
    let text = env.ok(&["snapshot"], None);
    assert!(!String::from_utf8_lossy(&text.stdout).contains("stat cache"), "not reported twice");

    // A turn begins with its start snapshot, and `turn end` says so on stderr.
    assert!(corrupt_stat_caches(&env) > 0);
    let begun = env.json(&["turn", "begin", "--prompt", "two"]);
    assert!(begun["turn"]["snapshot"]["id"].is_string(), "{begun:#}");
    assert!(begun["turn"]["snapshot"]["skipped"].is_null(), "{begun:#}");
    assert!(corrupt_stat_caches(&env) > 0);
    let ended = env.ok(&["turn", "end"], None);
    assert!(String::from_utf8_lossy(&ended.stderr).contains("stat cache"), "{}", show_output(&ended));
    let turns = env.json(&["turns"]);
    assert!(turns["turns"][1]["endSnapshot"]["id"].is_string(), "{turns:#}");
    env.ok(&["rewind", "--to", "1", "--apply"], None);
    assert_eq!(env.read("a.txt").unwrap(), b"a0\n");
}

#[test]
fn a_snapshot_killed_after_storing_its_stat_cache_pieces_leaves_the_cache_it_would_replace() {
    let env = Env::new();
    // Files written ten seconds ago: settled, so a stat cache vouches for them unread.
    let write_files = |dir: &str, text: &str| {
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
        for i in 0..1100 {
            let rel = format!("{dir}{}/f{i}.txt", i % 10);
            env.write(&rel, text);
            std::fs::File::options().write(true).open(env.ws.join(&rel)).unwrap().set_modified(past).unwrap();
        }
    };
    write_files("a", "one\n");
    env.json(&["snapshot"]);
    let pieces = || raw_keys(&env, "statcache-pieces");
    let named = pieces();
    assert_eq!(named.len(), 1, "a cache of 1,100 files is one piece");
    // 1,100 new files: too many for a delta, so the next snapshot stores a whole cache,
    // piece by piece ahead of its commit. Killed between the two:
    write_files("b", "two\n");
    env.kill_at_failpoint(&["snapshot"], None, "statcache-pieces-stored");
    assert_eq!(pieces().len(), 2, "its pieces were stored");
    // Nothing names them: gc takes them, and only them.
    env.ok(&["gc"], None);
    assert_eq!(pieces(), named);
    // The cache they would have replaced still vouches for the first 1,100 files: only the
    // new ones are read, and nothing is reported.
    let snap = env.json(&["snapshot"]);
    assert!(snap.get("statCacheDropped").is_none(), "{snap:#}");
    assert_eq!((snap["files"].as_u64(), snap["readFiles"].as_u64()), (Some(2200), Some(1100)), "{snap:#}");
    assert_eq!(pieces().len(), 1);
    assert_ne!(pieces(), named, "a new cache replaced the old one");
    // Killed again, and this time the next whole cache clears the stray pieces itself.
    write_files("c", "three\n");
    env.kill_at_failpoint(&["snapshot"], None, "statcache-pieces-stored");
    assert_eq!(pieces().len(), 2);
    write_files("d", "four\n");
    let snap = env.json(&["snapshot"]);
    assert_eq!(snap["readFiles"].as_u64(), Some(2200), "the new files of both: {snap:#}");
    assert_eq!(pieces().len(), 1, "only the cache's own pieces are left");
    env.assert_verify_clean();
}

// ---------------------------------------------------------------------------------------
// One big file
// ---------------------------------------------------------------------------------------

#[test]
fn a_file_over_max_file_size_is_left_out_and_the_rest_is_snapshotted() {
    let env = Env::new();
    env.write("src/main.rs", "v0\n");
    sparse(&env, "disk.img", 3 << 30);
    turn(&env, "one", |env| env.write("src/main.rs", "v1\n"));

    let turns = env.json(&["turns"]);
    let t = &turns["turns"][0];
    assert!(t["snapshot"]["skipped"].is_null(), "the start snapshot is taken: {turns:#}");
    assert!(t["endSnapshot"]["skipped"].is_null(), "{turns:#}");
    let left = &t["snapshot"]["leftOut"][0];
    assert_eq!(left["path"], "disk.img", "{turns:#}");
    assert!(str_at(left, "/reason").contains("max-file-size"), "{turns:#}");
    let text = String::from_utf8_lossy(&env.ok(&["turns"], None).stdout).into_owned();
    assert!(text.contains("left out disk.img"), "{text}");

    let diff = env.json(&["diff", "--turn", "1"]);
    assert_eq!(diff["changes"].as_array().unwrap().len(), 1, "{diff:#}");
    assert_eq!(diff["leftOut"][0]["path"], "disk.img", "{diff:#}");
    let text = String::from_utf8_lossy(&env.ok(&["diff", "--turn", "1", "--stat"], None).stdout).into_owned();
    assert!(text.contains("disk.img"), "{text}");

    let plan = parse_json(&env.run(&["--json", "rewind", "--to", "1"], None));
    assert_eq!(plan["resultType"], "full", "{plan:#}");
    assert_eq!(plan["leftOut"][0]["path"], "disk.img", "{plan:#}");
    let text = String::from_utf8_lossy(&env.run(&["rewind", "--to", "1"], None).stdout).into_owned();
    assert!(text.contains("disk.img"), "{text}");
    env.ok(&["rewind", "--to", "1", "--apply"], None);
    assert_eq!(env.read("src/main.rs").unwrap(), b"v0\n");
    assert_eq!(std::fs::metadata(env.ws.join("disk.img")).unwrap().len(), 3 << 30, "never deleted");
}

#[test]
fn a_large_file_added_later_does_not_switch_later_snapshots_off() {
    let env = Env::new();
    env.write("a.txt", "a0\n");
    turn(&env, "one", |env| env.write("a.txt", "a1\n"));
    // 150 MiB: under max-file-size, but more than a later snapshot may add (100 MiB).
    turn(&env, "two", |env| {
        sparse(env, "model.bin", 150 << 20);
        env.write("a.txt", "a2\n");
    });
    turn(&env, "three", |env| env.write("a.txt", "a3\n"));
    let turns = env.json(&["turns"]);
    for t in turns["turns"].as_array().unwrap() {
        assert!(t["snapshot"]["skipped"].is_null(), "{turns:#}");
        assert!(t["endSnapshot"]["skipped"].is_null(), "{turns:#}");
    }
    let left = &turns["turns"][2]["snapshot"]["leftOut"][0];
    assert_eq!(left["path"], "model.bin", "{turns:#}");
    assert!(str_at(left, "/reason").contains("later-max-size"), "{turns:#}");
    // The rewind takes back the rest of turn 2, and leaves the file it never saw whole
    // alone (a partial rewind, saying why).
    let out = env.run(&["--json", "rewind", "--to", "2", "--apply"], None);
    assert_eq!(out.status.code(), Some(3), "{}", show_output(&out));
    let done = parse_json(&out);
    let model = path_of(&done["plan"], "model.bin").expect("listed");
    assert_eq!(model["reason"], "too-large", "{done:#}");
    assert_eq!(env.read("a.txt").unwrap(), b"a1\n");
    assert!(env.ws.join("model.bin").exists(), "a left-out file is never deleted");
}

#[test]
fn a_file_that_grew_over_the_limit_is_neither_restored_nor_deleted() {
    let env = Env::new();
    set_settings(&env, "max-file-size = \"64 KiB\"");
    env.write("data.csv", "small\n");
    env.write("code.rs", "c0\n");
    turn(&env, "one", |env| {
        env.write("data.csv", "x".repeat(100 << 10));
        env.write("code.rs", "c1\n");
    });
    let plan = parse_json(&env.run(&["--json", "rewind", "--to", "1"], None));
    let data = path_of(&plan, "data.csv").expect("listed");
    assert_eq!(
        (data["action"].as_str(), data["reason"].as_str()),
        (Some("leave-alone"), Some("too-large")),
        "{plan:#}"
    );
    assert_eq!(path_of(&plan, "code.rs").unwrap()["action"], "restore");
    let _ = env.run(&["rewind", "--to", "1", "--apply"], None);
    assert_eq!(env.read("code.rs").unwrap(), b"c0\n");
    assert_eq!(env.read("data.csv").unwrap().len(), 100 << 10, "left as it is");
    // Settings are validated.
    std::fs::write(env.store.join("settings.toml"), "[snapshots]\nmax-file-size = \"12 MB\"\n").unwrap();
    let f = env.fail(&["snapshot"], None);
    assert!(f.message.contains("max-file-size"), "{f:?}");
}

// ---------------------------------------------------------------------------------------
// Another session's shell changes
// ---------------------------------------------------------------------------------------

#[test]
fn a_rewind_leaves_another_sessions_shell_change_alone() {
    let env = Env::new();
    env.write("c.txt", "unformatted\n");
    env.write("a.txt", "a0\n");
    env.ok(&["session", "new", "--id", "a"], None);
    env.ok(&["session", "new", "--id", "b"], None);
    env.ok(&["--session", "a", "turn", "begin", "--prompt", "a1"], None);
    env.write("a.txt", "a1\n");
    // B's turn runs a formatter: no checkpoint, only B's snapshots see the change.
    env.ok(&["--session", "b", "turn", "begin", "--prompt", "format"], None);
    env.write("c.txt", "formatted\n");
    env.ok(&["--session", "b", "turn", "end"], None);
    let diff = env.json(&["--session", "b", "diff", "--turn", "1"]);
    assert_eq!(diff["changes"][0]["path"], "c.txt", "B's snapshots show the change as B's: {diff:#}");
    env.ok(&["--session", "a", "turn", "end"], None);

    let plan = parse_json(&env.run(&["--json", "--session", "a", "rewind", "--to", "1"], None));
    let c = path_of(&plan, "c.txt").expect("listed");
    assert_eq!((c["action"].as_str(), c["reason"].as_str()), (Some("leave-alone"), Some("other-session")), "{plan:#}");
    assert_eq!(path_of(&plan, "a.txt").unwrap()["action"], "restore");
    let _ = env.run(&["--session", "a", "rewind", "--to", "1", "--apply"], None);
    assert_eq!(env.read("c.txt").unwrap(), b"formatted\n", "B's change stays");
    assert_eq!(env.read("a.txt").unwrap(), b"a0\n");
}

#[test]
fn force_takes_back_another_sessions_change_inside_the_rewound_range() {
    let env = Env::new();
    env.write("c.txt", "unformatted\n");
    env.ok(&["session", "new", "--id", "a"], None);
    env.ok(&["session", "new", "--id", "b"], None);
    env.ok(&["--session", "a", "turn", "begin", "--prompt", "a1"], None);
    env.ok(&["--session", "b", "turn", "begin", "--prompt", "format"], None);
    env.write("c.txt", "formatted\n");
    env.ok(&["--session", "b", "turn", "end"], None);
    env.ok(&["--session", "a", "turn", "end"], None);
    env.ok(&["--session", "a", "rewind", "--to", "1", "--apply", "--force", "c.txt"], None);
    assert_eq!(env.read("c.txt").unwrap(), b"unformatted\n");
}

// ---------------------------------------------------------------------------------------
// Memory bounded by what is kept, not by what is sent
// ---------------------------------------------------------------------------------------

/// Runs `turnback ARGS` under `/usr/bin/time -v`: its output and its peak RSS in bytes.
fn measured(env: &Env, args: &[&str], stdin: &[u8]) -> Option<(std::process::Output, u64)> {
    use std::io::Write;
    if !crate::common::tools::available(crate::common::tools::Tool::GnuTime) {
        return None;
    }
    let inner = env.command(args);
    let mut cmd = Command::new("/usr/bin/time");
    cmd.arg("-v").arg(inner.get_program()).args(inner.get_args());
    cmd.current_dir(inner.get_current_dir().unwrap());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let kib: u64 = err
        .lines()
        .find_map(|l| l.trim().strip_prefix("Maximum resident set size (kbytes):"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS in {err}"));
    Some((out, kib * 1024))
}

const HUNDRED_MB: usize = 100_000_000;

#[test]
fn a_100_mb_prompt_to_the_hook_is_read_in_bounded_memory() {
    let env = Env::new();
    let mut prompt = String::from("please look at this\n");
    prompt.push_str(&"y".repeat(HUNDRED_MB));
    let event = json!({
        "session_id": "big",
        "transcript_path": env.root.join("big.jsonl"),
        "cwd": env.ws,
        "hook_event_name": "UserPromptSubmit",
        "prompt": prompt,
    });
    drop(prompt);
    let Some((out, peak)) = measured(&env, &["hook", "claude-code"], event.to_string().as_bytes()) else { return };
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert!(peak < 64 << 20, "peak RSS {peak} bytes for a 100 MB prompt");
    let log = std::fs::read_to_string(env.store.join("hooks.log")).unwrap_or_default();
    assert!(log.is_empty(), "nothing went wrong: {log}");
    let turns = env.json(&["--session", "big", "turns"]);
    assert_eq!(str_at(&turns, "/turns/0/preview"), "please look at this", "{turns:#}");
    let history = env.json(&["--session", "big", "history", "show"]);
    let entry = &history["entries"][0];
    assert!(str_at(entry, "/content").starts_with("please look at this\nyyy"));
    let notes = entry["notes"].to_string();
    assert!(notes.contains(&format!("of {} bytes", HUNDRED_MB + 20)), "the note counts what was sent: {notes}");
}

#[test]
fn the_stop_after_a_100_mb_prompt_reads_the_transcript_in_bounded_memory() {
    let env = Env::new();
    let session = "big-stop";
    let transcript = env.root.join("big-stop.jsonl");
    let event = |name: &str, extra: Value| {
        let mut e =
            json!({ "session_id": session, "transcript_path": transcript, "cwd": env.ws, "hook_event_name": name });
        for (k, v) in extra.as_object().unwrap() {
            e[k] = v.clone();
        }
        e
    };
    let prompt = format!("please look at this\n{}", "y".repeat(HUNDRED_MB));
    crate::common::hook(&env, "claude-code", &event("UserPromptSubmit", json!({ "prompt": prompt })));
    let rows = [
        json!({ "type": "user", "uuid": "u1", "parentUuid": null, "timestamp": crate::common::stamp(0),
                "message": { "role": "user", "content": prompt } }),
        json!({ "type": "assistant", "uuid": "a1", "parentUuid": "u1", "timestamp": crate::common::stamp(2000),
                "message": { "role": "assistant", "content": [ { "type": "text", "text": "Looked." } ] } }),
    ];
    drop(prompt);
    std::fs::write(&transcript, rows.iter().map(|r| format!("{r}\n")).collect::<String>()).unwrap();
    drop(rows);
    let stop = event("Stop", json!({ "stop_hook_active": false }));
    let Some((out, peak)) = measured(&env, &["hook", "claude-code"], stop.to_string().as_bytes()) else { return };
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert!(peak < 64 << 20, "peak RSS {peak} bytes reading a transcript with a 100 MB prompt");
    let log = std::fs::read_to_string(env.store.join("hooks.log")).unwrap_or_default();
    assert!(log.is_empty(), "nothing went wrong: {log}");
    let turns = env.json(&["--session", session, "turns"]);
    assert_eq!(turns["turns"].as_array().unwrap().len(), 1, "the reply joins the hook's turn: {turns:#}");
    let history = env.json(&["--session", session, "history", "show"]);
    assert_eq!(str_at(&history, "/entries/1/content"), "Looked.", "{history:#}");
}

#[test]
fn a_100_mb_history_append_is_read_in_bounded_memory() {
    let env = Env::new();
    env.ok(&["turn", "begin", "--prompt", "p"], None);
    let entry = json!({ "role": "assistant", "content": "z".repeat(HUNDRED_MB) });
    let Some((out, peak)) = measured(&env, &["--json", "history", "append"], entry.to_string().as_bytes()) else {
        return;
    };
    drop(entry);
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert!(peak < 64 << 20, "peak RSS {peak} bytes for a 100 MB entry");
    let done = parse_json(&out);
    let notes = done["appended"][0]["notes"].to_string();
    assert!(notes.contains(&format!("of {HUNDRED_MB} bytes")), "{notes}");
    // Past the document cap (many fields, each under the string cap), refused, not read whole.
    let many: Vec<Value> = (0..40).map(|_| json!({ "role": "assistant", "content": "w".repeat(3 << 20) })).collect();
    let Some((out, peak)) = measured(&env, &["history", "append"], Value::Array(many).to_string().as_bytes()) else {
        return;
    };
    assert_eq!(out.status.code(), Some(2), "refused as a bad argument: {}", show_output(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("larger than 64 MiB"), "{}", show_output(&out));
    assert!(peak < 160 << 20, "peak RSS {peak} bytes");
}

// ---------------------------------------------------------------------------------------
// A person's files named like turnback's temporary files
// ---------------------------------------------------------------------------------------

/// Files a person made whose names look like turnback's temporary files: the writing and
/// swapping names of a write, in the root and below it, the watcher's sync cookie, and a
/// suffix turnback never uses.
const LOOK_ALIKES: &[&str] = &[
    ".a.turnback-0123456789abcdef0123456789abcdef.part",
    "sub/.a.turnback-0123456789abcdef0123456789abcdef.part",
    ".X.turnback-0123456789abcdef0123456789abcdef.tmp",
    "sub/.X.turnback-0123456789abcdef0123456789abcdef.tmp",
    ".X.turnback-0123456789abcdef0123456789abcdef.swapping",
    ".watch.turnback-0123456789abcdef0123456789abcdef.tmp",
    "sub/.watch.turnback-fedcba9876543210fedcba9876543210.tmp",
];

fn look_alike_bytes(rel: &str) -> Vec<u8> {
    format!("a person's file named {rel}\n").into_bytes()
}

fn assert_look_alikes_intact(env: &Env, after: &str) {
    for rel in LOOK_ALIKES {
        assert_eq!(env.read(rel), Some(look_alike_bytes(rel)), "{rel} after {after}");
    }
}

#[test]
fn a_persons_file_named_like_a_turnback_temp_file_survives_snapshot_reconcile_rewind_and_gc() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    for rel in LOOK_ALIKES {
        env.write(rel, look_alike_bytes(rel));
    }
    let changed = "sub/.a.turnback-0123456789abcdef0123456789abcdef.part";
    env.ok(&["init"], None);

    // Snapshotted like any other file.
    let snap = env.json(&["snapshot"]);
    assert_eq!(snap["files"], 1 + LOOK_ALIKES.len() as u64, "every look-alike is recorded: {snap:#}");
    assert_look_alikes_intact(&env, "snapshot");

    let report = env.json(&["reconcile"]);
    assert_eq!(
        (report["tempFilesRemoved"].as_u64(), report["recoveredFiles"].as_array().map(Vec::len)),
        (Some(0), Some(0)),
        "{report:#}"
    );
    assert_look_alikes_intact(&env, "reconcile");

    // A turn: the agent edits a.txt and rewrites one look-alike.
    turn(&env, "edit", |env| {
        env.ok(&["fs", "edit", "a.txt", "--old", "one", "--new", "two"], None);
        env.write(changed, "rewritten in the turn\n");
    });
    let diff = env.json(&["diff", "--turn", "1", "--stat"]).to_string();
    assert!(diff.contains(".a.turnback-0123456789abcdef0123456789abcdef.part"), "the turn's change is seen: {diff}");

    // Rewound: the look-alike the turn changed comes back from the snapshot, the others stay.
    let rewound = env.json(&["rewind", "--to", "1", "--apply"]);
    assert_eq!(rewound["plan"]["resultType"], "full", "{rewound:#}");
    assert_eq!(env.read("a.txt").unwrap(), b"one\n");
    assert_look_alikes_intact(&env, "rewind");

    // The rewind taken back: the turn's version again, the others untouched.
    let undo = str_at(&rewound, "/checkpointId").to_string();
    let undone = env.json(&["rollback", &undo, "--apply"]);
    assert_eq!(undone["resultType"], "full", "{undone:#}");
    assert_eq!(env.read("a.txt").unwrap(), b"two\n");
    assert_eq!(env.read(changed).unwrap(), b"rewritten in the turn\n");
    env.write(changed, look_alike_bytes(changed));

    // A name copied from a real temporary name (the edit's checkpoint, long finished).
    let edit = env.checkpoints().iter().map(|c| str_at(c, "/checkpointId").to_string()).next().unwrap();
    let copied = format!(".a.txt.turnback-{}.tmp", edit.replace('-', ""));
    env.write(&copied, "someone's words\n");

    env.json(&["gc"]);
    let report = env.json(&["reconcile"]);
    assert_eq!(
        (report["tempFilesRemoved"].as_u64(), report["recoveredFiles"].as_array().map(Vec::len)),
        (Some(0), Some(0)),
        "{report:#}"
    );
    let snap = env.json(&["snapshot"]);
    assert_eq!(snap["files"], 2 + LOOK_ALIKES.len() as u64, "{snap:#}");
    assert_look_alikes_intact(&env, "gc, reconcile and another snapshot");
    assert_eq!(env.read(&copied).unwrap(), b"someone's words\n");
    assert_eq!(env.read("a.txt.turnback-recovered"), None, "nothing was renamed");
    env.assert_verify_clean();
}

/// With the file watcher running, a person's file named like its sync cookie (in the root,
/// where cookies are made) is content: its change reaches the next watched snapshot, which
/// agrees with a full walk.
#[test]
fn a_persons_file_named_like_the_watchers_cookie_is_seen_by_watched_snapshots() {
    let mut env = Env::new();
    env.set_var("TURNBACK_WATCH", "auto");
    let cookie = ".watch.turnback-0123456789abcdef0123456789abcdef.tmp";
    env.write(cookie, "first\n");
    env.ok(&["init"], None);
    env.ok(&["watch", "start"], None);
    env.ok(&["snapshot"], None); // the first one with a mark walks everything
    let before = env.json(&["snapshot"]);
    assert_eq!(before["watched"], true, "{before:#}");
    assert_eq!(before["files"], 1, "the look-alike is recorded: {before:#}");
    env.write(cookie, "changed\n");
    let after = env.json(&["snapshot"]);
    assert_eq!(after["watched"], true, "{after:#}");
    assert_ne!(after["root"], before["root"], "the watcher told of the change: {after:#}");
    let full = env.json(&["snapshot", "--full"]);
    assert_eq!(after["root"], full["root"], "watched {after:#}\nfull {full:#}");
    assert_eq!(env.read(cookie).unwrap(), b"changed\n");
    env.ok(&["watch", "stop"], None);
}
