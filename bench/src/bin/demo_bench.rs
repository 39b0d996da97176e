//! Import, replay and verify speed of the bundled demo session on each backend, with the
//! in-memory store measured in the same run as the baseline. Medians of several runs.
//!
//! `cargo run --release -p ctxlog-bench --bin demo_bench [-- --runs N]`

// A benchmark aborts on a broken fixture; there is nothing to recover.
#![allow(clippy::panic)]

use std::path::Path;
use std::time::Instant;

use ctxlog::config::Config;
use ctxlog::replay::{replay, verify, Mode};
use ctxlog::{MemoryStore, Store, StreamId};
use ctxlog_tools::import::{import, ImportOptions};
use ctxlog_tools::transcript::{read, FormatArg, Transcript};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

struct Run {
    import_ms: f64,
    replay_ms: f64,
    verify_ms: f64,
    events: u64,
}

fn once(t: &Transcript, store: &dyn Store) -> Run {
    let id = StreamId::random();
    let config = Config { budget: ctxlog_tools::DEMO_BUDGET, ..Config::default() };
    let opts = ImportOptions {
        config,
        session: Some(id),
        call_interval_ms: 30_000,
        views: None,
        inline_media: false,
        summaries: None,
    };
    let start = Instant::now();
    let done = import(t, store, opts, |_| Ok(())).unwrap_or_else(|e| panic!("{e}"));
    let import_ms = start.elapsed().as_secs_f64() * 1e3;
    let start = Instant::now();
    let r = replay(store, id, Mode::Strict, None).unwrap_or_else(|e| panic!("{e}"));
    let replay_ms = start.elapsed().as_secs_f64() * 1e3;
    let start = Instant::now();
    let v = verify(store, id).unwrap_or_else(|e| panic!("{e}"));
    let verify_ms = start.elapsed().as_secs_f64() * 1e3;
    assert!(v.ok(), "{:?}", v.problems);
    assert_eq!(r.timeline, done.timeline);
    Run { import_ms, replay_ms, verify_ms, events: r.state.version() }
}

fn main() {
    let runs: usize = std::env::args().skip_while(|a| a != "--runs").nth(1).and_then(|n| n.parse().ok()).unwrap_or(5);
    let text = ctxlog_workload::demo_transcript();
    let t = read(text.as_bytes(), Path::new("demo"), FormatArg::Anthropic).unwrap_or_else(|e| panic!("{e}"));
    let messages = t.lines.len();
    println!("demo session: {messages} messages, {} bytes of JSONL; median of {runs} runs", text.len());
    println!();
    println!("| store | events | import ms | messages/s | replay ms | events/s | verify ms | import vs mem |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut mem_import = f64::NAN;
    for kind in ["mem", "sqlite", "fs", "sled"] {
        let mut all = Vec::new();
        for _ in 0..runs {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let store: Box<dyn Store> = match kind {
                "mem" => Box::new(MemoryStore::new()),
                "sqlite" => Box::new(
                    ctxlog_store_sqlite::SqliteStore::open(dir.path().join("x.db")).unwrap_or_else(|e| panic!("{e}")),
                ),
                "fs" => {
                    Box::new(ctxlog_store_fs::FsStore::open(dir.path().join("fs")).unwrap_or_else(|e| panic!("{e}")))
                }
                _ => Box::new(
                    ctxlog_store_sled::SledStore::open(dir.path().join("sled")).unwrap_or_else(|e| panic!("{e}")),
                ),
            };
            all.push(once(&t, store.as_ref()));
        }
        let events = all.first().map_or(0, |r| r.events);
        let import_ms = median(all.iter().map(|r| r.import_ms).collect());
        let replay_ms = median(all.iter().map(|r| r.replay_ms).collect());
        let verify_ms = median(all.iter().map(|r| r.verify_ms).collect());
        if kind == "mem" {
            mem_import = import_ms;
        }
        println!(
            "| {kind} | {events} | {import_ms:.1} | {:.0} | {replay_ms:.1} | {:.0} | {verify_ms:.1} | {:.2}× |",
            messages as f64 / (import_ms / 1e3),
            events as f64 / (replay_ms / 1e3),
            import_ms / mem_import
        );
    }
}
