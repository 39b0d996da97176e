//! Every invariant of DESIGN §7 has a test that tries to break it and gets the typed rejection,
//! next to a positive control showing the nearby valid event is accepted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ctxlog::codec;
use ctxlog::event::Event;
use ctxlog::replay::{self, Mode};
use ctxlog::session::StaleCause;
use ctxlog::state::{Invariant, State};
use ctxlog::{ExpectedVersion, MemoryStore, Session, SessionError, Store, StreamId, Timestamp};
use ctxlog_tests::scenario::*;

// ---- SessionStart ----------------------------------------------------------------------------

#[test]
fn an_event_before_session_started_is_rejected() {
    Scenario::given(vec![]).when(user(0, "hello")).then_violates(Invariant::SessionStart);
    Scenario::given(vec![]).when(request_served(0, 1)).then_violates(Invariant::SessionStart);
    let st = Scenario::given(vec![]).when(started()).then_ok();
    assert_eq!(st.info().unwrap().id, SESSION);
}

#[test]
fn a_second_session_started_is_rejected() {
    Scenario::given(vec![started()]).when(started()).then_violates(Invariant::SessionStart);
    Scenario::given(conversation()).when(started()).then_violates(Invariant::SessionStart);
}

// ---- VersionContiguous -----------------------------------------------------------------------

#[test]
fn versions_must_be_contiguous() {
    let n = conversation().len() as u64;
    Scenario::given(conversation())
        .when(assistant(6, "ok"))
        .at_version(n + 2)
        .then_violates(Invariant::VersionContiguous);
    // Re-applying at an old version (a duplicate record) is as bad as a gap.
    Scenario::given(conversation()).when(assistant(6, "ok")).at_version(n).then_violates(Invariant::VersionContiguous);
    let st = Scenario::given(conversation()).when(assistant(6, "ok")).at_version(n + 1).then_ok();
    assert_eq!(st.version(), n + 1);
}

// ---- SeqDense --------------------------------------------------------------------------------

#[test]
fn an_append_seq_must_equal_the_message_count() {
    Scenario::given(conversation()).when(assistant(7, "skips 6")).then_violates(Invariant::SeqDense);
    Scenario::given(conversation()).when(assistant(5, "reuses 5")).then_violates(Invariant::SeqDense);
    let st = Scenario::given(conversation()).when(assistant(6, "ok")).then_ok();
    assert_eq!(st.message_count(), 7);
}

// ---- Watermarks ------------------------------------------------------------------------------

#[test]
fn a_flush_beyond_the_compacted_prefix_is_rejected() {
    let given = conversation_then(vec![summary_prepared(0, 2)]);
    let v = Scenario::given(given.clone()).when(flushed(0, 3)).then_violates(Invariant::Watermarks);
    assert!(v.detail.contains('3') && v.detail.contains('2'), "detail gives the numbers: {}", v.detail);
    let st = Scenario::given(given).when(flushed(0, 2)).then_ok();
    assert_eq!((st.flushed(), st.compacted()), (2, 2));
}

#[test]
fn a_summary_beyond_the_message_count_is_rejected() {
    Scenario::given(conversation()).when(summary_prepared(0, 7)).then_violates(Invariant::Watermarks);
    // An empty span moves nothing and is refused too.
    Scenario::given(conversation()).when(summary_prepared(0, 0)).then_violates(Invariant::Watermarks);
    let st = Scenario::given(conversation()).when(summary_prepared(0, 6)).then_ok();
    assert_eq!(st.compacted(), 6);
}

// ---- WatermarkBackwards ----------------------------------------------------------------------

#[test]
fn a_summary_must_start_where_the_last_one_ended() {
    let given = conversation_then(vec![summary_prepared(0, 2)]);
    Scenario::given(given.clone()).when(summary_prepared(1, 4)).then_violates(Invariant::WatermarkBackwards);
    Scenario::given(given.clone()).when(summary_prepared(0, 4)).then_violates(Invariant::WatermarkBackwards);
    let st = Scenario::given(given).when(summary_prepared(2, 4)).then_ok();
    assert_eq!(st.compacted(), 4);
    assert_eq!(st.summaries().len(), 2);
}

#[test]
fn a_flush_must_start_at_the_flushed_prefix_and_move_forward() {
    let given = conversation_then(vec![summary_prepared(0, 2), summary_prepared(2, 4), flushed(0, 2)]);
    Scenario::given(given.clone()).when(flushed(0, 4)).then_violates(Invariant::WatermarkBackwards);
    Scenario::given(given.clone()).when(flushed(2, 2)).then_violates(Invariant::WatermarkBackwards);
    Scenario::given(given.clone()).when(flushed(1, 4)).then_violates(Invariant::WatermarkBackwards);
    let st = Scenario::given(given).when(flushed(2, 4)).then_ok();
    assert_eq!(st.flushed(), 4);
}

