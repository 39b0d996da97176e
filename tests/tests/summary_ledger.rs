//! The fold of condensed and retired summaries: every rule of `state/summaries.rs` has a test
//! that tries to break it and gets the typed rejection, next to the valid event it resembles.
//!
//! The conversation: 0 system, 1 first human, 2 tool call, 3 its result, 4 assistant, 5 user,
//! 6 assistant, 7 user, 8 assistant, 9 user. Summaries S0 = 0..5, S1 = 5..7, S2 = 7..9.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ctxlog::codec;
use ctxlog::event::{Event, FlushReason, Flushed, SummaryMode, SummaryPrepared, SummaryRetired};
use ctxlog::replay::{self, Mode};
use ctxlog::state::{Invariant, Item, State, SummaryState};
use ctxlog::{ExpectedVersion, MemoryStore, Store, StreamId};
use ctxlog_tests::scenario::*;

fn three_summaries() -> Vec<Event> {
    conversation_then(vec![
        assistant(6, "a"),
        user(7, "second request"),
        assistant(8, "b"),
        user(9, "third request"),
        summary_prepared(0, 5),
        summary_prepared(5, 7),
        summary_prepared(7, 9),
    ])
}

fn shown_three() -> Vec<Event> {
    let mut v = three_summaries();
    v.push(flushed(0, 9));
    v
}

fn condensed(from: u64, to: u64, merged: Vec<u32>) -> Event {
    Event::SummaryPrepared(SummaryPrepared {
        from,
        to,
        text: format!("condensed {from}..{to}"),
        tokens: 5,
        replaced_tokens: 50,
        mode_requested: SummaryMode::Extractive,
        mode_used: SummaryMode::Extractive,
        refusal: None,
        merged,
        prefix_call: None,
        usage: None,
        latency_ms: None,
    })
}

fn flush_condensed(from: u64, to: u64, condensed: Vec<u32>) -> Event {
    Event::Flushed(Flushed {
        from,
        to,
        reason: FlushReason::ColdCache,
        cache_age_ms: Some(400_000),
        tokens_before: 100,
        tokens_after: 50,
        stubbed: Vec::new(),
        condensed,
    })
}

fn retire(summary: u32, from: u64, to: u64) -> Event {
    Event::SummaryRetired(SummaryRetired { summary, from, to, tokens: 30, reason: "over the share".into() })
}

fn summaries_in_view(st: &State) -> Vec<u32> {
    st.view()
        .iter()
        .filter_map(|it| match it.item {
            Item::Summary(i) => Some(i),
            Item::Message(_) | Item::Placeholder { .. } => None,
        })
        .collect()
}

#[test]
fn a_condensed_summary_covers_exactly_the_oldest_current_summaries() {
    // Not the oldest, a gap in the list, a list shorter than the span, beyond compacted.
    for bad in [
        condensed(5, 9, vec![1, 2]),
        condensed(0, 9, vec![0, 2]),
        condensed(0, 7, vec![0]),
        condensed(0, 7, vec![1, 0]),
        condensed(0, 7, vec![0, 7]),
    ] {
        Scenario::given(shown_three()).when(bad).then_violates(Invariant::CondensedSpan);
    }
    let st = Scenario::given(shown_three()).when(condensed(0, 7, vec![0, 1])).then_ok();
    // Condensing moves no message watermark and changes no view until a flush brings it in.
    assert_eq!((st.compacted(), st.flushed()), (9, 9));
    assert_eq!(summaries_in_view(&st), vec![0, 1, 2]);
    assert_eq!(st.summary_ledger().standing()[0].condensed_by, Some(3));
    // Current summaries, by position: the waiting condensed one stands first.
    assert_eq!(st.summary_ledger().current(), vec![3, 2]);
}

#[test]
fn a_condensed_summary_enters_the_view_only_with_the_flush_that_lists_it() {
    let mut given = shown_three();
    given.push(condensed(0, 7, vec![0, 1]));
    // A flush that moves nothing and brings in nothing is still refused.
    Scenario::given(given.clone()).when(flushed(9, 9)).then_violates(Invariant::WatermarkBackwards);
    // Listing a summary that is not a waiting condensed summary.
    Scenario::given(given.clone()).when(flush_condensed(9, 9, vec![2])).then_violates(Invariant::CondensedSpan);
    let st = Scenario::given(given).when(flush_condensed(9, 9, vec![3])).then_ok();
    assert_eq!(summaries_in_view(&st), vec![3, 2]);
    let standing = st.summary_ledger().standing();
    assert_eq!(standing[0].state, SummaryState::Condensed(3));
    assert_eq!(standing[1].state, SummaryState::Condensed(3));
    assert_eq!(standing[3].state, SummaryState::Shown);
    // The first human message stays verbatim, before the condensed summary.
    assert_eq!(st.view()[1].item, Item::Message(1));
    assert!(!st.flush_pending());
}

