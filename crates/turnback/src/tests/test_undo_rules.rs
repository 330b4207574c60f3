//! The undo layer's decision rules, one named case each, through the public facade
//! [`Turnback`] (the property tests explore random mixes; these pin the table):
//! - rollback's three-way table for one path — pre-image, the checkpoint's post-image and
//!   what is there now: the agent's result is taken back, a file already back is a
//!   reported no-op, a person's later edit is a conflict left alone whatever is chosen;
//!   creates, deletes, a mode-only change, a person's chmod, a symlink swapped in;
//! - the plan-id rule of applies, for rollback and rewind (and an agent must name one);
//! - a rewind leaves a person's edits between and after turns alone unless forced;
//! - one session's rollback or rewind never overwrites another session's work;
//! - type changes (file, directory, symlink) across a rollback and a rewind;
//! - undoing a rollback or a rewind gives back the exact tree (bytes and modes), and
//!   leaves a file edited since alone.
//!
//! Every test states the exact outcome: the bytes and modes on disk, and what the
//! preview and the apply report, path by path.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::tests::common::KEY;
use crate::{
    Actor, BeginRequest, Choice, EffectKind, ErrorCode, KeyConfig, Mutation, Options, ResultType, RewindPlan,
    RollbackSelection as Selection, TargetAnalysis, TargetOutcome, Turnback,
};

/// A leaf or directory of the workspace: bytes and permission bits, a link's target.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Dir,
    File(String, u32),
    Link(PathBuf),
}

/// Every entry under the workspace root, by path.
type Tree = BTreeMap<String, Entry>;

fn file(text: &str, mode: u32) -> Entry {
    Entry::File(text.to_string(), mode)
}

/// A workspace and its store in one temp dir.
struct Ws {
    dir: tempfile::TempDir,
    root: PathBuf,
}

impl Ws {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        Ws { dir, root }
    }

    /// turnback on this workspace, for session `session`, as a person.
    fn open(&self, session: &str) -> Turnback {
        self.open_as(session, Actor::Person)
    }

    fn open_as(&self, session: &str, actor: Actor) -> Turnback {
        let options = Options {
            store: Some(self.dir.path().join("store")),
            session: Some(session.to_string()),
            keys: KeyConfig::with_key(KEY.to_string()),
            create: true,
            actor,
            ..Options::new(&self.root)
        };
        Turnback::open(&options).unwrap()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// A file put there by the setup or a person, with its directories and its mode.
    fn put(&self, rel: &str, text: &str, mode: u32) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        self.chmod(rel, mode);
    }

    /// A person's edit in place: the same file (inode), new bytes.
    fn edit(&self, rel: &str, text: &str) {
        std::fs::write(self.path(rel), text).unwrap();
    }

    fn chmod(&self, rel: &str, mode: u32) {
        std::fs::set_permissions(self.path(rel), std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn entry(&self, rel: &str) -> Option<Entry> {
        entry_at(&self.path(rel))
    }

    fn tree(&self) -> Tree {
        let mut out = BTreeMap::new();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let path = e.unwrap().path();
                let entry = entry_at(&path).unwrap();
                if entry == Entry::Dir {
                    stack.push(path.clone());
                }
                out.insert(path.strip_prefix(&self.root).unwrap().to_string_lossy().into_owned(), entry);
            }
        }
        out
    }
}

fn entry_at(p: &Path) -> Option<Entry> {
    let meta = std::fs::symlink_metadata(p).ok()?;
    Some(if meta.file_type().is_symlink() {
        Entry::Link(std::fs::read_link(p).unwrap())
    } else if meta.is_dir() {
        Entry::Dir
    } else {
        Entry::File(String::from_utf8(std::fs::read(p).unwrap()).unwrap(), meta.permissions().mode() & 0o7777)
    })
}

/// One prompt round of `tb`'s session around `work`.
fn turn(tb: &Turnback, prompt: &str, work: impl FnOnce()) {
    tb.begin_turn(&BeginRequest { prompt: Some(prompt.to_string()), ..Default::default() }, None).unwrap();
    work();
    tb.end_turn(None).unwrap();
}

/// The agent's checkpointed mutation; returns its checkpoint id.
fn agent(tb: &Turnback, m: Mutation) -> String {
    tb.mutate(m, false).unwrap().checkpoint.checkpoint_id
}

fn write(rel: &str, text: &str) -> Mutation {
    Mutation::Write { path: rel.into(), content: text.as_bytes().to_vec() }
}

