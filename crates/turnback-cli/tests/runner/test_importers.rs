//! `turnback history import` on realistic transcripts built here in each agent's documented
//! format, several hundred records each: tool calls with their outputs, compaction, a
//! branch the person abandoned, and the rows an agent injects that are no prompts. Each
//! import must give the turns the person kept, once — again on re-import, and when the file
//! grew between two imports in the middle of a tool call — and the hooks and an import of
//! the same session must give one set of turns.
//!
//! Sources of the formats (the research notes kept with the importers cite them):
//! - Claude Code: the session transcript `~/.claude/projects/<project>/<session>.jsonl`,
//!   one record per line with `type`, `uuid`, `parentUuid`, `isSidechain`, `isMeta`,
//!   `timestamp`, `message` (Anthropic content blocks: `text`, `thinking`, `tool_use`,
//!   `tool_result` with `is_error`); compaction writes a `system` record with `subtype:
//!   "compact_boundary"`, `parentUuid: null` and `logicalParentUuid`, then a user record
//!   with `isCompactSummary`; `/rewind` or editing a message continues from an earlier
//!   record's `uuid`, leaving the abandoned branch in the file.
//! - Codex CLI: the rollout `~/.codex/sessions/YYYY/MM/DD/rollout-….jsonl`, lines
//!   `{timestamp, type, payload}` (`RolloutLine`, `codex-rs/protocol/src/protocol.rs`;
//!   `ResponseItem` in `models.rs`; persisted `EventMsg`s per `codex-rs/rollout/src/
//!   policy.rs`), `compacted` items, and `thread_rolled_back {num_turns}`.
//! - Gemini CLI: the chat file `~/.gemini/tmp/<project>/chats/session-….jsonl`
//!   (`packages/core/src/services/chatRecordingService.ts`, types in
//!   `chatRecordingTypes.ts`): a metadata line, message lines (an `id` seen again replaces
//!   its message in place), `{"$set": {…}}` (with `messages`: the list anew),
//!   `{"$rewindTo": id}`; before v0.39 one JSON object with a `messages` array.

use serde_json::{Value, json};

use crate::common::{Env, deliver, previews, show_output, stamp, str_at};

/// What a transcript must import as: each kept turn's prompt and reply, in order.
type Kept = Vec<(String, String)>;

fn import(env: &Env, session: &str, flag: &str, file: &std::path::Path) -> Value {
    env.json(&["--session", session, "history", "import", flag, file.to_str().unwrap()])
}

fn counts(report: &Value) -> [u64; 5] {
    ["turns", "joinedTurns", "updatedTurns", "entries", "alreadyImportedTurns"].map(|k| report[k].as_u64().unwrap())
}

fn show(env: &Env, session: &str) -> Value {
    env.json(&["--session", session, "history", "show"])
}

fn entries(env: &Env, session: &str) -> Vec<Value> {
    show(env, session)["entries"].as_array().unwrap().clone()
}

/// `history export --format messages`: the [{role, content}] a model API takes.
fn messages(env: &Env, session: &str) -> Vec<(String, String)> {
    let out = env.ok(&["--session", session, "history", "export", "--format", "messages"], None);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .map(|m| (str_at(m, "/role").to_string(), str_at(m, "/content").to_string()))
        .collect()
}

fn conversation(kept: &Kept) -> Vec<(String, String)> {
    kept.iter().flat_map(|(p, r)| [("user".to_string(), p.clone()), ("assistant".to_string(), r.clone())]).collect()
}

/// The prompts as `turns` previews them (first line, at most 120 characters).
fn preview_of(prompt: &str) -> String {
    prompt.lines().next().unwrap_or("").chars().take(120).collect()
}

/// Imports `file` whole, checks the kept turns came in once with nothing abandoned, and
/// that importing again changes nothing.
fn import_whole(env: &Env, session: &str, flag: &str, file: &std::path::Path, kept: &Kept, abandoned: &[&str]) {
    env.ok(&["session", "new", "--id", session], None);
    let report = import(env, session, flag, file);
    let n = kept.len() as u64;
    assert_eq!(counts(&report), [n, 0, 0, 2 * n, 0], "every kept turn, its prompt and its reply: {report:#}");
    assert!(report["skippedRows"].as_u64().unwrap() > 0, "{report:#}");
    assert_eq!(previews(env, session), kept.iter().map(|(p, _)| preview_of(p)).collect::<Vec<_>>());
    let exported = messages(env, session);
    assert_eq!(exported, conversation(kept), "the conversation the person kept, in order");
    let text = serde_json::to_string(&show(env, session)).unwrap();
    for gone in abandoned {
        assert!(!text.contains(gone), "{gone:?} was abandoned, it is not in the history");
    }
    let before = show(env, session);
    let again = import(env, session, flag, file);
    assert_eq!(counts(&again), [0, 0, 0, 0, n], "nothing new: {again:#}");
    assert_eq!(show(env, session), before, "the history is unchanged");
    assert_eq!(previews(env, session).len() as u64, n);
}

/// Imports the first `cut` lines, then the whole file: the turn cut in the middle of a
/// tool call has its reply replaced where it stands (with the call's output now), no turn
/// is split or doubled.
fn import_grown(env: &Env, session: &str, flag: &str, file: &std::path::Path, cut: usize, kept: &Kept) -> Value {
    let whole = std::fs::read_to_string(file).unwrap();
    let prefix: String = whole.lines().take(cut).map(|l| format!("{l}\n")).collect();
    let growing = file.with_extension("grow.jsonl");
    std::fs::write(&growing, &prefix).unwrap();
    env.ok(&["session", "new", "--id", session], None);
    let first = import(env, session, flag, &growing);
    let before = first["turns"].as_u64().unwrap();
    std::fs::write(&growing, &whole).unwrap();
    let second = import(env, session, flag, &growing);
    let n = kept.len() as u64;
    assert_eq!(second["updatedTurns"], 1, "the reply cut mid-call grew and was replaced: {second:#}");
    assert_eq!(second["turns"].as_u64().unwrap(), n - before, "{second:#}");
    assert_eq!(second["entries"].as_u64().unwrap(), 2 * (n - before), "no second reply for the grown turn: {second:#}");
    assert_eq!(messages(env, session), conversation(kept), "the same conversation as one import of the whole file");
    assert_eq!(previews(env, session).len() as u64, n, "no turn split in two");
    second
}

