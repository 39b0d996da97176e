//! The flush gate (research/virtual_context.md §2.2 and the gate tests of §5.1, in our terms),
//! as a data-driven table, plus the spec tests the peers never wrote: prepare does not change
//! the view, an aborted flush writes nothing, warmth is measured from the commit time, and a
//! flush keeps the user's own words verbatim and lists what it elided as restorable.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::sync::Arc;

use ctxlog::config::{Config, SummarizerKind};
use ctxlog::event::{Event, FlushReason, Flushed};
use ctxlog::internal::view::render_item;
use ctxlog::state::Item;
use ctxlog::{Store, Timestamp, WireFormat};
use ctxlog_tests::engine_fixtures::{rendered_pair_problems, Harness, T0};

const TTL: u64 = 300_000;
const WARM: u64 = 30_000;

fn gate_config(cache_aware: bool) -> Config {
    Config {
        budget: 10_000,
        trigger_ratio: 0.8,
        target_ratio: 0.3,
        prepare_ratio: 0.2,
        summarizer: SummarizerKind::Extractive,
        cache_aware,
        flush_ttl_ms: TTL,
        protected_recent_ratio: 0.3,
        ..Config::default()
    }
}

/// System, the first human message, a pinned instruction, an image, then ten tool turns:
/// ~4,000 tokens, over the prepare threshold (2,000) and under the trigger (8,000).
fn gate_session(format: WireFormat, cache_aware: bool) -> Harness {
    let mut h = Harness::new(format, gate_config(cache_aware));
    let w = h.wire;
    h.append(vec![
        w.system("You are a careful coding assistant."),
        w.user("PROJECT PATH IS ~/Desktop/ora"),
        w.assistant("Understood."),
        w.pinned_user("Never push to main."),
        w.assistant("Noted."),
        w.user_with_image(&["here is the screenshot of the failing page"]),
        w.assistant("I see the error banner."),
    ]);
    for i in 0..10 {
        append_turn(&mut h, i, 1_200);
    }
    h
}

fn append_turn(h: &mut Harness, i: usize, result_chars: usize) {
    let w = h.wire;
    let id = format!("call{i}");
    h.append(vec![
        w.user(&format!("step {i}: please check the next file")),
        w.calls("reading", &[&id], "read_file"),
        w.result(&id, &format!("file {i}\n{}", "x".repeat(result_chars))),
        w.assistant(&format!("file {i} looks fine")),
    ]);
}

fn flushes(events: &[Event]) -> Vec<Flushed> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Flushed(f) => Some(f.clone()),
            _ => None,
        })
        .collect()
}

fn assert_watermarks(h: &Harness) {
    let st = h.session.state();
    assert!(st.flushed() <= st.compacted(), "flushed {} > compacted {}", st.flushed(), st.compacted());
    assert!(st.compacted() <= st.message_count());
}

#[derive(Debug)]
struct Case {
    name: &'static str,
    cache_aware: bool,
    /// Age of the cache at the call; `None` = never served.
    age_ms: Option<u64>,
    pending: bool,
    size: Size,
    expect: Option<FlushReason>,
}

/// Where the view is when the call is planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Size {
    /// Under the trigger (8,000).
    Small,
    /// Over the trigger, within the hard limit (the budget, 10,000).
    OverTrigger,
    /// Over the hard limit.
    OverHardLimit,
}

