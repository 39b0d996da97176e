//! Append-only file backend for the ctxlog [`Store`] contract.
//!
//! Directory layout (byte formats in `docs/log-format.md`, section "fs store"):
//!
//! ```text
//! <dir>/FORMAT                      "ctxlog-fs 1\n": the on-disk format version, checked on open
//! <dir>/LOCK                        the writer's lock file (holds its pid, informative)
//! <dir>/streams/<uuid>.log          one append-only file per stream: a sequence of frames
//! <dir>/streams/<uuid>.log.torn-<o> bytes a writer's open cut from the end of a log at offset o
//! <dir>/blobs/<h0h1>/<h2..h63>      content-addressed blobs (sha256 hex), written atomically
//! <dir>/snapshots/<uuid>.snap       the latest snapshot of a stream, written atomically
//! <dir>/tmp/                        temp files for atomic writes; emptied by a writer's open
//! ```
//!
//! One `append` call is one frame, written with one `write` and made durable with
//! `sync_data` before `Ok` is returned; a new stream file is followed by an fsync of
//! `streams/`. Every open scans every stream file. A torn write (an incomplete final frame, or
//! an all-zero tail) is moved by a writer's open into a quarantine file next to the log, never
//! deleted, and reported by [`FsStore::recovered`] and by every later
//! [`Store::check_integrity`] until a person removes that file; a read-only open leaves it in
//! place. Any other bad frame, the last one included, is damage: never repaired, reported in
//! [`FsStore::damaged`], and the stream answers `Corrupt` from the damaged version on.
//!
//! [`FsStore::open_read_only`] creates nothing, repairs nothing and takes no lock, so it works
//! on a read-only directory and next to a running writer.
//!
//! Costs: `open` reads and checksums every stream file once (about 45 ms per 300 MB warm, see
//! `BENCHMARKS.md`), so it grows with the total log size; the index it builds keeps 24 bytes
//! per frame in memory. `append` is O(1) (one open, write and fdatasync; no file descriptor
//! is kept per stream); `read` seeks straight to the frame holding `from`.

// No unchecked indexing in code that parses what it reads from disk (kept here even though
// the workspace lint table no longer lists it).
#![warn(clippy::indexing_slicing)]

mod anchor;
mod cut;
mod frame;
mod lock;
mod read;
mod scan;
mod sync;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ctxlog::store::{
    check_expected, BlobId, ExpectedVersion, IntegrityReport, Record, Snapshot, Store, StoreError, StoredRecord,
    StreamId, Version,
};

pub use frame::MAX_PAYLOAD;
pub use sync::{SyncEvent, SyncKind, SyncObserver};

use crate::anchor::{Anchor, Found};
use crate::cut::Verdict;
use crate::lock::WriterLock;
use crate::scan::{FrameMeta, StreamLog, Torn};
use crate::sync::Syncer;

const BACKEND: &str = "fs";

/// The on-disk format version written to `FORMAT`.
pub const FORMAT_VERSION: u64 = 1;
const FORMAT_PREFIX: &str = "ctxlog-fs ";
const SNAP_MAGIC: &[u8; 8] = b"CTXSNAP1";
const SNAP_HEADER_LEN: usize = 20;

/// A torn tail a writer's open cut off a stream file and kept in a quarantine file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruncatedTail {
    /// The stream.
    pub stream: StreamId,
    /// The stream file.
    pub path: PathBuf,
    /// Where the file now ends (the end of the last whole frame).
    pub offset: u64,
    /// How many bytes were cut.
    pub bytes_dropped: u64,
    /// The file that holds the cut bytes (`<log>.torn-<offset>`).
    pub quarantine: PathBuf,
}

/// A torn tail a read-only open saw and left in place (a writer's open will quarantine it; a
/// running writer may also be in the middle of an append).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The stream.
    pub stream: StreamId,
    /// The stream file.
    pub path: PathBuf,
    /// Where the last whole frame ends.
    pub offset: u64,
    /// Bytes after it.
    pub bytes: u64,
}

/// A stream whose file has a bad frame that is not a torn write: left untouched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedStream {
    /// The stream.
    pub stream: StreamId,
    /// The stream file.
    pub path: PathBuf,
    /// Byte offset of the bad frame.
    pub offset: u64,
    /// The first version that cannot be read.
    pub version: Version,
    /// What is wrong.
    pub detail: String,
    /// Whether this is a loss a writer's open can be told to accept ([`FsOptions::accept_loss`]):
    /// the log is shorter than what was acknowledged (or its anchor cannot say how far that
    /// was). A writer's open refuses such a store; other damage only refuses appends.
    pub acceptable: bool,
}