/// A file that is not the agent's transcript is refused: exit 2, invalid-argument.
fn refused(env: &Env, flag: &str) {
    let text = env.root.join("notes.txt");
    std::fs::write(&text, "just some notes\nnot a transcript\n").unwrap();
    let object = env.root.join("settings.json");
    std::fs::write(&object, "{\"theme\": \"dark\", \"hooks\": {}}\n").unwrap();
    for file in [&text, &object] {
        let f = env.fail(&["history", "import", flag, file.to_str().unwrap()], None);
        assert_eq!((f.exit, f.code.as_str()), (2, "invalid-argument"), "{flag} {}: {f:?}", file.display());
    }
}

// ---------------------------------------------------------------------------------------
// Claude Code
// ---------------------------------------------------------------------------------------

/// A Claude Code transcript being written: every record gets a `uuid`, its `parentUuid`
/// (the record before it unless told), a timestamp and the common fields.
struct Claude {
    rows: Vec<Value>,
    last: Option<String>,
    clock: u64,
}

impl Claude {
    fn new() -> Claude {
        let summary = json!({ "type": "summary", "summary": "Refactor the parser", "leafUuid": "x" });
        Claude { rows: vec![summary], last: None, clock: 0 }
    }

    fn push_after(&mut self, parent: Option<String>, row: Value) -> String {
        self.clock += 1;
        let uuid = format!("00000000-0000-4000-8000-{:012}", self.clock);
        let mut row = row;
        let base = json!({
            "parentUuid": parent, "isSidechain": false, "userType": "external", "cwd": "/home/me/app",
            "sessionId": "3f2c9a1e-0b7d-4c55-9d1a-2f8e6b4a7c10", "version": "2.0.31", "gitBranch": "main",
            "uuid": uuid, "timestamp": stamp(self.clock as i64 * 1000),
        });
        for (k, v) in base.as_object().unwrap() {
            if row.get(k).is_none() {
                row[k] = v.clone();
            }
        }
        self.rows.push(row);
        self.last = Some(uuid.clone());
        uuid
    }

    fn push(&mut self, row: Value) -> String {
        let parent = self.last.clone();
        self.push_after(parent, row)
    }

    fn user(&mut self, content: Value) -> String {
        self.push(json!({ "type": "user", "message": { "role": "user", "content": content } }))
    }

    fn assistant(&mut self, blocks: Value) -> String {
        let id = format!("msg_{}", self.clock);
        self.push(json!({ "type": "assistant", "requestId": "req_1",
                          "message": { "id": id, "type": "message", "role": "assistant", "model": "claude-opus-4-5", "content": blocks, "stop_reason": null } }))
    }

    fn result(&mut self, id: &str, output: &str, error: bool) -> String {
        let block = json!({ "type": "tool_result", "tool_use_id": id, "content": [{ "type": "text", "text": output }], "is_error": error });
        self.push(json!({ "type": "user", "message": { "role": "user", "content": [block] }, "toolUseResult": { "stdout": output } }))
    }

    /// A prompt, thinking, a text with an `Edit`, its result, the closing text: the reply
    /// is the two texts, with the call and its output.
    fn turn(&mut self, kept: &mut Kept, k: usize, error: bool) {
        let prompt = format!("Turn {k}: rename the field in module_{k}.rs\nand keep the tests green");
        self.user(json!(prompt));
        self.assistant(
            json!([{ "type": "thinking", "thinking": format!("Where is module_{k}?"), "signature": "sig" }]),
        );
        let id = format!("toolu_{k:04}");
        let edit = json!({ "file_path": format!("/home/me/app/module_{k}.rs"), "old_string": "a", "new_string": "b" });
        self.assistant(json!([{ "type": "text", "text": format!("Editing module_{k}.rs.") },
                              { "type": "tool_use", "id": id, "name": "Edit", "input": edit }]));
        self.result(&id, if error { "String to replace not found" } else { "The file has been updated." }, error);
        self.assistant(
            json!([{ "type": "text", "text": "\n\n" }, { "type": "text", "text": format!("Done with turn {k}.") }]),
        );
        kept.push((prompt, format!("Editing module_{k}.rs.\n\nDone with turn {k}.")));
    }

    fn text(&self) -> String {
        self.rows.iter().map(|r| format!("{r}\n")).collect()
    }
}

/// Builds a long Claude Code session: 60 ordinary turns (every 7th tool call an error), a
/// sub-agent's sidechain, interrupt notices, a task notification, a built-in `/cost`
/// answered locally, a custom `/review` command with its expansion, a compaction and an
/// abandoned branch. Returns the transcript, the turns kept, and the abandoned prompt.
fn claude_transcript() -> (String, Kept, &'static str) {
    let mut c = Claude::new();
    let mut kept = Kept::new();
    for k in 1..=60 {
        c.turn(&mut kept, k, k % 7 == 0);
        match k {
            5 => {
                // A sub-agent's records (Task tool): isSidechain, a chain of their own.
                let root = c.push_after(None, json!({ "type": "user", "isSidechain": true, "message": { "role": "user", "content": "Explore the repo" } }));
                c.push_after(Some(root), json!({ "type": "assistant", "isSidechain": true, "message": { "role": "assistant", "content": [{ "type": "text", "text": "SIDECHAIN CHATTER" }] } }));
                // The main chain goes on from its own last record.
                let main = c.rows.iter().rev().find(|r| r["isSidechain"] == false).unwrap()["uuid"]
                    .as_str()
                    .unwrap()
                    .to_string();
                c.last = Some(main);
            }
            10 => {
                // Interrupted while a tool ran, then while it answered: notices, no turns.
                c.user(json!([{ "type": "text", "text": "[Request interrupted by user for tool use]" }]));
                c.user(json!([{ "type": "text", "text": "[Request interrupted by user]" }]));
            }
            12 => {
                c.user(json!("<task-notification>\n<task-id>b7x</task-id>\n<status>completed</status>\n<summary>Background build finished</summary>\n</task-notification>"));
            }
            15 => {
                // /cost: built in, answered locally (a caveat meta record, the command, its output).
                c.push(json!({ "type": "user", "isMeta": true, "message": { "role": "user", "content": "Caveat: The messages below were generated by the user while running local commands. DO NOT respond to these messages or otherwise consider them in your response unless the user explicitly asks you to." } }));
                c.user(json!("<command-name>/cost</command-name>\n            <command-message>cost</command-message>\n            <command-args></command-args>"));
                c.user(json!("<local-command-stdout>Total cost: $0.12</local-command-stdout>"));
            }
            20 => {
                // A custom slash command: its record, then the expanded prompt as a meta record.
                c.user(json!("<command-message>review is running…</command-message>\n<command-name>/review</command-name>\n<command-args>src/lib.rs</command-args>"));
                c.push(json!({ "type": "user", "isMeta": true, "message": { "role": "user", "content": [{ "type": "text", "text": "Review src/lib.rs for bugs and report them." }] } }));
                c.assistant(json!([{ "type": "text", "text": "Reviewed: no bugs found." }]));
                kept.push(("/review src/lib.rs".to_string(), "Reviewed: no bugs found.".to_string()));
            }
            30 => {
                // Compaction: a boundary with no parent but a logical one, then the summary.
                let logical = c.last.clone();
                let boundary = c.push_after(None, json!({ "type": "system", "subtype": "compact_boundary", "content": "Conversation compacted", "level": "info",
                                                          "logicalParentUuid": logical, "compactMetadata": { "trigger": "auto", "preTokens": 155000 } }));
                c.push_after(Some(boundary), json!({ "type": "user", "isCompactSummary": true, "isVisibleInTranscriptOnly": true,
                    "message": { "role": "user", "content": "This session is being continued from a previous conversation that ran out of context. Summary: ..." } }));
            }
            45 => {
                // The person rewinds: a turn written, then abandoned; the conversation goes on
                // from turn 45's last record.
                let branch = c.last.clone();
                c.user(json!("ABANDONED: delete every test"));
                c.assistant(json!([{ "type": "text", "text": "ABANDONED REPLY: deleting tests." }]));
                c.last = branch;
            }
            _ => {}
        }
    }
    (c.text(), kept, "ABANDONED")
}

