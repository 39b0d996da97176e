//! Real sockets, a hand-written HTTP/1.1 client: what goes over the wire is what is checked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ctxlog_fake_upstream::{FakeUpstream, Fault};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// The body ended as framed (false: connection cut).
    complete: bool,
}

impl Resp {
    fn header(&self, n: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(n)).map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

struct Conn(BufReader<TcpStream>);

impl Conn {
    fn open(up: &FakeUpstream) -> Self {
        Conn(BufReader::new(TcpStream::connect(up.addr()).unwrap()))
    }
    fn send(&mut self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        let mut req = format!("POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n", body.len());
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        let s = self.0.get_mut();
        s.write_all(req.as_bytes()).unwrap();
        s.write_all(body).unwrap();
        self.read()
    }
    fn line(&mut self) -> Option<String> {
        let mut l = String::new();
        match self.0.read_line(&mut l) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(l.trim_end().to_owned()),
        }
    }
    fn read(&mut self) -> Resp {
        let status_line = self.line().unwrap();
        let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut headers = Vec::new();
        while let Some(l) = self.line() {
            if l.is_empty() {
                break;
            }
            let (k, v) = l.split_once(':').unwrap();
            headers.push((k.to_lowercase(), v.trim().to_owned()));
        }
        let mut r = Resp { status, headers, body: Vec::new(), complete: false };
        if let Some(n) = r.header("content-length") {
            let n: usize = n.parse().unwrap();
            let mut buf = vec![0; n];
            let mut got = 0;
            while got < n {
                match self.0.read(&mut buf[got..]) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => got += k,
                }
            }
            buf.truncate(got);
            r.complete = got == n;
            r.body = buf;
        } else {
            while let Some(size) = self.line() {
                let size = usize::from_str_radix(&size, 16).unwrap();
                if size == 0 {
                    self.line();
                    r.complete = true;
                    break;
                }
                let mut buf = vec![0; size + 2];
                if self.0.read_exact(&mut buf).is_err() {
                    break;
                }
                r.body.extend_from_slice(&buf[..size]);
            }
        }
        r
    }
}