/// A loss a writer's open accepted ([`FsOptions::accept_loss`]): the log was cut short, and it
/// now goes on from where it ends. Recorded in a file that every later
/// [`Store::check_integrity`] reports until a person removes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedLoss {
    /// The stream.
    pub stream: StreamId,
    /// The stream file.
    pub path: PathBuf,
    /// The first lost version (the log's head + 1 at the open).
    pub from: Version,
    /// The last acknowledged version, when known (`None`: the anchor was damaged).
    pub to: Option<Version>,
    /// The file recording the loss (`<log>.lost-<from>`).
    pub record: PathBuf,
}

/// How [`FsStore::open_with`] opens a store.
#[derive(Clone, Default)]
pub struct FsOptions {
    /// Open read-only: create nothing, repair nothing, take no lock; writes are refused.
    pub read_only: bool,
    /// Called after every fsync the store makes (tests use it to check that each acknowledged
    /// write is made durable; a `kill -9` cannot tell).
    pub on_sync: Option<SyncObserver>,
    /// A writer's open of a store where a log is shorter than what was acknowledged (see
    /// [`DamagedStream::acceptable`]) refuses with [`StoreError::Corrupt`]; with this set it
    /// accepts the loss instead: the bytes after the last whole frame go to a quarantine file,
    /// a snapshot beyond the log to `<snap>.lost-<version>`, the loss is recorded in
    /// `<log>.lost-<from>` and the stream goes on from its last whole frame.
    pub accept_loss: bool,
}

impl std::fmt::Debug for FsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsOptions")
            .field("read_only", &self.read_only)
            .field("on_sync", &self.on_sync.as_ref().map(|_| "observer"))
            .field("accept_loss", &self.accept_loss)
            .finish()
    }
}

/// A [`Store`] in a directory of append-only files. Only one writer (in any process) can have a
/// directory open at a time; a second writer gets [`StoreError::Locked`]. Readers
/// ([`FsStore::open_read_only`]) need no lock.
pub struct FsStore {
    root: PathBuf,
    /// `None` when open read-only. Held for the store's lifetime; dropping it releases the lock.
    writer: Option<WriterLock>,
    streams: Mutex<HashMap<StreamId, Arc<Mutex<StreamLog>>>>,
    recovered: Vec<TruncatedTail>,
    damaged: Vec<DamagedStream>,
    torn: Vec<TornTail>,
    accepted: Vec<AcceptedLoss>,
    /// Streams a read-only open found without an anchor file (written before anchors).
    unanchored: Vec<StreamId>,
    tmp_counter: AtomicU64,
    sync: Syncer,
}

impl std::fmt::Debug for FsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsStore")
            .field("root", &self.root)
            .field("read_only", &self.writer.is_none())
            .finish_non_exhaustive()
    }
}

fn io_err(path: &Path, what: &str, e: io::Error) -> StoreError {
    StoreError::backend(BACKEND, format!("{}: {what}", path.display()), e)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every mutation of the guarded state is a single assignment after the IO succeeded, so a
    // panic elsewhere cannot leave it half-updated.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Creates `dir`; returns whether it was created (so its parent needs an fsync).
fn create_dir(dir: &Path) -> Result<bool, StoreError> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err(dir, "create directory", e)),
    }
}

impl FsStore {
    /// Opens (creating if needed) the store in directory `dir` for writing: takes the lock,
    /// checks the format, removes leftover temp files, scans every stream file and moves torn
    /// tails to quarantine files (see the crate docs).
    pub fn open(dir: impl AsRef<Path>) -> Result<FsStore, StoreError> {
        Self::open_with(dir, FsOptions::default())
    }

    /// Opens the existing store in `dir` read-only: no file is created, changed or locked, so
    /// this works on read-only media and while a writer has the store open (what was written
    /// before the open is seen). A directory without a store is [`StoreError::Missing`].
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<FsStore, StoreError> {
        Self::open_with(dir, FsOptions { read_only: true, ..FsOptions::default() })
    }

    /// Opens the store in `dir` with `options`.
    pub fn open_with(dir: impl AsRef<Path>, options: FsOptions) -> Result<FsStore, StoreError> {
        let root = dir.as_ref().to_path_buf();
        let sync = Syncer::new(options.on_sync);
        let mut store = FsStore {
            root,
            writer: None,
            streams: Mutex::new(HashMap::new()),
            recovered: Vec::new(),
            damaged: Vec::new(),
            torn: Vec::new(),
            accepted: Vec::new(),
            unanchored: Vec::new(),
            tmp_counter: AtomicU64::new(0),
            sync,
        };
        if options.read_only {
            store.check_format_read_only()?;
        } else {
            store.prepare_writer()?;
        }
        store.scan_streams(options.accept_loss)?;
        Ok(store)
    }

