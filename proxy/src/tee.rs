//! The upstream stream on its way back: every SSE event goes to the client as it arrives,
//! while a copy is scanned for the call's usage. The protocol's final event (`message_stop`,
//! `data: [DONE]`, Responses' `response.completed`) is held back: the call is complete when it arrives, whenever the upstream's
//! body ends, so the outcome goes to the task that commits, and the final event reaches the
//! client only once the commit is durable. If it cannot be, the client gets an error event in
//! its place: no client holds an answer the log lacks.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ctxlog::{Usage, WireFormat};
use http_body::{Body as HttpBody, Frame};
use hyper::body::Incoming;
use memchr::memmem;
use tokio::sync::oneshot;
use tokio::time::{sleep, Instant, Sleep};

use crate::answer::Answer;
use crate::reply::{BoxError, Shape};

/// How a forwarded call ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The answer is whole: its usage if it carried any, and its assistant message.
    Complete(Option<Usage>, Option<String>),
    /// The answer did not complete (the reason, for the log line).
    Failed(Incomplete),
}

/// Why an upstream answer did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Incomplete {
    #[error("the stream carried an error event: {0}")]
    ErrorEvent(String),
    #[error("the stream ended before its last event")]
    NoFinalEvent,
    #[error("the answer is not a whole JSON document")]
    NotJson,
    #[error("upstream body: {0}")]
    Upstream(String),
    #[error("upstream went quiet past the timeout")]
    Quiet,
    #[error("the client went away before the answer ended")]
    ClientGone,
    #[error("the answer was dropped")]
    Dropped,
}

/// Why the log does not hold a call's answer: the client gets it in place of the answer's end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotRecorded {
    #[error(transparent)]
    Incomplete(#[from] Incomplete),
    /// The commit failed (the store's or the engine's error).
    #[error("{0}")]
    Commit(String),
    #[error("the commit task ended")]
    CommitGone,
}

/// Scans a stream's events for usage, errors and the final event.
pub(crate) struct Scan {
    anthropic: bool,
    responses: bool,
    answer: Answer,
    usage: Option<Usage>,
    terminal: bool,
    error: Option<String>,
    /// Responses: the answer (`{"id","output"}`) of the final event's response.
    response: Option<String>,
    /// Gemini: the chunks' parts so far (`None` for the other formats).
    gemini: Option<crate::gemini::Chunks>,
}

impl Scan {
    pub fn new(format: WireFormat) -> Self {
        Scan {
            anthropic: format == WireFormat::Anthropic,
            responses: format == WireFormat::OpenAiResponses,
            answer: Answer::default(),
            usage: None,
            terminal: false,
            error: None,
            response: None,
            gemini: (format == WireFormat::Gemini).then(Default::default),
        }
    }

    /// Scans one whole event (its lines through the blank line); true when it is the
    /// protocol's final event.
    pub fn event(&mut self, event: &[u8]) -> bool {
        for line in event.split(|b| *b == b'\n') {
            self.line(line);
        }
        self.terminal
    }

    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else { return };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        if !self.anthropic && data == b"[DONE]" {
            self.terminal = true;
            return;
        }
        // Every event is parsed: its deltas make the answer the call records.
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else { return };
        if let Some(chunks) = &mut self.gemini {
            // Every chunk carries the counts so far; the final one (`finishReason`) the call's.
            if let Some(u) = v.get("usageMetadata").and_then(|u| Usage::from_gemini(u).ok()) {
                self.usage = Some(u);
            }
            if let Some(e) = v.get("error") {
                self.error = Some(e.to_string());
            }
            if chunks.take(&v) {
                self.terminal = true;
            }
            return;
        }
        if self.responses {
            // The final event carries the whole response: its output is the answer.
            match v.get("type").and_then(|t| t.as_str()) {
                Some("response.completed" | "response.incomplete") => {
                    self.terminal = true;
                    if let Some(r) = v.get("response") {
                        self.usage = r.get("usage").and_then(|u| Usage::from_openai_responses(u).ok());
                        self.response = crate::answer::of_response(r);
                    }
                }
                Some("response.failed") => {
                    self.terminal = true;
                    let e = v.pointer("/response/error").map(|e| e.to_string()).unwrap_or_default();
                    self.error = Some(e);
                }
                Some("error") => self.error = Some(v.to_string()),
                _ => {}
            }
            return;
        }
        if !self.anthropic {
            if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                self.usage = Usage::from_openai_chat(u).ok().or(self.usage);
            }
            if let Some(e) = v.get("error") {
                self.error = Some(e.to_string());
            }
            self.answer.openai(&v);
            return;
        }
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
            _ => self.answer.anthropic(&v),
        }
    }

    /// The outcome once the final event arrived (or the body ended).
    pub fn finish(&mut self) -> Outcome {
        if let Some(e) = self.error.take() {
            return Outcome::Failed(Incomplete::ErrorEvent(e));
        }
        if !self.terminal {
            return Outcome::Failed(Incomplete::NoFinalEvent);
        }
        if self.responses {
            return Outcome::Complete(self.usage, self.response.take());
        }
        if let Some(chunks) = self.gemini.take() {
            return Outcome::Complete(self.usage, chunks.finish());
        }
        Outcome::Complete(self.usage, std::mem::take(&mut self.answer).finish(self.anthropic))
    }
}