#[test]
fn a_condensed_summary_may_cover_summaries_still_waiting_for_their_flush() {
    let mut given = three_summaries();
    given.push(flushed(0, 5));
    let st = Scenario::given(given.clone()).when(condensed(0, 9, vec![0, 1, 2])).then_ok();
    assert!(st.flush_pending());
    given.push(condensed(0, 9, vec![0, 1, 2]));
    let st = Scenario::given(given).when(flush_condensed(5, 9, vec![3])).then_ok();
    assert_eq!(summaries_in_view(&st), vec![3]);
    assert!(!st.in_view(6) && st.in_view(9));
}

#[test]
fn only_the_oldest_summary_in_the_view_retires() {
    Scenario::given(shown_three()).when(retire(1, 5, 7)).then_violates(Invariant::RetireTarget);
    Scenario::given(shown_three()).when(retire(0, 0, 6)).then_violates(Invariant::RetireTarget);
    Scenario::given(shown_three()).when(retire(9, 0, 5)).then_violates(Invariant::RetireTarget);
    // A pending summary is not in the view.
    Scenario::given(three_summaries()).when(retire(0, 0, 5)).then_violates(Invariant::RetireTarget);
    let st = Scenario::given(shown_three()).when(retire(0, 0, 5)).then_ok();
    assert_eq!(summaries_in_view(&st), vec![1, 2]);
    assert_eq!(st.summary_ledger().standing()[0].state, SummaryState::Retired);
    // Its messages stay out of the view, with nothing in their place; the kept ones stay.
    assert!(!st.in_view(2) && !st.in_view(4) && st.in_view(0) && st.in_view(1));
    // A retired summary cannot be condensed: the oldest current one is now S1.
    let mut given = shown_three();
    given.push(retire(0, 0, 5));
    Scenario::given(given.clone()).when(condensed(0, 7, vec![0, 1])).then_violates(Invariant::CondensedSpan);
    Scenario::given(given).when(condensed(5, 9, vec![1, 2])).then_ok();
}

#[test]
fn a_bad_retirement_stops_a_strict_replay_and_is_skipped_by_a_lenient_one() {
    let stream = StreamId(SESSION);
    let mut events = shown_three();
    events.push(retire(1, 5, 7));
    events.push(request_served(0, 10));
    let store = MemoryStore::new();
    let records: Vec<_> = events.iter().map(|e| codec::encode(e).unwrap()).collect();
    store.append(stream, ExpectedVersion::Exact(0), &records).unwrap();
    assert!(replay::replay(&store, stream, Mode::Strict, None).is_err());
    let r = replay::replay(&store, stream, Mode::Lenient, None).unwrap();
    assert_eq!(r.violations.len(), 1);
    assert_eq!(r.violations[0].invariant, Invariant::RetireTarget);
    assert_eq!(summaries_in_view(&r.state), vec![0, 1, 2]);
    assert_eq!(r.timeline.len(), 1);
}

#[test]
fn a_lenient_replay_keeps_the_ready_condensed_summary_of_a_flush_that_also_lists_a_wrong_one() {
    // Given every message flushed (flushed = compacted = 9) and S3, condensing S0 and S1,
    // waiting for its flush,
    let mut given = shown_three();
    given.push(condensed(0, 7, vec![0, 1]));
    let mut st = fold(&given);
    // when a buggy writer's flush lists S2 (already shown) next to S3 and is applied leniently,
    let found = st.apply_lenient(st.version() + 1, &flush_condensed(9, 9, vec![2, 3]));
    // then the violation is reported and the flush is repaired to bring in S3 alone, without
    // moving the flushed prefix (there is nothing left to flush).
    assert_eq!(found.iter().map(|v| v.invariant).collect::<Vec<_>>(), [Invariant::CondensedSpan]);
    assert_eq!(summaries_in_view(&st), vec![3, 2]);
    assert_eq!((st.flushed(), st.compacted()), (9, 9));
    assert!(!st.flush_pending());
}
