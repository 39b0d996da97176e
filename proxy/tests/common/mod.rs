//! A small loopback upstream for the proxy's tests (both protocols, SSE as the APIs send it,
//! scripted faults, a record of what it received and the exact bytes it answered).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the next call gets.
#[derive(Clone, Debug)]
pub enum Fault {
    /// A status and a JSON body.
    Status(u16, &'static str),
    /// Wait, then answer normally.
    Delay(Duration),
    /// Send this many SSE events, then drop the connection.
    CutAfter(usize),
    /// Never answer.
    Hang,
    /// Send this many SSE events, then go quiet with the connection open.
    StallAfter(usize),
}

#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Exact bytes answered.
    pub answered: Bytes,
    /// Usage it reported: (uncached input, cache read, output).
    pub usage: (u64, u64, u64),
}

#[derive(Default)]
pub struct Upstream {
    pub addr: Option<SocketAddr>,
    script: Mutex<VecDeque<Fault>>,
    pub received: Mutex<Vec<Received>>,
}

impl Upstream {
    pub fn push(&self, f: Fault) {
        self.script.lock().unwrap().push_back(f);
    }
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
    pub fn url(&self) -> String {
        format!("http://{}", self.addr.unwrap())
    }
}

struct Chan(tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BoxError>>);

impl http_body::Body for Chan {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.poll_recv(cx)
    }
}

pub async fn start() -> Arc<Upstream> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = Arc::new(Upstream { addr: Some(listener.local_addr().unwrap()), ..Default::default() });
    let u = Arc::clone(&up);
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let u = Arc::clone(&u);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| answer(Arc::clone(&u), req));
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tcp), svc).await;
            });
        }
    });
    up
}

fn events(path: &str, prompt: u64) -> (Vec<String>, (u64, u64, u64)) {
    let (cached, input, output) = (prompt / 2, prompt - prompt / 2, 7);
    if path == "/v1/messages" {
        let ev = |name: &str, data: String| format!("event: {name}\ndata: {data}\n\n");
        (
            vec![
                ev(
                    "message_start",
                    format!(
                        r#"{{"type":"message_start","message":{{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"usage":{{"input_tokens":{input},"cache_read_input_tokens":{cached},"cache_creation_input_tokens":0,"output_tokens":1}}}}}}"#
                    ),
                ),
                ev(
                    "content_block_start",
                    r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.into(),
                ),
                ev("ping", r#"{"type": "ping"}"#.into()),
                ev(
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#.into(),
                ),
                ev(
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there"}}"#.into(),
                ),
                ev("content_block_stop", r#"{"type":"content_block_stop","index":0}"#.into()),
                ev(
                    "message_delta",
                    format!(
                        r#"{{"type":"message_delta","delta":{{"stop_reason":"end_turn","stop_sequence":null}},"usage":{{"output_tokens":{output}}}}}"#
                    ),
                ),
                ev("message_stop", r#"{"type":"message_stop"}"#.into()),
            ],
            (input, cached, output),
        )
    } else {
        let total = input + cached;
        (
            vec![
                r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":null}"#.to_string() + "\n\n",
                r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hello"}}],"usage":null}"#.to_string() + "\n\n",
                r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}"#.to_string() + "\n\n",
                format!(r#"data: {{"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{{"prompt_tokens":{total},"completion_tokens":{output},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":{cached}}}}}}}"#, total + output) + "\n\n",
                "data: [DONE]\n\n".to_string(),
            ],
            (input, cached, output),
        )
    }
}

fn json_body(path: &str, prompt: u64) -> (String, (u64, u64, u64)) {
    let (cached, input, output) = (prompt / 2, prompt - prompt / 2, 7);
    if path == "/v1/messages" {
        (
            format!(
                r#"{{"id":"msg_1","type":"message","role":"assistant","content":[{{"type":"text","text":"Hello"}}],"stop_reason":"end_turn","usage":{{"input_tokens":{input},"cache_read_input_tokens":{cached},"output_tokens":{output}}}}}"#
            ),
            (input, cached, output),
        )
    } else {
        (
            format!(
                r#"{{"id":"c1","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"Hello"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":{},"completion_tokens":{output},"prompt_tokens_details":{{"cached_tokens":{cached}}}}}}}"#,
                input + cached
            ),
            (input, cached, output),
        )
    }
}

async fn answer(u: Arc<Upstream>, req: Request<Incoming>) -> Result<Response<Chan>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
    let path = parts.uri.path().to_owned();
    let fault = u.script.lock().unwrap().pop_front();
    let stream = body.windows(13).any(|w| w == b"\"stream\":true");
    // A prompt count near the estimate (about 4 bytes a token), so the meter anchors on it.
    let prompt = (body.len() as u64 / 4).max(2);
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let mut record =
        Received { path: path.clone(), headers: parts.headers.clone(), body, answered: Bytes::new(), usage: (0, 0, 0) };
    let mut resp = Response::new(Chan(rx));
    let mut cut = None;
    let mut stall = false;
    match fault {
        Some(Fault::Hang) => {
            u.received.lock().unwrap().push(record);
            std::future::pending::<()>().await;
            unreachable!()
        }
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
        Some(Fault::CutAfter(n)) => cut = Some(n),
        Some(Fault::StallAfter(n)) => {
            cut = Some(n);
            stall = true;
        }
        Some(Fault::Status(code, text)) => {
            *resp.status_mut() = http::StatusCode::from_u16(code).unwrap();
            resp.headers_mut().insert("content-type", "application/json".parse().unwrap());
            resp.headers_mut().insert("retry-after", "3".parse().unwrap());
            record.answered = Bytes::from_static(text.as_bytes());
            tx.send(Ok(Frame::data(record.answered.clone()))).await.unwrap();
            u.received.lock().unwrap().push(record);
            return Ok(resp);
        }
        None => {}
    }
    if stream {
        let (evs, usage) = events(&path, prompt);
        record.usage = usage;
        resp.headers_mut().insert("content-type", "text/event-stream".parse().unwrap());
        let mut answered = Vec::new();
        let evs: Vec<String> = match cut {
            Some(n) => evs.into_iter().take(n).collect(),
            None => evs,
        };
        for e in &evs {
            answered.extend_from_slice(e.as_bytes());
        }
        record.answered = answered.into();
        u.received.lock().unwrap().push(record);
        tokio::spawn(async move {
            for e in evs {
                if tx.send(Ok(Frame::data(Bytes::from(e)))).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            if stall {
                tx.closed().await;
            } else if cut.is_some() {
                let _ = tx.send(Err("cut".into())).await;
            }
        });
    } else {
        let (text, usage) = json_body(&path, prompt);
        record.usage = usage;
        record.answered = Bytes::from(text);
        resp.headers_mut().insert("content-type", "application/json".parse().unwrap());
        // As the APIs answer JSON: with a length, not chunked.
        resp.headers_mut().insert("content-length", record.answered.len().to_string().parse().unwrap());
        tx.send(Ok(Frame::data(record.answered.clone()))).await.unwrap();
        u.received.lock().unwrap().push(record);
    }
    Ok(resp)
}

/// POSTs `body` to the proxy; returns status, headers and the whole answer.
pub async fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, HeaderMap, Bytes) {
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::post(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.header("content-type", "application/json").body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
    (status, headers, body)
}

pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client.request(req.body(Full::new(Bytes::new())).unwrap()).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}