/// The outcome of a whole JSON answer: complete when it parses, with its usage if any.
pub(crate) fn json_outcome(format: WireFormat, body: &[u8]) -> Outcome {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Outcome::Failed(Incomplete::NotJson);
    };
    if format == WireFormat::Gemini {
        let usage = v.get("usageMetadata").and_then(|u| Usage::from_gemini(u).ok());
        return Outcome::Complete(usage, crate::gemini::answer_of(&v));
    }
    let usage = v.get("usage").and_then(|u| match format {
        WireFormat::Anthropic => Usage::from_anthropic(u).ok(),
        WireFormat::OpenAi => Usage::from_openai_chat(u).ok(),
        WireFormat::OpenAiResponses => Usage::from_openai_responses(u).ok(),
        WireFormat::Gemini => None,
    });
    if format == WireFormat::OpenAiResponses {
        return Outcome::Complete(usage, crate::answer::of_response(&v));
    }
    Outcome::Complete(usage, crate::answer::of_json(format == WireFormat::Anthropic, &v))
}

/// What the client-facing body is doing.
enum Phase {
    /// Passing events through.
    Streaming,
    /// The final event is held until the commit's result arrives.
    Committing(Bytes),
    /// Nothing more to send.
    Done,
}

/// The upstream SSE body, passed through event by event and scanned on the side.
pub(crate) struct Tee {
    inner: Incoming,
    scan: Scan,
    shape: Shape,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
    done: Option<oneshot::Sender<Outcome>>,
    committed: oneshot::Receiver<Result<(), NotRecorded>>,
    /// Bytes received but not passed on: the start of an event whose end has not arrived.
    pending: BytesMut,
    phase: Phase,
    /// Drop the OpenAI usage chunk (`choices: []`): ctxlog asked for it, the client did not.
    strip_usage: bool,
    /// Set `context_management` on the `message_delta` event (ctxlog applied the client's).
    context_management: Option<serde_json::Value>,
    /// An upstream body error held back for one poll: returning it at once makes hyper drop
    /// the connection with frames still in its write buffer, so the client would get less
    /// than the upstream sent. `Pending` first lets hyper flush them.
    err: Option<BoxError>,
}

impl Tee {
    pub fn new(
        inner: Incoming,
        scan: Scan,
        shape: Shape,
        idle: Duration,
        done: oneshot::Sender<Outcome>,
        committed: oneshot::Receiver<Result<(), NotRecorded>>,
    ) -> Self {
        Tee {
            inner,
            scan,
            shape,
            idle,
            timer: Box::pin(sleep(idle)),
            done: Some(done),
            committed,
            pending: BytesMut::new(),
            phase: Phase::Streaming,
            strip_usage: false,
            context_management: None,
            err: None,
        }
    }

    /// Keeps the stream's usage chunk from the client (it is still scanned).
    pub fn without_usage_chunk(mut self) -> Self {
        self.strip_usage = true;
        self
    }

    /// Sets the answer's `context_management` (the edits ctxlog applied) on its `message_delta`.
    pub fn with_context_management(mut self, cm: serde_json::Value) -> Self {
        self.context_management = Some(cm);
        self
    }

    fn finish(&mut self, outcome: Outcome) {
        if let Some(tx) = self.done.take() {
            let _ = tx.send(outcome);
        }
    }

