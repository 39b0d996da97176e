//! The fs backend's recovery scan and read path, through its public API: each input becomes
//! a stream file in a scratch store (under `$CTXLOG_FUZZ_SCRATCH`, else /dev/shm when it
//! exists), which is opened, read, and opened again.
//!
//! Input: one mode byte, then (with mode bit 3) three bytes naming a flip, then the file's
//! bytes.
//! * mode bit 0 clear: the bytes are used as they are (mostly damage: torn tails, flipped
//!   bits, garbage);
//! * mode bit 0 set: the bytes are walked as frames (`docs/log-format.md`, "fs store") and every
//!   frame's `len_crc` and `crc` are recomputed, so the scanner gets past the checksums and the
//!   payload parser sees arbitrary stream ids, versions, counts and record lengths; bit 1
//!   also reseals every record of a payload that parses, bit 2 leaves an overlong last frame
//!   incomplete (a torn write) instead of shortening it to fit;
//! * mode bit 3: after the first open, one byte of the file (position from the two bytes after
//!   the mode byte, XOR mask from the third) is changed behind the open store's back: every
//!   record read before must then be read back identical or not at all (`Corrupt`), never as
//!   other bytes (reads re-check lengths, layout and record seals, not the frame checksum).
//!
//! Always: `open` succeeds (damage is reported, never an open error), a repair only cuts the
//! file to a prefix of itself, an open without repair leaves the file byte-identical, a
//! second open repairs nothing more and sees the same head, and what `head` says is what
//! `read` returns. With fixed checksums an independent parser predicts the outcome: a clean
//! log reads back every record byte for byte; a checksum-valid frame with a wrong stream id,
//! version or layout is `Corrupt` at exactly its first version; an incomplete last frame is a
//! torn tail (cut) or reported damage, and in both cases every record before it stays readable.

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ctxlog::store::{Record, Store, StoreError, StreamId, Version};
use ctxlog_store_fs::{FsStore, MAX_PAYLOAD};
use libfuzzer_sys::fuzz_target;
use uuid::Uuid;

const STREAM: &str = "00000000-0000-0000-0000-00000000601d";
const CRC_XOR: u32 = 0xAF;
const HEADER: usize = 8;
const OVERHEAD: usize = 12;

const FIX_CHECKSUMS: u8 = 1;
const RESEAL_RECORDS: u8 = 2;
const KEEP_TORN: u8 = 4;
const FLIP_AFTER_OPEN: u8 = 8;

fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = match std::env::var_os("CTXLOG_FUZZ_SCRATCH") {
            Some(dir) => PathBuf::from(dir),
            None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
            None => std::env::temp_dir(),
        };
        let dir = base.join(format!("ctxlog-fuzz-fs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // Lay the store out once; each input then only replaces the stream file.
        drop(FsStore::open(&dir).unwrap_or_else(|e| panic!("cannot create the scratch store: {e}")));
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, raw)) = data.split_first() else { return };
    let (flip, raw) = match (mode & FLIP_AFTER_OPEN != 0, raw) {
        (false, raw) => (None, raw),
        (true, [lo, hi, mask, raw @ ..]) => (Some((usize::from(u16::from_le_bytes([*lo, *hi])), (*mask).max(1))), raw),
        (true, _) => return,
    };
    let Ok(stream) = STREAM.parse::<StreamId>() else { return };
    let mut file = raw.to_vec();
    let expected = (mode & FIX_CHECKSUMS != 0).then(|| {
        fix_checksums(&mut file, mode & RESEAL_RECORDS != 0, mode & KEEP_TORN != 0);
        predict(stream, &file)
    });
    let dir = scratch();
    let streams = dir.join("streams");
    // Start from an empty streams/ (a repair may leave files beside the log).
    let _ = std::fs::remove_dir_all(&streams);
    std::fs::create_dir_all(&streams).unwrap_or_else(|e| panic!("{}: {e}", streams.display()));
    let path = streams.join(format!("{stream}.log"));
    std::fs::write(&path, &file).unwrap_or_else(|e| panic!("{}: {e}", path.display()));

    let store = FsStore::open(dir).unwrap_or_else(|e| panic!("open must report damage, not fail: {e}"));
    let on_disk = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
    match store.recovered() {
        [] => assert_eq!(on_disk, file, "an open without repair changed the file"),
        [cut] => {
            assert_eq!(cut.stream, stream);
            assert_eq!(cut.offset as usize, on_disk.len(), "the report says where the file now ends");
            assert_eq!(cut.bytes_dropped as usize, file.len() - on_disk.len());
            assert!(cut.bytes_dropped > 0);
            assert_eq!(file.get(..on_disk.len()), Some(&on_disk[..]), "a repair may only cut the file");
        }
        more => panic!("one stream file, {} repairs", more.len()),
    }
    let seen = observe(&store, stream);
    if let Some(expected) = &expected {
        expected.check(&seen, !store.recovered().is_empty());
    }
    if let Some((at, mask)) = flip.filter(|_| !on_disk.is_empty()) {
        let mut bytes = on_disk.clone();
        if let Some(b) = bytes.get_mut(at % on_disk.len()) {
            *b ^= mask;
        }
        std::fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{e}"));
        let after = observe(&store, stream);
        assert_eq!(after.head, seen.head, "the head is the open store's");
        // A record read before is read back identical or not at all. (A record that failed its
        // seal may pass it after the change: that flip undid damage, it invented nothing.)
        for (version, (before, now)) in seen.readable.iter().zip(&after.readable).enumerate() {
            assert!(
                before == now,
                "version {}: a byte changed under the open store was read back as other bytes",
                version + 1
            );
        }
        assert!(
            after.readable.len() >= seen.readable.len() || after.all.is_err(),
            "records stopped being readable without a Corrupt"
        );
        // The next open sees the damage; it must report it, not fail.
        drop(store);
        drop(FsStore::open(dir).unwrap_or_else(|e| panic!("open after a flip must not fail: {e}")));
        return;
    }
    drop(store);

    let again = FsStore::open(dir).unwrap_or_else(|e| panic!("second open: {e}"));
    assert!(again.recovered().is_empty(), "a second open repaired again: {:?}", again.recovered());
    assert_eq!(std::fs::read(&path).unwrap_or_default(), on_disk, "the second open changed the file");
    assert_eq!(observe(&again, stream), seen, "a second open sees something else");
});

