//! The acknowledgement anchor of a stream: `streams/<uuid>.anchor` says how far the log was
//! acknowledged, so a log cut short (a copy stopped early, a truncating tool) is told apart
//! from a torn write (`docs/log-format.md`, "Anchor file").
//!
//! ```text
//! file = slot 0 | slot 1                      (128 bytes)
//! slot = magic "CTXANCH1" | stream: [u8; 16] | head: u64 LE | end: u64 LE
//!        | hash: [u8; 16] | zero: [u8; 4] | crc32c(bytes 0..60): u32 LE
//! ```
//!
//! The log alone cannot say whether its end was cut: a cut at a frame boundary leaves a valid
//! log, a cut inside a frame looks like a crash during an append. Two slots, written in turn
//! in place, give the anchor its own torn-write rule: an update rewrites only the slot that
//! does not hold the current anchor, so a crash in the middle of it leaves the other one
//! whole (and that one covers every acknowledged batch: the torn update's batch was not
//! acknowledged yet). A file where no slot checks out cannot come from a crash: it is damage.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use ctxlog::store::{StreamId, Version};
use sha2::{Digest, Sha256};

/// Bytes per slot.
pub(crate) const SLOT_LEN: usize = 64;
/// Bytes of the whole file: two slots.
pub(crate) const FILE_LEN: usize = 2 * SLOT_LEN;
const MAGIC: &[u8; 8] = b"CTXANCH1";

/// How far a stream was acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Anchor {
    /// The last acknowledged version (0: none yet).
    pub(crate) head: Version,
    /// Where the frame holding `head` ends in the log (0 when `head` is 0).
    pub(crate) end: u64,
    /// First 16 bytes of the sha256 of the sealed record at `head` (zeros when `head` is 0).
    pub(crate) hash: [u8; 16],
}

impl Anchor {
    /// The anchor of a stream with nothing acknowledged.
    pub(crate) const EMPTY: Anchor = Anchor { head: 0, end: 0, hash: [0; 16] };
}

/// The hash an anchor keeps of the sealed record at its head.
pub(crate) fn record_hash(sealed: &[u8]) -> [u8; 16] {
    let digest = Sha256::digest(sealed);
    let mut out = [0u8; 16];
    out.copy_from_slice(digest.get(..16).unwrap_or(&[0; 16]));
    out
}

/// One slot's bytes.
pub(crate) fn encode_slot(stream: StreamId, a: &Anchor) -> [u8; SLOT_LEN] {
    let mut s = [0u8; SLOT_LEN];
    s[..8].copy_from_slice(MAGIC);
    s[8..24].copy_from_slice(stream.0.as_bytes());
    s[24..32].copy_from_slice(&a.head.to_le_bytes());
    s[32..40].copy_from_slice(&a.end.to_le_bytes());
    s[40..56].copy_from_slice(&a.hash);
    let crc = crc32c::crc32c(&s[..60]);
    s[60..].copy_from_slice(&crc.to_le_bytes());
    s
}

/// Why a slot does not check out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum SlotError {
    #[error("checksum mismatch")]
    Checksum,
    #[error("not an anchor slot")]
    NotASlot,
    #[error("names another stream")]
    OtherStream,
}

/// A slot that checks out for `stream`, or why not.
fn decode_slot(stream: StreamId, s: &[u8]) -> Result<Anchor, SlotError> {
    let field = |from: usize, to: usize| s.get(from..to).unwrap_or_default();
    let crc = field(60, 64);
    if crc != crc32c::crc32c(field(0, 60)).to_le_bytes() {
        return Err(SlotError::Checksum);
    }
    if field(0, 8) != MAGIC || field(56, 60) != [0; 4] {
        return Err(SlotError::NotASlot);
    }
    if field(8, 24) != stream.0.as_bytes() {
        return Err(SlotError::OtherStream);
    }
    let u64_at = |at: usize| field(at, at + 8).try_into().map(u64::from_le_bytes).unwrap_or(0);
    let mut hash = [0u8; 16];
    hash.copy_from_slice(field(40, 56));
    Ok(Anchor { head: u64_at(24), end: u64_at(32), hash })
}

/// What a stream's anchor file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// No anchor file: a stream written before anchors existed (or its file was deleted).
    Missing,
    /// The current anchor and the slot holding it.
    Current { anchor: Anchor, slot: usize },
    /// A file no crash can leave: no slot checks out, or it is not 128 bytes long.
    Damaged(String),
}

/// Reads the anchor file at `path`.
pub(crate) fn read(path: &Path, stream: StreamId) -> io::Result<Found> {
    let mut bytes = Vec::with_capacity(FILE_LEN);
    match File::open(path) {
        // At most one byte more than a whole file is read: enough to tell the size is wrong.
        Ok(f) => f.take(FILE_LEN as u64 + 1).read_to_end(&mut bytes)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => return Err(e),
    };
    if bytes.len() != FILE_LEN {
        let size = if bytes.len() > FILE_LEN { "more than 128".to_owned() } else { bytes.len().to_string() };
        return Ok(Found::Damaged(format!("the file is {size} bytes long, not {FILE_LEN}")));
    }
    let (a, b) = bytes.split_at(SLOT_LEN);
    Ok(match (decode_slot(stream, a), decode_slot(stream, b)) {
        (Ok(x), Ok(y)) if y.head > x.head => Found::Current { anchor: y, slot: 1 },
        (Ok(x), _) => Found::Current { anchor: x, slot: 0 },
        (Err(_), Ok(y)) => Found::Current { anchor: y, slot: 1 },
        (Err(x), Err(y)) => Found::Damaged(format!("neither slot checks out (slot 0: {x}; slot 1: {y})")),
    })
}

/// The whole file, both slots holding `a` (a new anchor, or one rewritten after a repair).
pub(crate) fn encode_file(stream: StreamId, a: &Anchor) -> [u8; FILE_LEN] {
    let slot = encode_slot(stream, a);
    let mut out = [0u8; FILE_LEN];
    out[..SLOT_LEN].copy_from_slice(&slot);
    out[SLOT_LEN..].copy_from_slice(&slot);
    out
}

/// Writes `a` into `slot` of the existing file at `path` (not synced; the caller syncs).
pub(crate) fn write_slot(path: &Path, stream: StreamId, slot: usize, a: &Anchor) -> io::Result<File> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.seek(SeekFrom::Start((slot * SLOT_LEN) as u64))?;
    f.write_all(&encode_slot(stream, a))?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn every_bit_flip_of_a_slot_fails_it() {
        let s = StreamId::random();
        let a = Anchor { head: 41, end: 9_000, hash: [7; 16] };
        let slot = encode_slot(s, &a);
        assert_eq!(decode_slot(s, &slot), Ok(a));
        for bit in 0..SLOT_LEN * 8 {
            let mut t = slot;
            t[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_slot(s, &t).is_err(), "bit {bit}");
        }
        assert_eq!(decode_slot(StreamId::random(), &slot), Err(SlotError::OtherStream), "another stream's slot");
        assert_eq!(decode_slot(s, &[0; SLOT_LEN]), Err(SlotError::Checksum), "zeros");
    }
}
