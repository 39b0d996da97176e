//! Every fsync the store makes goes through [`Syncer`], so a test can watch them.
//!
//! A `kill -9` cannot tell whether an fsync happened (the page cache survives the process), so
//! the crash test would pass with every fsync removed. The observer set with
//! [`crate::FsOptions::on_sync`] sees each completed `sync_data`, `sync_all` and directory fsync
//! with its path, which lets `tests/durability.rs` require the exact sequence for every
//! acknowledged write.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Which fsync was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncKind {
    /// `File::sync_data` (fdatasync) of a file.
    Data,
    /// `File::sync_all` (fsync) of a file.
    All,
    /// fsync of a directory, making a create, rename or removal in it durable.
    Dir,
}

/// One completed fsync, as seen by an observer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SyncEvent {
    /// The kind of fsync.
    pub kind: SyncKind,
    /// The file or directory.
    pub path: PathBuf,
}

/// Called after every successful fsync.
pub type SyncObserver = Arc<dyn Fn(&SyncEvent) + Send + Sync>;

/// Makes fsyncs and tells the observer, if any, about each one that succeeded.
#[derive(Clone, Default)]
pub(crate) struct Syncer {
    observer: Option<SyncObserver>,
}

impl Syncer {
    pub(crate) fn new(observer: Option<SyncObserver>) -> Syncer {
        Syncer { observer }
    }

    fn seen(&self, kind: SyncKind, path: &Path) {
        if let Some(observer) = &self.observer {
            observer(&SyncEvent { kind, path: path.to_path_buf() });
        }
    }

    /// fdatasync of `file` (at `path`).
    pub(crate) fn data(&self, file: &File, path: &Path) -> io::Result<()> {
        file.sync_data()?;
        self.seen(SyncKind::Data, path);
        Ok(())
    }

    /// fsync of `file` (at `path`).
    pub(crate) fn all(&self, file: &File, path: &Path) -> io::Result<()> {
        file.sync_all()?;
        self.seen(SyncKind::All, path);
        Ok(())
    }

    /// fsync of the directory `dir`.
    pub(crate) fn dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()?;
        self.seen(SyncKind::Dir, dir);
        Ok(())
    }
}
