//! Store URLs: `sqlite:PATH`, `sled:PATH`, `fs:PATH`, `postgres://…` (or `postgresql://…`), `mem:`.

use std::path::Path;

use ctxlog::{MemoryStore, Store, StoreError};
use ctxlog_store_fs::{FsOptions, FsStore};
use ctxlog_store_postgres::PgStore;
use ctxlog_store_sled::SledStore;
use ctxlog_store_sqlite::SqliteStore;

use crate::error::CliError;

/// How a command uses its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read an existing store without changing a byte of it, next to a running writer or on
    /// read-only media (`verify`, `sessions`, `replay`, `inspect`, `export`, `copy --from`).
    ReadOnly,
    /// Write to an existing store (`restore`).
    ReadWrite,
    /// Write, creating the store if there is none (`import`, `demo`, `copy --to`).
    Create,
}

/// Opens the store a URL names. A store that does not exist is [`StoreError::Missing`] unless
/// `access` is [`Access::Create`].
pub fn open_store(url: &str, access: Access) -> Result<Box<dyn Store>, CliError> {
    open_store_with(url, access, false)
}

/// [`open_store`]; a writer's open of an fs store that lost acknowledged versions accepts the
/// loss when `accept_loss` is set (`--accept-loss`, [`FsOptions::accept_loss`]) instead of
/// failing.
pub fn open_store_with(url: &str, access: Access, accept_loss: bool) -> Result<Box<dyn Store>, CliError> {
    let (scheme, rest) = url.split_once(':').ok_or_else(|| bad(url))?;
    let missing = |backend: &'static str, exists: bool| match (exists, access) {
        (false, Access::ReadWrite) => Err(StoreError::Missing { backend, location: rest.to_owned() }),
        _ => Ok(()),
    };
    let store: Box<dyn Store> = match (scheme, rest, access) {
        ("mem", "", _) => Box::new(MemoryStore::new()),
        ("sqlite", path, Access::ReadOnly) if !path.is_empty() => Box::new(SqliteStore::open_read_only(path)?),
        ("sqlite", path, _) if !path.is_empty() => {
            missing("sqlite", Path::new(path).is_file())?;
            Box::new(SqliteStore::open(path)?)
        }
        ("sled", path, Access::ReadOnly) if !path.is_empty() => Box::new(SledStore::open_read_only(path)?),
        ("sled", path, _) if !path.is_empty() => {
            missing("sled", Path::new(path).join("conf").is_file())?;
            Box::new(SledStore::open(path)?)
        }
        ("fs", path, Access::ReadOnly) if !path.is_empty() => Box::new(FsStore::open_read_only(path)?),
        ("fs", path, _) if !path.is_empty() => {
            missing("fs", Path::new(path).join("FORMAT").is_file())?;
            let store = FsStore::open_with(path, FsOptions { accept_loss, ..FsOptions::default() })?;
            for loss in store.accepted_losses() {
                tracing::warn!(stream = %loss.stream, record = %loss.record.display(), "accepted a loss (--accept-loss)");
            }
            Box::new(store)
        }
        ("postgres" | "postgresql", rest, Access::ReadOnly) if rest.starts_with("//") => {
            Box::new(PgStore::open_read_only(url)?)
        }
        ("postgres" | "postgresql", rest, _) if rest.starts_with("//") => Box::new(PgStore::open(url)?),
        _ => return Err(bad(url)),
    };
    Ok(store)
}

fn bad(url: &str) -> CliError {
    CliError::Usage(format!(
        "store URL {url:?} is not one of sqlite:PATH, sled:PATH, fs:PATH, postgres://USER@HOST/DB, mem:"
    ))
}
