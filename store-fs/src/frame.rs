//! The frame and payload codec of a stream file (`docs/log-format.md`, "fs store").
//!
//! ```text
//! frame   = len: u32 LE | len_crc: u32 LE | payload: [u8; len] | crc: u32 LE
//!           len_crc = crc32c(len bytes)
//!           crc     = crc32c(len bytes ‖ payload) ^ 0xAF
//! payload = stream: [u8; 16] | first_version: u64 LE | count: u32 LE | count × (rec_len: u32 LE | rec: [u8; rec_len])
//! ```

use ctxlog::store::{Record, StreamId, Version};

/// Bytes before the payload: length and its checksum.
pub const HEADER_LEN: usize = 8;
/// Bytes after the payload: the frame checksum.
pub const TRAILER_LEN: usize = 4;
/// Frame bytes that are not payload.
pub const OVERHEAD: usize = HEADER_LEN + TRAILER_LEN;
/// Fixed part of a payload: stream id, first version, count.
pub const PAYLOAD_FIXED: usize = 16 + 8 + 4;
/// Largest payload accepted (one `append` call). Bounds the allocation a (checksummed but
/// hostile) length field can cause, and keeps offsets inside a `u32`.
pub const MAX_PAYLOAD: usize = 1 << 30;
/// XORed into the frame checksum, as sled does, so a frame-shaped run of identical bytes
/// does not check out by accident.
const CRC_XOR: u32 = 0xAF;

fn le32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([*s.first()?, *s.get(1)?, *s.get(2)?, *s.get(3)?]))
}

fn le64(b: &[u8], at: usize) -> Option<u64> {
    let s: [u8; 8] = b.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(s))
}

/// Why a batch cannot be one frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The payload would exceed [`MAX_PAYLOAD`].
    #[error("batch of {bytes} bytes exceeds the frame limit of {MAX_PAYLOAD} bytes")]
    TooLarge {
        /// The payload's size.
        bytes: usize,
    },
    /// More records than the count field holds.
    #[error("batch of {count} records is too long")]
    TooManyRecords {
        /// Records in the batch.
        count: usize,
    },
}

/// What is wrong with a frame's payload, or with where it sits in its log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// Shorter than the stream id.
    #[error("payload of {len} bytes is shorter than its fixed part")]
    Short {
        /// The payload's size.
        len: usize,
    },
    /// Too short for a field of the fixed part.
    #[error("payload too short for {field}")]
    ShortField {
        /// The field.
        field: &'static str,
    },
    /// A count of zero.
    #[error("frame holds no records")]
    Empty,
    /// More records than the payload has room for.
    #[error("count {count} cannot fit in a payload of {len} bytes")]
    Count {
        /// The count field.
        count: u64,
        /// The payload's size.
        len: usize,
    },
    /// A record's length field is cut off.
    #[error("record {i} of {count}: length runs past the payload")]
    LengthCut {
        /// The record's index.
        i: usize,
        /// The count field.
        count: usize,
    },
    /// A record longer than what is left of the payload.
    #[error("record {i} of {count}: {n} bytes run past the payload")]
    RecordCut {
        /// The record's index.
        i: usize,
        /// The count field.
        count: usize,
        /// The record's length field.
        n: u32,
    },
    /// Bytes after the last record.
    #[error("{0} trailing bytes after the last record")]
    Trailing(usize),
    /// A frame of another stream in this stream's log.
    #[error("frame belongs to stream {0}")]
    OtherStream(StreamId),
    /// A frame that does not start where the previous one ended.
    #[error("frame starts at version {first}, expected {expected}")]
    Misplaced {
        /// Its first version.
        first: Version,
        /// The version after the previous frame.
        expected: Version,
    },
}

/// Encodes one batch as one frame. Fails if the batch does not fit [`MAX_PAYLOAD`].
pub fn encode(stream: StreamId, first: Version, records: &[Record]) -> Result<Vec<u8>, EncodeError> {
    let mut payload_len = PAYLOAD_FIXED;
    for r in records {
        payload_len = payload_len.saturating_add(4).saturating_add(r.as_bytes().len());
    }
    if payload_len > MAX_PAYLOAD {
        return Err(EncodeError::TooLarge { bytes: payload_len });
    }
    let count = u32::try_from(records.len()).map_err(|_| EncodeError::TooManyRecords { count: records.len() })?;
    let len = u32::try_from(payload_len).map_err(|_| EncodeError::TooLarge { bytes: payload_len })?;
    let mut out = Vec::with_capacity(payload_len + OVERHEAD);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&len.to_le_bytes()).to_le_bytes());
    out.extend_from_slice(stream.0.as_bytes());
    out.extend_from_slice(&first.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    for r in records {
        let b = r.as_bytes();
        // Cannot fail: each record is smaller than the whole payload checked above.
        let n = u32::try_from(b.len()).map_err(|_| EncodeError::TooLarge { bytes: b.len() })?;
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(b);
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(&len.to_le_bytes()), out.get(HEADER_LEN..).unwrap_or_default());
    out.extend_from_slice(&(crc ^ CRC_XOR).to_le_bytes());
    Ok(out)
}