const CASES: &[Case] = &[
    Case {
        name: "legacy + pending",
        cache_aware: false,
        age_ms: Some(WARM),
        pending: true,
        size: Size::Small,
        expect: Some(FlushReason::LegacyImmediate),
    },
    Case {
        name: "legacy + pending, never served",
        cache_aware: false,
        age_ms: None,
        pending: true,
        size: Size::Small,
        expect: Some(FlushReason::LegacyImmediate),
    },
    Case {
        name: "legacy + nothing pending",
        cache_aware: false,
        age_ms: Some(WARM),
        pending: false,
        size: Size::Small,
        expect: None,
    },
    Case {
        name: "cache-aware cold (age = ttl) + pending",
        cache_aware: true,
        age_ms: Some(TTL),
        pending: true,
        size: Size::Small,
        expect: Some(FlushReason::ColdCache),
    },
    Case {
        name: "cache-aware cold (age > ttl) + pending",
        cache_aware: true,
        age_ms: Some(2 * TTL),
        pending: true,
        size: Size::Small,
        expect: Some(FlushReason::ColdCache),
    },
    Case {
        name: "cache-aware never served + pending",
        cache_aware: true,
        age_ms: None,
        pending: true,
        size: Size::Small,
        expect: Some(FlushReason::ColdCache),
    },
    Case {
        name: "cache-aware warm (age = ttl - 1) + pending + under trigger",
        cache_aware: true,
        age_ms: Some(TTL - 1),
        pending: true,
        size: Size::Small,
        expect: None,
    },
    Case {
        name: "cache-aware warm + pending + under trigger",
        cache_aware: true,
        age_ms: Some(WARM),
        pending: true,
        size: Size::Small,
        expect: None,
    },
    Case {
        name: "cache-aware warm + pending + over trigger, within the hard limit",
        cache_aware: true,
        age_ms: Some(WARM),
        pending: true,
        size: Size::OverTrigger,
        expect: None,
    },
    Case {
        name: "cache-aware warm + pending + over the hard limit",
        cache_aware: true,
        age_ms: Some(WARM),
        pending: true,
        size: Size::OverHardLimit,
        expect: Some(FlushReason::SizeThreshold),
    },
    Case {
        name: "legacy + pending + over trigger",
        cache_aware: false,
        age_ms: Some(WARM),
        pending: true,
        size: Size::OverTrigger,
        expect: Some(FlushReason::LegacyImmediate),
    },
    Case {
        name: "cache-aware warm + nothing pending",
        cache_aware: true,
        age_ms: Some(WARM),
        pending: false,
        size: Size::Small,
        expect: None,
    },
    Case {
        name: "cache-aware cold + nothing pending",
        cache_aware: true,
        age_ms: Some(2 * TTL),
        pending: false,
        size: Size::Small,
        expect: None,
    },
];

#[test]
fn flush_gate_decision_table() {
    for format in [WireFormat::Anthropic, WireFormat::OpenAi] {
        for case in CASES {
            let mut h = gate_session(format, case.cache_aware);
            let served = case.age_ms.map(|age| {
                h.call();
                h.now = T0 + age;
                h.calls[0].view.clone()
            });
            if case.pending {
                assert!(h.prepare_extractive(), "{}: no summary was prepared", case.name);
            }
            match case.size {
                Size::Small => {}
                // One more turn with a large result puts the view between 8,000 and 10,000 tokens.
                Size::OverTrigger => append_turn(&mut h, 99, 20_000),
                // With a 32,000-char result it is over the 10,000 budget.
                Size::OverHardLimit => append_turn(&mut h, 99, 32_000),
            }
            let tokens = h.session.state().view_tokens();
            match case.size {
                Size::Small => assert!(tokens < 8_000, "{}: {tokens}", case.name),
                Size::OverTrigger => assert!((8_000..=10_000).contains(&tokens), "{}: {tokens}", case.name),
                Size::OverHardLimit => assert!(tokens > 10_000, "{}: {tokens}", case.name),
            }
            assert_watermarks(&h);
            let compacted = h.session.state().compacted();
            assert_eq!(compacted > 0, case.pending, "{}", case.name);
            let c = h.call().clone();
            let f = flushes(&c.events);
            match case.expect {
                None => {
                    assert!(f.is_empty(), "{format:?} {}: unexpected flush {f:?}", case.name);
                    assert_eq!(h.session.state().flushed(), 0, "{}", case.name);
                    if case.cache_aware && case.age_ms == Some(WARM) && case.pending {
                        let d = h.live_timeline.last().unwrap().deferred.clone();
                        assert_eq!(d.map(|d| d.reason), Some("warm_cache"), "{}: deferral not recorded", case.name);
                    }
                    if let (Some(prev), Size::Small) = (&served, case.size) {
                        // Deferred (or nothing to do): the view is the served one, byte for byte.
                        assert_eq!(&c.view, prev, "{format:?} {}: view changed", case.name);
                        assert_eq!(c.digest, h.calls[0].digest);
                        assert!(c.prefix_reused);
                    }
                }
                Some(reason) => {
                    assert_eq!(f.len(), 1, "{format:?} {}", case.name);
                    let f = &f[0];
                    assert_eq!(f.reason, reason, "{format:?} {}", case.name);
                    assert_eq!((f.from, f.to), (0, compacted), "{format:?} {}: flushes to compacted", case.name);
                    assert_eq!(f.cache_age_ms, case.age_ms, "{format:?} {}", case.name);
                    assert!(f.tokens_after < f.tokens_before, "{format:?} {}: {f:?}", case.name);
                    assert_eq!(h.session.state().flushed(), compacted);
                    assert!(!c.prefix_reused);
                }
            }
            assert_watermarks(&h);
            h.assert_verified();
        }
    }
}

