//! sled-specific behaviour of `SledStore::open` and of the chunking.

// Test helpers outside #[test] fns: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use ctxlog::store::{ExpectedVersion, Record, Store, StoreError, StreamId};
use ctxlog_store_sled::{SledStore, CHUNK};

#[test]
fn second_open_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let first = SledStore::open(dir.path()).unwrap();
    let e = SledStore::open(dir.path()).unwrap_err();
    assert!(matches!(e, StoreError::Locked { backend: "sled", .. }), "{e}");
    drop(first);
    SledStore::open(dir.path()).expect("the lock is released on drop");
}

#[test]
fn other_schema_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(SledStore::open(dir.path()).unwrap());
    {
        let db = sled::open(dir.path()).unwrap();
        db.open_tree("meta").unwrap().insert("schema", &2u64.to_le_bytes()).unwrap();
        db.flush().unwrap();
    }
    let e = SledStore::open(dir.path()).unwrap_err();
    assert!(matches!(e, StoreError::Schema { backend: "sled", found: 2, supported: 1, .. }), "{e}");
}

#[test]
fn no_sled_value_exceeds_the_chunk_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    {
        let store = SledStore::open(&path).unwrap();
        let s = StreamId::random();
        let big = vec![0xA5u8; 3 * CHUNK + 17];
        store.append(s, ExpectedVersion::Exact(0), &[Record::seal(big.clone())]).unwrap();
        store.put_blob(&big).unwrap();
        store.put_snapshot(s, &ctxlog::store::Snapshot::seal(1, big)).unwrap();
    }
    let db = sled::open(&path).unwrap();
    for name in ["records", "blobs", "snapshots"] {
        let tree = db.open_tree(name).unwrap();
        let largest = tree.iter().map(|kv| kv.unwrap().1.len()).max().unwrap();
        assert!(largest <= CHUNK, "{name}: value of {largest} bytes");
    }
}

/// sled writes any *node* that serialises above ~128 KiB (segment_size / 4) to a file under
/// `blobs/` that it never fsyncs. Leaves split at 16 entries, so the chunk size must keep 16+
/// chunks well below that; this checks no such file appears for large values.
#[test]
fn large_values_never_reach_sled_blob_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let store = SledStore::open(&path).unwrap();
        let s = StreamId::random();
        for i in 0..3u8 {
            let big = vec![i; 10 << 20];
            store.put_blob(&big).unwrap();
            store.append(s, ExpectedVersion::Any, &[Record::seal(big[..1 << 20].to_vec())]).unwrap();
            store.put_snapshot(s, &ctxlog::store::Snapshot::seal(u64::from(i) + 1, big[..2 << 20].to_vec())).unwrap();
        }
    }
    drop(SledStore::open(&path).unwrap());
    let files = std::fs::read_dir(path.join("blobs")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(files, 0, "sled wrote unsynced blob files");
}

/// sled's IO threads keep its lock for a moment after the last handle is dropped; dropping a
/// `SledStore` waits for that, so reopening right away never sees `Locked`.
#[test]
fn drop_then_reopen_is_never_locked() {
    let dir = tempfile::tempdir().unwrap();
    let s = StreamId::random();
    for i in 0..60u64 {
        let store = SledStore::open(dir.path()).unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        store.append(s, ExpectedVersion::Exact(i), &[Record::seal(vec![7; 5000])]).unwrap();
    }
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn contents(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(contents(&e.path()));
        } else {
            out.push((e.path(), std::fs::read(e.path()).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn a_read_only_open_reads_a_copy_changes_nothing_and_works_next_to_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let s = StreamId::random();
    {
        let store = SledStore::open(dir.path()).unwrap();
        store.append(s, ExpectedVersion::Exact(0), &[Record::seal(b"one".to_vec())]).unwrap();
    }
    let before = contents(dir.path());
    {
        let reader = SledStore::open_read_only(dir.path()).unwrap();
        assert!(reader.is_read_only());
        assert_eq!(reader.head(s).unwrap(), Some(1));
        assert!(matches!(
            reader.append(s, ExpectedVersion::Any, &[Record::seal(b"x".to_vec())]),
            Err(StoreError::ReadOnly { backend: "sled", .. })
        ));
        assert!(matches!(reader.put_blob(b"x"), Err(StoreError::ReadOnly { .. })));
    }
    assert_eq!(contents(dir.path()), before, "a read-only open changed the store");
    let writer = SledStore::open(dir.path()).unwrap();
    writer.append(s, ExpectedVersion::Exact(1), &[Record::seal(b"two".to_vec())]).unwrap();
    let reader = SledStore::open_read_only(dir.path()).expect("readers need no lock");
    assert_eq!(reader.head(s).unwrap(), Some(2));
}

#[test]
fn a_read_only_open_of_a_missing_store_is_missing_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let nope = dir.path().join("nope");
    assert!(matches!(SledStore::open_read_only(&nope), Err(StoreError::Missing { backend: "sled", .. })));
    assert!(!nope.exists());
}

#[test]
fn damaged_conf_is_damage_naming_the_directory_and_saying_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    drop(SledStore::open(dir.path()).unwrap());
    let conf = dir.path().join("conf");
    let mut bytes = std::fs::read(&conf).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&conf, &bytes).unwrap();
    let e = SledStore::open_read_only(dir.path()).unwrap_err();
    match &e {
        StoreError::Damaged { backend: "sled", location, detail } => {
            assert_eq!(location, &dir.path().display().to_string());
            assert!(detail.contains("backup"), "{detail}");
        }
        other => panic!("expected Damaged, got {other}"),
    }
}

