//! The storage contract: an append-only log of opaque, checksummed records per stream, plus
//! snapshots (a cache of the fold) and a content-addressed blob area.
//!
//! Backends live in their own crates; [`MemoryStore`] is the reference implementation the
//! conformance suite compares every backend with.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use sha2::{Digest, Sha256};
use uuid::Uuid;

/// Position of a record in its stream. The first record has version 1; a stream's head is the
/// version of its last record, so a head of `n` means the stream holds `n` records.
pub type Version = u64;

/// One event stream = one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub Uuid);

impl StreamId {
    /// A fresh random id.
    pub fn random() -> Self {
        StreamId(Uuid::new_v4())
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for StreamId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(StreamId)
    }
}

/// Optimistic concurrency: what the writer believes the stream's head to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedVersion {
    /// Append whatever the head is.
    Any,
    /// The head must be exactly this; `Exact(0)` means "the stream must not exist yet".
    Exact(Version),
}

impl fmt::Display for ExpectedVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpectedVersion::Any => f.write_str("any"),
            ExpectedVersion::Exact(v) => write!(f, "{v}"),
        }
    }
}

/// Length of the trailing checksum of a sealed record or snapshot.
pub const CHECKSUM_LEN: usize = 4;

/// An opaque, sealed record: `body ‖ crc32c(body)` (little endian). The body is an envelope
/// produced by [`crate::codec`]; stores never look inside, they only verify the seal on read.
#[derive(Clone, PartialEq, Eq)]
pub struct Record(Vec<u8>);

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Record({} bytes)", self.0.len())
    }
}

impl Record {
    /// Seals `body` by appending its checksum.
    pub fn seal(body: Vec<u8>) -> Record {
        Record(seal(body))
    }

    /// Re-creates a record from bytes a store read back, verifying the seal. On mismatch the
    /// error names the stream and version so a postmortem can find the bad row or frame.
    pub fn from_stored(stream: StreamId, version: Version, bytes: Vec<u8>) -> Result<Record, StoreError> {
        match unseal_check(&bytes) {
            Ok(()) => Ok(Record(bytes)),
            Err(e) => Err(StoreError::Corrupt { stream, version, detail: e.to_string() }),
        }
    }

    /// The sealed bytes, as a store persists them.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The body without the checksum.
    pub fn body(&self) -> &[u8] {
        // A Record is only built by `seal` or a verified `from_stored`, so it always holds at
        // least the checksum.
        self.0.get(..self.0.len().saturating_sub(CHECKSUM_LEN)).unwrap_or_default()
    }

    /// Consumes the record into its sealed bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

fn seal(mut body: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

/// Why sealed bytes (a record, a snapshot) do not hold their seal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// Fewer bytes than the checksum itself.
    #[error("{len} bytes is shorter than the {CHECKSUM_LEN}-byte checksum")]
    Short {
        /// How many bytes there are.
        len: usize,
    },
    /// The checksum does not match the bytes.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Mismatch {
        /// The checksum stored after the body.
        stored: u32,
        /// The checksum of the body.
        computed: u32,
    },
}

fn unseal_check(bytes: &[u8]) -> Result<(), SealError> {
    let Some(split) = bytes.len().checked_sub(CHECKSUM_LEN) else {
        return Err(SealError::Short { len: bytes.len() });
    };
    let (body, tail) = bytes.split_at(split);
    let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let computed = crc32c::crc32c(body);
    if stored == computed {
        Ok(())
    } else {
        Err(SealError::Mismatch { stored, computed })
    }
}

/// Why a snapshot could not be written or read. Only [`SnapshotError::Layout`] is expected
/// (another build's cache); the others are damage or a bug.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The seal does not hold.
    #[error(transparent)]
    Seal(#[from] SealError),
    /// Fewer bytes than the layout number.
    #[error("snapshot shorter than its header")]
    Short,
    /// Another build's state layout: a stale cache, not damage.
    #[error("snapshot layout {found}, this build reads {reads}")]
    Layout {
        /// The layout the snapshot was written in.
        found: u32,
        /// The layout this build reads (`session::SNAPSHOT_LAYOUT`).
        reads: u32,
    },
    /// The state does not encode or decode (bincode's message).
    #[error("{0}")]
    Payload(String),
    /// The state is of another version than the snapshot says.
    #[error("snapshot claims version {claimed} but holds state at version {held}")]
    Version {
        /// The snapshot's version.
        claimed: Version,
        /// The state's.
        held: Version,
    },
}