#[test]
fn warm_cache_defers_every_prepare_then_cold_cache_flushes_to_compacted() {
    let mut h = gate_session(WireFormat::Anthropic, true);
    h.call();
    let mut compacted = Vec::new();
    for round in 0..3 {
        if h.prepare_extractive() {
            compacted.push(h.session.state().compacted());
        }
        // Warm (30 s per call) and under the trigger: deferred, flushed unchanged.
        let c = h.call().clone();
        assert!(flushes(&c.events).is_empty(), "round {round}: flushed while warm");
        assert!(c.prefix_reused && c.bytes_appended_only, "round {round}: the prefix changed");
        assert_eq!(h.session.state().flushed(), 0);
        assert_watermarks(&h);
        append_turn(&mut h, 20 + round, 1_200);
    }
    assert!(compacted.len() >= 2, "expected several prepares while warm, got {compacted:?}");
    assert!(compacted.windows(2).all(|w| w[0] < w[1]));
    // Warm then cold: the next call flushes everything prepared, in one step.
    h.now += TTL;
    let c = h.call().clone();
    let f = flushes(&c.events);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].reason, FlushReason::ColdCache);
    assert_eq!((f[0].from, f[0].to), (0, *compacted.last().unwrap()));
    assert_eq!(h.session.state().flushed(), h.session.state().compacted());
    assert_watermarks(&h);
    h.assert_verified();
}

#[test]
fn prepare_does_not_change_the_view() {
    for cache_aware in [false, true] {
        let mut h = gate_session(WireFormat::OpenAi, cache_aware);
        h.call();
        let before = h.session.plan(Timestamp::from_millis(h.now)).unwrap();
        let (digest, view) = (before.digest.clone(), h.session.plan_view(&before));
        let state_view = h.session.state().view().to_vec();
        let generation = h.session.state().generation();
        h.session.abort(before);
        assert!(h.prepare_extractive());
        assert_eq!(h.session.state().view(), state_view.as_slice());
        assert_eq!(h.session.state().generation(), generation);
        assert_eq!(h.session.state().flushed(), 0);
        if cache_aware {
            // Warm: the plan after prepare serves the very same bytes.
            let after = h.session.plan(Timestamp::from_millis(h.now)).unwrap();
            assert_eq!(after.digest, digest);
            assert_eq!(h.session.plan_view(&after), view);
            assert!(after.events().is_empty());
        }
    }
}

