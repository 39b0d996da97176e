//! `sessions_bench`: what `ctxlog sessions` costs on a store of many proxy-like sessions, next
//! to folding every session (what it did before issue 20: `Session::open` per stream).
//!
//! Each session is what `ctxlog proxy` writes for a conversation: `SessionStarted`, a name on
//! every other one, a system prompt and a first user message, then `--calls` calls of two ~600
//! byte messages each, committed with their request record. Sessions are built in memory and
//! copied into the store (one append per session), so building does not dominate. No snapshots
//! (the proxy writes one only when a session goes idle): the fold reads every record, as it
//! would for sessions that never went idle. Medians of `--runs` runs, as a markdown table.
//!
//! Usage: `sessions_bench [--sessions 2000] [--calls 20] [--runs 3] [--only sqlite,fs] [--dir DIR]`

// A benchmark binary: failing loudly on a setup error is the right behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::PathBuf;
use std::time::Instant;

use ctxlog::{parse_message, Config, MemoryStore, RequestOptions, Session, Store, StreamId, Timestamp, WireFormat};

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned()).unwrap_or_else(|| default.to_owned())
}

fn message(role: &str, text: &str) -> ctxlog::Message {
    parse_message(&serde_json::json!({"role": role, "content": text}).to_string()).unwrap()
}

/// One proxy-like session in `mem`.
fn build(mem: &MemoryStore, i: usize, calls: usize) -> StreamId {
    let id = StreamId::random();
    let t0 = 1_780_000_000_000 + i as u64 * 1_000;
    let name = i.is_multiple_of(2).then(|| format!("agent-{i}"));
    let first = vec![
        message("system", &"You are a coding agent. Follow the repository's conventions. ".repeat(8)),
        message("user", &format!("Task {i}: fix the flaky test in the payment module and explain the cause.")),
    ];
    let config = Config { budget: 400_000, ..Config::default() };
    let (mut s, _) =
        Session::create_named(mem, id, WireFormat::Anthropic, config, Timestamp::from_millis(t0), name, first).unwrap();
    let opts = RequestOptions::new().model("claude-sonnet-4-5").max_tokens(4_096);
    let filler = "The test depends on wall-clock time and on the order of a hash map. ".repeat(8);
    for c in 0..calls as u64 {
        let at = t0 + c * 20_000;
        let plan = s.plan(Timestamp::from_millis(at)).unwrap();
        s.commit_request(plan, &opts, Timestamp::from_millis(at + 900), None).unwrap();
        s.append(vec![message("assistant", &filler), message("user", &format!("step {c}: {filler}"))]).unwrap();
    }
    id
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let sessions: usize = arg("--sessions", "2000").parse().unwrap();
    let calls: usize = arg("--calls", "20").parse().unwrap();
    let runs: usize = arg("--runs", "3").parse().unwrap();
    let only = arg("--only", "sqlite,fs");
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("BENCH_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(arg("--dir", "")));
    let root = if dir.as_os_str().is_empty() { tmp.path().to_path_buf() } else { dir };

    let started = Instant::now();
    let mem = MemoryStore::new();
    let ids: Vec<StreamId> = (0..sessions).map(|i| build(&mem, i, calls)).collect();
    let records: u64 = ids.iter().map(|id| mem.head(*id).unwrap().unwrap()).sum();
    eprintln!("built {sessions} sessions, {records} records in {:.1} s", started.elapsed().as_secs_f64());

    println!(
        "| store | sessions | records | `ctxlog sessions` (ends of each log) | fold every session (before) | ratio |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for kind in only.split(',') {
        let url = match kind {
            "sqlite" => format!("sqlite:{}", root.join("bench.db").display()),
            "fs" => format!("fs:{}", root.join("fs").display()),
            other => panic!("unknown backend {other}"),
        };
        {
            let store = ctxlog_tools::stores::open_store(&url, ctxlog_tools::stores::Access::Create).unwrap();
            let copy = Instant::now();
            for id in &ids {
                ctxlog::transfer::copy_session(&mem, store.as_ref(), *id).unwrap();
            }
            eprintln!("{kind}: copied in {:.1} s", copy.elapsed().as_secs_f64());
        }
        let (mut listing, mut folding, mut reading) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let t = Instant::now();
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = ctxlog_tools::run(["ctxlog", "sessions", "--json", "--store", &url], &mut out, &mut err);
            assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
            listing.push(t.elapsed().as_secs_f64());
            let listed: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(listed.as_array().unwrap().len(), sessions);

            let t = Instant::now();
            let store = ctxlog_tools::stores::open_store(&url, ctxlog_tools::stores::Access::ReadOnly).unwrap();
            let opened = t.elapsed().as_secs_f64();
            let catalog = ctxlog_tools::catalog::Catalog::read(store.as_ref()).unwrap();
            assert_eq!(catalog.entries.len(), sessions);
            reading.push(t.elapsed().as_secs_f64() - opened);
            // Before: one fold per session (the store opened as the command did).
            drop(store);
            let t = Instant::now();
            let store = ctxlog_tools::stores::open_store(&url, ctxlog_tools::stores::Access::ReadOnly).unwrap();
            let mut total = 0;
            for id in store.streams().unwrap() {
                total += Session::open(store.as_ref(), id).unwrap().state().calls();
            }
            assert_eq!(total, (sessions * calls) as u64);
            folding.push(t.elapsed().as_secs_f64());
        }
        let (l, f, r) = (median(listing), median(folding), median(reading));
        println!(
            "| {kind} | {sessions} | {records} | {:.0} ms ({:.0} µs/session; reading the logs {:.0} ms) | {:.0} ms | {:.1}× |",
            l * 1000.0,
            l * 1e6 / sessions as f64,
            r * 1000.0,
            f * 1000.0,
            f / l
        );
    }
}
