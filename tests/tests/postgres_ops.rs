//! Operating the PostgreSQL store: TLS with libpq's `sslmode`s against a private cluster with
//! `ssl=on` and a certificate made here, the password from a password file (never in the
//! URL), the pool size from the URL, and privilege errors that name the missing privilege.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;
use std::process::Command;

use ctxlog::store::{ExpectedVersion, Record, Store, StreamId};
use ctxlog_store_postgres::test_support::{in_ci, Cluster, ClusterOptions, PASSWORD_ROLE};
use ctxlog_store_postgres::{PgError, PgStore};
use ctxlog_tests::postgres::database;

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA and a server certificate it signs for `localhost` and `127.0.0.1`, made with the
/// `openssl` command (installed with the PostgreSQL server: ssl-cert depends on it).
fn make_certs(dir: &Path, name: &str) {
    let p = |f: &str| dir.join(format!("{name}{f}"));
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    run(Command::new("openssl")
        .args(["req", "-x509"])
        .args(ec)
        .arg("-keyout")
        .arg(p("ca.key"))
        .arg("-out")
        .arg(p("ca.crt"))
        .args(["-days", "2", "-subj", &format!("/CN={name} test CA")]));
    run(Command::new("openssl")
        .arg("req")
        .args(ec)
        .arg("-keyout")
        .arg(p("server.key"))
        .arg("-out")
        .arg(p("server.csr"))
        .args(["-subj", "/CN=localhost"]));
    std::fs::write(
        p("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "2", "-in"])
        .arg(p("server.csr"))
        .arg("-CA")
        .arg(p("ca.crt"))
        .arg("-CAkey")
        .arg(p("ca.key"))
        .arg("-CAcreateserial")
        .arg("-out")
        .arg(p("server.crt"))
        .arg("-extfile")
        .arg(p("ext.cnf")));
}

fn openssl_available() -> bool {
    match Command::new("openssl").arg("version").output() {
        Ok(o) if o.status.success() => true,
        _ if in_ci() => panic!("the openssl command is needed to make the test certificates (apt-get install openssl)"),
        _ => {
            ctxlog_store_postgres::test_support::skipped("tls", "no openssl command to make test certificates");
            false
        }
    }
}

/// A private cluster on `127.0.0.1` with `ssl=on` whose TCP connections must be encrypted.
fn tls_cluster(certs: &Path) -> Option<Cluster> {
    if !ctxlog_tests::postgres::available() || !openssl_available() {
        return None;
    }
    let options =
        ClusterOptions { fsync: false, tcp_port: Some(Cluster::free_port().unwrap()), ..ClusterOptions::default() };
    let cluster = Cluster::start_with(options).unwrap();
    make_certs(certs, "good-");
    let data = cluster.data_dir();
    for (from, to) in [("good-server.crt", "server.crt"), ("good-server.key", "server.key")] {
        std::fs::copy(certs.join(from), data.join(to)).unwrap();
        if let Some((uid, gid)) = cluster.owner_ids() {
            std::os::unix::fs::chown(data.join(to), Some(uid), Some(gid)).unwrap();
        }
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(data.join("server.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut hba = std::fs::read_to_string(data.join("pg_hba.conf")).unwrap();
    hba.push_str("hostssl all all 127.0.0.1/32 trust\n");
    std::fs::write(data.join("pg_hba.conf"), hba).unwrap();
    let mut admin = cluster.connect().unwrap();
    admin.batch_execute("ALTER SYSTEM SET ssl = on").unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    // The reload is asynchronous: wait until the server says TLS is on.
    for _ in 0..100 {
        let on: String = cluster.connect().unwrap().query_one("SHOW ssl", &[]).unwrap().get(0);
        if on == "on" {
            return Some(cluster);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("the server never turned ssl on: {}", std::fs::read_to_string(cluster.log_file()).unwrap_or_default());
}

/// A write and a read through the store's pool.
fn works(store: &PgStore) -> bool {
    let s = StreamId::random();
    store.append(s, ExpectedVersion::Exact(0), &[Record::seal(b"x".to_vec())]).unwrap();
    assert_eq!(store.read(s, 1, 10).unwrap().len(), 1);
    true
}

#[test]
fn tls_sslmodes_mean_what_libpq_says() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cluster) = tls_cluster(dir.path()) else { return };
    let base = cluster.tcp_url_for("postgres", "postgres").unwrap();
    let ca = dir.path().join("good-ca.crt");
    make_certs(dir.path(), "other-");
    let other_ca = dir.path().join("other-ca.crt");
    let url = |params: &str| format!("{base}?{params}");

    // The server only accepts TLS on TCP: plaintext is refused there, so a store that opens
    // at all below is encrypted (and `pg_stat_ssl` says so).
    let e = PgStore::open(&url("sslmode=disable")).unwrap_err();
    assert!(e.to_string().contains("no encryption") || e.to_string().contains("pg_hba.conf"), "{e}");

    for params in [
        "sslmode=prefer".to_owned(),
        "sslmode=require".to_owned(),
        format!("sslmode=verify-ca&sslrootcert={}", ca.display()),
        format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    ] {
        let store = PgStore::open(&url(&params)).unwrap_or_else(|e| panic!("{params}: {e}"));
        assert!(works(&store));
        let mut admin = cluster.connect().unwrap();
        let (tls, plain): (i64, i64) = {
            let row = admin
                .query_one(
                    "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) FROM pg_stat_ssl s \
                     JOIN pg_stat_activity a USING (pid) WHERE a.application_name LIKE 'ctxlog%' AND a.client_addr IS NOT NULL",
                    &[],
                )
                .unwrap();
            (row.get(0), row.get(1))
        };
        assert!(tls >= 1 && plain == 0, "{params}: {tls} encrypted, {plain} plaintext connections");
    }

    // A certificate from another CA is refused by verify-ca; a name it was not issued for by
    // verify-full (but not by verify-ca, which checks the chain only).
    for mode in ["verify-ca", "verify-full"] {
        let e = PgStore::open(&url(&format!("sslmode={mode}&sslrootcert={}", other_ca.display()))).unwrap_err();
        assert!(e.to_string().to_lowercase().contains("certificate"), "{mode} with another CA: {e}");
    }
    // Connected by a name the certificate was not issued for (`hostaddr` is where the socket
    // goes, `host` the name TLS checks): verify-full refuses, verify-ca does not look.
    let port = cluster.tcp_url_for("x", "y").unwrap().rsplit(':').next().unwrap().split('/').next().unwrap().to_owned();
    let by_name = |mode: &str| {
        PgStore::open(&format!(
            "host=not-the-server.invalid hostaddr=127.0.0.1 port={port} user=postgres dbname=postgres \
             sslmode={mode} sslrootcert={}",
            ca.display()
        ))
    };
    let e = by_name("verify-full").unwrap_err();
    assert!(e.to_string().to_lowercase().contains("certificate"), "verify-full, wrong name: {e}");
    assert!(works(&by_name("verify-ca").unwrap()));
}

#[test]
fn sslmode_require_against_a_server_without_tls_fails_instead_of_going_plaintext() {
    if !ctxlog_tests::postgres::available() {
        return;
    }
    let options =
        ClusterOptions { fsync: false, tcp_port: Some(Cluster::free_port().unwrap()), ..ClusterOptions::default() };
    let cluster = Cluster::start_with(options).unwrap();
    let data = cluster.data_dir();
    let mut hba = std::fs::read_to_string(data.join("pg_hba.conf")).unwrap();
    hba.push_str("host all all 127.0.0.1/32 trust\n");
    std::fs::write(data.join("pg_hba.conf"), hba).unwrap();
    cluster.connect().unwrap().batch_execute("SELECT pg_reload_conf()").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let base = cluster.tcp_url_for("postgres", "postgres").unwrap();
    let e = PgStore::open(&format!("{base}?sslmode=require")).unwrap_err();
    assert!(e.to_string().contains("TLS"), "{e}");
    // `prefer` (the default) goes plaintext, as libpq does.
    PgStore::open(&base).unwrap();
}

#[test]
fn a_role_without_the_privileges_gets_errors_that_name_them() {
    let Some(mut db) = database("privileges") else { return };
    let Some(cluster) = db.cluster() else {
        ctxlog_store_postgres::test_support::skipped("privileges", "it creates roles, so it needs a private cluster");
        return;
    };
    let role = "ctxlog_restricted";
    let base = cluster.url_for(role, None, "postgres");
    let schema = db.schema().to_owned();
    let url = ctxlog_store_postgres::test_support::with_search_path(&base, &schema);
    let mut admin = db.connect().unwrap();
    admin.batch_execute(&format!("CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA {schema} TO {role}")).unwrap();

    // No CREATE on the schema: the writer's open cannot create the tables, and says why.
    let e = PgStore::open(&url).unwrap_err();
    let Some(PgError::Privilege(m)) = PgError::of(&e) else { panic!("not a privilege error: {e}") };
    assert!(m.contains(&format!("role {role} lacks CREATE on schema {schema}")), "{m}");
    assert!(m.contains(&format!("GRANT CREATE ON SCHEMA {schema} TO {role}")), "{m}");

    // The owner creates them; a role that may only read opens read-only, and its writer's
    // open names each missing privilege with its GRANT.
    drop(PgStore::open(db.url()).unwrap());
    admin.batch_execute(&format!("GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")).unwrap();
    PgStore::open_read_only(&url).unwrap();
    let e = PgStore::open(&url).unwrap_err();
    let Some(PgError::Privilege(m)) = PgError::of(&e) else { panic!("not a privilege error: {e}") };
    assert!(m.contains("lacks INSERT on ctxlog_records"), "{m}");
    assert!(m.contains(&format!("GRANT UPDATE ON ctxlog_snapshots TO {role};")), "{m}");

    // Granted, it writes; a privilege revoked behind an open store is named when used.
    admin.batch_execute(&format!("GRANT INSERT, UPDATE ON ALL TABLES IN SCHEMA {schema} TO {role}")).unwrap();
    let store = PgStore::open(&url).unwrap();
    let s = StreamId::random();
    store.append(s, ExpectedVersion::Exact(0), &[Record::seal(b"a".to_vec())]).unwrap();
    admin.batch_execute(&format!("REVOKE INSERT ON ctxlog_records FROM {role}")).unwrap();
    let e = store.append(s, ExpectedVersion::Exact(1), &[Record::seal(b"b".to_vec())]).unwrap_err();
    let Some(PgError::Privilege(m)) = PgError::of(&e) else { panic!("not a privilege error: {e}") };
    assert!(m.contains("permission denied for table ctxlog_records"), "{m}");
}

#[test]
fn the_password_comes_from_a_password_file_never_the_url() {
    let Some(mut db) = database("passfile") else { return };
    let Some(cluster) = db.cluster() else {
        ctxlog_store_postgres::test_support::skipped("passfile", "it creates roles, so it needs a private cluster");
        return;
    };
    cluster.create_password_role("s3cret:pw").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let passfile = dir.path().join("pgpass");
    std::fs::write(&passfile, format!("*:*:*:{PASSWORD_ROLE}:s3cret\\:pw\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = cluster.url_for(PASSWORD_ROLE, None, "postgres");

    let store = PgStore::open(&format!("{url}?passfile={}", passfile.display())).unwrap();
    assert!(works(&store));
    assert!(!store.location().contains("s3cret"));
    // Without it (and with no PGPASSWORD here) the server's demand for a password is an
    // authentication error.
    if std::env::var_os("PGPASSWORD").is_none() {
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "").unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = PgStore::open(&format!("{url}?passfile={}", empty.display())).unwrap_err();
        assert!(matches!(PgError::of(&e), Some(PgError::Auth(_))), "{e}");
        // A password file that is not there, when named, is an error naming it.
        let e = PgStore::open(&format!("{url}?passfile={}", dir.path().join("missing").display())).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }
}

#[test]
fn pool_size_in_the_url_bounds_the_pool() {
    let Some(db) = database("pool_size") else { return };
    let url = format!("{}&pool_size=2", db.url());
    let store = std::sync::Arc::new(PgStore::open(&url).unwrap());
    assert_eq!(store.options().pool_size, 2);
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || {
                for _ in 0..20 {
                    let s = StreamId::random();
                    store.append(s, ExpectedVersion::Exact(0), &[Record::seal(b"x".to_vec())]).unwrap();
                    assert!(store.connections() <= 2, "{} connections", store.connections());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let active: i64 = db
        .connect()
        .unwrap()
        .query_one("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ctxlog'", &[])
        .unwrap()
        .get(0);
    assert!(active <= 2, "{active} store connections on the server");
}

#[test]
fn a_service_started_during_an_outage_waits_for_the_store_within_its_bound() {
    use ctxlog_tools::stores::{open_store_waiting, Access, Opening};
    use std::time::{Duration, Instant};
    let Some(mut db) = database("store_wait") else { return };
    if db.cluster().is_none() {
        ctxlog_store_postgres::test_support::skipped(
            "store_wait",
            "it stops the server, so it needs a private cluster",
        );
        return;
    }
    let url = db.url().to_owned();
    db.cluster().unwrap().stop().unwrap();

    // Without waiting, or with a wait shorter than the outage: a typed, transient error.
    let e = open_store_waiting(&url, Access::Create, Opening::default()).err().expect("the server is down");
    assert!(matches!(e, ctxlog_tools::error::CliError::Store(ctxlog::StoreError::Unavailable { .. })), "{e}");
    let started = Instant::now();
    let short = Opening { wait: Duration::from_millis(1500), ..Opening::default() };
    assert!(open_store_waiting(&url, Access::Create, short).is_err());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(1000) && waited < Duration::from_secs(4), "waited {waited:?}");

    // The server comes back while the open waits: it opens, with the pool size asked for.
    let cluster_back = std::thread::scope(|scope| {
        let cluster = db.cluster().unwrap();
        let restarter = scope.spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            cluster.start_again().unwrap();
        });
        let opening = Opening { wait: Duration::from_secs(30), pool: Some(3), accept_loss: false };
        let store = open_store_waiting(&url, Access::Create, opening);
        restarter.join().unwrap();
        store
    });
    let store = cluster_back.unwrap();
    assert!(store.streams().unwrap().is_empty());

    // --store-pool is for PostgreSQL, and cannot contradict the URL.
    let both = Opening { pool: Some(2), ..Opening::default() };
    assert!(open_store_waiting(&format!("{url}&pool_size=4"), Access::Create, both).is_err());
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite:{}", dir.path().join("x.db").display());
    let e = open_store_waiting(&sqlite, Access::Create, both).err().unwrap();
    assert!(e.to_string().contains("--store-pool"), "{e}");
}