/// What a flipped bit early in sled's log does: sled's recovery stops there and everything
/// written after it is gone from every tree at once. Simulated by putting the head mirror of
/// a later state next to an earlier state of sled's files.
#[test]
fn versions_sled_lost_are_corrupt_not_a_shorter_stream() {
    let dir = tempfile::tempdir().unwrap();
    let early = tempfile::tempdir().unwrap();
    let s = StreamId::random();
    {
        let store = SledStore::open(dir.path()).unwrap();
        for i in 0..10u64 {
            store.append(s, ExpectedVersion::Exact(i), &[Record::seal(format!("r{i}").into_bytes())]).unwrap();
            if i == 4 {
                copy_dir(dir.path(), early.path());
            }
        }
    }
    std::fs::copy(dir.path().join("ctxlog.heads"), early.path().join("ctxlog.heads")).unwrap();
    for store in [SledStore::open_read_only(early.path()).unwrap(), SledStore::open(early.path()).unwrap()] {
        for r in [
            store.head(s).map(|_| ()),
            store.read(s, 1, 100).map(|_| ()),
            store.append(s, ExpectedVersion::Exact(5), &[Record::seal(b"x".to_vec())]).map(|_| ()),
        ] {
            match r {
                Err(StoreError::Corrupt { stream, version: 6, detail }) => {
                    assert_eq!(stream, s);
                    assert!(
                        detail.contains("version 10 was acknowledged") && detail.contains("ctxlog.heads"),
                        "{detail}"
                    );
                }
                Err(StoreError::ReadOnly { .. }) if store.is_read_only() => {}
                other => panic!("expected Corrupt at version 6, got {other:?}"),
            }
        }
        assert_eq!(store.read(s, 1, 5).unwrap().len(), 5, "what is left stays readable");
        assert_eq!(store.streams().unwrap(), [s]);
    }
}

/// sled holding as many versions as the mirror says, but another last record than the one
/// acknowledged (what a recovery that lost the last write and a later write under the same
/// head would leave): the head alone cannot tell, the mirror's hash of the last record must.
/// Simulated by copying a store, writing a different fifth record into each copy and putting
/// the first one's mirror next to the second one's files.
#[test]
fn a_last_record_replaced_under_the_same_head_is_corrupt() {
    let acked = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let s = StreamId::random();
    {
        let store = SledStore::open(acked.path()).unwrap();
        for i in 0..4u64 {
            store.append(s, ExpectedVersion::Exact(i), &[Record::seal(format!("r{i}").into_bytes())]).unwrap();
        }
    }
    copy_dir(acked.path(), other.path());
    for (dir, last) in [(&acked, "r4"), (&other, "x4")] {
        let store = SledStore::open(dir.path()).unwrap();
        store.append(s, ExpectedVersion::Exact(4), &[Record::seal(last.as_bytes().to_vec())]).unwrap();
    }
    std::fs::copy(acked.path().join("ctxlog.heads"), other.path().join("ctxlog.heads")).unwrap();
    for store in [SledStore::open_read_only(other.path()).unwrap(), SledStore::open(other.path()).unwrap()] {
        for r in [
            store.head(s).map(|_| ()),
            store.read(s, 1, 100).map(|_| ()),
            store.append(s, ExpectedVersion::Exact(5), &[Record::seal(b"x".to_vec())]).map(|_| ()),
        ] {
            match r {
                Err(StoreError::Corrupt { stream, version: 5, detail }) => {
                    assert_eq!(stream, s);
                    assert!(
                        detail.contains("record at version 5 is not the one") && detail.contains("ctxlog.heads"),
                        "{detail}"
                    );
                }
                Err(StoreError::ReadOnly { .. }) if store.is_read_only() => {}
                other => panic!("expected Corrupt at version 5, got {other:?}"),
            }
        }
    }
    // The store that holds what was acknowledged opens clean with the same mirror.
    let store = SledStore::open_read_only(acked.path()).unwrap();
    assert_eq!(store.head(s).unwrap(), Some(5));
    assert_eq!(store.read(s, 5, 1).unwrap()[0].record.body(), b"r4");
}

#[test]
fn a_damaged_mirror_slot_is_reported_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = StreamId::random();
    {
        let store = SledStore::open(dir.path()).unwrap();
        store.append(s, ExpectedVersion::Exact(0), &[Record::seal(b"r".to_vec())]).unwrap();
    }
    let path = dir.path().join("ctxlog.heads");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[30] ^= 0x04;
    std::fs::write(&path, &bytes).unwrap();
    let report = SledStore::open_read_only(dir.path()).unwrap().check_integrity().unwrap();
    assert!(report.problems.iter().any(|p| p.contains("ctxlog.heads") && p.contains("checksum")), "{report:?}");
}

#[test]
fn a_store_written_before_the_mirror_gets_one_from_its_first_writer() {
    let dir = tempfile::tempdir().unwrap();
    let s = StreamId::random();
    {
        let store = SledStore::open(dir.path()).unwrap();
        store
            .append(s, ExpectedVersion::Exact(0), &[Record::seal(b"a".to_vec()), Record::seal(b"b".to_vec())])
            .unwrap();
    }
    std::fs::remove_file(dir.path().join("ctxlog.heads")).unwrap();
    let report = SledStore::open_read_only(dir.path()).unwrap().check_integrity().unwrap();
    assert!(report.problems.is_empty() && report.notes.iter().any(|n| n.contains("no ctxlog.heads")), "{report:?}");
    drop(SledStore::open(dir.path()).unwrap());
    assert_eq!(std::fs::metadata(dir.path().join("ctxlog.heads")).unwrap().len(), 64);
    let report = SledStore::open_read_only(dir.path()).unwrap().check_integrity().unwrap();
    assert!(!report.notes.iter().any(|n| n.contains("no ctxlog.heads")), "{report:?}");
}
