//! Proxy benchmark (issue 13, "Measure"): an in-process [`ctxlog_fake_upstream::FakeUpstream`]
//! and [`ctxlog_proxy::serve`] on an embedded SQLite store in a temp dir.
//!
//! - **added latency**: one agent session per case (10k / 150k tokens ≈ 4 chars per token,
//!   streaming or not) that grows by one assistant + user turn per call, the whole history
//!   resent each time, a budget large enough that nothing is compacted. Each call is sent to
//!   the fake directly and then through the proxy with the same body; the time is to the last
//!   byte of the answer. Reported: p50/p99 of each, p50/p99 of the paired differences, the
//!   ratio of the p50s, and how long the commit took after the last byte (off the client's
//!   path unless the next call comes sooner). A third path, a **bare forwarder** (in this
//!   binary: it reads the body as the proxy does, sends it on with the same kind of client and
//!   streams the answer back, doing nothing else), measures what any buffering proxy costs: the
//!   second loopback hop of the body. "ctxlog's own" is the proxy's time minus the bare hop's.
//! - **throughput**: 1, 16 and 64 concurrent sessions (10k-token histories, growing), directly
//!   and through the proxy, requests/s.
//! - **memory per idle session**: N sessions each make their calls and go idle; the bytes live
//!   in this process (a counting global allocator; SQLite's own page cache is C malloc and not
//!   counted) minus a baseline taken before, ÷ N, minus the bytes of the session's view. Once
//!   with the sessions resident, once after idle shrinking, once after idle eviction.
//!
//! - **fleet** (`--only fleet`): 1 and 3 proxies, each with its own `PgStore` on one private
//!   PostgreSQL cluster, 16 sessions, each call sent to the session's proxy (sticky) or to a
//!   random one: requests/s, lease waits, catch-ups.
//!
//! `cargo run --release -p ctxlog-bench --bin proxy_bench [-- --calls 200 --sessions 50]`;
//! `-- --only latency --apis chat,responses` measures the OpenAI routes side by side;
//! `gemini` the Gemini route (`:generateContent`, `:streamGenerateContent?alt=sse`).

// A benchmark aborts on a broken fixture; there is nothing to recover.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser as _;
use ctxlog_fake_upstream::FakeUpstream;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

#[global_allocator]
static ALLOCATOR: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);

type HttpClient = Client<HttpConnector, Full<Bytes>>;

#[derive(clap::Parser)]
struct Args {
    /// Measured calls per latency case.
    #[arg(long, default_value_t = 200)]
    calls: usize,
    /// Sessions of the memory measurement.
    #[arg(long, default_value_t = 50)]
    sessions: usize,
    /// Calls per session in the throughput runs.
    #[arg(long, default_value_t = 20)]
    tp_calls: usize,
    /// Which parts: latency,reopen,throughput,memory,fleet (fleet: 1 and 3 proxies on one
    /// PostgreSQL store, sticky and random routing).
    #[arg(long, default_value = "latency,reopen,throughput,memory")]
    only: String,
    /// Sizes of the memory measurement's sessions, in tokens.
    #[arg(long, default_value = "10000,150000")]
    mem_tokens: String,
    /// Latency cases' sizes in tokens.
    #[arg(long, default_value = "10000,150000")]
    tokens: String,
    /// The APIs of the latency cases: messages (Anthropic), chat (OpenAI chat completions),
    /// responses (OpenAI Responses), gemini (Gemini generateContent).
    #[arg(long, default_value = "messages")]
    apis: String,
    /// Latency: the client moves a `cache_control` breakpoint to its last user message on every
    /// call (Anthropic's documented multi-turn caching), so the previous one comes back
    /// respelled and is recognized by its canonical form.
    #[arg(long)]
    moving_breakpoint: bool,
}

/// The route a latency case calls.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Messages,
    Chat,
    Responses,
    Gemini,
}

impl Api {
    fn parse(s: &str) -> Api {
        match s.trim() {
            "messages" => Api::Messages,
            "chat" => Api::Chat,
            "responses" => Api::Responses,
            "gemini" => Api::Gemini,
            other => panic!("--apis: unknown API {other:?} (messages, chat, responses, gemini)"),
        }
    }

