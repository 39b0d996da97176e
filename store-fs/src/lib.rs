//! Append-only file backend for the ctxlog [`Store`] contract.
//!
//! Directory layout (byte formats in `docs/log-format.md`, section "fs store"):
//!
//! ```text
//! <dir>/FORMAT                  "ctxlog-fs 1\n": the on-disk format version, checked on open
//! <dir>/LOCK                    OS advisory lock held by the one open FsStore (holds its pid)
//! <dir>/streams/<uuid>.log      one append-only file per stream: a sequence of frames
//! <dir>/blobs/<h0h1>/<h2..h63>  content-addressed blobs (sha256 hex), written atomically
//! <dir>/snapshots/<uuid>.snap   the latest snapshot of a stream, written atomically
//! <dir>/tmp/                    temp files for atomic writes; emptied on open
//! ```
//!
//! One `append` call is one frame, written with one `write` and made durable with
//! `sync_data` before `Ok` is returned; a new stream file is followed by an fsync of
//! `streams/`. On open every stream file is scanned: a torn tail (a short or bad last frame
//! with nothing valid after it) is truncated and reported in [`FsStore::recovered`]; a bad
//! frame followed by valid data is corruption, never repaired, and reported in
//! [`FsStore::damaged`] (that stream then answers `Corrupt` from the damaged version on).
//!
//! Costs: `open` reads and checksums every stream file once (about 45 ms per 300 MB warm, see
//! `BENCHMARKS.md`), so it grows with the total log size; the index it builds keeps 24 bytes
//! per frame in memory. `append` is O(1) (one open, write and fdatasync; no file descriptor
//! is kept per stream); `read` seeks straight to the frame holding `from`.

// No unchecked indexing in code that parses what it reads from disk (kept here even though
// the workspace lint table no longer lists it).
#![warn(clippy::indexing_slicing)]

mod frame;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ctxlog::store::{
    check_expected, BlobId, ExpectedVersion, Record, Snapshot, Store, StoreError, StoredRecord, StreamId, Version,
};

pub use frame::MAX_PAYLOAD;

const BACKEND: &str = "fs";

/// The on-disk format version written to `FORMAT`.
pub const FORMAT_VERSION: u64 = 1;
const FORMAT_PREFIX: &str = "ctxlog-fs ";
const SNAP_MAGIC: &[u8; 8] = b"CTXSNAP1";
const SNAP_HEADER_LEN: usize = 20;
/// Reads gather whole frames into segments of about this many bytes.
const READ_SEGMENT: u64 = 4 << 20;

/// A torn tail cut off a stream file on open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruncatedTail {
    /// The stream.
    pub stream: StreamId,
    /// The stream file.
    pub path: PathBuf,
    /// Where the file now ends (the end of the last whole frame).
    pub offset: u64,
    /// How many bytes were dropped.
    pub bytes_dropped: u64,
}

/// A stream whose file has a bad frame followed by valid data: left untouched.
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
}

#[derive(Debug, Clone, Copy)]
struct FrameMeta {
    first: Version,
    offset: u64,
    len: u64,
}

#[derive(Debug)]
struct StreamLog {
    path: PathBuf,
    /// Whether the file exists on disk (a new stream's file is created by its first append).
    exists: bool,
    /// End of the last whole frame: where the next frame goes.
    len: u64,
    head: Version,
    frames: Vec<FrameMeta>,
    damaged: Option<DamagedStream>,
    /// Set after a failed write or fsync: the page cache no longer tells us what is on disk
    /// (fsyncgate), so the stream refuses appends until the store is reopened and rescanned.
    poisoned: Option<String>,
}

/// A [`Store`] in a directory of append-only files. Only one `FsStore` (in any process) can
/// have a directory open at a time; a second `open` gets [`StoreError::Locked`].
pub struct FsStore {
    root: PathBuf,
    streams: Mutex<HashMap<StreamId, Arc<Mutex<StreamLog>>>>,
    recovered: Vec<TruncatedTail>,
    damaged: Vec<DamagedStream>,
    tmp_counter: AtomicU64,
    // Held for the store's lifetime; closing the file releases the OS lock.
    _lock: File,
}

impl std::fmt::Debug for FsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsStore").field("root", &self.root).finish_non_exhaustive()
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

/// fsyncs a directory so a create or rename in it is durable.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_err(dir, "fsync directory", e))
}

fn create_dir(dir: &Path) -> Result<(), StoreError> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_err(dir, "create directory", e)),
    }
}

