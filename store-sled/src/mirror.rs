//! `ctxlog.heads`: each stream's head and the hash of its last record, kept by this crate in a
//! small file next to sled's, outside sled's log.
//!
//! sled's recovery stops at the first message of its log that fails its checksum and drops
//! everything after it, without an error: a flipped bit early in `<dir>/db` silently shortens
//! every stream written since (88 of 118 flips of a call-by-call session did so). Everything
//! inside sled is cut consistently, so only a record kept elsewhere can show the loss: after
//! every acknowledged append the new head is written here (after sled's `flush`, so the file
//! never claims more than sled was given), and every open compares sled's heads with it.
//!
//! Format: 64-byte slots, one per stream, in the order streams were first written:
//!
//! ```text
//! 0   8   magic "CTXHEAD1"
//! 8   16  stream id
//! 24  8   head, u64 LE
//! 32  16  first 16 bytes of sha256 of the last record (sealed bytes)
//! 48  12  zero
//! 60  4   crc32c of bytes 0..60, u32 LE
//! ```
//!
//! A slot is rewritten in place with one 64-byte write (64-byte aligned, so it never spans a
//! sector). It is not fsynced: a write the kernel has is enough against a process crash, and
//! after a power loss the file can only be behind sled (it is written after sled's flush) or,
//! if sled lost flushed data it had been given, ahead of it, which is then reported as the
//! loss it is.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use ctxlog::store::{StreamId, Version};
use sha2::{Digest, Sha256};

/// The file name, inside sled's directory.
pub(crate) const FILE: &str = "ctxlog.heads";
const MAGIC: &[u8; 8] = b"CTXHEAD1";
const SLOT: usize = 64;

/// What the mirror says about one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) head: Version,
    pub(crate) last_hash: [u8; 16],
    slot: u64,
}

/// The hash kept of a stream's last record.
pub(crate) fn last_hash(record: &[u8]) -> [u8; 16] {
    let digest = Sha256::digest(record);
    let mut out = [0u8; 16];
    out.copy_from_slice(digest.get(..16).unwrap_or(&[0; 16]));
    out
}

fn encode(stream: StreamId, head: Version, hash: &[u8; 16]) -> [u8; SLOT] {
    let mut slot = [0u8; SLOT];
    let mut put = |at: usize, bytes: &[u8]| {
        if let Some(dst) = slot.get_mut(at..at + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
    };
    put(0, MAGIC);
    put(8, stream.0.as_bytes());
    put(24, &head.to_le_bytes());
    put(32, hash);
    let crc = crc32c::crc32c(slot.get(..60).unwrap_or_default());
    if let Some(dst) = slot.get_mut(60..) {
        dst.copy_from_slice(&crc.to_le_bytes());
    }
    slot
}

fn decode(slot: &[u8]) -> Option<(StreamId, Version, [u8; 16])> {
    let crc = u32::from_le_bytes(slot.get(60..64)?.try_into().ok()?);
    if slot.get(..8)? != MAGIC || crc32c::crc32c(slot.get(..60)?) != crc {
        return None;
    }
    let stream = StreamId(uuid::Uuid::from_slice(slot.get(8..24)?).ok()?);
    let head = u64::from_le_bytes(slot.get(24..32)?.try_into().ok()?);
    let hash = slot.get(32..48)?.try_into().ok()?;
    Some((stream, head, hash))
}

/// The mirror as read on open.
#[derive(Debug, Default)]
pub(crate) struct Mirror {
    pub(crate) entries: BTreeMap<StreamId, Entry>,
    /// Slots that fail their checksum (damage of this file), and a partial slot at the end.
    pub(crate) problems: Vec<String>,
    /// Whether the file existed (a store written before the mirror has none).
    pub(crate) exists: bool,
    slots: u64,
}

impl Mirror {
    /// Reads `<dir>/ctxlog.heads`; problems name it as `<shown>/ctxlog.heads` (a read-only
    /// open reads a copy of the store directory `shown`).
    pub(crate) fn read(dir: &Path, shown: &Path) -> io::Result<Mirror> {
        let bytes = match std::fs::read(dir.join(FILE)) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Mirror::default()),
            Err(e) => return Err(e),
        };
        let path = shown.join(FILE);
        let mut mirror = Mirror { exists: true, ..Mirror::default() };
        for (i, slot) in bytes.chunks(SLOT).enumerate() {
            let at = i * SLOT;
            if slot.len() < SLOT {
                // Only a power loss in the middle of adding a slot leaves this: that stream's
                // first append was never acknowledged past sled's flush.
                mirror.problems.push(format!(
                    "{}: {} bytes at offset {at} are a partial slot",
                    path.display(),
                    slot.len()
                ));
                continue;
            }
            mirror.slots += 1;
            match decode(slot) {
                Some((stream, head, last_hash)) => {
                    let e = Entry { head, last_hash, slot: i as u64 };
                    mirror
                        .entries
                        .entry(stream)
                        .and_modify(|old| {
                            if head > old.head {
                                *old = e
                            }
                        })
                        .or_insert(e);
                }
                None => mirror.problems.push(format!("{}: the slot at offset {at} fails its checksum", path.display())),
            }
        }
        Ok(mirror)
    }
}

