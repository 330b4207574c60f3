//! The master key, where it is found, and the versioned data keys it wraps.
//!
//! Invariants:
//! - The master key is looked up in a fixed order: `TURNBACK_KEY` (base64), then
//!   `TURNBACK_KEY_FILE`, then the OS keychain (cargo feature `keychain`), then
//!   `$XDG_CONFIG_HOME/turnback/master.key`. A key is only ever *created* while the store
//!   holds no data; once it does, a missing key is `key-unavailable` and never replaced.
//! - A key file is refused unless it is owned by the user and not readable by group or
//!   world; the default key file's directory must be owner-only too. A key file's missing
//!   directories are made owner-only (0700) when the key is created in it.
//! - A key that cannot be used — a file holding anything but the base64 of 32 bytes, raw
//!   bytes included — is `key-unavailable` saying what the file must hold, never `io`.
//! - The store keeps a keyed check value of the master key, so a wrong key is reported as
//!   `key-mismatch` before anything is decrypted, never as corruption. A store holds the
//!   `v2` value (its label says, authenticated, that it keeps index digests:
//!   `storage/digest.rs`); the `v1` value of an unreleased build's store from before digests
//!   is `store-too-old`, never read. A check missing while data keys are present is
//!   `corrupt`, never written anew.
//! - The master key encrypts nothing but data keys. Data keys are versioned; new writes use
//!   the newest, and every version ever made stays in the store, so nothing written under
//!   any version becomes unreadable.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

use crate::error::{Error, ErrorCode, IoResultExt, Result};
use crate::storage::crypto::{self, Binding, KEY_LEN, Purpose, SecretKey};
use crate::storage::kv::{KeyValueStore, Txn};
use crate::storage::schema;

const META_CHECK: &[u8] = b"master-check";
const META_CURRENT: &[u8] = b"current-key-version";

/// Where the master key was found (or created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// The `TURNBACK_KEY` environment variable.
    Env,
    /// The file named by `TURNBACK_KEY_FILE`.
    KeyFile(PathBuf),
    /// The OS keychain.
    Keychain,
    /// The default key file under the user's config directory.
    DefaultFile(PathBuf),
}

impl KeySource {
    /// A short description for people and JSON.
    pub fn describe(&self) -> String {
        match self {
            KeySource::Env => "TURNBACK_KEY".to_string(),
            KeySource::KeyFile(p) => format!("TURNBACK_KEY_FILE ({})", p.display()),
            KeySource::Keychain => "OS keychain".to_string(),
            KeySource::DefaultFile(p) => format!("key file ({})", p.display()),
        }
    }
}

/// The inputs of the master key lookup, normally read from the environment.
/// `Debug` never prints the key itself.
#[derive(Clone, Default)]
pub struct KeyConfig {
    /// `TURNBACK_KEY`: the base64 master key itself.
    pub env_key: Option<String>,
    /// `TURNBACK_KEY_FILE`: a path to the key file.
    pub key_file: Option<PathBuf>,
    /// Whether to consult the OS keychain (only with the `keychain` feature).
    pub use_keychain: bool,
    /// The default key file (`$XDG_CONFIG_HOME/turnback/master.key`).
    pub default_file: Option<PathBuf>,
}

impl std::fmt::Debug for KeyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyConfig")
            .field("env_key", &self.env_key.as_ref().map(|_| "<redacted>"))
            .field("key_file", &self.key_file)
            .field("use_keychain", &self.use_keychain)
            .field("default_file", &self.default_file)
            .finish()
    }
}

