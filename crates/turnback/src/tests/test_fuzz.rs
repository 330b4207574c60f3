//! Fuzz targets for every decoder of bytes that come from disk or from an agent's files:
//! the sealed envelope, content objects, pack blocks and index entries, tree nodes, the stat
//! cache, history entries, settings.toml and each transcript importer.
//!
//! Each target replays its committed corpus (`crates/turnback/fuzz/<target>/`, with the
//! inputs that once failed under `regressions/`), then mutates it for `TURNBACK_FUZZ_SECS`
//! (see `turnback-fuzz`). Sealed formats are fuzzed twice over: as the stored bytes (header,
//! nonce, ciphertext: every change must be `corrupt`), and behind the seal — the mutated
//! plaintext sealed with the right key and binding, so the decoder after authentication
//! meets it as a store written by a buggy or older turnback would present it. Every input
//! must give a value or a typed error: no panic, no hang, and no allocation sized by an
//! unchecked length (the tracker below is this test binary's allocator).

use std::path::PathBuf;

use turnback_fuzz::{Fuzz, Shape};

use crate::error::{Error, ErrorCode};
use crate::session::history::{self, NewEntry, Role, Selection, ToolCall};
use crate::session::import::Format;
use crate::snapshot::statcache::StatCache;
use crate::snapshot::{SnapshotKind, tree};
use crate::storage::content::ContentId;
use crate::storage::crypto::SecretKey;
use crate::storage::kv::{KeyValueStore, MemoryKv};
use crate::storage::settings::{Settings, SettingsOverrides};
use crate::storage::store::Store;
use crate::storage::{object, pack, schema};
use crate::tests::common::Env;

#[global_allocator]
static ALLOC: turnback_fuzz::Tracking = turnback_fuzz::Tracking;

fn corpus(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz").join(target)
}

/// The outcome of a decode: `ok`, or the error's code and message with numbers left out
/// (the message names the check that failed; that guides the search, the values do not).
fn outcome<T>(r: &crate::error::Result<T>) -> String {
    match r {
        Ok(_) => "ok".to_string(),
        Err(e) => {
            let text = format!("{}: {}", e.code.as_str(), e.message);
            text.chars().filter(|c| !c.is_ascii_digit()).collect()
        }
    }
}

/// The same store held in memory (every table copied, keys included, so the same master
/// key opens it): targets that write a value per input run without a disk commit each.
fn in_memory(env: &Env) -> Store {
    let kv = MemoryKv::new();
    let mut txn = kv.begin().unwrap();
    for table in schema::TABLES {
        env.store
            .kv()
            .scan(table.name, b"", &mut |k, v| {
                txn.put(table.name, k, v)?;
                Ok(true)
            })
            .unwrap();
    }
    txn.commit().unwrap();
    let master = SecretKey::from_slice(&base64_key()).unwrap();
    Store::with_backend(env.dir.path().join("memory"), Box::new(kv), master, Settings::default()).unwrap()
}

fn base64_key() -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(crate::tests::common::KEY).unwrap()
}

/// A workspace with files of every kind, snapshotted: real trees, objects, blocks, index
/// entries and a stat cache to start from.
fn populated() -> Env {
    let env = Env::new();
    for i in 0..12 {
        let p = env.path(&format!("src/m{}/f{i}.rs", i % 3));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("pub fn f{i}() -> u32 {{ {i} }}\n").repeat(i + 1)).unwrap();
    }
    std::fs::write(env.path("big.bin"), (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>()).unwrap();
    std::os::unix::fs::symlink("src/m0", env.path("link")).unwrap();
    std::fs::write(env.path("empty"), b"").unwrap();
    env.snapshot(SnapshotKind::AdHoc).unwrap();
    env
}

fn value(env: &Env, ns: &'static str, key: &[u8]) -> Vec<u8> {
    env.store.kv().get(ns, key).unwrap().expect("a stored value")
}

fn put(store: &Store, ns: &'static str, key: &[u8], value: &[u8]) {
    let mut txn = store.kv().begin().unwrap();
    txn.put(ns, key, value).unwrap();
    txn.commit().unwrap();
}

