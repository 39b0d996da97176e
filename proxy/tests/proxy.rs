//! The proxy end to end on real sockets, against the loopback upstream in `common`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{get, post, Fault};
use ctxlog::event::GuardKind;
use ctxlog::{Event, MemoryStore, RequestOptions, Store, StreamId};
use ctxlog_proxy::{serve, ProxyConfig, ProxyHandle};

const KEY: &str = "sk-ant-test-SECRET-KEY-0123456789";

async fn proxy_on(store: Arc<dyn Store>, upstream: &str, tweak: impl FnOnce(&mut ProxyConfig)) -> ProxyHandle {
    let mut cfg = ProxyConfig::new("127.0.0.1:0".parse().unwrap(), upstream);
    cfg.upstream_timeout = Duration::from_secs(5);
    tweak(&mut cfg);
    serve(cfg, store).await.unwrap()
}

fn events(store: &dyn Store, id: StreamId) -> Vec<Event> {
    store
        .read(id, 1, usize::MAX)
        .unwrap()
        .iter()
        .map(|r| ctxlog::codec::decode(id, r.version, &r.record).unwrap())
        .collect()
}

fn served(evs: &[Event]) -> Vec<&ctxlog::event::RequestServed> {
    evs.iter().filter_map(|e| if let Event::RequestServed(s) = e { Some(s) } else { None }).collect()
}

fn appended(evs: &[Event]) -> usize {
    evs.iter().filter(|e| matches!(e, Event::MessageAppended(_))).count()
}

