//! The connection-string parameters ctxlog reads itself (the client library rejects keys it
//! does not know), and where the password comes from.
//!
//! Parameters, in a URL's query (`?sslmode=verify-full&sslrootcert=/etc/ca.pem`) or as
//! `key=value` words of a libpq string:
//!
//! * `sslmode=disable|allow|prefer|require|verify-ca|verify-full`, `sslrootcert=FILE` (see
//!   [`crate::tls`]);
//! * `pool_size=N`: most pooled connections (overrides [`crate::PgOptions::pool_size`]);
//! * `passfile=FILE`: the password file (libpq's; else `PGPASSFILE`, else `~/.pgpass`);
//! * `password_env=NAME`: read the password from the environment variable `NAME`.
//!
//! The password, when the connection string has none (so it never has to be in `--store`, which
//! the process list shows): the variable named by `password_env`, else `PGPASSWORD`, else the
//! first matching line of the password file (`host:port:database:user:password`, `*` matches
//! anything, `\:` and `\\` escape; a Unix-socket host matches its directory or `localhost`;
//! like libpq, a file readable by group or others is ignored, with a warning).

use std::path::{Path, PathBuf};

use postgres::config::Host;

use crate::tls::SslMode;

/// What ctxlog took out of the connection string.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Params {
    pub sslmode: Option<SslMode>,
    pub sslrootcert: Option<PathBuf>,
    pub pool_size: Option<usize>,
    pub passfile: Option<PathBuf>,
    pub password_env: Option<String>,
}

const OURS: [&str; 5] = ["sslmode", "sslrootcert", "pool_size", "passfile", "password_env"];

/// A parameter ctxlog reads itself that cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ParamError {
    #[error("sslmode={0}: not one of disable, allow, prefer, require, verify-ca, verify-full")]
    SslMode(String),
    #[error("pool_size={0}: not a positive whole number")]
    PoolSize(String),
    #[error("password_env=: names no environment variable")]
    PasswordEnvEmpty,
    #[error("password_env={0}: the environment variable {0} is not set (it should hold the password)")]
    PasswordEnvUnset(String),
    #[error("passfile {}: {source}", file.display())]
    Passfile { file: PathBuf, source: std::io::Error },
}

impl Params {
    fn set(&mut self, key: &str, value: &str) -> Result<(), ParamError> {
        match key {
            "sslmode" => {
                self.sslmode = Some(SslMode::parse(value).ok_or_else(|| ParamError::SslMode(value.to_owned()))?)
            }
            "sslrootcert" => self.sslrootcert = Some(PathBuf::from(value)),
            "pool_size" => {
                self.pool_size = Some(
                    value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| ParamError::PoolSize(value.to_owned()))?,
                )
            }
            "passfile" => self.passfile = Some(PathBuf::from(value)),
            "password_env" => {
                if value.is_empty() {
                    return Err(ParamError::PasswordEnvEmpty);
                }
                self.password_env = Some(value.to_owned())
            }
            _ => {}
        }
        Ok(())
    }
}

/// Splits ctxlog's own parameters out of `url`; returns the rest for the client library.
pub(crate) fn split(url: &str) -> Result<(String, Params), ParamError> {
    let mut params = Params::default();
    if url.contains("://") {
        let Some((base, query)) = url.split_once('?') else { return Ok((url.to_owned(), params)) };
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(k);
            if OURS.contains(&key.as_str()) {
                params.set(&key, &decode(v))?;
            } else if !pair.is_empty() {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
        return Ok((rest, params));
    }
    // libpq `key=value` words: a value may be single-quoted with `\` escapes.
    let mut rest = String::new();
    for word in words(url) {
        let (key, value) = match word.split_once('=') {
            Some((k, v)) => (k.trim(), unquote(v.trim())),
            None => (word.trim(), String::new()),
        };
        if OURS.contains(&key) {
            params.set(key, &value)?;
        } else {
            if !rest.is_empty() {
                rest.push(' ');
            }
            rest.push_str(word.trim());
        }
    }
    Ok((rest, params))
}

/// The `key = value` words of a libpq string (whitespace around `=` allowed), as written.
fn words(s: &str) -> Vec<&str> {
    let bytes = s.as_bytes();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < bytes.len() {
        while i < bytes.len() && bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        let start = i;
        // The key, then `=` (possibly surrounded by spaces), then the value.
        while i < bytes.len() && !matches!(bytes.get(i), Some(b'=') | Some(b' ' | b'\t' | b'\n' | b'\r')) {
            i += 1;
        }
        while i < bytes.len() && bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        if bytes.get(i) == Some(&b'=') {
            i += 1;
            while i < bytes.len() && bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
                i += 1;
            }
            if bytes.get(i) == Some(&b'\'') {
                i += 1;
                while i < bytes.len() && bytes.get(i) != Some(&b'\'') {
                    i += if bytes.get(i) == Some(&b'\\') { 2 } else { 1 };
                }
                i += 1;
            } else {
                while i < bytes.len() && !bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
                    i += if bytes.get(i) == Some(&b'\\') { 2 } else { 1 };
                }
            }
        }
        let end = i.min(bytes.len());
        if let Some(w) = s.get(start..end) {
            if !w.trim().is_empty() {
                out.push(w);
            }
        }
        if end == start {
            i += 1;
        }
    }
    out
}

