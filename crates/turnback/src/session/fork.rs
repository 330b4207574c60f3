//! Forks: a new session that carries an earlier one's turns, snapshots and conversation
//! history through a turn,
//! optionally with its files materialised into a separate working tree.
//!
//! Invariants: the fork holds its own copies of the turn and snapshot records (pointing at
//! the same content-addressed trees), so it outlives its parent: deleting the parent and
//! running `gc` leaves everything the fork reaches. Materialising writes only into a new or
//! empty directory outside the workspace, turnback's store and keys and any `.git`, reached
//! through no symlink ([`fork_target`]); it never follows a symlink, records nested
//! repositories as skipped, and reports success only after one sync of the file system made
//! every file and name it wrote durable.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use crate::error::{Error, ErrorCode, IoResultExt, Result};
use crate::fs::files::FileSystem;
use crate::fs::relpath::dir_of;
use crate::session::Session;
use crate::session::turn::{self, Turn};
use crate::session::workspace::Workspace;
use crate::snapshot::tree::{Node, NodeKind};
use crate::snapshot::{self, SnapshotRecord};
use crate::storage::content::ContentId;
use crate::storage::store::Store;

/// What a fork made (the facade's view of it is [`Forked`](crate::Forked)).
#[derive(Debug, Clone)]
pub(crate) struct Forked {
    /// The new session.
    pub(crate) session: Session,
    /// Turns carried.
    pub(crate) turns: u64,
    /// Snapshots carried.
    pub(crate) snapshots: u64,
    /// History entries carried (those of the carried turns).
    pub(crate) history_entries: u64,
    /// Where the files were written, with `--into`.
    pub(crate) into: Option<PathBuf>,
    /// Files written there.
    pub(crate) files_written: u64,
    /// Paths not written (nested repositories), with why.
    pub(crate) not_written: Vec<String>,
}

/// Forks session `from` after turn `after` (default: its newest), into the same workspace
/// or, with `into`, into a new working tree holding the files as they were right after
/// that turn.
///
/// # Errors
/// `not-found` for an unknown session or turn, or if the state after the turn was not
/// snapshotted; for `into`, as [`fork_target`].
pub(crate) fn fork(
    store: &Store,
    from: &str,
    after: Option<u64>,
    into: Option<&Path>,
    id: Option<&str>,
) -> Result<Forked> {
    let parent = Session::get(store, from)?.ok_or_else(|| Error::not_found(format!("session {from}")))?;
    let source = Workspace::by_id(store, &parent.workspace_id)?;
    let into = into.map(|dir| fork_target(&source.root, store.protected_paths(), dir)).transpose()?;
    let all = turn::list(store, from)?;
    let last = after.unwrap_or_else(|| all.last().map_or(0, |t| t.index));
    if after.is_some() && !all.iter().any(|t| t.index == last) {
        return Err(Error::not_found(format!("turn {last} of session {from}")));
    }
    let carried: Vec<&Turn> = all.iter().filter(|t| t.index <= last).collect();
    // Everything that can fail is checked before anything is written, and gc waits.
    let _objects = crate::fs::lock::objects(&store.locks_dir(), false)?;
    let state = match into {
        Some(_) => Some(state_after(store, &all, last)?),
        None => None,
    };
    let workspace = match &into {
        Some(dir) => {
            std::fs::create_dir_all(dir).context(dir)?;
            Workspace::ensure(store, dir)?
        }
        None => source,
    };
    let session = Session::create(store, &workspace, id)?;
    let (forked, snapshots, history_entries) = copy_records(store, &parent, session, &workspace, &carried, last)?;
    let (files_written, not_written) = match (&into, state) {
        (Some(dir), Some(state)) => materialise(store, dir, &state)?,
        _ => (0, Vec::new()),
    };
    Ok(Forked {
        session: forked,
        turns: carried.len() as u64,
        snapshots,
        history_entries,
        into,
        files_written,
        not_written,
    })
}

