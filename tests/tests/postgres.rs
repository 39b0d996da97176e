//! The PostgreSQL store against a real server (a private cluster per test, or a schema on
//! `CTXLOG_TEST_POSTGRES_URL`): sessions moving between workers, races between handles,
//! bad input and faults (each a matchable error, exit 3 in the CLI, nothing half-written),
//! read-only opens, schema versions, and `ctxlog tail`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../../store-postgres/examples/serve_call.rs"]
mod serve_call;

use std::time::Duration;

use ctxlog::internal::wire::parse_message;
use ctxlog::store::{ExpectedVersion, Record, Snapshot, Store, StoreError, StreamId};
use ctxlog::{Config, Session, SessionError, Timestamp, WireFormat};
use ctxlog_store_postgres::test_support::{Cluster, TestDatabase, PASSWORD_ROLE};
use ctxlog_store_postgres::{PgError, PgOptions, PgStore, SCHEMA_VERSION};
use ctxlog_tests::postgres::database;
use ctxlog_tests::scenario::cli;
use serve_call::{serve_call, Reply};

fn rec(text: &str) -> Record {
    Record::seal(text.as_bytes().to_vec())
}

/// A database on a private cluster this test may stop and restart (skipped on a shared
/// server named by the environment, which a test must not restart).
fn private(test: &str) -> Option<TestDatabase> {
    let mut db = database(test)?;
    if db.cluster().is_none() {
        ctxlog_store_postgres::test_support::skipped(
            test,
            "it restarts the server, so it needs a private cluster (unset CTXLOG_TEST_POSTGRES_URL)",
        );
        return None;
    }
    Some(db)
}

fn cluster(db: &mut TestDatabase) -> &mut Cluster {
    db.cluster().unwrap()
}