impl KeyConfig {
    /// Reads `TURNBACK_KEY`, `TURNBACK_KEY_FILE`, `XDG_CONFIG_HOME` and `HOME`.
    pub fn from_env() -> Self {
        let nonempty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let config_home = nonempty("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| nonempty("HOME").map(|h| PathBuf::from(h).join(".config")));
        KeyConfig {
            env_key: nonempty("TURNBACK_KEY").map(|v| v.to_string_lossy().into_owned()),
            key_file: nonempty("TURNBACK_KEY_FILE").map(PathBuf::from),
            use_keychain: cfg!(feature = "keychain") && nonempty("TURNBACK_NO_KEYCHAIN").is_none(),
            default_file: config_home.map(|c| c.join("turnback").join("master.key")),
        }
    }
}

impl KeyConfig {
    /// A configuration that uses the base64 master key `key` and looks nowhere else
    /// (tests, sandboxes, a key handed over by a secret manager).
    pub fn with_key(key: String) -> Self {
        KeyConfig { env_key: Some(key), ..KeyConfig::default() }
    }
}

/// A new random master key, in the base64 form `TURNBACK_KEY` and key files hold.
///
/// # Errors
/// `io` if the operating system's random source fails.
pub fn new_master_key() -> Result<String> {
    Ok(encode_key(&SecretKey::random()?))
}

/// Finds the master key; creates one only if `may_create` (the store holds no data).
pub(crate) fn find_master_key(config: &KeyConfig, may_create: bool) -> Result<(SecretKey, KeySource)> {
    if let Some(text) = &config.env_key {
        return Ok((decode_key(text, "TURNBACK_KEY")?, KeySource::Env));
    }
    if let Some(path) = &config.key_file {
        let key = load_or_create_file(path, may_create, false)?;
        return Ok((key, KeySource::KeyFile(path.clone())));
    }
    if config.use_keychain
        && let Some(key) = keychain::load_or_create(may_create)?
    {
        return Ok((key, KeySource::Keychain));
    }
    match &config.default_file {
        Some(path) => Ok((load_or_create_file(path, may_create, true)?, KeySource::DefaultFile(path.clone()))),
        None => Err(unavailable("no TURNBACK_KEY, TURNBACK_KEY_FILE, keychain or config directory")),
    }
}

fn unavailable(why: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::KeyUnavailable, format!("master key unavailable: {why}"))
}

/// What a key's text must be, said where a key is refused.
fn key_shape() -> String {
    format!("the {}-bit master key in base64 (one line of 44 characters)", KEY_LEN * 8)
}

fn decode_key(text: &str, what: &str) -> Result<SecretKey> {
    let bytes = B64.decode(text.trim()).map_err(|_| {
        Error::new(ErrorCode::KeyUnavailable, format!("{what} is not valid base64: it must hold {}", key_shape()))
    })?;
    SecretKey::from_slice(&bytes).map_err(|_| {
        Error::new(
            ErrorCode::KeyUnavailable,
            format!("{what} decodes to {} bytes, not {KEY_LEN}: it must hold {}", bytes.len(), key_shape()),
        )
    })
}

/// The key a person hands to `key import`: `invalid-argument` if `text` is not one, since
/// then the input is wrong, not the key store (a stored key that does not decode is
/// `key-unavailable`).
pub(crate) fn decode_imported_key(text: &str) -> Result<SecretKey> {
    decode_key(text, "the imported key").map_err(|e| Error::invalid(e.message))
}

/// The text of the key file `path`: `key-unavailable` if it is not text at all (raw key
/// bytes, say), since only base64 is a key file.
fn read_key_text(path: &Path) -> Result<String> {
    let bytes = fs::read(path).context(path)?;
    String::from_utf8(bytes).map_err(|e| {
        unavailable(format!(
            "{} holds {} bytes that are not text; a key file must hold {} (raw key bytes are not read)",
            path.display(),
            e.as_bytes().len(),
            key_shape()
        ))
    })
}

/// Encodes a key the way key files and `TURNBACK_KEY` hold it.
pub(crate) fn encode_key(key: &SecretKey) -> String {
    B64.encode(key.expose())
}

fn check_owner_only(path: &Path, meta: &fs::Metadata, what: &str) -> Result<()> {
    let uid = rustix::process::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(unavailable(format!("{what} {} is owned by another user; refusing it", path.display())));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(unavailable(format!(
            "{what} {} is accessible by group or others (mode {:o}); run chmod go-rwx on it",
            path.display(),
            meta.permissions().mode() & 0o777
        )));
    }
    Ok(())
}

fn load_or_create_file(path: &Path, may_create: bool, owner_only_dir: bool) -> Result<SecretKey> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // Directories made for a key are owner-only, wherever the key is.
        if may_create && !dir.exists() {
            fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).context(dir)?;
        }
        if owner_only_dir && let Ok(meta) = fs::metadata(dir) {
            check_owner_only(dir, &meta, "key directory")?;
        }
    }
    match fs::symlink_metadata(path) {
        Ok(meta) => {
            if !meta.is_file() {
                return Err(unavailable(format!("{} is not a regular file", path.display())));
            }
            check_owner_only(path, &meta, "key file")?;
            decode_key(&read_key_text(path)?, &path.display().to_string())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !may_create {
                return Err(unavailable(format!(
                    "{} does not exist and the store already holds data; a new key would not open it",
                    path.display()
                )));
            }
            create_key_file(path)
        }
        Err(e) => Err(e).context(path),
    }
}

