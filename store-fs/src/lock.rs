//! The single-writer lock of a store directory.
//!
//! Two layers, because neither alone is right:
//!
//! * **Between processes**, a POSIX record lock (`fcntl(F_SETLK)`) on `<dir>/LOCK`. It belongs
//!   to the process, so a child forked by another thread (a host spawning a tool, insta running
//!   `cargo metadata`) does not inherit it. `flock` and OFD locks belong to the open file
//!   description, which the child shares until it execs: dropping and reopening the store in
//!   that window failed with `Locked` "held by pid <own pid>" (a Python probe of the three kinds
//!   with a thread spawning children refused 2,923 of 5,000 reopens with `flock`, 2,225 with OFD
//!   locks and 0 with `fcntl`; `tests/lock.rs` checks 5,000 reopens of a real store).
//! * **Within the process**, a registry of the directories this process has open. A POSIX lock
//!   cannot exclude its own process, and closing *any* descriptor of `LOCK` in the process
//!   releases it; so the registry refuses a second open before it touches the file, and the
//!   descriptor is closed while the registry is held. Nothing else in this crate opens `LOCK`
//!   while a writer holds it (read-only opens never touch it).
//!
//! Elsewhere than Unix, `std`'s `File::try_lock` is used.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use ctxlog::store::StoreError;

use crate::{io_err, BACKEND};

/// Directories (by device and inode) this process holds the writer lock of.
static OPEN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn registry() -> MutexGuard<'static, BTreeSet<String>> {
    // Updated by single inserts and removes: a panic elsewhere leaves it consistent.
    OPEN.lock().unwrap_or_else(|e| e.into_inner())
}

/// The writer lock; released on drop.
pub(crate) struct WriterLock {
    file: Option<File>,
    key: String,
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        // Close the descriptor (releasing the OS lock) and leave the registry in one step, so
        // a concurrent open in this process cannot take the lock in between and then lose it
        // to our close.
        let mut open = registry();
        drop(self.file.take());
        open.remove(&self.key);
    }
}

/// Identifies a directory however it is named (symlinks, `..`, bind mounts).
fn key(root: &Path) -> Result<String, StoreError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(root).map_err(|e| io_err(root, "stat store directory", e))?;
        Ok(format!("{}:{}", meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        let canonical = std::fs::canonicalize(root).map_err(|e| io_err(root, "resolve store directory", e))?;
        Ok(canonical.display().to_string())
    }
}

fn locked(root: &Path, detail: String) -> StoreError {
    StoreError::Locked { backend: BACKEND, location: root.display().to_string(), detail }
}

/// Takes the writer lock of the store in `root`, or says who holds it.
pub(crate) fn acquire(root: &Path) -> Result<WriterLock, StoreError> {
    let path = root.join("LOCK");
    let key = key(root)?;
    let mut open = registry();
    if open.contains(&key) {
        return Err(locked(
            root,
            format!(
                "{} is held by this process (pid {}): the store is already open here",
                path.display(),
                std::process::id()
            ),
        ));
    }
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| io_err(&path, "open lock file", e))?;
    match try_lock(&file) {
        Ok(true) => {}
        Ok(false) => {
            let holder = holder(&mut file);
            return Err(locked(root, format!("{} is held by {holder}", path.display())));
        }
        Err(e) => return Err(io_err(&path, "lock", e)),
    }
    // Informative only (the OS lock is what excludes writers), so a failure is ignored.
    let _ = file.set_len(0).and_then(|()| file.write_all(format!("pid {}\n", std::process::id()).as_bytes()));
    open.insert(key.clone());
    Ok(WriterLock { file: Some(file), key })
}

#[cfg(unix)]
fn try_lock(file: &File) -> std::io::Result<bool> {
    use rustix::fs::{fcntl_lock, FlockOperation};
    match fcntl_lock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::ACCESS => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(not(unix))]
fn try_lock(file: &File) -> std::io::Result<bool> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Who holds the lock: the kernel's answer where there is one, else what `LOCK` says.
fn holder(file: &mut File) -> String {
    #[cfg(unix)]
    {
        use rustix::process::{fcntl_getlk, Flock, FlockOffsetType, FlockType};
        let probe =
            Flock { start: 0, length: 0, pid: None, typ: FlockType::WriteLock, offset_type: FlockOffsetType::Set };
        if let Ok(Some(Flock { pid: Some(pid), .. })) = fcntl_getlk(&*file, &probe) {
            return format!("pid {}", pid.as_raw_nonzero());
        }
    }
    let mut text = String::new();
    // Best effort: the pid written by the holder is informative only.
    let _ = file.read_to_string(&mut text);
    match text.trim() {
        "" => "another process".to_owned(),
        t => t.to_owned(),
    }
}
