//! sled 0.34.7 backend for the ctxlog [`Store`] contract.
//!
//! **Read `README.md` of this crate before choosing it**: sled's `flush()` is not an fsync on
//! Linux, so an acknowledged append survives a process crash but not necessarily a power loss.
//!
//! Trees and keys (`stream` = the 16 UUID bytes, integers big endian so keys sort by them):
//!
//! ```text
//! records    stream ‖ version u64 ‖ chunk u32   -> up to CHUNK bytes of the sealed record
//! heads      stream                             -> head version u64
//! blobs      hex id (64 bytes)                  -> total len u64 ‖ chunk count u32
//!            hex id ‖ chunk u32                 -> up to CHUNK bytes
//! snapshots  stream                             -> version u64 ‖ total len u64 ‖ chunk count u32
//!            stream ‖ chunk u32                 -> up to CHUNK bytes
//! meta       "schema"                           -> SCHEMA_VERSION u64
//! ```
//!
//! Every value is at most [`CHUNK`] (4 KiB) bytes: sled writes any node that serialises above
//! ~128 KiB to a separate blob file that it never fsyncs, and a leaf node holds ~16 values, so
//! small chunks keep everything in sled's (flushed) log.

// No unchecked indexing in code that parses what it reads from disk (kept here even though
// the workspace lint table no longer lists it).
#![warn(clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use ctxlog::store::{
    check_expected, BlobId, ExpectedVersion, Record, Snapshot, Store, StoreError, StoredRecord, StreamId, Version,
};
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::{Batch, Transactional};

const BACKEND: &str = "sled";

/// The key layout version this build reads and writes (`meta/schema`).
pub const SCHEMA_VERSION: u64 = 1;
/// Largest value written to sled. sled logs a *node* above ~128 KiB (segment_size / 4) to an
/// unsynced blob file, and a leaf holds up to 16 entries before it splits (a few more while a
/// split is pending), so values stay at 4 KiB: 16 chunks plus keys are far below the limit.
pub const CHUNK: usize = 4 * 1024;
/// sled's page cache size. sled's default is 1 GiB, which it fills; see baselines.md §3.1.
pub const CACHE_CAPACITY: u64 = 64 * 1024 * 1024;

/// A [`Store`] in a sled database directory. sled locks its directory, so one process at a
/// time; within the process a reader-writer lock orders appends after each other and keeps
/// readers from seeing a write before it is flushed.
pub struct SledStore {
    db: sled::Db,
    records: sled::Tree,
    heads: sled::Tree,
    blobs: sled::Tree,
    snapshots: sled::Tree,
    location: String,
    path: PathBuf,
    gate: RwLock<()>,
    /// With [`Durability::FlushAndFsync`]: sled's log file, to fdatasync after each flush.
    fsync: Option<std::fs::File>,
    // Declared last so it is dropped after the sled handles above (fields drop in order).
    _release: LockRelease,
}

/// Waits, on drop, until sled has really let go of its directory lock. sled's IO threadpool
/// jobs hold the database file (and its `flock`) for a moment after the last handle is
/// dropped, so an immediate reopen in the same process could otherwise fail with `Locked`.
struct LockRelease {
    lock_file: PathBuf,
}

impl Drop for LockRelease {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let Ok(file) = std::fs::File::open(&self.lock_file) else { return };
            match file.try_lock() {
                // Released (our probe lock goes away with `file`).
                Ok(()) => return,
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => return,
            }
        }
    }
}

impl std::fmt::Debug for SledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStore").field("path", &self.path).finish_non_exhaustive()
    }
}

fn record_key(stream: StreamId, version: Version, chunk: u32) -> [u8; 28] {
    let mut k = [0u8; 28];
    k[..16].copy_from_slice(stream.0.as_bytes());
    k[16..24].copy_from_slice(&version.to_be_bytes());
    k[24..].copy_from_slice(&chunk.to_be_bytes());
    k
}

fn chunk_key(prefix: &[u8], chunk: u32) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(&chunk.to_be_bytes());
    k
}

fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn chunk_count(len: usize) -> Result<u32, String> {
    u32::try_from(len.div_ceil(CHUNK)).map_err(|_| format!("value of {len} bytes has too many chunks"))
}

/// What [`SledStore`] does before acknowledging a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `Db::flush()` only: sled's own guarantee, which survives a process crash but not
    /// necessarily a power loss (`flush` is `sync_file_range` on Linux; see README.md).
    #[default]
    Flush,
    /// `Db::flush()`, then `fdatasync` of sled's log file `<dir>/db` (what redb's benchmark does
    /// for sled). Also flushes the drive cache, at the price of one more device flush per write.
    /// This narrows the power-loss gap; sled's recovery after power loss remains untested.
    FlushAndFsync,
}

impl SledStore {
    /// Opens (creating if needed) the sled database in directory `path`, with
    /// [`Durability::Flush`].
    pub fn open(path: impl AsRef<Path>) -> Result<SledStore, StoreError> {
        Self::open_with(path, Durability::Flush)
    }

    /// Opens (creating if needed) the sled database in directory `path`.
    pub fn open_with(path: impl AsRef<Path>, durability: Durability) -> Result<SledStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        let location = path.display().to_string();
        let db = sled::Config::new().path(&path).cache_capacity(CACHE_CAPACITY).open().map_err(|e| match e {
            // sled reports its directory lock as a plain io error; give it our typed variant.
            sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
                StoreError::Locked { backend: BACKEND, location: location.clone(), detail: io.to_string() }
            }
            e => StoreError::backend(BACKEND, format!("{location}: open"), e),
        })?;
        let tree = |name: &str| {
            db.open_tree(name).map_err(|e| StoreError::backend(BACKEND, format!("{location}: open tree {name}"), e))
        };
        let (records, heads, blobs, snapshots, meta) =
            (tree("records")?, tree("heads")?, tree("blobs")?, tree("snapshots")?, tree("meta")?);
        let found =
            meta.get("schema").map_err(|e| StoreError::backend(BACKEND, format!("{location}: read schema"), e))?;
        match found {
            Some(v) => {
                let found = le_u64(&v, 0).unwrap_or(0);
                if found != SCHEMA_VERSION || v.len() != 8 {
                    return Err(StoreError::Schema { backend: BACKEND, location, found, supported: SCHEMA_VERSION });
                }
            }
            None if records.is_empty() && heads.is_empty() && blobs.is_empty() && snapshots.is_empty() => {
                meta.insert("schema", &SCHEMA_VERSION.to_le_bytes())
                    .and_then(|_| db.flush())
                    .map_err(|e| StoreError::backend(BACKEND, format!("{location}: write schema"), e))?;
            }
            None => return Err(StoreError::Schema { backend: BACKEND, location, found: 0, supported: SCHEMA_VERSION }),
        }
        // sled's log and lock file is `<dir>/db` (sled 0.34.7 `Config::db_path`).
        let log_file = path.join("db");
        let fsync =
            match durability {
                Durability::Flush => None,
                Durability::FlushAndFsync => Some(std::fs::File::open(&log_file).map_err(|e| {
                    StoreError::backend(BACKEND, format!("{}: open for fdatasync", log_file.display()), e)
                })?),
            };
        let _release = LockRelease { lock_file: log_file };
        Ok(SledStore { db, records, heads, blobs, snapshots, location, path, gate: RwLock::new(()), fsync, _release })
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read_gate(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_gate(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write().unwrap_or_else(|e| e.into_inner())
    }

    fn err(&self, what: &str, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
        StoreError::backend(BACKEND, format!("{}: {what}", self.location), e)
    }

    fn flush(&self, what: &str) -> Result<(), StoreError> {
        // sled's flush is sync_file_range, not fsync: durable against a process crash, not
        // necessarily against power loss (README.md).
        self.db.flush().map(|_| ()).map_err(|e| self.err(&format!("flush after {what}"), e))?;
        match &self.fsync {
            Some(f) => f.sync_data().map_err(|e| self.err(&format!("fdatasync db after {what}"), e)),
            None => Ok(()),
        }
    }

    fn head_of(&self, stream: StreamId) -> Result<Version, StoreError> {
        let v = self.heads.get(stream.0.as_bytes()).map_err(|e| self.err(&format!("stream {stream}: read head"), e))?;
        match v {
            None => Ok(0),
            Some(v) => be_u64(&v, 0).filter(|_| v.len() == 8).ok_or_else(|| StoreError::Corrupt {
                stream,
                version: 0,
                detail: format!("{}: head value of {} bytes", self.location, v.len()),
            }),
        }
    }

    /// Test hook: rewrites the stored bytes of one record chunk 0, to simulate corruption.
    /// Returns whether the record exists.
    #[doc(hidden)]
    pub fn tamper_record(
        &self,
        stream: StreamId,
        version: Version,
        f: impl FnOnce(&mut Vec<u8>),
    ) -> Result<bool, StoreError> {
        let key = record_key(stream, version, 0);
        let Some(v) = self.records.get(key).map_err(|e| self.err("tamper", e))? else { return Ok(false) };
        let mut bytes = v.to_vec();
        f(&mut bytes);
        self.records.insert(key, bytes).map_err(|e| self.err("tamper", e))?;
        Ok(true)
    }

    /// Test hook: rewrites the first chunk of a blob. Returns whether the blob exists.
    #[doc(hidden)]
    pub fn tamper_blob(&self, id: &BlobId, f: impl FnOnce(&mut Vec<u8>)) -> Result<bool, StoreError> {
        let key = chunk_key(id.hex().as_bytes(), 0);
        let Some(v) = self.blobs.get(&key).map_err(|e| self.err("tamper", e))? else { return Ok(false) };
        let mut bytes = v.to_vec();
        f(&mut bytes);
        self.blobs.insert(key, bytes).map_err(|e| self.err("tamper", e))?;
        Ok(true)
    }

    /// Reads a chunked value (blob or snapshot body) of `chunks` chunks and `len` bytes.
    fn read_chunks(
        &self,
        tree: &sled::Tree,
        prefix: &[u8],
        chunks: u32,
        len: u64,
        what: &str,
    ) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0).min(1 << 30));
        for i in 0..chunks {
            let c = tree
                .get(chunk_key(prefix, i))
                .map_err(|e| format!("{}: read {what} chunk {i}: {e}", self.location))?
                .ok_or_else(|| format!("{}: {what} chunk {i} of {chunks} is missing", self.location))?;
            out.extend_from_slice(&c);
        }
        if out.len() as u64 != len {
            return Err(format!("{}: {what} has {} bytes, manifest says {len}", self.location, out.len()));
        }
        Ok(out)
    }
}

