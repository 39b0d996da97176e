//! Byte-level recovery tests of the fs store (fjall `journal_truncation_*` style): cut a log
//! at every byte, append junk, damage any frame; check what `open` keeps, moves to a
//! quarantine file and refuses to touch. Only an incomplete final frame or an all-zero tail is
//! a torn write; every single-bit flip, the last frame included, is damage.

// Test helpers outside #[test] fns: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use ctxlog::store::{ExpectedVersion, Record, Store, StoreError, StreamId, Version};
use ctxlog_store_fs::{FsStore, TruncatedTail};

struct Log {
    stream: StreamId,
    bytes: Vec<u8>,
    /// (end offset, head) after each batch.
    batches: Vec<(u64, Version)>,
    records: Vec<Record>,
}

fn stream_file(dir: &Path, stream: StreamId) -> PathBuf {
    dir.join("streams").join(format!("{stream}.log"))
}

/// Writes 6 batches of 1–4 records of varying sizes and returns the file and its boundaries.
fn build_log() -> Log {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let stream = StreamId::random();
    let path = stream_file(dir.path(), stream);
    let mut batches = Vec::new();
    let mut records = Vec::new();
    for (b, count) in [1usize, 3, 2, 1, 4, 2].into_iter().enumerate() {
        let recs: Vec<Record> = (0..count)
            .map(|i| Record::seal(format!("batch {b} record {i} {}", "x".repeat(b * 7 + i)).into_bytes()))
            .collect();
        let head = store.append(stream, ExpectedVersion::Any, &recs).unwrap();
        records.extend(recs);
        batches.push((std::fs::metadata(&path).unwrap().len(), head));
    }
    drop(store);
    Log { stream, bytes: std::fs::read(&path).unwrap(), batches, records }
}

/// A store directory whose only stream file holds `bytes`.
fn dir_with(stream: StreamId, bytes: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    drop(FsStore::open(dir.path()).unwrap());
    std::fs::write(stream_file(dir.path(), stream), bytes).unwrap();
    dir
}

fn assert_prefix(store: &FsStore, log: &Log, head: Version) {
    assert_eq!(store.head(log.stream).unwrap(), (head > 0).then_some(head));
    let got = store.read(log.stream, 1, usize::MAX).unwrap();
    assert_eq!(got.len() as u64, head);
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.version, i as u64 + 1);
        assert_eq!(r.record, log.records[i]);
    }
}

#[test]
fn cut_at_every_byte_keeps_exactly_the_whole_batches_before_the_cut() {
    let log = build_log();
    let dir = tempfile::tempdir().unwrap();
    drop(FsStore::open(dir.path()).unwrap());
    let path = stream_file(dir.path(), log.stream);
    for cut in 0..=log.bytes.len() {
        std::fs::write(&path, &log.bytes[..cut]).unwrap();
        let (end, head) = log.batches.iter().rev().find(|(end, _)| *end as usize <= cut).copied().unwrap_or((0, 0));
        let store = FsStore::open(dir.path()).unwrap();
        assert!(store.damaged().is_empty(), "cut {cut}: {:?}", store.damaged());
        if cut as u64 == end {
            assert!(store.recovered().is_empty(), "cut {cut} is on a frame boundary");
        } else {
            let t = &store.recovered()[0];
            assert_eq!((t.stream, t.offset, t.bytes_dropped), (log.stream, end, cut as u64 - end), "cut {cut}");
            assert_quarantined(t, &log.bytes[end as usize..cut]);
            std::fs::remove_file(&t.quarantine).unwrap();
        }
        assert_prefix(&store, &log, head);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), end, "cut {cut}: file truncated to the last whole frame");
        drop(store);
    }
}

/// The cut bytes are kept, byte for byte, in `<log>.torn-<offset>` next to the log.
fn assert_quarantined(t: &TruncatedTail, cut: &[u8]) {
    let name = t.quarantine.file_name().unwrap().to_str().unwrap();
    assert_eq!(name, format!("{}.log.torn-{}", t.stream, t.offset));
    assert_eq!(t.quarantine.parent(), t.path.parent());
    assert_eq!(std::fs::read(&t.quarantine).unwrap(), cut, "the quarantine file holds exactly the cut bytes");
}

