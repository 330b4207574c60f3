//! What an attacker (or a broken disk) does to the store's rows directly, and what
//! turnback then says (issue 12, items 1 and 4): a corrupt checkpoint record is listed as
//! `corrupt` and keeps every rollback that meets it from being `full`; `verify --deep`
//! finds rows deleted, reordered or cut from the journal, and names them.
//!
//! Every attack is done for real on `store.db` (see `common::tamper`), between commands.

use serde_json::Value;

use crate::common::{Env, parse_json, raw_keys, show_output, str_at, tamper};

const PARTIAL: i32 = 3;
const BLOCKED: i32 = 20;

/// One turn (`--prompt one`, prompt round 1) in which the agent rewrites `a.txt` and
/// creates `b.txt`; returns the two checkpoint ids, oldest first.
fn one_turn_of_edits(env: &Env) -> (String, String) {
    env.write("a.txt", "person's original\n");
    env.ok(&["turn", "begin", "--prompt", "one"], None);
    let a = str_at(&env.json_with(&["fs", "write", "a.txt"], Some(b"agent's a\n")), "/checkpointId").to_string();
    let b = str_at(&env.json_with(&["fs", "create", "b.txt"], Some(b"agent's b\n")), "/checkpointId").to_string();
    env.ok(&["history", "append"], Some(br#"{"role":"assistant","content":"done"}"#));
    env.ok(&["turn", "end"], None);
    (a, b)
}

/// Flips the last byte of the sealed checkpoint records with these ids.
fn flip_checkpoint_records(env: &Env, ids: &[&str]) {
    tamper(env, |c| {
        for id in ids {
            let value: Vec<u8> = c
                .query_row("SELECT value FROM kv WHERE ns = 'checkpoints' AND key = ?1", [id.as_bytes()], |r| r.get(0))
                .expect("the checkpoint record is in the store");
            let mut value = value;
            *value.last_mut().expect("non-empty record") ^= 0x01;
            c.execute("UPDATE kv SET value = ?1 WHERE ns = 'checkpoints' AND key = ?2", (value, id.as_bytes()))
                .expect("flip a byte");
        }
    });
}

/// Deletes the rows of table `ns` whose keys `pick` selects; returns how many went.
fn delete_rows(env: &Env, ns: &str, pick: impl Fn(&[u8]) -> bool) -> usize {
    let keys: Vec<Vec<u8>> = raw_keys(env, ns).into_iter().filter(|k| pick(k)).collect();
    tamper(env, |c| {
        for k in &keys {
            for table in ["kv", "kv_large"] {
                c.execute(&format!("DELETE FROM {table} WHERE ns = ?1 AND key = ?2"), (ns, k)).expect("delete row");
            }
        }
    });
    keys.len()
}

/// `verify --deep --json`, asserted to find problems; returns them.
fn verify_problems(env: &Env) -> Vec<Value> {
    let out = env.run(&["--json", "verify", "--deep"], None);
    let report = parse_json(&out);
    assert_eq!(report["clean"], false, "verify --deep must see the damage: {report:#}");
    assert_eq!(out.status.code(), Some(1), "verify exits 1 with problems: {}", show_output(&out));
    report["problems"].as_array().expect("problems").clone()
}

/// Whether some problem's `what` or message mentions every one of `words`.
fn names(problems: &[Value], words: &[&str]) -> bool {
    problems.iter().any(|p| {
        let text = format!("{} {}", p["what"].as_str().unwrap_or(""), p["message"].as_str().unwrap_or(""));
        words.iter().all(|w| text.contains(w))
    })
}

// ---------------------------------------------------------------------------------------
// Item 1: corrupt checkpoint records in listings and rollbacks
// ---------------------------------------------------------------------------------------

#[test]
fn corrupt_checkpoint_records_are_listed_as_corrupt() {
    let env = Env::new();
    let (a, b) = one_turn_of_edits(&env);
    flip_checkpoint_records(&env, &[&a, &b]);

    assert_eq!(env.fail(&["inspect", &a], None).code, "corrupt");
    for args in [vec!["checkpoints", "--all"], vec!["checkpoints"], vec!["checkpoints", "--turn", "1"]] {
        let list = env.json(&args);
        let corrupt: Vec<&str> =
            list["corrupt"].as_array().expect("corrupt array").iter().map(|c| str_at(c, "/checkpointId")).collect();
        assert_eq!(corrupt, [a.as_str(), b.as_str()], "`{}` lists both corrupt records: {list:#}", args.join(" "));
        for c in list["corrupt"].as_array().unwrap() {
            assert_eq!(c["integrityState"], "corrupt", "{list:#}");
            assert_eq!(c["promptRound"], 1, "the index knows the round of a record it cannot open: {list:#}");
        }
        let text = String::from_utf8_lossy(&env.ok(&args, None).stdout).into_owned();
        assert!(!text.contains("no checkpoints"), "`{}` must not say there are none:\n{text}", args.join(" "));
        assert!(text.contains(&a) && text.contains(&b) && text.contains("corrupt"), "{text}");
    }
    // Another round's listing does not claim them.
    let other = env.json(&["checkpoints", "--turn", "2"]);
    assert_eq!(other["corrupt"].as_array().map(Vec::len), Some(0), "{other:#}");
}

#[test]
fn a_rollback_that_meets_only_corrupt_records_is_blocked_and_names_them() {
    let env = Env::new();
    let (a, b) = one_turn_of_edits(&env);
    flip_checkpoint_records(&env, &[&a, &b]);

    let preview = env.run(&["--json", "rollback", "--turn", "1"], None);
    let doc = parse_json(&preview);
    assert_eq!(preview.status.code(), Some(BLOCKED), "{}", show_output(&preview));
    assert_eq!(doc["resultType"], "blocked", "{doc:#}");
    let named: Vec<&str> = doc["unreadableCheckpoints"]
        .as_array()
        .expect("unreadableCheckpoints")
        .iter()
        .map(|c| str_at(c, "/checkpointId"))
        .collect();
    assert_eq!(named, [b.as_str(), a.as_str()], "newest first, as the rollback takes them: {doc:#}");

    let plan = str_at(&doc, "/planId").to_string();
    let applied = env.run(&["rollback", "--turn", "1", "--apply", "--plan", &plan], None);
    let text = String::from_utf8_lossy(&applied.stdout).into_owned();
    assert_eq!(applied.status.code(), Some(BLOCKED), "{}", show_output(&applied));
    assert!(text.contains("rollback blocked") && !text.contains("full"), "{text}");
    assert!(text.contains(&a) && text.contains(&b) && text.contains("corrupt"), "{text}");
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"agent's a\n"[..]), "nothing changed");
    assert_eq!(env.read("b.txt").as_deref(), Some(&b"agent's b\n"[..]), "nothing changed");
}

