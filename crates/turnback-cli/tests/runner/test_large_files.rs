//! Files larger than memory should have to hold: a snapshot reads, hashes, compresses and
//! seals a file in pieces, and a restore writes it back in pieces, so neither process's
//! peak memory grows with the file's size.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::{Env, show_output, str_at};

const GIB: u64 = 1 << 30;
/// Peak memory (max RSS) either process may reach, whatever the file's size.
const BOUND_KIB: u64 = 160 * 1024;
/// Bytes written into the otherwise sparse file (the rest reads as zeros), at offsets.
const MARKS: [(u64, &[u8]); 3] =
    [(0, b"the first bytes\n"), (2 * GIB + 12_345, b"somewhere in the middle\n"), (4 * GIB - 4, b"end\n")];

/// Runs `turnback ARGS` to success and returns its peak memory (max RSS) in KiB: measured
/// by `/usr/bin/time` where there is one, else by the kernel's high-water mark of the
/// process (`VmHWM`) read until it exits.
fn peak_kib(env: &Env, args: &[&str]) -> u64 {
    peak_kib_fed(env, args, None)
}

/// [`peak_kib`] with `stdin` (a file) as the command's input.
fn peak_kib_fed(env: &Env, args: &[&str], stdin: Option<&Path>) -> u64 {
    let inner = env.command(args);
    let rss_file = env.root.join("rss");
    let timed = Path::new("/usr/bin/time").exists();
    let mut cmd = if timed {
        let mut cmd = Command::new("/usr/bin/time");
        cmd.arg("-f").arg("%M").arg("-o").arg(&rss_file).arg(inner.get_program());
        cmd
    } else {
        Command::new(inner.get_program())
    };
    cmd.args(inner.get_args()).current_dir(inner.get_current_dir().expect("a directory"));
    for (name, value) in inner.get_envs() {
        match value {
            Some(value) => cmd.env(name, value),
            None => cmd.env_remove(name),
        };
    }
    let input = match stdin {
        Some(path) => Stdio::from(std::fs::File::open(path).unwrap()),
        None => Stdio::null(),
    };
    let mut child = cmd.stdin(input).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut high = 0;
    while !timed && child.try_wait().unwrap().is_none() {
        high = high.max(crate::common::peak_rss_kib(child.id()));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "turnback {args:?}: {}", show_output(&out));
    if timed {
        let text = std::fs::read_to_string(&rss_file).unwrap();
        // The last line is the figure (a killed child adds a line before it).
        high = text.lines().last().and_then(|l| l.trim().parse().ok()).expect("max RSS from /usr/bin/time");
    }
    high
}

/// Compares two files a MiB at a time, never holding either whole.
fn assert_same_bytes(a: &Path, b: &Path) {
    let (mut fa, mut fb) = (std::fs::File::open(a).unwrap(), std::fs::File::open(b).unwrap());
    assert_eq!(fa.metadata().unwrap().len(), fb.metadata().unwrap().len(), "sizes differ");
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut at = 0u64;
    loop {
        let n = fa.read(&mut ba).unwrap();
        if n == 0 {
            break;
        }
        fb.read_exact(&mut bb[..n]).unwrap();
        assert!(ba[..n] == bb[..n], "the restored file differs from the original in the MiB at offset {at}");
        at += n as u64;
    }
}

#[test]
fn a_4_gib_file_snapshots_and_comes_back_byte_for_byte_in_bounded_memory() {
    let env = Env::new();
    std::fs::write(
        env.store.join("settings.toml"),
        "[snapshots]\nmax-file-size = \"8 GiB\"\nfirst-max-size = \"8 GiB\"\nlater-max-size = \"8 GiB\"\n",
    )
    .unwrap();
    let big = env.ws.join("big.bin");
    let mut f = std::fs::File::create(&big).unwrap();
    f.set_len(4 * GIB).unwrap();
    for (at, bytes) in MARKS {
        f.seek(SeekFrom::Start(at)).unwrap();
        f.write_all(bytes).unwrap();
    }
    // Old enough that the stat cache vouches for it at once (not racily clean).
    f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600)).unwrap();
    drop(f);
    env.write("small.txt", "a small file beside it\n");
    env.ok(&["init"], None);

    let snapshot_kib = peak_kib(&env, &["snapshot"]);
    let turns = env.json(&["turns"]);
    let session = str_at(&turns, "/sessionId").to_string();
    env.ok(&["turn", "begin", "--prompt", "look at the big file"], None);
    env.ok(&["turn", "end"], None);
    let listed = env.json(&["turns"]);
    assert_eq!(listed["turns"][0]["endSnapshot"]["skipped"], serde_json::Value::Null, "{listed:#}");

    let into = env.root.join("fork");
    let fork_kib = peak_kib(&env, &["session", "fork", "--from", &session, "--into", into.to_str().unwrap()]);
    assert_same_bytes(&big, &into.join("big.bin"));
    assert_eq!(std::fs::read(into.join("small.txt")).unwrap(), b"a small file beside it\n");
    assert!(snapshot_kib < BOUND_KIB, "the snapshot of a 4 GiB file peaked at {snapshot_kib} KiB");
    assert!(fork_kib < BOUND_KIB, "restoring a 4 GiB file peaked at {fork_kib} KiB");
    // `verify --deep` reads every object back (exit 0: clean), the large one in pieces too.
    let verify_kib = peak_kib(&env, &["verify", "--deep"]);
    assert!(verify_kib < BOUND_KIB, "verifying a 4 GiB file peaked at {verify_kib} KiB");
    // A turn that deletes it: its diff's counts are read in pieces too.
    env.ok(&["turn", "begin", "--prompt", "delete the big file"], None);
    std::fs::remove_file(&big).unwrap();
    env.ok(&["turn", "end"], None);
    let stat_kib = peak_kib(&env, &["diff", "--turn", "2", "--stat"]);
    assert!(stat_kib < BOUND_KIB, "diff --stat of a deleted 4 GiB file peaked at {stat_kib} KiB");
    eprintln!(
        "peak memory with a 4 GiB file: snapshot {snapshot_kib} KiB, fork --into {fork_kib} KiB, verify --deep {verify_kib} KiB, diff --stat {stat_kib} KiB"
    );
}

