//! Proxy soak (issue 13, long sessions): a generated session (the generator behind `ctxlog demo
//! --messages N`) is driven through [`ctxlog_proxy::serve`] and an in-process
//! [`ctxlog_fake_upstream::FakeUpstream`] as an agent would: one call per assistant message of
//! the transcript, each with the whole history before it (Anthropic format, the transcript's
//! system prompt as `system`). The proxy runs on its defaults (engine `Config::default()`,
//! extractive summaries between calls), on an embedded SQLite store in a temp dir; the same
//! session is then run with `--summarizer none` as the baseline.
//!
//! Reported per run: calls, calls whose forwarded view is over the budget, the largest view ÷
//! budget, forwarded views without the first user message, summaries and flushes in the log,
//! ladder runs, and the client's wall time per call (p50 / p99: it includes waiting for the
//! previous call's commit and summary jobs, which hold the session's slot).
//!
//! `cargo run --release -p ctxlog-bench --bin proxy_soak [-- --messages 5000 --budget 200000]`

// A benchmark aborts on a broken fixture; there is nothing to recover.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser as _;
use ctxlog::{Event, Store, StreamId};
use ctxlog_bench::machine;
use ctxlog_fake_upstream::FakeUpstream;
use ctxlog_proxy::Summaries;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

#[derive(clap::Parser)]
struct Args {
    /// Messages of the generated session.
    #[arg(long, default_value_t = 5000)]
    messages: u64,
    /// The engine's budget (default: `Config::default()`'s).
    #[arg(long)]
    budget: Option<u64>,
    /// Generator seed (default: the demo's).
    #[arg(long)]
    seed: Option<u64>,
    /// The proxy's body limit in MiB (its default is 32; a 20,000-message history is ~63 MB).
    #[arg(long, default_value_t = 32)]
    max_body_mib: usize,
    /// Skip the `--summarizer none` baseline.
    #[arg(long)]
    no_baseline: bool,
}

/// The transcript as an agent holds it: the system prompt, and each message's JSON.
struct Transcript {
    system: Option<String>,
    messages: Vec<String>,
    assistant: Vec<bool>,
    first_user: Value,
}

fn transcript(seed: u64, n: u64) -> Transcript {
    let mut system = None;
    let mut messages = Vec::new();
    let mut assistant = Vec::new();
    for line in ctxlog_workload::session(seed, n).unwrap() {
        let mut v: Value = serde_json::from_str(&line).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("timestamp");
        if o["role"] == "system" {
            system = Some(o["content"].as_str().unwrap().to_owned());
            continue;
        }
        assistant.push(o["role"] == "assistant");
        // The provider signed the thinking blocks it wrote: the agent sends back its signatures
        // (the strict fake checks them as the real API does).
        if let Some(blocks) = o.get_mut("content").and_then(Value::as_array_mut) {
            for b in blocks.iter_mut().filter(|b| b["type"] == "thinking") {
                let sig = ctxlog_fake_upstream::thinking_signature(b["thinking"].as_str().unwrap_or(""));
                b["signature"] = Value::String(sig);
            }
        }
        messages.push(serde_json::to_string(&v).unwrap());
    }
    let first_user: Value = serde_json::from_str(&messages[0]).unwrap();
    Transcript { system, messages, assistant, first_user: first_user["content"].clone() }
}

struct Outcome {
    calls: usize,
    over: usize,
    max_ratio: f64,
    without_first: usize,
    summaries: usize,
    flushes: usize,
    laddered: usize,
    history_mb: f64,
    p50_ms: f64,
    p99_ms: f64,
    wall_s: f64,
}

