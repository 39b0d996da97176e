//! SQLite backend for the ctxlog [`Store`] contract: the embedded default.
//!
//! One database file holds every stream. A writer runs in WAL mode with `synchronous=FULL`
//! for every write but an unsynced append and a seal (each write sets the level it needs
//! before its transaction), so an `append` that returns `Ok` has been fsynced (one fsync per
//! transaction, i.e. per batch: group commit is "pass many records to one `append`"). Every append is then followed
//! by an empty transaction (the *seal*), so that no acknowledged append is ever the last
//! transaction of the `-wal`: damage there would look like a torn write, which SQLite's
//! recovery drops without an error; anywhere else it is followed by a commit, and reported.
//!
//! Schema (version [`SCHEMA_VERSION`], recorded in `PRAGMA user_version`):
//!
//! ```sql
//! records(stream BLOB, version INTEGER, bytes BLOB, PRIMARY KEY(stream, version)) WITHOUT ROWID
//! heads(stream BLOB PRIMARY KEY, head INTEGER, last_hash BLOB) WITHOUT ROWID  -- the mirror
//! wal_seal(id INTEGER PRIMARY KEY CHECK (id = 0), n INTEGER)                   -- the seal
//! blobs(id TEXT PRIMARY KEY, bytes BLOB)
//! snapshots(stream BLOB PRIMARY KEY, version INTEGER, bytes BLOB)
//! ```
//!
//! `stream` is the 16 raw bytes of the UUID, so `ORDER BY stream` is the order of [`StreamId`].
//! `heads` mirrors each stream's head and the hash of its last record in a second b-tree:
//! every append checks it against `MAX(version)`, so damage that hides the end of a stream is
//! `Corrupt`, not a shorter stream (and a primary-key clash at `head + 1` is `Corrupt` too, never
//! a `Conflict` a host would retry forever).
//!
//! Several processes may open the same file: appends run inside `BEGIN IMMEDIATE` (the head
//! check and the insert see the same snapshot). [`SqliteStore::open_read_only`] never writes
//! a byte of the database, its `-wal` or its `-shm` (see its docs for how).
//!
//! Before SQLite touches a `-wal` file, [`wal`] reads it: if it holds committed transactions
//! after a frame that fails its checks (SQLite's recovery would stop there and drop them
//! without an error), the open fails with [`StoreError::Damaged`] naming the file, and nothing
//! is checkpointed.

// No unchecked indexing in code that parses what it reads from disk (kept here even though
// the workspace lint table no longer lists it).
#![warn(clippy::indexing_slicing)]

mod integrity;
pub mod lease;
mod schema;
mod wal;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use ctxlog::store::{
    check_expected, BlobId, ExpectedVersion, IntegrityReport, Lease, Record, Snapshot, Store, StoreError, StoredRecord,
    StreamId, Version,
};
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};

pub use schema::SCHEMA_VERSION;

const BACKEND: &str = "sqlite";

/// How long a writer waits for another connection's write lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// SQLite checkpoints the WAL once it holds this many pages (its default), which bounds the
/// `-wal` a killed writer leaves behind.
pub const WAL_AUTOCHECKPOINT_PAGES: i64 = 1000;

/// A [`Store`] in one SQLite database. `Send + Sync`: the connection sits behind a mutex, so
/// calls from several threads are serialised (SQLite admits one writer at a time anyway).
pub struct SqliteStore {
    conn: Mutex<Connection>,
    location: String,
    path: Option<PathBuf>,
    read_only: bool,
    /// The schema has the `heads` mirror (version 2; a read-only open of version 1 has not).
    mirror: bool,
    /// A read-only open of a database with a hot `-wal` and no `-shm` works on a copy.
    copy: Option<tempfile::TempDir>,
    /// A file-backed writer commits a seal after each append (see [`SqliteStore::seal`]).
    seals: bool,
    /// The connection's `PRAGMA synchronous` as last set ([`LEVEL_UNKNOWN`], [`LEVEL_NORMAL`],
    /// [`LEVEL_FULL`]); read and written only while holding `conn` (atomic for `Sync` only).
    level: AtomicU8,
}

