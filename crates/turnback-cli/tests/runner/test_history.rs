//! Conversation history: every field round-trips, caps and compaction, tails, crash
//! safety, forks and rewinds, plaintext never in the store, and an export a chat API takes.

use serde_json::{Value, json};

use crate::common::{Env, files_under, mode_of, str_at, unique};

/// Begins a turn whose prompt the test then appends to the history itself, with fields of
/// its own (`turn begin --prompt` would record the prompt too: see
/// `turn_begin_with_a_prompt_puts_it_in_the_history`).
fn begin(env: &Env) -> String {
    let out = env.ok(&["turn", "begin"], None);
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn append(env: &Env, entry: &Value) -> Value {
    env.json_with(&["history", "append"], Some(entry.to_string().as_bytes()))
}

fn shown(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["history", "show"];
    all.extend_from_slice(args);
    env.json(&all)
}

fn entries(view: &Value) -> Vec<Value> {
    view["entries"].as_array().unwrap().clone()
}

/// A turn with a user entry and an assistant reply.
fn exchange(env: &Env, prompt: &str, reply: &str) -> String {
    let turn = begin(env);
    append(env, &json!({ "role": "user", "content": prompt }));
    append(env, &json!({ "role": "assistant", "content": reply }));
    env.ok(&["turn", "end"], None);
    turn
}

#[test]
fn every_field_round_trips_with_non_ascii_text_across_processes() {
    let env = Env::new();
    let turn = begin(&env);
    let user = json!({
        "role": "user",
        "content": "Ünïcödé prompt 你好 🚀",
        "prompt": "/fix Ünïcödé prompt 你好 🚀",
        "at": "2026-11-30T10:00:00.000Z",
    });
    let assistant = json!({
        "role": "assistant",
        "content": "Done — ✓",
        "thinking": "Let me think… ß",
        "toolCalls": [
            { "name": "Write", "input": { "file_path": "a.txt", "content": "ä\n" }, "output": "ok" },
            { "name": "Bash", "input": { "command": "ls" } }
        ],
        "background": true,
        "turnId": turn,
    });
    append(&env, &user);
    append(&env, &assistant);
    // Same as content: `prompt` is not kept.
    append(&env, &json!({ "role": "user", "content": "same", "prompt": "same" }));
    let got = entries(&shown(&env, &[]));
    assert_eq!(got.len(), 3);
    for e in &got {
        assert_eq!(str_at(e, "/turnId"), turn, "every entry carries its turn: {e:#}");
    }
    assert_eq!(got[0]["content"], user["content"]);
    assert_eq!(got[0]["prompt"], user["prompt"]);
    assert_eq!(got[0]["at"], user["at"]);
    assert_eq!(got[0]["role"], "user");
    assert_eq!(got[1]["content"], assistant["content"]);
    assert_eq!(got[1]["thinking"], assistant["thinking"]);
    assert_eq!(got[1]["toolCalls"], assistant["toolCalls"]);
    assert_eq!(got[1]["background"], true);
    assert!(got[1]["at"].as_str().is_some_and(|a| a.starts_with("20")), "{:#}", got[1]);
    assert!(got[2].get("prompt").is_none(), "a prompt equal to the content is not kept: {:#}", got[2]);
    assert!(got.iter().all(|e| e.get("notes").is_none()), "nothing was cut");
}

#[test]
fn json_lines_append_and_a_turn_read_and_caps_in_bytes() {
    let env = Env::new();
    let first = exchange(&env, "one", "reply one");
    begin(&env);
    let big = "é".repeat(200_000); // 400,000 bytes: over the 256 KiB text cap
    let lines = format!(
        "{}\n{}\n",
        json!({ "role": "user", "content": "two" }),
        json!({ "role": "assistant", "content": big })
    );
    let out = env.json_with(&["history", "append"], Some(lines.as_bytes()));
    let appended = out["appended"].as_array().unwrap();
    assert_eq!(appended.len(), 2);
    let cut = &appended[1];
    let content = str_at(cut, "/content");
    assert!(content.len() <= 256 * 1024, "{}", content.len());
    let note = cut["notes"][0].as_str().unwrap();
    assert!(note.starts_with("content: cut ") && note.ends_with(" of 400000 bytes"), "{note}");
    let one = entries(&shown(&env, &["--turn", "1"]));
    assert_eq!(one.len(), 2);
    assert!(one.iter().all(|e| e["turnId"] == json!(first)));
    assert_eq!(entries(&shown(&env, &["--turn", &first])).len(), 2, "a turn by id too");
}

#[test]
fn a_tail_widens_to_a_user_entry_and_is_marked_partial() {
    let env = Env::new();
    exchange(&env, "first", "a1");
    begin(&env);
    append(&env, &json!({ "role": "user", "content": "second" }));
    for i in 0..3 {
        append(&env, &json!({ "role": "assistant", "content": format!("step {i}") }));
    }
    let view = shown(&env, &["--tail", "2"]);
    let got = entries(&view);
    assert_eq!(got.len(), 4, "widened back to the user entry: {view:#}");
    assert_eq!(got[0]["role"], "user");
    assert_eq!(got[0]["content"], "second");
    assert_eq!(view["partial"], true);
    let whole = shown(&env, &["--tail", "100"]);
    assert_eq!(whole["partial"], false, "a tail holding everything is not partial");
    assert_eq!(entries(&whole).len(), 6);
}

#[test]
fn over_budget_compaction_keeps_the_newest_turns_from_a_user_entry() {
    let env = Env::new();
    env.ok(&["init"], None);
    std::fs::write(env.store.join("settings.toml"), "[history]\nmax-session-size = \"64 KiB\"\n").unwrap();
    let pad = "x".repeat(6000);
    for t in 0..8 {
        begin(&env);
        append(&env, &json!({ "role": "user", "content": format!("turn {t} {pad}") }));
        append(&env, &json!({ "role": "assistant", "content": format!("reply {t} a {pad}") }));
        append(&env, &json!({ "role": "assistant", "content": format!("reply {t} b {pad}") }));
        env.ok(&["turn", "end"], None);
    }
    let view = shown(&env, &[]);
    let got = entries(&view);
    assert_eq!(view["partial"], true, "older entries went");
    assert!(view["compactedEntries"].as_u64().unwrap() > 0);
    assert_eq!(got[0]["role"], "user", "what is kept starts at a user entry: {:#}", got[0]);
    let kept: usize = got.iter().map(|e| e.to_string().len()).sum();
    assert!(kept <= 64 * 1024, "kept {kept} bytes");
    let last = got.last().unwrap();
    assert!(str_at(last, "/content").starts_with("reply 7 b"), "the newest entry is kept");
    // Whole turns, newest first: every kept turn has all three of its entries.
    assert_eq!(got.len() % 3, 0, "{}", got.len());
}

#[test]
fn a_process_killed_mid_append_leaves_every_earlier_entry_readable() {
    let env = Env::new();
    exchange(&env, "kept prompt", "kept reply");
    let entry = json!({ "role": "assistant", "content": "never committed" });
    env.kill_at_failpoint(&["history", "append"], Some(entry.to_string().as_bytes()), "history-before-commit");
    let got = entries(&shown(&env, &[]));
    assert_eq!(got.len(), 2, "{got:#?}");
    assert_eq!(got[1]["content"], "kept reply");
    env.assert_verify_clean();
    append(&env, &json!({ "role": "assistant", "content": "after the crash" }));
    assert_eq!(entries(&shown(&env, &[])).len(), 3, "appending goes on after a crash");
}

#[test]
fn a_fork_through_turn_t_carries_exactly_its_history_and_outlives_the_parent() {
    let mut env = Env::new();
    env.ok(&["session", "new", "--id", "parent"], None);
    env.set_var("TURNBACK_SESSION", "parent");
    for t in 1..=3 {
        env.write("f.txt", format!("v{t}"));
        exchange(&env, &format!("prompt {t}"), &format!("reply {t}"));
    }
    let forked = env.json(&["session", "fork", "--from", "parent", "--after-turn", "2", "--id", "child"]);
    assert_eq!(forked["historyEntries"], 4, "{forked:#}");
    env.ok(&["session", "delete", "parent"], None);
    env.ok(&["gc"], None);
    env.set_var("TURNBACK_SESSION", "child");
    let got = entries(&shown(&env, &[]));
    let contents: Vec<&str> = got.iter().map(|e| e["content"].as_str().unwrap()).collect();
    assert_eq!(contents, ["prompt 1", "reply 1", "prompt 2", "reply 2"]);
    let turns = env.json(&["turns"])["turns"].as_array().unwrap().clone();
    let ids: Vec<&str> = turns.iter().map(|t| t["turnId"].as_str().unwrap()).collect();
    assert!(got.iter().all(|e| ids.contains(&e["turnId"].as_str().unwrap())), "entries point at the fork's turns");
}

#[test]
fn rewind_cuts_the_history_before_the_turn_and_returns_its_prompt() {
    let env = Env::new();
    env.write("f.txt", "v0");
    for t in 1..=3 {
        let turn = begin(&env);
        append(
            &env,
            &json!({ "role": "user", "content": format!("prompt {t}"), "prompt": format!("/ask prompt {t}") }),
        );
        env.write("f.txt", format!("v{t}"));
        append(&env, &json!({ "role": "assistant", "content": format!("reply {t}"), "turnId": turn }));
        env.ok(&["turn", "end"], None);
    }
    let plan = env.json(&["rewind", "--to", "2"]);
    let done = env.json(&["rewind", "--to", "2", "--apply", "--plan", str_at(&plan, "/planId")]);
    assert_eq!(done["restoredPrompt"], "/ask prompt 2", "{done:#}");
    assert_eq!(done["historyEntriesRemoved"], 4);
    let got = entries(&shown(&env, &[]));
    let contents: Vec<&str> = got.iter().map(|e| e["content"].as_str().unwrap()).collect();
    assert_eq!(contents, ["prompt 1", "reply 1"], "history ends before turn 2");
    assert_eq!(env.read("f.txt").unwrap(), b"v1");
}

#[test]
fn a_prompts_canary_never_appears_in_the_store() {
    let env = Env::new();
    let canary = unique("history-canary");
    begin(&env);
    append(&env, &json!({ "role": "user", "content": format!("remember {canary}"), "thinking": canary }));
    append(
        &env,
        &json!({ "role": "assistant", "content": "ok", "toolCalls": [{ "name": "Bash", "input": { "command": format!("echo {canary}") }, "output": canary }] }),
    );
    env.ok(&["turn", "end"], None);
    let export = env.root.join("export.jsonl");
    env.ok(&["history", "export", "--output", export.to_str().unwrap()], None);
    assert_eq!(mode_of(&export) & 0o777, 0o600, "exports are owner-only");
    assert!(std::fs::read_to_string(&export).unwrap().contains(&canary), "the export itself holds the text");
    for file in files_under(&env.store) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(!bytes.windows(canary.len()).any(|w| w == canary.as_bytes()), "canary in {}", file.display());
    }
}

