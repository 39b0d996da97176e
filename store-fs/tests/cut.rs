//! A log cut short is damage, never a torn write: with the anchor (`streams/<uuid>.anchor`)
//! the store knows how far a stream was acknowledged, so any cut below that is reported,
//! left untouched by every open, and refused by a writer's open unless it accepts the loss.
//! Bytes beyond the anchored head stay a torn write. (`recovery.rs` tests the frame rules on
//! logs without an anchor, as stores written before anchors hold.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ctxlog::store::{ExpectedVersion, Record, Snapshot, Store, StoreError, StreamId, Version};
use ctxlog_store_fs::{FsOptions, FsStore};

/// A store of one stream written in 6 batches, the end offset and head after each.
struct Fixture {
    dir: tempfile::TempDir,
    stream: StreamId,
    batches: Vec<(u64, Version)>,
    records: Vec<Record>,
}

fn log_path(dir: &Path, s: StreamId) -> PathBuf {
    dir.join("streams").join(format!("{s}.log"))
}

fn anchor_path(dir: &Path, s: StreamId) -> PathBuf {
    dir.join("streams").join(format!("{s}.anchor"))
}

fn build() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let stream = StreamId::random();
    let mut batches = Vec::new();
    let mut records = Vec::new();
    for (b, count) in [1usize, 3, 2, 1, 4, 2].into_iter().enumerate() {
        let recs: Vec<Record> = (0..count)
            .map(|i| Record::seal(format!("batch {b} record {i} {}", "y".repeat(b * 5 + i)).into()))
            .collect();
        let head = store.append(stream, ExpectedVersion::Any, &recs).unwrap();
        records.extend(recs);
        batches.push((std::fs::metadata(log_path(dir.path(), stream)).unwrap().len(), head));
    }
    Fixture { dir, stream, batches, records }
}

fn copy(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for sub in ["", "streams", "snapshots", "blobs", "tmp"] {
        std::fs::create_dir_all(to.path().join(sub)).unwrap();
        let Ok(entries) = std::fs::read_dir(from.join(sub)) else { continue };
        for e in entries {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), to.path().join(sub).join(e.file_name())).unwrap();
            }
        }
    }
    to
}

fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for sub in ["", "streams", "snapshots"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                out.insert(e.path(), std::fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

fn cut(path: &Path, len: u64) {
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len).unwrap();
}

fn accept() -> FsOptions {
    FsOptions { accept_loss: true, ..FsOptions::default() }
}

/// The last whole batch at or before byte `at` of the log.
fn head_at(fx: &Fixture, at: u64) -> (u64, Version) {
    fx.batches.iter().rev().find(|(end, _)| *end <= at).copied().unwrap_or((0, 0))
}

#[test]
fn a_cut_anywhere_below_the_anchor_is_reported_by_readers_and_refused_by_writers() {
    let fx = build();
    let full = fx.batches.last().unwrap().0;
    let acked = fx.batches.last().unwrap().1;
    let mut tried = 0;
    for at in 0..full {
        let dir = copy(fx.dir.path());
        let log = log_path(dir.path(), fx.stream);
        cut(&log, at);
        let before = files(dir.path());
        let (end, head) = head_at(&fx, at);
        let reader = FsStore::open_read_only(dir.path()).unwrap();
        let d = reader.damaged().first().unwrap_or_else(|| panic!("cut at {at}: not reported"));
        assert!(d.acceptable, "cut at {at}: {d:?}");
        assert_eq!((d.stream, d.version, d.offset), (fx.stream, head + 1, end), "cut at {at}");
        assert!(d.detail.contains(&format!("versions {}..={acked}", head + 1)), "cut at {at}: {}", d.detail);
        assert!(d.detail.contains(&log.display().to_string()), "{}", d.detail);
        assert!(reader.torn_tails().is_empty(), "cut at {at}: the cut was taken for a torn write");
        assert!(matches!(reader.head(fx.stream), Err(StoreError::Corrupt { version, .. }) if version == head + 1));
        assert!(matches!(reader.read(fx.stream, 1, usize::MAX), Err(StoreError::Corrupt { .. })));
        assert_eq!(reader.streams().unwrap(), [fx.stream], "a damaged stream is still listed");
        // What is left stays readable, for a postmortem.
        let left = reader.read(fx.stream, 1, head as usize).unwrap();
        assert_eq!(left.iter().map(|r| r.record.clone()).collect::<Vec<_>>(), fx.records[..head as usize]);
        drop(reader);
        match FsStore::open(dir.path()) {
            Err(StoreError::Corrupt { stream, version, detail }) => {
                assert_eq!((stream, version), (fx.stream, head + 1), "cut at {at}");
                assert!(detail.contains("--accept-loss") && detail.contains("missing"), "{detail}");
            }
            other => panic!("cut at {at}: a writer's open gave {other:?}"),
        }
        assert_eq!(files(dir.path()), before, "cut at {at}: an open changed a file");
        tried += 1;
    }
    assert_eq!(tried, full);
}

#[test]
fn bytes_beyond_the_anchor_are_a_torn_write_and_a_writer_moves_them_aside() {
    // What a crash in the middle of the 6th append leaves: the anchor still at batch 5, a part
    // of the 6th frame after it.
    let fx = build();
    let (end5, head5) = fx.batches[4];
    let full = fx.batches[5].0;
    let frame6 = std::fs::read(log_path(fx.dir.path(), fx.stream)).unwrap()[end5 as usize..].to_vec();
    // The anchor as it was after batch 5: a store holding only the first 5 batches.
    let five = tempfile::tempdir().unwrap();
    {
        let store = FsStore::open(five.path()).unwrap();
        let mut v = 0;
        for &(_, head) in &fx.batches[..5] {
            let recs = &fx.records[v as usize..head as usize];
            store.append(fx.stream, ExpectedVersion::Exact(v), recs).unwrap();
            v = head;
        }
    }
    for part in 1..frame6.len() as u64 {
        let dir = copy(five.path());
        let log = log_path(dir.path(), fx.stream);
        let mut bytes = std::fs::read(&log).unwrap();
        bytes.extend_from_slice(&frame6[..part as usize]);
        std::fs::write(&log, &bytes).unwrap();
        let reader = FsStore::open_read_only(dir.path()).unwrap();
        assert!(reader.damaged().is_empty(), "part {part}: {:?}", reader.damaged());
        assert_eq!(reader.torn_tails().len(), 1, "part {part}");
        assert_eq!(reader.head(fx.stream).unwrap(), Some(head5));
        drop(reader);
        let writer = FsStore::open(dir.path()).unwrap();
        let t = &writer.recovered()[0];
        assert_eq!((t.offset, t.bytes_dropped), (end5, part), "part {part}");
        assert_eq!(writer.head(fx.stream).unwrap(), Some(head5));
    }
    assert!(full > end5);
}

#[test]
fn accepting_the_loss_quarantines_the_tail_records_it_and_goes_on() {
    let fx = build();
    let (end3, head3) = fx.batches[2];
    let dir = copy(fx.dir.path());
    let log = log_path(dir.path(), fx.stream);
    let original = std::fs::read(&log).unwrap();
    cut(&log, end3 + 7);
    let store = FsStore::open_with(dir.path(), accept()).unwrap();
    let loss = &store.accepted_losses()[0];
    assert_eq!((loss.stream, loss.from, loss.to), (fx.stream, head3 + 1, Some(fx.batches[5].1)));
    let record = std::fs::read_to_string(&loss.record).unwrap();
    assert!(record.contains("cut short") && record.contains(&fx.stream.to_string()), "{record}");
    let t = &store.recovered()[0];
    assert_eq!(std::fs::read(&t.quarantine).unwrap(), &original[end3 as usize..end3 as usize + 7]);
    assert!(store.damaged().is_empty());
    assert_eq!(store.head(fx.stream).unwrap(), Some(head3));
    assert_eq!(
        store.append(fx.stream, ExpectedVersion::Exact(head3), &[Record::seal(b"after".to_vec())]).unwrap(),
        head3 + 1
    );
    drop(store);
    // Clean from now on, but the loss is reported until its record is removed.
    let again = FsStore::open(dir.path()).unwrap();
    assert!(again.damaged().is_empty() && again.accepted_losses().is_empty());
    let report = again.check_integrity().unwrap();
    assert!(report.repairs.iter().any(|r| r.contains("accepted the loss") && r.contains(".lost-")), "{report:?}");
    drop(again);
    std::fs::remove_file(loss_record(dir.path())).unwrap();
    let t = store_quarantine(dir.path());
    std::fs::remove_file(t).unwrap();
    assert!(FsStore::open_read_only(dir.path()).unwrap().check_integrity().unwrap().repairs.is_empty());
}

fn loss_record(dir: &Path) -> PathBuf {
    find(dir, ".lost-")
}

fn store_quarantine(dir: &Path) -> PathBuf {
    find(dir, ".torn-")
}

fn find(dir: &Path, part: &str) -> PathBuf {
    std::fs::read_dir(dir.join("streams"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().contains(part))
        .unwrap_or_else(|| panic!("no {part} file"))
}

#[test]
fn a_log_deleted_or_emptied_beside_its_anchor_is_damage() {
    let fx = build();
    let acked = fx.batches[5].1;
    for emptied in [true, false] {
        let dir = copy(fx.dir.path());
        let log = log_path(dir.path(), fx.stream);
        if emptied {
            cut(&log, 0);
        } else {
            std::fs::remove_file(&log).unwrap();
        }
        let reader = FsStore::open_read_only(dir.path()).unwrap();
        assert_eq!(reader.streams().unwrap(), [fx.stream], "emptied {emptied}");
        let d = &reader.damaged()[0];
        assert!(d.detail.contains(&format!("versions 1..={acked}")), "{}", d.detail);
        assert!(matches!(reader.head(fx.stream), Err(StoreError::Corrupt { version: 1, .. })));
        assert!(matches!(FsStore::open(dir.path()), Err(StoreError::Corrupt { version: 1, .. })));
    }
}

#[test]
fn the_anchor_has_its_own_torn_write_rule() {
    let fx = build();
    let anchor = anchor_path(fx.dir.path(), fx.stream);
    let bytes = std::fs::read(&anchor).unwrap();
    assert_eq!(bytes.len(), 128);
    // Losing either slot (as a torn update of it would) leaves the other: the latest anchor,
    // or the one a batch behind, whose update was torn and so never acknowledged. The log is
    // then longer than the anchor, which is fine.
    for slot in [0usize, 1] {
        for garble in [0u8, 0xff] {
            let dir = copy(fx.dir.path());
            let mut b = bytes.clone();
            b[slot * 64..slot * 64 + 64].fill(garble);
            std::fs::write(anchor_path(dir.path(), fx.stream), &b).unwrap();
            let reader = FsStore::open_read_only(dir.path()).unwrap();
            assert!(reader.damaged().is_empty(), "slot {slot}: {:?}", reader.damaged());
            assert_eq!(reader.head(fx.stream).unwrap(), Some(fx.batches[5].1));
            drop(reader);
            let writer = FsStore::open(dir.path()).unwrap();
            writer.append(fx.stream, ExpectedVersion::Exact(fx.batches[5].1), &[Record::seal(b"z".to_vec())]).unwrap();
        }
    }
    // The slots take turns: whichever one is lost, the other holds the batch before, so a cut
    // below that is still reported.
    let mut anchored = Vec::new();
    for slot in [0usize, 1] {
        let dir = copy(fx.dir.path());
        let mut b = bytes.clone();
        b[slot * 64 + 30] ^= 0x10;
        std::fs::write(anchor_path(dir.path(), fx.stream), &b).unwrap();
        cut(&log_path(dir.path(), fx.stream), fx.batches[3].0);
        let reader = FsStore::open_read_only(dir.path()).unwrap();
        let d = reader.damaged().first().unwrap_or_else(|| panic!("slot {slot} lost: a cut went unnoticed"));
        anchored.push(d.detail.split("..=").nth(1).unwrap().split(' ').next().unwrap().to_owned());
    }
    anchored.sort();
    let expected = [fx.batches[4].1.to_string(), fx.batches[5].1.to_string()];
    assert_eq!(anchored, expected, "one slot holds the last anchor, the other the one before");
    // No slot checks out, or a file of the wrong size: no crash leaves that.
    for (what, b) in
        [("both slots zero", vec![0u8; 128]), ("cut to 64 bytes", bytes[..64].to_vec()), ("empty", Vec::new())]
    {
        let dir = copy(fx.dir.path());
        std::fs::write(anchor_path(dir.path(), fx.stream), &b).unwrap();
        let reader = FsStore::open_read_only(dir.path()).unwrap();
        let d = reader.damaged().first().unwrap_or_else(|| panic!("{what}: not reported"));
        assert!(d.acceptable && d.detail.contains("anchor"), "{what}: {}", d.detail);
        drop(reader);
        assert!(matches!(FsStore::open(dir.path()), Err(StoreError::Corrupt { .. })), "{what}");
        let accepted = FsStore::open_with(dir.path(), accept()).unwrap();
        assert_eq!(accepted.accepted_losses()[0].to, None, "{what}");
        assert_eq!(accepted.head(fx.stream).unwrap(), Some(fx.batches[5].1), "{what}: nothing cut");
    }
}

#[test]
fn a_log_replaced_by_other_bytes_of_the_same_shape_is_damage() {
    let fx = build();
    let dir = copy(fx.dir.path());
    // Another stream file with the same batches but one other record in the last frame.
    let other = tempfile::tempdir().unwrap();
    {
        let store = FsStore::open(other.path()).unwrap();
        let mut v = 0;
        for (i, &(_, head)) in fx.batches.iter().enumerate() {
            let mut recs = fx.records[v as usize..head as usize].to_vec();
            if i == 5 {
                let last = recs.len() - 1;
                let mut body = recs[last].body().to_vec();
                body[0] ^= 1;
                recs[last] = Record::seal(body);
            }
            store.append(fx.stream, ExpectedVersion::Exact(v), &recs).unwrap();
            v = head;
        }
    }
    std::fs::copy(log_path(other.path(), fx.stream), log_path(dir.path(), fx.stream)).unwrap();
    let reader = FsStore::open_read_only(dir.path()).unwrap();
    let d = &reader.damaged()[0];
    assert!(!d.acceptable && d.detail.contains("hash"), "{}", d.detail);
    assert_eq!(d.version, fx.batches[5].1);
}

#[test]
fn a_snapshot_beyond_the_log_is_damage_even_without_an_anchor() {
    let fx = build();
    let (end3, head3) = fx.batches[2];
    {
        let store = FsStore::open(fx.dir.path()).unwrap();
        store.put_snapshot(fx.stream, &Snapshot::seal(fx.batches[4].1, b"state".to_vec())).unwrap();
    }
    let dir = copy(fx.dir.path());
    std::fs::remove_file(anchor_path(dir.path(), fx.stream)).unwrap();
    cut(&log_path(dir.path(), fx.stream), end3);
    let reader = FsStore::open_read_only(dir.path()).unwrap();
    let d = &reader.damaged()[0];
    assert_eq!(d.version, head3 + 1);
    assert!(d.detail.contains("snapshot") && d.detail.contains(&format!("..={}", fx.batches[4].1)), "{}", d.detail);
    drop(reader);
    assert!(matches!(FsStore::open(dir.path()), Err(StoreError::Corrupt { .. })));
    // Accepting the loss moves the snapshot aside (a snapshot beyond the log is never used).
    let store = FsStore::open_with(dir.path(), accept()).unwrap();
    assert_eq!(store.get_snapshot(fx.stream).unwrap(), None);
    let record = std::fs::read_to_string(&store.accepted_losses()[0].record).unwrap();
    assert!(record.contains(".snap.lost-"), "{record}");
}

#[test]
fn a_store_written_before_anchors_opens_and_its_first_writer_anchors_it() {
    let fx = build();
    let dir = copy(fx.dir.path());
    std::fs::remove_file(anchor_path(dir.path(), fx.stream)).unwrap();
    let head = fx.batches[5].1;
    let reader = FsStore::open_read_only(dir.path()).unwrap();
    assert!(reader.damaged().is_empty());
    assert_eq!(reader.head(fx.stream).unwrap(), Some(head));
    let report = reader.check_integrity().unwrap();
    assert!(report.problems.is_empty() && report.notes.iter().any(|n| n.contains("no anchor")), "{report:?}");
    drop(reader);
    assert!(!anchor_path(dir.path(), fx.stream).exists(), "a reader creates nothing");
    drop(FsStore::open(dir.path()).unwrap());
    assert!(anchor_path(dir.path(), fx.stream).exists(), "the writer anchored the stream");
    // From now on a cut is damage.
    cut(&log_path(dir.path(), fx.stream), fx.batches[4].0 + 3);
    assert!(matches!(FsStore::open(dir.path()), Err(StoreError::Corrupt { .. })));
}

#[test]
fn a_refused_writers_open_repairs_nothing_in_any_stream() {
    // Two streams: one with a torn tail beyond its anchor (a repair a writer would make), one
    // cut below its anchor. The open refuses before it touches either.
    let fx = build();
    let dir = copy(fx.dir.path());
    // Sorts before any random stream id, so an open that repaired as it went would reach it first.
    let other: StreamId = "00000000-0000-4000-8000-000000000001".parse().unwrap();
    {
        let store = FsStore::open(dir.path()).unwrap();
        store.append(other, ExpectedVersion::Exact(0), &[Record::seal(b"other".to_vec())]).unwrap();
    }
    let other_log = log_path(dir.path(), other);
    let mut bytes = std::fs::read(&other_log).unwrap();
    bytes.extend_from_slice(&[1, 2, 3]);
    std::fs::write(&other_log, &bytes).unwrap();
    cut(&log_path(dir.path(), fx.stream), fx.batches[4].0 + 2);
    let before = files(dir.path());
    assert!(matches!(FsStore::open(dir.path()), Err(StoreError::Corrupt { stream, .. }) if stream == fx.stream));
    assert_eq!(files(dir.path()), before, "the refused open repaired something");
}

/// `kill -9` in the middle of an append: what is left of its frame lies beyond the anchor, so
/// it is a torn write, and the next writer's open moves it aside and reports no damage. The
/// child (this test binary re-run) acknowledges small batches, then writes one 48 MiB frame;
/// the kill comes as soon as that frame starts to reach the file.
#[cfg(unix)]
#[test]
fn a_kill_in_the_middle_of_an_append_leaves_a_torn_write_beyond_the_anchor() {
    use std::io::BufRead;
    // This binary re-executes this test as the writer the parent kills (as tests/crash.rs does).
    if let Some(dir) = std::env::var_os("CTXLOG_CUT_CHILD") {
        append_until_killed(Path::new(&dir));
    }
    let exe = std::env::current_exe().unwrap();
    let (mut torn_seen, mut attempts) = (0, 0);
    for attempt in 0..20u64 {
        attempts += 1;
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new(&exe)
            .args([
                "--exact",
                "a_kill_in_the_middle_of_an_append_leaves_a_torn_write_beyond_the_anchor",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CTXLOG_CUT_CHILD", dir.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut acked = 0;
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some(v) = line.strip_prefix("acked ") {
                acked = v.trim().parse().unwrap();
            }
            if line.starts_with("big") {
                break;
            }
        }
        // Kill as soon as the big frame starts to reach the file (the kernel grows the file
        // page by page inside the one `write`), or after a growing delay.
        let log = log_path(dir.path(), CHILD_STREAM.parse().unwrap());
        let small = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        let since = std::time::Instant::now();
        let wait = std::time::Duration::from_millis(200 + attempt * 20);
        while since.elapsed() < wait && std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) == small {
            std::thread::yield_now();
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let store = FsStore::open(dir.path()).unwrap_or_else(|e| panic!("attempt {attempt}: {e}"));
        assert!(store.damaged().is_empty(), "attempt {attempt}: {:?}", store.damaged());
        let stream: StreamId = CHILD_STREAM.parse().unwrap();
        let head = store.head(stream).unwrap().unwrap();
        // The big append may have been acknowledged just before the kill, never lost after.
        assert!(head == acked || head == acked + 1, "attempt {attempt}: head {head}, acknowledged {acked}");
        assert_eq!(store.read(stream, 1, usize::MAX).unwrap().len() as u64, head);
        if let Some(t) = store.recovered().first() {
            torn_seen += 1;
            assert_eq!(head, acked, "a torn write is of the unacknowledged append");
            assert!(t.bytes_dropped > 0 && std::fs::metadata(&t.quarantine).is_ok());
            let report = store.check_integrity().unwrap();
            assert!(report.problems.is_empty() && report.repairs.len() == 1, "{report:?}");
        }
        if torn_seen >= 5 {
            break;
        }
    }
    println!("{torn_seen} kills of {attempts} landed inside the write");
    assert!(torn_seen > 0, "no kill landed inside the write");
}

const CHILD_STREAM: &str = "00000000-0000-4000-8000-0000000c0de9";

/// The child: small acknowledged appends, then one 48 MB append the parent kills mid-write.
fn append_until_killed(dir: &Path) -> ! {
    let store = FsStore::open(dir).unwrap();
    let stream: StreamId = CHILD_STREAM.parse().unwrap();
    let mut head = 0;
    for i in 0..5u8 {
        head = store.append(stream, ExpectedVersion::Exact(head), &[Record::seal(vec![i; 100])]).unwrap();
        println!("acked {head}");
    }
    println!("big");
    let big = Record::seal(vec![7u8; 48 << 20]);
    head = store.append(stream, ExpectedVersion::Exact(head), &[big]).unwrap();
    println!("acked {head}");
    std::thread::sleep(std::time::Duration::from_secs(60));
    std::process::exit(0)
}