#[test]
fn claude_code_a_long_transcript_imports_the_kept_turns_once_and_again_nothing() {
    let env = Env::new();
    let (text, kept, abandoned) = claude_transcript();
    assert!(text.lines().count() > 300, "several hundred records: {}", text.lines().count());
    assert_eq!(kept.len(), 61, "60 ordinary turns and the /review command");
    let file = env.home.join(".claude/projects/-home-me-app/3f2c9a1e.jsonl");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, &text).unwrap();
    import_whole(
        &env,
        "cc",
        "--claude-code",
        &file,
        &kept,
        &[
            abandoned,
            "SIDECHAIN",
            "interrupted",
            "task-notification",
            "Total cost",
            "/cost",
            "continued from a previous",
        ],
    );

    let got = entries(&env, "cc");
    // The custom command: a turn shown as typed, with the expansion as the prompt sent.
    let review = got.iter().position(|e| e["content"] == "/review src/lib.rs").expect("the /review turn");
    assert_eq!(got[review]["prompt"], "Review src/lib.rs for bugs and report them.", "{:#}", got[review]);
    // Tool calls with their results; is_error marks the call; thinking kept; whitespace-only
    // text blocks dropped.
    let reply = |k: usize| {
        got.iter()
            .find(|e| e["role"] == "assistant" && e["content"].as_str().unwrap().ends_with(&format!("turn {k}.")))
            .unwrap()
    };
    let call = &reply(3)["toolCalls"][0];
    assert_eq!((call["name"].as_str(), call["output"].as_str()), (Some("Edit"), Some("The file has been updated.")));
    assert!(call["error"].is_null() || call["error"] == false, "{call:#}");
    assert_eq!(reply(3)["thinking"], "Where is module_3?");
    assert_eq!(reply(3)["toolCalls"][0]["input"]["file_path"], "/home/me/app/module_3.rs");
    for k in [7, 14, 49] {
        let call = &reply(k)["toolCalls"][0];
        assert_eq!(call["error"], true, "turn {k}'s failed call: {call:#}");
        assert_eq!(call["output"], "String to replace not found");
    }
    assert!(!got.iter().any(|e| e["content"].as_str().unwrap().starts_with("\n")), "no whitespace-only text");
    // Turns past the compaction come after the ones before it, all kept.
    assert!(previews(&env, "cc")[30].starts_with("Turn 30:") && previews(&env, "cc")[31].starts_with("Turn 31:"));
}

#[test]
fn claude_code_a_transcript_that_grew_mid_tool_call_is_continued_in_place() {
    let env = Env::new();
    let (text, kept, _) = claude_transcript();
    let file = env.root.join("session.jsonl");
    std::fs::write(&file, &text).unwrap();
    // Cut right after turn 8's tool_use record, before its tool_result.
    let lines: Vec<&str> = text.lines().collect();
    let cut = lines.iter().position(|l| l.contains("\"toolu_0008\"") && l.contains("tool_use\"")).unwrap() + 1;
    assert!(!lines[..cut].iter().any(|l| l.contains("tool_result") && l.contains("toolu_0008")));
    import_grown(&env, "grown", "--claude-code", &file, cut, &kept);
    let got = entries(&env, "grown");
    let reply =
        got.iter().find(|e| e["content"] == "Editing module_8.rs.\n\nDone with turn 8.").expect("turn 8's whole reply");
    assert_eq!(reply["toolCalls"][0]["output"], "The file has been updated.", "the output came with the growth");
    assert_eq!(got.iter().filter(|e| e["content"].as_str().unwrap().starts_with("Turn 8:")).count(), 1);
}

#[test]
fn claude_code_hooks_and_an_import_of_the_same_session_give_one_set_of_turns() {
    let env = Env::new();
    env.write("a.txt", "zero\n");
    let session = CLAUDE_SESSION;
    let file = env.home.join(".claude/projects/x/session.jsonl");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let mut c = Claude::new();
    let mut kept = Kept::new();
    for k in 1..=2 {
        claude_turn_through_hooks(&env, &file, &mut c, &mut kept, k);
    }
    let by_hooks = show(&env, session);
    assert_eq!(messages(&env, session), conversation(&kept), "the hooks brought the replies in from the transcript");

    let report = import(&env, session, "--claude-code", &file);
    assert_eq!(counts(&report), [0, 0, 0, 0, 2], "both turns known already: {report:#}");
    assert_eq!(show(&env, session), by_hooks, "nothing changed");
    assert_eq!(previews(&env, session).len(), 2);
    let turns = env.json(&["--session", session, "turns"]);
    assert!(
        turns["turns"].as_array().unwrap().iter().all(|t| t["endSnapshot"]["id"].is_string()),
        "the hooks' turns, with snapshots: {turns:#}"
    );

    // The same when the import comes first into a session whose hooks have not read the
    // transcript: the hooks' turns are joined, not doubled.
    let other = "second-session";
    let other_file = env.root.join("second-session.jsonl");
    std::fs::write(&other_file, c.text().replace(CLAUDE_SESSION, other)).unwrap();
    let h = |name: &str, extra: Value| {
        let mut e = json!({ "session_id": other, "transcript_path": env.root.join("not-yet.jsonl"), "cwd": env.ws, "hook_event_name": name });
        for (k, v) in extra.as_object().unwrap() {
            e[k] = v.clone();
        }
        let out = env.run(&["hook", "claude-code"], Some(e.to_string().as_bytes()));
        assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    };
    for (prompt, _) in &kept {
        h("UserPromptSubmit", json!({ "prompt": prompt }));
        h("Stop", json!({ "stop_hook_active": false }));
    }
    let report = import(&env, other, "--claude-code", &other_file);
    assert_eq!(counts(&report), [0, 2, 0, 2, 0], "joined, with their replies: {report:#}");
    assert_eq!(messages(&env, other), conversation(&kept));
    assert_eq!(previews(&env, other).len(), 2);
}