/// Checks a frame header; returns the payload length if the length's own checksum holds and
/// the length is within [`MAX_PAYLOAD`].
pub fn check_header(header: &[u8]) -> Option<usize> {
    let len = le32(header, 0)?;
    let len_crc = le32(header, 4)?;
    if crc32c::crc32c(&len.to_le_bytes()) != len_crc {
        return None;
    }
    let len = usize::try_from(len).ok()?;
    (len <= MAX_PAYLOAD).then_some(len)
}

/// Checks the frame checksum of `payload ‖ trailer` given the payload length.
pub fn check_body(len: usize, body: &[u8]) -> bool {
    let (Some(payload), Some(stored)) = (body.get(..len), le32(body, len)) else { return false };
    let Ok(len32) = u32::try_from(len) else { return false };
    crc32c::crc32c_append(crc32c::crc32c(&len32.to_le_bytes()), payload) ^ CRC_XOR == stored
}

/// If a complete, checksum-valid frame starts at `buf[0]`, its total length.
#[cfg(test)]
pub fn valid_frame_len(buf: &[u8]) -> Option<usize> {
    let len = check_header(buf)?;
    let body = buf.get(HEADER_LEN..HEADER_LEN + len + TRAILER_LEN)?;
    check_body(len, body).then_some(len + OVERHEAD)
}

/// A decoded payload: where each record's bytes sit inside it.
#[derive(Debug)]
pub struct Payload {
    /// The stream the frame belongs to.
    pub stream: StreamId,
    /// Version of the first record.
    pub first: Version,
    /// Byte ranges of the records inside the payload.
    pub records: Vec<std::ops::Range<usize>>,
}

/// Parses a payload's structure. Every length is checked against the buffer, and the
/// records must fill it exactly.
pub fn parse_payload(payload: &[u8]) -> Result<Payload, PayloadError> {
    let stream_bytes: [u8; 16] =
        payload.get(..16).and_then(|s| s.try_into().ok()).ok_or(PayloadError::Short { len: payload.len() })?;
    let stream = StreamId(uuid::Uuid::from_bytes(stream_bytes));
    let first = le64(payload, 16).ok_or(PayloadError::ShortField { field: "first_version" })?;
    let count = le32(payload, 24).ok_or(PayloadError::ShortField { field: "count" })?;
    if count == 0 {
        return Err(PayloadError::Empty);
    }
    let mut at = PAYLOAD_FIXED;
    // Each record needs at least its 4-byte length, which bounds `count` before allocating.
    let too_many = PayloadError::Count { count: u64::from(count), len: payload.len() };
    let count = usize::try_from(count).map_err(|_| too_many.clone())?;
    if count > (payload.len().saturating_sub(PAYLOAD_FIXED)) / 4 {
        return Err(too_many);
    }
    let mut records = Vec::with_capacity(count);
    for i in 0..count {
        let n = le32(payload, at).ok_or(PayloadError::LengthCut { i, count })?;
        let start = at + 4;
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| start.checked_add(n))
            .filter(|&e| e <= payload.len())
            .ok_or(PayloadError::RecordCut { i, count, n })?;
        records.push(start..end);
        at = end;
    }
    if at != payload.len() {
        return Err(PayloadError::Trailing(payload.len() - at));
    }
    Ok(Payload { stream, first, records })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let s = StreamId::random();
        let recs = [Record::seal(b"one".to_vec()), Record::seal(Vec::new())];
        let f = encode(s, 7, &recs).unwrap();
        assert_eq!(valid_frame_len(&f), Some(f.len()));
        let p = parse_payload(&f[HEADER_LEN..f.len() - TRAILER_LEN]).unwrap();
        assert_eq!((p.stream, p.first, p.records.len()), (s, 7, 2));
        assert_eq!(&f[HEADER_LEN + p.records[0].start..HEADER_LEN + p.records[0].end], recs[0].as_bytes());
    }

    #[test]
    fn every_bit_flip_is_caught() {
        let f = encode(StreamId::random(), 1, &[Record::seal(b"abc".to_vec())]).unwrap();
        for bit in 0..f.len() * 8 {
            let mut g = f.clone();
            g[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(valid_frame_len(&g), None, "bit {bit}");
        }
    }

    #[test]
    fn zeros_are_not_a_frame() {
        assert_eq!(valid_frame_len(&[0u8; 64]), None);
        assert_eq!(check_header(&[0u8; 8]), None);
    }
}