    /// The store directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.writer.is_none()
    }

    /// Torn tails this (writer's) open moved to quarantine files.
    pub fn recovered(&self) -> &[TruncatedTail] {
        &self.recovered
    }

    /// Torn tails this read-only open saw and left in place.
    pub fn torn_tails(&self) -> &[TornTail] {
        &self.torn
    }

    /// Streams found damaged by this open (a bad frame that is not a torn write, a log shorter
    /// than what was acknowledged; not repaired).
    pub fn damaged(&self) -> &[DamagedStream] {
        &self.damaged
    }

    /// Losses this (writer's) open accepted ([`FsOptions::accept_loss`]).
    pub fn accepted_losses(&self) -> &[AcceptedLoss] {
        &self.accepted
    }

    /// Creates the layout if needed, takes the lock, checks the format, clears `tmp/`.
    fn prepare_writer(&mut self) -> Result<(), StoreError> {
        let root = self.root.clone();
        if !root.is_dir() {
            fs::create_dir_all(&root).map_err(|e| io_err(&root, "create store directory", e))?;
            if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
                self.sync.dir(parent).map_err(|e| io_err(parent, "fsync directory", e))?;
            }
        }
        self.writer = Some(lock::acquire(&root)?);
        self.check_format_writer()?;
        let mut created = false;
        for sub in ["streams", "blobs", "snapshots", "tmp"] {
            created |= create_dir(&root.join(sub))?;
        }
        if created {
            self.sync_dir(&root)?;
        }
        clear_tmp(&root.join("tmp"))
    }

    fn sync_dir(&self, dir: &Path) -> Result<(), StoreError> {
        self.sync.dir(dir).map_err(|e| io_err(dir, "fsync directory", e))
    }

    /// Reads `FORMAT`: `Ok(None)` if it does not exist.
    fn read_format(&self) -> Result<Option<()>, StoreError> {
        let path = self.root.join("FORMAT");
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path, "read", e)),
        };
        let expected = format!("{FORMAT_PREFIX}{FORMAT_VERSION}\n");
        if bytes == expected.as_bytes() {
            return Ok(Some(()));
        }
        // Another version number is a store written by another build; anything else is damage.
        let other = std::str::from_utf8(&bytes)
            .ok()
            .and_then(|t| t.strip_suffix('\n'))
            .and_then(|t| t.strip_prefix(FORMAT_PREFIX))
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) && !v.starts_with('0'))
            .and_then(|v| v.parse::<u64>().ok());
        match other {
            Some(found) => Err(StoreError::Schema {
                backend: BACKEND,
                location: format!("{} (FORMAT says {found}; if no other build wrote it, the file is damaged)", self.root.display()),
                found,
                supported: FORMAT_VERSION,
            }),
            None => Err(StoreError::Damaged {
                backend: BACKEND,
                location: path.display().to_string(),
                detail: format!(
                    "FORMAT holds {:?}, not \"{FORMAT_PREFIX}<version>\": the file is damaged (it should read {expected:?})",
                    String::from_utf8_lossy(&bytes)
                ),
            }),
        }
    }

    fn check_format_read_only(&self) -> Result<(), StoreError> {
        if !self.root.is_dir() || self.read_format()?.is_none() {
            return Err(StoreError::Missing { backend: BACKEND, location: self.root.display().to_string() });
        }
        Ok(())
    }

    fn check_format_writer(&self) -> Result<(), StoreError> {
        let root = &self.root;
        if self.read_format()?.is_some() {
            return Ok(());
        }
        // Refuse to scatter our files into a directory that holds something else.
        let foreign = fs::read_dir(root)
            .map_err(|e| io_err(root, "list directory", e))?
            .filter_map(Result::ok)
            .any(|entry| entry.file_name() != "LOCK");
        if foreign {
            return Err(StoreError::backend(
                BACKEND,
                format!("{}: open", root.display()),
                "directory is not empty and has no FORMAT file: not a ctxlog fs store",
            ));
        }
        let tmp = root.join("FORMAT.tmp");
        let path = root.join("FORMAT");
        self.write_durably(&tmp, &[format!("{FORMAT_PREFIX}{FORMAT_VERSION}\n").as_bytes()])?;
        fs::rename(&tmp, &path).map_err(|e| io_err(&path, "rename into place", e))?;
        self.sync_dir(root)
    }

    fn stream_path(&self, stream: StreamId) -> PathBuf {
        self.root.join("streams").join(format!("{stream}.log"))
    }

    fn anchor_path(&self, stream: StreamId) -> PathBuf {
        self.root.join("streams").join(format!("{stream}.anchor"))
    }

    fn snapshot_path(&self, stream: StreamId) -> PathBuf {
        self.root.join("snapshots").join(format!("{stream}.snap"))
    }

    fn blob_path(&self, id: &BlobId) -> (PathBuf, PathBuf) {
        let hex = id.hex();
        let (a, b) = hex.split_at(2.min(hex.len()));
        let dir = self.root.join("blobs").join(a);
        let file = dir.join(b);
        (dir, file)
    }

    /// The streams that have a `<uuid>.log` or a `<uuid>.anchor` in `streams/` (anything else
    /// there is neither), and whether the log exists.
    fn stream_files(&self) -> Result<Vec<(StreamId, bool)>, StoreError> {
        let dir = self.root.join("streams");
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            // A read-only open of a store whose writer never got that far.
            Err(e) if e.kind() == io::ErrorKind::NotFound && self.writer.is_none() => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&dir, "list", e)),
        };
        let mut out = std::collections::BTreeMap::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_err(&dir, "list", e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let (id, is_log) = match (name.strip_suffix(".log"), name.strip_suffix(".anchor")) {
                (Some(id), _) => (id, true),
                (None, Some(id)) => (id, false),
                (None, None) => continue,
            };
            let Ok(stream) = id.parse::<StreamId>() else { continue };
            *out.entry(stream).or_insert(false) |= is_log;
        }
        Ok(out.into_iter().collect())
    }

    fn scan_streams(&mut self, accept_loss: bool) -> Result<(), StoreError> {
        // Every stream is judged before anything is repaired, so a writer's open that refuses
        // a cut log changes no file at all.
        let mut scanned = Vec::new();
        for (stream, has_log) in self.stream_files()? {
            let path = self.stream_path(stream);
            let (mut log, torn) = match has_log {
                true => scan::scan_stream(stream, &path)?,
                false => (StreamLog::new(path.clone(), false), None),
            };
            let anchor_path = self.anchor_path(stream);
            let found = anchor::read(&anchor_path, stream).map_err(|e| io_err(&anchor_path, "read anchor", e))?;
            if let Found::Current { slot, .. } = found {
                log.anchor_slot = Some(slot);
            }
            let snap_path = self.snapshot_path(stream);
            let snap = snapshot_version(&snap_path)?;
            let verdict = cut::judge(stream, &log, &found, &anchor_path, snap.map(|v| (v, snap_path.as_path())))?;
            let short = |detail: &str| DamagedStream {
                stream,
                path: path.clone(),
                offset: log.len,
                version: log.head + 1,
                detail: detail.to_owned(),
                acceptable: true,
            };
            if let (Verdict::Short { detail, .. }, Some(_), false, None) =
                (&verdict, &self.writer, accept_loss, &log.damaged)
            {
                // Never cut what was acknowledged: the open fails, naming the loss.
                return Err(damaged_error(&short(detail)));
            }
            scanned.push(Scanned { stream, has_log, path, log, torn, found, snap, verdict });
        }
        let mut map = HashMap::new();
        for Scanned { stream, has_log, path, mut log, torn, found, snap, verdict } in scanned {
            match verdict {
                Verdict::Short { acknowledged, detail } if log.damaged.is_none() => {
                    let d = DamagedStream {
                        stream,
                        path: path.clone(),
                        offset: log.len,
                        version: log.head + 1,
                        detail,
                        acceptable: true,
                    };
                    // A writer here was told to accept the loss (it refused above otherwise).
                    match self.writer.is_some() {
                        false => log.damaged = Some(d),
                        true => self.accept_loss(&mut log, torn.as_ref(), &d, acknowledged, snap)?,
                    }
                }
                Verdict::Short { detail, .. } => {
                    if let Some(d) = &mut log.damaged {
                        d.detail.push_str(&format!("; besides, {detail}"));
                    }
                }
                Verdict::Rewritten { version, offset, detail } => {
                    if log.damaged.is_none() {
                        let path = path.clone();
                        log.damaged = Some(DamagedStream { stream, path, offset, version, detail, acceptable: false });
                    }
                }
                Verdict::Whole => {
                    if let Some(torn) = torn {
                        self.torn_tail(stream, &path, &torn)?;
                    }
                    if has_log && found == Found::Missing && log.damaged.is_none() {
                        // A stream written before anchors: a writer anchors it where it ends now,
                        // on the hash of its last record; a last record that does not read back
                        // (a bad record in a checksum-valid frame) is damage its reads report,
                        // never an open error.
                        match self.writer.is_some() {
                            true => match self.write_anchor(stream, &mut log) {
                                // Left unanchored, as a reader leaves it: its reads say where.
                                Err(StoreError::Corrupt { .. }) => self.unanchored.push(stream),
                                other => other?,
                            },
                            false => self.unanchored.push(stream),
                        }
                    }
                }
            }
            if let Some(d) = &log.damaged {
                tracing::error!(
                    stream = %d.stream, path = %d.path.display(), offset = d.offset, version = d.version,
                    detail = %d.detail, "damaged stream: readable up to the damage, appends refused"
                );
                self.damaged.push(d.clone());
            }
            map.insert(stream, Arc::new(Mutex::new(log)));
        }
        self.streams = Mutex::new(map);
        Ok(())
    }

    /// A torn tail beyond every acknowledged version: a writer moves it to a quarantine file, a
    /// reader notes it and leaves it in place.
    fn torn_tail(&mut self, stream: StreamId, path: &Path, torn: &Torn) -> Result<(), StoreError> {
        if self.writer.is_some() {
            let repaired = self.quarantine(stream, path, torn)?;
            tracing::warn!(
                stream = %stream, path = %path.display(), offset = repaired.offset,
                bytes_dropped = repaired.bytes_dropped, quarantine = %repaired.quarantine.display(),
                "torn tail cut into a quarantine file (an append that was never acknowledged)"
            );
            self.recovered.push(repaired);
        } else {
            tracing::info!(
                stream = %stream, path = %path.display(), offset = torn.offset, bytes = torn.bytes,
                "torn tail left in place (read-only open)"
            );
            self.torn.push(TornTail { stream, path: path.to_path_buf(), offset: torn.offset, bytes: torn.bytes });
        }
        Ok(())
    }

    /// Writes a fresh anchor file for `log` as it stands (both slots alike), atomically.
    fn write_anchor(&self, stream: StreamId, log: &mut StreamLog) -> Result<(), StoreError> {
        let a = cut::anchor_of(stream, log)?;
        self.write_atomically(&self.anchor_path(stream), &[&anchor::encode_file(stream, &a)])?;
        log.anchor_slot = Some(0);
        Ok(())
    }

    /// Accepts the loss `d` (a writer's open with [`FsOptions::accept_loss`]): the torn bytes go
    /// to a quarantine file, a snapshot beyond the log is moved aside, the loss is recorded in
    /// `<log>.lost-<from>` (durable before anything else changes), then the anchor is rewritten
    /// at the log's head.
    fn accept_loss(
        &mut self,
        log: &mut StreamLog,
        torn: Option<&Torn>,
        d: &DamagedStream,
        acknowledged: Option<Version>,
        snapshot: Option<Version>,
    ) -> Result<(), StoreError> {
        let stream = d.stream;
        let snap = self.snapshot_path(stream);
        let moved = snapshot.filter(|v| *v > log.head).map(|v| {
            let mut name = snap.as_os_str().to_owned();
            name.push(format!(".lost-{v}"));
            PathBuf::from(name)
        });
        let mut text = format!("stream {stream}: a writer's open accepted a loss: {}\n", d.detail);
        if let Some(m) = &moved {
            text.push_str(&format!("its snapshot, beyond the log, was moved to {}\n", m.display()));
        }
        let (record, mut out) = create_numbered(&log.path, &format!(".lost-{}", d.version))?;
        out.write_all(text.as_bytes())
            .and_then(|()| self.sync.all(&out, &record))
            .map_err(|e| io_err(&record, "write loss record", e))?;
        self.sync_dir(&self.root.join("streams"))?;
        if let Some(t) = torn {
            let repaired = self.quarantine(stream, &log.path, t)?;
            self.recovered.push(repaired);
        }
        if let Some(m) = &moved {
            fs::rename(&snap, m).map_err(|e| io_err(&snap, "move the snapshot beyond the log aside", e))?;
            self.sync_dir(&self.root.join("snapshots"))?;
        }
        self.write_anchor(stream, log)?;
        tracing::warn!(stream = %stream, record = %record.display(), "accepted the loss of acknowledged versions");
        let (path, from, to) = (log.path.clone(), d.version, acknowledged);
        self.accepted.push(AcceptedLoss { stream, path, from, to, record });
        Ok(())
    }

    /// Moves the torn tail of `log` into a quarantine file next to it (made durable first),
    /// then cuts the log back to its last whole frame.
    fn quarantine(&self, stream: StreamId, log: &Path, torn: &Torn) -> Result<TruncatedTail, StoreError> {
        let mut file =
            OpenOptions::new().read(true).write(true).open(log).map_err(|e| io_err(log, "open for repair", e))?;
        let mut tail = Vec::new();
        file.seek(SeekFrom::Start(torn.offset))
            .and_then(|_| file.read_to_end(&mut tail))
            .map_err(|e| io_err(log, &format!("read torn tail at offset {}", torn.offset), e))?;
        let (quarantine, mut out) = create_quarantine_file(log, torn.offset)?;
        out.write_all(&tail)
            .and_then(|()| self.sync.all(&out, &quarantine))
            .map_err(|e| io_err(&quarantine, "write quarantine file", e))?;
        if let Some(dir) = log.parent() {
            self.sync_dir(dir)?;
        }
        file.set_len(torn.offset)
            .and_then(|()| self.sync.all(&file, log))
            .map_err(|e| io_err(log, &format!("cut torn tail at offset {} ({})", torn.offset, torn.why), e))?;
        Ok(TruncatedTail {
            stream,
            path: log.to_path_buf(),
            offset: torn.offset,
            bytes_dropped: torn.bytes,
            quarantine,
        })
    }

    fn stream(&self, stream: StreamId) -> Arc<Mutex<StreamLog>> {
        let mut map = lock(&self.streams);
        map.entry(stream)
            .or_insert_with(|| Arc::new(Mutex::new(StreamLog::new(self.stream_path(stream), false))))
            .clone()
    }

    fn existing_stream(&self, stream: StreamId) -> Option<Arc<Mutex<StreamLog>>> {
        lock(&self.streams).get(&stream).cloned()
    }

    fn tmp_path(&self) -> PathBuf {
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        self.root.join("tmp").join(format!("{}-{n}", std::process::id()))
    }

    fn refuse_if_read_only(&self, operation: &'static str) -> Result<(), StoreError> {
        match self.writer {
            Some(_) => Ok(()),
            None => {
                Err(StoreError::ReadOnly { backend: BACKEND, location: self.root.display().to_string(), operation })
            }
        }
    }

    fn write_durably(&self, path: &Path, parts: &[&[u8]]) -> Result<(), StoreError> {
        let mut f = File::create(path).map_err(|e| io_err(path, "create", e))?;
        for p in parts {
            f.write_all(p).map_err(|e| io_err(path, "write", e))?;
        }
        self.sync.all(&f, path).map_err(|e| io_err(path, "fsync", e))
    }

    /// Writes `parts` to a temp file, fsyncs it, renames it to `dest` and fsyncs `dest`'s
    /// directory: readers see the old file or the whole new one, never a partial one.
    fn write_atomically(&self, dest: &Path, parts: &[&[u8]]) -> Result<(), StoreError> {
        let tmp = self.tmp_path();
        self.write_durably(&tmp, parts)?;
        if let Err(e) = fs::rename(&tmp, dest) {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(dest, "rename into place", e));
        }
        match dest.parent() {
            Some(dir) => self.sync_dir(dir),
            None => Ok(()),
        }
    }

    /// The quarantine files of earlier repairs, as repair reports.
    fn quarantined(&self) -> Result<Vec<String>, StoreError> {
        let dir = self.root.join("streams");
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&dir, "list", e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_err(&dir, "list", e))?;
            let name = entry.file_name();
            if let Some((stream, from)) = name.to_str().and_then(scan::parse_loss_name) {
                out.push(format!(
                    "stream {stream}: a writer's open accepted the loss of versions {from}.. of {} (it was cut short) \
                     and recorded it in {}; delete that file once you have looked at it, or pass --accept-repairs",
                    self.stream_path(stream).display(),
                    entry.path().display()
                ));
                continue;
            }
            let Some((stream, offset)) = name.to_str().and_then(scan::parse_quarantine_name) else {
                continue;
            };
            let bytes = entry.metadata().map(|m| m.len()).unwrap_or(0);
            out.push(format!(
                "stream {stream}: a writer's open cut {bytes} bytes of a torn write (never acknowledged) from the end of \
                 {} at offset {offset} and kept them in {}; delete that file once you have looked at it, or pass \
                 --accept-repairs",
                self.stream_path(stream).display(),
                entry.path().display()
            ));
        }
        out.sort();
        Ok(out)
    }
}

