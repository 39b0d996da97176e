//! Cost of one `plan` as the session grows, in the spirit of the peers' performance test
//! (`context_simple.md` §6 "Performance": n triples of user / assistant tool call / 3,000-char
//! tool result, n = 200 → 600 messages and n = 800 → 2,400 messages).
//!
//! Three measurements at both sizes, medians of many repetitions, in one run:
//! - `steady`: append one message, then plan, when nothing escalates (the common call);
//! - `escalating`: a plan that runs the whole ladder (every call over the trigger);
//! - `full render`: rendering and hashing the whole view from scratch — the linear baseline.
//!
//! `cargo run --release -p ctxlog-bench --bin plan_bench`

// A benchmark aborts on a broken fixture; there is nothing to recover.
#![allow(clippy::panic)]

use std::time::Instant;

use ctxlog::config::{Config, SummarizerKind};
use ctxlog::internal::wire::parse_message;
use ctxlog::{MemoryStore, Message, Session, StreamId, Timestamp, WireFormat};

fn triple(i: usize) -> [Message; 3] {
    let user =
        format!(r#"{{"role":"user","content":{}}}"#, serde_json::json!(format!("request number {i} ").repeat(5)));
    let call = format!(
        r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_{i}","type":"function","function":{{"name":"search","arguments":"{{\"q\":\"item {i}\"}}"}}}}]}}"#
    );
    let result = format!(
        r#"{{"role":"tool","tool_call_id":"call_{i}","content":{}}}"#,
        serde_json::json!("result payload data ".repeat(150))
    );
    [user, call, result].map(|j| parse_message(&j).unwrap_or_else(|e| panic!("bench fixture: {e}")))
}

fn session(store: &MemoryStore, n: usize, config: Config) -> Session<&MemoryStore> {
    let mut s = Session::create(store, StreamId::random(), WireFormat::OpenAi, config, Timestamp::from_millis(0))
        .unwrap_or_else(|e| panic!("{e}"));
    for i in 0..n {
        s.append(triple(i).to_vec()).unwrap_or_else(|e| panic!("{e}"));
    }
    s
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Median µs of appending one message and planning, over `reps` calls (each committed, so the
/// view grows by one message per call and the cache renders only that message).
fn steady(n: usize, reps: usize) -> f64 {
    let store = MemoryStore::new();
    let config = Config { budget: 100_000_000, summarizer: SummarizerKind::None, ..Config::default() };
    let mut s = session(&store, n, config);
    let mut now = 1_000;
    let plan = s.plan(Timestamp::from_millis(now)).unwrap_or_else(|e| panic!("{e}"));
    s.commit(plan, Timestamp::from_millis(now), None).unwrap_or_else(|e| panic!("{e}"));
    let mut times = Vec::with_capacity(reps);
    for i in 0..reps {
        let [user, ..] = triple(n + i);
        now += 1_000;
        let t = Instant::now();
        s.append(vec![user]).unwrap_or_else(|e| panic!("{e}"));
        let plan = s.plan(Timestamp::from_millis(now)).unwrap_or_else(|e| panic!("{e}"));
        times.push(t.elapsed().as_secs_f64() * 1e6);
        s.commit(plan, Timestamp::from_millis(now), None).unwrap_or_else(|e| panic!("{e}"));
    }
    median(times)
}

/// Median µs of a plan that runs the ladder (the same state planned `reps` times), and its
/// number of events.
fn escalating(n: usize, reps: usize) -> (f64, usize) {
    let store = MemoryStore::new();
    // The peers' knobs (threshold 0.01, target 0.001, pr 0.05) on a budget both sizes exceed,
    // so the guards let the ladder run (aiming at the budget: the target is out of reach).
    let config = Config {
        budget: 100_000,
        trigger_ratio: 0.01,
        target_ratio: 0.001,
        protected_recent_ratio: 0.05,
        summarizer: SummarizerKind::None,
        ..Config::default()
    };
    let mut s = session(&store, n, config);
    let mut edits = 0;
    let times = (0..reps)
        .map(|_| {
            let t = Instant::now();
            let plan = s.plan(Timestamp::from_millis(1_000)).unwrap_or_else(|e| panic!("{e}"));
            let us = t.elapsed().as_secs_f64() * 1e6;
            edits = plan.events().len();
            s.abort(plan);
            us
        })
        .collect();
    (median(times), edits)
}

/// Median µs of rendering and hashing the whole view from scratch.
fn full_render(n: usize, reps: usize) -> f64 {
    let store = MemoryStore::new();
    let s = session(&store, n, Config { budget: 100_000_000, ..Config::default() });
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                let d = ctxlog::internal::view::digest_of(s.state());
                let us = t.elapsed().as_secs_f64() * 1e6;
                std::hint::black_box(d);
                us
            })
            .collect(),
    )
}

fn main() {
    let (small, large) = (200, 800);
    println!("| measurement | 600 messages (µs) | 2,400 messages (µs) | ratio 2,400/600 |");
    println!("|---|---|---|---|");
    let (a, b) = (steady(small, 400), steady(large, 400));
    println!("| steady call: append 1 + plan, nothing escalates | {a:.1} | {b:.1} | {:.2} |", b / a);
    let ((c, ec), (d, ed)) = (escalating(small, 15), escalating(large, 15));
    println!("| escalating plan: full ladder ({ec} / {ed} edits) | {c:.0} | {d:.0} | {:.2} |", d / c);
    let (e, f) = (full_render(small, 30), full_render(large, 30));
    println!("| baseline: render + hash the whole view | {e:.0} | {f:.0} | {:.2} |", f / e);
}
