//! The native hook adapters for Codex CLI, Gemini CLI, Cursor and opencode, end to end:
//! each agent's recorded event sequence, in the shape its own documentation gives, fed in
//! order through `turnback hook AGENT` with the files really changed between a tool's
//! "before" and "after" events; then the turns, checkpoints, shell records, history and a
//! rewind that leaves a person's later edit alone. Also each installer (merge, idempotence,
//! uninstall byte for byte) and the opencode plugin itself, run under node.
//!
//! Payload shapes are cited from the research notes kept with the adapters (the official
//! references they quote): Codex — developers.openai.com/codex/hooks and
//! `codex-rs/hooks/schema/generated/*.command.input.schema.json` (rollout:
//! `codex-rs/protocol/src/protocol.rs`, `models.rs`); Gemini CLI — docs/hooks/reference.md,
//! `packages/core/src/hooks/types.ts`, `hookEventHandler.ts` (chat file:
//! `packages/core/src/services/chatRecordingService.ts`); Cursor —
//! cursor.com/docs/reference/hooks and payloads captured from Cursor 3.x; opencode —
//! `packages/plugin/src/index.ts` (the `Hooks` interface) and
//! packages/web/src/content/docs/plugins.mdx, as forwarded by turnback's plugin
//! (`commands/hook/plugin.js`, its events documented atop `commands/hook/opencode.rs`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::{
    Env, claude_event, deliver, files_under, history, hook, parse_json, show_output, stamp, str_at, with,
};

const P1: &str = "make the app print v1, add new.txt and drop old.txt";
const P2: &str = "now v2, touch the notes and add t2.txt";
const PERSON: &str = "notes by the person\n";

// ---------------------------------------------------------------------------------------
// Delivering events
// ---------------------------------------------------------------------------------------

/// The answer Cursor reads back for an event: everything is let through (Cursor's hooks
/// reference: `{continue}` for beforeSubmitPrompt, `{permission}` for the events that
/// ask, JSON for every other event).
fn cursor_answer(name: &str) -> Value {
    match name {
        "beforeSubmitPrompt" => json!({ "continue": true }),
        "preToolUse" | "beforeShellExecution" | "beforeMCPExecution" | "beforeReadFile" | "subagentStart" => {
            json!({ "permission": "allow" })
        }
        _ => json!({}),
    }
}

/// [`deliver`] for Cursor: the answer must be the one that lets everything through.
fn cursor(env: &Env, event: &Value) {
    let out = deliver(env, "cursor", event);
    let name = str_at(event, "/hook_event_name");
    let got: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("Cursor reads JSON, got {out:?}: {e}"));
    assert_eq!(got, cursor_answer(name), "Cursor's answer to {name}");
}

// ---------------------------------------------------------------------------------------
// The story every agent tells, and what it must leave
// ---------------------------------------------------------------------------------------

/// The workspace before turn 1.
fn seed(env: &Env) {
    env.write("src/app.txt", "app v0\n");
    env.write("notes.txt", "notes v0\n");
    env.write("old.txt", "old\n");
}

/// Every file of the workspace with its text.
fn tree(env: &Env) -> BTreeMap<String, String> {
    files_under(&env.ws)
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&env.ws).unwrap().to_string_lossy().into_owned();
            (rel, String::from_utf8(std::fs::read(&p).unwrap()).unwrap())
        })
        .collect()
}

fn rm(env: &Env, rel: &str) {
    std::fs::remove_file(env.ws.join(rel)).unwrap();
}

/// A checkpoint as the story checks it: its targets (path, effect), sorted, and how it
/// was closed.
fn cp(targets: &[(&str, &str)], commit: &str) -> Value {
    let mut t: Vec<Value> = targets.iter().map(|(p, e)| json!([p, e])).collect();
    t.sort_by_key(|v| v.to_string());
    json!({ "targets": t, "stage": "committed", "commit": commit })
}

/// The checkpoints of one turn (`checkpoints --turn T --all`), as [`cp`] shapes them.
fn turn_checkpoints(env: &Env, session: &str, turn: u64) -> Vec<Value> {
    let list = env.json(&["--session", session, "checkpoints", "--turn", &turn.to_string(), "--all"]);
    list["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let mut t: Vec<Value> =
                c["targets"].as_array().unwrap().iter().map(|t| json!([t["path"], t["effect"]])).collect();
            t.sort_by_key(|v| v.to_string());
            json!({ "targets": t, "stage": c["stageState"], "commit": c["mutation"]["commitState"] })
        })
        .collect()
}

fn pairs(want: &[(&str, &str)]) -> Vec<(String, String)> {
    want.iter().map(|(r, c)| (r.to_string(), c.to_string())).collect()
}

/// A rewind preview's document, whatever its exit code.
fn rewind_preview(env: &Env, session: &str, to: u64) -> (Option<i32>, Value) {
    let out = env.run(&["--json", "--session", session, "rewind", "--to", &to.to_string()], None);
    (out.status.code(), parse_json(&out))
}

/// What one agent's two-turn story must have recorded.
struct Expected<'a> {
    session: &'a str,
    /// Each turn's checkpoints, in the order they were made.
    checkpoints: [Vec<Value>; 2],
    /// Each turn's shell commands.
    shell: [&'a [&'a str]; 2],
    /// The history: prompts, and the replies where the agent gives them.
    history: Vec<(&'a str, &'a str)>,
    /// How many of those entries belong to turn 1.
    turn1_entries: usize,
    /// The whole workspace as turn 1 left it.
    turn1_end: BTreeMap<String, String>,
}

/// Checks everything the story recorded; then the person edits `notes.txt` (which the
/// agent changed in turn 2) and `rewind --to 2` is previewed and applied: the workspace is
/// exactly as turn 1 left it, except the person's file.
fn check_story(env: &Env, want: &Expected) {
    let s = want.session;
    let turns = env.json(&["--session", s, "turns"])["turns"].as_array().unwrap().clone();
    let previews: Vec<&str> = turns.iter().map(|t| t["preview"].as_str().unwrap()).collect();
    assert_eq!(previews, [P1, P2], "two turns, one per prompt: {turns:#?}");
    for t in &turns {
        assert_eq!(t["kind"], "prompt", "{t:#}");
        assert!(t["endedAt"].is_string() && t["endSnapshot"]["id"].is_string(), "each turn was stopped: {t:#}");
        assert_eq!(t["snapshot"]["late"], false, "{t:#}");
    }
    for (i, expected) in want.checkpoints.iter().enumerate() {
        assert_eq!(&turn_checkpoints(env, s, i as u64 + 1), expected, "the checkpoints of turn {}", i + 1);
    }
    let all = env.json(&["--session", s, "checkpoints", "--all"])["checkpoints"].as_array().unwrap().len();
    assert_eq!(all, want.checkpoints[0].len() + want.checkpoints[1].len(), "no checkpoint outside the two turns");
    // Shell commands are recorded in their turns: a rewind names what it cannot undo.
    let both: Vec<&str> = want.shell[0].iter().chain(want.shell[1]).copied().collect();
    assert_eq!(rewind_preview(env, s, 1).1["shellEffects"], json!(both), "the shell commands of turns 1 and 2");
    assert_eq!(rewind_preview(env, s, 2).1["shellEffects"], json!(want.shell[1]), "turn 2's shell commands");
    assert_eq!(history(env, s), pairs(&want.history), "the history of session {s}");

    // A person's own edit after the agent's turn, to a file the agent changed in turn 2.
    env.write("notes.txt", PERSON);
    let now = tree(env);
    let mut actions = BTreeMap::new();
    for path in want.turn1_end.keys().chain(now.keys()) {
        let action = match (want.turn1_end.get(path), now.get(path)) {
            (a, b) if a == b => continue,
            _ if path == "notes.txt" => "leave-alone",
            (Some(_), _) => "restore",
            (None, _) => "delete",
        };
        actions.insert(path.clone(), action.to_string());
    }
    let (code, plan) = rewind_preview(env, s, 2);
    assert_eq!(code, Some(3), "partial: the person's file is left alone: {plan:#}");
    let got: BTreeMap<String, String> = plan["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (str_at(p, "/path").to_string(), str_at(p, "/action").to_string()))
        .collect();
    assert_eq!(got, actions, "the plan takes turn 2 back and nothing else: {plan:#}");
    let out = env
        .run(&["--json", "--session", s, "rewind", "--to", "2", "--apply", "--plan", str_at(&plan, "/planId")], None);
    assert_eq!(out.status.code(), Some(3), "applied, partial: {}", show_output(&out));
    let done = parse_json(&out);
    assert_eq!(done["restoredPrompt"], P2, "{done:#}");
    let mut expected = want.turn1_end.clone();
    expected.insert("notes.txt".to_string(), PERSON.to_string());
    assert_eq!(tree(env), expected, "exactly turn 1's end state, and the person's edit");
    let kept = &want.history[..want.turn1_entries];
    assert_eq!(history(env, s), pairs(kept), "the rewind cut turn 2's history");
    env.assert_verify_clean();
}

// ---------------------------------------------------------------------------------------
// Codex CLI
// ---------------------------------------------------------------------------------------

const CODEX_SESSION: &str = "019a6b2e-7c1d-7f00-9a5e-3c2b1a0f9e8d";

/// A Codex hook event: the common input fields (`session_id` — the thread id,
/// `transcript_path` — the rollout, `cwd`, `hook_event_name`, `model`) plus the turn-scoped
/// `turn_id` and `permission_mode` (hooks reference; input schemas).
fn codex_event(env: &Env, rollout: Option<&Path>, turn: &str, name: &str, extra: Value) -> Value {
    let base = json!({
        "session_id": CODEX_SESSION,
        "turn_id": turn,
        "transcript_path": rollout,
        "cwd": env.ws,
        "hook_event_name": name,
        "model": "gpt-5-codex",
        "permission_mode": "default",
    });
    with(base, extra)
}

/// One rollout line: `{timestamp, type, payload}` (`RolloutLine`, protocol.rs).
fn rollout_line(at: &str, kind: &str, payload: Value) -> String {
    format!("{}\n", json!({ "timestamp": at, "type": kind, "payload": payload }))
}

/// The rollout lines of one Codex turn: `turn_context`, `task_started`, the prompt as
/// Codex sends it (with injected context) and as the person wrote it (`user_message`), a
/// reasoning summary, an assistant message, the freeform `apply_patch` call and its
/// output, an `exec_command` call and its output, the final message, `task_complete`.
fn codex_turn_rows(n: u32, prompt: &str, patch: &str, shell: &str) -> String {
    let at = |s: u32| stamp(i64::from(n * 300 + s) * 1000);
    let mut out = String::new();
    out += &rollout_line(
        &at(0),
        "turn_context",
        json!({ "turn_id": n.to_string(), "cwd": "/repo", "approval_policy": "on-request",
                "sandbox_policy": { "type": "workspace-write", "network_access": false }, "model": "gpt-5-codex", "summary": "auto" }),
    );
    out += &rollout_line(&at(0), "event_msg", json!({ "type": "task_started", "turn_id": n.to_string() }));
    out += &rollout_line(
        &at(1),
        "response_item",
        json!({ "type": "message", "role": "user", "content": [
            { "type": "input_text", "text": "<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>" },
            { "type": "input_text", "text": prompt } ] }),
    );
    out += &rollout_line(
        &at(1),
        "event_msg",
        json!({ "type": "user_message", "message": prompt, "images": [], "local_images": [], "text_elements": [] }),
    );
    out += &rollout_line(
        &at(2),
        "response_item",
        json!({ "type": "reasoning", "summary": [ { "type": "summary_text", "text": format!("Plan turn {n}") } ], "content": null, "encrypted_content": "gAAAA" }),
    );
    out += &rollout_line(
        &at(2),
        "response_item",
        json!({ "type": "message", "role": "assistant", "content": [ { "type": "output_text", "text": format!("Working on turn {n}.") } ] }),
    );
    out += &rollout_line(
        &at(3),
        "response_item",
        json!({ "type": "custom_tool_call", "status": "completed", "call_id": format!("call_patch_{n}"), "name": "apply_patch", "input": patch }),
    );
    out += &rollout_line(
        &at(3),
        "event_msg",
        json!({ "type": "patch_apply_end", "call_id": format!("call_patch_{n}"), "turn_id": n.to_string(), "stdout": "", "stderr": "", "success": true, "changes": {} }),
    );
    out += &rollout_line(
        &at(3),
        "response_item",
        json!({ "type": "custom_tool_call_output", "call_id": format!("call_patch_{n}"), "output": "Success. Updated files." }),
    );
    out += &rollout_line(
        &at(4),
        "response_item",
        json!({ "type": "function_call", "name": "exec_command", "arguments": json!({ "cmd": shell }).to_string(), "call_id": format!("call_sh_{n}") }),
    );
    out += &rollout_line(
        &at(5),
        "response_item",
        json!({ "type": "function_call_output", "call_id": format!("call_sh_{n}"), "output": "ok" }),
    );
    out += &rollout_line(&at(6), "event_msg", json!({ "type": "agent_message", "message": format!("Turn {n} done.") }));
    out += &rollout_line(
        &at(6),
        "response_item",
        json!({ "type": "message", "role": "assistant", "content": [ { "type": "output_text", "text": format!("Turn {n} done.") } ] }),
    );
    out += &rollout_line(
        &at(7),
        "event_msg",
        json!({ "type": "task_complete", "turn_id": n.to_string(), "last_agent_message": format!("Turn {n} done.") }),
    );
    out
}

/// A Codex `apply_patch` call: PreToolUse, the patch applied, PostToolUse (hooks see the
/// tool as `apply_patch` with the patch text in `tool_input.command`; its response is the
/// output text, S10 test).
struct CodexCall<'a> {
    env: &'a Env,
    rollout: &'a Path,
    turn: &'a str,
}