/// What the store says about the stream.
#[derive(Debug, PartialEq)]
struct Seen {
    /// `head()`: the head, or the version a `Corrupt` names.
    head: Result<Option<Version>, Version>,
    damaged: bool,
    /// `read(1, ∞)`: the record bytes, or the version a `Corrupt` names.
    all: Result<Vec<Vec<u8>>, Version>,
    /// The longest readable prefix, record by record.
    readable: Vec<Vec<u8>>,
}

fn corrupt_version(e: StoreError, stream: StreamId) -> Version {
    match e {
        StoreError::Corrupt { stream: s, version, .. } if s == stream => version,
        other => panic!("a damaged stream must answer Corrupt naming it, got {other:?}"),
    }
}

fn observe(store: &FsStore, stream: StreamId) -> Seen {
    let head = store.head(stream).map_err(|e| corrupt_version(e, stream));
    let damaged = !store.damaged().is_empty();
    assert_eq!(damaged, head.is_err(), "head is Corrupt exactly when the open reported damage");
    let bytes =
        |rs: Vec<ctxlog::store::StoredRecord>| rs.into_iter().map(|r| r.record.into_bytes()).collect::<Vec<_>>();
    let all = store.read(stream, 1, usize::MAX).map(bytes).map_err(|e| corrupt_version(e, stream));
    let mut readable = Vec::new();
    loop {
        let next = readable.len() as Version + 1;
        match store.read(stream, next, 1) {
            Ok(mut one) if one.len() == 1 => {
                let r = one.remove(0);
                assert_eq!(r.version, next, "read returned the wrong version");
                readable.push(r.record.into_bytes());
            }
            Ok(none) => {
                assert!(none.is_empty());
                break;
            }
            Err(e) => {
                let v = corrupt_version(e, stream);
                assert!(v >= next, "read from {next} names the earlier version {v}");
                break;
            }
        }
    }
    if let Ok(head) = head {
        let n = readable.len() as Version;
        match &all {
            Ok(records) => {
                assert_eq!(head.unwrap_or(0), n, "head disagrees with the records read");
                assert_eq!(records, &readable);
            }
            Err(v) => assert_eq!(*v, n + 1, "read(1, ∞) fails at the first unreadable record"),
        }
    }
    Seen { head, damaged, all, readable }
}

