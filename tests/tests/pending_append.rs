//! `Session::append_pending`: the batch is applied first and written later; nothing can be
//! committed on top of it before it is written, and a write that lost a race writes nothing.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use ctxlog::{
    parse_message, Config, MemoryStore, Session, SessionError, Store, StoreError, StreamId, Timestamp, WireFormat,
};
use ctxlog_store_sqlite::SqliteStore;

const T0: u64 = 1_767_225_600_000;

fn msg(role: &str, text: &str) -> ctxlog::Message {
    parse_message(&format!(r#"{{"role":"{role}","content":"{text}"}}"#)).unwrap()
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(T0 + ms)
}

#[test]
fn a_pending_append_plans_at_once_and_commits_only_once_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("log.sqlite")).unwrap();
    let id = StreamId::random();
    let mut s = Session::create(&store, id, WireFormat::Anthropic, Config::default(), at(0)).unwrap();
    let head = store.head(id).unwrap();
    let (appended, pending) =
        s.append_pending(vec![msg("user", "hi"), msg("assistant", "yo"), msg("user", "go")]).unwrap();
    // Applied to the session, not written.
    assert_eq!(s.state().message_count(), 3);
    assert_eq!(appended.version, pending.version());
    assert_eq!(store.head(id).unwrap(), head);
    let plan = s.plan(at(1_000)).unwrap();
    assert_eq!(plan.view_messages, 3);
    // Committing before the write fails and writes nothing.
    let early = s.plan(at(1_000)).unwrap();
    assert!(matches!(s.commit(early, at(1_500), None), Err(SessionError::Store(StoreError::Conflict { .. }))));
    assert_eq!(store.head(id).unwrap(), head);
    // Written: the commit goes on top, and a reopened session is the same.
    assert_eq!(pending.write(&store).unwrap(), appended.version);
    s.commit(plan, at(2_000), None).unwrap();
    let again = Session::open(&store, id).unwrap();
    assert_eq!(again.state().message_count(), 3);
    assert_eq!(again.state().version(), s.state().version());
    assert_eq!(again.state().calls(), 1);
}

#[test]
fn a_pending_append_that_lost_a_race_writes_nothing() {
    let store = MemoryStore::new();
    let id = StreamId::random();
    let mut a = Session::create(&store, id, WireFormat::OpenAi, Config::default(), at(0)).unwrap();
    let mut b = Session::open(&store, id).unwrap();
    let (_, pending) = a.append_pending(vec![msg("user", "from a")]).unwrap();
    b.append(vec![msg("user", "from b")]).unwrap();
    let head = store.head(id).unwrap();
    assert!(matches!(pending.write(&store), Err(SessionError::Store(StoreError::Conflict { .. }))));
    assert_eq!(store.head(id).unwrap(), head);
    let log = Session::open(&store, id).unwrap();
    assert_eq!(*log.messages(0..1).unwrap()[0], msg("user", "from b"));
}

#[test]
fn a_pending_append_refuses_what_append_refuses() {
    let store = MemoryStore::new();
    let id = StreamId::random();
    let mut s = Session::create(&store, id, WireFormat::Anthropic, Config::default(), at(0)).unwrap();
    // A tool result with no call is refused: nothing applied, nothing written.
    let orphan =
        parse_message(r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"nope","content":"x"}]}"#)
            .unwrap();
    let head = store.head(id).unwrap();
    assert!(s.append_pending(vec![orphan]).is_err());
    assert_eq!(s.state().message_count(), 0);
    assert_eq!(store.head(id).unwrap(), head);
}