impl FsStore {
    /// Opens (creating if needed) the store in directory `dir`: takes the lock, checks the
    /// format, removes leftover temp files and scans every stream file (see the crate docs).
    pub fn open(dir: impl AsRef<Path>) -> Result<FsStore, StoreError> {
        let root = dir.as_ref().to_path_buf();
        fs::create_dir_all(&root).map_err(|e| io_err(&root, "create store directory", e))?;
        let lock_file = Self::take_lock(&root)?;
        Self::check_format(&root)?;
        for sub in ["streams", "blobs", "snapshots", "tmp"] {
            create_dir(&root.join(sub))?;
        }
        sync_dir(&root)?;
        Self::clear_tmp(&root.join("tmp"))?;
        let mut store = FsStore {
            root,
            streams: Mutex::new(HashMap::new()),
            recovered: Vec::new(),
            damaged: Vec::new(),
            tmp_counter: AtomicU64::new(0),
            _lock: lock_file,
        };
        store.scan_streams()?;
        Ok(store)
    }

    /// The store directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Torn tails truncated by this `open`.
    pub fn recovered(&self) -> &[TruncatedTail] {
        &self.recovered
    }

    /// Streams found damaged by this `open` (bad frame followed by valid data; not repaired).
    pub fn damaged(&self) -> &[DamagedStream] {
        &self.damaged
    }

