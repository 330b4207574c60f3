//! The master key (DESIGN §2.3): where it is found, when it may be created, and that a
//! missing or wrong key stops every command without ever making a replacement.

use serde_json::Value;

use crate::common::{Env, chmod, files_under, key_b64, mode_of, str_at};

/// Every command, with arguments that would otherwise succeed on the prepared store.
fn every_command(opid: &str, checkpoint: &str) -> Vec<(Vec<String>, Option<&'static [u8]>)> {
    let cmds: Vec<(Vec<&str>, Option<&'static [u8]>)> = vec![
        (vec!["init"], None),
        (vec!["fs", "write", "a.txt"], Some(b"replaced\n")),
        (vec!["fs", "create", "new.txt"], Some(b"new\n")),
        (vec!["fs", "edit", "a.txt", "--old", "alpha", "--new", "omega"], None),
        (vec!["fs", "delete", "a.txt"], None),
        (vec!["stage", "a.txt"], None),
        (vec!["commit", opid], None),
        (vec!["checkpoints"], None),
        (vec!["checkpoints", "--all"], None),
        (vec!["inspect", checkpoint], None),
        (vec!["verify"], None),
        (vec!["verify", "--deep"], None),
        (vec!["du"], None),
        (vec!["gc"], None),
        (vec!["reconcile"], None),
        (vec!["key", "status"], None),
        (vec!["key", "rotate"], None),
        (vec!["key", "rotate", "--reencrypt"], None),
    ];
    cmds.into_iter().map(|(args, stdin)| (args.into_iter().map(String::from).collect(), stdin)).collect()
}

/// A store holding a committed checkpoint of `a.txt` and an external stage awaiting
/// commit; returns (operation id of the stage, checkpoint id of the write).
fn store_with_data(env: &Env) -> (String, String) {
    let written = env.json_with(&["fs", "write", "a.txt"], Some(b"alpha\n"));
    let staged = env.json(&["stage", "a.txt"]);
    (str_at(&staged, "/operationId").to_string(), str_at(&written, "/checkpointId").to_string())
}

fn key_versions(env: &Env) -> (u64, Vec<(u64, u64)>) {
    let status = env.json(&["key", "status"]);
    let current = status["currentVersion"].as_u64().expect("currentVersion");
    let versions = status["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| (v["version"].as_u64().expect("version"), v["objects"].as_u64().expect("objects")))
        .collect();
    (current, versions)
}

#[test]
fn default_key_file_is_created_owner_only_in_an_owner_only_directory() {
    let env = Env::without_key();
    let init = env.json(&["init"]);
    let key_file = env.default_key_file();
    assert!(str_at(&init, "/keySource").contains(&*key_file.to_string_lossy()), "{init:#}");
    assert_eq!(mode_of(&key_file), 0o600, "key file mode");
    assert_eq!(mode_of(key_file.parent().unwrap()), 0o700, "key directory mode");
    let text = std::fs::read_to_string(&key_file).expect("read key file");
    use base64::Engine;
    let key = base64::engine::general_purpose::STANDARD.decode(text.trim()).expect("key file holds base64");
    assert_eq!(key.len(), 32, "a 256-bit master key");

    // Later commands find the same key.
    env.ok(&["fs", "write", "a.txt"], Some(b"alpha\n"));
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), text, "the key file never changes");
    env.assert_verify_clean();
    assert_eq!(env.checkpoints().len(), 1);
}

#[test]
fn missing_key_file_stops_every_command_and_is_never_recreated() {
    let env = Env::without_key();
    let (opid, checkpoint) = store_with_data(&env);
    let key_file = env.default_key_file();
    let key_bytes = std::fs::read(&key_file).expect("key file");
    std::fs::remove_file(&key_file).expect("remove key file");

    for (args, stdin) in every_command(&opid, &checkpoint) {
        let failure = env.fail(&args, stdin);
        assert_eq!((failure.exit, failure.code.as_str()), (1, "key-unavailable"), "turnback {args:?}: {failure:?}");
        assert!(!key_file.exists(), "turnback {args:?} made a new key file");
        let in_dir = files_under(key_file.parent().unwrap());
        assert!(in_dir.is_empty(), "turnback {args:?} left files in the key directory: {in_dir:?}");
        assert_eq!(env.read("a.txt").as_deref(), Some(&b"alpha\n"[..]), "turnback {args:?} touched the workspace");
        assert_eq!(env.read("new.txt"), None, "turnback {args:?} touched the workspace");
    }

    // Without the key directory either, nothing is recreated.
    std::fs::remove_dir(key_file.parent().unwrap()).expect("remove key directory");
    let failure = env.fail(&["fs", "write", "a.txt"], Some(b"x"));
    assert_eq!((failure.exit, failure.code.as_str()), (1, "key-unavailable"), "{failure:?}");
    assert!(!key_file.parent().unwrap().exists(), "the key directory was recreated");

    // The original key brings everything back, untouched.
    std::fs::create_dir(key_file.parent().unwrap()).unwrap();
    chmod(key_file.parent().unwrap(), 0o700);
    std::fs::write(&key_file, &key_bytes).unwrap();
    chmod(&key_file, 0o600);
    env.assert_verify_clean();
    let listed = env.checkpoints();
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(listed[0]["checkpointId"], checkpoint.as_str());
    let committed = env.json(&["commit", &opid]);
    assert_eq!(committed["stageState"], "committed", "{committed:#}");
}

