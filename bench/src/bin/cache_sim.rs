//! Prompt-cache and cost simulator: runs the bundled demo session through the engine with the
//! cache-aware gate off and on, and prices every call with a provider-style prefix cache.
//!
//! Cache model (Anthropic's published rules, see `shared/research/baselines.md` §4): a call
//! reads from cache the longest prefix of whole messages it shares with the previous call if
//! that call was less than the TTL (5 min) ago, and writes the rest. Prices relative to the
//! base input price: cache read 0.1×, cache write 1.25×. Tokens of a message prefix are taken
//! in proportion to its bytes within the view's estimated tokens.
//!
//! `cargo run --release -p ctxlog-bench --bin cache_sim [-- --budget N]`

// A benchmark aborts on a broken fixture; there is nothing to recover.
#![allow(clippy::panic)]

use std::io::Write;
use std::path::Path;

use ctxlog::config::Config;
use ctxlog::replay::CallRecord;
use ctxlog::MemoryStore;
use ctxlog_cli::import::{import, ImportOptions};
use ctxlog_cli::transcript::{read, FormatArg};
use serde_json::value::RawValue;

const TTL_MS: f64 = 300_000.0;
const READ: f64 = 0.1;
const WRITE: f64 = 1.25;

#[derive(Default)]
struct Views(Vec<u8>);

impl Write for Views {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(serde::Deserialize)]
struct ViewLine<'a> {
    #[serde(borrow)]
    messages: Vec<&'a RawValue>,
}

struct Priced {
    calls: usize,
    reused: usize,
    flushes: usize,
    edits: usize,
    input: f64,
    cached: f64,
    cost: f64,
    over_budget: usize,
}

fn simulate(budget: u64, cache_aware: bool) -> Priced {
    let text = ctxlog_workload::demo_transcript();
    let transcript = read(text.as_bytes(), Path::new("demo"), FormatArg::Anthropic).unwrap_or_else(|e| panic!("{e}"));
    let mut views = Views::default();
    let store = MemoryStore::new();
    let config = Config { budget, cache_aware, ..Config::default() };
    let opts =
        ImportOptions { config, session: None, call_interval_ms: 30_000, views: Some(&mut views), inline_media: false };
    let mut records: Vec<CallRecord> = Vec::new();
    import(&transcript, &store, opts, |r| {
        records.push(r.clone());
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8(views.0).unwrap_or_else(|e| panic!("{e}"));
    let mut prev: Option<(Vec<&RawValue>, f64)> = None;
    let mut p = Priced {
        calls: records.len(),
        reused: 0,
        flushes: 0,
        edits: 0,
        input: 0.0,
        cached: 0.0,
        cost: 0.0,
        over_budget: 0,
    };
    for (line, r) in text.lines().zip(&records) {
        let view: ViewLine<'_> = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}"));
        let bytes: Vec<usize> = view.messages.iter().map(|m| m.get().len()).collect();
        let total_bytes: usize = bytes.iter().sum();
        let at_ms = r.at * 1000.0;
        let shared = match &prev {
            Some((pv, pat)) if at_ms - pat < TTL_MS => {
                pv.iter().zip(&view.messages).take_while(|(a, b)| a.get() == b.get()).count()
            }
            _ => 0,
        };
        let shared_bytes: usize = bytes.iter().take(shared).sum();
        let tokens = r.view_tokens as f64;
        let cached = if total_bytes == 0 { 0.0 } else { tokens * shared_bytes as f64 / total_bytes as f64 };
        p.input += tokens;
        p.cached += cached;
        p.cost += READ * cached + WRITE * (tokens - cached);
        p.reused += usize::from(r.prefix_reused);
        p.flushes += usize::from(r.flush.is_some());
        p.edits += r.edits.len();
        p.over_budget += usize::from(r.view_tokens > r.budget);
        prev = Some((view.messages, at_ms));
    }
    p
}

fn main() {
    let budget = std::env::args()
        .skip_while(|a| a != "--budget")
        .nth(1)
        .and_then(|b| b.parse().ok())
        .unwrap_or(ctxlog_cli::DEMO_BUDGET);
    println!("demo session, budget {budget}, TTL 5 min, cache read 0.1×, cache write 1.25×");
    println!();
    println!("| gate | calls | prefix reused | flushes | edits | over budget | input tokens | cached share | cost (base-price tokens) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut costs = Vec::new();
    for (name, aware) in [("legacy", false), ("cache-aware", true)] {
        let p = simulate(budget, aware);
        println!(
            "| {name} | {} | {} of {} ({:.1}%) | {} | {} | {} | {:.0} | {:.1}% | {:.0} |",
            p.calls,
            p.reused,
            p.calls - 1,
            100.0 * p.reused as f64 / (p.calls - 1) as f64,
            p.flushes,
            p.edits,
            p.over_budget,
            p.input,
            100.0 * p.cached / p.input,
            p.cost
        );
        costs.push(p.cost);
    }
    if let [legacy, aware] = costs[..] {
        println!();
        println!("cache-aware / legacy cost: {:.3}", aware / legacy);
    }
}
