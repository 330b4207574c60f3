//! Snapshots: what they record and leave out, how they share and verify, and that they
//! never touch the user's repository.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use crate::api::maintenance;
use crate::snapshot::tree::NodeKind;
use crate::snapshot::{self, SnapshotKind, SnapshotRecord};
use crate::storage::content::ContentId;

use crate::tests::common::Env;

fn take(env: &Env) -> SnapshotRecord {
    env.snapshot(SnapshotKind::AdHoc).unwrap()
}

fn paths(env: &Env, r: &SnapshotRecord) -> BTreeMap<String, NodeKind> {
    let root = ContentId::from_hex(r.root.as_deref().expect("not skipped")).unwrap();
    snapshot::flatten(&env.store, &root)
        .unwrap()
        .into_iter()
        .map(|(p, n)| (String::from_utf8(p).unwrap(), n.kind))
        .collect()
}

fn write(env: &Env, rel: &str, content: &str) {
    let p = env.path(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

/// Makes `rel` look written long ago (10 s): settled, so the stat cache trusts it unread.
fn age(env: &Env, rel: &str) {
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
    std::fs::File::options().write(true).open(env.path(rel)).unwrap().set_modified(old).unwrap();
}

/// Every file under `dir` with its bytes, mode and mtime (to prove nothing changed).
fn fingerprint(dir: &std::path::Path) -> BTreeMap<String, (Vec<u8>, u32, i64)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p.clone());
            }
            let bytes = if m.is_file() { std::fs::read(&p).unwrap() } else { Vec::new() };
            out.insert(p.display().to_string(), (bytes, m.mode(), m.mtime_nsec() + m.mtime() * 1_000_000_000));
        }
    }
    out
}

#[test]
fn secrets_and_dependency_folders_stay_out_whatever_gitignore_says() {
    let env = Env::new();
    for f in [".env", ".env.example", "config/.env.local", "certs/server.pem", "id_ed25519", ".aws/credentials"] {
        write(&env, f, "SECRET=1");
    }
    write(&env, "node_modules/pkg/index.js", "x");
    write(&env, "app/__pycache__/m.pyc", "x");
    write(&env, ".docker/config.json", "{}");
    write(&env, "ignored.log", "noise");
    write(&env, "src/main.rs", "fn main() {}");
    write(&env, ".gitignore", "*.log\n!.env\n!*.pem\n!node_modules/\n");
    let r = take(&env);
    let recorded: Vec<String> = paths(&env, &r).into_keys().collect();
    assert_eq!(recorded, [".gitignore", "src/main.rs"]);
    assert!(r.excluded >= 8, "{}", r.excluded);
}

#[test]
fn symlinks_are_recorded_as_links_and_never_followed() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "outside").unwrap();
    std::os::unix::fs::symlink(outside.path(), env.path("link-to-dir")).unwrap();
    std::os::unix::fs::symlink("src/a.txt", env.path("link-to-file")).unwrap();
    write(&env, "src/a.txt", "a");
    let r = take(&env);
    let recorded = paths(&env, &r);
    assert!(matches!(recorded["link-to-dir"], NodeKind::Symlink(_)));
    assert!(matches!(recorded["link-to-file"], NodeKind::Symlink(_)));
    assert!(!recorded.keys().any(|p| p.contains("secret")), "{recorded:?}");
}

#[test]
fn nested_repositories_are_pointers_or_skipped_with_a_reason() {
    let env = Env::new();
    write(&env, "vendor/lib/.git/HEAD", "ref: refs/heads/main\n");
    write(&env, "vendor/lib/src.c", "int x;");
    let r = take(&env);
    assert!(!paths(&env, &r).keys().any(|p| p.starts_with("vendor")));
    assert!(
        r.skipped_paths.iter().any(|s| s.path == "vendor/lib" && s.reason.contains("no commit")),
        "{:?}",
        r.skipped_paths
    );
    let commit = "0123456789abcdef0123456789abcdef01234567";
    write(&env, "vendor/lib/.git/refs/heads/main", &format!("{commit}\n"));
    let r = take(&env);
    assert_eq!(paths(&env, &r)["vendor/lib"], NodeKind::Gitlink(commit.into()));
    assert_eq!(r.nested_repos[0].commit, commit);
}

#[test]
fn only_changed_files_are_read_and_unchanged_subtrees_are_shared() {
    let env = Env::new();
    for i in 0..20 {
        write(&env, &format!("d{}/f{i}.txt", i % 4), &format!("content {i}"));
    }
    // Make every file older than the racy margin, as if written long ago.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
    for i in 0..20 {
        let f = std::fs::File::options().write(true).open(env.path(&format!("d{}/f{i}.txt", i % 4))).unwrap();
        f.set_modified(old).unwrap();
    }
    let first = take(&env);
    assert_eq!(first.read_files, 20);
    let second = take(&env);
    assert_eq!((second.read_files, second.stored_bytes), (0, 0));
    assert_eq!(second.root, first.root);
    // Same size and the old mtime put back: the ctime still gives the change away.
    write(&env, "d1/f1.txt", "CONTENT 1");
    let f = std::fs::File::options().write(true).open(env.path("d1/f1.txt")).unwrap();
    f.set_modified(old).unwrap();
    let third = take(&env);
    assert_eq!(third.read_files, 1);
    assert_ne!(third.root, second.root);
    let before = paths(&env, &second);
    let after = paths(&env, &third);
    let differing: Vec<&String> = after.keys().filter(|p| after[*p] != before[*p]).collect();
    assert_eq!(differing, [&"d1/f1.txt".to_string()]);
}

/// The session's stat cache as stored: the whole cache and its delta.
fn cache_rows(env: &Env) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let key = env.session.id.as_bytes();
    (env.store.kv().get("statcache", key).unwrap(), env.store.kv().get("statcache-delta", key).unwrap())
}

#[test]
fn a_racily_clean_file_is_read_again() {
    let env = Env::new();
    write(&env, "a.txt", "one");
    write(&env, "old.txt", "settled");
    age(&env, "old.txt");
    take(&env);
    // Untouched since, with every stat field as cached: only its recent mtime (inside the
    // racy margin of the cached walk) makes it untrusted, so it alone is read again.
    let r = take(&env);
    assert_eq!(r.read_files, 1, "the racily clean file, and only it");
    // Read again and found the same, it does not make the cache stale: not rewritten
    // (rewriting a large tree's cache at every snapshot was the cost this avoids).
    let cached = cache_rows(&env);
    assert_eq!(take(&env).read_files, 1);
    assert_eq!(cache_rows(&env), cached);
    // Once a walk starts more than the margin after its mtime it could be settled, but a
    // file or two are cheaper to read again than the cache to rewrite: still not rewritten.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let r = take(&env);
    assert_eq!(r.read_files, 1);
    assert_eq!(cache_rows(&env), cached);
    // The next write, for any other change (a file written long ago), settles it: trusted
    // from then on.
    write(&env, "other.txt", "new");
    age(&env, "other.txt");
    assert_eq!(take(&env).read_files, 2);
    assert_ne!(cache_rows(&env), cached);
    assert_eq!(take(&env).read_files, 0);
}

