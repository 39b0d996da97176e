//! A request's history as the proxy compares it with the log — its items — and what
//! preparing a call from them can fail with. Shared by `sessions` (bringing a lineage up to
//! the request) and `history` (comparing one branch with it), so neither imports the other.

use std::sync::Arc;

use ctxlog::{Session, SessionError};

/// The store every session of the proxy shares.
pub(crate) type Store = Arc<dyn ctxlog::Store>;
/// A session of the proxy.
pub(crate) type Sess = Session<Store>;

/// One history item of a request: its raw JSON (a slice of the request body, or the
/// Anthropic `system` wrapped as a message), its digest, and where it came from.
pub(crate) struct Item<'a> {
    pub raw: &'a [u8],
    pub digest: u128,
    /// `None`: the `system` field; else the index in `messages`.
    pub index: Option<usize>,
}

impl Item<'_> {
    /// `system` or `messages[i]`: the field an error names.
    pub fn field(&self) -> String {
        match self.index {
            None => "system".to_owned(),
            Some(i) => format!("messages[{i}]"),
        }
    }

    /// The raw JSON as text (the whole body was checked to be UTF-8; checked again, cheaply,
    /// only for the items that are parsed).
    pub fn text(&self) -> Result<&str, PrepareError> {
        std::str::from_utf8(self.raw)
            .map_err(|e| PrepareError::Invalid { field: self.field(), message: format!("not UTF-8: {e}") })
    }
}

/// What could not be prepared.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PrepareError {
    /// The client's request is wrong (400; nothing written).
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// The store could not write or read now (full disk, an outage): nothing was forwarded,
    /// and the client may retry.
    #[error(transparent)]
    Unavailable(SessionError),
    /// The session failed otherwise (its log breaks an invariant, a record does not decode).
    #[error(transparent)]
    Session(SessionError),
}

impl From<SessionError> for PrepareError {
    /// A refusal is the client's history breaking a rule of the log (an orphan tool result, a
    /// message not of the format): 400. A store error is an outage: 503/529.
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::Refused { violation, .. } => {
                PrepareError::Invalid { field: "messages".into(), message: violation.to_string() }
            }
            SessionError::Message { index, error } => {
                PrepareError::Invalid { field: format!("messages[{index}].{}", error.field), message: error.message }
            }
            e @ SessionError::Store(_) => PrepareError::Unavailable(e),
            e => PrepareError::Session(e),
        }
    }
}