/// The session the Claude Code transcripts built here record.
const CLAUDE_SESSION: &str = "3f2c9a1e-0b7d-4c55-9d1a-2f8e6b4a7c10";

/// Delivers a Claude Code hook event of [`CLAUDE_SESSION`], whose transcript is `file`.
fn claude_hook(env: &Env, file: &std::path::Path, name: &str, extra: Value) {
    let mut e =
        json!({ "session_id": CLAUDE_SESSION, "transcript_path": file, "cwd": env.ws, "hook_event_name": name });
    for (k, v) in extra.as_object().unwrap() {
        e[k] = v.clone();
    }
    let out = env.run(&["hook", "claude-code"], Some(e.to_string().as_bytes()));
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert!(out.stdout.is_empty());
    assert!(std::fs::read_to_string(env.store.join("hooks.log")).unwrap_or_default().is_empty());
}

/// Turn `k` as Claude Code's hooks deliver it: the prompt, a `Write` of `a.txt` (`b.txt`
/// from turn 4 on), and the stop, with the turn written to the transcript `file` before
/// the stop fires.
fn claude_turn_through_hooks(env: &Env, file: &std::path::Path, c: &mut Claude, kept: &mut Kept, k: usize) {
    let written = if k < 4 { "a.txt" } else { "b.txt" };
    let prompt = format!("Turn {k}: rename the field in module_{k}.rs\nand keep the tests green");
    claude_hook(env, file, "UserPromptSubmit", json!({ "prompt": prompt }));
    let input = json!({ "file_path": env.ws.join(written), "content": format!("v{k}\n") });
    let call = json!({ "tool_name": "Write", "tool_input": input, "tool_use_id": format!("toolu_{k:04}") });
    claude_hook(env, file, "PreToolUse", call.clone());
    env.write(written, format!("v{k}\n"));
    let mut post = call;
    post["tool_response"] = json!({ "type": "update", "filePath": env.ws.join(written) });
    claude_hook(env, file, "PostToolUse", post);
    c.turn(kept, k, false);
    std::fs::write(file, c.text()).unwrap();
    claude_hook(
        env,
        file,
        "Stop",
        json!({ "stop_hook_active": false, "last_assistant_message": format!("Done with turn {k}.") }),
    );
}

#[test]
fn rewound_turns_stay_rewound_when_the_agent_carries_on_and_its_transcript_is_imported() {
    let env = Env::new();
    env.write("a.txt", "zero\n");
    let file = env.home.join(".claude/projects/x/session.jsonl");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let (mut c, mut kept) = (Claude::new(), Kept::new());
    claude_turn_through_hooks(&env, &file, &mut c, &mut kept, 1);
    claude_turn_through_hooks(&env, &file, &mut c, &mut kept, 2);
    // A turn the hooks never saw (they were not installed for it), begun now, between the
    // rewind's first turn and the rewind.
    c.push(
        json!({ "type": "user", "message": { "role": "user", "content": "UNHOOKED prompt" }, "timestamp": stamp(0) }),
    );
    c.assistant(json!([{ "type": "text", "text": "UNHOOKED reply" }]));
    claude_turn_through_hooks(&env, &file, &mut c, &mut kept, 3);

    let preview = env.json(&["rewind", "--to", "2"]);
    let done = env.json(&["rewind", "--to", "2", "--apply", "--plan", preview["planId"].as_str().unwrap()]);
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"v1\n"[..]));
    let marked = |env: &Env| -> Vec<bool> {
        let turns = env.json(&["--session", CLAUDE_SESSION, "turns"]);
        turns["turns"].as_array().unwrap().iter().map(|t| t["rewound"]["at"].is_string()).collect()
    };
    assert_eq!(marked(&env), [false, true, true], "turns 2 and 3 are marked rewound");
    let text = env.ok(&["--session", CLAUDE_SESSION, "turns"], None);
    assert_eq!(String::from_utf8_lossy(&text.stdout).matches("rewound at ").count(), 2);

    // The agent carries on: its transcript still holds turns 2 and 3, and the stop's
    // import brings only turn 4's reply.
    claude_turn_through_hooks(&env, &file, &mut c, &mut kept, 4);
    let kept_now: Kept = vec![kept[0].clone(), kept[3].clone()];
    assert_eq!(messages(&env, CLAUDE_SESSION), conversation(&kept_now), "no reply of a rewound turn came back");
    assert_eq!(marked(&env), [false, true, true, false]);

    // A full import adds no turn: 2 and 3 are the rewound ones, the unhooked turn began
    // among them.
    let report = import(&env, CLAUDE_SESSION, "--claude-code", &file);
    assert_eq!(counts(&report), [0, 0, 0, 0, 2], "{report:#}");
    assert_eq!(report["rewoundTurns"], 3, "{report:#}");
    assert_eq!(messages(&env, CLAUDE_SESSION), conversation(&kept_now));
    assert_eq!(previews(&env, CLAUDE_SESSION).len(), 4);

    // Another Claude Code session's import of this transcript is refused.
    let other = json!({ "session_id": "another-claude-session", "cwd": env.ws, "hook_event_name": "UserPromptSubmit", "prompt": "hi" });
    deliver(&env, "claude-code", &other);
    let out = env.run(
        &["--session", "another-claude-session", "history", "import", "--claude-code", file.to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", show_output(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("records claude-code session {CLAUDE_SESSION}")),
        "{}",
        show_output(&out)
    );
    assert_eq!(previews(&env, "another-claude-session").len(), 1, "nothing imported");

    // Undoing the rewind gives the turns back, marks gone, each reply once.
    env.json(&["rollback", done["checkpointId"].as_str().unwrap(), "--apply"]);
    assert_eq!(marked(&env), [false, false, false, false]);
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"v3\n"[..]));
    import(&env, CLAUDE_SESSION, "--claude-code", &file);
    let said = messages(&env, CLAUDE_SESSION);
    for k in 1..=4 {
        let reply = &kept[k - 1].1;
        assert_eq!(said.iter().filter(|(_, c)| c == reply).count(), 1, "turn {k}'s reply once: {said:#?}");
    }
}

