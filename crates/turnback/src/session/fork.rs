//! Forks: a new session that carries an earlier one's turns, snapshots and conversation
//! history through a turn,
//! optionally with its files materialised into a separate working tree.
//!
//! Invariants: the fork holds its own copies of the turn and snapshot records (pointing at
//! the same content-addressed trees), so it outlives its parent: deleting the parent and
//! running `gc` leaves everything the fork reaches. Materialising writes only into a new or
//! empty directory, never follows a symlink, records nested repositories as skipped, and
//! reports success only after one sync of the file system made every file and name it
//! wrote durable.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;
use serde::Serialize;

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

/// What a fork made.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Forked {
    /// The new session.
    pub session: Session,
    /// Turns carried.
    pub turns: u64,
    /// Snapshots carried.
    pub snapshots: u64,
    /// History entries carried (those of the carried turns).
    pub history_entries: u64,
    /// Where the files were written, with `--into`.
    pub into: Option<PathBuf>,
    /// Files written there.
    pub files_written: u64,
    /// Paths not written (nested repositories), with why.
    pub not_written: Vec<String>,
}

/// Forks session `from` after turn `after` (default: its newest), into the same workspace
/// or, with `into`, into a new working tree holding the files as they were right after
/// that turn.
///
/// # Errors
/// `not-found` for an unknown session or turn; `already-exists` if `into` is not empty;
/// `not-found` if the state after the turn was not snapshotted.
pub fn fork(store: &Store, from: &str, after: Option<u64>, into: Option<&Path>, id: Option<&str>) -> Result<Forked> {
    let parent = Session::get(store, from)?.ok_or_else(|| Error::not_found(format!("session {from}")))?;
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
    let workspace = match into {
        Some(dir) => {
            prepare_dir(dir)?;
            Workspace::ensure(store, dir)?
        }
        None => Workspace::by_id(store, &parent.workspace_id)?,
    };
    let session = Session::create(store, &workspace, id)?;
    let (forked, snapshots, history_entries) = copy_records(store, &parent, session, &workspace, &carried, last)?;
    let (files_written, not_written) = match (into, state) {
        (Some(dir), Some(state)) => materialise(store, dir, &state)?,
        _ => (0, Vec::new()),
    };
    Ok(Forked {
        session: forked,
        turns: carried.len() as u64,
        snapshots,
        history_entries,
        into: into.map(Path::to_path_buf),
        files_written,
        not_written,
    })
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

fn prepare_dir(dir: &Path) -> Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(Error::new(ErrorCode::AlreadyExists, format!("{} is not empty", dir.display())));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(dir).context(dir),
        Err(e) => Err(e).context(dir),
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
