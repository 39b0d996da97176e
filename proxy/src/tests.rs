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
