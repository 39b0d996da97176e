//! The proxy end to end on real sockets, against the workspace's loopback fake upstream
//! (`ctxlog-fake-upstream`: both APIs' real SSE sequences, a prompt-cache usage model, scripted
//! faults and a byte-exact record of every exchange).
//!
//! The fake names each exchange in its response (`request-id` / `x-request-id:
//! req_fake_SEQ`), and the proxy passes that header back: a test knows exactly which recorded
//! exchange served each of its calls, also when many run at once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ctxlog::event::GuardKind;
use ctxlog::{Event, MemoryStore, RequestOptions, Store, StreamId, Usage};
use ctxlog_fake_upstream::{Exchange, FakeUpstream, Fault};
use ctxlog_proxy::{serve, ProxyConfig, ProxyHandle};
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

mod support;
use support::{calls, events, proxy_on, served, KEY, SETTLE};

const OPENAI_KEY: &str = "sk-openai-SECRET-KEY-9876543210";
const ANTHROPIC: &str = "/v1/messages";
const OPENAI: &str = "/v1/chat/completions";

fn upstream() -> FakeUpstream {
    FakeUpstream::start().unwrap()
}

/// What the client got.
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
    /// The body ended as framed (false: the connection was cut mid-body).
    complete: bool,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    fn stream(&self) -> StreamId {
        self.headers.get("x-ctxlog-stream").expect("no x-ctxlog-stream").to_str().unwrap().parse().unwrap()
    }
    /// The fake's exchange this answer came from (by the request id it put in its headers).
    fn seq(&self) -> u64 {
        let v = self.headers.get("request-id").or_else(|| self.headers.get("x-request-id")).expect("no request id");
        v.to_str().unwrap().strip_prefix("req_fake_").unwrap().parse().unwrap()
    }
}