#[test]
fn after_recovery_appends_continue_and_reopen_is_clean() {
    let log = build_log();
    let (end3, head3) = log.batches[3];
    let dir = dir_with(log.stream, &log.bytes[..end3 as usize + 5]);
    let store = FsStore::open(dir.path()).unwrap();
    assert_eq!(store.recovered().len(), 1);
    assert_eq!(
        store.append(log.stream, ExpectedVersion::Exact(head3), &[Record::seal(b"new".to_vec())]).unwrap(),
        head3 + 1
    );
    drop(store);
    let store = FsStore::open(dir.path()).unwrap();
    assert!(store.recovered().is_empty());
    let all = store.read(log.stream, 1, usize::MAX).unwrap();
    assert_eq!(all.len() as u64, head3 + 1);
    assert_eq!(all.last().unwrap().record.body(), b"new");
}

#[test]
fn a_torn_tail_after_an_intact_log_is_moved_to_quarantine() {
    let log = build_log();
    let (_, head) = *log.batches.last().unwrap();
    let last_start = log.batches[log.batches.len() - 2].0 as usize;
    let mut pseudo_random = Vec::new();
    let mut x: u32 = 12345;
    for _ in 0..333 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        pseudo_random.push((x >> 16) as u8);
    }
    let junks: Vec<(&str, Vec<u8>)> = vec![
        ("one zero byte", vec![0]),
        ("zeros", vec![0; 100]),
        ("seven bytes, too short for a frame header", pseudo_random[..7].to_vec()),
        ("a frame header alone", log.bytes[last_start..last_start + 8].to_vec()),
        ("the last frame minus one byte", log.bytes[last_start..log.bytes.len() - 1].to_vec()),
        ("a frame header claiming 1 GiB", {
            let len = (1u32 << 30).to_le_bytes();
            let mut h = len.to_vec();
            h.extend_from_slice(&crc32c::crc32c(&len).to_le_bytes());
            h.extend_from_slice(b"short");
            h
        }),
    ];
    for (what, junk) in junks {
        let mut bytes = log.bytes.clone();
        bytes.extend_from_slice(&junk);
        let dir = dir_with(log.stream, &bytes);
        let store = FsStore::open(dir.path()).unwrap();
        assert!(store.damaged().is_empty(), "{what}");
        let t = store.recovered().first().unwrap_or_else(|| panic!("{what}: nothing truncated"));
        assert_eq!((t.offset, t.bytes_dropped), (log.bytes.len() as u64, junk.len() as u64), "{what}");
        assert_quarantined(t, &junk);
        assert_prefix(&store, &log, head);
        assert_eq!(std::fs::read(stream_file(dir.path(), log.stream)).unwrap(), log.bytes, "{what}");
    }
}

#[test]
fn garbage_after_an_intact_log_is_damage_not_a_torn_write() {
    // An append writes a whole frame with one `write`: a crash leaves a prefix of it, never
    // a full-length run of garbage.
    let log = build_log();
    let mut x: u32 = 777;
    let noise: Vec<u8> = (0..333)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 16) as u8
        })
        .collect();
    for (what, junk) in [("0xff", vec![0xffu8; 37]), ("pseudo-random", noise)] {
        let mut bytes = log.bytes.clone();
        bytes.extend_from_slice(&junk);
        eprintln!("{what}");
        assert_damaged_and_untouched(&log, bytes, log.batches.last().unwrap().1 + 1, log.bytes.len() as u64);
    }
}

#[test]
fn damaged_last_frame_is_corruption_not_a_torn_tail() {
    // Before: a bad checksum in the last frame was taken for a torn write and cut away by any
    // open, so one flipped bit in an imported session (one frame) erased the whole session.
    let log = build_log();
    let (prev_end, prev_head) = log.batches[log.batches.len() - 2];
    for at in [prev_end as usize, prev_end as usize + 5, (prev_end as usize + log.bytes.len()) / 2, log.bytes.len() - 1]
    {
        let mut bytes = log.bytes.clone();
        bytes[at] ^= 0x40;
        assert_damaged_and_untouched(&log, bytes, prev_head + 1, prev_end);
    }
}

