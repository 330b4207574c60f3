//! The key-value backend every repository is written against.
//!
//! Invariants:
//! - A [`Txn`] is all-or-nothing: its writes become visible together on `commit`, or not at
//!   all (dropped, failed, or the process died). Writers are serialized across processes
//!   (SQLite `BEGIN IMMEDIATE`), so a read inside a transaction stays true until it commits.
//! - Keys sort bytewise within a namespace; scans return them in that order.
//! - The backend stores bytes; it never sees plaintext content or paths (repositories seal
//!   them before they get here).
//!
//! [`SqliteKv`] is the production backend (bundled SQLite, WAL, `synchronous=FULL`, schema
//! versioned by `user_version`); [`MemoryKv`] serves unit tests.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{Error, ErrorCode, IoResultExt, Result};

/// A namespace: one logical table of the store.
pub type Ns = &'static str;

/// A scan callback: receives each key and value, returns whether to go on.
pub type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool> + 'a;

/// A store of byte values under byte keys, grouped in namespaces.
pub trait KeyValueStore: Send + Sync + fmt::Debug {
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
    /// Starts a write transaction, waiting for other writers.
    fn begin(&self) -> Result<Box<dyn Txn + '_>>;
    /// Returns freed space to the file system where the backend can.
    fn compact(&self) -> Result<()>;
    /// Bytes the backend occupies on disk.
    fn disk_bytes(&self) -> Result<u64>;
}

/// A write transaction. Dropping it without [`commit`](Txn::commit) discards every write.
pub trait Txn {
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
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

const SCHEMA_VERSION: i64 = 2;

/// The production backend: one SQLite database file.
pub struct SqliteKv {
    conn: Mutex<Connection>,
    path: PathBuf,
    /// The thread holding the write transaction, if any: a read from that same thread
    /// would wait for itself forever, so it is refused with an error instead.
    writer: Mutex<Option<std::thread::ThreadId>>,
}

impl fmt::Debug for SqliteKv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteKv").field("path", &self.path).finish()
    }
}

impl SqliteKv {
    /// Opens (creating if needed, owner-only) the database at `path` and migrates it.
    pub fn open(path: &Path) -> Result<Self> {
        if !path.exists() {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(path)
                .context(path)?;
        }
        let conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // Switching a brand-new database to WAL needs an exclusive lock, and SQLite reports
        // some of those collisions as "busy" without waiting; several processes opening a
        // new store at once then simply take turns here.
        retry_busy(|| {
            // auto_vacuum only takes effect before the first table exists; harmless later.
            conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL;")?;
            let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(Error::new(ErrorCode::Io, format!("database refused WAL mode ({mode})")));
            }
            // A 32 MiB page cache (the default is 2 MiB): a snapshot checks and writes
            // index entries for every new file, at random places in the B-tree.
            conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA temp_store = MEMORY; PRAGMA cache_size = -32768;")?;
            migrate(&conn)
        })?;
        Ok(SqliteKv { conn: Mutex::new(conn), path: path.to_path_buf(), writer: Mutex::new(None) })
    }

    fn conn(&self) -> Result<MutexGuard<'_, Connection>> {
        if *self.writer.lock().unwrap_or_else(|p| p.into_inner()) == Some(std::thread::current().id()) {
            return Err(Error::new(
                ErrorCode::Io,
                "internal error: a store read on the thread that holds the write transaction (read through the transaction)",
            ));
        }
        Ok(self.conn.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn set_writer(&self, writer: Option<std::thread::ThreadId>) {
        *self.writer.lock().unwrap_or_else(|p| p.into_inner()) = writer;
    }
}

const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