/// POSTs `body`; collects the answer frame by frame, so that a cut body keeps what arrived.
async fn post(addr: std::net::SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::post(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.header("content-type", "application/json").body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    let resp = client.request(req).await.unwrap();
    let (parts, mut b) = resp.into_parts();
    let mut out = Vec::new();
    let mut complete = true;
    while let Some(frame) = b.frame().await {
        match frame {
            Ok(f) => {
                if let Ok(d) = f.into_data() {
                    out.extend_from_slice(&d);
                }
            }
            Err(_) => {
                complete = false;
                break;
            }
        }
    }
    Answer { status: parts.status.as_u16(), headers: parts.headers, body: out, complete }
}

async fn get(addr: std::net::SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client.request(req.body(Full::new(Bytes::new())).unwrap()).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn exchange(up: &FakeUpstream, seq: u64) -> Exchange {
    up.requests().into_iter().find(|x| x.seq == seq).unwrap_or_else(|| panic!("no exchange {seq}"))
}

fn appended(evs: &[Event]) -> usize {
    evs.iter().filter(|e| matches!(e, Event::MessageAppended(_))).count()
}

fn diverged(evs: &[Event]) -> Vec<(u64, String)> {
    evs.iter()
        .filter_map(|e| match e {
            Event::GuardRaised(g) => match &g.kind {
                GuardKind::HistoryDiverged { seq, successor } => Some((*seq, successor.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// A counter of `/metrics` (the public text the proxy serves).
fn counter(p: &ProxyHandle, name: &str) -> u64 {
    let text = p.metrics().render();
    let line = text.lines().find(|l| l.split(' ').next() == Some(name)).unwrap_or_else(|| panic!("no {name}: {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Waits (bounded) until the proxy has settled `n` calls (committed or aborted): both are
/// counted only after the commit landed or the plan was dropped.
async fn settled(p: &ProxyHandle, n: u64) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    while counter(p, "ctxlog_proxy_committed_total") + counter(p, "ctxlog_proxy_aborted_total") < n {
        assert!(tokio::time::Instant::now() < deadline, "the proxy never settled {n} calls");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn msgs(history: &[(&str, &str)]) -> String {
    let m: Vec<String> = history.iter().map(|(r, t)| json!({"role": r, "content": t}).to_string()).collect::<Vec<_>>();
    m.join(",")
}

fn anthropic_body(history: &[(&str, &str)], stream: bool) -> String {
    format!(
        r#"{{"model":"claude-x","max_tokens":512,"system":"You are terse.","messages":[{}],"stream":{stream}}}"#,
        msgs(history)
    )
}

/// OpenAI: the system prompt is the first message; `include_usage` only matters when streaming.
fn openai_body(history: &[(&str, &str)], stream: bool, include_usage: bool) -> String {
    let mut all = vec![("system", "You are terse.")];
    all.extend_from_slice(history);
    format!(
        r#"{{"model":"gpt-x","messages":[{}],"stream":{stream}{}}}"#,
        msgs(&all),
        if stream && include_usage { r#","stream_options":{"include_usage":true}"# } else { "" }
    )
}

fn body_for(path: &str, history: &[(&str, &str)], stream: bool) -> String {
    if path == OPENAI {
        openai_body(history, stream, true)
    } else {
        anthropic_body(history, stream)
    }
}

fn auth_for(path: &str) -> (&'static str, &'static str) {
    if path == OPENAI {
        ("authorization", "Bearer sk-openai-SECRET-KEY-9876543210")
    } else {
        ("x-api-key", KEY)
    }
}

fn opts_of(body: &[u8]) -> RequestOptions {
    RequestOptions::from_client_body(body).unwrap()
}

/// The usage the fake reported in this exchange, read from the bytes it sent (independently
/// of the proxy's scanner): Anthropic `message_start` + `message_delta` or the JSON `usage`,
/// OpenAI the chunk carrying `usage` or the JSON `usage`. `None` when it reported none.
fn reported(x: &Exchange) -> Option<Usage> {
    let body = String::from_utf8(x.response.body()).unwrap();
    let sse = x.response.headers.iter().any(|(n, v)| n == "content-type" && v.starts_with("text/event-stream"));
    let values: Vec<Value> = if sse {
        body.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    } else {
        vec![serde_json::from_str(&body).unwrap()]
    };
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    if x.request.path.starts_with(ANTHROPIC) {
        let mut usage: Option<Usage> = None;
        for v in values {
            let u = match v["type"].as_str() {
                Some("message_start") => &v["message"]["usage"],
                Some("message") => &v["usage"],
                Some("message_delta") => {
                    if let Some(u) = usage.as_mut() {
                        u.output = n(&v["usage"]["output_tokens"]);
                    }
                    continue;
                }
                _ => continue,
            };
            usage = Some(Usage {
                input: n(&u["input_tokens"]),
                cache_read: n(&u["cache_read_input_tokens"]),
                cache_write: n(&u["cache_creation_input_tokens"]),
                output: n(&u["output_tokens"]),
            });
        }
        usage
    } else {
        values.iter().find(|v| v["usage"].is_object()).map(|v| {
            let u = &v["usage"];
            let cached = n(&u["prompt_tokens_details"]["cached_tokens"]);
            Usage {
                input: n(&u["prompt_tokens"]) - cached,
                cache_read: cached,
                cache_write: 0,
                output: n(&u["completion_tokens"]),
            }
        })
    }
}

/// The messages (and Anthropic `system`) of a request body, parsed.
/// A body's `system` and `messages`, without their cache breakpoints (the proxy places its own
/// on Anthropic requests: `breakpoints.rs` tests where), a string system as one text block and a
/// message's one text block as a string.
fn conversation_of(body: &[u8]) -> (Value, Value) {
    let mut v: Value = serde_json::from_slice(body).unwrap();
    if let Some(s) = v["system"].as_str() {
        v["system"] = serde_json::json!([{"type": "text", "text": s}]);
    }
    let unmark = |blocks: &mut Value| {
        for b in blocks.as_array_mut().into_iter().flatten() {
            b.as_object_mut().map(|o| o.remove("cache_control"));
        }
    };
    unmark(&mut v["system"]);
    for m in v["messages"].as_array_mut().into_iter().flatten() {
        unmark(&mut m["content"]);
        // A marked string content is written as the one text block it is to the API.
        if let Some([b]) = m["content"].as_array().map(Vec::as_slice) {
            if b["type"] == "text" && b.as_object().is_some_and(|o| o.len() == 2) {
                m["content"] = b["text"].clone();
            }
        }
    }
    (v["system"].clone(), v["messages"].clone())
}

/// A cache breakpoint on the system prompt, as agents using prompt caching send it; long
/// enough (over 1,024 tokens) for Anthropic to cache it.
fn cached_system() -> String {
    format!(
        r#""system":[{{"type":"text","text":"You are terse. {}","cache_control":{{"type":"ephemeral"}}}}]"#,
        "Rules. ".repeat(700)
    )
}

/// Four turns of one agent; every call checked against the fake's record. `cache`: the
/// Anthropic system prompt carries a cache breakpoint (the fake then reports cache writes).
async fn conversation(path: &str, stream: bool, include_usage: bool, cache: bool) {
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let openai = path == OPENAI;
    let auth = auth_for(path);
    let mut history: Vec<(&str, String)> = vec![];
    let mut id = None;
    let (mut prompt_total, mut cache_total, mut written) = (0, 0, 0);
    for turn in 0..4 {
        // One turn asks for a tool: the fake answers with a tool call in the API's shape.
        let tool = if turn == 2 { " [[tool:read_file]]" } else { "" };
        // Over 1,024 tokens a turn: OpenAI's automatic prefix cache starts there.
        history.push(("user", format!("question {turn}: {}{tool}", "tell me more ".repeat(350))));
        let h: Vec<(&str, &str)> = history.iter().map(|(r, t)| (*r, t.as_str())).collect();
        let body = if openai { openai_body(&h, stream, include_usage) } else { anthropic_body(&h, stream) };
        let body = if cache { body.replace(r#""system":"You are terse.""#, &cached_system()) } else { body };
        let a = post(p.addr(), path, &[auth, ("anthropic-version", "2023-06-01")], &body).await;
        assert_eq!(a.status, 200, "{}", a.text());
        assert!(a.complete);
        let sid = a.stream();
        assert_eq!(*id.get_or_insert(sid), sid, "turn {turn} landed in another session");
        let x = exchange(&up, a.seq());
        assert_eq!(x.seq, up.requests().last().unwrap().seq, "one upstream call per client call");
        assert!(x.response.complete);
        // The client receives exactly the upstream's bytes (less the usage chunk ctxlog asked
        // for on its behalf).
        let upstream_bytes = x.response.body();
        let expected =
            if openai && stream && !include_usage { without_usage_chunk(&upstream_bytes) } else { upstream_bytes };
        assert_eq!(a.body, expected, "the client did not get the upstream's bytes");
        if tool.is_empty() {
            assert!(a.text().contains("ack"));
        } else {
            assert!(a.text().contains("read_file"), "the tool call did not come through: {}", a.text());
        }
        assert_eq!(x.request.header(auth.0), Some(auth.1), "auth was not passed through");
        assert!(x.request.header("x-ctxlog-stream").is_none() && x.request.header("x-ctxlog-session").is_none());
        let evs = calls(&*store, sid, turn + 1).await;
        let call = served(&evs)[turn];
        // The forwarded body is the request ctxlog recorded for the call, byte for byte.
        let rebuilt = ctxlog::replay::served_request(&*store, sid, call.call, &opts_of(&x.request.body)).unwrap();
        assert_eq!(rebuilt.body(), &x.request.body[..], "turn {turn}");
        assert_eq!(rebuilt.view_digest(), call.digest);
        // No compaction here: the view is the client's conversation.
        let (sys, sent) = conversation_of(&x.request.body);
        assert_eq!((sys, sent), conversation_of(body.as_bytes()), "turn {turn}: the view is not the client's history");
        match reported(&x) {
            Some(u) => {
                assert_eq!(call.usage, Some(u), "turn {turn}: the logged usage is not the upstream's");
                assert_eq!(call.reported_tokens, Some(u.prompt_total()));
                assert!(call.anchored, "the meter did not anchor on the reported usage");
                prompt_total += u.prompt_total();
                cache_total += u.cache_read;
                written += u.cache_write;
            }
            None => panic!("turn {turn}: the upstream reported no usage (ctxlog asks for it on every stream)"),
        }
        history.push(("assistant", format!("answer {turn}")));
    }
    // The fake's cache model saw the shared prefix: the reads are real numbers, not zeros. An
    // Anthropic client without breakpoints gets the proxy's own (`--cache-breakpoints auto`).
    assert!(cache_total > 0, "no call reported a cache read: the usage comparison proves little");
    assert_eq!(written > 0, !openai, "cache writes reported: {written}");
    let id = id.unwrap();
    // Each request appended only its new suffix: 4 users + 3 replies + the system prompt.
    assert_eq!(appended(&events(&*store, id)), 7 + 1);
    let report = ctxlog::replay::verify(&*store, id).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    // /metrics says the same.
    settled(&p, 4).await;
    let (status, metrics) = get(p.addr(), "/metrics", &[]).await;
    assert_eq!(status, 200);
    assert!(metrics.contains("# TYPE ctxlog_proxy_requests_total counter"), "{metrics}");
    assert!(metrics.contains(&format!("ctxlog_proxy_requests_total{{path=\"{path}\",status=\"200\"}} 4")), "{metrics}");
    assert_eq!(counter(&p, "ctxlog_proxy_committed_total"), 4);
    assert_eq!(counter(&p, "ctxlog_proxy_aborted_total"), 0);
    assert_eq!(counter(&p, "ctxlog_proxy_prompt_tokens_total"), prompt_total);
    assert_eq!(counter(&p, "ctxlog_proxy_cache_read_tokens_total"), cache_total);
    assert_eq!(counter(&p, "ctxlog_proxy_added_latency_seconds_count"), 4);
    assert_eq!(get(p.addr(), "/healthz", &[]).await.0, 200);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_streaming_conversation() {
    conversation(ANTHROPIC, true, true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_streaming_conversation_with_a_cache_breakpoint() {
    conversation(ANTHROPIC, true, true, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_json_conversation() {
    conversation(ANTHROPIC, false, true, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_streaming_conversation() {
    conversation(OPENAI, true, true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_streaming_without_include_usage_is_committed_with_usage() {
    conversation(OPENAI, true, false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_json_conversation() {
    conversation(OPENAI, false, true, false).await;
}

/// An OpenAI stream without its usage chunk (`"choices":[]`), as a client that did not ask
/// for `include_usage` gets it.
fn without_usage_chunk(body: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(body);
    let events: Vec<&str> = text.split_inclusive("\n\n").filter(|e| !e.contains("\"choices\":[]")).collect();
    events.concat().into_bytes()
}

/// One call of `path` against an upstream scripted with `fault`; returns what the client got,
/// the session's events once the proxy settled the call, and the upstream's exchange.
async fn one_fault(path: &str, fault: Fault, stream: bool) -> (Answer, Vec<Event>, Option<Exchange>) {
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // Short only where the fault needs the timeout: elsewhere a slow machine must not turn a
    // scripted answer into a 504.
    let quiet = matches!(fault, Fault::Hang | Fault::Stall { .. });
    let timeout = if quiet { Duration::from_millis(1500) } else { Duration::from_secs(20) };
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.upstream_timeout = timeout).await;
    up.script(fault, 1);
    let body = body_for(path, &[("user", "hi")], stream);
    let auth = [auth_for(path)];
    let call = post(p.addr(), path, &auth, &body);
    let a = tokio::time::timeout(SETTLE, call).await.expect("the proxy never ended the answer");
    settled(&p, 1).await;
    assert_eq!(counter(&p, "ctxlog_proxy_committed_total"), 0, "{path}: a failed call was committed");
    assert_eq!(counter(&p, "ctxlog_proxy_aborted_total"), 1);
    let ids = store.streams().unwrap();
    assert_eq!(ids.len(), 1);
    if a.headers.contains_key("x-ctxlog-stream") {
        assert_eq!(a.stream(), ids[0]);
    }
    let evs = events(&*store, ids[0]);
    assert!(served(&evs).is_empty(), "{path}: a failed call was committed");
    assert_eq!(appended(&evs), 2, "{path}: the appended messages (system, user) stay, nothing else");
    let x = a.headers.contains_key("request-id") || a.headers.contains_key("x-request-id");
    let x = x.then(|| exchange(&up, a.seq()));
    assert_eq!(up.requests().len(), 1, "the proxy retried");
    p.shutdown().await;
    (a, evs, x)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_errors_reach_the_client_unchanged_and_commit_nothing() {
    for path in [ANTHROPIC, OPENAI] {
        for (status, retry) in [(429u16, Some(7u64)), (500, None), (529, None)] {
            for stream in [true, false] {
                let what = format!("{path} {status} stream={stream}");
                let (a, _, x) = one_fault(path, Fault::Status { status, retry_after_secs: retry }, stream).await;
                let x = x.unwrap();
                assert_eq!(a.status, status, "{what}");
                assert_eq!(x.response.status, status);
                assert_eq!(a.body, x.response.body(), "{what}: the error body changed");
                let v: Value = serde_json::from_slice(&a.body).unwrap();
                assert!(v["error"]["message"].as_str().unwrap().contains("scripted"), "{what}: {v}");
                let retry_after = a.headers.get("retry-after").map(|v| v.to_str().unwrap().to_owned());
                assert_eq!(retry_after, retry.map(|s| s.to_string()), "{what}: retry-after");
                assert_eq!(
                    a.headers.get("content-type").unwrap(),
                    "application/json",
                    "{what}: the upstream's content type"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_mid_answer_commits_nothing() {
    for path in [ANTHROPIC, OPENAI] {
        for stream in [true, false] {
            let (a, _, x) = one_fault(path, Fault::Disconnect { after_events: 3 }, stream).await;
            let x = x.unwrap();
            assert!(!x.response.complete);
            if !stream {
                // A JSON answer is held whole until its commit: a cut one is an error, never a
                // truncated 200.
                assert_eq!(a.status, 502, "{path}");
                let v: Value = serde_json::from_slice(&a.body).unwrap();
                assert!(v["error"]["message"].as_str().unwrap().contains("cut"), "{path}: {v}");
                continue;
            }
            assert_eq!(a.status, 200);
            assert!(!a.complete, "{path} stream={stream}: the client was not told the answer was cut");
            // Every byte that arrived before the cut reaches the client (see `Tee::err`).
            let sent = x.response.body();
            assert_eq!(a.body, sent, "{path} stream={stream}: the client got other bytes than the upstream's");
            assert!(!sent.is_empty());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_goes_quiet_times_out_and_commits_nothing() {
    for path in [ANTHROPIC, OPENAI] {
        let (a, _, x) = one_fault(path, Fault::Stall { after_events: 3 }, true).await;
        let x = x.unwrap();
        assert_eq!(a.status, 200);
        assert!(!a.complete, "{path}: the stalled stream was ended as if complete");
        // The three events were flushed long before the timeout: the client has all of them.
        assert_eq!(x.response.chunks.len(), 3);
        assert_eq!(a.body, x.response.body(), "{path}: the client got other bytes than the upstream's");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_error_event_reaches_the_client_and_commits_nothing() {
    for path in [ANTHROPIC, OPENAI] {
        let (a, _, x) = one_fault(path, Fault::StreamError { after_events: 2 }, true).await;
        let x = x.unwrap();
        assert_eq!(a.status, 200);
        assert!(a.complete && x.response.complete);
        assert_eq!(a.body, x.response.body(), "{path}: the client got other bytes than the upstream's");
        assert!(a.text().contains("\"error\""), "{path}: {}", a.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_timeout_is_504_and_commits_nothing() {
    // The four cases wait out their timeouts side by side.
    let mut cases = Vec::new();
    for path in [ANTHROPIC, OPENAI] {
        for stream in [true, false] {
            cases.push((path, tokio::spawn(one_fault(path, Fault::Hang, stream))));
        }
    }
    for (path, case) in cases {
        let (a, _, x) = case.await.unwrap();
        assert!(x.is_none(), "a hung upstream sent headers");
        assert_eq!(a.status, 504, "{path}");
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        if path == ANTHROPIC {
            assert_eq!(v["type"], "error", "{v}");
            assert_eq!(v["error"]["type"], "timeout_error", "{v}");
        } else {
            assert_eq!(v["error"]["code"], "timeout_error", "{v}");
            assert!(v["error"]["message"].is_string(), "{v}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_are_refused_and_nothing_is_written() {
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.max_body = 4096).await;
    let cases: [(&str, &str, u16, &str); 10] = [
        (ANTHROPIC, "{not json", 400, "body"),
        (ANTHROPIC, r#"{"model":"m"}"#, 400, "messages"),
        (ANTHROPIC, r#"{"messages":[{"role":"user","content":[{"type":"image"}]}]}"#, 400, "messages[0].content[0]"),
        (ANTHROPIC, r#"{"messages":[{"role":"tool","content":"x","tool_call_id":"a"}]}"#, 400, "messages[0]"),
        (ANTHROPIC, r#"{"system":7,"messages":[{"role":"user","content":"x"}]}"#, 400, "system"),
        (OPENAI, r#"{"messages":[{"role":"wizard","content":"x"}]}"#, 400, "messages[0].role"),
        (OPENAI, "[1,2]", 400, "body"),
        (OPENAI, r#"{"messages":"hi"}"#, 400, "messages"),
        (OPENAI, r#"{"system":"s","messages":[{"role":"user","content":"x"}]}"#, 400, "system"),
        (OPENAI, r#"{"messages":[{"role":"user","content":"x"},{"content":"y"}]}"#, 400, "messages[1]"),
    ];
    for (path, body, code, field) in cases {
        let a = post(p.addr(), path, &[auth_for(path)], body).await;
        let text = a.text();
        assert_eq!(a.status, code, "{body}: {text}");
        assert!(text.contains(field), "{body}: the error does not name {field}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        if path == ANTHROPIC {
            assert_eq!((&v["type"], &v["error"]["type"]), (&json!("error"), &json!("invalid_request_error")), "{v}");
        } else {
            assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        }
    }
    let big = anthropic_body(&[("user", &"x".repeat(5000))], false);
    let a = post(p.addr(), ANTHROPIC, &[("x-api-key", KEY)], &big).await;
    assert_eq!(a.status, 413);
    let v: Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!((&v["type"], &v["error"]["type"]), (&json!("error"), &json!("request_too_large")), "{v}");
    let big = openai_body(&[("user", &"x".repeat(5000))], false, false);
    let a = post(p.addr(), OPENAI, &[auth_for(OPENAI)], &big).await;
    assert_eq!(a.status, 413);
    let v: Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(v["error"]["code"], "request_too_large", "{v}");
    assert!(v["error"]["message"].is_string(), "{v}");
    assert!(store.streams().unwrap().is_empty(), "a refused request wrote a session");
    assert!(up.requests().is_empty(), "a refused request reached the upstream");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_history_names_its_field_in_a_named_session_too() {
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    // An orphan tool result at messages[1]: the refusal names it whether or not the session is
    // named (a name is one more record before the appends).
    let body = r#"{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}]}"#;
    for headers in [&[("x-api-key", KEY)][..], &[("x-api-key", KEY), ("x-ctxlog-session", "named")][..]] {
        let a = post(p.addr(), ANTHROPIC, headers, body).await;
        assert_eq!(a.status, 400, "{}", a.text());
        assert!(a.text().contains("messages[1]"), "{headers:?}: {}", a.text());
    }
    assert!(store.streams().unwrap().is_empty(), "a refused request wrote a session");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_token_is_required_when_set() {
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.client_token = Some("tok-123".into())).await;
    let body = anthropic_body(&[("user", "hi")], false);
    for bad in [&[][..], &[("x-ctxlog-token", "tok-124")][..], &[("x-ctxlog-token", "tok-12")][..]] {
        assert_eq!(post(p.addr(), ANTHROPIC, bad, &body).await.status, 401);
        assert_eq!(get(p.addr(), "/metrics", bad).await.0, 401);
        assert_eq!(post(p.addr(), "/v1/other", bad, "{}").await.status, 401);
    }
    assert!(up.requests().is_empty() && store.streams().unwrap().is_empty());
    assert_eq!(get(p.addr(), "/healthz", &[]).await.0, 200);
    let a = post(p.addr(), ANTHROPIC, &[("x-ctxlog-token", "tok-123"), ("x-api-key", KEY)], &body).await;
    assert_eq!(a.status, 200);
    let x = exchange(&up, a.seq());
    assert!(x.request.header("x-ctxlog-token").is_none(), "the token went upstream");
    assert_eq!(x.request.header("x-api-key"), Some(KEY));
    assert_eq!(get(p.addr(), "/metrics", &[("x-ctxlog-token", "tok-123")]).await.0, 200);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_paths_pass_through_untouched() {
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let body = r#"{"model":"m", "prompt":"count me"}"#;
    let a = post(p.addr(), "/v1/complete?beta=true", &[("x-api-key", KEY)], body).await;
    // The fake knows no such path: its 404 (in Anthropic's shape) comes back as it was.
    let x = &up.requests()[0];
    assert_eq!(x.request.path, "/v1/complete?beta=true");
    assert_eq!(x.request.body, body.as_bytes());
    assert_eq!(x.request.header("x-api-key"), Some(KEY));
    assert_eq!((a.status, &a.body), (404, &x.response.body()));
    assert!(store.streams().unwrap().is_empty());
    let (_, metrics) = get(p.addr(), "/metrics", &[]).await;
    assert!(metrics.contains("ctxlog_proxy_requests_total{path=\"other\",status=\"404\"} 1"), "{metrics}");
    p.shutdown().await;
}

/// The `x-ctxlog-branch-of` / `x-ctxlog-fork-at` headers of an answer (none: not a branch).
fn fork_of(a: &Answer) -> Option<(StreamId, u64)> {
    let parent = a.headers.get("x-ctxlog-branch-of")?.to_str().unwrap().parse().unwrap();
    let at =
        a.headers.get("x-ctxlog-fork-at").expect("a branch without its fork point").to_str().unwrap().parse().unwrap();
    Some((parent, at))
}

/// The `Branched` records of a stream: its lineage, oldest first, as (parent, messages shared).
fn lineage(evs: &[Event]) -> Vec<(StreamId, u64)> {
    evs.iter()
        .filter_map(|e| match e {
            Event::Branched(b) => Some((StreamId(b.parent), b.messages)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_history_is_a_branch_with_its_fork_point() {
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    // Sends `h`; checks the forwarded view is exactly the client's history and the call's record.
    async fn send(
        p: &ProxyHandle,
        up: &FakeUpstream,
        store: &dyn Store,
        h: &[(&str, &str)],
        calls_then: usize,
    ) -> (StreamId, Option<(StreamId, u64)>) {
        let hdr = [("x-api-key", KEY), ("x-ctxlog-session", "agent-7")];
        let body = anthropic_body(h, false);
        let a = post(p.addr(), ANTHROPIC, &hdr, &body).await;
        assert_eq!(a.status, 200, "{}", a.text());
        let x = exchange(up, a.seq());
        assert_eq!(
            conversation_of(&x.request.body),
            conversation_of(body.as_bytes()),
            "the view is not the client's history"
        );
        let evs = calls(store, a.stream(), calls_then).await;
        let call = served(&evs)[calls_then - 1];
        let rebuilt = ctxlog::replay::served_request(store, a.stream(), call.call, &opts_of(&x.request.body)).unwrap();
        assert_eq!(rebuilt.body(), &x.request.body[..]);
        (a.stream(), fork_of(&a))
    }
    let (first, fork) = send(&p, &up, &*store, &[("user", "one"), ("assistant", "a1"), ("user", "two")], 1).await;
    assert_eq!(fork, None, "the first conversation is the lineage's root");
    // The client edited its second message: seq 0 is the system prompt, 1 "one", 2 the edit.
    let edited = [("user", "one"), ("assistant", "EDITED"), ("user", "two"), ("assistant", "a2"), ("user", "3")];
    let (second, fork) = send(&p, &up, &*store, &edited, 1).await;
    assert_ne!(first, second);
    assert_eq!(fork, Some((first, 2)));
    assert!(diverged(&events(&*store, first)).is_empty(), "the original records no divergence");
    let evs = events(&*store, second);
    assert_eq!(lineage(&evs), vec![(first, 2)]);
    assert_eq!(appended(&evs), 6, "the branch holds the shared prefix (copied) and its own messages");
    let forwarded = String::from_utf8(exchange(&up, 1).request.body).unwrap();
    assert!(forwarded.contains("EDITED") && !forwarded.contains("a1"), "the view mixed the old history in");
    // The branch is found again after a restart, and the root too.
    let p2 = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let mut longer = edited.to_vec();
    longer.extend([("assistant", "x"), ("user", "4")]);
    assert_eq!(send(&p2, &up, &*store, &longer, 2).await, (second, Some((first, 2))), "the branch did not continue");
    let (again, fork) = send(
        &p2,
        &up,
        &*store,
        &[("user", "one"), ("assistant", "a1"), ("user", "two"), ("assistant", "b"), ("user", "c")],
        2,
    )
    .await;
    assert_eq!((again, fork), (first, None), "the root did not continue");
    // Truncated: the client dropped its last four messages (and asks again): a branch of the
    // branch that ends where the client's history ends.
    let (third, fork) = send(&p2, &up, &*store, &longer[..3], 1).await;
    assert!(third != second && third != first);
    assert_eq!(fork, Some((second, 4)), "truncation forks at its end");
    assert_eq!(
        lineage(&events(&*store, third)),
        vec![(first, 2), (second, 4)],
        "a branch of a branch keeps its lineage"
    );
    assert_eq!(appended(&events(&*store, third)), 4);
    // Truncated and changed: the fork point is the first differing message, in the branch it
    // shares the most with.
    let (fourth, fork) =
        send(&p2, &up, &*store, &[("user", "one"), ("assistant", "EDITED"), ("user", "again")], 1).await;
    assert_eq!(fork, Some((second, 3)));
    for id in [first, second, third, fourth] {
        assert!(diverged(&events(&*store, id)).is_empty());
        assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
        // The header's name is recorded at version 2 of every session of the chain, so
        // `ctxlog sessions` shows it and `--session agent-7` finds the current one.
        let named = events(&*store, id).into_iter().nth(1);
        assert!(
            matches!(&named, Some(Event::SessionNamed(n)) if n.name == "agent-7"),
            "session {id} is not named: {named:?}"
        );
    }
    assert_eq!(counter(&p, "ctxlog_proxy_branched_total") + counter(&p2, "ctxlog_proxy_branched_total"), 3);
    p.shutdown().await;
    p2.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_sessions_in_parallel() {
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let mut tasks = Vec::new();
    for s in 0..50 {
        let addr = p.addr();
        // Half the agents speak each API; streaming alternates by turn.
        let path = if s % 2 == 0 { ANTHROPIC } else { OPENAI };
        tasks.push(tokio::spawn(async move {
            let mut h: Vec<(&str, String)> = vec![];
            let mut id = None;
            let mut seqs = Vec::new();
            for t in 0..3 {
                h.push(("user", format!("session {s} turn {t}")));
                let hv: Vec<(&str, &str)> = h.iter().map(|(r, x)| (*r, x.as_str())).collect();
                let body = body_for(path, &hv, (s + t) % 2 == 0);
                let a = post(addr, path, &[auth_for(path)], &body).await;
                assert_eq!(a.status, 200, "{}", a.text());
                assert!(a.complete);
                assert_eq!(*id.get_or_insert(a.stream()), a.stream());
                seqs.push((a.seq(), a.body, body));
                h.push(("assistant", format!("reply {s}.{t}")));
            }
            (s, id.unwrap(), seqs)
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let mut ids: Vec<StreamId> = results.iter().map(|r| r.1).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 50);
    assert_eq!(up.requests().len(), 150);
    for (s, id, seqs) in results {
        let evs = calls(&*store, id, 3).await;
        assert_eq!(appended(&evs), 6);
        for (call, (seq, answer, body)) in seqs.into_iter().enumerate() {
            let x = exchange(&up, seq);
            assert_eq!(answer, x.response.body(), "session {s} call {call}: another answer");
            // No mixing: the forwarded view is this session's, and what was logged for it.
            let (_, sent) = conversation_of(&x.request.body);
            assert_eq!(sent, conversation_of(body.as_bytes()).1, "session {s} call {call}");
            for m in sent.as_array().unwrap() {
                let text = m["content"].as_str().unwrap();
                assert!(
                    text == "You are terse."
                        || text.starts_with(&format!("session {s} "))
                        || text.starts_with(&format!("reply {s}.")),
                    "session {s} got {text}"
                );
            }
            let rebuilt = ctxlog::replay::served_request(&*store, id, call as u64, &opts_of(&x.request.body)).unwrap();
            assert_eq!(rebuilt.body(), &x.request.body[..], "session {s} call {call}");
        }
        assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
    }
    p.shutdown().await;
}

/// Waits (bounded) until the fake has received `n` model requests.
async fn received(up: &FakeUpstream, n: usize) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    while up.requests().len() < n {
        assert!(tokio::time::Instant::now() < deadline, "the upstream never got {n} requests");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_session_waits_then_is_told_to_retry() {
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.session_wait = Duration::from_millis(100)).await;
    // The first call is held upstream while the second waits past the bound.
    up.script(Fault::Hold, 1);
    let body = anthropic_body(&[("user", "hi")], false);
    let addr = p.addr();
    let b = body.clone();
    let slow = tokio::spawn(async move { post(addr, ANTHROPIC, &[("x-api-key", KEY)], &b).await });
    received(&up, 1).await;
    let a = post(addr, ANTHROPIC, &[("x-api-key", KEY)], &body).await;
    // Nothing unlogged reaches the provider: the client is told to retry, as on overload.
    assert_eq!(a.status, 529, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(a.headers.get("retry-after").map(|v| v.to_str().unwrap()), Some("1"));
    let err: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(err["error"]["type"], "overloaded_error");
    assert_eq!(up.requests().len(), 1, "the busy request went upstream");
    assert_eq!(p.metrics().busy(), 1);
    let (_, metrics) = get(addr, "/metrics", &[]).await;
    assert!(metrics.contains("ctxlog_proxy_busy_total 1"), "{metrics}");
    assert!(!slow.is_finished(), "the held call ended before its release");
    up.release();
    let slow = slow.await.unwrap();
    assert_eq!(slow.status, 200);
    assert_ne!(exchange(&up, slow.seq()).request.body, body.as_bytes(), "the logged call was not rewritten");
    assert_eq!(store.streams().unwrap().len(), 1);
    let id = store.streams().unwrap()[0];
    assert_eq!(slow.stream(), id);
    settled(&p, 1).await;
    let evs = events(&*store, id);
    assert_eq!(served(&evs).len(), 1);
    assert_eq!(appended(&evs), 2, "the refused request appended something (system, user)");
    // Waiting (within the bound) serializes the calls of one session instead: the second
    // reaches the upstream only after the first's answer ended.
    let p2 = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    up.reset();
    up.script(Fault::Hold, 1);
    let b2 = anthropic_body(&[("user", "hi"), ("assistant", "Hello"), ("user", "more")], false);
    let addr2 = p2.addr();
    let bb = b2.clone();
    let first = tokio::spawn(async move { post(addr2, ANTHROPIC, &[("x-api-key", KEY)], &bb).await });
    received(&up, 1).await;
    let bb = b2.clone();
    let second = tokio::spawn(async move { post(addr2, ANTHROPIC, &[("x-api-key", KEY)], &bb).await });
    // Not synchronisation (the assertions hold whatever the timing): a moment for the second
    // request to reach the proxy's wait, so that the release has something to order.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(up.requests().len(), 1, "the second call of a busy session went upstream");
    up.release();
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!((first.status, second.status), (200, 200));
    assert_eq!((first.stream(), second.stream()), (id, id));
    let x = exchange(&up, second.seq());
    assert_eq!(x.in_flight_on_arrival, 0, "the second call of the session overlapped the first");
    assert_eq!(up.requests().len(), 2);
    let evs = calls(&*store, id, 3).await;
    assert_eq!(served(&evs).len(), 3);
    assert_eq!(p2.metrics().busy(), 0);
    p.shutdown().await;
    p2.shutdown().await;
}

/// Tenants (keys) never share a session, whatever the key's header; the same key does; the
/// session header picks the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_identity_follows_the_key_and_the_session_header() {
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let first = [("user", "hello")];
    let later = [("user", "hello"), ("assistant", "hi"), ("user", "more")];
    let id = |path: &'static str, headers: Vec<(&'static str, String)>, h: &[(&str, &str)]| {
        let addr = p.addr();
        let body = body_for(path, h, false);
        async move {
            let hv: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let a = post(addr, path, &hv, &body).await;
            assert_eq!(a.status, 200, "{}", a.text());
            a.stream()
        }
    };
    let key = |k: &str| vec![("x-api-key", k.to_owned())];
    let bearer = |k: &str| vec![("authorization", format!("Bearer {k}"))];
    let a1 = id(ANTHROPIC, key("key-one"), &first).await;
    let a2 = id(ANTHROPIC, key("key-two"), &first).await;
    assert_ne!(a1, a2, "two x-api-key tenants shared a session");
    assert_eq!(id(ANTHROPIC, key("key-one"), &later).await, a1, "the same key's next turn moved");
    // The anthropic SDK (2.14) may authenticate with `authorization: Bearer`.
    let b1 = id(ANTHROPIC, bearer("key-three"), &first).await;
    let b2 = id(ANTHROPIC, bearer("key-four"), &first).await;
    assert_ne!(b1, b2, "two Bearer tenants of the Anthropic API shared a session");
    assert!(![a1, a2].contains(&b1) && ![a1, a2].contains(&b2));
    assert_eq!(id(ANTHROPIC, bearer("key-three"), &later).await, b1);
    let o1 = id(OPENAI, bearer("key-five"), &first).await;
    let o2 = id(OPENAI, bearer("key-six"), &first).await;
    assert_ne!(o1, o2, "two OpenAI tenants shared a session");
    assert_eq!(id(OPENAI, bearer("key-five"), &later).await, o1);
    // The session header wins over the derived id, still under the key.
    let named = |k: &str, s: &str| vec![("x-api-key", k.to_owned()), ("x-ctxlog-session", s.to_owned())];
    let n1 = id(ANTHROPIC, named("key-one", "agent-a"), &first).await;
    let n2 = id(ANTHROPIC, named("key-one", "agent-b"), &first).await;
    let n3 = id(ANTHROPIC, named("key-two", "agent-a"), &first).await;
    assert!(n1 != n2 && n1 != n3 && n2 != n3 && ![a1, a2].contains(&n1));
    assert_eq!(id(ANTHROPIC, named("key-one", "agent-a"), &later).await, n1);
    let all = store.streams().unwrap();
    assert_eq!(all.len(), 9, "sessions: {all:?}");
    for s in all {
        assert!(diverged(&events(&*store, s)).is_empty(), "a tenant's call diverged another's session");
    }
    p.shutdown().await;
}

fn grep_dir(dir: &std::path::Path, needle: &[u8]) -> Vec<String> {
    let mut hits = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            hits.extend(grep_dir(&path, needle));
        } else {
            let bytes = std::fs::read(&path).unwrap();
            if bytes.windows(needle.len()).any(|w| w == needle) {
                hits.push(path.display().to_string());
            }
        }
    }
    hits
}

fn files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_never_reaches_the_store_files() {
    let up = upstream();
    let dir = tempfile::tempdir().unwrap();
    const BEARER_KEY: &str = "sk-ant-bearer-SECRET-KEY-555";
    let secrets = [KEY, BEARER_KEY, OPENAI_KEY];
    let sqlite: Arc<dyn Store> = Arc::new(ctxlog_store_sqlite::SqliteStore::open(dir.path().join("s.db")).unwrap());
    let fs: Arc<dyn Store> = Arc::new(ctxlog_store_fs::FsStore::open(dir.path().join("fs")).unwrap());
    let bearer = format!("Bearer {BEARER_KEY}");
    let openai_bearer = format!("Bearer {OPENAI_KEY}");
    let tenants: [(&str, (&str, &str)); 3] = [
        (ANTHROPIC, ("x-api-key", KEY)),
        (ANTHROPIC, ("authorization", &bearer)),
        (OPENAI, ("authorization", &openai_bearer)),
    ];
    for (i, store) in [sqlite, fs].into_iter().enumerate() {
        let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
        for (path, auth) in tenants {
            let mut h = vec![("user", "hello".to_string())];
            for t in 0..3 {
                let hv: Vec<(&str, &str)> = h.iter().map(|(r, x)| (*r, x.as_str())).collect();
                let a = post(p.addr(), path, &[auth], &body_for(path, &hv, t != 1)).await;
                assert_eq!(a.status, 200, "{}", a.text());
                assert_eq!(exchange(&up, a.seq()).request.header(auth.0), Some(auth.1), "auth did not pass through");
                calls(&*store, a.stream(), t + 1).await;
                h.push(("assistant", "Hello there".into()));
                h.push(("user", format!("turn {t}")));
            }
        }
        // Grep while the store is open too: SQLite's -wal and -shm exist only then.
        let names = files(dir.path());
        if i == 0 {
            for f in ["s.db", "s.db-wal", "s.db-shm"] {
                assert!(names.iter().any(|n| n == f), "no {f} to grep: {names:?}");
            }
        }
        for secret in secrets {
            assert_eq!(grep_dir(dir.path(), secret.as_bytes()), Vec::<String>::new(), "{names:?}");
        }
        p.shutdown().await;
    }
    // Sanity: the grep finds what is there.
    assert!(grep_dir(dir.path(), b"You are terse.").len() >= 2);
    for secret in secrets {
        assert_eq!(grep_dir(dir.path(), secret.as_bytes()), Vec::<String>::new());
    }
    assert_eq!(grep_dir(dir.path(), b"SECRET-KEY"), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_a_remote_listen_unless_allowed() {
    let mut cfg = ProxyConfig::new("0.0.0.0:0".parse().unwrap(), "http://127.0.0.1:1");
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    assert!(matches!(serve(cfg.clone(), Arc::clone(&store)).await, Err(ctxlog_proxy::ProxyError::NotLoopback(_))));
    cfg.listen = "127.0.0.1:0".parse().unwrap();
    cfg.upstream = "ftp://x".into();
    assert!(matches!(serve(cfg, store).await, Err(ctxlog_proxy::ProxyError::Upstream { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_view_is_what_goes_upstream() {
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // The ladder's compaction (summaries would flush before it is needed).
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.engine.budget = 3_000;
        c.summaries = ctxlog_proxy::Summaries::Off;
    })
    .await;
    let mut h: Vec<(&str, String)> = vec![("user", "Summarize the build logs.".into())];
    let mut id = None;
    let mut seqs = Vec::new();
    for t in 0..8 {
        let hv: Vec<(&str, &str)> = h.iter().map(|(r, x)| (*r, x.as_str())).collect();
        let a = post(p.addr(), ANTHROPIC, &[("x-api-key", KEY)], &anthropic_body(&hv, t % 2 == 1)).await;
        assert_eq!(a.status, 200);
        id = Some(a.stream());
        seqs.push(a.seq());
        calls(&*store, a.stream(), t + 1).await;
        h.push(("assistant", format!("Reading log {t}.")));
        h.push(("user", format!("log {t}: {}", "error: linker failed; retrying with -v\n".repeat(40))));
    }
    let id = id.unwrap();
    let evs = events(&*store, id);
    let calls = served(&evs);
    assert!(calls.iter().any(|c| c.level > 0), "nothing was compacted: the test proves nothing");
    let got: Vec<Exchange> = seqs.iter().map(|s| exchange(&up, *s)).collect();
    for (call, x) in calls.iter().zip(&got) {
        let rebuilt = ctxlog::replay::served_request(&*store, id, call.call, &opts_of(&x.request.body)).unwrap();
        assert_eq!(rebuilt.body(), &x.request.body[..], "call {}", call.call);
        let u = reported(x).unwrap();
        assert_eq!(call.usage, Some(u), "call {}", call.call);
    }
    let compacted = calls.iter().position(|c| c.level > 0).unwrap();
    // The client's history only grows; the forwarded view shrank.
    assert!(
        got[compacted].request.body.len() < got[compacted - 1].request.body.len(),
        "the compacted view was not what went upstream"
    );
    let (_, metrics) = get(p.addr(), "/metrics", &[]).await;
    assert!(!metrics.contains("ctxlog_proxy_compactions_total 0\n"), "{metrics}");
    assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_session_with_an_image_continues() {
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    let image = format!(
        r#"{{"role":"user","content":[{{"type":"text","text":"this screen"}},{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{png}"}}}}]}}"#
    );
    let body = |rest: &str| format!(r#"{{"model":"m","max_tokens":9,"messages":[{image}{rest}]}}"#);
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let a1 = post(p.addr(), ANTHROPIC, &[("x-api-key", KEY)], &body("")).await;
    assert_eq!(a1.status, 200);
    calls(&*store, a1.stream(), 1).await;
    p.shutdown().await;
    // A new proxy has no digests: the log (image as a blob) is compared by content.
    let p2 = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let more = r#",{"role":"assistant","content":"a screen"},{"role":"user","content":"and?"}"#;
    let a2 = post(p2.addr(), ANTHROPIC, &[("x-api-key", KEY)], &body(more)).await;
    assert_eq!(a2.status, 200);
    assert_eq!(a2.stream(), a1.stream(), "the image made the reopened history diverge");
    let evs = calls(&*store, a1.stream(), 2).await;
    assert_eq!(appended(&evs), 3);
    let x = exchange(&up, a2.seq());
    assert!(x.request.body.windows(png.len()).any(|w| w == png.as_bytes()), "the image was not inlined upstream");
    let rebuilt = ctxlog::replay::served_request(&*store, a1.stream(), 1, &opts_of(&x.request.body)).unwrap();
    assert_eq!(rebuilt.body(), &x.request.body[..]);
    // A changed image is another history: a branch forked before it.
    let other = body(more).replace("AAAADUlEQVR42", "AAAADUlEQVR43");
    let a3 = post(p2.addr(), ANTHROPIC, &[("x-api-key", KEY), ("x-ctxlog-session", "s")], &body(more)).await;
    calls(&*store, a3.stream(), 1).await;
    let p3 = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let a4 = post(p3.addr(), ANTHROPIC, &[("x-api-key", KEY), ("x-ctxlog-session", "s")], &other).await;
    assert_ne!(a4.stream(), a3.stream());
    assert_eq!(fork_of(&a4), Some((a3.stream(), 0)), "the image is in message 0");
    assert!(diverged(&events(&*store, a3.stream())).is_empty());
    p2.shutdown().await;
    p3.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_leaves_memory_and_continues_from_the_store() {
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.idle_evict = Duration::from_millis(300)).await;
    let a1 = post(p.addr(), ANTHROPIC, &[("x-api-key", KEY)], &anthropic_body(&[("user", "hi")], true)).await;
    let id = a1.stream();
    calls(&*store, id, 1).await;
    // Seen in memory by a sweep, then gone.
    let mut seen = false;
    for _ in 0..3000 {
        if p.metrics().sessions_in_memory() == 1 {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(seen, "no sweep saw the session");
    let mut evicted = false;
    for _ in 0..1000 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if p.metrics().sessions_in_memory() == 0 && served(&events(&*store, id)).len() == 1 {
            evicted = true;
            break;
        }
    }
    assert!(evicted, "the idle session stayed in memory");
    let b = anthropic_body(&[("user", "hi"), ("assistant", "Hello there"), ("user", "again")], true);
    let a2 = post(p.addr(), ANTHROPIC, &[("x-api-key", KEY)], &b).await;
    assert_eq!(a2.stream(), id);
    let evs = calls(&*store, id, 2).await;
    assert_eq!(appended(&evs), 4);
    p.shutdown().await;
}

/// A log of an earlier version, where a diverged history moved to a successor session named
/// by a `history_diverged` guard: the proxy follows the chain and the conversation goes on at
/// its end, branching from there when it forks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_successor_chain_is_followed_to_its_end() {
    let up = upstream();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let hdr = [("x-api-key", KEY), ("x-ctxlog-session", "old-agent")];
    let first = post(p.addr(), ANTHROPIC, &hdr, &anthropic_body(&[("user", "one")], false)).await;
    let old = first.stream();
    calls(&*store, old, 1).await;
    p.shutdown().await;
    // What an earlier proxy wrote when the client edited "one": a successor holding the
    // client's whole history, and the guard naming it.
    let edited = [("user", "ONE"), ("assistant", "a"), ("user", "two")];
    let successor = StreamId::random();
    let history: Vec<ctxlog::Message> = std::iter::once(r#"{"role":"system","content":"You are terse."}"#.to_owned())
        .chain(edited.iter().map(|(r, t)| json!({"role": r, "content": t}).to_string()))
        .map(|m| ctxlog::parse_message(&m).unwrap())
        .collect();
    let now = ctxlog::Timestamp::from_system_time(std::time::SystemTime::now());
    ctxlog::Session::create_with(
        Arc::clone(&store),
        successor,
        ctxlog::WireFormat::Anthropic,
        ctxlog::Config::default(),
        now,
        history,
    )
    .unwrap();
    let mut s = ctxlog::Session::open(Arc::clone(&store), old).unwrap();
    s.raise_guard(
        GuardKind::HistoryDiverged { seq: 1, successor: successor.to_string() },
        "edited".into(),
        "x-ctxlog-session",
    )
    .unwrap();
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let mut longer = edited.to_vec();
    longer.extend([("assistant", "b"), ("user", "three")]);
    let a = post(p.addr(), ANTHROPIC, &hdr, &anthropic_body(&longer, false)).await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!((a.stream(), fork_of(&a)), (successor, None), "the chain was not followed");
    // Forking again: a branch of the chain's end.
    let forked = [("user", "ONE"), ("assistant", "a"), ("user", "TWO")];
    let b = post(p.addr(), ANTHROPIC, &hdr, &anthropic_body(&forked, false)).await;
    assert_eq!(b.status, 200, "{}", b.text());
    assert_eq!(fork_of(&b), Some((successor, 3)));
    for id in [old, successor, b.stream()] {
        assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
    }
    p.shutdown().await;
}
