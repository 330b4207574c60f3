//! The agent protocol through the public facade only, as a Rust program using the library
//! would drive it: the documented sequences of events, and the awkward ones — duplicates,
//! reordering, missing ends, continuations after a blocked stop, sub-agents, failures.

use std::path::{Path, PathBuf};

use turnback::{AgentEvent, ErrorCode, HistorySelection, KeyConfig, Options, Role, ToolCall, ToolEffect, Turnback};

/// A workspace and a store in a temp dir, the key given explicitly.
struct Env {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    options: Options,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let options = Options {
            store: Some(dir.path().join("store")),
            session: Some("agent-1".into()),
            keys: KeyConfig::with_key("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into()),
            create: true,
            ..Options::new(&ws)
        };
        Env { _dir: dir, ws, options }
    }

    /// Each event is recorded by a fresh `Turnback`, as each hook is a process of its own.
    fn send(&self, event: AgentEvent) -> turnback::Recorded {
        Turnback::open(&self.options).unwrap().record_event(&event, None).unwrap()
    }

    fn tb(&self) -> Turnback {
        Turnback::open(&self.options).unwrap()
    }

    fn write(&self, rel: &str, text: &str) {
        std::fs::write(self.ws.join(rel), text).unwrap();
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.ws.join(rel)).ok()
    }
}

fn prompt(text: &str) -> AgentEvent {
    AgentEvent::PromptSubmitted { prompt: Some(text.into()) }
}

fn write_call(id: &str, path: &Path) -> ToolCall {
    ToolCall {
        id: Some(id.into()),
        name: "Write".into(),
        effect: ToolEffect::WritesFiles,
        paths: vec![path.to_path_buf()],
        ..ToolCall::default()
    }
}

/// A tool call that writes `rel`, with its "before" and "after" events around the write.
fn agent_writes(env: &Env, id: &str, rel: &str, text: &str) {
    let call = write_call(id, &env.ws.join(rel));
    env.send(AgentEvent::ToolStarted { call: call.clone() });
    env.write(rel, text);
    env.send(AgentEvent::ToolFinished { call });
}

fn stop() -> AgentEvent {
    AgentEvent::Stopped { continued: false }
}

#[test]
fn a_documented_turn_records_its_prompt_edits_shell_reply_and_end() {
    let env = Env::new();
    env.write("a.txt", "before\n");
    env.send(AgentEvent::SessionStarted);
    let begun = env.send(prompt("fix a.txt"));
    assert!(!begun.joined);
    agent_writes(&env, "t1", "a.txt", "after\n");
    let shell = ToolCall {
        id: Some("t2".into()),
        name: "Bash".into(),
        effect: ToolEffect::RunsShell,
        command: Some("make test TOKEN=abc123".into()),
        exit_status: Some(2),
        ..ToolCall::default()
    };
    env.send(AgentEvent::ToolFinished { call: shell });
    env.send(AgentEvent::AssistantReplied { text: "Fixed.".into(), thinking: Some("easy".into()) });
    let ended = env.send(stop());

    let turn = ended.turn.expect("the stop ended the turn");
    assert!(!turn.running() && turn.end_snapshot.as_ref().is_some_and(|e| e.id.is_some()));
    assert_eq!(turn.shell_effects.len(), 1);
    assert_eq!(turn.shell_effects[0].command, "make test TOKEN=[redacted]");
    assert_eq!((turn.shell_effects[0].exit_status, turn.shell_effects[0].failed), (Some(2), true));
    let tb = env.tb();
    let history = tb.history(&HistorySelection::All).unwrap().entries;
    let said: Vec<(Role, &str)> = history.iter().map(|e| (e.role, e.content.as_str())).collect();
    assert_eq!(said, [(Role::User, "fix a.txt"), (Role::Assistant, "Fixed.")]);
    assert_eq!(history[1].thinking.as_deref(), Some("easy"));
    let checkpoints = tb.checkpoints(None, false).unwrap().checkpoints;
    assert_eq!(checkpoints.len(), 1, "one committed checkpoint for the write");
    assert_eq!(checkpoints[0].record.prompt_round, Some(1));
}