#[test]
fn abort_after_a_planned_flush_leaves_the_log_unchanged_and_the_next_plan_flushes_again() {
    let mut h = gate_session(WireFormat::Anthropic, false);
    h.call();
    assert!(h.prepare_extractive());
    let head = h.store.head(h.session.id()).unwrap();
    let bytes = h.log_bytes();
    let state = h.session.state().clone();
    let plan = h.session.plan(Timestamp::from_millis(h.now)).unwrap();
    let planned = flushes(plan.events());
    assert_eq!(planned.len(), 1);
    h.session.abort(plan);
    assert_eq!(h.store.head(h.session.id()).unwrap(), head);
    assert_eq!(h.log_bytes(), bytes, "abort wrote something");
    assert_eq!(h.session.state(), &state);
    assert_eq!(h.session.state().flushed(), 0);
    // The next call decides again and flushes the same range.
    let c = h.call().clone();
    assert_eq!(flushes(&c.events), planned);
    h.assert_verified();
}

#[test]
fn warmth_is_measured_from_the_commit_time() {
    let mut h = gate_session(WireFormat::Anthropic, true);
    // Planned at T0, dispatch completed 200 s later.
    let plan = h.session.plan(Timestamp::from_millis(T0)).unwrap();
    let committed_at = T0 + 200_000;
    h.session.commit(plan, Timestamp::from_millis(committed_at), None).unwrap();
    assert_eq!(h.session.state().last_request_at(), Some(committed_at));
    assert!(h.prepare_extractive());
    // One ttl after the *plan* but only 100 s after the commit: still warm.
    let plan = h.session.plan(Timestamp::from_millis(T0 + TTL + 1)).unwrap();
    assert!(flushes(plan.events()).is_empty(), "measured warmth from the plan time");
    h.session.abort(plan);
    // One ttl after the commit: cold.
    let plan = h.session.plan(Timestamp::from_millis(committed_at + TTL)).unwrap();
    let f = flushes(plan.events());
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].reason, FlushReason::ColdCache);
    assert_eq!(f[0].cache_age_ms, Some(TTL));
    h.session.commit(plan, Timestamp::from_millis(committed_at + TTL), None).unwrap();
}

#[test]
fn flush_keeps_system_pinned_and_first_human_verbatim_and_lists_elided_output_as_restorable() {
    for format in [WireFormat::Anthropic, WireFormat::OpenAi] {
        let mut h = gate_session(format, false);
        let c0 = h.call().clone();
        // Bytes of the user's own words as first served.
        let verbatim: Vec<(u64, Arc<[u8]>)> = [0u64, 1, 3]
            .iter()
            .map(|&seq| (seq, c0.view[h.session.state().view_position(seq).unwrap()].clone()))
            .collect();
        assert!(h.prepare_extractive());
        let compacted = h.session.state().compacted();
        assert!(compacted > 7, "the span should reach the tool turns, got {compacted}");
        let c = h.call().clone();
        let f = flushes(&c.events);
        assert_eq!(f.len(), 1);
        let st = h.session.state();
        for (seq, bytes) in &verbatim {
            let pos = st.view_position(*seq).unwrap_or_else(|| panic!("{format:?}: seq {seq} left the view"));
            assert_eq!(&c.view[pos], bytes, "{format:?}: seq {seq} is not verbatim");
        }
        assert_eq!(st.view_position(0), Some(0), "the system message moved");
        // What the flush elided: the image message and every tool result in the span.
        let results: Vec<u64> = (0..compacted).filter(|&s| st.entry(s).unwrap().is_tool_result() || s == 5).collect();
        assert_eq!(f[0].stubbed, results, "{format:?}");
        let summary = c.view_text();
        assert!(summary.contains("Elided from this span, restorable by seq:"), "{format:?}");
        // Media one by one (what each image was), tool outputs in one line with their range.
        let outputs: Vec<u64> = results.iter().copied().filter(|&s| st.media_note(s).is_none()).collect();
        for seq in results.iter().filter(|s| st.media_note(**s).is_some()) {
            assert!(summary.contains(&format!("- seq {seq}: ")), "{format:?}: seq {seq} not listed");
        }
        let line = format!("- {} tool outputs (seq {}–{}: ", outputs.len(), outputs[0], outputs[outputs.len() - 1]);
        assert!(summary.contains(&line), "{format:?}: no `{line}` in {summary}");
        for seq in &results {
            assert!(!st.in_view(*seq));
        }
        assert!(st.view().iter().any(|it| matches!(it.item, Item::Summary(0))));
        // Restore one flushed tool result: it comes back with its call.
        let result = results[1];
        let call = result - 1;
        let restored = h.session.restore(result, "test", "need the file back").unwrap();
        let Event::Restored(r) = &restored.events[0] else { panic!() };
        assert_eq!(r.partners, vec![call], "{format:?}");
        let st = h.session.state();
        assert!(st.in_view(result) && st.in_view(call));
        let c = h.call().clone();
        assert!(c.view.contains(&render_item(h.session.state(), Item::Message(result))));
        assert!(c.view_text().contains("file 0\\n"), "{format:?}: the restored output is not in the view");
        let answered = h
            .session
            .messages(0..h.session.state().message_count())
            .unwrap()
            .iter()
            .flat_map(|m| m.result_ids().map(str::to_owned).collect::<Vec<_>>())
            .collect();
        assert!(rendered_pair_problems(&c.view, &answered).is_empty());
        h.assert_verified();
    }
}