impl CodexCall<'_> {
    fn event(&self, name: &str, id: &str, tool: &str, command: &str, response: Option<Value>) -> Value {
        let mut extra = json!({ "tool_name": tool, "tool_input": { "command": command }, "tool_use_id": id });
        if let Some(r) = response {
            extra["tool_response"] = r;
        }
        codex_event(self.env, Some(self.rollout), self.turn, name, extra)
    }
    fn pre(&self, id: &str, tool: &str, command: &str) {
        hook(self.env, "codex", &self.event("PreToolUse", id, tool, command, None));
    }
    fn post(&self, id: &str, tool: &str, command: &str) {
        let response = if tool == "Bash" {
            json!("Exit code: 0\nWall time: 0.4 seconds\nOutput:\nok\n")
        } else {
            json!("Success. Updated files.")
        };
        hook(self.env, "codex", &self.event("PostToolUse", id, tool, command, Some(response)));
    }
}

const CODEX_PATCH_1: &str = "*** Begin Patch\n*** Update File: src/app.txt\n@@\n-app v0\n+app v1\n*** Add File: new.txt\n+new v1\n\
                             *** Delete File: old.txt\n*** Update File: mv_src.txt\n*** Move to: mv_dst.txt\n@@\n-moving v0\n+moving v1\n\
                             *** End Patch\n";
const CODEX_PATCH_2: &str = "*** Begin Patch\n*** Update File: src/app.txt\n@@\n-app v1\n+app v2\n*** Update File: notes.txt\n@@\n-notes v0\n+notes v2\n*** End Patch\n";
const CODEX_PATCH_3: &str = "*** Begin Patch\n*** Add File: t2.txt\n+t2\n*** End Patch\n";

#[test]
fn codex_hooks_record_two_turns_with_apply_patch_checkpoints_shell_records_and_replies_from_the_rollout() {
    let env = Env::new();
    seed(&env);
    env.write("mv_src.txt", "moving v0\n");
    let rollout = env.home.join(".codex/sessions/2026/05/20/rollout-2026-05-20T10-00-00-019a6b2e.jsonl");
    std::fs::create_dir_all(rollout.parent().unwrap()).unwrap();
    let meta = rollout_line(
        "2026-05-20T10:00:00.000Z",
        "session_meta",
        json!({ "id": CODEX_SESSION, "timestamp": "2026-05-20T10:00:00.000Z", "cwd": env.ws, "originator": "codex_cli_rs", "cli_version": "0.130.0" }),
    );
    std::fs::write(&rollout, &meta).unwrap();
    let ev = |turn: &str, name: &str, extra: Value| codex_event(&env, Some(&rollout), turn, name, extra);
    hook(&env, "codex", &ev("1", "SessionStart", json!({ "source": "startup" })));

    // Turn 1: one patch updates, adds, deletes and moves; the call is delivered twice.
    hook(&env, "codex", &ev("1", "UserPromptSubmit", json!({ "prompt": P1 })));
    let call = CodexCall { env: &env, rollout: &rollout, turn: "1" };
    call.pre("call_patch_1", "apply_patch", CODEX_PATCH_1);
    call.pre("call_patch_1", "apply_patch", CODEX_PATCH_1);
    env.write("src/app.txt", "app v1\n");
    env.write("new.txt", "new v1\n");
    rm(&env, "old.txt");
    rm(&env, "mv_src.txt");
    env.write("mv_dst.txt", "moving v1\n");
    call.post("call_patch_1", "apply_patch", CODEX_PATCH_1);
    call.post("call_patch_1", "apply_patch", CODEX_PATCH_1);
    call.pre("call_sh_1", "Bash", "cargo test");
    call.post("call_sh_1", "Bash", "cargo test");
    call.post("call_sh_1", "Bash", "cargo test"); // twice: recorded once (it has an id)
    let mut text = meta.clone() + &codex_turn_rows(1, P1, CODEX_PATCH_1, "cargo test");
    std::fs::write(&rollout, &text).unwrap();
    let stop = json!({ "stop_hook_active": false, "last_assistant_message": "Turn 1 done." });
    hook(&env, "codex", &ev("1", "Stop", stop));
    let turn1_end = tree(&env);

    // Turn 2: two files in one patch; a create whose PostToolUse arrives before its
    // PreToolUse; a shell command; the Stop delivered twice.
    hook(&env, "codex", &ev("2", "UserPromptSubmit", json!({ "prompt": P2 })));
    let call = CodexCall { turn: "2", ..call };
    call.pre("call_patch_2", "apply_patch", CODEX_PATCH_2);
    env.write("src/app.txt", "app v2\n");
    env.write("notes.txt", "notes v2\n");
    call.post("call_patch_2", "apply_patch", CODEX_PATCH_2);
    env.write("t2.txt", "t2\n");
    call.post("call_patch_3", "apply_patch", CODEX_PATCH_3);
    call.pre("call_patch_3", "apply_patch", CODEX_PATCH_3);
    call.pre("call_sh_2", "Bash", "npm run lint");
    call.post("call_sh_2", "Bash", "npm run lint");
    text += &codex_turn_rows(2, P2, CODEX_PATCH_2, "npm run lint");
    std::fs::write(&rollout, &text).unwrap();
    let stop = json!({ "stop_hook_active": false, "last_assistant_message": "Turn 2 done." });
    hook(&env, "codex", &ev("2", "Stop", stop.clone()));
    hook(&env, "codex", &ev("2", "Stop", stop));

    // The replies are the rollout's (both assistant messages), not only the Stop's last one.
    let want = Expected {
        session: CODEX_SESSION,
        checkpoints: [
            vec![cp(
                &[
                    ("src/app.txt", "edit"),
                    ("new.txt", "create"),
                    ("old.txt", "delete"),
                    ("mv_src.txt", "delete"),
                    ("mv_dst.txt", "create"),
                ],
                "succeeded",
            )],
            // The reordered call: its late "before" stages what the file already holds, and
            // the stop closes it as failed.
            vec![
                cp(&[("src/app.txt", "edit"), ("notes.txt", "edit")], "succeeded"),
                cp(&[("t2.txt", "edit")], "failed"),
            ],
        ],
        shell: [&["cargo test"], &["npm run lint"]],
        history: vec![
            ("user", P1),
            ("assistant", "Working on turn 1.\n\nTurn 1 done."),
            ("user", P2),
            ("assistant", "Working on turn 2.\n\nTurn 2 done."),
        ],
        turn1_entries: 2,
        turn1_end,
    };
    let view = env.json(&["--session", CODEX_SESSION, "history", "show"]);
    let reply = &view["entries"][1];
    assert_eq!(reply["thinking"], "Plan turn 1", "the reasoning summary: {reply:#}");
    let calls: Vec<(&str, &Value)> =
        reply["toolCalls"].as_array().unwrap().iter().map(|c| (c["name"].as_str().unwrap(), &c["output"])).collect();
    assert_eq!(calls, [("apply_patch", &json!("Success. Updated files.")), ("exec_command", &json!("ok"))]);
    check_story(&env, &want);
}

#[test]
fn codex_and_gemini_replies_fall_back_to_the_stop_payload_without_a_transcript() {
    let env = Env::new();
    // Codex: `transcript_path` is `string|null` (hooks reference); null, then a path not
    // written yet: the Stop's `last_assistant_message` is the reply.
    let missing = env.root.join("no-such-rollout.jsonl");
    for (turn, rollout) in [("1", None), ("2", Some(missing.as_path()))] {
        let prompt = format!("codex prompt {turn}");
        hook(&env, "codex", &codex_event(&env, rollout, turn, "UserPromptSubmit", json!({ "prompt": prompt })));
        let stop = json!({ "stop_hook_active": false, "last_assistant_message": format!("codex reply {turn}") });
        hook(&env, "codex", &codex_event(&env, rollout, turn, "Stop", stop));
    }
    // A Stop whose last_assistant_message is null records no reply.
    hook(&env, "codex", &codex_event(&env, None, "3", "UserPromptSubmit", json!({ "prompt": "codex prompt 3" })));
    let stop = json!({ "stop_hook_active": false, "last_assistant_message": null });
    hook(&env, "codex", &codex_event(&env, None, "3", "Stop", stop));
    let want = [
        ("user", "codex prompt 1"),
        ("assistant", "codex reply 1"),
        ("user", "codex prompt 2"),
        ("assistant", "codex reply 2"),
        ("user", "codex prompt 3"),
    ];
    assert_eq!(history(&env, CODEX_SESSION), pairs(&want));

    // Gemini: `transcript_path` is "" when there is none (hookEventHandler.ts
    // createBaseInput), or names a file not written yet: `prompt_response` is the reply,
    // unless it is Gemini's "[no response text]".
    let missing = env.root.join("no-such-chat.jsonl");
    let chats = [json!(""), json!(missing), json!("")];
    let responses = ["gemini reply 1", "gemini reply 2", "[no response text]"];
    for (i, (chat, response)) in chats.iter().zip(responses).enumerate() {
        let prompt = format!("gemini prompt {}", i + 1);
        let ev = |name: &str, extra: Value| with(gemini_base(&env, chat.clone(), name), extra);
        hook(&env, "gemini", &ev("BeforeAgent", json!({ "prompt": prompt })));
        let after = json!({ "prompt": prompt, "prompt_response": response, "stop_hook_active": false });
        hook(&env, "gemini", &ev("AfterAgent", after));
    }
    let want = [
        ("user", "gemini prompt 1"),
        ("assistant", "gemini reply 1"),
        ("user", "gemini prompt 2"),
        ("assistant", "gemini reply 2"),
        ("user", "gemini prompt 3"),
    ];
    assert_eq!(history(&env, GEMINI_SESSION), pairs(&want));
}

// ---------------------------------------------------------------------------------------
// Gemini CLI
// ---------------------------------------------------------------------------------------

const GEMINI_SESSION: &str = "8d3c1f2e-4b5a-4c6d-9e8f-0a1b2c3d4e5f";

/// The base input of every Gemini hook event: `session_id`, `transcript_path`, `cwd`,
/// `hook_event_name`, `timestamp` (hookEventHandler.ts createBaseInput).
fn gemini_base(env: &Env, chat: Value, name: &str) -> Value {
    json!({
        "session_id": GEMINI_SESSION,
        "transcript_path": chat,
        "cwd": env.ws,
        "hook_event_name": name,
        "timestamp": "2026-08-21T10:16:00.000Z",
    })
}

/// A Gemini tool call: BeforeTool, the change, AfterTool. Gemini gives hooks no tool-call
/// id (BeforeToolInput / AfterToolInput in types.ts); AfterTool's `tool_response` is
/// `{llmContent, returnDisplay}` with `error` only on failure.
struct GeminiCall<'a> {
    env: &'a Env,
    chat: &'a Path,
}

impl GeminiCall<'_> {
    fn event(&self, name: &str, tool: &str, input: &Value, llm: Option<&str>) -> Value {
        let mut extra = json!({ "tool_name": tool, "tool_input": input });
        if let Some(text) = llm {
            extra["tool_response"] = json!({ "llmContent": text, "returnDisplay": text });
        }
        with(gemini_base(self.env, json!(self.chat), name), extra)
    }
    fn before(&self, tool: &str, input: &Value) {
        hook(self.env, "gemini", &self.event("BeforeTool", tool, input, None));
    }
    fn after(&self, tool: &str, input: &Value, llm: &str) {
        hook(self.env, "gemini", &self.event("AfterTool", tool, input, Some(llm)));
    }
}

/// The chat-file lines of one Gemini turn (JSONL since v0.39, chatRecordingService.ts): the
/// user message, a metadata `$set`, the model's message with thoughts, the same message
/// again with its tool calls (replacing it where it stands), the tool responses as a
/// synthetic user message (v0.44+), an `info` notice, the final model message.
fn gemini_turn_rows(n: u32, prompt: &str, calls: &[(&str, Value)]) -> String {
    let at = |s: u32| stamp(i64::from(n * 300 + s) * 1000);
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            let id = format!("{name}__{name}_17873073{n}{i}_0");
            json!({ "id": id, "name": name, "args": args, "status": "success", "timestamp": at(3),
                    "result": [ { "functionResponse": { "id": id, "name": name, "response": { "output": format!("{name} ok") } } } ] })
        })
        .collect();
    let responses: Vec<Value> = tool_calls.iter().map(|c| c["result"][0].clone()).collect();
    let thoughts = json!([ { "subject": "Planning", "description": format!("turn {n}"), "timestamp": at(2) } ]);
    let model = json!({ "id": format!("g{n}a"), "timestamp": at(2), "type": "gemini", "content": format!("Working on turn {n}."),
                        "thoughts": thoughts, "tokens": { "input": 9000, "output": 80, "cached": 0, "total": 9080 }, "model": "gemini-3-pro-preview" });
    let mut with_calls = model.clone();
    with_calls["toolCalls"] = json!(tool_calls);
    [
        json!({ "id": format!("u{n}"), "timestamp": at(0), "type": "user", "content": [ { "text": prompt } ] }),
        json!({ "$set": { "lastUpdated": at(0) } }),
        model,
        with_calls,
        json!({ "id": format!("r{n}"), "timestamp": at(4), "type": "user", "content": responses }),
        json!({ "id": format!("i{n}"), "timestamp": at(4), "type": "info", "content": "Checkpoint saved." }),
        json!({ "id": format!("g{n}b"), "timestamp": at(5), "type": "gemini", "content": format!("Turn {n} done."), "thoughts": [], "model": "gemini-3-pro-preview" }),
    ]
    .iter()
    .map(|v| format!("{v}\n"))
    .collect()
}

