//! CLI errors and their exit codes.

use std::path::Path;

use ctxlog::SessionError;

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
        /// What is wrong (names the field).
        message: String,
    },
    /// A bad flag or argument.
    #[error("{0}")]
    Usage(String),
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
}

impl CliError {
    /// An input error at `file:line`.
    pub fn input(file: &Path, line: usize, message: String) -> CliError {
        CliError::Input { file: file.display().to_string(), line, message }
    }

    /// The exit code this error means.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Input { .. } | CliError::Usage(_) => EXIT_INPUT,
            CliError::Session(SessionError::Invariant { .. } | SessionError::Decode(_)) | CliError::InvalidLog(_) => {
                EXIT_INVALID_LOG
            }
            CliError::Session(
                SessionError::Config(_)
                | SessionError::Message { .. }
                | SessionError::Exists(_)
                | SessionError::NotFound(_),
            ) => EXIT_INPUT,
            CliError::Session(SessionError::Store(e)) | CliError::Store(e) if is_damage(e) => EXIT_INVALID_LOG,
            _ => EXIT_STORE,
        }
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
