//! The Gemini routes through the proxy to the strict fake: a tool loop that compacts, streamed
//! (`:streamGenerateContent?alt=sse`) and not, one session per conversation, every call logged
//! with the upstream's `usageMetadata`, the forwarded body the one rebuilt from the log,
//! `verify` clean; the key from `?key=` or `x-goog-api-key`; client mistakes are 4xx in
//! Google's error shape with nothing written.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use bytes::Bytes;
use ctxlog::{Event, MemoryStore, RequestOptions, Store, StreamId, Usage};
use ctxlog_fake_upstream::{Exchange, FakeUpstream};
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

mod support;
use support::{calls, events, proxy_on, served};

const MODEL: &str = "gemini-2.5-flash";
const KEY: &str = "AIza-GEMINI-SECRET-KEY-0123456789";

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
        let v = self.headers.get("x-request-id").expect("no request id");
        v.to_str().unwrap().strip_prefix("req_fake_").unwrap().parse().unwrap()
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// The model's content: the JSON body's, or the stream's chunks joined as a client does.
    fn content(&self) -> Value {
        let text = self.text();
        if !text.starts_with("data:") {
            let v: Value = serde_json::from_str(&text).unwrap();
            return v["candidates"][0]["content"].clone();
        }
        let mut parts: Vec<Value> = Vec::new();
        for event in text.split("\r\n\r\n").filter(|e| !e.is_empty()) {
            let chunk: Value = serde_json::from_str(event.strip_prefix("data: ").unwrap()).unwrap();
            for p in chunk["candidates"][0]["content"]["parts"].as_array().unwrap() {
                match (parts.last_mut(), p.get("text")) {
                    (Some(last), Some(t)) if last.get("text").is_some() => {
                        last["text"] = json!(format!("{}{}", last["text"].as_str().unwrap(), t.as_str().unwrap()));
                    }
                    _ => parts.push(p.clone()),
                }
            }
        }
        json!({"role": "model", "parts": parts})
    }
}

async fn post_to(addr: std::net::SocketAddr, path: &str, header_key: bool, body: &str) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::post(format!("http://{addr}{path}")).header("content-type", "application/json");
    if header_key {
        req = req.header("x-goog-api-key", KEY);
    }
    let resp = client.request(req.body(Full::new(Bytes::from(body.to_owned()))).unwrap()).await.unwrap();
    let (parts, b) = resp.into_parts();
    let body = b.collect().await.unwrap().to_bytes().to_vec();
    Answer { status: parts.status.as_u16(), headers: parts.headers, body }
}

/// Call `call` of a loop: odd calls stream, every third one sends the key in the query.
async fn post(addr: std::net::SocketAddr, call: usize, body: &str) -> Answer {
    let stream = call % 2 == 1;
    let in_query = call % 3 == 0;
    let verb = if stream { "streamGenerateContent" } else { "generateContent" };
    let mut query = Vec::new();
    if stream {
        query.push("alt=sse".to_owned());
    }
    if in_query {
        query.push(format!("key={KEY}"));
    }
    let q = if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
    post_to(addr, &format!("/v1beta/models/{MODEL}:{verb}{q}"), !in_query, body).await
}

fn exchange(up: &FakeUpstream, seq: u64) -> Exchange {
    up.requests().into_iter().find(|x| x.seq == seq).unwrap_or_else(|| panic!("no exchange {seq}"))
}

/// The usage the fake reported, read from its bytes (the last chunk's, for a stream).
fn reported(x: &Exchange) -> Usage {
    let body = String::from_utf8(x.response.body()).unwrap();
    let last = body.split("\r\n\r\n").filter(|e| !e.is_empty()).last().unwrap();
    let v: Value = serde_json::from_str(last.strip_prefix("data: ").unwrap_or(last)).unwrap();
    let u = &v["usageMetadata"];
    let cached = u["cachedContentTokenCount"].as_u64().unwrap_or(0);
    Usage {
        input: u["promptTokenCount"].as_u64().unwrap() - cached,
        cache_read: cached,
        cache_write: 0,
        output: u["candidatesTokenCount"].as_u64().unwrap(),
    }
}

const SYSTEM: &str = "You are a coding agent. Be brief.";
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

fn body(contents: &[Value]) -> String {
    json!({
        "contents": contents,
        "systemInstruction": {"parts": [{"text": SYSTEM}]},
        "tools": [{"functionDeclarations": [{"name": "read_file", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}]}],
        "generationConfig": {"temperature": 0, "maxOutputTokens": 256},
    })
    .to_string()
}

