//! PostgreSQL in the tests: the skip-or-fail policy, a conformance [`Fixture`], and helpers to
//! damage rows behind the store's back.
//!
//! Every test gets its own schema: on `CTXLOG_TEST_POSTGRES_URL` if set, else on a private
//! cluster started for it (`ctxlog_store_postgres::test_support`). Without PostgreSQL the
//! tests pass without running on a laptop, each printing `NOTICE: PostgreSQL test SKIPPED …`
//! past the harness's capture (visible in `cargo test`'s output), and fail in CI.

use ctxlog::store::{BlobId, Store, StreamId, Version};
use ctxlog_store_postgres::test_support::{self, TestDatabase};
use ctxlog_store_postgres::PgStore;

use crate::conformance::{Fixture, TamperBlobs};

/// A fresh database for `test`, or `None` to skip (the reason has been printed). Panics (fails
/// the test) when PostgreSQL is required and cannot be had.
pub fn database(test: &str) -> Option<TestDatabase> {
    match test_support::test_database(test) {
        Ok(db) => db,
        Err(e) => panic!("{e}"),
    }
}

/// Whether PostgreSQL tests can run here, without starting anything; prints the skip message
/// when they cannot and fails in CI.
pub fn available() -> bool {
    if std::env::var(test_support::URL_ENV).is_ok_and(|u| !u.is_empty()) {
        return true;
    }
    match test_support::bindir() {
        Ok(_) => true,
        Err(e) if test_support::in_ci() => panic!("PostgreSQL is required in CI: {e}"),
        Err(e) => {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                test_support::skipped("every conformance test on PostgreSQL", &format!("no PostgreSQL ({e})"))
            });
            false
        }
    }
}

/// A [`PgStore`] on its own schema; tampering goes through a second connection, as another
/// client of the database would.
pub struct Postgres {
    store: Option<PgStore>,
    db: TestDatabase,
}

/// A fresh PostgreSQL store (see [`available`] for the skip policy).
pub fn fixture() -> Postgres {
    let db = database("conformance").expect("postgres fixture requested where PostgreSQL is unavailable");
    Postgres { store: Some(PgStore::open(db.url()).unwrap()), db }
}

impl Postgres {
    /// Runs a tampering statement; it must hit exactly one row (a broken test otherwise).
    fn flip(&self, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) {
        let rows = self.db.connect().unwrap().execute(sql, params).unwrap();
        assert_eq!(rows, 1, "tampering hit {rows} rows: no such record or blob");
    }
}

/// Flips bit 4 of the middle byte of a record's stored bytes, behind the store's back.
pub const FLIP_RECORD: &str = "UPDATE ctxlog_records SET bytes = set_byte(bytes, length(bytes) / 2, \
     get_byte(bytes, length(bytes) / 2) # 16) WHERE stream = $1 AND version = $2";

impl Fixture for Postgres {
    fn store(&self) -> &dyn Store {
        self.store.as_ref().unwrap()
    }
    fn reopen(&mut self) {
        drop(self.store.take());
        self.store = Some(PgStore::open(self.db.url()).unwrap());
    }
    fn flip_record_bit(&mut self, stream: StreamId, version: Version) {
        self.flip(FLIP_RECORD, &[&stream.0, &(version as i64)])
    }
}

impl TamperBlobs for Postgres {
    fn flip_blob_bit(&mut self, id: &BlobId) {
        self.flip(
            "UPDATE ctxlog_blobs SET bytes = set_byte(bytes, 0, get_byte(bytes, 0) # 128) WHERE id = $1",
            &[&id.as_str()],
        )
    }
}