    fn path(self) -> &'static str {
        match self {
            Api::Messages => "/v1/messages",
            Api::Chat => "/v1/chat/completions",
            Api::Responses => "/v1/responses",
            Api::Gemini => "/v1beta/models/gemini-2.5-flash:generateContent",
        }
    }

    /// The path of one call (Gemini streams by method, not by a body field).
    fn path_of(self, stream: bool) -> &'static str {
        match (self, stream) {
            (Api::Gemini, true) => "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            (api, _) => api.path(),
        }
    }
}

/// A budget no case reaches: nothing is compacted.
const BUDGET: u64 = 2_000_000;

fn main() {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!("proxy_bench: {} UTC, {} cores", now_utc(), std::thread::available_parallelism().map_or(0, |n| n.get()));
    if args.only.contains("latency") {
        println!("\n## Added latency (time to the last byte; {} calls per case, after 5 warm-up calls)", args.calls);
        println!(
            "| api | tokens | stream | direct p50 | direct p99 | proxy p50 | proxy p99 | added p50 | added p99 | proxy/direct p50 | commit p50 | bare hop p50 | ctxlog's own p50 |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for api in args.apis.split(',').map(Api::parse) {
            for tokens in args.tokens.split(',').map(|t| t.trim().parse::<usize>().unwrap()) {
                for stream in [false, true] {
                    rt.block_on(latency(api, tokens, stream, args.calls, args.moving_breakpoint));
                }
            }
        }
    }
    if args.only.contains("reopen") {
        println!("\n## A call after the idle shrink (the session reopened from the store's snapshot), 20 calls");
        println!("| tokens | direct p50 | proxy p50 | added p50 | added p99 |");
        println!("|---|---|---|---|---|");
        for tokens in args.tokens.split(',').map(|t| t.trim().parse::<usize>().unwrap()) {
            rt.block_on(reopen(tokens));
        }
    }
    if args.only.contains("throughput") {
        println!("\n## Requests/s, 10k-token sessions growing by a turn per call, {} calls each", args.tp_calls);
        println!("| sessions | direct req/s | proxy req/s | proxy/direct |");
        println!("|---|---|---|---|");
        for n in [1, 16, 64] {
            rt.block_on(throughput(n, args.tp_calls));
        }
    }
    if args.only.contains("fleet") {
        let cluster = ctxlog_store_postgres::test_support::Cluster::start_with(
            ctxlog_store_postgres::test_support::ClusterOptions {
                fsync: true,
                max_connections: 200,
                ..Default::default()
            },
        )
        .unwrap();
        println!(
            "\n## A fleet on one PostgreSQL store (private cluster, fsync on): {} sessions x {} calls, 10k-token histories",
            16, args.tp_calls
        );
        println!("| proxies | routing | req/s | vs 1 proxy | lease waits | catch-ups |");
        println!("|---|---|---|---|---|---|");
        let mut one = 0.0;
        for (proxies, random) in [(1, false), (3, false), (3, true)] {
            let r = rt.block_on(fleet(&cluster.url(), proxies, random, 16, args.tp_calls));
            if proxies == 1 {
                one = r.0;
            }
            let routing = if random { "random" } else { "sticky" };
            println!("| {proxies} | {routing} | {:.0} | {:.2} | {} | {} |", r.0, r.0 / one, r.1, r.2);
        }
    }
    if args.only.contains("memory") {
        println!("\n## Memory per idle session beyond its view ({} sessions, 10 calls each)", args.sessions);
        println!("| tokens | state | live bytes / session | view bytes | beyond the view |");
        println!("|---|---|---|---|---|");
        for tokens in args.mem_tokens.split(',').map(|t| t.trim().parse::<usize>().unwrap()) {
            for phase in [Phase::Resident, Phase::Shrunk, Phase::Evicted] {
                rt.block_on(memory(phase, args.sessions, tokens));
            }
        }
    }
}

fn now_utc() -> String {
    let s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let (d, r) = (s / 86_400, s % 86_400);
    format!("day {d} since 1970, {:02}:{:02}", r / 3600, (r % 3600) / 60)
}

struct Rig {
    fake: FakeUpstream,
    bare: std::net::SocketAddr,
    proxy: ctxlog_proxy::ProxyHandle,
    client: HttpClient,
    _dir: tempfile::TempDir,
}

