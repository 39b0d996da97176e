//! Property tests over random sessions: human messages (some with an image), assistant tool
//! calls with 1–3 results of random sizes (sometimes served while still unanswered), random
//! time gaps, summaries prepared with the extractive summarizer, restores, and random
//! budgets/ratios with the cache-aware gate on or off. For every served view:
//! (a) a call that committed no `Flushed`/`Edited` (and followed no `Restored`) serves the
//!     previous view plus the new messages, byte for byte, and `prefix_reused` says exactly
//!     whether the bytes were reused;
//! (b) the rendered JSON has no orphan tool result and no answered call without its result;
//! (c) at the end `replay::verify` passes (snapshots taken at random points included), the
//!     replayed timeline equals the live one, and reopening the session gives the live state;
//! (d) the first human message, mostly longer than the stub minimum (so the ladder *could* stub
//!     it) and sometimes carrying an image, is in every served view verbatim and never edited.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::collections::BTreeSet;

use ctxlog::config::{Config, SummarizerKind};
use ctxlog::Timestamp;
use ctxlog::WireFormat;
use ctxlog_tests::engine_fixtures::{rendered_pair_problems, Harness};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Human { chars: usize, image: bool, pinned: bool },
    Tools { results: Vec<usize>, served_unanswered: bool, pin: Option<usize> },
    Call { gap_ms: u64, reported: Option<u32> },
    Prepare,
    Restore { pick: usize },
    Snapshot,
    System,
    Abandoned,
    Abort { gap_ms: u64 },
    LatePrepare,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (5usize..1_500, prop::bool::weighted(0.15), prop::bool::weighted(0.05))
            .prop_map(|(chars, image, pinned)| Op::Human { chars, image, pinned }),
        4 => (
            prop::collection::vec(10usize..6_000, 1..=3),
            prop::bool::weighted(0.2),
            prop::option::weighted(0.08, 0usize..3),
        )
            .prop_map(|(results, served_unanswered, pin)| Op::Tools { results, served_unanswered, pin }),
        4 => (prop_oneof![0u64..60_000, 60_000u64..900_000], prop::option::weighted(0.3, 0u32..30_000))
            .prop_map(|(gap_ms, reported)| Op::Call { gap_ms, reported }),
        1 => Just(Op::Prepare),
        1 => (0usize..1_000).prop_map(|pick| Op::Restore { pick }),
        1 => Just(Op::Snapshot),
        1 => Just(Op::System),
        1 => Just(Op::Abandoned),
        1 => (0u64..900_000).prop_map(|gap_ms| Op::Abort { gap_ms }),
        1 => Just(Op::LatePrepare),
    ]
}

fn knobs() -> impl Strategy<Value = Config> {
    (1_000u64..20_000, 0.3f64..0.95, 0.2f64..1.0, 0.1f64..1.0, 0.0f64..0.5, 0u32..5, any::<bool>(), 20u32..300)
        .prop_map(|(budget, trigger, target_frac, prepare_frac, pr, n, cache_aware, truncate)| Config {
            budget,
            trigger_ratio: trigger,
            target_ratio: (trigger * target_frac).max(0.05),
            prepare_ratio: (trigger * prepare_frac).max(0.05),
            summarizer: SummarizerKind::Extractive,
            cache_aware,
            flush_ttl_ms: 300_000,
            protected_tool_results: n,
            protected_recent_ratio: pr,
            truncate_chars: truncate,
            ..Config::default()
        })
}

struct Run {
    h: Harness,
    first_human: String,
    answered: BTreeSet<String>,
    restored_since_call: bool,
    next_id: usize,
}

