//! Every acknowledged write is fsynced, checked through the store's sync observer.
//!
//! A `kill -9` cannot see a missing fsync: the page cache survives the process, so the crash
//! test passes with every fsync removed (tried). Power loss would lose those writes. These
//! tests watch the fsyncs themselves: each one below fails if the matching `sync_data`,
//! `sync_all` or directory fsync is removed from the store.

// Test helpers outside #[test] fns: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ctxlog::store::{ExpectedVersion, Record, Snapshot, Store, StreamId};
use ctxlog_store_fs::{FsOptions, FsStore, SyncEvent, SyncKind};

type Seen = Arc<Mutex<Vec<SyncEvent>>>;

fn open(dir: &Path) -> (FsStore, Seen) {
    let seen: Seen = Arc::default();
    let sink = Arc::clone(&seen);
    let options = FsOptions {
        on_sync: Some(Arc::new(move |e: &SyncEvent| sink.lock().unwrap().push(e.clone()))),
        ..FsOptions::default()
    };
    (FsStore::open_with(dir, options).unwrap(), seen)
}

/// The fsyncs made by `f`, with paths relative to `root` (temp file names generalised).
fn syncs_of(seen: &Seen, root: &Path, f: impl FnOnce()) -> Vec<(SyncKind, String)> {
    seen.lock().unwrap().clear();
    f();
    seen.lock()
        .unwrap()
        .iter()
        .map(|e| {
            let rel = e.path.strip_prefix(root).map(Path::to_path_buf).unwrap_or_else(|_| e.path.clone());
            let rel = if rel.starts_with("tmp") { PathBuf::from("tmp/*") } else { rel };
            (e.kind, rel.display().to_string())
        })
        .collect()
}

fn ev(kind: SyncKind, path: &str) -> (SyncKind, String) {
    (kind, path.to_owned())
}

#[test]
fn creating_a_store_makes_its_format_and_layout_durable() {
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("store");
    let seen: Seen = Arc::default();
    let sink = Arc::clone(&seen);
    let options = FsOptions {
        on_sync: Some(Arc::new(move |e: &SyncEvent| sink.lock().unwrap().push(e.clone()))),
        ..FsOptions::default()
    };
    drop(FsStore::open_with(&root, options).unwrap());
    let got: Vec<(SyncKind, PathBuf)> = seen.lock().unwrap().iter().map(|e| (e.kind, e.path.clone())).collect();
    assert_eq!(
        got,
        [
            (SyncKind::Dir, parent.path().to_path_buf()),
            (SyncKind::All, root.join("FORMAT.tmp")),
            (SyncKind::Dir, root.clone()),
            (SyncKind::Dir, root.clone()),
        ],
        "store directory entry, FORMAT's bytes, FORMAT's rename, the four subdirectories"
    );
}

#[test]
fn every_acknowledged_append_is_fdatasynced_and_a_new_stream_file_is_made_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (store, seen) = open(dir.path());
    let s = StreamId::random();
    let log = format!("streams/{s}.log");
    let first = syncs_of(&seen, dir.path(), || {
        store.append(s, ExpectedVersion::Exact(0), &[Record::seal(b"a".to_vec())]).unwrap();
    });
    let anchor = format!("streams/{s}.anchor");
    assert_eq!(
        first,
        [
            ev(SyncKind::All, "tmp/*"),
            ev(SyncKind::Dir, "streams"),
            ev(SyncKind::Data, &log),
            ev(SyncKind::Dir, "streams"),
            ev(SyncKind::Data, &anchor)
        ],
        "a new stream: its anchor at version 0 (renamed into place), the data, its name, then the anchor"
    );
    let next = syncs_of(&seen, dir.path(), || {
        store
            .append(s, ExpectedVersion::Exact(1), &[Record::seal(b"b".to_vec()), Record::seal(b"c".to_vec())])
            .unwrap();
    });
    assert_eq!(next, [ev(SyncKind::Data, &log), ev(SyncKind::Data, &anchor)], "the data, then the anchor");
    let nothing = syncs_of(&seen, dir.path(), || {
        store.append(s, ExpectedVersion::Exact(3), &[]).unwrap();
    });
    assert!(nothing.is_empty(), "an empty append writes nothing");
}

#[test]
fn every_new_blob_is_fsynced_before_its_rename_and_the_rename_is_made_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (store, seen) = open(dir.path());
    let mut id = None;
    let first = syncs_of(&seen, dir.path(), || id = Some(store.put_blob(b"picture").unwrap()));
    let hex = id.unwrap().hex().to_owned();
    let sub = format!("blobs/{}", &hex[..2]);
    assert_eq!(first, [ev(SyncKind::Dir, "blobs"), ev(SyncKind::All, "tmp/*"), ev(SyncKind::Dir, &sub)]);
    let again = syncs_of(&seen, dir.path(), || {
        store.put_blob(b"picture").unwrap();
    });
    assert!(again.is_empty(), "an existing blob is not rewritten");
    // A second blob in the same subdirectory needs no fsync of blobs/.
    let twin = (0u32..)
        .map(|i| format!("other {i}").into_bytes())
        .find(|b| ctxlog::store::BlobId::of(b).hex()[..2] == hex[..2])
        .unwrap();
    let second = syncs_of(&seen, dir.path(), || {
        store.put_blob(&twin).unwrap();
    });
    assert_eq!(second, [ev(SyncKind::All, "tmp/*"), ev(SyncKind::Dir, &sub)]);
}

#[test]
fn every_snapshot_is_fsynced_before_its_rename_and_the_rename_is_made_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (store, seen) = open(dir.path());
    let s = StreamId::random();
    store.append(s, ExpectedVersion::Exact(0), &[Record::seal(b"a".to_vec())]).unwrap();
    for _ in 0..2 {
        let got = syncs_of(&seen, dir.path(), || store.put_snapshot(s, &Snapshot::seal(1, b"state".to_vec())).unwrap());
        assert_eq!(got, [ev(SyncKind::All, "tmp/*"), ev(SyncKind::Dir, "snapshots")]);
    }
}

#[test]
fn a_repair_makes_the_quarantine_file_durable_before_it_cuts_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let s = StreamId::random();
    {
        let store = FsStore::open(dir.path()).unwrap();
        store.append(s, ExpectedVersion::Exact(0), &[Record::seal(b"a".to_vec())]).unwrap();
    }
    let log = dir.path().join("streams").join(format!("{s}.log"));
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(&[0; 5]);
    std::fs::write(&log, &bytes).unwrap();
    let (store, seen) = open(dir.path());
    let q = store.recovered()[0].quarantine.clone();
    let got: Vec<(SyncKind, PathBuf)> = seen.lock().unwrap().iter().map(|e| (e.kind, e.path.clone())).collect();
    assert_eq!(got, [(SyncKind::All, q), (SyncKind::Dir, dir.path().join("streams")), (SyncKind::All, log)]);
}