    /// Takes the whole events at the front of `pending`, scanning each; stops before the final
    /// event, which it moves to the commit phase. Returns the bytes to pass on now.
    fn take_events(&mut self) -> Option<Bytes> {
        let mut at = 0;
        let mut out = BytesMut::new();
        while let Some(end) = event_end(&self.pending[at..]) {
            let event = &self.pending[at..at + end];
            if self.scan.event(event) {
                out.extend_from_slice(&self.pending[..at]);
                let held = self.pending.split_off(at).freeze();
                self.pending.clear();
                let outcome = self.scan.finish();
                self.finish(outcome);
                self.phase = Phase::Committing(held);
                return (!out.is_empty()).then(|| out.freeze());
            }
            if let Some(patched) =
                self.context_management.as_ref().and_then(|cm| crate::context_management::into_delta_event(event, cm))
            {
                // Everything before it goes on, then the event with the applied edits.
                out.extend_from_slice(&self.pending[..at]);
                out.extend_from_slice(&patched);
                let _ = self.pending.split_to(at + end);
                at = 0;
                continue;
            }
            if self.strip_usage && is_usage_chunk(event) {
                // Everything before it goes on; the chunk itself does not.
                out.extend_from_slice(&self.pending[..at]);
                let _ = self.pending.split_to(at + end);
                at = 0;
                continue;
            }
            at += end;
        }
        if out.is_empty() {
            // The common case: the whole events go on as they came, without a copy.
            return (at > 0).then(|| self.pending.split_to(at).freeze());
        }
        out.extend_from_slice(&self.pending.split_to(at));
        Some(out.freeze())
    }
}

/// An OpenAI chunk that carries only the usage (`"choices":[]`), as `include_usage` adds.
fn is_usage_chunk(event: &[u8]) -> bool {
    memmem::find(event, b"\"usage\"").is_some()
        && event.split(|b| *b == b'\n').any(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(data) = line.strip_prefix(b"data:") else { return false };
            serde_json::from_slice::<serde_json::Value>(data.trim_ascii_start()).is_ok_and(|v| {
                v.get("choices").and_then(|c| c.as_array()).is_some_and(|c| c.is_empty())
                    && v.get("usage").is_some_and(|u| u.is_object())
            })
        })
}

