//! The store directory itself: owner-only, and usable by several processes' worth of
//! handles at once.

use std::os::unix::fs::PermissionsExt;

use crate::api::maintenance;
use crate::storage::store::Store;

use crate::tests::common::{Env, KEY, options};

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn store_directory_and_files_are_owner_only() {
    let env = Env::new();
    env.write("a.txt", b"x");
    let store = env.dir.path().join("store");
    assert_eq!(mode(&store), 0o700);
    for entry in std::fs::read_dir(&store).unwrap() {
        let path = entry.unwrap().path();
        let expected = if path.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode(&path), expected, "{}", path.display());
    }
}

#[test]
fn an_existing_world_readable_directory_is_made_owner_only_on_create() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    std::fs::create_dir(&store_dir).unwrap();
    std::fs::set_permissions(&store_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    Store::open(&options(dir.path(), KEY)).unwrap();
    assert_eq!(mode(&store_dir), 0o700);
}

#[test]
fn two_open_stores_on_one_directory_interleave_writes() {
    let env = Env::new();
    let second = Store::open(&options(env.dir.path(), KEY)).unwrap();
    let ws = crate::session::workspace::Workspace::ensure(&second, &env.ws.root).unwrap();
    assert_eq!(ws.id, env.ws.id, "one workspace, whichever handle registered it");
    for i in 0..5 {
        env.write(&format!("a{i}.txt"), b"from the first handle");
        let ctx = crate::api::mutation::Context {
            store: &second,
            workspace: &ws,
            session: &env.session,
            cwd: &ws.root,
            confirm_unprotected: false,
            subagent: None,
        };
        let m = crate::api::mutation::Mutation::Write { path: format!("b{i}.txt").into(), content: b"second".to_vec() };
        crate::api::mutation::apply(ctx, m).unwrap();
    }
    let listed = crate::checkpoint::list(&env.store, &env.session.id, Default::default()).unwrap().records;
    assert_eq!(listed.len(), 10);
    assert!(maintenance::verify(&second, true).unwrap().clean);
}