#[test]
fn the_same_events_delivered_twice_record_once() {
    let env = Env::new();
    env.write("a.txt", "before\n");
    env.send(prompt("once"));
    assert!(env.send(prompt("once")).joined, "the same prompt again joins its turn");
    let call = write_call("t1", &env.ws.join("a.txt"));
    env.send(AgentEvent::ToolStarted { call: call.clone() });
    env.send(AgentEvent::ToolStarted { call: call.clone() });
    env.write("a.txt", "after\n");
    env.send(AgentEvent::ToolFinished { call: call.clone() });
    let again = env.send(AgentEvent::ToolFinished { call });
    assert!(again.checkpoint.is_none(), "a second finish finds nothing left to commit");
    env.send(stop());
    let nothing = env.send(stop());
    assert!(nothing.turn.is_none(), "a second stop does nothing");

    let tb = env.tb();
    assert_eq!(tb.turns().unwrap().turns.len(), 1);
    assert_eq!(tb.checkpoints(None, true).unwrap().checkpoints.len(), 1);
    assert_eq!(tb.history(&HistorySelection::All).unwrap().entries.len(), 1, "the prompt once");
}

#[test]
fn an_after_event_before_its_before_event_is_closed_at_the_turn_boundary() {
    let env = Env::new();
    env.write("a.txt", "before\n");
    env.send(prompt("reordered"));
    let call = write_call("t1", &env.ws.join("a.txt"));
    let early = env.send(AgentEvent::ToolFinished { call: call.clone() });
    assert!(early.checkpoint.is_none(), "a finish without its start records nothing");
    env.send(AgentEvent::ToolStarted { call });
    let ended = env.send(stop());
    assert_eq!(ended.abandoned_calls_closed, 1, "the stage waiting for its finish is closed at the stop");
    let all = env.tb().checkpoints(None, true).unwrap().checkpoints;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].record.mutation.commit_state.as_str(), "failed");
}

#[test]
fn a_prompt_without_a_stop_before_it_starts_a_new_turn_and_ends_the_last() {
    let env = Env::new();
    env.write("a.txt", "zero\n");
    env.send(prompt("first"));
    agent_writes(&env, "t1", "a.txt", "one\n");
    // Interrupted: no stop. The person's next prompt is a new turn.
    let second = env.send(prompt("second"));
    assert!(!second.joined);
    agent_writes(&env, "t2", "a.txt", "two\n");
    env.send(AgentEvent::SessionEnded);

    let tb = env.tb();
    let turns = tb.turn_records().unwrap();
    assert_eq!(turns.len(), 2);
    assert!(
        turns.iter().all(|t| !t.running()),
        "the first ended where the second began; the session end ended the second"
    );
    assert_eq!(turns[0].end_snapshot.as_ref().and_then(|e| e.id.clone()), turns[1].snapshot.id.clone());
    let plan = tb.rewind_preview(1, &[]).unwrap();
    let done = tb.rewind_apply(1, &[], Some(&plan.plan_id)).unwrap();
    assert_eq!(done.plan.result_type, turnback::ResultType::Full);
    assert_eq!(env.read("a.txt").as_deref(), Some("zero\n"));
}

#[test]
fn an_agent_carrying_on_after_a_blocked_stop_stays_in_its_turn() {
    let env = Env::new();
    env.write("a.txt", "zero\n");
    env.send(prompt("work"));
    agent_writes(&env, "t1", "a.txt", "one\n");
    env.send(stop());
    // Another hook blocked that stop: the agent works on.
    agent_writes(&env, "t2", "a.txt", "two\n");
    let ended = env.send(AgentEvent::Stopped { continued: true });
    let turn = ended.turn.expect("the turn ended again");
    assert_eq!(turn.continuations, 1);

    let tb = env.tb();
    assert_eq!(tb.turns().unwrap().turns.len(), 1);
    let plan = tb.rewind_preview(1, &[]).unwrap();
    assert_eq!(plan.result_type, turnback::ResultType::Full, "the later edit is the agent's, not a person's");
    tb.rewind_apply(1, &[], Some(&plan.plan_id)).unwrap();
    assert_eq!(env.read("a.txt").as_deref(), Some("zero\n"));
}