fn create(rel: &str, text: &str) -> Mutation {
    Mutation::Create { path: rel.into(), content: text.as_bytes().to_vec() }
}

fn delete(rel: &str) -> Mutation {
    Mutation::Delete { path: rel.into() }
}

fn kebab(value: impl serde::Serialize) -> String {
    let v = serde_json::to_value(value).unwrap();
    v.as_str().map_or_else(|| v["kind"].as_str().unwrap().to_string(), str::to_string)
}

/// Each target of a rollback as `path: decision` — the inverse for one to take back,
/// `no-op` for one already back, else the category and its code.
fn decisions(targets: &[TargetAnalysis]) -> Vec<String> {
    let decision = |o: &TargetOutcome| match o {
        TargetOutcome::AppliedEligible { no_op: true, .. } => "no-op".to_string(),
        TargetOutcome::AppliedEligible { inverse_operation, .. } => kebab(inverse_operation),
        TargetOutcome::Conflict { reason_code, .. } => format!("conflict {}", kebab(reason_code)),
        TargetOutcome::Mismatch { reason_code, .. } => format!("mismatch {reason_code}"),
        other => other.category().to_string(),
    };
    targets.iter().map(|t| format!("{}: {}", t.path.display(), decision(&t.outcome))).collect()
}

/// Each path of a rewind plan as `path: action` and, when left alone, its reason, in
/// path order.
fn actions(plan: &RewindPlan) -> Vec<String> {
    let mut paths: Vec<_> = plan.paths.iter().collect();
    paths.sort_by(|a, b| a.path.cmp(&b.path));
    paths
        .iter()
        .map(|p| match p.reason {
            Some(reason) => format!("{}: {} {}", p.path, kebab(p.action), kebab(reason)),
            None => format!("{}: {}", p.path, kebab(p.action)),
        })
        .collect()
}

fn rollback_turn(tb: &Turnback, t: u64) -> crate::RollbackResult {
    let preview = tb.rollback_preview(&Selection::Turn(t), &[]).unwrap();
    tb.rollback_apply(&Selection::Turn(t), &[], Some(&preview.plan_id)).unwrap()
}

fn rewind_to(tb: &Turnback, t: u64) -> crate::Rewound {
    let preview = tb.rewind_preview(t, &[]).unwrap();
    tb.rewind_apply(t, &[], Some(&preview.plan_id)).unwrap()
}

/// Rolls back the checkpoint an undo recorded: the undo's undo.
fn undo(tb: &Turnback, checkpoint: Option<String>) -> crate::RollbackResult {
    let selection = Selection::Checkpoints(vec![checkpoint.expect("the undo recorded a checkpoint")]);
    tb.rollback_apply(&selection, &[], None).unwrap()
}

fn applied(r: &crate::RollbackResult) -> Vec<String> {
    r.applied_paths.iter().map(|p| p.display()).collect()
}

// Rollback's three-way table for one path.

#[test]
fn rollback_restores_the_original_when_the_file_is_still_the_agents_result() {
    let ws = Ws::new();
    ws.put("a.txt", "original\n", 0o640);
    let tb = ws.open("s");
    turn(&tb, "edit", || drop(agent(&tb, write("a.txt", "agent\n"))));
    let preview = tb.rollback_preview(&Selection::Turn(1), &[]).unwrap();
    assert_eq!(decisions(&preview.targets), ["a.txt: restore-pre-image"]);
    let done = tb.rollback_apply(&Selection::Turn(1), &[], Some(&preview.plan_id)).unwrap();
    assert_eq!((done.result_type, applied(&done)), (ResultType::Full, vec!["a.txt".to_string()]));
    assert_eq!(decisions(&done.targets), decisions(&preview.targets), "the apply did what the preview said");
    assert_eq!(ws.entry("a.txt"), Some(file("original\n", 0o640)));
}

#[test]
fn rollback_of_a_file_already_back_at_its_original_writes_nothing_and_says_so() {
    let ws = Ws::new();
    ws.put("a.txt", "original\n", 0o644);
    let tb = ws.open("s");
    turn(&tb, "edit", || drop(agent(&tb, write("a.txt", "agent\n"))));
    ws.edit("a.txt", "original\n");
    let done = rollback_turn(&tb, 1);
    assert_eq!(decisions(&done.targets), ["a.txt: no-op"]);
    assert_eq!(done.result_type, ResultType::Full);
    assert!(done.applied_paths.is_empty() && done.residual_conflicts.is_empty());
    assert_eq!(done.rollback_checkpoint_id, None, "an undo that writes nothing records no checkpoint");
    assert_eq!(ws.entry("a.txt"), Some(file("original\n", 0o644)));
}

