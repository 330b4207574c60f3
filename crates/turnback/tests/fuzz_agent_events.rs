//! Fuzzing the agent protocol: mutated sequences of `AgentEvent`s (JSON Lines, one event per
//! line, as an adapter would deliver them — duplicated, reordered, dropped, with wrong
//! types and strange paths) recorded into one store through the public API. Every event
//! must be recorded or refused with a typed error; the agent's writes happen between a
//! call's start and its end as they would; and at the end the store verifies clean (no
//! sequence of events corrupts it) and nothing outside the workspace changed.
//!
//! Seeds: `crates/turnback/fuzz/agent-events/`, written from the protocol's documented
//! lifecycles (docs/agent-protocol.md): a whole turn, sub-agents and a continuation, calls
//! without ids, a duplicate delivery and an interrupted call.

use std::path::{Component, Path, PathBuf};

use turnback::{AgentEvent, KeyConfig, Options, ToolEffect, Turnback};
use turnback_fuzz::{Fuzz, Shape};

#[global_allocator]
static ALLOC: turnback_fuzz::Tracking = turnback_fuzz::Tracking;

/// A path the test itself may write for the agent: relative, plain components, not `.git`.
fn agents_to_write(p: &Path) -> bool {
    let parts: Vec<Component<'_>> = p.components().collect();
    !parts.is_empty()
        && parts.len() <= 4
        && parts.iter().all(|c| matches!(c, Component::Normal(n) if n.len() <= 100 && *n != ".git"))
}

fn files(dir: &Path, skip: &[&Path], out: &mut Vec<(PathBuf, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if skip.iter().any(|s| p.starts_with(s)) {
            continue;
        }
        if p.is_dir() {
            files(&p, skip, out);
        } else {
            out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
        }
    }
}

#[test]
fn fuzz_agent_events() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let store = dir.path().join("store");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    std::fs::write(dir.path().join("outside.txt"), "not the workspace's\n").unwrap();
    let options = Options {
        store: Some(store.clone()),
        session: Some("fuzz".into()),
        keys: KeyConfig::with_key("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into()),
        create: true,
        ..Options::new(&ws)
    };
    let snapshot_outside = || {
        let mut out = Vec::new();
        files(dir.path(), &[&ws, &store], &mut out);
        out.sort();
        out
    };
    let before = snapshot_outside();
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/agent-events");
    let mut written = 0u64;
    Fuzz::new("agent-events", &corpus, Shape::JsonLines).run(|input| {
        let tb = Turnback::open(&options).expect("the store opens after any sequence");
        let mut outcome = Vec::new();
        for line in input.split(|b| *b == b'\n') {
            let Ok(event) = serde_json::from_slice::<AgentEvent>(line) else {
                outcome.push("-".to_string());
                continue;
            };
            let r = tb.record_event(&event, None);
            outcome.push(match &r {
                Ok(_) => "ok".to_string(),
                Err(e) => e.code.as_str().to_string(),
            });
            // The agent writes its files once the call has started.
            if let AgentEvent::ToolStarted { call } = &event
                && call.effect == ToolEffect::WritesFiles
            {
                for p in call.paths.iter().filter(|p| agents_to_write(p)) {
                    let target = ws.join(p);
                    if target.parent().is_some_and(|d| std::fs::create_dir_all(d).is_ok()) && !target.is_dir() {
                        written += 1;
                        let _ = std::fs::write(&target, format!("written {written}\n"));
                    }
                }
            }
        }
        outcome.join(",")
    });
    let report = Turnback::open(&options).unwrap().verify(true).unwrap();
    assert!(report.clean, "any sequence of agent events leaves a store that verifies: {:?}", report.problems);
    assert_eq!(snapshot_outside(), before, "nothing outside the workspace and the store changed");
}
