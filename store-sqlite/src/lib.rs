//! SQLite backend for the ctxlog [`Store`] contract: the embedded default.
//!
//! One database file holds every stream. The connection runs in WAL mode with
//! `synchronous=FULL`, so an `append` that returns `Ok` has been fsynced (one fsync per
//! transaction, i.e. per batch: group commit is "pass many records to one `append`").
//!
//! Schema (version [`SCHEMA_VERSION`], recorded in `PRAGMA user_version`):
//!
//! ```sql
//! records(stream BLOB, version INTEGER, bytes BLOB, PRIMARY KEY(stream, version)) WITHOUT ROWID
//! blobs(id TEXT PRIMARY KEY, bytes BLOB)
//! snapshots(stream BLOB PRIMARY KEY, version INTEGER, bytes BLOB)
//! ```
//!
//! `stream` is the 16 raw bytes of the UUID, so `ORDER BY stream` is the order of [`StreamId`].
//! Several processes may open the same file: appends run inside `BEGIN IMMEDIATE` (the head
//! check and the insert see the same snapshot) and the primary key turns any duplicate version
//! into [`StoreError::Conflict`] as a backstop.

// No unchecked indexing in code that parses what it reads from disk (kept here even though
// the workspace lint table no longer lists it).
#![warn(clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use ctxlog::store::{
    check_expected, BlobId, ExpectedVersion, Record, Snapshot, Store, StoreError, StoredRecord, StreamId, Version,
};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

const BACKEND: &str = "sqlite";

/// The on-disk schema this build reads and writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: u64 = 1;

/// How long a writer waits for another connection's write lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA_SQL: &str = "
CREATE TABLE IF NOT EXISTS records(
    stream BLOB NOT NULL,
    version INTEGER NOT NULL,
    bytes BLOB NOT NULL,
    PRIMARY KEY(stream, version)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS blobs(id TEXT PRIMARY KEY NOT NULL, bytes BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots(stream BLOB PRIMARY KEY NOT NULL, version INTEGER NOT NULL, bytes BLOB NOT NULL);
";

/// A [`Store`] in one SQLite database. `Send + Sync`: the connection sits behind a mutex, so
/// calls from several threads are serialised (SQLite admits one writer at a time anyway).
pub struct SqliteStore {
    conn: Mutex<Connection>,
    location: String,
    path: Option<PathBuf>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("location", &self.location).finish_non_exhaustive()
    }
}

fn err(location: &str, what: &str, e: rusqlite::Error) -> StoreError {
    StoreError::backend(BACKEND, format!("{location}: {what}"), e)
}

fn version_to_sql(v: Version) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|e| StoreError::backend(BACKEND, format!("version {v} does not fit SQLite INTEGER"), e))
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
            || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE)
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, switches it to WAL and checks the
    /// schema version.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref();
        let location = path.display().to_string();
        let conn = Connection::open(path).map_err(|e| err(&location, "open", e))?;
        Self::init(conn, location, Some(path.to_path_buf()))
    }

    /// A private in-memory database (tests, `mem`-like use with SQLite semantics).
    pub fn open_in_memory() -> Result<SqliteStore, StoreError> {
        let location = ":memory:".to_owned();
        let conn = Connection::open_in_memory().map_err(|e| err(&location, "open", e))?;
        Self::init(conn, location, None)
    }

    /// The database path (`None` for an in-memory database).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn init(mut conn: Connection, location: String, path: Option<PathBuf>) -> Result<SqliteStore, StoreError> {
        conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| err(&location, "set busy_timeout", e))?;
        // `journal_mode` answers with a row, so it must be set with a query (rusqlite#273):
        // `execute` would fail, and a silently refused switch would leave us in rollback mode.
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))
            .map_err(|e| err(&location, "set journal_mode=wal", e))?;
        let expected_mode = if path.is_some() { "wal" } else { "memory" };
        if !mode.eq_ignore_ascii_case(expected_mode) {
            return Err(StoreError::backend(
                BACKEND,
                format!("{location}: set journal_mode=wal"),
                format!("SQLite kept journal_mode={mode}"),
            ));
        }
        // FULL: in WAL mode NORMAL may lose the last commits on power loss, and an
        // acknowledged append must survive that.
        conn.pragma_update(None, "synchronous", "FULL").map_err(|e| err(&location, "set synchronous=FULL", e))?;

        // Schema check and creation in one write transaction so two processes opening a
        // fresh file at once do not both initialise it.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| err(&location, "begin schema transaction", e))?;
        let found: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| err(&location, "read user_version", e))?;
        let tables: i64 = tx
            .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table'", [], |r| r.get(0))
            .map_err(|e| err(&location, "list tables", e))?;
        let found = u64::try_from(found).unwrap_or(u64::MAX);
        if found == 0 && tables == 0 {
            tx.execute_batch(SCHEMA_SQL).map_err(|e| err(&location, "create schema", e))?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION as i64)
                .map_err(|e| err(&location, "write user_version", e))?;
        } else if found != SCHEMA_VERSION {
            return Err(StoreError::Schema { backend: BACKEND, location, found, supported: SCHEMA_VERSION });
        }
        tx.commit().map_err(|e| err(&location, "commit schema", e))?;
        Ok(SqliteStore { conn: Mutex::new(conn), location, path })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic inside a rusqlite call leaves no half-open transaction behind (the
        // `Transaction` guard rolls back on drop), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn head_of(&self, conn: &Connection, stream: StreamId) -> Result<Version, StoreError> {
        let mut stmt = conn
            .prepare_cached("SELECT MAX(version) FROM records WHERE stream = ?1")
            .map_err(|e| err(&self.location, "prepare head", e))?;
        let head: Option<i64> = stmt
            .query_row(params![stream.0.as_bytes()], |r| r.get(0))
            .map_err(|e| err(&self.location, &format!("read head of stream {stream}"), e))?;
        Ok(head.map_or(0, |h| u64::try_from(h).unwrap_or(0)))
    }

    fn err_stream(&self, stream: StreamId, what: &str, e: rusqlite::Error) -> StoreError {
        err(&self.location, &format!("stream {stream}: {what}"), e)
    }
}

