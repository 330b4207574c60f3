//! Writes under stress (issue 12): a full disk during an undo, a crash in the middle of a
//! large write, and `gc` giving the space it frees back to the file system.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use crate::common::{Env, files_under, str_at};

/// Bytes that do not compress, so the store holds as much as the file.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn store_db_bytes(env: &Env) -> u64 {
    ["store.db", "store.db-wal"]
        .iter()
        .filter_map(|name| std::fs::metadata(env.store.join(name)).ok())
        .map(|m| m.len())
        .sum()
}

#[test]
fn gc_gives_every_freed_page_back_to_the_file_system() {
    let env = Env::new();
    env.ok(&["init"], None);
    env.ok(&["turn", "begin", "--prompt", "a big file"], None);
    env.ok(&["fs", "write", "big.bin"], Some(&noise(8 << 20, 7)));
    env.ok(&["turn", "end"], None);
    let session = env.json(&["session", "list"])["sessions"][0]["id"].as_str().unwrap().to_string();
    env.ok(&["session", "delete", &session], None);
    let before = store_db_bytes(&env);
    assert!(before > 8 << 20, "the store holds the file's content: {before} bytes");

    let report = env.json(&["gc"]);
    assert!(report["objectBytesRemoved"].as_u64().unwrap() >= 8 << 20, "{report:#}");
    let after = store_db_bytes(&env);
    assert!(after < 2 << 20, "store.db keeps {after} bytes after gc freed 8 MiB of content: {report:#}");
    assert!(report["diskBytesAfter"].as_u64().unwrap() < 2 << 20, "{report:#}");
}

/// A small tmpfs mounted over the workspace, so a write there really runs out of space
/// (the store stays on the ordinary file system). Unmounted when dropped.
struct FullDisk {
    at: PathBuf,
}

impl FullDisk {
    /// Mounts a 1 MiB tmpfs over `env.ws`; `None` (with a message) where that is not
    /// permitted.
    fn mount(env: &Env) -> Option<FullDisk> {
        let root = Command::new("id").arg("-u").output().ok()?;
        if String::from_utf8_lossy(&root.stdout).trim() != "0" {
            crate::common::tools::skipped("the full-disk checks (mounting a tmpfs needs root)");
            return None;
        }
        let out = Command::new("mount").args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"]).arg(&env.ws).output().ok()?;
        if !out.status.success() {
            crate::common::tools::skipped("the full-disk checks (mounting a tmpfs is not permitted here)");
            return None;
        }
        Some(FullDisk { at: env.ws.clone() })
    }