#[test]
fn claude_code_codex_and_gemini_imports_refuse_files_that_are_not_their_transcripts() {
    let env = Env::new();
    env.ok(&["init"], None);
    for flag in ["--claude-code", "--codex", "--gemini"] {
        refused(&env, flag);
    }
    // An empty file is a transcript with nothing in it yet.
    let empty = env.root.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    for flag in ["--claude-code", "--codex", "--gemini"] {
        let report = env.json(&["history", "import", flag, empty.to_str().unwrap()]);
        assert_eq!(report["turns"], 0, "{report:#}");
    }
}

// ---------------------------------------------------------------------------------------
// Codex CLI
// ---------------------------------------------------------------------------------------

/// A Codex rollout being written.
struct Rollout {
    lines: Vec<String>,
    clock: u64,
}

impl Rollout {
    fn new() -> Rollout {
        let mut r = Rollout { lines: Vec::new(), clock: 0 };
        r.line("session_meta", json!({ "id": "019a6b2e-7c1d-7f00-9a5e-3c2b1a0f9e8d", "timestamp": "2026-05-20T10:00:00.000Z", "cwd": "/repo",
                                        "originator": "codex_cli_rs", "cli_version": "0.130.0", "source": "cli", "model_provider": "openai",
                                        "base_instructions": null }));
        r
    }

    fn line(&mut self, kind: &str, payload: Value) {
        self.clock += 1;
        let at = stamp(self.clock as i64 * 1000);
        self.lines.push(json!({ "timestamp": at, "type": kind, "payload": payload }).to_string());
    }

    fn event(&mut self, payload: Value) {
        self.line("event_msg", payload);
    }

    fn item(&mut self, payload: Value) {
        self.line("response_item", payload);
    }

    /// One turn: its context, the prompt (injected context, then the person's words), a
    /// reasoning summary, an assistant message, a shell call and its output, a freeform
    /// `apply_patch` with its result (failed when `patch_fails`), the final message.
    fn turn(&mut self, kept: &mut Kept, k: usize, prompt: &str, patch_fails: bool) {
        self.line("turn_context", json!({ "turn_id": k.to_string(), "cwd": "/repo", "approval_policy": "on-request",
                                           "sandbox_policy": { "type": "workspace-write" }, "model": "gpt-5-codex", "summary": "auto" }));
        self.event(json!({ "type": "task_started", "turn_id": k.to_string(), "model_context_window": 272000 }));
        self.item(json!({ "type": "message", "role": "user", "content": [
            { "type": "input_text", "text": "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>be brief</INSTRUCTIONS>" },
            { "type": "input_text", "text": "<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>" } ] }));
        self.item(json!({ "type": "message", "role": "user", "content": [{ "type": "input_text", "text": prompt }] }));
        self.event(
            json!({ "type": "user_message", "message": prompt, "images": [], "local_images": [], "text_elements": [] }),
        );
        self.item(json!({ "type": "reasoning", "summary": [{ "type": "summary_text", "text": format!("**Plan {k}**") }], "content": null, "encrypted_content": "gAAAA" }));
        self.event(json!({ "type": "agent_reasoning", "text": format!("**Plan {k}**") }));
        self.item(json!({ "type": "message", "role": "assistant", "content": [{ "type": "output_text", "text": format!("Checking file_{k}.") }] }));
        let sh = format!("call_sh_{k}");
        self.item(json!({ "type": "function_call", "name": "shell", "arguments": json!({ "command": ["bash", "-lc", format!("cat file_{k}.txt")], "workdir": "/repo" }).to_string(), "call_id": sh }));
        self.item(json!({ "type": "function_call_output", "call_id": sh, "output": format!("contents of file_{k}") }));
        let patch = format!("call_patch_{k}");
        let text = format!("*** Begin Patch\n*** Update File: file_{k}.txt\n@@\n-a\n+b\n*** End Patch");
        self.item(json!({ "type": "custom_tool_call", "status": "completed", "call_id": patch, "name": "apply_patch", "input": text }));
        self.event(json!({ "type": "patch_apply_end", "call_id": patch, "turn_id": k.to_string(), "stdout": "", "stderr": if patch_fails { "no match" } else { "" },
                           "success": !patch_fails, "changes": { format!("/repo/file_{k}.txt"): { "type": "update", "unified_diff": "@@", "move_path": null } } }));
        self.item(json!({ "type": "custom_tool_call_output", "call_id": patch, "output": if patch_fails { "apply_patch failed: no match" } else { "Success. Updated files." } }));
        self.event(json!({ "type": "agent_message", "message": format!("Turn {k} finished.") }));
        self.item(json!({ "type": "message", "role": "assistant", "content": [{ "type": "output_text", "text": format!("Turn {k} finished.") }] }));
        self.event(json!({ "type": "token_count", "info": null }));
        self.event(json!({ "type": "task_complete", "turn_id": k.to_string(), "last_agent_message": format!("Turn {k} finished.") }));
        kept.push((prompt.to_string(), format!("Checking file_{k}.\n\nTurn {k} finished.")));
    }

    fn text(&self) -> String {
        self.lines.iter().map(|l| format!("{l}\n")).collect()
    }
}

/// A long Codex session: 30 turns (every 9th patch fails), a compaction after turn 12, and
/// after turn 20 two turns that Codex's own rollback takes back.
fn codex_rollout() -> (String, Kept) {
    let mut r = Rollout::new();
    let mut kept = Kept::new();
    for k in 1..=30 {
        r.turn(&mut kept, k, &format!("Turn {k}: update file_{k}.txt"), k % 9 == 0);
        if k == 12 {
            r.line("compacted", json!({ "message": "Summary of turns 1-12: files updated.", "replacement_history": [
                { "type": "message", "role": "user", "content": [{ "type": "input_text", "text": "Turn 12: update file_12.txt" }] } ] }));
            r.event(json!({ "type": "context_compacted" }));
        }
        if k == 20 {
            let mut gone = Kept::new();
            r.turn(&mut gone, 201, "ROLLED BACK: drop the database", false);
            r.turn(&mut gone, 202, "ROLLED BACK: and the backups", false);
            r.event(json!({ "type": "thread_rolled_back", "num_turns": 2 }));
        }
    }
    (r.text(), kept)
}

