//! Anthropic parity (issue 23 item 2): the knobs with the meaning of Anthropic's context editing
//! (`clear_tool_uses_20250919`: `keep`, `exclude_tools`, `clear_tool_inputs`, the placeholder;
//! `clear_thinking_20251015`: `keep` thinking turns), each against a scenario with the
//! documented semantics, and Anthropic tool loops with signed thinking blocks through the ladder
//! and both summary modes, every request checked by the strict fake's rules with thinking
//! enabled (signatures byte for byte, the last assistant turn of the loop starting with its
//! thinking, tool pairs, empty content).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::collections::BTreeSet;

use ctxlog::config::{CallKnobs, Config, SummarizerKind};
use ctxlog::event::{EditKind, Event};
use ctxlog::session::{Prepared, Produced};
use ctxlog::{MemoryStore, RequestOptions, Session, StreamId, Timestamp, WireFormat};
use ctxlog_fake_upstream::strict::{sign, Strictness};
use ctxlog_tests::engine_fixtures::{msg, T0};
use serde_json::{json, Value};

const PLACEHOLDER: &str = "[cleared: call the tool again]";
const TOOLS: [&str; 4] = ["read_file", "grep", "memory", "run_tests"];

/// Message `i` of the loop: the assistant's turn (signed thinking, a sentence, a tool call) and
/// the user message with its result; every tenth turn a person speaks up between them.
fn turn(i: usize, human_every: usize) -> Vec<Value> {
    let tool = TOOLS[i % TOOLS.len()];
    let thought = format!("Turn {i}: the next file to look at is mod_{i}.rs, with {tool}.");
    let id = format!("toolu_{i:04}");
    let mut out = vec![
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": thought, "signature": sign(&thought)},
            {"type": "text", "text": format!("Looking at module {i}.")},
            {"type": "tool_use", "id": id, "name": tool, "input": {"path": format!("crates/ledger/src/mod_{i}.rs"), "pattern": "fn settle".repeat(20)}}
        ]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": format!("result {i} of {tool}: {}", "line of output ".repeat(150 + 40 * (i % 5)))}
        ]}),
    ];
    if human_every > 0 && i % human_every == human_every - 1 {
        // The person's message comes after the result; the assistant answers it first.
        out.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("Done with {i}.")}]}));
        out.push(json!({"role": "user", "content": format!("Good. Next, keep going with the modules after {i}; {}", "remember the u128 accumulator and the rounding rule we agreed on. ".repeat(8))}));
    }
    out
}

struct Run {
    session: Session<std::sync::Arc<MemoryStore>>,
    /// Each call's request body, as sent.
    bodies: Vec<Value>,
    levels: BTreeSet<u8>,
    summaries: usize,
}

/// Drives `turns` turns through a session with `config`, planning a call after every tool result
/// (and after every human message), with thinking enabled in every request; the built-in
/// summarizer answers the jobs when the config has one. Every request must pass the strict fake.
fn drive(config: Config, turns: usize, human_every: usize, knobs: &CallKnobs) -> Run {
    let store = std::sync::Arc::new(MemoryStore::new());
    let mut session = Session::create(
        std::sync::Arc::clone(&store),
        StreamId::random(),
        WireFormat::Anthropic,
        config,
        Timestamp::from_millis(T0),
    )
    .unwrap();
    let opts = RequestOptions::new()
        .model("claude-sonnet-4-5")
        .max_tokens(2_048)
        .field("thinking", r#"{"type":"enabled","budget_tokens":1024}"#)
        .unwrap();
    let strict = Strictness { context_tokens: Some(10_000_000), ..Strictness::default() };
    let mut now = T0;
    let (mut bodies, mut levels, mut summaries) = (Vec::new(), BTreeSet::new(), 0);
    let mut pending = vec![
        msg(json!({"role": "system", "content": "You are a careful coding agent. ".repeat(30)})),
        msg(
            json!({"role": "user", "content": "Port every module of the ledger crate to the new API, one by one; run the tests after each."}),
        ),
    ];
    let mut lines: Vec<Value> = Vec::new();
    for i in 0..turns {
        lines.extend(turn(i, human_every));
    }
    for line in lines {
        let m = msg(line);
        let is_assistant = m.role == ctxlog::message::Role::Assistant;
        if is_assistant && !pending.is_empty() {
            session.append(std::mem::take(&mut pending)).unwrap();
            now += 20_000;
            let plan = session.plan_with(Timestamp::from_millis(now), knobs).unwrap();
            let body: Value = serde_json::from_slice(session.request(&plan, &opts).unwrap().body()).unwrap();
            if let Err(r) = strict.anthropic(&body, 1) {
                panic!("call {}: the strict fake refuses the request: {}", plan.call(), r.message);
            }
            levels.insert(plan.level());
            bodies.push(body);
            session.commit(plan, Timestamp::from_millis(now), None).unwrap();
            while let Some(job) = session.summary_job() {
                let text = session.summarize(&job).unwrap();
                match session.prepare(&job, text, Produced::extractive()).unwrap() {
                    Prepared::Written(_) => summaries += 1,
                    Prepared::Discarded(_) => break,
                }
            }
        }
        pending.push(m);
    }
    Run { session, bodies, levels, summaries }
}

fn small(budget: u64) -> Config {
    // The legacy gate: these tests check what each knob edits on every call, which the
    // cache-aware default defers while the cache is warm (that pairing is tested below).
    Config { budget, summarizer: SummarizerKind::None, cache_aware: false, ..Config::default() }
}

/// The blocks of every message of a request body.
fn blocks(m: &Value) -> Vec<&Value> {
    m["content"].as_array().map(|a| a.iter().collect()).unwrap_or_default()
}

fn results(body: &Value) -> Vec<(String, Value)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(blocks)
        .filter(|b| b["type"] == "tool_result")
        .map(|b| (b["tool_use_id"].as_str().unwrap().to_owned(), b["content"].clone()))
        .collect()
}