/// Where `fork --into` may write: `into` (absolute) with `.` and `..` resolved, if it is a
/// new or empty directory that is neither inside nor above the workspace at `workspace`
/// (canonical) or one of turnback's `protected` paths (its store and keys), has no `.git`
/// among its components, and is reached through no symlink.
///
/// Each existing component is examined once, from the root down, without following it: a
/// symlink anywhere on the way is refused, not resolved, so the path returned is the one
/// the operating system will write to and the comparisons with the workspace are exact.
///
/// # Errors
/// `invalid-argument` for a relative `into`; `path-rejected` for a `.git` component, a
/// symlink on the way, or a place inside or above the workspace, the store or the keys;
/// `already-exists` for anything there but an empty directory.
pub(crate) fn fork_target(workspace: &Path, protected: &[PathBuf], into: &Path) -> Result<PathBuf> {
    let reject =
        |why: String| Error::new(ErrorCode::PathRejected, format!("cannot fork into {}: {why}", into.display()));
    if !into.is_absolute() {
        return Err(Error::new(ErrorCode::InvalidArgument, format!("{} is not an absolute path", into.display())));
    }
    if into.components().any(|c| c.as_os_str() == ".git") {
        return Err(reject("it is inside a .git directory; turnback never touches a repository's internals".into()));
    }
    let mut target = PathBuf::new();
    // How many of `target`'s last components do not exist (below a missing one, none does).
    let mut missing = 0usize;
    for c in into.components() {
        match c {
            Component::CurDir => {}
            // The component popped was checked not to be a symlink, so `..` means its parent.
            Component::ParentDir => {
                if target.pop() {
                    missing = missing.saturating_sub(1);
                }
            }
            Component::Normal(name) => {
                target.push(name);
                if missing > 0 {
                    missing += 1;
                    continue;
                }
                match std::fs::symlink_metadata(&target) {
                    Ok(m) if m.file_type().is_symlink() => {
                        return Err(reject(format!("{} is a symlink; give the path it leads to", target.display())));
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing = 1,
                    Err(e) => return Err(e).context(&target),
                }
            }
            Component::RootDir | Component::Prefix(_) => target.push(c.as_os_str()),
        }
    }
    let places = std::iter::once((workspace.to_path_buf(), "the workspace"))
        .chain(protected.iter().map(|p| (p.canonicalize().unwrap_or_else(|_| p.clone()), "turnback's store or keys")));
    for (place, what) in places {
        if target == place {
            return Err(reject(format!("it is {what}")));
        }
        if target.starts_with(&place) {
            return Err(reject(format!("it is inside {what}; fork into a directory outside it")));
        }
        if place.starts_with(&target) {
            return Err(reject(format!("it holds {what}; fork into a directory outside it")));
        }
    }
    if missing == 0 {
        let not_empty = |why: &str| Error::new(ErrorCode::AlreadyExists, format!("{} {why}", target.display()));
        if !std::fs::symlink_metadata(&target).context(&target)?.is_dir() {
            return Err(not_empty("is not a directory"));
        }
        if std::fs::read_dir(&target).context(&target)?.next().is_some() {
            return Err(not_empty("is not empty"));
        }
    }
    Ok(target)
}

/// Copies into `session`, in one transaction, the `carried` turns of `parent` with their
/// snapshot records (new ids, the same trees) and their history; the fork's round is
/// `last`. Returns the fork's session, and how many snapshots and entries it carries.
fn copy_records(
    store: &Store,
    parent: &Session,
    session: Session,
    workspace: &Workspace,
    carried: &[&Turn],
    last: u64,
) -> Result<(Session, u64, u64)> {
    // Read everything first: the store's reads and its write transaction share one
    // connection.
    let mut originals = std::collections::HashMap::new();
    for t in carried {
        for id in std::iter::once(&t.snapshot.id).chain(t.end_snapshot.as_ref().map(|e| &e.id)).flatten() {
            originals.insert(id.clone(), snapshot::get(store, id)?);
        }
    }
    let history = crate::session::history::read(store, &parent.id, &crate::session::history::Selection::All)?.entries;
    let mut turn_map = std::collections::HashMap::new();
    let mut txn = store.kv().begin()?;
    let mut snapshots = 0;
    for t in carried {
        let mut copy = (*t).clone();
        copy.turn_id = turn::new_id();
        turn_map.insert(t.turn_id.clone(), copy.turn_id.clone());
        copy.session_id = session.id.clone();
        let mut refs = vec![&mut copy.snapshot];
        if let Some(e) = copy.end_snapshot.as_mut() {
            refs.push(e);
        }
        for r in refs {
            if let Some(old) = r.id.clone() {
                let mut snap = originals[&old].clone();
                snap.snapshot_id = uuid::Uuid::now_v7().to_string();
                snap.session_id = session.id.clone();
                snap.workspace_id = workspace.id.clone();
                snap.turn_id = Some(copy.turn_id.clone());
                snapshot::put_record(store, &mut *txn, &snap)?;
                r.id = Some(snap.snapshot_id);
                snapshots += 1;
            }
        }
        turn::put(store, &mut *txn, &copy)?;
    }
    let history_entries = crate::session::history::copy_in(store, &mut *txn, &session.id, &history, &turn_map)?;
    let forked = Session { parent: Some(parent.id.clone()), prompt_round: last, ..session };
    crate::session::put_in(store, &mut *txn, &forked)?;
    txn.commit()?;
    Ok((forked, snapshots, history_entries))
}

/// Writes the files of snapshot `state` into the new directory `dir` (never through a
/// symlink); nested repositories are named, not written. Returns how many files were
/// written, and what was not.
///
/// The directories are made first, in order; the files are then written in parallel (one
/// thread per core, each reading its pieces from the store as it writes them) and made
/// durable together by one sync of the file system, not one sync per file. On the first
/// failure the others stop and the error is returned.
fn materialise(store: &Store, dir: &Path, state: &SnapshotRecord) -> Result<(u64, Vec<String>)> {
    let root = state.root.as_deref().and_then(ContentId::from_hex).ok_or_else(|| Error::not_found("a tree"))?;
    let nodes: Vec<(Vec<u8>, Node)> = snapshot::flatten(store, &root)?.into_iter().collect();
    // Opened before anything is written: its sync reports every write-back failure since.
    let fs = FileSystem::of(dir)?;
    let mut not_written = Vec::new();
    let mut made: Option<&[u8]> = None;
    for (path, node) in &nodes {
        match &node.kind {
            NodeKind::File(_) | NodeKind::Symlink(_) => {
                let parent = dir_of(path);
                if made != Some(parent) {
                    let at = dir.join(OsStr::from_bytes(parent));
                    std::fs::create_dir_all(&at).context(&at)?;
                    made = Some(parent);
                }
            }
            NodeKind::Gitlink(commit) => {
                not_written.push(format!("{} (nested repository at {commit})", String::from_utf8_lossy(path)));
            }
            NodeKind::Tree(_) => {}
        }
    }
    let stop = AtomicBool::new(false);
    let written: Result<u64> = nodes
        .par_iter()
        .map(|(path, node)| {
            if stop.load(Ordering::Relaxed) {
                return Ok(0);
            }
            let target = dir.join(OsStr::from_bytes(path));
            let r = match &node.kind {
                NodeKind::File(id) => write_new(store, &target, id, node.mode).map(|()| 1),
                NodeKind::Symlink(id) => store.read_object(id).and_then(|(_, link)| {
                    std::os::unix::fs::symlink(OsStr::from_bytes(&link), &target).context(&target).map(|()| 1)
                }),
                NodeKind::Gitlink(_) | NodeKind::Tree(_) => Ok(0),
            };
            if r.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            r
        })
        .sum();
    let files_written = written?;
    fs.sync()?;
    Ok((files_written, not_written))
}

/// The snapshot of the state right after turn `index`: its end, else the next start.
pub(crate) fn state_after(store: &Store, turns: &[Turn], index: u64) -> Result<SnapshotRecord> {
    let end = turns.iter().find(|t| t.index == index).and_then(|t| t.end_snapshot.as_ref()).and_then(|e| e.id.clone());
    let next = turns.iter().find(|t| t.index == index + 1).and_then(|t| t.snapshot.id.clone());
    match end.or(next) {
        Some(id) => snapshot::get(store, &id),
        None => Err(Error::not_found(format!("a snapshot of the state right after turn {index}"))),
    }
}

/// Writes object `id` into the new file `target` (its directory made already) as its
/// pieces are read and verified (memory does not grow with the file's size); runs of zeros
/// become holes, which read back as zeros in a new file. Not synced: the caller syncs the
/// file system once. A file whose content fails verification is removed, so nothing
/// unverified stays.
fn write_new(store: &Store, target: &Path, id: &ContentId, mode: u32) -> Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(target)
        .context(target)?;
    let written = (|| {
        let mut len = 0u64;
        store.read_object_to(id, &mut |piece| {
            len += piece.len() as u64;
            if is_zeros(piece) {
                f.seek(SeekFrom::Current(piece.len() as i64)).map(|_| ()).context(target)
            } else {
                f.write_all(piece).context(target)
            }
        })?;
        f.set_len(len).context(target)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777)).context(target)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(target);
    }
    written
}

