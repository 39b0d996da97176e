//! The proxy's promise (DESIGN §12) under the ways calls go wrong: a client never holds an
//! answer the log lacks, whoever closes first, however many proxies share the store, and
//! whatever a client or a flood of idle connections sends.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxlog::{MemoryStore, Store, StreamId};
use ctxlog_fake_upstream::{FakeUpstream, Fault};
use serde_json::Value;
use support::{calls, events, proxy_on, served, KEY};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ANTHROPIC: &str = "/v1/messages";
const OPENAI: &str = "/v1/chat/completions";

fn history(turns: usize) -> Vec<String> {
    let mut m = vec![r#"{"role":"user","content":"port the parser"}"#.to_owned()];
    for i in 0..turns {
        m.push(format!(r#"{{"role":"assistant","content":"step {i} done"}}"#));
        m.push(format!(r#"{{"role":"user","content":"go on with step {}"}}"#, i + 1));
    }
    m
}

fn body(path: &str, messages: &[String], stream: bool) -> String {
    if path == OPENAI {
        let usage = if stream { r#","stream_options":{"include_usage":true}"# } else { "" };
        format!(r#"{{"model":"gpt-x","stream":{stream}{usage},"messages":[{}]}}"#, messages.join(","))
    } else {
        format!(r#"{{"model":"claude-x","max_tokens":64,"stream":{stream},"messages":[{}]}}"#, messages.join(","))
    }
}

fn auth(path: &str) -> (&'static str, &'static str) {
    if path == OPENAI {
        ("authorization", "Bearer sk-openai-test")
    } else {
        ("x-api-key", KEY)
    }
}

/// A raw HTTP/1.1 exchange: writes the request, reads until `until` appears in the answer (or
/// the connection ends), then closes at once, as an SDK does at `[DONE]`.
async fn raw_call(addr: SocketAddr, path: &str, body: &str, until: &str) -> (u16, String) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let (k, v) = auth(path);
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{k}: {v}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done(&got, until) && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(30), tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
    drop(tcp);
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

/// The answer holds `until`, or it has a `content-length` and all of its body.
fn done(got: &[u8], until: &str) -> bool {
    let text = String::from_utf8_lossy(got);
    if text.contains(until) {
        return true;
    }
    let Some(end) = text.find("\r\n\r\n") else { return false };
    let length = text[..end]
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>()));
    matches!(length, Some(Ok(n)) if got.len() >= end + 4 + n)
}

fn stream_of(answer: &str) -> StreamId {
    let line = answer.lines().find(|l| l.to_ascii_lowercase().starts_with("x-ctxlog-stream:")).expect("no stream");
    line.split_once(':').unwrap().1.trim().parse().unwrap()
}

/// A client that closes the moment it reads the final event finds its call in the log at
/// that moment: the final event is sent only after the commit. (The race of issue 19: an SDK
/// that closes at `[DONE]` while the upstream's body has not ended yet.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_closing_at_the_final_event_finds_its_call_logged() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    for (path, last) in [(OPENAI, "data: [DONE]"), (ANTHROPIC, "event: message_stop")] {
        let mut id = None;
        for turn in 0..6 {
            let (status, answer) = raw_call(p.addr(), path, &body(path, &history(turn), true), last).await;
            assert_eq!(status, 200, "{answer}");
            let stream = stream_of(&answer);
            id = Some(stream);
            // No wait: the final event is only written once the call is durable.
            let logged = served(&events(&*store, stream)).len();
            assert_eq!(logged, turn + 1, "{path} turn {turn}: the client saw the final event before the commit");
        }
        let report = ctxlog::replay::verify(&*store, id.unwrap()).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
    p.shutdown().await;
}

/// Two proxies on one store, each call of a conversation sent to either at random (a fleet
/// without sticky routing): one session, every answered call in it once, `verify` ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_with_random_routing_logs_every_call_once() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = proxy_on(Arc::clone(&store), &up.url(), |c| c.engine.budget = 400).await;
    let b = proxy_on(Arc::clone(&store), &up.url(), |c| c.engine.budget = 400).await;
    let proxies = [a.addr(), b.addr()];
    let mut rng = 0x9e37_79b9_u32;
    let mut ids = std::collections::BTreeSet::new();
    let mut compacted = false;
    let turns = 24;
    for turn in 0..turns {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        let addr = proxies[(rng % 2) as usize];
        let path = ANTHROPIC;
        let stream = turn % 2 == 0;
        let until = if stream { "event: message_stop" } else { "\"usage\"" };
        let (status, answer) = raw_call(addr, path, &body(path, &history(turn), stream), until).await;
        assert_eq!(status, 200, "turn {turn}: {answer}");
        ids.insert(stream_of(&answer));
        let header = |name: &str| {
            answer.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix(name).map(|v| v.trim().to_owned()))
        };
        let view: u64 = header("x-ctxlog-view-messages:").expect("no view header").parse().unwrap();
        assert!(view <= history(turn).len() as u64);
        compacted |=
            header("x-ctxlog-flushed:").as_deref() == Some("1") || header("x-ctxlog-edits:").is_some_and(|e| e != "0");
    }
    assert!(compacted, "no answer told its client of a compaction");
    assert_eq!(ids.len(), 1, "the fleet split the conversation: {ids:?}");
    let id = *ids.first().unwrap();
    let evs = calls(&*store, id, turns).await;
    let served = served(&evs);
    assert_eq!(served.len(), turns, "answered calls missing or doubled");
    let calls_no: Vec<u64> = served.iter().map(|s| s.call).collect();
    assert_eq!(calls_no, (0..turns as u64).collect::<Vec<_>>());
    let report = ctxlog::replay::verify(&*store, id).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(a.metrics().catch_ups() + b.metrics().catch_ups() > 0, "no proxy caught up with the other");
    a.shutdown().await;
    b.shutdown().await;
}

/// Two proxies racing one session (the same request to both at once) and a new session
/// created on both at once: never a 500, never two sessions, never a call logged twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxies_racing_one_session_never_fail_or_double() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let b = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    for turn in 0..8 {
        let req = body(ANTHROPIC, &history(turn), false);
        let (x, y) = tokio::join!(
            raw_call(a.addr(), ANTHROPIC, &req, "\"usage\""),
            raw_call(b.addr(), ANTHROPIC, &req, "\"usage\"")
        );
        for (status, answer) in [&x, &y] {
            assert!(*status == 200 || *status == 529, "turn {turn}: {answer}");
        }
        assert!(x.0 == 200 || y.0 == 200, "turn {turn}: neither proxy served the call");
    }
    let ids = store.streams().unwrap();
    assert_eq!(ids.len(), 1, "the race made two sessions");
    let evs = events(&*store, ids[0]);
    let appended = evs.iter().filter(|e| matches!(e, ctxlog::Event::MessageAppended(_))).count();
    assert_eq!(appended, history(7).len(), "a message was appended twice");
    let report = ctxlog::replay::verify(&*store, ids[0]).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    a.shutdown().await;
    b.shutdown().await;
}

/// A client's own mistake (a tool result without its call) is a 400 in the provider's shape
/// naming the field, and writes nothing: no empty session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_tool_result_is_a_400_and_writes_nothing() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let anthropic = [
        r#"{"role":"user","content":"hi"}"#.to_owned(),
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"42"}]}"#.to_owned(),
    ];
    let openai = [
        r#"{"role":"user","content":"hi"}"#.to_owned(),
        r#"{"role":"tool","tool_call_id":"call_1","content":"42"}"#.to_owned(),
    ];
    for (path, messages) in [(ANTHROPIC, &anthropic), (OPENAI, &openai)] {
        let (status, answer) = raw_call(p.addr(), path, &body(path, messages, false), "}}").await;
        assert_eq!(status, 400, "{path}: {answer}");
        let json = &answer[answer.find('{').unwrap()..];
        let v: Value = serde_json::from_str(json.trim()).unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("messages[1]"), "{path}: the error does not name the field: {message}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{path}: {v}");
    }
    assert!(store.streams().unwrap().is_empty(), "a refused request left a session behind");
    assert!(up.requests().is_empty(), "a refused request went upstream");
    // Later in a conversation: refused, and the session keeps what it had.
    let ok = body(ANTHROPIC, &history(0), false);
    assert_eq!(raw_call(p.addr(), ANTHROPIC, &ok, "\"usage\"").await.0, 200);
    let id = store.streams().unwrap()[0];
    let head = store.head(id).unwrap();
    let mut bad = history(0);
    bad.push(r#"{"role":"assistant","content":"ok"}"#.to_owned());
    bad.push(r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":"x"}]}"#.to_owned());
    let (status, answer) = raw_call(p.addr(), ANTHROPIC, &body(ANTHROPIC, &bad, false), "}}").await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("\"messages[2]"), "the error does not name the field: {answer}");
    assert_eq!(store.head(id).unwrap(), head, "a refused request wrote to its session");
    p.shutdown().await;
}

