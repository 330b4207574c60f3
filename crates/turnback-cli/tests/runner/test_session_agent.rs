//! Which agent works in a session: recorded when a hook (or `turnback run`, or the MCP
//! server) creates or first finds the session, shown by `session list`/`show` and their
//! JSON; a person's own session has none.

use serde_json::json;

use crate::common::{Env, hook, mcp_client_available};

#[test]
fn a_session_created_by_a_hook_event_keeps_the_agent_that_sent_it() {
    let env = Env::new();
    let event = json!({
        "session_id": "from-claude",
        "transcript_path": env.root.join("from-claude.jsonl"),
        "cwd": env.ws,
        "hook_event_name": "UserPromptSubmit",
        "prompt": "tidy the config",
    });
    hook(&env, "claude-code", &event);
    let list = env.json(&["session", "list"]);
    let session = list["sessions"].as_array().unwrap().iter().find(|s| s["id"] == "from-claude").expect("listed");
    assert_eq!(session["agent"], "claude-code", "{list}");
    let info = env.json(&["--session", "from-claude", "session", "show"]);
    assert_eq!(info["session"]["agent"], "claude-code", "{info}");
    let text = String::from_utf8(env.ok(&["session", "list"], None).stdout).unwrap();
    assert!(text.contains("from-claude") && text.contains("agent claude-code"), "{text}");
}

#[test]
fn turnback_run_names_its_session_run_and_a_persons_session_names_none() {
    let env = Env::new();
    env.ok(&["session", "new", "--id", "by-hand"], None);
    env.ok(&["--session", "wrapped", "run", "--", "true"], None);
    let list = env.json(&["session", "list"]);
    let agent =
        |id: &str| list["sessions"].as_array().unwrap().iter().find(|s| s["id"] == id).unwrap()["agent"].clone();
    assert_eq!(agent("wrapped"), "run", "{list}");
    assert!(agent("by-hand").is_null(), "a person's session has no agent: {list}");
}

#[test]
fn a_session_the_mcp_server_creates_names_its_agent_mcp() {
    if !mcp_client_available() {
        return;
    }
    let env = Env::new();
    let got = env.mcp_calls(&[("create_file", json!({ "path": "made.txt", "content": "by a tool\n" }))]);
    assert!(got[1].get("isError").is_none(), "{}", got[1]);
    let list = env.json(&["session", "list"]);
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{list}");
    assert_eq!(sessions[0]["agent"], "mcp", "{list}");
}

#[test]
fn a_session_keeps_its_first_agent_when_another_door_works_in_it() {
    let env = Env::new();
    let event = json!({
        "session_id": "shared",
        "transcript_path": env.root.join("shared.jsonl"),
        "cwd": env.ws,
        "hook_event_name": "UserPromptSubmit",
        "prompt": "start",
    });
    hook(&env, "claude-code", &event);
    hook(
        &env,
        "claude-code",
        &crate::common::with(event, json!({ "hook_event_name": "Stop", "stop_hook_active": false })),
    );
    env.ok(&["--session", "shared", "run", "--", "true"], None);
    let info = env.json(&["--session", "shared", "session", "show"]);
    assert_eq!(info["session"]["agent"], "claude-code", "{info}");
}
