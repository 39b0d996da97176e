//! `Session::branch`: a branch holds its parent's state at the fork point (summaries, flushes,
//! edits of the shared prefix), its own messages after it, and reads like any session.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use ctxlog::event::Branched;
use ctxlog::replay::{replay, verify, Mode};
use ctxlog::state::Invariant;
use ctxlog::{
    codec, parse_message, Config, Event, ExpectedVersion, MemoryStore, Message, Session, SessionError, Store, StreamId,
    Timestamp, WireFormat,
};

fn user(i: usize) -> Message {
    parse_message(&format!(r#"{{"role":"user","content":"turn {i}: {}"}}"#, "words of the task ".repeat(40))).unwrap()
}

fn assistant(i: usize) -> Message {
    parse_message(&format!(r#"{{"role":"assistant","content":"done {i}"}}"#)).unwrap()
}

/// A session of `turns` calls on a small budget, its summaries prepared after each call.
fn compacted_session(store: &MemoryStore, turns: usize) -> Session<&MemoryStore> {
    let config = Config { budget: 2_000, ..Config::default() };
    let system = parse_message(r#"{"role":"system","content":"be brief"}"#).unwrap();
    let (mut s, _) = Session::create_with(
        store,
        StreamId::random(),
        WireFormat::Anthropic,
        config,
        Timestamp::from_millis(1_000),
        vec![system],
    )
    .unwrap();
    for i in 0..turns {
        let mut m = vec![user(i)];
        if i > 0 {
            m.insert(0, assistant(i - 1));
        }
        s.append(m).unwrap();
        let now = Timestamp::from_millis(2_000 + 1_000 * i as u64);
        let plan = s.plan(now).unwrap();
        s.commit(plan, now, None).unwrap();
        while let Some(job) = s.summary_job() {
            let text = s.summarize(&job).unwrap();
            if matches!(s.prepare(&job, text, ctxlog::Produced::extractive()).unwrap(), ctxlog::Prepared::Discarded(_))
            {
                break;
            }
        }
    }
    s
}

#[test]
fn a_branch_starts_from_its_parents_state_at_the_fork_point() {
    let store = MemoryStore::new();
    let parent = compacted_session(&store, 30);
    assert!(parent.state().flushed() > 0, "the parent never flushed: the test shows nothing");
    // Fork late: the prefix has summaries and flushes of its own.
    let at = parent.state().message_count() - 3;
    let fork_version = parent.state().entry(at).unwrap().version - 1;
    let before = replay(&store, parent.id(), Mode::Strict, Some(fork_version)).unwrap().state;
    assert!(before.flushed() > 0 && !before.summaries().is_empty());

    let child = StreamId::random();
    let (mut branch, _) = parent.branch(child, at, Timestamp::from_millis(90_000), vec![user(1_000)]).unwrap();
    assert_eq!(branch.state().message_count(), at + 1);
    assert_eq!(
        (
            branch.state().compacted(),
            branch.state().flushed(),
            branch.state().calls(),
            branch.state().summaries().len()
        ),
        (before.compacted(), before.flushed(), before.calls(), before.summaries().len()),
        "the branch does not start from the parent's compaction state"
    );
    // The branch's next call goes on from there: no compaction from scratch.
    let plan = branch.plan(Timestamp::from_millis(91_000)).unwrap();
    assert!(plan.level() < 3, "the branch's first call escalated to level {}", plan.level());
    branch.commit(plan, Timestamp::from_millis(91_000), None).unwrap();

    // Its log: the parent's records byte for byte (but the first), `Branched`, its own.
    let theirs = store.read(parent.id(), 1, usize::MAX).unwrap();
    let ours = store.read(child, 1, usize::MAX).unwrap();
    for (a, b) in theirs.iter().zip(&ours).take(fork_version as usize).skip(1) {
        assert_eq!(a.record, b.record, "record {} was not copied as it is", a.version);
    }
    match codec::decode(child, 1, &ours[0].record).unwrap() {
        Event::SessionStarted(e) => assert_eq!(e.session, child.0),
        other => panic!("{other:?}"),
    }
    let branched = codec::decode(child, fork_version + 1, &ours[fork_version as usize].record).unwrap();
    assert_eq!(
        branched,
        Event::Branched(Branched { parent: parent.id().0, parent_version: fork_version, messages: at, at: 90_000 })
    );
    // Readers see an ordinary session; the parent is untouched.
    assert!(verify(&store, child).unwrap().problems.is_empty());
    assert!(verify(&store, parent.id()).unwrap().problems.is_empty());
    let reopened = Session::open(&store, child).unwrap();
    assert_eq!(reopened.messages(0..at).unwrap(), parent.messages(0..at).unwrap());
    assert_eq!(reopened.messages(at..at + 1).unwrap()[0].as_ref(), &user(1_000));
    assert_eq!(store.head(parent.id()).unwrap(), Some(parent.state().version()));
}

#[test]
fn a_refused_branch_writes_nothing_and_an_id_is_made_once() {
    let store = MemoryStore::new();
    let parent = compacted_session(&store, 3);
    let orphan =
        parse_message(r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"nope","content":"x"}]}"#)
            .unwrap();
    let child = StreamId::random();
    let refused = parent.branch(child, 2, Timestamp::from_millis(9_000), vec![orphan]);
    assert!(matches!(refused, Err(SessionError::Refused { .. })), "{:?}", refused.err());
    assert_eq!(store.head(child).unwrap(), None, "a refused branch left records");
    parent.branch(child, 2, Timestamp::from_millis(9_000), vec![user(7)]).unwrap();
    let again = parent.branch(child, 2, Timestamp::from_millis(9_000), vec![user(7)]);
    assert!(matches!(again, Err(SessionError::Exists(_))));
    // A fork point past the end is refused too.
    let past =
        parent.branch(StreamId::random(), parent.state().message_count() + 1, Timestamp::from_millis(9_000), vec![]);
    assert!(matches!(past, Err(SessionError::Refused { .. })), "{:?}", past.err());
    // At the very end: a branch sharing everything.
    let all = parent.state().message_count();
    let (b, _) = parent.branch(StreamId::random(), all, Timestamp::from_millis(9_000), vec![assistant(9)]).unwrap();
    assert_eq!(b.state().message_count(), all + 1);
}

#[test]
fn a_branched_record_that_lies_about_its_copy_is_refused_by_the_fold() {
    let store = MemoryStore::new();
    let parent = compacted_session(&store, 2);
    let records = store.read(parent.id(), 1, usize::MAX).unwrap();
    let head = records.len() as u64;
    for (lie_version, lie_messages) in [(head - 1, parent.state().message_count()), (head, 1)] {
        let id = StreamId::random();
        let mut copy: Vec<_> = records.iter().map(|r| r.record.clone()).collect();
        copy[0] = match codec::decode(parent.id(), 1, &records[0].record).unwrap() {
            Event::SessionStarted(mut e) => {
                e.session = id.0;
                codec::encode(&Event::SessionStarted(e)).unwrap()
            }
            other => panic!("{other:?}"),
        };
        let lie = Branched { parent: parent.id().0, parent_version: lie_version, messages: lie_messages, at: 5 };
        copy.push(codec::encode(&Event::Branched(lie)).unwrap());
        store.append(id, ExpectedVersion::Exact(0), &copy).unwrap();
        match Session::open(&store, id) {
            Err(SessionError::Invariant { violation, .. }) => assert_eq!(violation.invariant, Invariant::BranchPoint),
            other => panic!("a lying Branched was folded: {:?}", other.map(|s| s.state().version())),
        }
    }
}
