//! The `Store` conformance suite, instantiated once per backend.

use ctxlog_tests::conformance as suite;
use ctxlog_tests::conformance_fixtures as fixtures;

/// `store_tests!(module, factory; extra tests)` runs every rule of the contract on one backend,
/// plus the extra tests its fixture supports (blob tampering needs [`suite::TamperBlobs`]).
macro_rules! store_tests {
    // `if $enabled`: a backend that may be missing on this machine (PostgreSQL) skips itself
    // (never in CI, where `available` panics instead).
    ($backend:ident, $factory:path, if $enabled:path; $($extra:ident),*) => {
        mod $backend {
            use super::*;
            store_tests!(@tests $factory, $enabled;
                append_and_read, read_bounds, head_and_streams, conflict_writes_nothing,
                exact_zero_on_existing_stream_conflicts, stale_exact_append_conflicts_and_changes_nothing,
                batch_is_atomic, flipped_bit_is_corrupt, blobs, snapshots, reopen_keeps_everything,
                many_streams, large_values, concurrent_writers_one_stream, concurrent_writers_in_lockstep,
                concurrent_writers_many_streams, model_matches_memory_store, unsynced_appends_are_appends $(, $extra)*);
        }
    };
    ($backend:ident, $factory:path; $($extra:ident),*) => {
        store_tests!($backend, $factory, if always; $($extra),*);
    };
    (@tests $factory:path, $enabled:path; $($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            if !$enabled() {
                return;
            }
            suite::$name($factory)
        }
    )*};
}

fn always() -> bool {
    true
}

// MemoryStore has no blob-tamper test: its blobs live in the process's memory, where nothing
// but the store itself can reach them (see `conformance_fixtures::Memory`).
store_tests!(memory, fixtures::memory;);
store_tests!(sqlite, fixtures::sqlite; flipped_blob_bit_is_corrupt);
store_tests!(fs, fixtures::fs; flipped_blob_bit_is_corrupt);
store_tests!(sled, fixtures::sled; flipped_blob_bit_is_corrupt);
store_tests!(sled_fsync, fixtures::sled_fsync; flipped_blob_bit_is_corrupt);
store_tests!(postgres, ctxlog_tests::postgres::fixture, if ctxlog_tests::postgres::available; flipped_blob_bit_is_corrupt);

/// Two connections to one SQLite file (as two processes would have). In lockstep, every round
/// has one winner and one `Conflict`; running free, `BEGIN IMMEDIATE` + the primary key keep
/// the log dense with no version acknowledged twice.
#[test]
fn sqlite_two_connections_race_on_one_stream() {
    use ctxlog::store::{ExpectedVersion, Store, StoreError, StreamId};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.db");
    let stores = [
        ctxlog_store_sqlite::SqliteStore::open(&path).unwrap(),
        ctxlog_store_sqlite::SqliteStore::open(&path).unwrap(),
    ];
    let won = suite::race_in_lockstep(&[&stores[0], &stores[1]], StreamId::random(), 40);
    assert_eq!(won.iter().sum::<u64>(), 40, "40 rounds, 40 winners, 40 conflicts");

    let s = StreamId::random();
    let won: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let hs: Vec<_> = stores
            .iter()
            .map(|st| {
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    while mine.len() < 40 {
                        let head = st.head(s).unwrap().unwrap_or(0);
                        match st.append(s, ExpectedVersion::Exact(head), &[suite::rec("x")]) {
                            Ok(v) => mine.push(v),
                            Err(StoreError::Conflict { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                    mine
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<u64> = won.concat();
    all.sort();
    assert_eq!(all, (1..=80).collect::<Vec<_>>());
    assert_eq!(stores[0].read(s, 1, usize::MAX).unwrap().len(), 80);
}
