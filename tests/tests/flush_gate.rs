//! The flush gate (research/virtual_context.md §2.2 and the gate tests of §5.1, in our terms),
//! as a data-driven table, plus the spec tests the peers never wrote: prepare does not change
//! the view, an aborted flush writes nothing, warmth is measured from the commit time, and a
//! flush keeps the user's own words verbatim and lists what it elided as restorable.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::sync::Arc;

use ctxlog::config::{Config, SummarizerKind};
use ctxlog::event::{Event, FlushReason, Flushed};
use ctxlog::state::Item;
use ctxlog::view::render_item;
use ctxlog::{Store, WireFormat};
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
    over_trigger: bool,
    expect: Option<FlushReason>,
}

const CASES: &[Case] = &[
    Case {
        name: "legacy + pending",
        cache_aware: false,
        age_ms: Some(WARM),
        pending: true,
        over_trigger: false,
        expect: Some(FlushReason::LegacyImmediate),
    },
    Case {
        name: "legacy + pending, never served",
        cache_aware: false,
        age_ms: None,
        pending: true,
        over_trigger: false,
        expect: Some(FlushReason::LegacyImmediate),
    },
    Case {
        name: "legacy + nothing pending",
        cache_aware: false,
        age_ms: Some(WARM),
        pending: false,
        over_trigger: false,
        expect: None,
    },
    Case {
        name: "cache-aware cold (age = ttl) + pending",
        cache_aware: true,
        age_ms: Some(TTL),
        pending: true,
        over_trigger: false,
        expect: Some(FlushReason::ColdCache),
    },
    Case {
        name: "cache-aware cold (age > ttl) + pending",
        cache_aware: true,
        age_ms: Some(2 * TTL),
        pending: true,
        over_trigger: false,
        expect: Some(FlushReason::ColdCache),
    },
    Case {
        name: "cache-aware never served + pending",
        cache_aware: true,
        age_ms: None,
        pending: true,
        over_trigger: false,
        expect: Some(FlushReason::ColdCache),
    },
    Case {
        name: "cache-aware warm (age = ttl - 1) + pending + under trigger",
        cache_aware: true,
        age_ms: Some(TTL - 1),
        pending: true,
        over_trigger: false,
        expect: None,
    },
    Case {
        name: "cache-aware warm + pending + under trigger",
        cache_aware: true,
        age_ms: Some(WARM),
        pending: true,
        over_trigger: false,
        expect: None,
    },
    Case {
        name: "cache-aware warm + pending + over trigger",
        cache_aware: true,
        age_ms: Some(WARM),
        pending: true,
        over_trigger: true,
        expect: Some(FlushReason::SizeThreshold),
    },
    Case {
        name: "cache-aware warm + nothing pending",
        cache_aware: true,
        age_ms: Some(WARM),
        pending: false,
        over_trigger: false,
        expect: None,
    },
    Case {
        name: "cache-aware cold + nothing pending",
        cache_aware: true,
        age_ms: Some(2 * TTL),
        pending: false,
        over_trigger: false,
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
            if case.over_trigger {
                // One more turn with a 32,000-char result puts the view over 8,000 tokens.
                append_turn(&mut h, 99, 32_000);
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
                    if let (Some(prev), false) = (&served, case.over_trigger) {
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
        let before = h.session.plan(h.now).unwrap();
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
            let after = h.session.plan(h.now).unwrap();
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
    let plan = h.session.plan(h.now).unwrap();
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
    let plan = h.session.plan(T0).unwrap();
    let committed_at = T0 + 200_000;
    h.session.commit(plan, committed_at, None).unwrap();
    assert_eq!(h.session.state().last_request_at(), Some(committed_at));
    assert!(h.prepare_extractive());
    // One ttl after the *plan* but only 100 s after the commit: still warm.
    let plan = h.session.plan(T0 + TTL + 1).unwrap();
    assert!(flushes(plan.events()).is_empty(), "measured warmth from the plan time");
    h.session.abort(plan);
    // One ttl after the commit: cold.
    let plan = h.session.plan(committed_at + TTL).unwrap();
    let f = flushes(plan.events());
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].reason, FlushReason::ColdCache);
    assert_eq!(f[0].cache_age_ms, Some(TTL));
    h.session.commit(plan, committed_at + TTL, None).unwrap();
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
        let results: Vec<u64> =
            (0..compacted).filter(|&s| st.entry(s).unwrap().message.is_tool_result() || s == 5).collect();
        assert_eq!(f[0].stubbed, results, "{format:?}");
        let summary = c.view_text();
        assert!(summary.contains("Elided from this span, restorable by seq:"), "{format:?}");
        for seq in &results {
            assert!(summary.contains(&format!("- seq {seq}: ")), "{format:?}: seq {seq} not listed");
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
        let answered = (0..h.session.state().message_count())
            .flat_map(|s| {
                h.session.state().entry(s).unwrap().message.result_ids().map(str::to_owned).collect::<Vec<_>>()
            })
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
