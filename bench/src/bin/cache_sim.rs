//! Prompt-cache and cost simulator: runs a session through the engine with the cache-aware gate
//! off and on, and prices every call with a provider-style prefix cache.
//!
//! The price model (5-minute prefix cache, read 0.1×, write 1.25×) is `ctxlog::cost`.
//!
//! `cargo run --release -p ctxlog-bench --bin cache_sim [-- --budget N] [--shape demo|storm|protected-blob|all]
//! [--flags "--hard-limit 0.9 …"] [--trace]` (`--trace`: a line per call, before its gate's row)
//!
//! Shapes: `demo` (the bundled demo session, `--budget` default 40,000); `storm` (the peers'
//! scenario 8: a 38,000-character first message, then 20 tool exchanges, budget 10,000, trigger
//! 0.80); `protected-blob` (their scenario 3: 30 chat turns, one 140,000-character tool result,
//! then 10 more turns, budget 40,000, trigger and target 0.50). `--flags` are `ctxlog import`'s
//! knob flags, applied to both gates (the gate itself is set by the column).

// A benchmark aborts on a broken fixture; there is nothing to recover.
#![allow(clippy::panic)]

use clap::Parser as _;
use ctxlog::config::Config;
use ctxlog::cost::PrefixCache;
use ctxlog::replay::CallRecord;
use ctxlog::MemoryStore;
use ctxlog_bench::views::ViewTracker;
use ctxlog_tools::args::{Cli, Command as CliCommand};
use ctxlog_tools::import::{import, ImportOptions};
use ctxlog_tools::transcript::FormatArg;
use serde_json::json;

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
    max_view: f64,
}

