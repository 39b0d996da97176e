//! `ctxlog rerun` as CI uses it: a session recorded by the current engine, rerun under the knobs
//! it was recorded with, makes the same decisions and serves the same views on every fixture
//! (the regression check); under other knobs the decision diff is pinned with insta. `diff A B`
//! compares two recorded sessions the same way.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::sync::Arc;

use ctxlog::config::{Config, SummarizerKind};
use ctxlog::replay::Mode;
use ctxlog::session::{Prepared, Produced};
use ctxlog::{MemoryStore, Store, WireFormat};
use ctxlog_tests::engine_fixtures::{config, Harness};
use ctxlog_tests::postmortem::{Recorded, DEMO};
use ctxlog_tools::analysis::{analyze, Keep, Until};
use ctxlog_tools::args::SummariesArg;
use ctxlog_tools::diff::{compare, Side};
use ctxlog_tools::rerun::{inputs, run};
use serde_json::Value;

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap()
}

/// `rerun --json --exit-code` of `session`: asserts it found nothing, and returns its notes.
fn assert_identical(r: &Recorded, session: &str, what: &str) -> Value {
    let (code, out, err) = r.run(&["rerun", "--session", session, "--json", "--exit-code"]);
    let diff = json(&out);
    assert_eq!(code, 0, "{what}: {err}\n{:#}", diff["calls"].get(0).unwrap_or(&Value::Null));
    assert_eq!((diff["identical"].as_bool(), diff["differing_calls"].as_u64()), (Some(true), Some(0)), "{what}");
    assert!(diff["knobs"].as_array().unwrap().is_empty(), "{what}");
    for (name, t) in diff["totals"].as_object().unwrap() {
        assert_eq!(t["delta"], 0.0, "{what}: {name}");
    }
    let notes = diff["notes"].clone();
    assert!(notes["summaries_remade"].as_array().unwrap().is_empty(), "{what}: {notes}");
    assert!(notes["restores_skipped"].as_array().unwrap().is_empty(), "{what}: {notes}");
    assert_eq!(notes["usage_scaled"], 0, "{what}");
    notes
}

fn session(i: u32) -> String {
    format!("00000000-0000-0000-0000-{i:012}")
}

#[test]
fn rerun_of_the_demo_under_every_recorded_configuration_is_empty() {
    let r = Recorded::new();
    let configs: [&[&str]; 6] = [
        &[],
        &["--no-cache-aware"],
        &["--budget", "30000"],
        &["--budget", "20000", "--summarizer", "none"],
        &["--budget", "40000", "--cache-aware"],
        &["--budget", "20000", "--cache-aware", "--clear-at-least", "3000", "--ttl", "120"],
    ];
    for (i, flags) in configs.iter().enumerate() {
        let id = session(i as u32);
        r.run_demo(&id, flags);
        let t = r.timeline(&id);
        let notes = assert_identical(&r, &id, &format!("demo {flags:?}"));
        // Every summary the session prepared was taken over as recorded.
        let summaries: u64 = notes["summaries_reused"].as_u64().unwrap();
        assert_eq!(summaries > 0, !flags.contains(&"none"), "demo {flags:?}: {notes}");
        assert!(t.len() > 200);
    }
}

#[test]
fn rerun_of_imported_transcripts_and_a_long_generated_session_is_empty() {
    let r = Recorded::new();
    let golden = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/golden/transcript.jsonl")).unwrap();
    r.import(&session(1), &golden, &["--budget", "4000", "--cache-aware", "--summary-share", "0.1"]);
    assert_identical(&r, &session(1), "golden transcript");
    r.import(&session(2), &usage_transcript(24), &["--budget", "900", "--target", "0.4"]);
    let t = r.timeline(&session(2));
    assert!(
        t.iter().any(|c| c.reported_tokens.is_some()) && t.iter().any(|c| !c.edits.is_empty() || c.flush.is_some())
    );
    assert_identical(&r, &session(2), "transcript with reported usage");
    r.import(&session(3), &openai_transcript(), &["--budget", "700"]);
    assert_identical(&r, &session(3), "OpenAI transcript");
    r.run_demo(&session(4), &["--messages", "1500", "--budget", "30000"]);
    assert_identical(&r, &session(4), "generated 1,500-message session");
}

#[test]
fn rerun_makes_a_recorded_restore_again_after_the_same_call() {
    let r = Recorded::demo(&["--budget", "30000"]);
    let t = r.timeline(DEMO);
    let removed = t.iter().flat_map(|c| &c.edits).rfind(|e| e.kind == "removed").unwrap().seq;
    r.ok(&["restore", "--seq", &removed.to_string()]);
    assert_identical(&r, DEMO, "demo with a restore");
    // Under knobs where that message was never edited, there is nothing to restore: said so.
    let diff = json(&r.ok(&["rerun", "--json", "--budget", "80000"]));
    assert_eq!(diff["notes"]["restores_skipped"], serde_json::json!([removed]));
}

