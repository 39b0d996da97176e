//! fs-specific behaviour of `FsStore::open`: the lock, the format file, the layout.

use ctxlog::store::{ExpectedVersion, Record, Store, StoreError, StreamId};
use ctxlog_store_fs::FsStore;

#[test]
fn second_open_of_a_directory_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let first = FsStore::open(dir.path()).unwrap();
    let e = FsStore::open(dir.path()).unwrap_err();
    match &e {
        StoreError::Locked { backend: "fs", location, detail } => {
            assert_eq!(location, &dir.path().display().to_string());
            assert!(detail.contains("LOCK") && detail.contains(&format!("pid {}", std::process::id())), "{detail}");
        }
        other => panic!("expected Locked, got {other}"),
    }
    drop(first);
    FsStore::open(dir.path()).expect("the lock is released on drop");
}

#[test]
fn other_format_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(FsStore::open(dir.path()).unwrap());
    std::fs::write(dir.path().join("FORMAT"), "ctxlog-fs 9\n").unwrap();
    let e = FsStore::open(dir.path()).unwrap_err();
    assert!(matches!(e, StoreError::Schema { backend: "fs", found: 9, supported: 1, .. }), "{e}");
}

#[test]
fn foreign_non_empty_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    let e = FsStore::open(dir.path()).unwrap_err();
    assert!(e.to_string().contains("not a ctxlog fs store"), "{e}");
}

#[test]
fn layout_matches_the_docs() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let s = StreamId::random();
    store.append(s, ExpectedVersion::Exact(0), &[Record::seal(b"x".to_vec())]).unwrap();
    store.put_snapshot(s, &ctxlog::store::Snapshot::seal(1, b"snap".to_vec())).unwrap();
    let id = store.put_blob(b"blob").unwrap();
    let root = dir.path();
    assert_eq!(std::fs::read_to_string(root.join("FORMAT")).unwrap(), "ctxlog-fs 1\n");
    assert!(root.join("LOCK").is_file());
    assert!(root.join("streams").join(format!("{s}.log")).is_file());
    assert!(root.join("snapshots").join(format!("{s}.snap")).is_file());
    assert!(root.join("blobs").join(&id.hex()[..2]).join(&id.hex()[2..]).is_file());
    assert_eq!(std::fs::read_dir(root.join("tmp")).unwrap().count(), 0, "no temp file left behind");
}

#[test]
fn leftover_temp_files_are_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    drop(FsStore::open(dir.path()).unwrap());
    std::fs::write(dir.path().join("tmp").join("123-0"), "half a blob").unwrap();
    drop(FsStore::open(dir.path()).unwrap());
    assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
}

#[test]
fn damaged_snapshot_header_reads_as_no_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let s = StreamId::random();
    store.append(s, ExpectedVersion::Exact(0), &[Record::seal(b"x".to_vec())]).unwrap();
    store.put_snapshot(s, &ctxlog::store::Snapshot::seal(1, b"snap".to_vec())).unwrap();
    let path = dir.path().join("snapshots").join(format!("{s}.snap"));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[9] ^= 1; // inside the version field
    std::fs::write(&path, bytes).unwrap();
    assert_eq!(store.get_snapshot(s).unwrap(), None);
}

#[test]
fn damaged_format_file_is_damage_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    drop(FsStore::open(dir.path()).unwrap());
    for bad in ["ctxlog-fs 1", "ctxlog-fs 0\n", "ctxlog-fq 1\n", "ctxlog-fs 1\n\0", "ctxlog-fs 01\n"] {
        std::fs::write(dir.path().join("FORMAT"), bad).unwrap();
        for e in [FsStore::open(dir.path()).unwrap_err(), FsStore::open_read_only(dir.path()).unwrap_err()] {
            match &e {
                StoreError::Damaged { backend: "fs", location, detail } => {
                    assert!(location.ends_with("FORMAT"), "{location}");
                    assert!(detail.contains("damaged"), "{detail}");
                }
                other => panic!("{bad:?}: expected Damaged, got {other}"),
            }
        }
    }
}

#[test]
fn read_only_open_of_a_missing_store_is_missing_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let nope = dir.path().join("nope");
    let e = FsStore::open_read_only(&nope).unwrap_err();
    assert!(
        matches!(&e, StoreError::Missing { backend: "fs", location } if location == &nope.display().to_string()),
        "{e}"
    );
    assert!(!nope.exists(), "a read-only open created the directory");
    // A directory that is not a store is no store either, and stays as it was.
    std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    assert!(matches!(FsStore::open_read_only(dir.path()), Err(StoreError::Missing { .. })));
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["notes.txt"]);
}

#[test]
fn readers_open_next_to_a_writer_and_see_what_it_wrote_before() {
    let dir = tempfile::tempdir().unwrap();
    let writer = FsStore::open(dir.path()).unwrap();
    let s = StreamId::random();
    writer.append(s, ExpectedVersion::Exact(0), &[Record::seal(b"one".to_vec())]).unwrap();
    let reader = FsStore::open_read_only(dir.path()).expect("a reader needs no lock");
    assert!(reader.is_read_only() && !writer.is_read_only());
    writer.append(s, ExpectedVersion::Exact(1), &[Record::seal(b"two".to_vec())]).unwrap();
    assert_eq!(reader.head(s).unwrap(), Some(1), "what was written before the reader opened");
    assert_eq!(FsStore::open_read_only(dir.path()).unwrap().head(s).unwrap(), Some(2));
    for refused in [
        reader.append(s, ExpectedVersion::Any, &[Record::seal(b"x".to_vec())]).map(|_| ()),
        reader.put_blob(b"x").map(|_| ()),
        reader.put_snapshot(s, &ctxlog::store::Snapshot::seal(1, b"s".to_vec())),
    ] {
        assert!(matches!(refused, Err(StoreError::ReadOnly { backend: "fs", .. })), "{refused:?}");
    }
    // The writer still holds its lock: a second writer is refused.
    assert!(matches!(FsStore::open(dir.path()), Err(StoreError::Locked { .. })));
}

#[test]
fn read_only_open_of_a_store_whose_streams_cannot_be_listed_is_an_error_not_an_empty_store() {
    // Given a store with one stream whose `streams` directory cannot be listed (replaced by a
    // file: tests run as root, who can list any directory, so permissions cannot show it),
    let dir = tempfile::tempdir().unwrap();
    let s = StreamId::random();
    FsStore::open(dir.path()).unwrap().append(s, ExpectedVersion::Exact(0), &[Record::seal(b"one".to_vec())]).unwrap();
    let streams = dir.path().join("streams");
    std::fs::rename(&streams, dir.path().join("streams.moved")).unwrap();
    std::fs::write(&streams, b"not a directory").unwrap();
    // when it is opened read-only, then the open fails naming the directory: the store is
    // damaged, not empty (only a missing `streams`, a writer that never got that far, is empty).
    let e = FsStore::open_read_only(dir.path()).unwrap_err();
    assert!(e.to_string().contains(&streams.display().to_string()), "{e}");
    std::fs::remove_file(&streams).unwrap();
    assert_eq!(FsStore::open_read_only(dir.path()).unwrap().streams().unwrap(), Vec::<StreamId>::new());
}
