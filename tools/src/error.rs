//! CLI errors and their exit codes.

use std::path::Path;

use ctxlog::SessionError;

/// Exit code: `rerun` or `diff` with `--exit-code` found calls that differ.
pub const EXIT_DIFFERS: i32 = 1;
/// Exit code: bad input (a transcript line, a flag, a config value).
pub const EXIT_INPUT: i32 = 2;
/// Exit code: the store failed or is not there (IO, lock, conflict, "no store at …").
pub const EXIT_STORE: i32 = 3;
/// Exit code: the log is invalid or damaged (`verify` problems, a strict replay violation, a
/// corrupt record, a damaged store file, an unaccepted repair).
pub const EXIT_INVALID_LOG: i32 = 4;

/// Everything a command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A problem in an input file.
    #[error("{file}{}: {message}", if *.line > 0 { format!(":{}", .line) } else { String::new() })]
    Input {
        /// The file.
        file: String,
        /// 1-based line (0 = the file as a whole).
        line: usize,
        /// The offending field (a JSON path or a config key), when known.
        field: Option<String>,
        /// What is wrong (names the field).
        message: String,
    },
    /// A bad flag or argument.
    #[error("{0}")]
    Usage(String),
    /// A flag whose value does not fit (past the head, no such call, not a UUID).
    #[error("{message}")]
    Flag {
        /// The flag, e.g. `--version`.
        flag: &'static str,
        /// What is wrong, naming the flag.
        message: String,
    },
    /// Knobs that cannot work together.
    #[error(transparent)]
    Config(#[from] ctxlog::config::ConfigError),
    /// The engine or the store failed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The store failed outside a session.
    #[error(transparent)]
    Store(#[from] ctxlog::StoreError),
    /// Writing output failed.
    #[error("cannot write {what}: {source}")]
    Output {
        /// What was being written.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The log breaks its invariants or does not verify.
    #[error("{0}")]
    InvalidLog(String),
    /// `rerun`/`diff --exit-code` found this many calls that differ (not an error: exit 1).
    #[error("{0} call(s) differ")]
    Differs(usize),
}

impl CliError {
    /// An input error at `file:line`.
    pub fn input(file: &Path, line: usize, message: String) -> CliError {
        CliError::Input { file: file.display().to_string(), line, field: None, message }
    }

    /// An input error at `file:line` in `field`.
    pub fn input_field(file: &Path, line: usize, field: impl Into<String>, message: String) -> CliError {
        let field = Some(field.into()).filter(|f: &String| !f.is_empty());
        CliError::Input { file: file.display().to_string(), line, field, message }
    }

    /// A message that does not parse, at `file:line`.
    pub fn wire(file: &Path, line: usize, e: &ctxlog::internal::wire::WireError) -> CliError {
        CliError::input_field(file, line, e.field.clone(), e.to_string())
    }

    /// The file, line and field this error is about, when it is about one.
    pub fn location(&self) -> (Option<String>, Option<usize>, Option<String>) {
        match self {
            CliError::Input { file, line, field, .. } => {
                (Some(file.clone()), Some(*line).filter(|l| *l > 0), field.clone())
            }
            CliError::Flag { flag, .. } => (None, None, Some((*flag).to_owned())),
            CliError::Config(e) => (None, None, Some(e.key.to_owned())),
            CliError::Session(SessionError::Config(e)) => (None, None, Some(e.key.to_owned())),
            CliError::Session(SessionError::NotFound(_) | SessionError::Exists(_)) => {
                (None, None, Some("--session".to_owned()))
            }
            CliError::Session(SessionError::Store(e)) | CliError::Store(e) => (store_location(e), None, None),
            _ => (None, None, None),
        }
    }

    /// The error as one JSON object (`--json`): `{"error", "exit", "file", "line", "field"}`.
    pub fn to_json(&self) -> serde_json::Value {
        let (file, line, field) = self.location();
        serde_json::json!({"error": self.to_string(), "exit": self.exit_code(), "file": file, "line": line, "field": field})
    }

    /// The exit code this error means.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Differs(_) => EXIT_DIFFERS,
            CliError::Input { .. } | CliError::Usage(_) | CliError::Flag { .. } | CliError::Config(_) => EXIT_INPUT,
            CliError::Session(SessionError::Invariant { .. } | SessionError::Decode(_)) | CliError::InvalidLog(_) => {
                EXIT_INVALID_LOG
            }
            CliError::Session(
                SessionError::Config(_)
                | SessionError::Refused { .. }
                | SessionError::Message { .. }
                | SessionError::Exists(_)
                | SessionError::NotFound(_)
                | SessionError::Unfinished { .. },
            ) => EXIT_INPUT,
            CliError::Session(SessionError::Store(e)) | CliError::Store(e) if is_damage(e) => EXIT_INVALID_LOG,
            _ => EXIT_STORE,
        }
    }
}

/// A command-line error from clap as the JSON object of `--json` (`field` = the flag it is about).
pub fn clap_json(e: &clap::Error, exit: i32) -> serde_json::Value {
    use clap::error::{ContextKind, ContextValue};
    let text = e.to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default();
    let mut message = first.strip_prefix("error: ").unwrap_or(first).to_owned();
    // clap's tips ("a similar argument exists: '--budget'") are the useful part of a typo.
    for tip in lines.filter(|l| l.starts_with("tip:")) {
        message.push_str("; ");
        message.push_str(tip);
    }
    let field = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => Some(s.split_whitespace().next().unwrap_or(s).to_owned()),
        _ => None,
    };
    serde_json::json!({"error": message, "exit": exit, "file": null, "line": null, "field": field})
}

/// The file or directory a store error names.
fn store_location(e: &ctxlog::StoreError) -> Option<String> {
    match e {
        ctxlog::StoreError::Locked { location, .. }
        | ctxlog::StoreError::Schema { location, .. }
        | ctxlog::StoreError::Damaged { location, .. }
        | ctxlog::StoreError::Missing { location, .. } => Some(location.clone()),
        _ => None,
    }
}

/// Whether a store error means damaged data (exit 4) rather than a failure to get at it.
pub fn is_damage(e: &ctxlog::StoreError) -> bool {
    matches!(
        e,
        ctxlog::StoreError::Corrupt { .. }
            | ctxlog::StoreError::CorruptBlob { .. }
            | ctxlog::StoreError::Damaged { .. }
    )
}

/// Maps an IO error while writing output.
pub fn output(what: &str) -> impl FnOnce(std::io::Error) -> CliError + '_ {
    move |source| CliError::Output { what: what.to_owned(), source }
}