async fn rig(tune: impl FnOnce(&mut ctxlog_proxy::ProxyConfig)) -> Rig {
    let fake = FakeUpstream::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ctxlog::Store> =
        Arc::new(ctxlog_store_sqlite::SqliteStore::open(dir.path().join("log.sqlite")).unwrap());
    let mut cfg = ctxlog_proxy::ProxyConfig::new("127.0.0.1:0".parse().unwrap(), &fake.url());
    cfg.engine.budget = BUDGET;
    tune(&mut cfg);
    let proxy = ctxlog_proxy::serve(cfg, store).await.unwrap();
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(128).build(conn);
    let bare = bare_forwarder(fake.url(), client.clone()).await;
    Rig { fake, bare, proxy, client, _dir: dir }
}

/// A proxy that does nothing but forward: the body read whole (as ctxlog's proxy reads it),
/// sent upstream, the answer streamed back. Its cost over a direct call is the second hop.
async fn bare_forwarder(upstream: String, client: HttpClient) -> std::net::SocketAddr {
    use hyper::body::Incoming;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            tcp.set_nodelay(true).unwrap();
            let (client, upstream) = (client.clone(), upstream.clone());
            let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                let (client, upstream) = (client.clone(), upstream.clone());
                async move {
                    let (parts, body) = req.into_parts();
                    let bytes = body.collect().await?.to_bytes();
                    // The query too: Gemini streams by `?alt=sse`.
                    let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                    let mut up = http::Request::post(format!("{upstream}{pq}"));
                    for (k, v) in &parts.headers {
                        if k != http::header::HOST && k != http::header::CONTENT_LENGTH {
                            up = up.header(k, v);
                        }
                    }
                    let resp = client.request(up.body(Full::new(bytes)).unwrap()).await.unwrap();
                    Ok::<_, hyper::Error>(resp)
                }
            });
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(tcp);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
            });
        }
    });
    addr
}