#[test]
fn rollback_leaves_a_persons_later_edit_alone_as_a_conflict_whatever_is_chosen() {
    let ws = Ws::new();
    ws.put("a.txt", "original\n", 0o644);
    let tb = ws.open("s");
    turn(&tb, "edit", || drop(agent(&tb, write("a.txt", "agent\n"))));
    ws.edit("a.txt", "person\n");
    let preview = tb.rollback_preview(&Selection::Turn(1), &[]).unwrap();
    assert_eq!(decisions(&preview.targets), ["a.txt: conflict content-conflict"]);
    assert_eq!(preview.result_type, ResultType::Blocked);
    // There is no overwrite: the safe choices are skip, a patch or a merge beside the
    // file. A choice made after the preview does not change the plan id.
    let choice = [(PathBuf::from("a.txt"), Choice::Patch)];
    let done = tb.rollback_apply(&Selection::Turn(1), &choice, Some(&preview.plan_id)).unwrap();
    assert_eq!(done.result_type, ResultType::Blocked);
    assert_eq!((applied(&done), done.rollback_checkpoint_id), (Vec::<String>::new(), None));
    let residual: Vec<_> = done.residual_conflicts.iter().map(|r| (r.path.display(), r.safe_choices.len())).collect();
    assert_eq!(residual, [("a.txt".to_string(), 3)]);
    assert_eq!(ws.entry("a.txt"), Some(file("person\n", 0o644)), "the person's edit is never overwritten");
    assert_eq!(done.choice_files.iter().map(|c| c.file.display()).collect::<Vec<_>>(), ["a.txt.turnback.patch"]);
    let Some(Entry::File(patch, 0o600)) = ws.entry("a.txt.turnback.patch") else { panic!("an owner-only patch") };
    assert!(patch.contains("-person\n") && patch.contains("+original\n"), "{patch}");
}

#[test]
fn rollback_removes_a_file_the_agent_created_and_the_directories_it_made() {
    let ws = Ws::new();
    let tb = ws.open("s");
    turn(&tb, "create", || drop(agent(&tb, create("new/deep/n.txt", "agent\n"))));
    let done = rollback_turn(&tb, 1);
    assert_eq!(decisions(&done.targets), ["new/deep/n.txt: delete-file"]);
    assert_eq!(done.result_type, ResultType::Full);
    assert_eq!(ws.tree(), Tree::new(), "the file and the directories its create made are gone");
}

#[test]
fn rollback_keeps_a_file_the_agent_created_and_a_person_changed() {
    let ws = Ws::new();
    let tb = ws.open("s");
    turn(&tb, "create", || drop(agent(&tb, create("n.txt", "agent\n"))));
    ws.edit("n.txt", "person\n");
    let done = rollback_turn(&tb, 1);
    assert_eq!(decisions(&done.targets), ["n.txt: conflict content-conflict"]);
    assert_eq!(done.result_type, ResultType::Blocked);
    assert_eq!(ws.entry("n.txt"), Some(file("person\n", 0o644)));
}

#[test]
fn rollback_recreates_a_file_the_agent_deleted_with_its_bytes_and_mode() {
    let ws = Ws::new();
    ws.put("keep/old.txt", "old\n", 0o600);
    let tb = ws.open("s");
    turn(&tb, "delete", || drop(agent(&tb, delete("keep/old.txt"))));
    assert_eq!(ws.entry("keep/old.txt"), None);
    let done = rollback_turn(&tb, 1);
    assert_eq!(decisions(&done.targets), ["keep/old.txt: restore-from-artifact"]);
    assert_eq!(done.result_type, ResultType::Full);
    assert_eq!(ws.entry("keep/old.txt"), Some(file("old\n", 0o600)));
}

#[test]
fn rollback_keeps_a_file_a_person_made_where_the_agent_deleted_one() {
    let ws = Ws::new();
    ws.put("old.txt", "old\n", 0o644);
    let tb = ws.open("s");
    turn(&tb, "delete", || drop(agent(&tb, delete("old.txt"))));
    ws.put("old.txt", "person\n", 0o644);
    let done = rollback_turn(&tb, 1);
    assert_eq!(decisions(&done.targets), ["old.txt: conflict target-recreated"]);
    assert_eq!(ws.entry("old.txt"), Some(file("person\n", 0o644)));
}