fn create_key_file(path: &Path) -> Result<SecretKey> {
    let key = SecretKey::random()?;
    if link_new_key_file(path, &key)? { Ok(key) } else { load_or_create_file(path, false, false) }
}

/// Writes `key` to `path` unless a file is there: a synced 0600 temporary file hard-linked
/// into place (the link fails if another process made the file first; then `false`, its
/// key unchecked here), then the directory synced. Failures name `path`.
fn link_new_key_file(path: &Path, key: &SecretKey) -> Result<bool> {
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
    let written = (|| {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(format!("{}\n", encode_key(key)).as_bytes())?;
        f.sync_all()
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.context(path)?;
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            if let Some(dir) = path.parent() {
                fs::File::open(dir).and_then(|d| d.sync_all()).context(dir)?;
            }
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e).context(path),
    }
}

/// The master key `config` finds, in the form `TURNBACK_KEY` and key files hold (for
/// `turnback key export`). Creates none.
///
/// # Errors
/// `key-unavailable` if there is none.
pub(crate) fn export_master_key(config: &KeyConfig) -> Result<String> {
    Ok(encode_key(&find_master_key(config, false)?.0))
}

/// Writes the master key `text` (base64, as `key export` prints it) where `config` looks
/// for a key file (`TURNBACK_KEY_FILE`, else the default key file), owner-only. Writing
/// the key that is there already changes nothing; returns the file and whether it wrote.
///
/// # Errors
/// `invalid-argument` if `text` is not a key, if `TURNBACK_KEY` is set (it is the key) or
/// there is no key file location; `already-exists` if another key is there (it is never
/// replaced).
pub(crate) fn import_master_key(config: &KeyConfig, text: &str) -> Result<(PathBuf, bool)> {
    let key = decode_imported_key(text)?;
    if config.env_key.is_some() {
        return Err(Error::invalid("TURNBACK_KEY is set, and it is the key: unset it to import one into a key file"));
    }
    let (path, owner_only_dir) = match (&config.key_file, &config.default_file) {
        (Some(p), _) => (p.clone(), false),
        (None, Some(p)) => (p.clone(), true),
        (None, None) => {
            return Err(Error::invalid("no TURNBACK_KEY_FILE and no config directory to import the key into"));
        }
    };
    if fs::symlink_metadata(&path).is_ok() {
        let there = load_or_create_file(&path, false, owner_only_dir)?;
        if there == key {
            return Ok((path, false));
        }
        return Err(Error::new(
            ErrorCode::AlreadyExists,
            format!("{} holds another master key; it is never replaced (move it aside first)", path.display()),
        ));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).context(dir)?;
        if owner_only_dir {
            check_owner_only(dir, &fs::metadata(dir).context(dir)?, "key directory")?;
        }
    }
    if link_new_key_file(&path, &key)? { Ok((path, true)) } else { import_master_key(config, text) }
}

#[cfg(feature = "keychain")]
mod keychain {
    use super::*;

    const SERVICE: &str = "turnback";
    const USER: &str = "master-key";

    /// `Ok(None)` when no keychain is usable here, so the lookup falls through to the file.
    pub(super) fn load_or_create(may_create: bool) -> Result<Option<SecretKey>> {
        let Ok(entry) = keyring::Entry::new(SERVICE, USER) else { return Ok(None) };
        match entry.get_password() {
            Ok(text) => decode_key(&text, "keychain entry").map(Some),
            Err(keyring::Error::NoEntry) if may_create => {
                let key = SecretKey::random()?;
                match entry.set_password(&encode_key(&key)) {
                    Ok(()) => Ok(Some(key)),
                    Err(_) => Ok(None),
                }
            }
            Err(_) => Ok(None),
        }
    }
}

#[cfg(not(feature = "keychain"))]
mod keychain {
    use super::*;

