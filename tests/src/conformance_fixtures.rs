//! One [`Fixture`] per backend: how to build it, reopen it and damage its bytes. A damage hook
//! that finds nothing to damage panics: a tamper test can fail, never skip.

use std::path::PathBuf;

use ctxlog::store::{BlobId, MemoryStore, Store, StreamId, Version};
use ctxlog_store_fs::FsStore;
use ctxlog_store_sled::{Durability, SledStore};
use ctxlog_store_sqlite::SqliteStore;
use tempfile::TempDir;

use crate::conformance::{Fixture, TamperBlobs};

/// The reference store. Reopening is a no-op (there are no files). It has no blob-tamper hook
/// ([`TamperBlobs`]): its blobs live in the process's memory, out of reach of anything but the
/// store itself, so there is no outside damage to simulate.
pub struct Memory(MemoryStore);

/// A fresh [`MemoryStore`].
pub fn memory() -> Memory {
    Memory(MemoryStore::new())
}

impl Fixture for Memory {
    fn store(&self) -> &dyn Store {
        &self.0
    }
    fn reopen(&mut self) {}
    fn flip_record_bit(&mut self, stream: StreamId, version: Version) {
        assert!(self.0.tamper(stream, version, |b| b[0] ^= 0x01), "{stream} v{version} is not stored");
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
pub fn sqlite() -> Sqlite {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctxlog.db");
    Sqlite { store: Some(SqliteStore::open(&path).unwrap()), path, _dir: dir }
}

impl Sqlite {
    fn flip(&self, select: &str, update: &str, key: &dyn rusqlite::ToSql, key2: Option<i64>) {
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
        assert_eq!(n, 1, "{update}");
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
    fn flip_record_bit(&mut self, stream: StreamId, version: Version) {
        let key = stream.0.as_bytes().to_vec();
        self.flip(
            "SELECT bytes FROM records WHERE stream = ?1 AND version = ?2",
            "UPDATE records SET bytes = ?1 WHERE stream = ?2 AND version = ?3",
            &key,
            Some(version as i64),
        )
    }
}

impl TamperBlobs for Sqlite {
    fn flip_blob_bit(&mut self, id: &BlobId) {
        self.flip(
            "SELECT bytes FROM blobs WHERE id = ?1",
            "UPDATE blobs SET bytes = ?1 WHERE id = ?2",
            &id.as_str(),
            None,
        )
    }
}

/// An fs store in a temp dir; tampering edits the files directly, locating records with an
/// independent parser of the format documented in `docs/log-format.md`.
pub struct Fs {
    store: Option<FsStore>,
    dir: TempDir,
}

/// A fresh fs store in a temp dir.
pub fn fs() -> Fs {
    let dir = tempfile::tempdir().unwrap();
    Fs { store: Some(FsStore::open(dir.path()).unwrap()), dir }
}

/// Byte ranges of every record in an fs stream file, by version (1-based), parsed per
/// `docs/log-format.md`.
pub fn fs_record_ranges(file: &[u8]) -> Vec<std::ops::Range<usize>> {
    let le32 = |at: usize| u32::from_le_bytes(file[at..at + 4].try_into().unwrap()) as usize;
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < file.len() {
        let len = le32(pos);
        let payload = pos + 8;
        let count = le32(payload + 24);
        let mut at = payload + 28;
        for _ in 0..count {
            let n = le32(at);
            out.push(at + 4..at + 4 + n);
            at += 4 + n;
        }
        assert_eq!(at, payload + len);
        pos = payload + len + 4;
    }
    out
}

impl Fixture for Fs {
    fn store(&self) -> &dyn Store {
        self.store.as_ref().unwrap()
    }
    fn reopen(&mut self) {
        drop(self.store.take());
        let store = FsStore::open(self.dir.path()).unwrap();
        assert!(store.recovered().is_empty(), "a clean close leaves no torn tail: {:?}", store.recovered());
        assert!(store.damaged().is_empty());
        self.store = Some(store);
    }
    fn flip_record_bit(&mut self, stream: StreamId, version: Version) {
        let path = self.dir.path().join("streams").join(format!("{stream}.log"));
        let mut bytes = std::fs::read(&path).unwrap();
        let r = fs_record_ranges(&bytes)[version as usize - 1].clone();
        bytes[(r.start + r.end) / 2] ^= 0x04;
        std::fs::write(&path, bytes).unwrap();
    }
}

impl TamperBlobs for Fs {
    fn flip_blob_bit(&mut self, id: &BlobId) {
        let hex = id.hex();
        let path = self.dir.path().join("blobs").join(&hex[..2]).join(&hex[2..]);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 0x80;
        std::fs::write(&path, bytes).unwrap();
    }
}

/// A sled database in a temp dir; tampering goes through the store's test hooks (sled holds
/// an exclusive lock on its directory, so nothing else can open it meanwhile).
pub struct Sled {
    store: Option<SledStore>,
    durability: Durability,
    dir: TempDir,
}

fn sled_with(durability: Durability) -> Sled {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open_with(dir.path().join("db"), durability).unwrap();
    Sled { store: Some(store), durability, dir }
}

/// A fresh sled store in a temp dir ([`Durability::Flush`]).
pub fn sled() -> Sled {
    sled_with(Durability::Flush)
}

/// A fresh sled store that also fdatasyncs its log after each flush.
pub fn sled_fsync() -> Sled {
    sled_with(Durability::FlushAndFsync)
}

impl Fixture for Sled {
    fn store(&self) -> &dyn Store {
        self.store.as_ref().unwrap()
    }
    fn reopen(&mut self) {
        drop(self.store.take());
        self.store = Some(SledStore::open_with(self.dir.path().join("db"), self.durability).unwrap());
    }
    fn flip_record_bit(&mut self, stream: StreamId, version: Version) {
        let found = self
            .store
            .as_ref()
            .unwrap()
            .tamper_record(stream, version, |b| {
                let mid = b.len() / 2;
                b[mid] ^= 0x02;
            })
            .unwrap();
        assert!(found, "{stream} v{version} is not stored");
    }
}

impl TamperBlobs for Sled {
    fn flip_blob_bit(&mut self, id: &BlobId) {
        assert!(self.store.as_ref().unwrap().tamper_blob(id, |b| b[0] ^= 0x01).unwrap(), "{id} is not stored");
    }
}