fn anthropic_body(stream: bool, last: &str) -> Vec<u8> {
    json!({"model": "claude-x", "max_tokens": 100, "stream": stream, "messages": [
        {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
        {"role": "user", "content": [{"type": "text", "text": last}]}]})
    .to_string()
    .into_bytes()
}

fn openai_body(stream: bool, last: &str) -> Vec<u8> {
    json!({"model": "gpt-x", "stream": stream, "stream_options": {"include_usage": true},
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": last}]})
    .to_string()
    .into_bytes()
}

const AK: &[(&str, &str)] = &[("x-api-key", "sk-ant-secret"), ("anthropic-version", "2023-06-01")];
const OK: &[(&str, &str)] = &[("authorization", "Bearer sk-oai-secret")];

/// `(event, data)` pairs of an Anthropic stream; panics on anything but exact framing.
fn events(body: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(body).unwrap();
    assert!(text.ends_with("\n\n"));
    text.trim_end_matches("\n\n")
        .split("\n\n")
        .map(|e| {
            let (ev, data) = e.split_once('\n').unwrap();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            let ev = ev.strip_prefix("event: ").unwrap().to_owned();
            assert_eq!(data["type"], ev.as_str());
            (ev, data)
        })
        .collect()
}

fn chunks(body: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(body).unwrap();
    text.trim_end_matches("\n\n").split("\n\n").map(|c| c.strip_prefix("data: ").unwrap().to_owned()).collect()
}

#[test]
fn anthropic_json_and_keep_alive_and_cache_model() {
    let up = FakeUpstream::start().unwrap();
    let mut c = Conn::open(&up);
    let b1 = anthropic_body(false, "one");
    let r1 = c.send("/v1/messages", AK, &b1);
    assert_eq!(r1.status, 200);
    let v = r1.json();
    assert_eq!(v["content"][0]["text"], "ack 3");
    assert_eq!(v["stop_reason"], "end_turn");
    let prompt = (b1.len() as u64).div_ceil(4);
    assert_eq!(v["usage"]["input_tokens"], prompt);
    assert_eq!(v["usage"]["cache_read_input_tokens"], 0);
    // Same connection: keep-alive. No cache_control: nothing is cached, whatever is shared.
    let r2 = c.send("/v1/messages", AK, &anthropic_body(false, "one"));
    assert_eq!(r2.json()["usage"]["cache_read_input_tokens"], 0);
    assert_eq!(r2.json()["usage"]["cache_creation_input_tokens"], 0);
    // A breakpoint on a system prompt of at least 1,024 tokens: written once, then read.
    let cached = |last: &str| {
        let mut v: Value = serde_json::from_slice(&anthropic_body(false, last)).unwrap();
        v["system"] = json!([{"type": "text", "text": "Rules. ".repeat(700), "cache_control": {"type": "ephemeral"}}]);
        v.to_string().into_bytes()
    };
    let b3 = cached("two");
    let u3 = c.send("/v1/messages", AK, &b3).json()["usage"].clone();
    let written = u3["cache_creation_input_tokens"].as_u64().unwrap();
    assert!(written >= 1024, "{u3}");
    assert_eq!(u3["cache_read_input_tokens"], 0);
    assert_eq!(u3["input_tokens"].as_u64().unwrap() + written, (b3.len() as u64).div_ceil(4));
    let b4 = cached("three");
    let u4 = c.send("/v1/messages", AK, &b4).json()["usage"].clone();
    assert_eq!(u4["cache_read_input_tokens"], written, "{u4}");
    assert_eq!(u4["cache_creation_input_tokens"], 0);
    assert_eq!(u4["input_tokens"].as_u64().unwrap() + written, (b4.len() as u64).div_ceil(4));
    // Another key has its own cache.
    let r5 = c.send("/v1/messages", &[("x-api-key", "other")], &b4);
    assert_eq!(r5.json()["usage"]["cache_read_input_tokens"], 0);
    let rec = up.requests();
    assert_eq!(rec.len(), 5);
    assert_eq!(rec[0].request.header("x-api-key"), Some("sk-ant-secret"));
    assert_eq!(rec[0].request.body, b1);
    assert_eq!(rec[1].response.body(), r2.body);
    assert!(rec[1].response.complete && rec[1].response.finished);
}

#[test]
fn anthropic_stream_text_and_tool() {
    let up = FakeUpstream::start().unwrap();
    let mut c = Conn::open(&up);
    let r = c.send("/v1/messages", AK, &anthropic_body(true, "go"));
    assert_eq!(r.header("content-type"), Some("text/event-stream; charset=utf-8"));
    let ev = events(&r.body);
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(&names[1..3], ["content_block_start", "ping"]);
    assert_eq!(&names[names.len() - 3..], ["content_block_stop", "message_delta", "message_stop"]);
    let usage = &ev[0].1["message"]["usage"];
    for k in ["input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"] {
        assert!(usage[k].is_u64(), "{k}");
    }
    let text: String = ev
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "ack 3");
    let delta = &ev[ev.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 2);
    // Tool use, same connection: a line of text, then the tool_use block (two content blocks).
    let r = c.send("/v1/messages", AK, &anthropic_body(true, "please [[tool:get_weather]]"));
    let ev = events(&r.body);
    let starts: Vec<&Value> = ev.iter().filter(|(n, _)| n == "content_block_start").map(|(_, d)| d).collect();
    assert_eq!(starts.len(), 2);
    assert_eq!((starts[0]["index"].as_u64(), starts[0]["content_block"]["type"].as_str()), (Some(0), Some("text")));
    assert_eq!(starts[1]["index"], 1);
    assert_eq!(starts[1]["content_block"]["type"], "tool_use");
    assert_eq!(starts[1]["content_block"]["name"], "get_weather");
    assert_eq!(starts[1]["content_block"]["input"], json!({}));
    let json: String = ev
        .iter()
        .filter(|(n, d)| n == "content_block_delta" && d["index"] == 1)
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"].as_str().unwrap()
        })
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), json!({"n": 3}));
    assert_eq!(ev[ev.len() - 2].1["delta"]["stop_reason"], "tool_use");
    let rec = up.requests();
    assert_eq!(rec[1].response.body(), r.body);
    assert_eq!(rec[1].response.chunks.len(), ev.len(), "one recorded chunk per event");
}