#[test]
fn rollback_takes_back_a_mode_only_change() {
    let ws = Ws::new();
    ws.put("run.sh", "echo hi\n", 0o644);
    let tb = ws.open("s");
    turn(&tb, "make it runnable", || {
        let staged = tb.stage(&[PathBuf::from("run.sh")], Some(EffectKind::Edit), false).unwrap();
        ws.chmod("run.sh", 0o755);
        tb.commit(&staged.operation_id, false).unwrap();
    });
    let done = rollback_turn(&tb, 1);
    // The bytes are the original's already; the mode the mutation changed is written back.
    assert_eq!(decisions(&done.targets), ["run.sh: restore-pre-image"]);
    assert_eq!((done.result_type, applied(&done)), (ResultType::Full, vec!["run.sh".to_string()]));
    assert_eq!(ws.entry("run.sh"), Some(file("echo hi\n", 0o644)));
}

#[test]
fn rollback_keeps_a_persons_chmod_made_after_the_agent() {
    let ws = Ws::new();
    ws.put("a.txt", "original\n", 0o644);
    let tb = ws.open("s");
    turn(&tb, "edit", || drop(agent(&tb, write("a.txt", "agent\n"))));
    ws.chmod("a.txt", 0o600);
    let done = rollback_turn(&tb, 1);
    assert_eq!(decisions(&done.targets), ["a.txt: restore-pre-image"]);
    assert_eq!(ws.entry("a.txt"), Some(file("original\n", 0o600)), "the bytes go back, the person's mode stays");
}

#[test]
fn rollback_never_writes_through_a_symlink_put_where_the_agents_file_was() {
    let ws = Ws::new();
    ws.put("a.txt", "original\n", 0o644);
    ws.put("elsewhere.txt", "elsewhere\n", 0o644);
    let tb = ws.open("s");
    turn(&tb, "edit", || drop(agent(&tb, write("a.txt", "agent\n"))));
    std::fs::remove_file(ws.path("a.txt")).unwrap();
    std::os::unix::fs::symlink("elsewhere.txt", ws.path("a.txt")).unwrap();
    let done = rollback_turn(&tb, 1);
    assert_eq!(decisions(&done.targets), ["a.txt: conflict behind-symlink"]);
    assert_eq!((done.result_type, done.rollback_checkpoint_id), (ResultType::Blocked, None));
    assert_eq!(ws.entry("a.txt"), Some(Entry::Link("elsewhere.txt".into())));
    assert_eq!(ws.entry("elsewhere.txt"), Some(file("elsewhere\n", 0o644)));
}

// The plan-id rule.

#[test]
fn a_rollback_with_a_stale_plan_id_is_refused_and_a_fresh_one_applies() {
    let ws = Ws::new();
    ws.put("a.txt", "a0\n", 0o644);
    ws.put("b.txt", "b0\n", 0o644);
    let tb = ws.open("s");
    turn(&tb, "edit", || {
        agent(&tb, write("a.txt", "a1\n"));
        agent(&tb, write("b.txt", "b1\n"));
    });
    let stale = tb.rollback_preview(&Selection::Turn(1), &[]).unwrap().plan_id;
    // The plan covers the selected checkpoints and what is at their targets, nothing else.
    ws.put("notes.txt", "unrelated\n", 0o644);
    assert_eq!(tb.rollback_preview(&Selection::Turn(1), &[]).unwrap().plan_id, stale);
    ws.edit("b.txt", "person\n");
    let (tree, checkpoints) = (ws.tree(), tb.checkpoints(None, true).unwrap().checkpoints.len());
    let err = tb.rollback_apply(&Selection::Turn(1), &[], Some(&stale)).unwrap_err();
    assert_eq!(err.code, ErrorCode::Conflict);
    let details = err.details.expect("the plan ids");
    assert_eq!(details["expectedPlanId"], stale.as_str());
    assert_ne!(details["currentPlanId"], stale.as_str());
    assert_eq!(ws.tree(), tree, "a refused apply changes nothing");
    assert_eq!(tb.checkpoints(None, true).unwrap().checkpoints.len(), checkpoints, "and records nothing");

    let fresh = tb.rollback_preview(&Selection::Turn(1), &[]).unwrap();
    assert_eq!(fresh.plan_id, details["currentPlanId"].as_str().unwrap());
    let done = tb.rollback_apply(&Selection::Turn(1), &[], Some(&fresh.plan_id)).unwrap();
    assert_eq!(decisions(&done.targets), ["a.txt: restore-pre-image", "b.txt: conflict content-conflict"]);
    assert_eq!(done.result_type, ResultType::Partial);
    assert_eq!(ws.entry("a.txt"), Some(file("a0\n", 0o644)));
    assert_eq!(ws.entry("b.txt"), Some(file("person\n", 0o644)));
}