#[test]
fn gemini_hooks_without_tool_ids_record_two_turns_checkpoints_shell_records_and_replies_from_the_chat_file() {
    let env = Env::new();
    seed(&env);
    let chat = env.home.join(".gemini/tmp/ws/chats/session-2026-08-21T10-15-8d3c1f2e.jsonl");
    std::fs::create_dir_all(chat.parent().unwrap()).unwrap();
    let meta = format!(
        "{}\n",
        json!({ "sessionId": GEMINI_SESSION, "projectHash": "3f7a9c", "startTime": "2026-08-21T10:15:01.900Z", "lastUpdated": "2026-08-21T10:15:01.900Z", "kind": "main" })
    );
    std::fs::write(&chat, &meta).unwrap();
    let ev = |name: &str, extra: Value| with(gemini_base(&env, json!(chat), name), extra);
    let call = GeminiCall { env: &env, chat: &chat };
    let abs = |rel: &str| json!(env.ws.join(rel));
    hook(&env, "gemini", &ev("SessionStart", json!({ "source": "startup" })));

    // Turn 1: two `replace` calls on the same file (no ids: two checkpoints), the first
    // delivered twice; a `write_file` with a relative path (as docs/hooks/best-practices.md
    // shows); the deletion through the shell, as Gemini has no delete tool.
    hook(&env, "gemini", &ev("BeforeAgent", json!({ "prompt": P1 })));
    let r1 = json!({ "file_path": abs("src/app.txt"), "old_string": "app v0", "new_string": "app v0.5", "instruction": "bump" });
    call.before("replace", &r1);
    call.before("replace", &r1);
    env.write("src/app.txt", "app v0.5\n");
    call.after("replace", &r1, "Successfully modified file: src/app.txt (1 replacements).");
    call.after("replace", &r1, "Successfully modified file: src/app.txt (1 replacements).");
    let r2 = json!({ "file_path": abs("src/app.txt"), "old_string": "app v0.5", "new_string": "app v1", "instruction": "bump" });
    call.before("replace", &r2);
    env.write("src/app.txt", "app v1\n");
    call.after("replace", &r2, "Successfully modified file: src/app.txt (1 replacements).");
    let w = json!({ "file_path": "new.txt", "content": "new v1\n" });
    call.before("write_file", &w);
    env.write("new.txt", "new v1\n");
    call.after("write_file", &w, "Successfully created and wrote to new file: new.txt.");
    let sh = json!({ "command": "rm old.txt", "description": "drop old.txt" });
    call.before("run_shell_command", &sh);
    rm(&env, "old.txt");
    call.after("run_shell_command", &sh, "<untrusted_context>\nOutput: (empty)\nExit Code: 0\n</untrusted_context>");
    let mut text = meta.clone() + &gemini_turn_rows(1, P1, &[("replace", r1), ("replace", r2), ("write_file", w)]);
    std::fs::write(&chat, &text).unwrap();
    let after = json!({ "prompt": P1, "prompt_response": "Turn 1 done.", "stop_hook_active": false });
    hook(&env, "gemini", &ev("AfterAgent", after));
    let turn1_end = tree(&env);

    // Turn 2: a replace, an overwrite, a create whose AfterTool comes before its BeforeTool,
    // a shell command that fails (exit 2 only in its output text), and a PreCompress.
    hook(&env, "gemini", &ev("BeforeAgent", json!({ "prompt": P2 })));
    let r3 = json!({ "file_path": abs("src/app.txt"), "old_string": "app v1", "new_string": "app v2" });
    call.before("replace", &r3);
    env.write("src/app.txt", "app v2\n");
    call.after("replace", &r3, "Successfully modified file: src/app.txt (1 replacements).");
    let w2 = json!({ "file_path": abs("notes.txt"), "content": "notes v2\n" });
    call.before("write_file", &w2);
    env.write("notes.txt", "notes v2\n");
    call.after("write_file", &w2, "Successfully overwrote file: notes.txt.");
    let w3 = json!({ "file_path": abs("t2.txt"), "content": "t2\n" });
    env.write("t2.txt", "t2\n");
    call.after("write_file", &w3, "Successfully created and wrote to new file: t2.txt.");
    call.before("write_file", &w3);
    let lint = json!({ "command": "npm run lint", "description": "lint" });
    call.before("run_shell_command", &lint);
    call.after(
        "run_shell_command",
        &lint,
        "<untrusted_context>\nOutput: 3 problems\nExit Code: 2\n</untrusted_context>",
    );
    hook(&env, "gemini", &ev("PreCompress", json!({ "trigger": "auto" })));
    text += &gemini_turn_rows(2, P2, &[("replace", r3), ("write_file", w2)]);
    std::fs::write(&chat, &text).unwrap();
    let after = json!({ "prompt": P2, "prompt_response": "Turn 2 done.", "stop_hook_active": false });
    hook(&env, "gemini", &ev("AfterAgent", after.clone()));
    hook(&env, "gemini", &ev("AfterAgent", after)); // twice: harmless

    let view = env.json(&["--session", GEMINI_SESSION, "history", "show"]);
    let reply = &view["entries"][1];
    assert_eq!(reply["thinking"], "Planning: turn 1", "{reply:#}");
    let names: Vec<&str> = reply["toolCalls"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["replace", "replace", "write_file"], "each call once, though its message was written twice");
    assert_eq!(reply["toolCalls"][2]["output"], "write_file ok");
    let want = Expected {
        session: GEMINI_SESSION,
        checkpoints: [
            vec![
                cp(&[("src/app.txt", "edit")], "succeeded"),
                cp(&[("src/app.txt", "edit")], "succeeded"),
                cp(&[("new.txt", "create")], "succeeded"),
                // `rm old.txt` through the shell: its window's checkpoint.
                cp(&[("old.txt", "delete")], "succeeded"),
            ],
            vec![
                cp(&[("src/app.txt", "edit")], "succeeded"),
                cp(&[("notes.txt", "edit")], "succeeded"),
                cp(&[("t2.txt", "edit")], "failed"),
            ],
        ],
        shell: [&["rm old.txt"], &["npm run lint"]],
        history: vec![
            ("user", P1),
            ("assistant", "Working on turn 1.\n\nTurn 1 done."),
            ("user", P2),
            ("assistant", "Working on turn 2.\n\nTurn 2 done."),
        ],
        turn1_entries: 2,
        turn1_end,
    };
    check_story(&env, &want);
}

#[test]
fn gemini_an_empty_before_agent_is_a_retry_and_a_declined_call_is_closed_at_the_turns_end() {
    let env = Env::new();
    env.write("a.txt", "zero\n");
    let ev = |name: &str, extra: Value| with(gemini_base(&env, json!(""), name), extra);
    hook(&env, "gemini", &ev("BeforeAgent", json!({ "prompt": "edit a.txt" })));
    // BeforeTool fires before the confirmation prompt: a declined call has no AfterTool.
    let call = GeminiCall { env: &env, chat: Path::new("") };
    let input = json!({ "file_path": env.ws.join("a.txt"), "content": "declined\n" });
    call.before("write_file", &input);
    let after = json!({ "prompt": "edit a.txt", "prompt_response": "I did not change it.", "stop_hook_active": false });
    hook(&env, "gemini", &ev("AfterAgent", after));
    // After a hook's retry Gemini fires BeforeAgent again with an empty prompt (upstream
    // issue #18514): not a new turn.
    hook(&env, "gemini", &ev("BeforeAgent", json!({ "prompt": "" })));
    let turns = env.json(&["--session", GEMINI_SESSION, "turns"])["turns"].as_array().unwrap().clone();
    assert_eq!(turns.len(), 1, "{turns:#?}");
    assert_eq!(turn_checkpoints(&env, GEMINI_SESSION, 1), [cp(&[("a.txt", "edit")], "failed")], "closed, not staged");
    // SessionEnd may fire twice on exit (third-party capture noted in the research): harmless.
    hook(&env, "gemini", &ev("SessionEnd", json!({ "reason": "exit" })));
    hook(&env, "gemini", &ev("SessionEnd", json!({ "reason": "exit" })));
    assert_eq!(env.read("a.txt").unwrap(), b"zero\n");
    env.assert_verify_clean();
}

// ---------------------------------------------------------------------------------------
// Cursor
// ---------------------------------------------------------------------------------------

const CURSOR_SESSION: &str = "74676b03-9c1e-4f0a-8b2d-5e6f7a8b9c0d";

/// A Cursor hook event: the common fields as captured from Cursor 3.x (`conversation_id`,
/// `generation_id`, `model`, `hook_event_name`, `cursor_version`, `workspace_roots`,
/// `user_email`, `transcript_path`, `session_id` equal to the conversation id).
fn cursor_event(env: &Env, generation: &str, name: &str, extra: Value) -> Value {
    let base = json!({
        "conversation_id": CURSOR_SESSION,
        "generation_id": generation,
        "model": "default",
        "hook_event_name": name,
        "cursor_version": "3.20.21",
        "workspace_roots": [env.ws],
        "user_email": null,
        "transcript_path": null,
        "session_id": CURSOR_SESSION,
    });
    with(base, extra)
}

/// A Cursor file tool call: preToolUse (`Write` — every edit — or `Delete`, with
/// `tool_input.file_path` and `tool_use_id`), the change, postToolUse (with its
/// `tool_output` JSON string and `duration`).
fn cursor_tool(env: &Env, generation: &str, when: &str, id: &str, tool: &str, rel: &str, content: Option<&str>) {
    let mut input = json!({ "file_path": env.ws.join(rel) });
    if let Some(c) = content {
        input["content"] = json!(c);
    }
    let mut extra = json!({ "tool_name": tool, "tool_input": input, "tool_use_id": id, "cwd": "" });
    if when == "postToolUse" {
        extra["tool_output"] = json!("{\"success\":true}");
        extra["duration"] = json!(12.5);
    }
    cursor(env, &cursor_event(env, generation, when, extra));
}

#[test]
fn cursor_hooks_record_two_turns_with_write_and_delete_checkpoints_shell_records_and_replies() {
    let env = Env::new();
    seed(&env);
    let (g1, g2) = ("4d4c91f8-8209-4c31-a245-eb9c01ae8a20", "5e266135-1111-4c31-a245-eb9c01ae8a21");
    cursor(
        &env,
        &cursor_event(&env, "", "sessionStart", json!({ "is_background_agent": false, "composer_mode": "agent" })),
    );

    // Turn 1: a Write delivered twice, a Write that creates, a Delete, a shell command.
    let attachments = json!([{ "type": "rule", "file_path": "AGENTS.md" }]);
    cursor(&env, &cursor_event(&env, g1, "beforeSubmitPrompt", json!({ "prompt": P1, "attachments": attachments })));
    for _ in 0..2 {
        cursor_tool(&env, g1, "preToolUse", "a1b2c3d4-0001", "Write", "src/app.txt", Some("app v1\n"));
    }
    env.write("src/app.txt", "app v1\n");
    for _ in 0..2 {
        cursor_tool(&env, g1, "postToolUse", "a1b2c3d4-0001", "Write", "src/app.txt", Some("app v1\n"));
    }
    cursor_tool(&env, g1, "preToolUse", "a1b2c3d4-0002", "Write", "new.txt", Some("new v1\n"));
    env.write("new.txt", "new v1\n");
    cursor_tool(&env, g1, "postToolUse", "a1b2c3d4-0002", "Write", "new.txt", Some("new v1\n"));
    cursor_tool(&env, g1, "preToolUse", "a1b2c3d4-0003", "Delete", "old.txt", None);
    rm(&env, "old.txt");
    cursor_tool(&env, g1, "postToolUse", "a1b2c3d4-0003", "Delete", "old.txt", None);
    let shell = json!({ "command": "cargo test", "cwd": "", "sandbox": false });
    cursor(&env, &cursor_event(&env, g1, "beforeShellExecution", shell));
    env.write("report.txt", "ok\n"); // what the command wrote: its window's checkpoint
    let ran = json!({ "command": "cargo test", "output": "test result: ok\n", "duration": 728.2, "sandbox": false });
    cursor(&env, &cursor_event(&env, g1, "afterShellExecution", ran));
    cursor(&env, &cursor_event(&env, g1, "afterAgentResponse", json!({ "text": "Turn 1 done." })));
    cursor(&env, &cursor_event(&env, g1, "stop", json!({ "status": "completed", "loop_count": 0 })));
    let turn1_end = tree(&env);

    // Turn 2: two Writes, a create whose postToolUse arrives before its preToolUse, a
    // shell command, the reply, and the stop delivered twice.
    cursor(&env, &cursor_event(&env, g2, "beforeSubmitPrompt", json!({ "prompt": P2, "attachments": [] })));
    cursor_tool(&env, g2, "preToolUse", "a1b2c3d4-0004", "Write", "src/app.txt", Some("app v2\n"));
    env.write("src/app.txt", "app v2\n");
    cursor_tool(&env, g2, "postToolUse", "a1b2c3d4-0004", "Write", "src/app.txt", Some("app v2\n"));
    cursor_tool(&env, g2, "preToolUse", "a1b2c3d4-0005", "Write", "notes.txt", Some("notes v2\n"));
    env.write("notes.txt", "notes v2\n");
    cursor_tool(&env, g2, "postToolUse", "a1b2c3d4-0005", "Write", "notes.txt", Some("notes v2\n"));
    env.write("t2.txt", "t2\n");
    cursor_tool(&env, g2, "postToolUse", "a1b2c3d4-0006", "Write", "t2.txt", Some("t2\n"));
    cursor_tool(&env, g2, "preToolUse", "a1b2c3d4-0006", "Write", "t2.txt", Some("t2\n"));
    let ran = json!({ "command": "npm run lint", "output": "3 problems\nExit code: 1\n", "duration": 100.0, "sandbox": false });
    cursor(&env, &cursor_event(&env, g2, "afterShellExecution", ran));
    cursor(&env, &cursor_event(&env, g2, "afterAgentResponse", json!({ "text": "Turn 2 done." })));
    cursor(&env, &cursor_event(&env, g2, "stop", json!({ "status": "completed", "loop_count": 0 })));
    cursor(&env, &cursor_event(&env, g2, "stop", json!({ "status": "completed", "loop_count": 0 })));

    let want = Expected {
        session: CURSOR_SESSION,
        checkpoints: [
            vec![
                cp(&[("src/app.txt", "edit")], "succeeded"),
                cp(&[("new.txt", "create")], "succeeded"),
                cp(&[("old.txt", "delete")], "succeeded"),
                cp(&[("report.txt", "create")], "succeeded"),
            ],
            vec![
                cp(&[("src/app.txt", "edit")], "succeeded"),
                cp(&[("notes.txt", "edit")], "succeeded"),
                cp(&[("t2.txt", "edit")], "failed"),
            ],
        ],
        shell: [&["cargo test"], &["npm run lint"]],
        history: vec![("user", P1), ("assistant", "Turn 1 done."), ("user", P2), ("assistant", "Turn 2 done.")],
        turn1_entries: 2,
        turn1_end,
    };
    check_story(&env, &want);
}

