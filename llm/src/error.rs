//! Why a call produced no summary: one variant per reason, each saying what to look at.

use std::time::Duration;

use crate::secret::ApiKey;

/// How much of a provider's error body (or a command's stderr) an error keeps.
pub(crate) const EXCERPT_CHARS: usize = 500;

/// A call that produced no summary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    /// No complete answer within the configured time (HTTP: per attempt; command: the child
    /// was killed).
    #[error("{target}: no answer within {after:?}")]
    Timeout {
        /// The URL or program.
        target: String,
        /// The limit that ran out.
        after: Duration,
    },
    /// The provider answered with a non-success HTTP status (429 and 5xx after one retry).
    #[error("{url}: HTTP {code}{}: {body_excerpt}", if *retried { " (after one retry)" } else { "" })]
    Status {
        /// The URL called.
        url: String,
        /// The HTTP status.
        code: u16,
        /// The start of the response body, key redacted.
        body_excerpt: String,
        /// Whether this was the answer to the one retry.
        retried: bool,
    },
    /// The answer is not the JSON the protocol promises.
    #[error("{source_name}: invalid response: {detail}")]
    InvalidJson {
        /// The URL or program.
        source_name: String,
        /// Which field is wrong and how.
        detail: String,
    },
    /// The answer was cut at the request's `max_tokens` (`stop_reason: max_tokens`,
    /// `finish_reason: length`).
    #[error("{source_name}: the answer was cut at max_tokens ({reason})")]
    Truncated {
        /// The URL.
        source_name: String,
        /// The provider's stop or finish reason.
        reason: String,
    },
    /// The answer carries no summary text.
    #[error("{source_name}: empty completion")]
    Empty {
        /// The URL or program.
        source_name: String,
    },
    /// The connection could not be made (refused, unknown host, TLS failure).
    #[error("{url}: cannot connect: {detail}")]
    Connect {
        /// The URL called.
        url: String,
        /// The transport's reason.
        detail: String,
    },
    /// The environment variable that should hold the API key is unset or empty.
    #[error("API key missing: environment variable `{env}` is unset or empty")]
    MissingKey {
        /// The variable's name.
        env: String,
    },
    /// The summary command could not be run or failed.
    #[error("command `{program}`: {detail}{}", if stderr.is_empty() { String::new() } else { format!("; stderr: {stderr}") })]
    Command {
        /// The program.
        program: String,
        /// What went wrong (spawn failure, exit status, non-UTF-8 output).
        detail: String,
        /// The start of its stderr.
        stderr: String,
    },
}

impl LlmError {
    /// What a session records for an attempt that ended with this error: a timeout and an
    /// empty answer as such, anything else as a provider error with this error's sentence
    /// (which never holds the API key).
    pub fn into_failure(self) -> ctxlog::event::SummaryFailure {
        use ctxlog::event::SummaryFailure;
        match self {
            LlmError::Timeout { .. } => SummaryFailure::Timeout,
            LlmError::Empty { .. } => SummaryFailure::Empty,
            LlmError::Truncated { .. } => SummaryFailure::Truncated { max_tokens: None },
            // The same request gets the same answer: recorded as such, not sent again as is.
            LlmError::Status { code, .. } if is_deterministic(code) => {
                let detail = self.to_string();
                SummaryFailure::Rejected { status: code, detail }
            }
            e => SummaryFailure::Provider(e.to_string()),
        }
    }

    /// The same error with every occurrence of `key` replaced by `[REDACTED]`.
    pub(crate) fn scrubbed(self, key: &ApiKey) -> LlmError {
        match self {
            LlmError::Timeout { target, after } => LlmError::Timeout { target: key.scrub(&target), after },
            LlmError::Status { url, code, body_excerpt, retried } => {
                LlmError::Status { url: key.scrub(&url), code, body_excerpt: key.scrub(&body_excerpt), retried }
            }
            LlmError::InvalidJson { source_name, detail } => {
                LlmError::InvalidJson { source_name: key.scrub(&source_name), detail: key.scrub(&detail) }
            }
            LlmError::Empty { source_name } => LlmError::Empty { source_name: key.scrub(&source_name) },
            LlmError::Truncated { source_name, reason } => {
                LlmError::Truncated { source_name: key.scrub(&source_name), reason }
            }
            LlmError::Connect { url, detail } => LlmError::Connect { url: key.scrub(&url), detail: key.scrub(&detail) },
            e @ LlmError::MissingKey { .. } => e,
            LlmError::Command { program, detail, stderr } => LlmError::Command {
                program: key.scrub(&program),
                detail: key.scrub(&detail),
                stderr: key.scrub(&stderr),
            },
        }
    }
}

/// A status the same request gets again: a 4xx other than 408 (timeout), 409 (conflict) and
/// 429 (rate limit).
pub(crate) fn is_deterministic(code: u16) -> bool {
    (400..500).contains(&code) && !matches!(code, 408 | 409 | 429)
}

/// The first [`EXCERPT_CHARS`] characters of `bytes`, lossily decoded, trimmed.
pub(crate) fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
