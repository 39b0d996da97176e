//! One history item of a request as the proxy meets it (its raw JSON, digest and field), how
//! items are parsed in the session's format, and what preparing a call can fail with: shared by
//! the sessions, their branches (`history.rs`), provider compactions and Responses chains, so
//! none of them imports another for it.

use std::sync::Arc;

use ctxlog::message::Message;
use ctxlog::{Session, SessionError, WireFormat};

/// The store every session of the proxy shares.
pub(crate) type Store = Arc<dyn ctxlog::Store>;
pub(crate) type Sess = Session<Store>;

/// One history item of a request: its raw JSON (a slice of the request body, or the
/// Anthropic `system` wrapped as a message), its digest, and where it came from.
#[derive(Clone, Copy)]
pub(crate) struct Item<'a> {
    pub raw: &'a [u8],
    pub digest: u128,
    /// `None`: the `system` field; else the index in `messages`.
    pub index: Option<usize>,
    /// The request's list and system field names (`messages`/`system`, `input`/`instructions`).
    pub keys: crate::body::Keys,
}

impl Item<'_> {
    /// `system` or `messages[i]`: the field an error names.
    pub fn field(&self) -> String {
        match self.index {
            None => self.keys.system.to_owned(),
            Some(i) => format!("{}[{i}]", self.keys.list),
        }
    }

    /// Where the item sits among the request's history items (`system` first): the position a
    /// Gemini content's tool pairs are keyed by.
    pub fn position(&self) -> u64 {
        self.index.map_or(0, |i| i as u64)
    }

    /// Parses the item in `format` (not checked).
    pub fn parse(&self, format: WireFormat) -> Result<Message, PrepareError> {
        ctxlog::internal::wire::parse_at(self.text()?, format, self.position())
            .map_err(|e| invalid(&self.field(), &e.field, e.message))
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

/// Parses and checks every item; the first error names its field.
pub(crate) fn parse_all(items: &[Item<'_>], format: WireFormat) -> Result<Vec<Message>, PrepareError> {
    items
        .iter()
        .map(|it| {
            let m = it.parse(format)?;
            ctxlog::internal::wire::check_format(&m, format).map_err(|e| invalid(&it.field(), &e.field, e.message))?;
            // ctxlog's tag for `instructions` is not an item a client may send.
            if it.index.is_some()
                && ctxlog::internal::wire::responses::is_instructions(&m)
                && format == WireFormat::OpenAiResponses
            {
                return Err(invalid(&it.field(), "type", "unknown item type \"instructions\"".into()));
            }
            // `system` is ctxlog's role for `systemInstruction`, not one of `contents`.
            if it.index.is_some() && format == WireFormat::Gemini && m.role.is_system() {
                return Err(invalid(&it.field(), "role", "Please use a valid role: user, model.".into()));
            }
            Ok(m)
        })
        .collect()
}

pub(crate) fn invalid(item: &str, inner: &str, message: String) -> PrepareError {
    let field = match (item, inner) {
        // The Anthropic `system` field was wrapped as a message: its `content` is the field.
        ("system" | "instructions", "content") | ("systemInstruction", "parts") | (_, "") => item.to_owned(),
        (field @ ("system" | "instructions" | "systemInstruction"), rest) => {
            format!("{field}{}", rest.strip_prefix("content").unwrap_or(rest))
        }
        (item, rest) => format!("{item}.{rest}"),
    };
    PrepareError::Invalid { field, message }
}