#[test]
fn cursor_answers_let_everything_through_and_every_hook_exits_zero_even_on_garbage() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    let g = "4d4c91f8-8209-4c31-a245-eb9c01ae8a20";
    for (name, extra) in [
        ("sessionStart", json!({ "is_background_agent": false })),
        ("beforeSubmitPrompt", json!({ "prompt": "hi", "attachments": [] })),
        ("preToolUse", json!({ "tool_name": "Shell", "tool_input": { "command": "ls" }, "tool_use_id": "x1" })),
        ("preToolUse", json!({ "tool_name": "Read", "tool_input": { "file_path": "a.txt" }, "tool_use_id": "x2" })),
        ("beforeShellExecution", json!({ "command": "ls", "cwd": "", "sandbox": false })),
        ("beforeMCPExecution", json!({ "tool_name": "search", "tool_input": "{}", "url": "http://localhost" })),
        ("beforeReadFile", json!({ "file_path": "a.txt", "content": "a\n", "attachments": [] })),
        ("subagentStart", json!({ "subagent_id": "sub-1", "subagent_type": "explore", "task": "look" })),
        ("subagentStop", json!({ "subagent_id": "sub-1", "subagent_type": "explore", "status": "completed" })),
        ("afterFileEdit", json!({ "file_path": "a.txt", "edits": [] })),
        ("afterAgentThought", json!({ "text": "hmm", "duration_ms": 5 })),
        ("preCompact", json!({ "trigger": "auto", "context_usage_percent": 91 })),
        ("stop", json!({ "status": "completed", "loop_count": 0 })),
        ("sessionEnd", json!({ "reason": "user_close", "duration_ms": 0 })),
        ("someFutureEvent", json!({})),
    ] {
        cursor(&env, &cursor_event(&env, g, name, extra));
    }

    // Garbage: every agent exits 0; Cursor still reads JSON, the others nothing; each
    // failure is one line of hooks.log naming the agent.
    let garbage: [&[u8]; 4] = [b"not json", b"", b"[1, 2]", br#"{"no_event_name": true}"#];
    for agent in ["claude-code", "codex", "gemini", "cursor", "opencode"] {
        for input in garbage {
            let out = env.run(&["hook", agent], Some(input));
            assert_eq!(out.status.code(), Some(0), "{agent}: {}", show_output(&out));
            let want: &[u8] = if agent == "cursor" { b"{}" } else { b"" };
            assert_eq!(out.stdout, want, "{agent}: {}", show_output(&out));
        }
    }
    let log = std::fs::read_to_string(env.store.join("hooks.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 5 * garbage.len(), "{log}");
    for (i, agent) in ["claude-code", "codex", "gemini", "cursor", "opencode"].iter().enumerate() {
        for line in &lines[i * garbage.len()..(i + 1) * garbage.len()] {
            assert!(line.contains(&format!(" {agent} invalid-argument: ")), "{line}");
        }
    }
}

#[test]
fn cursor_payloads_reaching_turnbacks_claude_code_hooks_are_ignored() {
    // Cursor also runs the hooks of `.claude/settings.json` ("third-party hooks", on by
    // default), with Cursor-shaped payloads and Cursor's event names (measured on Cursor
    // 3.22.7, research notes S5): a project with both integrations installed must not get
    // its turns twice, nor a log full of errors.
    let env = Env::new();
    env.ok(&["init"], None);
    env.write("a.txt", "a\n");
    let g = "4d4c91f8-8209-4c31-a245-eb9c01ae8a20";
    let file = json!({ "file_path": env.ws.join("a.txt"), "content": "b\n" });
    for (name, extra) in [
        ("sessionStart", json!({})),
        ("beforeSubmitPrompt", json!({ "prompt": "hi", "attachments": [] })),
        ("preToolUse", json!({ "tool_name": "Write", "tool_input": file, "tool_use_id": "x1" })),
        ("postToolUse", json!({ "tool_name": "Write", "tool_input": file, "tool_use_id": "x1", "tool_output": "{}" })),
        ("afterShellExecution", json!({ "command": "ls", "output": "" })),
        ("stop", json!({ "status": "completed", "loop_count": 0 })),
    ] {
        hook(&env, "claude-code", &cursor_event(&env, g, name, extra));
    }
    let turns = env.json(&["--session", CURSOR_SESSION, "turns"]);
    assert_eq!(turns["turns"], json!([]), "{turns:#}");
    assert!(
        env.json(&["--session", CURSOR_SESSION, "checkpoints", "--all"])["checkpoints"].as_array().unwrap().is_empty()
    );
}

// ---------------------------------------------------------------------------------------
// opencode
// ---------------------------------------------------------------------------------------

const OPENCODE_SESSION: &str = "ses_50ee0d1b5ffeL3zD9yL90sqQwW";

/// One event as turnback's opencode plugin sends it (`commands/hook/opencode.rs`): the
/// plugin adds `sessionID` (the root session) and `directory` (the project).
fn opencode_event(env: &Env, event: &str, extra: Value) -> Value {
    with(json!({ "event": event, "sessionID": OPENCODE_SESSION, "directory": env.ws }), extra)
}

/// A tool call as the plugin forwards `tool.execute.before`/`after` (args as opencode's
/// tools take them: `write` {filePath, content}, `edit` {filePath, oldString, newString},
/// `apply_patch` {patchText}, `bash` {command, description}; `metadata` is the after
/// hook's output metadata).
fn opencode_tool(env: &Env, when: &str, tool: &str, id: &str, args: &Value, metadata: Value) {
    let mut extra = json!({ "tool": tool, "callID": id, "args": args });
    if when == "tool-after" {
        extra["metadata"] = metadata;
    }
    hook(env, "opencode", &opencode_event(env, when, extra));
}

#[test]
fn opencode_plugin_events_record_two_turns_with_checkpoints_and_shell_records() {
    let env = Env::new();
    seed(&env);
    let abs = |rel: &str| env.ws.join(rel).to_string_lossy().into_owned();
    let none = json!({});

    // Turn 1: an edit (delivered twice), an apply_patch adding and deleting (paths relative
    // to the project root, tools.mdx), a bash command.
    hook(&env, "opencode", &opencode_event(&env, "prompt", json!({ "prompt": P1 })));
    let edit = json!({ "filePath": abs("src/app.txt"), "oldString": "app v0", "newString": "app v1" });
    let diff = json!({ "diff": "Index: src/app.txt", "filediff": { "file": abs("src/app.txt"), "additions": 1, "deletions": 1 }, "diagnostics": {} });
    opencode_tool(&env, "tool-before", "edit", "toolu_01", &edit, none.clone());
    opencode_tool(&env, "tool-before", "edit", "toolu_01", &edit, none.clone());
    env.write("src/app.txt", "app v1\n");
    opencode_tool(&env, "tool-after", "edit", "toolu_01", &edit, diff.clone());
    opencode_tool(&env, "tool-after", "edit", "toolu_01", &edit, diff.clone());
    let patch = json!({ "patchText": "*** Begin Patch\n*** Add File: new.txt\n+new v1\n*** Delete File: old.txt\n*** End Patch" });
    opencode_tool(&env, "tool-before", "apply_patch", "toolu_02", &patch, none.clone());
    env.write("new.txt", "new v1\n");
    rm(&env, "old.txt");
    opencode_tool(&env, "tool-after", "apply_patch", "toolu_02", &patch, json!({ "diff": "", "files": [] }));
    let bash = json!({ "command": "cargo test", "description": "Run the tests" });
    opencode_tool(&env, "tool-before", "bash", "toolu_03", &bash, none.clone());
    opencode_tool(
        &env,
        "tool-after",
        "bash",
        "toolu_03",
        &bash,
        json!({ "output": "ok", "exit": 0, "description": "Run the tests" }),
    );
    hook(&env, "opencode", &opencode_event(&env, "idle", json!({})));
    let turn1_end = tree(&env);

    // Turn 2: an edit, a write over the notes, a write whose "after" arrives before its
    // "before", a failing bash command, a compaction, the idle delivered twice.
    hook(&env, "opencode", &opencode_event(&env, "prompt", json!({ "prompt": P2 })));
    let edit = json!({ "filePath": abs("src/app.txt"), "oldString": "app v1", "newString": "app v2" });
    opencode_tool(&env, "tool-before", "edit", "toolu_04", &edit, none.clone());
    env.write("src/app.txt", "app v2\n");
    opencode_tool(&env, "tool-after", "edit", "toolu_04", &edit, diff);
    let write = json!({ "filePath": abs("notes.txt"), "content": "notes v2\n" });
    opencode_tool(&env, "tool-before", "write", "toolu_05", &write, none.clone());
    env.write("notes.txt", "notes v2\n");
    opencode_tool(&env, "tool-after", "write", "toolu_05", &write, json!({ "diagnostics": {}, "exists": true }));
    let write = json!({ "filePath": abs("t2.txt"), "content": "t2\n" });
    env.write("t2.txt", "t2\n");
    opencode_tool(&env, "tool-after", "write", "toolu_06", &write, json!({ "diagnostics": {}, "exists": false }));
    opencode_tool(&env, "tool-before", "write", "toolu_06", &write, none.clone());
    let lint = json!({ "command": "npm run lint", "description": "Lint" });
    opencode_tool(&env, "tool-before", "bash", "toolu_07", &lint, none);
    opencode_tool(&env, "tool-after", "bash", "toolu_07", &lint, json!({ "output": "3 problems", "exit": 1 }));
    hook(&env, "opencode", &opencode_event(&env, "compacted", json!({})));
    hook(&env, "opencode", &opencode_event(&env, "idle", json!({})));
    hook(&env, "opencode", &opencode_event(&env, "idle", json!({})));

    // opencode's plugin forwards no replies: the history holds the prompts.
    let want = Expected {
        session: OPENCODE_SESSION,
        checkpoints: [
            vec![
                cp(&[("src/app.txt", "edit")], "succeeded"),
                cp(&[("new.txt", "create"), ("old.txt", "delete")], "succeeded"),
            ],
            vec![
                cp(&[("src/app.txt", "edit")], "succeeded"),
                cp(&[("notes.txt", "edit")], "succeeded"),
                cp(&[("t2.txt", "edit")], "failed"),
            ],
        ],
        shell: [&["cargo test"], &["npm run lint"]],
        history: vec![("user", P1), ("user", P2)],
        turn1_entries: 1,
        turn1_end,
    };
    check_story(&env, &want);
}

/// The environment `env` runs turnback with, for another program (node) that runs it.
fn node_command(env: &Env, args: &[&Path]) -> std::process::Command {
    let template = env.command::<&str>(&[]);
    let mut cmd = std::process::Command::new("node");
    for (k, v) in template.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.args(args).current_dir(&env.ws);
    cmd
}

fn node_available() -> bool {
    crate::common::tools::available(crate::common::tools::Tool::Node)
}

/// Drives the installed plugin as opencode does (its `Hooks` interface,
/// packages/plugin/src/index.ts): the exported function is called with the plugin input,
/// then its hooks are awaited in opencode's order — `chat.message` (input {sessionID,
/// agent, model, messageID}, output {message, parts}), `tool.execute.before` (input {tool,
/// sessionID, callID}, output {args}), `tool.execute.after` (input {tool, sessionID,
/// callID, args} — no `args` before opencode added them —, output {title, output,
/// metadata}), and `event({event})` for `session.created` (a sub-agent's child session,
/// `info.parentID`), `message.part.updated` and `session.idle`.
const DRIVER: &str = r#"
import { pathToFileURL } from "node:url";
import { writeFileSync, rmSync, mkdirSync } from "node:fs";
import { join, dirname } from "node:path";

const [plugin, ws] = process.argv.slice(2);
const mod = await import(pathToFileURL(plugin).href);
const exported = Object.values(mod);
if (exported.length !== 1 || typeof exported[0] !== "function") throw new Error("one plugin function expected");
const hooks = await exported[0]({ client: {}, project: { id: "p" }, directory: ws, worktree: ws, serverUrl: new URL("http://localhost:4096"), $: undefined });

const root = "ses_root01";
const child = "ses_child01";
const write = (rel, text) => { mkdirSync(dirname(join(ws, rel)), { recursive: true }); writeFileSync(join(ws, rel), text); };
const prompt = (text) => hooks["chat.message"](
  { sessionID: root, agent: "build", model: { providerID: "anthropic", modelID: "claude" }, messageID: "msg_1" },
  { message: { id: "msg_1", sessionID: root, role: "user" }, parts: [
    { id: "prt_1", type: "text", text },
    { id: "prt_2", type: "text", text: "Use the above message and context", synthetic: true } ] });
const tool = async (sessionID, tool, callID, args, change, withArgs = true) => {
  await hooks["tool.execute.before"]({ tool, sessionID, callID }, { args });
  change();
  const input = withArgs ? { tool, sessionID, callID, args } : { tool, sessionID, callID };
  await hooks["tool.execute.after"](input, { title: tool, output: "ok", metadata: { exit: 0 } });
};
const idle = (sessionID) => hooks.event({ event: { id: "evt_1", type: "session.idle", properties: { sessionID } } });

// Turn 1: an edit, a bash command, a read (not forwarded), streaming noise (ignored).
await prompt("first: edit app");
await tool(root, "edit", "call_1", { filePath: join(ws, "src/app.txt"), oldString: "app v0", newString: "app v1" }, () => write("src/app.txt", "app v1\n"));
await tool(root, "bash", "call_2", { command: "cargo test", description: "tests" }, () => {});
await tool(root, "read", "call_3", { filePath: join(ws, "notes.txt") }, () => {});
await hooks.event({ event: { type: "message.part.delta", properties: { sessionID: root, delta: "…" } } });
// The reply's text part while it streams (no end yet), then finished: only the finished text counts.
const text = (t, end) => ({ event: { type: "message.part.updated", properties: { part: { id: "prt_t1", type: "text", text: t, sessionID: root, messageID: "msg_a1", time: end ? { start: 1, end } : { start: 1 } } } } });
await hooks.event(text("Edit", null));
await hooks.event(text("Edited the app.", 2));
await idle(root);

// Turn 2: a write whose after lacks args (older opencode), an apply_patch that deletes, a
// sub-agent's edit in its child session, an edit that fails (no after; a part error).
await prompt("second: more");
await tool(root, "write", "call_4", { filePath: join(ws, "notes.txt"), content: "notes v2\n" }, () => write("notes.txt", "notes v2\n"), false);
await tool(root, "apply_patch", "call_5", { patchText: "*** Begin Patch\n*** Delete File: old.txt\n*** End Patch" }, () => rmSync(join(ws, "old.txt")));
await hooks.event({ event: { type: "session.created", properties: { info: { id: child, parentID: root, title: "explore" } } } });
await hooks["chat.message"]({ sessionID: child }, { parts: [{ type: "text", text: "sub-agent task" }] });
await tool(child, "write", "call_6", { filePath: join(ws, "sub.txt"), content: "sub\n" }, () => write("sub.txt", "sub\n"));
await idle(child);
await hooks["tool.execute.before"]({ tool: "edit", sessionID: root, callID: "call_7" }, { args: { filePath: join(ws, "src/app.txt"), oldString: "nope", newString: "x" } });
await hooks.event({ event: { type: "message.part.updated", properties: { part: { type: "tool", tool: "edit", callID: "call_7", sessionID: root,
  state: { status: "error", input: { filePath: join(ws, "src/app.txt"), oldString: "nope", newString: "x" }, error: "no match" } } } } });
await idle(root);
await new Promise((r) => setTimeout(r, 50));
console.log("done");
"#;

#[test]
fn the_installed_opencode_plugin_run_under_node_records_turns_checkpoints_and_rewinds() {
    if !node_available() {
        return;
    }
    let env = Env::new();
    seed(&env);
    env.ok(&["install", "opencode"], None);
    let plugin = env.ws.join(".opencode/plugin/turnback.js");
    let driver = env.root.join("driver.mjs");
    std::fs::write(&driver, DRIVER).unwrap();
    // The plugin file is part of the workspace now: it is there before turn 1 and after.
    let out = node_command(&env, &[&driver, &plugin, &env.ws]).output().unwrap();
    assert!(out.status.success(), "the driver ran: {}", show_output(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done", "{}", show_output(&out));
    let log = std::fs::read_to_string(env.store.join("hooks.log")).unwrap_or_default();
    assert!(log.is_empty(), "the plugin's turnback runs logged: {log}");

    let s = "ses_root01";
    let turns = env.json(&["--session", s, "turns"])["turns"].as_array().unwrap().clone();
    let previews: Vec<&str> = turns.iter().map(|t| t["preview"].as_str().unwrap()).collect();
    assert_eq!(
        previews,
        ["first: edit app", "second: more"],
        "the synthetic part and the sub-agent's task are no prompts"
    );
    assert!(turns.iter().all(|t| t["endSnapshot"]["id"].is_string()), "session.idle ended each turn: {turns:#?}");
    assert_eq!(
        turn_checkpoints(&env, s, 1),
        [cp(&[("src/app.txt", "edit")], "succeeded")],
        "the read is not forwarded, the bash command is no checkpoint"
    );
    assert_eq!(
        turn_checkpoints(&env, s, 2),
        [
            cp(&[("notes.txt", "edit")], "succeeded"),
            cp(&[("old.txt", "delete")], "succeeded"),
            cp(&[("sub.txt", "create")], "succeeded"),
            cp(&[("src/app.txt", "edit")], "failed"),
        ],
        "the cached args of an after without them; the failed edit closed as failed"
    );
    let list = env.json(&["--session", s, "checkpoints", "--turn", "2"]);
    let subagents: Vec<&Value> = list["checkpoints"].as_array().unwrap().iter().map(|c| &c["subagent"]).collect();
    assert!(subagents.contains(&&json!("ses_child01")), "the child's write names its sub-agent: {list:#}");
    assert_eq!(rewind_preview(&env, s, 1).1["shellEffects"], json!(["cargo test"]));
    assert_eq!(
        history(&env, s),
        pairs(&[("user", "first: edit app"), ("assistant", "Edited the app."), ("user", "second: more")]),
        "the finished text part is the reply"
    );

    // Rewind turn 2: notes, old.txt and the sub-agent's file go back; turn 1's edit stays.
    let (code, plan) = rewind_preview(&env, s, 2);
    assert_eq!(code, Some(0), "{plan:#}");
    let out = env
        .run(&["--json", "--session", s, "rewind", "--to", "2", "--apply", "--plan", str_at(&plan, "/planId")], None);
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert_eq!(env.read("src/app.txt").unwrap(), b"app v1\n");
    assert_eq!(env.read("notes.txt").unwrap(), b"notes v0\n");
    assert_eq!(env.read("old.txt").unwrap(), b"old\n");
    assert!(env.read("sub.txt").is_none());
    assert!(plugin.is_file(), "the plugin itself predates both turns");
}

// ---------------------------------------------------------------------------------------
// Installers
// ---------------------------------------------------------------------------------------

/// Pretty JSON as editors and `JSON.stringify(v, null, 2)` leave it, with a final newline.
fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap() + "\n"
}

fn write_file(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Installs twice (the second changes nothing, byte for byte) and returns what the first
/// left in each file, then uninstalls and checks every file is back byte for byte (or gone,
/// if it was not there).
fn install_round_trip(env: &Env, args: &[&str], files: &[PathBuf]) -> Vec<Option<String>> {
    let before: Vec<Option<String>> = files.iter().map(|f| std::fs::read_to_string(f).ok()).collect();
    let first = env.json(&[&["install"], args].concat());
    assert_eq!(first["installed"], true, "{first:#}");
    assert!(first["store"].is_string() && first["keySource"].is_string(), "turnback is left ready: {first:#}");
    let reported: Vec<PathBuf> =
        first["files"].as_array().unwrap().iter().map(|f| PathBuf::from(str_at(f, "/path"))).collect();
    assert_eq!(reported, files, "the files it looked at: {first:#}");
    assert!(first["files"].as_array().unwrap().iter().all(|f| f["changed"] == true), "{first:#}");
    let installed: Vec<Option<String>> = files.iter().map(|f| std::fs::read_to_string(f).ok()).collect();
    let second = env.json(&[&["install"], args].concat());
    assert!(second["files"].as_array().unwrap().iter().all(|f| f["changed"] == false), "{second:#}");
    let again: Vec<Option<String>> = files.iter().map(|f| std::fs::read_to_string(f).ok()).collect();
    assert_eq!(again, installed, "installing twice changes nothing, byte for byte");
    let removed = env.json(&[&["install"], args, &["--uninstall"]].concat());
    assert_eq!(removed["installed"], false, "{removed:#}");
    let after: Vec<Option<String>> = files.iter().map(|f| std::fs::read_to_string(f).ok()).collect();
    assert_eq!(after, before, "uninstalling gives every file back byte for byte");
    let again = env.json(&[&["install"], args, &["--uninstall"]].concat());
    assert!(again["files"].as_array().unwrap().iter().all(|f| f["changed"] == false), "{again:#}");
    // Leave it installed for the caller to look at.
    env.ok(&[&["install"], args].concat(), None);
    installed
}

/// The handlers of `event` in a hooks file shaped `{hooks: {event: [{matcher?, hooks:
/// [handler]}]}}`, with their group's matcher.
fn handlers(settings: &Value, event: &str) -> Vec<(Value, Value)> {
    settings["hooks"][event]
        .as_array()
        .unwrap_or_else(|| panic!("no {event} in {settings:#}"))
        .iter()
        .flat_map(|g| g["hooks"].as_array().unwrap().iter().map(|h| (g["matcher"].clone(), h.clone())))
        .collect()
}

fn is_ours(handler: &Value, agent: &str) -> bool {
    let hook = format!(" hook {agent}");
    handler["command"]
        .as_str()
        .is_some_and(|c| c.contains("turnback") && (c.ends_with(&hook) || c.contains(&format!("{hook} "))))
}

#[test]
fn codex_install_merges_hooks_json_and_config_toml_idempotently_and_uninstalls_byte_for_byte() {
    let env = Env::new();
    let hooks_file = env.ws.join(".codex/hooks.json");
    let config = env.ws.join(".codex/config.toml");
    // The user's own hooks (hooks reference: {hooks: {Event: [{matcher, hooks: [{type,
    // command, timeout}]}]}}) and config (features, MCP servers, comments).
    let theirs = json!({ "hooks": {
        "PreToolUse": [{ "matcher": "^Bash$", "hooks": [{ "type": "command", "command": "~/bin/guard.sh", "timeout": 10 }] }],
        "Stop": [{ "hooks": [{ "type": "command", "command": "notify-send codex-done" }] }]
    } });
    write_file(&hooks_file, &pretty(&theirs));
    let toml = "# my Codex settings\nmodel = \"gpt-5-codex\"\napproval_policy = \"on-request\"\n\n[features]\nweb_search_request = true  # keep\n\n[mcp_servers.docs]\ncommand = \"npx\"\nargs = [\"-y\", \"docs-mcp\"]\n";
    write_file(&config, toml);
    let installed = install_round_trip(&env, &["codex"], &[hooks_file.clone(), config.clone()]);
    let settings: Value = serde_json::from_str(installed[0].as_deref().unwrap()).unwrap();
    for event in [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "Stop",
        "SubagentStart",
        "SubagentStop",
        "PreCompact",
    ] {
        let all = handlers(&settings, event);
        let ours: Vec<&(Value, Value)> = all.iter().filter(|(_, h)| is_ours(h, "codex")).collect();
        assert_eq!(ours.len(), 1, "one turnback handler for {event}: {settings:#}");
        assert_eq!(ours[0].1["type"], "command");
        assert_eq!(ours[0].1["timeout"], 30, "seconds, in Codex");
        if event.ends_with("ToolUse") {
            let matcher = Regex::new(ours[0].0.as_str().unwrap());
            for tool in ["apply_patch", "Bash", "mcp__docs__search"] {
                assert!(matcher.is_match(tool), "{event} matches {tool}");
            }
            assert!(!matcher.is_match("Read") && !matcher.is_match("apply_patch_v2"), "anchored");
        }
    }
    assert_eq!(settings["hooks"]["PreToolUse"][0], theirs["hooks"]["PreToolUse"][0], "the user's group stays first");
    assert_eq!(settings["hooks"]["Stop"][0], theirs["hooks"]["Stop"][0]);
    let toml_now = installed[1].as_deref().unwrap();
    let ours = "hooks = true # turned on by turnback install codex\n";
    assert_eq!(toml_now.matches(ours).count(), 1, "{toml_now}");
    assert_eq!(toml_now.replacen(ours, "", 1), toml, "only that line is added, the user's text as it was");
    let doc: toml_edit::DocumentMut = toml_now.parse().unwrap();
    assert_eq!(
        doc["features"]["hooks"].as_bool(),
        Some(true),
        "the hooks feature is on, by its current key: {toml_now}"
    );
    assert_eq!(doc["features"]["web_search_request"].as_bool(), Some(true));
    assert_eq!(doc["mcp_servers"]["docs"]["command"].as_str(), Some("npx"));

    // Without any config before: both files are made, and both go again.
    let fresh = Env::new();
    let files = [fresh.ws.join(".codex/hooks.json"), fresh.ws.join(".codex/config.toml")];
    install_round_trip(&fresh, &["codex"], &files);
    fresh.ok(&["install", "codex", "--uninstall"], None);
    assert!(files.iter().all(|f| !f.exists()), "files turnback made are removed");
    assert!(!fresh.ws.join(".codex").exists(), "and the directory turnback made for them");

    // The person turned hooks on (or off) themselves: their setting is theirs.
    let own = Env::new();
    let config = own.ws.join(".codex/config.toml");
    write_file(&config, "[features]\nhooks = false\n");
    own.ok(&["install", "codex"], None);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "[features]\nhooks = false\n");
    own.ok(&["install", "codex", "--uninstall"], None);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "[features]\nhooks = false\n");
}

/// A minimal matcher for the anchored alternations the installers write (`^(a|b)$|^c`):
/// enough to check what they match without a regex crate.
struct Regex(Vec<(bool, Vec<String>, bool)>);

impl Regex {
    fn new(pattern: &str) -> Regex {
        let mut alts = Vec::new();
        let mut depth = 0;
        let mut start = 0;
        let bytes: Vec<char> = pattern.chars().collect();
        let mut pieces = Vec::new();
        for (i, c) in bytes.iter().enumerate() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                '|' if depth == 0 => {
                    pieces.push(bytes[start..i].iter().collect::<String>());
                    start = i + 1;
                }
                _ => {}
            }
        }
        pieces.push(bytes[start..].iter().collect::<String>());
        for p in pieces {
            let anchored_start = p.starts_with('^');
            let anchored_end = p.ends_with('$');
            let core = p.trim_start_matches('^').trim_end_matches('$').trim_start_matches('(').trim_end_matches(')');
            let names = core.split('|').map(|s| s.trim_end_matches(".*").to_string()).collect();
            alts.push((anchored_start, names, anchored_end));
        }
        Regex(alts)
    }

    fn is_match(&self, s: &str) -> bool {
        self.0.iter().any(|(start, names, end)| {
            names.iter().any(|n| match (start, end) {
                (true, true) => s == n,
                (true, false) => s.starts_with(n.as_str()),
                (false, true) => s.ends_with(n.as_str()),
                (false, false) => s.contains(n.as_str()),
            })
        })
    }
}

