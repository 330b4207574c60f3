//! The store: one owner-only directory holding everything turnback keeps.
//!
//! Invariants:
//! - The directory and every file in it are owner-only (0700 / 0600).
//! - All metadata, the journal and all content live in one SQLite database (`store.db`)
//!   reached through [`KeyValueStore`]; every state change is one transaction.
//! - Nothing plain is stored but ids, sizes, counts, timestamps and states: content goes
//!   through [`object`](crate::storage::object), every other record through [`Store::seal_record`],
//!   whose associated data binds the record's namespace and key.
//! - Opening a store finds the master key (creating one only for an empty store), checks
//!   it against the store (`key-mismatch`). A store whose database was initialised (the
//!   `initialized` marker beside it) and now holds nothing or is gone is `corrupt`, never
//!   made anew. Opening recovers nothing: the facade (`Turnback::open`) runs every layer's
//!   reconcile before anything else can read.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, ErrorCode, IoResultExt, Result};
use crate::fs::lock::OwnerLock;
use crate::storage::content::ContentId;
use crate::storage::crypto::{self, Binding};
use crate::storage::digest;
use crate::storage::header;
use crate::storage::keys::{self, KeyConfig, KeyRing};
use crate::storage::kv::{KeyValueStore, Ns, SqliteKv};
use crate::storage::object;
use crate::storage::schema;
use crate::storage::settings::{self, Settings, SettingsOverrides};

const RECORD_MAGIC: &[u8; 3] = b"TR1";
/// A file in the store directory that says its database was initialised: an empty
/// `store.db` beside it was emptied, not new.
const INITIALIZED: &str = "initialized";
/// Largest plaintext a sealed record may decode to.
pub(crate) const RECORD_MAX: usize = 256 * 1024 * 1024;

/// How to open a store.
#[derive(Debug, Clone)]
pub(crate) struct StoreOptions {
    /// The store directory.
    pub dir: PathBuf,
    /// Where to look for the master key.
    pub keys: KeyConfig,
    /// Settings given as flags.
    pub overrides: SettingsOverrides,
    /// Create the store (and a key) if it does not exist yet.
    pub create: bool,
}

/// An open store.
#[derive(Debug)]
pub(crate) struct Store {
    dir: PathBuf,
    kv: Box<dyn KeyValueStore>,
    keys: KeyRing,
    settings: Settings,
    owner: OnceLock<OwnerLock>,
    protected: Vec<PathBuf>,
}

/// `$TURNBACK_HOME`, else `$XDG_DATA_HOME/turnback`, else `~/.local/share/turnback`.
pub fn default_dir() -> Option<PathBuf> {
    let var = |n: &str| std::env::var_os(n).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("TURNBACK_HOME")
        .or_else(|| var("XDG_DATA_HOME").map(|d| d.join("turnback")))
        .or_else(|| var("HOME").map(|h| h.join(".local/share/turnback")))
}

