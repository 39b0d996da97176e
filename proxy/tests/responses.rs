//! `POST /v1/responses` through the proxy to the strict fake: a long tool loop that compacts,
//! streamed and not (every call logged, the forwarded body the one rebuilt from the log, the
//! usage the upstream's, `verify` clean), `previous_response_id` chains (logged, passed through
//! byte for byte, never compacted), and a history that carries the provider's compaction item.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use bytes::Bytes;
use ctxlog::event::GuardKind;
use ctxlog::{Event, MemoryStore, RequestOptions, Store, StreamId, Usage};
use ctxlog_fake_upstream::{Exchange, FakeUpstream};
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

mod support;
use support::{calls, events, proxy_on, served};

const PATH: &str = "/v1/responses";
const AUTH: (&str, &str) = ("authorization", "Bearer sk-openai-SECRET-KEY-9876543210");

struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn stream(&self) -> StreamId {
        self.headers.get("x-ctxlog-stream").expect("no x-ctxlog-stream").to_str().unwrap().parse().unwrap()
    }
    fn seq(&self) -> u64 {
        let v = self.headers.get("x-request-id").or_else(|| self.headers.get("request-id")).expect("no request id");
        v.to_str().unwrap().strip_prefix("req_fake_").unwrap().parse().unwrap()
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// The response object: the JSON body, or the `response.completed` event's.
    fn response(&self) -> Value {
        let text = self.text();
        if !text.starts_with("event:") {
            return serde_json::from_str(&text).unwrap();
        }
        let done = text
            .split("\n\n")
            .find(|e| e.starts_with("event: response.completed"))
            .unwrap_or_else(|| panic!("no response.completed in {text}"));
        let data = done.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        serde_json::from_str::<Value>(data).unwrap()["response"].clone()
    }
}

async fn post(addr: std::net::SocketAddr, body: &str) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{addr}{PATH}"))
        .header(AUTH.0, AUTH.1)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let (parts, b) = resp.into_parts();
    let body = b.collect().await.unwrap().to_bytes().to_vec();
    Answer { status: parts.status.as_u16(), headers: parts.headers, body }
}

fn exchange(up: &FakeUpstream, seq: u64) -> Exchange {
    up.requests().into_iter().find(|x| x.seq == seq).unwrap_or_else(|| panic!("no exchange {seq}"))
}

fn opts_of(body: &[u8]) -> RequestOptions {
    RequestOptions::from_client_body(body).unwrap()
}