/// Keeps the file up to date for a writer.
#[derive(Debug)]
pub(crate) struct MirrorWriter {
    file: File,
    path: PathBuf,
    slots: BTreeMap<StreamId, u64>,
    next: u64,
}

impl MirrorWriter {
    /// Opens (creating) the file for the streams `mirror` already has.
    pub(crate) fn open(dir: &Path, mirror: &Mirror) -> io::Result<MirrorWriter> {
        let path = dir.join(FILE);
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        let slots = mirror.entries.iter().map(|(s, e)| (*s, e.slot)).collect();
        Ok(MirrorWriter { file, path, slots, next: mirror.slots })
    }

    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Records `head` (and the last record) of `stream`.
    pub(crate) fn set(&mut self, stream: StreamId, head: Version, last: &[u8]) -> io::Result<()> {
        let slot = *self.slots.entry(stream).or_insert_with(|| {
            self.next += 1;
            self.next - 1
        });
        self.file.seek(SeekFrom::Start(slot * SLOT as u64))?;
        self.file.write_all(&encode(stream, head, &last_hash(last)))
    }

    /// Reads the slot back (tests).
    #[cfg(test)]
    fn get(&mut self, stream: StreamId) -> io::Result<Option<(StreamId, Version, [u8; 16])>> {
        use std::io::Read;
        let Some(slot) = self.slots.get(&stream) else { return Ok(None) };
        let mut buf = [0u8; SLOT];
        self.file.seek(SeekFrom::Start(slot * SLOT as u64))?;
        self.file.read_exact(&mut buf)?;
        Ok(decode(&buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip_and_every_bit_flip_is_caught() {
        let s = StreamId::random();
        let slot = encode(s, 42, &last_hash(b"rec"));
        assert_eq!(decode(&slot), Some((s, 42, last_hash(b"rec"))));
        for bit in 0..SLOT * 8 {
            let mut bad = slot;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(decode(&bad), None, "bit {bit}");
        }
    }

    #[test]
    fn a_writer_updates_slots_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (StreamId::random(), StreamId::random());
        let mut w = MirrorWriter::open(dir.path(), &Mirror::read(dir.path(), dir.path()).unwrap()).unwrap();
        w.set(a, 1, b"a1").unwrap();
        w.set(b, 1, b"b1").unwrap();
        w.set(a, 2, b"a2").unwrap();
        assert_eq!(w.get(a).unwrap(), Some((a, 2, last_hash(b"a2"))));
        let m = Mirror::read(dir.path(), dir.path()).unwrap();
        assert_eq!(std::fs::metadata(dir.path().join(FILE)).unwrap().len(), 128);
        assert_eq!((m.entries[&a].head, m.entries[&b].head), (2, 1));
        let mut w = MirrorWriter::open(dir.path(), &m).unwrap();
        w.set(b, 2, b"b2").unwrap();
        assert_eq!(Mirror::read(dir.path(), dir.path()).unwrap().entries[&b].head, 2);
        assert_eq!(std::fs::metadata(dir.path().join(FILE)).unwrap().len(), 128);
    }
}
