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

mod mirror;
mod open;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use ctxlog::store::{
    check_expected, BlobId, ExpectedVersion, IntegrityReport, Record, Snapshot, Store, StoreError, StoredRecord,
    StreamId, Version,
};
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::{Batch, Transactional};

use crate::mirror::{Mirror, MirrorWriter};

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
    meta: sled::Tree,
    location: String,
    path: PathBuf,
    gate: RwLock<()>,
    /// With [`Durability::FlushAndFsync`]: sled's log file, to fdatasync after each flush.
    fsync: Option<std::fs::File>,
    read_only: bool,
    /// A writer's handle on `ctxlog.heads` (see [`mirror`]).
    mirror: Option<Mutex<MirrorWriter>>,
    /// What `ctxlog.heads` said when the store was opened.
    mirrored: Mirror,
    /// Why the last update of `ctxlog.heads` failed, if it did (the append itself had succeeded).
    mirror_error: Mutex<Option<String>>,
    mirror_problems: Vec<String>,
    mirror_missing: bool,
    /// Streams sled holds less of than was acknowledged.
    lost: BTreeMap<StreamId, Lost>,
    // Declared after the sled handles so it is dropped after them (fields drop in order).
    release: Option<LockRelease>,
    /// The temporary copy a read-only store reads; removed only once sled has let go of it.
    _copy: Option<tempfile::TempDir>,
}

/// A stream sled's recovery shortened: from `version` on, what was acknowledged is gone.
#[derive(Debug, Clone)]
struct Lost {
    version: Version,
    detail: String,
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

fn lock_ignoring_poison<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each guarded value is replaced whole: a panic elsewhere cannot leave it half-written.
    m.lock().unwrap_or_else(|e| e.into_inner())
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

/// Why a chunked value (a blob, a snapshot body) cannot be written or read back.
#[derive(Debug, thiserror::Error)]
enum ChunkError {
    #[error("value of {0} bytes has too many chunks")]
    TooMany(usize),
    #[error("{location}: read {what} chunk {i}: {source}")]
    Read { location: String, what: String, i: u32, source: sled::Error },
    #[error("{location}: {what} chunk {i} of {chunks} is missing")]
    Missing { location: String, what: String, i: u32, chunks: u32 },
    #[error("{location}: {what} has {got} bytes, manifest says {len}")]
    Length { location: String, what: String, got: usize, len: u64 },
}

fn chunk_count(len: usize) -> Result<u32, ChunkError> {
    u32::try_from(len.div_ceil(CHUNK)).map_err(|_| ChunkError::TooMany(len))
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
        // Read before sled opens: it never touches this file.
        let heads_mirror = Mirror::read(&path, &path)
            .map_err(|e| StoreError::backend(BACKEND, format!("{location}: read {}", mirror::FILE), e))?;
        let db = open::sled(&path, &location, false)?;
        let mut store = Self::assemble(db, path.clone(), location.clone(), heads_mirror, None)?;
        store.init_schema()?;
        // sled's log and lock file is `<dir>/db` (sled 0.34.7 `Config::db_path`).
        let log_file = path.join("db");
        if durability == Durability::FlushAndFsync {
            store.fsync =
                Some(std::fs::File::open(&log_file).map_err(|e| {
                    StoreError::backend(BACKEND, format!("{}: open for fdatasync", log_file.display()), e)
                })?);
        }
        store.start_mirror()?;
        store.release = Some(LockRelease { lock_file: log_file });
        Ok(store)
    }

