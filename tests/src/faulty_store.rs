//! [`FaultyStore`]: a [`Store`] wrapper that injects one fault at the Nth operation of a chosen
//! kind, for the fault-injection suite (`tests/faults.rs`).
//!
//! Faults: the operation fails without reaching the store ([`Fault::Fail`]); it reaches the
//! store but the reply is lost ([`Fault::LostAck`]); it is slowed down ([`Fault::Delay`]); or
//! the process "dies" before it ([`Fault::Crash`]), right after it ([`Fault::CrashAfter`]) or
//! in the middle of its write ([`Fault::Torn`]). After a crash the wrapper forwards nothing
//! more; the test drops it, reopens the real backend and checks what is there. A torn write
//! only records what was being written ([`Interrupted`]): the test then leaves a prefix of its
//! bytes on disk with a backend-specific helper ([`tear_fs`]), as a short write would.
//!
//! Every operation is counted and traced ([`FaultyStore::trace`]), so a suite can first run a
//! script without faults and then inject one at every position of its trace; every append
//! that reached the store is journaled with whether the caller got `Ok`
//! ([`FaultyStore::forwarded`]), which is the oracle of "acknowledged exactly once".

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write as _;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use ctxlog::store::{BlobId, ExpectedVersion, Record, Snapshot, Store, StoreError, StoredRecord, StreamId, Version};

/// The kinds of store operation a fault can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// [`Store::append`].
    Append,
    /// [`Store::read`].
    Read,
    /// [`Store::head`].
    Head,
    /// [`Store::streams`].
    Streams,
    /// [`Store::put_blob`].
    PutBlob,
    /// [`Store::get_blob`].
    GetBlob,
    /// [`Store::put_snapshot`].
    PutSnapshot,
    /// [`Store::get_snapshot`].
    GetSnapshot,
}

impl Op {
    /// Every kind.
    pub const ALL: [Op; 8] =
        [Op::Append, Op::Read, Op::Head, Op::Streams, Op::PutBlob, Op::GetBlob, Op::PutSnapshot, Op::GetSnapshot];

    /// Whether the operation writes.
    pub fn writes(self) -> bool {
        matches!(self, Op::Append | Op::PutBlob | Op::PutSnapshot)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Op::Append => "append",
            Op::Read => "read",
            Op::Head => "head",
            Op::Streams => "streams",
            Op::PutBlob => "put_blob",
            Op::GetBlob => "get_blob",
            Op::PutSnapshot => "put_snapshot",
            Op::GetSnapshot => "get_snapshot",
        };
        f.write_str(name)
    }
}

/// What happens at the chosen operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// It fails without reaching the store; later operations work.
    Fail,
    /// It reaches the store, then fails: a write is durable but the caller is told it failed
    /// (a lost reply). Later operations work.
    LostAck,
    /// It is forwarded after this pause.
    Delay(Duration),
    /// The process dies just before it: it and every later operation fail, nothing more
    /// reaches the store.
    Crash,
    /// The process dies right after it reached the store, before it returned.
    CrashAfter,
    /// The process dies in the middle of this write: nothing reaches the store through the
    /// API, the write is recorded as [`Interrupted`] for the test to leave a prefix of it on
    /// disk. On an operation that does not write, the same as [`Fault::Crash`].
    Torn,
}

impl Fault {
    /// Whether the store is dead after this fault.
    pub fn crashes(self) -> bool {
        matches!(self, Fault::Crash | Fault::CrashAfter | Fault::Torn)
    }
}

/// One fault at the `nth` (0-based) operation of kind `op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Injection {
    /// The kind of operation.
    pub op: Op,
    /// Which one of that kind, counting from 0.
    pub nth: usize,
    /// What happens.
    pub fault: Fault,
}

impl fmt::Display for Injection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} at {} #{}", self.fault, self.op, self.nth)
    }
}

/// A write that a [`Fault::Torn`] interrupted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interrupted {
    /// A batch append.
    Append {
        /// The stream.
        stream: StreamId,
        /// The version its first record would have had.
        first: Version,
        /// The batch.
        records: Vec<Record>,
    },
    /// A blob write.
    Blob {
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A snapshot write.
    Snapshot {
        /// The stream.
        stream: StreamId,
        /// The snapshot.
        snapshot: Snapshot,
    },
}

/// An append that reached the wrapped store.
#[derive(Debug, Clone)]
pub struct Forwarded {
    /// The stream.
    pub stream: StreamId,
    /// The batch.
    pub records: Vec<Record>,
    /// What the wrapped store answered (the new head), or its error.
    pub stored: Result<Version, String>,
    /// Whether the caller got `Ok` (false for a lost reply or a crash right after).
    pub acknowledged: bool,
}

#[derive(Default)]
struct Journal {
    counts: BTreeMap<Op, usize>,
    trace: Vec<Op>,
    fired: bool,
    crashed: bool,
    interrupted: Option<Interrupted>,
    forwarded: Vec<Forwarded>,
    records_read: u64,
}

