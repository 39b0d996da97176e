//! One [`Fixture`] per backend: how to build it, reopen it and damage its bytes.

use std::path::PathBuf;

use ctxlog::store::{BlobId, MemoryStore, Store, StreamId, Version};
use ctxlog_store_sqlite::SqliteStore;
use tempfile::TempDir;

use crate::conformance::Fixture;

/// The reference store. Reopening is a no-op (there are no files).
pub struct Memory(MemoryStore);

/// A fresh [`MemoryStore`].
pub fn memory() -> Box<dyn Fixture> {
    Box::new(Memory(MemoryStore::new()))
}

impl Fixture for Memory {
    fn store(&self) -> &dyn Store {
        &self.0
    }
    fn reopen(&mut self) {}
    fn flip_record_bit(&mut self, stream: StreamId, version: Version) -> bool {
        assert!(self.0.tamper(stream, version, |b| b[0] ^= 0x01));
        true
    }
    fn flip_blob_bit(&mut self, _id: &BlobId) -> bool {
        false
    }
}

/// A SQLite file in a temp dir; tampering goes through a second connection, as an outside
/// process would.
pub struct Sqlite {
    store: Option<SqliteStore>,
    path: PathBuf,
    _dir: TempDir,
}

/// A fresh SQLite store in a temp dir.
pub fn sqlite() -> Box<dyn Fixture> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctxlog.db");
    Box::new(Sqlite { store: Some(SqliteStore::open(&path).unwrap()), path, _dir: dir })
}

impl Sqlite {
    fn flip(&self, select: &str, update: &str, key: &dyn rusqlite::ToSql, key2: Option<i64>) -> bool {
        let conn = rusqlite::Connection::open(&self.path).unwrap();
        let mut bytes: Vec<u8> = match key2 {
            Some(v) => conn.query_row(select, rusqlite::params![key, v], |r| r.get(0)).unwrap(),
            None => conn.query_row(select, rusqlite::params![key], |r| r.get(0)).unwrap(),
        };
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x10;
        let n = match key2 {
            Some(v) => conn.execute(update, rusqlite::params![bytes, key, v]).unwrap(),
            None => conn.execute(update, rusqlite::params![bytes, key]).unwrap(),
        };
        n == 1
    }
}

impl Fixture for Sqlite {
    fn store(&self) -> &dyn Store {
        self.store.as_ref().unwrap()
    }
    fn reopen(&mut self) {
        drop(self.store.take());
        self.store = Some(SqliteStore::open(&self.path).unwrap());
    }
    fn flip_record_bit(&mut self, stream: StreamId, version: Version) -> bool {
        let key = stream.0.as_bytes().to_vec();
        self.flip(
            "SELECT bytes FROM records WHERE stream = ?1 AND version = ?2",
            "UPDATE records SET bytes = ?1 WHERE stream = ?2 AND version = ?3",
            &key,
            Some(version as i64),
        )
    }
    fn flip_blob_bit(&mut self, id: &BlobId) -> bool {
        self.flip(
            "SELECT bytes FROM blobs WHERE id = ?1",
            "UPDATE blobs SET bytes = ?1 WHERE id = ?2",
            &id.as_str(),
            None,
        )
    }
}