/// One stream as the open found it, before any repair.
struct Scanned {
    stream: StreamId,
    has_log: bool,
    path: PathBuf,
    log: StreamLog,
    torn: Option<Torn>,
    found: Found,
    snap: Option<Version>,
    verdict: Verdict,
}

/// Creates the first free `<log>.torn-<offset>[.<n>]` (an earlier repair at the same offset
/// keeps its file).
fn create_quarantine_file(log: &Path, offset: u64) -> Result<(PathBuf, File), StoreError> {
    let mut n = 0;
    loop {
        let path = scan::quarantine_name(log, offset, n);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < u32::MAX => n += 1,
            Err(e) => return Err(io_err(&path, "create quarantine file", e)),
        }
    }
}

/// Creates the first free `<base><suffix>[.<n>]` (create-new: an earlier file keeps its name).
fn create_numbered(base: &Path, suffix: &str) -> Result<(PathBuf, File), StoreError> {
    let mut n = 0u32;
    loop {
        let mut name = base.as_os_str().to_owned();
        name.push(suffix);
        if n > 0 {
            name.push(format!(".{n}"));
        }
        let path = PathBuf::from(name);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < u32::MAX => n += 1,
            Err(e) => return Err(io_err(&path, "create", e)),
        }
    }
}

fn clear_tmp(tmp: &Path) -> Result<(), StoreError> {
    for entry in fs::read_dir(tmp).map_err(|e| io_err(tmp, "list", e))? {
        let entry = entry.map_err(|e| io_err(tmp, "list", e))?;
        let p = entry.path();
        fs::remove_file(&p).map_err(|e| io_err(&p, "remove leftover temp file", e))?;
    }
    Ok(())
}

