//! sled-specific behaviour of `SledStore::open` and of the chunking.

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