impl Run {
    fn call(&mut self, reported: Option<u32>) {
        let restored = std::mem::take(&mut self.restored_since_call);
        let c = self.h.call_reported(reported.map(u64::from)).clone();
        // Over the budget only with an over_budget guard in force.
        let served = self.h.session.state();
        let metered = match c.events.last() {
            Some(ctxlog::Event::RequestServed(s)) => s.metered_tokens,
            _ => panic!("no RequestServed"),
        };
        if metered > self.h.session.config().budget {
            assert!(served.raised().contains(&ctxlog::event::GuardKind::OverBudget), "call {}", c.call);
        }
        // Unit consistency: every item (messages, edited messages, summaries) costs exactly a
        // fresh estimate of what it shows, and the view costs exactly their sum.
        let est = self.h.session.config().estimator();
        let mut sum = 0u64;
        for it in served.view() {
            let fresh = est.message(&ctxlog::internal::view::item_message(served, it.item).unwrap());
            assert_eq!(it.tokens, fresh, "call {}: item {:?}", c.call, it.item);
            sum += u64::from(fresh);
        }
        assert_eq!(sum, served.view_tokens(), "call {}", c.call);
        assert_eq!(sum, c.view_tokens, "call {}", c.call);
        // (d) the user's own instructions are served verbatim on every call, unless their floor
        // leaves no room within the budget: then truncated once to their head, never again.
        let first = served.entry(1).and_then(|e| e.edit).map(|e| e.kind);
        let shown = match first {
            None => self.first_human.as_str(),
            Some(ctxlog::event::EditKind::Truncated { keep_chars }) => {
                assert_eq!(keep_chars, self.h.session.config().first_message_keep_chars(), "call {}", c.call);
                self.first_human.get(..keep_chars as usize).unwrap_or(&self.first_human)
            }
            Some(other) => panic!("call {}: the first human message was edited: {other:?}", c.call),
        };
        assert!(c.view_text().contains(shown), "call {}: the first human message is not served", c.call);
        // (b) on the rendered JSON, not through the engine's own check.
        let problems = rendered_pair_problems(&c.view, &self.answered);
        assert!(problems.is_empty(), "call {}: {problems:?}", c.call);
        // (a) the cache contract.
        if c.call > 0 {
            if !c.rewrote() && !restored {
                assert!(c.bytes_appended_only, "call {}: the prefix changed without a flush or edit", c.call);
                assert!(c.prefix_reused, "call {}: bytes reused but prefix_reused is false", c.call);
                let prev = &self.h.calls[self.h.calls.len() - 2];
                assert_eq!(c.view.len(), prev.view.len() + c.new_messages as usize, "call {}", c.call);
            }
            if c.prefix_reused {
                assert!(c.bytes_appended_only, "call {}: prefix_reused claimed but the bytes changed", c.call);
            }
            if !c.bytes_appended_only {
                assert!(!c.prefix_reused, "call {}", c.call);
            }
        }
    }