#[test]
fn wrong_key_is_reported_as_key_mismatch_not_corruption() {
    let mut env = Env::new();
    let (opid, checkpoint) = store_with_data(&env);
    env.set_var("TURNBACK_KEY", &key_b64(0x11));
    for (args, stdin) in every_command(&opid, &checkpoint) {
        let failure = env.fail(&args, stdin);
        assert_eq!((failure.exit, failure.code.as_str()), (1, "key-mismatch"), "turnback {args:?}: {failure:?}");
        assert_eq!(env.read("a.txt").as_deref(), Some(&b"alpha\n"[..]), "turnback {args:?} touched the workspace");
    }

    // A key that is not a key at all is unavailable, not a mismatch.
    for bad in ["not base64 at all!", "c2hvcnQ="] {
        env.set_var("TURNBACK_KEY", bad);
        let failure = env.fail(&["checkpoints"], None);
        assert_eq!((failure.exit, failure.code.as_str()), (1, "key-unavailable"), "TURNBACK_KEY={bad}: {failure:?}");
    }

    env.set_var("TURNBACK_KEY", &crate::common::test_key());
    env.assert_verify_clean();
    assert_eq!(env.checkpoints().len(), 1);
}

#[test]
fn key_file_readable_by_group_or_others_is_refused() {
    let env = Env::without_key();
    let (opid, checkpoint) = store_with_data(&env);
    let key_file = env.default_key_file();
    let key_dir = key_file.parent().unwrap().to_path_buf();
    let key_text = std::fs::read(&key_file).unwrap();

    for mode in [0o644, 0o640, 0o604, 0o660] {
        chmod(&key_file, mode);
        for args in [vec!["checkpoints"], vec!["inspect", checkpoint.as_str()], vec!["commit", opid.as_str()]] {
            let failure = env.fail(&args, None);
            assert_eq!(
                (failure.exit, failure.code.as_str()),
                (1, "key-unavailable"),
                "key file mode {mode:o}, turnback {args:?}: {failure:?}"
            );
        }
        assert_eq!(std::fs::read(&key_file).unwrap(), key_text, "a refused key file is never replaced");
    }
    chmod(&key_file, 0o600);
    env.ok(&["checkpoints"], None);

    chmod(&key_dir, 0o755);
    let failure = env.fail(&["checkpoints"], None);
    assert_eq!((failure.exit, failure.code.as_str()), (1, "key-unavailable"), "key directory 0755: {failure:?}");
    chmod(&key_dir, 0o700);
    env.assert_verify_clean();
}

#[test]
fn key_file_variable_creates_the_key_only_for_an_empty_store() {
    let mut env = Env::without_key();
    let keys = env.home.join("keys");
    std::fs::create_dir(&keys).unwrap();
    chmod(&keys, 0o700);
    let key_file = keys.join("turnback.key");
    env.set_var("TURNBACK_KEY_FILE", &key_file.to_string_lossy());

    let init = env.json(&["init"]);
    assert!(str_at(&init, "/keySource").starts_with("TURNBACK_KEY_FILE"), "{init:#}");
    assert_eq!(mode_of(&key_file), 0o600, "created key file mode");
    assert!(!env.default_key_file().exists(), "TURNBACK_KEY_FILE wins over the default key file");
    env.ok(&["fs", "write", "a.txt"], Some(b"alpha\n"));
    env.assert_verify_clean();

    // The store holds data now: another missing key file is not created.
    let other = keys.join("other.key");
    env.set_var("TURNBACK_KEY_FILE", &other.to_string_lossy());
    let failure = env.fail(&["checkpoints"], None);
    assert_eq!((failure.exit, failure.code.as_str()), (1, "key-unavailable"), "{failure:?}");
    assert!(!other.exists(), "a replacement key file was made for a store with data");

    // Nor is the original, once lost.
    env.set_var("TURNBACK_KEY_FILE", &key_file.to_string_lossy());
    std::fs::remove_file(&key_file).unwrap();
    let failure = env.fail(&["fs", "write", "a.txt"], Some(b"x"));
    assert_eq!((failure.exit, failure.code.as_str()), (1, "key-unavailable"), "{failure:?}");
    assert!(!key_file.exists(), "a replacement key file was made for a store with data");
    assert!(!env.default_key_file().exists(), "no fallback to a new default key file");
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"alpha\n"[..]));
}

