//! The production backend: one SQLite database file (bundled SQLite, WAL,
//! `synchronous=FULL`), its schema versioned by `user_version` and migrated in place.
//!
//! Every error from SQLite leaves this file naming the database (`Error::in_database`): a
//! damaged file is `corrupt`, a full disk `disk-full`, never a bare retryable `io`.
//!
//! `put` and `get` of a value of the large tables from [`BLOB_IO_FROM`] bytes on go
//! through a blob handle (written into a `zeroblob`), not bound or fetched whole as a
//! column: memory holds such a value once, not three times. A read finds the row and reads
//! its blob inside one read transaction, so another process cannot replace or delete the
//! row in between.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{Error, ErrorCode, IoResultExt, Result};
use crate::storage::kv::{KeyValueStore, Ns, Txn, Visit, prefix_end};
use crate::storage::schema;

/// Version 3 keeps index digests (`storage/digest.rs`): a turnback from before (version 2)
/// would write index rows without them, so it must refuse the store.
const SCHEMA_VERSION: i64 = 3;

/// The production backend: one SQLite database file.
pub(crate) struct SqliteKv {
    conn: Mutex<Connection>,
    path: PathBuf,
    /// The thread holding the write transaction, if any: a read from that same thread
    /// would wait for itself forever, so it is refused with an error instead.
    writer: Mutex<Option<std::thread::ThreadId>>,
    /// A read snapshot: the connection holds one read transaction for its whole life.
    snapshot: bool,
}

impl fmt::Debug for SqliteKv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteKv").field("path", &self.path).finish()
    }
}

impl SqliteKv {
    /// Opens (creating if needed, owner-only) the database at `path` and migrates it.
    ///
    /// # Errors
    /// `corrupt` if the file is not a readable database; `disk-full` if there is no space to
    /// create or migrate it; `io` otherwise.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        Self::open_unlocated(path).map_err(|e| e.in_database(path))
    }

    fn open_unlocated(path: &Path) -> Result<Self> {
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
            // A 16 MiB page cache (the default is 2 MiB): a snapshot checks and writes
            // index entries for every new file, at random places in the B-tree. 32 MiB
            // took no less time on a million files' first snapshot, and 30 MB more memory.
            conn.execute_batch(&format!(
                "PRAGMA synchronous = FULL; PRAGMA temp_store = MEMORY; PRAGMA cache_size = {PAGE_CACHE};"
            ))?;
            migrate(&conn)
        })?;
        Ok(SqliteKv { conn: Mutex::new(conn), path: path.to_path_buf(), writer: Mutex::new(None), snapshot: false })
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

    /// `result`, any SQLite error in it naming this database.
    fn at<T>(&self, result: Result<T>) -> Result<T> {
        result.map_err(|e| e.in_database(&self.path))
    }

    fn set_writer(&self, writer: Option<std::thread::ThreadId>) {
        *self.writer.lock().unwrap_or_else(|p| p.into_inner()) = writer;
    }
}

const BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// The page cache's size (`PRAGMA cache_size`: negative, in KiB).
const PAGE_CACHE: &str = "-16384";

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
        // Small values in one B-tree keyed by (ns, key) (`WITHOUT ROWID`); namespaces of
        // large values in a rowid table of their own (see `schema`).
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
                 PRAGMA user_version = 3;"
            ))?;
        } else if version < SCHEMA_VERSION {
            // An unreleased build's layout (one table for every value; or before index
            // digests): no release reads it.
            return Err(Error::new(
                ErrorCode::StoreTooOld,
                format!("the store database's layout {version} is an unreleased build's; no release reads it"),
            ));
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

// Tables whose values may be large (content objects, packed blocks, stat caches, history
// entries; see `schema`) live in a rowid table: in a `WITHOUT ROWID` table the whole row is
// the B-tree key, so lookups passing a large row read its overflow pages (a 100k-file first
// snapshot took three times as long).

/// One statement, written once per table: `sql!(ns, "SELECT … FROM ", " WHERE …")`.
macro_rules! sql {
    ($ns:expr, $head:literal, $tail:literal) => {
        if schema::is_large($ns) { concat!($head, "kv_large", $tail) } else { concat!($head, "kv", $tail) }
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

/// Values of the large tables at least this long are written and read through SQLite's
/// incremental blob I/O. Bound as a parameter, a value is copied twice inside SQLite (the
/// bound copy, then the row's record); read as a column, it is assembled from its overflow
/// pages once before it is copied out: three times the value at once (120 MB for the stat
/// cache of a million files). Through a blob handle the pages are written and read in place.
const BLOB_IO_FROM: usize = 1 << 20;

/// The value under `key`: a large one read through a blob handle ([`BLOB_IO_FROM`]).
fn get_value(conn: &Connection, ns: Ns, key: &[u8]) -> Result<Option<Vec<u8>>> {
    if !schema::is_large(ns) {
        let mut stmt = conn.prepare_cached("SELECT value FROM kv WHERE ns = ?1 AND key = ?2")?;
        return Ok(stmt.query_row(params![ns, key], |r| r.get(0)).optional()?);
    }
    // `octet_length()` of a blob reads its size from the record header, not its pages.
    let mut stmt = conn.prepare_cached(
        "SELECT CASE WHEN octet_length(value) < ?3 THEN value END, rowid, octet_length(value) \
         FROM kv_large WHERE ns = ?1 AND key = ?2",
    )?;
    // The statement stays active (its row not yet stepped past) until the blob is read:
    // outside a transaction, that keeps one read transaction open over both, so the rowid
    // still names this key's row when the blob is opened — another process's gc or
    // snapshot may delete or replace it, and a freed rowid can be reused by the next insert.
    let mut rows = stmt.query(params![ns, key, BLOB_IO_FROM as i64])?;
    let Some(row) = rows.next()? else { return Ok(None) };
    if let Some(value) = row.get::<_, Option<Vec<u8>>>(0)? {
        return Ok(Some(value));
    }
    let (rowid, len) = (row.get::<_, i64>(1)?, row.get::<_, i64>(2)?);
    let mut value = vec![0u8; usize::try_from(len).map_err(|_| Error::corrupt("database", "negative length"))?];
    conn.blob_open("main", "kv_large", "value", rowid, true)?.read_at_exact(&mut value, 0)?;
    drop(rows);
    Ok(Some(value))
}

impl KeyValueStore for SqliteKv {
    fn get(&self, ns: Ns, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.at(self.conn().and_then(|conn| get_value(&conn, ns, key)))
    }

    fn contains(&self, ns: Ns, key: &[u8]) -> Result<bool> {
        self.at((|| {
            let conn = self.conn()?;
            let mut stmt = conn.prepare_cached(sql!(ns, "SELECT 1 FROM ", " WHERE ns = ?1 AND key = ?2"))?;
            Ok(stmt.exists(params![ns, key])?)
        })())
    }

    fn contains_each(&self, ns: Ns, keys: &[&[u8]]) -> Result<Vec<bool>> {
        self.at((|| {
            // One read transaction for the lot: no lock taken and dropped per statement.
            let conn = self.conn()?;
            // A snapshot is inside its read transaction already.
            if !self.snapshot {
                conn.execute_batch("BEGIN DEFERRED")?;
            }
            let result = (|| -> Result<Vec<bool>> {
                let mut stmt = conn.prepare_cached(sql!(ns, "SELECT 1 FROM ", " WHERE ns = ?1 AND key = ?2"))?;
                keys.iter().map(|k| Ok(stmt.exists(params![ns, k])?)).collect()
            })();
            if !self.snapshot {
                conn.execute_batch("COMMIT")?;
            }
            result
        })())
    }

    fn scan(&self, ns: Ns, prefix: &[u8], f: &mut Visit<'_>) -> Result<()> {
        self.at(self.conn().and_then(|conn| sqlite_scan(&conn, ns, prefix, false, f)))
    }

    fn scan_keys(&self, ns: Ns, prefix: &[u8], f: &mut dyn FnMut(&[u8]) -> Result<bool>) -> Result<()> {
        self.at(self.conn().and_then(|conn| sqlite_scan(&conn, ns, prefix, true, &mut |k, _| f(k))))
    }

    fn begin(&self) -> Result<Box<dyn Txn + '_>> {
        if self.snapshot {
            return Err(Error::new(ErrorCode::Io, "internal error: a write through a read snapshot"));
        }
        let conn = self.conn()?;
        self.at(conn.execute_batch("BEGIN IMMEDIATE").map_err(Error::from))?;
        self.set_writer(Some(std::thread::current().id()));
        Ok(Box::new(SqliteTxn { conn, open: true, kv: self }))
    }

    fn read_snapshot(&self) -> Result<Box<dyn KeyValueStore>> {
        self.at((|| {
            let conn = Connection::open(&self.path)?;
            conn.busy_timeout(BUSY_TIMEOUT)?;
            // In WAL mode a read transaction sees the state of its first read until it ends.
            conn.execute_batch("BEGIN DEFERRED")?;
            conn.query_row("SELECT count(*) FROM (SELECT 1 FROM kv LIMIT 1)", [], |r| r.get::<_, i64>(0))?;
            let snapshot: Box<dyn KeyValueStore> = Box::new(SqliteKv {
                conn: Mutex::new(conn),
                path: self.path.clone(),
                writer: Mutex::new(None),
                snapshot: true,
            });
            Ok(snapshot)
        })())
    }

    fn reading_once(&self, on: bool) {
        // The page cache a snapshot's writes want (16 MiB), or 1 MiB while a read goes by.
        let size = if on { "-1024" } else { PAGE_CACHE };
        if let Ok(conn) = self.conn() {
            let _ = conn.execute_batch(&format!("PRAGMA cache_size = {size};"));
        }
    }

    fn compact(&self) -> Result<()> {
        self.at((|| {
            let conn = self.conn()?;
            // `incremental_vacuum` frees one page per step of its statement: run as a batch
            // it is stepped once and gives back a single page. Step it until it is done.
            let mut stmt = conn.prepare("PRAGMA incremental_vacuum")?;
            let mut rows = stmt.raw_query();
            while rows.next()?.is_some() {}
            drop(rows);
            drop(stmt);
            conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
            Ok(())
        })())
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

impl SqliteTxn<'_> {
    /// Runs one statement; the rows it changed.
    fn execute(&mut self, sql: &str, params: &[&dyn rusqlite::ToSql]) -> Result<usize> {
        let done = (|| Ok(self.conn.prepare_cached(sql)?.execute(params)?))();
        self.kv.at(done)
    }
}

impl Txn for SqliteTxn<'_> {
    fn get(&mut self, ns: Ns, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let got = get_value(&self.conn, ns, key);
        self.kv.at(got)
    }

    fn keys(&mut self, ns: Ns, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        let scanned = sqlite_scan(&self.conn, ns, prefix, true, &mut |k, _| {
            out.push(k.to_vec());
            Ok(true)
        });
        self.kv.at(scanned)?;
        Ok(out)
    }

    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
        if schema::is_large(ns) && value.len() >= BLOB_IO_FROM {
            let sql = "INSERT OR REPLACE INTO kv_large (ns, key, value) VALUES (?1, ?2, zeroblob(?3))";
            self.execute(sql, params![ns, key, value.len() as i64])?;
            let written = (|| {
                let rowid = self.conn.last_insert_rowid();
                Ok(self.conn.blob_open("main", "kv_large", "value", rowid, false)?.write_at(value, 0)?)
            })();
            return self.kv.at(written);
        }
        let sql = sql!(ns, "INSERT OR REPLACE INTO ", " (ns, key, value) VALUES (?1, ?2, ?3)");
        self.execute(sql, params![ns, key, value]).map(drop)
    }

    fn put_if_absent(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<bool> {
        let sql = sql!(ns, "INSERT OR IGNORE INTO ", " (ns, key, value) VALUES (?1, ?2, ?3)");
        Ok(self.execute(sql, params![ns, key, value])? == 1)
    }

    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<bool> {
        Ok(self.execute(sql!(ns, "DELETE FROM ", " WHERE ns = ?1 AND key = ?2"), params![ns, key])? == 1)
    }

    fn commit(mut self: Box<Self>) -> Result<()> {
        self.open = false;
        self.kv.set_writer(None);
        if let Err(e) = self.conn.execute_batch("COMMIT") {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(Error::from(e).in_database(&self.kv.path));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_values_read_back_exactly_either_side_of_the_blob_threshold_with_transactions_intact() {
        let dir = tempfile::tempdir().unwrap();
        let kv = SqliteKv::open(&dir.path().join("store.db")).unwrap();
        let ns = schema::STATCACHE;
        assert!(schema::is_large(ns));
        let value = |len: usize, seed: u8| (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect::<Vec<u8>>();
        let big = value(3 << 20, 1);
        let mut txn = kv.begin().unwrap();
        txn.put(ns, b"k", &big).unwrap();
        assert_eq!(txn.get(ns, b"k").unwrap().as_deref(), Some(&big[..]), "read back inside its transaction");
        txn.commit().unwrap();
        assert_eq!(kv.get(ns, b"k").unwrap().as_deref(), Some(&big[..]));
        // Around the threshold, and a small value beside it, each read back as written.
        let mut txn = kv.begin().unwrap();
        for (key, len) in [(&b"under"[..], BLOB_IO_FROM - 1), (b"at", BLOB_IO_FROM), (b"small", 10)] {
            txn.put(ns, key, &value(len, 2)).unwrap();
        }
        txn.commit().unwrap();
        for (key, len) in [(&b"under"[..], BLOB_IO_FROM - 1), (b"at", BLOB_IO_FROM), (b"small", 10)] {
            assert_eq!(kv.get(ns, key).unwrap(), Some(value(len, 2)), "{len} bytes");
        }
        // Replaced by a shorter value: a read snapshot from before still sees the old one,
        // and a replacement rolled back leaves the committed one.
        let before = kv.read_snapshot().unwrap();
        let shorter = value((2 << 20) + 1, 3);
        let mut txn = kv.begin().unwrap();
        txn.put(ns, b"k", &shorter).unwrap();
        txn.commit().unwrap();
        assert_eq!(kv.get(ns, b"k").unwrap().as_deref(), Some(&shorter[..]));
        assert_eq!(before.get(ns, b"k").unwrap().as_deref(), Some(&big[..]));
        let mut txn = kv.begin().unwrap();
        txn.put(ns, b"k", &big).unwrap();
        drop(txn);
        assert_eq!(kv.get(ns, b"k").unwrap().as_deref(), Some(&shorter[..]));
        let mut txn = kv.begin().unwrap();
        assert!(txn.delete(ns, b"k").unwrap());
        txn.commit().unwrap();
        assert_eq!(kv.get(ns, b"k").unwrap(), None);
        assert_eq!(kv.get(ns, b"missing").unwrap(), None);
    }

    #[test]
    fn a_large_value_replaced_by_another_connection_meanwhile_reads_back_whole_never_mixed() {
        // Two connections to one file, as two processes: one keeps replacing a large value
        // (a REPLACE of the only row reuses its rowid), the other keeps reading it. Each
        // read is one value or the other, whole: the row found and the blob read belong to
        // one read transaction.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let (writer, reader) = (SqliteKv::open(&path).unwrap(), SqliteKv::open(&path).unwrap());
        let ns = schema::STATCACHE;
        let values = [vec![1u8; 2 << 20], vec![2u8; 3 << 20]];
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for n in 0..150 {
                    let mut txn = writer.begin().unwrap();
                    txn.put(ns, b"k", &values[n % 2]).unwrap();
                    txn.commit().unwrap();
                }
                done.store(true, std::sync::atomic::Ordering::Release);
            });
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                if let Some(got) = reader.get(ns, b"k").unwrap() {
                    assert!(values.contains(&got), "a read mixed two values ({} bytes)", got.len());
                    reads += 1;
                }
            }
            assert!(reads > 0);
        });
    }

    #[test]
    fn an_unreleased_builds_layout_is_too_old_and_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        for version in [1, 2] {
            {
                let conn = Connection::open(&path).unwrap();
                conn.execute_batch(&format!(
                    "DROP TABLE IF EXISTS kv;
                     CREATE TABLE kv (ns TEXT NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (ns, key));
                     INSERT INTO kv VALUES ('sessions', x'04', x'05');
                     PRAGMA user_version = {version};"
                ))
                .unwrap();
            }
            let refused = SqliteKv::open(&path).expect_err("refused");
            assert_eq!(refused.code, ErrorCode::StoreTooOld, "layout {version}");
            let conn = Connection::open(&path).unwrap();
            let kept: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
            assert_eq!(kept, version, "nothing was changed");
        }
    }

    #[test]
    fn a_read_once_keeps_a_small_page_cache_and_then_gives_the_usual_one_back() {
        let dir = tempfile::tempdir().unwrap();
        let kv = SqliteKv::open(&dir.path().join("store.db")).unwrap();
        let cache_size = || -> i64 { kv.conn().unwrap().query_row("PRAGMA cache_size", [], |r| r.get(0)).unwrap() };
        assert_eq!(cache_size(), -16384);
        kv.reading_once(true);
        assert_eq!(cache_size(), -1024);
        kv.reading_once(false);
        assert_eq!(cache_size(), -16384);
    }

    #[test]
    fn compact_gives_back_every_freed_page() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let kv = SqliteKv::open(&path).unwrap();
        let value = vec![7u8; 64 << 10];
        let mut txn = kv.begin().unwrap();
        for i in 0u32..64 {
            txn.put(schema::OBJECTS, &i.to_be_bytes(), &value).unwrap();
        }
        txn.commit().unwrap();
        kv.compact().unwrap();
        let full = kv.disk_bytes().unwrap();
        assert!(full > 4 << 20, "{full}");
        let mut txn = kv.begin().unwrap();
        for i in 0u32..64 {
            txn.delete(schema::OBJECTS, &i.to_be_bytes()).unwrap();
        }
        txn.commit().unwrap();
        kv.compact().unwrap();
        let after = kv.disk_bytes().unwrap();
        assert!(after < 256 << 10, "{full} bytes became {after}, not the few pages left");
    }
}