/// A [`Store`] that injects at most one [`Injection`] into the operations it forwards.
pub struct FaultyStore<S> {
    inner: S,
    injection: Option<Injection>,
    journal: Mutex<Journal>,
}

/// Backend name of every injected error.
pub const BACKEND: &str = "faulty";

/// The error an injected fault returns.
pub fn injected(op: Op, nth: usize, what: &str) -> StoreError {
    StoreError::backend(BACKEND, format!("{op} #{nth}"), format!("injected fault: {what}"))
}

/// Whether `e` was injected by a [`FaultyStore`].
pub fn is_injected(e: &StoreError) -> bool {
    matches!(e, StoreError::Backend { backend: BACKEND, .. })
}

enum Action {
    Forward,
    Fault(Fault),
}

impl<S: Store> FaultyStore<S> {
    /// Forwards everything, counting and tracing.
    pub fn new(inner: S) -> Self {
        FaultyStore { inner, injection: None, journal: Mutex::default() }
    }

    /// Injects `injection`.
    pub fn with(inner: S, injection: Injection) -> Self {
        FaultyStore { inner, injection: Some(injection), journal: Mutex::default() }
    }

    fn journal(&self) -> MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every operation asked for so far, in order (including those that failed).
    pub fn trace(&self) -> Vec<Op> {
        self.journal().trace.clone()
    }

    /// Whether the injection has fired.
    pub fn fired(&self) -> bool {
        self.journal().fired
    }

    /// Whether the store "crashed" (nothing is forwarded any more).
    pub fn crashed(&self) -> bool {
        self.journal().crashed
    }

    /// The write a [`Fault::Torn`] interrupted.
    pub fn interrupted(&self) -> Option<Interrupted> {
        self.journal().interrupted.clone()
    }

    /// Every append that reached the wrapped store, in order.
    pub fn forwarded(&self) -> Vec<Forwarded> {
        self.journal().forwarded.clone()
    }

    /// Records returned by `read` so far.
    pub fn records_read(&self) -> u64 {
        self.journal().records_read
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Unwraps the store (to drop it and reopen the backend after a crash).
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// Counts the operation and decides what to do with it.
    fn enter(&self, op: Op) -> Result<(usize, Action), StoreError> {
        let mut j = self.journal();
        let count = j.counts.entry(op).or_insert(0);
        let nth = *count;
        *count += 1;
        j.trace.push(op);
        if j.crashed {
            return Err(injected(op, nth, "the store crashed earlier"));
        }
        match self.injection {
            Some(i) if i.op == op && i.nth == nth => {
                j.fired = true;
                Ok((nth, Action::Fault(i.fault)))
            }
            _ => Ok((nth, Action::Forward)),
        }
    }

    /// Runs `forward` under the fault plan. `torn` describes the write for [`Fault::Torn`].
    fn run<T>(
        &self,
        op: Op,
        forward: impl FnOnce() -> Result<T, StoreError>,
        torn: impl FnOnce() -> Option<Interrupted>,
    ) -> Result<T, StoreError> {
        let (nth, action) = self.enter(op)?;
        let fault = match action {
            Action::Forward => return forward(),
            Action::Fault(f) => f,
        };
        match fault {
            Fault::Fail => Err(injected(op, nth, "failed before reaching the store")),
            Fault::LostAck => {
                let outcome = forward().map(|_| "reached the store").unwrap_or("failed in the store");
                Err(injected(op, nth, &format!("{outcome}, reply lost")))
            }
            Fault::Delay(d) => {
                std::thread::sleep(d);
                forward()
            }
            Fault::Crash => {
                self.journal().crashed = true;
                Err(injected(op, nth, "crashed before reaching the store"))
            }
            Fault::CrashAfter => {
                let outcome = forward().map(|_| "reached the store").unwrap_or("failed in the store");
                self.journal().crashed = true;
                Err(injected(op, nth, &format!("{outcome}, crashed before replying")))
            }
            Fault::Torn => {
                let mut j = self.journal();
                j.crashed = true;
                j.interrupted = torn();
                Err(injected(op, nth, "crashed in the middle of the write"))
            }
        }
    }
}

impl<S: Store> Store for FaultyStore<S> {
    fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
        let mut reached = None;
        let result = self.run(
            Op::Append,
            || {
                let stored = self.inner.append(stream, expected, records);
                reached = Some(stored.as_ref().map(|v| *v).map_err(ToString::to_string));
                stored
            },
            || {
                let head = match expected {
                    ExpectedVersion::Exact(v) => v,
                    ExpectedVersion::Any => self.inner.head(stream).ok().flatten().unwrap_or(0),
                };
                Some(Interrupted::Append { stream, first: head + 1, records: records.to_vec() })
            },
        );
        if let Some(stored) = reached {
            let acknowledged = result.is_ok();
            self.journal().forwarded.push(Forwarded { stream, records: records.to_vec(), stored, acknowledged });
        }
        result
    }

    fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError> {
        let out = self.run(Op::Read, || self.inner.read(stream, from, max), || None)?;
        self.journal().records_read += out.len() as u64;
        Ok(out)
    }