#[test]
fn openai_json_stream_and_tool_calls() {
    let up = FakeUpstream::start().unwrap();
    let mut c = Conn::open(&up);
    // Long enough (over 1,024 tokens) for OpenAI's automatic prefix cache.
    let long = "hi ".repeat(1500);
    let b = openai_body(false, &long);
    let v = c.send("/v1/chat/completions", OK, &b).json();
    assert_eq!(v["choices"][0]["message"]["content"], "ack 2");
    assert_eq!(v["usage"]["prompt_tokens"], (b.len() as u64).div_ceil(4));
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let r = c.send("/v1/chat/completions", OK, &openai_body(true, &long));
    let ch = chunks(&r.body);
    assert_eq!(ch.last().map(String::as_str), Some("[DONE]"));
    let parsed: Vec<Value> = ch[..ch.len() - 1].iter().map(|c| serde_json::from_str(c).unwrap()).collect();
    let last = parsed.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    let cached = last["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(cached >= 1024 && cached % 128 == 0, "cached {cached}");
    assert!(parsed[..parsed.len() - 1].iter().all(|c| c["usage"].is_null()));
    let text: String = parsed.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "ack 2");
    assert_eq!(parsed[parsed.len() - 2]["choices"][0]["finish_reason"], "stop");
    // Without include_usage: no usage chunk and no usage key.
    let b =
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "[[tool:f_1]]"}]}).to_string();
    let ch = chunks(&c.send("/v1/chat/completions", OK, b.as_bytes()).body);
    let parsed: Vec<Value> = ch[..ch.len() - 1].iter().map(|c| serde_json::from_str(c).unwrap()).collect();
    assert!(parsed.iter().all(|c| c.get("usage").is_none() && c["choices"].as_array().unwrap().len() == 1));
    let tc = &parsed[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(tc["function"]["name"], "f_1");
    let args: String = parsed
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(args, "{\"n\":1}");
    assert_eq!(parsed.last().unwrap()["choices"][0]["finish_reason"], "tool_calls");
}

#[test]
fn status_faults_and_404_and_bad_json() {
    let up = FakeUpstream::start().unwrap();
    up.script(Fault::Status { status: 429, retry_after_secs: None }, 1);
    up.script(Fault::Status { status: 529, retry_after_secs: None }, 1);
    up.script(Fault::Pass, 1);
    up.script(Fault::Status { status: 500, retry_after_secs: Some(7) }, 1);
    let mut c = Conn::open(&up);
    let b = anthropic_body(false, "x");
    let r = c.send("/v1/messages", AK, &b);
    assert_eq!((r.status, r.header("retry-after")), (429, Some("1")));
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    let r = c.send("/v1/messages", AK, &b);
    assert_eq!((r.status, r.json()["error"]["type"].as_str()), (529, Some("overloaded_error")));
    assert_eq!(c.send("/v1/messages", AK, &b).status, 200);
    let r = c.send("/v1/chat/completions", OK, &openai_body(false, "x"));
    assert_eq!((r.status, r.header("retry-after")), (500, Some("7")));
    assert_eq!(r.json()["error"]["type"], "server_error");
    assert_eq!(c.send("/v1/messages", AK, &b).status, 200, "script consumed");
    let r = c.send("/v1/nope", OK, b"");
    assert_eq!((r.status, r.json()["error"]["type"].as_str()), (404, Some("invalid_request_error")));
    let r = c.send("/v1/nope", AK, b"");
    assert_eq!(r.json()["error"]["type"], "not_found_error");
    let r = c.send("/v1/messages", AK, b"{not json");
    assert_eq!((r.status, r.json()["error"]["type"].as_str()), (400, Some("invalid_request_error")));
    let rec = up.requests();
    assert_eq!(rec.len(), 8);
    assert_eq!(rec[0].fault, Some(Fault::Status { status: 429, retry_after_secs: None }));
    assert_eq!(rec[5].request.path, "/v1/nope");
    assert_eq!(rec[5].response.status, 404);
}

