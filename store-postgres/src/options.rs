//! How a store connects: the connection string plus the settings the store forces on every
//! connection it opens.

use std::str::FromStr;
use std::time::Duration;

use ctxlog::store::StoreError;
use postgres::config::Host;

use crate::connect::Connector;
use crate::error::{backend, PgError};
use crate::params;
use crate::tls::{self, SslMode};

/// Knobs of a [`crate::PgStore`]. `PgOptions::default()` is what [`crate::PgStore::open`] uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// Most connections the store keeps open at once (one per thread using it concurrently);
    /// `pool_size=N` in the connection string overrides it. The lease connection
    /// ([`crate::lease`]) comes on top.
    pub pool_size: usize,
    /// How long a caller waits for a free pooled connection before [`PgError::PoolExhausted`].
    pub checkout_timeout: Duration,
    /// `statement_timeout` of every connection; a statement running longer is cancelled and
    /// reported as [`PgError::StatementTimeout`]. `None` leaves the server's setting.
    pub statement_timeout: Option<Duration>,
    /// Connect timeout when the URL sets none.
    pub connect_timeout: Duration,
    /// After the connection broke while an append was committing, how long the store keeps
    /// reconnecting to find out whether the batch landed before it reports
    /// [`StoreError::Unavailable`].
    pub resolve_window: Duration,
    /// Open read-only: every connection runs with `default_transaction_read_only=on`, and the
    /// schema is checked but never created or migrated.
    pub read_only: bool,
    /// Send a `NOTIFY` on the stream's channel after each append (wakes `ctxlog tail`).
    pub notify: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            pool_size: 8,
            checkout_timeout: Duration::from_secs(30),
            statement_timeout: Some(Duration::from_secs(30)),
            connect_timeout: Duration::from_secs(5),
            resolve_window: Duration::from_secs(10),
            read_only: false,
            notify: true,
        }
    }
}

/// Parses `url` (a `postgres://`/`postgresql://` URL or a libpq `key=value` string), takes out
/// ctxlog's own parameters ([`crate::params`]), finds the password, sets up TLS and adds the
/// settings the store relies on. Returns how to connect (its location never shows the
/// password) and the pool size to use.
pub(crate) fn client_config(url: &str, opts: &PgOptions) -> Result<(Connector, usize), StoreError> {
    let env = |k: &str| std::env::var(k).ok();
    client_config_in(url, opts, &env)
}

/// [`client_config`] with the environment given.
pub(crate) fn client_config_in(
    url: &str,
    opts: &PgOptions,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Connector, usize), StoreError> {
    let bad = |location: &str, e: &dyn std::fmt::Display| {
        backend(location, "parse the connection string", PgError::Url(e.to_string()))
    };
    let (rest, params) = params::split(url).map_err(|e| bad(&redact(url), &e))?;
    let mut config = postgres::Config::from_str(&rest).map_err(|e| bad(&redact(url), &e))?;
    let location = describe(&config);
    params::resolve_password(&mut config, &params, env).map_err(|e| bad(&location, &e))?;
    // libpq's default; and like libpq, `sslmode` means nothing on Unix sockets.
    let mode = params.sslmode.unwrap_or(SslMode::Prefer);
    let only_sockets = !config.get_hosts().is_empty() && config.get_hosts().iter().all(|h| !matches!(h, Host::Tcp(_)));
    let mode = if only_sockets { SslMode::Disable } else { mode };
    config.ssl_mode(mode.client_mode());
    let roots = match mode {
        SslMode::Disable | SslMode::Prefer => None,
        _ => tls::load_roots(params.sslrootcert.as_deref()).map_err(|e| bad(&location, &e))?.map(|(_, r)| r),
    };
    let tls = tls::connector(mode, roots).map_err(|e| bad(&location, &e))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(opts.connect_timeout);
    }
    if config.get_application_name().is_none() {
        config.application_name("ctxlog");
    }
    // An acknowledged append must be on disk, whatever the server's default says; the
    // caller's own `options` come last so an explicit choice in the URL still wins.
    let mut forced = String::from("-c synchronous_commit=on");
    if let Some(t) = opts.statement_timeout {
        forced.push_str(&format!(" -c statement_timeout={}", t.as_millis()));
    }
    if opts.read_only {
        forced.push_str(" -c default_transaction_read_only=on");
    }
    let options = match config.get_options() {
        Some(user) if !user.is_empty() => format!("{forced} {user}"),
        _ => forced,
    };
    config.options(&options);
    let pool_size = params.pool_size.unwrap_or(opts.pool_size);
    Ok((Connector::new(config, location, tls), pool_size))
}

