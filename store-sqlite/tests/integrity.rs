//! What SQLite cannot see, and read-only opens that write nothing.
//!
//! * A flipped bit in a `-wal` frame makes SQLite's recovery stop there and drop every later
//!   commit without an error; the store reads the `-wal` first and refuses it.
//! * The `heads` mirror catches a stream whose end the `records` b-tree no longer shows.
//! * `open_read_only` creates, changes and checkpoints nothing in any state a writer leaves.

// Test helpers outside #[test] fns: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ctxlog::store::{ExpectedVersion, Record, Store, StoreError, StreamId};
use ctxlog_store_sqlite::SqliteStore;
use rusqlite::Connection;

/// Every file of `dir`: name -> length and sha256 (what "changed nothing" compares).
fn files(dir: &Path) -> BTreeMap<String, String> {
    use sha2::Digest;
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let bytes = std::fs::read(e.path()).unwrap();
            let sum = ctxlog::store::hex(&sha2::Sha256::digest(&bytes));
            (e.file_name().to_string_lossy().into_owned(), format!("{} bytes, sha256 {sum}", bytes.len()))
        })
        .collect()
}

fn copy_files(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn rec(i: u64) -> Record {
    Record::seal(format!("record {i} {}", "x".repeat(200 + (i % 50) as usize)).into_bytes())
}

/// A writer whose checkpoints a reader blocked, killed after `batches` appends: the `-wal`
/// holds every one of them (the state `kill -9` leaves). Returns the directory and the stream.
fn hot_wal(batches: u64) -> (tempfile::TempDir, StreamId) {
    let live = tempfile::tempdir().unwrap();
    let db = live.path().join("ctxlog.db");
    let s = StreamId::random();
    let killed = tempfile::tempdir().unwrap();
    {
        let store = SqliteStore::open(&db).unwrap();
        store.append(s, ExpectedVersion::Exact(0), &[rec(0)]).unwrap();
        let reader = Connection::open(&db).unwrap();
        reader.execute_batch("BEGIN; SELECT count(*) FROM records;").unwrap();
        for b in 1..=batches {
            let head = store.head(s).unwrap().unwrap();
            store.append(s, ExpectedVersion::Exact(head), &[rec(b), rec(b + 1000)]).unwrap();
        }
        copy_files(live.path(), killed.path());
    }
    (killed, s)
}

#[test]
fn a_flipped_bit_in_a_wal_frame_followed_by_commits_is_refused_and_nothing_is_checkpointed() {
    let (dir, s) = hot_wal(30);
    let db = dir.path().join("ctxlog.db");
    let wal = dir.path().join("ctxlog.db-wal");
    let pristine = files(dir.path());
    let wal_bytes = std::fs::read(&wal).unwrap();
    let page = u32::from_be_bytes(wal_bytes[8..12].try_into().unwrap()) as usize;
    let frame = 24 + page;
    let frames = (wal_bytes.len() - 32) / frame;
    assert!(frames >= 30, "the reader blocked the checkpoints: {frames} frames");
    let head = SqliteStore::open_read_only(&db).unwrap().head(s).unwrap().unwrap();
    assert_eq!(head, 61, "the intact -wal reads back whole");
    // Frames of the last transaction (from the frame after the previous commit on) cannot be
    // told from a torn write: count them, then flip one bit in each other frame.
    let commit =
        |i: usize| u32::from_be_bytes(wal_bytes[32 + i * frame + 4..32 + i * frame + 8].try_into().unwrap()) != 0;
    let last_tx_start = (0..frames - 1).rev().find(|&i| commit(i)).map_or(0, |i| i + 1);
    let mut refused = 0;
    for i in 0..last_tx_start {
        for (what, at) in [
            ("header", 32 + i * frame + 1),
            ("checksum", 32 + i * frame + 17),
            ("page", 32 + i * frame + 24 + (i * 97) % page),
        ] {
            let mut bytes = wal_bytes.clone();
            bytes[at] ^= 0x10;
            std::fs::write(&wal, &bytes).unwrap();
            for e in [SqliteStore::open_read_only(&db).unwrap_err(), SqliteStore::open(&db).unwrap_err()] {
                match e {
                    StoreError::Damaged { backend: "sqlite", location, detail } => {
                        assert_eq!(location, wal.display().to_string(), "frame {i} {what}");
                        assert!(detail.contains("drop") && detail.contains(&format!("frame {} ", i + 1)), "{detail}");
                    }
                    other => panic!("frame {i} {what}: expected Damaged, got {other:?}"),
                }
            }
            let mut now = files(dir.path());
            assert_eq!(std::fs::read(&wal).unwrap(), bytes, "frame {i} {what}: the -wal was changed");
            now.remove("ctxlog.db-wal");
            let mut expected = pristine.clone();
            expected.remove("ctxlog.db-wal");
            assert_eq!(now, expected, "frame {i} {what}: a store file was changed");
            refused += 1;
        }
    }
    assert!(refused >= 3 * 29, "{refused}");
    // The WAL header: SQLite would ignore the whole file.
    for at in [0, 9, 17, 25] {
        let mut bytes = wal_bytes.clone();
        bytes[at] ^= 0x01;
        std::fs::write(&wal, &bytes).unwrap();
        let e = SqliteStore::open_read_only(&db).unwrap_err();
        assert!(matches!(&e, StoreError::Damaged { detail, .. } if detail.contains("header")), "byte {at}: {e}");
    }
}

#[test]
fn a_torn_last_append_is_what_recovery_drops_and_it_is_not_damage() {
    let (dir, s) = hot_wal(5);
    let db = dir.path().join("ctxlog.db");
    let wal = dir.path().join("ctxlog.db-wal");
    let bytes = std::fs::read(&wal).unwrap();
    let (page, _, commits) = wal_frames(&bytes);
    let [.., sealed, _, _] = commits[..] else { panic!("{commits:?}") };
    // Cut the file inside the first frame of the last append, as a kill during that write
    // would: the append (never acknowledged) and its seal are gone, the rest is there.
    let cut = 32 + (sealed + 1) * (24 + page) + page / 2;
    std::fs::write(&wal, &bytes[..cut]).unwrap();
    // The -shm copied with it says that append was committed: this is not what a kill leaves
    // (the index learns of a transaction only once it is committed) but a -wal cut short.
    match SqliteStore::open_read_only(&db) {
        Err(StoreError::Damaged { location, detail, .. }) => {
            assert!(location.ends_with("-wal") && detail.contains("cut short"), "{detail}")
        }
        other => panic!("{:?}", other.map(|_| "opened")),
    }
    // Without an index claiming more (a kill during the write, or no -shm), it is a torn write.
    std::fs::remove_file(dir.path().join("ctxlog.db-shm")).unwrap();
    let store = SqliteStore::open_read_only(&db).unwrap();
    assert_eq!(store.head(s).unwrap(), Some(9));
}

#[test]
fn read_only_opens_create_and_change_nothing_in_any_state_a_writer_leaves() {
    let s = StreamId::random();
    // 1. closed cleanly: only the database file.
    let clean = tempfile::tempdir().unwrap();
    {
        let store = SqliteStore::open(clean.path().join("ctxlog.db")).unwrap();
        store.append(s, ExpectedVersion::Exact(0), &[rec(0), rec(1)]).unwrap();
    }
    // 2. killed after an append: its -wal holds the commits, and a -shm.
    let killed = tempfile::tempdir().unwrap();
    {
        let live = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(live.path().join("ctxlog.db")).unwrap();
        store.append(s, ExpectedVersion::Exact(0), &[rec(0), rec(1)]).unwrap();
        copy_files(live.path(), killed.path());
    }
    // 3. killed with commits in the -wal (a reader blocked the checkpoint), -shm kept.
    let (hot, hot_s) = hot_wal(3);
    // 4. the same without the -shm (deleted by someone, or copied without it).
    let (hot_no_shm, cold_s) = hot_wal(3);
    std::fs::remove_file(hot_no_shm.path().join("ctxlog.db-shm")).unwrap();
    for (what, dir, stream, head) in [
        ("closed", &clean, s, 2),
        ("killed after an append", &killed, s, 2),
        ("killed with a hot -wal", &hot, hot_s, 7),
        ("hot -wal, no -shm", &hot_no_shm, cold_s, 7),
    ] {
        let before = files(dir.path());
        {
            let store = SqliteStore::open_read_only(dir.path().join("ctxlog.db")).unwrap();
            assert!(store.is_read_only());
            assert_eq!(store.reads_a_copy(), what == "hot -wal, no -shm", "{what}");
            assert_eq!(store.head(stream).unwrap(), Some(head), "{what}");
            assert_eq!(store.read(stream, 1, 100).unwrap().len() as u64, head, "{what}");
            let report = store.check_integrity().unwrap();
            assert!(report.problems.is_empty(), "{what}: {report:?}");
            assert!(matches!(store.append(stream, ExpectedVersion::Any, &[rec(9)]), Err(StoreError::ReadOnly { .. })));
            assert!(matches!(store.put_blob(b"x"), Err(StoreError::ReadOnly { .. })));
        }
        assert_eq!(files(dir.path()), before, "{what}: a read-only open changed the directory");
    }
}

#[test]
fn a_reader_opens_next_to_a_running_writer_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ctxlog.db");
    let s = StreamId::random();
    let writer = SqliteStore::open(&db).unwrap();
    writer.append(s, ExpectedVersion::Exact(0), &[rec(0)]).unwrap();
    let before = files(dir.path());
    // Another process: `readonly_shm` maps the writer's shared memory read-only.
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_reads_the_store", "--ignored", "--nocapture"])
        .env("CTXLOG_SQLITE_READER", &db)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&child.stdout);
    assert!(out.contains("reader: head 1"), "{out}{}", String::from_utf8_lossy(&child.stderr));
    assert_eq!(files(dir.path()), before, "a reader in another process changed a file");
    // This process: SQLite shares one mapping of the -shm between the connections of a
    // process, so the reader takes a read mark in the writer's (writable) shared memory, as
    // the writer itself does on every transaction. The database and the WAL stay untouched.
    let reader = SqliteStore::open_read_only(&db).unwrap();
    assert_eq!(reader.head(s).unwrap(), Some(1));
    drop(reader);
    let mut now = files(dir.path());
    let mut then = before.clone();
    now.remove("ctxlog.db-shm");
    then.remove("ctxlog.db-shm");
    assert_eq!(now, then);
    writer.append(s, ExpectedVersion::Exact(1), &[rec(1)]).unwrap();
    assert_eq!(SqliteStore::open_read_only(&db).unwrap().head(s).unwrap(), Some(2));
}

