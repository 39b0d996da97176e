//! Which session a command means: `--session` (an id, a unique prefix, `latest` or a name: see
//! [`crate::select`]), or the store's only session. Its own module so that every command file
//! can use it without importing `commands` (no import circle).

use ctxlog::{Store, StreamId};

use crate::error::CliError;

pub use crate::select::parse_session;

/// Resolves `--session`, or the only session of the store.
pub fn pick_session(store: &dyn Store, arg: Option<&str>) -> Result<StreamId, CliError> {
    crate::select::resolve(store, arg)
}