/// [`SqliteStore::level`]: not known (a `PRAGMA synchronous` failed): the next write sets it.
const LEVEL_UNKNOWN: u8 = 0;
/// [`SqliteStore::level`]: `synchronous=NORMAL` (the unsynced appends and the seals).
const LEVEL_NORMAL: u8 = 1;
/// [`SqliteStore::level`]: `synchronous=FULL` (every other write).
const LEVEL_FULL: u8 = 2;

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("location", &self.location)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase))
}

/// An error of SQLite while doing `what`: damage of the file if SQLite says so.
fn err(location: &str, what: &str, e: rusqlite::Error) -> StoreError {
    if is_corruption(&e) {
        StoreError::Damaged {
            backend: BACKEND,
            location: location.to_owned(),
            detail: format!(
                "{what}: {e}; restore the database from a backup (`ctxlog verify` lists what can still be read)"
            ),
        }
    } else {
        StoreError::backend(BACKEND, format!("{location}: {what}"), e)
    }
}

fn version_to_sql(v: Version) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|e| StoreError::backend(BACKEND, format!("version {v} does not fit SQLite INTEGER"), e))
}

/// `PRAGMA synchronous` for the connection's next commits. Never a cached statement: SQLite
/// applies this pragma when it compiles it, so a reused statement would change nothing.
fn set_synchronous(conn: &Connection, full: bool) -> rusqlite::Result<()> {
    conn.pragma_update(None, "synchronous", if full { "FULL" } else { "NORMAL" })
}

/// Turns on SQLite's query planner stability guarantee on `conn`. Without it, a statement whose
/// plan looked at a bound value (`stream = ?1` for the truth heuristic, `LIMIT ?3`) is marked to
/// be re-planned when that value changes, and `sqlite3_clear_bindings` (which rusqlite's
/// statement cache calls each time it takes a statement back) then expires it: every cached
/// read of a stream's head or records was compiled again on its next use (`sqlite3Reprepare`,
/// three per proxy call). The plans of these statements do not depend on the values (each is a
/// primary-key lookup or range), so fixing them changes no result.
fn stable_plans(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true).map(|_| ())
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
            || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE)
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// How many times a `-wal` that keeps changing while it is read is read again.
const WAL_READS: usize = 3;

/// Reads `<db>-wal` and fails if SQLite's recovery would silently drop committed transactions.
/// Returns the scan (frames in the file), or `None` if there is no `-wal`.
///
/// A `-wal` that changes while it is read belongs to a running writer (in another process):
/// SQLite then reads it through that writer's index and never recovers it, and a read taken
/// while the writer restarts the file could mix two generations, so only a `-wal` that holds
/// still is judged.
fn check_wal(db: &Path) -> Result<Option<wal::WalScan>, StoreError> {
    let path = sibling(db, "-wal");
    // A database cut below SQLite's 100-byte header (or emptied beside a -wal) reads as a new,
    // empty one, and SQLite then discards its -wal: damage, before SQLite sees it.
    let db_len = std::fs::metadata(db).map(|m| m.len()).unwrap_or(0);
    let wal_len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    if (1..100).contains(&db_len) || (db_len == 0 && wal_len > 0) {
        return Err(StoreError::Damaged {
            backend: BACKEND,
            location: db.display().to_string(),
            detail: format!(
                "the database file is {db_len} bytes, shorter than SQLite's 100-byte header{}: it was cut short; \
                 restore it from a backup",
                if wal_len > 0 { format!(", beside a {wal_len}-byte -wal") } else { String::new() }
            ),
        });
    }
    let stamp = || std::fs::metadata(&path).map(|m| (m.len(), m.modified().ok()));
    let mut scan = None;
    for _ in 0..WAL_READS {
        let before = match stamp() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::backend(BACKEND, format!("{}: stat", path.display()), e)),
        };
        // The index first: it never claims frames the -wal does not hold yet.
        let shm = std::fs::read(sibling(db, "-shm")).ok();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::backend(BACKEND, format!("{}: read", path.display()), e)),
        };
        let read = wal::scan(&bytes, &path, shm.as_deref());
        if stamp().ok() == Some(before) {
            scan = Some(read);
            break;
        }
        // Changing under us: a live writer. Keep what was read, without a verdict.
        scan = Some(wal::WalScan { damage: None, ..read });
    }
    let Some(scan) = scan else { return Ok(None) };
    match &scan.damage {
        Some(damage) => Err(StoreError::Damaged {
            backend: BACKEND,
            location: path.display().to_string(),
            detail: format!(
                "{damage}. Nothing was opened and nothing checkpointed. Keep a copy of this file; restore from a \
                 backup, or accept the loss by moving the -wal file aside (the database then holds what was \
                 checkpointed before the damage)"
            ),
        }),
        None => Ok(Some(scan)),
    }
}