/// An agent loop as the SDK's automatic function calling runs it: each answer goes back as a
/// `model` turn, each `functionCall` gets its `functionResponse` in the next `user` turn.
#[tokio::test]
async fn a_tool_loop_of_forty_calls_compacts_and_every_call_is_the_logged_one() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // The legacy gate: this test counts compacting calls, which the cache-aware default defers
    // while the fake's cache is warm.
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.engine.budget = 6_000;
        c.engine.cache_aware = false;
    })
    .await;
    let mut contents = vec![json!({"role": "user", "parts": [{"text": "Fix the build. [[tool:read_file]]"}]})];
    let mut seqs = Vec::new();
    let mut sent_by_client = Vec::new();
    let mut stream = None;
    let mut turn = 0;
    const CALLS: usize = 40;
    for call in 0..CALLS {
        let a = post(p.addr(), call, &body(&contents)).await;
        assert_eq!(a.status, 200, "call {call}: {}", a.text());
        sent_by_client.push(contents.len());
        assert_eq!(*stream.get_or_insert(a.stream()), a.stream(), "call {call}: the loop left its session");
        seqs.push(a.seq());
        let content = a.content();
        let called: Vec<Value> =
            content["parts"].as_array().unwrap().iter().filter_map(|p| p.get("functionCall").cloned()).collect();
        contents.push(content);
        if called.is_empty() {
            turn += 1;
            let mut parts = vec![json!({"text": format!("Turn {turn}: next module. [[tool:read_file]]")})];
            if turn % 4 == 1 {
                // A screenshot now and then: logged as a blob, sent inline.
                parts.push(json!({"inlineData": {"mimeType": "image/png", "data": PNG}}));
            }
            contents.push(json!({"role": "user", "parts": parts}));
        } else {
            let output = format!("file {call}: {}", "fn main() { println!(\"hello\"); }\n".repeat(40));
            let responses: Vec<Value> = called
                .iter()
                .map(|c| json!({"functionResponse": {"name": c["name"], "response": {"output": output}}}))
                .collect();
            contents.push(json!({"role": "user", "parts": responses}));
        }
    }
    let id = stream.unwrap();
    let evs = calls(&*store, id, CALLS).await;
    let served = served(&evs);
    assert_eq!(served.len(), CALLS, "every call is logged");
    for (call, seq) in served.iter().zip(&seqs) {
        let x = exchange(&up, *seq);
        assert_eq!(x.response.status, 200, "call {}: {}", call.call, String::from_utf8_lossy(&x.response.body()));
        let opts = RequestOptions::from_client_body(&x.request.body).unwrap();
        let rebuilt = ctxlog::replay::served_request(&*store, id, call.call, &opts).unwrap();
        assert_eq!(
            rebuilt.body(),
            &x.request.body[..],
            "call {}: the forwarded body is not the logged view",
            call.call
        );
        let sent: Value = serde_json::from_slice(&x.request.body).unwrap();
        assert_eq!(sent["systemInstruction"]["parts"][0]["text"], SYSTEM, "call {}", call.call);
        assert_eq!(sent["generationConfig"], json!({"temperature": 0, "maxOutputTokens": 256}));
        assert_eq!(call.usage, Some(reported(&x)), "call {}: the logged usage is not the upstream's", call.call);
        // The key never reaches the body the log rebuilds; a screenshot the view shows goes inline.
        let text = String::from_utf8_lossy(&x.request.body);
        assert!(!text.contains(KEY));
        assert!(
            !text.contains("ctxlog-blob") && !text.contains("\"blob\""),
            "call {}: a blob reference was sent",
            call.call
        );
    }
    // A compacting call forwards fewer contents than the client sent (summaries, placeholders).
    let forwarded: Vec<usize> = seqs
        .iter()
        .map(|seq| {
            let sent: Value = serde_json::from_slice(&exchange(&up, *seq).request.body).unwrap();
            sent["contents"].as_array().unwrap().len()
        })
        .collect();
    let compacting = forwarded.iter().zip(&sent_by_client).filter(|(f, c)| f < c).count();
    assert!(compacting >= 20, "{compacting} compacting calls: forwarded {forwarded:?} of {sent_by_client:?}");
    assert!(evs.iter().any(|e| matches!(e, Event::Flushed(_))), "no flush to summaries");
    let images =
        seqs.iter().filter(|s| String::from_utf8_lossy(&exchange(&up, **s).request.body).contains(PNG)).count();
    assert!(images > 0, "no screenshot was ever forwarded");
    assert!(store
        .get_blob(&ctxlog::BlobId::of(&ctxlog::internal::wire::decode_base64(PNG).unwrap()))
        .unwrap()
        .is_some());
    assert!(served.iter().any(|c| c.usage.is_some_and(|u| u.cache_read > 0)), "the implicit cache never hit");
    let answers = evs.iter().filter(|e| matches!(e, Event::AnswerReceived(_))).count();
    assert_eq!(answers, CALLS, "every answer is in the log");
    assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
    // Only one session: the key in the query and in the header name the same caller.
    assert_eq!(store.streams().unwrap(), vec![id]);
    // `/metrics` labels Gemini calls by method (never by the model's name in the path).
    let m = p.metrics();
    assert_eq!(m.requests("/v1beta/models/*:generateContent", 200), 20);
    assert_eq!(m.requests("/v1beta/models/*:streamGenerateContent", 200), 20);
    p.shutdown().await;
}