    fn head(&self, stream: StreamId) -> Result<Option<Version>, StoreError> {
        self.run(Op::Head, || self.inner.head(stream), || None)
    }

    fn streams(&self) -> Result<Vec<StreamId>, StoreError> {
        self.run(Op::Streams, || self.inner.streams(), || None)
    }

    fn put_snapshot(&self, stream: StreamId, snap: &Snapshot) -> Result<(), StoreError> {
        self.run(
            Op::PutSnapshot,
            || self.inner.put_snapshot(stream, snap),
            || Some(Interrupted::Snapshot { stream, snapshot: snap.clone() }),
        )
    }

    fn get_snapshot(&self, stream: StreamId) -> Result<Option<Snapshot>, StoreError> {
        self.run(Op::GetSnapshot, || self.inner.get_snapshot(stream), || None)
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<BlobId, StoreError> {
        self.run(Op::PutBlob, || self.inner.put_blob(bytes), || Some(Interrupted::Blob { bytes: bytes.to_vec() }))
    }

    fn get_blob(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        self.run(Op::GetBlob, || self.inner.get_blob(id), || None)
    }
    /// Not an injection point: `verify`'s whole-store check goes straight to the real backend,
    /// so a suite run through the wrapper checks what the store itself would report.
    fn check_integrity(&self) -> Result<ctxlog::IntegrityReport, StoreError> {
        self.inner.check_integrity()
    }
    /// Not an injection point either: a lease is the real backend's.
    fn try_lease(&self, stream: StreamId) -> Result<Option<ctxlog::Lease>, StoreError> {
        self.inner.try_lease(stream)
    }
}

/// How much of an interrupted write reached the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The first `n` bytes (clamped to the write's length minus one).
    Prefix(usize),
    /// The first half.
    Half,
    /// Everything but the last byte.
    AllButLast,
    /// As many zero bytes as the write is long: the file grew but the data never landed
    /// (a crash between the size update and the data write on some filesystems).
    Zeros,
}

impl Cut {
    /// The cuts the suite tries on every interrupted append: inside the length word, the
    /// whole header, half the frame, all but the last checksum byte, and a zero-filled tail.
    pub const ALL: [Cut; 6] = [Cut::Prefix(1), Cut::Prefix(7), Cut::Prefix(8), Cut::Half, Cut::AllButLast, Cut::Zeros];

    /// The bytes of `write` that reached the disk.
    pub fn apply(self, write: &[u8]) -> Vec<u8> {
        let max = write.len().saturating_sub(1);
        match self {
            Cut::Prefix(n) => write.get(..n.min(max)).unwrap_or_default().to_vec(),
            Cut::Half => write.get(..write.len() / 2).unwrap_or_default().to_vec(),
            Cut::AllButLast => write.get(..max).unwrap_or_default().to_vec(),
            Cut::Zeros => vec![0; write.len()],
        }
    }
}

/// One fs frame holding `records` (versions `first..`), encoded independently of
/// `ctxlog-store-fs` from the format in `docs/log-format.md` ("fs store").
pub fn fs_frame(stream: StreamId, first: Version, records: &[Record]) -> Vec<u8> {
    let mut payload = stream.0.as_bytes().to_vec();
    payload.extend_from_slice(&first.to_le_bytes());
    payload.extend_from_slice(&(records.len() as u32).to_le_bytes());
    for r in records {
        payload.extend_from_slice(&(r.as_bytes().len() as u32).to_le_bytes());
        payload.extend_from_slice(r.as_bytes());
    }
    let len = (payload.len() as u32).to_le_bytes();
    let mut frame = len.to_vec();
    frame.extend_from_slice(&crc32c::crc32c(&len).to_le_bytes());
    frame.extend_from_slice(&payload);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&len), &payload) ^ 0xAF;
    frame.extend_from_slice(&crc.to_le_bytes());
    frame
}

/// Leaves what a crash in the middle of `write` would leave in the fs store at `dir` (which
/// must be closed): the cut frame at the end of the stream file, or a cut temp file for a
/// blob or snapshot (they are written to `tmp/` and renamed into place only when complete).
/// Returns the path written and the number of bytes.
pub fn tear_fs(dir: &Path, write: &Interrupted, cut: Cut) -> (std::path::PathBuf, usize) {
    let (path, bytes) = match write {
        Interrupted::Append { stream, first, records } => {
            (dir.join("streams").join(format!("{stream}.log")), cut.apply(&fs_frame(*stream, *first, records)))
        }
        Interrupted::Blob { bytes } => (dir.join("tmp").join("torn-blob"), cut.apply(bytes)),
        Interrupted::Snapshot { stream, snapshot } => {
            let mut file = b"CTXSNAP1".to_vec();
            file.extend_from_slice(&snapshot.version.to_le_bytes());
            file.extend_from_slice(&crc32c::crc32c(&file).to_le_bytes());
            file.extend_from_slice(&snapshot.bytes);
            (dir.join("tmp").join(format!("torn-{stream}.snap")), cut.apply(&file))
        }
    };
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
    f.write_all(&bytes).unwrap();
    f.sync_all().unwrap();
    (path, bytes.len())
}