#[test]
fn key_rotation_keeps_old_data_readable_and_reencrypt_moves_everything_to_the_newest_key() {
    let env = Env::new();
    env.ok(&["fs", "write", "a.txt"], Some(b"alpha\n"));
    env.ok(&["fs", "edit", "a.txt", "--old", "alpha", "--new", "beta"], None);
    let (current, versions) = key_versions(&env);
    assert_eq!(current, 1);
    assert_eq!(versions.len(), 1, "{versions:?}");
    assert!(versions[0].1 > 0, "v1 encrypts the data: {versions:?}");

    let rotated = env.json(&["key", "rotate"]);
    assert_eq!(rotated["newVersion"], 2, "{rotated:#}");
    assert_eq!(rotated["reencrypted"], 0, "{rotated:#}");
    env.ok(&["fs", "write", "b.txt"], Some(b"written under v2\n"));
    let (current, versions) = key_versions(&env);
    assert_eq!(current, 2);
    assert_eq!(versions.iter().map(|v| v.0).collect::<Vec<_>>(), [1, 2], "{versions:?}");
    assert!(versions.iter().all(|v| v.1 > 0), "old data stays under v1, new writes use v2: {versions:?}");
    env.assert_verify_clean();
    let listed = env.checkpoints();
    assert_eq!(listed.len(), 3, "{listed:#?}");
    for c in &listed {
        let inspected = env.json(&["inspect", str_at(c, "/checkpointId")]);
        assert_eq!(inspected["usable"], true, "{inspected:#}");
    }

    let rotated = env.json(&["key", "rotate", "--reencrypt"]);
    assert_eq!(rotated["newVersion"], 3, "{rotated:#}");
    assert!(rotated["reencrypted"].as_u64().unwrap() > 0, "{rotated:#}");
    let (current, versions) = key_versions(&env);
    assert_eq!(current, 3);
    assert_eq!(versions.iter().map(|v| v.0).collect::<Vec<_>>(), [1, 2, 3], "every version stays: {versions:?}");
    let stale: Vec<&(u64, u64)> = versions.iter().filter(|v| v.0 != 3 && v.1 != 0).collect();
    assert!(stale.is_empty(), "objects still under older keys after --reencrypt: {versions:?}");
    assert!(versions[2].1 > 0, "{versions:?}");

    let report = env.assert_verify_clean();
    assert_eq!(report["counts"]["committed"], 3, "{report:#}");
    let relisted: Vec<Value> = env.checkpoints();
    assert_eq!(relisted, listed, "re-encryption changes no checkpoint");
}

#[test]
fn key_import_of_text_that_is_not_a_key_is_invalid_argument_and_writes_nothing() {
    // No store yet, and a store with data (whose key is checked first): the input is wrong
    // either way, not the key store.
    let env = Env::without_key();
    for text in [&b"not base64 at all!\n"[..], b"c2hvcnQ=\n"] {
        let f = env.fail(&["key", "import"], Some(text));
        assert_eq!((f.exit, f.code.as_str()), (2, "invalid-argument"), "{:#}", f.doc);
        assert!(f.message.contains("the imported key"), "{}", f.message);
        assert!(!env.default_key_file().exists(), "no key file was written");
    }
    env.ok(&["fs", "write", "a.txt"], Some(b"alpha\n"));
    let key_before = std::fs::read(env.default_key_file()).unwrap();
    let f = env.fail(&["key", "import"], Some(b"not base64 at all!\n"));
    assert_eq!((f.exit, f.code.as_str()), (2, "invalid-argument"), "{:#}", f.doc);
    assert!(!f.message.contains("TURNBACK_KEY"), "names the input, not a variable never set: {}", f.message);
    assert_eq!(std::fs::read(env.default_key_file()).unwrap(), key_before);
}
