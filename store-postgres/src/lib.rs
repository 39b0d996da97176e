//! PostgreSQL backend for the ctxlog [`Store`] contract: one log shared by a fleet of service
//! workers, so a session's next call can land on any worker.
//!
//! ```sql
//! ctxlog_meta(key text PRIMARY KEY, value bigint)          -- schema_version = 1
//! ctxlog_records(stream uuid, version bigint, bytes bytea, PRIMARY KEY(stream, version))
//! ctxlog_blobs(id text PRIMARY KEY, bytes bytea)           -- sha256:<hex>, INSERT … ON CONFLICT DO NOTHING
//! ctxlog_snapshots(stream uuid PRIMARY KEY, version bigint, bytes bytea)
//! ```
//!
//! **The primary key decides every race.** A batch for versions `n+1..=n+k` is one
//! `INSERT … SELECT` statement (so one transaction) that only inserts if version `n` exists
//! (or `n = 0`); a second writer of version `n+1` blocks on the key until the first commits,
//! then fails with `unique_violation` and gets [`StoreError::Conflict`] with the head it lost
//! to. Every connection runs with `synchronous_commit=on`, so an `Ok` append is on disk.
//!
//! **Faults.** A server that is down or restarting is [`StoreError::Unavailable`]; reads retry
//! once on a fresh connection (a pooled connection may have died with the old server). If the
//! connection breaks while a batch is committing, the store reconnects (for up to
//! [`PgOptions::resolve_window`]) and compares the rows at those versions with the batch: its
//! own rows mean `Ok`, nothing means it retries the insert, other rows mean `Conflict`. A
//! statement timeout, wrong credentials, a bad URL and a read-only violation are
//! [`StoreError::Backend`] with a [`PgError`] inside ([`PgError::of`]); a schema written by a
//! newer ctxlog is [`StoreError::Schema`].
//!
//! **Live tail.** After each append the store sends `NOTIFY` on the stream's channel (in its
//! own statement after the commit: a `NOTIFY` inside the appending transaction would hold
//! PostgreSQL's global notify lock across the WAL flush and serialise all writers).
//! [`PgStore::listen`] waits for it.

// No unchecked indexing on rows read from the server.
#![warn(clippy::indexing_slicing)]

mod connect;
mod error;
pub mod lease;
mod listen;
mod options;
mod params;
mod pool;
mod schema;
#[cfg(feature = "test-support")]
pub mod test_support;
pub mod tls;

use std::time::{Duration, Instant};

use ctxlog::store::{
    check_expected, BlobId, ExpectedVersion, Lease, Record, Snapshot, Store, StoreError, StoreError::Conflict,
    StoredRecord, StreamId, Version,
};
use postgres::types::ToSql;

pub use error::PgError;
pub use listen::Listener;
pub use options::PgOptions;
#[cfg(feature = "test-support")]
pub use schema::set_schema_version;
pub use schema::SCHEMA_VERSION;

use error::{classify, full_message, store_error, unavailable, Class, BACKEND};
use pool::{PgConn, Pool};

const HEAD: &str = "SELECT max(version) FROM ctxlog_records WHERE stream = $1";
/// Inserts the batch at versions `$2+1..`, only if version `$2` exists (the head check); the
/// primary key turns a concurrent or stale writer into `unique_violation`.
const INSERT: &str = "INSERT INTO ctxlog_records (stream, version, bytes)
     SELECT $1, $2 + r.ord, r.bytes FROM unnest($3::bytea[]) WITH ORDINALITY AS r(bytes, ord)
     WHERE $2 = 0 OR EXISTS (SELECT 1 FROM ctxlog_records WHERE stream = $1 AND version = $2)";
const READ: &str =
    "SELECT version, bytes FROM ctxlog_records WHERE stream = $1 AND version >= $2 ORDER BY version LIMIT $3";
/// One index probe per stream (a loose index scan) instead of `SELECT DISTINCT` over every row.
const STREAMS: &str = "WITH RECURSIVE s(stream) AS (
         (SELECT stream FROM ctxlog_records ORDER BY stream LIMIT 1)
         UNION ALL
         SELECT (SELECT r.stream FROM ctxlog_records r WHERE r.stream > s.stream ORDER BY r.stream LIMIT 1)
         FROM s WHERE s.stream IS NOT NULL
     )
     SELECT stream FROM s WHERE stream IS NOT NULL";
/// Writes the snapshot unless it is ahead of the log or older than the stored one; returns
/// the head it checked against.
const PUT_SNAPSHOT: &str = "WITH h AS (SELECT coalesce(max(version), 0) AS head FROM ctxlog_records WHERE stream = $1),
     w AS (
         INSERT INTO ctxlog_snapshots (stream, version, bytes) SELECT $1, $2, $3 FROM h WHERE $2 <= h.head
         ON CONFLICT (stream) DO UPDATE SET version = excluded.version, bytes = excluded.bytes
         WHERE excluded.version >= ctxlog_snapshots.version
     )
     SELECT head FROM h";