/// The usage the fake reported, read from its bytes (not through the proxy's scanner).
fn reported(x: &Exchange) -> Usage {
    let body = String::from_utf8(x.response.body()).unwrap();
    let response: Value = if body.starts_with("event:") {
        let data = body
            .split("\n\n")
            .find(|e| e.starts_with("event: response.completed"))
            .and_then(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
            .unwrap();
        serde_json::from_str::<Value>(data).unwrap()["response"].clone()
    } else {
        serde_json::from_str(&body).unwrap()
    };
    let u = &response["usage"];
    let cached = u["input_tokens_details"]["cached_tokens"].as_u64().unwrap();
    Usage {
        input: u["input_tokens"].as_u64().unwrap() - cached,
        cache_read: cached,
        cache_write: 0,
        output: u["output_tokens"].as_u64().unwrap(),
    }
}

const TOOLS: &str = r#"[{"type":"function","name":"read_file","description":"Read a file","parameters":{"type":"object","properties":{"n":{"type":"integer"}}}}]"#;

fn body(input: &[Value], stream: bool) -> String {
    json!({"model": "gpt-fake-5", "instructions": "You are a coding agent. Be brief.", "input": input,
        "tools": serde_json::from_str::<Value>(TOOLS).unwrap(), "stream": stream})
    .to_string()
}

/// An agent loop as the SDKs run it: each answer's output items go back as input, each
/// function call gets its output; a user turn asks for a tool every time.
#[tokio::test]
async fn a_tool_loop_of_forty_calls_compacts_and_every_call_is_the_logged_one() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.engine.budget = 6_000;
    })
    .await;
    let mut input =
        vec![json!({"role": "user", "content": [{"type": "input_text", "text": "Fix the build. [[tool:read_file]]"}]})];
    let mut seqs = Vec::new();
    let mut stream = None;
    let mut turn = 0;
    for call in 0..44 {
        let a = post(p.addr(), &body(&input, call % 2 == 1)).await;
        assert_eq!(a.status, 200, "call {call}: {}", a.text());
        assert_eq!(*stream.get_or_insert(a.stream()), a.stream(), "call {call}: the loop left its session");
        seqs.push(a.seq());
        let output = a.response()["output"].as_array().unwrap().clone();
        let calls_made: Vec<Value> = output.iter().filter(|o| o["type"] == "function_call").cloned().collect();
        input.extend(output);
        for c in &calls_made {
            let result = format!("file {call}: {}", "fn main() { println!(\"hello\"); }\n".repeat(40));
            input.push(json!({"type": "function_call_output", "call_id": c["call_id"], "output": result}));
        }
        if calls_made.is_empty() {
            turn += 1;
            input.push(json!({"role": "user", "content": format!("Turn {turn}: next module. [[tool:read_file]]")}));
        }
    }
    let id = stream.unwrap();
    let evs = calls(&*store, id, 44).await;
    let served = served(&evs);
    assert_eq!(served.len(), 44, "every call is logged");
    for (call, seq) in served.iter().zip(&seqs) {
        let x = exchange(&up, *seq);
        assert_eq!(x.response.status, 200);
        let rebuilt = ctxlog::replay::served_request(&*store, id, call.call, &opts_of(&x.request.body)).unwrap();
        assert_eq!(
            rebuilt.body(),
            &x.request.body[..],
            "call {}: the forwarded body is not the logged view",
            call.call
        );
        let sent: Value = serde_json::from_slice(&x.request.body).unwrap();
        assert_eq!(sent["instructions"], "You are a coding agent. Be brief.", "call {}", call.call);
        assert_eq!(call.usage, Some(reported(&x)), "call {}: the logged usage is not the upstream's", call.call);
        assert!(call.anchored);
    }
    assert!(
        served.iter().any(|c| c.level > 0) || evs.iter().any(|e| matches!(e, Event::Flushed(_))),
        "nothing compacted"
    );
    assert!(served.iter().any(|c| c.usage.is_some_and(|u| u.cache_read > 0)), "the prefix cache never hit");
    // Each answer's output items are in the log with their call.
    let answers = evs.iter().filter(|e| matches!(e, Event::AnswerReceived(_))).count();
    assert!(answers >= 44, "{answers} answer items for 44 calls");
    assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
    p.shutdown().await;
}

/// `previous_response_id`: the provider holds the history. The calls are logged with their
/// new input in a session of their own chain, forwarded byte for byte, never compacted.
#[tokio::test]
async fn previous_response_id_calls_are_logged_and_passed_through() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.engine.budget = 2_000).await;
    let first = post(p.addr(), &body(&[json!({"role": "user", "content": "Start. [[tool:read_file]]"})], false)).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let mut previous = first.response();
    let mut chain = None;
    for turn in 0..8 {
        let call = previous["output"].as_array().unwrap().iter().find(|o| o["type"] == "function_call").cloned();
        let input = match call {
            Some(c) => json!([{"type": "function_call_output", "call_id": c["call_id"], "output": "x".repeat(3_000)}]),
            None => json!(format!("Turn {turn}. [[tool:read_file]]")),
        };
        let b = json!({"model": "gpt-fake-5", "previous_response_id": previous["id"], "input": input, "stream": turn % 2 == 0})
            .to_string();
        let a = post(p.addr(), &b).await;
        assert_eq!(a.status, 200, "turn {turn}: {}", a.text());
        let x = exchange(&up, a.seq());
        assert_eq!(
            x.request.body,
            b.as_bytes(),
            "turn {turn}: a provider-held call is forwarded as the client sent it"
        );
        assert_eq!(*chain.get_or_insert(a.stream()), a.stream(), "turn {turn}: the chain left its session");
        assert_ne!(a.stream(), first.stream());
        previous = a.response();
    }
    let id = chain.unwrap();
    let evs = calls(&*store, id, 8).await;
    assert!(evs.iter().any(|e| matches!(e, Event::GuardRaised(g) if g.kind == GuardKind::ProviderHeldHistory)));
    let served = served(&evs);
    assert_eq!(served.len(), 8);
    assert!(
        served.iter().all(|c| c.level == 0 && c.usage.is_some()),
        "a provider-held call was compacted or not metered"
    );
    assert!(!evs.iter().any(|e| matches!(e, Event::Flushed(_) | Event::Edited(_))));
    // The new input and the answers it continues are in the log: every function call with its output.
    let appended = evs.iter().filter(|e| matches!(e, Event::MessageAppended(_))).count();
    assert!(appended >= 8, "{appended} messages appended for 8 calls");
    assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
    // An unknown `previous_response_id` is the provider's 400, passed back; nothing is compacted.
    let b = json!({"model": "gpt-fake-5", "previous_response_id": "resp_never", "input": "hi"}).to_string();
    let a = post(p.addr(), &b).await;
    assert_eq!(a.status, 400, "{}", a.text());
    assert!(a.text().contains("previous_response_not_found"));
    p.shutdown().await;
}

