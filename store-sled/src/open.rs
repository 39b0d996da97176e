//! Opening sled: its errors in our terms, and the copy a read-only open reads.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use ctxlog::store::StoreError;

use crate::{mirror, BACKEND, CACHE_CAPACITY};

/// How long a read-only open keeps copying the directory while a writer keeps changing it.
/// A writer's changes come in bursts (a call's appends, sled's flush every 500 ms): the pause
/// between copies, doubled each time up to [`COPY_PAUSE_MAX`], lets a burst end.
const COPY_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);
const COPY_PAUSE_MAX: std::time::Duration = std::time::Duration::from_millis(100);

/// A sled error while doing `what` with the store at `location`, in our terms: a directory
/// sled finds damaged is [`StoreError::Damaged`] naming it, with what to do.
pub(crate) fn error(location: &str, what: &str, e: sled::Error, on_a_copy: bool) -> StoreError {
    match e {
        // sled reports its directory lock as a plain io error; give it our typed variant.
        sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
            StoreError::Locked { backend: BACKEND, location: location.to_owned(), detail: io.to_string() }
        }
        // sled says Unsupported when its `conf` does not parse (it guesses an old sled wrote it).
        sled::Error::Corruption { .. } | sled::Error::ReportableBug(_) | sled::Error::Unsupported(_) => {
            StoreError::Damaged {
                backend: BACKEND,
                location: location.to_owned(),
                detail: format!(
                    "{what}: sled reports \"{e}\": its files (conf, db, snap.*) are damaged (or were not written by \
                 sled 0.34). {} Restore the directory from a backup; ctxlog cannot read any part of it through sled",
                    if on_a_copy {
                        "Nothing in the directory was changed (a read-only open works on a copy)."
                    } else {
                        "Keep a copy of the directory before opening it again: sled rewrites its files on open."
                    }
                ),
            }
        }
        sled::Error::Io(io) => StoreError::backend(
            BACKEND,
            format!(
                "{location}: {what} (sled rewrites its files whenever it opens them, so a full disk or a read-only \
                 directory stops a writer's open; the read-only commands read a copy in $TMPDIR instead)"
            ),
            io,
        ),
        e => StoreError::backend(BACKEND, format!("{location}: {what}"), e),
    }
}

/// Opens sled in `dir`. A panic inside sled while it reads damaged files is reported as
/// damage rather than taking the host down.
pub(crate) fn sled(dir: &Path, location: &str, on_a_copy: bool) -> Result<sled::Db, StoreError> {
    let opened = std::panic::catch_unwind(AssertUnwindSafe(|| {
        sled::Config::new().path(dir).cache_capacity(CACHE_CAPACITY).open()
    }));
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) => Err(error(location, "open", e, on_a_copy)),
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            Err(StoreError::Damaged {
                backend: BACKEND,
                location: location.to_owned(),
                detail: format!("sled panicked while opening it ({why}): its files are damaged; restore from a backup"),
            })
        }
    }
}

/// Length and modification time of every file under `dir`.
fn fingerprint(dir: &Path) -> std::io::Result<BTreeMap<PathBuf, (u64, Option<SystemTime>)>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                out.insert(entry.path(), (meta.len(), meta.modified().ok()));
            }
        }
    }
    Ok(out)
}

/// Copies a file and makes the copy writable by us: sled writes to the files it opens, and a
/// copy of a read-only store would keep the original's read-only permissions.
fn copy_file(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::copy(from, to)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o600))
    }
    #[cfg(not(unix))]
    {
        let mut perms = std::fs::metadata(to)?.permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(to, perms)
    }
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    // The mirror first: it may only be behind what the copy of sled's files holds, never ahead.
    let heads = from.join(mirror::FILE);
    if heads.is_file() {
        copy_file(&heads, &to.join(mirror::FILE))?;
    }
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if entry.file_name() != mirror::FILE {
            copy_file(&entry.path(), &dest)?;
        }
    }
    Ok(())
}

/// Copies `dir` into a temporary directory, again until no file changed during the copy (a
/// copy taken while sled writes could be torn in a way a crash never leaves).
pub(crate) fn stable_copy(dir: &Path, location: &str) -> Result<tempfile::TempDir, StoreError> {
    let io = |what: &str, e: std::io::Error| StoreError::backend(BACKEND, format!("{location}: {what}"), e);
    let started = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(1);
    let mut copies = 0;
    loop {
        let before = fingerprint(dir).map_err(|e| io("list files", e))?;
        let copy = tempfile::tempdir().map_err(|e| io("create a temporary directory (is $TMPDIR full?)", e))?;
        copy_tree(dir, copy.path())
            .map_err(|e| io(&format!("copy to {} (is $TMPDIR full?)", copy.path().display()), e))?;
        copies += 1;
        if fingerprint(dir).map_err(|e| io("list files", e))? == before {
            return Ok(copy);
        }
        if started.elapsed() + pause > COPY_PATIENCE {
            break;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(COPY_PAUSE_MAX);
    }
    Err(StoreError::backend(
        BACKEND,
        format!("{location}: read-only open"),
        format!(
            "the directory changed during each of {copies} copies in {} s (a writer is busy); try again",
            COPY_PATIENCE.as_secs()
        ),
    ))
}
