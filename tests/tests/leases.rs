//! `Store::try_lease` on the stores a fleet of proxies shares (SQLite, PostgreSQL): one holder
//! per stream across handles and processes, released on drop and when the holder is killed.
//!
//! A holder in another process is this test binary run again as `lease_holder_child` (an
//! ignored test, run with `--ignored --exact`): it takes the lease named by
//! `CTXLOG_LEASE_HOLDER`, prints `LEASED` and waits to be killed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ctxlog::store::{Store, StoreError, StreamId};
use ctxlog_store_postgres::lease::lease_key;
use ctxlog_store_postgres::{PgOptions, PgStore};
use ctxlog_store_sqlite::lease::lease_dir;
use ctxlog_store_sqlite::SqliteStore;
use ctxlog_tests::postgres::database;

const HOLDER_ENV: &str = "CTXLOG_LEASE_HOLDER";

/// The holder process: `sqlite <stream> <path>` or `postgres <stream> <url>` in the variable.
#[test]
#[ignore = "run by the lease tests as a separate process"]
fn lease_holder_child() {
    let spec = std::env::var(HOLDER_ENV).expect("CTXLOG_LEASE_HOLDER is set by the parent test");
    let mut parts = spec.splitn(3, ' ');
    let (kind, stream, target) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let stream = StreamId(stream.parse().unwrap());
    let store: Box<dyn Store> = match kind {
        "sqlite" => Box::new(SqliteStore::open(target).unwrap()),
        "postgres" => Box::new(ctxlog_store_postgres::PgStore::open(target).unwrap()),
        other => panic!("unknown store kind {other}"),
    };
    let lease = store.try_lease(stream).unwrap().expect("the parent leaves the stream free");
    println!("LEASED");
    // Bounded: the parent kills us long before.
    std::thread::sleep(Duration::from_secs(60));
    drop(lease);
}

/// Starts a holder process of `stream` and waits until it holds the lease.
fn spawn_holder(kind: &str, target: &str, stream: StreamId) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "lease_holder_child", "--nocapture", "--test-threads=1"])
        .env(HOLDER_ENV, format!("{kind} {} {target}", stream.0))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.ends_with("LEASED") => break,
            Some(Ok(_)) => continue,
            other => {
                let _ = child.kill();
                panic!("the holder process never leased the stream: {other:?}, {:?}", child.wait());
            }
        }
    }
    child
}

/// Polls `try_lease` until it succeeds, for at most `within`.
fn lease_within(store: &dyn Store, stream: StreamId, within: Duration) -> Option<ctxlog::Lease> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(lease) = store.try_lease(stream).unwrap() {
            return Some(lease);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two streams that hash to different lease buckets (so the test is about exclusion, not a
/// collision).
fn two_streams() -> (StreamId, StreamId) {
    let dir = std::path::Path::new("/");
    let a = StreamId::random();
    for _ in 0..1000 {
        let b = StreamId::random();
        if ctxlog_store_sqlite::lease::lease_file(dir, a) != ctxlog_store_sqlite::lease::lease_file(dir, b) {
            return (a, b);
        }
    }
    panic!("1,000 random streams all share one bucket");
}

#[test]
fn sqlite_two_handles_on_one_file_exclude_each_other_and_drop_releases() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctxlog.db");
    let (a, b) = (SqliteStore::open(&path).unwrap(), SqliteStore::open(&path).unwrap());
    let (s, other) = two_streams();

    let held = a.try_lease(s).unwrap().expect("a free stream is leased");
    assert!(held.is_shared(), "a file database's lease excludes other processes");
    assert!(b.try_lease(s).unwrap().is_none(), "a second handle on the same file must wait");
    assert!(a.try_lease(s).unwrap().is_none(), "the same handle asking again must wait too");
    let _other = b.try_lease(other).unwrap().expect("another stream is free");

    // Another descriptor of the same lease file opened and closed in this process (what drops
    // POSIX record locks of the whole process) leaves the lease held.
    let file = ctxlog_store_sqlite::lease::lease_file(&lease_dir(&path), s);
    drop(std::fs::File::open(&file).unwrap());
    assert!(b.try_lease(s).unwrap().is_none(), "closing another descriptor released the lease");

    drop(held);
    let again = b.try_lease(s).unwrap().expect("a dropped lease is released");
    assert!(a.try_lease(s).unwrap().is_none());
    drop(again);
}

#[test]
fn sqlite_streams_in_one_bucket_serialize_and_never_share() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctxlog.db");
    let store = SqliteStore::open(&path).unwrap();
    let root = lease_dir(&path);
    // Find two streams in one bucket (about 300 random ids are expected for a pair).
    let mut seen = std::collections::HashMap::new();
    let (x, y) = (0..200_000)
        .find_map(|_| {
            let s = StreamId::random();
            seen.insert(ctxlog_store_sqlite::lease::lease_file(&root, s), s).map(|t| (t, s))
        })
        .expect("a bucket collision among 200,000 random streams");
    let held = store.try_lease(x).unwrap().unwrap();
    assert!(store.try_lease(y).unwrap().is_none(), "a colliding stream waits");
    assert!(store.try_lease(x).unwrap().is_none(), "and the stream itself is still exclusive");
    drop(held);
    assert!(store.try_lease(y).unwrap().is_some());
}

