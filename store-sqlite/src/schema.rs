//! The schema: creation, the version check, and the upgrade from version 1.

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use sha2::{Digest, Sha256};

use ctxlog::store::StoreError;

use crate::{err, BACKEND};

/// The on-disk schema this build reads and writes (`PRAGMA user_version`). Version 1 had no
/// `heads` table; a writer's open upgrades it, a read-only open reads it without the checks
/// the mirror allows.
pub const SCHEMA_VERSION: u64 = 2;

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

/// The mirror of every stream's head and of the hash of its last record, written in the same
/// transaction as the records but kept in a separate b-tree, so damage that hides the end of a
/// stream from the `records` b-tree (a flipped bit in an index page) cannot also rewrite it.
const HEADS_SQL: &str = "
CREATE TABLE IF NOT EXISTS heads(
    stream BLOB PRIMARY KEY NOT NULL,
    head INTEGER NOT NULL,
    last_hash BLOB NOT NULL
) WITHOUT ROWID;
";

/// One row whose counter each append's seal increments (`lib.rs`): a transaction that changes
/// a byte, so SQLite writes a page and a commit frame for it (it skips updates that change
/// nothing).
const SEAL_SQL: &str = "
CREATE TABLE IF NOT EXISTS wal_seal(id INTEGER PRIMARY KEY CHECK (id = 0), n INTEGER NOT NULL);
INSERT OR IGNORE INTO wal_seal(id, n) VALUES (0, 0);
";

/// The hash the `heads` table keeps of a stream's last record: the first 16 bytes of its
/// sha256 (the record carries its own crc32c; this ties the head to one exact record).
pub(crate) fn last_hash(record: &[u8]) -> [u8; 16] {
    let digest = Sha256::digest(record);
    let mut out = [0u8; 16];
    out.copy_from_slice(digest.get(..16).unwrap_or(&[0; 16]));
    out
}

fn user_version(conn: &Connection, location: &str) -> Result<(u64, i64), StoreError> {
    let found: i64 =
        conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(|e| err(location, "read user_version", e))?;
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table'", [], |r| r.get(0))
        .map_err(|e| err(location, "list tables", e))?;
    Ok((u64::try_from(found).unwrap_or(u64::MAX), tables))
}

/// A writer's open: creates the schema in an empty database, upgrades version 1, refuses
/// anything else. One write transaction, so two processes opening a fresh file at once do not
/// both initialise it.
pub(crate) fn init(conn: &mut Connection, location: &str) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| err(location, "begin schema transaction", e))?;
    let (found, tables) = user_version(&tx, location)?;
    match found {
        0 if tables == 0 => {
            tx.execute_batch(SCHEMA_SQL).map_err(|e| err(location, "create schema", e))?;
            tx.execute_batch(HEADS_SQL).map_err(|e| err(location, "create heads", e))?;
            tx.execute_batch(SEAL_SQL).map_err(|e| err(location, "create wal_seal", e))?;
        }
        1 => upgrade_from_1(&tx, location)?,
        SCHEMA_VERSION => {}
        found => {
            return Err(StoreError::Schema {
                backend: BACKEND,
                location: location.to_owned(),
                found,
                supported: SCHEMA_VERSION,
            })
        }
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION as i64)
        .map_err(|e| err(location, "write user_version", e))?;
    tx.commit().map_err(|e| err(location, "commit schema", e))
}

/// Version 1 → 2: the `heads` mirror, filled from the records as they are, and the seal.
fn upgrade_from_1(conn: &Connection, location: &str) -> Result<(), StoreError> {
    conn.execute_batch(HEADS_SQL).map_err(|e| err(location, "create heads", e))?;
    conn.execute_batch(SEAL_SQL).map_err(|e| err(location, "create wal_seal", e))?;
    let mut last = conn
        .prepare(
            "SELECT r.stream, r.version, r.bytes FROM records r
             JOIN (SELECT stream, MAX(version) AS v FROM records GROUP BY stream) m
               ON r.stream = m.stream AND r.version = m.v",
        )
        .map_err(|e| err(location, "upgrade: prepare", e))?;
    let rows = last
        .query_map([], |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, i64>(1)?, r.get::<_, Vec<u8>>(2)?)))
        .map_err(|e| err(location, "upgrade: read heads", e))?;
    let mut insert = conn
        .prepare("INSERT INTO heads(stream, head, last_hash) VALUES (?1, ?2, ?3)")
        .map_err(|e| err(location, "upgrade: prepare", e))?;
    for row in rows {
        let (stream, head, bytes) = row.map_err(|e| err(location, "upgrade: read heads", e))?;
        insert
            .execute(params![stream, head, &last_hash(&bytes)[..]])
            .map_err(|e| err(location, "upgrade: write heads", e))?;
    }
    Ok(())
}

/// A read-only open: which schema is this? `Ok(true)` with the `heads` mirror (version 2),
/// `Ok(false)` without (version 1).
pub(crate) fn check(conn: &Connection, location: &str) -> Result<bool, StoreError> {
    match user_version(conn, location)? {
        (0, 0) => Err(StoreError::Missing { backend: BACKEND, location: format!("{location} (an empty database)") }),
        (1, _) => Ok(false),
        (SCHEMA_VERSION, _) => Ok(true),
        (found, _) => Err(StoreError::Schema {
            backend: BACKEND,
            location: location.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        }),
    }
}

/// The mirrored head and last-record hash of `stream`, if it has a row.
pub(crate) fn mirrored(conn: &Connection, stream: &[u8]) -> rusqlite::Result<Option<(i64, Vec<u8>)>> {
    conn.prepare_cached("SELECT head, last_hash FROM heads WHERE stream = ?1")?
        .query_row(params![stream], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
}