#[test]
fn gemini_install_merges_settings_json_idempotently_and_uninstalls_byte_for_byte() {
    let env = Env::new();
    let file = env.ws.join(".gemini/settings.json");
    // The documented configuration example (docs/hooks/index.md) among other settings.
    let theirs = json!({
        "general": { "vimMode": true },
        "hooksConfig": { "enabled": true },
        "hooks": {
            "BeforeTool": [{ "matcher": "write_file|replace", "hooks": [{ "name": "security-check", "type": "command",
                "command": "$GEMINI_PROJECT_DIR/.gemini/hooks/security.sh", "timeout": 5000 }] }]
        },
        "tools": { "sandbox": false }
    });
    write_file(&file, &pretty(&theirs));
    let installed = install_round_trip(&env, &["gemini"], std::slice::from_ref(&file));
    let settings: Value = serde_json::from_str(installed[0].as_deref().unwrap()).unwrap();
    for key in ["general", "hooksConfig", "tools"] {
        assert_eq!(settings[key], theirs[key], "{key} is kept");
    }
    for event in ["SessionStart", "BeforeAgent", "BeforeTool", "AfterTool", "AfterAgent", "PreCompress", "SessionEnd"] {
        let ours: Vec<(Value, Value)> =
            handlers(&settings, event).into_iter().filter(|(_, h)| is_ours(h, "gemini")).collect();
        assert_eq!(ours.len(), 1, "one turnback handler for {event}: {settings:#}");
        assert_eq!(ours[0].1["timeout"], 30000, "milliseconds, in Gemini CLI");
        // A turnback that cannot start must not print and fail: Gemini would take it as "deny".
        assert!(ours[0].1["command"].as_str().unwrap().ends_with(" hook gemini 2>/dev/null || true"));
        assert_eq!(ours[0].1["type"], "command");
        if event.ends_with("Tool") {
            let m = Regex::new(ours[0].0.as_str().unwrap());
            for tool in ["write_file", "replace", "run_shell_command", "mcp_github_create_issue"] {
                assert!(m.is_match(tool), "{event} matches {tool}");
            }
            // Gemini's matchers are unanchored regular expressions (hookPlanner.ts): anchored
            // so no other tool matches by containing a name.
            assert!(!m.is_match("read_file") && !m.is_match("smart_replace"), "anchored");
        }
    }
    assert_eq!(settings["hooks"]["BeforeTool"][0], theirs["hooks"]["BeforeTool"][0], "the user's hook stays first");

    // User scope: ~/.gemini/settings.json, nothing in the project.
    let user = Env::new();
    let file = user.home.join(".gemini/settings.json");
    install_round_trip(&user, &["gemini", "--scope", "user"], std::slice::from_ref(&file));
    assert!(!user.ws.join(".gemini").exists());
}