/// The fake refuses what the API refuses; the proxy passes a client's mistakes back as 4xx.
#[tokio::test]
async fn a_client_mistake_is_a_4xx() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let orphan = body(
        &[
            json!({"role": "user", "content": "hi"}),
            json!({"type": "function_call_output", "call_id": "call_x", "output": "o"}),
        ],
        false,
    );
    let a = post(p.addr(), &orphan).await;
    assert_eq!(a.status, 400, "{}", a.text());
    let ours = body(
        &[json!({"type": "instructions", "role": "system", "content": "x"}), json!({"role": "user", "content": "hi"})],
        false,
    );
    let a = post(p.addr(), &ours).await;
    assert_eq!(a.status, 400, "{}", a.text());
    assert!(a.text().contains("input[0]"), "{}", a.text());
    // A string input is one user message.
    let a = post(p.addr(), r#"{"model":"gpt-fake-5","input":"hello"}"#).await;
    assert_eq!(a.status, 200, "{}", a.text());
    let x = exchange(&up, a.seq());
    let sent: Value = serde_json::from_slice(&x.request.body).unwrap();
    assert_eq!(sent["input"], json!([{"role": "user", "content": "hello"}]));
    assert!(up.requests().iter().all(|x| x.response.status == 200), "the proxy forwarded a request the API refuses");
    p.shutdown().await;
}

/// Server-side compaction: the answer carries a `compaction` item; the client keeps it and
/// drops what came before it. That is a continuation of the same session, and ctxlog never
/// edits the compaction item.
#[tokio::test]
async fn a_history_with_a_compaction_item_continues_one_session() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.engine.budget = 50_000).await;
    let with_cm = |input: &[Value]| {
        let mut v: Value = serde_json::from_str(&body(input, false)).unwrap();
        v["context_management"] = json!([{"type": "compaction", "compact_threshold": 1_500}]);
        v.to_string()
    };
    let mut input = vec![json!({"role": "user", "content": "Read everything. [[tool:read_file]]"})];
    let mut sessions = Vec::new();
    let mut seqs = Vec::new();
    let mut compacted_at = None;
    for call in 0..10 {
        let a = post(p.addr(), &with_cm(&input)).await;
        assert_eq!(a.status, 200, "call {call}: {}", a.text());
        sessions.push(a.stream());
        seqs.push(a.seq());
        let output = a.response()["output"].as_array().unwrap().clone();
        let cmp = output.iter().position(|o| o["type"] == "compaction");
        let calls_made: Vec<Value> = output.iter().filter(|o| o["type"] == "function_call").cloned().collect();
        match (cmp, compacted_at) {
            // The first compaction: drop everything before it (as the docs allow).
            (Some(i), None) => {
                compacted_at = Some(call);
                input = output[i..].to_vec();
            }
            _ => input.extend(output),
        }
        for c in &calls_made {
            input.push(json!({"type": "function_call_output", "call_id": c["call_id"], "output": "y".repeat(2_000)}));
        }
        if calls_made.is_empty() {
            input.push(json!({"role": "user", "content": format!("More {call}. [[tool:read_file]]")}));
        }
    }
    assert!(compacted_at.is_some(), "the fake never compacted: the test proves nothing");
    assert!(sessions.iter().all(|s| *s == sessions[0]), "the compacted history left the session: {sessions:?}");
    let evs = calls(&*store, sessions[0], 10).await;
    assert!(!evs
        .iter()
        .any(|e| matches!(e, Event::GuardRaised(g) if matches!(g.kind, GuardKind::HistoryDiverged { .. }))));
    // The skipped items were not appended again: the log grew by what the client added.
    let logged: Vec<&ctxlog::Message> =
        evs.iter().filter_map(|e| if let Event::MessageAppended(m) = e { Some(&m.message) } else { None }).collect();
    let compactions: Vec<String> = logged
        .iter()
        .filter(|m| m.provider_compaction())
        .map(|m| m.plain_text() + &format!("{:?}", m.blocks()))
        .collect();
    let distinct: std::collections::BTreeSet<&String> = compactions.iter().collect();
    assert!(!compactions.is_empty());
    assert_eq!(distinct.len(), compactions.len(), "a compaction item was logged twice: the skipped items came back");
    assert!(logged.iter().all(|m| !m.provider_compaction() || m.is_pinned()));
    for (call, seq) in served(&evs).iter().zip(&seqs) {
        let x = exchange(&up, *seq);
        let rebuilt =
            ctxlog::replay::served_request(&*store, sessions[0], call.call, &opts_of(&x.request.body)).unwrap();
        assert_eq!(rebuilt.body(), &x.request.body[..], "call {}", call.call);
        assert_eq!(call.usage, Some(reported(&x)));
    }
    // After it, the compaction item reaches the provider as the fake issued it.
    let last = exchange(&up, *seqs.last().unwrap());
    let text = String::from_utf8(last.request.body.clone()).unwrap();
    let issued = format!("cmp_fake_{}", seqs[compacted_at.unwrap()]);
    assert!(text.contains(&issued), "the compaction item left the view");
    assert!(ctxlog::replay::verify(&*store, sessions[0]).unwrap().problems.is_empty());
    p.shutdown().await;
}