    pub(super) fn load_or_create(_may_create: bool) -> Result<Option<SecretKey>> {
        Ok(None)
    }
}

/// The keys of one open store: master-derived keys and every data-key version.
#[derive(Debug, Clone)]
pub(crate) struct KeyRing {
    content_id: SecretKey,
    lookup_id: SecretKey,
    wrap: SecretKey,
    data: BTreeMap<u32, SecretKey>,
    current: u32,
    /// Where the master key came from.
    pub source: KeySource,
}

/// The key check of an unreleased build's store from before index digests (refused).
fn check_value_v1(master: &SecretKey) -> [u8; 32] {
    master.derive(Purpose::KeyCheck).mac(&[b"turnback master key check v1"])
}

/// The key check of a store that keeps index digests.
fn check_value_v2(master: &SecretKey) -> [u8; 32] {
    master.derive(Purpose::KeyCheck).mac(&[b"turnback master key check v2: index digests kept"])
}

fn data_key_binding(version_bytes: &[u8]) -> Binding<'_> {
    Binding { kind: "data-key", id: version_bytes, class: "key", schema: 1, key_version: 0 }
}

/// Whether the store already holds data (and so must never get a new master key).
pub(crate) fn store_has_key(kv: &dyn KeyValueStore) -> Result<bool> {
    Ok(kv.get(schema::META, META_CHECK)?.is_some())
}

impl KeyRing {
    /// Opens the key ring of the store in `kv` with `master`, initialising an empty store.
    ///
    /// # Errors
    /// `key-mismatch` if `master` is not the key this store was created with; `corrupt` if
    /// a wrapped data key does not open under the right master key.
    #[cfg(test)]
    pub(crate) fn open(kv: &dyn KeyValueStore, master: SecretKey, source: KeySource) -> Result<Self> {
        Self::open_with(kv, master, source, &|_, _| Ok(()))
    }

    /// Like `open`; a store initialised here also gets what `init` writes, in the
    /// transaction that writes its key check (the index digests' starting totals).
    ///
    /// # Errors
    /// `key-mismatch` if `master` is not the key this store was created with; `corrupt` if
    /// a wrapped data key does not open under the right master key, or the key check is gone
    /// while data keys are there.
    pub(crate) fn open_with(
        kv: &dyn KeyValueStore,
        master: SecretKey,
        source: KeySource,
        init: &dyn Fn(&KeyRing, &mut dyn Txn) -> Result<()>,
    ) -> Result<Self> {
        let (check_v1, check_v2) = (check_value_v1(&master), check_value_v2(&master));
        let mut ring = KeyRing {
            content_id: master.derive(Purpose::ContentId),
            lookup_id: master.derive(Purpose::LookupId),
            wrap: master.derive(Purpose::WrapDataKeys),
            data: BTreeMap::new(),
            current: 0,
            source,
        };
        let stored = match kv.get(schema::META, META_CHECK)? {
            Some(v) => v,
            None => {
                let mut txn = kv.begin()?;
                if txn.get(schema::META, META_CHECK)?.is_none() {
                    if txn.get(schema::META, META_CURRENT)?.is_some() {
                        // Written with the data keys, in one transaction: deleted since.
                        return Err(Error::corrupt(
                            "key ring",
                            "the master key check is gone while data keys are there (restore the store from a backup)",
                        ));
                    }
                    txn.put(schema::META, META_CHECK, &check_v2)?;
                    add_data_key(&mut *txn, &ring.wrap, 1)?;
                    init(&ring, &mut *txn)?;
                }
                txn.commit()?;
                kv.get(schema::META, META_CHECK)?.unwrap_or_default()
            }
        };
        if stored == check_v1 {
            return Err(Error::new(
                ErrorCode::StoreTooOld,
                "this store was written by an unreleased build of turnback (before index digests); no release reads it",
            ));
        } else if stored != check_v2 {
            return Err(Error::new(
                ErrorCode::KeyMismatch,
                format!("the master key from {} is not the key this store was created with", ring.source.describe()),
            ));
        }
        ring.reload(kv)?;
        Ok(ring)
    }

