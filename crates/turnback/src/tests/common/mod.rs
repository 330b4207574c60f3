//! A store, workspace and session in a temp dir, with the key given explicitly (never from
//! the environment or the real home directory).

use std::path::{Path, PathBuf};

use crate::api::mutation::{self, Context, Mutation};
use crate::checkpoint::{self, CheckpointRecord};
use crate::session::Session;
use crate::session::workspace::Workspace;
use crate::storage::keys::KeyConfig;
use crate::storage::settings::SettingsOverrides;
use crate::storage::store::{Store, StoreOptions};

pub(crate) const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
pub(super) const OTHER_KEY: &str = "HxwdHhscGRoXGBUWExQREg8QDQ4LDAkKBwgFBgMEAQI=";

pub(super) struct Env {
    pub dir: tempfile::TempDir,
    pub store: Store,
    pub ws: Workspace,
    pub session: Session,
}

pub(super) fn options(dir: &Path, key: &str) -> StoreOptions {
    options_at(&dir.join("store"), key)
}

pub(super) fn options_at(store: &Path, key: &str) -> StoreOptions {
    StoreOptions {
        dir: store.to_path_buf(),
        keys: KeyConfig { env_key: Some(key.to_string()), ..KeyConfig::default() },
        overrides: SettingsOverrides::default(),
        create: true,
    }
}

/// Opens a store and recovers what crashed processes left, as `Turnback::open` does.
pub(super) fn open(opts: &StoreOptions) -> crate::error::Result<Store> {
    let store = Store::open(opts)?;
    crate::api::reconcile(&store)?;
    Ok(store)
}

impl Env {
    pub(super) fn new() -> Self {
        Self::with_overrides(SettingsOverrides::default())
    }

    pub(super) fn with_overrides(overrides: SettingsOverrides) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        let store = open(&StoreOptions { overrides, ..options(dir.path(), KEY) }).unwrap();
        let ws = Workspace::ensure(&store, &dir.path().join("ws")).unwrap();
        let session = Session::resolve(&store, &ws, Some("test-session")).unwrap();
        Env { dir, store, ws, session }
    }

    pub(super) fn reopen(&mut self) {
        self.store = open(&options(self.dir.path(), KEY)).unwrap();
    }

    pub(super) fn path(&self, rel: &str) -> PathBuf {
        self.ws.root.join(rel)
    }

    pub(super) fn apply(&self, m: Mutation) -> crate::error::Result<CheckpointRecord> {
        self.apply_confirmed(m, false)
    }

    pub(super) fn apply_confirmed(&self, m: Mutation, confirm: bool) -> crate::error::Result<CheckpointRecord> {
        let ctx = Context {
            store: &self.store,
            workspace: &self.ws,
            session: &self.session,
            cwd: &self.ws.root,
            confirm_unprotected: confirm,
            subagent: None,
        };
        mutation::apply(ctx, m).map(|o| o.checkpoint)
    }

    pub(super) fn write(&self, rel: &str, content: &[u8]) -> CheckpointRecord {
        self.apply(Mutation::Write { path: rel.into(), content: content.to_vec() }).unwrap()
    }

    /// Replaces the stored value of `key` in `ns` with `f(value)`.
    pub(super) fn tamper(&self, ns: &'static str, key: &[u8], f: impl FnOnce(&mut Vec<u8>)) {
        let mut value = self.store.kv().get(ns, key).unwrap().expect("value to tamper with");
        f(&mut value);
        let mut txn = self.store.kv().begin().unwrap();
        txn.put(ns, key, &value).unwrap();
        txn.commit().unwrap();
    }

    /// Takes a snapshot of the workspace for the session, as the facade does.
    pub(super) fn snapshot(
        &self,
        kind: crate::snapshot::SnapshotKind,
    ) -> crate::error::Result<crate::snapshot::SnapshotRecord> {
        let opts = crate::snapshot::TakeOptions { kind: Some(kind), ..Default::default() };
        let hooks = crate::session::turn::Hooks::new(&self.store);
        crate::snapshot::take(&self.store, crate::session::turn::source(&self.ws, &self.session), &opts, &hooks)
    }

    /// The keys of every row of table `ns`, in key order.
    pub(super) fn keys_in(&self, ns: &'static str) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        self.store
            .kv()
            .scan_keys(ns, b"", &mut |k| {
                out.push(k.to_vec());
                Ok(true)
            })
            .unwrap();
        out
    }

    pub(super) fn record(&self, id: &str) -> CheckpointRecord {
        checkpoint::load(&self.store, id).unwrap()
    }
}

/// A property test's configuration: `cases` cases, the seed random locally (every run
/// explores new cases) and fixed to `seed` in CI (`CI` set: a red build always means a
/// regression, not a new draw); `PROPTEST_RNG_SEED` overrides both.
pub(super) fn proptest_config(cases: u32, seed: u64) -> proptest::test_runner::Config {
    let mut config = proptest::test_runner::Config { cases, ..proptest::test_runner::Config::default() };
    if std::env::var_os("CI").is_some() && std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = proptest::test_runner::RngSeed::Fixed(seed);
    }
    config
}