/// The message array of the OpenAI chat-completions API, as far as user and assistant
/// text messages go.
const CHAT_MESSAGES_SCHEMA: &str = r#"{
  "type": "array",
  "items": {
    "type": "object",
    "required": ["role", "content"],
    "additionalProperties": false,
    "properties": {
      "role": { "enum": ["system", "developer", "user", "assistant", "tool"] },
      "content": { "type": "string" }
    }
  }
}"#;

#[test]
fn export_as_messages_is_a_chat_completions_message_array() {
    let env = Env::new();
    exchange(&env, "what is 2+2?", "4");
    begin(&env);
    append(&env, &json!({ "role": "user", "content": "and 3+3?" }));
    append(&env, &json!({ "role": "assistant", "content": "", "toolCalls": [{ "name": "calc", "input": {} }] }));
    append(&env, &json!({ "role": "assistant", "content": "6" }));
    let out = env.ok(&["history", "export", "--format", "messages"], None);
    let messages: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        messages,
        json!([
            { "role": "user", "content": "what is 2+2?" },
            { "role": "assistant", "content": "4" },
            { "role": "user", "content": "and 3+3?" },
            { "role": "assistant", "content": "6" }
        ])
    );
    let schema: Value = serde_json::from_str(CHAT_MESSAGES_SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let errors: Vec<String> = validator.iter_errors(&messages).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
    // The validator really checks: a message without content is refused.
    assert!(!validator.is_valid(&json!([{ "role": "user" }])));
}