#[test]
fn codex_a_long_rollout_imports_the_kept_turns_once_without_rolled_back_ones() {
    let env = Env::new();
    let (text, kept) = codex_rollout();
    assert!(text.lines().count() > 500, "{}", text.lines().count());
    let file = env.home.join(".codex/sessions/2026/05/20/rollout-2026-05-20T11-00-00-019a6b2e.jsonl");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, &text).unwrap();
    import_whole(
        &env,
        "codex",
        "--codex",
        &file,
        &kept,
        &["ROLLED BACK", "AGENTS.md", "environment_context", "Summary of turns"],
    );
    let got = entries(&env, "codex");
    let reply = |k: usize| {
        got.iter().find(|e| e["content"].as_str().unwrap().ends_with(&format!("Turn {k} finished."))).unwrap()
    };
    let calls = reply(4)["toolCalls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert_eq!(calls[0]["name"], "shell");
    assert_eq!(calls[0]["input"]["command"], json!(["bash", "-lc", "cat file_4.txt"]), "the arguments, parsed");
    assert_eq!(calls[0]["output"], "contents of file_4");
    assert_eq!(calls[1]["name"], "apply_patch");
    assert_eq!(calls[1]["output"], "Success. Updated files.");
    assert!(calls[1]["error"].is_null(), "{:#}", calls[1]);
    assert_eq!(reply(4)["thinking"], "**Plan 4**");
    for k in [9, 18, 27] {
        assert_eq!(reply(k)["toolCalls"][1]["error"], true, "turn {k}'s patch failed to apply");
    }
}

#[test]
fn codex_a_rollout_that_grew_mid_tool_call_is_continued_in_place() {
    let env = Env::new();
    let (text, kept) = codex_rollout();
    let file = env.root.join("rollout.jsonl");
    std::fs::write(&file, &text).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let cut = lines.iter().position(|l| l.contains("custom_tool_call\"") && l.contains("call_patch_6")).unwrap() + 1;
    import_grown(&env, "grown", "--codex", &file, cut, &kept);
    let got = entries(&env, "grown");
    let reply =
        got.iter().find(|e| e["content"] == "Checking file_6.\n\nTurn 6 finished.").expect("turn 6's whole reply");
    assert_eq!(reply["toolCalls"][1]["output"], "Success. Updated files.");
}

// ---------------------------------------------------------------------------------------
// Gemini CLI
// ---------------------------------------------------------------------------------------

/// A Gemini chat file being written (JSONL since v0.39).
struct Chat {
    lines: Vec<Value>,
    messages: Vec<Value>,
    clock: u64,
}

impl Chat {
    fn new() -> Chat {
        let meta = json!({ "sessionId": "8d3c1f2e-4b5a-4c6d-9e8f-0a1b2c3d4e5f", "projectHash": "3f7a9c0d", "startTime": "2026-08-21T10:15:01.900Z",
                           "lastUpdated": "2026-08-21T10:15:01.900Z", "kind": "main" });
        Chat { lines: vec![meta], messages: Vec::new(), clock: 0 }
    }

    fn at(&mut self) -> String {
        self.clock += 1;
        stamp(self.clock as i64 * 1000)
    }

    /// Appends a message line (a message seen before is replaced where it stands).
    fn message(&mut self, m: Value) {
        match self.messages.iter().position(|x| x["id"] == m["id"]) {
            Some(i) => self.messages[i] = m.clone(),
            None => self.messages.push(m.clone()),
        }
        self.lines.push(m);
    }

    /// One turn: the prompt, a metadata `$set`, the model's message with thoughts, the same
    /// message again with its tool calls, the tool responses as a user message (v0.44+), an
    /// info notice, the closing message.
    fn turn(&mut self, kept: &mut Kept, k: usize, prompt: &str, error: bool) {
        let at = self.at();
        self.message(
            json!({ "id": format!("u{k}"), "timestamp": at, "type": "user", "content": [{ "text": prompt }] }),
        );
        self.lines.push(json!({ "$set": { "lastUpdated": at } }));
        let at = self.at();
        let model = json!({ "id": format!("g{k}"), "timestamp": at, "type": "gemini", "content": format!("Editing app_{k}.ts."),
                            "thoughts": [{ "subject": "Planning", "description": format!("step {k}"), "timestamp": at }],
                            "tokens": { "input": 9000, "output": 80, "cached": 0, "thoughts": 120, "tool": 0, "total": 9200 }, "model": "gemini-3-pro-preview" });
        self.message(model.clone());
        let id = format!("replace__replace_17873073640{k:02}_0");
        let response = if error {
            json!({ "error": "Failed to edit, could not find the string to replace." })
        } else {
            json!({ "output": format!("Successfully modified file: /p/app_{k}.ts (1 replacements).") })
        };
        let result = json!([{ "functionResponse": { "id": id, "name": "replace", "response": response } }]);
        let mut with_calls = model;
        with_calls["toolCalls"] = json!([{ "id": id, "name": "replace", "args": { "file_path": format!("/p/app_{k}.ts"), "old_string": "foo", "new_string": "bar" },
                                          "result": result, "status": if error { "error" } else { "success" }, "timestamp": at, "displayName": "Edit" }]);
        self.message(with_calls);
        let at = self.at();
        self.message(json!({ "id": format!("r{k}"), "timestamp": at, "type": "user", "content": result }));
        self.message(
            json!({ "id": format!("i{k}"), "timestamp": at, "type": "info", "content": "Tool output saved." }),
        );
        let at = self.at();
        self.message(json!({ "id": format!("f{k}"), "timestamp": at, "type": "gemini", "content": format!("Turn {k} complete."), "thoughts": [] }));
        kept.push((prompt.to_string(), format!("Editing app_{k}.ts.\n\nTurn {k} complete.")));
    }

    fn text(&self) -> String {
        self.lines.iter().map(|l| format!("{l}\n")).collect()
    }
}