/// Anthropic's server-side compaction: an assistant message carrying a `compaction` block, after
/// which the client sends only what follows it. One session; the block is never edited.
#[tokio::test]
async fn an_anthropic_compaction_block_continues_one_session() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let send = |messages: Vec<Value>| {
        let body = json!({"model": "claude-x", "max_tokens": 256, "system": "You are terse.", "messages": messages})
            .to_string();
        let addr = p.addr();
        async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            let req = Request::post(format!("http://{addr}/v1/messages"))
                .header("x-api-key", "sk-ant-compaction-test")
                .header("anthropic-version", "2023-06-01")
                .header("x-ctxlog-session", "compacted")
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
                .unwrap();
            let resp = client.request(req).await.unwrap();
            let (parts, b) = resp.into_parts();
            let body = b.collect().await.unwrap().to_bytes().to_vec();
            Answer { status: parts.status.as_u16(), headers: parts.headers, body }
        }
    };
    let user = |t: &str| json!({"role": "user", "content": t});
    let assistant = |t: &str| json!({"role": "assistant", "content": [{"type": "text", "text": t}]});
    let compaction = json!({"role": "assistant", "content": [
        {"type": "compaction", "content": "Summary: the parser was ported; tests pass."},
        {"type": "text", "text": "Continuing."}]});
    let whole = vec![
        user("port the parser"),
        assistant("done"),
        user("now the lexer"),
        compaction.clone(),
        user("and the docs"),
    ];
    let a = send(whole[..3].to_vec()).await;
    assert_eq!(a.status, 200, "{}", a.text());
    let b = send(whole.clone()).await;
    assert_eq!(b.status, 200, "{}", b.text());
    // The client drops what the provider's compaction covers.
    let c = send(vec![compaction.clone(), user("and the docs"), assistant("ok"), user("and the changelog")]).await;
    assert_eq!(c.status, 200, "{}", c.text());
    assert_eq!((a.stream(), b.stream()), (c.stream(), c.stream()), "the compacted history left the session");
    let evs = calls(&*store, c.stream(), 3).await;
    let logged: Vec<&ctxlog::Message> =
        evs.iter().filter_map(|e| if let Event::MessageAppended(m) = e { Some(&m.message) } else { None }).collect();
    assert_eq!(logged.len(), 8, "system + 5 + the 2 new ones: the skipped messages were not appended again");
    assert!(logged[4].provider_compaction() && logged[4].is_pinned());
    assert!(!evs
        .iter()
        .any(|e| matches!(e, Event::GuardRaised(g) if matches!(g.kind, GuardKind::HistoryDiverged { .. }))));
    let x = exchange(&up, c.seq());
    assert!(String::from_utf8_lossy(&x.request.body).contains("Summary: the parser was ported"));
    p.shutdown().await;
}