#[test]
fn a_rewind_with_a_stale_plan_id_is_refused_and_a_fresh_one_applies() {
    let ws = Ws::new();
    ws.put("a.txt", "a0\n", 0o644);
    let tb = ws.open("s");
    turn(&tb, "edit", || drop(agent(&tb, write("a.txt", "a1\n"))));
    let stale = tb.rewind_preview(1, &[]).unwrap().plan_id;
    assert_eq!(tb.rewind_preview(1, &[]).unwrap().plan_id, stale, "an unchanged workspace, the same plan");
    // A rewind's plan covers the whole workspace now: any change moves it.
    ws.put("notes.txt", "unrelated\n", 0o644);
    let tree = ws.tree();
    let err = tb.rewind_apply(1, &[], Some(&stale)).unwrap_err();
    assert_eq!(err.code, ErrorCode::Conflict);
    assert_eq!(err.details.expect("the plan ids")["expectedPlanId"], stale.as_str());
    assert_eq!(ws.tree(), tree, "a refused apply changes nothing");

    let fresh = tb.rewind_preview(1, &[]).unwrap();
    assert_ne!(fresh.plan_id, stale);
    let done = tb.rewind_apply(1, &[], Some(&fresh.plan_id)).unwrap();
    assert_eq!(actions(&done.plan), ["a.txt: restore", "notes.txt: leave-alone hand-edit-after-last-turn"]);
    assert_eq!(done.plan.result_type, ResultType::Partial);
    assert_eq!(ws.entry("a.txt"), Some(file("a0\n", 0o644)));
    assert_eq!(ws.entry("notes.txt"), Some(file("unrelated\n", 0o644)));
}

#[test]
fn an_agent_must_name_the_plan_it_previewed() {
    let ws = Ws::new();
    ws.put("a.txt", "a0\n", 0o644);
    let tb = ws.open("s");
    turn(&tb, "edit", || drop(agent(&tb, write("a.txt", "a1\n"))));
    let for_a_person = ws.open_as("s", Actor::Agent);
    let err = for_a_person.rollback_apply(&Selection::Turn(1), &[], None).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    assert_eq!(for_a_person.rewind_apply(1, &[], None).unwrap_err().code, ErrorCode::InvalidArgument);
    assert_eq!(ws.entry("a.txt"), Some(file("a1\n", 0o644)));
}

// A person's edits between turns.

#[test]
fn a_rewind_leaves_a_persons_edits_between_and_after_turns_alone_and_restores_the_agents_files() {
    let ws = Ws::new();
    for f in ["a", "b", "c", "d"] {
        ws.put(&format!("{f}.txt"), &format!("{f}0\n"), 0o644);
    }
    let tb = ws.open("s");
    turn(&tb, "one", || {
        agent(&tb, write("a.txt", "a1\n"));
        agent(&tb, write("b.txt", "b1\n"));
    });
    ws.edit("b.txt", "person b\n");
    turn(&tb, "two", || {
        agent(&tb, write("c.txt", "c2\n"));
        agent(&tb, create("n.txt", "n2\n"));
    });
    ws.edit("d.txt", "person d\n");
    let done = rewind_to(&tb, 1);
    assert_eq!(
        actions(&done.plan),
        [
            "a.txt: restore",
            "b.txt: leave-alone hand-edit-between-turns",
            "c.txt: restore",
            "d.txt: leave-alone hand-edit-after-last-turn",
            "n.txt: delete",
        ]
    );
    assert_eq!(done.plan.result_type, ResultType::Partial);
    let expected: Tree = [
        ("a.txt", file("a0\n", 0o644)),
        ("b.txt", file("person b\n", 0o644)),
        ("c.txt", file("c0\n", 0o644)),
        ("d.txt", file("person d\n", 0o644)),
    ]
    .into_iter()
    .map(|(p, e)| (p.to_string(), e))
    .collect();
    assert_eq!(ws.tree(), expected);
}