#[test]
fn cursor_install_merges_hooks_json_with_absolute_commands_and_uninstalls_byte_for_byte() {
    let env = Env::new();
    let file = env.ws.join(".cursor/hooks.json");
    // Cursor's schema: {version: 1, hooks: {event: [{command, matcher?, timeout?, ...}]}}.
    let theirs = json!({ "version": 1, "hooks": {
        "afterFileEdit": [{ "command": ".cursor/hooks/format.sh" }],
        "stop": [{ "command": ".cursor/hooks/audit.sh", "loop_limit": null }],
        "preToolUse": [{ "command": ".cursor/hooks/guard.sh", "matcher": "Shell", "failClosed": true }]
    } });
    write_file(&file, &pretty(&theirs));
    let installed = install_round_trip(&env, &["cursor"], std::slice::from_ref(&file));
    let config: Value = serde_json::from_str(installed[0].as_deref().unwrap()).unwrap();
    assert_eq!(config["version"], 1);
    let events = [
        "sessionStart",
        "beforeSubmitPrompt",
        "preToolUse",
        "postToolUse",
        "postToolUseFailure",
        "afterShellExecution",
        "afterAgentResponse",
        "subagentStart",
        "subagentStop",
        "stop",
        "sessionEnd",
    ];
    for event in events {
        let list = config["hooks"][event].as_array().unwrap_or_else(|| panic!("{event}: {config:#}"));
        let ours: Vec<&Value> = list.iter().filter(|h| is_ours(h, "cursor")).collect();
        assert_eq!(ours.len(), 1, "one turnback handler for {event}: {config:#}");
        let command = ours[0]["command"].as_str().unwrap();
        assert!(command.starts_with('/') || command.starts_with("'/"), "an absolute path for Cursor: {command}");
        assert_eq!(ours[0]["timeout"], 30, "seconds, in Cursor");
        if event.starts_with("pre") || event.starts_with("post") {
            let m = Regex::new(ours[0]["matcher"].as_str().unwrap());
            assert!(m.is_match("Write") && m.is_match("Delete"), "{event}");
        }
    }
    assert_eq!(config["hooks"]["afterFileEdit"], theirs["hooks"]["afterFileEdit"]);
    assert_eq!(config["hooks"]["stop"][0], theirs["hooks"]["stop"][0]);
    assert_eq!(config["hooks"]["preToolUse"][0], theirs["hooks"]["preToolUse"][0]);

    // Without a file before: made with version 1, and removed again.
    let fresh = Env::new();
    let file = fresh.ws.join(".cursor/hooks.json");
    let made = install_round_trip(&fresh, &["cursor"], std::slice::from_ref(&file));
    assert_eq!(serde_json::from_str::<Value>(made[0].as_deref().unwrap()).unwrap()["version"], 1);

    // User scope: ~/.cursor/hooks.json.
    let user = Env::new();
    let file = user.home.join(".cursor/hooks.json");
    install_round_trip(&user, &["cursor", "--scope", "user"], std::slice::from_ref(&file));
    assert!(!user.ws.join(".cursor").exists());
}

#[test]
fn opencode_install_writes_its_plugin_refuses_a_foreign_file_and_uninstalls() {
    let env = Env::new();
    let plugin = env.ws.join(".opencode/plugin/turnback.js");
    let installed = install_round_trip(&env, &["opencode"], std::slice::from_ref(&plugin));
    let text = installed[0].as_deref().unwrap();
    assert!(text.starts_with("// turnback: undo for this project's opencode sessions.\n"), "{text}");
    let exe = serde_json::to_string(env!("CARGO_BIN_EXE_turnback")).unwrap();
    assert!(text.contains(&format!("const TURNBACK = {exe};")), "the binary's path is written in");
    assert!(!text.contains("__TURNBACK__"));
    env.ok(&["install", "opencode", "--uninstall"], None);
    assert!(!plugin.exists(), "the plugin is removed");

    // A file of that name that is not turnback's is never overwritten nor removed.
    let foreign = "// my own plugin\nexport const Mine = async () => ({});\n";
    write_file(&plugin, foreign);
    let refused = env.fail(&["install", "opencode"], None);
    assert_eq!((refused.exit, refused.code.as_str()), (2, "invalid-argument"), "{refused:?}");
    assert_eq!(std::fs::read_to_string(&plugin).unwrap(), foreign);
    let out = env.run(&["--json", "install", "opencode", "--uninstall"], None);
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert_eq!(parse_json(&out)["files"][0]["changed"], false);
    assert_eq!(std::fs::read_to_string(&plugin).unwrap(), foreign);

    // User scope: $XDG_CONFIG_HOME/opencode/plugin/turnback.js.
    let user = Env::new();
    let file = user.conf.join("opencode/plugin/turnback.js");
    install_round_trip(&user, &["opencode", "--scope", "user"], std::slice::from_ref(&file));
    assert!(!user.ws.join(".opencode").exists());
}

#[test]
fn user_scope_installs_go_under_home_and_codex_honours_codex_home() {
    let mut env = Env::new();
    let home_codex = env.home.join(".codex");
    let files = [home_codex.join("hooks.json"), home_codex.join("config.toml")];
    let in_home = install_round_trip(&env, &["codex", "--scope", "user"], &files);
    // With $CODEX_HOME set, that is where Codex's user layer lives (hooks reference).
    let codex_home = env.root.join("codex-home");
    env.set_var("CODEX_HOME", codex_home.to_str().unwrap());
    let files = [codex_home.join("hooks.json"), codex_home.join("config.toml")];
    let installed = install_round_trip(&env, &["codex", "--scope", "user"], &files);
    assert!(installed[0].as_deref().unwrap().contains(" hook codex"));
    let untouched: Vec<Option<String>> = [home_codex.join("hooks.json"), home_codex.join("config.toml")]
        .iter()
        .map(|f| std::fs::read_to_string(f).ok())
        .collect();
    assert_eq!(untouched, in_home, "~/.codex is not touched once CODEX_HOME names another place");
    assert!(!env.ws.join(".codex").exists(), "nothing in the project");
    for dir in [".claude", ".gemini", ".cursor", ".opencode"] {
        assert!(!env.home.join(dir).exists() && !env.ws.join(dir).exists(), "{dir}");
    }
}

/// Where each installer keeps its hooks, and one of the events it hooks.
const HOOK_FILES: [(&str, &str, &str); 4] = [
    ("claude-code", ".claude/settings.json", "Stop"),
    ("codex", ".codex/hooks.json", "Stop"),
    ("gemini", ".gemini/settings.json", "AfterAgent"),
    ("cursor", ".cursor/hooks.json", "stop"),
];

/// `agent`'s hooks file holding one handler on `event` that runs `command`, in the shape of
/// that agent's file, beside a setting of the person's.
fn hooks_file_with(agent: &str, event: &str, command: &str) -> Value {
    if agent == "cursor" {
        json!({ "version": 1, "hooks": { event: [{ "command": command }] } })
    } else {
        json!({ "model": "opus", "hooks": { event: [{ "hooks": [{ "type": "command", "command": command }] }] } })
    }
}

/// The commands of `event`'s handlers in `agent`'s hooks file.
fn commands_on(settings: &Value, agent: &str, event: &str) -> Vec<String> {
    let list = settings["hooks"][event].as_array().cloned().unwrap_or_default();
    let handlers: Vec<Value> = if agent == "cursor" {
        list
    } else {
        list.iter().flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default()).collect()
    };
    handlers.iter().map(|h| h["command"].as_str().unwrap_or_default().to_string()).collect()
}

#[test]
fn an_installed_hook_in_another_form_is_not_installed_twice() {
    let env = Env::new();
    for (agent, rel, event) in HOOK_FILES {
        let file = env.ws.join(rel);
        // The person's own ways to run turnback's hook: left as they wrote them.
        let persons = [
            format!("sh -c 'exec turnback hook {agent}'"),
            format!("bash -c \"turnback hook {agent}\""),
            format!("exec turnback hook {agent}"),
            format!("env X=1 turnback hook {agent}"),
            format!("cd \"$PWD\" && turnback --store \"$HOME/tb\" hook {agent} 2>>/tmp/tb.log"),
        ];
        // turnback's own way, with a binary elsewhere: brought up to date where it is.
        let written =
            [format!("/usr/local/bin/turnback hook {agent}"), format!("\"/opt/my tools/turnback\" hook {agent}")];
        for (form, persons) in persons.iter().map(|f| (f, true)).chain(written.iter().map(|f| (f, false))) {
            write_file(&file, &pretty(&hooks_file_with(agent, event, form)));
            env.ok(&["install", agent], None);
            let installed = std::fs::read_to_string(&file).unwrap();
            let settings: Value = serde_json::from_str(&installed).unwrap();
            let ours: Vec<String> = commands_on(&settings, agent, event)
                .into_iter()
                .filter(|c| c.contains(&format!("hook {agent}")))
                .collect();
            assert_eq!(ours.len(), 1, "{agent}, {form}: one turnback hook on {event}: {installed}");
            if persons {
                assert_eq!(&ours[0], form, "{agent}: the person's form stays as written: {installed}");
            } else {
                assert_ne!(&ours[0], form, "{agent}: turnback's own form is brought up to date: {installed}");
            }
            let again = env.json(&["install", agent]);
            assert_eq!(again["files"][0]["changed"], false, "{agent}, {form}: {again:#}");
            assert_eq!(std::fs::read_to_string(&file).unwrap(), installed, "{agent}, {form}: installing again");
            // Uninstalling takes out what install took for turnback's hook.
            env.ok(&["install", agent, "--uninstall"], None);
            let left = std::fs::read_to_string(&file).unwrap_or_default();
            assert!(!left.contains(&format!("hook {agent}")), "{agent}, {form}: {left}");
        }
    }
}