fn unquote(v: &str) -> String {
    let inner = v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')).unwrap_or(v);
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// Percent-decoding of a query component (`+` is kept: libpq URLs do not use it for space).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = |j: usize| bytes.get(j).and_then(|c| (*c as char).to_digit(16));
        match (b, hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Fills in the password when the connection string has none (see the module docs). `env` is
/// the process environment (a parameter so the tests need not change the real one).
pub(crate) fn resolve_password(
    config: &mut postgres::Config,
    params: &Params,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ParamError> {
    if config.get_password().is_some() {
        return Ok(());
    }
    if let Some(name) = &params.password_env {
        let value = env(name).ok_or_else(|| ParamError::PasswordEnvUnset(name.clone()))?;
        config.password(value);
        return Ok(());
    }
    if let Some(p) = env("PGPASSWORD").filter(|p| !p.is_empty()) {
        config.password(p);
        return Ok(());
    }
    let file = match (&params.passfile, env("PGPASSFILE").filter(|p| !p.is_empty()), env("HOME")) {
        (Some(f), _, _) => f.clone(),
        (None, Some(f), _) => PathBuf::from(f),
        (None, None, Some(home)) => Path::new(&home).join(".pgpass"),
        (None, None, None) => return Ok(()),
    };
    if let Some(p) = from_passfile(&file, config, params.passfile.is_some())? {
        config.password(p);
    }
    Ok(())
}

/// The password file's answer for `config`'s first host, port, database and user.
fn from_passfile(file: &Path, config: &postgres::Config, named: bool) -> Result<Option<String>, ParamError> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        // libpq ignores a missing default file; one named with `passfile=` must be there.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => return Ok(None),
        Err(source) => return Err(ParamError::Passfile { file: file.to_path_buf(), source }),
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(file) {
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(
                    passfile = %file.display(),
                    "password file has group or world access; it is ignored (chmod 0600 it)"
                );
                return Ok(None);
            }
        }
    }
    let hosts: Vec<String> = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => vec![h.clone()],
        Some(Host::Unix(p)) => vec![p.display().to_string(), "localhost".into()],
        None => vec!["localhost".into()],
    };
    let port = config.get_ports().first().copied().unwrap_or(5432).to_string();
    let user = config.get_user().unwrap_or("");
    let db = config.get_dbname().unwrap_or(user);
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = passfile_fields(line);
        let [h, p, d, u, password] = fields.as_slice() else { continue };
        let matches = |field: &str, value: &str| field == "*" || field == value;
        if hosts.iter().any(|host| matches(h, host)) && matches(p, &port) && matches(d, db) && matches(u, user) {
            return Ok(Some(password.clone()));
        }
    }
    Ok(None)
}

