//! The proxy against the strict fake (issue 22): agent sessions whose compaction (ladder edits:
//! truncations, removals, stubs) must leave every forwarded request one the real API accepts —
//! tool pairs whole, signed thinking blocks untouched, no more images than the provider takes;
//! a provider's "prompt too long" reaches the client as the provider sent it; a body that ends
//! after its final event (as real servers' do) is a complete call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ctxlog::{Event, MemoryStore, Store, StreamId};
use ctxlog_fake_upstream::{FakeUpstream, Fault, LateEnd};
use ctxlog_proxy::Summaries;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

mod support;
use support::{calls, events, proxy_on, served, KEY};

const ANTHROPIC: &str = "/v1/messages";
const OPENAI: &str = "/v1/chat/completions";
const OPENAI_KEY: &str = "Bearer sk-openai-strict-test";

struct Answer {
    status: u16,
    stream: Option<StreamId>,
    body: Vec<u8>,
    /// The body ended as framed (false: the connection was cut).
    complete: bool,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn post(addr: std::net::SocketAddr, path: &str, body: &Value) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::post(format!("http://{addr}{path}")).header("content-type", "application/json");
    req = if path == ANTHROPIC {
        req.header("x-api-key", KEY).header("anthropic-version", "2023-06-01")
    } else {
        req.header("authorization", OPENAI_KEY)
    };
    let req = req.body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap()))).unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let stream = resp.headers().get("x-ctxlog-stream").map(|v| v.to_str().unwrap().parse().unwrap());
    let mut body = Vec::new();
    let mut complete = true;
    let mut b = resp.into_body();
    while let Some(frame) = b.frame().await {
        match frame {
            Ok(f) => body.extend_from_slice(f.data_ref().map_or(&[][..], |d| &d[..])),
            Err(_) => {
                complete = false;
                break;
            }
        }
    }
    Answer { status, stream, body, complete }
}

/// A tool result of about `words` words, different in every step.
fn tool_output(step: usize, words: usize) -> String {
    (0..words).map(|w| format!("r{step}w{}", (w * 7919 + step * 104_729) % 1_000_003)).collect::<Vec<_>>().join(" ")
}

/// Every exchange the fake answered 200; else the first refusal, with the fake's message.
fn all_accepted(up: &FakeUpstream) -> Result<usize, String> {
    let rec = up.requests();
    for x in &rec {
        if x.response.status != 200 {
            return Err(format!(
                "exchange {} refused {}: {}",
                x.seq,
                x.response.status,
                String::from_utf8_lossy(&x.response.body())
            ));
        }
    }
    Ok(rec.len())
}

fn laddered(evs: &[Event]) -> usize {
    served(evs).iter().filter(|s| s.level > 0).count()
}

/// An Anthropic agent with extended thinking, tools and long tool results, sending back the
/// fake's answers as they came (thinking blocks and their signatures included), on a small
/// budget without summaries: the ladder truncates, removes and stubs, and the real API's
/// rules must hold in every request it forwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thinking_tool_agent_compacted_by_the_ladder_sends_only_what_anthropic_accepts() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.engine.budget = 4_000;
        c.summaries = Summaries::Off;
    })
    .await;
    let mut messages = vec![json!({"role": "user", "content": "Port the ledger module. [[tool:read_file]]"})];
    let mut id = None;
    for i in 0..40 {
        let body = json!({"model": "claude-test", "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
            "system": "You are a careful engineer.", "messages": messages});
        let a = post(p.addr(), ANTHROPIC, &body).await;
        assert_eq!(a.status, 200, "call {i}: {}", a.text());
        assert_eq!(*id.get_or_insert(a.stream.unwrap()), a.stream.unwrap());
        let content = a.json()["content"].clone();
        messages.push(json!({"role": "assistant", "content": content}));
        let tool = content.as_array().unwrap().iter().find(|b| b["type"] == "tool_use").cloned();
        match tool {
            Some(t) => messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": t["id"], "content": tool_output(i, 150)}]})),
            None => messages.push(json!({"role": "user", "content": format!(
                "Step {i}: {} Next file please. [[tool:read_file]]",
                "keep the public error codes stable for the reconciliation jobs. ".repeat(if i % 3 == 0 { 12 } else { 1 }))})),
        }
    }
    let id = id.unwrap();
    let evs = calls(&*store, id, 40).await;
    p.shutdown().await;
    assert!(laddered(&evs) >= 5, "the ladder ran {} times: the test proves little", laddered(&evs));
    let edits = evs.iter().filter(|e| matches!(e, Event::Edited(_))).count();
    assert!(edits >= 10, "{edits} edits");
    assert_eq!(all_accepted(&up), Ok(40));
}