#[test]
fn a_rollback_that_meets_one_corrupt_record_is_partial_and_names_it() {
    let env = Env::new();
    let (a, b) = one_turn_of_edits(&env);
    flip_checkpoint_records(&env, &[&b]);

    let out = env.run(&["--json", "rollback", "--turn", "1", "--apply"], None);
    let doc = parse_json(&out);
    assert_eq!(out.status.code(), Some(PARTIAL), "{}", show_output(&out));
    assert_eq!(doc["resultType"], "partial", "{doc:#}");
    assert_eq!(doc["unreadableCheckpoints"][0]["checkpointId"], b.as_str(), "{doc:#}");
    assert_eq!(doc["unreadableCheckpoints"][0]["code"], "corrupt", "{doc:#}");
    assert_eq!(doc["appliedPaths"], serde_json::json!(["a.txt"]), "{doc:#}");
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"person's original\n"[..]), "the readable one is taken back");
    assert_eq!(env.read("b.txt").as_deref(), Some(&b"agent's b\n"[..]), "the corrupt one cannot be");
    let _ = a;
}

// ---------------------------------------------------------------------------------------
// Item 4: verify --deep sees rows that are missing, dangling or out of order
// ---------------------------------------------------------------------------------------

#[test]
fn verify_reports_checkpoint_records_deleted_from_under_their_index() {
    let env = Env::new();
    let (a, b) = one_turn_of_edits(&env);
    env.assert_verify_clean();
    assert_eq!(delete_rows(&env, "checkpoints", |_| true), 2);
    let problems = verify_problems(&env);
    assert!(names(&problems, &[&a]) && names(&problems, &[&b]), "both missing records named: {problems:#?}");
}