#[test]
fn many_settled_files_rewrite_the_cache_so_they_are_not_read_again() {
    let env = Env::new();
    for i in 0..70 {
        write(&env, &format!("f{i}.txt"), "x");
    }
    take(&env);
    let cached = cache_rows(&env);
    std::thread::sleep(std::time::Duration::from_millis(2100));
    // 70 files past the margin, more than are left to be read again: the cache is rewritten.
    assert_eq!(take(&env).read_files, 70);
    assert_ne!(cache_rows(&env), cached);
    assert_eq!(take(&env).read_files, 0);
}

#[test]
fn limits_skip_a_snapshot_with_the_exact_reason_and_store_nothing() {
    let mut env = Env::new();
    std::fs::write(
        env.dir.path().join("store/settings.toml"),
        "[snapshots]\nfirst-max-files = 3\nlater-max-files = 2\nlater-max-size = 10\n",
    )
    .unwrap();
    env.reopen();
    for i in 0..4 {
        write(&env, &format!("f{i}.txt"), "x");
        age(&env, &format!("f{i}.txt"));
    }
    let r = take(&env);
    assert_eq!(r.skipped.as_deref(), Some("too many files (4 > 3)"));
    assert_eq!((r.root, r.stored_bytes), (None, 0));
    std::fs::remove_file(env.path("f3.txt")).unwrap();
    assert!(take(&env).skipped.is_none());
    // One file alone over what a later snapshot may add is left out, not the snapshot.
    write(&env, "big.txt", &"y".repeat(11));
    let r = take(&env);
    assert!(r.skipped.is_none());
    assert_eq!(r.left_out.iter().map(|l| (l.path.as_str(), l.size)).collect::<Vec<_>>(), [("big.txt", 11)]);
    assert!(r.left_out[0].reason.contains("later-max-size"), "{}", r.left_out[0].reason);
    assert!(!paths(&env, &r).contains_key("big.txt"));
    // Together over it, they skip it.
    write(&env, "c.txt", &"c".repeat(6));
    write(&env, "d.txt", &"d".repeat(6));
    let r = take(&env);
    assert_eq!(r.skipped.as_deref(), Some("new or changed files exceed 10 B (12 B > 10 B)"));
    write(&env, "e.txt", "e");
    assert_eq!(take(&env).skipped.as_deref(), Some("too many new or changed files (3 > 2)"));
}

#[test]
fn the_users_repository_is_never_touched() {
    let env = Env::new();
    write(&env, ".git/HEAD", "ref: refs/heads/main\n");
    write(&env, ".git/config", "[core]\n\tfsmonitor = touch /tmp/turnback-fsmonitor-ran\n");
    write(&env, ".git/hooks/pre-commit", "#!/bin/sh\ntouch /tmp/turnback-hook-ran\n");
    write(&env, ".git/info/exclude", "excluded-by-git.txt\n");
    write(&env, "excluded-by-git.txt", "x");
    write(&env, "tracked.txt", "x");
    let before = fingerprint(&env.path(".git"));
    let r = take(&env);
    assert_eq!(fingerprint(&env.path(".git")), before);
    assert_eq!(paths(&env, &r).into_keys().collect::<Vec<_>>(), ["tracked.txt"]);
    // Works the same once the user deletes .git.
    std::fs::remove_dir_all(env.path(".git")).unwrap();
    let r = take(&env);
    assert_eq!(paths(&env, &r).into_keys().collect::<Vec<_>>(), ["excluded-by-git.txt", "tracked.txt"]);
    assert!(!env.path(".git").exists(), "no .git is ever created");
}

#[test]
fn snapshots_survive_gc_verify_deep_and_keep_plaintext_out_of_the_store() {
    let env = Env::new();
    let canary = "canary-5e1f0c3b";
    write(&env, &format!("{canary}/notes-{canary}.md"), &format!("text {canary}\n"));
    std::fs::set_permissions(env.path(canary), std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = take(&env);
    maintenance::gc(&env.store).unwrap();
    assert_eq!(paths(&env, &r).len(), 1, "gc kept everything the snapshot reaches");
    assert!(maintenance::verify(&env.store, true).unwrap().clean);
    for entry in walk_files(&env.dir.path().join("store")) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(!bytes.windows(canary.len()).any(|w| w == canary.as_bytes()), "canary in {}", entry.display());
    }
}

#[test]
fn a_store_inside_the_workspace_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let ws_dir = dir.path().join("ws");
    std::fs::create_dir(&ws_dir).unwrap();
    let store = crate::tests::common::open(&crate::tests::common::options_at(
        &ws_dir.join(".turnback"),
        crate::tests::common::KEY,
    ))
    .unwrap();
    let ws = crate::session::workspace::Workspace::ensure(&store, &ws_dir).unwrap();
    let session = crate::session::Session::resolve(&store, &ws, Some("s")).unwrap();
    std::fs::write(ws_dir.join("a.txt"), "a").unwrap();
    let opts = snapshot::TakeOptions { kind: Some(SnapshotKind::AdHoc), ..Default::default() };
    let hooks = crate::session::turn::Hooks::new(&store);
    let r = snapshot::take(&store, crate::session::turn::source(&ws, &session), &opts, &hooks).unwrap();
    assert_eq!(r.files, 1);
}

fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() { stack.push(p) } else { out.push(p) }
        }
    }
    out
}

