//! A client's own Anthropic `context_management` through the proxy, against the strict fake
//! (issue 23 item 2): `--provider-context-management pass` forwards it and its beta as they
//! came (the fake applies it and reports `applied_edits`); `apply` reads it as each call's knobs,
//! leaves it and its beta out of the forwarded request (the fake would refuse the field without
//! its beta, as the API does), and answers with the provider's `applied_edits` shape, JSON and
//! stream. Either way `x-ctxlog-context-management` says what was done and the log holds a
//! `ClientContextManagement` guard.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::sync::Arc;

use bytes::Bytes;
use ctxlog::event::{EditKind, GuardKind};
use ctxlog::{Event, MemoryStore, Store, StreamId};
use ctxlog_fake_upstream::strict::sign;
use ctxlog_fake_upstream::FakeUpstream;
use ctxlog_proxy::{ProviderContextManagement, Summaries};
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

mod support;
use support::{calls, events, proxy_on, KEY};

const BETA: &str = "context-management-2025-06-27";

struct Answer {
    status: u16,
    stream: Option<StreamId>,
    told: Option<String>,
    body: Vec<u8>,
}

async fn post(addr: std::net::SocketAddr, body: &Value, beta: bool) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::post(format!("http://{addr}/v1/messages"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json");
    if beta {
        req = req.header("anthropic-beta", format!("{BETA},interleaved-thinking-2025-05-14"));
    }
    let req = req.body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap()))).unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let h = |n: &str| resp.headers().get(n).map(|v| v.to_str().unwrap().to_owned());
    let (stream, told) = (h("x-ctxlog-stream").map(|s| s.parse().unwrap()), h("x-ctxlog-context-management"));
    let body = resp.into_body().collect().await.unwrap().to_bytes().to_vec();
    Answer { status, stream, told, body }
}

const TOOLS: [&str; 3] = ["read_file", "memory", "grep"];

/// The agent's history after `steps` steps: signed thinking, a call, a ~2 KB result each.
fn history(steps: usize) -> Vec<Value> {
    let mut out = vec![json!({"role": "user", "content": "TASK-23: port the ledger; note decisions in memory."})];
    for i in 0..steps {
        let thought = format!("Step {i}: read the next module.");
        let id = format!("toolu_{i:03}");
        out.push(json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": thought, "signature": sign(&thought)},
            {"type": "text", "text": format!("Step {i}.")},
            {"type": "tool_use", "id": id, "name": TOOLS[i % 3], "input": {"path": format!("src/m{i}.rs")}}
        ]}));
        let output: String = (0..300).map(|w| format!("v{i}w{w}")).collect::<Vec<_>>().join(" ");
        out.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": output}]}));
    }
    out
}

fn request(steps: usize, cm: &Value, stream: bool) -> Value {
    json!({
        "model": "claude-sonnet-4-5", "max_tokens": 2048, "stream": stream,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "context_management": cm,
        "messages": history(steps),
    })
}

fn edits() -> Value {
    json!({"edits": [
        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
        {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 6000},
         "keep": {"type": "tool_uses", "value": 2}, "exclude_tools": ["memory"], "clear_tool_inputs": true}
    ]})
}

fn forwarded(up: &FakeUpstream) -> Vec<(Value, Option<String>)> {
    up.requests()
        .into_iter()
        .map(|x| {
            let beta = x.request.header("anthropic-beta").map(str::to_owned);
            (serde_json::from_slice(&x.request.body).unwrap(), beta)
        })
        .collect()
}

