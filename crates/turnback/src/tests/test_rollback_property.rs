//! Property: whatever an agent and a person do to a workspace within a turn, rolling the
//! turn back never changes a byte the person wrote, restores every file the person left
//! alone, and rolling back that rollback returns the exact tree it started from.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::api::mutation::Mutation;
use crate::undo::rollback::{self, Selection};
use proptest::prelude::*;

use crate::tests::common::Env;

const PATHS: [&str; 5] = ["a.txt", "d1/b.txt", "d1/d2/c.bin", "e.txt", "d3/f.txt"];

#[derive(Debug, Clone)]
enum Step {
    AgentWrite { path: usize, binary: bool },
    AgentDelete { path: usize },
    PersonWrite { path: usize },
    PersonDelete { path: usize },
    PersonRecreate { path: usize },
}

fn step() -> impl Strategy<Value = Step> {
    let p = 0..PATHS.len();
    prop_oneof![
        3 => (p.clone(), any::<bool>()).prop_map(|(path, binary)| Step::AgentWrite { path, binary }),
        1 => p.clone().prop_map(|path| Step::AgentDelete { path }),
        1 => p.clone().prop_map(|path| Step::PersonWrite { path }),
        1 => p.clone().prop_map(|path| Step::PersonDelete { path }),
        1 => p.prop_map(|path| Step::PersonRecreate { path }),
    ]
}

type Tree = BTreeMap<String, (Vec<u8>, u32)>;

fn tree(root: &Path) -> Tree {
    let mut out = Tree::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, (std::fs::read(&path).unwrap(), meta.permissions().mode() & 0o7777));
            }
        }
    }
    out
}

fn content(who: &str, n: usize, binary: bool) -> Vec<u8> {
    let mut bytes = format!("{who} version {n}\nline two of {who} {n}\n").into_bytes();
    if binary {
        bytes.extend_from_slice(&[0, 1, 2, 255, 0]);
    }
    bytes
}

fn run_case(initial: Vec<bool>, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let env = Env::new();
    for (i, present) in initial.iter().enumerate() {
        if *present {
            let p = env.path(PATHS[i]);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, content("original", i, i == 2)).unwrap();
        }
    }
    let start = tree(&env.ws.root);
    // The last writer of each path, and every version the person left.
    let mut last_writer: BTreeMap<usize, &str> = BTreeMap::new();
    let mut person_touched: BTreeSet<usize> = BTreeSet::new();
    // What each path held right before each agent mutation of it (what rollback may restore).
    let mut agent_pre: BTreeMap<usize, Vec<Option<Vec<u8>>>> = BTreeMap::new();
    for (n, step) in steps.iter().enumerate() {
        match *step {
            Step::AgentWrite { path, binary } => {
                agent_pre.entry(path).or_default().push(std::fs::read(env.path(PATHS[path])).ok());
                env.apply(Mutation::Write { path: PATHS[path].into(), content: content("agent", n, binary) }).unwrap();
                last_writer.insert(path, "agent");
            }
            Step::AgentDelete { path } => {
                if env.path(PATHS[path]).exists() {
                    agent_pre.entry(path).or_default().push(std::fs::read(env.path(PATHS[path])).ok());
                    env.apply(Mutation::Delete { path: PATHS[path].into() }).unwrap();
                    last_writer.insert(path, "agent");
                }
            }
            Step::PersonWrite { path } => {
                let p = env.path(PATHS[path]);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, content("person", n, false)).unwrap();
                last_writer.insert(path, "person");
                person_touched.insert(path);
            }
            Step::PersonDelete { path } => {
                let p = env.path(PATHS[path]);
                if p.exists() {
                    std::fs::remove_file(&p).unwrap();
                    last_writer.insert(path, "person");
                    person_touched.insert(path);
                }
            }
            Step::PersonRecreate { path } => {
                let p = env.path(PATHS[path]);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                let _ = std::fs::remove_file(&p);
                std::fs::write(&p, content("person", n, false)).unwrap();
                last_writer.insert(path, "person");
                person_touched.insert(path);
            }
        }
    }
    let before = tree(&env.ws.root);
    let ctx = rollback::Context { store: &env.store, workspace: &env.ws, session: &env.session };
    let preview = rollback::analyze(ctx, &Selection::Turn(0), &BTreeMap::new()).unwrap();
    let result = rollback::apply(ctx, &Selection::Turn(0), &BTreeMap::new(), Some(&preview.plan_id)).unwrap();
    // Preview and apply of an unchanged workspace agree on every target.
    let outcomes = |ts: &[rollback::TargetAnalysis]| {
        ts.iter().map(|t| (t.checkpoint_id.clone(), t.outcome.clone())).collect::<Vec<_>>()
    };
    prop_assert_eq!(outcomes(&preview.targets), outcomes(&result.targets));
    let after = tree(&env.ws.root);

    for (i, path) in PATHS.iter().enumerate() {
        let key = path.to_string();
        if last_writer.get(&i) == Some(&"person") && before.contains_key(&key) {
            prop_assert_eq!(after.get(&key), before.get(&key), "the person's last version of {} was changed", path);
        } else if last_writer.get(&i) == Some(&"person") {
            // The person left no bytes there (their deletion is indistinguishable from the
            // agent's own result). A file may only come back as it was before one of the
            // agent's mutations of it.
            if let Some(now) = after.get(&key) {
                let allowed = agent_pre.get(&i).is_some_and(|v| v.contains(&Some(now.0.clone())));
                prop_assert!(allowed, "{} came back as something never taken away by the agent", path);
            }
        } else if !person_touched.contains(&i) {
            prop_assert_eq!(after.get(&key).map(|f| &f.0), start.get(&key).map(|f| &f.0), "{} was not restored", path);
        } else if let Some((bytes, _)) = after.get(&key) {
            // Agent wrote last over something the person touched: what is there is left as
            // it was, or is a version the person wrote, or one the agent took away.
            let text = String::from_utf8_lossy(bytes);
            let taken_away = agent_pre.get(&i).is_some_and(|v| v.contains(&Some(bytes.clone())));
            prop_assert!(
                text.starts_with("person") || taken_away || before.get(&key).map(|f| &f.0) == Some(bytes),
                "{}: {}",
                path,
                text
            );
        }
    }
    if let Some(id) = result.rollback_checkpoint_id {
        let undo = rollback::apply(ctx, &Selection::Checkpoints(vec![id]), &BTreeMap::new(), None).unwrap();
        prop_assert_eq!(undo.result_type, rollback::ResultType::Full, "{:?}", undo.residual_conflicts);
        prop_assert_eq!(tree(&env.ws.root), before, "undoing the rollback must restore the exact prior tree");
    } else {
        prop_assert_eq!(after, before);
    }
    Ok(())
}

proptest! {
    #![proptest_config(crate::tests::common::proptest_config(64, 0x7475_726e_6261_636b))]

    #[test]
    fn rollback_never_touches_person_work_and_is_itself_undoable(
        initial in proptest::collection::vec(any::<bool>(), PATHS.len()),
        steps in proptest::collection::vec(step(), 1..12),
    ) {
        run_case(initial, steps)?;
    }
}
