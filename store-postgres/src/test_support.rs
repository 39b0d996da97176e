//! A private PostgreSQL cluster for tests and benchmarks, started from the system binaries
//! (`pg_config --bindir`, else the newest `/usr/lib/postgresql/*/bin`).
//!
//! `initdb` runs once per machine into a template under the temp directory; each
//! [`Cluster`] copies it into its own temp dir and starts `postgres` there, listening only
//! on a Unix socket in that dir (no TCP port, so clusters never collide). As root, every
//! server command runs as the `postgres` system user (PostgreSQL refuses to run as root).
//! Dropping a `Cluster` stops it and deletes its files.
//!
//! [`test_database`] is the policy the tests share: `CTXLOG_TEST_POSTGRES_URL` if set, else a
//! private cluster; without PostgreSQL binaries it is a skip on a laptop and a failure in CI
//! (`CI` set and not `false`).

#![allow(clippy::missing_errors_doc)]

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use postgres::{Client, NoTls};
use tempfile::TempDir;

/// Environment variable naming an existing server to test against instead of a private one.
pub const URL_ENV: &str = "CTXLOG_TEST_POSTGRES_URL";

/// The role [`Cluster`] configures for password (SCRAM) authentication; every other role is
/// trusted. Create it with [`Cluster::create_password_role`].
pub const PASSWORD_ROLE: &str = "ctxlog_pw";

/// Why a cluster could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No PostgreSQL server binaries on this machine.
    #[error("PostgreSQL server binaries not found ({0})")]
    NotInstalled(String),
    /// They are there but something failed.
    #[error("{0}")]
    Failed(String),
}

/// Settings of a private cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// `fsync` (on for benchmarks and durability drills; off makes tests faster).
    pub fsync: bool,
    /// `max_connections`.
    pub max_connections: u32,
    /// `shared_buffers`, e.g. `"32MB"`.
    pub shared_buffers: String,
    /// Also listen on `127.0.0.1` at this port (the Unix socket then carries this port in its
    /// name, which [`Cluster::url_for`] accounts for). `None`: the Unix socket only.
    pub tcp_port: Option<u16>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions { fsync: true, max_connections: 100, shared_buffers: "32MB".into(), tcp_port: None }
    }
}

/// A running private PostgreSQL server.
#[derive(Debug)]
pub struct Cluster {
    root: TempDir,
    bindir: PathBuf,
    /// `(uid, gid)` of the `postgres` user when we are root.
    owner: Option<(u32, u32)>,
    options: ClusterOptions,
    running: bool,
}

fn failed(what: &str, detail: impl std::fmt::Display) -> ClusterError {
    ClusterError::Failed(format!("{what}: {detail}"))
}

/// The directory holding `initdb`, `pg_ctl` and `postgres`.
pub fn bindir() -> Result<PathBuf, ClusterError> {
    let has_server = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_server(&dir) {
            return Ok(dir);
        }
    }
    // Debian puts pg_config in libpq-dev; the server packages live here.
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| dirs.filter_map(|d| d.ok()).map(|d| d.path().join("bin")).filter(|d| has_server(d)).collect())
        .unwrap_or_default();
    found.sort_by_key(|d| d.parent().and_then(|v| v.file_name()).and_then(|v| v.to_str()?.parse::<u32>().ok()));
    found.pop().ok_or_else(|| {
        ClusterError::NotInstalled("no initdb in `pg_config --bindir` nor in /usr/lib/postgresql/*/bin".into())
    })
}

fn current_uid() -> Result<u32, ClusterError> {
    let probe = tempfile::tempfile().map_err(|e| failed("create a probe file", e))?;
    Ok(probe.metadata().map_err(|e| failed("stat a probe file", e))?.uid())
}

/// `(uid, gid)` of `user` from `/etc/passwd`.
fn lookup_user(user: &str) -> Result<(u32, u32), ClusterError> {
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| failed("read /etc/passwd", e))?;
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            match f.as_slice() {
                [name, _, uid, gid, ..] if *name == user => Some((uid.parse().ok()?, gid.parse().ok()?)),
                _ => None,
            }
        })
        .ok_or_else(|| {
            failed("running as root", format!("PostgreSQL refuses to run as root and there is no `{user}` user"))
        })
}

fn output_text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)).trim().to_owned()
}

impl Cluster {
    /// Starts a fresh private cluster with default options.
    pub fn start() -> Result<Cluster, ClusterError> {
        Self::start_with(ClusterOptions::default())
    }