impl Store for SqliteStore {
    fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
        let mut conn = self.lock();
        // IMMEDIATE takes the write lock up front: the head we read cannot change before our
        // insert, and a concurrent writer waits (busy_timeout) instead of failing mid-way.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err_stream(stream, "begin append", e))?;
        let head = self.head_of(&tx, stream)?;
        check_expected(stream, expected, head)?;
        if records.is_empty() {
            return Ok(head);
        }
        let mut version = head;
        {
            let mut insert = tx
                .prepare_cached("INSERT INTO records(stream, version, bytes) VALUES (?1, ?2, ?3)")
                .map_err(|e| self.err_stream(stream, "prepare insert", e))?;
            for record in records {
                version += 1;
                match insert.execute(params![stream.0.as_bytes(), version_to_sql(version)?, record.as_bytes()]) {
                    Ok(_) => {}
                    // Cannot happen under BEGIN IMMEDIATE unless another writer bypasses it;
                    // whatever the cause, a duplicate version is a lost race, not an IO error.
                    Err(e) if is_unique_violation(&e) => {
                        return Err(StoreError::Conflict { stream, expected, actual: head });
                    }
                    Err(e) => return Err(self.err_stream(stream, &format!("insert version {version}"), e)),
                }
            }
        }
        tx.commit().map_err(|e| self.err_stream(stream, &format!("commit versions {}..={version}", head + 1), e))?;
        Ok(version)
    }

    fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError> {
        let from = from.max(1);
        if max == 0 {
            return Ok(Vec::new());
        }
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT version, bytes FROM records WHERE stream = ?1 AND version >= ?2 ORDER BY version LIMIT ?3",
            )
            .map_err(|e| self.err_stream(stream, "prepare read", e))?;
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let mut rows = stmt
            .query(params![stream.0.as_bytes(), version_to_sql(from)?, limit])
            .map_err(|e| self.err_stream(stream, &format!("read from version {from}"), e))?;
        let mut out = Vec::new();
        let mut want = from;
        while let Some(row) = rows.next().map_err(|e| self.err_stream(stream, &format!("read version {want}"), e))? {
            let version: i64 = row.get(0).map_err(|e| self.err_stream(stream, &format!("read version {want}"), e))?;
            let bytes: Vec<u8> =
                row.get(1).map_err(|e| self.err_stream(stream, &format!("read bytes of version {want}"), e))?;
            // Versions are dense by construction; a hole means rows were deleted behind our back.
            if u64::try_from(version).ok() != Some(want) {
                return Err(StoreError::Corrupt {
                    stream,
                    version: want,
                    detail: format!("{}: expected version {want}, found row with version {version}", self.location),
                });
            }
            out.push(StoredRecord { version: want, record: Record::from_stored(stream, want, bytes)? });
            want += 1;
        }
        Ok(out)
    }

    fn head(&self, stream: StreamId) -> Result<Option<Version>, StoreError> {
        let conn = self.lock();
        let head = self.head_of(&conn, stream)?;
        Ok((head > 0).then_some(head))
    }

    fn streams(&self) -> Result<Vec<StreamId>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            // A skip-scan over the primary key: one index seek per stream instead of the full
            // table scan `SELECT DISTINCT` does on a WITHOUT ROWID table.
            .prepare_cached(
                "WITH RECURSIVE s(stream) AS (
                     SELECT MIN(stream) FROM records
                     UNION ALL
                     SELECT (SELECT MIN(stream) FROM records WHERE stream > s.stream) FROM s WHERE s.stream IS NOT NULL
                 )
                 SELECT stream FROM s WHERE stream IS NOT NULL",
            )
            .map_err(|e| err(&self.location, "prepare streams", e))?;
        let rows =
            stmt.query_map([], |r| r.get::<_, Vec<u8>>(0)).map_err(|e| err(&self.location, "list streams", e))?;
        let mut out = Vec::new();
        for row in rows {
            let bytes = row.map_err(|e| err(&self.location, "list streams", e))?;
            let uuid = uuid::Uuid::from_slice(&bytes).map_err(|e| {
                StoreError::backend(BACKEND, format!("{}: records table holds a malformed stream id", self.location), e)
            })?;
            out.push(StreamId(uuid));
        }
        Ok(out)
    }

    fn put_snapshot(&self, stream: StreamId, snap: &Snapshot) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err_stream(stream, "begin put_snapshot", e))?;
        let head = self.head_of(&tx, stream)?;
        if snap.version > head {
            return Err(StoreError::SnapshotAhead { stream, snapshot: snap.version, head });
        }
        {
            // The WHERE keeps a newer snapshot when an older one arrives late.
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO snapshots(stream, version, bytes) VALUES (?1, ?2, ?3)
                     ON CONFLICT(stream) DO UPDATE SET version = excluded.version, bytes = excluded.bytes
                     WHERE excluded.version >= snapshots.version",
                )
                .map_err(|e| self.err_stream(stream, "prepare put_snapshot", e))?;
            stmt.execute(params![stream.0.as_bytes(), version_to_sql(snap.version)?, &snap.bytes])
                .map_err(|e| self.err_stream(stream, &format!("write snapshot at version {}", snap.version), e))?;
        }
        tx.commit().map_err(|e| self.err_stream(stream, "commit snapshot", e))
    }

    fn get_snapshot(&self, stream: StreamId) -> Result<Option<Snapshot>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached("SELECT version, bytes FROM snapshots WHERE stream = ?1")
            .map_err(|e| self.err_stream(stream, "prepare get_snapshot", e))?;
        let row: Option<(i64, Vec<u8>)> = stmt
            .query_row(params![stream.0.as_bytes()], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(|e| self.err_stream(stream, "read snapshot", e))?;
        Ok(row.map(|(version, bytes)| Snapshot { version: u64::try_from(version).unwrap_or(0), bytes }))
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<BlobId, StoreError> {
        let id = BlobId::of(bytes);
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached("INSERT OR IGNORE INTO blobs(id, bytes) VALUES (?1, ?2)")
            .map_err(|e| err(&self.location, "prepare put_blob", e))?;
        stmt.execute(params![id.as_str(), bytes]).map_err(|e| err(&self.location, &format!("write blob {id}"), e))?;
        Ok(id)
    }

    fn get_blob(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached("SELECT bytes FROM blobs WHERE id = ?1")
            .map_err(|e| err(&self.location, "prepare get_blob", e))?;
        let bytes: Option<Vec<u8>> = stmt
            .query_row(params![id.as_str()], |r| r.get(0))
            .optional()
            .map_err(|e| err(&self.location, &format!("read blob {id}"), e))?;
        if let Some(b) = &bytes {
            id.verify(b)?;
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_database_is_in_wal_mode_with_full_sync() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("x.db")).unwrap();
        let conn = store.lock();
        let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        assert_eq!(sync, 2, "synchronous=FULL");
    }

    #[test]
    fn other_schema_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        drop(SqliteStore::open(&path).unwrap());
        Connection::open(&path).unwrap().pragma_update(None, "user_version", 7).unwrap();
        let e = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(e, StoreError::Schema { found: 7, supported: 1, .. }), "{e}");
        assert!(e.to_string().contains("x.db"), "{e}");
    }

    #[test]
    fn in_memory_store_works_and_lists_streams_in_order() {
        let store = SqliteStore::open_in_memory().unwrap();
        assert_eq!(store.path(), None);
        let mut ids: Vec<StreamId> = (0..20).map(|_| StreamId::random()).collect();
        for (i, s) in ids.iter().enumerate() {
            let recs: Vec<Record> = (0..=i % 3).map(|j| Record::seal(vec![j as u8])).collect();
            store.append(*s, ExpectedVersion::Exact(0), &recs).unwrap();
        }
        ids.sort();
        assert_eq!(store.streams().unwrap(), ids);
        assert_eq!(store.read(ids[0], 1, 10).unwrap().len(), store.head(ids[0]).unwrap().unwrap() as usize);
    }

    #[test]
    fn streams_query_does_not_scan_the_table() {
        let store = SqliteStore::open_in_memory().unwrap();
        let conn = store.lock();
        let plan: Vec<String> = conn
            .prepare(
                "EXPLAIN QUERY PLAN WITH RECURSIVE s(stream) AS (SELECT MIN(stream) FROM records UNION ALL
                 SELECT (SELECT MIN(stream) FROM records WHERE stream > s.stream) FROM s WHERE s.stream IS NOT NULL)
                 SELECT stream FROM s WHERE stream IS NOT NULL",
            )
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(plan.iter().all(|step| !step.starts_with("SCAN records")), "{plan:?}");
    }

    #[test]
    fn foreign_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        Connection::open(&path).unwrap().execute_batch("CREATE TABLE t(x)").unwrap();
        assert!(matches!(SqliteStore::open(&path).unwrap_err(), StoreError::Schema { found: 0, .. }));
    }
}