/// A Claude Code transcript in its real shape: a summary row, prompts as a string and as
/// text blocks, an assistant message split over rows (thinking, text, tool use), tool
/// results in user rows, a sub-agent's sidechain rows, a meta row and a local command.
fn transcript(session: &str) -> String {
    let row = |v: Value| {
        let mut v = v;
        v["sessionId"] = json!(session);
        v["cwd"] = json!("/home/me/app");
        v["version"] = json!("2.0.31");
        v.to_string()
    };
    [
        json!({ "type": "summary", "summary": "Fix the parser", "leafUuid": "u-9" }),
        json!({ "type": "user", "uuid": "u-0", "parentUuid": null, "isSidechain": false, "isMeta": true, "timestamp": "2026-11-30T09:59:59.000Z",
                "message": { "role": "user", "content": "Caveat: the messages below were generated by the user while running local commands." } }),
        json!({ "type": "user", "uuid": "u-1", "parentUuid": null, "isSidechain": false, "userType": "external", "timestamp": "2026-11-30T10:00:00.000Z",
                "message": { "role": "user", "content": "Fix the parser — it drops ünïcode" } }),
        json!({ "type": "assistant", "uuid": "u-2", "parentUuid": "u-1", "isSidechain": false, "timestamp": "2026-11-30T10:00:02.000Z",
                "message": { "id": "msg_1", "role": "assistant", "model": "claude", "content": [ { "type": "thinking", "thinking": "Look at lexer.rs", "signature": "sig" } ] } }),
        json!({ "type": "assistant", "uuid": "u-3", "parentUuid": "u-2", "isSidechain": false, "timestamp": "2026-11-30T10:00:03.000Z",
                "message": { "id": "msg_1", "role": "assistant", "model": "claude", "content": [ { "type": "text", "text": "I'll fix the lexer." },
                  { "type": "tool_use", "id": "toolu_1", "name": "Edit", "input": { "file_path": "/home/me/app/lexer.rs", "old_string": "a", "new_string": "b" } } ] } }),
        json!({ "type": "assistant", "uuid": "s-1", "parentUuid": null, "isSidechain": true, "timestamp": "2026-11-30T10:00:04.000Z",
                "message": { "id": "msg_s", "role": "assistant", "content": [ { "type": "text", "text": "sub-agent chatter" } ] } }),
        json!({ "type": "user", "uuid": "u-4", "parentUuid": "u-3", "isSidechain": false, "timestamp": "2026-11-30T10:00:05.000Z",
                "message": { "role": "user", "content": [ { "type": "tool_result", "tool_use_id": "toolu_1", "content": [ { "type": "text", "text": "edited" } ] } ] },
                "toolUseResult": { "filePath": "/home/me/app/lexer.rs" } }),
        json!({ "type": "assistant", "uuid": "u-5", "parentUuid": "u-4", "isSidechain": false, "timestamp": "2026-11-30T10:00:06.000Z",
                "message": { "id": "msg_2", "role": "assistant", "content": [ { "type": "text", "text": "Fixed." } ] } }),
        json!({ "type": "user", "uuid": "u-6", "parentUuid": "u-5", "isSidechain": false, "timestamp": "2026-11-30T10:01:00.000Z",
                "message": { "role": "user", "content": "<command-name>/cost</command-name>" } }),
        json!({ "type": "system", "uuid": "u-7", "timestamp": "2026-11-30T10:01:01.000Z", "content": "compacted" }),
        json!({ "type": "user", "uuid": "u-8", "parentUuid": "u-5", "isSidechain": false, "timestamp": "2026-11-30T10:02:00.000Z",
                "message": { "role": "user", "content": [ { "type": "text", "text": "Now add a test" } ] } }),
        json!({ "type": "assistant", "uuid": "u-9", "parentUuid": "u-8", "isSidechain": false, "timestamp": "2026-11-30T10:02:05.000Z",
                "message": { "id": "msg_3", "role": "assistant", "content": [ { "type": "text", "text": "Added tests/lexer.rs." } ] } }),
    ]
    .into_iter()
    .map(row)
    .collect::<Vec<_>>()
    .join("\n")
        + "\n"
}

