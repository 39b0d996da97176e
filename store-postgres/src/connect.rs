//! Opening a connection: the client config plus the transport, shared by the pool, the lease
//! connection and `LISTEN`.

use ctxlog::store::StoreError;
use postgres::{Client, NoTls};

use crate::error::store_error;

/// Everything needed to open one more connection to the store's server.
#[derive(Clone)]
pub(crate) struct Connector {
    config: postgres::Config,
    location: String,
}

impl Connector {
    pub(crate) fn new(config: postgres::Config, location: String) -> Connector {
        Connector { config, location }
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
        self.config.connect(NoTls).map_err(|e| store_error(&self.location, what, e))
    }
}