#[test]
fn verify_reports_checkpoints_deleted_with_their_index_rows_and_journal() {
    let env = Env::new();
    let (a, _) = one_turn_of_edits(&env);
    let op = str_at(&env.json(&["inspect", &a]), "/checkpoint/mutation/operationId").to_string();
    // Every trace of `a` that is plain: record, indexes, journal.
    delete_rows(&env, "checkpoints", |k| k == a.as_bytes());
    delete_rows(&env, "checkpoints-by-session", |k| k.ends_with(a.as_bytes()));
    delete_rows(&env, "checkpoints-by-operation", |k| k == op.as_bytes());
    delete_rows(&env, "journal", |k| k.starts_with(op.as_bytes()));
    let problems = verify_problems(&env);
    assert!(
        names(&problems, &["checkpoints-by-session"]),
        "the session's index no longer matches its digest: {problems:#?}"
    );
}

#[test]
fn verify_reports_a_history_entry_deleted() {
    let env = Env::new();
    one_turn_of_edits(&env);
    env.assert_verify_clean();
    let keys = raw_keys(&env, "history");
    assert_eq!(keys.len(), 2, "the prompt and the reply");
    let first = keys[0].clone();
    assert_eq!(delete_rows(&env, "history", |k| k == first.as_slice()), 1);
    let problems = verify_problems(&env);
    assert!(names(&problems, &["history"]), "{problems:#?}");
}

#[test]
fn verify_reports_journal_end_events_deleted() {
    let env = Env::new();
    let (a, _) = one_turn_of_edits(&env);
    env.assert_verify_clean();
    let ends = tamper(&env, |c| {
        c.execute("DELETE FROM kv WHERE ns = 'journal' AND value LIKE '%\"OperationSucceeded\"%'", []).expect("delete")
    });
    assert_eq!(ends, 2, "both operations' end events");
    let op = str_at(&env.json(&["inspect", &a]), "/checkpoint/mutation/operationId").to_string();
    let problems = verify_problems(&env);
    assert!(names(&problems, &[&op]), "the operation without its end event named: {problems:#?}");
}

#[test]
fn verify_reports_a_reordered_turn_index() {
    let env = Env::new();
    for prompt in ["one", "two"] {
        env.ok(&["turn", "begin", "--prompt", prompt], None);
        env.ok(&["turn", "end"], None);
    }
    env.assert_verify_clean();
    let keys = raw_keys(&env, "turns-by-session");
    assert_eq!(keys.len(), 2);
    tamper(&env, |c| {
        let get = |k: &[u8]| -> Vec<u8> {
            c.query_row("SELECT value FROM kv WHERE ns = 'turns-by-session' AND key = ?1", [k], |r| r.get(0)).unwrap()
        };
        let (first, second) = (get(&keys[0]), get(&keys[1]));
        let set = |k: &[u8], v: &[u8]| {
            c.execute("UPDATE kv SET value = ?1 WHERE ns = 'turns-by-session' AND key = ?2", (v, k)).unwrap();
        };
        set(&keys[0], &second);
        set(&keys[1], &first);
    });
    let problems = verify_problems(&env);
    assert!(names(&problems, &["turn"]), "{problems:#?}");
}

#[test]
fn verify_reports_a_turn_deleted_with_its_index_row() {
    let env = Env::new();
    for prompt in ["one", "two"] {
        env.ok(&["turn", "begin", "--prompt", prompt], None);
        env.ok(&["turn", "end"], None);
    }
    let turn_id = str_at(&env.json(&["turns"]), "/turns/1/turnId").to_string();
    delete_rows(&env, "turns", |k| k == turn_id.as_bytes());
    delete_rows(&env, "turns-by-session", |k| k.ends_with(b"/0000000002"));
    let problems = verify_problems(&env);
    assert!(names(&problems, &["turns-by-session"]), "{problems:#?}");
}