fn turn(text: &str) -> Vec<ctxlog::Message> {
    vec![parse_message(&format!(r#"{{"role":"user","content":"{text}"}}"#)).unwrap()]
}

fn reply(at: u64) -> impl FnMut(&[String]) -> Result<Reply, String> {
    move |_| Ok(Reply { at: Timestamp::from_millis(at), usage: None })
}

/// Waits until some statement of the cluster waits on a lock (our blocked append).
fn wait_for_lock_waiter(admin: &mut postgres::Client) {
    for _ in 0..500 {
        let n: i64 = admin.query_one("SELECT count(*) FROM pg_locks WHERE NOT granted", &[]).unwrap().get(0);
        if n > 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the append never blocked on the held version");
}

#[test]
fn a_session_moves_between_workers_and_a_stale_plan_is_decided_again() {
    let Some(db) = database("a_session_moves_between_workers") else { return };
    // Two workers: two store handles with their own connections, as two processes would have.
    let (a, b) = (PgStore::open(db.url()).unwrap(), PgStore::open(db.url()).unwrap());
    let id = StreamId::random();
    let mut on_a =
        Session::create(&a, id, WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000)).unwrap();
    serve_call(&mut on_a, &turn("q0"), || Timestamp::from_millis(2_000), reply(2_000), |e| panic!("{e}")).unwrap();

    // Given worker B opens the session after A served a call, it sees everything A wrote.
    let mut on_b = Session::open(&b, id).unwrap();
    assert_eq!(on_b.state().version(), on_a.state().version());
    assert_eq!(on_b.state().calls(), 1);

    // When A plans on its (soon stale) head while B serves the next call...
    on_a.append(turn("q1 on A")).unwrap();
    on_b.catch_up().unwrap();
    let stale = on_a.plan(Timestamp::from_millis(3_000)).unwrap();
    on_b.append(turn("q2 on B")).unwrap();
    let head_after_b = on_b
        .plan(Timestamp::from_millis(3_500))
        .and_then(|p| on_b.commit(p, Timestamp::from_millis(3_500), None))
        .unwrap()
        .version;
    // ...then A's commit loses the version to B's: Conflict with B's head, nothing written.
    match on_a.commit(stale, Timestamp::from_millis(4_000), None) {
        Err(SessionError::Store(StoreError::Conflict { stream, actual, .. })) => {
            assert_eq!((stream, actual), (id, head_after_b));
        }
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert_eq!(a.head(id).unwrap(), Some(head_after_b));
    // And catching up and re-planning on the new head succeeds.
    on_a.catch_up().unwrap();
    let plan = on_a.plan(Timestamp::from_millis(4_000)).unwrap();
    let done = on_a.commit(plan, Timestamp::from_millis(4_000), None).unwrap();
    assert_eq!(done.version, head_after_b + 1);

    // The retry loop does all of that by itself: B is now stale and serves a call anyway.
    let mut retries = Vec::new();
    let done = serve_call(
        &mut on_b,
        &turn("q3 on B"),
        || Timestamp::from_millis(5_000),
        reply(5_000),
        |e| retries.push(e.to_string()),
    )
    .unwrap();
    assert_eq!(done.version, b.head(id).unwrap().unwrap());
    let report = ctxlog::replay::verify(&a, id).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.calls, 4);
    let texts: Vec<String> = on_b
        .messages(0..on_b.state().message_count())
        .unwrap()
        .iter()
        .map(|m| serde_json::to_string(&m.content).unwrap())
        .collect();
    for q in ["q0", "q1 on A", "q2 on B", "q3 on B"] {
        assert_eq!(texts.iter().filter(|t| t.contains(q)).count(), 1, "{q} appended exactly once: {texts:?}");
    }
}

#[test]
fn the_retry_loop_recovers_when_two_workers_serve_one_session_at_once() {
    let Some(db) = database("the_retry_loop_recovers_when_two_workers_serve_one_session_at_once") else { return };
    let stores = [PgStore::open(db.url()).unwrap(), PgStore::open(db.url()).unwrap()];
    let id = StreamId::random();
    drop(Session::create(&stores[0], id, WireFormat::Anthropic, Config::default(), Timestamp::from_millis(0)).unwrap());
    let conflicts: Vec<usize> = std::thread::scope(|s| {
        let handles: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(w, store)| {
                s.spawn(move || {
                    let mut session = Session::open(store, id).unwrap();
                    let mut conflicts = 0;
                    for i in 0..15u64 {
                        let now = 1_000 + i * 10 + w as u64;
                        serve_call(
                            &mut session,
                            &turn(&format!("w{w} call {i}")),
                            || Timestamp::from_millis(now),
                            reply(now),
                            |e| {
                                assert!(matches!(e, StoreError::Conflict { .. }), "{e}");
                                conflicts += 1;
                            },
                        )
                        .unwrap();
                    }
                    conflicts
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let report = ctxlog::replay::verify(&stores[0], id).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.calls, 30, "every call served once ({conflicts:?} conflicts retried)");
}

#[test]
fn two_store_handles_racing_on_one_stream_get_exactly_one_winner_per_version() {
    let Some(db) = database("two_store_handles_racing") else { return };
    let stores = [PgStore::open(db.url()).unwrap(), PgStore::open(db.url()).unwrap()];
    let s = StreamId::random();
    let won: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let st = &stores[t % 2];
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    while mine.len() < 25 {
                        let head = st.head(s).unwrap().unwrap_or(0);
                        let batch = [rec(&format!("t{t} {} a", mine.len())), rec(&format!("t{t} {} b", mine.len()))];
                        match st.append(s, ExpectedVersion::Exact(head), &batch) {
                            Ok(v) => mine.push(v),
                            Err(StoreError::Conflict { actual, .. }) => assert!(actual > head, "{actual} <= {head}"),
                            Err(e) => panic!("{e}"),
                        }
                    }
                    mine
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut heads: Vec<u64> = won.concat();
    heads.sort_unstable();
    assert_eq!(heads, (1..=100).map(|i| i * 2).collect::<Vec<_>>(), "each batch acknowledged once");
    let all = stores[0].read(s, 1, usize::MAX).unwrap();
    assert_eq!(all.len(), 200);
    // Both records of every batch sit next to each other: no interleaving.
    for pair in all.chunks(2) {
        let (a, b) = (pair[0].record.body(), pair[1].record.body());
        assert_eq!(a[..a.len() - 1], b[..b.len() - 1]);
    }
    // `Any` appends race too and still never duplicate a version.
    std::thread::scope(|scope| {
        for st in &stores {
            scope.spawn(move || {
                for i in 0..20 {
                    st.append(s, ExpectedVersion::Any, &[rec(&format!("any {i}"))]).unwrap();
                }
            });
        }
    });
    assert_eq!(stores[1].read(s, 1, usize::MAX).unwrap().len(), 240);
}

#[test]
fn a_wrong_url_is_a_url_error_and_exit_3() {
    for url in ["postgres://u@localhost:notaport/db", "postgres://u@h/db?nonsense_option=1"] {
        let e = PgStore::open(url).unwrap_err();
        assert!(matches!(PgError::of(&e), Some(PgError::Url(_))), "{url}: {e}");
        let (code, _, err) = cli(&["sessions", "--store", url]);
        assert_eq!(code, 3, "{url}: {err}");
        assert!(err.contains("invalid connection URL"), "{err}");
    }
    // Not a postgres URL at all: a usage error naming the accepted forms.
    let (code, _, err) = cli(&["sessions", "--store", "postgres:nothing"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("postgres://"), "{err}");
}

#[test]
fn a_wrong_password_is_an_auth_error_naming_no_password() {
    let Some(mut db) = private("a_wrong_password_is_an_auth_error") else { return };
    let c = cluster(&mut db);
    c.create_password_role("right horse").unwrap();
    let good = c.url_for(PASSWORD_ROLE, Some("right%20horse"), "postgres");
    PgStore::open(&good).unwrap();
    for url in [c.url_for(PASSWORD_ROLE, Some("wrong"), "postgres"), c.url_for(PASSWORD_ROLE, None, "postgres")] {
        let e = PgStore::open(&url).unwrap_err();
        assert!(matches!(PgError::of(&e), Some(PgError::Auth(_))), "{url}: {e}");
        assert!(!e.to_string().contains("wrong"), "the password leaked: {e}");
        let (code, _, err) = cli(&["verify", "--store", &url]);
        assert_eq!(code, 3, "{err}");
        assert!(err.contains("authentication failed"), "{err}");
    }
}

#[test]
fn a_server_that_is_down_is_unavailable_and_nothing_is_half_written() {
    let Some(mut db) = private("a_server_that_is_down_is_unavailable") else { return };
    let opts = PgOptions { resolve_window: Duration::from_millis(300), ..PgOptions::default() };
    let store = PgStore::open_with(db.url(), opts).unwrap();
    let s = StreamId::random();
    store.append(s, ExpectedVersion::Exact(0), &[rec("one"), rec("two")]).unwrap();
    cluster(&mut db).stop().unwrap();

    // Appending, reading and opening each say the server is unavailable.
    let e = store.append(s, ExpectedVersion::Exact(2), &[rec("three"), rec("four")]).unwrap_err();
    assert!(matches!(e, StoreError::Unavailable { .. }), "{e}");
    assert!(ctxlog_store_postgres::is_transient(&e));
    let text = e.to_string();
    assert!(text.contains("connect") || text.contains("catch up before deciding again"), "{text}");
    assert!(matches!(store.head(s), Err(StoreError::Unavailable { .. })));
    let e = PgStore::open(db.url()).unwrap_err();
    assert!(matches!(e, StoreError::Unavailable { .. }), "{e}");
    let (code, _, err) = cli(&["sessions", "--store", db.url()]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("unavailable"), "{err}");

    // Back up: the same handle works again and the failed batch is not there, not even half.
    cluster(&mut db).start_again().unwrap();
    assert_eq!(store.head(s).unwrap(), Some(2));
    assert_eq!(store.append(s, ExpectedVersion::Exact(2), &[rec("three"), rec("four")]).unwrap(), 4);
    assert_eq!(store.read(s, 1, 10).unwrap().len(), 4);
}

#[test]
fn a_server_restarted_mid_batch_leaves_the_batch_written_exactly_once() {
    let Some(mut db) = private("a_server_restarted_mid_batch") else { return };
    let store = PgStore::open(db.url()).unwrap();
    let s = StreamId::random();
    store.append(s, ExpectedVersion::Exact(0), &[rec("base")]).unwrap();
    // Another client holds version 2 in an open transaction, so our batch waits on the key.
    let mut blocker = db.connect().unwrap();
    let mut tx = blocker.transaction().unwrap();
    tx.execute("INSERT INTO ctxlog_records VALUES ($1, 2, '\\x00')", &[&s.0]).unwrap();
    let mut admin = db.connect().unwrap();
    let appended = std::thread::scope(|scope| {
        let pending = scope.spawn(|| store.append(s, ExpectedVersion::Exact(1), &[rec("a"), rec("b"), rec("c")]));
        wait_for_lock_waiter(&mut admin);
        // The server goes down hard in the middle of the batch and comes back.
        cluster(&mut db).restart_immediate().unwrap();
        pending.join().unwrap()
    });
    drop(tx);
    // The store reconnected, saw that nothing of the batch was there and wrote it once.
    assert_eq!(appended.unwrap(), 4);
    let bodies: Vec<Vec<u8>> = store.read(s, 1, 10).unwrap().into_iter().map(|r| r.record.body().to_vec()).collect();
    assert_eq!(bodies, [&b"base"[..], b"a", b"b", b"c"]);
}

#[test]
fn a_batch_whose_outcome_cannot_be_learned_is_reported_and_never_half_written() {
    let Some(mut db) = private("a_batch_whose_outcome_cannot_be_learned") else { return };
    let opts = PgOptions { resolve_window: Duration::from_millis(200), ..PgOptions::default() };
    let store = PgStore::open_with(db.url(), opts).unwrap();
    let s = StreamId::random();
    let mut blocker = db.connect().unwrap();
    let mut tx = blocker.transaction().unwrap();
    tx.execute("INSERT INTO ctxlog_records VALUES ($1, 1, '\\x00')", &[&s.0]).unwrap();
    let mut admin = db.connect().unwrap();
    let result = std::thread::scope(|scope| {
        let pending = scope.spawn(|| store.append(s, ExpectedVersion::Exact(0), &[rec("x"), rec("y")]));
        wait_for_lock_waiter(&mut admin);
        cluster(&mut db).pg_ctl(&["stop", "-w", "-m", "immediate"]).unwrap();
        pending.join().unwrap()
    });
    drop(tx);
    let e = result.unwrap_err();
    assert!(matches!(e, StoreError::Unavailable { .. }), "{e}");
    assert!(e.to_string().contains("versions 1..=2"), "{e}");
    cluster(&mut db).start_again().unwrap();
    assert_eq!(store.head(s).unwrap(), None, "neither the blocker's row nor half of our batch survived");
}

#[test]
fn a_statement_timeout_is_a_timeout_error_and_writes_nothing() {
    let Some(db) = database("a_statement_timeout_is_a_timeout_error") else { return };
    let opts = PgOptions { statement_timeout: Some(Duration::from_millis(200)), ..PgOptions::default() };
    let store = PgStore::open_with(db.url(), opts).unwrap();
    let s = StreamId::random();
    let mut blocker = db.connect().unwrap();
    let mut tx = blocker.transaction().unwrap();
    tx.execute("INSERT INTO ctxlog_records VALUES ($1, 1, '\\x00')", &[&s.0]).unwrap();
    let e = store.append(s, ExpectedVersion::Exact(0), &[rec("x"), rec("y")]).unwrap_err();
    assert!(matches!(PgError::of(&e), Some(PgError::StatementTimeout(_))), "{e}");
    assert!(ctxlog_store_postgres::is_transient(&e));
    assert!(e.to_string().contains(&format!("stream {s}: append versions 1..=2")), "{e}");
    tx.rollback().unwrap();
    assert_eq!(store.head(s).unwrap(), None);
    assert_eq!(store.append(s, ExpectedVersion::Exact(0), &[rec("x"), rec("y")]).unwrap(), 2);
}

#[test]
fn a_schema_from_a_newer_ctxlog_is_refused_by_every_open() {
    let Some(db) = database("a_schema_from_a_newer_ctxlog_is_refused") else { return };
    drop(PgStore::open(db.url()).unwrap());
    ctxlog_store_postgres::set_schema_version(&mut db.connect().unwrap(), 99).unwrap();
    for e in [PgStore::open(db.url()).unwrap_err(), PgStore::open_read_only(db.url()).unwrap_err()] {
        assert!(matches!(e, StoreError::Schema { found: 99, supported: SCHEMA_VERSION, .. }), "{e}");
    }
    let (code, _, err) = cli(&["sessions", "--store", db.url()]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("unsupported schema version 99"), "{err}");
}

#[test]
fn concurrent_opens_of_an_empty_database_create_the_schema_once() {
    let Some(db) = database("concurrent_opens_create_the_schema_once") else { return };
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| PgStore::open(db.url()).unwrap());
        }
    });
    let mut c = db.connect().unwrap();
    let v: i64 = c.query_one("SELECT value FROM ctxlog_meta WHERE key = 'schema_version'", &[]).unwrap().get(0);
    assert_eq!(v as u64, SCHEMA_VERSION);
}

#[test]
fn a_read_only_open_never_writes() {
    let Some(db) = database("a_read_only_open_never_writes") else { return };
    // On an empty database it creates nothing.
    let e = PgStore::open_read_only(db.url()).unwrap_err();
    assert!(matches!(PgError::of(&e), Some(PgError::NoSchema)), "{e}");
    let mut c = db.connect().unwrap();
    let created: bool = c.query_one("SELECT to_regclass('ctxlog_meta') IS NOT NULL", &[]).unwrap().get(0);
    assert!(!created);

    let writer = PgStore::open(db.url()).unwrap();
    let s = StreamId::random();
    writer.append(s, ExpectedVersion::Exact(0), &[rec("a")]).unwrap();
    let reader = PgStore::open_read_only(db.url()).unwrap();
    assert_eq!(reader.read(s, 1, 10).unwrap().len(), 1);
    assert_eq!(reader.streams().unwrap(), [s]);
    for e in [
        reader.append(s, ExpectedVersion::Exact(1), &[rec("b")]).unwrap_err(),
        reader.put_blob(b"x").unwrap_err(),
        reader.put_snapshot(s, &Snapshot::seal(1, b"s".to_vec())).unwrap_err(),
    ] {
        assert!(matches!(PgError::of(&e), Some(PgError::ReadOnly(_))), "{e}");
    }
    assert_eq!(writer.head(s).unwrap(), Some(1));
    assert_eq!(writer.get_snapshot(s).unwrap(), None);
}

#[test]
fn the_pool_never_opens_more_connections_than_its_size() {
    let Some(db) = database("the_pool_never_opens_more_connections_than_its_size") else { return };
    let store = PgStore::open_with(db.url(), PgOptions { pool_size: 3, ..PgOptions::default() }).unwrap();
    let s = StreamId::random();
    std::thread::scope(|scope| {
        for t in 0..12 {
            let store = &store;
            scope.spawn(move || {
                for i in 0..10 {
                    store.append(s, ExpectedVersion::Any, &[rec(&format!("{t}.{i}"))]).unwrap();
                    assert!(store.connections() <= 3);
                }
            });
        }
    });
    assert_eq!(store.head(s).unwrap(), Some(120));
    let mut c = db.connect().unwrap();
    let n: i64 =
        c.query_one("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ctxlog'", &[]).unwrap().get(0);
    assert!(n <= 3, "{n} connections");
}

/// Serves `n` calls of session `id` through `store`, starting at `t0` ms.
fn serve(store: &PgStore, id: StreamId, n: u64, t0: u64) {
    let mut session = Session::open(store, id).unwrap();
    for i in 0..n {
        let t = t0 + i * 1_000;
        serve_call(
            &mut session,
            &turn(&format!("call at {t}")),
            || Timestamp::from_millis(t),
            reply(t),
            |e| panic!("{e}"),
        )
        .unwrap();
    }
}

#[test]
fn a_listener_wakes_on_each_append() {
    let Some(db) = database("a_listener_wakes_on_each_append") else { return };
    let store = PgStore::open(db.url()).unwrap();
    let s = StreamId::random();
    let mut listener = store.listen(s).unwrap();
    assert!(!listener.wait(Duration::from_millis(50)).unwrap(), "nothing appended yet");
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            store.append(s, ExpectedVersion::Exact(0), &[rec("a")]).unwrap();
        });
        assert!(listener.wait(Duration::from_secs(60)).unwrap(), "the NOTIFY woke the listener");
    });
    // Appends to another stream do not wake it.
    store.append(StreamId::random(), ExpectedVersion::Exact(0), &[rec("b")]).unwrap();
    assert!(!listener.wait(Duration::from_millis(200)).unwrap());
}