fn le32(b: &[u8], at: usize) -> Option<usize> {
    let s: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_le_bytes(s) as usize)
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = b.get_mut(at..at + 4) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Record ranges inside a payload if its layout holds (stream id and version not checked).
fn layout(payload: &[u8]) -> Option<(StreamId, Version, Vec<std::ops::Range<usize>>)> {
    let id: [u8; 16] = payload.get(..16)?.try_into().ok()?;
    let first = u64::from_le_bytes(payload.get(16..24)?.try_into().ok()?);
    let count = le32(payload, 24)?;
    if count == 0 {
        return None;
    }
    let mut at = 28;
    let mut out = Vec::new();
    for _ in 0..count {
        let n = le32(payload, at)?;
        let end = (at + 4).checked_add(n).filter(|&e| e <= payload.len())?;
        out.push(at + 4..end);
        at = end;
    }
    (at == payload.len()).then_some((StreamId(Uuid::from_bytes(id)), first, out))
}

fn fix_checksums(file: &mut [u8], reseal: bool, keep_torn: bool) {
    let mut pos = 0;
    while file.len() - pos >= OVERHEAD {
        let room = file.len() - pos - OVERHEAD;
        let claimed = le32(file, pos).unwrap_or(0);
        let len = if claimed <= room {
            claimed
        } else if keep_torn {
            claimed.min(MAX_PAYLOAD).max(room + 1)
        } else {
            room
        };
        let len32 = len as u32;
        put32(file, pos, len32);
        put32(file, pos + 4, crc32c::crc32c(&len32.to_le_bytes()));
        if len > room {
            return; // an incomplete last frame: a torn write
        }
        let payload = pos + HEADER..pos + HEADER + len;
        if reseal {
            if let Some((_, _, records)) = file.get(payload.clone()).and_then(layout) {
                for r in records {
                    let rec = &mut file[payload.start + r.start..payload.start + r.end];
                    if let Some(split) = rec.len().checked_sub(4) {
                        let crc = crc32c::crc32c(&rec[..split]);
                        rec[split..].copy_from_slice(&crc.to_le_bytes());
                    }
                }
            }
        }
        let crc = crc32c::crc32c_append(crc32c::crc32c(&len32.to_le_bytes()), &file[payload.clone()]) ^ CRC_XOR;
        put32(file, payload.end, crc);
        pos = payload.end + 4;
    }
}

/// What an independent reading of a checksum-fixed file predicts.
#[derive(Debug)]
struct Expected {
    /// Records of the whole, well-formed frames before the first problem.
    records: Vec<Vec<u8>>,
    end: End,
}

#[derive(Debug, PartialEq)]
enum End {
    /// The file ends right after a frame.
    Clean,
    /// A whole, checksum-valid frame with a wrong stream id, version or layout.
    BadFrame,
    /// Too few bytes for the frame that starts here.
    Torn,
}

fn predict(stream: StreamId, file: &[u8]) -> Expected {
    let mut records = Vec::new();
    let mut pos = 0;
    let end = loop {
        if pos == file.len() {
            break End::Clean;
        }
        let Some(len) = le32(file, pos).filter(|&l| file.len() - pos >= OVERHEAD + l) else { break End::Torn };
        let payload = &file[pos + HEADER..pos + HEADER + len];
        match layout(payload) {
            Some((s, first, rs)) if s == stream && first == records.len() as Version + 1 => {
                records.extend(rs.into_iter().map(|r| payload[r].to_vec()));
                pos += OVERHEAD + len;
            }
            _ => break End::BadFrame,
        }
    };
    Expected { records, end }
}

impl Expected {
    fn check(&self, seen: &Seen, repaired: bool) {
        let n = self.records.len() as Version;
        // Records are read in order until the first one whose seal fails.
        let sealed = self
            .records
            .iter()
            .take_while(|r| Record::from_stored(StreamId(Uuid::nil()), 1, (*r).clone()).is_ok())
            .count();
        assert_eq!(seen.readable, self.records[..sealed], "readable records differ from the prediction");
        match self.end {
            End::Clean => {
                assert!(!repaired && !seen.damaged, "a well-formed log was repaired or reported damaged");
                assert_eq!(seen.head, Ok((n > 0).then_some(n)));
            }
            End::BadFrame => {
                assert!(!repaired, "a whole, checksum-valid frame was cut as a torn write");
                assert_eq!(seen.head, Err(n + 1), "a bad frame is Corrupt at its first version");
            }
            // Whether a torn tail hiding a frame-shaped copy is cut or reported is the scan's
            // policy; either way nothing before it may be lost.
            End::Torn => match seen.head {
                Ok(h) => assert!(repaired && h.unwrap_or(0) == n, "torn tail: head {h:?}, {n} records before it"),
                Err(v) => assert_eq!(v, n + 1),
            },
        }
    }
}