/// Deterministic filler text of `n` chars (words, no escapes needed).
fn text(seed: usize, n: usize) -> String {
    const WORDS: [&str; 8] = ["alpha", "bravo", "delta", "kilo", "lima", "oscar", "tango", "zulu"];
    let mut s = String::with_capacity(n + 8);
    let mut i = seed;
    while s.len() < n {
        s.push_str(WORDS[i % WORDS.len()]);
        s.push(' ');
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    s.truncate(n);
    s
}

/// An agent's history: a system prompt, then user/assistant turns, as an Anthropic body.
struct History {
    system: String,
    messages: Vec<String>,
    /// The last message carries a breakpoint (as a one-block content), moved every turn.
    moving: bool,
}

impl History {
    /// About `chars` of history in turns of ~2,000 chars.
    fn new(seed: usize, chars: usize) -> Self {
        let system = text(seed, 1_000);
        let mut messages = Vec::new();
        let mut total = system.len();
        let mut i = 0;
        while total < chars || messages.len() % 2 == 0 {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            let t = text(seed + i, 2_000);
            total += t.len() + 30;
            messages.push(format!(r#"{{"role":"{role}","content":"{t}"}}"#));
            i += 1;
        }
        History { system, messages, moving: false }
    }

    /// One more turn: the assistant's answer to the last call and the next user message.
    fn turn(&mut self, i: usize) {
        self.messages.push(format!(r#"{{"role":"assistant","content":"ack {i}: {}"}}"#, text(i, 40)));
        self.messages.push(format!(r#"{{"role":"user","content":"next {i}: {}"}}"#, text(i + 1, 40)));
    }

    fn body(&self, stream: bool) -> Bytes {
        self.body_for(Api::Messages, stream)
    }

    /// The body of `api`: Anthropic's `system` and `messages`; chat's system message first
    /// (and the usage chunk asked for); Responses' `instructions` and `input` (its messages
    /// are `{"role","content"}` items).
    fn body_for(&self, api: Api, stream: bool) -> Bytes {
        if api == Api::Gemini {
            // Gemini streams by its path (`post_to`), not by a body field.
            return self.gemini_body();
        }
        let mut b = String::with_capacity(self.messages.iter().map(|m| m.len() + 1).sum::<usize>() + 2_000);
        match api {
            Api::Messages => b.push_str(r#"{"model":"claude-bench","max_tokens":1024,"#),
            Api::Chat | Api::Responses | Api::Gemini => b.push_str(r#"{"model":"gpt-bench","#),
        }
        if stream {
            b.push_str(r#""stream":true,"#);
            if api == Api::Chat {
                b.push_str(r#""stream_options":{"include_usage":true},"#);
            }
        }
        let mut first = true;
        match api {
            Api::Messages => {
                b.push_str(r#""system":""#);
                b.push_str(&self.system);
                b.push_str(r#"","messages":["#);
            }
            Api::Chat => {
                b.push_str(r#""messages":[{"role":"system","content":""#);
                b.push_str(&self.system);
                b.push_str(r#""}"#);
                first = false;
            }
            Api::Responses | Api::Gemini => {
                b.push_str(r#""instructions":""#);
                b.push_str(&self.system);
                b.push_str(r#"","input":["#);
            }
        }
        for (i, m) in self.messages.iter().enumerate() {
            if !first {
                b.push(',');
            }
            first = false;
            // A moving breakpoint is an Anthropic pattern: only the Messages body carries it.
            match m.strip_suffix("\"}").and_then(|m| m.split_once(r#""content":""#)) {
                Some((head, text)) if api == Api::Messages && self.moving && i + 1 == self.messages.len() => {
                    b.push_str(head);
                    b.push_str(r#""content":[{"type":"text","text":""#);
                    b.push_str(text);
                    b.push_str(r#"","cache_control":{"type":"ephemeral"}}]}"#);
                }
                _ => b.push_str(m),
            }
        }
        b.push_str("]}");
        Bytes::from(b)
    }
}

impl History {
    /// Gemini's `systemInstruction` and `contents` (assistant turns as `model` ones).
    fn gemini_body(&self) -> Bytes {
        let contents: Vec<serde_json::Value> = self
            .messages
            .iter()
            .map(|m| {
                let v: serde_json::Value = serde_json::from_str(m).unwrap();
                let role = if v["role"] == "assistant" { "model" } else { "user" };
                serde_json::json!({"role": role, "parts": [{"text": v["content"]}]})
            })
            .collect();
        let body = serde_json::json!({"systemInstruction": {"parts": [{"text": self.system}]}, "contents": contents,
            "generationConfig": {"maxOutputTokens": 1024}});
        Bytes::from(body.to_string())
    }
}

/// POSTs `body` to `base` and reads the answer to its last byte; returns the elapsed time.
async fn post(client: &HttpClient, base: &str, session: &str, body: Bytes) -> Duration {
    post_to(client, base, Api::Messages, false, session, body).await
}

/// [`post`] to the route of `api`, with its credential header.
async fn post_to(client: &HttpClient, base: &str, api: Api, stream: bool, session: &str, body: Bytes) -> Duration {
    let req = http::Request::post(format!("{base}{}", api.path_of(stream))).header("content-type", "application/json");
    let req = match api {
        Api::Messages => req.header("x-api-key", "bench-key").header("anthropic-version", "2023-06-01"),
        Api::Chat | Api::Responses => req.header("authorization", "Bearer bench-key"),
        Api::Gemini => req.header("x-goog-api-key", "bench-key"),
    };
    let req = req.header("x-ctxlog-session", session).body(Full::new(body)).unwrap();
    let t = Instant::now();
    let resp = client.request(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let d = t.elapsed();
    assert!(status.is_success(), "{status}: {}", String::from_utf8_lossy(&bytes));
    d
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[((s.len() - 1) as f64 * p).round() as usize]
}

fn ms(x: f64) -> String {
    format!("{x:.3} ms")
}

async fn wait_committed(proxy: &ctxlog_proxy::ProxyHandle, n: u64) {
    while proxy.metrics().committed() < n {
        tokio::task::yield_now().await;
    }
}

async fn latency(api: Api, tokens: usize, stream: bool, calls: usize, moving: bool) {
    let r = rig(|_| {}).await;
    if api != Api::Messages {
        // The strict fake's OpenAI window is 128k; 150k-token cases stand for a 1M-token model.
        r.fake.set_context_tokens(Some(1_000_000));
    }
    // Centre the measured calls on the nominal size: each turn adds ~2×60 chars.
    let growth = (calls + 5) * 2 * 110;
    let mut h = History::new(tokens, (tokens * 4).saturating_sub(growth / 2));
    h.moving = moving;
    let session = format!("lat-{tokens}-{stream}");
    let name = if api == Api::Gemini { "gemini" } else { api.path().trim_start_matches("/v1/") };
    let (proxy_url, direct_url) = (format!("http://{}", r.proxy.addr()), r.fake.url());
    let (mut direct, mut through, mut added, mut commit) = (vec![], vec![], vec![], vec![]);
    let (bare_url, mut bare, mut own) = (format!("http://{}", r.bare), vec![], vec![]);
    let mut sizes = (usize::MAX, 0);
    let mut committed = 0;
    for i in 0..calls + 5 {
        if i % 10 == 0 {
            r.fake.reset(); // its record keeps every body
        }
        let body = h.body_for(api, stream);
        sizes = (sizes.0.min(body.len()), sizes.1.max(body.len()));
        let d = post_to(&r.client, &direct_url, api, stream, &session, body.clone()).await;
        let b = post_to(&r.client, &bare_url, api, stream, &session, body.clone()).await;
        let p = post_to(&r.client, &proxy_url, api, stream, &session, body).await;
        let t = Instant::now();
        committed += 1;
        wait_committed(&r.proxy, committed).await;
        let c = t.elapsed();
        if i >= 5 {
            let (d, b, p) = (d.as_secs_f64() * 1e3, b.as_secs_f64() * 1e3, p.as_secs_f64() * 1e3);
            direct.push(d);
            through.push(p);
            added.push(p - d);
            bare.push(b - d);
            own.push(p - b);
            commit.push(c.as_secs_f64() * 1e3);
        }
        h.turn(i);
    }
    assert_eq!(r.proxy.metrics().compactions(), 0, "the budget is meant to prevent compaction");
    println!(
        "| {name} | {}k ({}–{} KB) | {} | {} | {} | {} | {} | {} | {} | {:.2} | {} | {} | {} |",
        tokens / 1000,
        sizes.0 / 1000,
        sizes.1 / 1000,
        if stream { "yes" } else { "no" },
        ms(pct(&direct, 0.5)),
        ms(pct(&direct, 0.99)),
        ms(pct(&through, 0.5)),
        ms(pct(&through, 0.99)),
        ms(pct(&added, 0.5)),
        ms(pct(&added, 0.99)),
        pct(&through, 0.5) / pct(&direct, 0.5),
        ms(pct(&commit, 0.5)),
        ms(pct(&bare, 0.5)),
        ms(pct(&own, 0.5)),
    );
    r.proxy.shutdown().await;
    r.fake.shutdown();
}

async fn reopen(tokens: usize) {
    let r = rig(|c| c.idle_shrink = Duration::from_millis(100)).await;
    let mut h = History::new(tokens + 1, tokens * 4);
    let session = format!("reopen-{tokens}");
    let (proxy_url, direct_url) = (format!("http://{}", r.proxy.addr()), r.fake.url());
    let (mut direct, mut through, mut added) = (vec![], vec![], vec![]);
    for i in 0..22 {
        r.fake.reset();
        let body = h.body(false);
        let d = post(&r.client, &direct_url, &session, body.clone()).await;
        let p = post(&r.client, &proxy_url, &session, body).await;
        wait_committed(&r.proxy, i + 1).await;
        if i >= 2 {
            let (d, p) = (d.as_secs_f64() * 1e3, p.as_secs_f64() * 1e3);
            direct.push(d);
            through.push(p);
            added.push(p - d);
        }
        h.turn(i as usize);
        tokio::time::sleep(Duration::from_millis(300)).await; // shrunk by now
    }
    println!(
        "| {}k | {} | {} | {} | {} |",
        tokens / 1000,
        ms(pct(&direct, 0.5)),
        ms(pct(&through, 0.5)),
        ms(pct(&added, 0.5)),
        ms(pct(&added, 0.99))
    );
    r.proxy.shutdown().await;
    r.fake.shutdown();
}

async fn throughput(sessions: usize, calls: usize) {
    let r = rig(|_| {}).await;
    let mut rates = Vec::new();
    for through in [false, true] {
        let base = if through { format!("http://{}", r.proxy.addr()) } else { r.fake.url() };
        let t = Instant::now();
        let mut tasks = Vec::new();
        for s in 0..sessions {
            let (client, base) = (r.client.clone(), base.clone());
            tasks.push(tokio::spawn(async move {
                let mut h = History::new(s, 40_000);
                let session = format!("tp-{sessions}-{s}");
                for i in 0..calls {
                    post(&client, &base, &session, h.body(false)).await;
                    h.turn(i);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        rates.push((sessions * calls) as f64 / t.elapsed().as_secs_f64());
        r.fake.reset();
    }
    println!("| {sessions} | {:.0} | {:.0} | {:.2} |", rates[0], rates[1], rates[1] / rates[0]);
    r.proxy.shutdown().await;
    r.fake.shutdown();
}

/// `proxies` proxies, each with its own `PgStore` (as separate processes would have: its own
/// pool and lease connection), `sessions` sessions of `calls` calls each, every call sent to
/// the session's own proxy (sticky) or a random one. Returns requests/s, lease waits and
/// catch-ups summed over the proxies.
async fn fleet(url: &str, proxies: usize, random: bool, sessions: usize, calls: usize) -> (f64, u64, u64) {
    let fake = FakeUpstream::start().unwrap();
    let mut handles = Vec::new();
    for _ in 0..proxies {
        let u = url.to_owned();
        let store: Arc<dyn ctxlog::Store> = Arc::new(
            tokio::task::spawn_blocking(move || ctxlog_store_postgres::PgStore::open(&u).unwrap()).await.unwrap(),
        );
        let mut cfg = ctxlog_proxy::ProxyConfig::new("127.0.0.1:0".parse().unwrap(), &fake.url());
        cfg.engine.budget = BUDGET;
        handles.push(ctxlog_proxy::serve(cfg, store).await.unwrap());
    }
    let bases: Arc<Vec<String>> = Arc::new(handles.iter().map(|h| format!("http://{}", h.addr())).collect());
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    let client: HttpClient = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(128).build(conn);
    let t = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..sessions {
        let (client, bases) = (client.clone(), Arc::clone(&bases));
        tasks.push(tokio::spawn(async move {
            let mut h = History::new(s, 40_000);
            let session = format!("fleet-{}-{random}-{s}", bases.len());
            let mut rng = 0x9e37_79b9_u32 ^ (s as u32 + 1).wrapping_mul(0x85eb_ca6b);
            for i in 0..calls {
                rng ^= rng << 13;
                rng ^= rng >> 17;
                rng ^= rng << 5;
                let at = if random { rng as usize % bases.len() } else { s % bases.len() };
                post(&client, &bases[at], &session, h.body(false)).await;
                h.turn(i);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let rate = (sessions * calls) as f64 / t.elapsed().as_secs_f64();
    let waits = handles.iter().map(|h| h.metrics().lease_waits()).sum();
    let catch_ups = handles.iter().map(|h| h.metrics().catch_ups()).sum();
    for h in handles {
        h.shutdown().await;
    }
    fake.shutdown();
    (rate, waits, catch_ups)
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Resident,
    Shrunk,
    Evicted,
}

async fn memory(phase: Phase, sessions: usize, tokens: usize) {
    let r = rig(|c| match phase {
        Phase::Resident => {}
        Phase::Shrunk => c.idle_shrink = Duration::from_millis(400),
        Phase::Evicted => c.idle_evict = Duration::from_millis(400),
    })
    .await;
    let proxy_url = format!("http://{}", r.proxy.addr());
    // Warm the connection pool and the runtime before the baseline.
    let mut warm = History::new(999, 4_000);
    for i in 0..3 {
        post(&r.client, &proxy_url, "warm-up", warm.body(false)).await;
        warm.turn(i);
    }
    wait_committed(&r.proxy, 3).await;
    r.fake.reset();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let baseline = ALLOCATOR.allocated();
    let mut view = 0;
    let mut n = 3;
    for s in 0..sessions {
        let mut h = History::new(s, tokens * 4);
        let session = format!("mem-{s}");
        for i in 0..10 {
            let body = h.body(false);
            view = body.len();
            post(&r.client, &proxy_url, &session, body).await;
            h.turn(i);
        }
        n += 10;
        wait_committed(&r.proxy, n).await;
    }
    r.fake.reset();
    if phase != Phase::Resident {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
    }
    let live = ALLOCATOR.allocated().saturating_sub(baseline) as f64 / sessions as f64;
    let name = match phase {
        Phase::Resident => "resident (idle, before any idle rule)",
        Phase::Shrunk => "shrunk (idle_shrink 0.4 s passed)",
        Phase::Evicted => "evicted (idle_evict 0.4 s passed)",
    };
    let resident = r.proxy.metrics().sessions_in_memory();
    println!(
        "| {}k | {name}; {resident} slots at the last sweep | {:.0} KiB | {:.0} KiB | {:.1} KiB |",
        tokens / 1000,
        live / 1024.0,
        view as f64 / 1024.0,
        (live - view as f64) / 1024.0
    );
    r.proxy.shutdown().await;
    r.fake.shutdown();
}