#[test]
fn flush_keeps_a_pinned_tool_result_with_its_call_and_its_siblings() {
    // OpenAI answers parallel calls with one `tool` message each. Pinning one of them keeps it
    // (and its call) through the flush; its sibling must stay too, or the call is left in the
    // view without one of its results.
    let mut h = Harness::new(WireFormat::OpenAi, gate_config(false));
    let w = h.wire;
    h.append(vec![w.system("sys"), w.user("PROJECT PATH IS ~/Desktop/ora"), w.calls("", &["a", "b"], "read_file")]);
    h.append(vec![
        ctxlog_tests::engine_fixtures::msg(serde_json::json!({
            "role": "tool", "tool_call_id": "a", "content": "KEEP THIS", "pinned": true
        })),
        w.result("b", &"y".repeat(4_000)),
        w.assistant("read both"),
    ]);
    for i in 0..10 {
        append_turn(&mut h, i, 1_200);
    }
    h.call();
    assert!(h.prepare_extractive());
    assert!(h.session.state().compacted() > 5, "the span does not cover the parallel call");
    let c = h.call().clone();
    assert_eq!(flushes(&c.events).len(), 1);
    let answered = ["a", "b"].iter().map(|s| s.to_string()).chain((0..10).map(|i| format!("call{i}"))).collect();
    assert_eq!(rendered_pair_problems(&c.view, &answered), Vec::<String>::new());
    assert!(c.view_text().contains("KEEP THIS"));
    h.assert_verified();
}

// ---------------------------------------------------------------------------------------------
// Cache-aware everywhere: the ladder waits for a cold cache too, up to the hard limit, and a
// warm rewrite within the budget must free at least `clear_at_least` tokens.

/// Budget 10,000, trigger 0.8, target 0.5, no summarizer (only the ladder shrinks the view).
fn ladder_config(cache_aware: bool) -> Config {
    Config { summarizer: SummarizerKind::None, target_ratio: 0.5, ..gate_config(cache_aware) }
}

/// Appends turns of ~530 tokens until the view is at least `tokens`.
fn grow_to(h: &mut Harness, tokens: u64, next: &mut usize) {
    while h.session.state().view_tokens() < tokens {
        append_turn(h, *next, 2_000);
        *next += 1;
    }
}

