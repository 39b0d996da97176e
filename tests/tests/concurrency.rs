//! Sessions and stores across threads: what is `Send`/`Sync` (checked by the compiler), one
//! shared store serving many sessions from many threads, and two handles on one session.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::sync::Arc;
use std::thread;

use ctxlog::config::Config;
use ctxlog::replay;
use ctxlog::{MemoryStore, Message, Session, SessionError, Store, StoreError, StreamId, Timestamp, Usage, WireFormat};
use ctxlog_store_fs::FsStore;
use ctxlog_store_postgres::PgStore;
use ctxlog_store_sled::SledStore;
use ctxlog_store_sqlite::SqliteStore;
use serde_json::json;

const T0: u64 = 1_767_225_600_000;

// ---- Compile-time: a session moves between threads, a store is shared by them ---------------

const fn send<T: Send>() {}
const fn send_sync<T: Send + Sync>() {}
const fn store<T: Store>() {}

const _: () = {
    send_sync::<MemoryStore>();
    send_sync::<SqliteStore>();
    send_sync::<FsStore>();
    send_sync::<SledStore>();
    send_sync::<PgStore>();
    // A session owns its store handle or borrows a shared one; either way it is `Send`.
    send::<Session<MemoryStore>>();
    send::<Session<Arc<SqliteStore>>>();
    send::<Session<Arc<FsStore>>>();
    send::<Session<Arc<SledStore>>>();
    send::<Session<Arc<PgStore>>>();
    send::<Session<&'static SqliteStore>>();
    send::<Session<Box<dyn Store>>>();
    // Plans and the request bodies travel with it (e.g. across an `.await`).
    send::<ctxlog::Plan>();
    send::<ctxlog::Request>();
    // Shared handles are stores themselves.
    store::<Arc<SqliteStore>>();
    store::<Arc<FsStore>>();
    store::<&'static MemoryStore>();
    store::<Box<dyn Store>>();
};

fn msg(v: serde_json::Value) -> Message {
    ctxlog::internal::wire::parse_message(&v.to_string()).unwrap()
}

/// One short agent session: a few calls with tool output and an image, summaries between calls.
fn converse<S: Store>(store: S, thread: usize, n: usize) -> StreamId {
    let id = StreamId::random();
    let config = Config { budget: 6_000, ..Config::default() };
    let mut s = Session::create(store, id, WireFormat::Anthropic, config, Timestamp::from_millis(T0)).unwrap();
    s.append(vec![msg(json!({"role": "user", "content": [
        {"type": "text", "text": format!("thread {thread} session {n}: port the parser")},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
            "data": ctxlog::internal::wire::encode_base64(&ctxlog_workload::encode_png(8, 8, &(0..8).flat_map(|_| std::iter::once(0).chain([thread as u8; 24])).collect::<Vec<u8>>()))}}
    ]}))])
    .unwrap();
    let mut at = T0;
    for call in 0..4 {
        at += 10_000;
        let plan = s.plan(Timestamp::from_millis(at)).unwrap();
        let tokens = plan.view_tokens;
        s.commit(
            plan,
            Timestamp::from_millis(at),
            Some(Usage { input: 20, cache_read: tokens, cache_write: 5, output: 40 }),
        )
        .unwrap();
        let tool = format!("t{call}");
        s.append(vec![
            msg(json!({"role": "assistant", "content": [{"type": "tool_use", "id": tool, "name": "read", "input": {"n": call}}]})),
            msg(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool,
                "content": format!("{thread}/{n}/{call} ").repeat(400)}]})),
        ])
        .unwrap();
        if let Some(job) = s.summary_job() {
            let text = s.summarize(&job).unwrap();
            s.prepare(&job, text, ctxlog::session::Produced::extractive()).unwrap();
        }
    }
    id
}

/// 8 threads × 25 sessions on one shared store, then every session verified.
fn many_threads<S: Store + 'static>(store: Arc<S>) {
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let store = Arc::clone(&store);
            thread::spawn(move || (0..25).map(|n| converse(Arc::clone(&store), t, n)).collect::<Vec<_>>())
        })
        .collect();
    let ids: Vec<StreamId> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert_eq!(ids.len(), 200);
    let mut streams = store.streams().unwrap();
    streams.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(streams, expected);
    for id in ids {
        let report = replay::verify(store.as_ref(), id).unwrap();
        assert!(report.ok(), "{id}: {:?}", report.problems);
        assert_eq!(report.calls, 4);
        assert!(report.blobs >= 1);
    }
}

#[test]
fn eight_threads_share_one_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    many_threads(Arc::new(SqliteStore::open(dir.path().join("ctxlog.db")).unwrap()));
}

#[test]
fn eight_threads_share_one_fs_store() {
    let dir = tempfile::tempdir().unwrap();
    many_threads(Arc::new(FsStore::open(dir.path().join("store")).unwrap()));
}

#[test]
fn eight_threads_share_one_memory_store() {
    many_threads(Arc::new(MemoryStore::new()));
}

#[test]
fn two_handles_on_one_session_get_a_matchable_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("ctxlog.db")).unwrap());
    let id = StreamId::random();
    let mut a =
        Session::create(Arc::clone(&store), id, WireFormat::Anthropic, Config::default(), Timestamp::from_millis(T0))
            .unwrap();
    a.append(vec![msg(json!({"role": "user", "content": "hello"}))]).unwrap();
    // Given two handles on the same session (two workers, or a retry that reopened it),
    let mut b = Session::open(Arc::clone(&store), id).unwrap();
    let plan_a = a.plan(Timestamp::from_millis(T0 + 1_000)).unwrap();
    let plan_b = b.plan(Timestamp::from_millis(T0 + 1_000)).unwrap();
    // when both commit the call they planned,
    a.commit(plan_a, Timestamp::from_millis(T0 + 2_000), None).unwrap();
    let head = store.head(id).unwrap();
    // then the second gets the store's Conflict, which a caller can match, and writes nothing.
    match b.commit(plan_b, Timestamp::from_millis(T0 + 2_000), None) {
        Err(SessionError::Store(StoreError::Conflict { stream, actual, .. })) => {
            assert_eq!(stream, id);
            assert_eq!(Some(actual), head);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(store.head(id).unwrap(), head);
    // After catching up it sees the other's commit: its old plan is stale, a new one commits.
    b.catch_up().unwrap();
    assert_eq!(b.state(), a.state());
    let plan = b.plan(Timestamp::from_millis(T0 + 3_000)).unwrap();
    b.commit(plan, Timestamp::from_millis(T0 + 3_000), None).unwrap();
    // A handle that only missed appends keeps its plan after catching up.
    let plan = b.plan(Timestamp::from_millis(T0 + 4_000)).unwrap();
    a.catch_up().unwrap();
    a.append(vec![msg(json!({"role": "user", "content": "typed meanwhile"}))]).unwrap();
    assert!(matches!(
        b.commit(plan.clone(), Timestamp::from_millis(T0 + 5_000), None),
        Err(SessionError::Store(StoreError::Conflict { .. }))
    ));
    b.catch_up().unwrap();
    b.commit(plan, Timestamp::from_millis(T0 + 5_000), None).unwrap();
    let report = replay::verify(store.as_ref(), id).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}