#[test]
fn no_single_bit_flip_of_a_log_is_ever_repaired_away() {
    let log = build_log();
    let dir = tempfile::tempdir().unwrap();
    drop(FsStore::open(dir.path()).unwrap());
    let path = stream_file(dir.path(), log.stream);
    for bit in 0..log.bytes.len() * 8 {
        let mut bytes = log.bytes.clone();
        bytes[bit / 8] ^= 1 << (bit % 8);
        std::fs::write(&path, &bytes).unwrap();
        let store = FsStore::open(dir.path()).unwrap();
        assert!(store.recovered().is_empty(), "bit {bit}: a flip was taken for a torn write");
        let d = store.damaged().first().unwrap_or_else(|| panic!("bit {bit}: the flip went unnoticed"));
        assert!(matches!(store.head(log.stream), Err(StoreError::Corrupt { version, .. }) if version == d.version));
        drop(store);
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "bit {bit}: the file was modified");
    }
}

#[test]
fn a_read_only_open_leaves_a_torn_tail_in_place_and_reads_up_to_it() {
    let log = build_log();
    let (end3, head3) = log.batches[3];
    let cut = &log.bytes[..end3 as usize + 9];
    let dir = dir_with(log.stream, cut);
    let store = FsStore::open_read_only(dir.path()).unwrap();
    assert!(store.recovered().is_empty());
    let t = &store.torn_tails()[0];
    assert_eq!((t.stream, t.offset, t.bytes), (log.stream, end3, 9));
    assert_prefix(&store, &log, head3);
    let report = store.check_integrity().unwrap();
    assert!(report.problems.is_empty() && report.repairs.is_empty(), "{report:?}");
    assert!(report.notes[0].contains("torn write") && report.notes[0].contains(&log.stream.to_string()), "{report:?}");
    assert!(matches!(
        store.append(log.stream, ExpectedVersion::Any, &[Record::seal(b"x".to_vec())]),
        Err(StoreError::ReadOnly { operation: "append", .. })
    ));
    drop(store);
    assert_eq!(std::fs::read(stream_file(dir.path(), log.stream)).unwrap(), cut, "a reader changes nothing");
}

#[test]
fn a_repair_is_reported_by_every_later_integrity_check_until_its_file_is_removed() {
    let log = build_log();
    let (end2, _) = log.batches[2];
    let dir = dir_with(log.stream, &log.bytes[..end2 as usize + 20]);
    let repaired = FsStore::open(dir.path()).unwrap().recovered()[0].clone();
    for reopen in [FsStore::open(dir.path()).unwrap(), FsStore::open_read_only(dir.path()).unwrap()] {
        assert!(reopen.recovered().is_empty(), "the tail was already cut");
        let report = reopen.check_integrity().unwrap();
        assert_eq!(report.repairs.len(), 1, "{report:?}");
        let r = &report.repairs[0];
        assert!(r.contains(&repaired.quarantine.display().to_string()) && r.contains("20 bytes"), "{r}");
        assert!(r.contains(&format!("offset {end2}")) && r.contains(&log.stream.to_string()), "{r}");
    }
    std::fs::remove_file(&repaired.quarantine).unwrap();
    assert!(FsStore::open_read_only(dir.path()).unwrap().check_integrity().unwrap().repairs.is_empty());
}

#[test]
fn a_second_repair_at_the_same_offset_keeps_the_first_quarantine_file() {
    let log = build_log();
    let (end2, _) = log.batches[2];
    let dir = dir_with(log.stream, &log.bytes[..end2 as usize + 3]);
    let first = FsStore::open(dir.path()).unwrap().recovered()[0].clone();
    let path = stream_file(dir.path(), log.stream);
    std::fs::write(&path, &log.bytes[..end2 as usize + 11]).unwrap();
    let second = FsStore::open(dir.path()).unwrap().recovered()[0].clone();
    assert_ne!(first.quarantine, second.quarantine);
    assert_eq!(std::fs::read(&first.quarantine).unwrap(), &log.bytes[end2 as usize..end2 as usize + 3]);
    assert_eq!(std::fs::read(&second.quarantine).unwrap(), &log.bytes[end2 as usize..end2 as usize + 11]);
}