#[test]
fn a_claude_code_transcript_is_imported_once_and_then_only_what_it_gained() {
    let env = Env::new();
    env.ok(&["session", "new", "--id", "imported"], None);
    let file = env.root.join("transcript.jsonl");
    std::fs::write(&file, transcript("3f2c")).unwrap();
    let report = env.json(&["--session", "imported", "history", "import", "--claude-code", file.to_str().unwrap()]);
    assert_eq!((report["turns"].as_u64(), report["entries"].as_u64()), (Some(2), Some(4)), "{report:#}");
    let view = env.json(&["--session", "imported", "history", "show"]);
    let got = entries(&view);
    assert_eq!(got[0]["content"], "Fix the parser — it drops ünïcode");
    assert_eq!(got[0]["at"], "2026-11-30T10:00:00.000Z");
    assert_eq!(got[1]["role"], "assistant");
    assert_eq!(got[1]["content"], "I'll fix the lexer.\n\nFixed.");
    assert_eq!(got[1]["thinking"], "Look at lexer.rs");
    assert_eq!(got[1]["toolCalls"][0]["name"], "Edit");
    assert_eq!(got[1]["toolCalls"][0]["output"], "edited");
    assert_eq!(got[2]["content"], "Now add a test");
    assert_eq!(got[3]["content"], "Added tests/lexer.rs.");
    assert!(!view.to_string().contains("sub-agent chatter"), "sidechain rows are skipped");
    let turns = env.json(&["--session", "imported", "turns"])["turns"].as_array().unwrap().clone();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[1]["preview"], "Now add a test");
    assert_eq!(got[2]["turnId"], turns[1]["turnId"]);

    // Again: nothing changes.
    let again = env.json(&["--session", "imported", "history", "import", "--claude-code", file.to_str().unwrap()]);
    assert_eq!((again["turns"].as_u64(), again["entries"].as_u64()), (Some(0), Some(0)), "{again:#}");
    assert_eq!(entries(&env.json(&["--session", "imported", "history", "show"])).len(), 4);

    // The transcript grows: only the new turn comes in.
    let more = json!({ "type": "user", "uuid": "u-10", "parentUuid": "u-9", "isSidechain": false, "sessionId": "3f2c",
                       "timestamp": "2026-11-30T10:03:00.000Z", "message": { "role": "user", "content": "Thanks" } });
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(&format!("{more}\n"));
    std::fs::write(&file, text).unwrap();
    let grown = env.json(&["--session", "imported", "history", "import", "--claude-code", file.to_str().unwrap()]);
    assert_eq!((grown["turns"].as_u64(), grown["entries"].as_u64()), (Some(1), Some(1)), "{grown:#}");
    assert_eq!(env.json(&["--session", "imported", "turns"])["turns"].as_array().unwrap().len(), 3);
}

