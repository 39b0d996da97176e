//! Store URLs: `sqlite:PATH`, `sled:PATH`, `fs:PATH`, `postgres://…` (or `postgresql://…`), `mem:`.

use ctxlog::{MemoryStore, Store};
use ctxlog_store_fs::FsStore;
use ctxlog_store_postgres::PgStore;
use ctxlog_store_sled::SledStore;
use ctxlog_store_sqlite::SqliteStore;

use crate::error::CliError;

/// Opens the store a URL names.
pub fn open_store(url: &str) -> Result<Box<dyn Store>, CliError> {
    let (scheme, rest) = url.split_once(':').ok_or_else(|| bad(url))?;
    match (scheme, rest) {
        ("mem", "") => Ok(Box::new(MemoryStore::new())),
        ("sqlite", path) if !path.is_empty() => Ok(Box::new(SqliteStore::open(path)?)),
        ("sled", path) if !path.is_empty() => Ok(Box::new(SledStore::open(path)?)),
        ("fs", path) if !path.is_empty() => Ok(Box::new(FsStore::open(path)?)),
        ("postgres" | "postgresql", rest) if rest.starts_with("//") => Ok(Box::new(PgStore::open(url)?)),
        _ => Err(bad(url)),
    }
}

fn bad(url: &str) -> CliError {
    CliError::Usage(format!(
        "store URL {url:?} is not one of sqlite:PATH, sled:PATH, fs:PATH, postgres://USER@HOST/DB, mem:"
    ))
}
