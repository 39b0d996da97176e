//! What can go wrong talking to PostgreSQL, sorted into what a host can act on.
//!
//! Transient faults (server down, restarting, connection broken) become
//! [`StoreError::Unavailable`]; a newer schema is [`StoreError::Schema`]; everything else is
//! [`StoreError::Backend`] with a [`PgError`] inside, which [`PgError::of`] gets back out.

use std::error::Error as _;

use ctxlog::store::StoreError;

/// Backend name in every error.
pub(crate) const BACKEND: &str = "postgres";

/// PostgreSQL faults that are not transient, each one matchable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// The connection string does not parse, or names something this build cannot do.
    #[error("invalid connection URL: {0}")]
    Url(String),
    /// The server refused the credentials (wrong password, unknown role, `pg_hba.conf`).
    #[error("authentication failed: {0}")]
    Auth(String),
    /// A statement ran longer than `statement_timeout` and was cancelled; nothing it was
    /// writing was committed.
    #[error("statement cancelled after statement_timeout ({0})")]
    StatementTimeout(String),
    /// Every pooled connection stayed busy longer than the checkout timeout.
    #[error("all {size} pooled connections stayed busy for {waited_ms} ms")]
    PoolExhausted {
        /// Pool size.
        size: usize,
        /// How long the caller waited.
        waited_ms: u64,
    },
    /// A write on a store opened read-only (`default_transaction_read_only=on`).
    #[error("the store was opened read-only: {0}")]
    ReadOnly(String),
    /// The role lacks a privilege the store needs (the message names the role, the privilege,
    /// the object and the `GRANT` that fixes it).
    #[error("{0}")]
    Privilege(String),
    /// A read-only open of a database where no ctxlog schema was ever created.
    #[error("no ctxlog schema here (tables ctxlog_meta, ctxlog_records, … are missing); a writer's open creates it")]
    NoSchema,
    /// Any other error the server or the client reported.
    #[error(transparent)]
    Client(#[from] postgres::Error),
}

impl PgError {
    /// The [`PgError`] inside a [`StoreError::Backend`] from this crate, if any.
    pub fn of(e: &StoreError) -> Option<&PgError> {
        match e {
            StoreError::Backend { backend: BACKEND, source, .. } => source.downcast_ref::<PgError>(),
            _ => None,
        }
    }
}

/// How an error from the client is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// `unique_violation` on the primary key: another writer won the version.
    Duplicate,
    /// The connection is gone or the server is (re)starting: nothing more goes through it.
    Connection,
    /// Wrong credentials.
    Auth,
    /// `statement_timeout` fired.
    Timeout,
    /// A write was refused by a read-only transaction.
    ReadOnly,
    /// `insufficient_privilege`.
    Privilege,
    /// Anything else (a bug, a permission, a full disk…).
    Other,
}

/// Sorts `e` by what the caller should do about it.
pub(crate) fn classify(e: &postgres::Error) -> Class {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        return match code {
            "23505" => Class::Duplicate,
            "57014" => Class::Timeout,
            "25006" => Class::ReadOnly,
            "42501" => Class::Privilege,
            // invalid_authorization_specification, invalid_password
            "28000" | "28P01" => Class::Auth,
            // admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections,
            // and the whole connection_exception class.
            "57P01" | "57P02" | "57P03" | "53300" => Class::Connection,
            c if c.starts_with("08") => Class::Connection,
            _ => Class::Other,
        };
    }
    if e.is_closed() || e.source().is_some_and(|s| s.is::<std::io::Error>()) {
        return Class::Connection;
    }
    // The client's own "password missing" (the server asked for one, the URL has none).
    if full_message(e).contains("password missing") {
        return Class::Auth;
    }
    Class::Other
}

/// Maps a client error to the store's error, naming `location` and what was being done.
pub(crate) fn store_error(location: &str, what: &str, e: postgres::Error) -> StoreError {
    match classify(&e) {
        Class::Connection => unavailable(location, format!("{what}: {}", full_message(&e))),
        Class::Auth => backend(location, what, PgError::Auth(full_message(&e))),
        Class::Timeout => backend(location, what, PgError::StatementTimeout(full_message(&e))),
        Class::ReadOnly => backend(location, what, PgError::ReadOnly(full_message(&e))),
        Class::Privilege => backend(
            location,
            what,
            PgError::Privilege(format!(
                "{}: grant the store's role SELECT, INSERT, UPDATE on ctxlog_meta, ctxlog_records, ctxlog_blobs and \
                 ctxlog_snapshots (SELECT only for a read-only store)",
                full_message(&e)
            )),
        ),
        Class::Duplicate | Class::Other => backend(location, what, PgError::Client(e)),
    }
}

/// [`StoreError::Backend`] carrying a [`PgError`].
pub(crate) fn backend(location: &str, what: &str, e: PgError) -> StoreError {
    StoreError::backend(BACKEND, format!("{location}: {what}"), e)
}

/// [`StoreError::Unavailable`].
pub(crate) fn unavailable(location: &str, detail: String) -> StoreError {
    StoreError::Unavailable { backend: BACKEND, location: location.to_owned(), detail }
}

/// The error with its causes (the client's `Display` alone often says only "db error").
pub(crate) fn full_message(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{} ({})", db.message(), db.code().code());
        if let Some(d) = db.detail() {
            s.push_str(": ");
            s.push_str(d);
        }
        return s;
    }
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}
