//! The key-value backend every repository is written against.
//!
//! Invariants:
//! - A [`Txn`] is all-or-nothing: its writes become visible together on `commit`, or not at
//!   all (dropped, failed, or the process died). Writers are serialized across processes
//!   (SQLite `BEGIN IMMEDIATE`), so a read inside a transaction stays true until it commits.
//! - Keys sort bytewise within a namespace; scans return them in that order.
//! - A [`KeyValueStore::read_snapshot`] reads one committed state for as long as it lives
//!   (SQLite: its own connection holding a read transaction; memory: a copy).
//! - The backend stores bytes; it never sees plaintext content or paths (repositories seal
//!   them before they get here).
//!
//! [`SqliteKv`] is the production backend (bundled SQLite, WAL, `synchronous=FULL`, schema
//! versioned by `user_version`); `MemoryKv` serves unit tests.

#[cfg(test)]
mod memory;
mod sqlite;

#[cfg(test)]
pub(crate) use memory::MemoryKv;
pub(crate) use sqlite::SqliteKv;

use std::fmt;

use crate::error::Result;

pub(crate) use crate::storage::schema::Ns;

/// A scan callback: receives each key and value, returns whether to go on.
pub(crate) type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool> + 'a;

/// A store of byte values under byte keys, grouped in namespaces.
pub(crate) trait KeyValueStore: Send + Sync + fmt::Debug {
    /// The value under `key`, if any (a committed read; no transaction needed).
    fn get(&self, ns: Ns, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Whether `key` exists, without reading its value.
    fn contains(&self, ns: Ns, key: &[u8]) -> Result<bool> {
        Ok(self.get(ns, key)?.is_some())
    }
    /// Which of `keys` exist in `ns`, answered from one consistent read.
    fn contains_each(&self, ns: Ns, keys: &[&[u8]]) -> Result<Vec<bool>> {
        keys.iter().map(|k| self.contains(ns, k)).collect()
    }
    /// Calls `f` for each entry whose key starts with `prefix`, in key order, until `f`
    /// returns `false`.
    fn scan(&self, ns: Ns, prefix: &[u8], f: &mut Visit<'_>) -> Result<()>;
    /// Like [`scan`](Self::scan) but reads keys only (cheap for namespaces of large values).
    fn scan_keys(&self, ns: Ns, prefix: &[u8], f: &mut dyn FnMut(&[u8]) -> Result<bool>) -> Result<()>;
    /// Every key of `ns`, in order, as text (a byte that is not UTF-8 replaced), listed
    /// whole before anything reads their values.
    fn text_keys(&self, ns: Ns) -> Result<Vec<String>> {
        let mut keys = Vec::new();
        self.scan_keys(ns, b"", &mut |k| {
            keys.push(String::from_utf8_lossy(k).into_owned());
            Ok(true)
        })?;
        Ok(keys)
    }
    /// Starts a write transaction, waiting for other writers.
    fn begin(&self) -> Result<Box<dyn Txn + '_>>;
    /// A read-only view of the store as committed now: every read through it sees that one
    /// state, whatever other writers commit meanwhile (a check that reads one table and
    /// then another never sees half of a transaction). Its `begin` fails.
    fn read_snapshot(&self) -> Result<Box<dyn KeyValueStore>>;
    /// Returns freed space to the file system where the backend can.
    fn compact(&self) -> Result<()>;
    /// While `on`, keeps little of what is read in memory (best effort): for a long read of
    /// values asked once, such as a stat cache's pieces.
    fn reading_once(&self, _on: bool) {}
    /// Bytes the backend occupies on disk.
    fn disk_bytes(&self) -> Result<u64>;
}

/// A write transaction. Dropping it without [`commit`](Txn::commit) discards every write.
pub(crate) trait Txn {
    /// Reads through this transaction's own writes.
    fn get(&mut self, ns: Ns, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Keys starting with `prefix`, in order, including this transaction's writes.
    fn keys(&mut self, ns: Ns, prefix: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Sets `key` to `value`.
    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()>;
    /// Sets `key` only if it is absent; returns whether it wrote.
    fn put_if_absent(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<bool>;
    /// Removes `key`; returns whether it was there.
    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<bool>;
    /// Makes every write durable and visible at once.
    fn commit(self: Box<Self>) -> Result<()>;
}

/// The smallest key greater than every key starting with `prefix` (`None`: no bound).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::kv::sqlite::SqliteKv;

    fn backends() -> Vec<(Box<dyn KeyValueStore>, Option<tempfile::TempDir>)> {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteKv::open(&dir.path().join("store.db")).unwrap();
        vec![(Box::new(MemoryKv::new()), None), (Box::new(sqlite), Some(dir))]
    }

    #[test]
    fn committed_writes_are_visible_and_dropped_ones_are_not() {
        for (kv, _dir) in backends() {
            let mut t = kv.begin().unwrap();
            t.put("a", b"k1", b"v1").unwrap();
            assert_eq!(t.get("a", b"k1").unwrap().unwrap(), b"v1");
            t.commit().unwrap();
            let mut t = kv.begin().unwrap();
            t.put("a", b"k2", b"v2").unwrap();
            t.delete("a", b"k1").unwrap();
            drop(t);
            assert_eq!(kv.get("a", b"k1").unwrap().unwrap(), b"v1");
            assert!(kv.get("a", b"k2").unwrap().is_none());
        }
    }

    #[test]
    fn scans_stay_inside_prefix_and_namespace_in_key_order() {
        for (kv, _dir) in backends() {
            let mut t = kv.begin().unwrap();
            for k in [&b"p/2"[..], b"p/1", b"q/1", b"p\xff", b"p"] {
                t.put("a", k, k).unwrap();
            }
            t.put("b", b"p/3", b"x").unwrap();
            assert!(!t.put_if_absent("a", b"p/1", b"other").unwrap());
            assert_eq!(t.keys("a", b"p/").unwrap(), vec![b"p/1".to_vec(), b"p/2".to_vec()]);
            t.commit().unwrap();
            let mut seen = Vec::new();
            kv.scan("a", b"p", &mut |k, v| {
                assert_eq!(k, v);
                seen.push(k.to_vec());
                Ok(true)
            })
            .unwrap();
            assert_eq!(seen, vec![b"p".to_vec(), b"p/1".to_vec(), b"p/2".to_vec(), b"p\xff".to_vec()]);
        }
    }

    #[test]
    fn a_read_snapshot_sees_one_state_whatever_commits_after_it() {
        for (kv, _dir) in backends() {
            let mut t = kv.begin().unwrap();
            t.put("a", b"k1", b"v1").unwrap();
            t.commit().unwrap();
            let snap = kv.read_snapshot().unwrap();
            let mut t = kv.begin().unwrap();
            t.put("a", b"k2", b"v2").unwrap();
            t.delete("a", b"k1").unwrap();
            t.commit().unwrap();
            assert_eq!(snap.get("a", b"k1").unwrap().as_deref(), Some(&b"v1"[..]));
            assert!(!snap.contains("a", b"k2").unwrap());
            assert_eq!(snap.contains_each("a", &[b"k1", b"k2"]).unwrap(), [true, false]);
            assert!(snap.begin().is_err(), "a snapshot is read-only");
            assert!(kv.get("a", b"k2").unwrap().is_some(), "the store itself moved on");
        }
    }

    #[test]
    fn a_read_inside_the_same_threads_transaction_is_an_error_not_a_deadlock() {
        let dir = tempfile::tempdir().unwrap();
        let kv = SqliteKv::open(&dir.path().join("store.db")).unwrap();
        let txn = kv.begin().unwrap();
        assert!(kv.get("a", b"k").is_err());
        drop(txn);
        assert!(kv.get("a", b"k").unwrap().is_none());
    }

    #[test]
    fn prefix_end_handles_ff() {
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
