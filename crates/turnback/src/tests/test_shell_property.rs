//! Property: whatever mix of shell calls (random file operations: writes, deletes, renames,
//! chmods), edit-tool calls and a person's edits runs in a turn, rolling back any one shell
//! checkpoint changes only paths that still hold exactly that command's result — and puts
//! each back as it was before the command — and the store verifies clean afterwards.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use proptest::prelude::*;

use crate::tests::common::KEY;
use crate::{
    AgentEvent, BeginRequest, KeyConfig, Options, RollbackSelection as Selection, ToolCall, ToolEffect, Turnback,
};

const PATHS: [&str; 5] = ["a.txt", "d1/b.txt", "d1/d2/c.sh", "e.txt", "d3/f.txt"];

#[derive(Debug, Clone)]
enum Op {
    Write(usize),
    Delete(usize),
    Chmod(usize),
    Rename(usize, usize),
}

#[derive(Debug, Clone)]
enum Step {
    Shell(Vec<Op>),
    AgentEdit(usize),
    PersonWrite(usize),
    PersonDelete(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..PATHS.len();
    prop_oneof![
        3 => p.clone().prop_map(Op::Write),
        1 => p.clone().prop_map(Op::Delete),
        1 => p.clone().prop_map(Op::Chmod),
        1 => (p.clone(), p).prop_map(|(a, b)| Op::Rename(a, b)),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let p = 0..PATHS.len();
    prop_oneof![
        3 => proptest::collection::vec(op(), 0..4).prop_map(Step::Shell),
        1 => p.clone().prop_map(Step::AgentEdit),
        1 => p.clone().prop_map(Step::PersonWrite),
        1 => p.prop_map(Step::PersonDelete),
    ]
}

/// Each regular file: its bytes and permission bits.
type Tree = BTreeMap<String, (Vec<u8>, u32)>;

fn tree(root: &Path) -> Tree {
    PATHS
        .iter()
        .filter_map(|p| {
            let meta = std::fs::symlink_metadata(root.join(p)).ok().filter(|m| m.is_file())?;
            Some((p.to_string(), (std::fs::read(root.join(p)).unwrap(), meta.permissions().mode() & 0o7777)))
        })
        .collect()
}

fn write(root: &Path, path: usize, text: String) {
    let p = root.join(PATHS[path]);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn run_op(root: &Path, op: &Op, n: usize) {
    let at = |i: usize| root.join(PATHS[i]);
    match *op {
        // The same length at every step: a same-size rewrite within one timestamp tick of
        // the window's first snapshot must be seen by its last.
        Op::Write(i) => write(root, i, format!("shell {n} wrote {i}\n")),
        Op::Delete(i) => {
            let _ = std::fs::remove_file(at(i));
        }
        Op::Chmod(i) => {
            if let Ok(m) = std::fs::metadata(at(i)) {
                let mode = m.permissions().mode() ^ 0o111;
                std::fs::set_permissions(at(i), std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
        Op::Rename(a, b) => {
            if a != b && at(a).exists() {
                std::fs::create_dir_all(at(b).parent().unwrap()).unwrap();
                std::fs::rename(at(a), at(b)).unwrap();
            }
        }
    }
}

fn event(tb: &Turnback, started: bool, call: ToolCall) {
    let event = if started { AgentEvent::ToolStarted { call } } else { AgentEvent::ToolFinished { call } };
    tb.record_event(&event, None).unwrap();
}

/// A shell window as the test saw it: what each path it changed held before and after.
struct Window {
    checkpoint: Option<String>,
    before: Tree,
    after: Tree,
}

fn run_case(initial: Vec<bool>, steps: Vec<Step>, pick: usize) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    for (i, present) in initial.iter().enumerate() {
        if *present {
            write(&root, i, format!("original {i}\n"));
        }
    }
    let options = Options {
        store: Some(dir.path().join("store")),
        keys: KeyConfig::with_key(KEY.to_string()),
        create: true,
        ..Options::new(&root)
    };
    let tb = Turnback::open(&options).unwrap();
    tb.begin_turn(&BeginRequest { prompt: Some("go".into()), ..Default::default() }, None).unwrap();
    let mut windows = Vec::new();
    for (n, s) in steps.iter().enumerate() {
        match s {
            Step::Shell(ops) => {
                let call = ToolCall {
                    id: Some(format!("sh{n}")),
                    name: "Bash".into(),
                    effect: ToolEffect::RunsShell,
                    command: Some(format!("step {n}")),
                    ..ToolCall::default()
                };
                event(&tb, true, call.clone());
                let before = tree(&root);
                for op in ops {
                    run_op(&root, op, n);
                }
                let after = tree(&root);
                let done = tb.record_event(&AgentEvent::ToolFinished { call }, None).unwrap();
                let checkpoint = done.checkpoint.map(|c| c.checkpoint_id);
                // Why it has none, as the turn recorded it.
                let why = done.turn.as_ref().and_then(|t| t.shell_effects.last()?.no_window.clone());
                prop_assert_eq!(
                    checkpoint.is_some(),
                    before != after,
                    "a checkpoint exactly when files changed: {:?}",
                    why
                );
                windows.push(Window { checkpoint, before, after });
            }
            Step::AgentEdit(i) => {
                let call = ToolCall {
                    id: Some(format!("w{n}")),
                    name: "Write".into(),
                    effect: ToolEffect::WritesFiles,
                    paths: vec![PATHS[*i].into()],
                    ..ToolCall::default()
                };
                event(&tb, true, call.clone());
                write(&root, *i, format!("agent {n}\n"));
                event(&tb, false, call);
            }
            Step::PersonWrite(i) => write(&root, *i, format!("person {n}\n")),
            Step::PersonDelete(i) => {
                let _ = std::fs::remove_file(root.join(PATHS[*i]));
            }
        }
    }
    let with_checkpoint: Vec<&Window> = windows.iter().filter(|w| w.checkpoint.is_some()).collect();
    if with_checkpoint.is_empty() {
        return Ok(());
    }
    let w = with_checkpoint[pick % with_checkpoint.len()];
    let now = tree(&root);
    let id = w.checkpoint.clone().unwrap();
    tb.rollback_apply(&Selection::Checkpoints(vec![id]), &[], None).unwrap();
    let after = tree(&root);
    for p in PATHS {
        let (was, is) = (now.get(p), after.get(p));
        let (pre, post) = (w.before.get(p), w.after.get(p));
        if pre == post {
            prop_assert_eq!(is, was, "{} is not the command's: the rollback left it", p);
        } else if was == post {
            prop_assert_eq!(is, pre, "{} still held the command's result: it is put back", p);
        } else if was.map(|f| &f.0) == post.map(|f| &f.0) && was.is_some() {
            // The command's bytes under a mode someone changed since: its content is the
            // command's, so it goes back — a file it created goes; one it changed gets its
            // bytes back under the mode set since (a mode is never taken back from
            // whoever set it).
            match pre {
                None => prop_assert_eq!(is, None, "{}: the command created it", p),
                Some(pre) => {
                    prop_assert_eq!(is.map(|f| &f.0), Some(&pre.0), "{}", p);
                    prop_assert_eq!(is.map(|f| f.1), was.map(|f| f.1), "{}: a mode changed since is kept", p);
                }
            }
        } else {
            prop_assert_eq!(is, was, "{} was changed since the command: the rollback left it", p);
        }
    }
    let report = tb.verify(true).unwrap();
    prop_assert!(report.clean, "verify --deep: {:?}", report.problems);
    Ok(())
}

proptest! {
    #![proptest_config(crate::tests::common::proptest_config(48, 0x7368_656c_6c5f_7062))]

    #[test]
    fn rolling_back_a_shell_checkpoint_changes_only_what_still_holds_its_result(
        initial in proptest::collection::vec(any::<bool>(), PATHS.len()),
        steps in proptest::collection::vec(step(), 1..8),
        pick in 0usize..8,
    ) {
        run_case(initial, steps, pick)?;
    }
}