/// A `file:` URI for `path` with query `params` (the characters URIs reserve are escaped).
fn uri(path: &Path, query: &str) -> Result<String, StoreError> {
    let text = path.to_str().ok_or_else(|| {
        StoreError::backend(BACKEND, format!("{}: open", path.display()), "the path is not valid UTF-8")
    })?;
    let mut out = String::from("file:");
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.push('?');
    out.push_str(query);
    Ok(out)
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` for writing: checks its `-wal` first
    /// (see the crate docs), switches it to WAL, checks (or creates, or upgrades) the schema.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref();
        let location = path.display().to_string();
        check_wal(path)?;
        let conn = Connection::open(path).map_err(|e| err(&location, "open", e))?;
        let mut store = Self::init_writer(conn, location, Some(path.to_path_buf()))?;
        store.seals = true;
        // A WAL left by an older writer (or a killed one), checked above, goes into the
        // database now.
        store.checkpoint(&store.lock());
        Ok(store)
    }

    /// A private in-memory database (tests, `mem`-like use with SQLite semantics).
    pub fn open_in_memory() -> Result<SqliteStore, StoreError> {
        let location = ":memory:".to_owned();
        let conn = Connection::open_in_memory().map_err(|e| err(&location, "open", e))?;
        Self::init_writer(conn, location, None)
    }

    /// Opens the existing database at `path` read-only. Nothing is created, written, locked
    /// out or checkpointed, so this works on read-only media and next to a running writer:
    ///
    /// * no `-wal` (or an empty one and no `-shm`): nothing to recover, the file is opened
    ///   `immutable` (no locks, no `-wal`/`-shm` files created);
    /// * a `-wal` and a `-shm`: `mode=ro&readonly_shm=1`, which reads a live writer's shared
    ///   memory without writing it, or rebuilds the WAL index in private memory when no
    ///   writer is left (a killed one);
    /// * a `-wal` with frames and no `-shm`: the database and its `-wal` are copied to a
    ///   temporary directory and the copy is opened (SQLite cannot read such a WAL without
    ///   creating a `-shm` next to it).
    ///
    /// The `-wal` is checked first as in [`SqliteStore::open`]. A missing file is
    /// [`StoreError::Missing`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref();
        let location = path.display().to_string();
        if !path.is_file() {
            return Err(StoreError::Missing { backend: BACKEND, location });
        }
        let frames = check_wal(path)?.map(|s| s.frames);
        let shm = sibling(path, "-shm").exists();
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let (conn, copy) = match (frames, shm) {
            (None, _) | (Some(0), false) => {
                (Connection::open_with_flags(uri(path, "mode=ro&immutable=1")?, flags), None)
            }
            (Some(_), true) => (Connection::open_with_flags(uri(path, "mode=ro&readonly_shm=1")?, flags), None),
            (Some(_), false) => {
                let dir = tempfile::tempdir()
                    .map_err(|e| StoreError::backend(BACKEND, format!("{location}: make a temporary copy"), e))?;
                let copy = dir.path().join("ctxlog.db");
                for (from, to) in [(path.to_path_buf(), copy.clone()), (sibling(path, "-wal"), sibling(&copy, "-wal"))]
                {
                    std::fs::copy(&from, &to).map_err(|e| {
                        StoreError::backend(BACKEND, format!("{}: copy to {}", from.display(), to.display()), e)
                    })?;
                }
                (Connection::open(&copy), Some(dir))
            }
        };
        let conn = conn.map_err(|e| err(&location, "open read-only", e))?;
        stable_plans(&conn).map_err(|e| err(&location, "enable the query planner stability guarantee", e))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| err(&location, "set busy_timeout", e))?;
        conn.pragma_update(None, "query_only", true).map_err(|e| err(&location, "set query_only", e))?;
        let mirror = schema::check(&conn, &location)?;
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            location,
            path: Some(path.to_path_buf()),
            read_only: true,
            mirror,
            copy,
            seals: false,
            level: AtomicU8::new(LEVEL_UNKNOWN),
        })
    }

    /// The database path (`None` for an in-memory database).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Whether a read-only open works on a temporary copy (see [`SqliteStore::open_read_only`]).
    pub fn reads_a_copy(&self) -> bool {
        self.copy.is_some()
    }

    fn init_writer(mut conn: Connection, location: String, path: Option<PathBuf>) -> Result<SqliteStore, StoreError> {
        stable_plans(&conn).map_err(|e| err(&location, "enable the query planner stability guarantee", e))?;
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
        // SQLite's own checkpoints (PASSIVE, once the WAL reaches 1,000 pages) bound the
        // `-wal`; the next writer then reuses the file from its start, which the WAL check
        // tells apart by the salts.
        conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)
            .map_err(|e| err(&location, "set wal_autocheckpoint", e))?;
        schema::init(&mut conn, &location)?;
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            location,
            path,
            read_only: false,
            mirror: true,
            copy: None,
            seals: false,
            // Set to FULL above, before the schema was created or checked.
            level: AtomicU8::new(LEVEL_FULL),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic inside a rusqlite call leaves no half-open transaction behind (the
        // `Transaction` guard rolls back on drop), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies the WAL into the database and truncates it, without waiting for readers (if
    /// they hold an older snapshot it does what it can). Best effort by design: what it copies
    /// is already durable in the WAL.
    fn checkpoint(&self, conn: &Connection) {
        if self.path.is_none() || self.read_only {
            return;
        }
        let _ = conn.busy_timeout(Duration::ZERO);
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        let _ = conn.busy_timeout(BUSY_TIMEOUT);
    }

    /// Commits a seal after an append: a transaction that only increments the counter of
    /// `wal_seal`, so the append is never the last transaction of the WAL, the one place where
    /// damage looks like a torn write that recovery drops silently ([`wal`]). Damage anywhere
    /// in the append's frames is then followed by a commit and reported; damage in the seal
    /// loses nothing. The seal is committed with `synchronous=NORMAL`: not fsynced (the next
    /// append's fsync covers it), so it costs a write, not a device flush. After a power cut
    /// the last append may be unsealed; after a process crash never. (A checkpoint after every
    /// append would also keep appends out of the WAL's last transaction, at six times the cost
    /// of a commit; `ARCHITECTURE.md`.) It is committed on the append's own connection, the
    /// caller holding it: a second connection's commits would make SQLite drop this one's page
    /// cache at its next transaction (it sees another writer's frames), twice per call.
    /// The connection is left at `NORMAL`: every write that must be fsynced sets `FULL` first
    /// ([`SqliteStore::set_level`]), so a proxy call (unsynced append, its seal, the commit,
    /// its seal) switches twice, not four times.
    fn seal(&self, conn: &Connection) {
        if !self.seals {
            return;
        }
        // A failed seal leaves the append as durable as before, only not sealed.
        if self.set_level(conn, false).is_err() {
            return;
        }
        let _ = conn.prepare_cached("UPDATE wal_seal SET n = n + 1 WHERE id = 0").and_then(|mut s| s.execute([]));
    }

    /// Sets the connection's `PRAGMA synchronous` for its next commit (`full`: `FULL`, the
    /// `-wal` fsynced; else `NORMAL`) unless it is known to be so already. Called, holding the
    /// connection, before every write transaction: each runs at the level it needs whatever the
    /// writes before it left. A failure leaves the level unknown, so the next write sets it.
    fn set_level(&self, conn: &Connection, full: bool) -> rusqlite::Result<()> {
        let want = if full { LEVEL_FULL } else { LEVEL_NORMAL };
        if self.level.load(Relaxed) == want {
            return Ok(());
        }
        self.level.store(LEVEL_UNKNOWN, Relaxed);
        set_synchronous(conn, full)?;
        self.level.store(want, Relaxed);
        Ok(())
    }

    fn refuse_if_read_only(&self, operation: &'static str) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly { backend: BACKEND, location: self.location.clone(), operation });
        }
        Ok(())
    }

    /// The stream's head: `MAX(version)`, checked against the `heads` mirror.
    fn head_of(&self, conn: &Connection, stream: StreamId) -> Result<Version, StoreError> {
        let sid = stream.0.as_bytes();
        let records: Option<i64> = conn
            .prepare_cached("SELECT MAX(version) FROM records WHERE stream = ?1")
            .and_then(|mut s| s.query_row(params![sid], |r| r.get(0)))
            .map_err(|e| self.err_stream(stream, "read head", e))?;
        let records = records.map_or(0, |h| u64::try_from(h).unwrap_or(0));
        if !self.mirror {
            return Ok(records);
        }
        let mirrored = schema::mirrored(conn, sid).map_err(|e| self.err_stream(stream, "read mirrored head", e))?;
        let mirrored = mirrored.map_or(0, |(h, _)| u64::try_from(h).unwrap_or(0));
        if mirrored != records {
            return Err(StoreError::Corrupt {
                stream,
                version: mirrored.min(records) + 1,
                detail: format!(
                    "{}: the heads table says the stream ends at version {mirrored}, the records table at version \
                     {records}: the database is damaged (run `ctxlog verify`, restore from a backup)",
                    self.location
                ),
            });
        }
        Ok(records)
    }

    fn err_stream(&self, stream: StreamId, what: &str, e: rusqlite::Error) -> StoreError {
        err(&self.location, &format!("stream {stream}: {what}"), e)
    }
}

impl SqliteStore {
    /// An append; `synced`: its commit fsyncs the `-wal` (`synchronous=FULL`), else it is left
    /// to the next synced commit (`NORMAL` for this one transaction: in WAL mode the frames
    /// are written, safe from a crash of the process, and the next fsync of the `-wal` covers
    /// them, whichever connection or process makes it).
    fn append_synced(
        &self,
        stream: StreamId,
        expected: ExpectedVersion,
        records: &[Record],
        synced: bool,
    ) -> Result<Version, StoreError> {
        self.refuse_if_read_only("append")?;
        let mut conn = self.lock();
        self.set_level(&conn, synced).map_err(|e| {
            let level = if synced { "FULL for an append" } else { "NORMAL for an unsynced append" };
            self.err_stream(stream, &format!("set synchronous={level}"), e)
        })?;
        self.append_locked(&mut conn, stream, expected, records)
    }

    fn append_locked(
        &self,
        conn: &mut Connection,
        stream: StreamId,
        expected: ExpectedVersion,
        records: &[Record],
    ) -> Result<Version, StoreError> {
        // IMMEDIATE takes the write lock up front: the head we read cannot change before our
        // insert, and a concurrent writer waits (busy_timeout) instead of failing mid-way.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err_stream(stream, "begin append", e))?;
        let head = self.head_of(&tx, stream)?;
        check_expected(stream, expected, head)?;
        let Some(last) = records.last() else { return Ok(head) };
        let mut version = head;
        {
            let mut insert = tx
                .prepare_cached("INSERT INTO records(stream, version, bytes) VALUES (?1, ?2, ?3)")
                .map_err(|e| self.err_stream(stream, "prepare insert", e))?;
            for record in records {
                version += 1;
                match insert.execute(params![stream.0.as_bytes(), version_to_sql(version)?, record.as_bytes()]) {
                    Ok(_) => {}
                    // Under BEGIN IMMEDIATE no other writer can have inserted it since we read
                    // the head: a row past the head is damage, and a host retrying a Conflict
                    // would loop forever.
                    Err(e) if is_unique_violation(&e) => {
                        return Err(StoreError::Corrupt {
                            stream,
                            version,
                            detail: format!(
                                "{}: a row for version {version} already exists although the head is {head}: the \
                                 records table is damaged (run `ctxlog verify`)",
                                self.location
                            ),
                        });
                    }
                    Err(e) => return Err(self.err_stream(stream, &format!("insert version {version}"), e)),
                }
            }
            let new_head = version_to_sql(version)?;
            tx.prepare_cached(
                "INSERT INTO heads(stream, head, last_hash) VALUES (?1, ?2, ?3)
                 ON CONFLICT(stream) DO UPDATE SET head = excluded.head, last_hash = excluded.last_hash",
            )
            .and_then(|mut s| {
                s.execute(params![stream.0.as_bytes(), new_head, &schema::last_hash(last.as_bytes())[..]])
            })
            .map_err(|e| self.err_stream(stream, &format!("mirror head {version}"), e))?;
        }
        tx.commit().map_err(|e| self.err_stream(stream, &format!("commit versions {}..={version}", head + 1), e))?;
        // Still holding `conn`, so no other append comes between this one and its seal.
        self.seal(conn);
        Ok(version)
    }
}

impl Store for SqliteStore {
    fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
        self.append_synced(stream, expected, records, true)
    }

    fn append_unsynced(
        &self,
        stream: StreamId,
        expected: ExpectedVersion,
        records: &[Record],
    ) -> Result<Version, StoreError> {
        self.append_synced(stream, expected, records, false)
    }

    fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError> {
        let from = from.max(1);
        if max == 0 {
            return Ok(Vec::new());
        }
        let conn = self.lock();
        let corrupt = |want: Version, e: rusqlite::Error| {
            if is_corruption(&e) {
                StoreError::Corrupt { stream, version: want, detail: format!("{}: {e}", self.location) }
            } else {
                self.err_stream(stream, &format!("read version {want}"), e)
            }
        };
        let mut stmt = conn
            .prepare_cached(
                "SELECT version, bytes FROM records WHERE stream = ?1 AND version >= ?2 ORDER BY version LIMIT ?3",
            )
            .map_err(|e| self.err_stream(stream, "prepare read", e))?;
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let mut rows =
            stmt.query(params![stream.0.as_bytes(), version_to_sql(from)?, limit]).map_err(|e| corrupt(from, e))?;
        let mut out = Vec::new();
        let mut want = from;
        while let Some(row) = rows.next().map_err(|e| corrupt(want, e))? {
            let version: i64 = row.get(0).map_err(|e| corrupt(want, e))?;
            let bytes: Vec<u8> = row.get(1).map_err(|e| corrupt(want, e))?;
            // Versions are dense by construction; a hole means rows were lost.
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
        integrity::streams(&conn, &self.location, self.mirror)
    }

    fn put_snapshot(&self, stream: StreamId, snap: &Snapshot) -> Result<(), StoreError> {
        self.refuse_if_read_only("put_snapshot")?;
        let mut conn = self.lock();
        self.set_level(&conn, true).map_err(|e| self.err_stream(stream, "set synchronous=FULL for a snapshot", e))?;
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
        // A snapshot is a cache: losing it to damage costs a replay, so it needs no seal.
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
        self.refuse_if_read_only("put_blob")?;
        let id = BlobId::of(bytes);
        let conn = self.lock();
        self.set_level(&conn, true).map_err(|e| err(&self.location, "set synchronous=FULL for a blob", e))?;
        let mut stmt = conn
            .prepare_cached("INSERT OR IGNORE INTO blobs(id, bytes) VALUES (?1, ?2)")
            .map_err(|e| err(&self.location, "prepare put_blob", e))?;
        // A blob is written before the append that refers to it, which follows it in the WAL.
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

    fn check_integrity(&self) -> Result<IntegrityReport, StoreError> {
        let conn = self.lock();
        let mut report = integrity::check(&conn, &self.location, self.mirror);
        if let (Some(path), None) = (&self.path, &self.copy) {
            // Frames not yet checkpointed (a killed writer's, or a running writer's).
            if let Ok(Some(scan)) = check_wal(path) {
                if scan.kept > 0 {
                    report.notes.push(format!(
                        "{}-wal holds {} frames ({} committed transactions) not yet copied into the database",
                        self.location, scan.kept, scan.kept_commits
                    ));
                }
            }
        }
        Ok(report)
    }

    /// An exclusive lock file per stream next to the database ([`lease`]): excludes other
    /// processes and other handles alike, released on drop or when the holder dies. A private
    /// in-memory database has one handle, so its lease is [`Lease::local`]; a read-only open
    /// never writes, so it has no use for a lease and refuses (`ReadOnly`).
    fn try_lease(&self, stream: StreamId) -> Result<Option<Lease>, StoreError> {
        self.refuse_if_read_only("try_lease")?;
        match &self.path {
            Some(path) => lease::try_lease(path, &self.location, stream),
            None => Ok(Some(Lease::local())),
        }
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

    /// Every write runs at the level it needs, whatever the writes before it left: an unsynced
    /// append and a seal at NORMAL, everything else at FULL (each sets it before its
    /// transaction), also after an unsynced append that was refused.
    #[test]
    fn each_write_sets_the_synchronous_level_it_needs() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(dir.path().join("x.db")).unwrap();
        let s = StreamId::random();
        let sync =
            |store: &SqliteStore| -> i64 { store.lock().query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap() };
        store.append_unsynced(s, ExpectedVersion::Exact(0), &[Record::seal(b"a".to_vec())]).unwrap();
        assert_eq!(sync(&store), 1, "synchronous=NORMAL for an unsynced append");
        store.put_blob(b"blob").unwrap();
        assert_eq!(sync(&store), 2, "synchronous=FULL for a blob after an unsynced append");
        let stale = store.append_unsynced(s, ExpectedVersion::Exact(0), &[Record::seal(b"b".to_vec())]);
        assert!(matches!(stale, Err(StoreError::Conflict { .. })), "{stale:?}");
        store.put_snapshot(s, &Snapshot::seal(1, b"snap".to_vec())).unwrap();
        assert_eq!(sync(&store), 2, "synchronous=FULL for a snapshot after a refused unsynced append");
        // The seal after a synced append is committed unsynced on the same connection.
        let n = |store: &SqliteStore| -> i64 {
            store.lock().query_row("SELECT n FROM wal_seal", [], |r| r.get(0)).unwrap()
        };
        let before = n(&store);
        store.append(s, ExpectedVersion::Exact(1), &[Record::seal(b"c".to_vec())]).unwrap();
        assert_eq!(n(&store), before + 1, "the append was not sealed");
        assert_eq!(sync(&store), 1, "the seal runs at NORMAL");
        // Without the seal after it, the level a synced append ran at is the one left.
        store.seals = false;
        store.append_unsynced(s, ExpectedVersion::Exact(2), &[Record::seal(b"d".to_vec())]).unwrap();
        assert_eq!(sync(&store), 1);
        store.append(s, ExpectedVersion::Exact(3), &[Record::seal(b"e".to_vec())]).unwrap();
        assert_eq!(sync(&store), 2, "synchronous=FULL for an append after an unsynced one");
        assert_eq!(store.head(s).unwrap(), Some(4));
    }

    /// The statements run on every call are compiled once: rusqlite's cache clears a
    /// statement's bindings when it takes it back, which expires a statement whose plan read a
    /// bound value unless the planner's stability guarantee is on (`stable_plans`).
    #[test]
    fn cached_statements_are_not_compiled_again() {
        use rusqlite::StatementStatus::RePrepare;
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("x.db")).unwrap();
        let s = StreamId::random();
        for v in 0..5 {
            store.append_unsynced(s, ExpectedVersion::Exact(v), &[Record::seal(vec![1; 10])]).unwrap();
            assert_eq!(store.read(s, v + 2, 10).unwrap().len(), 0);
            assert_eq!(store.head(s).unwrap(), Some(v + 1));
        }
        let conn = store.lock();
        for sql in [
            "SELECT MAX(version) FROM records WHERE stream = ?1",
            "SELECT head, last_hash FROM heads WHERE stream = ?1",
            "SELECT version, bytes FROM records WHERE stream = ?1 AND version >= ?2 ORDER BY version LIMIT ?3",
        ] {
            assert_eq!(conn.prepare_cached(sql).unwrap().get_status(RePrepare), 0, "{sql}");
        }
    }

    #[test]
    fn other_schema_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        drop(SqliteStore::open(&path).unwrap());
        Connection::open(&path).unwrap().pragma_update(None, "user_version", 7).unwrap();
        let e = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(e, StoreError::Schema { found: 7, supported: 2, .. }), "{e}");
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
