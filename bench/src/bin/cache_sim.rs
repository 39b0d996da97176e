//! Prompt-cache and cost simulator: runs the bundled demo session through the engine with the
//! cache-aware gate off and on, and prices every call with a provider-style prefix cache.
//!
//! The price model (5-minute prefix cache, read 0.1×, write 1.25×) is `ctxlog::cost`.
//!
//! `cargo run --release -p ctxlog-bench --bin cache_sim [-- --budget N]`

// A benchmark aborts on a broken fixture; there is nothing to recover.
#![allow(clippy::panic)]

use ctxlog::config::Config;
use ctxlog::cost::PrefixCache;
use ctxlog::replay::CallRecord;
use ctxlog::MemoryStore;
use ctxlog_bench::views::ViewTracker;
use ctxlog_tools::import::{import, ImportOptions};

struct Priced {
    calls: usize,
    reused: usize,
    flushes: usize,
    edits: usize,
    input: f64,
    cached: f64,
    cost: f64,
    lower_bound: f64,
    over_budget: usize,
}

fn simulate(budget: u64, cache_aware: bool) -> Priced {
    let transcript = ctxlog_bench::demo_transcript();
    let mut views: Vec<u8> = Vec::new(); // the views as `--views` writes them
    let store = MemoryStore::new();
    let config = Config { budget, cache_aware, ..Config::default() };
    let opts = ImportOptions {
        config,
        session: None,
        call_interval_ms: 30_000,
        views: Some(&mut views),
        inline_media: false,
        summaries: None,
    };
    let mut records: Vec<CallRecord> = Vec::new();
    import(&transcript, &store, opts, |r| {
        records.push(r.clone());
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let mut cache = PrefixCache::new();
    let mut tracker = ViewTracker::new();
    let mut p = Priced {
        calls: records.len(),
        reused: 0,
        flushes: 0,
        edits: 0,
        input: 0.0,
        cached: 0.0,
        cost: 0.0,
        lower_bound: 0.0,
        over_budget: 0,
    };
    for (line, r) in views.split(|&b| b == b'\n').zip(&records) {
        let diff = tracker.feed(&mut line.to_vec()).unwrap_or_else(|e| panic!("{e}"));
        cache.call(r.at * 1000.0, r.view_tokens, diff.shared_bytes, diff.total_bytes);
        p.reused += usize::from(r.prefix_reused);
        p.flushes += usize::from(r.flush.is_some());
        p.edits += r.edits.len();
        p.over_budget += usize::from(r.view_tokens > r.budget);
    }
    p.cost = cache.totals.cost;
    p.input = cache.totals.input;
    p.cached = cache.totals.cached;
    p.lower_bound = cache.totals.lower_bound;
    p
}

fn main() {
    let budget = std::env::args()
        .skip_while(|a| a != "--budget")
        .nth(1)
        .and_then(|b| b.parse().ok())
        .unwrap_or(ctxlog_tools::DEMO_BUDGET);
    println!("demo session, budget {budget}, TTL 5 min, cache read 0.1×, cache write 1.25×");
    println!();
    println!("| gate | calls | prefix reused | flushes | edits | over budget | input tokens | cached share | cost (base-price tokens) | cost ÷ lower bound |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut costs = Vec::new();
    for (name, aware) in [("legacy", false), ("cache-aware", true)] {
        let p = simulate(budget, aware);
        println!(
            "| {name} | {} | {} of {} ({:.1}%) | {} | {} | {} | {:.0} | {:.1}% | {:.0} | {:.3} |",
            p.calls,
            p.reused,
            p.calls - 1,
            100.0 * p.reused as f64 / (p.calls - 1) as f64,
            p.flushes,
            p.edits,
            p.over_budget,
            p.input,
            100.0 * p.cached / p.input,
            p.cost,
            p.cost / p.lower_bound
        );
        costs.push(p.cost);
    }
    if let [legacy, aware] = costs[..] {
        println!();
        println!("cache-aware / legacy cost: {:.3}", aware / legacy);
    }
}