#[test]
#[ignore = "run in a child process by a_reader_opens_next_to_a_running_writer_and_changes_nothing"]
fn child_reads_the_store() {
    let Some(db) = std::env::var_os("CTXLOG_SQLITE_READER") else { return };
    let store = SqliteStore::open_read_only(PathBuf::from(db)).unwrap();
    let heads: Vec<_> = store.streams().unwrap().into_iter().map(|s| store.head(s).unwrap()).collect();
    println!("reader: head {}", heads.first().copied().flatten().unwrap_or(0));
}

#[test]
fn a_missing_or_empty_database_is_missing_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let nope = dir.path().join("nope.db");
    assert!(matches!(SqliteStore::open_read_only(&nope), Err(StoreError::Missing { .. })));
    assert!(!nope.exists());
    std::fs::write(&nope, b"").unwrap();
    let e = SqliteStore::open_read_only(&nope).unwrap_err();
    assert!(matches!(&e, StoreError::Missing { location, .. } if location.contains("empty")), "{e}");
    assert_eq!(files(dir.path()).len(), 1);
}

#[test]
fn a_file_that_is_not_a_database_is_damaged_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ctxlog.db");
    drop(SqliteStore::open(&db).unwrap());
    let mut bytes = std::fs::read(&db).unwrap();
    bytes[3] ^= 0x20; // "SQLite format 3\0"
    std::fs::write(&db, &bytes).unwrap();
    for e in [SqliteStore::open_read_only(&db).unwrap_err(), SqliteStore::open(&db).unwrap_err()] {
        assert!(matches!(&e, StoreError::Damaged { location, .. } if location == &db.display().to_string()), "{e}");
    }
}