#[test]
fn a_tail_of_zero_is_empty_and_partial() {
    let env = Env::new();
    exchange(&env, "p", "r");
    let view = shown(&env, &["--tail", "0"]);
    assert!(entries(&view).is_empty());
    assert_eq!(view["partial"], true);
}

#[test]
fn a_transcript_that_grew_mid_turn_continues_that_turn() {
    let env = Env::new();
    env.ok(&["init"], None);
    let rows = |rs: &[Value]| rs.iter().map(|r| format!("{r}\n")).collect::<String>();
    let first = [
        json!({ "type": "user", "uuid": "u1", "timestamp": "t0", "message": { "role": "user", "content": "do x" } }),
        json!({ "type": "assistant", "uuid": "a1", "timestamp": "t1", "message": { "role": "assistant", "content": [
            { "type": "text", "text": "working" }, { "type": "tool_use", "id": "t1", "name": "Bash", "input": {} } ] } }),
    ];
    let then = [
        json!({ "type": "user", "uuid": "u2", "timestamp": "t2", "message": { "role": "user", "content": [
            { "type": "tool_result", "tool_use_id": "t1", "content": "f" } ] } }),
        json!({ "type": "assistant", "uuid": "a2", "timestamp": "t3", "message": { "role": "assistant", "content": [
            { "type": "text", "text": "FINAL ANSWER" } ] } }),
    ];
    let file = env.root.join("t.jsonl");
    std::fs::write(&file, rows(&first)).unwrap();
    env.ok(&["history", "import", "--claude-code", file.to_str().unwrap()], None);
    std::fs::write(&file, rows(&first) + &rows(&then)).unwrap();
    let again = env.json(&["history", "import", "--claude-code", file.to_str().unwrap()]);
    let counts = ["turns", "updatedTurns", "entries"].map(|k| again[k].as_u64().unwrap());
    assert_eq!(counts, [0, 1, 0], "the reply grew and is replaced where it is: {again:#}");
    let got = entries(&shown(&env, &[]));
    assert_eq!(got.len(), 2, "one turn, one reply: {got:#?}");
    assert_eq!(got[1]["content"], "working\n\nFINAL ANSWER");
    assert_eq!(got[1]["toolCalls"][0]["output"], "f", "the call's output arrived with the growth");
    assert_eq!(got[1]["turnId"], got[0]["turnId"], "the continuation stays in the turn it continues");
    assert_eq!(env.json(&["turns"])["turns"].as_array().unwrap().len(), 1);
    let third = env.json(&["history", "import", "--claude-code", file.to_str().unwrap()]);
    assert_eq!(third["alreadyImportedTurns"], 1, "{third:#}");
    assert_eq!(entries(&shown(&env, &[])), got, "importing again changes nothing");
}

