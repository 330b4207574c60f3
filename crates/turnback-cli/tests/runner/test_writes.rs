//! Writes under stress (issue 12): a full disk during an undo, a crash in the middle of a
//! large write, and `gc` giving the space it frees back to the file system.

use crate::common::Env;

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