/// The five `:`-separated fields of a password-file line, with `\:` and `\\` unescaped (a
/// line with more colons keeps them in the password, as libpq does).
fn passfile_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(last)) = (chars.next(), fields.last_mut()) {
                    last.push(next);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(last) = fields.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn ctxlog_parameters_are_taken_out_of_a_url_and_the_rest_is_kept() {
        let (rest, p) = split(
            "postgres://u@h/db?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem&pool_size=16\
             &password_env=DB_PW&passfile=/p",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h/db?application_name=x");
        assert_eq!(p.sslmode, Some(SslMode::VerifyFull));
        assert_eq!(p.sslrootcert.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(p.pool_size, Some(16));
        assert_eq!(p.password_env.as_deref(), Some("DB_PW"));
        assert_eq!(p.passfile.as_deref(), Some(Path::new("/p")));
        assert_eq!(split("postgres://u@h/db?sslmode=require").unwrap().0, "postgres://u@h/db");
    }

    #[test]
    fn ctxlog_parameters_are_taken_out_of_a_key_value_string() {
        let (rest, p) = split("host=/tmp user=u options='-c search_path=a' sslmode = require pool_size=3").unwrap();
        assert_eq!(rest, "host=/tmp user=u options='-c search_path=a'");
        assert_eq!(p.sslmode, Some(SslMode::Require));
        assert_eq!(p.pool_size, Some(3));
        postgres::Config::from_str(&rest).unwrap();
    }

    #[test]
    fn bad_values_name_the_parameter() {
        for (url, field) in [
            ("postgres://u@h/db?pool_size=0", "pool_size=0"),
            ("postgres://u@h/db?pool_size=many", "pool_size=many"),
            ("postgres://u@h/db?sslmode=on", "sslmode=on"),
            ("user=u password_env=", "password_env="),
        ] {
            let e = split(url).unwrap_err().to_string();
            assert!(e.starts_with(field), "{url}: {e}");
        }
    }

    fn config(url: &str) -> postgres::Config {
        postgres::Config::from_str(url).unwrap()
    }

    #[test]
    fn the_password_comes_from_the_url_then_the_named_variable_then_pgpassword() {
        let env = |k: &str| match k {
            "DB_PW" => Some("from-named".to_owned()),
            "PGPASSWORD" => Some("from-pgpassword".to_owned()),
            _ => None,
        };
        let mut c = config("postgres://u:in-url@h/db");
        resolve_password(&mut c, &Params::default(), &env).unwrap();
        assert_eq!(c.get_password(), Some(&b"in-url"[..]));

        let named = Params { password_env: Some("DB_PW".into()), ..Params::default() };
        let mut c = config("postgres://u@h/db");
        resolve_password(&mut c, &named, &env).unwrap();
        assert_eq!(c.get_password(), Some(&b"from-named"[..]));

        let mut c = config("postgres://u@h/db");
        resolve_password(&mut c, &Params::default(), &env).unwrap();
        assert_eq!(c.get_password(), Some(&b"from-pgpassword"[..]));

        let missing = Params { password_env: Some("NOPE".into()), ..Params::default() };
        let e = resolve_password(&mut config("postgres://u@h/db"), &missing, &env).unwrap_err();
        assert!(matches!(&e, ParamError::PasswordEnvUnset(name) if name == "NOPE"), "{e}");
        let e = e.to_string();
        assert!(e.contains("password_env=NOPE") && e.contains("NOPE is not set"), "{e}");
    }

    #[test]
    fn the_password_file_is_matched_like_libpq_and_ignored_when_others_can_read_it() {
        let dir = tempfile_dir();
        let file = dir.join("pgpass");
        std::fs::write(
            &file,
            "# comment\nother:5432:*:u:wrong\ndb.example:6543:logs:u:right\\:one\n*:*:*:*:fallback\n",
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let env = |_: &str| None;
        let params = Params { passfile: Some(file.clone()), ..Params::default() };
        let mut c = config("postgres://u@db.example:6543/logs");
        resolve_password(&mut c, &params, &env).unwrap();
        assert_eq!(c.get_password(), Some(&b"right:one"[..]));
        let mut c = config("postgres://u@elsewhere/x");
        resolve_password(&mut c, &params, &env).unwrap();
        assert_eq!(c.get_password(), Some(&b"fallback"[..]));

        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
            let mut c = config("postgres://u@db.example:6543/logs");
            resolve_password(&mut c, &params, &env).unwrap();
            assert_eq!(c.get_password(), None, "a world-readable password file is ignored");
        }
        let gone = Params { passfile: Some(dir.join("missing")), ..Params::default() };
        let e = resolve_password(&mut config("postgres://u@h/db"), &gone, &env).unwrap_err();
        assert!(
            matches!(&e, ParamError::Passfile { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
            "{e}"
        );
        assert!(e.to_string().contains("missing"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "ctxlog-pgpass-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