fn damage_with_sql(db: &Path, sql: &str) {
    let conn = Connection::open(db).unwrap();
    conn.execute_batch(sql).unwrap();
}

fn stream_with(n: u64) -> (tempfile::TempDir, PathBuf, StreamId) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ctxlog.db");
    let s = StreamId::random();
    let store = SqliteStore::open(&db).unwrap();
    for i in 0..n {
        store.append(s, ExpectedVersion::Exact(i), &[rec(i)]).unwrap();
    }
    (dir, db, s)
}

#[test]
fn a_stream_whose_last_rows_are_gone_is_corrupt_not_shorter() {
    // What a damaged index page did before: MAX(version) ended early, verify passed with the
    // stream cut short, and the next append hit an existing key and got Conflict forever.
    let (_dir, db, s) = stream_with(10);
    damage_with_sql(&db, &format!("DELETE FROM records WHERE stream = x'{}' AND version > 7", hex(s)));
    let store = SqliteStore::open(&db).unwrap();
    for r in [store.head(s).map(|_| ()), store.append(s, ExpectedVersion::Exact(7), &[rec(7)]).map(|_| ())] {
        match r {
            Err(StoreError::Corrupt { stream, version: 8, detail }) => {
                assert_eq!(stream, s);
                assert!(detail.contains("heads table") && detail.contains("ctxlog.db"), "{detail}");
            }
            other => panic!("expected Corrupt at version 8, got {other:?}"),
        }
    }
    let report = store.check_integrity().unwrap();
    assert!(
        report.problems.iter().any(|p| p.contains(&s.to_string()) && p.contains("heads table says version 10")),
        "{report:?}"
    );
}