const GET_SNAPSHOT: &str = "SELECT version, bytes FROM ctxlog_snapshots WHERE stream = $1";
const PUT_BLOB: &str = "INSERT INTO ctxlog_blobs (id, bytes) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING";
const GET_BLOB: &str = "SELECT bytes FROM ctxlog_blobs WHERE id = $1";
const NOTIFY: &str = "SELECT pg_notify($1, $2)";

/// How many times an `ExpectedVersion::Any` append re-reads the head after losing a race.
const ANY_RETRIES: usize = 64;

/// A [`Store`] in a PostgreSQL database, shared by any number of processes and hosts.
/// `Send + Sync`: threads share a small pool of connections ([`PgOptions::pool_size`]).
pub struct PgStore {
    pool: Pool,
    leases: lease::Leases,
    location: String,
    opts: PgOptions,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("location", &self.location).field("options", &self.opts).finish()
    }
}

/// What one attempt at inserting a batch found.
enum Insert {
    /// The batch is in the log at the versions asked for.
    Written,
    /// Another writer holds those versions, or the head is not where the writer thought.
    Lost,
    /// The batch's versions were taken while we retried: look at them again.
    LookAgain,
}

fn sql_version(v: Version) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|e| StoreError::backend(BACKEND, format!("version {v} does not fit a bigint"), e))
}

fn version_of(v: Option<i64>) -> Version {
    v.map_or(0, |v| u64::try_from(v).unwrap_or(0))
}

/// The nullable bigint in the first column of the first row, as a version (0 if none).
fn first_version(rows: &[postgres::Row]) -> Result<Version, postgres::Error> {
    match rows.first() {
        Some(r) => Ok(version_of(r.try_get(0)?)),
        None => Ok(0),
    }
}

/// The `LISTEN`/`NOTIFY` channel of a stream (an identifier: `ctxlog_` and 32 hex digits).
pub fn channel(stream: StreamId) -> String {
    format!("ctxlog_{}", stream.0.simple())
}

impl PgStore {
    /// Connects to `url` (`postgres://user:password@host:port/db`, `postgresql://…`, a Unix
    /// socket directory as `postgres://user@%2Frun%2Fpostgresql/db`, or a libpq `key=value`
    /// string) and creates or migrates the schema.
    pub fn open(url: &str) -> Result<PgStore, StoreError> {
        Self::open_with(url, PgOptions::default())
    }

    /// Connects read-only (`default_transaction_read_only=on`): never creates or migrates the
    /// schema, and every write fails with [`PgError::ReadOnly`]. For `verify`, `replay`,
    /// `tail` and other readers, which must not change a byte.
    pub fn open_read_only(url: &str) -> Result<PgStore, StoreError> {
        Self::open_with(url, PgOptions { read_only: true, ..PgOptions::default() })
    }

    /// Connects with explicit [`PgOptions`].
    pub fn open_with(url: &str, opts: PgOptions) -> Result<PgStore, StoreError> {
        let (connector, pool_size) = options::client_config(url, &opts)?;
        let opts = PgOptions { pool_size, ..opts };
        let location = connector.location().to_owned();
        // The answer to `try_lease` may wait for a reconnect (and its statements).
        let answer_within = opts.connect_timeout * 2 + opts.statement_timeout.unwrap_or(Duration::from_secs(30));
        let leases = lease::Leases::new(connector.clone(), answer_within);
        let pool = Pool::new(connector, opts.pool_size, opts.checkout_timeout);
        let store = PgStore { pool, leases, location, opts };
        store.pool.with(|c| schema::prepare(c.client(), &store.location, store.opts.read_only))??;
        Ok(store)
    }