/// A record read back from a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    /// Its position in the stream.
    pub version: Version,
    /// The verified record.
    pub record: Record,
}

/// A cached fold of a stream up to `version`. The bytes are sealed like records; a snapshot
/// that fails its seal or does not decode is ignored and the session replays from the start.
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The stream version the snapshot reflects.
    pub version: Version,
    /// Sealed payload (see [`Snapshot::seal`]).
    pub bytes: Vec<u8>,
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Snapshot(v{}, {} bytes)", self.version, self.bytes.len())
    }
}

impl Snapshot {
    /// Seals a snapshot body.
    pub fn seal(version: Version, body: Vec<u8>) -> Snapshot {
        Snapshot { version, bytes: seal(body) }
    }

    /// The body if the seal holds.
    pub fn body(&self) -> Result<&[u8], SealError> {
        unseal_check(&self.bytes)?;
        Ok(self.bytes.get(..self.bytes.len() - CHECKSUM_LEN).unwrap_or_default())
    }
}

/// Content address of a blob: `sha256:<64 lowercase hex digits>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct BlobId(String);

impl BlobId {
    /// The id of `bytes`.
    pub fn of(bytes: &[u8]) -> BlobId {
        BlobId(format!("sha256:{}", hex(&Sha256::digest(bytes))))
    }

    /// Parses `sha256:<hex>`; anything else is rejected so an id can be used as a file name.
    pub fn parse(s: &str) -> Option<BlobId> {
        let hexpart = s.strip_prefix("sha256:")?;
        let ok = hexpart.len() == 64 && hexpart.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| BlobId(s.to_owned()))
    }

    /// The full id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 64 hex digits alone.
    pub fn hex(&self) -> &str {
        self.0.strip_prefix("sha256:").unwrap_or(&self.0)
    }

    /// Checks that `bytes` hash to this id (stores call it on read).
    pub fn verify(&self, bytes: &[u8]) -> Result<(), StoreError> {
        let actual = BlobId::of(bytes);
        if &actual == self {
            Ok(())
        } else {
            Err(StoreError::CorruptBlob { id: self.clone(), detail: format!("content hashes to {actual}") })
        }
    }
}