fn retry_busy<T>(mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let start = std::time::Instant::now();
    loop {
        match f() {
            Err(e) if e.code == ErrorCode::ConcurrentUpdate && start.elapsed() < BUSY_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

fn migrate(conn: &Connection) -> Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    if version > SCHEMA_VERSION {
        return Err(Error::new(
            ErrorCode::InvalidArgument,
            format!("store schema version {version} is newer than this turnback ({SCHEMA_VERSION}); upgrade turnback"),
        ));
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| -> Result<()> {
        // Re-read under the write lock: another process may have migrated meanwhile.
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        // Version 2: small values in one B-tree keyed by (ns, key) (`WITHOUT ROWID`), not a
        // rowid table plus an index that repeated every key; namespaces of large values in
        // a rowid table of their own (see [`LARGE_VALUE_NAMESPACES`]).
        let large = LARGE_VALUE_NAMESPACES.iter().map(|ns| format!("'{ns}'")).collect::<Vec<_>>().join(", ");
        let tables = "CREATE TABLE kv_small (
                          ns TEXT NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (ns, key)
                      ) WITHOUT ROWID;
                      CREATE TABLE IF NOT EXISTS kv_large (
                          ns TEXT NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (ns, key)
                      );";
        if version < 1 {
            conn.execute_batch(&format!(
                "{tables}
                 ALTER TABLE kv_small RENAME TO kv;
                 PRAGMA user_version = 2;"
            ))?;
        } else if version < 2 {
            conn.execute_batch(&format!(
                "{tables}
                 INSERT INTO kv_large (ns, key, value) SELECT ns, key, value FROM kv WHERE ns IN ({large});
                 INSERT INTO kv_small (ns, key, value) SELECT ns, key, value FROM kv WHERE ns NOT IN ({large});
                 DROP TABLE kv;
                 ALTER TABLE kv_small RENAME TO kv;
                 PRAGMA user_version = 2;"
            ))?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT").map_err(Error::from),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// Namespaces whose values may be large (content objects, packed blocks, stat caches,
/// history entries). They live in a rowid table: in a `WITHOUT ROWID` table the whole row
/// is the B-tree key, so lookups passing a large row read its overflow pages (a 100k-file
/// first snapshot took three times as long).
pub const LARGE_VALUE_NAMESPACES: &[&str] = &["objects", "blocks", "statcache", "history"];

/// One statement, written once per table: `sql!(ns, "SELECT … FROM ", " WHERE …")`.
macro_rules! sql {
    ($ns:expr, $head:literal, $tail:literal) => {
        if LARGE_VALUE_NAMESPACES.contains(&$ns) {
            concat!($head, "kv_large", $tail)
        } else {
            concat!($head, "kv", $tail)
        }
    };
}

fn scan_sql(ns: Ns, keys_only: bool, bounded: bool) -> &'static str {
    match (keys_only, bounded) {
        (false, true) => sql!(ns, "SELECT key, value FROM ", " WHERE ns = ?1 AND key >= ?2 AND key < ?3 ORDER BY key"),
        (false, false) => sql!(ns, "SELECT key, value FROM ", " WHERE ns = ?1 AND key >= ?2 ORDER BY key"),
        (true, true) => sql!(ns, "SELECT key FROM ", " WHERE ns = ?1 AND key >= ?2 AND key < ?3 ORDER BY key"),
        (true, false) => sql!(ns, "SELECT key FROM ", " WHERE ns = ?1 AND key >= ?2 ORDER BY key"),
    }
}

fn sqlite_scan(conn: &Connection, ns: Ns, prefix: &[u8], keys_only: bool, f: &mut Visit<'_>) -> Result<()> {
    let end = prefix_end(prefix);
    let mut stmt = conn.prepare_cached(scan_sql(ns, keys_only, end.is_some()))?;
    let mut rows = match &end {
        Some(end) => stmt.query(params![ns, prefix, end])?,
        None => stmt.query(params![ns, prefix])?,
    };
    while let Some(row) = rows.next()? {
        let key = row.get_ref(0)?.as_blob().map_err(rusqlite::Error::from)?;
        let value = if keys_only { &[][..] } else { row.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)? };
        if !f(key, value)? {
            break;
        }
    }
    Ok(())
}

impl KeyValueStore for SqliteKv {
    fn get(&self, ns: Ns, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(sql!(ns, "SELECT value FROM ", " WHERE ns = ?1 AND key = ?2"))?;
        Ok(stmt.query_row(params![ns, key], |r| r.get(0)).optional()?)
    }

    fn contains(&self, ns: Ns, key: &[u8]) -> Result<bool> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(sql!(ns, "SELECT 1 FROM ", " WHERE ns = ?1 AND key = ?2"))?;
        Ok(stmt.exists(params![ns, key])?)
    }

    fn contains_each(&self, ns: Ns, keys: &[&[u8]]) -> Result<Vec<bool>> {
        // One read transaction for the lot: no lock taken and dropped per statement.
        let conn = self.conn()?;
        conn.execute_batch("BEGIN DEFERRED")?;
        let result = (|| -> Result<Vec<bool>> {
            let mut stmt = conn.prepare_cached(sql!(ns, "SELECT 1 FROM ", " WHERE ns = ?1 AND key = ?2"))?;
            keys.iter().map(|k| Ok(stmt.exists(params![ns, k])?)).collect()
        })();
        conn.execute_batch("COMMIT")?;
        result
    }

    fn scan(&self, ns: Ns, prefix: &[u8], f: &mut Visit<'_>) -> Result<()> {
        sqlite_scan(&*self.conn()?, ns, prefix, false, f)
    }

    fn scan_keys(&self, ns: Ns, prefix: &[u8], f: &mut dyn FnMut(&[u8]) -> Result<bool>) -> Result<()> {
        sqlite_scan(&*self.conn()?, ns, prefix, true, &mut |k, _| f(k))
    }

    fn begin(&self) -> Result<Box<dyn Txn + '_>> {
        let conn = self.conn()?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        self.set_writer(Some(std::thread::current().id()));
        Ok(Box::new(SqliteTxn { conn, open: true, kv: self }))
    }

    fn compact(&self) -> Result<()> {
        let conn = self.conn()?;
        conn.execute_batch("PRAGMA incremental_vacuum; PRAGMA wal_checkpoint(TRUNCATE);")?;
        Ok(())
    }

    fn disk_bytes(&self) -> Result<u64> {
        let mut total = 0;
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            if let Ok(m) = std::fs::metadata(&p) {
                total += m.len();
            }
        }
        Ok(total)
    }
}

