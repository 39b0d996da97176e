//! What summaries cost on the prompt cache, and what they save: the bundled demo session run
//! through the engine with summaries written by (a simulated) model in fork, standalone and
//! auto mode, by the built-in extractive summarizer, and with no summaries at all.
//!
//! The main line is priced as in `cache_sim` (`ctxlog::cost`: 5-minute prefix cache, read 0.1×,
//! write 1.25×). Each summarizer call is priced by the same cache, extended to it: it runs right
//! after a call (within the TTL), so a fork, whose messages are the served request byte for byte
//! plus one (`tests/tests/summary_requests.rs`), reads everything but its last message from the
//! cache; a standalone request shares no prefix with the main line and reads nothing. A
//! summarizer call writes nothing to the cache (no breakpoint): uncached prompt tokens are
//! priced at 1.0×. Tokens are estimated at four bytes of request JSON per token. The simulated
//! model answers every request with the same 600-character summary, so fork and standalone
//! runs serve the same main line and differ only in what their summaries cost.
//!
//! `cargo run --release -p ctxlog-bench --bin summary_cost [-- --budget N]`

// A benchmark aborts on a broken fixture; there is nothing to recover.
#![allow(clippy::panic)]

use std::cell::RefCell;

use ctxlog::config::{Config, SummarizerKind};
use ctxlog::cost::{PrefixCache, READ};
use ctxlog::event::{SummaryFailure, SummaryMode};
use ctxlog::replay::CallRecord;
use ctxlog::summary_call::SummaryCall;
use ctxlog::{MemoryStore, Usage};
use ctxlog_bench::views::ViewTracker;
use ctxlog_tools::import::{import, ImportOptions};
use ctxlog_tools::summarizer::{ModelSummaries, Reply, SummaryClient};

/// The simulated model: prices each request on the cache, answers a fixed summary.
#[derive(Default)]
struct Model {
    /// (prompt tokens, read from the cache) per call.
    calls: RefCell<Vec<(u64, u64)>>,
}

const SUMMARY_CHARS: usize = 600;

impl SummaryClient for Model {
    fn summarize(&self, body: &[u8]) -> Result<Reply, SummaryFailure> {
        let v: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| SummaryFailure::Provider(format!("request is not JSON: {e}")))?;
        let messages = v["messages"].as_array().cloned().unwrap_or_default();
        let prompt = body.len() as u64 / 4;
        // A fork's last message is the only part the cache has not seen; anything else (a
        // standalone request) shares no prefix with the main line.
        let is_fork = v.get("system").is_none_or(|s| s.as_str() != Some(ctxlog::summary_call::STANDALONE_PROMPT))
            && messages.len() > 2;
        let cached = match (is_fork, messages.last()) {
            (true, Some(last)) => prompt.saturating_sub(last.to_string().len() as u64 / 4),
            _ => 0,
        };
        self.calls.borrow_mut().push((prompt, cached));
        let text: String = "Summary: the user asked for a CSV exporter; files src/export.rs and tests/export.rs \
                            were changed; the failing header test was fixed; next: streaming output. "
            .chars()
            .cycle()
            .take(SUMMARY_CHARS)
            .collect();
        let usage = Usage { input: prompt - cached, cache_read: cached, cache_write: 0, output: 150 };
        Ok(Reply { text, usage: Some(usage), latency_ms: 0 })
    }
}

struct Run {
    name: &'static str,
    calls: usize,
    attempts: usize,
    forks: usize,
    failed: usize,
    summary_prompt: u64,
    summary_cached: u64,
    summary_cost: f64,
    main_input: f64,
    main_cost: f64,
}

fn run(name: &'static str, budget: u64, summarizer: SummarizerKind, mode: Option<SummaryMode>) -> Run {
    let transcript = ctxlog_bench::demo_transcript();
    let mut views: Vec<u8> = Vec::new(); // the views as `--views` writes them
    let store = MemoryStore::new();
    let model = Model::default();
    let config = Config { budget, summarizer, ..Config::default() };
    let summaries = mode.map(|m| ModelSummaries { client: &model, call: SummaryCall::new(m) });
    let opts = ImportOptions {
        config,
        session: None,
        call_interval_ms: 30_000,
        views: Some(&mut views),
        inline_media: false,
        summaries,
    };
    let mut records: Vec<CallRecord> = Vec::new();
    import(&transcript, &store, opts, |r| {
        records.push(r.clone());
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let mut cache = PrefixCache::new();
    let mut tracker = ViewTracker::new();
    for (line, r) in views.split(|&b| b == b'\n').zip(&records) {
        let diff = tracker.feed(&mut line.to_vec()).unwrap_or_else(|e| panic!("{e}"));
        cache.call(r.at * 1000.0, r.view_tokens, diff.shared_bytes, diff.total_bytes);
    }
    let attempts: Vec<_> = records.iter().flat_map(|r| &r.summaries).collect();
    let priced = model.calls.borrow();
    let (summary_prompt, summary_cached) = priced.iter().fold((0, 0), |(p, c), (a, b)| (p + a, c + b));
    Run {
        name,
        calls: records.len(),
        attempts: attempts.len(),
        forks: attempts.iter().filter(|a| a.mode_used == "fork").count(),
        failed: attempts.iter().filter(|a| a.outcome != "prepared").count(),
        summary_prompt,
        summary_cached,
        summary_cost: READ * summary_cached as f64 + (summary_prompt - summary_cached) as f64,
        main_input: cache.totals.input,
        main_cost: cache.totals.cost,
    }
}

fn main() {
    let budget = std::env::args()
        .skip_while(|a| a != "--budget")
        .nth(1)
        .and_then(|b| b.parse().ok())
        .unwrap_or(ctxlog_tools::DEMO_BUDGET);
    println!(
        "demo session, budget {budget}; main line: TTL 5 min, read 0.1×, write 1.25×; summarizer calls: read 0.1×, \
         the rest 1.0×; costs in base-price input tokens"
    );
    println!();
    let runs = [
        run("none", budget, SummarizerKind::None, None),
        run("extractive", budget, SummarizerKind::Extractive, None),
        run("standalone", budget, SummarizerKind::Extractive, Some(SummaryMode::Standalone)),
        run("fork", budget, SummarizerKind::Extractive, Some(SummaryMode::Fork)),
        run("auto", budget, SummarizerKind::Extractive, Some(SummaryMode::Auto)),
    ];
    println!("| summarizer | calls | attempts (fork / failed) | summarizer prompt tokens | read from cache | summarizer cost | main-line input tokens | main-line cost | total cost | input tokens saved vs none |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let none_input = runs[0].main_input;
    for r in &runs {
        let share = if r.summary_prompt > 0 { 100.0 * r.summary_cached as f64 / r.summary_prompt as f64 } else { 0.0 };
        println!(
            "| {} | {} | {} ({} / {}) | {} | {share:.1}% | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} ({:.1}%) |",
            r.name,
            r.calls,
            r.attempts,
            r.forks,
            r.failed,
            r.summary_prompt,
            r.summary_cost,
            r.main_input,
            r.main_cost,
            r.main_cost + r.summary_cost,
            none_input - r.main_input,
            100.0 * (none_input - r.main_input) / none_input
        );
    }
    let (standalone, fork) = (&runs[2], &runs[3]);
    if standalone.summary_cost > 0.0 {
        println!();
        println!(
            "fork / standalone summarizer cost: {:.3}; fork prompt {:.1}× the standalone prompt",
            fork.summary_cost / standalone.summary_cost,
            fork.summary_prompt as f64 / standalone.summary_prompt.max(1) as f64
        );
    }
}
