//! Store URLs: `sqlite:PATH`, `sled:PATH`, `fs:PATH`, `postgres://…` (or `postgresql://…`), `mem:`.

use std::path::Path;
use std::time::{Duration, Instant};

use ctxlog::{MemoryStore, Store, StoreError};
use ctxlog_store_fs::{FsOptions, FsStore};
use ctxlog_store_postgres::{PgOptions, PgStore};
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

/// How a long-running command (`proxy`) opens its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Opening {
    /// `--store-pool`: pooled connections of a PostgreSQL store (`None`: the URL's
    /// `pool_size`, else the default).
    pub pool: Option<usize>,
    /// `--store-wait`: how long to keep retrying a store that is unavailable (a database
    /// server that is down or restarting) before giving up; zero tries once.
    pub wait: Duration,
    /// `--accept-loss`: see [`open_store_with`].
    pub accept_loss: bool,
}

/// [`open_store`] for a service: a store that is unavailable (transient) is retried with
/// backoff (0.2 s doubling to 5 s, each retry logged) for up to `opening.wait`.
pub fn open_store_waiting(url: &str, access: Access, opening: Opening) -> Result<Box<dyn Store>, CliError> {
    let deadline = Instant::now() + opening.wait;
    let mut pause = Duration::from_millis(200);
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match open_url(url, access, opening.pool, opening.accept_loss) {
            Err(CliError::Store(e)) if is_transient(&e) && Instant::now() + pause <= deadline => {
                tracing::warn!(attempt, retry_in = ?pause, error = %e, "the store is unavailable; waiting for it (--store-wait)");
                eprintln!("ctxlog: the store is unavailable ({e}); retrying in {pause:?} (--store-wait)");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

fn is_transient(e: &StoreError) -> bool {
    matches!(e, StoreError::Unavailable { .. }) || ctxlog_store_postgres::is_transient(e)
}

/// Opens the store a URL names. A store that does not exist is [`StoreError::Missing`] unless
/// `access` is [`Access::Create`].
pub fn open_store(url: &str, access: Access) -> Result<Box<dyn Store>, CliError> {
    open_url(url, access, None, false)
}

/// [`open_store`]; a writer's open of an fs store that lost acknowledged versions accepts the
/// loss when `accept_loss` is set (`--accept-loss`, [`FsOptions::accept_loss`]) instead of
/// failing.
pub fn open_store_with(url: &str, access: Access, accept_loss: bool) -> Result<Box<dyn Store>, CliError> {
    open_url(url, access, None, accept_loss)
}

fn open_url(url: &str, access: Access, pool: Option<usize>, accept_loss: bool) -> Result<Box<dyn Store>, CliError> {
    let (scheme, rest) = url.split_once(':').ok_or_else(|| bad(url))?;
    let missing = |backend: &'static str, exists: bool| match (exists, access) {
        (false, Access::ReadWrite) => Err(StoreError::Missing { backend, location: rest.to_owned() }),
        _ => Ok(()),
    };
    if pool.is_some() && !matches!(scheme, "postgres" | "postgresql") {
        return Err(CliError::Usage(format!("--store-pool is for postgres:// stores, not {url:?}")));
    }
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
        ("postgres" | "postgresql", rest, _) if rest.starts_with("//") => match pool {
            Some(n) if url.contains("pool_size=") => {
                return Err(CliError::Usage(format!(
                    "--store-pool {n} and the URL's pool_size both set the pool size: keep one"
                )))
            }
            Some(0) => return Err(CliError::Usage("--store-pool 0: the pool needs at least one connection".into())),
            Some(n) => Box::new(PgStore::open_with(url, PgOptions { pool_size: n, ..PgOptions::default() })?),
            None => Box::new(PgStore::open(url)?),
        },
        _ => return Err(bad(url)),
    };
    Ok(store)
}

fn bad(url: &str) -> CliError {
    CliError::Usage(format!(
        "store URL {url:?} is not one of sqlite:PATH, sled:PATH, fs:PATH, postgres://USER@HOST/DB, mem:"
    ))
}
