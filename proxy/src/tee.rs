//! The upstream response on its way back: every frame goes to the client as it arrives, while
//! a copy is scanned for the call's usage. When the body ends (or fails, or the client goes
//! away, or the upstream goes quiet too long) the outcome is sent to the task that commits or
//! aborts the call.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use ctxlog::Usage;
use http_body::{Body as HttpBody, Frame};
use hyper::body::Incoming;
use memchr::memmem;
use tokio::sync::oneshot;
use tokio::time::{sleep, Instant, Sleep};

use crate::reply::BoxError;

/// How a forwarded call ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The whole answer reached the client; usage if the answer carried it.
    Complete(Option<Usage>),
    /// The answer did not complete (the reason, for the log line).
    Failed(String),
}

/// Scans an answer for usage: SSE events as they arrive, or a JSON body at its end.
pub(crate) struct Scan {
    anthropic: bool,
    sse: bool,
    buf: Vec<u8>,
    usage: Option<Usage>,
    terminal: bool,
    error: Option<String>,
}

/// The largest JSON answer kept to read usage from (past it, the call commits without usage).
const MAX_JSON: usize = 64 * 1024 * 1024;

impl Scan {
    pub fn new(anthropic: bool, sse: bool) -> Self {
        Scan { anthropic, sse, buf: Vec::new(), usage: None, terminal: false, error: None }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        if !self.sse {
            if self.buf.len() + chunk.len() <= MAX_JSON {
                self.buf.extend_from_slice(chunk);
            }
            return;
        }
        self.buf.extend_from_slice(chunk);
        let mut start = 0;
        while let Some(nl) = memchr::memchr(b'\n', &self.buf[start..]) {
            let end = start + nl;
            let line = self.buf[start..end].to_vec();
            self.line(&line);
            start = end + 1;
        }
        self.buf.drain(..start);
    }

    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else { return };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        if !self.anthropic {
            if data == b"[DONE]" {
                self.terminal = true;
            } else if memmem::find(data, b"\"usage\"").is_some() {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
                    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                        self.usage = Usage::from_openai_chat(u).ok().or(self.usage);
                    }
                }
            }
            return;
        }
        // Text deltas are most of a stream: only events that can matter are parsed.
        let relevant =
            ["\"usage\"", "message_stop", "\"error\""].iter().any(|k| memmem::find(data, k.as_bytes()).is_some());
        if !relevant {
            return;
        }
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else { return };
        match v.get("type").and_then(|t| t.as_str()) {
            Some("message_start") => {
                if let Some(u) = v.get("message").and_then(|m| m.get("usage")) {
                    self.usage = Usage::from_anthropic(u).ok();
                }
            }
            Some("message_delta") => {
                if let Some(u) = v.get("usage") {
                    let mut usage = self.usage.unwrap_or_default();
                    if usage.update_from_anthropic(u).is_ok() {
                        self.usage = Some(usage);
                    }
                }
            }
            Some("message_stop") => self.terminal = true,
            Some("error") => self.error = Some(v.get("error").map(|e| e.to_string()).unwrap_or_default()),
            _ => {}
        }
    }

    /// The outcome of an answer that ended normally.
    pub fn finish(&mut self) -> Outcome {
        if self.sse {
            if let Some(e) = self.error.take() {
                return Outcome::Failed(format!("the stream carried an error event: {e}"));
            }
            if !self.terminal {
                return Outcome::Failed("the stream ended before its last event".into());
            }
            return Outcome::Complete(self.usage);
        }
        let usage = serde_json::from_slice::<serde_json::Value>(&self.buf).ok().and_then(|v| {
            let u = v.get("usage")?;
            if self.anthropic {
                Usage::from_anthropic(u).ok()
            } else {
                Usage::from_openai_chat(u).ok()
            }
        });
        Outcome::Complete(usage)
    }
}

/// The upstream body, passed through frame by frame and scanned on the side.
pub(crate) struct Tee {
    inner: Incoming,
    scan: Scan,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
    done: Option<oneshot::Sender<Outcome>>,
    /// An upstream body error held back for one poll: returning it at once makes hyper drop
    /// the connection with frames still in its write buffer, so the client would get less
    /// than the upstream sent. `Pending` first lets hyper flush them.
    err: Option<BoxError>,
}

impl Tee {
    pub fn new(inner: Incoming, scan: Scan, idle: Duration, done: oneshot::Sender<Outcome>) -> Self {
        Tee { inner, scan, idle, timer: Box::pin(sleep(idle)), done: Some(done), err: None }
    }

    fn finish(&mut self, outcome: Outcome) {
        if let Some(tx) = self.done.take() {
            let _ = tx.send(outcome);
        }
    }
}

impl HttpBody for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(e) = this.err.take() {
            return Poll::Ready(Some(Err(e)));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.scan.feed(data);
                }
                let deadline = Instant::now() + this.idle;
                this.timer.as_mut().reset(deadline);
                if this.inner.is_end_stream() {
                    let outcome = this.scan.finish();
                    this.finish(outcome);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.finish(Outcome::Failed(format!("upstream body: {e}")));
                this.err = Some(e.into());
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Ready(None) => {
                let outcome = this.scan.finish();
                this.finish(outcome);
                Poll::Ready(None)
            }
            Poll::Pending => {
                if this.timer.as_mut().poll(cx).is_ready() {
                    this.finish(Outcome::Failed("upstream went quiet past the timeout".into()));
                    return Poll::Ready(Some(Err("upstream went quiet past the timeout".into())));
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        self.finish(Outcome::Failed("the client went away before the answer ended".into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(anthropic: bool, sse: bool, chunks: &[&str]) -> Outcome {
        let mut s = Scan::new(anthropic, sse);
        for c in chunks {
            s.feed(c.as_bytes());
        }
        s.finish()
    }

    #[test]
    fn anthropic_stream_usage_from_start_and_delta_split_anywhere() {
        let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":7,\"output_tokens\":1}}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":42}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        for cut in [1, 7, 50, 200, stream.len() - 1] {
            let (a, b) = stream.split_at(cut);
            let Outcome::Complete(Some(u)) = run(true, true, &[a, b]) else { panic!("cut {cut}") };
            assert_eq!(u, Usage { input: 5, cache_read: 100, cache_write: 7, output: 42 });
        }
        let (head, _) = stream.split_at(stream.find("event: message_stop").unwrap());
        assert!(matches!(run(true, true, &[head]), Outcome::Failed(_)), "a stream cut before message_stop completed");
        let err = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n";
        assert!(matches!(run(true, true, &[err]), Outcome::Failed(_)));
    }

    #[test]
    fn openai_stream_usage_from_final_chunk() {
        let s = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":null}\r\n\r\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":90,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":80}}}\r\n\r\ndata: [DONE]\r\n\r\n";
        let Outcome::Complete(Some(u)) = run(false, true, &[s]) else { panic!() };
        assert_eq!(u, Usage { input: 10, cache_read: 80, cache_write: 0, output: 3 });
        assert!(matches!(run(false, true, &[&s[..s.len() - 20]]), Outcome::Failed(_)));
    }

    #[test]
    fn json_bodies() {
        let Outcome::Complete(Some(u)) =
            run(true, false, &["{\"usage\":{\"input_tokens\":", "3,\"output_tokens\":4}}"])
        else {
            panic!()
        };
        assert_eq!(u.prompt_total(), 3);
        assert!(matches!(run(false, false, &["{}"]), Outcome::Complete(None)));
    }
}
