//! Benchmark: workspace snapshots, turnback against the shadow-git approach of today's
//! agents (`../shared/bench/shadow-git-snapshot.sh`), side by side in one run.
//!
//! Run: `cargo bench -p turnback-cli --bench snapshot` (a generated tree of `FILES`
//! small files, default 100,000), or `BENCH_TREE=/path/to/linux-source-6.1 cargo bench …`
//! for a real tree (`../shared/bench/get-linux-tree.sh DEST` fetches the Linux one).
//! `RUNS` (default 5) sets the repetitions of the no-change and one-change rows; each
//! row reports the median. Every run is a fresh process; peak memory is its max RSS.
//! Targets (DESIGN.md §5): first ≤ 1/5 of shadow git, no-change and one change ≤ 1/2,
//! store ≤ the repacked shadow repository, peak memory ≤ 256 MiB, and a rewind preview of
//! the last turn ≤ 1 s (measured on turns that each change one file).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

struct Run {
    seconds: f64,
    max_rss_kib: u64,
}

fn timed(mut cmd: Command, rss_file: &Path) -> Run {
    let start = Instant::now();
    let out = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).output().expect("run");
    let seconds = start.elapsed().as_secs_f64();
    assert!(out.status.success(), "{:?}: {}", cmd, String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("skipped:"), "the snapshot was skipped: {stdout}");
    let max_rss_kib = std::fs::read_to_string(rss_file).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    Run { seconds, max_rss_kib }
}

fn with_time(rss_file: &Path, program: &str) -> Command {
    let mut cmd = Command::new("/usr/bin/time");
    cmd.arg("-f").arg("%M").arg("-o").arg(rss_file).arg(program);
    cmd
}

fn turnback(dir: &Path, work: &Path) -> Run {
    let rss = dir.join("rss-turnback");
    let mut cmd = with_time(&rss, env!("CARGO_BIN_EXE_turnback"));
    cmd.arg("snapshot")
        .current_dir(work)
        .env("TURNBACK_HOME", dir.join("store"))
        .env("TURNBACK_KEY", KEY)
        .env("TURNBACK_SESSION", "bench")
        .env("HOME", dir)
        .env_remove("TURNBACK_KEY_FILE");
    timed(cmd, &rss)
}

fn shadow_git(dir: &Path, work: &Path, script: &Path) -> Run {
    let rss = dir.join("rss-git");
    let mut cmd = with_time(&rss, "bash");
    cmd.arg(script).arg(dir.join("shadow.git")).arg(work);
    timed(cmd, &rss)
}