#[test]
fn sqlite_a_killed_holder_process_releases_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctxlog.db");
    drop(SqliteStore::open(&path).unwrap());
    let stream = StreamId::random();
    let mut holder = spawn_holder("sqlite", path.to_str().unwrap(), stream);

    let store = SqliteStore::open(&path).unwrap();
    assert!(store.try_lease(stream).unwrap().is_none(), "another process holds it");
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    assert!(lease_within(&store, stream, Duration::from_secs(5)).is_some(), "the dead holder's lease was released");
}

#[test]
fn sqlite_read_only_opens_refuse_a_lease_and_memory_leases_are_local() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctxlog.db");
    drop(SqliteStore::open(&path).unwrap());
    let reader = SqliteStore::open_read_only(&path).unwrap();
    let e = reader.try_lease(StreamId::random()).unwrap_err();
    assert!(matches!(e, StoreError::ReadOnly { operation: "try_lease", .. }), "{e}");
    assert!(!lease_dir(&path).exists(), "a read-only open created the lease directory");

    let memory = SqliteStore::open_in_memory().unwrap();
    let lease = memory.try_lease(StreamId::random()).unwrap().unwrap();
    assert!(!lease.is_shared());
}

/// Lease connections open on the server (one per `PgStore` that took a lease).
/// Lease connections to this test's database (the cluster is shared by the tests that run
/// beside it).
fn lease_connections(admin: &mut postgres::Client) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ctxlog-lease' AND datname = current_database()",
            &[],
        )
        .unwrap()
        .get(0)
}

/// Advisory locks granted to lease connections of this test's database.
fn lease_locks(admin: &mut postgres::Client) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = 'ctxlog-lease' \
             AND a.datname = current_database()",
            &[],
        )
        .unwrap()
        .get(0)
}

#[test]
fn postgres_two_stores_exclude_each_other_on_one_connection_each_and_drop_releases() {
    let Some(db) = database("postgres_leases_exclude") else { return };
    // Two proxies: two store handles, each with its own lease connection.
    let opts = PgOptions { pool_size: 2, ..PgOptions::default() };
    let (a, b) = (PgStore::open_with(db.url(), opts.clone()).unwrap(), PgStore::open_with(db.url(), opts).unwrap());
    let (s, other) = (StreamId::random(), StreamId::random());

    let held = a.try_lease(s).unwrap().expect("a free stream is leased");
    assert!(held.is_shared());
    assert!(b.try_lease(s).unwrap().is_none(), "another store must wait");
    assert!(a.try_lease(s).unwrap().is_none(), "the same store asking again must wait (locks are re-entrant)");
    let _other = b.try_lease(other).unwrap().expect("another stream is free");

    // Many leases, one connection per store, none from the pool (calls in flight holding
    // leases must not use up the pool).
    let many: Vec<_> = (0..20).map(|_| a.try_lease(StreamId::random()).unwrap().unwrap()).collect();
    assert_eq!(lease_connections(&mut db.connect().unwrap()), 2);
    assert!(a.connections() <= 2, "the pool grew to {} connections", a.connections());
    drop(many);

    drop(held);
    // The release travels to the lease thread: not instantaneous, but prompt.
    let again = lease_within(&b, s, Duration::from_secs(2)).expect("a dropped lease is released");
    assert!(a.try_lease(s).unwrap().is_none());
    drop(again);
    assert!(lease_within(&a, s, Duration::from_secs(2)).is_some());

    // A store dropped with its leases closes its lease connection (its thread ends).
    drop((a, b, _other));
    let mut admin = db.connect().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while lease_connections(&mut admin) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(lease_connections(&mut admin), 0, "a dropped store left its lease connection open");
}