#[test]
fn history_show_escapes_terminal_controls_in_what_agents_and_people_wrote() {
    let env = Env::new();
    begin(&env);
    let title = "\x1b]0;pwned\x07";
    let clear = "\x1b[2J";
    append(&env, &json!({ "role": "user", "content": format!("fix it{title}\nthen{clear} test") }));
    let reply = json!({
        "role": "assistant",
        "content": format!("done{clear}\n\tall green{title}"),
        "toolCalls": [{ "name": format!("Bash{clear}"), "input": { "command": "ls" } }],
        "at": format!("2026-11-30T10:00:00Z{title}"),
    });
    append(&env, &reply);
    let out = String::from_utf8(env.ok(&["history", "show"], None).stdout).unwrap();
    assert!(!out.contains(['\x1b', '\x07']), "no escape or bell reaches the terminal: {out:?}");
    for line in ["fix it\\033]0;pwned\\a", "then\\033[2J test", "done\\033[2J", "\tall green\\033]0;pwned\\a"] {
        assert!(out.lines().any(|l| l == line), "{line:?} on a line of its own: {out}");
    }
    assert!(out.contains("[tool Bash\\033[2J]"), "{out}");
    assert!(out.contains("2026-11-30T10:00:00Z\\033]0;pwned\\a"), "{out}");
    // JSON keeps the text exact.
    let got = entries(&shown(&env, &[]));
    assert_eq!(got[1]["content"], reply["content"]);
    assert_eq!(got[1]["toolCalls"][0]["name"], reply["toolCalls"][0]["name"]);
}