    /// Opens the existing store in directory `path` read-only. sled 0.34.7 has no read-only
    /// mode and rewrites its files whenever it opens them, so the directory is copied to a
    /// temporary directory (`$TMPDIR`) and the copy is opened: nothing in `path` is written,
    /// it works on read-only media and while a writer holds the store (the copy is retried
    /// until no file changed while it was taken). The cost is one read and one write of the
    /// whole directory per open (`BENCHMARKS.md`). A directory without a sled store is
    /// [`StoreError::Missing`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<SledStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        let location = path.display().to_string();
        if !path.join("conf").is_file() || !path.join("db").is_file() {
            return Err(StoreError::Missing { backend: BACKEND, location });
        }
        let copy = open::stable_copy(&path, &location)?;
        let heads_mirror = Mirror::read(copy.path(), &path)
            .map_err(|e| StoreError::backend(BACKEND, format!("{location}: read {}", mirror::FILE), e))?;
        let db = open::sled(copy.path(), &location, true)?;
        let log_file = copy.path().join("db");
        let mut store = Self::assemble(db, path, location, heads_mirror, Some(copy))?;
        store.release = Some(LockRelease { lock_file: log_file });
        let found = store.meta.get("schema").map_err(|e| store.err("read schema", e))?;
        match found {
            Some(v) if le_u64(&v, 0) == Some(SCHEMA_VERSION) && v.len() == 8 => Ok(store),
            Some(v) => Err(StoreError::Schema {
                backend: BACKEND,
                location: store.location.clone(),
                found: le_u64(&v, 0).unwrap_or(0),
                supported: SCHEMA_VERSION,
            }),
            // Every stream the mirror knows is reported lost by reading it.
            None if store.heads.is_empty() && store.records.is_empty() && !store.lost.is_empty() => Ok(store),
            None if store.heads.is_empty() && store.records.is_empty() => Err(StoreError::Missing {
                backend: BACKEND,
                location: format!("{} (an empty sled database)", store.location),
            }),
            None => Err(StoreError::Schema {
                backend: BACKEND,
                location: store.location.clone(),
                found: 0,
                supported: SCHEMA_VERSION,
            }),
        }
    }

    fn assemble(
        db: sled::Db,
        path: PathBuf,
        location: String,
        heads_mirror: Mirror,
        copy: Option<tempfile::TempDir>,
    ) -> Result<SledStore, StoreError> {
        let tree = |name: &str| {
            db.open_tree(name).map_err(|e| open::error(&location, &format!("open tree {name}"), e, copy.is_some()))
        };
        let (records, heads, blobs, snapshots, meta) =
            (tree("records")?, tree("heads")?, tree("blobs")?, tree("snapshots")?, tree("meta")?);
        let mut store = SledStore {
            db,
            records,
            heads,
            blobs,
            snapshots,
            meta,
            location,
            path,
            gate: RwLock::new(()),
            fsync: None,
            read_only: copy.is_some(),
            mirror: None,
            mirrored: Mirror::default(),
            mirror_error: Mutex::new(None),
            mirror_problems: heads_mirror.problems.clone(),
            mirror_missing: !heads_mirror.exists,
            lost: BTreeMap::new(),
            _copy: copy,
            release: None,
        };
        store.lost = store.compare_with_mirror(&heads_mirror)?;
        store.mirrored = heads_mirror;
        Ok(store)
    }

    fn init_schema(&self) -> Result<(), StoreError> {
        let found = self.meta.get("schema").map_err(|e| self.err("read schema", e))?;
        let location = self.location.clone();
        match found {
            Some(v) => {
                let found = le_u64(&v, 0).unwrap_or(0);
                if found != SCHEMA_VERSION || v.len() != 8 {
                    return Err(StoreError::Schema { backend: BACKEND, location, found, supported: SCHEMA_VERSION });
                }
            }
            None if self.records.is_empty()
                && self.heads.is_empty()
                && self.blobs.is_empty()
                && self.snapshots.is_empty() =>
            {
                self.meta
                    .insert("schema", &SCHEMA_VERSION.to_le_bytes())
                    .and_then(|_| self.db.flush())
                    .map_err(|e| self.err("write schema", e))?;
            }
            None => return Err(StoreError::Schema { backend: BACKEND, location, found: 0, supported: SCHEMA_VERSION }),
        }
        Ok(())
    }

    /// Streams whose head in sled is behind the mirror, or whose last record is not the one
    /// the mirror recorded: what sled's recovery lost.
    fn compare_with_mirror(&self, mirrored: &Mirror) -> Result<BTreeMap<StreamId, Lost>, StoreError> {
        let mut lost = BTreeMap::new();
        for (stream, entry) in &mirrored.entries {
            let head = self.raw_head(*stream)?;
            let why = if head < entry.head {
                format!(
                    "sled holds versions up to {head}, but version {} was acknowledged ({} says so): sled's recovery \
                     dropped the rest of its log, which is damaged (a flipped bit in {}/db?)",
                    entry.head,
                    mirror::FILE,
                    self.location
                )
            } else if head == entry.head && head > 0 {
                if self.read_record(*stream, head).ok().flatten().map(|r| mirror::last_hash(&r))
                    == Some(entry.last_hash)
                {
                    continue;
                }
                format!("the record at version {head} is not the one {} recorded", mirror::FILE)
            } else {
                // Ahead of the mirror: a crash between sled's flush and the mirror's update.
                continue;
            };
            let version = if head < entry.head { head + 1 } else { head };
            lost.insert(*stream, Lost { version, detail: format!("{}: {why}", self.location) });
        }
        Ok(lost)
    }

    /// A writer keeps the mirror; a store written before it existed gets one from its heads.
    fn start_mirror(&mut self) -> Result<(), StoreError> {
        let path = self.path.clone();
        let fail =
            |e: std::io::Error| StoreError::backend(BACKEND, format!("{}: open {}", path.display(), mirror::FILE), e);
        let mut writer = MirrorWriter::open(&path, &self.mirrored).map_err(fail)?;
        if self.mirror_missing {
            for kv in self.heads.iter() {
                let (k, _) = kv.map_err(|e| self.err("list streams", e))?;
                let Ok(id) = uuid::Uuid::from_slice(&k) else { continue };
                let stream = StreamId(id);
                let head = self.raw_head(stream)?;
                if let Some(last) = self.read_record(stream, head)? {
                    writer.set(stream, head, &last).map_err(fail)?;
                }
            }
        }
        self.mirror = Some(Mutex::new(writer));
        Ok(())
    }

    /// Whether this store reads a temporary copy of its directory (read-only opens do).
    pub fn is_read_only(&self) -> bool {
        self.read_only
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

    /// Records an acknowledged head in `ctxlog.heads`. A failure does not fail the append (it
    /// is durable in sled already); the mirror just lags, and `check_integrity` says why.
    fn mirror_head(&self, stream: StreamId, head: Version, last: &Record) {
        let Some(m) = &self.mirror else { return };
        let mut m = lock_ignoring_poison(m);
        if let Err(e) = m.set(stream, head, last.as_bytes()) {
            *lock_ignoring_poison(&self.mirror_error) = Some(format!("{}: {e}", m.path().display()));
        }
    }

    fn refuse_if_read_only(&self, operation: &'static str) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly { backend: BACKEND, location: self.location.clone(), operation });
        }
        Ok(())
    }

    fn lost_error(&self, stream: StreamId) -> Option<StoreError> {
        self.lost.get(&stream).map(|l| StoreError::Corrupt { stream, version: l.version, detail: l.detail.clone() })
    }

    /// The stream's head; `Corrupt` if sled lost part of what was acknowledged.
    fn head_of(&self, stream: StreamId) -> Result<Version, StoreError> {
        match self.lost_error(stream) {
            Some(e) => Err(e),
            None => self.raw_head(stream),
        }
    }

    /// The record at `version`, its chunks put together (`None` if it has none).
    fn read_record(&self, stream: StreamId, version: Version) -> Result<Option<Vec<u8>>, StoreError> {
        let start = record_key(stream, version, 0);
        let end = record_key(stream, version, u32::MAX);
        let mut out: Option<Vec<u8>> = None;
        for kv in self.records.range(&start[..]..=&end[..]) {
            let (_, v) = kv.map_err(|e| self.err(&format!("stream {stream}: read version {version}"), e))?;
            out.get_or_insert_with(Vec::new).extend_from_slice(&v);
        }
        Ok(out)
    }

    /// The head the `heads` tree holds, whatever the mirror says.
    fn raw_head(&self, stream: StreamId) -> Result<Version, StoreError> {
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
    ) -> Result<Vec<u8>, ChunkError> {
        let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0).min(1 << 30));
        let (location, what) = (|| self.location.clone(), || what.to_owned());
        for i in 0..chunks {
            let c = tree
                .get(chunk_key(prefix, i))
                .map_err(|source| ChunkError::Read { location: location(), what: what(), i, source })?
                .ok_or_else(|| ChunkError::Missing { location: location(), what: what(), i, chunks })?;
            out.extend_from_slice(&c);
        }
        if out.len() as u64 != len {
            return Err(ChunkError::Length { location: location(), what: what(), got: out.len(), len });
        }
        Ok(out)
    }
}