fn ladder_session(config: Config) -> (Harness, usize) {
    let mut h = Harness::new(WireFormat::Anthropic, config);
    let w = h.wire;
    h.append(vec![w.system("You are a careful coding assistant."), w.user("PROJECT PATH IS ~/Desktop/ora")]);
    let mut next = 0;
    grow_to(&mut h, 2_000, &mut next);
    h.call();
    (h, next)
}

#[test]
fn warm_cache_holds_the_ladder_back_until_the_hard_limit() {
    // Given a cache-aware session over the trigger (8,000) but within the budget, when calls
    // come every 30 s (warm), then the ladder waits: no edit, the view is the previous one plus
    // the new turn, and the timeline says why; when the view passes the hard limit (the
    // budget in view version 2; in version 3 the budget less its 10 % margin for estimate
    // error, as no usage was reported), the ladder runs on that very call and the served view
    // fits it.
    for (view_version, limit, words) in [(2, 10_000, "10,000"), (3, 9_000, "9,000")] {
        let (mut h, mut next) = ladder_session(Config { view_version, ..ladder_config(true) });
        grow_to(&mut h, 8_100, &mut next);
        let mut deferred = 0;
        loop {
            let before = h.session.state().view_tokens();
            let c = h.call().clone();
            if before <= limit {
                assert!(c.edits().is_empty(), "call {}: the ladder ran on a warm cache at {before}", c.call);
                assert!(c.prefix_reused && c.bytes_appended_only, "call {}", c.call);
                let d = h.live_timeline.last().unwrap().deferred.clone().expect("deferral not recorded");
                assert_eq!(d.reason, "warm_cache");
                assert!(d.detail.contains("the ladder waits") && d.detail.contains(words), "{}", d.detail);
                deferred += 1;
                append_turn(&mut h, next, 2_000);
                next += 1;
            } else {
                assert!(!c.edits().is_empty(), "over the hard limit and nothing edited");
                assert!(c.view_tokens <= limit, "{}", c.view_tokens);
                assert!(h.live_timeline.last().unwrap().deferred.is_none());
                break;
            }
        }
        assert!(deferred >= 2, "{deferred}");
        h.assert_verified();
    }
}

#[test]
fn cold_cache_runs_the_ladder_that_a_warm_cache_deferred() {
    // Given the same view over the trigger, deferred once while warm, when the next call comes
    // after the TTL, then the ladder runs (the prefix is lost anyway) down to the target.
    let (mut h, mut next) = ladder_session(ladder_config(true));
    grow_to(&mut h, 8_100, &mut next);
    assert!(h.call().edits().is_empty());
    h.now += TTL;
    let c = h.call().clone();
    assert!(!c.edits().is_empty(), "cold cache and over the trigger: the ladder must run");
    assert!(c.view_tokens <= 5_000 + 600, "{}", c.view_tokens);
    assert!(h.live_timeline.last().unwrap().deferred.is_none());
    h.assert_verified();
}

#[test]
fn legacy_gate_runs_the_ladder_at_the_trigger_whatever_the_cache() {
    let (mut h, mut next) = ladder_session(ladder_config(false));
    grow_to(&mut h, 8_100, &mut next);
    let c = h.call().clone();
    assert!(!c.edits().is_empty());
    assert!(h.live_timeline.last().unwrap().deferred.is_none());
}

#[test]
fn hard_limit_between_trigger_and_budget_ends_the_deferral_earlier() {
    // --hard-limit 0.9: the warm deferral stops at 9,000 tokens.
    let (mut h, mut next) = ladder_session(Config { hard_limit_ratio: 0.9, ..ladder_config(true) });
    grow_to(&mut h, 8_100, &mut next);
    loop {
        let before = h.session.state().view_tokens();
        let c = h.call().clone();
        if before > 9_000 {
            assert!(before <= 10_000, "the turn jumped past the budget; resize the test: {before}");
            assert!(!c.edits().is_empty(), "over the hard limit of 9,000 at {before} and nothing edited");
            break;
        }
        assert!(c.edits().is_empty());
        append_turn(&mut h, next, 1_000);
        next += 1;
    }
    h.assert_verified();
}