#[test]
fn tail_prints_the_calls_replay_prints_and_follows_new_ones() {
    let Some(db) = database("tail_prints_the_calls_replay_prints") else { return };
    let url = db.url().to_owned();
    let store = PgStore::open(&url).unwrap();
    let id = StreamId::random();
    drop(
        Session::create(
            &store,
            id,
            WireFormat::Anthropic,
            Config { budget: 400, ..Config::default() },
            Timestamp::from_millis(0),
        )
        .unwrap(),
    );
    serve(&store, id, 6, 10_000);
    let sid = id.to_string();
    let (code, replayed, err) = cli(&["replay", "--json", "--store", &url, "--session", &sid]);
    assert_eq!(code, 0, "{err}");
    let replayed: Vec<&str> = replayed.lines().collect();

    // Without --follow: the last N calls, exactly as replay prints them.
    let (code, tailed, err) = cli(&["tail", "--json", "-n", "2", "--store", &url, "--session", &sid]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(tailed.lines().collect::<Vec<_>>(), replayed[4..]);

    // With --follow: calls committed by another worker appear as they are committed.
    let followed = std::thread::scope(|scope| {
        let tail = scope.spawn(|| {
            cli(&["tail", "--json", "--follow", "-n", "0", "--max-calls", "3", "--store", &url, "--session", &sid])
        });
        std::thread::sleep(Duration::from_millis(300));
        serve(&PgStore::open(&url).unwrap(), id, 3, 100_000);
        tail.join().unwrap()
    });
    assert_eq!(followed.0, 0, "{}", followed.2);
    let (_, replayed, _) = cli(&["replay", "--json", "--store", &url, "--session", &sid]);
    let replayed: Vec<&str> = replayed.lines().collect();
    assert_eq!(replayed.len(), 9);
    assert_eq!(followed.1.lines().collect::<Vec<_>>(), replayed[6..]);

    // A tail never writes: the role may be read-only.
    let e = PgStore::open_read_only(&url).unwrap().put_blob(b"x").unwrap_err();
    assert!(matches!(PgError::of(&e), Some(PgError::ReadOnly(_))));
}

#[test]
fn tail_polls_stores_without_notifications() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("t.db").display());
    let store = ctxlog_store_sqlite::SqliteStore::open(dir.path().join("t.db")).unwrap();
    let id = StreamId::random();
    let mut session =
        Session::create(&store, id, WireFormat::Anthropic, Config::default(), Timestamp::from_millis(0)).unwrap();
    let mut step = |t: u64| {
        serve_call(&mut session, &turn(&format!("at {t}")), || Timestamp::from_millis(t), reply(t), |e| panic!("{e}"))
            .unwrap();
    };
    step(1_000);
    let sid = id.to_string();
    let (code, out, err) = std::thread::scope(|scope| {
        let tail = scope.spawn(|| {
            let args = ["tail", "--json", "-f", "-n", "5", "--max-calls", "3", "--poll", "0.05", "--store", &url];
            cli(&[&args[..], &["--session", &sid]].concat())
        });
        std::thread::sleep(Duration::from_millis(200));
        step(2_000);
        step(3_000);
        tail.join().unwrap()
    });
    assert_eq!(code, 0, "{err}");
    let calls: Vec<u64> =
        out.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["call"].as_u64().unwrap()).collect();
    assert_eq!(calls, [0, 1, 2]);
    // Without --follow, a session that does not exist is an error naming it.
    let missing = StreamId::random().to_string();
    let (code, _, err) = cli(&["tail", "--store", &url, "--session", &missing]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&missing), "{err}");
}
