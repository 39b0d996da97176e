//! Opening a connection: the client config plus the transport, shared by the pool, the lease
//! connection and `LISTEN`.

use ctxlog::store::StoreError;
use postgres::{Client, NoTls};

use crate::error::store_error;
use crate::tls::RustlsConnect;

/// Everything needed to open one more connection to the store's server.
#[derive(Clone)]
pub(crate) struct Connector {
    config: postgres::Config,
    location: String,
    /// `None` for `sslmode=disable` (and Unix sockets).
    tls: Option<RustlsConnect>,
}

impl Connector {
    pub(crate) fn new(config: postgres::Config, location: String, tls: Option<RustlsConnect>) -> Connector {
        Connector { config, location, tls }
    }

    /// The client configuration.
    #[cfg(test)]
    pub(crate) fn config(&self) -> &postgres::Config {
        &self.config
    }

    /// Whether connections may use TLS.
    #[cfg(test)]
    pub(crate) fn has_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Where the store is (no password).
    pub(crate) fn location(&self) -> &str {
        &self.location
    }

    /// The same connector with another `application_name` (what `pg_stat_activity` shows) when
    /// the URL did not choose one.
    pub(crate) fn named(&self, default: &str, name: &str) -> Connector {
        let mut c = self.clone();
        if c.config.get_application_name() == Some(default) {
            c.config.application_name(name);
        }
        c
    }

    /// Opens a connection; `what` says what for, in the error.
    pub(crate) fn connect(&self, what: &str) -> Result<Client, StoreError> {
        let client = match &self.tls {
            Some(tls) => self.config.connect(tls.clone()),
            None => self.config.connect(NoTls),
        };
        client.map_err(|e| store_error(&self.location, what, e))
    }
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the config: it holds the password.
        f.debug_struct("Connector").field("location", &self.location).field("tls", &self.tls.is_some()).finish()
    }
}