/// What the API refuses is refused by the proxy before anything is written or forwarded, in
/// Google's error shape; the route's own mistakes (a stream without `alt=sse`) too.
#[tokio::test]
async fn client_mistakes_are_4xx_in_googles_shape_and_write_nothing() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let path = format!("/v1beta/models/{MODEL}:generateContent");
    let user = json!({"role": "user", "parts": [{"text": "hi"}]});
    let orphan = json!({"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]});
    let cases = [
        (body(&[json!({"role": "assistant", "parts": [{"text": "x"}]})]), "contents[0].role"),
        (body(&[json!({"role": "system", "parts": [{"text": "x"}]})]), "contents[0].role"),
        (body(&[json!({"role": "user", "parts": []})]), "contents[0].parts"),
        (body(&[user.clone(), orphan]), "contents"),
        (json!({"contents": [], "systemInstruction": {"parts": [{"text": "s"}]}}).to_string(), "contents"),
        (json!({"contents": [user.clone()], "systemInstruction": {"parts": []}}).to_string(), "systemInstruction"),
    ];
    for (b, field) in cases {
        let a = post_to(p.addr(), &path, true, &b).await;
        assert_eq!(a.status, 400, "{b}: {}", a.text());
        let e: Value = serde_json::from_slice(&a.body).unwrap();
        assert_eq!(e["error"]["code"], 400, "{}", a.text());
        assert_eq!(e["error"]["status"], "INVALID_ARGUMENT");
        assert!(e["error"]["message"].as_str().unwrap().starts_with(field), "{field}: {}", a.text());
    }
    let a = post_to(p.addr(), &format!("/v1beta/models/{MODEL}:streamGenerateContent"), true, &body(&[user])).await;
    assert_eq!(a.status, 400, "{}", a.text());
    assert!(a.text().contains("alt=sse"));
    assert!(up.requests().is_empty(), "a refused request was forwarded");
    for id in store.streams().unwrap() {
        assert!(
            !events(&*store, id).iter().any(|e| matches!(e, Event::MessageAppended(_))),
            "a refused request was logged"
        );
    }
    p.shutdown().await;
}

/// A stream whose upstream fails before its final chunk is not recorded as answered, and the
/// client gets Google's error in the stream; the next call goes on in the same session.
#[tokio::test]
async fn a_stream_cut_before_its_final_chunk_is_not_an_answer() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let contents = vec![json!({"role": "user", "parts": [{"text": "Say something long."}]})];
    up.script(ctxlog_fake_upstream::Fault::StreamError { after_events: 1 }, 1);
    let a = post(p.addr(), 1, &body(&contents)).await;
    assert_eq!(a.status, 200);
    assert!(a.text().contains("\"error\""), "{}", a.text());
    let id = a.stream();
    assert!(served(&events(&*store, id)).is_empty(), "a failed stream was committed");
    let b = post(p.addr(), 1, &body(&contents)).await;
    assert_eq!(b.stream(), id);
    assert!(b.text().contains("finishReason"), "{}", b.text());
    assert_eq!(served(&calls(&*store, id, 1).await).len(), 1);
    assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
    p.shutdown().await;
}

/// Without `--budget`, a Gemini session's budget is its model's window (from the path) less
/// the output its first request reserves (`generationConfig.maxOutputTokens`).
#[tokio::test]
async fn the_budget_comes_from_the_model_in_the_path() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.models = Some(ctxlog_proxy::Models::default())).await;
    let a = post(p.addr(), 0, &body(&[json!({"role": "user", "parts": [{"text": "hi"}]})])).await;
    assert_eq!(a.status, 200, "{}", a.text());
    let budget = events(&*store, a.stream()).iter().find_map(|e| match e {
        Event::SessionStarted(s) => Some(s.config.budget),
        _ => None,
    });
    assert_eq!(budget, Some(1_048_576 - 256));
    p.shutdown().await;
}