impl Store {
    /// Opens the store described by `opts`, reconciling any interrupted work.
    ///
    /// # Errors
    /// `not-found` if the store does not exist and `create` is false; `corrupt` if its
    /// database was deleted or emptied after it was initialised; `key-unavailable` if the
    /// store holds data and no key is found; `key-mismatch` for the wrong key.
    pub(crate) fn open(opts: &StoreOptions) -> Result<Self> {
        let dir = &opts.dir;
        let marker = dir.join(INITIALIZED);
        if !dir.join("store.db").exists() {
            if marker.exists() {
                // Checked before anything is made: an empty database here would be a new store.
                return Err(Error::corrupt(
                    "store",
                    format!(
                        "{} is missing although this store was initialised: it was deleted \
                         (restore it from a backup, or move the store directory aside to start a new one)",
                        dir.join("store.db").display()
                    ),
                ));
            }
            if !opts.create {
                return Err(Error::new(
                    ErrorCode::NotFound,
                    format!("no turnback store at {} (run `turnback init`)", dir.display()),
                ));
            }
            create_dir_owner_only(dir)?;
            write_default_settings(&dir.join("settings.toml"))?;
        }
        let kv = SqliteKv::open(&dir.join("store.db"))?;
        let has_data = keys::store_has_key(&kv)?;
        if !has_data && marker.exists() {
            return Err(Error::corrupt(
                "store",
                format!(
                    "{} holds no data although this store was initialised: it was emptied or truncated \
                     (restore it from a backup, or move the store directory aside to start a new one)",
                    dir.join("store.db").display()
                ),
            ));
        }
        let (master, source) = keys::find_master_key(&opts.keys, !has_data)?;
        let keys = KeyRing::open_with(&kv, master, source, &digest::init_in)?;
        if !marker.exists() {
            // Written once the keys are committed (a crash before it leaves a store that is
            // rightly initialised again); stores made before the marker get it here. A store
            // on a read-only disk goes without it: the check is lost, not the open.
            let _ = mark_initialized(&marker);
        }
        let settings = Settings::load(&dir.join("settings.toml"), &opts.overrides)?;
        let mut store = Self::assemble(dir.clone(), Box::new(kv), keys, settings)?;
        // Where keys live may not be touched through a workspace either.
        store.protected.extend(opts.keys.key_file.iter().cloned());
        store.protected.extend(opts.keys.default_file.as_ref().and_then(|f| f.parent()).map(Path::to_path_buf));
        Ok(store)
    }

    /// Opens a store over any backend (unit tests use [`MemoryKv`](crate::storage::kv::MemoryKv)).
    /// `dir` holds only the lock files.
    #[cfg(test)]
    pub(crate) fn with_backend(
        dir: PathBuf,
        kv: Box<dyn KeyValueStore>,
        master: crypto::SecretKey,
        settings: Settings,
    ) -> Result<Self> {
        let keys = KeyRing::open_with(kv.as_ref(), master, keys::KeySource::Env, &digest::init_in)?;
        Self::assemble(dir, kv, keys, settings)
    }

    fn assemble(dir: PathBuf, kv: Box<dyn KeyValueStore>, keys: KeyRing, settings: Settings) -> Result<Self> {
        let protected = vec![dir.clone()];
        let store = Store { dir, kv, keys, settings, owner: OnceLock::new(), protected };
        Ok(store)
    }

    /// The store directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Paths no workspace operation may touch: the store, the key file and its directory.
    pub(crate) fn protected_paths(&self) -> &[PathBuf] {
        &self.protected
    }

    /// A read-only view of this store as committed now (see
    /// [`KeyValueStore::read_snapshot`]): checks that read several tables read them from
    /// one state. Writing through it fails.
    ///
    /// # Errors
    /// As the backend's reads.
    pub(crate) fn read_view(&self) -> Result<Store> {
        Ok(Store {
            dir: self.dir.clone(),
            kv: self.kv.read_snapshot()?,
            keys: self.keys.clone(),
            settings: self.settings,
            owner: OnceLock::new(),
            protected: self.protected.clone(),
        })
    }

    /// The backend.
    pub(crate) fn kv(&self) -> &dyn KeyValueStore {
        self.kv.as_ref()
    }

    /// The key ring.
    pub(crate) fn keys(&self) -> &KeyRing {
        &self.keys
    }

    /// The settings in force.
    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Where owner lock files live.
    pub(crate) fn locks_dir(&self) -> PathBuf {
        self.dir.join("locks")
    }

    /// This process's owner lock, taken on first use.
    pub(crate) fn owner(&self) -> Result<&OwnerLock> {
        if let Some(o) = self.owner.get() {
            return Ok(o);
        }
        let lock = OwnerLock::acquire(&self.locks_dir())?;
        Ok(self.owner.get_or_init(|| lock))
    }