#[test]
fn a_second_copy_of_turnbacks_hook_is_taken_out_at_install() {
    // What an install that did not recognise the person's form left: two turnback hooks.
    let env = Env::new();
    let file = env.ws.join(".claude/settings.json");
    let persons = "sh -c 'exec turnback hook claude-code'";
    let twice = json!({ "hooks": { "Stop": [
        { "hooks": [{ "type": "command", "command": persons }] },
        { "hooks": [{ "type": "command", "command": "turnback hook claude-code", "timeout": 30 }] },
        { "hooks": [{ "type": "command", "command": "notify-send done" }] }
    ] } });
    write_file(&file, &pretty(&twice));
    env.ok(&["install", "claude-code"], None);
    let settings: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(commands_on(&settings, "claude-code", "Stop"), [persons, "notify-send done"], "{settings:#}");
}

#[test]
fn a_command_that_only_mentions_turnback_is_not_taken_for_its_hook() {
    let env = Env::new();
    let file = env.ws.join(".claude/settings.json");
    let command = |c: &str| json!([{ "hooks": [{ "type": "command", "command": c }] }]);
    let theirs = json!({ "hooks": {
        "Stop": command("echo turnback hook claude-code"),
        "PreToolUse": command("mytool --then turnback hook claude-code"),
        "SessionEnd": command("turnback-other hook claude-code"),
        "Notification": command("notify-send 'turnback hook claude-code'")
    } });
    write_file(&file, &pretty(&theirs));
    // Kept at install, beside turnback's own, and given back at uninstall byte for byte.
    let installed = install_round_trip(&env, &["claude-code"], std::slice::from_ref(&file));
    let settings: Value = serde_json::from_str(installed[0].as_deref().unwrap()).unwrap();
    for (event, theirs) in [
        ("Stop", "echo turnback hook claude-code"),
        ("PreToolUse", "mytool --then turnback hook claude-code"),
        ("SessionEnd", "turnback-other hook claude-code"),
    ] {
        let commands = commands_on(&settings, "claude-code", event);
        assert_eq!(commands.len(), 2, "{event}: {settings:#}");
        assert_eq!(commands[0], theirs);
    }
}

#[test]
fn a_reinstall_leaves_turnbacks_hooks_where_they_are_among_the_persons() {
    let env = Env::new();
    let file = env.ws.join(".claude/settings.json");
    write_file(&file, &pretty(&json!({ "model": "opus" })));
    env.ok(&["install", "claude-code"], None);
    // The person adds hooks after turnback's: to one of its events and two of their own.
    let mut settings: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let group = |c: &str| json!({ "hooks": [{ "type": "command", "command": c }] });
    settings["hooks"]["Stop"].as_array_mut().unwrap().push(group("notify-send done"));
    settings["hooks"]["Notification"] = json!([group("notify-send ping")]);
    settings["hooks"]["PermissionRequest"] = json!([group("audit.sh")]);
    settings["theme"] = json!("dark");
    let theirs = pretty(&settings);
    write_file(&file, &theirs);
    let again = env.json(&["install", "claude-code"]);
    assert_eq!(again["files"][0]["changed"], false, "{again:#}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), theirs, "installing again moves nothing");
    env.ok(&["install", "claude-code", "--uninstall"], None);
    let expected = json!({ "model": "opus", "hooks": {
        "Stop": [group("notify-send done")],
        "Notification": [group("notify-send ping")],
        "PermissionRequest": [group("audit.sh")]
    }, "theme": "dark" });
    assert_eq!(std::fs::read_to_string(&file).unwrap(), pretty(&expected), "the person's hooks, in their order");
}

#[test]
fn gemini_uninstall_gives_back_settings_without_an_added_hooks_key() {
    let env = Env::new();
    let file = env.ws.join(".gemini/settings.json");
    let theirs = json!({ "general": { "vimMode": true } });
    write_file(&file, &pretty(&theirs));
    env.ok(&["install", "gemini"], None);
    // Gemini CLI (or the person) writes more settings after turnback's `hooks`.
    let mut settings: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    settings["ui"] = json!({ "theme": "GitHub" });
    settings["tools"] = json!({ "sandbox": false });
    write_file(&file, &pretty(&settings));
    env.ok(&["install", "gemini", "--uninstall"], None);
    let expected =
        json!({ "general": { "vimMode": true }, "ui": { "theme": "GitHub" }, "tools": { "sandbox": false } });
    assert_eq!(std::fs::read_to_string(&file).unwrap(), pretty(&expected), "no hooks key, the rest where it was");
}

#[test]
fn cursor_uninstall_gives_back_hooks_json_without_an_added_version() {
    let env = Env::new();
    let file = env.ws.join(".cursor/hooks.json");
    write_file(&file, &pretty(&json!({ "hooks": { "afterFileEdit": [{ "command": ".cursor/hooks/format.sh" }] } })));
    install_round_trip(&env, &["cursor"], std::slice::from_ref(&file));
}

#[test]
fn uninstalling_where_nothing_is_installed_leaves_every_file_as_it_is() {
    let env = Env::new();
    // Written in the person's own style, or holding nothing: none of it turnback's to rewrite.
    let files = [
        (".claude/settings.json", "{\"model\": \"opus\", \"permissions\": {\"allow\": [\"Bash(npm test)\"]}}\n"),
        (".gemini/settings.json", "{}\n"),
        (".cursor/hooks.json", "{\n  \"version\": 1\n}\n"),
        (".codex/hooks.json", "{ \"hooks\": { \"Stop\": [] } }"),
    ];
    for (rel, text) in files {
        write_file(&env.ws.join(rel), text);
    }
    for agent in ["claude-code", "gemini", "cursor", "codex"] {
        let out = env.json(&["install", agent, "--uninstall"]);
        assert!(out["files"].as_array().unwrap().iter().all(|f| f["changed"] == false), "{out:#}");
    }
    for (rel, text) in files {
        assert_eq!(std::fs::read_to_string(env.ws.join(rel)).ok().as_deref(), Some(text), "{rel}");
    }
}

#[test]
fn gemini_a_relative_replace_is_checkpointed_on_the_file_gemini_edits() {
    // Gemini resolves a relative `replace` path itself (pathCorrector.ts): "app.ts" in a
    // workspace that has only src/app.ts edits src/app.ts, and AfterTool's
    // returnDisplay.filePath names it.
    let env = Env::new();
    env.write("src/app.ts", "const foo = 1;\n");
    let chat = env.root.join("chat.jsonl");
    let at = |name: &str, extra: Value| with(gemini_base(&env, json!(chat), name), extra);
    hook(&env, "gemini", &at("BeforeAgent", json!({ "prompt": "rename foo" })));
    let input = json!({ "file_path": "app.ts", "old_string": "const foo = 1;", "new_string": "const bar = 1;" });
    hook(&env, "gemini", &at("BeforeTool", json!({ "tool_name": "replace", "tool_input": input })));
    env.write("src/app.ts", "const bar = 1;\n");
    let response = json!({ "llmContent": "Successfully modified file", "returnDisplay": { "filePath": env.ws.join("src/app.ts"), "fileName": "app.ts" } });
    hook(
        &env,
        "gemini",
        &at("AfterTool", json!({ "tool_name": "replace", "tool_input": input, "tool_response": response })),
    );
    hook(&env, "gemini", &at("AfterAgent", json!({ "prompt": "rename foo", "prompt_response": "Renamed." })));
    assert_eq!(turn_checkpoints(&env, GEMINI_SESSION, 1), [cp(&[("src/app.ts", "edit")], "succeeded")]);
    let plan = env.json(&["--session", GEMINI_SESSION, "rollback", "--turn", "1"]);
    env.ok(
        &["--session", GEMINI_SESSION, "rollback", "--turn", "1", "--apply", "--plan", str_at(&plan, "/planId")],
        None,
    );
    assert_eq!(env.read("src/app.ts").unwrap(), b"const foo = 1;\n");
    assert!(env.read("app.ts").is_none());
}

#[test]
fn a_stop_payloads_reply_stands_in_until_the_transcript_holds_the_turn_then_is_replaced() {
    // Codex: a rollout that does not hold the turn yet (only its session_meta line).
    let env = Env::new();
    let rollout = env.root.join("rollout.jsonl");
    let meta = rollout_line(&stamp(0), "session_meta", json!({ "id": CODEX_SESSION, "cwd": env.ws }));
    std::fs::write(&rollout, format!("{meta}\n")).unwrap();
    hook(&env, "codex", &codex_event(&env, Some(&rollout), "1", "UserPromptSubmit", json!({ "prompt": "fix it" })));
    hook(
        &env,
        "codex",
        &codex_event(
            &env,
            Some(&rollout),
            "1",
            "Stop",
            json!({ "stop_hook_active": false, "last_assistant_message": "Fixed." }),
        ),
    );
    assert_eq!(history(&env, CODEX_SESSION), pairs(&[("user", "fix it"), ("assistant", "Fixed.")]));
    // The rollout catches up; importing it (or the next Stop) replaces the stand-in.
    let turn = [
        rollout_line(&stamp(1000), "event_msg", json!({ "type": "user_message", "message": "fix it" })),
        rollout_line(
            &stamp(2000),
            "response_item",
            json!({ "type": "message", "role": "assistant", "content": [{ "type": "output_text", "text": "Looking." }] }),
        ),
        rollout_line(
            &stamp(3000),
            "response_item",
            json!({ "type": "message", "role": "assistant", "content": [{ "type": "output_text", "text": "Fixed." }] }),
        ),
    ];
    std::fs::write(&rollout, format!("{meta}\n{}\n", turn.join("\n"))).unwrap();
    env.ok(&["--session", CODEX_SESSION, "history", "import", "--codex", rollout.to_str().unwrap()], None);
    assert_eq!(
        history(&env, CODEX_SESSION),
        pairs(&[("user", "fix it"), ("assistant", "Looking.\n\nFixed.")]),
        "one reply"
    );
}

#[test]
fn a_hook_that_panics_still_lets_the_agent_through_and_says_nothing() {
    // Gemini CLI denies a tool when a hook exits 2 or more with text (hookRunner.ts); Cursor
    // reads stdout as its answer: a panic must be neither.
    let mut env = Env::new();
    env.set_var("TURNBACK_HOOK_PANIC", "1");
    let gemini = json!({ "session_id": "g", "cwd": env.ws, "hook_event_name": "BeforeAgent", "prompt": "hi", "timestamp": stamp(0) });
    let out = env.run(&["hook", "gemini"], Some(gemini.to_string().as_bytes()));
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{}", show_output(&out));
    let cursor = json!({ "conversation_id": "c", "hook_event_name": "preToolUse", "workspace_roots": [env.ws], "tool_name": "Write", "tool_use_id": "t", "tool_input": { "file_path": env.ws.join("a.txt") } });
    let out = env.run(&["hook", "cursor"], Some(cursor.to_string().as_bytes()));
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert_eq!(parse_json(&out), json!({}), "a neutral answer, never a deny");
    let log = std::fs::read_to_string(env.store.join("hooks.log")).unwrap();
    assert_eq!(log.matches("turnback panicked").count(), 2, "{log}");
}

#[test]
fn a_codex_sub_agents_prompt_and_stop_stay_inside_the_persons_turn() {
    // Sub-agent hooks carry the parent's session_id and their own agent_id (Codex
    // hooks/src/events: SubagentCommandInputFields).
    let env = Env::new();
    env.write("a.txt", "v0\n");
    let ev = |name: &str, extra: Value| codex_event(&env, None, "1", name, extra);
    hook(&env, "codex", &ev("UserPromptSubmit", json!({ "prompt": "refactor the app" })));
    let sub = json!({ "agent_id": "ag1", "agent_type": "worker" });
    hook(&env, "codex", &ev("UserPromptSubmit", with(json!({ "prompt": "(sub-agent task) write docs" }), sub.clone())));
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-v0\n+v1\n*** End Patch\n";
    let call = with(
        json!({ "tool_name": "apply_patch", "tool_input": { "command": patch }, "tool_use_id": "call_sub" }),
        sub.clone(),
    );
    hook(&env, "codex", &ev("PreToolUse", call.clone()));
    env.write("a.txt", "v1\n");
    hook(&env, "codex", &ev("PostToolUse", with(call, json!({ "tool_response": "Success." }))));
    hook(&env, "codex", &ev("Stop", with(json!({ "stop_hook_active": false }), sub)));
    let turns = env.json(&["--session", CODEX_SESSION, "turns"])["turns"].as_array().unwrap().clone();
    assert_eq!(turns.len(), 1, "one turn, the person's: {turns:#?}");
    assert!(turns[0]["endedAt"].is_null(), "the sub-agent's stop does not end the person's turn");
    let list = env.json(&["--session", CODEX_SESSION, "checkpoints"]);
    assert_eq!(list["checkpoints"][0]["subagent"], "ag1", "{list:#}");
}

#[test]
fn a_workspace_opened_through_a_symlink_is_checkpointed_and_outside_writes_are_no_failures() {
    // Cursor's workspace_roots is the folder as the person opened it (symlinks kept).
    let env = Env::new();
    env.write("n.txt", "n0\n");
    let link = env.root.join("linked");
    std::os::unix::fs::symlink(&env.ws, &link).unwrap();
    let event = |name: &str, extra: Value| {
        with(
            json!({ "conversation_id": "c-link", "generation_id": "g1", "hook_event_name": name, "workspace_roots": [link] }),
            extra,
        )
    };
    cursor(&env, &event("beforeSubmitPrompt", json!({ "prompt": "edit n" })));
    let write = |id: &str, path: &Path| json!({ "tool_name": "Write", "tool_use_id": id, "tool_input": { "file_path": path, "content": "x" } });
    cursor(&env, &event("preToolUse", write("t1", &link.join("n.txt"))));
    env.write("n.txt", "n1\n");
    cursor(&env, &event("postToolUse", write("t1", &link.join("n.txt"))));
    // A write outside the workspace (a scratch file): not the workspace's, not a failure.
    let scratch = env.root.join("scratch.txt");
    cursor(&env, &event("preToolUse", write("t2", &scratch)));
    cursor(&env, &event("postToolUse", write("t2", &scratch)));
    cursor(&env, &event("stop", json!({ "status": "completed", "loop_count": 0 })));
    assert_eq!(turn_checkpoints(&env, "c-link", 1), [cp(&[("n.txt", "edit")], "succeeded")]);
    assert!(std::fs::read_to_string(env.store.join("hooks.log")).unwrap_or_default().is_empty());
}

#[test]
fn opencode_relative_paths_are_relative_to_where_opencode_runs() {
    let env = Env::new();
    env.write("pkg/lib.ts", "v0\n");
    let sub = env.ws.join("pkg");
    let ev = |event: &str, extra: Value| with(opencode_event(&env, event, extra), json!({ "cwd": sub }));
    hook(&env, "opencode", &ev("prompt", json!({ "prompt": "edit lib" })));
    let args = json!({ "filePath": "lib.ts", "oldString": "v0", "newString": "v1" });
    hook(&env, "opencode", &ev("tool-before", json!({ "tool": "edit", "callID": "c1", "args": args })));
    env.write("pkg/lib.ts", "v1\n");
    hook(&env, "opencode", &ev("tool-after", json!({ "tool": "edit", "callID": "c1", "args": args })));
    hook(&env, "opencode", &ev("idle", json!({})));
    assert_eq!(turn_checkpoints(&env, OPENCODE_SESSION, 1), [cp(&[("pkg/lib.ts", "edit")], "succeeded")]);
}

#[test]
fn doctor_and_install_say_when_the_agents_own_settings_turn_hooks_off() {
    let env = Env::new();
    std::fs::create_dir_all(env.ws.join(".codex")).unwrap();
    std::fs::write(env.ws.join(".codex/config.toml"), "[features]\nhooks = false\n").unwrap();
    let installed = env.json(&["install", "codex"]);
    let notes = installed["notes"].to_string();
    assert!(notes.contains("hooks = false"), "{installed:#}");
    let report = parse_json(&env.run(&["--json", "doctor"], None));
    let off = report["problems"].as_array().unwrap().iter().any(|p| p["what"].as_str().unwrap().contains("turned off"));
    assert!(off, "{report:#}");
}

/// B12 (seen with opencode's plugin installed at project and user scope): the same reply
/// delivered twice at the same moment is recorded once.
#[test]
fn a_reply_delivered_twice_at_the_same_moment_is_recorded_once() {
    let env = Env::new();
    hook(&env, "opencode", &opencode_event(&env, "prompt", json!({ "prompt": "say it" })));
    for round in 0..8 {
        let idle = opencode_event(&env, "idle", json!({ "reply": format!("reply {round}") })).to_string();
        let children: Vec<_> = (0..2)
            .map(|_| {
                let mut child = env
                    .command(&["hook", "opencode"])
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap();
                child.stdin.take().unwrap().write_all(idle.as_bytes()).unwrap();
                child
            })
            .collect();
        for mut child in children {
            assert!(child.wait().unwrap().success());
        }
        // The next prompt, so each round's reply is the newest entry again.
        hook(&env, "opencode", &opencode_event(&env, "prompt", json!({ "prompt": format!("again {round}") })));
    }
    let history = env.json(&["--session", OPENCODE_SESSION, "history", "show"]);
    for round in 0..8 {
        let said = format!("reply {round}");
        let copies = history["entries"].as_array().unwrap().iter().filter(|e| e["content"] == said.as_str()).count();
        assert_eq!(copies, 1, "round {round}: {history:#}");
    }
}

/// Sends one event of a shell call (its id, its command).
type CallHook<'a> = Box<dyn Fn(&str, &str) + 'a>;

/// One agent's shell call through its own hooks: the prompt that begins a turn, and the
/// events before and after a command (`id` names the call).
struct ShellHooks<'a> {
    agent: &'a str,
    session: &'a str,
    prompt: Box<dyn Fn(&str) + 'a>,
    before: CallHook<'a>,
    after: CallHook<'a>,
}