struct SqliteTxn<'a> {
    conn: MutexGuard<'a, Connection>,
    open: bool,
    kv: &'a SqliteKv,
}

impl Txn for SqliteTxn<'_> {
    fn get(&mut self, ns: Ns, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut stmt = self.conn.prepare_cached(sql!(ns, "SELECT value FROM ", " WHERE ns = ?1 AND key = ?2"))?;
        Ok(stmt.query_row(params![ns, key], |r| r.get(0)).optional()?)
    }

    fn keys(&mut self, ns: Ns, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        sqlite_scan(&self.conn, ns, prefix, true, &mut |k, _| {
            out.push(k.to_vec());
            Ok(true)
        })?;
        Ok(out)
    }

    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
        let mut stmt =
            self.conn.prepare_cached(sql!(ns, "INSERT OR REPLACE INTO ", " (ns, key, value) VALUES (?1, ?2, ?3)"))?;
        stmt.execute(params![ns, key, value])?;
        Ok(())
    }

    fn put_if_absent(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<bool> {
        let mut stmt =
            self.conn.prepare_cached(sql!(ns, "INSERT OR IGNORE INTO ", " (ns, key, value) VALUES (?1, ?2, ?3)"))?;
        Ok(stmt.execute(params![ns, key, value])? == 1)
    }

    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<bool> {
        let mut stmt = self.conn.prepare_cached(sql!(ns, "DELETE FROM ", " WHERE ns = ?1 AND key = ?2"))?;
        Ok(stmt.execute(params![ns, key])? == 1)
    }

    fn commit(mut self: Box<Self>) -> Result<()> {
        self.open = false;
        self.kv.set_writer(None);
        if let Err(e) = self.conn.execute_batch("COMMIT") {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(e.into());
        }
        Ok(())
    }
}