    fn take_lock(root: &Path) -> Result<File, StoreError> {
        let path = root.join("LOCK");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_err(&path, "open lock file", e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                // Best effort: the pid is informative only.
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let detail = if holder.is_empty() {
                    format!("{} is held", path.display())
                } else {
                    format!("{} is held by {holder}", path.display())
                };
                return Err(StoreError::Locked { backend: BACKEND, location: root.display().to_string(), detail });
            }
            Err(fs::TryLockError::Error(e)) => return Err(io_err(&path, "lock", e)),
        }
        // Informative only, so failures are ignored: the OS lock is what excludes writers.
        let _ = file.set_len(0).and_then(|()| file.write_all(format!("pid {}\n", std::process::id()).as_bytes()));
        Ok(file)
    }

    fn check_format(root: &Path) -> Result<(), StoreError> {
        let path = root.join("FORMAT");
        match fs::read_to_string(&path) {
            Ok(text) => {
                let found =
                    text.trim().strip_prefix(FORMAT_PREFIX.trim_end()).and_then(|v| v.trim().parse::<u64>().ok());
                match found {
                    Some(FORMAT_VERSION) => Ok(()),
                    found => Err(StoreError::Schema {
                        backend: BACKEND,
                        location: root.display().to_string(),
                        found: found.unwrap_or(0),
                        supported: FORMAT_VERSION,
                    }),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
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
                write_durably(&tmp, &[format!("{FORMAT_PREFIX}{FORMAT_VERSION}\n").as_bytes()])?;
                fs::rename(&tmp, &path).map_err(|e| io_err(&path, "rename into place", e))?;
                sync_dir(root)
            }
            Err(e) => Err(io_err(&path, "read", e)),
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

    fn stream_path(&self, stream: StreamId) -> PathBuf {
        self.root.join("streams").join(format!("{stream}.log"))
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

    fn scan_streams(&mut self) -> Result<(), StoreError> {
        let dir = self.root.join("streams");
        let mut map = HashMap::new();
        for entry in fs::read_dir(&dir).map_err(|e| io_err(&dir, "list", e))? {
            let entry = entry.map_err(|e| io_err(&dir, "list", e))?;
            let name = entry.file_name();
            // Anything that is not `<uuid>.log` is not ours (editor backups, ...): ignored.
            let Some(stream) = name.to_str().and_then(|n| n.strip_suffix(".log")).and_then(|n| n.parse().ok()) else {
                continue;
            };
            let log = scan_stream(stream, entry.path())?;
            if let Some(t) = &log.1 {
                tracing::warn!(
                    stream = %t.stream, path = %t.path.display(), offset = t.offset, bytes_dropped = t.bytes_dropped,
                    "torn tail truncated (an append that was never acknowledged)"
                );
                self.recovered.push(t.clone());
            }
            if let Some(d) = &log.0.damaged {
                tracing::error!(
                    stream = %d.stream, path = %d.path.display(), offset = d.offset, version = d.version, detail = %d.detail,
                    "damaged stream: readable up to the damage, appends refused"
                );
                self.damaged.push(d.clone());
            }
            map.insert(stream, Arc::new(Mutex::new(log.0)));
        }
        self.streams = Mutex::new(map);
        Ok(())
    }

    fn stream(&self, stream: StreamId) -> Arc<Mutex<StreamLog>> {
        let mut map = lock(&self.streams);
        map.entry(stream)
            .or_insert_with(|| {
                Arc::new(Mutex::new(StreamLog {
                    path: self.stream_path(stream),
                    exists: false,
                    len: 0,
                    head: 0,
                    frames: Vec::new(),
                    damaged: None,
                    poisoned: None,
                }))
            })
            .clone()
    }

    fn existing_stream(&self, stream: StreamId) -> Option<Arc<Mutex<StreamLog>>> {
        lock(&self.streams).get(&stream).cloned()
    }

    fn tmp_path(&self) -> PathBuf {
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        self.root.join("tmp").join(format!("{}-{n}", std::process::id()))
    }

    /// Writes `parts` to a temp file, fsyncs it, renames it to `dest` and fsyncs `dest`'s
    /// directory: readers see the old file or the whole new one, never a partial one.
    fn write_atomically(&self, dest: &Path, parts: &[&[u8]]) -> Result<(), StoreError> {
        let tmp = self.tmp_path();
        write_durably(&tmp, parts)?;
        if let Err(e) = fs::rename(&tmp, dest) {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(dest, "rename into place", e));
        }
        match dest.parent() {
            Some(dir) => sync_dir(dir),
            None => Ok(()),
        }
    }
}

fn write_durably(path: &Path, parts: &[&[u8]]) -> Result<(), StoreError> {
    let mut f = File::create(path).map_err(|e| io_err(path, "create", e))?;
    for p in parts {
        f.write_all(p).map_err(|e| io_err(path, "write", e))?;
    }
    f.sync_all().map_err(|e| io_err(path, "fsync", e))
}

fn damaged_error(d: &DamagedStream) -> StoreError {
    StoreError::Corrupt {
        stream: d.stream,
        version: d.version,
        detail: format!("{}: bad frame at offset {}: {}", d.path.display(), d.offset, d.detail),
    }
}

/// Scans one stream file; truncates a torn tail. Returns the index and the truncation, if any.
fn scan_stream(stream: StreamId, path: PathBuf) -> Result<(StreamLog, Option<TruncatedTail>), StoreError> {
    let file = File::open(&path).map_err(|e| io_err(&path, "open", e))?;
    let file_len = file.metadata().map_err(|e| io_err(&path, "stat", e))?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut log = StreamLog {
        path: path.clone(),
        exists: true,
        len: 0,
        head: 0,
        frames: Vec::new(),
        damaged: None,
        poisoned: None,
    };
    let mut pos: u64 = 0;
    let mut buf = Vec::new();
    // `bad` is why the frame at `pos` is unusable, if it is.
    let bad: Option<String> = loop {
        if pos == file_len {
            break None;
        }
        let remaining = file_len - pos;
        let mut header = [0u8; frame::HEADER_LEN];
        if remaining < frame::OVERHEAD as u64 {
            break Some(format!("{remaining} bytes at the end are too short for a frame"));
        }
        reader.read_exact(&mut header).map_err(|e| io_err(&path, &format!("read frame at offset {pos}"), e))?;
        let Some(len) = frame::check_header(&header) else {
            break Some("frame length fails its checksum".to_owned());
        };
        let total = (len + frame::OVERHEAD) as u64;
        if total > remaining {
            break Some(format!("frame of {total} bytes runs past the end of the file ({remaining} bytes left)"));
        }
        buf.resize(len + frame::TRAILER_LEN, 0);
        reader.read_exact(&mut buf).map_err(|e| io_err(&path, &format!("read frame at offset {pos}"), e))?;
        if !frame::check_body(len, &buf) {
            break Some("frame checksum mismatch".to_owned());
        }
        let next = log.head + 1;
        // A checksum-valid frame with the wrong content cannot come from a torn write: it is
        // corruption (or a file from elsewhere), so it is reported and never truncated.
        let parsed = frame::parse_payload(buf.get(..len).unwrap_or_default()).and_then(|p| {
            if p.stream != stream {
                Err(format!("frame belongs to stream {}", p.stream))
            } else if p.first != next {
                Err(format!("frame starts at version {}, expected {next}", p.first))
            } else {
                Ok(p.records.len() as u64)
            }
        });
        match parsed {
            Ok(count) => {
                log.frames.push(FrameMeta { first: next, offset: pos, len: total });
                log.head += count;
                pos += total;
                log.len = pos;
            }
            Err(detail) => {
                log.damaged = Some(DamagedStream { stream, path: path.clone(), offset: pos, version: next, detail });
                return Ok((log, None));
            }
        }
    };
    let Some(why) = bad else { return Ok((log, None)) };
    // Is there a valid frame anywhere after the bad one? Then this is not a torn tail.
    let mut file = reader.into_inner();
    file.seek(SeekFrom::Start(pos)).map_err(|e| io_err(&path, "seek", e))?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).map_err(|e| io_err(&path, &format!("read tail from offset {pos}"), e))?;
    // Only a frame of this very stream counts: a record may legitimately contain bytes that
    // look like a frame (say, an embedded log), and that must not turn a torn tail into an
    // unrecoverable stream.
    let later = (1..tail.len()).find(|&i| {
        tail.get(i..).is_some_and(|rest| {
            frame::valid_frame_len(rest).is_some()
                && rest.get(frame::HEADER_LEN..).and_then(|p| p.get(..16)).is_some_and(|id| id == stream.0.as_bytes())
        })
    });
    if let Some(i) = later {
        let version = log.head + 1;
        let detail = format!("{why}; a valid frame follows at offset {}, so this is not a torn tail", pos + i as u64);
        log.damaged = Some(DamagedStream { stream, path, offset: pos, version, detail });
        return Ok((log, None));
    }
    drop(file);
    let f = OpenOptions::new().write(true).open(&path).map_err(|e| io_err(&path, "open for truncation", e))?;
    f.set_len(pos)
        .and_then(|()| f.sync_all())
        .map_err(|e| io_err(&path, &format!("truncate torn tail at {pos}"), e))?;
    let t = TruncatedTail { stream, path, offset: pos, bytes_dropped: file_len - pos };
    Ok((log, Some(t)))
}

impl Store for FsStore {
    fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
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
        let result = (|| -> io::Result<()> {
            let mut f = OpenOptions::new().write(true).create(true).truncate(false).open(&path)?;
            f.seek(SeekFrom::Start(offset))?;
            f.write_all(&bytes)?;
            f.sync_data()
        })();
        if let Err(e) = result {
            log.poisoned = Some(e.to_string());
            return Err(io_err(&path, &format!("stream {stream}: write versions {first}.. at offset {offset}"), e));
        }
        if created {
            // The new file's directory entry must be durable too, or a crash could lose the
            // whole stream despite the fsynced data.
            if let Err(e) = sync_dir(&self.root.join("streams")) {
                log.poisoned = Some(e.to_string());
                return Err(e);
            }
            log.exists = true;
        }
        let total = bytes.len() as u64;
        log.frames.push(FrameMeta { first, offset, len: total });
        log.len = offset + total;
        log.head += records.len() as u64;
        Ok(log.head)
    }

    fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError> {
        let from = from.max(1);
        let Some(arc) = self.existing_stream(stream) else { return Ok(Vec::new()) };
        let log = lock(&arc);
        if max == 0 {
            return Ok(Vec::new());
        }
        let wanted_last = from.saturating_add(max as u64 - 1);
        if let Some(d) = &log.damaged {
            if wanted_last > log.head {
                return Err(damaged_error(d));
            }
        }
        if from > log.head {
            return Ok(Vec::new());
        }
        let idx = log.frames.partition_point(|f| f.first <= from).saturating_sub(1);
        let Some(start) = log.frames.get(idx) else { return Ok(Vec::new()) };
        let path = &log.path;
        let mut file = File::open(path).map_err(|e| io_err(path, "open", e))?;
        file.seek(SeekFrom::Start(start.offset)).map_err(|e| io_err(path, "seek", e))?;
        let wanted = (log.head - from + 1).min(max as u64);
        let mut out = Vec::with_capacity(usize::try_from(wanted).unwrap_or(0));
        // Frames are contiguous, so the wanted ones are read in segments of up to READ_SEGMENT
        // bytes straight into one buffer: one syscall and no read-ahead copy per segment.
        let mut buf = Vec::new();
        let mut i = idx;
        while out.len() < max {
            let Some(first) = log.frames.get(i) else { break };
            let mut j = i;
            let mut records = 0u64;
            let mut end = first.offset;
            while let Some(f) = log.frames.get(j) {
                if j > i && (end - first.offset >= READ_SEGMENT || out.len() as u64 + records >= max as u64) {
                    break;
                }
                records += log.frames.get(j + 1).map_or(log.head + 1, |n| n.first) - f.first;
                end = f.offset + f.len;
                j += 1;
            }
            buf.clear();
            let n = end - first.offset;
            // Exact capacity up front: read_to_end then fills it in one read instead of
            // growing (and copying) from a few bytes.
            buf.reserve_exact(usize::try_from(n).unwrap_or(0));
            (&mut file).take(n).read_to_end(&mut buf).map_err(|e| {
                io_err(path, &format!("stream {stream}: read frames at offsets {}..{end}", first.offset), e)
            })?;
            if buf.len() as u64 != n {
                return Err(StoreError::Corrupt {
                    stream,
                    version: from.max(first.first),
                    detail: format!(
                        "{}: file ends at {} but the index has frames up to {end}",
                        path.display(),
                        first.offset + buf.len() as u64
                    ),
                });
            }
            for k in i..j {
                let (Some(meta), next_first) =
                    (log.frames.get(k), log.frames.get(k + 1).map_or(log.head + 1, |f| f.first))
                else {
                    break;
                };
                let at = usize::try_from(meta.offset - first.offset).unwrap_or(usize::MAX);
                let len = usize::try_from(meta.len).unwrap_or(usize::MAX);
                let bytes = buf.get(at..at.saturating_add(len)).unwrap_or_default();
                read_frame(stream, path, meta, next_first, bytes, from, max, &mut out)?;
            }
            i = j;
        }
        Ok(out)
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
        let id = BlobId::of(bytes);
        let (dir, path) = self.blob_path(&id);
        // Content-addressed: an existing file already holds these bytes (it was renamed into
        // place whole); get_blob re-verifies anyway.
        if path.exists() {
            return Ok(id);
        }
        if !dir.exists() {
            create_dir(&dir)?;
            sync_dir(&self.root.join("blobs"))?;
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
}

/// Reads one frame at the reader's position and appends its records in `[from, from+max)` to
/// `out`. Every returned record passes its own seal, so a damaged record is reported by its
/// own version.
#[allow(clippy::too_many_arguments)]
fn read_frame(
    stream: StreamId,
    path: &Path,
    meta: &FrameMeta,
    next_first: Version,
    buf: &[u8],
    from: Version,
    max: usize,
    out: &mut Vec<StoredRecord>,
) -> Result<(), StoreError> {
    let corrupt = |version: Version, detail: String| StoreError::Corrupt {
        stream,
        version,
        detail: format!("{}: frame at offset {}: {detail}", path.display(), meta.offset),
    };
    let first_wanted = from.max(meta.first);
    let len = buf.len();
    let payload_len = len.saturating_sub(frame::OVERHEAD);
    // The whole-frame checksum was verified when `open` scanned the file; here the length word,
    // the payload structure (checked against the index) and every record's own seal are
    // re-checked, which catches any later bit flip in bytes that matter without hashing every
    // byte twice (this keeps replay within reach of a raw read; BENCHMARKS.md).
    if frame::check_header(buf) != Some(payload_len) {
        return Err(corrupt(first_wanted, "frame length word damaged".into()));
    }
    let payload = buf.get(frame::HEADER_LEN..frame::HEADER_LEN + payload_len).unwrap_or_default();
    let parsed = match frame::parse_payload(payload) {
        Ok(p) if p.stream == stream && p.first == meta.first && p.first + p.records.len() as u64 == next_first => p,
        Ok(_) => return Err(corrupt(first_wanted, "frame header does not match the index built on open".into())),
        Err(e) => return Err(corrupt(first_wanted, e)),
    };
    for (i, range) in parsed.records.into_iter().enumerate() {
        let version = meta.first + i as u64;
        if version < from {
            continue;
        }
        if out.len() >= max {
            break;
        }
        let bytes = payload.get(range).unwrap_or_default().to_vec();
        let record = Record::from_stored(stream, version, bytes).map_err(|e| match e {
            StoreError::Corrupt { stream, version, detail } => StoreError::Corrupt {
                stream,
                version,
                detail: format!("{}: frame at offset {}: {detail}", path.display(), meta.offset),
            },
            other => other,
        })?;
        out.push(StoredRecord { version, record });
    }
    Ok(())
}

fn read_snapshot(path: &Path) -> Result<Option<Snapshot>, StoreError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path, "read snapshot", e)),
    };
    let header_ok = bytes.get(..8) == Some(SNAP_MAGIC.as_slice())
        && bytes.get(16..20).zip(bytes.get(..16)).is_some_and(|(crc, h)| crc == crc32c::crc32c(h).to_le_bytes());
    let version = bytes.get(8..16).and_then(|v| v.try_into().ok()).map(u64::from_le_bytes);
    match (header_ok, version) {
        (true, Some(version)) => {
            Ok(Some(Snapshot { version, bytes: bytes.get(SNAP_HEADER_LEN..).unwrap_or_default().to_vec() }))
        }
        // Snapshots are a cache and the log is the truth: an unreadable header means "no
        // snapshot", and the next put_snapshot replaces the file.
        _ => Ok(None),
    }
}