impl Store for SledStore {
    fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
        self.refuse_if_read_only("append")?;
        if let Some(e) = self.lost_error(stream) {
            return Err(e);
        }
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
        if let Some(last) = records.last() {
            self.flush(&format!("stream {stream} append up to version {version}"))?;
            self.mirror_head(stream, version, last);
        }
        Ok(version)
    }

    fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError> {
        let from = from.max(1);
        if max == 0 {
            return Ok(Vec::new());
        }
        let _gate = self.read_gate();
        let head = self.raw_head(stream)?;
        let wanted_last = from.saturating_add(max as u64 - 1);
        // What sled still holds of a shortened stream stays readable, for a postmortem.
        if let Some(lost) = self.lost.get(&stream) {
            if wanted_last >= lost.version {
                return Err(StoreError::Corrupt { stream, version: lost.version, detail: lost.detail.clone() });
            }
        }
        if from > head {
            return Ok(Vec::new());
        }
        let last = head.min(wanted_last);
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
        // The mirror's streams too: a stream sled lost entirely is listed, and reading it says so.
        let mut out: BTreeSet<StreamId> = self.mirrored.entries.keys().copied().collect();
        for kv in self.heads.iter() {
            let (k, _) = kv.map_err(|e| self.err("list streams", e))?;
            let id = uuid::Uuid::from_slice(&k).map_err(|e| self.err("heads tree holds a malformed stream id", e))?;
            out.insert(StreamId(id));
        }
        Ok(out.into_iter().collect())
    }

    fn put_snapshot(&self, stream: StreamId, snap: &Snapshot) -> Result<(), StoreError> {
        self.refuse_if_read_only("put_snapshot")?;
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
        self.refuse_if_read_only("put_blob")?;
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
            .map_err(|e| StoreError::CorruptBlob { id: id.clone(), detail: e.to_string() })?;
        id.verify(&bytes)?;
        Ok(Some(bytes))
    }

    fn check_integrity(&self) -> Result<IntegrityReport, StoreError> {
        let mut report = IntegrityReport { problems: self.mirror_problems.clone(), ..IntegrityReport::default() };
        if self.mirror_missing {
            report.notes.push(format!(
                "{}: no {} (written by an older build); lost versions cannot be detected until a writer opens it",
                self.location,
                mirror::FILE
            ));
        }
        if let Some(e) = lock_ignoring_poison(&self.mirror_error).as_ref() {
            report.notes.push(format!("{}: the last update of {} failed: {e}", self.location, mirror::FILE));
        }
        Ok(report)
    }
}