fn tool_uses(body: &Value) -> Vec<Value> {
    body["messages"].as_array().unwrap().iter().flat_map(blocks).filter(|b| b["type"] == "tool_use").cloned().collect()
}

fn edits(session: &Session<std::sync::Arc<MemoryStore>>) -> Vec<ctxlog::event::Edited> {
    let mut out = Vec::new();
    ctxlog::replay::for_each_event(session.store(), session.id(), 1, None, |_, ev| {
        if let Event::Edited(e) = ev {
            out.push(e);
        }
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn tool_results_are_cleared_oldest_first_to_the_placeholder_keeping_the_last_n_tool_uses() {
    // clear_tool_uses: "clears the oldest tool results in chronological order, replacing them
    // with placeholder text"; `keep` tool uses stay as they were.
    let config = Config { tool_placeholder: Some(PLACEHOLDER.into()), protected_tool_results: 3, ..small(12_000) };
    let run = drive(config, 40, 0, &CallKnobs::default());
    let last = run.bodies.last().unwrap();
    let rs = results(last);
    let cleared: Vec<usize> = (0..rs.len()).filter(|&i| rs[i].1 == json!(PLACEHOLDER)).collect();
    assert!(!cleared.is_empty(), "nothing cleared in a session four budgets long");
    // The last three results are whole; every cleared one is older than every whole one.
    for (_, content) in rs.iter().rev().take(3) {
        assert!(content.as_str().unwrap().starts_with("result "), "a kept tool use was edited: {content}");
    }
    let first_whole = (0..rs.len()).find(|&i| rs[i].1 != json!(PLACEHOLDER)).unwrap();
    assert!(cleared.iter().all(|&i| i < first_whole || rs[first_whole..].iter().all(|r| r.1 != json!(PLACEHOLDER))));
    assert!(edits(&run.session).iter().any(|e| e.kind == EditKind::Cleared));
    assert!(
        !edits(&run.session).iter().any(|e| matches!(e.kind, EditKind::Truncated { .. })),
        "truncated instead of cleared"
    );
    // Without a placeholder the same session truncates (ctxlog's default), and clears nothing.
    let plain = drive(Config { protected_tool_results: 3, ..small(12_000) }, 40, 0, &CallKnobs::default());
    assert!(!edits(&plain.session).iter().any(|e| e.kind == EditKind::Cleared));
    assert!(edits(&plain.session).iter().any(|e| matches!(e.kind, EditKind::Truncated { .. })));
}

#[test]
fn keep_tool_uses_is_the_protected_tool_results_knob() {
    // One knob: a client's `keep` of 6 protects the last six results in that call, as
    // `protected_tool_results = 6` does for the whole session.
    let config = Config { tool_placeholder: Some(PLACEHOLDER.into()), protected_tool_results: 1, ..small(12_000) };
    let knobs = CallKnobs { keep_tool_uses: Some(6), ..CallKnobs::default() };
    let run = drive(config.clone(), 40, 0, &knobs);
    let same = drive(Config { protected_tool_results: 6, ..config }, 40, 0, &CallKnobs::default());
    for body in [run.bodies.last().unwrap(), same.bodies.last().unwrap()] {
        let rs = results(body);
        assert!(rs.iter().rev().take(6).all(|(_, c)| c != &json!(PLACEHOLDER)), "one of the last six was cleared");
    }
    assert_eq!(run.bodies.last(), same.bodies.last(), "a per-call keep and the session knob decide alike");
}

#[test]
fn a_clients_clear_tool_uses_runs_at_its_trigger_on_a_warm_cache() {
    // Under the cache-aware default a warm cache holds the session's own ladder back until the
    // hard limit; a client's `clear_tool_uses` (apply mode) runs at its trigger as the API's
    // does, and its `clear_at_least` is what guards the cache.
    let config = Config { budget: 60_000, summarizer: SummarizerKind::None, ..Config::default() };
    assert!(config.cache_aware);
    let client = CallKnobs {
        clear_tool_results: true,
        trigger_tokens: Some(5_000),
        keep_tool_uses: Some(2),
        ..CallKnobs::default()
    };
    let asked = drive(config.clone(), 30, 0, &client);
    let cleared: Vec<_> = edits(&asked.session).into_iter().filter(|e| e.kind == EditKind::Cleared).collect();
    assert!(!cleared.is_empty(), "the client's clear_tool_uses waited for a cold cache");
    let last = asked.bodies.last().unwrap();
    assert!(results(last).iter().rev().take(2).all(|(_, c)| c.as_str().is_some_and(|t| t.starts_with("result "))));
    // The session alone, far under its budget, keeps the warm prefix.
    let alone = drive(config.clone(), 30, 0, &CallKnobs::default());
    assert!(edits(&alone.session).is_empty(), "the session's own ladder ran on a warm cache under its hard limit");
    // A clear_at_least no clear can reach keeps the warm prefix as well.
    let never = CallKnobs { clear_at_least: Some(1_000_000), ..client };
    let guarded = drive(config, 30, 0, &never);
    assert!(edits(&guarded.session).is_empty(), "a warm rewrite freed less than the client's clear_at_least");
}

#[test]
fn excluded_tools_are_never_cleared_nor_removed() {
    // exclude_tools: "tool names whose uses are preserved from clearing" (a memory tool).
    let config =
        Config { tool_placeholder: Some(PLACEHOLDER.into()), exclude_tools: vec!["memory".into()], ..small(12_000) };
    let run = drive(config, 60, 0, &CallKnobs::default());
    let memory_calls = (0..60).filter(|i| TOOLS[i % TOOLS.len()] == "memory").count();
    for (call, body) in run.bodies.iter().enumerate() {
        let uses = tool_uses(body);
        let rs = results(body);
        let memory_ids: Vec<&str> =
            uses.iter().filter(|u| u["name"] == "memory").map(|u| u["id"].as_str().unwrap()).collect();
        for id in &memory_ids {
            let (_, content) = rs.iter().find(|(r, _)| r == id).unwrap();
            assert!(content.as_str().unwrap().starts_with("result "), "call {call}: memory result {id} edited");
        }
        // Every memory call made so far is still in the view (nothing removed them).
        let made = body["messages"].as_array().unwrap().len();
        let _ = made;
        if call + 1 == run.bodies.len() {
            assert_eq!(memory_ids.len(), memory_calls, "a memory call left the view");
        }
    }
    // The others were cleared or removed: the exclusion is what kept the memory tool's.
    let last = run.bodies.last().unwrap();
    assert!(results(last).iter().any(|(_, c)| c == &json!(PLACEHOLDER)) || tool_uses(last).len() < 60);
}

#[test]
fn clear_tool_inputs_clears_the_calls_of_cleared_results_and_keeps_each_pair_valid() {
    let config = Config { tool_placeholder: Some(PLACEHOLDER.into()), clear_tool_inputs: true, ..small(12_000) };
    let run = drive(config, 40, 0, &CallKnobs::default());
    let last = run.bodies.last().unwrap();
    let rs = results(last);
    let uses = tool_uses(last);
    let mut cleared_inputs = 0;
    for u in &uses {
        let id = u["id"].as_str().unwrap();
        let (_, content) = rs.iter().find(|(r, _)| r == id).expect("every call keeps its result");
        assert!(u["name"].as_str().is_some_and(|n| TOOLS.contains(&n)), "the name stays");
        if u["input"] == json!({}) {
            cleared_inputs += 1;
            assert_eq!(content, &json!(PLACEHOLDER), "an input cleared while its result is whole");
        }
    }
    assert!(cleared_inputs > 0, "no input cleared");
    // Off (Anthropic's default): results are cleared, inputs stay.
    let off =
        drive(Config { tool_placeholder: Some(PLACEHOLDER.into()), ..small(12_000) }, 40, 0, &CallKnobs::default());
    assert!(tool_uses(off.bodies.last().unwrap()).iter().all(|u| u["input"] != json!({})));
}

#[test]
fn keep_thinking_turns_drops_older_thinking_whole_and_keeps_the_signed_blocks_byte_for_byte() {
    // clear_thinking keep N thinking turns; the blocks left are the model's own, signatures
    // intact (the strict fake checks each one in `drive`), and the loop's last assistant turn
    // keeps its thinking (the fake refuses it otherwise).
    let config = Config { keep_thinking_turns: Some(2), ..small(1_000_000) };
    let run = drive(config, 12, 0, &CallKnobs::default());
    for (call, body) in run.bodies.iter().enumerate() {
        let assistants: Vec<&Value> =
            body["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "assistant").collect();
        let with_thinking: Vec<usize> = assistants
            .iter()
            .enumerate()
            .filter(|(_, m)| blocks(m).iter().any(|b| b["type"] == "thinking"))
            .map(|(i, _)| i)
            .collect();
        // The last two thinking turns keep theirs, the last assistant message above all (the
        // strict fake refuses the loop otherwise); the older ones lost it.
        assert!(with_thinking.len() <= 2, "call {call}: {} turns kept their thinking", with_thinking.len());
        if let Some(last) = assistants.len().checked_sub(1) {
            assert!(with_thinking.contains(&last), "call {call}: the last assistant turn lost its thinking");
        }
        // A turn that lost it kept its text and its call.
        assert!(assistants.iter().all(|m| blocks(m).iter().any(|b| b["type"] == "tool_use")));
    }
    // With a person speaking every 3 turns, earlier loops lose their thinking but for the last 2.
    let config = Config { keep_thinking_turns: Some(2), ..small(1_000_000) };
    let run = drive(config, 12, 3, &CallKnobs::default());
    let last = run.bodies.last().unwrap();
    let msgs = last["messages"].as_array().unwrap();
    let last_human = msgs.iter().rposition(|m| m["content"].is_string()).unwrap();
    let older_with_thinking = msgs[..last_human]
        .iter()
        .filter(|m| m["role"] == "assistant" && blocks(m).iter().any(|b| b["type"] == "thinking"))
        .count();
    assert!(older_with_thinking <= 2, "{older_with_thinking} older turns kept their thinking");
    let trims = edits(&run.session);
    assert!(trims.iter().any(|e| e.kind == EditKind::Trimmed { thinking: true, inputs: false }));
    // A dropped turn keeps everything but its thinking: its text and its tool call.
    for m in &msgs[..last_human] {
        if m["role"] == "assistant" {
            assert!(!blocks(m).is_empty());
        }
    }
    // `keep` 0 still leaves the last assistant message its thinking (the fake checks it in
    // `drive`), and no other message any.
    let zero = drive(Config { keep_thinking_turns: Some(0), ..small(1_000_000) }, 12, 3, &CallKnobs::default());
    for body in &zero.bodies {
        let msgs = body["messages"].as_array().unwrap();
        let last_assistant = msgs.iter().rposition(|m| m["role"] == "assistant");
        for (i, m) in msgs.iter().enumerate() {
            let thinks = blocks(m).iter().any(|b| b["type"] == "thinking");
            let calls = blocks(m).iter().any(|b| b["type"] == "tool_use");
            if m["role"] == "assistant" && Some(i) == last_assistant {
                assert!(thinks || !calls, "the last assistant message lost its thinking: {m}");
            } else if m["role"] == "assistant" {
                assert!(!thinks, "message {i} kept its thinking with keep 0: {m}");
            }
        }
    }
    // `None` keeps them all (Anthropic's `keep: "all"`): no trim at all.
    let all = drive(small(1_000_000), 12, 3, &CallKnobs::default());
    assert!(!edits(&all.session).iter().any(|e| matches!(e.kind, EditKind::Trimmed { .. })));
}

#[test]
fn thinking_sessions_pass_the_strict_fake_through_the_ladder_and_both_summary_modes() {
    // Every request of every run is checked in `drive` (signatures, the loop's last turn
    // starting with thinking, pairs, empty content). The runs together reach the ladder's
    // levels, with and without summaries, cache-aware or not, with the parity knobs on or off.
    let mut levels = BTreeSet::new();
    let mut summaries = 0;
    for summarizer in [SummarizerKind::None, SummarizerKind::Extractive] {
        for cache_aware in [false, true] {
            for (parity, recent) in [(false, 0.3), (true, 0.3), (false, 0.9)] {
                // A wide recent window (0.9) holds the removals back, so the truncation waves of
                // levels 4 and 6 run.
                let mut config = Config {
                    budget: 14_000,
                    summarizer,
                    cache_aware,
                    protected_recent_ratio: recent,
                    ..Config::default()
                };
                if parity {
                    config.tool_placeholder = Some(PLACEHOLDER.into());
                    config.clear_tool_inputs = true;
                    config.exclude_tools = vec!["memory".into()];
                    config.keep_thinking_turns = Some(1);
                }
                let run = drive(config, 80, 7, &CallKnobs::default());
                levels.extend(run.levels.iter().copied());
                levels.extend(edits(&run.session).iter().map(|e| e.reason.level));
                summaries += run.summaries;
                let verify = ctxlog::replay::verify(run.session.store(), run.session.id()).unwrap();
                assert!(verify.problems.is_empty(), "verify: {:?}", verify.problems);
            }
        }
    }
    assert!(summaries > 0, "the extractive runs wrote no summary");
    for level in [1, 2, 3, 4, 5, 6, 7, 8, 9] {
        assert!(levels.contains(&level), "no run reached level {level}: {levels:?}");
    }
}

fn cli(args: &[&str]) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = ctxlog_tools::run(std::iter::once("ctxlog").chain(args.iter().copied()), &mut out, &mut err);
    (code, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
}

#[test]
fn import_takes_the_parity_flags_and_replay_and_why_show_what_they_did() {
    // The same knobs from the command line; the log says what each call cleared and trimmed.
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("t.jsonl");
    let mut lines = vec![
        json!({"role": "system", "content": "You are a careful coding agent. ".repeat(30)}).to_string(),
        json!({"role": "user", "content": "Port every module of the ledger crate."}).to_string(),
    ];
    for i in 0..30 {
        lines.extend(turn(i, 0).iter().map(Value::to_string));
    }
    std::fs::write(&transcript, lines.join("\n") + "\n").unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let (code, _, err) = cli(&[
        "import",
        transcript.to_str().unwrap(),
        "--store",
        &store,
        "--budget",
        "12000",
        "--summarizer",
        "none",
        "--keep-tool-uses",
        "3",
        "--exclude-tools",
        "memory",
        "--clear-tool-inputs",
        "--tool-placeholder",
        PLACEHOLDER,
        "--keep-thinking-turns",
        "1",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&["replay", "--store", &store, "--json"]);
    assert_eq!(code, 0, "{err}");
    let kinds: BTreeSet<String> = out
        .lines()
        .flat_map(|l| serde_json::from_str::<Value>(l).unwrap()["edits"].as_array().cloned().unwrap_or_default())
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(kinds.contains("cleared") && kinds.contains("trimmed"), "{kinds:?}");
    // The oldest result (seq 3, read_file) was cleared: `why` says so, with the rule.
    let (code, out, err) = cli(&["why", "--seq", "3", "--store", &store]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cleared") && out.contains("clear_tool_uses"), "{out}");
    let (code, _, err) = cli(&["verify", "--store", &store]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn no_summary_placed_before_a_provider_compaction_holds_what_follows_it() {
    // The provider drops everything before a compaction block: a summary sitting before it
    // (a flush puts a summary where its first message was) must cover nothing after it, nor
    // may a condensed summary merge summaries from both sides.
    let store = std::sync::Arc::new(MemoryStore::new());
    let config = Config { budget: 9_000, summary_share: 0.1, ..Config::default() };
    let mut s = Session::create(
        std::sync::Arc::clone(&store),
        StreamId::random(),
        WireFormat::Anthropic,
        config,
        Timestamp::from_millis(T0),
    )
    .unwrap();
    let opts = RequestOptions::new().model("claude-sonnet-4-6").max_tokens(512);
    let strict = Strictness { context_tokens: Some(10_000_000), ..Strictness::default() };
    s.append(vec![msg(json!({"role": "user", "content": "Port the ledger."}))]).unwrap();
    let mut now = T0;
    let mut compaction_seq = None;
    let mut checked = 0;
    for i in 0..120 {
        let mut batch: Vec<Value> = turn(i, 5)
            .into_iter()
            .map(|mut m| {
                // Plain assistant turns (no thinking) so the compaction message is an ordinary one.
                if m["role"] == "assistant" {
                    m["content"].as_array_mut().unwrap().retain(|b| b["type"] != "thinking");
                }
                m
            })
            .collect();
        if i == 30 {
            batch.insert(
                0,
                json!({"role": "assistant", "content": [
                    {"type": "compaction", "content": "Summary of the first 30 modules."},
                    {"type": "text", "text": "Continuing."}
                ]}),
            );
            batch.insert(1, json!({"role": "user", "content": "Go on."}));
        }
        let before = s.state().message_count();
        let ms: Vec<_> = batch.into_iter().map(msg).collect();
        if i == 30 {
            compaction_seq = Some(before);
        }
        s.append(ms).unwrap();
        now += 20_000;
        let plan = s.plan(Timestamp::from_millis(now)).unwrap();
        let body: Value = serde_json::from_slice(s.request(&plan, &opts).unwrap().body()).unwrap();
        strict.anthropic(&body, 1).unwrap_or_else(|r| panic!("call {i}: {}", r.message));
        s.commit(plan, Timestamp::from_millis(now), None).unwrap();
        while let Some(job) = s.summary_job() {
            let text = s.summarize(&job).unwrap();
            if let Prepared::Discarded(_) = s.prepare(&job, text, Produced::extractive()).unwrap() {
                break;
            }
        }
        let Some(c) = compaction_seq else { continue };
        let st = s.state();
        let view = st.view();
        let at = view
            .iter()
            .position(|it| it.item == ctxlog::state::Item::Message(c))
            .expect("the compaction left the view");
        for it in &view[..at] {
            if let ctxlog::state::Item::Summary(k) = it.item {
                let sum = &st.summaries()[k as usize];
                assert!(
                    sum.to <= c + 1,
                    "call {i}: summary {k} ({}..{}) before the compaction at {c} covers what follows it",
                    sum.from,
                    sum.to
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "no summary ever sat before the compaction: the test proves nothing");
    let after = s.state().summaries().iter().filter(|x| x.to > compaction_seq.unwrap() + 1).count();
    assert!(after > 0, "nothing after the compaction was ever summarized");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 16, ..proptest::prelude::ProptestConfig::default() })]

    /// Random budgets and parity knobs on thinking tool loops: every request passes the strict
    /// fake (checked in `drive`), and the log verifies.
    #[test]
    fn random_parity_knobs_never_send_what_the_api_refuses(
        budget in 6_000u64..30_000,
        placeholder in proptest::prelude::any::<bool>(),
        inputs in proptest::prelude::any::<bool>(),
        thinking in proptest::option::of(0u32..3),
        exclude in proptest::option::of(0usize..4),
        keep in 0u32..4,
        cache_aware in proptest::prelude::any::<bool>(),
        summaries in proptest::prelude::any::<bool>(),
        turns in 20usize..70,
        human_every in 0usize..8,
    ) {
        let config = Config {
            budget,
            cache_aware,
            protected_tool_results: keep,
            tool_placeholder: placeholder.then(|| PLACEHOLDER.to_owned()),
            clear_tool_inputs: inputs,
            keep_thinking_turns: thinking,
            exclude_tools: exclude.map(|i| vec![TOOLS[i].to_owned()]).unwrap_or_default(),
            summarizer: if summaries { SummarizerKind::Extractive } else { SummarizerKind::None },
            ..Config::default()
        };
        let run = drive(config, turns, human_every, &CallKnobs::default());
        let report = ctxlog::replay::verify(run.session.store(), run.session.id()).unwrap();
        proptest::prop_assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}