// ---- SpanSplitsToolPair ----------------------------------------------------------------------

#[test]
fn a_summary_span_may_not_split_a_tool_call_from_its_result() {
    // t1 is called at seq 2 and answered at seq 3.
    Scenario::given(conversation()).when(summary_prepared(0, 3)).then_violates(Invariant::SpanSplitsToolPair);
    Scenario::given(conversation_then(vec![summary_prepared(0, 2)]))
        .when(summary_prepared(2, 3))
        .then_violates(Invariant::SpanSplitsToolPair);
    Scenario::given(conversation()).when(summary_prepared(0, 4)).then_ok();
}

#[test]
fn a_summary_span_may_not_cover_a_call_that_has_no_result_yet() {
    let given = conversation_then(vec![tool_use(6, "t2")]);
    Scenario::given(given.clone()).when(summary_prepared(0, 7)).then_violates(Invariant::SpanSplitsToolPair);
    Scenario::given(given).when(summary_prepared(0, 6)).then_ok();
}

// ---- EditTarget ------------------------------------------------------------------------------

#[test]
fn an_edit_of_a_missing_seq_is_rejected() {
    Scenario::given(conversation()).when(removed(6)).then_violates(Invariant::EditTarget);
    Scenario::given(conversation()).when(truncated(u64::MAX)).then_violates(Invariant::EditTarget);
}

#[test]
fn only_tool_results_can_be_truncated() {
    Scenario::given(conversation()).when(truncated(4)).then_violates(Invariant::EditTarget);
    Scenario::given(conversation()).when(truncated(5)).then_violates(Invariant::EditTarget);
    let st = Scenario::given(conversation()).when(truncated(3)).then_ok();
    let e = st.entry(3).unwrap();
    assert!(e.edit.is_some());
    assert!(st.view().iter().any(|it| it.seq == 3 && it.tokens == e.edit.as_ref().unwrap().tokens));
}

#[test]
fn only_user_messages_can_be_stubbed() {
    Scenario::given(conversation()).when(stubbed(4)).then_violates(Invariant::EditTarget);
    Scenario::given(conversation()).when(stubbed(2)).then_violates(Invariant::EditTarget);
    Scenario::given(conversation()).when(stubbed(5)).then_ok();
}

#[test]
fn a_message_hidden_by_a_flush_cannot_be_edited() {
    let given = conversation_then(vec![summary_prepared(0, 4), flushed(0, 4)]);
    let v = Scenario::given(given.clone()).when(removed(2)).then_violates(Invariant::EditTarget);
    assert!(v.detail.contains("flushed"), "{}", v.detail);
    Scenario::given(given.clone()).when(truncated(3)).then_violates(Invariant::EditTarget);
    // After the flushed prefix, edits are fine.
    Scenario::given(given).when(removed(4)).then_ok();
}

// ---- EditProtected ---------------------------------------------------------------------------

