//! Reading a stream file on open: the frame index, and what the end of the file is.
//!
//! Only two things are a torn write, the state a crash during `append` leaves: an incomplete
//! final frame (its length, or its header, runs past the end of the file) and an all-zero
//! tail (space the file system extended but never filled). Anything else that fails a check
//! is damage, wherever it is, the last frame included: a complete frame with a bad checksum
//! cannot come from a crash during an append, which writes each frame with one `write` at
//! the end of the file.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use ctxlog::store::{StoreError, StreamId, Version};

use crate::{frame, io_err, DamagedStream};

#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameMeta {
    pub(crate) first: Version,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

#[derive(Debug)]
pub(crate) struct StreamLog {
    pub(crate) path: PathBuf,
    /// Whether the file exists on disk (a new stream's file is created by its first append).
    pub(crate) exists: bool,
    /// End of the last whole frame: where the next frame goes.
    pub(crate) len: u64,
    pub(crate) head: Version,
    pub(crate) frames: Vec<FrameMeta>,
    pub(crate) damaged: Option<DamagedStream>,
    /// Set after a failed write or fsync: the page cache no longer tells us what is on disk
    /// (fsyncgate), so the stream refuses appends until the store is reopened and rescanned.
    pub(crate) poisoned: Option<String>,
    /// The slot of `<uuid>.anchor` that holds the current anchor; `None` while there is no
    /// anchor file (a new stream's first append creates it).
    pub(crate) anchor_slot: Option<usize>,
}

impl StreamLog {
    pub(crate) fn new(path: PathBuf, exists: bool) -> StreamLog {
        StreamLog {
            path,
            exists,
            len: 0,
            head: 0,
            frames: Vec::new(),
            damaged: None,
            poisoned: None,
            anchor_slot: None,
        }
    }
}

/// A torn write at the end of a stream file: `bytes` bytes from `offset` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Torn {
    pub(crate) offset: u64,
    pub(crate) bytes: u64,
    pub(crate) why: String,
}

/// Scans `path` frame by frame. Never writes: a torn tail is returned for the caller to repair
/// (a writer) or to leave alone (a reader).
pub(crate) fn scan_stream(stream: StreamId, path: &Path) -> Result<(StreamLog, Option<Torn>), StoreError> {
    let file = File::open(path).map_err(|e| io_err(path, "open", e))?;
    let file_len = file.metadata().map_err(|e| io_err(path, "stat", e))?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut log = StreamLog::new(path.to_path_buf(), true);
    let mut pos: u64 = 0;
    let mut buf = Vec::new();
    // Why the frame at `pos` is unusable, and whether that can be a torn write.
    let (why, torn) = loop {
        if pos == file_len {
            return Ok((log, None));
        }
        let remaining = file_len - pos;
        let mut header = [0u8; frame::HEADER_LEN];
        if remaining < frame::HEADER_LEN as u64 {
            break (format!("{remaining} bytes at the end are too short for a frame header"), true);
        }
        reader.read_exact(&mut header).map_err(|e| io_err(path, &format!("read frame at offset {pos}"), e))?;
        let Some(len) = frame::check_header(&header) else {
            break ("frame length fails its checksum".to_owned(), false);
        };
        let total = (len + frame::OVERHEAD) as u64;
        if total > remaining {
            let why = format!("frame of {total} bytes runs past the end of the file ({remaining} bytes left)");
            break (why, true);
        }
        buf.resize(len + frame::TRAILER_LEN, 0);
        reader.read_exact(&mut buf).map_err(|e| io_err(path, &format!("read frame at offset {pos}"), e))?;
        if !frame::check_body(len, &buf) {
            break ("frame checksum mismatch in a complete frame".to_owned(), false);
        }
        let next = log.head + 1;
        let parsed = frame::parse_payload(buf.get(..len).unwrap_or_default()).and_then(|p| {
            if p.stream != stream {
                Err(frame::PayloadError::OtherStream(p.stream))
            } else if p.first != next {
                Err(frame::PayloadError::Misplaced { first: p.first, expected: next })
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
            Err(detail) => break (detail.to_string(), false),
        }
    };
    let tail = read_tail(reader.into_inner(), path, pos)?;
    if torn || tail.iter().all(|b| *b == 0) {
        let why = if torn { why } else { format!("{} zero bytes at the end", tail.len()) };
        return Ok((log, Some(Torn { offset: pos, bytes: file_len - pos, why })));
    }
    let version = log.head + 1;
    log.damaged =
        Some(DamagedStream { stream, path: path.to_path_buf(), offset: pos, version, detail: why, acceptable: false });
    Ok((log, None))
}

fn read_tail(mut file: File, path: &Path, from: u64) -> Result<Vec<u8>, StoreError> {
    file.seek(SeekFrom::Start(from)).map_err(|e| io_err(path, "seek", e))?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).map_err(|e| io_err(path, &format!("read tail from offset {from}"), e))?;
    Ok(tail)
}

/// Name of the file that keeps the bytes a repair cut from `log` at `offset` (`n` > 0 when an
/// earlier repair at the same offset already used the plain name).
pub(crate) fn quarantine_name(log: &Path, offset: u64, n: u32) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(format!(".torn-{offset}"));
    if n > 0 {
        name.push(format!(".{n}"));
    }
    PathBuf::from(name)
}

/// Parses `<uuid>.log.torn-<offset>[.<n>]`: the stream and the offset of the cut.
pub(crate) fn parse_quarantine_name(name: &str) -> Option<(StreamId, u64)> {
    let (stream, rest) = name.split_once(".log.torn-")?;
    let offset = rest.split('.').next()?.parse().ok()?;
    Some((stream.parse().ok()?, offset))
}

/// Parses `<uuid>.log.lost-<from>[.<n>]`: the stream and the first version a writer's open
/// accepted as lost.
pub(crate) fn parse_loss_name(name: &str) -> Option<(StreamId, Version)> {
    let (stream, rest) = name.split_once(".log.lost-")?;
    let from = rest.split('.').next()?.parse().ok()?;
    Some((stream.parse().ok()?, from))
}
