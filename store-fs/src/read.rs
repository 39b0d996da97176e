//! The read path: records of a stream, straight from the frames the open indexed.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use ctxlog::store::{Record, StoreError, StoredRecord, StreamId, Version};

use crate::scan::{FrameMeta, StreamLog};
use crate::{damaged_error, frame, io_err};

/// Reads gather whole frames into segments of about this many bytes.
const READ_SEGMENT: u64 = 4 << 20;

/// Up to `max` records of `stream` from version `from` on, each verified.
pub(crate) fn read_records(
    stream: StreamId,
    log: &StreamLog,
    from: Version,
    max: usize,
) -> Result<Vec<StoredRecord>, StoreError> {
    let from = from.max(1);
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
            let (Some(meta), next_first) = (log.frames.get(k), log.frames.get(k + 1).map_or(log.head + 1, |f| f.first))
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
        Err(e) => return Err(corrupt(first_wanted, e.to_string())),
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
