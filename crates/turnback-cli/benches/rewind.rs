//! Benchmark: applying a rewind that deletes, then one that restores, many small files;
//! and a fork that writes them into a new directory.
//!
//! Run: `cargo bench -p turnback-cli --bench rewind` (`FILES`, default 10,000, in
//! directories of 100; `RUNS`, default 5, rounds; each row reports the median). A round:
//! one turn creates the files, `rewind --to` that turn `--apply` deletes them (row 1);
//! then a turn deletes them again after they were put back, and rewinding it restores them
//! (row 2); before the first rewind, `session fork --into` writes the turn's files into a
//! new directory (row 3). Every command is a fresh process, in the system's temporary
//! directory (`BENCH_DIR` moves it: not inside a repository that ignores it). Target
//! (DESIGN.md §5): each ≤ 3 s for 10,000 files.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn turnback(dir: &Path, work: &Path, args: &[&str]) -> f64 {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_turnback"))
        .args(args)
        .current_dir(work)
        .env("TURNBACK_HOME", dir.join("store"))
        .env("TURNBACK_KEY", KEY)
        .env("TURNBACK_SESSION", "bench")
        .env("HOME", dir)
        .env_remove("TURNBACK_KEY_FILE")
        .output()
        .expect("run turnback");
    let seconds = start.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "turnback {args:?} ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    seconds
}

/// The index of the session's newest turn.
fn latest_turn(dir: &Path, work: &Path) -> u64 {
    let out = Command::new(env!("CARGO_BIN_EXE_turnback"))
        .args(["--json", "turns"])
        .current_dir(work)
        .env("TURNBACK_HOME", dir.join("store"))
        .env("TURNBACK_KEY", KEY)
        .env("TURNBACK_SESSION", "bench")
        .env("HOME", dir)
        .output()
        .expect("run turnback");
    let turns: serde_json::Value = serde_json::from_slice(&out.stdout).expect("turns as JSON");
    turns["turns"].as_array().into_iter().flatten().filter_map(|t| t["index"].as_u64()).max().expect("a turn")
}

fn write_files(work: &Path, files: usize, round: usize) {
    for i in 0..files {
        let dir = work.join(format!("d{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("f{i:05}.txt")), format!("round {round}, file {i}\n").repeat(8)).unwrap();
    }
}

fn count_files(work: &Path) -> usize {
    std::fs::read_dir(work)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|d| std::fs::read_dir(d.path()).unwrap().count())
        .sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let files: usize = std::env::var("FILES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let runs: usize = std::env::var("RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    // Outside this repository: under it, `target/` is ignored, and a rewind never deletes
    // what the target snapshot could not see.
    let base = std::env::var_os("BENCH_DIR").map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let (mut deleting, mut restoring, mut forking) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..runs {
        let dir = tempfile::tempdir_in(&base).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("readme.txt"), "the tree before the turns\n").unwrap();
        let store = dir.path().join("store");
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(store.join("settings.toml"), "[snapshots]\nlater-max-files = 1000000\n").unwrap();
        let tb = |args: &[&str]| turnback(dir.path(), &work, args);
        tb(&["init"]);
        tb(&["turn", "begin", "--prompt", "create the files"]);
        write_files(&work, files, round);
        tb(&["turn", "end"]);
        // Canonical: `fork --into` refuses a path through a symlink (a temporary directory on macOS).
        let into = dir.path().canonicalize().unwrap().join("fork");
        forking.push(tb(&[
            "session",
            "fork",
            "--from",
            "bench",
            "--after-turn",
            "1",
            "--into",
            into.to_str().unwrap(),
        ]));
        assert_eq!(count_files(&into), files, "the fork wrote every file");
        deleting.push(tb(&["rewind", "--to", "1", "--apply"]));
        assert_eq!(count_files(&work), 0, "the rewind deleted every file");
        write_files(&work, files, round);
        tb(&["turn", "begin", "--prompt", "delete the files"]);
        for d in std::fs::read_dir(&work).unwrap().flatten().filter(|e| e.file_type().unwrap().is_dir()) {
            std::fs::remove_dir_all(d.path()).unwrap();
        }
        tb(&["turn", "end"]);
        let last = latest_turn(dir.path(), &work);
        restoring.push(tb(&["rewind", "--to", &last.to_string(), "--apply"]));
        assert_eq!(count_files(&work), files, "the rewind restored every file");
    }
    println!("rewind benchmark, {files} files in directories of 100, {runs} rounds (medians; fresh process each)");
    println!("{:<44} {:>10} {:>8}", "", "median", "target");
    println!("{:<44} {:>9.3}s {:>8}", "rewind apply deleting the files a turn made", median(deleting.clone()), "<= 3s");
    println!(
        "{:<44} {:>9.3}s {:>8}",
        "rewind apply restoring the files a turn deleted",
        median(restoring.clone()),
        "<= 3s"
    );
    println!("{:<44} {:>9.3}s {:>8}", "fork --into: the files a turn made, written", median(forking.clone()), "<= 3s");
    println!("all rounds, deleting: {deleting:.3?}");
    println!("all rounds, restoring: {restoring:.3?}");
    println!("all rounds, fork --into: {forking:.3?}");
}