    /// Starts a fresh private cluster.
    pub fn start_with(options: ClusterOptions) -> Result<Cluster, ClusterError> {
        let bindir = bindir()?;
        let owner = if current_uid()? == 0 { Some(lookup_user("postgres")?) } else { None };
        let template = template(&bindir, owner)?;
        let root =
            tempfile::Builder::new().prefix("ctxlog-pg.").tempdir().map_err(|e| failed("create a temp dir", e))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(root.path(), Some(uid), Some(gid)).map_err(|e| failed("chown the temp dir", e))?;
        }
        let mut cluster = Cluster { root, bindir, owner, options, running: false };
        let data = cluster.data_dir();
        // `cp -a` keeps the owner and the 0700 mode PostgreSQL insists on.
        let out = cluster.as_owner(Command::new("cp").arg("-a").arg(&template).arg(&data)).output();
        let out = out.map_err(|e| failed("run cp", e))?;
        if !out.status.success() {
            return Err(failed("copy the template cluster", output_text(&out)));
        }
        std::fs::write(
            data.join("pg_hba.conf"),
            format!("local all {PASSWORD_ROLE} scram-sha-256\nlocal all all trust\n"),
        )
        .map_err(|e| failed("write pg_hba.conf", e))?;
        cluster.start_server()?;
        Ok(cluster)
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// The directory holding the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        self.root.path()
    }

    /// The server binaries' directory.
    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    /// The server log.
    pub fn log_file(&self) -> PathBuf {
        self.root.path().join("server.log")
    }

    /// A URL for the superuser `postgres` and database `postgres`.
    pub fn url(&self) -> String {
        self.url_for("postgres", None, "postgres")
    }

    /// A URL for `user` (with `password`, if given) and database `db`.
    pub fn url_for(&self, user: &str, password: Option<&str>, db: &str) -> String {
        let mut host: String = self.socket_dir().to_string_lossy().replace('/', "%2F");
        if let Some(port) = self.options.tcp_port {
            host.push_str(&format!(":{port}"));
        }
        match password {
            Some(p) => format!("postgresql://{user}:{p}@{host}/{db}"),
            None => format!("postgresql://{user}@{host}/{db}"),
        }
    }

    /// A URL for `user` and database `db` over TCP on `127.0.0.1` (needs
    /// [`ClusterOptions::tcp_port`]).
    pub fn tcp_url_for(&self, user: &str, db: &str) -> Option<String> {
        self.options.tcp_port.map(|port| format!("postgresql://{user}@127.0.0.1:{port}/{db}"))
    }

    /// A free TCP port on `127.0.0.1` right now (for [`ClusterOptions::tcp_port`]).
    pub fn free_port() -> Result<u16, ClusterError> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| failed("find a free port", e))?;
        listener.local_addr().map(|a| a.port()).map_err(|e| failed("find a free port", e))
    }

    /// A superuser connection.
    pub fn connect(&self) -> Result<Client, ClusterError> {
        Client::connect(&self.url(), NoTls).map_err(|e| failed("connect as postgres", e))
    }

    /// Creates [`PASSWORD_ROLE`] with `password` (SCRAM authentication).
    pub fn create_password_role(&self, password: &str) -> Result<(), ClusterError> {
        let mut c = self.connect()?;
        let escaped = password.replace('\'', "''");
        c.batch_execute(&format!(
            "CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{escaped}'; GRANT CREATE ON SCHEMA public TO {PASSWORD_ROLE};"
        ))
        .map_err(|e| failed("create the password role", e))
    }

    /// `(uid, gid)` of the cluster's owner when the tests run as root (files the server must
    /// read as its own, a TLS key say, are chowned to it).
    pub fn owner_ids(&self) -> Option<(u32, u32)> {
        self.owner
    }

    /// A command that runs as the cluster's owner (the `postgres` user when we are root).
    pub fn as_owner<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    /// Runs `pg_ctl` with `args` on this cluster.
    pub fn pg_ctl(&self, args: &[&str]) -> Result<(), ClusterError> {
        let mut cmd = Command::new(self.bindir.join("pg_ctl"));
        cmd.arg("-D").arg(self.data_dir()).args(args);
        let out = self.as_owner(&mut cmd).output().map_err(|e| failed("run pg_ctl", e))?;
        if out.status.success() {
            Ok(())
        } else {
            let log = std::fs::read_to_string(self.log_file()).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            let tail: String = tail.into_iter().rev().fold(String::new(), |mut s, l| {
                let _ = writeln!(s, "    {l}");
                s
            });
            Err(failed(&format!("pg_ctl {}", args.join(" ")), format!("{}\n  server log:\n{tail}", output_text(&out))))
        }
    }

    fn server_options(&self) -> String {
        let o = &self.options;
        let listen = match o.tcp_port {
            Some(port) => format!("-c listen_addresses='127.0.0.1' -c port={port}"),
            None => "-c listen_addresses=''".to_owned(),
        };
        format!(
            "{listen} -c unix_socket_directories='{}' -c fsync={} -c max_connections={} -c shared_buffers={}",
            self.socket_dir().display(),
            if o.fsync { "on" } else { "off" },
            o.max_connections,
            o.shared_buffers
        )
    }

    fn start_server(&mut self) -> Result<(), ClusterError> {
        let log = self.log_file();
        let opts = self.server_options();
        self.pg_ctl(&["start", "-w", "-t", "60", "-l", &log.to_string_lossy(), "-o", &opts])?;
        self.running = true;
        Ok(())
    }

    /// Stops the server (`-m fast`: clients are disconnected, a checkpoint is written).
    pub fn stop(&mut self) -> Result<(), ClusterError> {
        self.pg_ctl(&["stop", "-w", "-m", "fast"])?;
        self.running = false;
        Ok(())
    }

    /// Starts a stopped server again.
    pub fn start_again(&mut self) -> Result<(), ClusterError> {
        self.start_server()
    }

    /// `pg_ctl restart -m immediate`: every server process is killed without a checkpoint
    /// (like a crash) and the server starts again, replaying its WAL.
    pub fn restart_immediate(&mut self) -> Result<(), ClusterError> {
        let log = self.log_file();
        let opts = self.server_options();
        self.pg_ctl(&["restart", "-w", "-t", "60", "-m", "immediate", "-l", &log.to_string_lossy(), "-o", &opts])
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.running {
            // Immediate: the files are deleted next, so a checkpoint would be wasted work.
            let _ = self.pg_ctl(&["stop", "-w", "-m", "immediate"]);
        }
    }
}