#[test]
fn a_forced_rewind_overwrites_only_the_hand_edit_it_names() {
    let ws = Ws::new();
    ws.put("a.txt", "a0\n", 0o644);
    ws.put("b.txt", "b0\n", 0o644);
    let tb = ws.open("s");
    turn(&tb, "one", || {
        agent(&tb, write("a.txt", "a1\n"));
        agent(&tb, write("b.txt", "b1\n"));
    });
    ws.edit("a.txt", "person a\n");
    ws.edit("b.txt", "person b\n");
    let force = [PathBuf::from("a.txt")];
    let preview = tb.rewind_preview(1, &force).unwrap();
    let done = tb.rewind_apply(1, &force, Some(&preview.plan_id)).unwrap();
    assert_eq!(actions(&done.plan), ["a.txt: restore", "b.txt: leave-alone hand-edit-after-last-turn"]);
    assert_eq!(done.plan.paths.iter().map(|p| p.forced).collect::<Vec<_>>(), [true, false]);
    assert_eq!(ws.entry("a.txt"), Some(file("a0\n", 0o644)));
    assert_eq!(ws.entry("b.txt"), Some(file("person b\n", 0o644)));
}

// Other sessions.

#[test]
fn a_rollback_in_one_session_never_overwrites_another_sessions_later_write() {
    let ws = Ws::new();
    ws.put("shared.txt", "original\n", 0o644);
    ws.put("mine.txt", "mine0\n", 0o644);
    let (a, b) = (ws.open("a"), ws.open("b"));
    turn(&a, "a's turn", || {
        agent(&a, write("shared.txt", "from a\n"));
        agent(&a, write("mine.txt", "mine1\n"));
    });
    turn(&b, "b's turn", || drop(agent(&b, write("shared.txt", "from b\n"))));
    let done = rollback_turn(&a, 1);
    assert_eq!(decisions(&done.targets), ["mine.txt: restore-pre-image", "shared.txt: conflict target-recreated"]);
    assert_eq!(done.result_type, ResultType::Partial);
    assert_eq!(ws.entry("shared.txt"), Some(file("from b\n", 0o644)));
    assert_eq!(ws.entry("mine.txt"), Some(file("mine0\n", 0o644)));
}

#[test]
fn a_rewind_in_one_session_leaves_what_another_session_changed_during_its_turn_alone() {
    let ws = Ws::new();
    ws.put("shared.txt", "original\n", 0o644);
    ws.put("mine.txt", "mine0\n", 0o644);
    let (a, b) = (ws.open("a"), ws.open("b"));
    turn(&a, "a's turn", || {
        // Session b's turn runs inside a's: one checkpointed write, one its formatter made.
        turn(&b, "b's turn", || {
            agent(&b, write("shared.txt", "from b\n"));
            ws.put("formatted.txt", "formatted by b\n", 0o644);
        });
        agent(&a, write("mine.txt", "mine1\n"));
    });
    let done = rewind_to(&a, 1);
    assert_eq!(
        actions(&done.plan),
        ["formatted.txt: leave-alone other-session", "mine.txt: restore", "shared.txt: leave-alone other-session"]
    );
    assert_eq!(ws.entry("shared.txt"), Some(file("from b\n", 0o644)));
    assert_eq!(ws.entry("formatted.txt"), Some(file("formatted by b\n", 0o644)));
    assert_eq!(ws.entry("mine.txt"), Some(file("mine0\n", 0o644)));
}

#[test]
fn a_rewind_in_one_session_leaves_another_sessions_later_write_alone() {
    let ws = Ws::new();
    ws.put("shared.txt", "original\n", 0o644);
    let (a, b) = (ws.open("a"), ws.open("b"));
    turn(&a, "a's turn", || drop(agent(&a, write("shared.txt", "from a\n"))));
    turn(&b, "b's turn", || drop(agent(&b, write("shared.txt", "from b\n"))));
    let done = rewind_to(&a, 1);
    let left: Vec<_> = done.plan.paths.iter().map(|p| (p.path.as_str(), kebab(p.action))).collect();
    assert_eq!(left, [("shared.txt", "leave-alone".to_string())]);
    assert_eq!(done.plan.result_type, ResultType::Blocked);
    assert_eq!(ws.entry("shared.txt"), Some(file("from b\n", 0o644)));
}

