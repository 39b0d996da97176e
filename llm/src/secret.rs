//! The API key as a type that cannot be printed by accident.

use std::fmt;

/// An API key. `Debug` and `Display` print `[REDACTED]`; the only way to the bytes is
/// [`ApiKey::expose`], used where the header is set.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

/// What a key is replaced with wherever text could carry it.
pub(crate) const REDACTED: &str = "[REDACTED]";

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> ApiKey {
        ApiKey(key.into())
    }

    /// Reads the key from the environment variable named `env`; an unset or empty variable is
    /// `None`.
    pub fn from_env(env: &str) -> Option<ApiKey> {
        match std::env::var(env) {
            Ok(v) if !v.trim().is_empty() => Some(ApiKey(v.trim().to_owned())),
            _ => None,
        }
    }

    /// The key itself, for the request header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the key replaced by `[REDACTED]`: a provider may echo the
    /// key back in an error body, and serde's messages quote the values they choke on.
    pub(crate) fn scrub(&self, text: &str) -> String {
        if self.0.is_empty() {
            return text.to_owned();
        }
        text.replace(&self.0, REDACTED)
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}
