//! Liveness locks: how one process tells whether another is still working on something.
//!
//! Invariants:
//! - A process that stages a checkpoint holds an exclusive `flock` on its own owner file
//!   (`locks/owner-<uuid>.lock`) for as long as it lives; the kernel drops the lock when
//!   the process dies, however it dies. So "the lock can be taken" means "the owner is
//!   gone" and its incomplete work may be reconciled; "the lock is held" means it is still
//!   running and its work must be left alone.
//! - Owner files hold no data; a stale one is removed by whoever proves it stale.

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{IoResultExt, Result};

/// This process's held owner lock.
#[derive(Debug)]
pub struct OwnerLock {
    id: String,
    path: PathBuf,
    _file: File,
}

impl OwnerLock {
    /// Creates and locks a fresh owner file in `dir`.
    pub fn acquire(dir: &Path) -> Result<Self> {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).context(dir)?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let path = dir.join(format!("owner-{id}.lock"));
        let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).context(&path)?;
        file.lock().context(&path)?;
        Ok(OwnerLock { id, path, _file: file })
    }

    /// The owner id recorded beside the work this process does.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for OwnerLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether the process that recorded `owner` in `dir` is still alive.
pub fn owner_alive(dir: &Path, owner: &str) -> Result<bool> {
    if owner.is_empty() || !owner.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Ok(false);
    }
    let path = dir.join(format!("owner-{owner}.lock"));
    let file = match OpenOptions::new().write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).context(&path),
    };
    match file.try_lock() {
        Ok(()) => {
            let _ = std::fs::remove_file(&path);
            Ok(false)
        }
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(e)) => Err(e).context(&path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_lock_is_alive_and_dropped_lock_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let lock = OwnerLock::acquire(dir.path()).unwrap();
        let id = lock.id().to_string();
        assert!(owner_alive(dir.path(), &id).unwrap());
        drop(lock);
        assert!(!owner_alive(dir.path(), &id).unwrap());
        assert!(!owner_alive(dir.path(), "../etc").unwrap());
    }
}