#[test]
fn clear_at_least_refuses_a_warm_rewrite_that_frees_too_little_unless_over_the_budget() {
    // Given hard limit 0.85 (8,500) and clear_at_least 6,000: a view between 8,500 and the
    // budget would come down to the target (5,000), freeing fewer than 6,000 tokens, so the
    // warm rewrite is not made and the timeline says so. Once the view is over the budget (in
    // view version 3, over the budget less its margin: 9,000), the budget wins: the ladder runs
    // even though the cache is warm.
    for (view_version, ceiling) in [(2, 10_000), (3, 9_000)] {
        let config = Config { hard_limit_ratio: 0.85, clear_at_least: 6_000, view_version, ..ladder_config(true) };
        let (mut h, mut next) = ladder_session(config);
        grow_to(&mut h, 8_600, &mut next);
        let mut refused = 0;
        loop {
            let before = h.session.state().view_tokens();
            let c = h.call().clone();
            if before <= 8_500 {
                assert!(c.edits().is_empty());
            } else if before <= ceiling {
                assert!(c.edits().is_empty() && c.events.len() == 1, "call {}: {:?}", c.call, c.events);
                assert!(c.prefix_reused && c.bytes_appended_only);
                let d = h.live_timeline.last().unwrap().deferred.clone().expect("refusal not recorded");
                assert_eq!(d.reason, "clear_at_least");
                assert!(d.detail.contains("less than clear_at_least 6,000"), "{}", d.detail);
                refused += 1;
            } else {
                assert!(!c.edits().is_empty(), "over the budget at {before}: the budget wins");
                assert!(c.view_tokens <= ceiling);
                break;
            }
            append_turn(&mut h, next, 1_000);
            next += 1;
        }
        assert!(refused >= 1, "view version {view_version}");
    }
    // The same view with clear_at_least 3,000: the rewrite frees enough and is made.
    let config = Config { hard_limit_ratio: 0.85, clear_at_least: 3_000, ..ladder_config(true) };
    let (mut h, mut next) = ladder_session(config);
    grow_to(&mut h, 8_600, &mut next);
    let c = h.call().clone();
    assert!(!c.edits().is_empty(), "a rewrite freeing more than 3,000 tokens was refused");
}

#[test]
fn flush_keeps_the_tool_partners_of_every_message_it_keeps_verbatim() {
    // Found by the `transcript` fuzz target: a flush keeps system messages and the first human
    // message verbatim, but hid their tool partners, leaving a call without its result (the
    // commit was then refused with ToolPairs, and `ctxlog import` of that transcript failed).
    // Given a first human message that makes a call and a system message that makes another,
    let mut h = Harness::new(WireFormat::OpenAi, gate_config(false));
    let w = h.wire;
    let call = |role: &str, id: &str| {
        ctxlog_tests::engine_fixtures::msg(serde_json::json!({
            "role": role, "content": format!("{role} asks"),
            "tool_calls": [{"id": id, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]
        }))
    };
    h.append(vec![call("user", "u"), w.result("u", &"u".repeat(4_000)), call("system", "s")]);
    h.append(vec![w.result("s", &"s".repeat(4_000)), w.assistant("read both")]);
    for i in 0..10 {
        append_turn(&mut h, i, 1_200);
    }
    h.call();
    assert!(h.prepare_extractive());
    assert!(h.session.state().compacted() > 4, "the span does not cover both calls");
    // when the next call flushes the span,
    let c = h.call().clone();
    assert_eq!(flushes(&c.events).len(), 1);
    // then both calls keep their results in the view.
    let answered = ["u", "s"].iter().map(|s| s.to_string()).chain((0..10).map(|i| format!("call{i}"))).collect();
    assert_eq!(rendered_pair_problems(&c.view, &answered), Vec::<String>::new());
    h.assert_verified();
}