/// A long Gemini session: 50 turns (every 8th edit fails), `/help` and `?` typed between
/// them (Gemini ignores them as prompts), a `$set` checkpoint of the whole message list
/// after turn 20 (masking / compression rewrite it), and after turn 35 two turns the person
/// rewinds with `/rewind` (`$rewindTo` the first of them).
fn gemini_chat() -> (String, Kept) {
    let mut c = Chat::new();
    let mut kept = Kept::new();
    for k in 1..=50 {
        c.turn(&mut kept, k, &format!("Turn {k}: rename foo to bar in app_{k}.ts"), k % 8 == 0);
        if k == 10 {
            let at = c.at();
            c.message(json!({ "id": "help1", "timestamp": at, "type": "user", "content": "/help" }));
            c.message(json!({ "id": "help2", "timestamp": at, "type": "user", "content": "?" }));
            c.message(json!({ "id": "err1", "timestamp": at, "type": "error", "content": "Quota exceeded, retrying" }));
        }
        if k == 20 {
            let all = c.messages.clone();
            c.lines.push(json!({ "$set": { "messages": all, "lastUpdated": "2026-08-21T12:00:00.000Z" } }));
        }
        if k == 35 {
            let mut gone = Kept::new();
            c.turn(&mut gone, 351, "REWOUND: rewrite everything in Rust", false);
            c.turn(&mut gone, 352, "REWOUND: and delete the old code", false);
            c.lines.push(json!({ "$rewindTo": "u351" }));
            let at = c.messages.iter().position(|m| m["id"] == "u351").unwrap();
            c.messages.truncate(at);
        }
    }
    (c.text(), kept)
}