fn blocks(v: &Value) -> Vec<Value> {
    v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applied_context_management_is_ctxlogs_edits_stripped_from_the_request_and_reported_as_the_api_does() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.engine.budget = 200_000;
        // The legacy gate: the test counts clears per call, which the cache-aware default
        // defers while the fake's cache is warm.
        c.engine.cache_aware = false;
        c.engine.summarizer = ctxlog::config::SummarizerKind::None;
        c.summaries = Summaries::Off;
        c.provider_context_management = ProviderContextManagement::Apply;
    })
    .await;
    let mut stream = None;
    let mut cleared_seen = 0;
    for steps in 1..=20 {
        let a = post(p.addr(), &request(steps, &edits(), false), true).await;
        assert_eq!(a.status, 200, "step {steps}: {}", String::from_utf8_lossy(&a.body));
        let told = a.told.unwrap();
        assert!(told.starts_with("applied; clear_tool_uses_20250919 cleared_tool_uses="), "{told}");
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        let applied = v["context_management"]["applied_edits"].as_array().unwrap().clone();
        for e in &applied {
            let t = e["type"].as_str().unwrap();
            assert!(t == "clear_tool_uses_20250919" || t == "clear_thinking_20251015");
            assert!(e["cleared_input_tokens"].as_u64().unwrap() > 0, "{e}");
            cleared_seen += e.get("cleared_tool_uses").and_then(Value::as_u64).unwrap_or(0);
        }
        stream = a.stream;
    }
    assert!(cleared_seen > 0, "no call reported a cleared tool use");
    // What reached the provider: no context_management, no beta for it (the fake refuses the
    // field without it), the other beta kept; every request accepted by the strict fake.
    let sent = forwarded(&up);
    assert_eq!(sent.len(), 20);
    for (body, beta) in &sent {
        assert!(body.get("context_management").is_none());
        assert_eq!(beta.as_deref(), Some("interleaved-thinking-2025-05-14"));
    }
    // The last request: results cleared to the placeholder but memory's and the last two;
    // the inputs of the cleared calls `{}`; thinking only in the last two thinking turns.
    let (last, _) = sent.last().unwrap();
    let bs = blocks(last);
    let results: Vec<&Value> = bs.iter().filter(|b| b["type"] == "tool_result").collect();
    let uses: Vec<&Value> = bs.iter().filter(|b| b["type"] == "tool_use").collect();
    let placeholder = json!(ctxlog::config::DEFAULT_TOOL_PLACEHOLDER);
    assert!(results.iter().rev().take(2).all(|r| r["content"] != placeholder), "a kept tool use was cleared");
    assert!(results.iter().any(|r| r["content"] == placeholder), "nothing cleared");
    for (u, r) in uses.iter().zip(&results) {
        assert_eq!(u["id"], r["tool_use_id"]);
        if u["name"] == "memory" {
            assert_ne!(r["content"], placeholder, "an excluded tool's result was cleared");
            assert_ne!(u["input"], json!({}));
        }
        if u["input"] == json!({}) {
            assert_eq!(r["content"], placeholder, "an input cleared with its result whole");
        }
    }
    let thinking_turns = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["content"].as_array().is_some_and(|c| c.iter().any(|b| b["type"] == "thinking")))
        .count();
    assert!(thinking_turns <= 2, "{thinking_turns} turns kept their thinking");
    // The log: the guard once, the edits as events (visible in `replay`).
    let evs = calls(store.as_ref(), stream.unwrap(), 20).await;
    let guards: Vec<&Event> = evs
        .iter()
        .filter(
            |e| matches!(e, Event::GuardRaised(g) if g.kind == GuardKind::ClientContextManagement { applied: true }),
        )
        .collect();
    assert_eq!(guards.len(), 1);
    assert!(evs.iter().any(|e| matches!(e, Event::Edited(x) if x.kind == EditKind::Cleared)));
    assert!(evs
        .iter()
        .any(|e| matches!(e, Event::Edited(x) if x.kind == EditKind::Trimmed { thinking: true, inputs: false })));
    assert!(evs
        .iter()
        .any(|e| matches!(e, Event::Edited(x) if matches!(x.kind, EditKind::Trimmed { inputs: true, .. }))));
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applied_stream_reports_its_edits_on_message_delta() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.engine.summarizer = ctxlog::config::SummarizerKind::None;
        c.summaries = Summaries::Off;
        c.provider_context_management = ProviderContextManagement::Apply;
    })
    .await;
    let a = post(p.addr(), &request(12, &edits(), true), true).await;
    assert_eq!(a.status, 200);
    let text = String::from_utf8(a.body).unwrap();
    let delta = text.split("\n\n").find(|e| e.starts_with("event: message_delta")).unwrap();
    let data: Value = serde_json::from_str(delta.split_once("data: ").unwrap().1).unwrap();
    let applied = data["context_management"]["applied_edits"].as_array().unwrap();
    assert!(applied
        .iter()
        .any(|e| e["type"] == "clear_tool_uses_20250919" && e["cleared_tool_uses"].as_u64() > Some(0)));
    assert!(text.contains("event: message_stop"), "the stream ends as it should");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passed_context_management_reaches_the_provider_as_it_came() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.summaries = Summaries::Off).await;
    let cm = json!({"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 4}}]});
    let a = post(p.addr(), &request(8, &cm, false), true).await;
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(a.told.as_deref(), Some("passed"));
    let (body, beta) = forwarded(&up).pop().unwrap();
    assert_eq!(body["context_management"], cm);
    assert!(beta.unwrap().split(',').any(|b| b == BETA));
    // The provider's own report reaches the client untouched.
    let v: Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(v["context_management"]["applied_edits"][0]["cleared_tool_uses"], 5);
    let evs = calls(store.as_ref(), a.stream.unwrap(), 1).await;
    assert!(evs.iter().any(
        |e| matches!(e, Event::GuardRaised(g) if g.kind == GuardKind::ClientContextManagement { applied: false })
    ));
    // Without its beta the provider refuses the field (the strict fake as the API): the refusal
    // reaches the client as it came.
    let a = post(p.addr(), &request(8, &cm, false), false).await;
    assert_eq!(a.status, 400);
    assert!(String::from_utf8_lossy(&a.body).contains("context_management: Extra inputs are not permitted"));
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_context_management_to_apply_is_a_400_and_nothing_is_sent_or_written() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.provider_context_management = ProviderContextManagement::Apply;
    })
    .await;
    for cm in [
        json!({"edits": [{"type": "clear_tool_uses_20250919", "keep": {"type": "input_tokens", "value": 3}}]}),
        json!({"edits": [{"type": "clear_tool_uses_20250919"}, {"type": "clear_thinking_20251015"}]}),
        json!({"edits": "all"}),
    ] {
        let a = post(p.addr(), &request(3, &cm, false), true).await;
        assert_eq!(a.status, 400);
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["message"].as_str().unwrap().starts_with("context_management"), "{v}");
    }
    assert!(up.requests().is_empty());
    assert!(store.streams().unwrap().iter().all(|s| events(store.as_ref(), *s).is_empty()));
    p.shutdown().await;
}