/// An OpenAI agent whose assistant turns call two tools at once (parallel tool calls), on a
/// small budget without summaries: every forwarded request keeps each call with its `tool`
/// messages right after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_tool_calls_compacted_by_the_ladder_send_only_what_openai_accepts() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.engine.budget = 4_000;
        c.summaries = Summaries::Off;
    })
    .await;
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful engineer."}),
        json!({"role": "user", "content": "Port the ledger module."}),
    ];
    let mut id = None;
    for i in 0..40 {
        let a = post(p.addr(), OPENAI, &json!({"model": "gpt-test", "messages": messages})).await;
        assert_eq!(a.status, 200, "call {i}: {}", a.text());
        assert_eq!(*id.get_or_insert(a.stream.unwrap()), a.stream.unwrap());
        let said = a.json()["choices"][0]["message"]["content"].as_str().unwrap_or("ok").to_owned();
        if i % 5 == 4 {
            messages.push(json!({"role": "assistant", "content": said}));
            messages
                .push(json!({"role": "user", "content": format!("Remark {i}: {}", "mind the callers. ".repeat(30))}));
            continue;
        }
        let (a_id, b_id) = (format!("call_{i}a"), format!("call_{i}b"));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": a_id, "type": "function", "function": {"name": "read_file", "arguments": format!("{{\"path\":\"m{i}.rs\"}}")}},
            {"id": b_id, "type": "function", "function": {"name": "grep", "arguments": format!("{{\"q\":\"fn m{i}\"}}")}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": a_id, "content": tool_output(i, 120)}));
        messages.push(json!({"role": "tool", "tool_call_id": b_id, "content": tool_output(i + 1000, 60)}));
    }
    let evs = calls(&*store, id.unwrap(), 40).await;
    p.shutdown().await;
    assert!(laddered(&evs) >= 5, "the ladder ran {} times: the test proves little", laddered(&evs));
    assert_eq!(all_accepted(&up), Ok(40));
}