fn damaged_error(d: &DamagedStream) -> StoreError {
    let detail = match d.acceptable {
        true => format!(
            "{}; no open repairs this: a writer's open refuses the store until the loss is accepted \
             (`--accept-loss`, `FsOptions::accept_loss`)",
            d.detail
        ),
        false => format!("{}: bad frame at offset {}: {}", d.path.display(), d.offset, d.detail),
    };
    StoreError::Corrupt { stream: d.stream, version: d.version, detail }
}

impl Store for FsStore {
    fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
        self.refuse_if_read_only("append")?;
        let arc = self.stream(stream);
        let mut log = lock(&arc);
        if let Some(d) = &log.damaged {
            return Err(damaged_error(d));
        }
        if let Some(why) = &log.poisoned {
            return Err(StoreError::backend(
                BACKEND,
                format!("{}: append to stream {stream}", log.path.display()),
                format!("refused after an earlier IO failure ({why}); reopen the store"),
            ));
        }
        check_expected(stream, expected, log.head)?;
        if records.is_empty() {
            return Ok(log.head);
        }
        let first = log.head + 1;
        let bytes = frame::encode(stream, first, records).map_err(|e| {
            StoreError::backend(BACKEND, format!("{}: append to stream {stream}", log.path.display()), e)
        })?;
        let path = log.path.clone();
        let offset = log.len;
        let created = !log.exists;
        let anchor_path = self.anchor_path(stream);
        let current_slot = match log.anchor_slot {
            Some(slot) => slot,
            None => {
                // A new stream: its anchor exists (at version 0) before its log, so a log
                // without an anchor is always one written before anchors.
                self.write_atomically(&anchor_path, &[&anchor::encode_file(stream, &Anchor::EMPTY)])?;
                log.anchor_slot = Some(0);
                0
            }
        };
        let result = (|| -> io::Result<()> {
            let mut f = OpenOptions::new().write(true).create(true).truncate(false).open(&path)?;
            f.seek(SeekFrom::Start(offset))?;
            if let Err(e) = f.write_all(&bytes).and_then(|()| self.sync.data(&f, &path)) {
                // A full disk: take the partial frame back, so the next open finds no torn
                // tail to repair (if this fails too, the tail lies beyond the anchor: torn).
                let _ = f.set_len(offset).and_then(|()| self.sync.data(&f, &path));
                return Err(e);
            }
            Ok(())
        })();
        if let Err(e) = result {
            log.poisoned = Some(e.to_string());
            return Err(io_err(&path, &format!("stream {stream}: write versions {first}.. at offset {offset}"), e));
        }
        if created {
            // The new file's directory entry must be durable too, or a crash could lose the
            // whole stream despite the fsynced data.
            if let Err(e) = self.sync_dir(&self.root.join("streams")) {
                log.poisoned = Some(e.to_string());
                return Err(e);
            }
            log.exists = true;
        }
        let total = bytes.len() as u64;
        // Acknowledged only once the anchor says so: the slot not holding the current anchor
        // is rewritten and fdatasynced (a crash in the middle leaves the current one whole).
        let head = log.head + records.len() as u64;
        let hash = records.last().map_or([0; 16], |r| anchor::record_hash(r.as_bytes()));
        let slot = 1 - current_slot.min(1);
        let anchored = anchor::write_slot(&anchor_path, stream, slot, &Anchor { head, end: offset + total, hash })
            .and_then(|f| self.sync.data(&f, &anchor_path));
        if let Err(e) = anchored {
            log.poisoned = Some(e.to_string());
            return Err(io_err(&anchor_path, &format!("stream {stream}: anchor version {head}"), e));
        }
        log.anchor_slot = Some(slot);
        log.frames.push(FrameMeta { first, offset, len: total });
        log.len = offset + total;
        log.head = head;
        Ok(log.head)
    }

    fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError> {
        let Some(arc) = self.existing_stream(stream) else { return Ok(Vec::new()) };
        let log = lock(&arc);
        read::read_records(stream, &log, from, max)
    }

    fn head(&self, stream: StreamId) -> Result<Option<Version>, StoreError> {
        let Some(arc) = self.existing_stream(stream) else { return Ok(None) };
        let log = lock(&arc);
        if let Some(d) = &log.damaged {
            return Err(damaged_error(d));
        }
        Ok((log.head > 0).then_some(log.head))
    }

    fn streams(&self) -> Result<Vec<StreamId>, StoreError> {
        let map = lock(&self.streams);
        let mut out: Vec<StreamId> = map
            .iter()
            .filter(|(_, log)| {
                let log = lock(log);
                log.head > 0 || log.damaged.is_some()
            })
            .map(|(id, _)| *id)
            .collect();
        out.sort();
        Ok(out)
    }

    fn put_snapshot(&self, stream: StreamId, snap: &Snapshot) -> Result<(), StoreError> {
        self.refuse_if_read_only("put_snapshot")?;
        // Holding the stream lock orders the snapshot against appends and other snapshots.
        let arc = self.stream(stream);
        let log = lock(&arc);
        if let Some(d) = &log.damaged {
            return Err(damaged_error(d));
        }
        if snap.version > log.head {
            return Err(StoreError::SnapshotAhead { stream, snapshot: snap.version, head: log.head });
        }
        let path = self.snapshot_path(stream);
        if let Some(existing) = read_snapshot(&path)? {
            if existing.version > snap.version {
                return Ok(());
            }
        }
        let mut header = [0u8; SNAP_HEADER_LEN];
        header[..8].copy_from_slice(SNAP_MAGIC);
        header[8..16].copy_from_slice(&snap.version.to_le_bytes());
        let crc = crc32c::crc32c(&header[..16]);
        header[16..].copy_from_slice(&crc.to_le_bytes());
        self.write_atomically(&path, &[&header, &snap.bytes])
    }

    fn get_snapshot(&self, stream: StreamId) -> Result<Option<Snapshot>, StoreError> {
        read_snapshot(&self.snapshot_path(stream))
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<BlobId, StoreError> {
        self.refuse_if_read_only("put_blob")?;
        let id = BlobId::of(bytes);
        let (dir, path) = self.blob_path(&id);
        // Content-addressed: an existing file already holds these bytes (it was renamed into
        // place whole); get_blob re-verifies anyway.
        if path.exists() {
            return Ok(id);
        }
        if create_dir(&dir)? {
            self.sync_dir(&self.root.join("blobs"))?;
        }
        self.write_atomically(&path, &[bytes])?;
        Ok(id)
    }

    fn get_blob(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        let (_, path) = self.blob_path(id);
        match fs::read(&path) {
            Ok(bytes) => {
                id.verify(&bytes).map_err(|e| match e {
                    StoreError::CorruptBlob { id, detail } => {
                        StoreError::CorruptBlob { id, detail: format!("{}: {detail}", path.display()) }
                    }
                    other => other,
                })?;
                Ok(Some(bytes))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&path, &format!("read blob {id}"), e)),
        }
    }

    fn check_integrity(&self) -> Result<IntegrityReport, StoreError> {
        let notes = self
            .torn
            .iter()
            .map(|t| {
                format!(
                    "stream {}: {} bytes after the last whole frame of {} (offset {}) are a torn write: a running \
                     writer's append, or a crash; a writer's open moves them to a quarantine file",
                    t.stream,
                    t.bytes,
                    t.path.display(),
                    t.offset
                )
            })
            .collect();
        let mut notes: Vec<String> = notes;
        notes.extend(self.unanchored.iter().map(|s| {
            format!(
                "stream {s}: {} has no anchor (written before anchors): a cut of its end cannot be told from a torn \
                 write until a writer's open anchors it",
                self.stream_path(*s).display()
            )
        }));
        Ok(IntegrityReport { problems: Vec::new(), repairs: self.quarantined()?, notes })
    }
}