/// Shutdown (what Ctrl-C and SIGTERM start) lets a call in flight end and commit before the
/// proxy stops, and takes no new connection meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_the_calls_in_flight() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.drain_timeout = Duration::from_secs(20)).await;
    let addr = p.addr();
    up.script(Fault::Hold, 1);
    let req = body(ANTHROPIC, &history(0), true);
    let call = tokio::spawn(async move { raw_call(addr, ANTHROPIC, &req, "event: message_stop").await });
    let t = Instant::now();
    while up.requests().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(20), "the call never reached the upstream");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stopping = tokio::spawn(p.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!stopping.is_finished(), "shutdown did not wait for the call in flight");
    assert!(TcpStream::connect(addr).await.is_err(), "the stopping proxy accepted a connection");
    up.release();
    let (status, answer) = call.await.unwrap();
    assert_eq!(status, 200);
    assert!(answer.contains("message_stop"), "{answer}");
    tokio::time::timeout(Duration::from_secs(20), stopping).await.unwrap().unwrap();
    let id = stream_of(&answer);
    assert_eq!(served(&events(&*store, id)).len(), 1, "the drained call was not committed");
}

/// Hundreds of idle and half-sent connections neither starve `/healthz` nor spin the
/// listener; a request whose headers never end is cut off after the header timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_partial_connections_do_not_starve_the_proxy() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.max_connections = 300;
        c.header_timeout = Duration::from_millis(800);
    })
    .await;
    let mut idle = Vec::new();
    for i in 0..400 {
        let mut tcp = TcpStream::connect(p.addr()).await.unwrap();
        if i % 2 == 0 {
            tcp.write_all(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n").await.unwrap();
            // never ends
        }
        idle.push(tcp);
    }
    // Past the limit the listener waits: the cut-off connections make room for /healthz.
    let t = Instant::now();
    let (status, answer) = loop {
        match tokio::time::timeout(Duration::from_secs(5), raw_call(p.addr(), "/healthz", "", "ok")).await {
            Ok(r) if r.0 == 200 => break r,
            _ => assert!(t.elapsed() < Duration::from_secs(10), "/healthz never answered"),
        }
    };
    assert_eq!(status, 200, "{answer}");
    assert!(t.elapsed() < Duration::from_secs(5), "/healthz took {:?}", t.elapsed());
    // The half-sent requests and the silent connections were cut off: the proxy closed them.
    let mut closed = 0;
    for tcp in idle.iter_mut() {
        let mut buf = [0u8; 256];
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(3), tcp.read(&mut buf)).await {
            closed += 1;
        }
    }
    assert_eq!(closed, 400, "an idle or half-sent connection was never cut off");
    drop(idle);
    let call = body(ANTHROPIC, &history(0), false);
    assert_eq!(raw_call(p.addr(), ANTHROPIC, &call, "\"usage\"").await.0, 200);
    p.shutdown().await;
}