/// Anthropic's server-side compaction (`compact_20260112`, item 3 of issue 23): the answer opens
/// with a `compaction` block; the client keeps that answer and drops everything before it (as
/// the API does on later requests). That is a continuation of the same session, not a
/// divergence: one stream, no `HistoryDiverged`, the compaction message logged pinned, and
/// every later request forwarded from it on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_that_starts_at_an_anthropic_compaction_continues_one_session() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.summaries = Summaries::Off).await;
    let cm = json!({"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}]});
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let send = |messages: Vec<Value>| {
        let body =
            json!({"model": "claude-sonnet-4-6", "max_tokens": 256, "context_management": cm, "messages": messages});
        let req = Request::post(format!("http://{}/v1/messages", p.addr()))
            .header("x-api-key", KEY)
            .header("anthropic-version", "2023-06-01")
            .header("anthropic-beta", "compact-2026-01-12")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
            .unwrap();
        let client = client.clone();
        async move {
            let resp = client.request(req).await.unwrap();
            assert_eq!(resp.status(), 200);
            let stream: StreamId = resp.headers()["x-ctxlog-stream"].to_str().unwrap().parse().unwrap();
            let v: Value = serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
            (stream, v)
        }
    };
    let mut messages = vec![json!({"role": "user", "content": "TASK-23b: read every module and report."})];
    let mut streams = std::collections::BTreeSet::new();
    let mut compacted_at = None;
    for i in 0..80 {
        let (stream, answer) = send(messages.clone()).await;
        streams.insert(stream);
        let content = answer["content"].as_array().unwrap().clone();
        messages.push(json!({"role": "assistant", "content": content}));
        if content.first().is_some_and(|b| b["type"] == "compaction") {
            // Keep the compaction's answer, drop what precedes it.
            messages.drain(..messages.len() - 1);
            compacted_at = Some(i);
        }
        let output: String = (0..400).map(|w| format!("m{i}w{w}")).collect::<Vec<_>>().join(" ");
        messages.push(json!({"role": "user", "content": format!("Module {i}: {output}")}));
        if compacted_at.is_some_and(|c| i >= c + 3) {
            break;
        }
    }
    let compacted_at = compacted_at.expect("the fake never compacted");
    assert_eq!(streams.len(), 1, "the session changed at the compaction: {streams:?}");
    let stream = *streams.first().unwrap();
    let evs = events(store.as_ref(), stream);
    assert!(!evs
        .iter()
        .any(|e| matches!(e, Event::GuardRaised(g) if matches!(g.kind, GuardKind::HistoryDiverged { .. }))));
    let logged: Vec<&ctxlog::Message> =
        evs.iter().filter_map(|e| if let Event::MessageAppended(m) = e { Some(&m.message) } else { None }).collect();
    let held = logged.iter().filter(|m| m.provider_compaction()).count();
    assert_eq!(held, 1, "the compaction message is logged once");
    assert!(logged.iter().any(|m| m.provider_compaction() && m.is_pinned()));
    // Every request after it carries the compaction block as the fake issued it (ctxlog's view
    // still holds what precedes it, which the provider drops: the view is the log's), and the
    // provider read only from it on: the fake's count of those prompts stays under its trigger.
    let sent = forwarded(&up);
    let issued = &sent[compacted_at + 1..];
    assert!(issued.len() >= 3);
    for (body, _) in issued {
        let blocks = blocks(body);
        let c: Vec<&Value> = blocks.iter().filter(|b| b["type"] == "compaction").collect();
        assert_eq!(c.len(), 1, "the compaction block left the view or came twice");
    }
    for x in up.requests().iter().skip(compacted_at + 1) {
        let v: Value = serde_json::from_slice(&x.response.chunks.concat()).unwrap();
        assert!(v["usage"]["input_tokens"].as_u64().unwrap() < 50_000, "the fake read what precedes the compaction");
        assert_ne!(v["content"][0]["type"], "compaction", "compacted again");
    }
    assert!(ctxlog::replay::verify(&*store, stream).unwrap().problems.is_empty());
    p.shutdown().await;
}