#[test]
fn diff_names_added_modified_deleted_and_type_changed_paths_and_hides_binary_content() {
    let env = Env::new();
    write(&env, "keep.txt", "same\n");
    write(&env, "edit.txt", "one\ntwo\n");
    write(&env, "gone.txt", "bye\n");
    write(&env, "kind", "a file first\n");
    write(&env, "deep/a/b.txt", "x\n");
    write(&env, "img.bin", "\0\x01binary-secret");
    let a = take(&env);
    write(&env, "edit.txt", "one\nTWO\nthree\n");
    std::fs::remove_file(env.path("gone.txt")).unwrap();
    std::fs::remove_file(env.path("kind")).unwrap();
    std::os::unix::fs::symlink("keep.txt", env.path("kind")).unwrap();
    write(&env, "new/file.txt", "new\n");
    write(&env, "img.bin", "\0\x02binary-secret-2");
    let b = take(&env);
    let root = |r: &SnapshotRecord| ContentId::from_hex(r.root.as_deref().unwrap()).unwrap();
    let changes = crate::snapshot::diff::trees(&env.store, &root(&a), &root(&b)).unwrap();
    let summary: Vec<(String, String)> = changes
        .iter()
        .map(|c| (c.path.clone(), serde_json::to_value(c.change).unwrap().as_str().unwrap().to_string()))
        .collect();
    assert_eq!(
        summary,
        [
            ("edit.txt".to_string(), "modified".to_string()),
            ("gone.txt".into(), "deleted".into()),
            ("img.bin".into(), "modified".into()),
            ("kind".into(), "type-changed".into()),
            ("new/file.txt".into(), "added".into()),
        ]
    );
    let (counts, patch) = crate::snapshot::diff::report(&env.store, &changes, true).unwrap();
    assert_eq!((counts[0].added, counts[0].deleted), (Some(2), Some(1)));
    assert_eq!((counts[2].added, counts[2].deleted), (None, None), "binary");
    assert!(patch.contains("+TWO") && patch.contains("-two"), "{patch}");
    assert!(patch.contains("Binary files a/img.bin and b/img.bin differ"));
    assert!(!patch.contains("binary-secret"), "binary content never shown");
    assert!(crate::snapshot::diff::trees(&env.store, &root(&b), &root(&b)).unwrap().is_empty());
}

#[test]
fn a_lost_stat_cache_rereads_everything_without_tripping_the_later_limit() {
    let mut env = Env::new();
    std::fs::write(env.dir.path().join("store/settings.toml"), "[snapshots]\nlater-max-files = 2\n").unwrap();
    env.reopen();
    for i in 0..5 {
        write(&env, &format!("f{i}.txt"), "x");
    }
    let first = take(&env);
    let mut txn = env.store.kv().begin().unwrap();
    txn.delete("statcache", env.session.id.as_bytes()).unwrap();
    txn.commit().unwrap();
    let again = take(&env);
    assert_eq!(again.read_files, 5);
    assert!(again.skipped.is_none(), "{:?}", again.skipped);
    assert_eq!(again.root, first.root);
}

#[test]
fn pruning_keeps_the_budget_by_removing_oldest_whole_turns_and_gc_reclaims_them() {
    let mut env = Env::new();
    std::fs::write(env.dir.path().join("store/settings.toml"), "[snapshots]\nmax-per-session = 3\n").unwrap();
    env.reopen();
    let session = env.session.clone();
    let mut turn_ids = Vec::new();
    for i in 0..3 {
        write(&env, "f.txt", &format!("version {i}"));
        let id = crate::session::turn::new_id();
        let prompt = format!("turn {i}");
        let new = crate::session::turn::NewTurn { prompt: Some(&prompt), background: false };
        crate::session::turn::take_start_snapshot(&env.store, &env.ws, &session, &id, None).unwrap();
        crate::session::turn::record(&env.store, &session, &id, new, false, None, &|_, _| Ok(())).unwrap();
        write(&env, "f.txt", &format!("version {i} edited"));
        crate::session::turn::end(&env.store, &env.ws, &session, None).unwrap();
        turn_ids.push(id);
    }
    let kept = snapshot::list(&env.store, &session.id).unwrap();
    assert!(kept.len() <= 3, "{}", kept.len());
    let turns = crate::session::turn::list(&env.store, &session.id).unwrap();
    // The oldest turns went whole: never a start without its end.
    for t in &turns {
        let start = t.snapshot.id.is_some();
        let end = t.end_snapshot.as_ref().is_some_and(|e| e.id.is_some());
        assert_eq!(start, end, "turn {} kept half its snapshots", t.index);
    }
    assert!(turns[0].snapshot.skipped.as_deref().unwrap_or("").starts_with("pruned"));
    assert!(turns[2].snapshot.id.is_some(), "the newest turn is kept");
    let report = maintenance::gc(&env.store).unwrap();
    assert!(report.objects_removed > 0, "gc reclaims what only pruned snapshots used");
    for s in &kept {
        assert!(!paths(&env, s).is_empty());
    }
    assert!(maintenance::verify(&env.store, true).unwrap().clean);
}

#[test]
fn small_files_share_blocks_and_a_tampered_block_fails_verification() {
    let env = Env::new();
    for i in 0..50 {
        write(&env, &format!("src/file-{i}.rs"), &format!("pub fn f{i}() -> u32 {{ {i} }}\n"));
    }
    write(&env, "src/copy.rs", "pub fn f7() -> u32 { 7 }\n"); // same content as file-7.rs
    take(&env);
    assert_eq!(env.keys_in("packed").len(), 50, "one index entry per distinct content");
    let blocks = env.keys_in("blocks");
    assert_eq!(blocks.len(), 1, "fifty small files share one block");
    assert!(maintenance::verify(&env.store, true).unwrap().clean);
    env.tamper("blocks", &blocks[0], |v| {
        let last = v.len() - 1;
        v[last] ^= 0x01;
    });
    let report = maintenance::verify(&env.store, true).unwrap();
    assert!(!report.clean);
    assert_eq!(report.problems.len(), 50, "every object in the block is reported: {:?}", report.problems);
    assert!(report.problems.iter().all(|p| p.code == "corrupt"), "{:?}", report.problems);
}

#[test]
fn deleting_a_session_and_collecting_garbage_frees_its_blocks() {
    let env = Env::new();
    for i in 0..20 {
        write(&env, &format!("f-{i}.txt"), &format!("content {i}\n"));
    }
    take(&env);
    write(&env, "f-0.txt", "changed\n");
    take(&env);
    assert_eq!(env.keys_in("blocks").len(), 2, "a later snapshot packs only what changed");
    maintenance::delete_session(&env.store, &env.session.id).unwrap();
    let report = maintenance::gc(&env.store).unwrap();
    assert!(report.objects_removed >= 21, "21 file contents and the trees: {report:?}");
    assert!(env.keys_in("blocks").is_empty(), "no block outlives what it held");
    assert!(env.keys_in("packed").is_empty());
}

/// `len` bytes of xorshift noise from `seed`: content that does not compress away.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// How many packed blocks the store holds.
fn blocks(env: &Env) -> usize {
    let mut n = 0;
    env.store
        .kv()
        .scan_keys(crate::storage::schema::BLOCKS, b"", &mut |_| {
            n += 1;
            Ok(true)
        })
        .unwrap();
    n
}