#[test]
fn disconnect_stall_stream_error_delay_hang() {
    let up = FakeUpstream::start().unwrap();
    up.script(Fault::Disconnect { after_events: 2 }, 1);
    let r = Conn::open(&up).send("/v1/messages", AK, &anthropic_body(true, "x"));
    assert!(!r.complete);
    assert_eq!(events(&r.body).len(), 2);
    up.script(Fault::Disconnect { after_events: 0 }, 1);
    let cut = Conn::open(&up).send("/v1/chat/completions", OK, &openai_body(false, "x"));
    assert!(!cut.complete && cut.status == 200 && !cut.body.is_empty(), "JSON body cut short");
    up.script(Fault::StreamError { after_events: 1 }, 1);
    let r = Conn::open(&up).send("/v1/messages", AK, &anthropic_body(true, "x"));
    let ev = events(&r.body);
    assert!(r.complete);
    assert_eq!(ev.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["message_start", "error"]);
    up.script(Fault::Delay { ms: 50 }, 1);
    assert_eq!(Conn::open(&up).send("/v1/messages", AK, &anthropic_body(false, "x")).status, 200);
    // Stall and hang: the client times out; the record says unfinished until it leaves.
    up.script(Fault::Stall { after_events: 1 }, 1);
    up.script(Fault::Hang, 1);
    for (path, body) in [("/v1/messages", anthropic_body(true, "x")), ("/v1/messages", anthropic_body(false, "x"))] {
        let mut c = Conn::open(&up);
        c.0.get_ref().set_read_timeout(Some(std::time::Duration::from_millis(300))).unwrap();
        let s = c.0.get_mut();
        let req = format!("POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n", body.len());
        s.write_all(req.as_bytes()).unwrap();
        s.write_all(&body).unwrap();
        let mut buf = Vec::new();
        let _ = c.0.read_to_end(&mut buf);
        let got = String::from_utf8_lossy(&buf);
        if path == "/v1/messages" && got.contains("event-stream") {
            assert!(got.contains("message_start") && !got.contains("content_block_start"));
        } else {
            assert!(buf.is_empty(), "hang sends nothing");
        }
    }
    let rec = up.requests();
    assert_eq!(rec.len(), 6);
    assert!(!rec[0].response.complete && rec[0].response.chunks.len() == 2);
    assert_eq!(rec[1].response.body(), cut.body);
    assert!(!rec[1].response.complete && rec[1].response.finished);
    assert!(rec[2].response.complete);
}