/// At the limit (every slot and the reserve held by connections that never send a whole
/// request head, with a header timeout far away) the oldest of them is shed: `/healthz` and a
/// real call are answered long before any timeout could free a slot, while a call in flight
/// on one of the slots is never cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_limit_the_oldest_unstarted_connection_makes_room() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.max_connections = 4;
        c.header_timeout = Duration::from_secs(600);
        c.body_timeout = Duration::from_secs(600);
    })
    .await;
    let addr = p.addr();
    // A call in flight holds a slot.
    up.script(Fault::Hold, 1);
    let req = body(ANTHROPIC, &history(0), true);
    let held = tokio::spawn(async move { raw_call(addr, ANTHROPIC, &req, "event: message_stop").await });
    let t = Instant::now();
    while up.requests().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(20), "the call never reached the upstream");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // More silent and half-sent connections than the slots and the reserve (64) together.
    let mut idle = Vec::new();
    for i in 0..100 {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        match i % 3 {
            0 => {}
            1 => tcp.write_all(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n").await.unwrap(),
            _ => tcp.write_all(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 9\r\n\r\n{").await.unwrap(),
        }
        idle.push(tcp);
    }
    // Nothing frees a slot by itself for 600 s: an answer within a minute is the shedding's.
    let bound = Duration::from_secs(60);
    let (status, answer) = tokio::time::timeout(bound, raw_call(addr, "/healthz", "", "ok")).await.unwrap();
    assert_eq!(status, 200, "{answer}");
    let call = body(OPENAI, &history(0), false);
    let (status, answer) = tokio::time::timeout(bound, raw_call(addr, OPENAI, &call, "\"usage\"")).await.unwrap();
    assert_eq!(status, 200, "{answer}");
    // The oldest silent connection was among those shed (the proxy closed it: EOF).
    let mut buf = [0u8; 64];
    let first = tokio::time::timeout(Duration::from_secs(10), idle[0].read(&mut buf)).await;
    assert!(matches!(first, Ok(Ok(0)) | Ok(Err(_))), "the oldest silent connection was not shed: {first:?}");
    // The call in flight was never shed: released, it is answered whole and committed.
    up.release();
    let (status, answer) = held.await.unwrap();
    assert_eq!(status, 200);
    assert!(answer.contains("message_stop"), "{answer}");
    assert_eq!(served(&events(&*store, stream_of(&answer))).len(), 1, "the held call was not committed");
    drop(idle);
    p.shutdown().await;
}

/// Every committed call records the assistant message it was answered with (from the JSON
/// body or assembled from the stream), in the same batch: the log holds the conversation's
/// last answer though the client never sends it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_records_its_answer() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    for path in [ANTHROPIC, OPENAI] {
        let mut id = None;
        for turn in 0..4 {
            let stream = turn % 2 == 1;
            let until = if !stream {
                "\"usage\""
            } else if path == OPENAI {
                "data: [DONE]"
            } else {
                "message_stop"
            };
            let (status, answer) = raw_call(p.addr(), path, &body(path, &history(turn), stream), until).await;
            assert_eq!(status, 200, "{answer}");
            id = Some(stream_of(&answer));
            if !stream {
                // The recorded message is the JSON answer's own.
                let json: Value = serde_json::from_str(answer[answer.find("\r\n\r\n").unwrap() + 4..].trim()).unwrap();
                let evs = events(&*store, id.unwrap());
                let Some(ctxlog::Event::AnswerReceived(a)) = evs.last() else { panic!("{path}: no answer recorded") };
                let recorded = ctxlog::internal::wire::to_json(
                    &a.message,
                    ctxlog::internal::wire::RenderOpts { meta: false, media: ctxlog::internal::wire::Media::Refs },
                )
                .0;
                let recorded: Value = serde_json::from_str(&recorded).unwrap();
                let sent = if path == OPENAI { &json["choices"][0]["message"]["content"] } else { &json["content"] };
                assert_eq!(&recorded["content"], sent, "{path} turn {turn}");
            }
        }
        let evs = events(&*store, id.unwrap());
        let mut answered = Vec::new();
        for pair in evs.windows(2) {
            if let [ctxlog::Event::RequestServed(s), next] = pair {
                let ctxlog::Event::AnswerReceived(a) = next else { panic!("{path}: call {} has no answer", s.call) };
                assert_eq!(a.call, s.call);
                assert_eq!(a.message.role, ctxlog::message::Role::Assistant);
                answered.push(a.call);
            }
        }
        assert_eq!(answered, vec![0, 1, 2, 3], "{path}");
        let report = ctxlog::replay::verify(&*store, id.unwrap()).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
    p.shutdown().await;
}

/// An OpenAI stream whose client did not ask for usage (LangChain's and the Agents SDK's
/// default) is asked for it anyway: the call is committed with the provider's usage, and the
/// client gets no usage chunk it did not ask for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_streams_are_committed_with_usage_the_client_did_not_ask_for() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let mut id = None;
    for turn in 0..3 {
        let req = format!(r#"{{"model":"gpt-x","stream":true,"messages":[{}]}}"#, history(turn).join(","));
        let (status, answer) = raw_call(p.addr(), OPENAI, &req, "data: [DONE]").await;
        assert_eq!(status, 200, "{answer}");
        assert!(!answer.contains("\"choices\":[]"), "the client got a usage chunk it did not ask for: {answer}");
        assert!(answer.contains("data: [DONE]"));
        id = Some(stream_of(&answer));
        let forwarded = up.requests().last().unwrap().request.body.clone();
        let v: Value = serde_json::from_slice(&forwarded).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true, "the upstream was not asked for usage");
    }
    let evs = events(&*store, id.unwrap());
    let served = served(&evs);
    assert_eq!(served.len(), 3);
    assert!(
        served.iter().all(|s| s.usage.is_some() && s.reported_tokens.is_some()),
        "a call was committed without usage"
    );
    // A client that asks keeps its chunk.
    let req = format!(
        r#"{{"model":"gpt-x","stream":true,"stream_options":{{"include_usage":true}},"messages":[{}]}}"#,
        history(3).join(",")
    );
    let (_, answer) = raw_call(p.addr(), OPENAI, &req, "data: [DONE]").await;
    assert!(answer.contains("\"choices\":[]"), "the client's own usage chunk was dropped: {answer}");
    p.shutdown().await;
}