#[test]
fn a_file_larger_than_a_batch_is_packed_as_it_is_read_and_reads_back_exactly() {
    let env = Env::new();
    // 20 MiB that do not compress away, plus a NUL so it is classed binary.
    let mut big = noise(20 << 20, 0x2545_f491_4f6c_dd1d);
    big[0] = 0;
    std::fs::write(env.path("big.bin"), &big).unwrap();
    write(&env, "small.txt", "small\n");
    let first = take(&env);
    let kinds = paths(&env, &first);
    let NodeKind::File(id) = kinds["big.bin"] else { panic!("big.bin is a file: {kinds:?}") };
    let (header, bytes) = env.store.read_object(&id).unwrap();
    assert!(bytes == big, "the file reads back exactly");
    assert_eq!(header.class, crate::storage::content::ContentClass::BinaryBlob);
    assert_eq!(id.0, env.store.keys().content_id(&big), "the streamed id is the id of the whole file");
    let stored = blocks(&env);
    assert!(stored >= 20, "the file's own blocks: {stored}");

    // Touched, not changed: read again, and its second copy's blocks deleted again.
    let f = std::fs::File::options().write(true).open(env.path("big.bin")).unwrap();
    f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(60)).unwrap();
    drop(f);
    let second = take(&env);
    assert!(second.read_bytes >= 20 << 20, "the touched file was read again: {second:?}");
    assert_eq!(paths(&env, &second)["big.bin"], NodeKind::File(id));
    assert_eq!(blocks(&env), stored, "no block of the second reading stays");
}

#[test]
fn content_is_packed_once_across_batches_and_sessions() {
    let env = Env::new();
    // 5 MiB that do not compress away, three times: the first two share a read batch
    // (8 MiB), the third is in the next one, read while the first may still be on its way
    // to the store.
    let noise = noise(5 << 20, 0x9e37_79b9_7f4a_7c15);
    for name in ["a.bin", "b.bin", "c.bin"] {
        std::fs::write(env.path(name), &noise).unwrap();
    }
    write(&env, "other.txt", "other\n");
    let first = take(&env);
    assert_eq!(first.read_files, 4);
    assert_packed_once(&env, &first, 2, 5 << 20);
    // Another session of the same workspace reads everything (it has no stat cache of its
    // own) and finds every content and tree stored already.
    let other = crate::session::Session::resolve(&env.store, &env.ws, Some("other-session")).unwrap();
    let opts = snapshot::TakeOptions { kind: Some(SnapshotKind::AdHoc), ..Default::default() };
    let hooks = crate::session::turn::Hooks::new(&env.store);
    let second = snapshot::take(&env.store, crate::session::turn::source(&env.ws, &other), &opts, &hooks).unwrap();
    assert_eq!(second.read_files, 4);
    assert_eq!(second.stored_bytes, 0, "nothing stored twice");
    assert_eq!(second.root, first.root);
    assert_eq!(env.keys_in("packed").len(), 2);
}

#[test]
fn content_met_again_batches_later_is_packed_once_whether_or_not_its_first_batch_is_committed() {
    let env = Env::new();
    // Four 3 MiB contents, each met three times four files apart: about a batch and a half
    // (8 MiB) between meetings, so a copy is met while its first batch is still on its way
    // to the store or after the writer committed it, as the writer's pace decides.
    let contents: Vec<Vec<u8>> = (0..4).map(|k| noise(3 << 20, 0x5851_f42d_4c95_7f2d + k)).collect();
    for n in 0..12 {
        std::fs::write(env.path(&format!("f{n:02}.bin")), &contents[n % 4]).unwrap();
    }
    let first = take(&env);
    assert_eq!(first.read_files, 12);
    assert_packed_once(&env, &first, 4, 12 << 20);
}

/// The snapshot `r` stored `distinct` contents of `bytes` in all once each: one index entry
/// per content, and what it stored within a block (1 MiB) of their bytes.
fn assert_packed_once(env: &Env, r: &SnapshotRecord, distinct: usize, bytes: u64) {
    assert_eq!(env.keys_in("packed").len(), distinct, "one index entry per distinct content");
    assert!(r.stored_bytes < bytes + (1 << 20), "each content is stored once: {} bytes", r.stored_bytes);
}

/// A snapshot by a session that has no stat cache: its tree is built from scratch.
fn take_fresh(env: &Env, name: &str) -> SnapshotRecord {
    let session = crate::session::Session::resolve(&env.store, &env.ws, Some(name)).unwrap();
    let opts = snapshot::TakeOptions { kind: Some(SnapshotKind::AdHoc), ..Default::default() };
    let hooks = crate::session::turn::Hooks::new(&env.store);
    snapshot::take(&env.store, crate::session::turn::source(&env.ws, &session), &opts, &hooks).unwrap()
}

#[test]
fn a_walk_that_finds_every_file_as_cached_still_sees_its_links_and_nested_repositories_change() {
    let env = Env::new();
    write(&env, "a.txt", "a");
    write(&env, "d/b.txt", "b");
    write(&env, "vendor/lib/.git/HEAD", "ref: refs/heads/main\n");
    write(&env, "vendor/lib/.git/refs/heads/main", &format!("{}\n", "1".repeat(40)));
    std::os::unix::fs::symlink("a.txt", env.path("link")).unwrap();
    for f in ["a.txt", "d/b.txt"] {
        age(&env, f);
    }
    let first = take(&env);
    let cached = env.store.kv().get("statcache", env.session.id.as_bytes()).unwrap();
    // Nothing changed: the tree the cache names, the cache not rewritten.
    let second = take(&env);
    assert_eq!((second.root.clone(), second.read_files), (first.root.clone(), 0));
    assert_eq!(second.nested_repos, first.nested_repos);
    assert_eq!(env.store.kv().get("statcache", env.session.id.as_bytes()).unwrap(), cached);
    // Each change leaves every file as cached; each must still give a new tree, the one a
    // session without a cache builds.
    let changes: [(&str, &dyn Fn()); 5] = [
        ("a link retargeted", &|| {
            std::fs::remove_file(env.path("link")).unwrap();
            std::os::unix::fs::symlink("d/b.txt", env.path("link")).unwrap();
        }),
        ("a link added", &|| std::os::unix::fs::symlink("../a.txt", env.path("d/new")).unwrap()),
        ("a link removed", &|| std::fs::remove_file(env.path("link")).unwrap()),
        ("a nested repository's commit moved", &|| {
            write(&env, "vendor/lib/.git/refs/heads/main", &format!("{}\n", "2".repeat(40)));
        }),
        ("a link moved to another directory", &|| std::fs::rename(env.path("d/new"), env.path("moved")).unwrap()),
    ];
    let mut previous = second.root.clone();
    for (i, (what, change)) in changes.iter().enumerate() {
        change();
        let r = take(&env);
        assert_eq!(r.read_files, 0, "{what}: no file read");
        assert_ne!(r.root, previous, "{what}: the tree changed");
        assert_eq!(r.root, take_fresh(&env, &format!("fresh-{i}")).root, "{what}: as built from scratch");
        assert_eq!(take(&env).root, r.root, "{what}: and the next snapshot finds it again");
        previous = r.root.clone();
    }
    assert_eq!(take(&env).nested_repos[0].commit, "2".repeat(40));
}