#[test]
fn an_event_delivered_again_after_the_stop_never_reopens_the_turn() {
    let env = Env::new();
    env.write("a.txt", "zero\n");
    env.write("b.txt", "mine\n");
    env.send(prompt("work"));
    let call = write_call("t1", &env.ws.join("a.txt"));
    env.send(AgentEvent::ToolStarted { call: call.clone() });
    env.write("a.txt", "one\n");
    env.send(AgentEvent::ToolFinished { call: call.clone() });
    env.send(stop());
    // The hook runner delivers the same events again after the stop.
    assert!(!env.send(AgentEvent::ToolFinished { call: call.clone() }).reopened);
    assert!(!env.send(AgentEvent::ToolStarted { call }).reopened);
    // The person edits a file by hand, then sends the next prompt.
    env.write("b.txt", "the person's\n");
    env.send(prompt("more"));

    let tb = env.tb();
    assert_eq!(tb.checkpoints(None, true).unwrap().checkpoints.len(), 1, "nothing staged twice");
    let plan = tb.rewind_preview(1, &[]).unwrap();
    let b = plan.paths.iter().find(|p| p.path == "b.txt").expect("b.txt differs");
    assert_eq!(b.action, turnback::RewindAction::LeaveAlone, "a hand edit between turns stays the person's: {plan:?}");
}

#[test]
fn a_continued_stop_with_no_new_event_takes_the_end_snapshot_again() {
    let env = Env::new();
    env.write("a.txt", "zero\n");
    env.send(prompt("work"));
    env.send(stop());
    // The agent carried on, with a tool this protocol does not hear about, and stopped again.
    env.write("a.txt", "changed by the agent's shell\n");
    let again = env.send(AgentEvent::Stopped { continued: true });
    assert!(again.reopened);
    let plan = env.tb().rewind_preview(1, &[]).unwrap();
    assert_eq!(plan.result_type, turnback::ResultType::Full, "{plan:?}");
}

#[test]
fn sub_agents_are_recorded_in_their_turn_and_compaction_changes_nothing() {
    let env = Env::new();
    env.write("a.txt", "zero\n");
    env.send(prompt("delegate"));
    env.send(AgentEvent::SubagentStarted { id: "sub-1".into(), kind: Some("Explore".into()) });
    let call = ToolCall { subagent: Some("sub-1".into()), ..write_call("t1", &env.ws.join("a.txt")) };
    env.send(AgentEvent::ToolStarted { call: call.clone() });
    env.write("a.txt", "by the sub-agent\n");
    let committed = env.send(AgentEvent::ToolFinished { call }).checkpoint.expect("committed");
    assert_eq!(committed.subagent.as_deref(), Some("sub-1"), "a sub-agent's edit can be told apart");
    env.send(AgentEvent::Compacted);
    env.send(AgentEvent::SubagentStopped { id: "sub-1".into() });
    let ended = env.send(stop()).turn.unwrap();
    assert_eq!(ended.subagents.len(), 1);
    assert_eq!(ended.subagents[0].kind.as_deref(), Some("Explore"));
    assert!(ended.subagents[0].stopped_at.is_some());
    assert_eq!(env.tb().history(&HistorySelection::All).unwrap().entries.len(), 1);
}

#[test]
fn a_tool_call_outside_the_workspace_is_refused_and_nothing_is_staged() {
    let env = Env::new();
    env.send(prompt("escape"));
    let call = write_call("t1", Path::new("/etc/passwd"));
    let err = env.tb().record_event(&AgentEvent::ToolStarted { call }, None).unwrap_err();
    assert_eq!(err.code, ErrorCode::PathRejected);
    assert!(env.tb().checkpoints(None, true).unwrap().checkpoints.is_empty());
}

#[test]
fn events_are_plain_json_an_adapter_can_write() {
    let json = r#"[
        {"event": "session-started"},
        {"event": "prompt-submitted", "prompt": "hi"},
        {"event": "tool-started", "call": {"id": "t1", "name": "Write", "effect": "writes-files", "paths": ["a.txt"]}},
        {"event": "shell-ran", "command": "ls", "exitStatus": 0},
        {"event": "stopped", "continued": true}
    ]"#;
    let events: Vec<AgentEvent> = serde_json::from_str(json).unwrap();
    assert_eq!(events[1], prompt("hi"));
    assert_eq!(events[4], AgentEvent::Stopped { continued: true });
    let AgentEvent::ToolStarted { call } = &events[2] else { panic!("{events:?}") };
    assert_eq!((call.effect, call.paths.clone()), (ToolEffect::WritesFiles, vec![PathBuf::from("a.txt")]));
}