/// `POST /v1/responses/compact`: forwarded as the client sent it, answered byte for byte, and
/// recorded in the conversation's session (`ProviderCompacted`, with the usage) before the
/// client has the answer; the history the client sends next, from the compacted output, is
/// served and logged.
#[tokio::test]
async fn a_compact_call_is_recorded_in_the_conversations_session() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.engine.budget = 50_000).await;
    let mut input = vec![json!({"role": "user", "content": "Start the port. [[tool:read_file]]"})];
    let mut stream = None;
    for call in 0..3 {
        let a = post(p.addr(), &body(&input, false)).await;
        assert_eq!(a.status, 200, "{}", a.text());
        assert_eq!(*stream.get_or_insert(a.stream()), a.stream());
        let output = a.response()["output"].as_array().unwrap().clone();
        let calls_made: Vec<Value> = output.iter().filter(|o| o["type"] == "function_call").cloned().collect();
        input.extend(output);
        for c in &calls_made {
            input.push(json!({"type": "function_call_output", "call_id": c["call_id"], "output": "x".repeat(2_000)}));
        }
        if calls_made.is_empty() {
            input.push(json!({"role": "user", "content": format!("Turn {call}. [[tool:read_file]]")}));
        }
    }
    let id = stream.unwrap();
    let b =
        json!({"model": "gpt-fake-5", "instructions": "You are a coding agent. Be brief.", "input": input}).to_string();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{}/v1/responses/compact", p.addr()))
        .header(AUTH.0, AUTH.1)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(b.clone())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let (parts, rb) = resp.into_parts();
    let answer = rb.collect().await.unwrap().to_bytes().to_vec();
    assert_eq!(parts.status.as_u16(), 200, "{}", String::from_utf8_lossy(&answer));
    assert_eq!(parts.headers.get("x-ctxlog-stream").unwrap().to_str().unwrap(), id.to_string());
    let seq: u64 = parts.headers["x-request-id"].to_str().unwrap().strip_prefix("req_fake_").unwrap().parse().unwrap();
    let x = exchange(&up, seq);
    assert_eq!(x.request.body, b.as_bytes(), "the compaction request is forwarded as the client sent it");
    assert_eq!(answer, x.response.body(), "the client gets the provider's answer as it came");
    let compacted: Value = serde_json::from_slice(&answer).unwrap();
    let evs = events(&*store, id);
    let recorded = evs
        .iter()
        .find_map(|e| match e {
            Event::ProviderCompacted(c) => Some(c.clone()),
            _ => None,
        })
        .expect("the compaction is not in the session's log");
    assert_eq!(recorded.endpoint, "/v1/responses/compact");
    assert_eq!(recorded.model.as_deref(), Some("gpt-fake-5"));
    assert_eq!(recorded.input_items, input.len() as u64);
    assert_eq!(recorded.output_items, compacted["output"].as_array().unwrap().len() as u64);
    assert_eq!(recorded.response_id.as_deref(), compacted["id"].as_str());
    let u = &compacted["usage"];
    let cached = u["input_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert_eq!(
        recorded.usage,
        Some(Usage {
            input: u["input_tokens"].as_u64().unwrap() - cached,
            cache_read: cached,
            cache_write: 0,
            output: u["output_tokens"].as_u64().unwrap()
        })
    );
    // The client goes on from the compacted history: served, logged, and the log verifies.
    let mut next = compacted["output"].as_array().unwrap().clone();
    next.push(json!({"role": "user", "content": "Go on from there."}));
    let a = post(p.addr(), &body(&next, false)).await;
    assert_eq!(a.status, 200, "{}", a.text());
    for s in [id, a.stream()] {
        assert!(ctxlog::replay::verify(&*store, s).unwrap().problems.is_empty());
    }
    p.shutdown().await;
}