#[test]
fn a_walk_that_finds_files_changed_patches_the_cached_tree_into_the_one_built_from_scratch() {
    let env = Env::new();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
    let names = ["a", "b", "c.txt", "d/e", "d/f.rs", "d/g/h", "d/g/i.md", "j/k/l/m", "n-o", "n.o"];
    for (i, n) in names.iter().enumerate() {
        write(&env, n, &format!("file {i}"));
        age(&env, n);
    }
    take(&env);
    let (whole, _) = cache_rows(&env);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut deltas = 0;
    for step in 0..60 {
        let target = names[next(names.len())];
        let p = env.path(target);
        let what = match next(8) {
            0 if !p.is_dir() => {
                write(&env, target, &format!("step {step}"));
                if next(2) == 0 {
                    age(&env, target);
                }
                "written"
            }
            1 => {
                let _ = std::fs::remove_file(&p);
                "deleted"
            }
            2 if p.is_file() => {
                let mode = std::fs::metadata(&p).unwrap().permissions().mode();
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode ^ 0o100)).unwrap();
                "chmod-ed"
            }
            3 => {
                // A directory taking a file's place, or the other way round.
                if p.is_dir() {
                    std::fs::remove_dir_all(&p).unwrap();
                    write(&env, target, "a file again");
                } else {
                    let _ = std::fs::remove_file(&p);
                    write(&env, &format!("{target}/inner/x"), "under a directory now");
                }
                "swapped"
            }
            4 if p.is_file() => {
                std::fs::File::options().write(true).open(&p).unwrap().set_modified(old).unwrap();
                "touched"
            }
            5 => {
                write(&env, &format!("{target}.new/deep/file"), &format!("new {step}"));
                "added beside"
            }
            _ => "left alone",
        };
        let r = take(&env);
        let fresh = take_fresh(&env, &format!("fresh-{step}"));
        assert_eq!(r.root, fresh.root, "step {step}: {target} {what}: as built from scratch");
        assert_eq!((r.files, r.bytes), (fresh.files, fresh.bytes), "step {step}");
        assert_eq!(take(&env).root, r.root, "step {step}: and the next snapshot finds it again");
        let (now_whole, delta) = cache_rows(&env);
        assert_eq!(now_whole, whole, "step {step}: a few changes never rewrite the whole cache");
        deltas += usize::from(delta.is_some());
    }
    assert!(deltas > 50, "the changes went to the delta ({deltas} of 60 steps)");
    let report = maintenance::gc(&env.store).unwrap();
    assert!(maintenance::verify(&env.store, true).unwrap().clean, "after gc removed {}", report.objects_removed);
    let last = take(&env);
    assert_eq!(take_fresh(&env, "after-gc").root, last.root, "what the cache names survived gc");
}

#[test]
fn past_its_share_the_delta_is_folded_into_a_whole_cache() {
    let env = Env::new();
    for i in 0..1100 {
        let f = format!("d{}/f{i}", i % 7);
        write(&env, &f, "x");
        age(&env, &f);
    }
    take(&env);
    let (whole, _) = cache_rows(&env);
    write(&env, "d0/f0", "changed");
    take(&env);
    let (same, delta) = cache_rows(&env);
    assert_eq!((same == whole, delta.is_some()), (true, true), "one change: a delta");
    for i in 0..1100 {
        write(&env, &format!("d{}/f{i}", i % 7), "all changed");
    }
    let r = take(&env);
    let (rewritten, delta) = cache_rows(&env);
    assert_eq!((rewritten != whole, delta), (true, None), "1100 changes: the whole cache again, no delta");
    assert_eq!(r.root, take_fresh(&env, "fresh").root);
}

#[test]
fn files_gone_up_to_a_deltas_bound_make_a_delta_and_one_more_the_whole_cache() {
    // A cache of ~2,000 files may take a delta of 1,024 entries. A directory of files
    // removed from the middle (the gone files before the next one found) or from the end
    // (those after the last one found) counts whole.
    for (gone_dir, gone, delta_expected) in [("a", 1024, true), ("a", 1025, false), ("z", 1025, false)] {
        let env = Env::new();
        for (dir, n) in [
            ("a", if gone_dir == "a" { gone } else { 500 }),
            ("m", 1000),
            ("z", if gone_dir == "z" { gone } else { 1 }),
        ] {
            for i in 0..n {
                let f = format!("{dir}/f{i}");
                write(&env, &f, "x");
                age(&env, &f);
            }
        }
        take(&env);
        let (whole, _) = cache_rows(&env);
        std::fs::remove_dir_all(env.path(gone_dir)).unwrap();
        let r = take(&env);
        let (now, delta) = cache_rows(&env);
        let what = format!("{gone} files of {gone_dir}/ gone");
        assert_eq!((now == whole, delta.is_some()), (delta_expected, delta_expected), "{what}");
        assert_eq!(r.root, take_fresh(&env, "fresh").root, "{what}");
    }
}

#[test]
fn an_old_delta_put_back_under_a_newer_whole_cache_is_dropped_not_trusted() {
    let env = Env::new();
    for i in 0..1100 {
        write(&env, &format!("f{i}"), "x");
        age(&env, &format!("f{i}"));
    }
    write(&env, "a.txt", "one");
    age(&env, "a.txt");
    take(&env);
    write(&env, "a.txt", "two");
    age(&env, "a.txt");
    take(&env);
    let (_, stale) = cache_rows(&env);
    let stale = stale.expect("a delta");
    for i in 0..1100 {
        write(&env, &format!("f{i}"), "y");
        age(&env, &format!("f{i}"));
    }
    take(&env);
    assert_eq!(cache_rows(&env).1, None, "folded into a new whole cache");
    // The old delta names "two" for a.txt with its stat; put back, it would be laid over a
    // whole cache it was not written for.
    let mut txn = env.store.kv().begin().unwrap();
    txn.put("statcache-delta", env.session.id.as_bytes(), &stale).unwrap();
    txn.commit().unwrap();
    let r = take(&env);
    let why = r.stat_cache_dropped.as_deref().unwrap_or_default();
    assert!(why.contains("delta belongs to another cache"), "{why}");
    assert_eq!(r.read_files, 1101, "every file read in full");
    assert_eq!(cache_rows(&env).1, None);
    // A tampered byte in a delta is dropped the same way.
    write(&env, "a.txt", "three");
    take(&env);
    let (_, delta) = cache_rows(&env);
    let mut delta = delta.expect("a delta");
    let last = delta.len() - 1;
    delta[last] ^= 1;
    let mut txn = env.store.kv().begin().unwrap();
    txn.put("statcache-delta", env.session.id.as_bytes(), &delta).unwrap();
    txn.commit().unwrap();
    assert!(take(&env).stat_cache_dropped.is_some());
}