#[test]
fn postgres_a_killed_holder_process_releases_its_leases() {
    let Some(db) = database("postgres_leases_kill") else { return };
    let stream = StreamId::random();
    let mut holder = spawn_holder("postgres", db.url(), stream);
    let store = PgStore::open(db.url()).unwrap();
    assert!(store.try_lease(stream).unwrap().is_none(), "another process holds it");
    holder.kill().unwrap(); // SIGKILL: no unlock is ever sent
    holder.wait().unwrap();
    assert!(
        lease_within(&store, stream, Duration::from_secs(5)).is_some(),
        "the server did not release the dead holder's lease"
    );
}

#[test]
fn postgres_leases_work_again_after_a_server_restart_and_drop_never_waits_for_the_server() {
    let Some(mut db) = database("postgres_leases_restart") else { return };
    if db.cluster().is_none() {
        ctxlog_store_postgres::test_support::skipped(
            "postgres_leases_restart",
            "it restarts the server, so it needs a private cluster (unset CTXLOG_TEST_POSTGRES_URL)",
        );
        return;
    }
    let (a, b) = (PgStore::open(db.url()).unwrap(), PgStore::open(db.url()).unwrap());
    let (s, t) = (StreamId::random(), StreamId::random());
    let held = a.try_lease(s).unwrap().unwrap();

    // The server goes away: dropping a lease returns at once, and taking one is a typed,
    // transient error.
    db.cluster().unwrap().stop().unwrap();
    let started = Instant::now();
    drop(held);
    assert!(started.elapsed() < Duration::from_millis(50), "drop waited {:?}", started.elapsed());
    let e = a.try_lease(t).unwrap_err();
    assert!(ctxlog_store_postgres::is_transient(&e), "{e}");

    // Back: both stores reconnect their lease connections and exclude each other again.
    db.cluster().unwrap().start_again().unwrap();
    let on_a = lease_within(&a, t, Duration::from_secs(10)).expect("a lease after the restart");
    assert!(b.try_lease(t).unwrap().is_none(), "leases exclude again after the restart");
    assert!(lease_within(&b, s, Duration::from_secs(5)).is_some(), "the lease dropped during the outage is free");
    drop(on_a);
    assert!(lease_within(&b, t, Duration::from_secs(5)).is_some());
}

#[test]
fn postgres_a_lease_lost_with_its_connection_is_taken_again_on_the_new_one() {
    let Some(db) = database("postgres_leases_reacquire") else { return };
    let (a, b) = (PgStore::open(db.url()).unwrap(), PgStore::open(db.url()).unwrap());
    let s = StreamId::random();
    let held = a.try_lease(s).unwrap().unwrap();
    // The lease connection is killed (as a network fault or an admin would): the server drops
    // its locks; a's lease thread notices within PING_EVERY and takes the key again.
    let mut admin = db.connect().unwrap();
    let killed: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'ctxlog-lease' AND datname = current_database()",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    let deadline = Instant::now() + ctxlog_store_postgres::lease::PING_EVERY * 3;
    // Reopened, then the key taken again on it: wait for the lock itself, not the connection
    // (under load the two are a few round trips apart).
    while lease_locks(&mut admin) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(lease_connections(&mut admin), 1, "the lease connection was not reopened");
    assert!(b.try_lease(s).unwrap().is_none(), "the key was not taken again on the new connection");
    drop(held);
    assert!(lease_within(&b, s, Duration::from_secs(2)).is_some());
}

#[test]
fn postgres_read_only_stores_refuse_a_lease_and_keys_depend_on_the_schema() {
    let Some(db) = database("postgres_leases_read_only") else { return };
    drop(PgStore::open(db.url()).unwrap());
    let reader = PgStore::open_read_only(db.url()).unwrap();
    let e = reader.try_lease(StreamId::random()).unwrap_err();
    assert!(matches!(e, StoreError::ReadOnly { operation: "try_lease", .. }), "{e}");

    let s = StreamId::random();
    assert_eq!(lease_key("team_a", s), lease_key("team_a", s));
    assert_ne!(lease_key("team_a", s), lease_key("team_b", s));
    assert_ne!(lease_key("team_a", s), lease_key("team_a", StreamId::random()));
}