#[test]
fn gemini_a_long_chat_file_imports_the_kept_turns_once_without_rewound_ones() {
    let env = Env::new();
    let (text, kept) = gemini_chat();
    assert!(text.lines().count() > 300, "{}", text.lines().count());
    let file = env.home.join(".gemini/tmp/myproj/chats/session-2026-08-21T10-15-8d3c1f2e.jsonl");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, &text).unwrap();
    import_whole(&env, "gemini", "--gemini", &file, &kept, &["REWOUND", "Quota exceeded", "Tool output saved"]);
    let got = entries(&env, "gemini");
    let reply = |k: usize| {
        got.iter().find(|e| e["content"].as_str().unwrap().ends_with(&format!("Turn {k} complete."))).unwrap()
    };
    let calls = reply(3)["toolCalls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "the model message written twice counts once: {calls:#?}");
    assert_eq!(calls[0]["name"], "replace");
    assert_eq!(calls[0]["output"], "Successfully modified file: /p/app_3.ts (1 replacements).");
    assert_eq!(reply(3)["thinking"], "Planning: step 3");
    for k in [8, 16, 24] {
        assert_eq!(reply(k)["toolCalls"][0]["error"], true, "turn {k}'s edit failed: {:#}", reply(k));
    }

    // The chat file as Gemini CLI wrote it before v0.39: one object with its messages.
    let legacy = env.root.join("session-2026-01-01T10-00-8d3c1f2e.json");
    let mut c = Chat::new();
    let mut small = Kept::new();
    for k in 1..=3 {
        c.turn(&mut small, k, &format!("Legacy turn {k}"), false);
    }
    let mut record = c.lines[0].clone();
    record["messages"] = json!(c.messages);
    std::fs::write(&legacy, serde_json::to_string_pretty(&record).unwrap()).unwrap();
    env.ok(&["session", "new", "--id", "legacy"], None);
    let report = import(&env, "legacy", "--gemini", &legacy);
    assert_eq!(counts(&report), [3, 0, 0, 6, 0], "{report:#}");
    assert_eq!(messages(&env, "legacy"), conversation(&small));
}

#[test]
fn gemini_a_chat_file_that_grew_mid_turn_is_continued_in_place() {
    let env = Env::new();
    let (text, kept) = gemini_chat();
    let file = env.root.join("chat.jsonl");
    std::fs::write(&file, &text).unwrap();
    // Cut after turn 6's model message, before its tool calls were recorded (Gemini records
    // them when the batch completes: useGeminiStream.ts recordCompletedToolCalls).
    let lines: Vec<&str> = text.lines().collect();
    let cut = lines.iter().position(|l| l.contains("\"id\":\"g6\"")).unwrap() + 1;
    assert!(!lines[cut - 1].contains("toolCalls"));
    import_grown(&env, "grown", "--gemini", &file, cut, &kept);
    let got = entries(&env, "grown");
    let reply =
        got.iter().find(|e| e["content"] == "Editing app_6.ts.\n\nTurn 6 complete.").expect("turn 6's whole reply");
    assert_eq!(reply["toolCalls"][0]["output"], "Successfully modified file: /p/app_6.ts (1 replacements).");
}

#[test]
fn an_agents_own_masking_of_its_record_never_thins_the_history_imported() {
    // Gemini rewrites its messages with `$set` when it masks old tool output
    // (chatRecordingService.ts updateMessagesFromHistory): importing again must keep the
    // full output turnback already has.
    let env = Env::new();
    env.ok(&["init"], None);
    let meta = json!({ "sessionId": "g-mask", "projectHash": "3f7a", "startTime": "2026-08-21T10:15:00Z", "lastUpdated": "2026-08-21T10:15:00Z" });
    let user = json!({ "id": "u1", "timestamp": "2026-08-21T10:16:00Z", "type": "user", "content": [{ "text": "read the log" }] });
    let reply = |output: &str| {
        json!({ "id": "g1", "timestamp": "2026-08-21T10:16:04Z", "type": "gemini", "content": "It says ok.",
               "toolCalls": [{ "id": "c1", "name": "read_file", "args": { "file_path": "/w/log" }, "status": "success",
                               "result": [{ "functionResponse": { "id": "c1", "name": "read_file", "response": { "output": output } } }] }] })
    };
    let file = env.root.join("chat.jsonl");
    std::fs::write(&file, format!("{meta}\n{user}\n{}\n", reply("the full log"))).unwrap();
    import(&env, "g-mask", "--gemini", &file);
    let masked = json!({ "$set": { "messages": [user, reply("[output masked]")] } });
    std::fs::write(&file, format!("{meta}\n{user}\n{}\n{masked}\n", reply("the full log"))).unwrap();
    let again = import(&env, "g-mask", "--gemini", &file);
    assert_eq!(counts(&again), [0, 0, 0, 0, 1], "{again:#}");
    assert_eq!(entries(&env, "g-mask")[1]["toolCalls"][0]["output"], "the full log");
}

#[test]
fn one_agents_transcript_given_as_anothers_is_refused() {
    let env = Env::new();
    env.ok(&["init"], None);
    let claude = env.root.join("claude.jsonl");
    let row = json!({ "type": "user", "uuid": "u1", "parentUuid": null, "sessionId": "s", "timestamp": "2026-12-01T10:00:00Z",
                      "message": { "role": "user", "content": "hi" } });
    std::fs::write(&claude, format!("{row}\n")).unwrap();
    let gemini = env.root.join("gemini.jsonl");
    let meta = json!({ "sessionId": "g", "projectHash": "3f7a", "startTime": "2026-08-21T10:15:00Z" });
    let msg = json!({ "id": "u1", "timestamp": "2026-08-21T10:16:00Z", "type": "user", "content": [{ "text": "hi" }] });
    std::fs::write(&gemini, format!("{meta}\n{msg}\n")).unwrap();
    for (flag, file) in [("--gemini", &claude), ("--codex", &claude), ("--claude-code", &gemini), ("--codex", &gemini)]
    {
        let out = env.fail(&["history", "import", flag, file.to_str().unwrap()], None);
        assert_eq!((out.exit, out.code.as_str()), (2, "invalid-argument"), "{flag} {}: {out:?}", file.display());
    }
}

// ---------------------------------------------------------------------------------------
// opencode
// ---------------------------------------------------------------------------------------

/// opencode's storage before v1.2 (JSON files; storage/json-migration.ts reads this
/// layout): `session/<project>/<id>.json`, `message/<session>/<id>.json`,
/// `part/<message>/<id>.json`, in the message-v2.ts shapes. 120 turns, each a prompt (with a
/// synthetic part opencode adds), reasoning, an edit and a bash call with their states, and
/// a reply; the last 3 undone with opencode's /undo (`revert.messageID`).
fn opencode_storage(data: &std::path::Path) -> Kept {
    let storage = data.join("storage");
    let write = |path: std::path::PathBuf, v: &Value| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, v.to_string()).unwrap();
    };
    let (session, base) = ("ses_import01", 1_764_981_943_000i64);
    let mut kept = Kept::new();
    let mut revert = None;
    for t in 0..120 {
        let (user, assistant) = (format!("msg_{:04}a", t), format!("msg_{:04}b", t));
        let at = base + t * 60_000;
        let prompt = format!("Turn {t}: tighten the parser\nand keep the tests green");
        let reply = format!("Done with turn {t}.");
        if t == 117 {
            revert = Some(user.clone());
        }
        if t < 117 {
            kept.push((prompt.clone(), reply.clone()));
        }
        write(
            storage.join(format!("message/{session}/{user}.json")),
            &json!({ "id": user, "sessionID": session, "role": "user", "time": { "created": at }, "agent": "build" }),
        );
        write(
            storage.join(format!("part/{user}/prt_{user}_1.json")),
            &json!({ "id": format!("prt_{user}_1"), "messageID": user, "sessionID": session, "type": "text", "text": prompt }),
        );
        write(
            storage.join(format!("part/{user}/prt_{user}_2.json")),
            &json!({ "id": format!("prt_{user}_2"), "messageID": user, "sessionID": session, "type": "text", "text": "Use the above message", "synthetic": true }),
        );
        write(
            storage.join(format!("message/{session}/{assistant}.json")),
            &json!({ "id": assistant, "sessionID": session, "role": "assistant", "parentID": user, "time": { "created": at + 1000, "completed": at + 9000 } }),
        );
        let parts = [
            json!({ "type": "step-start", "snapshot": "4b825dc6" }),
            json!({ "type": "reasoning", "text": format!("turn {t}: look first"), "time": { "start": 1, "end": 2 } }),
            json!({ "type": "tool", "callID": format!("toolu_{t}_e"), "tool": "edit",
                    "state": { "status": "completed", "input": { "filePath": "/p/parser.rs", "oldString": "a", "newString": "b" }, "output": "Edit applied successfully.", "title": "parser.rs", "metadata": {}, "time": { "start": 1, "end": 2 } } }),
            json!({ "type": "tool", "callID": format!("toolu_{t}_b"), "tool": "bash",
                    "state": { "status": if t % 10 == 0 { "error" } else { "completed" }, "input": { "command": "cargo test" }, "output": "ok", "error": "exit 101", "time": { "start": 1, "end": 2 } } }),
            json!({ "type": "text", "text": reply }),
            json!({ "type": "step-finish", "reason": "stop", "cost": 0.01 }),
        ];
        for (i, mut p) in parts.into_iter().enumerate() {
            p["id"] = json!(format!("prt_{assistant}_{i}"));
            p["messageID"] = json!(assistant);
            p["sessionID"] = json!(session);
            write(storage.join(format!("part/{assistant}/prt_{assistant}_{i}.json")), &p);
        }
    }
    write(
        storage.join(format!("session/e7f90f8a/{session}.json")),
        &json!({ "id": session, "projectID": "e7f90f8a", "directory": "/p", "title": "parser", "version": "1.1.65",
                   "time": { "created": base, "updated": base }, "revert": { "messageID": revert, "snapshot": "abc" } }),
    );
    kept
}

#[test]
fn opencode_a_long_session_from_its_storage_imports_the_kept_turns_once_without_undone_ones() {
    let env = Env::new();
    env.ok(&["init"], None);
    let data = env.root.join("opencode-data");
    let kept = opencode_storage(&data);
    env.ok(&["session", "new", "--id", "oc"], None);
    let args = [
        "--session",
        "oc",
        "history",
        "import",
        "--opencode",
        "ses_import01",
        "--opencode-data",
        data.to_str().unwrap(),
    ];
    let report = env.json(&args);
    let n = kept.len() as u64;
    assert_eq!(counts(&report), [n, 0, 0, 2 * n, 0], "{report:#}");
    assert_eq!(messages(&env, "oc"), conversation(&kept), "the turns the person kept, undone ones left out");
    let failed = entries(&env, "oc").into_iter().filter(|e| e["toolCalls"][1]["error"] == true).count();
    assert_eq!(failed, 12, "the bash calls that failed say so");
    let before = show(&env, "oc");
    let again = env.json(&args);
    assert_eq!(counts(&again), [0, 0, 0, 0, n], "{again:#}");
    assert_eq!(show(&env, "oc"), before);
    let missing =
        env.fail(&["history", "import", "--opencode", "ses_nope", "--opencode-data", data.to_str().unwrap()], None);
    assert_eq!(missing.code, "not-found", "{missing:?}");
}