/// The piece keys stored for the session's whole stat cache.
fn piece_keys(env: &Env) -> Vec<Vec<u8>> {
    env.keys_in(crate::storage::schema::STATCACHE_PIECES)
}

#[test]
fn opening_a_whole_stat_cache_is_bounded_by_the_size_it_records_and_another_layout_is_not_read() {
    use crate::snapshot::pieces;
    let env = Env::new();
    write(&env, "a.txt", "a");
    take(&env);
    let key = env.session.id.as_bytes();
    let ns = crate::storage::schema::STATCACHE;
    assert_eq!(piece_keys(&env).len(), 1, "a small cache is one piece");
    let generation = [7u8; 16];
    let piece_key = pieces::key(&env.session.id, &generation, 0);
    let pieces_ns = crate::storage::schema::STATCACHE_PIECES;
    // `plain` as the one piece of a cache whose manifest counts `size` bytes; its load is
    // refused, and the largest allocation it made is returned.
    let load_in_pieces = |plain: &[u8], size: u64| {
        let piece = env.store.seal_bytes(pieces_ns, &piece_key, 1, plain).unwrap();
        let mut row = b"TBSP".to_vec();
        row.extend_from_slice(&pieces::Manifest { generation, pieces: 1, size }.to_bytes());
        let row = env.store.seal_bytes(ns, key, 1, &row).unwrap();
        let mut txn = env.store.kv().begin().unwrap();
        txn.put(pieces_ns, &piece_key, &piece).unwrap();
        txn.put(ns, key, &row).unwrap();
        txn.commit().unwrap();
        turnback_fuzz::take_largest();
        let err = crate::snapshot::statcache::StatCache::load(&env.store, &env.session.id).unwrap_err();
        assert_eq!(err.code, crate::error::ErrorCode::Corrupt);
        assert!(!err.message.contains("missing"), "refused for what it claims, not a piece not found: {err:?}");
        turnback_fuzz::take_largest()
    };
    // 2,000,000 entries claimed by a few bytes: refused before room is made for them (the
    // count is held to the recorded size; at the 256 MiB record bound it would be 200 MB).
    let mut claims = b"TBS6".to_vec();
    claims.extend_from_slice(&0i128.to_le_bytes());
    crate::base::varint::put(&mut claims, 2_000_000);
    for size in [claims.len() as u64, 1 << 30] {
        let largest = load_in_pieces(&claims, size);
        assert!(largest < 1 << 20, "a {largest}-byte allocation for a manifest counting {size} bytes");
    }
    // 3,000 paths each sharing 1 MiB with the one before, from about 1 MiB of plaintext.
    let mut plain = b"TBS6".to_vec();
    plain.extend_from_slice(&0i128.to_le_bytes());
    crate::base::varint::put(&mut plain, 3000);
    crate::base::varint::put(&mut plain, 0);
    crate::base::varint::put(&mut plain, 1 << 20);
    plain.extend(std::iter::repeat_n(b'a', 1 << 20));
    for _ in 1..3000 {
        crate::base::varint::put(&mut plain, 1 << 20);
        crate::base::varint::put(&mut plain, 0);
    }
    load_in_pieces(&plain, plain.len() as u64);
    // An unreleased build's layout (the whole cache sealed in its own row) is not read:
    // no cache, so the next snapshot reads every file.
    let sealed = env.store.seal_bytes(ns, key, 1, &claims).unwrap();
    let mut txn = env.store.kv().begin().unwrap();
    txn.put(ns, key, &sealed).unwrap();
    txn.commit().unwrap();
    let none = crate::snapshot::statcache::StatCache::load(&env.store, &env.session.id).unwrap();
    assert!(none.entries.is_empty());
}