    fn reload(&mut self, kv: &dyn KeyValueStore) -> Result<()> {
        let current =
            kv.get(schema::META, META_CURRENT)?.ok_or_else(|| Error::corrupt("key ring", "no current key version"))?;
        self.current = u32::from_be_bytes(
            current.as_slice().try_into().map_err(|_| Error::corrupt("key ring", "bad current key version"))?,
        );
        let mut data = BTreeMap::new();
        let wrap = &self.wrap;
        kv.scan(schema::KEYS, b"", &mut |k, v| {
            let version = u32::from_be_bytes(k.try_into().map_err(|_| Error::corrupt("key ring", "bad data key id"))?);
            let raw = crypto::open(wrap, data_key_binding(k), v, KEY_LEN)?;
            data.insert(version, SecretKey::from_slice(&raw)?.derive(Purpose::Encrypt));
            Ok(true)
        })?;
        if !data.contains_key(&self.current) {
            return Err(Error::corrupt("key ring", format!("current data key v{} is missing", self.current)));
        }
        self.data = data;
        Ok(())
    }

    /// The data-key version new writes use.
    pub(crate) fn current_version(&self) -> u32 {
        self.current
    }

    /// Every data-key version the store holds.
    pub(crate) fn versions(&self) -> Vec<u32> {
        self.data.keys().copied().collect()
    }

    /// The encryption key of `version`.
    ///
    /// # Errors
    /// `corrupt` if the store has no such version (a record naming it was altered).
    pub(crate) fn data_key(&self, version: u32) -> Result<&SecretKey> {
        self.data.get(&version).ok_or_else(|| Error::corrupt("key ring", format!("no data key v{version}")))
    }

    /// The current encryption key and its version.
    pub(crate) fn current_key(&self) -> (u32, &SecretKey) {
        (self.current, &self.data[&self.current])
    }

    /// The keyed content id (also the content digest) of `bytes`.
    pub(crate) fn content_id(&self, bytes: &[u8]) -> [u8; 32] {
        self.content_id.mac(&[b"content", bytes])
    }

    /// The keyed content id of `len` bytes fed in pieces: the same id as
    /// [`content_id`](Self::content_id) of them all.
    pub(crate) fn content_id_streaming(&self, len: u64) -> crypto::StreamingMac {
        self.content_id.mac_streaming(&[b"content"], len)
    }

    /// A keyed lookup id for a secret name such as a workspace path.
    pub(crate) fn lookup_id(&self, domain: &str, name: &[u8]) -> [u8; 32] {
        self.lookup_id.mac(&[domain.as_bytes(), name])
    }

    /// Adds a new data-key version and makes it current; returns the new version.
    pub(crate) fn rotate(&mut self, kv: &dyn KeyValueStore) -> Result<u32> {
        let mut txn = kv.begin()?;
        let newest = txn
            .keys(schema::KEYS, b"")?
            .iter()
            .filter_map(|k| <[u8; 4]>::try_from(k.as_slice()).ok().map(u32::from_be_bytes))
            .max()
            .unwrap_or(0);
        add_data_key(&mut *txn, &self.wrap, newest + 1)?;
        txn.commit()?;
        self.reload(kv)?;
        Ok(self.current)
    }
}

/// Makes the store in `kv` look as an unreleased build's store from before index digests
/// does: its key check the `v1` value (for the test that it is refused).
#[cfg(test)]
pub(crate) fn write_check_v1(kv: &dyn KeyValueStore, master: &SecretKey) -> Result<()> {
    let mut txn = kv.begin()?;
    txn.put(schema::META, META_CHECK, &check_value_v1(master))?;
    txn.commit()
}