/// Whether `bytes` are all zeros (compared a page at a time, as memory is).
fn is_zeros(bytes: &[u8]) -> bool {
    const PAGE: [u8; 4096] = [0; 4096];
    bytes.chunks(PAGE.len()).all(|c| c == &PAGE[..c.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace `ws` (canonical) with a file and a `.git`, a store beside it, and room
    /// for a fork next to both.
    struct Places {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        ws: PathBuf,
        store: PathBuf,
    }

    fn places() -> Places {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let (ws, store) = (root.join("ws"), root.join("store"));
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("a.txt"), "a").unwrap();
        std::fs::create_dir(&store).unwrap();
        Places { _tmp: tmp, root, ws, store }
    }

    fn target(p: &Places, into: &Path) -> Result<PathBuf> {
        fork_target(&p.ws, std::slice::from_ref(&p.store), into)
    }

    fn code(p: &Places, into: &Path) -> ErrorCode {
        target(p, into).expect_err(&format!("{} must be refused", into.display())).code
    }

    #[test]
    fn a_fork_target_is_a_new_or_empty_directory_outside_the_workspace() {
        let p = places();
        assert_eq!(target(&p, &p.root.join("fork")).unwrap(), p.root.join("fork"));
        assert_eq!(target(&p, &p.root.join("new/deeper/fork")).unwrap(), p.root.join("new/deeper/fork"));
        std::fs::create_dir(p.root.join("empty")).unwrap();
        assert_eq!(target(&p, &p.root.join("empty")).unwrap(), p.root.join("empty"));
        // `.` and `..` are resolved; a name that merely starts like the workspace is outside it.
        assert_eq!(target(&p, &p.ws.join("src/../../fork/.")).unwrap(), p.root.join("fork"));
        assert_eq!(target(&p, &p.root.join("ws-fork")).unwrap(), p.root.join("ws-fork"));
        assert_eq!(target(&p, &p.root.join("missing/../empty")).unwrap(), p.root.join("empty"));
    }

    #[test]
    fn a_fork_target_in_a_git_directory_the_workspace_or_the_store_is_rejected() {
        let p = places();
        for into in [
            p.ws.join(".git"),
            p.ws.join(".git/forked"),
            p.root.join("elsewhere/.git/forked"),
            p.ws.clone(),
            p.ws.join("src"),
            p.ws.join("new/fork"),
            p.root.clone(),
            p.store.join("fork"),
        ] {
            assert_eq!(code(&p, &into), ErrorCode::PathRejected, "{}", into.display());
        }
        let holds = target(&p, &p.root).unwrap_err();
        assert!(holds.message.contains("holds the workspace"), "{}", holds.message);
    }

    #[test]
    fn a_fork_target_reached_through_a_symlink_is_rejected_not_resolved() {
        let p = places();
        std::fs::create_dir(p.root.join("real")).unwrap();
        std::os::unix::fs::symlink(p.root.join("real"), p.root.join("link")).unwrap();
        std::os::unix::fs::symlink(&p.ws, p.root.join("ws-link")).unwrap();
        for into in [p.root.join("link"), p.root.join("link/fork"), p.root.join("ws-link/fork"), p.root.join("link/..")]
        {
            assert_eq!(code(&p, &into), ErrorCode::PathRejected, "{}", into.display());
        }
        assert!(std::fs::read_dir(p.root.join("real")).unwrap().next().is_none());
    }

    #[test]
    fn a_fork_target_that_holds_something_or_is_relative_is_refused() {
        let p = places();
        std::fs::create_dir(p.root.join("full")).unwrap();
        std::fs::write(p.root.join("full/f"), "f").unwrap();
        std::fs::write(p.root.join("file"), "f").unwrap();
        assert_eq!(code(&p, &p.root.join("full")), ErrorCode::AlreadyExists);
        assert_eq!(code(&p, &p.root.join("missing/../full")), ErrorCode::AlreadyExists);
        assert_eq!(code(&p, &p.root.join("file")), ErrorCode::AlreadyExists);
        assert_eq!(code(&p, Path::new("relative/fork")), ErrorCode::InvalidArgument);
    }
}