/// The length of the first whole SSE event in `buf` (through its blank line), if any.
fn event_end(buf: &[u8]) -> Option<usize> {
    let lf = memmem::find(buf, b"\n\n").map(|i| i + 2);
    let crlf = memmem::find(buf, b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl HttpBody for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(e) = this.err.take() {
            this.phase = Phase::Done;
            return Poll::Ready(Some(Err(e)));
        }
        loop {
            match &mut this.phase {
                Phase::Done => return Poll::Ready(None),
                Phase::Committing(held) => {
                    let result = match Pin::new(&mut this.committed).poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(r) => r.unwrap_or(Err(NotRecorded::CommitGone)),
                    };
                    let held = std::mem::take(held);
                    this.phase = Phase::Done;
                    let last = match result {
                        Ok(()) => held,
                        Err(why) => {
                            crate::reply::stream_error(this.shape, &format!("ctxlog: the call was not recorded: {why}"))
                        }
                    };
                    return Poll::Ready(Some(Ok(Frame::data(last))));
                }
                Phase::Streaming => {}
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let deadline = Instant::now() + this.idle;
                    this.timer.as_mut().reset(deadline);
                    let data = match frame.into_data() {
                        Ok(d) => d,
                        Err(frame) => return Poll::Ready(Some(Ok(frame))),
                    };
                    this.pending.extend_from_slice(&data);
                    if let Some(ready) = this.take_events() {
                        return Poll::Ready(Some(Ok(Frame::data(ready))));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    this.finish(Outcome::Failed(Incomplete::Upstream(e.to_string())));
                    this.err = Some(e.into());
                    cx.waker().wake_by_ref();
                    let rest = std::mem::take(&mut this.pending).freeze();
                    if rest.is_empty() {
                        return Poll::Pending;
                    }
                    return Poll::Ready(Some(Ok(Frame::data(rest))));
                }
                Poll::Ready(None) => {
                    // The body ended without the final event: what arrived goes on as it is.
                    let outcome = this.scan.finish();
                    let outcome = match outcome {
                        Outcome::Complete(..) => Outcome::Failed(Incomplete::NoFinalEvent),
                        failed => failed,
                    };
                    this.finish(outcome);
                    this.phase = Phase::Done;
                    let rest = std::mem::take(&mut this.pending).freeze();
                    if rest.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(rest))));
                }
                Poll::Pending => {
                    if this.timer.as_mut().poll(cx).is_ready() {
                        this.finish(Outcome::Failed(Incomplete::Quiet));
                        this.phase = Phase::Done;
                        return Poll::Ready(Some(Err("upstream went quiet past the timeout".into())));
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        self.finish(Outcome::Failed(Incomplete::ClientGone));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits the chunks into events as the tee does and scans them up to the final one.
    fn format(anthropic: bool) -> WireFormat {
        if anthropic {
            WireFormat::Anthropic
        } else {
            WireFormat::OpenAi
        }
    }

    fn run(anthropic: bool, chunks: &[&str]) -> Outcome {
        run_in(format(anthropic), chunks)
    }

    fn run_in(f: WireFormat, chunks: &[&str]) -> Outcome {
        let mut s = Scan::new(f);
        let mut buf: Vec<u8> = Vec::new();
        for c in chunks {
            buf.extend_from_slice(c.as_bytes());
            while let Some(end) = event_end(&buf) {
                let ev: Vec<u8> = buf.drain(..end).collect();
                if s.event(&ev) {
                    return s.finish();
                }
            }
        }
        s.finish()
    }

    fn json(anthropic: bool, chunks: &[&str]) -> Outcome {
        json_outcome(format(anthropic), chunks.concat().as_bytes())
    }

    #[test]
    fn anthropic_stream_usage_from_start_and_delta_split_anywhere() {
        let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":7,\"output_tokens\":1}}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":42}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        for cut in [1, 7, 50, 200, stream.len() - 1] {
            let (a, b) = stream.split_at(cut);
            let Outcome::Complete(Some(u), _) = run(true, &[a, b]) else { panic!("cut {cut}") };
            assert_eq!(u, Usage { input: 5, cache_read: 100, cache_write: 7, output: 42 });
        }
        let (head, _) = stream.split_at(stream.find("event: message_stop").unwrap());
        assert!(matches!(run(true, &[head]), Outcome::Failed(_)), "a stream cut before message_stop completed");
        let err = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n";
        assert!(matches!(run(true, &[err]), Outcome::Failed(_)));
    }

    #[test]
    fn openai_stream_usage_from_final_chunk() {
        let s = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":null}\r\n\r\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":90,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":80}}}\r\n\r\ndata: [DONE]\r\n\r\n";
        let Outcome::Complete(Some(u), _) = run(false, &[s]) else { panic!() };
        assert_eq!(u, Usage { input: 10, cache_read: 80, cache_write: 0, output: 3 });
        assert!(matches!(run(false, &[&s[..s.len() - 20]]), Outcome::Failed(_)));
    }

    #[test]
    fn responses_stream_completes_at_response_completed_with_its_usage_and_output() {
        let done = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"output\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"hi\"}]}],\"usage\":{\"input_tokens\":90,\"input_tokens_details\":{\"cached_tokens\":80},\"output_tokens\":3}}}\n\n";
        let s = format!("event: response.created\ndata: {{\"type\":\"response.created\",\"response\":{{}}}}\n\nevent: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}}\n\n{done}");
        let Outcome::Complete(Some(u), Some(answer)) = run_in(WireFormat::OpenAiResponses, &[&s]) else { panic!() };
        assert_eq!(u, Usage { input: 10, cache_read: 80, cache_write: 0, output: 3 });
        assert!(answer.contains("resp_1") && answer.contains("output_text"), "{answer}");
        // Cut before the final event, or an error event: not complete.
        let cut = &s[..s.find("event: response.completed").unwrap()];
        assert!(matches!(run_in(WireFormat::OpenAiResponses, &[cut]), Outcome::Failed(_)));
        let err = "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\"}\n\n";
        assert!(matches!(run_in(WireFormat::OpenAiResponses, &[err, done]), Outcome::Failed(_)));
    }

    #[test]
    fn json_bodies() {
        let Outcome::Complete(Some(u), _) = json(true, &["{\"usage\":{\"input_tokens\":", "3,\"output_tokens\":4}}"])
        else {
            panic!()
        };
        assert_eq!(u.prompt_total(), 3);
        assert!(matches!(json(false, &["{}"]), Outcome::Complete(None, _)));
        assert!(matches!(json(false, &["{\"usage\":"]), Outcome::Failed(_)), "a cut JSON body completed");
    }
}