#[test]
fn the_same_call_delivered_by_several_processes_at_once_is_staged_once() {
    let env = Env::new();
    env.write("a.txt", "before\n");
    env.send(prompt("race"));
    let call = write_call("toolu_race", &env.ws.join("a.txt"));
    let start = std::sync::Barrier::new(6);
    std::thread::scope(|scope| {
        for _ in 0..6 {
            scope.spawn(|| {
                let tb = env.tb();
                start.wait();
                tb.record_event(&AgentEvent::ToolStarted { call: call.clone() }, None).unwrap()
            });
        }
    });
    env.write("a.txt", "after\n");
    let done = env.send(AgentEvent::ToolFinished { call });
    assert!(done.checkpoint.is_some());
    let all = env.tb().checkpoints(None, true).unwrap().checkpoints;
    assert_eq!(
        all.len(),
        1,
        "one stage for one call: {:#?}",
        all.iter().map(|c| &c.record.checkpoint_id).collect::<Vec<_>>()
    );
    assert_eq!(all[0].record.stage_state.as_str(), "committed");
}

/// A `Write` of `rel` the agent gives no id.
fn anonymous_write(env: &Env, rel: &str) -> ToolCall {
    ToolCall { id: None, ..write_call("unused", &env.ws.join(rel)) }
}

#[test]
fn calls_without_ids_on_one_file_are_checkpointed_one_by_one() {
    let env = Env::new();
    env.write("a.txt", "zero\n");
    env.send(prompt("two writes, no ids"));
    for text in ["one\n", "two\n"] {
        let call = anonymous_write(&env, "a.txt");
        let staged = env.send(AgentEvent::ToolStarted { call: call.clone() });
        // The same start delivered again while the call is pending is that call.
        let again = env.send(AgentEvent::ToolStarted { call: call.clone() });
        assert_eq!(
            again.checkpoint.as_ref().map(|c| &c.checkpoint_id),
            staged.checkpoint.as_ref().map(|c| &c.checkpoint_id)
        );
        env.write("a.txt", text);
        assert!(env.send(AgentEvent::ToolFinished { call: call.clone() }).checkpoint.is_some());
        assert!(env.send(AgentEvent::ToolFinished { call }).checkpoint.is_none(), "a repeated finish commits nothing");
    }
    env.send(stop());

    let tb = env.tb();
    let all = tb.checkpoints(None, true).unwrap().checkpoints;
    assert_eq!(all.len(), 2, "two calls, two checkpoints: {all:?}");
    assert!(all.iter().all(|c| c.record.mutation.commit_state.as_str() == "succeeded"));
    let selection = turnback::RollbackSelection::Turn(1);
    let plan = tb.rollback_preview(&selection, &[]).unwrap();
    let done = tb.rollback_apply(&selection, &[], Some(&plan.plan_id)).unwrap();
    assert_eq!(done.result_type, turnback::ResultType::Full, "{done:?}");
    assert_eq!(env.read("a.txt").as_deref(), Some("zero\n"));
}

#[test]
fn a_reply_or_an_identified_shell_command_delivered_twice_is_recorded_once() {
    let env = Env::new();
    env.send(prompt("reply twice"));
    let shell = AgentEvent::ShellRan { id: Some("s1".into()), command: "ls".into(), exit_status: Some(0) };
    env.send(shell.clone());
    env.send(shell.clone());
    let reply = AgentEvent::AssistantReplied { text: "Done.".into(), thinking: None };
    env.send(reply.clone());
    env.send(reply.clone());
    let ended = env.send(stop());
    assert_eq!(ended.turn.unwrap().shell_effects.len(), 1);
    // Delivered again after the stop: neither reopens the turn nor records anything.
    assert!(!env.send(shell).reopened);
    assert!(!env.send(reply).reopened);
    let unidentified = AgentEvent::ShellRan { id: None, command: "ls".into(), exit_status: Some(0) };
    assert!(!env.send(unidentified).reopened, "a command without an id cannot tell it is new: no reopen");

    let tb = env.tb();
    let said: Vec<Role> = tb.history(&HistorySelection::All).unwrap().entries.iter().map(|e| e.role).collect();
    assert_eq!(said, [Role::User, Role::Assistant]);
    assert!(!tb.turn_records().unwrap()[0].running());
}