fn add_data_key(txn: &mut dyn Txn, wrap: &SecretKey, version: u32) -> Result<()> {
    let key = SecretKey::random()?;
    let id = version.to_be_bytes();
    let sealed = crypto::seal(wrap, data_key_binding(&id), key.expose())?;
    txn.put(schema::KEYS, &id, &sealed)?;
    txn.put(schema::META, META_CURRENT, &id)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::kv::MemoryKv;

    fn file_config(path: &Path) -> KeyConfig {
        KeyConfig { key_file: Some(path.to_path_buf()), ..KeyConfig::default() }
    }

    #[test]
    fn debug_output_never_shows_the_key() {
        let cfg = KeyConfig { env_key: Some("c2VjcmV0LWtleS1tYXRlcmlhbA==".into()), ..KeyConfig::default() };
        assert!(!format!("{cfg:?}").contains("c2VjcmV0"));
    }

    #[test]
    fn env_key_wins_over_files() {
        let dir = tempfile::tempdir().unwrap();
        let key = SecretKey([9u8; 32]);
        let cfg = KeyConfig { env_key: Some(encode_key(&key)), ..file_config(&dir.path().join("k")) };
        let (found, source) = find_master_key(&cfg, true).unwrap();
        assert_eq!(found, key);
        assert_eq!(source, KeySource::Env);
        assert!(!dir.path().join("k").exists());
    }

    #[test]
    fn key_file_is_created_owner_only_only_when_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let err = find_master_key(&file_config(&path), false).unwrap_err();
        assert_eq!(err.code, ErrorCode::KeyUnavailable);
        assert!(!path.exists());
        let (created, _) = find_master_key(&file_config(&path), true).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let (again, _) = find_master_key(&file_config(&path), false).unwrap();
        assert_eq!(created, again);
    }

    #[test]
    fn world_readable_key_file_or_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        find_master_key(&file_config(&path), true).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(find_master_key(&file_config(&path), false).unwrap_err().code, ErrorCode::KeyUnavailable);

        let conf = dir.path().join("conf");
        let default = conf.join("turnback").join("master.key");
        let cfg = KeyConfig { default_file: Some(default.clone()), ..KeyConfig::default() };
        find_master_key(&cfg, true).unwrap();
        assert_eq!(fs::metadata(default.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        fs::set_permissions(default.parent().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_master_key(&cfg, false).unwrap_err().code, ErrorCode::KeyUnavailable);
    }

    #[test]
    fn a_key_file_of_raw_bytes_or_the_wrong_length_says_what_it_must_hold() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        for bytes in [&[0xffu8; 32][..], b"c2hvcnQ=\n", b"not base64 at all!\n"] {
            fs::write(&path, bytes).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
            let err = find_master_key(&file_config(&path), false).unwrap_err();
            assert_eq!(err.code, ErrorCode::KeyUnavailable, "{}", err.message);
            assert!(err.message.contains("must hold the 256-bit master key in base64"), "{}", err.message);
        }
    }

    #[test]
    fn an_imported_key_that_is_not_one_is_the_callers_mistake_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        for text in ["not base64 at all!\n", "c2hvcnQ=\n"] {
            let err = import_master_key(&file_config(&path), text).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidArgument, "{}", err.message);
            assert!(err.message.starts_with("the imported key"), "{}", err.message);
        }
        assert!(!path.exists());
        let err = find_master_key(&KeyConfig::with_key("not base64 at all!".into()), false).unwrap_err();
        assert_eq!(err.code, ErrorCode::KeyUnavailable, "TURNBACK_KEY is the key store: {}", err.message);
    }

    #[test]
    fn a_key_files_missing_directories_are_made_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/master.key");
        find_master_key(&file_config(&path), true).unwrap();
        for d in [dir.path().join("a"), dir.path().join("a/b")] {
            assert_eq!(fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o700, "{}", d.display());
        }
        assert_eq!(fs::read_dir(dir.path().join("a/b")).unwrap().count(), 1, "no temporary file left");
    }

    #[test]
    fn wrong_master_key_is_key_mismatch() {
        let kv = MemoryKv::new();
        KeyRing::open(&kv, SecretKey([1u8; 32]), KeySource::Env).unwrap();
        let err = KeyRing::open(&kv, SecretKey([2u8; 32]), KeySource::Env).unwrap_err();
        assert_eq!(err.code, ErrorCode::KeyMismatch);
    }

    #[test]
    fn rotation_adds_a_version_and_keeps_old_ones() {
        let kv = MemoryKv::new();
        let mut ring = KeyRing::open(&kv, SecretKey([1u8; 32]), KeySource::Env).unwrap();
        assert_eq!(ring.current_version(), 1);
        let old = ring.data_key(1).unwrap().clone();
        assert_eq!(ring.rotate(&kv).unwrap(), 2);
        let reopened = KeyRing::open(&kv, SecretKey([1u8; 32]), KeySource::Env).unwrap();
        assert_eq!(reopened.versions(), vec![1, 2]);
        assert_eq!(reopened.current_version(), 2);
        assert_eq!(reopened.data_key(1).unwrap(), &old);
        assert_ne!(reopened.data_key(2).unwrap(), &old);
    }
}