#[test]
fn control_endpoints_and_record_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.jsonl");
    let up = FakeUpstream::start_on("127.0.0.1:0".parse().unwrap(), Some(&path)).unwrap();
    let mut c = Conn::open(&up);
    let r = c.send("/_fake/script", &[], br#"[{"fault":{"kind":"status","status":429},"times":2}]"#);
    assert_eq!(r.json()["queued"], 2);
    assert_eq!(c.send("/_fake/script", &[], br#"{"fault":{"kind":"bogus"}}"#).status, 400);
    assert_eq!(c.send("/v1/messages", AK, &anthropic_body(false, "x")).status, 429);
    let sent = c.send("/v1/messages", AK, &anthropic_body(true, "x"));
    assert_eq!(sent.status, 429);
    let ok = c.send("/v1/messages", AK, &anthropic_body(true, "x"));
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3);
    let body: String = lines[2]["response"]["chunks"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert_eq!(body.as_bytes(), &ok.body[..]);
    assert!(lines[2]["request"]["headers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h[0] == "x-api-key" && h[1] == "sk-ant-secret"));
    // GET /_fake/requests: same JSONL.
    let s = c.0.get_mut();
    s.write_all(b"GET /_fake/requests HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let r = c.read();
    assert_eq!(std::str::from_utf8(&r.body).unwrap(), text);
}

#[test]
fn in_flight_on_arrival_counts_unfinished_exchanges() {
    let up = FakeUpstream::start().unwrap();
    assert_eq!(Conn::open(&up).send("/v1/messages", AK, &anthropic_body(false, "x")).status, 200);
    // A stalled stream stays unfinished while its client holds the connection.
    up.script(Fault::Stall { after_events: 1 }, 1);
    let mut stalled = Conn::open(&up);
    let body = anthropic_body(true, "x");
    let req =
        format!("POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\ncontent-length: {}\r\n\r\n", body.len());
    stalled.0.get_mut().write_all(req.as_bytes()).unwrap();
    stalled.0.get_mut().write_all(&body).unwrap();
    assert_eq!(stalled.line().unwrap().split(' ').nth(1), Some("200"), "the stall sent its headers");
    assert_eq!(Conn::open(&up).send("/v1/messages", AK, &anthropic_body(false, "x")).status, 200);
    let rec = up.requests();
    assert_eq!(rec.iter().map(|x| x.in_flight_on_arrival).collect::<Vec<_>>(), [0, 0, 1]);
    assert!(!rec[1].response.finished);
    drop(stalled);
}

#[test]
fn hold_waits_for_release() {
    let up = FakeUpstream::start().unwrap();
    up.script(Fault::Hold, 1);
    let mut held = Conn::open(&up);
    held.0.get_ref().set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let body = anthropic_body(false, "x");
    let req =
        format!("POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\ncontent-length: {}\r\n\r\n", body.len());
    held.0.get_mut().write_all(req.as_bytes()).unwrap();
    held.0.get_mut().write_all(&body).unwrap();
    wait_for(&up, 1);
    // Another request is not held, and the held one has sent nothing.
    assert_eq!(Conn::open(&up).send("/v1/messages", AK, &anthropic_body(false, "x")).status, 200);
    let rec = up.requests();
    assert_eq!(rec[0].response.status, 0, "the held request answered");
    assert_eq!(rec[0].fault, Some(Fault::Hold));
    // Released through the control endpoint (as non-Rust tests do).
    assert_eq!(Conn::open(&up).send("/_fake/release", &[], b"").status, 200);
    let r = held.read();
    assert_eq!(r.status, 200);
    assert!(r.complete && r.json()["content"][0]["text"].as_str().unwrap().starts_with("ack "));
    assert!(up.requests()[0].response.complete);
    // `release` on the handle frees a hold scripted later too, once it is waiting.
    up.script(Fault::Hold, 1);
    let addr = up.addr();
    let t = std::thread::spawn(move || {
        let mut c = Conn(BufReader::new(TcpStream::connect(addr).unwrap()));
        c.send("/v1/messages", AK, &anthropic_body(false, "x")).status
    });
    wait_for(&up, 3);
    up.release();
    assert_eq!(t.join().unwrap(), 200);
}

/// Waits (bounded) until the fake has recorded `n` exchanges.
fn wait_for(up: &FakeUpstream, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while up.requests().len() < n {
        assert!(std::time::Instant::now() < deadline, "never got {n} requests");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Sends `body` and reads the head and the chunked body up to the chunk containing `last`;
/// returns the connection there (the body not yet ended) and the bytes read.
fn until_final_event(
    up: &FakeUpstream,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    last: &str,
) -> (Conn, Vec<u8>) {
    let mut c = Conn::open(up);
    let mut req = format!("POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    c.0.get_mut().write_all(req.as_bytes()).unwrap();
    c.0.get_mut().write_all(body).unwrap();
    assert_eq!(c.line().unwrap().split(' ').nth(1), Some("200"));
    let mut chunked = false;
    while let Some(l) = c.line() {
        if l.is_empty() {
            break;
        }
        assert!(!l.to_lowercase().starts_with("content-length"), "a late end needs a chunked body: {l}");
        chunked |= l.eq_ignore_ascii_case("transfer-encoding: chunked");
    }
    assert!(chunked);
    let mut got = Vec::new();
    for _ in 0..1000 {
        let size = usize::from_str_radix(&c.line().unwrap(), 16).unwrap();
        assert!(size > 0, "the body ended before its final event");
        let mut buf = vec![0; size + 2];
        c.0.read_exact(&mut buf).unwrap();
        got.extend_from_slice(&buf[..size]);
        if String::from_utf8_lossy(&got).contains(last) {
            return (c, got);
        }
    }
    panic!("no {last} in {}", String::from_utf8_lossy(&got));
}

/// After the final event the body stays open (a read times out), then ends as scripted.
fn body_stays_open_then(mut c: Conn) -> Option<String> {
    c.0.get_ref().set_read_timeout(Some(std::time::Duration::from_millis(150))).unwrap();
    let mut l = String::new();
    let e = c.0.read_line(&mut l).expect_err("the body ended right after its final event");
    assert!(matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut), "{e}");
    assert!(l.is_empty());
    c.0.get_ref().set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    c.line()
}

#[test]
fn late_end_keeps_the_body_open_after_the_final_event() {
    let up = FakeUpstream::start().unwrap();
    // Through the control endpoint, in the JSON the durability harness sends.
    let mut ctl = Conn::open(&up);
    let r = ctl.send(
        "/_fake/script",
        &[],
        br#"[{"fault":{"kind":"late_end","ms":1000}},{"fault":{"kind":"late_end","ms":1000,"then":"abort"}},{"fault":{"kind":"late_end","ms":1000}}]"#,
    );
    assert_eq!(r.json()["queued"], 3, "{}", String::from_utf8_lossy(&r.body));
    // Anthropic stream: every event, message_stop included, then the end a second later.
    let (c, got) = until_final_event(&up, "/v1/messages", AK, &anthropic_body(true, "x"), "message_stop");
    assert!(String::from_utf8_lossy(&got).ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    assert_eq!(body_stays_open_then(c).as_deref(), Some("0"), "then the last chunk");
    // OpenAI stream, then aborted: [DONE] was sent, the connection is dropped without the last chunk.
    let (c, got) = until_final_event(&up, "/v1/chat/completions", OK, &openai_body(true, "x"), "[DONE]");
    assert!(String::from_utf8_lossy(&got).ends_with("data: [DONE]\n\n"));
    assert_eq!(body_stays_open_then(c), None, "the connection is dropped");
    // A JSON body: whole, chunked, ended late.
    let (c, got) = until_final_event(&up, "/v1/messages", AK, &anthropic_body(false, "x"), "\"usage\"");
    let v: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(v["type"], "message");
    assert_eq!(body_stays_open_then(c).as_deref(), Some("0"));
    let rec = up.requests();
    assert_eq!(rec.len(), 3);
    assert_eq!(rec[0].fault, Some(Fault::LateEnd { ms: 1000, then: ctxlog_fake_upstream::LateEnd::Finish }));
    assert!(rec[0].response.complete && rec[0].response.finished);
    assert!(!rec[1].response.complete && rec[1].response.finished, "aborted: not complete");
    assert!(String::from_utf8_lossy(&rec[1].response.body()).ends_with("data: [DONE]\n\n"), "every byte recorded");
    assert!(rec[2].response.complete);
}