    /// Where the store is, as `postgres://user@host:port/db` (never the password).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &PgOptions {
        &self.opts
    }

    /// Connections open right now (idle or in use).
    pub fn connections(&self) -> usize {
        self.pool.live()
    }

    /// A dedicated connection that waits for appends to `stream` (`LISTEN`).
    pub fn listen(&self, stream: StreamId) -> Result<Listener, StoreError> {
        Listener::new(self.pool.connector().clone(), stream)
    }

    /// Runs a read-only request; if it fails because its pooled connection was dead (the
    /// server restarted since it was opened), drops the idle connections and tries once more
    /// on a fresh one.
    fn read_op<T>(
        &self,
        what: impl Fn() -> String,
        f: impl Fn(&mut PgConn) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        match self.pool.with(&f)? {
            Ok(v) => Ok(v),
            Err(e) if classify(&e) == Class::Connection => {
                self.pool.clear_idle();
                self.pool.with(&f)?.map_err(|e| store_error(&self.location, &what(), e))
            }
            Err(e) => Err(store_error(&self.location, &what(), e)),
        }
    }

    fn head_of(&self, stream: StreamId) -> Result<Version, StoreError> {
        self.read_op(
            || format!("stream {stream}: read the head"),
            |c| c.query(HEAD, &[&stream.0]).and_then(|rows| first_version(&rows)),
        )
    }

    /// One attempt at writing `batch` at versions `base+1..`.
    fn insert(&self, stream: StreamId, base: Version, batch: &[&[u8]]) -> Result<Insert, StoreError> {
        let params: [&(dyn ToSql + Sync); 3] = [&stream.0, &sql_version(base)?, &batch];
        match self.pool.with(|c| c.execute(INSERT, &params))? {
            Ok(n) if n == batch.len() as u64 => Ok(Insert::Written),
            Ok(_) => Ok(Insert::Lost),
            Err(e) => match classify(&e) {
                Class::Duplicate => Ok(Insert::Lost),
                Class::Connection => self.resolve(stream, base, batch, &e),
                _ => Err(self.batch_error(stream, base, batch.len(), e)),
            },
        }
    }

    fn batch_error(&self, stream: StreamId, base: Version, len: usize, e: postgres::Error) -> StoreError {
        store_error(
            &self.location,
            &format!("stream {stream}: append versions {}..={}", base + 1, base + len as u64),
            e,
        )
    }

    /// The connection broke while the batch was in flight, so it may or may not have been
    /// committed. Reconnects until the server answers (within the resolve window) and looks:
    /// our bytes at our versions → written; nothing there → not written, insert it now; other
    /// bytes → lost to another writer.
    fn resolve(
        &self,
        stream: StreamId,
        base: Version,
        batch: &[&[u8]],
        cause: &postgres::Error,
    ) -> Result<Insert, StoreError> {
        self.pool.clear_idle();
        let deadline = Instant::now() + self.opts.resolve_window;
        let cause = full_message(cause);
        let mut last;
        let mut pause = Duration::from_millis(50);
        let (from, n) = (sql_version(base + 1)?, batch.len() as i64);
        loop {
            let attempt = self.pool.with(|c| -> Result<Insert, postgres::Error> {
                let rows = c.query(READ, &[&stream.0, &from, &n])?;
                if rows.is_empty() {
                    let params: [&(dyn ToSql + Sync); 3] = [&stream.0, &(from - 1), &batch];
                    return match c.execute(INSERT, &params) {
                        Ok(k) if k == batch.len() as u64 => Ok(Insert::Written),
                        Ok(_) => Ok(Insert::Lost),
                        Err(e) if classify(&e) == Class::Duplicate => Ok(Insert::LookAgain),
                        Err(e) => Err(e),
                    };
                }
                let mut ours = rows.len() == batch.len();
                for (i, (row, bytes)) in rows.iter().zip(batch).enumerate() {
                    ours &= row.try_get::<_, i64>(0)? == from + i as i64 && row.try_get::<_, &[u8]>(1)? == *bytes;
                }
                Ok(if ours { Insert::Written } else { Insert::Lost })
            });
            match attempt {
                Ok(Ok(Insert::LookAgain)) => continue,
                Ok(Ok(outcome)) => return Ok(outcome),
                Ok(Err(e)) if classify(&e) == Class::Connection => last = full_message(&e),
                Ok(Err(e)) => return Err(self.batch_error(stream, base, batch.len(), e)),
                Err(StoreError::Unavailable { detail, .. }) => last = detail,
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Err(unavailable(
                    &self.location,
                    format!(
                        "stream {stream}: the connection broke while versions {}..={} were being committed \
                         ({cause}), and the server did not answer within {:?} to tell whether they were \
                         written ({last}); catch up before deciding again",
                        base + 1,
                        base + batch.len() as u64,
                        self.opts.resolve_window
                    ),
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Wakes listeners of `stream`. Best effort: the append is already durable, and a tail
    /// also polls, so a lost notification only delays it.
    fn notify(&self, stream: StreamId, head: Version) {
        let (channel, payload) = (channel(stream), head.to_string());
        let _ = self.pool.with(|c| c.execute(NOTIFY, &[&channel, &payload]));
    }
}

impl Store for PgStore {
    fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
        if records.is_empty() {
            let head = self.head_of(stream)?;
            check_expected(stream, expected, head)?;
            return Ok(head);
        }
        let batch: Vec<&[u8]> = records.iter().map(Record::as_bytes).collect();
        let mut attempts = 0;
        loop {
            let base = match expected {
                ExpectedVersion::Exact(v) => v,
                ExpectedVersion::Any => self.head_of(stream)?,
            };
            match self.insert(stream, base, &batch)? {
                Insert::Written => {
                    let head = base + batch.len() as u64;
                    if self.opts.notify {
                        self.notify(stream, head);
                    }
                    return Ok(head);
                }
                Insert::Lost | Insert::LookAgain => {
                    attempts += 1;
                    if expected == ExpectedVersion::Any && attempts < ANY_RETRIES {
                        continue;
                    }
                    return Err(Conflict { stream, expected, actual: self.head_of(stream)? });
                }
            }
        }
    }

    fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError> {
        let from = from.max(1);
        if max == 0 {
            return Ok(Vec::new());
        }
        let (start, limit) = (i64::try_from(from).unwrap_or(i64::MAX), i64::try_from(max).unwrap_or(i64::MAX));
        let what = || format!("stream {stream}: read from version {from}");
        let rows = self.read_op(what, |c| {
            c.query(READ, &[&stream.0, &start, &limit])?
                .iter()
                .map(|r| Ok((r.try_get::<_, i64>(0)?, r.try_get::<_, Vec<u8>>(1)?)))
                .collect::<Result<Vec<_>, postgres::Error>>()
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for (want, (version, bytes)) in (from..).zip(rows) {
            // Versions are dense by construction; a hole means rows were deleted behind our back.
            if u64::try_from(version).ok() != Some(want) {
                return Err(StoreError::Corrupt {
                    stream,
                    version: want,
                    detail: format!("{}: expected version {want}, found row with version {version}", self.location),
                });
            }
            out.push(StoredRecord { version: want, record: Record::from_stored(stream, want, bytes)? });
        }
        Ok(out)
    }

    fn head(&self, stream: StreamId) -> Result<Option<Version>, StoreError> {
        let head = self.head_of(stream)?;
        Ok((head > 0).then_some(head))
    }

    fn streams(&self) -> Result<Vec<StreamId>, StoreError> {
        self.read_op(
            || "list streams".to_owned(),
            |c| c.query(STREAMS, &[])?.iter().map(|r| r.try_get(0).map(StreamId)).collect(),
        )
    }

    fn put_snapshot(&self, stream: StreamId, snap: &Snapshot) -> Result<(), StoreError> {
        let version = sql_version(snap.version)?;
        let what = || format!("stream {stream}: write snapshot at version {}", snap.version);
        // Idempotent (an upsert that never goes backwards), so a retry is safe.
        let head = self.read_op(what, |c| {
            c.query(PUT_SNAPSHOT, &[&stream.0, &version, &snap.bytes]).and_then(|rows| first_version(&rows))
        })?;
        if snap.version > head {
            return Err(StoreError::SnapshotAhead { stream, snapshot: snap.version, head });
        }
        Ok(())
    }

    fn get_snapshot(&self, stream: StreamId) -> Result<Option<Snapshot>, StoreError> {
        self.read_op(
            || format!("stream {stream}: read snapshot"),
            |c| match c.query(GET_SNAPSHOT, &[&stream.0])?.first() {
                Some(r) => Ok(Some(Snapshot { version: version_of(r.try_get(0)?), bytes: r.try_get(1)? })),
                None => Ok(None),
            },
        )
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<BlobId, StoreError> {
        let id = BlobId::of(bytes);
        // Content-addressed: writing it twice is the same as once, so a retry is safe.
        self.read_op(|| format!("write blob {id}"), |c| c.execute(PUT_BLOB, &[&id.as_str(), &bytes]))?;
        Ok(id)
    }

    fn get_blob(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        let bytes: Option<Vec<u8>> = self.read_op(
            || format!("read blob {id}"),
            |c| c.query(GET_BLOB, &[&id.as_str()])?.first().map(|r| r.try_get(0)).transpose(),
        )?;
        if let Some(b) = &bytes {
            id.verify(b)?;
        }
        Ok(bytes)
    }

    /// A session-level advisory lock on the store's dedicated lease connection ([`lease`]):
    /// excludes every other `PgStore` (process, host) on the database, released on drop
    /// (without waiting for the server) and when the holder's connection ends. A read-only
    /// store never writes, so it has no use for a lease and refuses (`ReadOnly`).
    fn try_lease(&self, stream: StreamId) -> Result<Option<Lease>, StoreError> {
        if self.opts.read_only {
            return Err(StoreError::ReadOnly {
                backend: BACKEND,
                location: self.location.clone(),
                operation: "try_lease",
            });
        }
        self.leases.try_lease(stream)
    }
}

/// Classifies a [`StoreError`] from this crate for logs and retry loops: `true` when waiting
/// and retrying can help (the server is unreachable, restarting, or a statement timed out).
pub fn is_transient(e: &StoreError) -> bool {
    matches!(e, StoreError::Unavailable { .. })
        || matches!(PgError::of(e), Some(PgError::StatementTimeout(_) | PgError::PoolExhausted { .. }))
}