#[test]
fn beginning_a_turn_directly_closes_calls_left_waiting() {
    let env = Env::new();
    env.write("a.txt", "zero\n");
    env.send(prompt("denied"));
    // The person denies the write: its "after" event never comes.
    let call = write_call("t1", &env.ws.join("a.txt"));
    env.send(AgentEvent::ToolStarted { call });
    let tb = env.tb();
    let req = turnback::BeginRequest { prompt: Some("next".into()), background: false, new: true };
    let begun = tb.begin_turn(&req, None).unwrap();
    assert_eq!(begun.abandoned_calls_closed, 1, "a turn boundary by any door closes it");
    let all = tb.checkpoints(None, true).unwrap().checkpoints;
    assert_eq!(all[0].record.mutation.commit_state.as_str(), "failed");
    let plan = tb.rollback_preview(&turnback::RollbackSelection::Turn(1), &[]).unwrap();
    assert_ne!(plan.result_type, turnback::ResultType::Blocked, "nothing left staged blocks the path: {plan:?}");
}

#[test]
fn a_message_sent_while_a_turn_runs_joins_it_and_a_new_prompt_from_an_agent_does_not() {
    let env = Env::new();
    let tb = env.tb();
    let begin = |prompt: &str, new: bool| {
        let req = turnback::BeginRequest { prompt: Some(prompt.into()), background: false, new };
        env.tb().begin_turn(&req, None).unwrap()
    };
    let first = begin("fix the bug", false);
    let message = begin("also the docs", false);
    assert!(message.joined && message.turn.turn_id == first.turn.turn_id);
    let repeat = begin("fix the bug", true);
    assert!(repeat.joined, "the same prompt delivered again joins even as a new turn");
    let second = env.send(prompt("something else"));
    assert!(!second.joined, "an agent reporting a prompt begins a turn of its own");

    let turns = tb.turn_records().unwrap();
    assert_eq!(turns.len(), 2);
    let history = tb.history(&HistorySelection::All).unwrap().entries;
    let said: Vec<(&str, &str)> =
        history.iter().map(|e| (if e.turn_id == turns[0].turn_id { "1" } else { "2" }, e.content.as_str())).collect();
    assert_eq!(said, [("1", "fix the bug"), ("1", "also the docs"), ("2", "something else")]);
}

#[test]
fn a_blocked_rewind_changes_neither_files_nor_history_and_a_full_one_cuts_it() {
    let env = Env::new();
    env.write("a.txt", "zero\n");
    env.send(prompt("edit a.txt"));
    agent_writes(&env, "t1", "a.txt", "one\n");
    env.send(AgentEvent::AssistantReplied { text: "Edited.".into(), thinking: None });
    env.send(stop());
    // The person's edit since: a rewind leaves it alone, and so has nothing it may do.
    env.write("a.txt", "the person's\n");
    let tb = env.tb();
    let plan = tb.rewind_preview(1, &[]).unwrap();
    let done = tb.rewind_apply(1, &[], Some(&plan.plan_id)).unwrap();
    assert_eq!(done.plan.result_type, turnback::ResultType::Blocked);
    assert_eq!((done.history_entries_removed, done.restored_prompt), (0, None));
    assert_eq!(tb.history(&HistorySelection::All).unwrap().entries.len(), 2, "the conversation stays as the files do");
    assert_eq!(env.read("a.txt").as_deref(), Some("the person's\n"));

    // Forced past the person's edit, the rewind happens, and the history goes back with it.
    let forced = [PathBuf::from("a.txt")];
    let plan = tb.rewind_preview(1, &forced).unwrap();
    let done = tb.rewind_apply(1, &forced, Some(&plan.plan_id)).unwrap();
    assert_eq!(done.plan.result_type, turnback::ResultType::Full);
    assert_eq!(done.restored_prompt.as_deref(), Some("edit a.txt"));
    assert_eq!(done.history_entries_removed, 2);
    assert_eq!(env.read("a.txt").as_deref(), Some("zero\n"));
}