fn shell_hooks(env: &Env) -> Vec<ShellHooks<'_>> {
    let cc_session = "cc-every-agent";
    let claude = |name: &str, extra: Value| hook(env, "claude-code", &claude_event(env, cc_session, name, extra));
    let bash = |id: &str, command: &str| json!({ "tool_name": "Bash", "tool_input": { "command": command }, "tool_use_id": id });
    let codex = move || CodexCall { env, rollout: Path::new("/nonexistent/rollout.jsonl"), turn: "1" };
    let gemini_chat = env.home.join("gemini-chat.jsonl");
    let gemini = std::rc::Rc::new(move |name: &str, extra: Value| {
        hook(env, "gemini", &with(gemini_base(env, json!(gemini_chat), name), extra))
    });
    let gemini2 = gemini.clone();
    let gemini_call = |command: &str| json!({ "tool_name": "run_shell_command", "tool_input": { "command": command } });
    let cursor_gen = "9f1e2d3c-0000-4c31-a245-eb9c01ae8a20";
    let cursor_ev = move |name: &str, extra: Value| cursor(env, &cursor_event(env, cursor_gen, name, extra));
    let opencode = move |event: &str, extra: Value| hook(env, "opencode", &opencode_event(env, event, extra));
    vec![
        ShellHooks {
            agent: "claude-code",
            session: cc_session,
            prompt: Box::new(move |p| claude("UserPromptSubmit", json!({ "prompt": p }))),
            before: Box::new(move |id, c| claude("PreToolUse", bash(id, c))),
            after: Box::new(move |id, c| {
                let mut done = bash(id, c);
                done["tool_response"] = json!({ "stdout": "", "stderr": "", "interrupted": false });
                claude("PostToolUse", done)
            }),
        },
        ShellHooks {
            agent: "codex",
            session: CODEX_SESSION,
            prompt: Box::new(move |p| {
                hook(env, "codex", &codex_event(env, None, "1", "UserPromptSubmit", json!({ "prompt": p })))
            }),
            before: Box::new(move |id, c| codex().pre(id, "Bash", c)),
            after: Box::new(move |id, c| codex().post(id, "Bash", c)),
        },
        ShellHooks {
            agent: "gemini",
            session: GEMINI_SESSION,
            prompt: Box::new({
                let gemini = gemini.clone();
                move |p| gemini("BeforeAgent", json!({ "prompt": p }))
            }),
            before: Box::new(move |_, c| gemini2("BeforeTool", gemini_call(c))),
            after: Box::new(move |_, c| {
                let mut done = gemini_call(c);
                let text = "<untrusted_context>\nOutput: (empty)\nExit Code: 0\n</untrusted_context>";
                done["tool_response"] = json!({ "llmContent": text, "returnDisplay": text });
                gemini("AfterTool", done)
            }),
        },
        ShellHooks {
            agent: "cursor",
            session: CURSOR_SESSION,
            prompt: Box::new(move |p| cursor_ev("beforeSubmitPrompt", json!({ "prompt": p, "attachments": [] }))),
            before: Box::new(move |_, c| {
                cursor_ev("beforeShellExecution", json!({ "command": c, "cwd": "", "sandbox": false }))
            }),
            after: Box::new(move |_, c| {
                let ran = json!({ "command": c, "output": "", "duration": 12.0, "sandbox": false });
                cursor_ev("afterShellExecution", ran)
            }),
        },
        ShellHooks {
            agent: "opencode",
            session: OPENCODE_SESSION,
            prompt: Box::new(move |p| opencode("prompt", json!({ "prompt": p }))),
            before: Box::new(move |id, c| {
                opencode("tool-before", json!({ "tool": "bash", "callID": id, "args": { "command": c } }))
            }),
            after: Box::new(move |id, c| {
                let meta = json!({ "output": "", "exit": 0 });
                opencode(
                    "tool-after",
                    json!({ "tool": "bash", "callID": id, "args": { "command": c }, "metadata": meta }),
                )
            }),
        },
    ]
}

/// The mode bits of the file at `rel`.
fn mode_of(env: &Env, rel: &str) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(env.ws.join(rel)).unwrap().permissions().mode() & 0o7777
}

#[test]
fn every_agents_shell_call_is_one_checkpoint_of_exactly_its_files_rolled_back_around_a_persons_edit_and_undone() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    for h in shell_hooks(&env) {
        // Each agent in a directory of its own: one workspace, five sessions, no overlap.
        let at = |rel: &str| format!("{}/{rel}", h.agent);
        let set_mode = |rel: &str, mode: u32| {
            std::fs::set_permissions(env.ws.join(at(rel)), std::fs::Permissions::from_mode(mode)).unwrap()
        };
        env.write(&at("edit.txt"), "e0\n");
        env.write(&at("gone.txt"), "d0\n");
        env.write(&at("old-name.txt"), "m0\n");
        env.write(&at("run.sh"), "#!/bin/sh\n");
        set_mode("run.sh", 0o644);
        (h.prompt)("tidy up");
        let command = "./tidy.sh && chmod +x run.sh";
        (h.before)("call_tidy", command);
        env.write(&at("new.txt"), "n1\n");
        env.write(&at("edit.txt"), "e1\n");
        rm(&env, &at("gone.txt"));
        std::fs::rename(env.ws.join(at("old-name.txt")), env.ws.join(at("new-name.txt"))).unwrap();
        set_mode("run.sh", 0o755);
        (h.after)("call_tidy", command);
        // A command that changes nothing leaves no checkpoint.
        (h.before)("call_status", "git status");
        (h.after)("call_status", "git status");

        let all = env.json(&["--session", h.session, "checkpoints"])["checkpoints"].as_array().unwrap().clone();
        let shells: Vec<&Value> = all.iter().filter(|c| c["mutation"]["kind"] == "shell").collect();
        assert_eq!(shells.len(), 1, "{}: one checkpoint, for the command that changed files: {all:#?}", h.agent);
        let mut got: Vec<(String, String)> = shells[0]["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (str_at(t, "/path").to_string(), str_at(t, "/effect").to_string()))
            .collect();
        got.sort();
        let want = [
            ("edit.txt", "edit"),
            ("gone.txt", "delete"),
            ("new-name.txt", "create"),
            ("new.txt", "create"),
            ("old-name.txt", "delete"),
            ("run.sh", "edit"),
        ];
        let want: Vec<(String, String)> = want.iter().map(|(p, e)| (at(p), e.to_string())).collect();
        assert_eq!(got, want, "{}: exactly the command's files", h.agent);
        assert_eq!(shells[0]["shell"]["command"], command, "{}", h.agent);

        // A person edits one of its files afterwards: that one is theirs now.
        env.write(&at("edit.txt"), "the person's\n");
        let id = str_at(shells[0], "/checkpointId").to_string();
        let out = env.run(&["--json", "--session", h.session, "rollback", &id, "--apply"], None);
        assert_eq!(out.status.code(), Some(3), "{}: partial; {}", h.agent, show_output(&out));
        let done = crate::common::parse_json(&out);
        let left = done["targets"].as_array().unwrap().iter().find(|t| t["path"] == at("edit.txt")).unwrap();
        assert_eq!(left["outcome"]["kind"], "conflict", "{}: reported as someone's later work", h.agent);
        assert_eq!(env.read(&at("edit.txt")).unwrap(), b"the person's\n", "{}", h.agent);
        assert_eq!(env.read(&at("gone.txt")).unwrap(), b"d0\n", "{}", h.agent);
        assert_eq!(env.read(&at("old-name.txt")).unwrap(), b"m0\n", "{}", h.agent);
        assert!(env.read(&at("new-name.txt")).is_none() && env.read(&at("new.txt")).is_none(), "{}", h.agent);
        assert_eq!(mode_of(&env, &at("run.sh")), 0o644, "{}: the mode goes back", h.agent);

        // The undo of the rollback brings the command's results back.
        let undo = str_at(&done, "/rollbackCheckpointId").to_string();
        env.ok(&["--session", h.session, "rollback", &undo, "--apply"], None);
        assert_eq!(env.read(&at("new.txt")).unwrap(), b"n1\n", "{}", h.agent);
        assert_eq!(env.read(&at("new-name.txt")).unwrap(), b"m0\n", "{}", h.agent);
        assert!(env.read(&at("gone.txt")).is_none() && env.read(&at("old-name.txt")).is_none(), "{}", h.agent);
        assert_eq!(mode_of(&env, &at("run.sh")), 0o755, "{}", h.agent);
        assert_eq!(env.read(&at("edit.txt")).unwrap(), b"the person's\n", "{}", h.agent);
    }
    env.assert_verify_clean();
}