    fn apply(&mut self, op: &Op) {
        let w = self.h.wire;
        match op {
            Op::Human { chars, image, pinned } => {
                let text: String = "human words ".chars().cycle().take(*chars).collect();
                let m = match (image, pinned) {
                    (true, _) => w.user_with_image(&[&text]),
                    (false, true) => w.pinned_user(&text),
                    (false, false) => w.user(&text),
                };
                self.h.append(vec![m]);
            }
            Op::Tools { results, served_unanswered, pin } => {
                let ids: Vec<String> = (0..results.len()).map(|i| format!("id{}_{i}", self.next_id)).collect();
                self.next_id += 1;
                let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                self.h.append(vec![w.calls("let me look", &refs, "read_file")]);
                if *served_unanswered {
                    self.call(None);
                }
                let outputs: Vec<String> =
                    results.iter().map(|n| "output line\n".chars().cycle().take(*n).collect()).collect();
                let mut msgs = match w.0 {
                    WireFormat::Anthropic => {
                        let blocks: Vec<serde_json::Value> = ids
                            .iter()
                            .zip(&outputs)
                            .map(|(id, o)| {
                                if o.len() % 5 == 0 {
                                    // Some results carry a screenshot next to their text.
                                    let image = serde_json::json!({"type": "image", "source": {
                                        "type": "base64", "media_type": "image/png",
                                        "data": ctxlog_tests::engine_fixtures::PNG_1X1}});
                                    let content = serde_json::json!([{"type": "text", "text": o}, image]);
                                    serde_json::json!({"type": "tool_result", "tool_use_id": id, "content": content})
                                } else {
                                    serde_json::json!({"type": "tool_result", "tool_use_id": id, "content": o})
                                }
                            })
                            .collect();
                        vec![ctxlog_tests::engine_fixtures::msg(serde_json::json!({"role": "user", "content": blocks}))]
                    }
                    WireFormat::OpenAi | WireFormat::OpenAiResponses | WireFormat::Gemini => {
                        ids.iter().zip(&outputs).map(|(id, o)| w.result(id, o)).collect()
                    }
                };
                if let Some(k) = pin {
                    // Pin one result message (meta field `pinned`, both formats).
                    let i = k % msgs.len();
                    msgs[i].meta.pinned = Some(true);
                }
                self.h.append(msgs);
                self.answered.extend(ids);
                self.h.append(vec![w.assistant("done")]);
            }
            Op::Call { gap_ms, reported } => {
                self.h.now += gap_ms;
                self.call(*reported);
            }
            Op::Prepare => {
                self.h.prepare_extractive();
            }
            Op::Snapshot => self.h.session.snapshot().unwrap(),
            Op::LatePrepare => {
                // The host runs the summarizer while a call is served: the summary comes back
                // after the call, perhaps stale. It is written or discarded, never an error.
                if let Some(job) = self.h.session.summary_job() {
                    let text = self.h.session.summarize(&job).unwrap();
                    self.call(None);
                    let produced = ctxlog::session::Produced::extractive();
                    match self.h.session.prepare(&job, text, produced).unwrap() {
                        // A message job moves the watermark to its end; a condense job (a summary
                        // of earlier summaries) moves none, and its span ends at or before it.
                        ctxlog::session::Prepared::Written(_) if !job.is_condense() => {
                            assert_eq!(self.h.session.state().compacted(), job.to);
                        }
                        ctxlog::session::Prepared::Written(_) => {
                            assert!(self.h.session.state().compacted() >= job.to);
                        }
                        ctxlog::session::Prepared::Discarded(why) => assert!(!why.is_empty()),
                    }
                }
            }
            Op::Abandoned => {
                // A call that is never answered (the host gave up on it).
                let id = format!("lost{}", self.next_id);
                self.next_id += 1;
                self.h.append(vec![w.calls("trying", &[&id], "flaky_tool")]);
            }
            Op::Abort { gap_ms } => {
                // A planned call whose dispatch failed: nothing is written, nothing changes.
                let before = self.h.log_bytes();
                let state = self.h.session.state().clone();
                let plan = self.h.session.plan(Timestamp::from_millis(self.h.now + gap_ms)).unwrap();
                self.h.session.abort(plan);
                assert_eq!(self.h.log_bytes(), before);
                assert_eq!(self.h.session.state(), &state);
            }
            Op::System => self.h.append(vec![w.system("Mid-session system note: keep answers short.")]),
            Op::Restore { pick } => {
                let st = self.h.session.state();
                let candidates: Vec<u64> = (0..st.message_count())
                    .filter(|&s| st.entry(s).is_some_and(|e| e.edit.is_some()) || st.hidden_by_flush(s))
                    .collect();
                if let Some(&seq) = candidates.get(pick % candidates.len().max(1)) {
                    self.h.session.restore(seq, "proptest", "random restore").unwrap();
                    self.restored_since_call = true;
                }
            }
        }
        let st = self.h.session.state();
        assert!(st.flushed() <= st.compacted() && st.compacted() <= st.message_count());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_sessions_keep_the_cache_contract_tool_pairs_and_replay(
        config in knobs(),
        openai in any::<bool>(),
        ops in prop::collection::vec(op(), 1..45),
        first_chars in prop_oneof![1 => 30usize..ctxlog::internal::view::STUB_MIN_CHARS, 4 => ctxlog::internal::view::STUB_MIN_CHARS..2_000],
        first_image in prop::bool::weighted(0.2),
    ) {
        let format = if openai { WireFormat::OpenAi } else { WireFormat::Anthropic };
        let mut h = Harness::new(format, config);
        let w = h.wire;
        let first_human: String =
            "PROJECT PATH IS ~/Desktop/ora.".chars().chain(" human words".chars().cycle()).take(first_chars).collect();
        let first = if first_image { w.user_with_image(&[&first_human]) } else { w.user(&first_human) };
        h.append(vec![w.system("You are a careful assistant."), first]);
        let mut run = Run { h, first_human, answered: BTreeSet::new(), restored_since_call: false, next_id: 0 };
        for op in &ops {
            run.apply(op);
        }
        run.call(None);
        // The first human message is never removed or stubbed (at most truncated once, above).
        let st = run.h.session.state();
        let at_most_truncated = st.entry(1).unwrap().edit.is_none_or(|e| matches!(e.kind, ctxlog::event::EditKind::Truncated { .. }));
        prop_assert!(at_most_truncated);
        // (c) verify and replay; reopening (snapshot + tail) gives the live state.
        run.h.assert_verified();
        let reopened = ctxlog::Session::open(std::sync::Arc::clone(&run.h.store), run.h.session.id()).unwrap();
        prop_assert_eq!(reopened.state(), run.h.session.state());
    }
}