impl fmt::Display for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// Everything a store can report. Each variant names where the problem is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The stream's head was not what the writer expected; nothing was written. Reload, decide
    /// again, retry.
    #[error("stream {stream}: version conflict: expected head {expected}, actual head {actual}")]
    Conflict {
        /// The stream.
        stream: StreamId,
        /// What the writer expected.
        expected: ExpectedVersion,
        /// The head found.
        actual: Version,
    },
    /// A stored record failed its checksum or framing.
    #[error("stream {stream} version {version}: corrupt record: {detail}")]
    Corrupt {
        /// The stream.
        stream: StreamId,
        /// The (first) version affected.
        version: Version,
        /// What is wrong.
        detail: String,
    },
    /// A stored blob does not hash to its id.
    #[error("blob {id}: corrupt: {detail}")]
    CorruptBlob {
        /// The blob.
        id: BlobId,
        /// What is wrong.
        detail: String,
    },
    /// A snapshot claims a version the log does not have.
    #[error("stream {stream}: snapshot at version {snapshot} is ahead of the log head {head}")]
    SnapshotAhead {
        /// The stream.
        stream: StreamId,
        /// The snapshot's version.
        snapshot: Version,
        /// The log head.
        head: Version,
    },
    /// Another process holds the store's writer lock.
    #[error("{backend} store {location} is locked by another writer: {detail}")]
    Locked {
        /// Backend name.
        backend: &'static str,
        /// Path of the store.
        location: String,
        /// Details (lock file, pid).
        detail: String,
    },
    /// The store was written by a different on-disk schema.
    #[error("{backend} store {location}: unsupported schema version {found} (this build reads {supported})")]
    Schema {
        /// Backend name.
        backend: &'static str,
        /// Path of the store.
        location: String,
        /// Found schema version.
        found: u64,
        /// Supported schema version.
        supported: u64,
    },
    /// A networked store cannot be reached right now: the server is down, restarting, or the
    /// connection broke. Transient: wait and retry. An `append` that fails this way wrote
    /// nothing *or* its batch landed before the connection broke (the store could not tell),
    /// so a writer catches up ([`crate::Session::catch_up`]) before deciding again.
    #[error("{backend} store {location} is unavailable: {detail}")]
    Unavailable {
        /// Backend name.
        backend: &'static str,
        /// Where the store is (a URL without its password).
        location: String,
        /// What failed.
        detail: String,
    },
    /// The store as a whole is damaged (a file the backend cannot read, a log it would cut
    /// short on recovery), as opposed to one record ([`StoreError::Corrupt`]).
    #[error("{backend} store {location} is damaged: {detail}")]
    Damaged {
        /// Backend name.
        backend: &'static str,
        /// The damaged file or directory.
        location: String,
        /// What is wrong and what to do.
        detail: String,
    },
    /// Nothing to open: a read-only open never creates a store.
    #[error("no {backend} store at {location}")]
    Missing {
        /// Backend name.
        backend: &'static str,
        /// Where one was expected.
        location: String,
    },
    /// A write to a store opened read-only.
    #[error("{backend} store {location} is open read-only: {operation} refused")]
    ReadOnly {
        /// Backend name.
        backend: &'static str,
        /// Path of the store.
        location: String,
        /// The refused operation.
        operation: &'static str,
    },
    /// An error of the underlying library or the OS.
    #[error("{backend}: {context}: {source}")]
    Backend {
        /// Backend name.
        backend: &'static str,
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StoreError {
    /// Wraps a backend error with what was being done.
    pub fn backend(
        backend: &'static str,
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> StoreError {
        StoreError::Backend { backend, context: context.into(), source: source.into() }
    }
}

/// What [`Store::check_integrity`] found about a store as a whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntegrityReport {
    /// Damage, each naming the file (and the stream and version when known).
    pub problems: Vec<String>,
    /// Repairs an earlier open made (a torn tail moved aside, say), each naming where the cut
    /// bytes were kept. Not damage, but acknowledged by a person before they stop being reported.
    pub repairs: Vec<String>,
    /// Worth knowing, not wrong (a torn tail a writer's open will move aside, say).
    pub notes: Vec<String>,
}

/// The storage contract every backend implements.
///
/// * `append` is atomic (all records or none) and durable when it returns `Ok`. A wrong
///   `expected` head returns [`StoreError::Conflict`] and writes nothing.
/// * `read` returns at most `max` records with `version >= from`, ascending, each verified.
/// * Snapshots are a cache: `put_snapshot` rejects a snapshot ahead of the log and never
///   replaces a newer snapshot with an older one.
/// * Blobs are content-addressed and deduplicated; `get_blob` verifies the hash.
pub trait Store: Send + Sync {
    /// Appends `records` atomically after checking the head; returns the new head.
    fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError>;
    /// [`append`](Store::append) with its sync to stable storage left to the next `append` of
    /// this store (any stream), which covers every write before it. When it returns `Ok` the
    /// records are written, visible to every reader and survive a crash of this process (a
    /// `kill -9`); only a crash of the machine before the next `append` may lose them. A host
    /// uses it for a write whose loss matters only if a later, synced write lands (the proxy:
    /// a request's messages, made durable by the call's commit before the client has its
    /// answer). The default syncs: right for stores where one write's sync does not cover
    /// another's (a file per stream) or that cannot tell the two apart.
    fn append_unsynced(
        &self,
        stream: StreamId,
        expected: ExpectedVersion,
        records: &[Record],
    ) -> Result<Version, StoreError> {
        self.append(stream, expected, records)
    }
    /// Reads up to `max` records starting at version `from` (1-based).
    fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError>;
    /// The stream's head, `None` if it has no records.
    fn head(&self, stream: StreamId) -> Result<Option<Version>, StoreError>;
    /// All streams, sorted.
    fn streams(&self) -> Result<Vec<StreamId>, StoreError>;
    /// Stores a snapshot (see the trait docs for the rules).
    fn put_snapshot(&self, stream: StreamId, snap: &Snapshot) -> Result<(), StoreError>;
    /// The latest snapshot, unverified (the session checks the seal and falls back to replay).
    fn get_snapshot(&self, stream: StreamId) -> Result<Option<Snapshot>, StoreError>;
    /// Stores `bytes` under their content address (idempotent).
    fn put_blob(&self, bytes: &[u8]) -> Result<BlobId, StoreError>;
    /// The blob's bytes, verified against the id, or `None` if missing.
    fn get_blob(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError>;
    /// Checks what reading each stream cannot: the backend's own structure and bookkeeping, and
    /// repairs made by earlier opens (`ctxlog verify` reports them). The default has nothing to
    /// check.
    fn check_integrity(&self) -> Result<IntegrityReport, StoreError> {
        Ok(IntegrityReport::default())
    }
    /// Claims `stream` for one writer across every process sharing this store, until the
    /// returned [`Lease`] is dropped; `Ok(None)` when another holder has it (try again later).
    /// A holder that dies (a `kill -9`) loses its leases with its process or connection. The
    /// lease is what keeps one call in flight per session across a fleet of proxies; the
    /// version check of `append` stays the safety net. The default is a [`Lease::local`]: right
    /// for stores that only one process can write (memory, fs, sled), whose hosts serialize a
    /// stream's calls in memory.
    fn try_lease(&self, stream: StreamId) -> Result<Option<Lease>, StoreError> {
        let _ = stream;
        Ok(Some(Lease::local()))
    }
}

/// A claim on one stream, released when dropped (see [`Store::try_lease`]).
pub struct Lease {
    _guard: Option<Box<dyn Send + Sync>>,
}

impl Lease {
    /// A lease held by `guard`: the backend releases the claim when `guard` is dropped.
    pub fn new(guard: impl Send + Sync + 'static) -> Lease {
        Lease { _guard: Some(Box::new(guard)) }
    }

    /// A lease that excludes nobody outside this process.
    pub fn local() -> Lease {
        Lease { _guard: None }
    }

    /// Whether it excludes other processes.
    pub fn is_shared(&self) -> bool {
        self._guard.is_some()
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease").field("shared", &self.is_shared()).finish()
    }
}

macro_rules! forward_store {
    ($($ty:ty),*) => {$(
        impl<S: Store + ?Sized> Store for $ty {
            fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
                (**self).append(stream, expected, records)
            }
            fn append_unsynced(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
                (**self).append_unsynced(stream, expected, records)
            }
            fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError> {
                (**self).read(stream, from, max)
            }
            fn head(&self, stream: StreamId) -> Result<Option<Version>, StoreError> {
                (**self).head(stream)
            }
            fn streams(&self) -> Result<Vec<StreamId>, StoreError> {
                (**self).streams()
            }
            fn put_snapshot(&self, stream: StreamId, snap: &Snapshot) -> Result<(), StoreError> {
                (**self).put_snapshot(stream, snap)
            }
            fn get_snapshot(&self, stream: StreamId) -> Result<Option<Snapshot>, StoreError> {
                (**self).get_snapshot(stream)
            }
            fn put_blob(&self, bytes: &[u8]) -> Result<BlobId, StoreError> {
                (**self).put_blob(bytes)
            }
            fn get_blob(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
                (**self).get_blob(id)
            }
            fn check_integrity(&self) -> Result<IntegrityReport, StoreError> {
                (**self).check_integrity()
            }
            fn try_lease(&self, stream: StreamId) -> Result<Option<Lease>, StoreError> {
                (**self).try_lease(stream)
            }
        }
    )*};
}
forward_store!(&S, Box<S>, Arc<S>);

/// Checks `expected` against `head` the same way in every backend.
pub fn check_expected(stream: StreamId, expected: ExpectedVersion, head: Version) -> Result<(), StoreError> {
    match expected {
        ExpectedVersion::Exact(v) if v != head => Err(StoreError::Conflict { stream, expected, actual: head }),
        _ => Ok(()),
    }
}

#[derive(Default)]
struct MemoryInner {
    streams: BTreeMap<StreamId, Vec<Vec<u8>>>,
    snapshots: BTreeMap<StreamId, Snapshot>,
    blobs: BTreeMap<BlobId, Vec<u8>>,
}

/// In-memory store: the reference semantics, and the `mem:` URL of the CLI.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<MemoryInner>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, MemoryInner> {
        // A panic while holding the lock cannot leave a half-applied append (appends extend in
        // one call), so a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Test hook: overwrites the stored bytes of one record, to simulate corruption.
    pub fn tamper(&self, stream: StreamId, version: Version, f: impl FnOnce(&mut Vec<u8>)) -> bool {
        let mut inner = self.lock();
        let idx = usize::try_from(version).ok().and_then(|v| v.checked_sub(1));
        match (inner.streams.get_mut(&stream), idx) {
            (Some(records), Some(i)) => match records.get_mut(i) {
                Some(bytes) => {
                    f(bytes);
                    true
                }
                None => false,
            },
            _ => false,
        }
    }
}