/// `postgres://user@host:port/dbname`, without the password.
pub(crate) fn describe(config: &postgres::Config) -> String {
    let user = config.get_user().unwrap_or("");
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            };
            match config.get_ports().get(i).or(config.get_ports().first()) {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        })
        .collect();
    let db = config.get_dbname().unwrap_or(user);
    format!("postgres://{user}@{}/{db}", hosts.join(","))
}

/// The URL with anything between `:` and `@` after the scheme replaced, for errors about a
/// URL that did not even parse.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<connection string>".to_owned();
    };
    match rest.split_once('@') {
        Some((auth, host)) => {
            let user = auth.split_once(':').map_or(auth, |(u, _)| u);
            format!("{scheme}://{user}@{host}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_never_shows_the_password() {
        let (c, _) = client_config("postgres://alice:s3cret@db.example:6543/logs", &PgOptions::default()).unwrap();
        assert_eq!(c.location(), "postgres://alice@db.example:6543/logs");
        assert_eq!(c.config().get_password(), Some(&b"s3cret"[..]));
    }

    #[test]
    fn forced_settings_come_before_the_callers_own() {
        let opts = PgOptions { read_only: true, ..PgOptions::default() };
        let (c, _) = client_config("postgres://u@h/db?options=-c%20statement_timeout%3D5", &opts).unwrap();
        let config = c.config();
        assert_eq!(
            config.get_options(),
            Some("-c synchronous_commit=on -c statement_timeout=30000 -c default_transaction_read_only=on -c statement_timeout=5")
        );
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(5)));
    }

    #[test]
    fn a_bad_url_is_a_url_error_without_the_password() {
        let e = client_config("postgres://bob:hunter2@host:notaport/db", &PgOptions::default()).unwrap_err();
        assert!(matches!(PgError::of(&e), Some(PgError::Url(_))), "{e}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(e.to_string().contains("postgres://bob@host:notaport/db"), "{e}");
    }

    #[test]
    fn sslmode_is_libpqs_and_verification_needs_a_root() {
        let mode = |url: &str| {
            client_config(url, &PgOptions::default()).map(|(c, _)| (c.config().get_ssl_mode(), c.has_tls()))
        };
        use postgres::config::SslMode as Client;
        assert_eq!(mode("postgres://u@h/db").unwrap(), (Client::Prefer, true), "libpq's default: prefer");
        assert_eq!(mode("postgres://u@h/db?sslmode=require").unwrap(), (Client::Require, true));
        assert_eq!(mode("postgres://u@h/db?sslmode=disable").unwrap(), (Client::Disable, false));
        assert_eq!(
            mode("postgres://u@%2Ftmp/db?sslmode=require").unwrap(),
            (Client::Disable, false),
            "sockets: ignored"
        );
        let e = mode("postgres://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem").unwrap_err();
        assert!(
            matches!(PgError::of(&e), Some(PgError::Url(m)) if m.contains("sslrootcert=/nonexistent/ca.pem")),
            "{e}"
        );
    }

    #[test]
    fn pool_size_in_the_url_overrides_the_options() {
        let (_, n) = client_config("postgres://u@h/db?pool_size=24", &PgOptions::default()).unwrap();
        assert_eq!(n, 24);
        let (_, n) = client_config("postgres://u@h/db", &PgOptions { pool_size: 3, ..PgOptions::default() }).unwrap();
        assert_eq!(n, 3);
        let e = client_config("postgres://u:pw@h/db?pool_size=0", &PgOptions::default()).unwrap_err();
        assert!(e.to_string().contains("pool_size=0") && !e.to_string().contains("pw@"), "{e}");
    }

    #[test]
    fn unix_socket_hosts_are_described_by_their_directory() {
        let (c, _) = client_config("postgresql://postgres@%2Ftmp%2Fpg.x/ctxlog", &PgOptions::default()).unwrap();
        assert_eq!(c.location(), "postgres://postgres@/tmp/pg.x:5432/ctxlog");
    }
}
