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

/// Encodes one batch as one frame. Fails if the batch does not fit [`MAX_PAYLOAD`].
pub fn encode(stream: StreamId, first: Version, records: &[Record]) -> Result<Vec<u8>, String> {
    let mut payload_len = PAYLOAD_FIXED;
    for r in records {
        payload_len = payload_len.saturating_add(4).saturating_add(r.as_bytes().len());
    }
    if payload_len > MAX_PAYLOAD {
        return Err(format!("batch of {payload_len} bytes exceeds the frame limit of {MAX_PAYLOAD} bytes"));
    }
    let count = u32::try_from(records.len()).map_err(|_| format!("batch of {} records is too long", records.len()))?;
    let len = u32::try_from(payload_len).map_err(|_| "batch too large".to_owned())?;
    let mut out = Vec::with_capacity(payload_len + OVERHEAD);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&len.to_le_bytes()).to_le_bytes());
    out.extend_from_slice(stream.0.as_bytes());
    out.extend_from_slice(&first.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    for r in records {
        let b = r.as_bytes();
        // Cannot fail: each record is smaller than the whole payload checked above.
        let n = u32::try_from(b.len()).map_err(|_| "record too large".to_owned())?;
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
pub fn parse_payload(payload: &[u8]) -> Result<Payload, String> {
    let stream_bytes: [u8; 16] = payload
        .get(..16)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| format!("payload of {} bytes is shorter than its fixed part", payload.len()))?;
    let stream = StreamId(uuid::Uuid::from_bytes(stream_bytes));
    let first = le64(payload, 16).ok_or("payload too short for first_version")?;
    let count = le32(payload, 24).ok_or("payload too short for count")?;
    if count == 0 {
        return Err("frame holds no records".to_owned());
    }
    let mut at = PAYLOAD_FIXED;
    // Each record needs at least its 4-byte length, which bounds `count` before allocating.
    let count = usize::try_from(count).map_err(|_| "count overflows")?;
    if count > (payload.len().saturating_sub(PAYLOAD_FIXED)) / 4 {
        return Err(format!("count {count} cannot fit in a payload of {} bytes", payload.len()));
    }
    let mut records = Vec::with_capacity(count);
    for i in 0..count {
        let n = le32(payload, at).ok_or_else(|| format!("record {i} of {count}: length runs past the payload"))?;
        let start = at + 4;
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| start.checked_add(n))
            .filter(|&e| e <= payload.len())
            .ok_or_else(|| format!("record {i} of {count}: {n} bytes run past the payload"))?;
        records.push(start..end);
        at = end;
    }
    if at != payload.len() {
        return Err(format!("{} trailing bytes after the last record", payload.len() - at));
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