impl Store for MemoryStore {
    fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
        let mut inner = self.lock();
        let log = inner.streams.get(&stream);
        let head = log.map_or(0, |l| l.len() as Version);
        check_expected(stream, expected, head)?;
        if records.is_empty() {
            return Ok(head);
        }
        let log = inner.streams.entry(stream).or_default();
        log.extend(records.iter().map(|r| r.as_bytes().to_vec()));
        Ok(log.len() as Version)
    }

    fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError> {
        let inner = self.lock();
        let Some(log) = inner.streams.get(&stream) else { return Ok(Vec::new()) };
        let start = usize::try_from(from.max(1) - 1).unwrap_or(usize::MAX);
        log.iter()
            .enumerate()
            .skip(start)
            .take(max)
            .map(|(i, bytes)| {
                let version = i as Version + 1;
                Record::from_stored(stream, version, bytes.clone()).map(|record| StoredRecord { version, record })
            })
            .collect()
    }

    fn head(&self, stream: StreamId) -> Result<Option<Version>, StoreError> {
        Ok(self.lock().streams.get(&stream).map(|l| l.len() as Version))
    }

    fn streams(&self) -> Result<Vec<StreamId>, StoreError> {
        Ok(self.lock().streams.keys().copied().collect())
    }

    fn put_snapshot(&self, stream: StreamId, snap: &Snapshot) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let head = inner.streams.get(&stream).map_or(0, |l| l.len() as Version);
        if snap.version > head {
            return Err(StoreError::SnapshotAhead { stream, snapshot: snap.version, head });
        }
        match inner.snapshots.get(&stream) {
            Some(existing) if existing.version > snap.version => {}
            _ => {
                inner.snapshots.insert(stream, snap.clone());
            }
        }
        Ok(())
    }

    fn get_snapshot(&self, stream: StreamId) -> Result<Option<Snapshot>, StoreError> {
        Ok(self.lock().snapshots.get(&stream).cloned())
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<BlobId, StoreError> {
        let id = BlobId::of(bytes);
        self.lock().blobs.entry(id.clone()).or_insert_with(|| bytes.to_vec());
        Ok(id)
    }

    fn get_blob(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        let found = self.lock().blobs.get(id).cloned();
        if let Some(bytes) = &found {
            id.verify(bytes)?;
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_record_detects_every_single_bit_flip() {
        let rec = Record::seal(b"hello ctxlog".to_vec());
        let s = StreamId::random();
        for bit in 0..rec.as_bytes().len() * 8 {
            let mut bytes = rec.as_bytes().to_vec();
            bytes[bit / 8] ^= 1 << (bit % 8);
            let err = Record::from_stored(s, 7, bytes).unwrap_err();
            assert!(matches!(err, StoreError::Corrupt { version: 7, .. }), "{err}");
        }
        assert_eq!(Record::from_stored(s, 1, rec.as_bytes().to_vec()).unwrap().body(), b"hello ctxlog");
    }

    #[test]
    fn blob_ids_are_strict() {
        let id = BlobId::of(b"x");
        assert_eq!(BlobId::parse(id.as_str()), Some(id.clone()));
        assert_eq!(BlobId::parse("sha256:../../etc/passwd"), None);
        assert_eq!(BlobId::parse(&id.as_str().to_uppercase()), None);
    }
}