/// The `initdb`-ed template for `bindir`, created once per machine (and user) under the temp
/// directory: initdb takes seconds, a copy a fraction of one.
fn template(bindir: &Path, owner: Option<(u32, u32)>) -> Result<PathBuf, ClusterError> {
    let tag: String =
        bindir.to_string_lossy().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let uid = current_uid()?;
    let dir = std::env::temp_dir().join(format!("ctxlog-pg-template-{uid}-{tag}"));
    let ready = |d: &Path| d.join("data").join("ctxlog-template-ok").is_file();
    if ready(&dir) {
        return Ok(dir.join("data"));
    }
    // initdb into a private dir, then rename into place: concurrent test binaries race safely.
    let scratch = tempfile::Builder::new()
        .prefix("ctxlog-pg-initdb.")
        .tempdir_in(std::env::temp_dir())
        .map_err(|e| failed("create a temp dir", e))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(scratch.path(), Some(uid), Some(gid)).map_err(|e| failed("chown the temp dir", e))?;
    }
    let data = scratch.path().join("data");
    let mut cmd = Command::new(bindir.join("initdb"));
    cmd.arg("-D").arg(&data).args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"]);
    if let Some((uid, gid)) = owner {
        cmd.uid(uid).gid(gid);
    }
    let out = cmd.output().map_err(|e| failed("run initdb", e))?;
    if !out.status.success() {
        return Err(failed("initdb", output_text(&out)));
    }
    std::fs::write(data.join("ctxlog-template-ok"), b"").map_err(|e| failed("mark the template", e))?;
    let kept = scratch.keep();
    match std::fs::rename(&kept, &dir) {
        Ok(()) => {}
        // Another process finished first: use theirs.
        Err(_) if ready(&dir) => {
            let _ = std::fs::remove_dir_all(&kept);
        }
        Err(e) => return Err(failed(&format!("move the template to {}", dir.display()), e)),
    }
    Ok(dir.join("data"))
}

/// Whether this run must not skip PostgreSQL tests (`CI` set and not `false`/`0`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// An empty schema to run one test in, on the shared server or on a private cluster.
#[derive(Debug)]
pub struct TestDatabase {
    url: String,
    admin_url: String,
    schema: String,
    cluster: Option<Cluster>,
}