impl Store for SledStore {
    fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
        let _gate = self.write_gate();
        let sid = stream.0.as_bytes();
        let result = (&self.records, &self.heads).transaction(|(tx_records, tx_heads)| {
            let head = match tx_heads.get(sid)? {
                None => 0,
                Some(v) => be_u64(&v, 0).unwrap_or(0),
            };
            if let Err(e) = check_expected(stream, expected, head) {
                return Err(ConflictableTransactionError::Abort(e));
            }
            let mut version = head;
            for record in records {
                version += 1;
                for (i, chunk) in record.as_bytes().chunks(CHUNK).enumerate() {
                    let i = u32::try_from(i).unwrap_or(u32::MAX);
                    tx_records.insert(&record_key(stream, version, i)[..], chunk)?;
                }
                if record.as_bytes().is_empty() {
                    // Unreachable for sealed records (they hold a checksum), but keep every
                    // record visible to the reader, which groups chunks by version.
                    tx_records.insert(&record_key(stream, version, 0)[..], &[][..])?;
                }
            }
            if version != head {
                tx_heads.insert(sid, &version.to_be_bytes())?;
            }
            Ok(version)
        });
        let version = match result {
            Ok(v) => v,
            Err(TransactionError::Abort(e)) => return Err(e),
            Err(TransactionError::Storage(e)) => return Err(self.err(&format!("stream {stream}: append"), e)),
        };
        if !records.is_empty() {
            self.flush(&format!("stream {stream} append up to version {version}"))?;
        }
        Ok(version)
    }

    fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError> {
        let from = from.max(1);
        if max == 0 {
            return Ok(Vec::new());
        }
        let _gate = self.read_gate();
        let head = self.head_of(stream)?;
        if from > head {
            return Ok(Vec::new());
        }
        let last = head.min(from.saturating_add(max as u64 - 1));
        let start = record_key(stream, from, 0);
        let end = record_key(stream, last, u32::MAX);
        let mut out: Vec<StoredRecord> = Vec::new();
        let mut current: Option<(Version, Vec<u8>, u32)> = None;
        let corrupt = |version: Version, detail: String| StoreError::Corrupt {
            stream,
            version,
            detail: format!("{}: {detail}", self.location),
        };
        let finish = |cur: (Version, Vec<u8>, u32), out: &mut Vec<StoredRecord>| -> Result<(), StoreError> {
            let (version, bytes, _) = cur;
            let want = from + out.len() as u64;
            if version != want {
                return Err(corrupt(want, format!("record {want} is missing (next key holds {version})")));
            }
            let record = Record::from_stored(stream, version, bytes)?;
            out.push(StoredRecord { version, record });
            Ok(())
        };
        for kv in self.records.range(&start[..]..=&end[..]) {
            let (k, v) = kv.map_err(|e| self.err(&format!("stream {stream}: read from version {from}"), e))?;
            let (Some(version), Some(chunk)) = (be_u64(&k, 16), k.get(24..28).and_then(|c| c.try_into().ok())) else {
                return Err(corrupt(from + out.len() as u64, format!("malformed record key of {} bytes", k.len())));
            };
            let chunk = u32::from_be_bytes(chunk);
            match current.as_mut() {
                Some((cv, bytes, next)) if *cv == version => {
                    if chunk != *next {
                        return Err(corrupt(version, format!("chunk {next} is missing")));
                    }
                    bytes.extend_from_slice(&v);
                    *next += 1;
                }
                _ => {
                    if let Some(done) = current.take() {
                        finish(done, &mut out)?;
                    }
                    if chunk != 0 {
                        return Err(corrupt(version, "chunk 0 is missing".into()));
                    }
                    current = Some((version, v.to_vec(), 1));
                }
            }
        }
        if let Some(done) = current.take() {
            finish(done, &mut out)?;
        }
        let expected = last - from + 1;
        if (out.len() as u64) < expected {
            let missing = from + out.len() as u64;
            return Err(corrupt(missing, format!("record {missing} is missing (head is {head})")));
        }
        Ok(out)
    }

    fn head(&self, stream: StreamId) -> Result<Option<Version>, StoreError> {
        let _gate = self.read_gate();
        let head = self.head_of(stream)?;
        Ok((head > 0).then_some(head))
    }

    fn streams(&self) -> Result<Vec<StreamId>, StoreError> {
        let _gate = self.read_gate();
        let mut out = Vec::new();
        for kv in self.heads.iter() {
            let (k, _) = kv.map_err(|e| self.err("list streams", e))?;
            let id = uuid::Uuid::from_slice(&k).map_err(|e| self.err("heads tree holds a malformed stream id", e))?;
            out.push(StreamId(id));
        }
        Ok(out)
    }

    fn put_snapshot(&self, stream: StreamId, snap: &Snapshot) -> Result<(), StoreError> {
        let _gate = self.write_gate();
        let head = self.head_of(stream)?;
        if snap.version > head {
            return Err(StoreError::SnapshotAhead { stream, snapshot: snap.version, head });
        }
        let sid = stream.0.as_bytes();
        let old = self.snapshots.get(sid).map_err(|e| self.err(&format!("stream {stream}: read snapshot"), e))?;
        let old_chunks = match &old {
            Some(m) => {
                if le_u64(m, 0).is_some_and(|v| v > snap.version) {
                    return Ok(());
                }
                le_u32(m, 16).unwrap_or(0)
            }
            None => 0,
        };
        let chunks = chunk_count(snap.bytes.len()).map_err(|e| self.err(&format!("stream {stream}: snapshot"), e))?;
        // One batch on one tree is atomic in sled: readers and recovery see the old snapshot
        // or the new one.
        let mut batch = Batch::default();
        let mut manifest = Vec::with_capacity(20);
        manifest.extend_from_slice(&snap.version.to_le_bytes());
        manifest.extend_from_slice(&(snap.bytes.len() as u64).to_le_bytes());
        manifest.extend_from_slice(&chunks.to_le_bytes());
        batch.insert(sid, manifest);
        for (i, c) in snap.bytes.chunks(CHUNK).enumerate() {
            batch.insert(chunk_key(sid, u32::try_from(i).unwrap_or(u32::MAX)), c);
        }
        for stale in chunks..old_chunks {
            batch.remove(chunk_key(sid, stale));
        }
        self.snapshots.apply_batch(batch).map_err(|e| self.err(&format!("stream {stream}: write snapshot"), e))?;
        self.flush(&format!("stream {stream} snapshot"))
    }

    fn get_snapshot(&self, stream: StreamId) -> Result<Option<Snapshot>, StoreError> {
        let _gate = self.read_gate();
        let sid = stream.0.as_bytes();
        let Some(m) = self.snapshots.get(sid).map_err(|e| self.err(&format!("stream {stream}: read snapshot"), e))?
        else {
            return Ok(None);
        };
        let (Some(version), Some(len), Some(chunks)) = (le_u64(&m, 0), le_u64(&m, 8), le_u32(&m, 16)) else {
            // Snapshots are a cache: an unreadable manifest means "no snapshot".
            return Ok(None);
        };
        match self.read_chunks(&self.snapshots, sid, chunks, len, &format!("snapshot of stream {stream}")) {
            Ok(bytes) => Ok(Some(Snapshot { version, bytes })),
            Err(_) => Ok(None),
        }
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<BlobId, StoreError> {
        let id = BlobId::of(bytes);
        let _gate = self.write_gate();
        let key = id.hex().as_bytes().to_vec();
        if self.blobs.contains_key(&key).map_err(|e| self.err(&format!("read blob {id}"), e))? {
            return Ok(id);
        }
        let chunks = chunk_count(bytes.len()).map_err(|e| self.err(&format!("blob {id}"), e))?;
        let mut batch = Batch::default();
        for (i, c) in bytes.chunks(CHUNK).enumerate() {
            batch.insert(chunk_key(&key, u32::try_from(i).unwrap_or(u32::MAX)), c);
        }
        let mut manifest = Vec::with_capacity(12);
        manifest.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        manifest.extend_from_slice(&chunks.to_le_bytes());
        batch.insert(key, manifest);
        self.blobs.apply_batch(batch).map_err(|e| self.err(&format!("write blob {id}"), e))?;
        self.flush(&format!("blob {id}"))?;
        Ok(id)
    }

    fn get_blob(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        let _gate = self.read_gate();
        let key = id.hex().as_bytes();
        let Some(m) = self.blobs.get(key).map_err(|e| self.err(&format!("read blob {id}"), e))? else {
            return Ok(None);
        };
        let (Some(len), Some(chunks)) = (le_u64(&m, 0), le_u32(&m, 8)) else {
            return Err(StoreError::CorruptBlob { id: id.clone(), detail: format!("{}: bad manifest", self.location) });
        };
        let bytes = self
            .read_chunks(&self.blobs, key, chunks, len, &format!("blob {id}"))
            .map_err(|detail| StoreError::CorruptBlob { id: id.clone(), detail })?;
        id.verify(&bytes)?;
        Ok(Some(bytes))
    }
}
