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

/// How old an unrenamed temporary owner file must be before a sweep removes it.
const TEMP_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// This process's held owner lock.
#[derive(Debug)]
pub(crate) struct OwnerLock {
    id: String,
    path: PathBuf,
    _file: File,
}

impl OwnerLock {
    /// Creates and locks a fresh owner file in `dir`.
    pub(crate) fn acquire(dir: &Path) -> Result<Self> {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).context(dir)?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let path = dir.join(format!("owner-{id}.lock"));
        // Locked under a temporary name first: a file with the final name is always locked
        // from birth, so a sweep can never mistake a just-born owner for a dead one.
        let temp = dir.join(format!("tmp-owner-{id}.lock"));
        let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp).context(&temp)?;
        file.lock().context(&temp)?;
        std::fs::rename(&temp, &path).context(&path)?;
        Ok(OwnerLock { id, path, _file: file })
    }

    /// The owner id recorded beside the work this process does.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for OwnerLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A named lock in the store's lock directory, held until dropped (or the process dies).
#[derive(Debug)]
pub(crate) struct NamedLock {
    _file: File,
}

impl NamedLock {
    /// Waits for and takes the lock `name` exclusively (one holder at a time).
    pub(crate) fn exclusive(dir: &Path, name: &str) -> Result<Self> {
        let file = Self::open(dir, name)?;
        file.lock().context(dir.join(name))?;
        Ok(NamedLock { _file: file })
    }

    /// Takes the lock `name` exclusively if nobody holds it (`None`: somebody does).
    pub(crate) fn try_exclusive(dir: &Path, name: &str) -> Result<Option<Self>> {
        let file = Self::open(dir, name)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(NamedLock { _file: file })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(e).context(dir.join(name)),
        }
    }

    /// Waits for and takes the lock `name` shared (any number of shared holders, no
    /// exclusive one).
    pub(crate) fn shared(dir: &Path, name: &str) -> Result<Self> {
        let file = Self::open(dir, name)?;
        file.lock_shared().context(dir.join(name))?;
        Ok(NamedLock { _file: file })
    }

    fn open(dir: &Path, name: &str) -> Result<File> {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).context(dir)?;
        let name: String = name.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
        let path = dir.join(format!("{name}.lock"));
        OpenOptions::new().write(true).create(true).truncate(false).mode(0o600).open(&path).context(&path)
    }
}

/// The lock turnback's writers to one workspace hold in turn (mutations, rollbacks), so
/// none reads a file another is about to replace.
pub(crate) fn workspace(dir: &Path, workspace_id: &str) -> Result<NamedLock> {
    NamedLock::exclusive(dir, &format!("workspace-{workspace_id}"))
}

/// The lock snapshots of one session hold in turn: two processes snapshotting one
/// session wait for each other; neither is skipped.
pub(crate) fn session(dir: &Path, session_id: &str) -> Result<NamedLock> {
    NamedLock::exclusive(dir, &format!("session-{session_id}"))
}

/// Writers of objects not yet referenced by a committed record (snapshots) hold this
/// shared; `gc` holds it exclusive, so it never sweeps what a snapshot is writing.
pub(crate) fn objects(dir: &Path, exclusive: bool) -> Result<NamedLock> {
    if exclusive { NamedLock::exclusive(dir, "objects") } else { NamedLock::shared(dir, "objects") }
}

/// The objects lock taken exclusively if nobody holds it (`None`: a writer does — which
/// may be this very process, so waiting could never end).
pub(crate) fn try_objects_exclusive(dir: &Path) -> Result<Option<NamedLock>> {
    NamedLock::try_exclusive(dir, "objects")
}

/// Whether the process that recorded `owner` in `dir` is still alive.
pub(crate) fn owner_alive(dir: &Path, owner: &str) -> Result<bool> {
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

/// Removes the owner files of processes that are gone (a process killed after finishing
/// its work leaves one behind). Returns how many were removed.
pub(crate) fn sweep(dir: &Path) -> Result<u64> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).context(dir),
    };
    let mut removed = 0;
    for entry in entries {
        let name = entry.context(dir)?.file_name();
        let name = name.to_string_lossy();
        if let Some(owner) = name.strip_prefix("owner-").and_then(|n| n.strip_suffix(".lock"))
            && !owner_alive(dir, owner)?
        {
            removed += 1;
        } else if name.starts_with("tmp-owner-") {
            // Its creator died in the instant between creating and renaming it. A young one
            // may be a creator that has not taken the lock yet, so only old ones go.
            let path = dir.join(&*name);
            let old = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > TEMP_GRACE));
            if old && std::fs::remove_file(&path).is_ok() {
                removed += 1;
            }
        }
    }
    Ok(removed)
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

    #[test]
    fn sweep_removes_dead_owners_and_keeps_live_ones() {
        let dir = tempfile::tempdir().unwrap();
        let live = OwnerLock::acquire(dir.path()).unwrap();
        std::fs::write(dir.path().join("owner-deadbeef.lock"), "").unwrap();
        let young = dir.path().join("tmp-owner-cafe.lock");
        std::fs::write(&young, "").unwrap();
        assert_eq!(sweep(dir.path()).unwrap(), 1);
        assert!(young.exists(), "a young temporary file may belong to a process still starting");
        let old = std::time::SystemTime::now() - 2 * TEMP_GRACE;
        std::fs::File::options().write(true).open(&young).unwrap().set_modified(old).unwrap();
        assert_eq!(sweep(dir.path()).unwrap(), 1);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from(format!("owner-{}.lock", live.id()))]);
    }
}