async fn run(t: &Transcript, budget: u64, max_body: usize, summaries: Summaries) -> Outcome {
    let fake = FakeUpstream::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(ctxlog_store_sqlite::SqliteStore::open(dir.path().join("log.sqlite")).unwrap());
    let mut cfg = ctxlog_proxy::ProxyConfig::new("127.0.0.1:0".parse().unwrap(), &fake.url());
    cfg.engine.budget = budget;
    cfg.summaries = summaries;
    cfg.max_body = max_body;
    let proxy = ctxlog_proxy::serve(cfg, Arc::clone(&store)).await.unwrap();
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(conn);
    let base = format!("http://{}", proxy.addr());
    let head = match &t.system {
        Some(s) => format!(
            r#"{{"model":"claude-soak","max_tokens":256,"system":{},"messages":["#,
            serde_json::to_string(s).unwrap()
        ),
        None => r#"{"model":"claude-soak","max_tokens":256,"messages":["#.to_owned(),
    };
    let started = Instant::now();
    let (mut walls, mut without_first, mut stream, mut bytes_sent) = (Vec::new(), 0, None::<StreamId>, 0u64);
    for (i, _) in t.assistant.iter().enumerate().filter(|(_, a)| **a) {
        // The history before this assistant message: what the agent sends for it.
        let mut body = String::with_capacity(head.len() + t.messages[..i].iter().map(|m| m.len() + 1).sum::<usize>());
        body.push_str(&head);
        for (k, m) in t.messages[..i].iter().enumerate() {
            if k > 0 {
                body.push(',');
            }
            body.push_str(m);
        }
        body.push_str("]}");
        bytes_sent += body.len() as u64;
        let req = http::Request::post(format!("{base}/v1/messages"))
            .header("content-type", "application/json")
            .header("x-api-key", "soak-key")
            .header("anthropic-version", "2023-06-01")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let t0 = Instant::now();
        let resp = client.request(req).await.unwrap();
        let status = resp.status();
        let id: Option<StreamId> =
            resp.headers().get("x-ctxlog-stream").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
        let answer = resp.into_body().collect().await.unwrap().to_bytes();
        walls.push(t0.elapsed().as_secs_f64() * 1e3);
        assert!(status.is_success(), "call at message {i}: {status}: {}", String::from_utf8_lossy(&answer));
        assert!(stream.is_none() || stream == id, "the session moved at message {i}");
        stream = id;
        // What the fake received: the forwarded view; then forget it (memory).
        let forwarded = fake.requests().pop().unwrap();
        fake.reset();
        let v: Value = serde_json::from_slice(&forwarded.request.body).unwrap();
        if v["messages"][0]["content"] != t.first_user {
            without_first += 1;
        }
    }
    let calls = walls.len();
    while proxy.metrics().committed() < calls as u64 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let wall_s = started.elapsed().as_secs_f64();
    proxy.shutdown().await;
    let id = stream.unwrap();
    let (mut over, mut max_ratio, mut summaries, mut flushes, mut laddered, mut served) = (0, 0f64, 0, 0, 0, 0);
    let mut from = 1;
    loop {
        let batch = store.read(id, from, 4096).unwrap();
        let Some(last) = batch.last().map(|r| r.version) else { break };
        for r in &batch {
            match ctxlog::codec::decode(id, r.version, &r.record).unwrap() {
                Event::RequestServed(s) => {
                    served += 1;
                    over += usize::from(s.view_tokens > budget);
                    max_ratio = max_ratio.max(s.view_tokens as f64 / budget as f64);
                    laddered += usize::from(s.level > 0);
                }
                Event::SummaryPrepared(_) => summaries += 1,
                Event::Flushed(_) => flushes += 1,
                _ => {}
            }
        }
        from = last + 1;
    }
    assert_eq!(served, calls, "every call committed");
    let report = ctxlog::replay::verify(&*store, id).unwrap();
    assert!(report.problems.is_empty(), "verify: {:?}", report.problems);
    let (p50_ms, p99_ms) = (machine::quantile(&mut walls.clone(), 0.5), machine::quantile(&mut walls, 0.99));
    Outcome {
        calls,
        over,
        max_ratio,
        without_first,
        summaries,
        flushes,
        laddered,
        history_mb: bytes_sent as f64 / 1e6,
        p50_ms,
        p99_ms,
        wall_s,
    }
}

fn main() {
    let args = Args::parse();
    let budget = args.budget.unwrap_or(ctxlog::Config::default().budget);
    let seed = args.seed.unwrap_or(ctxlog_workload::DEMO_SEED);
    let t = transcript(seed, args.messages);
    println!("proxy_soak: {} messages, budget {budget}, {}", args.messages, machine::describe());
    eprintln!(
        "{} calls, the last history {:.1} MB",
        t.assistant.iter().filter(|a| **a).count(),
        t.messages.iter().map(|m| m.len() + 1).sum::<usize>() as f64 / 1e6
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let mut rows = vec![(
        "default (extractive)",
        runtime.block_on(run(&t, budget, args.max_body_mib << 20, Summaries::Extractive)),
    )];
    if !args.no_baseline {
        rows.push(("--summarizer none", runtime.block_on(run(&t, budget, args.max_body_mib << 20, Summaries::Off))));
    }
    println!(
        "| summaries | calls | over budget | max view ÷ budget | views without the first user message | \
         summaries | flushes | ladder runs | p50 / p99 ms per call | run s | requests sent (MB) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, o) in &rows {
        println!(
            "| {name} | {} | {} | {:.3} | {} | {} | {} | {} | {:.1} / {:.1} | {:.0} | {:.0} |",
            o.calls,
            o.over,
            o.max_ratio,
            o.without_first,
            o.summaries,
            o.flushes,
            o.laddered,
            o.p50_ms,
            o.p99_ms,
            o.wall_s,
            o.history_mb
        );
    }
    if let [(_, on), (_, off)] = &rows[..] {
        println!("p50 per call with summaries ÷ without: {:.2}", on.p50_ms / off.p50_ms);
    }
}
