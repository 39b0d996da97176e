#![cfg(unix)]
//! The writer lock and child processes: a child forked by another thread shares the parent's
//! open file descriptions until it execs. With `flock` (and OFD locks) it therefore held the
//! `LOCK` of a store the parent had just dropped, and the parent's reopen failed with
//! `Locked` "held by pid <own pid>". The lock is now a POSIX record lock, which children do not
//! inherit, plus an in-process registry.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ctxlog::store::{ExpectedVersion, Record, Store, StoreError, StreamId};
use ctxlog_store_fs::FsStore;

#[test]
fn reopening_while_another_thread_spawns_children_is_never_locked() {
    let dir = tempfile::tempdir().unwrap();
    let s = StreamId::random();
    let stop = AtomicBool::new(false);
    let spawned = AtomicU64::new(0);
    let mut locked = Vec::new();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                // `true` execs at once: the window between fork and exec is what matters.
                std::process::Command::new("true").status().unwrap();
                spawned.fetch_add(1, Ordering::Relaxed);
            }
        });
        for i in 0..5_000u64 {
            match FsStore::open(dir.path()) {
                Ok(store) => {
                    if i % 500 == 0 {
                        store.append(s, ExpectedVersion::Any, &[Record::seal(vec![1; 16])]).unwrap();
                    }
                }
                Err(StoreError::Locked { detail, .. }) => locked.push(format!("cycle {i}: {detail}")),
                Err(e) => panic!("cycle {i}: {e}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(spawned.load(Ordering::Relaxed) > 0, "no child was spawned during the test");
    assert!(locked.is_empty(), "{} of 5000 reopens were Locked: {:?}", locked.len(), &locked[..locked.len().min(3)]);
}

#[test]
fn the_lock_excludes_a_second_writer_in_the_same_process_and_is_released_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let first = FsStore::open(dir.path()).unwrap();
    // Another name for the same directory is the same store.
    let other_name = dir.path().join("streams").join("..");
    assert!(matches!(FsStore::open(&other_name), Err(StoreError::Locked { .. })));
    // The refused open must not have released the first writer's lock.
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "probe_lock_from_another_process", "--nocapture", "--ignored"])
        .env("CTXLOG_LOCK_PROBE", dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&child.stdout);
    assert!(out.contains("probe: Locked"), "another process could take the lock: {out}");
    drop(first);
    FsStore::open(dir.path()).expect("released on drop");
}

/// Run by the test above in a child process.
#[test]
#[ignore = "run as a child process by the_lock_excludes_a_second_writer_in_the_same_process_and_is_released_on_drop"]
fn probe_lock_from_another_process() {
    let Some(dir) = std::env::var_os("CTXLOG_LOCK_PROBE") else { return };
    match FsStore::open(&dir) {
        Err(StoreError::Locked { detail, .. }) => {
            assert!(detail.contains(&format!("pid {}", std::os::unix::process::parent_id())), "{detail}");
            println!("probe: Locked ({detail})");
        }
        Ok(_) => println!("probe: opened"),
        Err(e) => println!("probe: {e}"),
    }
}