#[test]
fn a_whole_stat_cache_in_pieces_opens_only_from_its_own_pieces_in_their_order() {
    let env = Env::new();
    // Enough files for several pieces (4 KiB each in tests).
    for i in 0..600 {
        write(&env, &format!("d{}/f{i}", i % 9), "x");
        age(&env, &format!("d{}/f{i}", i % 9));
    }
    take(&env);
    let keys = piece_keys(&env);
    assert!(keys.len() >= 3, "{} pieces", keys.len());
    let ns = crate::storage::schema::STATCACHE_PIECES;
    let value = |k: &[u8]| env.store.kv().get(ns, k).unwrap().unwrap();
    let put = |k: &[u8], v: Option<&[u8]>| {
        let mut txn = env.store.kv().begin().unwrap();
        match v {
            Some(v) => txn.put(ns, k, v).unwrap(),
            None => assert!(txn.delete(ns, k).unwrap()),
        }
        txn.commit().unwrap();
    };
    let loads = || crate::snapshot::statcache::StatCache::load(&env.store, &env.session.id).map(|c| c.entries.len());
    assert_eq!(loads().unwrap(), 600);
    let (first, second) = (value(&keys[0]), value(&keys[1]));
    // The same piece's key with its generation's first byte changed.
    let other_generation = |key: &[u8]| {
        let mut other = key.to_vec();
        let at = other.len() - 4 - 16;
        other[at] ^= 1;
        other
    };
    // Each attack, then the pieces put back: the cache opens again.
    type Step<'a> = Box<dyn Fn() + 'a>;
    let attacks: [(&str, Step, Step); 5] = [
        (
            "a byte altered",
            Box::new(|| {
                let mut v = first.clone();
                let last = v.len() - 1;
                v[last] ^= 1;
                put(&keys[0], Some(&v));
            }),
            Box::new(|| put(&keys[0], Some(&first))),
        ),
        (
            "two pieces swapped",
            Box::new(|| {
                put(&keys[0], Some(&second));
                put(&keys[1], Some(&first));
            }),
            Box::new(|| {
                put(&keys[0], Some(&first));
                put(&keys[1], Some(&second));
            }),
        ),
        ("a piece missing", Box::new(|| put(&keys[1], None)), Box::new(|| put(&keys[1], Some(&second)))),
        (
            "a piece of another length, sealed under its own key",
            Box::new(|| {
                let plain = env.store.open_bytes(ns, &keys[0], &first).unwrap();
                let sealed = env.store.seal_bytes(ns, &keys[0], 1, &plain[..plain.len() - 1]).unwrap();
                put(&keys[0], Some(&sealed));
            }),
            Box::new(|| put(&keys[0], Some(&first))),
        ),
        (
            "a piece sealed for another generation",
            Box::new(|| {
                let plain = env.store.open_bytes(ns, &keys[0], &first).unwrap();
                let sealed = env.store.seal_bytes(ns, &other_generation(&keys[0]), 1, &plain).unwrap();
                put(&keys[0], Some(&sealed));
            }),
            Box::new(|| put(&keys[0], Some(&first))),
        ),
    ];
    // `verify --deep` finds each one as the cache of the session, derived data.
    let cache_problem = || {
        let report = maintenance::verify(&env.store, true).unwrap();
        report.problems.iter().any(|p| {
            p.what == format!("stat cache of session {}", env.session.id) && p.recovery_actions[0].contains("derived")
        })
    };
    assert!(!cache_problem() && maintenance::verify(&env.store, true).unwrap().clean);
    for (what, attack, undo) in &attacks {
        attack();
        let err = loads().unwrap_err();
        assert_eq!(err.code, crate::error::ErrorCode::Corrupt, "{what}: {err:?}");
        assert!(cache_problem(), "{what}: verify --deep");
        undo();
        assert_eq!(loads().unwrap(), 600, "{what}, undone");
        assert!(maintenance::verify(&env.store, true).unwrap().clean, "{what}, undone");
    }
    // A stray piece (another generation's) is named by no cache: gc takes it, and only it.
    put(&other_generation(&keys[0]), Some(&first));
    assert_eq!(piece_keys(&env).len(), keys.len() + 1);
    maintenance::gc(&env.store).unwrap();
    assert_eq!(piece_keys(&env), keys);
    // Damaged, the cache is dropped with its pieces, and the snapshot reads everything.
    attacks[0].1();
    let (_, dropped) = crate::snapshot::statcache::StatCache::load_or_drop(&env.store, &env.session.id).unwrap();
    assert!(dropped.is_some());
    assert_eq!(cache_rows(&env), (None, None));
    assert!(piece_keys(&env).is_empty(), "its pieces went with it");
    let r = take(&env);
    assert_eq!(r.read_files, 600);
    let rewritten = piece_keys(&env);
    assert!(!rewritten.is_empty() && rewritten.iter().all(|k| !keys.contains(k)), "a new generation's pieces only");
    assert_eq!(loads().unwrap(), 600);
    // Deleted without the session's lock (a cancelled turn's snapshot discarded), the cache
    // leaves its pieces to gc: another process may be storing pieces of that session.
    let mut txn = env.store.kv().begin().unwrap();
    crate::snapshot::statcache::delete_in(&mut *txn, &env.session.id).unwrap();
    txn.commit().unwrap();
    assert_eq!(cache_rows(&env), (None, None));
    assert_eq!(piece_keys(&env), rewritten);
    maintenance::gc(&env.store).unwrap();
    assert!(piece_keys(&env).is_empty());
}