// ---------------------------------------------------------------------------------------
// A crash in a rollback is not damage
// ---------------------------------------------------------------------------------------

#[test]
fn a_rollback_killed_mid_apply_then_reconciled_verifies_clean() {
    let env = Env::new();
    let (a, _) = one_turn_of_edits(&env);
    env.assert_verify_clean();
    // The rollback commits its own checkpoint (committed, its operation dispatched), then
    // dies writing the first file back.
    env.kill_at_failpoint(&["rollback", &a, "--apply"], None, "write-temp-synced");
    env.ok(&["reconcile"], None);
    // Reconcile closed the rollback's operation as `OperationUnknownOutcome` and left its
    // committed record alone: that is the state a crash leaves, not damage.
    env.assert_verify_clean();
    let doctor = env.run(&["--json", "doctor"], None);
    let text = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert!(!text.contains("restore from a backup"), "doctor must not call a crash damage: {}", show_output(&doctor));
}

// ---------------------------------------------------------------------------------------
// The digests themselves deleted
// ---------------------------------------------------------------------------------------

#[test]
fn verify_reports_every_checkpoint_row_deleted_with_the_digests() {
    let env = Env::new();
    one_turn_of_edits(&env);
    env.assert_verify_clean();
    for ns in ["checkpoints", "checkpoints-by-session", "checkpoints-by-operation", "journal", "index-digests"] {
        delete_rows(&env, ns, |_| true);
    }
    // Opening the store again must not trust what is left and compute new digests over it.
    env.ok(&["turns"], None);
    let problems = verify_problems(&env);
    assert!(names(&problems, &["checkpoints-by-session", "no keyed total"]), "{problems:#?}");
}

#[test]
fn verify_reports_a_digested_table_wiped_with_its_digest_rows() {
    let env = Env::new();
    for prompt in ["one", "two"] {
        env.ok(&["turn", "begin", "--prompt", prompt], None);
        env.ok(&["turn", "end"], None);
    }
    env.assert_verify_clean();
    // Every turn, its index rows, and the index's digests (per session and the total).
    delete_rows(&env, "turns", |_| true);
    delete_rows(&env, "turns-by-session", |_| true);
    delete_rows(&env, "index-digests", |k| k == b"turns-by-session" || k.starts_with(b"turns-by-session/"));
    let problems = verify_problems(&env);
    assert!(names(&problems, &["turns-by-session", "no keyed total"]), "{problems:#?}");
}

#[test]
fn verify_reports_an_emptied_table_given_an_empty_total() {
    let env = Env::new();
    env.ok(&["turn", "begin", "--prompt", "one"], None);
    env.ok(&["turn", "end"], None);
    env.assert_verify_clean();
    delete_rows(&env, "turns", |_| true);
    delete_rows(&env, "turns-by-session", |_| true);
    delete_rows(&env, "index-digests", |k| k.starts_with(b"turns-by-session/"));
    // A total of no rows written by hand: zero rows, zero sum.
    tamper(&env, |c| {
        c.execute(
            "UPDATE kv SET value = ?1 WHERE ns = 'index-digests' AND key = ?2",
            (vec![0u8; 40], &b"turns-by-session"[..]),
        )
        .expect("zero the total")
    });
    let problems = verify_problems(&env);
    assert!(names(&problems, &["turns-by-session"]), "{problems:#?}");
}

#[test]
fn the_store_schema_says_digests_so_an_older_turnback_refuses_it() {
    let env = Env::new();
    env.ok(&["init"], None);
    let version: i64 = tamper(&env, |c| c.query_row("PRAGMA user_version", [], |r| r.get(0)).expect("user_version"));
    assert_eq!(version, 3, "turnback 2-era binaries write index rows without digests and must refuse this store");
}