/// A shape's transcript and its knobs before `--flags`.
fn shape(name: &str, budget: Option<u64>) -> (ctxlog_tools::transcript::Transcript, Config) {
    let jsonl = |lines: Vec<serde_json::Value>| {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        ctxlog_tools::transcript::read(text.as_bytes(), std::path::Path::new(name), FormatArg::Anthropic)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let user = |t: String| json!({"role": "user", "content": t});
    let assistant = |t: String| json!({"role": "assistant", "content": t});
    let call = |id: &str, text: String| {
        json!({"role": "assistant", "content": [{"type": "text", "text": text},
            {"type": "tool_use", "id": id, "name": "search", "input": {"q": id}}]})
    };
    let result = |id: &str, text: String| json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": text}]});
    match name {
        "demo" => (
            ctxlog_bench::demo_transcript(),
            Config { budget: budget.unwrap_or(ctxlog_tools::DEMO_BUDGET), ..Config::default() },
        ),
        "storm" => {
            let mut lines = vec![user("D".repeat(38_000))];
            for i in 0..20 {
                let id = format!("s{i}");
                lines.push(call(&id, "a".repeat(200)));
                lines.push(result(&id, "r".repeat(400)));
            }
            let c = Config { budget: budget.unwrap_or(10_000), trigger_ratio: 0.80, ..Config::default() };
            (jsonl(lines), c)
        }
        "protected-blob" => {
            let mut lines =
                vec![json!({"role": "system", "content": "You are helpful."}), user("PROJECT PATH IS ~/x".into())];
            for i in 0..30 {
                lines.push(user(format!("turn {i} ").repeat(30)));
                lines.push(assistant(format!("reply {i} ").repeat(30)));
            }
            lines.push(call("t1", String::new()));
            lines.push(result("t1", "X".repeat(140_000)));
            for i in 0..10 {
                lines.push(user(format!("more {i} ").repeat(30)));
                lines.push(assistant(format!("answer {i} ").repeat(30)));
            }
            let c = Config {
                budget: budget.unwrap_or(40_000),
                trigger_ratio: 0.5,
                target_ratio: 0.5,
                prepare_ratio: 0.5,
                ..Config::default()
            };
            (jsonl(lines), c)
        }
        other => panic!("--shape: {other} is not demo, storm, protected-blob or all"),
    }
}

/// `--flags` read as `ctxlog import`'s knob flags on top of `base`.
fn with_flags(base: Config, flags: &[String]) -> Config {
    let argv = ["ctxlog", "import", "x.jsonl"].into_iter().map(String::from).chain(flags.iter().cloned());
    match Cli::try_parse_from(argv) {
        Ok(Cli { command: CliCommand::Import(a), .. }) => a.config.resolve(base).unwrap_or_else(|e| panic!("{e}")),
        Ok(_) => panic!("--flags: not import flags"),
        Err(e) => panic!("--flags: {e}"),
    }
}

fn simulate(transcript: &ctxlog_tools::transcript::Transcript, config: Config, trace: bool) -> Priced {
    let budget = config.budget;
    let mut views: Vec<u8> = Vec::new(); // the views as `--views` writes them
    let store = MemoryStore::new();
    let opts = ImportOptions {
        config,
        session: None,
        call_interval_ms: 30_000,
        views: Some(&mut views),
        inline_media: false,
        summaries: None,
    };
    let mut records: Vec<CallRecord> = Vec::new();
    import(transcript, &store, opts, |r| {
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
        max_view: 0.0,
    };
    for (line, r) in views.split(|&b| b == b'\n').zip(&records) {
        let diff = tracker.feed(&mut line.to_vec()).unwrap_or_else(|e| panic!("{e}"));
        let before = cache.totals;
        cache.call(r.at * 1000.0, r.view_tokens, diff.shared_bytes, diff.total_bytes);
        if trace {
            let edits: Vec<String> = r.edits.iter().map(|e| format!("{}:{}", e.seq, e.kind)).collect();
            println!(
                "  call {:>3}: view {:>6} tok {:>3} msgs, shared {:>7}/{:<7} bytes, flush {:<10} level {} edits [{}] cost {:.0} (bound {:.0})",
                r.call,
                r.view_tokens,
                r.view_messages,
                diff.shared_bytes,
                diff.total_bytes,
                r.flush.as_ref().map_or("-".into(), |f| format!("{}..{}", f.from, f.to)),
                r.level,
                edits.join(" "),
                cache.totals.cost - before.cost,
                cache.totals.lower_bound - before.lower_bound
            );
        }
        p.reused += usize::from(r.prefix_reused);
        p.flushes += usize::from(r.flush.is_some());
        p.edits += r.edits.len();
        p.over_budget += usize::from(r.view_tokens > r.budget);
        p.max_view = p.max_view.max(r.view_tokens as f64 / budget as f64);
    }
    p.cost = cache.totals.cost;
    p.input = cache.totals.input;
    p.cached = cache.totals.cached;
    p.lower_bound = cache.totals.lower_bound;
    p
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().skip_while(|a| *a != flag).nth(1).cloned();
    let budget = value("--budget").map(|b| b.parse().unwrap_or_else(|e| panic!("--budget: {e}")));
    let trace = args.iter().any(|a| a == "--trace");
    let flags: Vec<String> =
        value("--flags").map(|f| f.split_whitespace().map(String::from).collect()).unwrap_or_default();
    let shapes = match value("--shape").as_deref() {
        None | Some("demo") => vec!["demo"],
        Some("all") => vec!["demo", "storm", "protected-blob"],
        Some(other) => vec![match other {
            "storm" => "storm",
            "protected-blob" => "protected-blob",
            _ => panic!("--shape: {other} is not demo, storm, protected-blob or all"),
        }],
    };
    println!(
        "TTL 5 min, cache read 0.1×, cache write 1.25×, calls 30 s apart{}",
        if flags.is_empty() { String::new() } else { format!(", flags: {}", flags.join(" ")) }
    );
    println!();
    println!("| shape | budget | gate | calls | prefix reused | flushes | edits | over budget | max view ÷ budget | input tokens | cached share | cost (base-price tokens) | cost ÷ lower bound |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for name in shapes {
        let (transcript, base) = shape(name, budget);
        let mut costs = Vec::new();
        for (gate, aware) in [("legacy", false), ("cache-aware", true)] {
            let config = Config { cache_aware: aware, ..with_flags(base.clone(), &flags) };
            let p = simulate(&transcript, config.clone(), trace);
            println!(
                "| {name} | {} | {gate} | {} | {} of {} ({:.1}%) | {} | {} | {} | {:.2} | {:.0} | {:.1}% | {:.0} | {:.3} |",
                config.budget,
                p.calls,
                p.reused,
                p.calls - 1,
                100.0 * p.reused as f64 / (p.calls - 1) as f64,
                p.flushes,
                p.edits,
                p.over_budget,
                p.max_view,
                p.input,
                100.0 * p.cached / p.input,
                p.cost,
                p.cost / p.lower_bound
            );
            costs.push(p.cost);
        }
        if let [legacy, aware] = costs[..] {
            println!("| {name} | | cache-aware ÷ legacy cost: {:.3} | | | | | | | | | | |", aware / legacy);
        }
    }
}
