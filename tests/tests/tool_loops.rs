//! Autonomous tool loops (issue 21): one instruction, then thousands of tool calls and results.
//! On the defaults and with `--cache-aware`, in both wire formats, every call is checked, not
//! sampled:
//! - not over the budget (by the meter the engine served with);
//! - the first user message is in the view;
//! - every hidden message is represented, read from the *rendered* view: each seq is shown,
//!   or inside the range a summary (`<ctxlog-summary seq="A-B">`) or a placeholder
//!   (`[ctxlog: … (seq F–L) …]`) names;
//! - the request body passes the strict fake's rules (tool pairs, roles, empty content);
//! - the timeline says so too (`hidden == represented`);
//!
//! and at the end: at least one summary per 2,000 messages, `verify` clean, the replayed
//! timeline equal to the live one. Plus restores that hold, the meter across a history change,
//! a first message over the budget, and a property test over random loops and knobs. The
//! 20,000- and 100,000-message runs are the soak benchmark's (`soak --shape tool-loop`, release
//! build: the same checks per call; an ignored test here would check nothing).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::collections::BTreeSet;
use std::sync::Arc;

use ctxlog::config::Config;
use ctxlog::event::{EditKind, Event};
use ctxlog::replay::{self, CallRecord, Timeline};
use ctxlog::session::{Prepared, Produced};
use ctxlog::state::Item;
use ctxlog::{MemoryStore, Message, RequestOptions, Session, StreamId, Timestamp, Usage, WireFormat};
use ctxlog_fake_upstream::strict::Strictness;
use ctxlog_tests::engine_fixtures::{msg, T0};
use proptest::prelude::*;
use serde_json::{json, Value};

/// The facts planted in the loop's first results, and the words that state each one.
const FACTS: [(&str, &str); 4] = [
    ("a path", "crates/ledger/src/settle.rs"),
    ("a decision", "keep-the-u128-accumulator"),
    ("a number", "48213"),
    ("an error", "E0502"),
];

/// A small deterministic PRNG (xorshift), so the loops are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const TOOLS: [&str; 5] = ["read_file", "grep", "edit_file", "run_tests", "list_dir"];

