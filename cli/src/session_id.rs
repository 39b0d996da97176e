//! Which session a command means: `--session`, or the store's only one.

use ctxlog::{Store, StreamId};

use crate::error::CliError;

/// Resolves `--session`, or the only session of the store.
pub fn pick_session(store: &dyn Store, arg: Option<&str>) -> Result<StreamId, CliError> {
    if let Some(s) = arg {
        return parse_session(s);
    }
    let streams = store.streams()?;
    match streams.as_slice() {
        [one] => Ok(*one),
        [] => Err(CliError::Flag { flag: "--session", message: "the store holds no session".into() }),
        many => Err(CliError::Flag {
            flag: "--session",
            message: format!(
                "the store holds {} sessions; choose one with --session ({})",
                many.len(),
                many.iter().take(5).map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ),
        }),
    }
}

/// Parses a session id.
pub fn parse_session(s: &str) -> Result<StreamId, CliError> {
    s.parse().map_err(|e| CliError::Flag { flag: "--session", message: format!("--session {s:?} is not a UUID: {e}") })
}