impl Drop for SqliteTxn<'_> {
    fn drop(&mut self) {
        if self.open {
            self.kv.set_writer(None);
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

type MemoryMap = BTreeMap<(Ns, Vec<u8>), Vec<u8>>;

/// An in-memory backend with the same transaction semantics, for unit tests.
#[derive(Debug, Default)]
pub struct MemoryKv {
    map: Mutex<MemoryMap>,
}

impl MemoryKv {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn map(&self) -> MutexGuard<'_, MemoryMap> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `f` to the stored value under `key` (tests use this to tamper with bytes).
    pub fn tamper(&self, ns: Ns, key: &[u8], f: impl FnOnce(&mut Vec<u8>)) {
        if let Some(v) = self.map().get_mut(&(ns, key.to_vec())) {
            f(v);
        }
    }
}

fn memory_range<'m>(map: &'m MemoryMap, ns: Ns, prefix: &[u8]) -> impl Iterator<Item = (&'m Vec<u8>, &'m Vec<u8>)> {
    map.range((ns, prefix.to_vec())..)
        .take_while(move |((n, k), _)| *n == ns && k.starts_with(prefix))
        .map(|((_, k), v)| (k, v))
}

impl KeyValueStore for MemoryKv {
    fn get(&self, ns: Ns, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.map().get(&(ns, key.to_vec())).cloned())
    }

    fn scan(&self, ns: Ns, prefix: &[u8], f: &mut Visit<'_>) -> Result<()> {
        let entries: Vec<(Vec<u8>, Vec<u8>)> =
            memory_range(&self.map(), ns, prefix).map(|(k, v)| (k.clone(), v.clone())).collect();
        for (k, v) in entries {
            if !f(&k, &v)? {
                break;
            }
        }
        Ok(())
    }

    fn scan_keys(&self, ns: Ns, prefix: &[u8], f: &mut dyn FnMut(&[u8]) -> Result<bool>) -> Result<()> {
        self.scan(ns, prefix, &mut |k, _| f(k))
    }

    fn begin(&self) -> Result<Box<dyn Txn + '_>> {
        Ok(Box::new(MemoryTxn { map: self.map(), overlay: BTreeMap::new() }))
    }

    fn compact(&self) -> Result<()> {
        Ok(())
    }

    fn disk_bytes(&self) -> Result<u64> {
        Ok(0)
    }
}

struct MemoryTxn<'a> {
    map: MutexGuard<'a, MemoryMap>,
    overlay: BTreeMap<(Ns, Vec<u8>), Option<Vec<u8>>>,
}

impl Txn for MemoryTxn<'_> {
    fn get(&mut self, ns: Ns, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let k = (ns, key.to_vec());
        Ok(match self.overlay.get(&k) {
            Some(v) => v.clone(),
            None => self.map.get(&k).cloned(),
        })
    }

    fn keys(&mut self, ns: Ns, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut keys: std::collections::BTreeSet<Vec<u8>> =
            memory_range(&self.map, ns, prefix).map(|(k, _)| k.clone()).collect();
        for ((n, k), v) in &self.overlay {
            if *n == ns && k.starts_with(prefix) {
                if v.is_some() {
                    keys.insert(k.clone());
                } else {
                    keys.remove(k);
                }
            }
        }
        Ok(keys.into_iter().collect())
    }

    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
        self.overlay.insert((ns, key.to_vec()), Some(value.to_vec()));
        Ok(())
    }

    fn put_if_absent(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<bool> {
        if self.get(ns, key)?.is_some() {
            return Ok(false);
        }
        self.put(ns, key, value)?;
        Ok(true)
    }

    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<bool> {
        let existed = self.get(ns, key)?.is_some();
        self.overlay.insert((ns, key.to_vec()), None);
        Ok(existed)
    }

    fn commit(mut self: Box<Self>) -> Result<()> {
        let overlay = std::mem::take(&mut self.overlay);
        for (k, v) in overlay {
            match v {
                Some(v) => self.map.insert(k, v),
                None => self.map.remove(&k),
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_1_store_is_migrated_with_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE kv (ns TEXT NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (ns, key));
                 INSERT INTO kv VALUES ('objects', x'01', x'0203');
                 INSERT INTO kv VALUES ('sessions', x'04', x'05');
                 PRAGMA user_version = 1;",
            )
            .unwrap();
        }
        let kv = SqliteKv::open(&path).unwrap();
        assert_eq!(kv.get("objects", &[1]).unwrap(), Some(vec![2, 3]));
        assert_eq!(kv.get("sessions", &[4]).unwrap(), Some(vec![5]));
        let conn = Connection::open(&path).unwrap();
        let sql: String = conn.query_row("SELECT sql FROM sqlite_master WHERE name = 'kv'", [], |r| r.get(0)).unwrap();
        assert!(sql.contains("WITHOUT ROWID"), "{sql}");
        let large: i64 =
            conn.query_row("SELECT count(*) FROM kv_large WHERE ns = 'objects'", [], |r| r.get(0)).unwrap();
        assert_eq!(large, 1, "large values moved to their own table");
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }

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