/// The version in a snapshot file's header, reading the header alone (`None`: no snapshot, or
/// a header that fails its check, which reads as no snapshot).
fn snapshot_version(path: &Path) -> Result<Option<Version>, StoreError> {
    let mut header = Vec::with_capacity(SNAP_HEADER_LEN);
    match File::open(path) {
        Ok(f) => {
            f.take(SNAP_HEADER_LEN as u64).read_to_end(&mut header).map_err(|e| io_err(path, "read snapshot", e))?
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path, "read snapshot", e)),
    };
    Ok(snapshot_header(&header))
}

/// The version of a snapshot header that checks out.
fn snapshot_header(bytes: &[u8]) -> Option<Version> {
    let ok = bytes.get(..8) == Some(SNAP_MAGIC.as_slice())
        && bytes.get(16..20).zip(bytes.get(..16)).is_some_and(|(crc, h)| crc == crc32c::crc32c(h).to_le_bytes());
    bytes.get(8..16).and_then(|v| v.try_into().ok()).map(u64::from_le_bytes).filter(|_| ok)
}

fn read_snapshot(path: &Path) -> Result<Option<Snapshot>, StoreError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path, "read snapshot", e)),
    };
    match snapshot_header(&bytes) {
        Some(version) => {
            Ok(Some(Snapshot { version, bytes: bytes.get(SNAP_HEADER_LEN..).unwrap_or_default().to_vec() }))
        }
        // Snapshots are a cache and the log is the truth: an unreadable header means "no
        // snapshot", and the next put_snapshot replaces the file.
        _ => Ok(None),
    }
}
