//! Property: a snapshot taken from the watcher's changes records exactly the tree a walk of
//! the whole workspace records, whatever happens to the files — creates, writes,
//! truncations, renames of files and whole directories, deletes, chmods, symlink changes,
//! ignore-file edits, nested repositories whose HEAD or refs move — and whatever happens
//! to the watcher: stopped, restarted, or flooded past its bound.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;

use crate::session::Session;
use crate::snapshot::{self, SnapshotKind, SnapshotRecord, TakeOptions};
use crate::tests::common::Env;
use crate::watch::{self, daemon};

const DIRS: [&str; 6] = ["", "d1", "d1/d2", "d3", "d3/d5/d6", "d1/node_modules"];
const NAMES: [&str; 5] = ["a.txt", "b.log", "c", "ignored.tmp", ".env"];

#[derive(Debug, Clone)]
enum Step {
    Write {
        dir: usize,
        name: usize,
        len: usize,
    },
    Truncate {
        dir: usize,
        name: usize,
    },
    Delete {
        dir: usize,
        name: usize,
    },
    RenameFile {
        from: (usize, usize),
        to: (usize, usize),
    },
    RenameDir {
        from: usize,
        to: usize,
    },
    DeleteDir {
        dir: usize,
    },
    Chmod {
        dir: usize,
        name: usize,
        exec: bool,
    },
    Symlink {
        dir: usize,
        name: usize,
        target: usize,
    },
    Ignore {
        dir: usize,
        pattern: usize,
    },
    NestedRepo {
        dir: usize,
        commit: u8,
        packed: bool,
    },
    NestedGone {
        dir: usize,
    },
    /// The watcher is stopped (and restarted `restart` steps later, or at once).
    StopWatcher {
        restart: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let d = 0..DIRS.len();
    let n = 0..NAMES.len();
    prop_oneof![
        6 => (d.clone(), n.clone(), 0..3000usize).prop_map(|(dir, name, len)| Step::Write { dir, name, len }),
        1 => (d.clone(), n.clone()).prop_map(|(dir, name)| Step::Truncate { dir, name }),
        2 => (d.clone(), n.clone()).prop_map(|(dir, name)| Step::Delete { dir, name }),
        2 => ((d.clone(), n.clone()), (d.clone(), n.clone())).prop_map(|(from, to)| Step::RenameFile { from, to }),
        2 => (1..DIRS.len(), 1..DIRS.len()).prop_map(|(from, to)| Step::RenameDir { from, to }),
        1 => (1..DIRS.len()).prop_map(|dir| Step::DeleteDir { dir }),
        1 => (d.clone(), n.clone(), any::<bool>()).prop_map(|(dir, name, exec)| Step::Chmod { dir, name, exec }),
        1 => (d.clone(), n.clone(), 0..3usize).prop_map(|(dir, name, target)| Step::Symlink { dir, name, target }),
        2 => (d.clone(), 0..6usize).prop_map(|(dir, pattern)| Step::Ignore { dir, pattern }),
        1 => (1..DIRS.len(), any::<u8>(), any::<bool>()).prop_map(|(dir, commit, packed)| Step::NestedRepo { dir, commit, packed }),
        1 => (1..DIRS.len()).prop_map(|dir| Step::NestedGone { dir }),
        1 => any::<bool>().prop_map(|restart| Step::StopWatcher { restart }),
    ]
}

fn p(root: &Path, dir: usize, name: usize) -> PathBuf {
    root.join(DIRS[dir]).join(NAMES[name])
}

fn apply(root: &Path, s: &Step) {
    // Errors are part of the game (renaming what does not exist): the tree is whatever
    // results, and both snapshots must agree on it.
    match s {
        Step::Write { dir, name, len } => {
            let _ = std::fs::create_dir_all(root.join(DIRS[*dir]));
            let _ = std::fs::write(p(root, *dir, *name), vec![b'x' + (*len % 7) as u8; *len]);
        }
        Step::Truncate { dir, name } => {
            let _ = std::fs::OpenOptions::new().write(true).open(p(root, *dir, *name)).and_then(|f| f.set_len(1));
        }
        Step::Delete { dir, name } => {
            let _ = std::fs::remove_file(p(root, *dir, *name));
        }
        Step::RenameFile { from, to } => {
            let _ = std::fs::create_dir_all(root.join(DIRS[to.0]));
            let _ = std::fs::rename(p(root, from.0, from.1), p(root, to.0, to.1));
        }
        Step::RenameDir { from, to } => {
            let (a, b) = (root.join(DIRS[*from]), root.join(DIRS[*to]));
            if !b.starts_with(&a) {
                let _ = std::fs::create_dir_all(b.parent().unwrap());
                if b.exists() {
                    let _ = std::fs::remove_dir_all(&b);
                }
                let _ = std::fs::rename(&a, &b);
            }
        }
        Step::DeleteDir { dir } => {
            let _ = std::fs::remove_dir_all(root.join(DIRS[*dir]));
        }
        Step::Chmod { dir, name, exec } => {
            let mode = if *exec { 0o755 } else { 0o644 };
            let _ = std::fs::set_permissions(p(root, *dir, *name), std::fs::Permissions::from_mode(mode));
        }
        Step::Symlink { dir, name, target } => {
            let path = p(root, *dir, *name);
            let _ = std::fs::create_dir_all(path.parent().unwrap());
            let _ = std::fs::remove_file(&path);
            let _ = std::os::unix::fs::symlink(["a.txt", "../d3", "nowhere"][*target], &path);
        }
        Step::Ignore { dir, pattern } => {
            let _ = std::fs::create_dir_all(root.join(DIRS[*dir]));
            let text = ["*.log\n", "c\n", "", "d2/\n!ignored.tmp\n", "d5\n", "*\n!*.txt\n!*/\n"][*pattern];
            let _ = std::fs::write(root.join(DIRS[*dir]).join(".gitignore"), text);
        }
        Step::NestedRepo { dir, commit, packed } => {
            let git = root.join(DIRS[*dir]).join(".git");
            let _ = std::fs::create_dir_all(git.join("refs/heads"));
            let _ = std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n");
            let id = format!("{commit:02x}").repeat(20);
            if *packed {
                let _ = std::fs::remove_file(git.join("refs/heads/main"));
                let _ = std::fs::write(git.join("packed-refs"), format!("{id} refs/heads/main\n"));
            } else {
                let _ = std::fs::write(git.join("refs/heads/main"), format!("{id}\n"));
            }
        }
        Step::NestedGone { dir } => {
            let _ = std::fs::remove_dir_all(root.join(DIRS[*dir]).join(".git"));
        }
        Step::StopWatcher { .. } => {}
    }
}

/// A watcher for `env`'s workspace, run on a thread of this process (the same code the
/// `turnback watch run` process runs).
struct Running {
    socket: PathBuf,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn start(env: &Env, max_dirty: usize) -> Running {
    let socket = watch::socket_path(env.store.dir(), &env.ws.id).unwrap();
    let cfg = daemon::Config {
        root: env.ws.root.clone(),
        socket: socket.clone(),
        lock: watch::lock_of(env.store.dir(), &env.ws.id),
        skip: env.store.protected_paths().to_vec(),
        idle: Duration::from_secs(600),
        max_dirty,
    };
    let thread = std::thread::spawn(move || daemon::run(&cfg).unwrap());
    for _ in 0..400 {
        if watch::status(&socket).map(|s| s.running).unwrap_or(false) {
            return Running { socket, thread: Some(thread) };
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the watcher did not start");
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = watch::stop(&self.socket);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn take(env: &Env, session: &Session, full: bool) -> SnapshotRecord {
    let opts = TakeOptions { kind: Some(SnapshotKind::AdHoc), full, ..TakeOptions::default() };
    let hooks = crate::session::turn::Hooks::new(&env.store);
    snapshot::take(&env.store, crate::session::turn::source(&env.ws, session), &opts, &hooks).unwrap()
}

/// Runs `steps`, comparing a watched snapshot with a full walk after each; returns how many
/// were taken from the watcher's changes.
fn run(steps: &[Step], max_dirty: usize) -> usize {
    let env = Env::new();
    let root = env.ws.root.clone();
    std::fs::write(root.join("a.txt"), "seed").unwrap();
    std::fs::create_dir_all(root.join("d1/d2")).unwrap();
    std::fs::write(root.join("d1/d2/c"), "deep").unwrap();
    let full_session = Session::resolve(&env.store, &env.ws, Some("full-walks")).unwrap();
    let mut watcher = Some(start(&env, max_dirty));
    let mut watched = 0;
    take(&env, &env.session, false);
    take(&env, &env.session, false);
    for (i, s) in steps.iter().enumerate() {
        if let Step::StopWatcher { restart } = s {
            watcher = None;
            if *restart {
                watcher = Some(start(&env, max_dirty));
            }
        } else if watcher.is_none() && i % 3 == 0 {
            watcher = Some(start(&env, max_dirty));
        }
        apply(&root, s);
        let a = take(&env, &env.session, false);
        let b = take(&env, &full_session, true);
        assert!(!b.watched);
        assert_eq!(a.root, b.root, "after {:?} (step {i}): watched={} {a:?}\nfull: {b:?}", s, a.watched);
        assert_eq!((a.files, a.bytes), (b.files, b.bytes), "totals after {s:?}");
        assert_eq!(a.nested_repos, b.nested_repos, "nested repositories after {s:?}");
        assert!(
            std::fs::read_dir(&root)
                .unwrap()
                .all(|e| { !e.unwrap().file_name().to_string_lossy().starts_with(".watch.turnback-") })
        );
        watched += usize::from(a.watched);
    }
    drop(watcher);
    watched
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn watched_snapshots_equal_full_walks(steps in proptest::collection::vec(step(), 1..20)) {
        run(&steps, 250_000);
    }

    #[test]
    fn a_flooded_watcher_falls_back_to_walks_that_agree(steps in proptest::collection::vec(step(), 1..10)) {
        run(&steps, 2);
    }
}

#[test]
fn most_snapshots_come_from_the_watcher_when_it_runs() {
    let steps: Vec<Step> = (0..8)
        .map(|i| Step::Write { dir: i % DIRS.len(), name: i % 3, len: 10 + i })
        .chain([Step::RenameDir { from: 1, to: 3 }, Step::Delete { dir: 0, name: 0 }])
        .collect();
    let watched = run(&steps, 250_000);
    assert!(watched >= steps.len() - 1, "only {watched} of {} snapshots were watched", steps.len());
}