    /// Serializes `value` and seals it as the record `key` of namespace `ns`.
    pub(crate) fn seal_record<T: Serialize>(&self, ns: Ns, key: &[u8], schema: u16, value: &T) -> Result<Vec<u8>> {
        let json = serde_json::to_vec(value).map_err(|e| Error::new(ErrorCode::Io, format!("encode record: {e}")))?;
        self.seal_bytes(ns, key, schema, &json)
    }

    /// Seals raw bytes as the record `key` of namespace `ns` (binary records such as the
    /// stat cache use this directly).
    pub(crate) fn seal_bytes(&self, ns: Ns, key: &[u8], schema: u16, bytes: &[u8]) -> Result<Vec<u8>> {
        self.seal_bytes_at_level(ns, key, schema, bytes, 3)
    }

    /// [`seal_bytes`](Self::seal_bytes) with a chosen zstd level.
    pub(crate) fn seal_bytes_at_level(
        &self,
        ns: Ns,
        key: &[u8],
        schema: u16,
        bytes: &[u8],
        level: i32,
    ) -> Result<Vec<u8>> {
        let (version, data_key) = self.keys.current_key();
        let kind = format!("record:{ns}");
        let binding = Binding { kind: &kind, id: key, class: "record", schema, key_version: version };
        let mut out = Vec::new();
        header::write(&mut out, RECORD_MAGIC, header::Header { key_version: version, schema });
        crypto::seal_into(data_key, binding, bytes, level, &mut out)?;
        Ok(out)
    }

    /// Opens a record sealed by [`seal_record`](Self::seal_record) under `ns`/`key`.
    ///
    /// # Errors
    /// `corrupt` if the bytes were altered or belong to another record.
    pub(crate) fn open_record<T: DeserializeOwned>(&self, ns: Ns, key: &[u8], value: &[u8]) -> Result<T> {
        let json = self.open_bytes(ns, key, value)?;
        serde_json::from_slice(&json).map_err(|e| Error::corrupt(format!("record:{ns}"), e))
    }

    /// Opens bytes sealed by [`seal_bytes`](Self::seal_bytes).
    pub(crate) fn open_bytes(&self, ns: Ns, key: &[u8], value: &[u8]) -> Result<Vec<u8>> {
        let (version, schema, sealed) = record_header(value)?;
        let kind = format!("record:{ns}");
        let binding = Binding { kind: &kind, id: key, class: "record", schema, key_version: version };
        crypto::open(self.keys.data_key(version)?, binding, sealed, RECORD_MAX)
    }

    /// Opens bytes sealed by [`seal_bytes`](Self::seal_bytes) as a reader that decompresses
    /// them as they are read ([`crypto::open_reader`]): a large record is never whole in
    /// memory as plaintext. With the plaintext's size, when the frame records it.
    pub(crate) fn open_bytes_reader(&self, ns: Ns, key: &[u8], value: Vec<u8>) -> Result<crypto::Opened> {
        let (version, schema, sealed) = record_header(&value)?;
        let start = value.len() - sealed.len();
        let kind = format!("record:{ns}");
        let binding = Binding { kind: &kind, id: key, class: "record", schema, key_version: version };
        crypto::open_reader(self.keys.data_key(version)?, binding, value, start, RECORD_MAX)
    }

    /// Reads and opens the record `key` of `ns`.
    pub(crate) fn get_record<T: DeserializeOwned>(&self, ns: Ns, key: &[u8]) -> Result<Option<T>> {
        match self.kv.get(ns, key)? {
            Some(v) => self.open_record(ns, key, &v).map(Some),
            None => Ok(None),
        }
    }

    /// Reads and verifies the content object `id`.
    ///
    /// # Errors
    /// `not-found` if absent, `corrupt` if it does not verify; no bytes on failure.
    pub(crate) fn read_object(&self, id: &ContentId) -> Result<(crate::storage::content::ObjectHeader, Vec<u8>)> {
        object::get(&self.keys, self.kv(), id)
    }