/// Waits (bounded) until the session has `n` committed calls: commits land after the answer.
async fn calls(store: &dyn Store, id: StreamId, n: usize) -> Vec<Event> {
    for _ in 0..500 {
        let evs = events(store, id);
        if served(&evs).len() >= n {
            return evs;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("session {id} never reached {n} calls: {:?}", served(&events(store, id)));
}

fn stream_of(h: &http::HeaderMap) -> StreamId {
    h.get("x-ctxlog-stream").unwrap().to_str().unwrap().parse().unwrap()
}

fn anthropic_body(history: &[(&str, &str)], stream: bool) -> String {
    let msgs: Vec<String> =
        history.iter().map(|(r, t)| format!(r#"{{"role":"{r}","content":{}}}"#, serde_json::Value::from(*t))).collect();
    format!(
        r#"{{"model":"claude-x","max_tokens":512,"system":"You are terse.","messages":[{}],"stream":{stream}}}"#,
        msgs.join(",")
    )
}

fn opts_of(body: &[u8]) -> RequestOptions {
    RequestOptions::from_client_body(body).unwrap()
}

async fn conversation(path: &str, stream: bool) {
    let up = common::start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let openai = path == "/v1/chat/completions";
    let mut history: Vec<(&str, String)> = if openai { vec![("system", "You are terse.".into())] } else { vec![] };
    let mut id = None;
    for turn in 0..4 {
        history.push(("user", format!("question {turn}: {}", "tell me more ".repeat(20))));
        let h: Vec<(&str, &str)> = history.iter().map(|(r, t)| (*r, t.as_str())).collect();
        let body = if openai {
            let msgs: Vec<String> = h
                .iter()
                .map(|(r, t)| format!(r#"{{"role":"{r}","content":{}}}"#, serde_json::Value::from(*t)))
                .collect();
            format!(
                r#"{{"model":"gpt-x","messages":[{}],"stream":{stream}{}}}"#,
                msgs.join(","),
                if stream { r#","stream_options":{"include_usage":true}"# } else { "" }
            )
        } else {
            anthropic_body(&h, stream)
        };
        let auth = if openai { ("authorization", "Bearer sk-openai-SECRET") } else { ("x-api-key", KEY) };
        let (status, headers, answer) = post(p.addr(), path, &[auth, ("anthropic-version", "2023-06-01")], &body).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
        let sid = stream_of(&headers);
        assert_eq!(*id.get_or_insert(sid), sid, "turn {turn} landed in another session");
        let got = up.received();
        let last = got.last().unwrap();
        assert_eq!(answer, last.answered, "the client did not get the upstream's bytes");
        assert_eq!(last.headers.get(auth.0).unwrap(), auth.1, "auth was not passed through");
        assert!(last.headers.get("x-ctxlog-stream").is_none());
        let evs = calls(&*store, sid, turn + 1).await;
        let call = served(&evs)[turn];
        // The forwarded body is the request ctxlog recorded for the call, byte for byte.
        let rebuilt = ctxlog::replay::served_request(&*store, sid, call.call, &opts_of(&last.body)).unwrap();
        assert_eq!(rebuilt.body(), &last.body[..], "turn {turn}");
        assert_eq!(rebuilt.view_digest(), call.digest);
        let (input, cached, output) = last.usage;
        let usage = call.usage.expect("no usage recorded");
        assert_eq!((usage.input, usage.cache_read, usage.output), (input, cached, output));
        assert!(call.anchored, "the meter did not anchor on the reported usage");
        history.push(("assistant", "Hello there".into()));
    }
    let id = id.unwrap();
    // Each request appended only its new suffix: 4 users + 3 replies (+ the system prompt).
    assert_eq!(appended(&events(&*store, id)), 7 + 1);
    let report = ctxlog::replay::verify(&*store, id).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_streaming_conversation() {
    conversation("/v1/messages", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_json_conversation() {
    conversation("/v1/messages", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_streaming_conversation() {
    conversation("/v1/chat/completions", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_json_conversation() {
    conversation("/v1/chat/completions", false).await;
}

async fn one_fault(fault: Fault, stream: bool) -> (u16, bytes::Bytes, Vec<Event>, common::Received) {
    let up = common::start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.upstream_timeout = Duration::from_millis(400)).await;
    up.push(fault);
    let body = anthropic_body(&[("user", "hi")], stream);
    let answered =
        tokio::time::timeout(Duration::from_secs(20), post(p.addr(), "/v1/messages", &[("x-api-key", KEY)], &body));
    let (status, headers, answer) = answered.await.expect("the proxy never ended the answer");
    let id: Option<StreamId> = headers.get("x-ctxlog-stream").map(|v| v.to_str().unwrap().parse().unwrap());
    // Let an abort (or a wrong commit) land before looking.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ids = store.streams().unwrap();
    assert_eq!(ids.len(), 1);
    if let Some(id) = id {
        assert_eq!(id, ids[0]);
    }
    let evs = events(&*store, ids[0]);
    let rec = up.received().pop().unwrap();
    p.shutdown().await;
    (status, answer, evs, rec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_errors_reach_the_client_unchanged_and_commit_nothing() {
    for code in [429u16, 500] {
        let text = r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
        let (status, answer, evs, rec) = one_fault(Fault::Status(code, text), true).await;
        assert_eq!(status, code);
        assert_eq!(answer, rec.answered);
        assert!(served(&evs).is_empty(), "{code}: a failed call was committed");
        assert_eq!(appended(&evs), 2, "the appended messages (system, user) stay");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_mid_stream_commits_nothing() {
    let (status, answer, evs, rec) = one_fault(Fault::CutAfter(4), true).await;
    assert_eq!(status, 200);
    assert!(answer.len() <= rec.answered.len() && rec.answered.starts_with(&answer));
    assert!(served(&evs).is_empty(), "a cut stream was committed");
    assert_eq!(appended(&evs), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_goes_quiet_times_out_and_commits_nothing() {
    let (status, answer, evs, rec) = one_fault(Fault::StallAfter(3), true).await;
    assert_eq!(status, 200);
    assert!(rec.answered.starts_with(&answer), "the client got other bytes than the upstream's");
    assert!(served(&evs).is_empty(), "a stalled stream was committed");
    assert_eq!(appended(&evs), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_timeout_is_504_and_commits_nothing() {
    let (status, answer, evs, _) = one_fault(Fault::Hang, false).await;
    assert_eq!(status, 504);
    let v: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(v["type"], "error");
    assert!(served(&evs).is_empty());
    assert_eq!(appended(&evs), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_are_refused_and_nothing_is_written() {
    let up = common::start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.max_body = 4096).await;
    let cases: [(&str, &str, u16, &str); 6] = [
        ("/v1/messages", "{not json", 400, "body"),
        ("/v1/messages", r#"{"model":"m"}"#, 400, "messages"),
        (
            "/v1/messages",
            r#"{"messages":[{"role":"user","content":[{"type":"image"}]}]}"#,
            400,
            "messages[0].content[0]",
        ),
        ("/v1/messages", r#"{"messages":[{"role":"tool","content":"x","tool_call_id":"a"}]}"#, 400, "messages[0]"),
        ("/v1/chat/completions", r#"{"messages":[{"role":"wizard","content":"x"}]}"#, 400, "messages[0].role"),
        ("/v1/messages", r#"{"system":7,"messages":[{"role":"user","content":"x"}]}"#, 400, "system"),
    ];
    for (path, body, code, field) in cases {
        let (status, _, answer) = post(p.addr(), path, &[("x-api-key", KEY)], body).await;
        let text = String::from_utf8_lossy(&answer);
        assert_eq!(status, code, "{body}: {text}");
        assert!(text.contains(field), "{body}: the error does not name {field}: {text}");
    }
    let big = anthropic_body(&[("user", &"x".repeat(5000))], false);
    let (status, _, answer) = post(p.addr(), "/v1/messages", &[("x-api-key", KEY)], &big).await;
    assert_eq!(status, 413);
    let v: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(v["error"]["type"], "request_too_large");
    let (status, _, answer) = post(p.addr(), "/v1/chat/completions", &[], &big).await;
    assert_eq!(status, 413);
    let v: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(v["error"]["code"], "request_too_large");
    assert!(store.streams().unwrap().is_empty(), "a refused request wrote a session");
    assert!(up.received().is_empty(), "a refused request reached the upstream");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_token_is_required_when_set() {
    let up = common::start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.client_token = Some("tok-123".into())).await;
    let body = anthropic_body(&[("user", "hi")], false);
    for bad in [&[][..], &[("x-ctxlog-token", "tok-124")][..], &[("x-ctxlog-token", "tok-12")][..]] {
        let (status, _, _) = post(p.addr(), "/v1/messages", bad, &body).await;
        assert_eq!(status, 401);
        assert_eq!(get(p.addr(), "/metrics", bad).await.0, 401);
        assert_eq!(post(p.addr(), "/v1/other", bad, "{}").await.0, 401);
    }
    assert!(up.received().is_empty() && store.streams().unwrap().is_empty());
    assert_eq!(get(p.addr(), "/healthz", &[]).await.0, 200);
    let (status, _, _) = post(p.addr(), "/v1/messages", &[("x-ctxlog-token", "tok-123")], &body).await;
    assert_eq!(status, 200);
    assert!(up.received()[0].headers.get("x-ctxlog-token").is_none(), "the token went upstream");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_paths_pass_through_untouched() {
    let up = common::start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let body = r#"{"model":"m", "input":"count me"}"#;
    let (status, _, _) = post(p.addr(), "/v1/messages/count_tokens?beta=true", &[("x-api-key", KEY)], body).await;
    assert_eq!(status, 200);
    let r = &up.received()[0];
    assert_eq!(r.path, "/v1/messages/count_tokens");
    assert_eq!(r.body, body.as_bytes());
    assert!(store.streams().unwrap().is_empty());
    let (_, metrics) = get(p.addr(), "/metrics", &[]).await;
    assert!(metrics.contains("ctxlog_proxy_requests_total{path=\"other\",status=\"200\"} 1"), "{metrics}");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn divergence_starts_a_linked_session_from_the_clients_history() {
    let up = common::start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let hdr = [("x-api-key", KEY), ("x-ctxlog-session", "agent-7")];
    let b1 = anthropic_body(&[("user", "one"), ("assistant", "a1"), ("user", "two")], false);
    let (_, h1, _) = post(p.addr(), "/v1/messages", &hdr, &b1).await;
    let first = stream_of(&h1);
    calls(&*store, first, 1).await;
    // The client edited its second message.
    let b2 = anthropic_body(
        &[("user", "one"), ("assistant", "EDITED"), ("user", "two"), ("assistant", "a2"), ("user", "3")],
        false,
    );
    let (status, h2, _) = post(p.addr(), "/v1/messages", &hdr, &b2).await;
    assert_eq!(status, 200);
    let second = stream_of(&h2);
    assert_ne!(first, second);
    let old = events(&*store, first);
    let diverged: Vec<_> = old
        .iter()
        .filter_map(|e| match e {
            Event::GuardRaised(g) => match &g.kind {
                GuardKind::HistoryDiverged { seq, successor } => Some((*seq, successor.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect();
    // seq 0 is the system prompt, 1 "one", 2 the edited reply.
    assert_eq!(diverged, vec![(2, second.to_string())]);
    let evs = calls(&*store, second, 1).await;
    assert_eq!(appended(&evs), 6, "the successor holds the client's whole history");
    let forwarded = &up.received()[1].body;
    assert!(String::from_utf8_lossy(forwarded).contains("EDITED"));
    // A truncated history diverges too; the chain is followed after a restart.
    let p2 = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let b3 = anthropic_body(
        &[
            ("user", "one"),
            ("assistant", "EDITED"),
            ("user", "two"),
            ("assistant", "a2"),
            ("user", "3"),
            ("assistant", "x"),
            ("user", "4"),
        ],
        false,
    );
    let (_, h3, _) = post(p2.addr(), "/v1/messages", &hdr, &b3).await;
    assert_eq!(stream_of(&h3), second, "a reopened session with the same history did not continue");
    calls(&*store, second, 2).await;
    let b4 = anthropic_body(&[("user", "one"), ("assistant", "EDITED"), ("user", "again")], false);
    let (_, h4, _) = post(p2.addr(), "/v1/messages", &hdr, &b4).await;
    let third = stream_of(&h4);
    assert!(third != second && third != first);
    for id in [first, second, third] {
        assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
    }
    p.shutdown().await;
    p2.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_sessions_in_parallel() {
    let up = common::start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = Arc::new(proxy_on(Arc::clone(&store), &up.url(), |_| {}).await);
    let mut tasks = Vec::new();
    for s in 0..50 {
        let addr = p.addr();
        tasks.push(tokio::spawn(async move {
            let mut h: Vec<(&str, String)> = vec![];
            let mut id = None;
            for t in 0..3 {
                h.push(("user", format!("session {s} turn {t}")));
                let hv: Vec<(&str, &str)> = h.iter().map(|(r, x)| (*r, x.as_str())).collect();
                let (status, headers, _) =
                    post(addr, "/v1/messages", &[("x-api-key", KEY)], &anthropic_body(&hv, t % 2 == 0)).await;
                assert_eq!(status, 200);
                assert_eq!(*id.get_or_insert(stream_of(&headers)), stream_of(&headers));
                h.push(("assistant", "Hello there".into()));
            }
            id.unwrap()
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 50);
    for id in ids {
        let evs = calls(&*store, id, 3).await;
        assert_eq!(appended(&evs), 6);
        assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_session_waits_then_passes_through() {
    let up = common::start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.session_wait = Duration::from_millis(100)).await;
    up.push(Fault::Delay(Duration::from_millis(1500)));
    let body = anthropic_body(&[("user", "hi")], false);
    let addr = p.addr();
    let b = body.clone();
    let slow = tokio::spawn(async move { post(addr, "/v1/messages", &[("x-api-key", KEY)], &b).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, headers, _) = post(addr, "/v1/messages", &[("x-api-key", KEY)], &body).await;
    assert_eq!(status, 200);
    assert!(headers.get("x-ctxlog-stream").is_none(), "the busy request was not passed through");
    // The forwarded view puts `system` after the other fields: only the pass-through has the
    // client's bytes.
    assert!(up.received().iter().any(|r| r.body == body.as_bytes()), "a passed-through request was modified");
    assert_eq!(p.metrics().busy_passthroughs(), 1);
    assert_eq!(slow.await.unwrap().0, 200);
    let id = store.streams().unwrap()[0];
    let evs = calls(&*store, id, 1).await;
    assert_eq!(served(&evs).len(), 1, "the passed-through request was logged");
    // Waiting (within the bound) serializes calls of one session instead.
    let p2 = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    up.push(Fault::Delay(Duration::from_millis(300)));
    let b2 = anthropic_body(&[("user", "hi"), ("assistant", "Hello"), ("user", "more")], false);
    let addr2 = p2.addr();
    let bb = b2.clone();
    let first = tokio::spawn(async move { post(addr2, "/v1/messages", &[("x-api-key", KEY)], &bb).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (s2, _, _) = post(addr2, "/v1/messages", &[("x-api-key", KEY)], &b2).await;
    assert_eq!((first.await.unwrap().0, s2), (200, 200));
    let evs = calls(&*store, id, 3).await;
    assert_eq!(served(&evs).len(), 3);
    assert_eq!(p2.metrics().busy_passthroughs(), 0);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_never_reaches_the_store_files() {
    let up = common::start().await;
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn Store> = Arc::new(ctxlog_store_sqlite::SqliteStore::open(dir.path().join("s.db")).unwrap());
    let fs: Arc<dyn Store> = Arc::new(ctxlog_store_fs::FsStore::open(dir.path().join("fs")).unwrap());
    for store in [sqlite, fs] {
        let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
        let mut h = vec![("user", "hello".to_string())];
        for t in 0..3 {
            let hv: Vec<(&str, &str)> = h.iter().map(|(r, x)| (*r, x.as_str())).collect();
            let (status, headers, _) =
                post(p.addr(), "/v1/messages", &[("x-api-key", KEY)], &anthropic_body(&hv, true)).await;
            assert_eq!(status, 200);
            calls(&*store, stream_of(&headers), t + 1).await;
            h.push(("assistant", "Hello there".into()));
            h.push(("user", format!("turn {t}")));
        }
        p.shutdown().await;
    }
    // Sanity: the grep finds what is there.
    assert!(!grep_dir(dir.path(), b"You are terse.").is_empty());
    assert_eq!(grep_dir(dir.path(), KEY.as_bytes()), Vec::<String>::new());
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
    let up = common::start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.engine.budget = 3_000).await;
    let mut h: Vec<(&str, String)> = vec![("user", "Summarize the build logs.".into())];
    let mut id = None;
    for t in 0..8 {
        let hv: Vec<(&str, &str)> = h.iter().map(|(r, x)| (*r, x.as_str())).collect();
        let (status, headers, _) =
            post(p.addr(), "/v1/messages", &[("x-api-key", KEY)], &anthropic_body(&hv, t % 2 == 1)).await;
        assert_eq!(status, 200);
        id = Some(stream_of(&headers));
        calls(&*store, stream_of(&headers), t + 1).await;
        h.push(("assistant", format!("Reading log {t}.")));
        h.push(("user", format!("log {t}: {}", "error: linker failed; retrying with -v\n".repeat(40))));
    }
    let id = id.unwrap();
    let evs = events(&*store, id);
    let calls = served(&evs);
    assert!(calls.iter().any(|c| c.level > 0), "nothing was compacted: the test proves nothing");
    for (call, rec) in calls.iter().zip(up.received()) {
        let rebuilt = ctxlog::replay::served_request(&*store, id, call.call, &opts_of(&rec.body)).unwrap();
        assert_eq!(rebuilt.body(), &rec.body[..], "call {}", call.call);
    }
    let compacted = calls.iter().position(|c| c.level > 0).unwrap();
    let got = up.received();
    // The client's history only grows; the forwarded view shrank.
    assert!(got[compacted].body.len() < got[compacted - 1].body.len(), "the compacted view was not what went upstream");
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
    let up = common::start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let (s1, h1, _) = post(p.addr(), "/v1/messages", &[("x-api-key", KEY)], &body("")).await;
    assert_eq!(s1, 200);
    calls(&*store, stream_of(&h1), 1).await;
    p.shutdown().await;
    // A new proxy has no digests: the log (image as a blob) is compared by content.
    let p2 = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let more = r#",{"role":"assistant","content":"a screen"},{"role":"user","content":"and?"}"#;
    let (s2, h2, _) = post(p2.addr(), "/v1/messages", &[("x-api-key", KEY)], &body(more)).await;
    assert_eq!(s2, 200);
    assert_eq!(stream_of(&h2), stream_of(&h1), "the image made the reopened history diverge");
    let evs = calls(&*store, stream_of(&h1), 2).await;
    assert_eq!(appended(&evs), 3);
    assert!(
        up.received()[1].body.windows(png.len()).any(|w| w == png.as_bytes()),
        "the image was not inlined upstream"
    );
    // A changed image is a divergence.
    let other = body(more).replace("AAAADUlEQVR42", "AAAADUlEQVR43");
    let (_, h3, _) =
        post(p2.addr(), "/v1/messages", &[("x-api-key", KEY), ("x-ctxlog-session", "s")], &body(more)).await;
    calls(&*store, stream_of(&h3), 1).await;
    let p3 = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    let (_, h4, _) = post(p3.addr(), "/v1/messages", &[("x-api-key", KEY), ("x-ctxlog-session", "s")], &other).await;
    assert_ne!(stream_of(&h4), stream_of(&h3));
    p2.shutdown().await;
    p3.shutdown().await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_leaves_memory_and_continues_from_the_store() {
    let up = common::start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.idle_evict = Duration::from_millis(300)).await;
    let (_, h1, _) =
        post(p.addr(), "/v1/messages", &[("x-api-key", KEY)], &anthropic_body(&[("user", "hi")], true)).await;
    let id = stream_of(&h1);
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
    for _ in 0..500 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if p.metrics().sessions_in_memory() == 0 && served(&events(&*store, id)).len() == 1 {
            evicted = true;
            break;
        }
    }
    assert!(evicted, "the idle session stayed in memory");
    let b = anthropic_body(&[("user", "hi"), ("assistant", "Hello there"), ("user", "again")], true);
    let (_, h2, _) = post(p.addr(), "/v1/messages", &[("x-api-key", KEY)], &b).await;
    assert_eq!(stream_of(&h2), id);
    let evs = calls(&*store, id, 2).await;
    assert_eq!(appended(&evs), 4);
    p.shutdown().await;
}