/// docs/guarantees.md: a rewind leaves alone "another session's work since turn T began
/// (`other-session`): what its checkpoints wrote". Session b's checkpointed write after
/// a's last turn is named a person's `hand-edit-after-last-turn` instead: the chain check
/// (which cannot tell writers apart) decides first, and the other-session paths are
/// consulted only when it finds nothing. Left alone all the same (the test above).
#[test]
fn a_rewind_names_another_sessions_later_write_as_other_session_work() {
    let ws = Ws::new();
    ws.put("shared.txt", "original\n", 0o644);
    let (a, b) = (ws.open("a"), ws.open("b"));
    turn(&a, "a's turn", || drop(agent(&a, write("shared.txt", "from a\n"))));
    turn(&b, "b's turn", || drop(agent(&b, write("shared.txt", "from b\n"))));
    assert_eq!(actions(&a.rewind_preview(1, &[]).unwrap()), ["shared.txt: leave-alone other-session"]);
}

// Type changes.

#[test]
fn a_rollback_takes_back_a_file_turned_directory_and_a_directory_turned_file_and_its_undo_gives_them_again() {
    let ws = Ws::new();
    ws.put("x", "x was a file\n", 0o640);
    ws.put("d/only.txt", "d was a directory\n", 0o600);
    let start = ws.tree();
    let tb = ws.open("s");
    turn(&tb, "restructure", || {
        agent(&tb, delete("x"));
        agent(&tb, create("x/y.txt", "now a directory\n"));
        agent(&tb, delete("d/only.txt"));
        std::fs::remove_dir(ws.path("d")).unwrap();
        agent(&tb, create("d", "now a file\n"));
    });
    let end = ws.tree();
    let done = rollback_turn(&tb, 1);
    assert_eq!(
        decisions(&done.targets),
        ["d: delete-file", "d/only.txt: restore-from-artifact", "x: restore-from-artifact", "x/y.txt: delete-file"]
    );
    assert_eq!(done.result_type, ResultType::Full);
    assert_eq!(ws.tree(), start);
    let undone = undo(&tb, done.rollback_checkpoint_id);
    assert_eq!(undone.result_type, ResultType::Full, "{:?}", undone.residual_conflicts);
    assert_eq!(ws.tree(), end);
}

#[test]
fn a_rollback_leaves_a_directory_a_person_put_where_the_agents_file_was() {
    let ws = Ws::new();
    ws.put("a.txt", "original\n", 0o644);
    let tb = ws.open("s");
    turn(&tb, "edit", || drop(agent(&tb, write("a.txt", "agent\n"))));
    std::fs::remove_file(ws.path("a.txt")).unwrap();
    ws.put("a.txt/inside", "person\n", 0o644);
    let done = rollback_turn(&tb, 1);
    assert_eq!(decisions(&done.targets), ["a.txt: conflict target-recreated"]);
    assert_eq!(done.result_type, ResultType::Blocked);
    assert_eq!((ws.entry("a.txt"), ws.entry("a.txt/inside")), (Some(Entry::Dir), Some(file("person\n", 0o644))));
}

#[test]
fn a_rewind_brings_back_files_and_directories_across_type_changes_and_leaves_symlinks_to_restore_by_hand() {
    let ws = Ws::new();
    ws.put("x", "x was a file\n", 0o640);
    ws.put("d/e.txt", "d was a directory\n", 0o600);
    ws.put("s", "s was a file\n", 0o644);
    let tb = ws.open("s");
    turn(&tb, "restructure", || {
        std::fs::remove_file(ws.path("x")).unwrap();
        ws.put("x/y.txt", "now a directory\n", 0o644);
        std::fs::remove_dir_all(ws.path("d")).unwrap();
        ws.put("d", "now a file\n", 0o755);
        std::fs::remove_file(ws.path("s")).unwrap();
        std::os::unix::fs::symlink("x/y.txt", ws.path("s")).unwrap();
    });
    let end = ws.tree();
    let done = rewind_to(&tb, 1);
    assert_eq!(
        actions(&done.plan),
        ["d: delete", "d/e.txt: restore", "s: leave-alone symlink", "x: restore", "x/y.txt: delete"]
    );
    let mut expected = Tree::new();
    expected.insert("x".to_string(), file("x was a file\n", 0o640));
    expected.insert("d".to_string(), Entry::Dir);
    expected.insert("d/e.txt".to_string(), file("d was a directory\n", 0o600));
    expected.insert("s".to_string(), Entry::Link("x/y.txt".into()));
    assert_eq!(ws.tree(), expected);
    let undone = undo(&tb, done.checkpoint_id);
    assert_eq!(undone.result_type, ResultType::Full, "{:?}", undone.residual_conflicts);
    assert_eq!(ws.tree(), end);
}