#[test]
fn a_whole_caches_ids_left_in_its_pieces_are_read_at_their_place_and_through_its_delta() {
    use crate::error::ErrorCode;
    use crate::snapshot::statcache::StatCache;
    let env = Env::new();
    // Distinct contents, so that every id differs: enough for several pieces (4 KiB each
    // in tests), so that the id column starts inside one and ids straddle their ends.
    for i in 0..600 {
        write(&env, &format!("d{}/f{i}", i % 9), &format!("content {i}"));
        age(&env, &format!("d{}/f{i}", i % 9));
    }
    // Each cached path's id as the snapshot `r` recorded it, in the cache's order.
    let expected = |r: &SnapshotRecord, cache: &StatCache| -> Vec<ContentId> {
        let files = paths(&env, r);
        (0..cache.entries.len())
            .map(|i| match &files[std::str::from_utf8(cache.entries.path(i)).unwrap()] {
                NodeKind::File(id) => *id,
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let r = take(&env);
    assert!(piece_keys(&env).len() >= 3);
    let cache = StatCache::load(&env.store, &env.session.id).unwrap();
    let all = cache.all_ids(&env.store).unwrap();
    assert!(all == expected(&r, &cache), "every id as the snapshot recorded it");
    assert_eq!(all.iter().collect::<std::collections::HashSet<_>>().len(), 600, "600 distinct ids");
    // Asked out of order, and again: each from its place.
    let scattered = [599, 0, 313, 128, 128, 1, 598];
    let got = cache.ids_of(&env.store, scattered).unwrap();
    assert_eq!(got, scattered.map(|i| all[i]));

    // A delta over it: a file changed, one gone, one new; each id comes from the delta or
    // from the whole cache's pieces, at the place of its whole entry.
    write(&env, "d0/f0", "changed");
    age(&env, "d0/f0");
    std::fs::remove_file(env.path("d4/f4")).unwrap();
    write(&env, "d4/f4a", "new");
    age(&env, "d4/f4a");
    let r = take(&env);
    assert_eq!(r.read_files, 2);
    assert!(cache_rows(&env).1.is_some(), "a delta was written");
    let cache = StatCache::load(&env.store, &env.session.id).unwrap();
    assert_eq!(cache.entries.len(), 600);
    assert!(cache.all_ids(&env.store).unwrap() == expected(&r, &cache), "through the delta");
    // The next snapshot finds nothing changed, asking no id of the cache.
    let reads = || crate::snapshot::pieces::OPENED_AT.with(|n| n.get());
    let before = reads();
    assert_eq!(take(&env).read_files, 0);
    assert_eq!(reads(), before, "no id read from the pieces");
    // One file changed: the ids of that file's entry only (one read).
    write(&env, "d1/f1", "changed too");
    age(&env, "d1/f1");
    assert_eq!(take(&env).read_files, 1);
    assert!((1..=2).contains(&(reads() - before)), "one id read: its piece, or the two it straddles");
    // Every id, in order: each piece opened at most once.
    let cache = StatCache::load(&env.store, &env.session.id).unwrap();
    let before = reads();
    cache.all_ids(&env.store).unwrap();
    assert!(reads() - before <= piece_keys(&env).len(), "{} pieces opened", reads() - before);

    // Its pieces each a byte shorter, sealed under their own keys, after the cache was
    // loaded: an id's place is computed from their length, so asking for one is `corrupt`.
    let ns = crate::storage::schema::STATCACHE_PIECES;
    let originals: Vec<(Vec<u8>, Vec<u8>)> =
        piece_keys(&env).into_iter().map(|k| (k.clone(), env.store.kv().get(ns, &k).unwrap().unwrap())).collect();
    for (key, sealed) in &originals {
        let plain = env.store.open_bytes(ns, key, sealed).unwrap();
        let shorter = env.store.seal_bytes(ns, key, 1, &plain[1..]).unwrap();
        let mut txn = env.store.kv().begin().unwrap();
        txn.put(ns, key, &shorter).unwrap();
        txn.commit().unwrap();
    }
    let err = cache.ids_of(&env.store, [599]).unwrap_err();
    assert_eq!(err.code, ErrorCode::Corrupt, "{err:?}");
    for (key, sealed) in &originals {
        let mut txn = env.store.kv().begin().unwrap();
        txn.put(ns, key, sealed).unwrap();
        txn.commit().unwrap();
    }
    assert!(cache.ids_of(&env.store, [599]).is_ok(), "put back, they read again");
    // Its pieces altered after the cache was loaded: asking for an id is `corrupt`.
    for key in piece_keys(&env) {
        let mut v = env.store.kv().get(ns, &key).unwrap().unwrap();
        let n = v.len() - 1;
        v[n] ^= 1;
        let mut txn = env.store.kv().begin().unwrap();
        txn.put(ns, &key, &v).unwrap();
        txn.commit().unwrap();
    }
    let err = cache.ids_of(&env.store, [599]).unwrap_err();
    assert_eq!(err.code, ErrorCode::Corrupt, "{err:?}");
}

#[test]
fn random_changes_leave_a_cache_whose_every_id_from_its_pieces_and_delta_is_the_latest_snapshots() {
    use crate::snapshot::statcache::StatCache;
    let env = Env::new();
    let mut rng = turnback_fuzz::mutate::Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut next = |m: u64| rng.below(m as usize) as u64;
    let path = |n: u64| format!("d{}/f{n}", n % 7);
    for n in 0..300 {
        write(&env, &path(n), &format!("{n}"));
        age(&env, &path(n));
    }
    take(&env);
    assert!(piece_keys(&env).len() >= 3, "the whole cache spans pieces");
    for round in 0..25 {
        // A few files changed, removed or added (each settled), as an agent's turn does.
        for _ in 0..1 + next(6) {
            let n = next(400);
            let file = env.path(&path(n));
            if next(3) == 0 && file.exists() {
                std::fs::remove_file(&file).unwrap();
            } else {
                write(&env, &path(n), &format!("{n} in round {round}"));
                age(&env, &path(n));
            }
        }
        let r = take(&env);
        // The cache (whole, in pieces, with its delta) holds exactly the snapshot's files,
        // each with the id the snapshot recorded.
        let cache = StatCache::load(&env.store, &env.session.id).unwrap();
        let files: BTreeMap<String, NodeKind> =
            paths(&env, &r).into_iter().filter(|(_, k)| matches!(k, NodeKind::File(_))).collect();
        let cached: Vec<String> =
            (0..cache.entries.len()).map(|i| String::from_utf8(cache.entries.path(i).to_vec()).unwrap()).collect();
        let mut listed: Vec<&String> = files.keys().collect();
        listed.sort_by(|a, b| crate::fs::walk::component_order(a.as_bytes(), b.as_bytes()));
        assert!(cached.iter().eq(listed.iter().copied()), "round {round}: the cache's files are the snapshot's");
        let ids = cache.all_ids(&env.store).unwrap();
        for (i, p) in cached.iter().enumerate() {
            assert_eq!(files[p], NodeKind::File(ids[i]), "round {round}: {p}");
        }
    }
    assert!(cache_rows(&env).1.is_some(), "the last rounds were laid as a delta over the pieces");
}

#[test]
fn a_large_trees_nodes_stored_ahead_of_a_cancelled_commit_are_unreferenced_and_gc_removes_them() {
    use std::sync::atomic::{AtomicBool, Ordering};
    // Enough files in enough directories that their nodes pass what is held for the commit
    // (a small threshold in tests).
    let filled = || {
        let env = Env::new();
        for i in 0..3000 {
            write(&env, &format!("d{}/e{}/f{i}", i % 30, i % 7), &format!("{i}"));
        }
        env
    };
    let env = filled();
    let objects = |env: &Env| env.keys_in(crate::storage::schema::OBJECTS).len();
    let before = objects(&env);
    let cancel = AtomicBool::new(false);
    // Set when the one batch of files starts: the only check after it is the commit's.
    let progress = |_: u64, _: u64| cancel.store(true, Ordering::SeqCst);
    let opts = snapshot::TakeOptions {
        kind: Some(SnapshotKind::AdHoc),
        cancel: Some(&cancel),
        progress: Some(&progress),
        ..Default::default()
    };
    let hooks = crate::session::turn::Hooks::new(&env.store);
    let source = crate::session::turn::source(&env.ws, &env.session);
    let err = snapshot::take(&env.store, source, &opts, &hooks).unwrap_err();
    assert_eq!(err.code, crate::error::ErrorCode::Cancelled);
    assert!(snapshot::list(&env.store, &env.session.id).unwrap().is_empty(), "nothing recorded");
    let ahead = objects(&env) - before;
    assert!(ahead > 0, "the tree's nodes were stored ahead of the commit");
    assert!(!piece_keys(&env).is_empty(), "the stat cache's pieces were stored ahead of the commit");
    assert_eq!(cache_rows(&env), (None, None), "and nothing names them");
    let report = maintenance::gc(&env.store).unwrap();
    assert!(report.objects_removed >= ahead as u64, "{} < {ahead}", report.objects_removed);
    assert_eq!(objects(&env), before, "gc removed every node stored ahead");
    assert!(piece_keys(&env).is_empty(), "and every piece");
    // Taken again, the snapshot records the whole tree and verifies.
    let r = take(&env);
    assert_eq!(r.files, 3000);
    assert_eq!(paths(&env, &r).len(), 3000);
    assert!(maintenance::verify(&env.store, true).unwrap().clean);
    // In a store of its own, what it reports stored is all it wrote, nodes stored ahead
    // included (the session's budget counts it).
    let fresh = filled();
    let r = take(&fresh);
    let bytes = |ns| {
        let mut n = 0u64;
        fresh
            .store
            .kv()
            .scan(ns, b"", &mut |_, v| {
                n += v.len() as u64;
                Ok(true)
            })
            .unwrap();
        n
    };
    use crate::storage::schema::{BLOCKS, OBJECTS, PACKED};
    assert_eq!(r.stored_bytes, bytes(BLOCKS) + bytes(PACKED) + bytes(OBJECTS));
}