/// Three proxies, each with its own handle on one SQLite file (as three processes would), four
/// conversations at once, every call sent to a random proxy: every answered call is in the
/// log exactly once, each conversation one session, `verify` ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_on_one_sqlite_file_logs_every_answered_call_once() {
    let up = FakeUpstream::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let mut proxies = Vec::new();
    for _ in 0..3 {
        let store: Arc<dyn Store> = Arc::new(ctxlog_store_sqlite::SqliteStore::open(&path).unwrap());
        proxies.push(proxy_on(store, &up.url(), |c| c.engine.budget = 4_000).await);
    }
    let addrs: Arc<Vec<SocketAddr>> = Arc::new(proxies.iter().map(|p| p.addr()).collect());
    let mut tasks = Vec::new();
    for conv in 0..4u32 {
        let addrs = Arc::clone(&addrs);
        tasks.push(tokio::spawn(async move {
            let mut rng = 0x2545_f491_u32.wrapping_mul(conv + 1);
            let mut answered = 0;
            let mut ids = std::collections::BTreeSet::new();
            let mut turn = 0;
            let mut tries = 0;
            while turn < 10 && tries < 60 {
                tries += 1;
                rng ^= rng << 13;
                rng ^= rng >> 17;
                rng ^= rng << 5;
                let addr = addrs[(rng % 3) as usize];
                let mut h = history(turn);
                h[0] = format!(r#"{{"role":"user","content":"conversation {conv}: port the parser"}}"#);
                let stream = rng % 2 == 0;
                let until = if stream { "event: message_stop" } else { "\"usage\"" };
                let (status, answer) = raw_call(addr, ANTHROPIC, &body(ANTHROPIC, &h, stream), until).await;
                match status {
                    // A stream's status comes first: only its final event makes it an answer.
                    200 if answer.contains(until) => {
                        answered += 1;
                        turn += 1;
                        ids.insert(stream_of(&answer));
                    }
                    529 => tokio::time::sleep(Duration::from_millis(20)).await, // retry, as an SDK does
                    other => panic!("conversation {conv}: {other}: {answer}"),
                }
            }
            (answered, ids)
        }));
    }
    let store = ctxlog_store_sqlite::SqliteStore::open(&path).unwrap();
    for t in tasks {
        let (answered, ids) = t.await.unwrap();
        assert_eq!(answered, 10, "a conversation did not finish");
        assert_eq!(ids.len(), 1, "a conversation was split: {ids:?}");
        let id = *ids.first().unwrap();
        let evs = calls(&store, id, answered).await;
        let served = served(&evs);
        assert_eq!(served.len(), answered, "answered calls missing or doubled");
        let report = ctxlog::replay::verify(&store, id).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
    for p in proxies {
        p.shutdown().await;
    }
}
