//! Garbage collection of content: every object no live root reaches is removed, and
//! anything else snapshots store ahead of their commit that no record names.
//!
//! Invariants: the sweep holds the objects lock exclusively, so no snapshot is writing
//! objects it has not referenced yet (snapshots hold it shared). Records written without
//! that lock (checkpoint artifacts, which may also point at packed content instead of
//! storing their own copy) are read inside the very transactions that delete, so an
//! object such a writer commits a reference to is never swept.

use std::collections::HashSet;

use crate::error::Result;
use crate::fs::lock;
use crate::storage::content::ContentId;
use crate::storage::kv::Txn;
use crate::storage::store::Store;
use crate::storage::{object, pack};

/// What keeps content alive.
pub(crate) struct LiveRoots<'a> {
    /// Objects reached by records that change only under the objects lock (snapshot
    /// trees), computed once the lock is held.
    pub reached: &'a dyn Fn() -> Result<HashSet<ContentId>>,
    /// Objects named by records written without the lock (artifacts), read inside each
    /// deleting transaction.
    pub named_in: &'a dyn Fn(&mut dyn Txn) -> Result<HashSet<ContentId>>,
    /// Removes what snapshots store ahead of their commit (beside content) that no record
    /// names, while the lock keeps snapshots out.
    pub sweep_stored_ahead: &'a dyn Fn() -> Result<()>,
}

/// What a sweep removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Objects removed (on their own or packed).
    pub objects: u64,
    /// Stored bytes freed.
    pub bytes: u64,
}

/// Removes what snapshots stored ahead and nothing names (`roots.sweep_stored_ahead`),
/// every object that `roots` do not keep alive, then repacks sparse blocks.
pub(crate) fn sweep(store: &Store, roots: &LiveRoots<'_>) -> Result<Swept> {
    let exclusive = lock::objects(&store.locks_dir(), true)?;
    sweep_locked(store, roots, exclusive)
}

/// [`sweep`] if no writer holds the objects lock now; `None` (nothing swept) if one does
/// (a sweep on the way of a mutation that keeps content it has not recorded yet waits for
/// the next one instead).
pub(crate) fn sweep_if_free(store: &Store, roots: &LiveRoots<'_>) -> Result<Option<Swept>> {
    match lock::try_objects_exclusive(&store.locks_dir())? {
        Some(exclusive) => sweep_locked(store, roots, exclusive).map(Some),
        None => Ok(None),
    }
}

fn sweep_locked(store: &Store, roots: &LiveRoots<'_>, _exclusive: lock::NamedLock) -> Result<Swept> {
    (roots.sweep_stored_ahead)()?;
    let mut live = (roots.reached)()?;
    let mut txn = store.kv().begin()?;
    live.extend((roots.named_in)(&mut *txn)?);
    let (removed, bytes) = object::sweep_in(&mut *txn, &live)?;
    txn.commit()?;
    let packed = pack::sweep(store.keys(), store.kv(), &live, roots.named_in)?;
    Ok(Swept { objects: removed + packed.objects, bytes: bytes + packed.bytes })
}