#[test]
fn holes_and_a_replaced_last_record_are_reported_by_the_integrity_check() {
    let (_dir, db, s) = stream_with(6);
    damage_with_sql(&db, &format!("DELETE FROM records WHERE stream = x'{0}' AND version = 3", hex(s)));
    let report = SqliteStore::open_read_only(&db).unwrap().check_integrity().unwrap();
    assert!(report.problems.iter().any(|p| p.contains("not dense") && p.contains(&s.to_string())), "{report:?}");
    let (_dir, db, s) = stream_with(6);
    let other = rec(99);
    let conn = Connection::open(&db).unwrap();
    conn.execute(
        "UPDATE records SET bytes = ?1 WHERE stream = ?2 AND version = 6",
        rusqlite::params![other.as_bytes(), s.0.as_bytes()],
    )
    .unwrap();
    drop(conn);
    let report = SqliteStore::open_read_only(&db).unwrap().check_integrity().unwrap();
    assert!(report.problems.iter().any(|p| p.contains("version 6 is not the one")), "{report:?}");
}

#[test]
fn a_schema_1_database_is_read_as_it_is_and_upgraded_by_a_writer() {
    let (_dir, db, s) = stream_with(4);
    damage_with_sql(&db, "DROP TABLE heads; PRAGMA user_version = 1;");
    let before = std::fs::read(&db).unwrap();
    {
        let store = SqliteStore::open_read_only(&db).unwrap();
        assert_eq!(store.head(s).unwrap(), Some(4));
        let report = store.check_integrity().unwrap();
        assert!(
            report.problems.is_empty() && report.notes.iter().any(|n| n.contains("schema version 1")),
            "{report:?}"
        );
    }
    assert_eq!(std::fs::read(&db).unwrap(), before);
    let store = SqliteStore::open(&db).unwrap();
    assert_eq!(store.append(s, ExpectedVersion::Exact(4), &[rec(4)]).unwrap(), 5);
    assert!(store.check_integrity().unwrap().problems.is_empty());
    let v: i64 = Connection::open(&db).unwrap().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(v, 2);
}

/// The frames of `bytes` (a `-wal`): `(page size, frames, indices of commit frames)`.
fn wal_frames(bytes: &[u8]) -> (usize, usize, Vec<usize>) {
    let page = u32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let frame = 24 + page;
    let frames = (bytes.len() - 32) / frame;
    let commits = (0..frames).filter(|i| bytes[32 + i * frame + 4..32 + i * frame + 8] != [0, 0, 0, 0]).collect();
    (page, frames, commits)
}

#[test]
fn every_append_is_sealed_so_damage_anywhere_in_it_is_reported() {
    let live = tempfile::tempdir().unwrap();
    let killed = tempfile::tempdir().unwrap();
    let s = StreamId::random();
    {
        let store = SqliteStore::open(live.path().join("ctxlog.db")).unwrap();
        for i in 0..4 {
            store.append(s, ExpectedVersion::Exact(i), &[rec(i)]).unwrap();
        }
        copy_files(live.path(), killed.path());
    }
    let db = killed.path().join("ctxlog.db");
    let wal = killed.path().join("ctxlog.db-wal");
    let bytes = std::fs::read(&wal).unwrap();
    let (page, _, commits) = wal_frames(&bytes);
    let [.., before, append, seal] = commits[..] else { panic!("{commits:?}") };
    let frame = 24 + page;
    // The last append's frames: each flip is followed by the seal's commit, so it is reported.
    for i in before + 1..=append {
        let mut damaged = bytes.clone();
        damaged[32 + i * frame + 24 + page / 3] ^= 0x08;
        std::fs::write(&wal, &damaged).unwrap();
        let e = SqliteStore::open_read_only(&db).unwrap_err();
        assert!(matches!(&e, StoreError::Damaged { location, .. } if location.ends_with("-wal")), "frame {i}: {e}");
    }
    // The seal's frames: dropping the seal loses nothing.
    for i in append + 1..=seal {
        let mut damaged = bytes.clone();
        damaged[32 + i * frame + 24 + page / 3] ^= 0x08;
        std::fs::write(&wal, &damaged).unwrap();
        assert_eq!(SqliteStore::open_read_only(&db).unwrap().head(s).unwrap(), Some(4), "frame {i}");
    }
}

fn hex(s: StreamId) -> String {
    ctxlog::store::hex(s.0.as_bytes())
}