/// A prompt over the model's window (one pasted log, larger than the window): the provider's
/// own 400, with its real text, is recorded as `CallRejected`; the proxy learns the limit, cuts
/// the oversized first message once to fit (issue 21) and sends the call again, so the client
/// gets an answer, and exactly one request was refused. Both providers' error shapes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_over_the_window_is_refused_recorded_and_recovered() {
    let up = FakeUpstream::start().unwrap();
    up.set_context_tokens(Some(1_500));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let long = "a long pasted log line. ".repeat(400);
    let a = post(
        p.addr(),
        ANTHROPIC,
        &json!({"model": "claude-test", "max_tokens": 64,
        "messages": [{"role": "user", "content": long}]}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let sent = up.requests();
    let refused: Vec<_> = sent.iter().filter(|r| r.response.status == 400).collect();
    assert_eq!((sent.len(), refused.len()), (2, 1), "one refusal, one retry");
    let refusal: Value = serde_json::from_slice(&refused[0].response.body()).unwrap();
    let msg = refusal["error"]["message"].as_str().unwrap().to_owned();
    assert!(msg.starts_with("prompt is too long: ") && msg.ends_with(" tokens > 1500 maximum"), "{msg}");
    let o =
        post(p.addr(), OPENAI, &json!({"model": "gpt-test", "messages": [{"role": "user", "content": long}]})).await;
    assert_eq!(o.status, 200, "{}", String::from_utf8_lossy(&o.body));
    let codes: Vec<Value> = up
        .requests()
        .iter()
        .skip(2)
        .filter(|r| r.response.status == 400)
        .map(|r| serde_json::from_slice::<Value>(&r.response.body()).unwrap()["error"]["code"].clone())
        .collect();
    assert_eq!(codes, [json!("context_length_exceeded")]);
    let mut rejected = 0;
    for s in store.streams().unwrap() {
        let evs = events(&*store, s);
        rejected += evs.iter().filter(|e| matches!(e, Event::CallRejected(_))).count();
        assert_eq!(served(&evs).len(), 1, "each conversation's call is committed once, after its retry");
    }
    assert_eq!(rejected, 2, "every refused request is an event in the log");
    p.shutdown().await;
}

/// The real servers end a stream's body some time after its final event: the proxy decides by
/// the protocol (`message_stop`, `[DONE]`), so the call is complete and committed with its
/// usage, whether the body then ends cleanly or the connection drops.
async fn late_end(path: &str, then: LateEnd) {
    let up = FakeUpstream::start().unwrap();
    up.script(Fault::LateEnd { ms: 300, then }, 1);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let body = if path == ANTHROPIC {
        json!({"model": "claude-test", "max_tokens": 64, "stream": true, "messages": [{"role": "user", "content": "hi"}]})
    } else {
        json!({"model": "gpt-test", "stream": true, "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "hi"}]})
    };
    let a = post(p.addr(), path, &body).await;
    assert_eq!(a.status, 200, "{}", a.text());
    let last = if path == ANTHROPIC {
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
    } else {
        "data: [DONE]\n\n"
    };
    assert!(a.text().ends_with(last), "the client did not get the final event: {}", a.text());
    if then == LateEnd::Finish {
        assert!(a.complete, "the client's body was cut");
    }
    let evs = tokio::time::timeout(Duration::from_secs(30), calls(&*store, a.stream.unwrap(), 1)).await.unwrap();
    let call = served(&evs)[0];
    assert!(call.usage.is_some() && call.anchored, "committed without the reported usage");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_ending_after_its_final_event_is_a_complete_call() {
    late_end(ANTHROPIC, LateEnd::Finish).await;
    late_end(OPENAI, LateEnd::Finish).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_after_the_final_event_is_a_complete_call() {
    late_end(ANTHROPIC, LateEnd::Abort).await;
    late_end(OPENAI, LateEnd::Abort).await;
}

/// A client's four cache breakpoints (tools, system, two messages) through a compacted session:
/// never more than four reach the provider, and the cached system prompt is read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_client_breakpoints_survive_compaction_within_the_limit() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.engine.budget = 6_000;
        c.summaries = Summaries::Off;
    })
    .await;
    let cc = json!({"type": "ephemeral"});
    let tools = json!([{"name": "read_file", "input_schema": {"type": "object"}, "cache_control": cc}]);
    let system = json!([{"type": "text", "text": format!("Rules. {}", "Be exact. ".repeat(500)), "cache_control": cc}]);
    let mut messages: Vec<Value> = vec![];
    for i in 0..30 {
        // The client marks its two latest user messages, as agents with prompt caching do.
        messages.push(
            json!({"role": "user", "content": [{"type": "text", "text": format!("Q{i}: {}", tool_output(i, 120))}]}),
        );
        let mut sent = messages.clone();
        let n = sent.len();
        for k in [n.saturating_sub(3), n - 1] {
            if sent[k]["role"] == "user" {
                sent[k]["content"][0]["cache_control"] = cc.clone();
            }
        }
        let body =
            json!({"model": "claude-test", "max_tokens": 64, "tools": tools, "system": system, "messages": sent});
        let a = post(p.addr(), ANTHROPIC, &body).await;
        assert_eq!(a.status, 200, "call {i}: {}", a.text());
        messages.push(json!({"role": "assistant", "content": a.json()["content"].clone()}));
    }
    p.shutdown().await;
    assert_eq!(all_accepted(&up), Ok(30));
    let rec = up.requests();
    let read: Vec<u64> = rec
        .iter()
        .map(|x| {
            serde_json::from_slice::<Value>(&x.response.body()).unwrap()["usage"]["cache_read_input_tokens"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(
        read.iter().skip(1).all(|r| *r >= 1024),
        "the cached tools and system were not read on every call: {read:?}"
    );
}

/// A computer-use agent: every tool result is a screenshot. Past Anthropic's 100 images per
/// request the oldest screenshots leave the view (their tool pairs with them), so every request
/// is one the strict fake accepts, though the view is far under its token budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_screenshot_agent_never_sends_more_images_than_anthropic_takes() {
    const PNG: &str =
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.engine.budget = 200_000;
        c.summaries = Summaries::Off;
    })
    .await;
    let mut messages = vec![json!({"role": "user", "content": "Click through the settings and report what changed."})];
    let mut id = None;
    for i in 0..130 {
        let tid = format!("toolu_shot_{i}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": tid, "name": "screenshot", "input": {"step": i}}
        ]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tid, "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
            ]}
        ]}));
        let body = json!({"model": "claude-test", "max_tokens": 64, "messages": messages});
        let a = post(p.addr(), ANTHROPIC, &body).await;
        assert_eq!(a.status, 200, "step {i}: {}", a.text());
        messages.push(json!({"role": "assistant", "content": a.json()["content"].clone()}));
        messages.push(json!({"role": "user", "content": format!("Next, step {}.", i + 1)}));
        id = a.stream;
    }
    let id = id.unwrap();
    let evs = calls(&*store, id, 130).await;
    p.shutdown().await;
    assert_eq!(all_accepted(&up), Ok(130));
    let capped = evs.iter().filter(|e| matches!(e, Event::Edited(x) if x.reason.rule.starts_with("media cap"))).count();
    assert!(capped >= 30, "the oldest screenshots were removed: {capped}");
    assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
}