#[test]
fn verify_reports_a_deleted_key_check() {
    let env = Env::new();
    one_turn_of_edits(&env);
    // The key check says, keyed, that the store keeps digests; deleting it must not make a
    // new store of what is left.
    tamper(&env, |c| {
        c.execute("DELETE FROM kv WHERE ns = 'meta' AND key = ?1", [&b"master-check"[..]]).expect("delete")
    });
    let err = env.fail(&["verify", "--deep"], None);
    assert_eq!(err.code, "corrupt", "{err:?}");
}

#[test]
fn verify_reports_an_older_copy_of_the_history_totals_put_back() {
    let env = Env::new();
    env.ok(&["turn", "begin", "--prompt", "one"], None);
    let read_totals = || -> (Vec<u8>, Vec<u8>) {
        tamper(&env, |c| {
            c.query_row("SELECT key, value FROM kv WHERE ns = 'history-totals'", [], |r| Ok((r.get(0)?, r.get(1)?)))
                .expect("one session's totals")
        })
    };
    let (session, older) = read_totals();
    let before: Vec<Vec<u8>> = raw_keys(&env, "history");
    env.ok(&["history", "append"], Some(br#"{"role":"assistant","content":"later"}"#));
    env.assert_verify_clean();
    // The entry appended since deleted, and the totals from before it put back.
    delete_rows(&env, "history", |k| !before.iter().any(|b| b == k));
    tamper(&env, |c| {
        c.execute("UPDATE kv SET value = ?1 WHERE ns = 'history-totals' AND key = ?2", (&older, &session))
            .expect("put the older totals back")
    });
    let problems = verify_problems(&env);
    assert!(names(&problems, &["history-totals"]), "{problems:#?}");
}

#[test]
fn key_rotation_with_reencrypt_keeps_the_digests_true() {
    let env = Env::new();
    one_turn_of_edits(&env);
    env.ok(&["key", "rotate", "--reencrypt"], None);
    env.assert_verify_clean();
}

// ---------------------------------------------------------------------------------------
// verify of a store in use
// ---------------------------------------------------------------------------------------

#[test]
fn verify_does_not_flag_a_checkpoint_committed_while_it_reads() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;
    use std::time::Duration;

    let env = Env::new();
    env.ok(&["turn", "begin", "--prompt", "one"], None);
    env.assert_verify_clean();
    // verify stops between reading the checkpoints-by-session rows (the first digested
    // table) and reading their digests ...
    let flag = env.root.join("release-verify");
    let mut cmd = env.command(&["--json", "verify", "--deep"]);
    cmd.env("TURNBACK_PAUSE", format!("verify-digest-rows-read={}", flag.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn verify");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    loop {
        let line = rx.recv_timeout(Duration::from_secs(30)).expect("verify reaches its pause point");
        if line.contains("failpoint verify-digest-rows-read reached") {
            break;
        }
    }
    // ... while the agent makes a checkpointed edit (its index row and digests commit in
    // one transaction).
    env.ok(&["fs", "create", "c.txt"], Some(b"agent's c\n"));
    std::fs::write(&flag, b"go").expect("release verify");
    let out = child.wait_with_output().expect("verify ends");
    let report: Value = serde_json::from_slice(&out.stdout).expect("verify's JSON");
    assert_eq!(report["clean"], true, "a write committed during verify is not damage: {report:#}");
    assert_eq!(out.status.code(), Some(0));
    env.assert_verify_clean();
}

// ---------------------------------------------------------------------------------------
// A sub-agent's rollback and unreadable records of other rounds
// ---------------------------------------------------------------------------------------

/// A Claude Code session of two rounds: in round 1 the main agent writes `main.txt`; in
/// round 2 sub-agent `sub-1` writes `sub.txt`. Returns the session id and the id of the
/// main agent's checkpoint.
fn main_then_sub_agent(env: &Env) -> (String, String) {
    use crate::common::{hook, with};
    let session = "cc-sub".to_string();
    let event = |name: &str, extra: serde_json::Value| {
        let base = serde_json::json!({
            "session_id": session,
            "transcript_path": env.home.join(format!(".claude/projects/x/{session}.jsonl")),
            "cwd": env.ws,
            "hook_event_name": name,
        });
        with(base, extra)
    };
    let write = |id: &str, file: &str, agent: Option<&str>| {
        let mut pre = serde_json::json!({
            "tool_name": "Write",
            "tool_input": { "file_path": env.ws.join(file), "content": "agent's\n" },
            "tool_use_id": id,
        });
        if let Some(a) = agent {
            pre["agent_id"] = a.into();
            pre["agent_type"] = "general-purpose".into();
        }
        hook(env, "claude-code", &event("PreToolUse", pre.clone()));
        env.write(file, "agent's\n");
        hook(env, "claude-code", &event("PostToolUse", pre));
    };
    env.write("main.txt", "person's\n");
    env.write("sub.txt", "person's\n");
    hook(env, "claude-code", &event("UserPromptSubmit", serde_json::json!({ "prompt": "one" })));
    write("toolu_main", "main.txt", None);
    hook(env, "claude-code", &event("Stop", serde_json::json!({})));
    hook(env, "claude-code", &event("UserPromptSubmit", serde_json::json!({ "prompt": "two" })));
    let sub = serde_json::json!({ "agent_id": "sub-1", "agent_type": "general-purpose" });
    hook(env, "claude-code", &event("SubagentStart", sub.clone()));
    write("toolu_sub", "sub.txt", Some("sub-1"));
    hook(env, "claude-code", &event("SubagentStop", sub));
    hook(env, "claude-code", &event("Stop", serde_json::json!({})));
    let list = env.json(&["--session", &session, "checkpoints", "--turn", "1"]);
    let main = str_at(&list, "/checkpoints/0/checkpointId").to_string();
    (session, main)
}

#[test]
fn a_sub_agents_rollback_is_not_held_up_by_an_unreadable_record_of_another_round() {
    let env = Env::new();
    let (session, main) = main_then_sub_agent(&env);
    flip_checkpoint_records(&env, &[&main]);
    let out = env.run(&["--json", "--session", &session, "rollback", "--agent", "sub-1", "--apply"], None);
    let doc = parse_json(&out);
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert_eq!(doc["resultType"], "full", "{doc:#}");
    assert_eq!(doc["unreadableCheckpoints"].as_array().map(Vec::len).unwrap_or(0), 0, "{doc:#}");
    assert_eq!(env.read("sub.txt").as_deref(), Some(&b"person's\n"[..]));
}

#[test]
fn a_mistyped_sub_agent_is_not_found_even_beside_unreadable_records() {
    let env = Env::new();
    let (session, main) = main_then_sub_agent(&env);
    flip_checkpoint_records(&env, &[&main]);
    let err = env.fail(&["--session", &session, "rollback", "--agent", "sub-2"], None);
    assert_eq!(err.code, "not-found", "{err:?}");
}

/// The `initialized` marker says a store was here: a `store.db` deleted under it is
/// damage to restore, not a store never made, and nothing is made in its place.
#[test]
fn a_store_whose_database_was_deleted_is_corrupt_not_missing() {
    let env = Env::new();
    env.ok(&["fs", "create", "a.txt"], Some(b"a\n"));
    let db = env.store.join("store.db");
    std::fs::remove_file(&db).unwrap();
    for args in [&["checkpoints", "--all"][..], &["init"], &["fs", "create", "b.txt"]] {
        let f = env.fail(args, Some(b"b\n"));
        assert_eq!((f.exit, f.code.as_str()), (1, "corrupt"), "{args:?}: {:#}", f.doc);
        assert!(f.message.contains("was deleted"), "{}", f.message);
        assert!(!db.exists(), "{args:?} made a new database in its place");
    }
    let out = env.run(&["checkpoints"], None);
    assert_eq!(out.status.code(), Some(1), "{}", show_output(&out));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("turnback: corrupt: "), "{}", show_output(&out));
}