/// A single-human session of exactly `messages` messages: a system prompt, one instruction,
/// then assistant tool calls each answered by one result (sizes from 100 to 12,000 characters,
/// heavy-tailed; one in 15 an error), the planted facts in the first results.
fn tool_loop(format: WireFormat, seed: u64, messages: usize) -> Vec<Message> {
    let mut rng = Rng(seed | 1);
    let mut out = vec![
        msg(json!({"role": "system", "content": "You are a coding agent. ".repeat(40)})),
        msg(
            json!({"role": "user", "content": "Port all modules of the ledger crate to the new API, one by one, and run the tests after each."}),
        ),
    ];
    let mut i = 0usize;
    while out.len() + 2 <= messages {
        let tool = TOOLS[rng.below(TOOLS.len() as u64) as usize];
        let path = format!("crates/ledger/src/mod_{i}.rs");
        let id = format!("call_{seed}_{i}");
        let size = match rng.below(100) {
            0..=59 => 100 + rng.below(900),
            60..=89 => 1_000 + rng.below(3_000),
            _ => 4_000 + rng.below(8_000),
        } as usize;
        let error = rng.below(15) == 0;
        let mut body = match FACTS.get(i) {
            Some((_, fact)) => format!("note: {fact}\n"),
            None if error => format!("error: cannot read {path}: permission denied\n"),
            None => format!("// {path}\n"),
        };
        while body.len() < size {
            body.push_str("fn item() -> u64 { 42 } // filler line of the module body\n");
        }
        let args = json!({"path": path}).to_string();
        match format {
            WireFormat::Anthropic => {
                out.push(msg(json!({"role": "assistant", "content": [
                    {"type": "text", "text": format!("Step {i}: {tool} on {path}.")},
                    {"type": "tool_use", "id": id, "name": tool, "input": {"path": path}}]})));
                out.push(msg(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": body, "is_error": error}]})));
            }
            _ => {
                out.push(msg(json!({"role": "assistant", "content": format!("Step {i}: {tool} on {path}."),
                    "tool_calls": [{"id": id, "type": "function", "function": {"name": tool, "arguments": args}}]})));
                out.push(msg(json!({"role": "tool", "tool_call_id": id, "content": body})));
            }
        }
        i += 1;
    }
    while out.len() < messages {
        out.push(msg(json!({"role": "assistant", "content": "All modules are ported; the tests pass."})));
    }
    out
}

/// What one run saw.
struct Run {
    store: Arc<MemoryStore>,
    session: Session<Arc<MemoryStore>>,
    live: Vec<CallRecord>,
    calls: u64,
    summaries: usize,
    /// Calls whose view states each planted fact after the fact's message left the view.
    facts_kept: Vec<(u64, u64)>,
}

/// Seq ranges (inclusive) a rendered view names: summaries' `seq="A-B"`, placeholders'
/// `(seq F–L)` / `(seq F)`.
fn named_ranges(view: &[Arc<[u8]>]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for bytes in view {
        let v: Value = serde_json::from_slice(bytes).unwrap();
        let text = match v.get("content") {
            Some(Value::String(s)) => s.clone(),
            _ => continue,
        };
        if let Some(rest) = text.strip_prefix("<ctxlog-summary seq=\"") {
            let (range, _) = rest.split_once('"').unwrap();
            let (a, b) = range.split_once('-').unwrap();
            out.push((a.parse().unwrap(), b.parse().unwrap()));
        } else if let Some(rest) = text.strip_prefix("[ctxlog: ") {
            let (_, after) = rest.split_once("(seq ").unwrap();
            let (range, _) = after.split_once(')').unwrap();
            match range.split_once('–') {
                Some((a, b)) => out.push((a.parse().unwrap(), b.parse().unwrap())),
                None => out.push((range.parse().unwrap(), range.parse().unwrap())),
            }
        }
    }
    out
}

/// The checks every call must pass (see the module doc).
fn check_call(session: &Session<Arc<MemoryStore>>, view: &[Arc<[u8]>], body: &[u8], rec: &CallRecord, config: &Config) {
    let st = session.state();
    let call = rec.call;
    assert_eq!(st.last_served().map(|s| s.view_tokens), Some(rec.view_tokens), "call {call}");
    assert!(
        rec.view_tokens <= config.budget,
        "call {call}: {} tokens over the budget {}",
        rec.view_tokens,
        config.budget
    );
    let first = st.first_human().unwrap();
    assert!(st.in_view(first), "call {call}: the first user message left the view");
    // Every hidden message is represented, by the rendered bytes alone.
    let shown: BTreeSet<u64> = st
        .view()
        .iter()
        .filter_map(|it| match it.item {
            Item::Message(seq) => Some(seq),
            _ => None,
        })
        .collect();
    let ranges = named_ranges(view);
    let end = st.view().last().map_or(0, |it| st.item_end(it));
    for seq in 0..end {
        if !shown.contains(&seq) {
            assert!(
                ranges.iter().any(|&(a, b)| a <= seq && seq <= b),
                "call {call}: seq {seq} is hidden and nothing in the view names it (ranges {ranges:?})"
            );
        }
    }
    assert_eq!(rec.hidden, rec.represented, "call {call}: the timeline counts unrepresented messages");
    // The strict fake accepts the request.
    let v: Value = serde_json::from_slice(body).unwrap();
    let strict = Strictness { context_tokens: Some(10_000_000), ..Strictness::default() };
    let verdict = match session.format() {
        WireFormat::Anthropic => strict.anthropic(&v, 1),
        _ => strict.openai(&v, 1),
    };
    if let Err(r) = verdict {
        panic!("call {call}: the strict fake refuses the request: {}", r.message);
    }
}

/// Drives `lines` through a session as `ctxlog import` does (each assistant line is a call
/// planned from everything before it), the built-in summarizer answering every job between
/// calls, `reported(call, estimate, bytes)` giving the provider's count of a view of `bytes`
/// bytes of messages, checking every call.
fn drive(
    format: WireFormat,
    lines: &[Message],
    config: Config,
    reported: &dyn Fn(u64, u64, u64) -> Option<u64>,
) -> Run {
    let store = Arc::new(MemoryStore::new());
    let mut session =
        Session::create(Arc::clone(&store), StreamId::random(), format, config.clone(), Timestamp::from_millis(T0))
            .unwrap();
    let mut now = T0;
    let mut timeline = Timeline::new();
    let mut live = Vec::new();
    let mut pending = Vec::new();
    let mut summaries = 0usize;
    let opts = RequestOptions::new().model("model").max_tokens(1_024);
    let mut facts_left: Vec<Option<u64>> = vec![None; FACTS.len()];
    let mut facts_kept = vec![(0u64, 0u64); FACTS.len()];
    for m in lines {
        if m.role == ctxlog::message::Role::Assistant && !pending.is_empty() {
            session.append(std::mem::take(&mut pending)).unwrap();
            now += 20_000;
            let plan = session.plan(Timestamp::from_millis(now)).unwrap();
            let view = session.plan_view(&plan);
            let request = session.request(&plan, &opts).unwrap();
            let body = request.body().to_vec();
            let estimate = plan.view_tokens;
            let bytes = view.iter().map(|b| b.len() as u64).sum();
            let usage = reported(plan.call(), estimate, bytes).map(Usage::prompt);
            let committed = session.commit(plan, Timestamp::from_millis(now), usage).unwrap();
            for ev in &committed.events {
                if let Some(rec) = timeline.feed(committed.version, ev, session.state()) {
                    live.push(rec);
                }
            }
            let rec = live.last().unwrap().clone();
            check_call(&session, &view, &body, &rec, &config);
            // Planted facts: once their message left the view, is each still stated in it?
            let text: String = view.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect();
            for (k, (_, fact)) in FACTS.iter().enumerate() {
                let seq = 3 + 2 * k as u64;
                if !session.state().in_view(seq) {
                    facts_left[k].get_or_insert(rec.call);
                    facts_kept[k].1 += 1;
                    if text.contains(fact) {
                        facts_kept[k].0 += 1;
                    }
                }
            }
            while let Some(job) = session.summary_job() {
                let text = session.summarize(&job).unwrap();
                match session.prepare(&job, text, Produced::extractive()).unwrap() {
                    Prepared::Written(_) => summaries += 1,
                    Prepared::Discarded(_) => break,
                }
            }
        }
        pending.push(m.clone());
    }
    let calls = live.len() as u64;
    Run { store, session, live, calls, summaries, facts_kept }
}

fn defaults(budget: u64) -> Config {
    Config { budget, ..Config::default() }
}

fn cache_aware(budget: u64) -> Config {
    Config { budget, cache_aware: true, ..Config::default() }
}

/// The end-of-run checks: summaries as the session goes, `verify`, replay = live.
fn check_run(run: &Run, messages: usize) {
    let min = (messages / 2_000).max(1);
    assert!(run.summaries >= min, "{} summaries for {messages} messages (want ≥ {min})", run.summaries);
    let report = replay::verify(run.store.as_ref(), run.session.id()).unwrap();
    assert!(report.ok(), "verify: {:?}", report.problems);
    assert_eq!(report.calls, run.calls);
    let replayed = replay::replay(run.store.as_ref(), run.session.id(), replay::Mode::Strict, None).unwrap().timeline;
    assert_eq!(replayed, run.live, "the replayed timeline differs from the live one");
}

fn no_usage(_: u64, _: u64, _: u64) -> Option<u64> {
    None
}

/// One single-human loop of 2,000 messages, checked on every call and at the end.
fn loop_of_2000(format: WireFormat, config: Config) {
    let lines = tool_loop(format, 7, 2_000);
    let run = drive(format, &lines, config.clone(), &no_usage);
    check_run(&run, 2_000);
    // Tool work is summarized, not only removed: summaries stand for most of the history.
    let last = run.live.last().unwrap();
    assert!(last.flushed > 1_000, "{format:?} cache_aware={}: flushed only {}", config.cache_aware, last.flushed);
}

#[test]
fn a_single_human_anthropic_loop_of_2000_messages_on_the_defaults() {
    loop_of_2000(WireFormat::Anthropic, defaults(30_000));
}

#[test]
fn a_single_human_anthropic_loop_of_2000_messages_cache_aware() {
    loop_of_2000(WireFormat::Anthropic, cache_aware(30_000));
}

#[test]
fn a_single_human_openai_loop_of_2000_messages_on_the_defaults() {
    loop_of_2000(WireFormat::OpenAi, defaults(30_000));
}

#[test]
fn a_single_human_openai_loop_of_2000_messages_cache_aware() {
    loop_of_2000(WireFormat::OpenAi, cache_aware(30_000));
}

#[test]
fn an_extractive_summary_of_tool_work_says_what_was_done_and_found() {
    let lines = tool_loop(WireFormat::Anthropic, 3, 400);
    let run = drive(WireFormat::Anthropic, &lines, defaults(30_000), &no_usage);
    // The summaries as written (the state forgets the text of condensed ones; the log keeps it).
    let mut prepared: Vec<ctxlog::event::SummaryPrepared> = Vec::new();
    replay::for_each_event(run.store.as_ref(), run.session.id(), 1, None, |_, e| {
        if let Event::SummaryPrepared(p) = e {
            if p.merged.is_empty() {
                prepared.push(p);
            }
        }
        Ok(())
    })
    .unwrap();
    let first = prepared.first().expect("a summary");
    // The call's line carries its outcome: the tool, its argument, the size and the first line.
    assert!(first.text.contains("{\"path\":\"crates/ledger/src/mod_0.rs\"} → "), "{}", first.text);
    assert!(first.text.contains("chars: note: crates/ledger/src/settle.rs"), "{}", first.text);
    // One line per exchange, not per message.
    let lines_per_pair = first.text.lines().count() as f64 / ((first.to - first.from) as f64 / 2.0);
    assert!(lines_per_pair < 1.2, "{lines_per_pair:.2} lines per tool exchange:\n{}", first.text);
    // Errors say so.
    assert!(prepared.iter().any(|s| s.text.contains("(error): error: cannot read")));
}

#[test]
fn planted_facts_are_still_stated_in_the_view_after_their_messages_left_it() {
    let lines = tool_loop(WireFormat::Anthropic, 5, 2_000);
    let run = drive(WireFormat::Anthropic, &lines, defaults(30_000), &no_usage);
    for ((what, fact), (kept, out)) in FACTS.iter().zip(&run.facts_kept) {
        eprintln!("{what} ({fact}): stated on {kept} of {out} calls after it left the view");
        assert!(*out > 0, "{what} ({fact}) never left the view");
        // Stated in the view on at least 80% of the calls after it left (the goal):
        // summaries, then condensed summaries that keep tool work from both ends.
        assert!(*kept * 5 >= *out * 4, "{what} ({fact}) stated on {kept} of {out} calls after it left the view");
    }
}

#[test]
fn the_same_hidden_set_renders_the_same_placeholder_bytes() {
    // Without summaries the ladder removes old pairs: placeholders stand where they were, and a
    // call that changes nothing serves the same bytes (the prompt cache holds).
    let config = Config { summarizer: ctxlog::config::SummarizerKind::None, ..defaults(20_000) };
    let lines = tool_loop(WireFormat::Anthropic, 9, 600);
    let run = drive(WireFormat::Anthropic, &lines, config, &no_usage);
    let st = run.session.state();
    let placeholders: Vec<_> = st.view().iter().filter(|it| matches!(it.item, Item::Placeholder { .. })).collect();
    assert!(!placeholders.is_empty(), "no placeholder in the view");
    let a = ctxlog::internal::view::digest_of(st);
    let b = ctxlog::internal::view::digest_of(&st.clone());
    assert_eq!(a, b);
    // Its text is documented (docs/log-format.md, "Placeholders").
    let Item::Placeholder { from, to } = placeholders[0].item else { unreachable!() };
    let text = ctxlog::internal::placeholder::text(st, from, to);
    assert!(text.starts_with("[ctxlog: "), "{text}");
    assert!(text.contains(&format!("(seq {from}–{})", to - 1)), "{text}");
    assert!(text.ends_with(&format!("— restore with ctxlog restore --seq N, N in {from}–{}]", to - 1)), "{text}");
    // Prefix reuse holds between rewrites.
    assert!(run.live.iter().filter(|r| r.prefix_reused).count() * 2 > run.live.len());
}

#[test]
fn a_restored_message_stays_for_the_documented_number_of_calls() {
    let config = Config { summarizer: ctxlog::config::SummarizerKind::None, ..defaults(20_000) };
    let lines = tool_loop(WireFormat::Anthropic, 13, 300);
    let mut run = drive(WireFormat::Anthropic, &lines, config.clone(), &no_usage);
    // The biggest truncated or removed tool result comes back.
    let st = run.session.state();
    let seq = (0..st.message_count())
        .filter(|&s| st.entry(s).unwrap().is_tool_result() && st.entry(s).unwrap().edit.is_some())
        .max_by_key(|&s| st.entry(s).unwrap().tokens)
        .unwrap();
    run.session.restore(seq, "test", "look again").unwrap();
    let more = tool_loop(WireFormat::Anthropic, 14, 200);
    let mut now = T0 + 100_000_000;
    let hold = ctxlog::state::RESTORE_HOLD_CALLS;
    for (k, pair) in more[2..].chunks(2).enumerate().take(hold as usize + 12) {
        run.session.append(pair.to_vec()).unwrap();
        now += 20_000;
        let plan = run.session.plan(Timestamp::from_millis(now)).unwrap();
        run.session.commit(plan, Timestamp::from_millis(now), None).unwrap();
        let e = run.session.state().entry(seq).unwrap();
        if (k as u64) + 1 < hold {
            assert!(e.edit.is_none(), "call {k} after the restore edited seq {seq} again: {:?}", e.edit);
        }
    }
    // After the hold the ladder may take it again (the log says so).
    let e = run.session.state().entry(seq).unwrap();
    assert!(e.edit.is_some(), "after the hold the restored message is still never edited");
}

#[test]
fn the_meter_keeps_the_providers_rate_across_a_history_change() {
    // The provider counts 30% more than the estimate. After a flush or an edit the old anchor is
    // void; the meter still counts at the provider's rate, so no call goes over the budget by the
    // provider's count.
    let lines = tool_loop(WireFormat::Anthropic, 17, 1_200);
    let rate = |_: u64, estimate: u64, _: u64| Some(estimate * 13 / 10);
    let config = defaults(30_000);
    let run = drive(WireFormat::Anthropic, &lines, config.clone(), &rate);
    let rewrites = run.live.iter().filter(|r| r.flush.is_some() || !r.edits.is_empty()).count();
    assert!(rewrites > 5);
    for r in &run.live {
        let provider = r.view_tokens * 13 / 10;
        assert!(
            provider <= config.budget,
            "call {}: {provider} by the provider's count over {}",
            r.call,
            config.budget
        );
    }
}

#[test]
fn a_first_message_over_the_budget_is_truncated_once_and_the_latest_answer_stays() {
    for format in [WireFormat::Anthropic, WireFormat::OpenAi] {
        let mut lines = tool_loop(format, 19, 200);
        let huge = format!("Port this spec: {}", "the ledger settles in u128; ".repeat(5_000));
        lines[1] = msg(json!({"role": "user", "content": huge}));
        let run = drive(format, &lines, defaults(30_000), &no_usage);
        let st = run.session.state();
        let first = st.first_human().unwrap();
        let edits: Vec<_> = run
            .live
            .iter()
            .flat_map(|r| r.edits.iter().filter(|e| e.seq == first).map(move |e| (r.call, e.kind)))
            .collect();
        assert_eq!(edits.len(), 1, "{format:?}: the first message was edited {edits:?}");
        assert_eq!(edits[0].1, "truncated");
        assert!(matches!(st.entry(first).unwrap().edit.unwrap().kind, EditKind::Truncated { .. }));
        assert!(st.in_view(first));
        // The latest answer (the last assistant message before each call) is in every view after.
        let last_assistant =
            (0..st.message_count()).rev().find(|&s| st.entry(s).unwrap().role() == ctxlog::message::Role::Assistant);
        assert!(st.in_view(last_assistant.unwrap()));
        // The head of the instruction stays, and the view says it was cut.
        let shown = st.shown(first).unwrap().plain_text();
        assert!(shown.starts_with("Port this spec: the ledger settles in u128"));
        assert!(shown.contains("[ctxlog: this message was cut to its first"));
    }
}

#[test]
fn a_first_message_edit_is_refused_unless_it_is_the_one_truncation_of_an_oversized_message() {
    // The fold still rejects any other edit of the first human message, live and on replay.
    let store = Arc::new(MemoryStore::new());
    let mut s = Session::create(
        Arc::clone(&store),
        StreamId::random(),
        WireFormat::Anthropic,
        defaults(30_000),
        Timestamp::from_millis(T0),
    )
    .unwrap();
    s.append(vec![msg(json!({"role": "user", "content": "short instruction"}))]).unwrap();
    let st = s.state().clone();
    let reason = ctxlog::event::EditReason { level: 8, rule: "t".into(), target_tokens: 1, guard: None };
    for kind in [EditKind::Truncated { keep_chars: 10 }, EditKind::Stubbed { preview_chars: 50 }, EditKind::Removed] {
        let ev = Event::Edited(ctxlog::event::Edited { seq: 0, kind, reason: reason.clone() });
        let err = st.check_event(st.version() + 1, &ev).unwrap_err();
        assert_eq!(err.invariant, ctxlog::state::Invariant::EditProtected, "{kind:?}");
    }
}

fn knobs() -> impl Strategy<Value = (Config, WireFormat, u64, usize)> {
    (
        8_000u64..40_000,
        0.75f64..0.95,
        0.3f64..0.7,
        any::<bool>(),
        0u32..8,
        0.0f64..0.5,
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
        100usize..700,
    )
        .prop_map(|(budget, trigger, target, cache_aware, tools, recent, openai, summaries, seed, n)| {
            let config = Config {
                budget,
                trigger_ratio: trigger,
                target_ratio: target.min(trigger),
                prepare_ratio: trigger.min(0.7),
                cache_aware,
                protected_tool_results: tools,
                protected_recent_ratio: recent,
                summarizer: if summaries {
                    ctxlog::config::SummarizerKind::Extractive
                } else {
                    ctxlog::config::SummarizerKind::None
                },
                ..Config::default()
            };
            (config, if openai { WireFormat::OpenAi } else { WireFormat::Anthropic }, seed, n)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// For random loops and knobs, every hidden message is represented at every call.
    #[test]
    fn hidden_messages_are_always_represented((config, format, seed, n) in knobs()) {
        let lines = tool_loop(format, seed, n);
        let run = drive_lenient(format, &lines, config);
        for r in &run {
            prop_assert_eq!(r.hidden, r.represented, "call {}", r.call);
        }
    }
}

/// Like [`drive`], checking only representation (random knobs may put a view over the budget
/// when its floor is: that is the long-session tests' concern).
fn drive_lenient(format: WireFormat, lines: &[Message], config: Config) -> Vec<CallRecord> {
    let store = Arc::new(MemoryStore::new());
    let mut session =
        Session::create(Arc::clone(&store), StreamId::random(), format, config, Timestamp::from_millis(T0)).unwrap();
    let mut now = T0;
    let mut timeline = Timeline::new();
    let mut live = Vec::new();
    let mut pending = Vec::new();
    for m in lines {
        if m.role == ctxlog::message::Role::Assistant && !pending.is_empty() {
            session.append(std::mem::take(&mut pending)).unwrap();
            now += 20_000;
            let plan = session.plan(Timestamp::from_millis(now)).unwrap();
            let view = session.plan_view(&plan);
            let committed = session.commit(plan, Timestamp::from_millis(now), None).unwrap();
            for ev in &committed.events {
                if let Some(rec) = timeline.feed(committed.version, ev, session.state()) {
                    live.push(rec);
                }
            }
            // By the rendered bytes too.
            let st = session.state();
            let shown: BTreeSet<u64> = st
                .view()
                .iter()
                .filter_map(|it| match it.item {
                    Item::Message(seq) => Some(seq),
                    _ => None,
                })
                .collect();
            let ranges = named_ranges(&view);
            let end = st.view().last().map_or(0, |it| st.item_end(it));
            for seq in (0..end).filter(|s| !shown.contains(s)) {
                assert!(ranges.iter().any(|&(a, b)| a <= seq && seq <= b), "seq {seq} unrepresented");
            }
            while let Some(job) = session.summary_job() {
                let text = session.summarize(&job).unwrap();
                if let Prepared::Discarded(_) = session.prepare(&job, text, Produced::extractive()).unwrap() {
                    break;
                }
            }
        }
        pending.push(m.clone());
    }
    replay::verify(store.as_ref(), session.id()).map(|r| assert!(r.ok(), "{:?}", r.problems)).unwrap();
    live
}

#[test]
fn import_replay_and_inspect_say_how_many_hidden_messages_are_represented() {
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("loop.jsonl");
    ctxlog_workload::tool_loop(3, 801).unwrap().write_jsonl(std::fs::File::create(&transcript).unwrap()).unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    let path = transcript.display().to_string();
    let (code, text, err) = ctxlog_tests::scenario::cli(&["import", &path, "--store", &store, "--budget", "30000"]);
    assert_eq!(code, 0, "{err}");
    let all = format!("{text}{err}");
    assert!(all.contains("calls leaving one unrepresented: 0"), "{all}");
    let (code, out, err) = ctxlog_tests::scenario::cli(&["replay", "--store", &store, "--json"]);
    assert_eq!(code, 0, "{err}");
    let records: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(records.iter().any(|r| r["hidden"].as_u64().unwrap() > 100));
    for r in &records {
        assert_eq!(r["hidden"], r["represented"], "call {}", r["call"]);
    }
    let (_, doc, _) = ctxlog_tests::scenario::cli(&["inspect", "--store", &store, "--json"]);
    let doc: Value = serde_json::from_str(&doc).unwrap();
    assert!(doc["hidden"].as_u64().unwrap() > 0);
    assert_eq!(doc["hidden"], doc["represented"]);
}

/// A provider counting `k ×` a uniform chars/4 count of the view's bytes (ids, roles and JSON
/// keys included, which ctxlog's estimate leaves out): every view it served, by its count.
fn by_the_providers_count(format: WireFormat, config: Config, k: f64) -> Vec<(u64, u64)> {
    let count = move |bytes: u64| (bytes as f64 / 4.0 * k).ceil() as u64;
    let lines = tool_loop(format, 23, 2_000);
    let counted = std::cell::RefCell::new(Vec::new());
    let reported = |call: u64, _: u64, bytes: u64| {
        counted.borrow_mut().push((call, count(bytes)));
        Some(count(bytes))
    };
    let run = drive(format, &lines, config, &reported);
    check_run(&run, 2_000);
    counted.into_inner()
}

#[test]
fn no_view_is_over_the_budget_by_a_providers_count_once_a_rate_is_learned() {
    // Issue 21 item 5: the cache-aware hard limit and the ladder keep a margin (view version 3):
    // 10 % of the budget before any report, 5 % once the meter counts at the provider's rate.
    for (format, config) in [(WireFormat::Anthropic, cache_aware(30_000)), (WireFormat::OpenAi, defaults(30_000))] {
        assert_eq!(config.view_version, 3);
        for k in [1.0, 1.3, 2.0] {
            let counted = by_the_providers_count(format, config.clone(), k);
            let over: Vec<_> = counted.iter().filter(|(call, n)| *call > 0 && *n > config.budget).collect();
            let max = counted.iter().map(|(_, n)| *n).max().unwrap();
            eprintln!("{format:?} cache_aware={} k={k}: max {max} by the provider's count", config.cache_aware);
            assert!(
                over.is_empty(),
                "{format:?} k={k}: {} calls over the budget by the provider's count: {over:?}",
                over.len()
            );
            // The first call has only the default margin; this loop's first view is small.
            assert!(counted[0].1 <= config.budget);
        }
    }
}

#[test]
fn without_the_margin_a_cache_aware_loop_goes_over_by_a_uniform_count() {
    // The same loop on view version 2 (sessions written before the margin, which replay as
    // they were): the hard limit is the budget itself, and a chars/4 count of the bytes says
    // some views were over it. This is what the margin is for (and what makes the test above
    // able to fail).
    let config = Config { view_version: 2, ..cache_aware(30_000) };
    let lines = tool_loop(WireFormat::Anthropic, 23, 2_000);
    let over = std::cell::Cell::new(0u64);
    let reported = |_: u64, _: u64, bytes: u64| {
        over.set(over.get() + u64::from(bytes.div_ceil(4) > config.budget));
        None
    };
    let run = drive(WireFormat::Anthropic, &lines, config.clone(), &reported);
    check_run(&run, 2_000);
    assert!(over.get() > 0, "no view over the budget by a uniform count even without the margin");
}

#[test]
fn a_pinned_message_survives_every_ladder_level_and_every_summary_until_unpinned() {
    // Issue 21 item 6: `restore --pin`. A tool result the ladder truncated comes back pinned,
    // then the loop runs on for thousands of messages without summaries (the ladder up to
    // level 9) and with them (flushes that cover everything around it).
    for summarizer in [ctxlog::config::SummarizerKind::None, ctxlog::config::SummarizerKind::Extractive] {
        let config = Config { summarizer, ..defaults(20_000) };
        let lines = tool_loop(WireFormat::Anthropic, 29, 300);
        let mut run = drive(WireFormat::Anthropic, &lines, config.clone(), &no_usage);
        let st = run.session.state();
        let seq = (0..st.message_count())
            .filter(|&s| {
                st.entry(s).unwrap().is_tool_result() && (!st.in_view(s) || st.entry(s).unwrap().edit.is_some())
            })
            .max_by_key(|&s| st.entry(s).unwrap().tokens)
            .unwrap();
        let committed = run.session.restore_pinned(seq, "test", "keep this one").unwrap();
        let kinds: Vec<_> = committed.events.iter().map(Event::name).collect();
        assert_eq!(kinds, ["Restored", "Pinned"]);
        let call = seq - 1; // its tool call, kept with it
        let more = tool_loop(WireFormat::Anthropic, 31, 3_000);
        let mut now = T0 + 100_000_000;
        let mut levels = BTreeSet::new();
        let mut flushes = 0;
        for pair in more[2..].chunks(2) {
            run.session.append(pair.to_vec()).unwrap();
            now += 20_000;
            let plan = run.session.plan(Timestamp::from_millis(now)).unwrap();
            let committed = run.session.commit(plan, Timestamp::from_millis(now), None).unwrap();
            flushes += committed.events.iter().filter(|e| matches!(e, Event::Flushed(_))).count();
            for e in &committed.events {
                if let Event::RequestServed(r) = e {
                    levels.insert(r.level);
                }
            }
            let st = run.session.state();
            assert!(st.in_view(seq) && st.entry(seq).unwrap().edit.is_none(), "the pinned seq {seq} left the view");
            assert!(st.in_view(call), "the pinned result's call seq {call} left the view");
            while let Some(job) = run.session.summary_job() {
                assert!(job.from > seq || job.to <= seq || summarizer_skips(&run.session, seq));
                let text = run.session.summarize(&job).unwrap();
                if let Prepared::Discarded(_) = run.session.prepare(&job, text, Produced::extractive()).unwrap() {
                    break;
                }
            }
        }
        eprintln!("{summarizer:?}: ladder levels {levels:?}, {flushes} flushes");
        if summarizer == ctxlog::config::SummarizerKind::None {
            assert!(levels.iter().max().copied().unwrap_or(0) >= 5, "the ladder never removed: {levels:?}");
        } else {
            assert!(flushes > 10, "{flushes} flushes");
            assert!(run.session.state().flushed() > seq, "no flush went past the pinned message");
        }
        // The fold refuses any edit of it, as of a message appended pinned.
        let st = run.session.state().clone();
        let reason = ctxlog::event::EditReason { level: 3, rule: "t".into(), target_tokens: 1, guard: None };
        let ev = Event::Edited(ctxlog::event::Edited { seq, kind: EditKind::Removed, reason });
        assert_eq!(
            st.check_event(st.version() + 1, &ev).unwrap_err().invariant,
            ctxlog::state::Invariant::EditProtected
        );
        // Unpinned by an explicit edit: from then on the ladder (or a flush) may hide it again.
        run.session.pin(seq, false, "test", "done with it").unwrap();
        let after = tool_loop(WireFormat::Anthropic, 41, 800);
        for pair in after[2..].chunks(2) {
            run.session.append(pair.to_vec()).unwrap();
            now += 20_000;
            let plan = run.session.plan(Timestamp::from_millis(now)).unwrap();
            run.session.commit(plan, Timestamp::from_millis(now), None).unwrap();
            while let Some(job) = run.session.summary_job() {
                let text = run.session.summarize(&job).unwrap();
                if let Prepared::Discarded(_) = run.session.prepare(&job, text, Produced::extractive()).unwrap() {
                    break;
                }
            }
        }
        let st = run.session.state();
        if summarizer == ctxlog::config::SummarizerKind::None {
            assert!(!st.in_view(seq) || st.entry(seq).unwrap().edit.is_some(), "unpinned, it never left the view");
        }
        if st.in_view(seq) && st.entry(seq).unwrap().edit.is_none() {
            // Still shown (summaries kept the view small): the fold now lets the ladder edit it.
            let reason = ctxlog::event::EditReason { level: 1, rule: "t".into(), target_tokens: 1, guard: None };
            let ev =
                Event::Edited(ctxlog::event::Edited { seq, kind: EditKind::Truncated { keep_chars: 100 }, reason });
            let mut st = st.clone();
            let body = run.session.messages(seq..seq + 1).unwrap();
            st.hydrate(seq, body[0].clone());
            st.check_event(st.version() + 1, &ev).unwrap();
        }
        let report = replay::verify(run.store.as_ref(), run.session.id()).unwrap();
        assert!(report.ok(), "verify: {:?}", report.problems);
    }
}

/// A summary job may span a pinned message: its text skips it (kept verbatim in the view).
fn summarizer_skips(session: &Session<Arc<MemoryStore>>, seq: u64) -> bool {
    session.state().entry(seq).is_some_and(|e| e.is_pinned())
}

#[test]
fn a_pin_is_refused_where_it_cannot_hold_and_an_unpin_where_nothing_was_pinned() {
    let lines = tool_loop(WireFormat::Anthropic, 37, 40);
    let mut run = drive(WireFormat::Anthropic, &lines, defaults(200_000), &no_usage);
    let refused = |r: Result<ctxlog::session::Committed, ctxlog::SessionError>| {
        matches!(r, Err(ctxlog::SessionError::Refused { .. }))
    };
    assert!(refused(run.session.pin(10_000, true, "t", "no such seq")));
    assert!(refused(run.session.pin(3, false, "t", "never pinned")));
    let version = run.session.state().version();
    run.session.pin(3, true, "t", "keep").unwrap();
    assert!(refused(run.session.pin(3, true, "t", "twice")));
    // A message appended pinned stays so.
    run.session.append(vec![msg(json!({"role": "user", "content": "keep me", "pinned": true}))]).unwrap();
    let appended = run.session.state().message_count() - 1;
    assert!(refused(run.session.pin(appended, false, "t", "appended pinned")));
    run.session.pin(3, false, "t", "done").unwrap();
    assert_eq!(run.session.state().version(), version + 3, "refusals wrote nothing");
    assert!(!run.session.state().entry(3).unwrap().is_pinned());
}