/// The plaintext of the sealed value stored at `ns`/`key`.
fn opened(env: &Env, ns: &'static str, key: &[u8]) -> Vec<u8> {
    env.store.open_bytes(ns, key, &value(env, ns, key)).unwrap()
}

/// Seals `plain` for `ns`/`key` and stores it there.
fn seal_and_put(store: &Store, ns: &'static str, key: &[u8], plain: &[u8]) {
    put(store, ns, key, &store.seal_bytes(ns, key, 1, plain).unwrap());
}

/// An error a stored byte string may give: `corrupt`, or a key version the store has no
/// key for.
fn stored_error(e: &Error) -> bool {
    matches!(e.code, ErrorCode::Corrupt | ErrorCode::KeyUnavailable | ErrorCode::KeyMismatch)
}

#[test]
fn fuzz_sealed_envelope() {
    let env = populated();
    let session = env.session.id.clone();
    let sealed = value(&env, schema::STATCACHE, session.as_bytes());
    let mut fuzz =
        Fuzz::new("sealed-envelope", &corpus("sealed-envelope"), Shape::Bytes).seed("stat cache", sealed.clone());
    let record = env.store.seal_bytes(schema::HISTORY, b"k", 1, br#"{"role":"user","content":"hi"}"#).unwrap();
    fuzz = fuzz.seed("small record", record.clone());
    // A piece of the whole stat cache: the largest sealed frame the store holds.
    let piece_key = env.keys_in(schema::STATCACHE_PIECES).remove(0);
    fuzz = fuzz.seed("stat cache piece", value(&env, schema::STATCACHE_PIECES, &piece_key));
    fuzz.run(|input| {
        let r = env.store.open_bytes(schema::STATCACHE, session.as_bytes(), input);
        let other = env.store.open_bytes(schema::HISTORY, b"k", input);
        for r in [&r, &other] {
            if let Err(e) = r {
                assert!(stored_error(e), "{e:?}");
            }
        }
        // Only the bytes sealed for that very record open.
        if r.is_ok() {
            assert_eq!(input, sealed.as_slice(), "altered bytes opened");
        }
        if other.is_ok() {
            assert_eq!(input, record.as_slice(), "altered bytes opened");
        }
        outcome(&r) + &outcome(&other)
    });
}

#[test]
fn fuzz_content_object() {
    let env = Env::new();
    let mut txn = env.store.kv().begin().unwrap();
    let (id, _) = object::put(env.store.keys(), txn.as_mut(), b"fn main() { println!(\"hi\"); }\n").unwrap();
    txn.commit().unwrap();
    let stored = value(&env, schema::OBJECTS, &id.0);
    Fuzz::new("content-object", &corpus("content-object"), Shape::Bytes).seed("object", stored.clone()).run(|input| {
        let r = object::decode(env.store.keys(), &id, input);
        match &r {
            Ok((_, bytes)) => assert_eq!(bytes.as_slice(), b"fn main() { println!(\"hi\"); }\n"),
            Err(e) => assert!(stored_error(e), "{e:?}"),
        }
        outcome(&r)
    });
}

#[test]
fn fuzz_pack_block() {
    let env = populated();
    let blocks = env.keys_in(schema::BLOCKS);
    let id: pack::BlockId = blocks[0].as_slice().try_into().unwrap();
    let stored = value(&env, schema::BLOCKS, &id);
    Fuzz::new("pack-block", &corpus("pack-block"), Shape::Bytes).seed("block", stored.clone()).run(|input| {
        let r = pack::decode_block(env.store.keys(), &id, input);
        if let Err(e) = &r {
            assert!(stored_error(e), "{e:?}");
        } else {
            assert_eq!(input, stored.as_slice(), "altered bytes opened");
        }
        outcome(&r)
    });
}

/// Index entries are stored plain (ids, offsets, sizes): a changed one must read as
/// `corrupt` or as the same verified bytes, never as other content.
#[test]
fn fuzz_pack_index() {
    let env = populated();
    let ids = env.keys_in(schema::PACKED);
    let mut fuzz = Fuzz::new("pack-index", &corpus("pack-index"), Shape::Bytes);
    for (i, id) in ids.iter().take(6).enumerate() {
        fuzz = fuzz.seed(&format!("entry {i}"), value(&env, schema::PACKED, id));
    }
    let id = ContentId(ids[0].as_slice().try_into().unwrap());
    let original = value(&env, schema::PACKED, &id.0);
    let (_, expected) = pack::read(env.store.keys(), env.store.kv(), &id).unwrap().unwrap();
    let store = in_memory(&env);
    fuzz.run(|input| {
        put(&store, schema::PACKED, &id.0, input);
        let decoded = pack::Location::decode(input);
        let r = pack::read(store.keys(), store.kv(), &id);
        put(&store, schema::PACKED, &id.0, &original);
        match &r {
            Ok(Some((_, bytes))) => assert_eq!(bytes, &expected, "an altered index entry read as other content"),
            Ok(None) => unreachable!("the entry is there"),
            Err(e) => assert!(stored_error(e), "{e:?}"),
        }
        outcome(&decoded) + &outcome(&r)
    });
}

#[test]
fn fuzz_tree_node() {
    let env = populated();
    let mut fuzz = Fuzz::new("tree-node", &corpus("tree-node"), Shape::Bytes);
    for (i, node) in tree_nodes(&env).into_iter().enumerate() {
        fuzz = fuzz.seed(&format!("node {i}"), node);
    }
    fuzz.run(|input| {
        let r = tree::decode(input);
        match &r {
            // What decodes encodes to the same bytes: nothing is read that was not there.
            Ok(nodes) => assert_eq!(tree::encode(nodes.clone()), input, "a node that does not round-trip"),
            Err(e) => assert_eq!(e.code, ErrorCode::Corrupt, "{e:?}"),
        }
        outcome(&r)
    });
}

/// The plaintext of every directory node of the session's snapshot.
fn tree_nodes(env: &Env) -> Vec<Vec<u8>> {
    let cache = StatCache::load(&env.store, &env.session.id).unwrap();
    cache.tree_ids.iter().map(|id| env.store.read_object(id).unwrap().1).collect()
}

/// Behind the seal: the stat cache's plaintext mutated, sealed for the session, loaded.
#[test]
fn fuzz_stat_cache() {
    let env = populated();
    let session = env.session.id.clone();
    // The whole cache's plaintext, from its pieces; each mutation is sealed in the cache's
    // own row (the older layout), which the same decoder reads.
    let plain: Vec<u8> =
        env.keys_in(schema::STATCACHE_PIECES).iter().flat_map(|k| opened(&env, schema::STATCACHE_PIECES, k)).collect();
    assert!(plain.starts_with(b"TBS6"), "the seed is a whole cache");
    let store = in_memory(&env);
    Fuzz::new("stat-cache", &corpus("stat-cache"), Shape::Bytes).seed("stat cache", plain).run(|input| {
        seal_and_put(&store, schema::STATCACHE, session.as_bytes(), input);
        let r = StatCache::load(&store, &session);
        if let Err(e) = &r {
            assert_eq!(e.code, ErrorCode::Corrupt, "{e:?}");
        }
        outcome(&r)
    });
}

/// Behind the seal: a stat cache delta's plaintext mutated, sealed for the session, laid
/// over the whole cache it was written for: `corrupt`, or a cache still in walk order.
#[test]
fn fuzz_stat_cache_delta() {
    let env = populated();
    let session = env.session.id.clone();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
    std::fs::write(env.path("src/m1/f4.rs"), "changed\n").unwrap();
    std::fs::write(env.path("src/m2/new.rs"), "new\n").unwrap();
    std::fs::remove_file(env.path("src/m0/f3.rs")).unwrap();
    for f in ["src/m1/f4.rs", "src/m2/new.rs"] {
        std::fs::File::options().write(true).open(env.path(f)).unwrap().set_modified(old).unwrap();
    }
    env.snapshot(SnapshotKind::AdHoc).unwrap();
    let plain = opened(&env, schema::STATCACHE_DELTA, session.as_bytes());
    let store = in_memory(&env);
    Fuzz::new("stat-cache-delta", &corpus("stat-cache-delta"), Shape::Bytes).seed("delta", plain).run(|input| {
        seal_and_put(&store, schema::STATCACHE_DELTA, session.as_bytes(), input);
        let r = StatCache::load(&store, &session);
        match &r {
            Err(e) => assert_eq!(e.code, ErrorCode::Corrupt, "{e:?}"),
            Ok(cache) => {
                let order = cache.entries.in_order();
                assert!(order, "a delta laid over the cache left it out of walk order");
            }
        }
        outcome(&r)
    });
}

/// Behind the seal: a history entry's JSON mutated, sealed under its key, read back with
/// the session's history.
#[test]
fn fuzz_history_entry() {
    let env = Env::new();
    let session = env.session.id.clone();
    let mut reply = NewEntry::new(Role::Assistant, "Done: the lexer reads tokens.".into());
    reply.thinking = Some("read lexer.rs first".into());
    reply.tool_calls = Some(vec![ToolCall {
        name: "Bash".into(),
        input: serde_json::json!({ "command": "cargo test" }),
        output: Some("ok".into()),
        error: None,
    }]);
    let entries = [
        history::entry_of("turn-1".into(), NewEntry::prompt("turn-1", "Write a lexer".into())),
        history::entry_of("turn-1".into(), reply),
    ];
    history::append_prepared(&env.store, &session, &entries).unwrap();
    let keys = env.keys_in(schema::HISTORY);
    let mut fuzz = Fuzz::new("history-entry", &corpus("history-entry"), Shape::Json);
    for (i, key) in keys.iter().enumerate() {
        let sealed = value(&env, schema::HISTORY, key);
        fuzz = fuzz.seed(&format!("entry {i}"), env.store.open_bytes(schema::HISTORY, key, &sealed).unwrap());
    }
    let key = keys[1].clone();
    let store = in_memory(&env);
    fuzz.run(|input| {
        let sealed = store.seal_bytes(schema::HISTORY, &key, 1, input).unwrap();
        put(&store, schema::HISTORY, &key, &sealed);
        let r = history::read(&store, &session, &Selection::All);
        if let Err(e) = &r {
            assert_eq!(e.code, ErrorCode::Corrupt, "{e:?}");
        }
        outcome(&r)
    });
}

#[test]
fn fuzz_settings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("settings.toml");
    let fuzz = Fuzz::new("settings", &corpus("settings"), Shape::Bytes);
    fuzz.seed("default file", crate::storage::settings::DEFAULT_FILE.as_bytes().to_vec()).run(|input| {
        std::fs::write(&path, input).unwrap();
        let r = Settings::load(&path, &SettingsOverrides::default());
        if let Err(e) = &r {
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{e:?}");
        }
        outcome(&r)
    });
}

fn fuzz_importer(target: &str, format: Format, shape: Shape) {
    Fuzz::new(target, &corpus(target), shape).run(|input| {
        let text = String::from_utf8_lossy(input);
        let r = format.parse(&text);
        match &r {
            // How much was read guides the search deeper into the format.
            Ok(parsed) => format!("ok: {} turns, {} rows skipped", parsed.turns.len(), parsed.skipped_rows.min(8)),
            Err(e) => {
                assert_eq!(e.code, ErrorCode::InvalidArgument, "{e:?}");
                outcome(&r)
            }
        }
    });
}

#[test]
fn fuzz_import_claude_code() {
    fuzz_importer("import-claude-code", Format::ClaudeCode, Shape::JsonLines);
}

#[test]
fn fuzz_import_codex() {
    fuzz_importer("import-codex", Format::Codex, Shape::JsonLines);
}

#[test]
fn fuzz_import_gemini() {
    fuzz_importer("import-gemini", Format::Gemini, Shape::JsonLines);
}

#[test]
fn fuzz_import_opencode() {
    fuzz_importer("import-opencode", Format::Opencode, Shape::Json);
}