#[test]
fn system_messages_are_never_edited() {
    for ev in [removed(0), truncated(0), stubbed(0)] {
        Scenario::given(conversation()).when(ev).then_violates(Invariant::EditProtected);
    }
    let dev = vec![started(), appended(0, r#"{"role":"developer","content":"rules"}"#), user(1, "hi")];
    Scenario::given(dev).when(removed(0)).then_violates(Invariant::EditProtected);
}

#[test]
fn pinned_messages_are_never_edited() {
    let given = vec![
        started(),
        system(0, "sys"),
        pinned_user(1, "The spec: never drop this."),
        assistant(2, "noted"),
        user(3, "go on"),
        assistant(4, "ok"),
        user(5, "and again"),
    ];
    Scenario::given(given.clone()).when(stubbed(1)).then_violates(Invariant::EditProtected);
    Scenario::given(given.clone()).when(removed(1)).then_violates(Invariant::EditProtected);
    // The unpinned user message next to it is editable.
    Scenario::given(given.clone()).when(stubbed(3)).then_ok();
    Scenario::given(given).when(removed(3)).then_ok();
}

#[test]
fn the_first_human_message_is_never_edited() {
    // Given a conversation whose first human message (seq 1) holds the user's instructions and
    // is long enough for the ladder to stub, followed by later human turns.
    let long = "PROJECT PATH IS ~/Desktop/ora. ".repeat(20);
    let given = vec![
        started(),
        system(0, "sys"),
        user(1, &long),
        assistant(2, "noted"),
        user(3, &long),
        assistant(4, "ok"),
        user(5, "and again"),
    ];
    // When an edit of any kind targets it, then the fold rejects it, naming the rule.
    for ev in [stubbed(1), removed(1)] {
        let v = Scenario::given(given.clone()).when(ev).then_violates(Invariant::EditProtected);
        assert!(v.detail.contains("first human"), "{}", v.detail);
    }
    // Truncation is refused too (it is not a tool result, and it is protected first).
    let v = Scenario::given(given.clone()).when(truncated(1)).then_violates(Invariant::EditProtected);
    assert!(v.detail.contains("first human"), "{}", v.detail);
    // The same text at a later human turn is editable: the rule is about position, not content.
    Scenario::given(given.clone()).when(stubbed(3)).then_ok();
    Scenario::given(given.clone()).when(removed(3)).then_ok();
    // A tool-result carrier before any human turn does not take the first human's place.
    let tool_first = vec![
        started(),
        system(0, "sys"),
        tool_use(1, "t0"),
        tool_result(2, "t0"),
        user(3, &long),
        assistant(4, "ok"),
        user(5, "later"),
    ];
    Scenario::given(tool_first.clone()).when(stubbed(3)).then_violates(Invariant::EditProtected);
    Scenario::given(tool_first).when(truncated(2)).then_ok();
}

// ---- LastUserRemoved -------------------------------------------------------------------------

#[test]
fn the_last_user_message_is_never_removed() {
    Scenario::given(conversation()).when(removed(5)).then_violates(Invariant::LastUserRemoved);
    // Stubbing it is allowed; removing an older user message (not the first) too.
    Scenario::given(conversation()).when(stubbed(5)).then_ok();
    let later = conversation_then(vec![assistant(6, "ok"), user(7, "next")]);
    Scenario::given(later).when(removed(5)).then_ok();
    // A tool-result carrier after it does not make it any less the last *human* message.
    let given = conversation_then(vec![tool_use(6, "t2"), tool_result(7, "t2")]);
    Scenario::given(given).when(removed(5)).then_violates(Invariant::LastUserRemoved);
}

// ---- AlreadyRemoved --------------------------------------------------------------------------

#[test]
fn an_already_removed_message_is_not_edited_again() {
    let given = conversation_then(vec![assistant(6, "ok"), user(7, "next"), removed(4), removed(5)]);
    Scenario::given(given.clone()).when(removed(4)).then_violates(Invariant::AlreadyRemoved);
    Scenario::given(given.clone()).when(stubbed(5)).then_violates(Invariant::AlreadyRemoved);
    // A truncated message is still in the view and can be removed later.
    Scenario::given(conversation_then(vec![truncated(3)])).when(removed(3)).then_ok();
}

// ---- UnansweredCallRemoved -------------------------------------------------------------------

#[test]
fn a_tool_call_without_a_result_is_never_removed() {
    let given = conversation_then(vec![tool_use(6, "t2")]);
    Scenario::given(given.clone()).when(removed(6)).then_violates(Invariant::UnansweredCallRemoved);
    let mut answered = given;
    answered.push(tool_result(7, "t2"));
    Scenario::given(answered).when(removed(6)).then_ok();
}

// ---- ToolPairs -------------------------------------------------------------------------------

#[test]
fn a_call_removed_without_its_result_fails_at_request_served() {
    // Removing the call alone is not checked by itself (a batch may remove both halves) ...
    let given = conversation_then(vec![removed(2)]);
    let st = Scenario::given(given.clone()).state();
    assert!(st.check_tool_pairs().is_err(), "the view now has an orphan result");
    // ... but the batch's RequestServed is.
    Scenario::given(given).when(request_served(0, 10)).then_violates(Invariant::ToolPairs);
    Scenario::given(conversation_then(vec![removed(2), removed(3)])).when(request_served(0, 10)).then_ok();
}

#[test]
fn a_result_removed_without_its_call_fails_at_request_served() {
    Scenario::given(conversation_then(vec![removed(3)]))
        .when(request_served(0, 10))
        .then_violates(Invariant::ToolPairs);
}

#[test]
fn restoring_half_a_tool_pair_is_rejected() {
    let given = conversation_then(vec![removed(2), removed(3), request_served(0, 10)]);
    Scenario::given(given.clone()).when(restored(3, vec![])).then_violates(Invariant::ToolPairs);
    let st = Scenario::given(given).when(restored(3, vec![2])).then_ok();
    assert!(st.in_view(2) && st.in_view(3));
}

// ---- UnknownToolCall -------------------------------------------------------------------------

#[test]
fn a_result_for_an_unknown_call_is_rejected() {
    let v = Scenario::given(conversation()).when(tool_result(6, "nope")).then_violates(Invariant::UnknownToolCall);
    assert!(v.detail.contains("nope"), "{}", v.detail);
    Scenario::given(conversation_then(vec![tool_use(6, "t2")])).when(tool_result(7, "t2")).then_ok();
}

#[test]
fn a_message_making_one_call_cannot_answer_another_unknown_one() {
    // A message that both calls `own` and answers: its own call is known, an unknown one is not.
    let both = |answers: &str| {
        appended(
            6,
            &format!(
                r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"own","name":"f","input":{{}}}},{{"type":"tool_result","tool_use_id":"{answers}","content":"x"}}]}}"#
            ),
        )
    };
    let v = Scenario::given(conversation()).when(both("nope")).then_violates(Invariant::UnknownToolCall);
    assert!(v.detail.contains("nope"), "{}", v.detail);
    Scenario::given(conversation()).when(both("own")).then_ok();
}

