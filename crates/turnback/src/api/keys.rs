//! The master key as people hand it between machines: exported from a store that opens
//! with it, imported into this machine's key file (never over another key).

use serde::Serialize;

use crate::api::{Options, Turnback};
use crate::error::{Error, ErrorCode, Result};
use crate::storage::keys;
use crate::storage::store::{Store, StoreOptions};

/// What `key import` did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct KeyImport {
    /// The key file.
    pub key_file: std::path::PathBuf,
    /// Whether it was written (false: it held this key already).
    pub written: bool,
}

impl Turnback {
    /// The master key of the store `options` opens, checked against it, in the form
    /// `TURNBACK_KEY` and key files hold: one line of base64. Hand it over like any
    /// secret; with it, another machine reads what this one pushed.
    ///
    /// # Errors
    /// As [`open`](Self::open): `key-unavailable`, `key-mismatch`.
    pub fn export_key(options: &Options) -> Result<String> {
        Turnback::open(options)?;
        keys::export_master_key(&options.keys)
    }

    /// Writes the master key `text` (as [`export_key`](Self::export_key) prints it) where
    /// this machine looks for its key file. If the store `options` names holds data, the
    /// key must be its key.
    ///
    /// # Errors
    /// `invalid-argument` if `text` is not a key; `key-mismatch` if the store was made with
    /// another; `already-exists` if another key file is in the way (never replaced).
    pub fn import_key(options: &Options, text: &str) -> Result<KeyImport> {
        // The input is checked first: a store opened with it would call it TURNBACK_KEY.
        keys::decode_imported_key(text)?;
        let dir = options.store.clone().or_else(crate::storage::store::default_dir);
        if let Some(dir) = dir.filter(|d| d.join("store.db").exists()) {
            let check = StoreOptions {
                dir,
                keys: keys::KeyConfig::with_key(text.trim().to_string()),
                overrides: options.settings.clone(),
                create: false,
            };
            match Store::open(&check) {
                Ok(_) => {}
                Err(e) if e.code == ErrorCode::KeyMismatch => {
                    return Err(Error::new(
                        ErrorCode::KeyMismatch,
                        "this key is not the key of the store here: its data would not open",
                    ));
                }
                Err(e) => return Err(e),
            }
        }
        let (key_file, written) = keys::import_master_key(&options.keys, text)?;
        Ok(KeyImport { key_file, written })
    }
}