fn du(path: &Path) -> u64 {
    let out = Command::new("du").arg("-sb").arg(path).output().expect("du");
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn generate(root: &Path, files: usize) {
    let words = ["alpha", "beta", "gamma", "delta", "kernel", "driver", "struct", "return", "static", "void"];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..files {
        let dir = root.join(format!("d{:03}/s{:02}", i / 1000, (i / 100) % 10));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        let len = 200 + (next() % 2800) as usize;
        let mut text = String::with_capacity(len + 16);
        while text.len() < len {
            text.push_str(words[(next() % words.len() as u64) as usize]);
            text.push(if next() % 8 == 0 { '\n' } else { ' ' });
        }
        std::fs::write(dir.join(format!("f{i:06}.c")), text).unwrap();
    }
}

/// Reads every regular file under `dir` once (never following symlinks).
fn warm(dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => {
                    let _ = std::io::copy(&mut std::fs::File::open(e.path()).unwrap(), &mut std::io::sink());
                }
                _ => {}
            }
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let runs: usize = std::env::var("RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let script = std::env::var_os("SHADOW_GIT_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bench/shadow-git-snapshot.sh"));
    assert!(script.exists(), "shadow-git script not found at {} (set SHADOW_GIT_SCRIPT)", script.display());
    let base = std::env::var_os("BENCH_DIR").map(PathBuf::from).unwrap_or_else(|| env!("CARGO_TARGET_TMPDIR").into());
    let tb_dir = tempfile::tempdir_in(&base).unwrap();
    let git_dir = tempfile::tempdir_in(&base).unwrap();
    let (work, label) = match std::env::var_os("BENCH_TREE") {
        Some(tree) => (PathBuf::from(&tree), format!("tree {}", Path::new(&tree).display())),
        None => {
            let files: usize = std::env::var("FILES").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
            let work = tb_dir.path().join("work");
            generate(&work, files);
            (work, format!("generated tree of {files} files"))
        }
    };
    // The real tree is over the default first-snapshot limit (1 GiB): raise it, as a user
    // snapshotting such a tree would (the limits are settings).
    let store = tb_dir.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(
        store.join("settings.toml"),
        "[snapshots]\nfirst-max-size = \"8 GiB\"\nfirst-max-files = 1000000\nlater-max-size = \"1 GiB\"\nlater-max-files = 200000\n",
    )
    .unwrap();
    // Warm the page cache once (metadata and contents) so neither tool pays for the first
    // read from disk alone: whichever ran first would otherwise.
    Command::new("du").arg("-s").arg(&work).stdout(Stdio::null()).status().unwrap();
    warm(&work);

    let first_tb = turnback(tb_dir.path(), &work);
    let first_git = shadow_git(git_dir.path(), &work, &script);
    let (mut same_tb, mut same_git, mut one_tb, mut one_git) = (vec![], vec![], vec![], vec![]);
    let mut peak_tb = first_tb.max_rss_kib;
    let mut peak_git = first_git.max_rss_kib;
    let changed = find_a_file(&work);
    let original = std::fs::read(&changed).unwrap();
    for i in 0..runs {
        let r = turnback(tb_dir.path(), &work);
        peak_tb = peak_tb.max(r.max_rss_kib);
        same_tb.push(r.seconds);
        let r = shadow_git(git_dir.path(), &work, &script);
        peak_git = peak_git.max(r.max_rss_kib);
        same_git.push(r.seconds);
        let mut bytes = original.clone();
        bytes.extend_from_slice(format!("// change {i}\n").as_bytes());
        std::fs::write(&changed, &bytes).unwrap();
        let r = turnback(tb_dir.path(), &work);
        peak_tb = peak_tb.max(r.max_rss_kib);
        one_tb.push(r.seconds);
        let r = shadow_git(git_dir.path(), &work, &script);
        peak_git = peak_git.max(r.max_rss_kib);
        one_git.push(r.seconds);
    }
    // Rewind preview of the last turn: a turn that changes one file, then the preview.
    let tb = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_turnback"))
            .args(args)
            .current_dir(&work)
            .env("TURNBACK_HOME", tb_dir.path().join("store"))
            .env("TURNBACK_KEY", KEY)
            .env("TURNBACK_SESSION", "bench")
            .env("HOME", tb_dir.path())
            .output()
            .expect("run turnback");
        assert!(out.status.success(), "turnback {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let mut rewind = Vec::new();
    for i in 0..runs {
        tb(&["turn", "begin", "--new", "--prompt", "bench"]);
        let mut bytes = original.clone();
        bytes.extend_from_slice(format!("// turn {i}\n").as_bytes());
        std::fs::write(&changed, &bytes).unwrap();
        tb(&["turn", "end"]);
        let start = Instant::now();
        tb(&["rewind", "--to", &(i + 1).to_string()]);
        rewind.push(start.elapsed().as_secs_f64());
    }
    std::fs::write(&changed, &original).unwrap();
    let store_tb = du(&tb_dir.path().join("store"));
    let repack = Command::new("git")
        .arg(format!("--git-dir={}", git_dir.path().join("shadow.git").display()))
        .args(["repack", "-a", "-d", "-q"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .unwrap();
    assert!(repack.success());
    let store_git = du(&git_dir.path().join("shadow.git"));

    println!("snapshot benchmark, {label}, {runs} runs per repeated row (medians; fresh process each)");
    println!("{:<28} {:>12} {:>12} {:>8} {:>8}", "", "turnback", "shadow git", "ratio", "target");
    let row = |name: &str, a: f64, b: f64, target: &str| {
        println!("{name:<28} {:>11.3}s {:>11.3}s {:>8.2} {:>8}", a, b, a / b, target);
    };
    row("first snapshot", first_tb.seconds, first_git.seconds, "<= 0.20");
    row("no-change snapshot", median(same_tb), median(same_git), "<= 0.50");
    row("one changed file", median(one_tb), median(one_git), "<= 0.50");
    println!(
        "{:<28} {:>10.1}MB {:>10.1}MB {:>8.2} {:>8}",
        "store size (git repacked)",
        store_tb as f64 / 1e6,
        store_git as f64 / 1e6,
        store_tb as f64 / store_git as f64,
        "<= 1.00"
    );
    println!("{:<28} {:>11.3}s {:>12} {:>8} {:>8}", "rewind preview, last turn", median(rewind), "", "", "<= 1s");
    println!(
        "{:<28} {:>9.1}MiB {:>9.1}MiB {:>8} {:>8}",
        "peak memory (max RSS)",
        peak_tb as f64 / 1024.0,
        peak_git as f64 / 1024.0,
        "",
        "<= 256"
    );
}

fn find_a_file(root: &Path) -> PathBuf {
    let mut dir = root.to_path_buf();
    loop {
        let mut entries: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        if let Some(f) =
            entries.iter().find(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        {
            return f.clone();
        }
        dir = entries.into_iter().find(|p| p.is_dir() && !p.ends_with(".git")).expect("a file somewhere");
    }
}