    /// Fills the file system with a person's file until a write fails for lack of space.
    fn fill(&self) {
        let mut filler = std::fs::File::create(self.at.join("filler.bin")).unwrap();
        let chunk = vec![0x5au8; 4096];
        loop {
            match filler.write_all(&chunk) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        // Whatever a page-sized write could not use is filled byte by byte.
        while filler.write_all(&[0x5a]).is_ok() {}
    }

    fn free(&self) {
        std::fs::remove_file(self.at.join("filler.bin")).unwrap();
    }

    /// Gives `bytes` of the filler back: room for some writes, not for all.
    fn free_some(&self, bytes: u64) {
        let filler = std::fs::OpenOptions::new().write(true).open(self.at.join("filler.bin")).unwrap();
        let len = filler.metadata().unwrap().len();
        filler.set_len(len.saturating_sub(bytes)).unwrap();
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

/// Names in the workspace that turnback's own writes use for their temporary files.
fn turnback_temp_files(env: &Env) -> Vec<String> {
    std::fs::read_dir(&env.ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".turnback-"))
        .collect()
}

#[test]
fn disk_full_during_rollback_apply_is_an_io_failure_and_leaves_no_temp_file() {
    let env = Env::new();
    let Some(disk) = FullDisk::mount(&env) else { return };
    let original = noise(300 << 10, 3);
    env.ok(&["init"], None);
    env.ok(&["turn", "begin", "--prompt", "shrink the file"], None);
    env.ok(&["fs", "write", "big.txt"], Some(&original));
    let id = str_at(&env.json_with(&["fs", "write", "big.txt"], Some(b"small\n")), "/checkpointId").to_string();
    env.ok(&["turn", "end"], None);
    disk.fill();

    // Taking the write back puts 300 KiB where there is no room.
    let failure = env.fail(&["rollback", &id, "--apply"], None);
    assert_eq!(failure.code, "disk-full", "an I/O failure, named as what it is, not a conflict: {:#}", failure.doc);
    assert_eq!(failure.exit, 1, "{:#}", failure.doc);
    assert!(failure.message.contains("big.txt"), "the message names the file: {}", failure.message);
    assert_eq!(turnback_temp_files(&env), Vec::<String>::new(), "no temporary file stays in the workspace");
    assert_eq!(env.read("big.txt").unwrap(), b"small\n", "the file is as it was");

    // The next snapshot records no temporary file, and with room again the rollback works.
    let snap = env.json(&["snapshot"]);
    assert_eq!(turnback_temp_files(&env), Vec::<String>::new(), "{snap:#}");
    disk.free();
    let done = env.json(&["rollback", &id, "--apply"]);
    assert_eq!(done["resultType"], "full", "{done:#}");
    assert_eq!(env.read("big.txt").unwrap(), original);
    env.assert_verify_clean();
}

#[test]
fn disk_full_during_rewind_apply_is_an_io_failure_and_leaves_no_temp_file() {
    let env = Env::new();
    let Some(disk) = FullDisk::mount(&env) else { return };
    let original = noise(300 << 10, 5);
    env.write("big.txt", &original);
    env.ok(&["init"], None);
    env.ok(&["turn", "begin", "--prompt", "shrink the file"], None);
    env.ok(&["fs", "write", "big.txt"], Some(b"small\n"));
    env.ok(&["turn", "end"], None);
    disk.fill();

    let failure = env.fail(&["rewind", "--to", "1", "--apply"], None);
    assert_eq!(failure.code, "disk-full", "an I/O failure, named as what it is, not a conflict: {:#}", failure.doc);
    assert!(failure.message.contains("big.txt"), "the message names the file: {}", failure.message);
    assert_eq!(turnback_temp_files(&env), Vec::<String>::new(), "no temporary file stays in the workspace");
    assert_eq!(env.read("big.txt").unwrap(), b"small\n", "the file is as it was");

    disk.free();
    let done = env.json(&["rewind", "--to", "1", "--apply"]);
    assert_eq!(done["plan"]["resultType"], "full", "{done:#}");
    assert_eq!(env.read("big.txt").unwrap(), original);
    env.assert_verify_clean();
}

/// A rewind's files go in chunks, each synced while the next is written. One that runs out
/// of space in its second chunk — 128 small files in 128 directories (a chunk's most),
/// then two of 200 KiB where there is room for the first chunk only — stops, and the
/// first chunk, written and waiting for its sync, is not put in place either (what has not
/// started does not start): nothing is restored, no temporary file stays anywhere in the
/// workspace, and with room again the rewind finishes.
#[test]
fn disk_full_in_a_later_chunk_of_a_rewind_leaves_every_path_whole_and_no_temp_file() {
    let env = Env::new();
    let Some(disk) = FullDisk::mount(&env) else { return };
    let mut paths: Vec<(String, Vec<u8>)> =
        (0..128).map(|i| (format!("d{i:03}/small.txt"), format!("small file {i}\n").into_bytes())).collect();
    paths.push(("e000/big.bin".into(), noise(200 << 10, 21)));
    paths.push(("e001/big.bin".into(), noise(200 << 10, 23)));
    for (path, bytes) in &paths {
        env.write(path, bytes);
    }
    env.ok(&["init"], None);
    env.ok(&["turn", "begin", "--prompt", "delete everything"], None);
    for (path, _) in &paths {
        std::fs::remove_dir_all(env.ws.join(path).parent().unwrap()).unwrap();
    }
    env.ok(&["turn", "end"], None);
    disk.fill();
    disk.free_some(600 << 10);

    let failure = env.fail(&["rewind", "--to", "1", "--apply"], None);
    assert_eq!(failure.code, "disk-full", "{:#}", failure.doc);
    assert!(failure.message.contains("big.bin"), "the second chunk ran out: {}", failure.message);
    let leftovers: Vec<PathBuf> =
        files_under(&env.ws).into_iter().filter(|p| p.to_string_lossy().contains(".turnback-")).collect();
    assert_eq!(leftovers, Vec::<PathBuf>::new(), "no temporary file stays in the workspace");
    for (path, _) in &paths {
        assert_eq!(env.read(path), None, "{path}: nothing of a stopped chunk is put in place");
    }

    disk.free();
    let done = env.json(&["rewind", "--to", "1", "--apply"]);
    assert_eq!(done["plan"]["resultType"], "full", "{done:#}");
    for (path, bytes) in &paths {
        assert_eq!(env.read(path).as_ref(), Some(bytes), "{path} after the rewind ran again");
    }
    env.assert_verify_clean();
}

/// Names in the workspace that say turnback wrote or kept them.
fn turnback_leftovers(env: &Env) -> Vec<String> {
    std::fs::read_dir(&env.ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("turnback"))
        .collect()
}

#[test]
fn a_crash_in_the_middle_of_a_large_write_leaves_the_old_file_and_no_leftover() {
    let env = Env::new();
    let original = noise(1 << 20, 11);
    let intended = noise(24 << 20, 13);
    env.write("big.bin", &original);
    env.ok(&["init"], None);
    env.ok(&["turn", "begin", "--prompt", "rewrite the data"], None);
    // Killed with some of the 24 MiB written to the temporary file.
    env.kill_at_failpoint(&["fs", "write", "big.bin"], Some(&intended), "write-temp-partial");

    let report = env.json(&["reconcile"]);
    assert_eq!(report["recoveredFiles"], serde_json::json!([]), "nothing of anyone else's to keep: {report:#}");
    assert_eq!(report["tempFilesRemoved"], 1, "{report:#}");
    assert_eq!(turnback_leftovers(&env), Vec::<String>::new(), "{report:#}");
    assert_eq!(env.read("big.bin").unwrap(), original, "the file is wholly old");
    let records = env.all_checkpoints();
    assert_eq!(records.len(), 1);
    assert_eq!(str_at(&records[0], "/mutation/commitState"), "unknown-outcome");
    // A second reconcile finds nothing more to do.
    let again = env.json(&["reconcile"]);
    assert_eq!(again["tempFilesRemoved"], 0, "{again:#}");
    assert_eq!(turnback_leftovers(&env), Vec::<String>::new());
    env.assert_verify_clean();
}

/// A write's temporary file is left out of a snapshot taken while it is in flight (its
/// checkpoint is pending); files a person named the same way are recorded.
#[test]
fn turnbacks_own_temporary_files_are_never_snapshotted() {
    let env = Env::new();
    env.write("big.bin", "old\n");
    env.ok(&["init"], None);
    let id = "01a2318f0d4b7c2e9a5f3b6d8e1c2a47";
    env.write("notes.md", "a person's notes\n");
    // Names shaped like turnback's that no write of turnback's made are anyone's files.
    env.write(&format!("src/.main.rs.turnback-{id}.tmp"), "a person's file");
    env.write(&format!(".big.bin.turnback-{id}.part"), "another");
    env.write(".x.turnback-notanid.tmp", "someone's file");
    let ours = |env: &Env| -> Vec<String> {
        turnback_temp_files(env)
            .into_iter()
            .filter(|n| n.starts_with(".big.bin.turnback-") && !n.contains(id))
            .collect()
    };
    // A write held with its complete temporary file in place, not yet swapped in.
    let mut writing = env.spawn_at_failpoint(&["fs", "write", "big.bin"], Some(b"new\n"), "write-temp-synced");
    assert_eq!(ours(&env).len(), 1, "the write's temporary file is there");
    let snap = env.json(&["--session", "other", "snapshot"]);
    assert_eq!(snap["files"], 5, "big.bin, notes.md and the three look-alikes, not the temporary file: {snap:#}");
    writing.kill();
    // The next command's reconcile removes the write's temporary file, and only it.
    env.ok(&["turn", "begin", "--prompt", "work"], None);
    assert_eq!(ours(&env), Vec::<String>::new());
    env.write("late.md", "more\n");
    env.ok(&["turn", "end"], None);
    let diff = env.json(&["diff", "--turn", "1", "--stat"]).to_string();
    assert!(diff.contains("late.md") && !diff.contains(".big.bin.turnback-"), "{diff}");
    assert_eq!(env.read(&format!(".big.bin.turnback-{id}.part")).unwrap(), b"another");
    assert_eq!(env.read(&format!("src/.main.rs.turnback-{id}.tmp")).unwrap(), b"a person's file");
}

/// The temporary name turnback gives a write of `name` (in its directory) for `checkpoint`.
fn temp_of(dir: &str, name: &str, checkpoint: &str, suffix: &str) -> String {
    format!("{dir}.{name}.turnback-{}.{suffix}", checkpoint.replace('-', ""))
}

/// Files named exactly as temporary files of checkpoints that are over (a write, its undo)
/// or unknown: no record of turnback's accounts for them, so reconcile leaves them as they
/// are, never removed or renamed.
#[test]
fn reconcile_leaves_files_named_like_temporary_files_no_pending_checkpoint_accounts_for() {
    let env = Env::new();
    let original = noise(64 << 10, 17);
    env.ok(&["init"], None);
    env.ok(&["turn", "begin", "--prompt", "shrink"], None);
    env.ok(&["fs", "write", "big.txt"], Some(&original));
    let shrink = str_at(&env.json_with(&["fs", "write", "big.txt"], Some(b"small\n")), "/checkpointId").to_string();
    env.ok(&["turn", "end"], None);
    let applied = env.json(&["rollback", &shrink, "--apply"]);
    let undo = str_at(&applied, "/rollbackCheckpointId").to_string();
    env.write("notes.md", "a person's notes\n");

    let cut_short = temp_of("", "big.txt", &undo, "tmp");
    env.write(&cut_short, &original[..10_000]);
    let writing = temp_of("sub/", "x.txt", "01a2318f-0d4b-7c2e-9a5f-3b6d8e1c2a47", "part");
    env.write(&writing, "anything at all");
    let foreign = temp_of("", "notes.md", &shrink, "tmp");
    env.write(&foreign, "someone's words\n");

    let report = env.json(&["reconcile"]);
    assert_eq!(report["tempFilesRemoved"], 0, "{report:#}");
    assert_eq!(report["recoveredFiles"], serde_json::json!([]), "{report:#}");
    assert_eq!(env.read(&cut_short).unwrap(), &original[..10_000]);
    assert_eq!(env.read(&writing).unwrap(), b"anything at all");
    assert_eq!(env.read(&foreign).unwrap(), b"someone's words\n");
    assert_eq!(env.read("notes.md.turnback-recovered"), None);
    assert_eq!(env.read("big.txt").unwrap(), original, "the files themselves are left alone");
    assert_eq!(env.read("notes.md").unwrap(), b"a person's notes\n");
}