    /// Reads and verifies object `id` in pieces handed to `out` ([`object::get_to`]): memory
    /// does not grow with its size. On an error, throw away what `out` was given.
    pub(crate) fn read_object_to(
        &self,
        id: &ContentId,
        out: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<crate::storage::content::ObjectHeader> {
        object::get_to(&self.keys, self.kv(), id, out)
    }

    /// Adds a data-key version for new writes; with `reencrypt`, rewrites everything under it.
    ///
    /// Interruption at any point loses nothing: each object and record is rewritten in its
    /// own transaction, and every older data key stays in the store (wrapped by the master
    /// key), so data written under any version remains readable. A process that opened the
    /// store before the rotation may still write under the previous version; running
    /// `--reencrypt` again moves that too. `turnback key status` shows what each version holds.
    pub(crate) fn rotate_keys(&mut self, reencrypt: bool) -> Result<RotationReport> {
        let new_version = self.keys.rotate(self.kv.as_ref())?;
        let reencrypted = if reencrypt { self.reencrypt_all()? } else { 0 };
        Ok(RotationReport { new_version, reencrypted })
    }

    fn reencrypt_all(&self) -> Result<u64> {
        let current = self.keys.current_version();
        let mut count = object::reencrypt_all(&self.keys, self.kv.as_ref())?;
        count += crate::storage::pack::reencrypt(&self.keys, self.kv.as_ref())?;
        for ns in schema::sealed() {
            let mut stale = Vec::new();
            self.kv.scan(ns, b"", &mut |k, v| {
                if record_header(v)?.0 != current {
                    stale.push(k.to_vec());
                }
                Ok(true)
            })?;
            for key in stale {
                let mut txn = self.kv.begin()?;
                if let Some(value) = txn.get(ns, &key)? {
                    let (version, schema, _) = record_header(&value)?;
                    if version != current {
                        let plain = match self.open_bytes(ns, &key, &value) {
                            Ok(p) => p,
                            Err(e) if e.code == ErrorCode::Corrupt => continue,
                            Err(e) => return Err(e),
                        };
                        let resealed = self.seal_bytes(ns, &key, schema, &plain)?;
                        if schema::is_digested(ns) {
                            digest::put(&self.keys, &mut *txn, ns, &key, &resealed)?;
                        } else {
                            txn.put(ns, &key, &resealed)?;
                        }
                        count += 1;
                    }
                }
                txn.commit()?;
            }
        }
        Ok(count)
    }

    /// How many stored objects and records each data-key version encrypts.
    pub(crate) fn key_usage(&self) -> Result<std::collections::BTreeMap<u32, u64>> {
        let mut usage = std::collections::BTreeMap::new();
        for v in self.keys.versions() {
            usage.insert(v, 0);
        }
        object::key_usage(self.kv.as_ref(), &mut usage)?;
        crate::storage::pack::key_usage(self.kv.as_ref(), &mut usage)?;
        for ns in schema::sealed() {
            self.kv.scan(ns, b"", &mut |_, v| {
                *usage.entry(record_header(v)?.0).or_insert(0) += 1;
                Ok(true)
            })?;
        }
        Ok(usage)
    }
}

/// What a key rotation did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RotationReport {
    /// The new current data-key version.
    pub new_version: u32,
    /// Objects and records rewritten under it.
    pub reencrypted: u64,
}

fn record_header(value: &[u8]) -> Result<(u32, u16, &[u8])> {
    let (h, sealed) = header::read(value, RECORD_MAGIC, "record")?;
    Ok((h.key_version, h.schema, sealed))
}

fn create_dir_owner_only(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).context(dir)?;
    // A directory that already existed (say, made by mktemp or by hand) is made owner-only
    // too before the first byte of the store goes into it.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).context(dir)
}

fn mark_initialized(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create(true).truncate(false).mode(0o600).open(path).map(drop)
}

fn write_default_settings(path: &Path) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(mut f) => f.write_all(settings::DEFAULT_FILE.as_bytes()).context(path),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).context(path),
    }
}