#[test]
fn a_call_answered_twice_is_rejected() {
    Scenario::given(conversation()).when(tool_result(6, "t1")).then_violates(Invariant::UnknownToolCall);
}

#[test]
fn openai_tool_messages_must_answer_a_known_call() {
    let openai = vec![
        started_with(ctxlog::WireFormat::OpenAi, config()),
        appended(0, r#"{"role":"user","content":"list files"}"#),
        appended(
            1,
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"ls","arguments":"{}"}}]}"#,
        ),
    ];
    Scenario::given(openai.clone())
        .when(appended(2, r#"{"role":"tool","tool_call_id":"call_9","content":"a.txt"}"#))
        .then_violates(Invariant::UnknownToolCall);
    Scenario::given(openai).when(appended(2, r#"{"role":"tool","tool_call_id":"call_1","content":"a.txt"}"#)).then_ok();
}

// ---- TimeBackwards / CallSequence ------------------------------------------------------------

#[test]
fn request_served_time_never_goes_backwards() {
    let given = conversation_then(vec![request_served(0, 100)]);
    Scenario::given(given.clone()).when(request_served(1, 99)).then_violates(Invariant::TimeBackwards);
    // The same instant is not backwards.
    let st = Scenario::given(given).when(request_served(1, 100)).then_ok();
    assert_eq!(st.calls(), 2);
}

#[test]
fn calls_are_numbered_without_gaps() {
    Scenario::given(conversation()).when(request_served(1, 10)).then_violates(Invariant::CallSequence);
    let given = conversation_then(vec![request_served(0, 10)]);
    Scenario::given(given.clone()).when(request_served(0, 20)).then_violates(Invariant::CallSequence);
    Scenario::given(given.clone()).when(request_served(2, 20)).then_violates(Invariant::CallSequence);
    Scenario::given(given).when(request_served(1, 20)).then_ok();
}

// ---- RestoreTarget ---------------------------------------------------------------------------

#[test]
fn a_restore_must_target_an_edited_or_flushed_message() {
    Scenario::given(conversation()).when(restored(4, vec![])).then_violates(Invariant::RestoreTarget);
    Scenario::given(conversation()).when(restored(42, vec![])).then_violates(Invariant::RestoreTarget);
    let given = conversation_then(vec![removed(4)]);
    Scenario::given(given.clone()).when(restored(4, vec![42])).then_violates(Invariant::RestoreTarget);
    let st = Scenario::given(given).when(restored(4, vec![])).then_ok();
    assert!(st.in_view(4));
    assert!(st.entry(4).unwrap().edit.is_none());
}

#[test]
fn a_flushed_message_can_be_restored_into_the_view() {
    let given = conversation_then(vec![summary_prepared(0, 4), flushed(0, 4)]);
    let st = Scenario::given(given.clone()).state();
    assert!(!st.in_view(2) && !st.in_view(3));
    // Kept through the flush: system and the first human message.
    assert!(st.in_view(0) && st.in_view(1));
    let st = Scenario::given(given).when(restored(2, vec![3])).then_ok();
    assert!(st.in_view(2) && st.in_view(3));
}

// ---- The view's token arithmetic -------------------------------------------------------------

#[test]
fn view_tokens_are_exactly_the_sum_of_the_view_after_every_event() {
    let events = conversation_then(vec![
        truncated(3),
        stubbed(5),
        request_served(0, 10),
        assistant(6, "more"),
        user(7, "again"),
        summary_prepared(0, 4),
        flushed(0, 4),
        request_served(1, 20),
    ]);
    let mut st = State::new();
    for (i, ev) in events.iter().enumerate() {
        st.apply(i as u64 + 1, ev).unwrap();
        let sum: u64 = st.view().iter().map(|it| u64::from(it.tokens)).sum();
        assert_eq!(st.view_tokens(), sum, "after {}", ev.name());
    }
}

// ---- Lenient and strict replay of a bad log --------------------------------------------------

fn bad_flush_log() -> Vec<Event> {
    // flushed > compacted: a buggy writer flushed past what was summarized.
    conversation_then(vec![summary_prepared(0, 2), flushed(0, 4), assistant(6, "after the bad flush")])
}

#[test]
fn lenient_apply_clamps_a_flush_beyond_compacted_and_reports_it() {
    let events = bad_flush_log();
    let bad_version = events.len() as u64 - 1;
    let mut st = State::new();
    let mut found = Vec::new();
    for (i, ev) in events.iter().enumerate() {
        found.extend(st.apply_lenient(i as u64 + 1, ev));
    }
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].invariant, Invariant::Watermarks);
    assert_eq!(found[0].version, bad_version);
    assert_eq!(st.flushed(), 2, "clamped to compacted_prefix_messages");
    assert_eq!(st.compacted(), 2);
    assert!(st.flushed() <= st.compacted() && st.compacted() <= st.message_count());
    // Replay went on past the bad event.
    assert_eq!(st.message_count(), 7);
    assert_eq!(st.version(), events.len() as u64);
}

#[test]
fn lenient_apply_skips_an_event_whose_repair_still_breaks_an_invariant() {
    // Given a summary that starts past the compacted prefix (seq 1, not 0), where the repaired
    // span 0..3 would cut tool call t1 (seq 2) from its result (seq 3),
    let mut st = fold(&conversation());
    let version = st.version() + 1;
    // when it is applied leniently,
    let found = st.apply_lenient(version, &summary_prepared(1, 3));
    // then the original violation is reported, the repair is not applied (it would split the
    // pair), and replay goes on from the next version.
    assert_eq!(found.iter().map(|v| v.invariant).collect::<Vec<_>>(), [Invariant::WatermarkBackwards]);
    assert_eq!(st.compacted(), 0, "a repair that breaks another invariant is skipped");
    assert_eq!(st.version(), version);
    // A repair that holds is applied: the same summary ending after the pair.
    let mut st = fold(&conversation());
    let found = st.apply_lenient(version, &summary_prepared(1, 4));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(st.compacted(), 4, "repaired to 0..4");
}

#[test]
fn lenient_apply_renumbers_a_served_call_and_clamps_its_time() {
    // Given a session that served call 0 at 20 s,
    let mut st = fold(&conversation_then(vec![request_served(0, 20)]));
    let at_20 = st.last_request_at();
    // when a record claims call 5, served at 10 s (before call 0),
    let found = st.apply_lenient(st.version() + 1, &request_served(5, 10));
    // then the violation is reported and the call is counted as call 1 at the previous time.
    assert_eq!(found.iter().map(|v| v.invariant).collect::<Vec<_>>(), [Invariant::CallSequence]);
    assert_eq!(st.calls(), 2, "repaired and applied, not dropped");
    assert_eq!(st.last_request_at(), at_20, "time clamped, never backwards");
    // The same with the right number but going back in time.
    let found = st.apply_lenient(st.version() + 1, &request_served(2, 5));
    assert_eq!(found.iter().map(|v| v.invariant).collect::<Vec<_>>(), [Invariant::TimeBackwards]);
    assert_eq!((st.calls(), st.last_request_at()), (3, at_20));
}

#[test]
fn lenient_apply_skips_a_flush_when_nothing_is_prepared() {
    // Given nothing prepared (flushed = compacted = 0),
    let mut st = fold(&conversation());
    // when a flush claims 0..2, then it is reported and skipped (there is nothing to clamp to).
    let found = st.apply_lenient(st.version() + 1, &flushed(0, 2));
    assert_eq!(found.iter().map(|v| v.invariant).collect::<Vec<_>>(), [Invariant::Watermarks]);
    assert_eq!((st.flushed(), st.compacted()), (0, 0));
    // After a prepare, the same flush is clamped to what was prepared,
    let mut st = fold(&conversation_then(vec![summary_prepared(0, 1)]));
    let found = st.apply_lenient(st.version() + 1, &flushed(0, 2));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(st.flushed(), 1);
    // and a flush that does not move forward is stretched to move by at least one message.
    let mut st = fold(&conversation_then(vec![summary_prepared(0, 2)]));
    let found = st.apply_lenient(st.version() + 1, &flushed(0, 0));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(st.flushed(), 1);
}

fn store_with(events: &[Event]) -> (MemoryStore, StreamId) {
    let store = MemoryStore::new();
    let id = StreamId(SESSION);
    let records: Vec<_> = events.iter().map(|e| codec::encode(e).unwrap()).collect();
    store.append(id, ExpectedVersion::Exact(0), &records).unwrap();
    (store, id)
}

#[test]
fn strict_replay_of_a_bad_log_names_the_version_and_the_invariant() {
    let events = bad_flush_log();
    let bad_version = events.len() as u64 - 1;
    let (store, id) = store_with(&events);
    match replay::replay(&store, id, Mode::Strict, None) {
        Err(SessionError::Invariant { stream, violation }) => {
            assert_eq!(stream, id);
            assert_eq!(violation.version, bad_version);
            assert_eq!(violation.invariant, Invariant::Watermarks);
            assert_eq!(violation.event, "Flushed");
        }
        other => panic!("expected an invariant error, got {other:?}"),
    }
    // Up to the version before the bad one, strict replay is fine.
    let ok = replay::replay(&store, id, Mode::Strict, Some(bad_version - 1)).unwrap();
    assert_eq!(ok.state.version(), bad_version - 1);
    // Lenient replay reports the same violation and goes on.
    let lenient = replay::replay(&store, id, Mode::Lenient, None).unwrap();
    assert_eq!(lenient.violations.len(), 1);
    assert_eq!(lenient.violations[0].version, bad_version);
    assert_eq!(lenient.state.flushed(), 2);
    // Opening the session is strict too.
    assert!(matches!(
        Session::open(&store, id),
        Err(SessionError::Invariant { violation, .. }) if violation.version == bad_version
    ));
    // And verify reports it.
    let report = replay::verify(&store, id).unwrap();
    assert!(!report.ok());
    assert!(
        report.problems.iter().any(|p| p.to_string().contains(&format!("version {bad_version}"))),
        "{:?}",
        report.problems
    );
}

#[test]
fn lenient_replay_renumbers_a_seq_gap_and_strict_replay_refuses_it() {
    let events = conversation_then(vec![assistant(9, "seq should be 6"), user(7, "next")]);
    let (store, id) = store_with(&events);
    let strict = replay::replay(&store, id, Mode::Strict, None).unwrap_err();
    assert!(
        matches!(&strict, SessionError::Invariant { violation, .. } if violation.invariant == Invariant::SeqDense && violation.version == 8),
        "{strict:?}"
    );
    let lenient = replay::replay(&store, id, Mode::Lenient, None).unwrap();
    assert_eq!(lenient.violations.len(), 1);
    assert_eq!(lenient.state.message_count(), 8);
}

// ---- Live commands -------------------------------------------------------------------------

fn live_session(store: &MemoryStore) -> Session<&MemoryStore> {
    let mut s =
        Session::create(store, StreamId(SESSION), ctxlog::WireFormat::Anthropic, config(), Timestamp::from_millis(T0))
            .unwrap();
    let msgs = [
        r#"{"role":"system","content":"sys"}"#,
        r#"{"role":"user","content":"hi"}"#,
        r#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"ls","input":{}}]}"#,
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a.txt"}]}"#,
    ];
    s.append(msgs.iter().map(|m| parse(m)).collect()).unwrap();
    s
}

#[test]
fn live_restore_of_a_never_edited_seq_is_rejected_and_writes_nothing() {
    let store = MemoryStore::new();
    let mut s = live_session(&store);
    let head = store.head(s.id()).unwrap();
    let before = s.state().clone();
    let err = s.restore(1, "test", "why not").unwrap_err();
    assert!(
        matches!(&err, SessionError::Refused { violation, .. } if violation.invariant == Invariant::RestoreTarget),
        "{err:?}"
    );
    assert_eq!(store.head(s.id()).unwrap(), head, "nothing written");
    assert_eq!(s.state(), &before, "nothing applied");
    assert!(s.restore(99, "test", "missing").is_err());
    assert_eq!(store.head(s.id()).unwrap(), head);
}

#[test]
fn live_append_breaking_an_invariant_is_rejected_and_writes_nothing() {
    let store = MemoryStore::new();
    let mut s = live_session(&store);
    let head = store.head(s.id()).unwrap();
    // A batch whose second message answers an unknown call: the whole batch is refused.
    let batch = vec![
        parse(r#"{"role":"user","content":"fine"}"#),
        parse(r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"ghost","content":"?"}]}"#),
    ];
    let err = s.append(batch).unwrap_err();
    assert!(
        matches!(&err, SessionError::Refused { violation, .. } if violation.invariant == Invariant::UnknownToolCall),
        "{err:?}"
    );
    assert_eq!(store.head(s.id()).unwrap(), head);
    assert_eq!(s.state().message_count(), 4);
    // Answering t1 a second time is refused the same way.
    let err = s
        .append(vec![parse(
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"again"}]}"#,
        )])
        .unwrap_err();
    assert!(matches!(err, SessionError::Refused { .. }), "{err:?}");
    // A message of the wrong format is a typed message error naming the batch index.
    let err = s
        .append(vec![
            parse(r#"{"role":"user","content":"ok"}"#),
            parse(r#"{"role":"tool","tool_call_id":"t1","content":"x"}"#),
        ])
        .unwrap_err();
    assert!(matches!(&err, SessionError::Message { index: 1, error } if error.field == "role"), "{err:?}");
    assert_eq!(store.head(s.id()).unwrap(), head);
    // The session is still usable and re-opens to the same state.
    s.append(vec![parse(r#"{"role":"user","content":"still here"}"#)]).unwrap();
    let reopened = Session::open(&store, s.id()).unwrap();
    assert_eq!(reopened.state(), s.state());
}

#[test]
fn a_stale_plan_is_refused_and_abort_writes_nothing() {
    let store = MemoryStore::new();
    let mut s = live_session(&store);
    let plan = s.plan(Timestamp::from_millis(T0 + 1000)).unwrap();
    let head = store.head(s.id()).unwrap();
    s.abort(plan);
    assert_eq!(store.head(s.id()).unwrap(), head);
    // Another call committed meanwhile: the first plan no longer describes the session.
    let stale = s.plan(Timestamp::from_millis(T0 + 2000)).unwrap();
    let competing = s.plan(Timestamp::from_millis(T0 + 2000)).unwrap();
    s.commit(competing, Timestamp::from_millis(T0 + 2000), None).unwrap();
    let head = store.head(s.id()).unwrap();
    let err = s.commit(stale, Timestamp::from_millis(T0 + 3000), None).unwrap_err();
    assert!(matches!(err, SessionError::StalePlan { by: StaleCause::CallCommitted, .. }), "{err:?}");
    assert_eq!(store.head(s.id()).unwrap(), head);
}

#[test]
fn a_commit_going_back_in_time_is_rejected_and_writes_nothing() {
    let store = MemoryStore::new();
    let mut s = live_session(&store);
    let plan = s.plan(Timestamp::from_millis(T0 + 10_000)).unwrap();
    s.commit(plan, Timestamp::from_millis(T0 + 10_000), None).unwrap();
    let head = store.head(s.id()).unwrap();
    let plan = s.plan(Timestamp::from_millis(T0 + 5_000)).unwrap();
    let err = s.commit(plan, Timestamp::from_millis(T0 + 5_000), None).unwrap_err();
    assert!(
        matches!(&err, SessionError::Refused { violation, .. } if violation.invariant == Invariant::TimeBackwards),
        "{err:?}"
    );
    assert_eq!(store.head(s.id()).unwrap(), head);
    assert_eq!(s.state().calls(), 1);
}

#[test]
fn lenient_apply_accepts_an_event_after_a_version_gap_and_skips_a_duplicate() {
    let given = conversation();
    let n = given.len() as u64;
    let mut st = fold(&given);
    // A gap: version n + 3 instead of n + 1. Reported, and the event is kept.
    let found = st.apply_lenient(n + 3, &assistant(6, "after a gap"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].invariant, Invariant::VersionContiguous);
    assert_eq!(st.message_count(), 7, "the event after the gap was applied");
    assert_eq!(st.version(), n + 3);
    // The next event continues from there.
    assert!(st.apply_lenient(n + 4, &user(7, "next")).is_empty());
    // A duplicate (an old version again) is reported and skipped, and the version does not go back.
    let found = st.apply_lenient(n + 2, &user(8, "duplicate"));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].invariant, Invariant::VersionContiguous);
    assert_eq!(st.message_count(), 8);
    assert_eq!(st.version(), n + 4);
}

// ---- The meter -------------------------------------------------------------------------------

fn served_with_usage(call: u64, at_secs: u64, view_tokens: u64, reported: u64) -> Event {
    let Event::RequestServed(mut r) = request_served(call, at_secs) else { unreachable!() };
    r.view_tokens = view_tokens;
    r.reported_tokens = Some(reported);
    r.anchored = true;
    Event::RequestServed(r)
}

#[test]
fn the_meter_anchors_on_reported_usage_until_the_history_changes() {
    let mut events = conversation();
    let st = fold(&events);
    let estimate = st.view_tokens();
    assert_eq!(st.metered_tokens(estimate), estimate, "no usage reported yet: the plain estimate");
    events.push(served_with_usage(0, 10, estimate, 9_000));
    events.push(assistant(6, "twelve chars"));
    let st = fold(&events);
    let added = st.view_tokens() - estimate;
    assert!(added > 0);
    assert_eq!(
        st.metered_tokens(st.view_tokens()),
        9_000 + added * 9_000 / estimate,
        "last reported + what was added, counted at the provider's rate"
    );
    // A provider that counts fewer tokens than the estimate: what was added counts as estimated.
    let mut low = events.clone();
    let Some(Event::RequestServed(r)) = low.iter_mut().rev().find(|e| matches!(e, Event::RequestServed(_))) else {
        unreachable!()
    };
    r.reported_tokens = Some(estimate - 1);
    let st = fold(&low);
    assert_eq!(st.metered_tokens(st.view_tokens()), estimate - 1 + added);
    // An edit changes the history the provider counted: the anchor's total is void, but the
    // provider still counts at its rate (issue 21: the call after a restore went over the
    // budget by the provider's count), so the whole estimate is scaled by it.
    events.push(removed(4));
    let st = fold(&events);
    assert_eq!(st.metered_tokens(st.view_tokens()), st.view_tokens() * 9_000 / estimate);
    // A rate below 1 is not applied: the estimate stays the meter's floor.
    low.push(removed(4));
    let st = fold(&low);
    assert_eq!(st.metered_tokens(st.view_tokens()), st.view_tokens());
}

#[test]
fn session_create_refuses_a_bad_config_or_a_taken_id_and_writes_nothing() {
    let store = MemoryStore::new();
    let id = StreamId(SESSION);
    let bad = ctxlog::Config { target_ratio: 0.9, ..config() };
    let err =
        Session::create(&store, id, ctxlog::WireFormat::Anthropic, bad, Timestamp::from_millis(T0)).err().unwrap();
    assert!(matches!(&err, SessionError::Config(c) if c.key == "target"), "{err:?}");
    assert_eq!(store.head(id).unwrap(), None);
    let _s = Session::create(&store, id, ctxlog::WireFormat::Anthropic, config(), Timestamp::from_millis(T0)).unwrap();
    let err =
        Session::create(&store, id, ctxlog::WireFormat::OpenAi, config(), Timestamp::from_millis(T0)).err().unwrap();
    assert!(matches!(err, SessionError::Exists(x) if x == id), "{err:?}");
    assert_eq!(store.head(id).unwrap(), Some(1));
    assert!(matches!(Session::open(&store, StreamId::random()).err().unwrap(), SessionError::NotFound(_)));
}

// ---- ImportCompleted -------------------------------------------------------------------------

fn import_started(messages: u64) -> Event {
    let Event::SessionStarted(mut s) = started() else { unreachable!() };
    s.import = Some(ctxlog::event::ImportSource {
        transcript_sha256: "00".repeat(32),
        transcript_bytes: 1_000,
        messages,
        call_interval_ms: 30_000,
    });
    Event::SessionStarted(s)
}

fn import_completed(messages: u64, calls: u64) -> Event {
    Event::ImportCompleted(ctxlog::event::ImportCompleted { messages, calls })
}

#[test]
fn an_import_completes_once_with_every_announced_message() {
    // The conversation's six messages and no call, under an import that announced six.
    let mut given = conversation();
    given[0] = import_started(6);
    let st = fold(&given);
    assert!(st.import_unfinished());
    // Not an import, too few or too many messages or calls, or a second completion: refused.
    Scenario::given(conversation()).when(import_completed(6, 0)).then_violates(Invariant::ImportCompleted);
    let mut seven = given.clone();
    seven[0] = import_started(7);
    Scenario::given(seven).when(import_completed(6, 0)).then_violates(Invariant::ImportCompleted);
    Scenario::given(given.clone()).when(import_completed(5, 0)).then_violates(Invariant::ImportCompleted);
    Scenario::given(given.clone()).when(import_completed(6, 1)).then_violates(Invariant::ImportCompleted);
    let st = Scenario::given(given.clone()).when(import_completed(6, 0)).then_ok();
    assert!(!st.import_unfinished() && st.import().unwrap().completed);
    given.push(import_completed(6, 0));
    Scenario::given(given).when(import_completed(6, 0)).then_violates(Invariant::ImportCompleted);
}
