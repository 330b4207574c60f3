//! The workspace registry: every directory tree turnback has recorded.
//!
//! Invariants: a workspace is identified by its canonical path; the store keeps that path
//! only sealed, and finds it again by a keyed lookup id, so the store never shows which
//! directories a person works in. Registering the same directory twice, even from two
//! processes at once, gives one workspace.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::base::hex::hex;
use crate::base::time::now_ms;
use crate::error::{Error, IoResultExt, Result};
use crate::fs::relpath::{self, RelPath};
use crate::storage::schema;
use crate::storage::store::Store;

const WORKSPACE_SCHEMA: u16 = 1;

/// A registered workspace.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Workspace {
    /// Opaque id (UUID).
    pub(crate) id: String,
    /// The canonical root directory.
    pub(crate) root: PathBuf,
    /// When it was first registered (ms since epoch).
    pub(crate) created_at: i64,
}

fn lookup_key(store: &Store, root: &Path) -> Vec<u8> {
    hex(&store.keys().lookup_id("workspace", root.as_os_str().as_bytes())).into_bytes()
}

impl Workspace {
    /// Finds the workspace rooted at `dir` (canonicalized), registering it if new.
    ///
    /// # Errors
    /// `io` if `dir` is not an existing directory.
    pub(crate) fn ensure(store: &Store, dir: &Path) -> Result<Self> {
        let root = dir.canonicalize().context(dir)?;
        if !root.is_dir() {
            return Err(Error::invalid(format!("workspace {} is not a directory", root.display())));
        }
        let key = lookup_key(store, &root);
        if let Some(ws) = store.get_record::<Workspace>(schema::WORKSPACES, &key)? {
            return Ok(ws);
        }
        let ws = Workspace { id: uuid::Uuid::new_v4().to_string(), root, created_at: now_ms() };
        let sealed = store.seal_record(schema::WORKSPACES, &key, WORKSPACE_SCHEMA, &ws)?;
        let mut txn = store.kv().begin()?;
        let inserted = txn.put_if_absent(schema::WORKSPACES, &key, &sealed)?;
        txn.commit()?;
        if inserted {
            Ok(ws)
        } else {
            // Another process registered it first; use theirs.
            store.get_record(schema::WORKSPACES, &key)?.ok_or_else(|| Error::not_found("workspace"))
        }
    }

    /// The workspace rooted at `dir`, if it is registered (registers nothing).
    ///
    /// # Errors
    /// Store errors; `io` if `dir` does not exist.
    pub(crate) fn find(store: &Store, dir: &Path) -> Result<Option<Self>> {
        let root = dir.canonicalize().context(dir)?;
        store.get_record::<Workspace>(schema::WORKSPACES, &lookup_key(store, &root))
    }

    /// Finds a registered workspace by id.
    pub(crate) fn by_id(store: &Store, id: &str) -> Result<Self> {
        let mut found = None;
        store.kv().scan(schema::WORKSPACES, b"", &mut |k, v| {
            let ws: Workspace = store.open_record(schema::WORKSPACES, k, v)?;
            if ws.id == id {
                found = Some(ws);
                return Ok(false);
            }
            Ok(true)
        })?;
        found.ok_or_else(|| Error::not_found(format!("workspace {id}")))
    }

    /// Turns a path given by a person or agent (absolute, or relative to `cwd`) into a
    /// path inside this workspace ([`relpath::resolve`]).
    ///
    /// # Errors
    /// As [`relpath::resolve`].
    pub(crate) fn resolve(&self, path: &Path, cwd: &Path, protected: &[PathBuf]) -> Result<RelPath> {
        relpath::resolve(&self.root, path, cwd, protected)
    }

    /// The absolute path of `rel` (for messages and tests; access goes through `files`).
    pub(crate) fn absolute(&self, rel: &RelPath) -> PathBuf {
        self.root.join(rel.as_path())
    }
}