/// Peak memory a checkpointed change of a 90 MiB file may reach (the bound).
const CHECKPOINT_BOUND_KIB: u64 = 64 * 1024;

/// `n` bytes of text lines, each numbered (compressible, as source is, but no two blocks
/// alike), the variant `v` differing in every line.
fn lines(n: usize, v: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 64);
    let mut i = 0u64;
    while out.len() < n {
        out.extend_from_slice(format!("{i:09} v{v} the quick brown fox {} jumps\n", i * 7919 % 100_003).as_bytes());
        i += 1;
    }
    out.truncate(n);
    out
}

#[test]
fn a_90_mib_file_is_written_edited_staged_deleted_rolled_back_and_rewound_in_bounded_memory() {
    let env = Env::new();
    // Room for an agent's staged write of it (its estimate: twice the file).
    std::fs::write(
        env.store.join("settings.toml"),
        "[checkpoints]\ncheckpoint-cap = \"200 MiB\"\nstore-cap = \"2 GiB\"\n",
    )
    .unwrap();
    let (first, second) = (lines(90 << 20, 1), lines(90 << 20, 2));
    let input = env.root.join("input");
    std::fs::write(&input, &first).unwrap();
    let big = env.ws.join("big.txt");
    env.ok(&["turn", "begin", "--prompt", "write the big file"], None);
    let mut peaks = Vec::new();
    peaks.push(("fs write", peak_kib_fed(&env, &["fs", "write", "big.txt"], Some(&input))));
    assert!(std::fs::read(&big).unwrap() == first, "fs write wrote the input byte for byte");
    // Every line's "quick" replaced: millions of occurrences, streamed.
    peaks.push(("fs edit", peak_kib(&env, &["fs", "edit", "big.txt", "--old", "quick", "--new", "slow", "--all"])));
    let edited = String::from_utf8(first.clone()).unwrap().replace("quick", "slow");
    assert!(std::fs::read(&big).unwrap() == edited.as_bytes(), "fs edit replaced every occurrence, nothing else");
    let edit = env.checkpoints().last().unwrap()["checkpointId"].as_str().unwrap().to_string();
    peaks.push(("rollback of the edit", peak_kib(&env, &["rollback", &edit, "--apply"])));
    assert!(std::fs::read(&big).unwrap() == first, "the edit's rollback brought back the original");
    // An agent's own write, staged and committed around it.
    let staged = env.json(&["stage", "big.txt", "--json"]);
    let operation = staged["operationId"].as_str().unwrap().to_string();
    std::fs::write(&big, &second).unwrap();
    peaks.push(("commit", peak_kib(&env, &["commit", &operation])));
    peaks.push(("fs delete", peak_kib(&env, &["fs", "delete", "big.txt"])));
    let delete = env.checkpoints().last().unwrap()["checkpointId"].as_str().unwrap().to_string();
    peaks.push(("rollback", peak_kib(&env, &["rollback", &delete, "--apply"])));
    assert!(std::fs::read(&big).unwrap() == second, "the rollback brought back the deleted file byte for byte");
    env.ok(&["turn", "end"], None);
    env.ok(&["turn", "begin", "--prompt", "remove it"], None);
    std::fs::remove_file(&big).unwrap();
    env.ok(&["turn", "end"], None);
    peaks.push(("diff", peak_kib(&env, &["diff", "--turn", "2"])));
    let patch = String::from_utf8(env.ok(&["diff", "--turn", "2"], None).stdout).unwrap();
    assert!(patch.contains("Large files a/big.txt") && patch.contains("not shown line by line"), "{patch}");
    peaks.push(("rewind", peak_kib(&env, &["rewind", "--to", "2", "--apply"])));
    assert!(std::fs::read(&big).unwrap() == second, "the rewind brought back the file byte for byte");
    env.assert_verify_clean();
    eprintln!("peak memory with a 90 MiB file: {peaks:?} (KiB)");
    for (what, kib) in peaks {
        assert!(kib < CHECKPOINT_BOUND_KIB, "{what} of a 90 MiB file peaked at {kib} KiB");
    }
}
