//! Prompt-cache breakpoints through the proxy against the strict fake (issue 20, item 3), and
//! what the proxy answers for the view: `count_tokens` and per-model budgets (item 5).
//!
//! The fake caches as Anthropic documents: only up to `cache_control` breakpoints, from 1,024
//! tokens, for their TTL, looking 20 blocks back; more than 4 breakpoints is a 400. So a cache
//! read it bills is one the real API would bill, and each test compares the usage the log
//! recorded with the usage the fake sent.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use bytes::Bytes;
use ctxlog::{Event, MemoryStore, RequestOptions, Store, StreamId};
use ctxlog_fake_upstream::{Exchange, FakeUpstream};
use ctxlog_proxy::CacheBreakpoints;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

mod support;
use support::{calls, events, proxy_on, served, KEY};

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    fn stream(&self) -> StreamId {
        self.header("x-ctxlog-stream").unwrap().parse().unwrap()
    }
    fn call(&self) -> u64 {
        self.header("x-ctxlog-call").unwrap().parse().unwrap()
    }
    fn request_id(&self) -> &str {
        self.header("request-id").unwrap()
    }
}

async fn post(addr: std::net::SocketAddr, path: &str, body: &Value) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let (parts, b) = resp.into_parts();
    Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: b.collect().await.unwrap().to_bytes().to_vec(),
    }
}

/// The fake's exchange that answered `a` (the request id it set, passed back by the proxy).
fn exchange_of(up: &FakeUpstream, a: &Answer) -> Exchange {
    let id = a.request_id().to_owned();
    let seq: u64 = id.strip_prefix("req_fake_").unwrap().parse().unwrap();
    up.requests().into_iter().find(|x| x.seq == seq).unwrap()
}

/// Every `cache_control` in a request body where Anthropic counts them: tools, system blocks,
/// message blocks and tool results' inner blocks.
fn breakpoints(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut look = |where_: String, b: &Value| {
        if let Some(c) = b.get("cache_control") {
            out.push(format!("{where_} {}", c.get("ttl").and_then(Value::as_str).unwrap_or("5m")));
        }
    };
    for (i, t) in body["tools"].as_array().into_iter().flatten().enumerate() {
        look(format!("tools.{i}"), t);
    }
    for (i, b) in body["system"].as_array().into_iter().flatten().enumerate() {
        look(format!("system.{i}"), b);
    }
    for (i, m) in body["messages"].as_array().into_iter().flatten().enumerate() {
        for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
            look(format!("messages.{i}.{j}"), b);
            for (k, inner) in b["content"].as_array().into_iter().flatten().enumerate() {
                look(format!("messages.{i}.{j}.{k}"), inner);
            }
        }
    }
    out
}

/// The request the fake received equals the one `ctxlog request --call N` rebuilds from the log.
fn check_rebuilt(store: &dyn Store, a: &Answer, x: &Exchange) {
    let opts = RequestOptions::from_client_body(&x.request.body).unwrap();
    let rebuilt = ctxlog::replay::served_request(store, a.stream(), a.call(), &opts).unwrap();
    assert_eq!(
        String::from_utf8_lossy(rebuilt.body()),
        String::from_utf8_lossy(&x.request.body),
        "call {} of {}: the forwarded body is not the one the log rebuilds",
        a.call(),
        a.stream()
    );
}