static SCHEMAS: AtomicU64 = AtomicU64::new(0);

impl TestDatabase {
    /// The store URL (its `search_path` is this test's schema).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The private cluster, if this database is on one.
    pub fn cluster(&mut self) -> Option<&mut Cluster> {
        self.cluster.as_mut()
    }

    /// A superuser (or the env URL's user) connection whose `search_path` is this schema.
    pub fn connect(&self) -> Result<Client, ClusterError> {
        Client::connect(&self.url, NoTls).map_err(|e| failed("connect", e))
    }

    /// The schema name.
    pub fn schema(&self) -> &str {
        &self.schema
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if self.cluster.is_none() {
            if let Ok(mut c) = Client::connect(&self.admin_url, NoTls) {
                let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
            }
        }
    }
}

/// `url` with `options=-c search_path=<schema>` added.
pub fn with_search_path(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

/// How to get PostgreSQL for the tests, printed when they are skipped.
pub const HOW_TO_ENABLE: &str = "install the PostgreSQL server (Debian: apt-get install postgresql) so that \
`pg_config --bindir` or /usr/lib/postgresql/*/bin has initdb and pg_ctl, or point CTXLOG_TEST_POSTGRES_URL at a \
server (e.g. postgres://user:pw@localhost/ctxlog_test; each test works in its own schema)";

/// Says that `test` was skipped, and why, where a person running `cargo test` sees it: the
/// test harness captures `println!` and `eprintln!` of a test that passes, so a skipped test
/// would look like a passed one. This writes to the process's stdout handle, which the harness
/// does not capture; the first skip of a test binary also says how to run them.
pub fn skipped(test: &str, why: &str) {
    use std::io::Write as _;
    static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let mut line = format!("NOTICE: PostgreSQL test SKIPPED (it passes without running): {test}: {why}\n");
    if !TOLD.swap(true, Ordering::Relaxed) {
        line.push_str(&format!(
            "NOTICE: to run the PostgreSQL tests, {HOW_TO_ENABLE}; in CI (CI set) they fail instead\n"
        ));
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
}

/// Why a test that needs PostgreSQL cannot have a database.
#[derive(Debug, thiserror::Error)]
pub enum TestDbError {
    /// No server here, and CI requires one.
    #[error("{test}: PostgreSQL is required here (CI is set) but: {source}")]
    Required {
        /// The test.
        test: String,
        /// Why no cluster started.
        source: ClusterError,
    },
    /// The server did not take a connection.
    #[error("{test}: connect to {url}: {source}")]
    Connect {
        /// The test.
        test: String,
        /// The admin URL.
        url: String,
        /// The client's error.
        source: postgres::Error,
    },
    /// The test's schema could not be created.
    #[error("{test}: create schema: {source}")]
    Schema {
        /// The test.
        test: String,
        /// The client's error.
        source: postgres::Error,
    },
}

/// The tests' policy: a fresh schema on `CTXLOG_TEST_POSTGRES_URL` if set, else on a new
/// private cluster. `Ok(None)` means "skip": no PostgreSQL here and not in CI (a message
/// naming `test` and how to enable it has been printed). In CI that is an error instead.
pub fn test_database(test: &str) -> Result<Option<TestDatabase>, TestDbError> {
    let (admin_url, cluster) = match std::env::var(URL_ENV) {
        Ok(url) if !url.is_empty() => (url, None),
        _ => match Cluster::start_with(ClusterOptions { fsync: false, ..ClusterOptions::default() }) {
            Ok(c) => (c.url(), Some(c)),
            Err(ClusterError::NotInstalled(why)) if !in_ci() => {
                skipped(test, &format!("no PostgreSQL ({why})"));
                return Ok(None);
            }
            Err(source) => return Err(TestDbError::Required { test: test.to_owned(), source }),
        },
    };
    let schema = format!("t{}_{}", std::process::id(), SCHEMAS.fetch_add(1, Ordering::Relaxed));
    let mut admin = Client::connect(&admin_url, NoTls).map_err(|source| TestDbError::Connect {
        test: test.to_owned(),
        url: admin_url.clone(),
        source,
    })?;
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .map_err(|source| TestDbError::Schema { test: test.to_owned(), source })?;
    Ok(Some(TestDatabase { url: with_search_path(&admin_url, &schema), admin_url, schema, cluster }))
}

/// Waits until `url` accepts connections or `timeout` passes.
pub fn wait_until_up(url: &str, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if Client::connect(url, NoTls).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}
