//! Stream leases across processes: [`Store::try_lease`](ctxlog::Store::try_lease) on SQLite.
//!
//! A lease is an exclusive `flock` (std's [`File::try_lock`]: `flock(LOCK_EX | LOCK_NB)` on
//! Unix, `LockFileEx` on Windows) on a small empty file in a directory next to the database,
//! `<db>-leases/`, one of [`BUCKETS`] files named by four hex digits of a hash of the stream
//! id. Why this lock:
//!
//! * it belongs to the *open file description*, not to the process: every `try_lease` opens
//!   the file anew, so two `SqliteStore` handles on one database, or two threads of one handle,
//!   exclude each other exactly as two processes do, and closing some other descriptor of the
//!   same file (which drops POSIX `fcntl` record locks of the whole process) releases nothing;
//! * the kernel drops it when the descriptor is closed: when the [`Lease`] is dropped, and when
//!   the holder dies in any way, `kill -9` included. Nothing is left to expire or clean up.
//!
//! (Byte-range locks on one file, `F_OFD_SETLK`, would do the same in one file, but neither std
//! nor rustix exposes them and the workspace forbids `unsafe`.)
//!
//! **Collisions.** Two streams whose hashes share a bucket share a lock file: while one is
//! leased the other waits, as if they were one session. A collision only ever serializes two
//! sessions; it never lets two holders share one stream, because a stream always maps to the
//! same file. With [`BUCKETS`] = 65,536 and `k` calls in flight, a call finds its bucket taken
//! by another session with probability about `k / 65,536` (0.1 % at 64 calls in flight). The
//! files are created on first use and never deleted (deleting a lock file would let a later
//! opener lock a new file while an earlier one still holds the old one), so the directory
//! holds at most 65,536 empty files.
//!
//! The lease files must live on a local filesystem, as the database itself must for WAL mode
//! (on NFS, Linux emulates `flock` with process-wide record locks). A child process forked
//! while a lease is held shares its descriptor until it `exec`s (std opens every file with
//! `O_CLOEXEC`), so the lock can outlive the `Lease` by that moment.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use ctxlog::store::{Lease, StoreError, StreamId};
use sha2::{Digest, Sha256};

use crate::BACKEND;

/// How many lock files the streams are spread over.
pub const BUCKETS: usize = 1 << 16;

/// The directory of lease files of the database at `db`: `<db>-leases`.
pub fn lease_dir(db: &Path) -> PathBuf {
    crate::sibling(db, "-leases")
}

/// The lease file of `stream` in `dir` (the same file for the same stream, always).
pub fn lease_file(dir: &Path, stream: StreamId) -> PathBuf {
    let mut hash = Sha256::new();
    hash.update(b"ctxlog lease\0");
    hash.update(stream.0.as_bytes());
    let digest = hash.finalize();
    let bucket = digest.iter().take(2).fold(0usize, |acc, b| (acc << 8) | usize::from(*b)) % BUCKETS;
    dir.join(format!("{bucket:04x}"))
}

/// What a lease holds: the open lock file (closing it releases the lock).
struct Held {
    _file: File,
}

/// Tries to lease `stream` of the database at `db` (see the module docs).
pub(crate) fn try_lease(db: &Path, location: &str, stream: StreamId) -> Result<Option<Lease>, StoreError> {
    let dir = lease_dir(db);
    let fail = |what: &str, path: &Path, e: std::io::Error| {
        StoreError::backend(BACKEND, format!("{location}: stream {stream}: {what} {}", path.display()), e)
    };
    let path = lease_file(&dir, stream);
    let open = || OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path);
    // The directory is made on first use only: a call pays an open, a lock and a close.
    let file = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&dir).map_err(|e| fail("create the lease directory", &dir, e))?;
            open()
        }
        opened => opened,
    }
    .map_err(|e| fail("open the lease file", &path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(Lease::new(Held { _file: file }))),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(fail("lock the lease file", &path, e)),
    }
}