/// Usage the fake billed in a JSON answer: (uncached input, cache read, cache write).
fn billed(x: &Exchange) -> (u64, u64, u64) {
    let v: Value = serde_json::from_slice(&x.response.body()).unwrap();
    let u = &v["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    (n("input_tokens"), n("cache_read_input_tokens"), n("cache_creation_input_tokens"))
}

/// A turn of prose, different every time.
fn prose(i: usize, words: usize) -> String {
    (0..words).map(|w| format!("t{i}w{}", (w * 7919 + i * 104_729) % 1_000_003)).collect::<Vec<_>>().join(" ")
}

const SYSTEM: &str = "You are the build engineer of the ledger service. ";

/// Anthropic's documented multi-turn pattern: the breakpoint moves to the last user message
/// each turn (here with a 1-hour TTL), and the system prompt carries one too. Over 30 calls on
/// a small budget (compacting), every forwarded request carries exactly this request's two
/// breakpoints — on the system prompt and on the last message, TTLs kept — never an old one;
/// the strict fake accepts all, and each forwarded body is the one the log rebuilds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moving_breakpoint_is_mapped_onto_the_view_on_every_compacting_call() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.engine.budget = 3_000).await;
    let system = json!([{"type": "text", "text": SYSTEM.repeat(40), "cache_control": {"type": "ephemeral"}}]);
    let mut history: Vec<Value> = Vec::new();
    let mut compacting = 0;
    for i in 0..30 {
        // The previous user message loses its mark; the new one gets it.
        for m in history.iter_mut().filter(|m| m["role"] == "user") {
            if let Some(blocks) = m["content"].as_array_mut() {
                blocks.iter_mut().for_each(|b| {
                    b.as_object_mut().map(|o| o.remove("cache_control"));
                });
            }
        }
        history.push(json!({"role": "user", "content": [
            {"type": "text", "text": format!("Step {i}: {}", prose(i, 120)), "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}));
        let body = json!({"model": "claude-test", "max_tokens": 64, "system": system, "messages": history});
        let a = post(p.addr(), "/v1/messages", &body).await;
        assert_eq!(a.status, 200, "call {i}: {}", String::from_utf8_lossy(&a.body));
        assert_eq!(a.header("x-ctxlog-breakpoints"), Some("2 client"), "call {i}");
        let x = exchange_of(&up, &a);
        let sent: Value = serde_json::from_slice(&x.request.body).unwrap();
        let last = sent["messages"].as_array().unwrap().len() - 1;
        assert_eq!(breakpoints(&sent), ["system.0 5m".to_owned(), format!("messages.{last}.0 1h")], "call {i}");
        check_rebuilt(&*store, &a, &x);
        calls(&*store, a.stream(), a.call() as usize + 1).await;
        let evs = events(&*store, a.stream());
        let s = served(&evs).into_iter().find(|s| s.call == a.call()).unwrap();
        // Compacted: the view is not the client's whole history (its system and messages).
        compacting += usize::from(s.view_messages < history.len() as u64 + 1);
        let placement = s.request.as_ref().and_then(|r| r.placement.clone()).unwrap();
        assert_eq!(placement.origin, ctxlog::internal::breakpoints::Origin::Client);
        history.push(json!({"role": "assistant", "content": a.json()["content"].clone()}));
    }
    p.shutdown().await;
    assert!(compacting >= 20, "only {compacting} calls compacted: the test proves little");
}

/// A client that sets no breakpoint (LangChain's `ChatAnthropic`, the Node SDK): with the
/// default `auto`, the proxy places its own on the system prompt and on the view's stable
/// prefix, so the strict fake bills cache reads from the second call on, on every call after
/// compactions too; the usage the log records is what the fake billed, call by call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_breakpoints_gets_cache_reads_billed_from_its_second_call() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.engine.budget = 12_000).await;
    let system = SYSTEM.repeat(120); // ~1,500 tokens: over the minimum cacheable length
    let mut history: Vec<Value> = Vec::new();
    let (mut reads, mut flushed, mut id) = (0, 0, None);
    for i in 0..24 {
        // String contents, as LangChain's `ChatAnthropic` sends a human turn.
        history.push(json!({"role": "user", "content": format!("Step {i}: {}", prose(i, 300))}));
        let body = json!({"model": "claude-test", "max_tokens": 64, "system": system, "messages": history});
        let a = post(p.addr(), "/v1/messages", &body).await;
        assert_eq!(a.status, 200, "call {i}: {}", String::from_utf8_lossy(&a.body));
        assert_eq!(*id.get_or_insert(a.stream()), a.stream(), "one session");
        let x = exchange_of(&up, &a);
        let sent: Value = serde_json::from_slice(&x.request.body).unwrap();
        let marks = breakpoints(&sent);
        assert!((2..=3).contains(&marks.len()) && marks[0] == "system.0 5m", "call {i}: {marks:?}");
        assert_eq!(a.header("x-ctxlog-breakpoints"), Some(format!("{} auto", marks.len()).as_str()));
        check_rebuilt(&*store, &a, &x);
        let (_, read, _) = billed(&x);
        if i > 0 {
            assert!(read > 0, "call {i}: no cache read billed");
            reads += 1;
        }
        history.push(json!({"role": "assistant", "content": a.json()["content"].clone()}));
    }
    let evs = calls(&*store, id.unwrap(), 24).await;
    p.shutdown().await;
    // The log's cache figures are the fake's bill, call by call.
    let bills: Vec<(u64, u64, u64)> = up.requests().iter().map(billed).collect();
    let logged: Vec<(u64, u64, u64)> =
        served(&evs).iter().map(|s| s.usage.map(|u| (u.input, u.cache_read, u.cache_write)).unwrap()).collect();
    assert_eq!(logged, bills);
    flushed += evs.iter().filter(|e| matches!(e, Event::Flushed(_))).count();
    let laddered = served(&evs).iter().filter(|s| s.level > 0).count();
    assert!(flushed + laddered >= 3, "{flushed} flushes, {laddered} ladder passes: no compaction to cache across");
    assert_eq!(reads, 23);
}

/// `off` forwards no breakpoint at all (the client's are dropped), and the fake bills no
/// cache; `client` forwards the client's only (none here), so no cache either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_strips_every_breakpoint_and_client_places_none_of_its_own() {
    for (mode, marked, header) in
        [(CacheBreakpoints::Off, true, "0 off"), (CacheBreakpoints::Client, false, "0 client")]
    {
        let up = FakeUpstream::start().unwrap();
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.cache_breakpoints = mode).await;
        let mut history: Vec<Value> = Vec::new();
        for i in 0..3 {
            let mut block = json!({"type": "text", "text": prose(i, 900)});
            if marked {
                block["cache_control"] = json!({"type": "ephemeral"});
            }
            history.push(json!({"role": "user", "content": [block]}));
            let a =
                post(p.addr(), "/v1/messages", &json!({"model": "claude-test", "max_tokens": 64, "messages": history}))
                    .await;
            assert_eq!(a.status, 200);
            assert_eq!(a.header("x-ctxlog-breakpoints"), Some(header), "{mode:?}");
            let x = exchange_of(&up, &a);
            assert!(breakpoints(&serde_json::from_slice(&x.request.body).unwrap()).is_empty(), "{mode:?}");
            assert_eq!(billed(&x).1 + billed(&x).2, 0, "{mode:?}: cache billed without a breakpoint");
            check_rebuilt(&*store, &a, &x);
            history.push(json!({"role": "assistant", "content": a.json()["content"].clone()}));
        }
        p.shutdown().await;
    }
}

/// `count_tokens` counts the view the next call will send: the upstream's count of exactly the
/// `system` and `messages` that call then forwards, below the count of the client's whole
/// history once the session compacts; nothing is written. A history ctxlog does not know is
/// counted as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_counts_the_view_the_next_call_sends_and_writes_nothing() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.engine.budget = 3_000).await;
    let mut history: Vec<Value> = Vec::new();
    let mut id = None;
    for i in 0..12 {
        history.push(json!({"role": "user", "content": format!("Step {i}: {}", prose(i, 120))}));
        let a = post(
            p.addr(),
            "/v1/messages",
            &json!({"model": "claude-test", "max_tokens": 64, "system": SYSTEM, "messages": history}),
        )
        .await;
        assert_eq!(a.status, 200);
        id = Some(a.stream());
        history.push(json!({"role": "assistant", "content": a.json()["content"].clone()}));
    }
    let id = id.unwrap();
    calls(&*store, id, 12).await;
    history.push(json!({"role": "user", "content": "And now the summary, please."}));
    let ask = json!({"model": "claude-test", "system": SYSTEM, "messages": history});
    let c = post(p.addr(), "/v1/messages/count_tokens", &ask).await;
    assert_eq!(c.status, 200, "{}", String::from_utf8_lossy(&c.body));
    assert_eq!(c.header("x-ctxlog-counted"), Some("view"));
    // The count waited for the last call's summaries (it takes the session's slot): from now on
    // nothing writes, and a second count changes nothing either.
    let head = store.head(id).unwrap();
    let again = post(p.addr(), "/v1/messages/count_tokens", &ask).await;
    assert_eq!((again.status, again.json()), (200, c.json()));
    assert_eq!(store.head(id).unwrap(), head, "count_tokens wrote to the session");
    let counted: Value = serde_json::from_slice(&up.requests().last().unwrap().request.body).unwrap();
    assert_eq!(counted["system"], json!(SYSTEM));
    assert!(counted.get("max_tokens").is_none() && counted["model"] == "claude-test");
    let n = c.json()["input_tokens"].as_u64().unwrap();
    let whole = (serde_json::to_vec(&ask).unwrap().len() as u64).div_ceil(4);
    assert!(n < whole, "counted {n} tokens, the whole history is {whole}: the view was not counted");
    // The next call sends what was counted.
    let mut call = ask.clone();
    call["max_tokens"] = json!(64);
    let a = post(p.addr(), "/v1/messages", &call).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.stream(), id);
    let sent: Value = serde_json::from_slice(&exchange_of(&up, &a).request.body).unwrap();
    // Compared without the breakpoints the call carries (`count_tokens` sends none), a string
    // content as the one text block it is to the API (a marked string is written as one).
    let norm = |v: &Value| {
        let mut v = v.clone();
        if let Some(s) = v["system"].as_str() {
            v["system"] = json!([{"type": "text", "text": s}]);
        }
        for m in v["messages"].as_array_mut().unwrap() {
            if let Some(s) = m["content"].as_str() {
                m["content"] = json!([{"type": "text", "text": s}]);
            }
        }
        let unmark = |blocks: &mut Value| {
            for b in blocks.as_array_mut().into_iter().flatten() {
                b.as_object_mut().map(|o| o.remove("cache_control"));
            }
        };
        unmark(&mut v["system"]);
        v["messages"].as_array_mut().unwrap().iter_mut().for_each(|m| unmark(&mut m["content"]));
        (v["system"].clone(), v["messages"].clone())
    };
    assert_eq!(norm(&sent), norm(&counted), "the next call did not send what was counted");
    // An unknown conversation is counted as it is.
    let other = json!({"model": "claude-test", "messages": [{"role": "user", "content": "a new conversation"}]});
    let c = post(p.addr(), "/v1/messages/count_tokens", &other).await;
    assert_eq!(c.status, 200);
    assert_eq!(c.header("x-ctxlog-counted"), Some("request"));
    assert_eq!(up.requests().last().unwrap().request.body, serde_json::to_vec(&other).unwrap());
    p.shutdown().await;
}

/// With the models table (what `ctxlog proxy` uses when `--budget` is not given) a session gets
/// its model's window less the output its request reserves; a model not in the table, or a
/// proxy without the table (`--budget`), gets the configured budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_budget_is_its_models_window_unless_the_budget_is_fixed() {
    let up = FakeUpstream::start().unwrap();
    for (table, model, budget) in [
        (true, "claude-sonnet-4-5-20250929", 200_000 - 1_000),
        (true, "gpt-4o-mini", 128_000 - 1_000),
        (true, "my-own-model", 7_777),
        (false, "claude-sonnet-4-5-20250929", 7_777),
    ] {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
            c.engine.budget = 7_777;
            c.models = table.then(ctxlog_proxy::Models::default);
        })
        .await;
        let a = post(
            p.addr(),
            "/v1/messages",
            &json!({"model": model, "max_tokens": 1_000, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
        assert_eq!(a.status, 200);
        let evs = calls(&*store, a.stream(), 1).await;
        let Some(Event::SessionStarted(s)) = evs.first() else { panic!("no SessionStarted") };
        assert_eq!(s.config.budget, budget, "{model}, table {table}");
        p.shutdown().await;
    }
}
