//! The async handle: store IO off the runtime's threads, many sessions at once on one store,
//! operations on one session in order, panics and errors surfacing where they belong.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use ctxlog::config::Config;
use ctxlog::request::RequestOptions;
use ctxlog::{MemoryStore, SessionError, StreamId, Timestamp, Usage, WireFormat};
use ctxlog_store_sqlite::SqliteStore;
use ctxlog_tokio::{now, AsyncSession, Error};

fn user(text: &str) -> ctxlog::Message {
    ctxlog::parse_message(&serde_json::json!({"role": "user", "content": text}).to_string()).unwrap()
}

#[test]
fn store_io_runs_off_the_runtime_thread() {
    // Given a single-threaded runtime (every task runs on this thread),
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let runtime_thread = std::thread::current().id();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(dir.path().join("c.db")).unwrap());
        let s = AsyncSession::create(store, StreamId::random(), WireFormat::Anthropic, Config::default(), now())
            .await
            .unwrap();
        // when the session appends (an fsync'd write), it does so on another thread.
        let on = s
            .call(|s| {
                s.append(vec![user("hi")]).unwrap();
                std::thread::current().id()
            })
            .await
            .unwrap();
        assert_ne!(on, runtime_thread);
        assert_eq!(s.call(|s| s.state().message_count()).await.unwrap(), 1);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_sessions_run_at_once_on_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("c.db")).unwrap());
    let mut tasks = Vec::new();
    for n in 0..20 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let s = AsyncSession::create(store, StreamId::random(), WireFormat::Anthropic, Config::default(), now())
                .await
                .unwrap();
            for turn in 0..5 {
                s.append(vec![user(&format!("session {n} turn {turn}"))]).await.unwrap();
                let (plan, request) = s.plan_request(now(), &RequestOptions::new().model("m")).await.unwrap();
                assert!(request.body().starts_with(br#"{"model":"m","messages":["#));
                s.commit(plan, now(), Some(Usage::prompt(10 * (turn + 1)))).await.unwrap();
                s.append(vec![ctxlog::parse_message(r#"{"role":"assistant","content":"ok"}"#).unwrap()]).await.unwrap();
            }
            s.snapshot().await.unwrap();
            s.id()
        }));
    }
    for task in tasks {
        let id = task.await.unwrap();
        let report = ctxlog::replay::verify(store.as_ref(), id).unwrap();
        assert!(report.ok(), "{:?}", report.problems);
        assert_eq!(report.calls, 5);
        // Reopened from the log (snapshot + replay), it goes on.
        let s = AsyncSession::open(Arc::clone(&store), id).await.unwrap();
        assert_eq!(s.call(|s| s.state().calls()).await.unwrap(), 5);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clones_drive_one_session_one_operation_at_a_time() {
    let store = Arc::new(MemoryStore::new());
    let s = AsyncSession::create(
        Arc::clone(&store),
        StreamId::random(),
        WireFormat::Anthropic,
        Config::default(),
        Timestamp::from_millis(0),
    )
    .await
    .unwrap();
    // Eight tasks append through clones of the handle: every append lands, seqs stay dense.
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let s = s.clone();
            tokio::spawn(async move {
                for i in 0..25 {
                    s.append(vec![user(&format!("{t}/{i}"))]).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(s.call(|s| s.state().message_count()).await.unwrap(), 200);
    // A plan one clone took is stale once another clone committed a call.
    let first = s.plan(Timestamp::from_millis(1_000)).await.unwrap();
    let other = s.clone();
    let plan = other.plan(Timestamp::from_millis(1_000)).await.unwrap();
    other.commit(plan, Timestamp::from_millis(1_000), None).await.unwrap();
    match s.commit(first, Timestamp::from_millis(2_000), None).await {
        Err(Error::Session(SessionError::StalePlan { .. })) => {}
        other => panic!("{other:?}"),
    }
    let report = ctxlog::replay::verify(store.as_ref(), s.id()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[tokio::test]
async fn errors_and_panics_come_back_to_the_caller() {
    let store = Arc::new(MemoryStore::new());
    let id = StreamId::random();
    let s = AsyncSession::create(
        Arc::clone(&store),
        id,
        WireFormat::Anthropic,
        Config::default(),
        Timestamp::from_millis(0),
    )
    .await
    .unwrap();
    // A session error is typed.
    match AsyncSession::create(
        Arc::clone(&store),
        id,
        WireFormat::Anthropic,
        Config::default(),
        Timestamp::from_millis(0),
    )
    .await
    {
        Err(Error::Session(SessionError::Exists(e))) => assert_eq!(e, id),
        other => panic!("{other:?}"),
    }
    match AsyncSession::open(Arc::clone(&store), StreamId::random()).await {
        Err(Error::Session(SessionError::NotFound(_))) => {}
        other => panic!("{other:?}"),
    }
    // A panic in the closure unwinds in the task that awaited it, and the session stays usable.
    let panicking = s.clone();
    let joined = tokio::spawn(async move { panicking.call(|_| panic!("boom")).await }).await;
    assert!(joined.unwrap_err().is_panic());
    s.append(vec![user("still works")]).await.unwrap();
    assert_eq!(s.call(|s| s.state().message_count()).await.unwrap(), 1);
}