// Undoing an undo.

/// The setup of the undo tests: files edited, created (in a new directory), deleted and
/// chmodded by one turn. Returns the tree before the turn and after it.
fn a_turn_of_every_kind(ws: &Ws, tb: &Turnback) -> (Tree, Tree) {
    ws.put("a.txt", "a0\n", 0o640);
    ws.put("c.txt", "c0\n", 0o600);
    ws.put("run.sh", "echo\n", 0o644);
    let start = ws.tree();
    turn(tb, "every kind", || {
        agent(tb, write("a.txt", "a1\n"));
        agent(tb, create("new/b.txt", "b1\n"));
        agent(tb, delete("c.txt"));
        let staged = tb.stage(&[PathBuf::from("run.sh")], Some(EffectKind::Edit), false).unwrap();
        ws.chmod("run.sh", 0o755);
        tb.commit(&staged.operation_id, false).unwrap();
    });
    (start, ws.tree())
}

#[test]
fn undoing_a_rollback_gives_back_the_exact_tree_it_replaced() {
    let ws = Ws::new();
    let tb = ws.open("s");
    let (start, end) = a_turn_of_every_kind(&ws, &tb);
    let done = rollback_turn(&tb, 1);
    assert_eq!(done.result_type, ResultType::Full);
    assert_eq!(ws.tree(), start);
    let undone = undo(&tb, done.rollback_checkpoint_id);
    assert_eq!(undone.result_type, ResultType::Full, "{:?}", undone.residual_conflicts);
    assert_eq!(ws.tree(), end, "bytes, modes and directories as before the rollback");
}

#[test]
fn undoing_a_rollback_leaves_a_file_edited_since_alone() {
    let ws = Ws::new();
    let tb = ws.open("s");
    let (_, end) = a_turn_of_every_kind(&ws, &tb);
    let done = rollback_turn(&tb, 1);
    undo_after_a_persons_edit(&ws, &tb, done.rollback_checkpoint_id, end);
}

#[test]
fn undoing_a_rewind_gives_back_the_exact_tree_it_replaced() {
    let ws = Ws::new();
    let tb = ws.open("s");
    let (start, end) = a_turn_of_every_kind(&ws, &tb);
    let done = rewind_to(&tb, 1);
    assert_eq!(done.plan.result_type, ResultType::Full);
    let mut emptied = start;
    emptied.insert("new".to_string(), Entry::Dir); // a rewind leaves the directories it empties
    assert_eq!(ws.tree(), emptied);
    let undone = undo(&tb, done.checkpoint_id);
    assert_eq!(undone.result_type, ResultType::Full, "{:?}", undone.residual_conflicts);
    assert_eq!(ws.tree(), end, "bytes, modes and directories as before the rewind");
}

#[test]
fn undoing_a_rewind_leaves_a_file_edited_since_alone() {
    let ws = Ws::new();
    let tb = ws.open("s");
    let (_, end) = a_turn_of_every_kind(&ws, &tb);
    let done = rewind_to(&tb, 1);
    undo_after_a_persons_edit(&ws, &tb, done.checkpoint_id, end);
}

/// A person edits `a.txt` after an undo's checkpoint was made; undoing it then leaves that
/// edit alone as a conflict and gives back everything else of `end`.
fn undo_after_a_persons_edit(ws: &Ws, tb: &Turnback, checkpoint: Option<String>, end: Tree) {
    ws.edit("a.txt", "person\n");
    let undone = undo(tb, checkpoint);
    assert_eq!(
        decisions(&undone.targets),
        [
            "a.txt: conflict content-conflict",
            "c.txt: delete-file",
            "new/b.txt: restore-from-artifact",
            "run.sh: restore-pre-image"
        ]
    );
    assert_eq!(undone.result_type, ResultType::Partial);
    let mut expected = end;
    expected.insert("a.txt".to_string(), file("person\n", 0o640));
    assert_eq!(ws.tree(), expected, "everything else as before the undone change");
}
