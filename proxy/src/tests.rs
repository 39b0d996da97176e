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
    // An edited history after a shrink still diverges (the digests were kept and compared).
    let edited = body(2).replace("ack 0", "ACK 0");
    let next = call(&proxy, edited).await;
    assert_ne!(next, stream);
    committed(&proxy, 3).await;
    let session = Session::open(Arc::clone(&store), stream).unwrap();
    assert_eq!(session.state().message_count(), 4, "system, user, assistant, user");
    assert_eq!(session.state().calls(), 2);
    let rendered = proxy.metrics().render();
    assert!(rendered.contains("ctxlog_proxy_diverged_total 1"), "{rendered}");
    proxy.shutdown().await;
    fake.shutdown();
}

/// A memory store whose appends of two or more records (a call's new messages) fail on demand.
#[derive(Default)]
struct FlakyStore {
    inner: ctxlog::MemoryStore,
    fail: std::sync::atomic::AtomicBool,
}

impl Store for FlakyStore {
    fn append(
        &self,
        stream: StreamId,
        expected: ctxlog::ExpectedVersion,
        records: &[ctxlog::Record],
    ) -> Result<ctxlog::Version, ctxlog::StoreError> {
        let appending = records.len() >= 2;
        if appending && self.fail.load(std::sync::atomic::Ordering::SeqCst) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_new_messages_cannot_be_written_is_not_committed() {
    let fake = FakeUpstream::start().unwrap();
    let flaky = Arc::new(FlakyStore::default());
    let store: Arc<dyn Store> = flaky.clone();
    let proxy = serve(ProxyConfig::new("127.0.0.1:0".parse().unwrap(), &fake.url()), Arc::clone(&store)).await.unwrap();
    let stream = call(&proxy, body(0)).await;
    committed(&proxy, 1).await;
    let head = store.head(stream).unwrap();

    // The new turn's write fails while the call is on its way: the client still gets the
    // upstream's answer (it was sent), but nothing is committed on top of the missing messages.
    flaky.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(call(&proxy, body(1)).await, stream);
    let t = Instant::now();
    while !proxy.metrics().render().contains("ctxlog_proxy_aborted_total 1") {
        assert!(t.elapsed() < Duration::from_secs(10), "{}", proxy.metrics().render());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(proxy.metrics().committed(), 1);
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