fn assert_damaged_and_untouched(log: &Log, bytes: Vec<u8>, bad_version: Version, bad_offset: u64) {
    let dir = dir_with(log.stream, &bytes);
    let store = FsStore::open(dir.path()).unwrap();
    assert!(store.recovered().is_empty(), "corruption must not be truncated");
    let d = &store.damaged()[0];
    assert_eq!((d.stream, d.version, d.offset), (log.stream, bad_version, bad_offset), "{}", d.detail);
    let corrupt = |r: Result<_, StoreError>| match r {
        Err(StoreError::Corrupt { stream, version, detail }) => {
            assert_eq!((stream, version), (log.stream, bad_version));
            assert!(detail.contains(".log") && detail.contains(&format!("offset {bad_offset}")), "{detail}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    };
    corrupt(store.head(log.stream).map(|_| ()));
    corrupt(store.read(log.stream, 1, usize::MAX).map(|_| ()));
    corrupt(store.append(log.stream, ExpectedVersion::Any, &[Record::seal(b"x".to_vec())]).map(|_| ()));
    // What lies before the damage is still readable, for a postmortem.
    let good = store.read(log.stream, 1, (bad_version - 1) as usize).unwrap();
    assert_eq!(good.len() as u64, bad_version - 1);
    assert_eq!(store.streams().unwrap(), [log.stream]);
    drop(store);
    let again = FsStore::open(dir.path()).unwrap();
    assert_eq!(again.damaged().len(), 1, "still damaged after a second open");
    drop(again);
    assert_eq!(std::fs::read(stream_file(dir.path(), log.stream)).unwrap(), bytes, "the file is never modified");
}

#[test]
fn corrupt_middle_frame_is_reported_and_never_repaired() {
    let log = build_log();
    // Frame 2 (third batch) spans batches[1].0 .. batches[2].0 and starts at version head1 + 1.
    let (start, head1) = log.batches[1];
    let end = log.batches[2].0;
    for (what, at) in
        [("payload", (start + end) as usize / 2), ("length", start as usize), ("trailer", end as usize - 1)]
    {
        let mut bytes = log.bytes.clone();
        bytes[at] ^= 0x01;
        eprintln!("damaging the {what} of frame 2");
        assert_damaged_and_untouched(&log, bytes, head1 + 1, start);
    }
}

#[test]
fn duplicated_frame_is_corruption_not_a_torn_tail() {
    // A checksum-valid frame at the wrong position cannot come from a crash mid-append.
    let log = build_log();
    let (last_start, _) = log.batches[log.batches.len() - 2];
    let mut bytes = log.bytes.clone();
    bytes.extend_from_slice(&log.bytes[last_start as usize..]);
    assert_damaged_and_untouched(&log, bytes, log.batches.last().unwrap().1 + 1, log.bytes.len() as u64);
}

#[test]
fn flipped_bit_in_a_live_store_is_found_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let s = StreamId::random();
    store.append(s, ExpectedVersion::Exact(0), &[Record::seal(b"aaaa".to_vec())]).unwrap();
    store.append(s, ExpectedVersion::Exact(1), &[Record::seal(b"bbbb".to_vec())]).unwrap();
    let path = stream_file(dir.path(), s);
    let mut bytes = std::fs::read(&path).unwrap();
    // Damage only the frame length word of frame 2: records are intact but framing is not.
    let first_len = bytes.len() / 2;
    bytes[first_len] ^= 0x02;
    std::fs::write(&path, &bytes).unwrap();
    match store.read(s, 1, usize::MAX) {
        Err(StoreError::Corrupt { version: 2, detail, .. }) => assert!(detail.contains("length word"), "{detail}"),
        other => panic!("{other:?}"),
    }
}