/// A small Anthropic transcript whose assistant lines report usage.
fn usage_transcript(turns: usize) -> String {
    let mut lines = vec![r#"{"role":"system","content":"You are a coding agent."}"#.to_owned()];
    for i in 0..turns {
        lines.push(format!(r#"{{"role":"user","content":"Step {i}: {}"}}"#, "look at the next file ".repeat(6)));
        lines.push(format!(
            r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"c{i}","name":"read","input":{{"n":{i}}}}}],"usage":{{"input_tokens":{}}}}}"#,
            150 + 60 * i
        ));
        lines.push(format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"c{i}","content":"{}"}}]}}"#,
            format!("line {i} of the file; ").repeat(8)
        ));
        lines.push(format!(
            r#"{{"role":"assistant","content":"Read part {i}.","usage":{{"input_tokens":{}}}}}"#,
            200 + 60 * i
        ));
    }
    lines.join("\n")
}

/// A small OpenAI chat transcript with tool calls.
fn openai_transcript() -> String {
    let mut lines = vec![r#"{"role":"system","content":"You are helpful."}"#.to_owned()];
    for i in 0..20 {
        lines.push(format!(r#"{{"role":"user","content":"Question {i}: {}"}}"#, "why is the sky blue ".repeat(5)));
        lines.push(format!(
            r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"t{i}","type":"function","function":{{"name":"search","arguments":"{{\"q\":{i}}}"}}}}]}}"#
        ));
        lines.push(format!(r#"{{"role":"tool","tool_call_id":"t{i}","content":"{}"}}"#, "result text ".repeat(20)));
        lines.push(format!(r#"{{"role":"assistant","content":"Answer {i}."}}"#));
    }
    lines.join("\n")
}

/// Reruns a session held in `store` in process; returns how many calls differ.
fn rerun_in_process(store: &dyn Store, id: ctxlog::StreamId, config: Config, summaries: SummariesArg) -> usize {
    let inputs = inputs(store, id).unwrap();
    let recorded = analyze(store, id, Mode::Strict, Until::Head, Keep { views: false }).unwrap();
    let (mem, _) = run(&inputs, config.clone(), summaries).unwrap();
    let rerun = analyze(&mem, id, Mode::Strict, Until::Head, Keep { views: false }).unwrap();
    let left = Side { label: "recorded".into(), analysis: &recorded, config: &inputs.config };
    let right = Side { label: "rerun".into(), analysis: &rerun, config: &config };
    compare(&left, &right).differing()
}

#[test]
fn rerun_of_the_peers_guard_scenarios_is_empty() {
    // Scenario 1 (breaker) and 8 (irreducible floor) of research/context_simple.md §6, as the
    // compaction tests run them: guards, level 9, calls over budget.
    let mut h = Harness::new(WireFormat::OpenAi, Config { protected_recent_ratio: 0.30, ..config(40_000, 0.5, 0.5) });
    let w = h.wire;
    h.append(vec![w.system(&"S".repeat(200_000))]);
    for i in 0..20 {
        h.append(vec![w.user(&format!("turn {i} ").repeat(300)), w.assistant(&format!("reply {i} ").repeat(300))]);
        h.call();
    }
    assert!(h.guard_counts().contains_key("breaker_tripped"));
    let cfg = h.session.config();
    assert_eq!(rerun_in_process(h.store.as_ref(), h.session.id(), cfg, SummariesArg::Recorded), 0);

    // A system payload is never cut: its floor stays over the target, and the guards say so.
    let mut h = Harness::new(WireFormat::Anthropic, config(10_000, 0.80, 0.5));
    let w = h.wire;
    h.append(vec![w.system(&"D".repeat(38_000))]);
    for i in 0..12 {
        let id = format!("s{i}");
        h.append(vec![w.calls(&"a".repeat(200), &[&id], "search"), w.result(&id, &"r".repeat(400))]);
    }
    h.append(vec![w.user("continue")]);
    for _ in 0..10 {
        h.call();
    }
    assert!(!h.guard_counts().is_empty());
    let cfg = h.session.config();
    assert_eq!(rerun_in_process(h.store.as_ref(), h.session.id(), cfg.clone(), SummariesArg::Recorded), 0);
    // The same inputs with another budget do differ: the check can fail.
    let bigger = Config { budget: 60_000, ..cfg };
    assert!(rerun_in_process(h.store.as_ref(), h.session.id(), bigger, SummariesArg::Recorded) > 0);
}

#[test]
fn recorded_summaries_are_reused_where_they_fit_and_remade_on_request() {
    // A host whose summaries are not the built-in ones (say, written by a model): a rerun under
    // the same knobs reuses its texts and is identical; re-making them changes the views.
    let cfg = Config { summarizer: SummarizerKind::Extractive, ..config(6_000, 0.85, 0.5) };
    let mut h = Harness::new(WireFormat::Anthropic, cfg.clone());
    let w = h.wire;
    h.append(vec![w.system("You are a coding agent.")]);
    for i in 0..90 {
        h.append(vec![w.user(&format!("task {i}: {}", "please refactor the parser ".repeat(8)))]);
        h.append(vec![w.assistant(&format!("done {i}: {}", "changed the tokenizer ".repeat(10)))]);
        h.call();
        while let Some(job) = h.session.summary_job() {
            let text = format!("A model's summary of messages {} to {}.", job.from, job.to);
            let produced = Produced { requested: ctxlog::event::SummaryMode::Standalone, ..Produced::extractive() };
            if let Prepared::Discarded(_) = h.session.prepare(&job, text, produced).unwrap() {
                break;
            }
        }
    }
    let store: Arc<MemoryStore> = Arc::clone(&h.store);
    assert!(h.session.state().summaries().len() >= 2, "the fixture must summarize");
    assert_eq!(rerun_in_process(store.as_ref(), h.session.id(), cfg.clone(), SummariesArg::Recorded), 0);
    assert!(rerun_in_process(store.as_ref(), h.session.id(), cfg, SummariesArg::Remake) > 0);
}

#[test]
fn rerun_under_other_knobs_prints_the_decision_diff() {
    // Recorded with the legacy gate (the default before issue 21), rerun cache-aware.
    let r = Recorded::demo(&["--no-cache-aware"]);
    let text = r.ok(&["rerun", "--cache-aware"]);
    insta::assert_snapshot!("rerun_demo_cache_aware", text);
    let (code, out, _) = r.run(&["rerun", "--cache-aware", "--json", "--exit-code"]);
    assert_eq!(code, 1, "--exit-code: calls differ");
    let diff = json(&out);
    assert_eq!(diff["identical"], false);
    assert_eq!(diff["knobs"], serde_json::json!([{"key": "cache-aware", "left": "false", "right": "true"}]));
    // What the rerun did is what a fresh import with those knobs does: `diff` against one
    // finds exactly the same calls, with the same views on the right.
    r.run_demo(&session(7), &["--cache-aware"]);
    let other = json(&r.ok(&["diff", DEMO, &session(7), "--json"]));
    assert_eq!(other["calls"], diff["calls"]);
    assert_eq!(other["totals"], diff["totals"]);
    // Re-making every summary changes nothing here: the recorded ones are the built-in ones.
    let remade = json(&r.ok(&["rerun", "--session", DEMO, "--summaries", "remake", "--json"]));
    assert_eq!(remade["identical"], true);
    assert_eq!(remade["notes"]["summaries_reused"], 0);
}

#[test]
fn rerun_json_pins_the_diff_of_a_small_session() {
    let r = Recorded::new();
    r.import(DEMO, &usage_transcript(8), &["--budget", "600"]);
    let out = r.ok(&["rerun", "--json", "--budget", "700", "--summarizer", "none"]);
    let diff = json(&out);
    assert!(diff["notes"]["usage_scaled"].as_u64().unwrap() > 0, "reported usage describes another view");
    insta::assert_json_snapshot!("rerun_small_budget_700_no_summaries", diff);
}

#[test]
fn diff_compares_two_sessions_call_by_call_across_stores() {
    let r = Recorded::new();
    r.import(&session(1), &openai_transcript(), &["--budget", "700"]);
    r.import(&session(2), &openai_transcript(), &["--budget", "700", "--protected-recent", "0.8"]);
    let text = r.ok(&["diff", &session(1), &session(2)]);
    insta::assert_snapshot!("diff_openai_protected_recent", text);
    let same = json(&r.ok(&["diff", &session(1), &session(1), "--json", "--exit-code"]));
    assert_eq!(same["identical"], true);
    // The same session copied to another backend compares equal.
    let other = format!("fs:{}", r.path("copy"));
    ctxlog_tests::scenario::cli(&["copy", "--from", &r.store, "--to", &other, "--session", &session(1)]);
    let (code, out, err) = r.run(&["diff", &session(1), &session(1), "--store-b", &other, "--exit-code"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("no call differs"), "{out}");
    let (code, _, err) = r.run(&["diff", &session(1), &session(2), "--exit-code"]);
    assert_eq!(code, 1, "{err}");
    let (code, _, err) = r.run(&["diff", &session(1), &session(9)]);
    assert_eq!(code, 2);
    assert!(err.contains(&session(9)), "{err}");
}
