//! In-crate tests of the proxy against the loopback fake upstream: what the log records of a
//! proxied call besides its messages, and the idle shrink.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxlog::event::ToolsRecord;
use ctxlog::{Session, Store, StreamId};
use ctxlog_fake_upstream::FakeUpstream;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

use crate::{serve, ProxyConfig, ProxyHandle};

const TOOLS: &str = r#"[{"name":"ls","description":"list files","input_schema":{"type":"object"}}]"#;

fn body(turns: usize) -> String {
    let mut messages = vec![r#"{"role":"user","content":"list the files"}"#.to_owned()];
    for i in 0..turns {
        messages.push(format!(r#"{{"role":"assistant","content":"ack {i}"}}"#));
        messages.push(format!(r#"{{"role":"user","content":"more {i}"}}"#));
    }
    format!(
        r#"{{"model":"claude-test-1","max_tokens":256,"tools":{TOOLS},"system":"be brief","messages":[{}]}}"#,
        messages.join(",")
    )
}

/// POSTs an Anthropic body; returns the stream the proxy logged it in.
async fn call(proxy: &ProxyHandle, body: String) -> StreamId {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::post(format!("http://{}/v1/messages", proxy.addr()))
        .header("content-type", "application/json")
        .header("x-api-key", "test-key")
        .header(crate::SESSION_HEADER, "recorded")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    let stream = resp.headers().get(crate::STREAM_HEADER).unwrap().to_str().unwrap().parse().unwrap();
    resp.into_body().collect().await.unwrap();
    stream
}

async fn committed(proxy: &ProxyHandle, n: u64) {
    let t = Instant::now();
    while proxy.metrics().committed() < n {
        assert!(t.elapsed() < Duration::from_secs(10), "the call was not committed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxied_call_records_its_model_and_tools() {
    let fake = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(ctxlog::MemoryStore::new());
    let proxy = serve(ProxyConfig::new("127.0.0.1:0".parse().unwrap(), &fake.url()), Arc::clone(&store)).await.unwrap();

    let stream = call(&proxy, body(0)).await;
    committed(&proxy, 1).await;
    let session = Session::open(Arc::clone(&store), stream).unwrap();
    let record = session.state().last_served().and_then(|l| l.request.clone()).expect("the call says what it sent");
    assert_eq!(record.model.as_deref(), Some("claude-test-1"));
    let id = ctxlog::summary_call::tools_id(TOOLS);
    assert_eq!(record.tools, ToolsRecord::Blob { id: id.clone(), bytes: TOOLS.len() as u64 });
    assert_eq!(store.get_blob(&id).unwrap().as_deref(), Some(TOOLS.as_bytes()));
    assert_eq!(record.breakpoints, None, "the proxy places no breakpoints of its own");

    // The second call (same tools) records them too, and the log verifies.
    assert_eq!(call(&proxy, body(1)).await, stream);
    committed(&proxy, 2).await;
    let session = Session::open(Arc::clone(&store), stream).unwrap();
    let record = session.state().last_served().and_then(|l| l.request.clone()).unwrap();
    assert_eq!(
        (record.model.as_deref(), record.tools),
        (Some("claude-test-1"), ToolsRecord::Blob { id, bytes: TOOLS.len() as u64 })
    );
    let report = ctxlog::replay::verify(&*store, stream).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.calls, 2);
    proxy.shutdown().await;
    fake.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shrunk_session_continues_where_it_was() {
    let fake = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(ctxlog::MemoryStore::new());
    let mut cfg = ProxyConfig::new("127.0.0.1:0".parse().unwrap(), &fake.url());
    cfg.idle_shrink = Duration::from_millis(40);
    let proxy = serve(cfg, Arc::clone(&store)).await.unwrap();
    let stream = call(&proxy, body(0)).await;
    committed(&proxy, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await; // shrunk to its digests
                                                          // Same history plus a turn: the same session, no divergence, the new turn appended once.
    assert_eq!(call(&proxy, body(1)).await, stream);
    committed(&proxy, 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // An edited history after a shrink is still a branch (the digests were kept and compared).
    let edited = body(2).replace("ack 0", "ACK 0");
    let next = call(&proxy, edited).await;
    assert_ne!(next, stream);
    committed(&proxy, 3).await;
    let session = Session::open(Arc::clone(&store), stream).unwrap();
    assert_eq!(session.state().message_count(), 4, "system, user, assistant, user");
    assert_eq!(session.state().calls(), 2);
    let rendered = proxy.metrics().render();
    assert!(rendered.contains("ctxlog_proxy_branched_total 1"), "{rendered}");
    proxy.shutdown().await;
    fake.shutdown();
}

/// A memory store whose appends of a call's new messages (two or more records) or of a
/// commit (a batch with a `RequestServed`) fail on demand.
#[derive(Default)]
struct FlakyStore {
    inner: ctxlog::MemoryStore,
    fail: std::sync::atomic::AtomicBool,
    fail_commits: std::sync::atomic::AtomicBool,
    /// Every read fails: the database is down.
    down: std::sync::atomic::AtomicBool,
    /// Every append of a `ProviderCompacted` record fails.
    fail_compactions: std::sync::atomic::AtomicBool,
}

impl Store for FlakyStore {
    fn append(
        &self,
        stream: StreamId,
        expected: ctxlog::ExpectedVersion,
        records: &[ctxlog::Record],
    ) -> Result<ctxlog::Version, ctxlog::StoreError> {
        let commit = records.iter().any(|r| r.body().get(1) == Some(&ctxlog::codec::kind::REQUEST_SERVED));
        let appending = records.len() >= 2 && !commit;
        let compaction = records.iter().any(|r| r.body().get(1) == Some(&ctxlog::codec::kind::PROVIDER_COMPACTED));
        let failing = (compaction && self.fail_compactions.load(std::sync::atomic::Ordering::SeqCst))
            || (commit && self.fail_commits.load(std::sync::atomic::Ordering::SeqCst))
            || (appending && self.fail.load(std::sync::atomic::Ordering::SeqCst));
        if failing {
            return Err(ctxlog::StoreError::Unavailable {
                backend: "flaky",
                location: "memory".into(),
                detail: "the disk went away".into(),
            });
        }
        self.inner.append(stream, expected, records)
    }
    fn read(
        &self,
        stream: StreamId,
        from: ctxlog::Version,
        max: usize,
    ) -> Result<Vec<ctxlog::StoredRecord>, ctxlog::StoreError> {
        self.inner.read(stream, from, max)
    }
    fn head(&self, stream: StreamId) -> Result<Option<ctxlog::Version>, ctxlog::StoreError> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(ctxlog::StoreError::Unavailable {
                backend: "flaky",
                location: "memory".into(),
                detail: "connection refused".into(),
            });
        }
        self.inner.head(stream)
    }
    fn streams(&self) -> Result<Vec<StreamId>, ctxlog::StoreError> {
        self.inner.streams()
    }
    fn put_snapshot(&self, stream: StreamId, snap: &ctxlog::Snapshot) -> Result<(), ctxlog::StoreError> {
        self.inner.put_snapshot(stream, snap)
    }
    fn get_snapshot(&self, stream: StreamId) -> Result<Option<ctxlog::Snapshot>, ctxlog::StoreError> {
        self.inner.get_snapshot(stream)
    }
    fn put_blob(&self, bytes: &[u8]) -> Result<ctxlog::BlobId, ctxlog::StoreError> {
        self.inner.put_blob(bytes)
    }
    fn get_blob(&self, id: &ctxlog::BlobId) -> Result<Option<Vec<u8>>, ctxlog::StoreError> {
        self.inner.get_blob(id)
    }
}

/// POSTs an Anthropic body (`stream`: as SSE); returns the status and the whole answer.
async fn send(proxy: &ProxyHandle, body: String, stream: bool) -> (http::StatusCode, http::HeaderMap, String) {
    let body = if stream { body.replacen(r#""max_tokens":256"#, r#""max_tokens":256,"stream":true"#, 1) } else { body };
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::post(format!("http://{}/v1/messages", proxy.addr()))
        .header("content-type", "application/json")
        .header("x-api-key", "test-key")
        .header(crate::SESSION_HEADER, "recorded")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let (parts, b) = resp.into_parts();
    let bytes = b.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned())
}

/// A call whose new messages cannot be logged is not forwarded: the client is told to retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_new_messages_cannot_be_written_is_not_forwarded() {
    let fake = FakeUpstream::start().unwrap();
    let flaky = Arc::new(FlakyStore::default());
    let store: Arc<dyn Store> = flaky.clone();
    let proxy = serve(ProxyConfig::new("127.0.0.1:0".parse().unwrap(), &fake.url()), Arc::clone(&store)).await.unwrap();
    let stream = call(&proxy, body(0)).await;
    committed(&proxy, 1).await;
    let head = store.head(stream).unwrap();
    let forwarded = fake.requests().len();

    flaky.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    for sse in [false, true] {
        let (status, headers, answer) = send(&proxy, body(1), sse).await;
        assert_eq!(status.as_u16(), 529, "{answer}");
        assert_eq!(headers.get("retry-after").unwrap(), "1");
        assert!(answer.contains("overloaded_error") && answer.contains("nothing was sent upstream"), "{answer}");
    }
    assert_eq!(fake.requests().len(), forwarded, "a call whose messages were not logged went upstream");
    assert_eq!(proxy.metrics().committed(), 1);
    assert_eq!(proxy.metrics().failed_writes(), 2);
    assert_eq!(store.head(stream).unwrap(), head, "nothing written");

    // The disk is back: the session is reopened from the log and the same history appended.
    flaky.fail.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(call(&proxy, body(1)).await, stream, "no divergence: the log never had the lost turn");
    committed(&proxy, 2).await;
    let session = Session::open(Arc::clone(&store), stream).unwrap();
    assert_eq!(session.state().message_count(), 4);
    assert_eq!(session.state().calls(), 2);
    let report = ctxlog::replay::verify(&*store, stream).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    proxy.shutdown().await;
    fake.shutdown();
}

/// An answer whose call cannot be committed never reaches its client whole: a JSON answer
/// becomes a 529, a stream ends in an error event in place of `message_stop`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_whose_commit_fails_reaches_the_client_as_an_error() {
    let fake = FakeUpstream::start().unwrap();
    let flaky = Arc::new(FlakyStore::default());
    let store: Arc<dyn Store> = flaky.clone();
    let proxy = serve(ProxyConfig::new("127.0.0.1:0".parse().unwrap(), &fake.url()), Arc::clone(&store)).await.unwrap();
    let stream = call(&proxy, body(0)).await;
    committed(&proxy, 1).await;

    flaky.fail_commits.store(true, std::sync::atomic::Ordering::SeqCst);
    let (status, _, answer) = send(&proxy, body(1), false).await;
    assert_eq!(status.as_u16(), 529, "{answer}");
    assert!(answer.contains("could not be recorded"), "{answer}");
    let (status, _, answer) = send(&proxy, body(2), true).await;
    assert_eq!(status.as_u16(), 200, "a stream's status is sent before its end");
    assert!(answer.contains("content_block_delta"), "the stream's events before its end were held: {answer}");
    assert!(!answer.contains("message_stop"), "the final event reached the client: {answer}");
    assert!(answer.trim_end().ends_with('}') && answer.contains("event: error"), "{answer}");
    assert_eq!(proxy.metrics().committed(), 1);
    assert_eq!(proxy.metrics().failed_commits(), 2);

    // Once commits land again, so do the answers' ends.
    flaky.fail_commits.store(false, std::sync::atomic::Ordering::SeqCst);
    let (status, _, answer) = send(&proxy, body(3), true).await;
    assert_eq!(status.as_u16(), 200);
    assert!(answer.contains("event: message_stop"), "{answer}");
    assert_eq!(proxy.metrics().committed(), 2, "the final event was sent before the commit");
    let report = ctxlog::replay::verify(&*store, stream).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.calls, 2);
    proxy.shutdown().await;
    fake.shutdown();
}

/// `/healthz` says the process lives; `/readyz` whether its store answers; a request during an
/// outage is a 529 with `retry-after`, never a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_store_and_an_outage_is_a_retry() {
    let fake = FakeUpstream::start().unwrap();
    let flaky = Arc::new(FlakyStore::default());
    let store: Arc<dyn Store> = flaky.clone();
    let proxy = serve(ProxyConfig::new("127.0.0.1:0".parse().unwrap(), &fake.url()), Arc::clone(&store)).await.unwrap();
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let get = |path: &'static str| {
        let req = http::Request::get(format!("http://{}{path}", proxy.addr())).body(Full::new(Bytes::new())).unwrap();
        let c = client.clone();
        async move { c.request(req).await.unwrap().status().as_u16() }
    };
    assert_eq!((get("/healthz").await, get("/readyz").await), (200, 200));
    flaky.down.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!((get("/healthz").await, get("/readyz").await), (200, 503));
    let (status, headers, answer) = send(&proxy, body(0), false).await;
    assert_eq!(status.as_u16(), 529, "{answer}");
    assert!(headers.contains_key("retry-after"));
    assert!(fake.requests().is_empty(), "a call went upstream during the outage");
    flaky.down.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(get("/readyz").await, 200);
    assert_eq!(send(&proxy, body(0), false).await.0.as_u16(), 200);
    proxy.shutdown().await;
    fake.shutdown();
}

/// Responses: `response.completed` is the final event held until the commit; when the commit
/// fails the stream ends in an `error` event in its place, and a JSON answer becomes a 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_answer_whose_commit_fails_reaches_the_client_as_an_error() {
    let fake = FakeUpstream::start().unwrap();
    let flaky = Arc::new(FlakyStore::default());
    let store: Arc<dyn Store> = flaky.clone();
    let proxy = serve(ProxyConfig::new("127.0.0.1:0".parse().unwrap(), &fake.url()), Arc::clone(&store)).await.unwrap();
    let post = |input: String, stream: bool| {
        let body = format!(r#"{{"model":"gpt-x","instructions":"Be terse.","stream":{stream},"input":[{input}]}}"#);
        let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let req = http::Request::post(format!("http://{}/v1/responses", proxy.addr()))
            .header("content-type", "application/json")
            .header("authorization", "Bearer test-key")
            .header(crate::SESSION_HEADER, "responses")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        async move {
            let resp = client.request(req).await.unwrap();
            let (parts, b) = resp.into_parts();
            let bytes = b.collect().await.unwrap().to_bytes();
            (parts.status.as_u16(), String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    let turn = |i: usize| {
        (0..=i)
            .map(|t| format!(r#"{{"role":"user","content":"step {t}"}},{{"role":"assistant","content":"ack {t}"}}"#))
            .collect::<Vec<_>>()
            .join(",")
            + &format!(r#",{{"role":"user","content":"step {}"}}"#, i + 1)
    };
    let (status, answer) = post(turn(0), true).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("event: response.completed"), "{answer}");
    committed(&proxy, 1).await;
    flaky.fail_commits.store(true, std::sync::atomic::Ordering::SeqCst);
    let (status, answer) = post(turn(1), true).await;
    assert_eq!(status, 200, "a stream's status is sent before its end");
    assert!(answer.contains("response.output_text.delta"), "the events before the end were held: {answer}");
    assert!(!answer.contains("response.completed"), "the final event reached the client: {answer}");
    assert!(answer.contains("event: error") && answer.contains("ctxlog_not_recorded"), "{answer}");
    let (status, answer) = post(turn(2), false).await;
    assert_eq!(status, 503, "{answer}");
    flaky.fail_commits.store(false, std::sync::atomic::Ordering::SeqCst);
    let (status, answer) = post(turn(3), true).await;
    assert_eq!(status, 200);
    assert!(answer.contains("event: response.completed"), "{answer}");
    assert_eq!(proxy.metrics().committed(), 2);
    assert_eq!(proxy.metrics().failed_commits(), 2);
    proxy.shutdown().await;
    fake.shutdown();
}

/// A memory store whose lease is taken by "another process" for its first `taken` tries.
struct Busy {
    inner: ctxlog::MemoryStore,
    taken: std::sync::atomic::AtomicUsize,
}

impl Store for Busy {
    fn append(
        &self,
        stream: StreamId,
        expected: ctxlog::store::ExpectedVersion,
        records: &[ctxlog::store::Record],
    ) -> Result<u64, ctxlog::StoreError> {
        self.inner.append(stream, expected, records)
    }
    fn read(
        &self,
        stream: StreamId,
        from: u64,
        max: usize,
    ) -> Result<Vec<ctxlog::store::StoredRecord>, ctxlog::StoreError> {
        self.inner.read(stream, from, max)
    }
    fn head(&self, stream: StreamId) -> Result<Option<u64>, ctxlog::StoreError> {
        self.inner.head(stream)
    }
    fn streams(&self) -> Result<Vec<StreamId>, ctxlog::StoreError> {
        self.inner.streams()
    }
    fn put_snapshot(&self, stream: StreamId, snap: &ctxlog::store::Snapshot) -> Result<(), ctxlog::StoreError> {
        self.inner.put_snapshot(stream, snap)
    }
    fn get_snapshot(&self, stream: StreamId) -> Result<Option<ctxlog::store::Snapshot>, ctxlog::StoreError> {
        self.inner.get_snapshot(stream)
    }
    fn put_blob(&self, bytes: &[u8]) -> Result<ctxlog::store::BlobId, ctxlog::StoreError> {
        self.inner.put_blob(bytes)
    }
    fn get_blob(&self, id: &ctxlog::store::BlobId) -> Result<Option<Vec<u8>>, ctxlog::StoreError> {
        self.inner.get_blob(id)
    }
    fn try_lease(&self, _stream: StreamId) -> Result<Option<ctxlog::Lease>, ctxlog::StoreError> {
        let left = self.taken.load(std::sync::atomic::Ordering::SeqCst);
        if left > 0 {
            self.taken.store(left - 1, std::sync::atomic::Ordering::SeqCst);
            return Ok(None);
        }
        Ok(Some(ctxlog::Lease::local()))
    }
}

/// A lease that another proxy is releasing is taken within the quick tries, without a wait on
/// the runtime's timer; one held longer is left to that wait. Each call that found it taken
/// counts one lease wait.
#[test]
fn a_lease_being_released_is_taken_within_the_quick_tries() {
    let id = StreamId::random();
    for (taken, got, waits) in [(0, true, 0), (1, true, 1), (4, true, 1), (5, false, 1)] {
        let store: crate::sessions::Store =
            Arc::new(Busy { inner: ctxlog::MemoryStore::new(), taken: std::sync::atomic::AtomicUsize::new(taken) });
        let metrics = crate::Metrics::default();
        let lease = crate::api::lease_soon(&store, id, &metrics).unwrap();
        assert_eq!(lease.is_some(), got, "taken for {taken} tries");
        assert_eq!(metrics.lease_waits(), waits, "taken for {taken} tries");
    }
}

/// Gemini: the chunk with `finishReason` is the final event, held until the commit; when the
/// commit fails the stream ends in Google's error object in its place (the text chunks before
/// it went on), and a JSON answer becomes a 503 in Google's shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_answer_whose_commit_fails_reaches_the_client_as_an_error() {
    let fake = FakeUpstream::start().unwrap();
    let flaky = Arc::new(FlakyStore::default());
    let store: Arc<dyn Store> = flaky.clone();
    let proxy = serve(ProxyConfig::new("127.0.0.1:0".parse().unwrap(), &fake.url()), Arc::clone(&store)).await.unwrap();
    let post = |contents: String, stream: bool| {
        let body = format!(r#"{{"systemInstruction":{{"parts":[{{"text":"Be terse."}}]}},"contents":[{contents}]}}"#);
        let verb = if stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
        let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let req = http::Request::post(format!("http://{}/v1beta/models/gemini-2.5-flash:{verb}", proxy.addr()))
            .header("content-type", "application/json")
            .header("x-goog-api-key", "test-key")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        async move {
            let resp = client.request(req).await.unwrap();
            let (parts, b) = resp.into_parts();
            let bytes = b.collect().await.unwrap().to_bytes();
            (parts.status.as_u16(), String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    // The fake answers `ack N` for N contents: the client sends back what it was answered.
    let turn = |i: usize| {
        (0..=i)
            .map(|t| {
                format!(
                    r#"{{"role":"user","parts":[{{"text":"step {t} of a longer task"}}]}},{{"role":"model","parts":[{{"text":"ack {}"}}]}}"#,
                    2 * t + 1
                )
            })
            .collect::<Vec<_>>()
            .join(",")
            + &format!(r#",{{"role":"user","parts":[{{"text":"step {} of a longer task"}}]}}"#, i + 1)
    };
    let (status, answer) = post(r#"{"role":"user","parts":[{"text":"step 0 of a longer task"}]}"#.into(), true).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("finishReason"), "{answer}");
    committed(&proxy, 1).await;
    // New contents that cannot be logged are not forwarded: Google's 503, retry-after.
    flaky.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    let forwarded = fake.requests().len();
    for stream in [false, true] {
        let (status, answer) = post(turn(0), stream).await;
        assert_eq!(status, 503, "{answer}");
        assert!(
            answer.contains(r#""status":"UNAVAILABLE""#) && answer.contains("nothing was sent upstream"),
            "{answer}"
        );
    }
    assert_eq!(fake.requests().len(), forwarded, "a call whose contents were not logged went upstream");
    flaky.fail.store(false, std::sync::atomic::Ordering::SeqCst);
    flaky.fail_commits.store(true, std::sync::atomic::Ordering::SeqCst);
    let (status, answer) = post(turn(0), true).await;
    assert_eq!(status, 200, "a stream's status is sent before its end");
    assert!(answer.contains(r#"{"text":"ack "#), "the chunks before the end were held: {answer}");
    assert!(!answer.contains("finishReason"), "the final chunk reached the client: {answer}");
    assert!(answer.contains(r#""status":"UNAVAILABLE""#), "{answer}");
    let (status, answer) = post(turn(1), false).await;
    assert_eq!(status, 503, "{answer}");
    assert!(answer.contains(r#""status":"UNAVAILABLE""#), "{answer}");
    flaky.fail_commits.store(false, std::sync::atomic::Ordering::SeqCst);
    let (status, answer) = post(turn(2), true).await;
    assert_eq!(status, 200);
    assert!(answer.contains("finishReason"), "{answer}");
    assert_eq!(proxy.metrics().committed(), 2);
    assert_eq!(proxy.metrics().failed_commits(), 2);
    proxy.shutdown().await;
    fake.shutdown();
}

/// `/v1/responses/compact`: a compaction that cannot be recorded never reaches its client (a
/// 503 the SDK retries, the provider's answer held back); once the store writes again it is
/// recorded and relayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_that_cannot_be_recorded_is_a_503() {
    let fake = FakeUpstream::start().unwrap();
    let flaky = Arc::new(FlakyStore::default());
    let store: Arc<dyn Store> = flaky.clone();
    let proxy = serve(ProxyConfig::new("127.0.0.1:0".parse().unwrap(), &fake.url()), Arc::clone(&store)).await.unwrap();
    let post = || {
        let body = r#"{"model":"gpt-x","instructions":"Be terse.","input":[{"role":"user","content":"step 0"}]}"#;
        let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let req = http::Request::post(format!("http://{}/v1/responses/compact", proxy.addr()))
            .header("content-type", "application/json")
            .header("authorization", "Bearer test-key")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        async move {
            let resp = client.request(req).await.unwrap();
            let (parts, b) = resp.into_parts();
            let bytes = b.collect().await.unwrap().to_bytes();
            (parts.status.as_u16(), String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    flaky.fail_compactions.store(true, std::sync::atomic::Ordering::SeqCst);
    let (status, answer) = post().await;
    assert_eq!(status, 503, "{answer}");
    assert!(answer.contains("could not be recorded") && !answer.contains("compaction\","), "{answer}");
    flaky.fail_compactions.store(false, std::sync::atomic::Ordering::SeqCst);
    let (status, answer) = post().await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""object":"response.compaction""#), "{answer}");
    let recorded: usize = store
        .streams()
        .unwrap()
        .into_iter()
        .map(|id| {
            let n = store.read(id, 1, usize::MAX).unwrap();
            n.iter()
                .filter(|r| {
                    matches!(ctxlog::codec::decode(id, r.version, &r.record), Ok(ctxlog::Event::ProviderCompacted(_)))
                })
                .count()
        })
        .sum();
    assert_eq!(recorded, 1, "the refused write left a record, or the second none");
    proxy.shutdown().await;
    fake.shutdown();
}
