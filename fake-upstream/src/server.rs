//! The HTTP/1.1 server: routing, control endpoints, and the body that plays a fault.

use crate::cache::Caches;
use crate::faults::{Fault, ScriptEntry};
use crate::record::{Exchange, RecordedRequest, RecordedResponse};
use crate::reply::{self, Reply, Tokens};
use crate::strict::{Rejection, Strictness};
use crate::{anthropic, openai, responses};
use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Request, Response};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future as _;
use std::io::Write as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

/// State shared by the connections and the handle.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) exchanges: Mutex<Vec<Exchange>>,
    pub(crate) script: Mutex<VecDeque<Fault>>,
    /// The providers' prompt caches.
    pub(crate) caches: Mutex<Caches>,
    /// The rules in force.
    pub(crate) strict: Mutex<Strictness>,
    /// Added to the clock the caches' TTLs are measured on (`POST /_fake/config`).
    pub(crate) clock_offset: Mutex<Duration>,
    pub(crate) record: Option<Mutex<std::fs::File>>,
    /// Never reset, so that a tracker outliving `reset` cannot touch a newer exchange.
    pub(crate) next_seq: std::sync::atomic::AtomicU64,
    /// Bumped by `release`: frees every [`Fault::Hold`] waiting at that moment.
    pub(crate) release: tokio::sync::watch::Sender<u64>,
    /// Responses kept for `previous_response_id` (those not sent with `store: false`).
    pub(crate) stored: Mutex<responses::Stored>,
}

/// A poisoned lock only means another handler panicked; the data is still usable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(crate) fn push_script(&self, entries: impl IntoIterator<Item = ScriptEntry>) {
        let mut q = lock(&self.script);
        for e in entries {
            q.extend(std::iter::repeat_n(e.fault, e.times));
        }
    }
}

/// Keeps one exchange's record up to date; finishes it when dropped (client gone, runtime down).
struct Tracker {
    shared: Arc<Shared>,
    seq: u64,
    done: bool,
}

impl Tracker {
    fn with(&self, f: impl FnOnce(&mut Exchange)) {
        // Newest first: the exchange being served is almost always near the end.
        if let Some(x) = lock(&self.shared.exchanges).iter_mut().rev().find(|x| x.seq == self.seq) {
            f(x);
        }
    }

    fn finish(&mut self, complete: bool) {
        if self.done {
            return;
        }
        self.done = true;
        let mut line = None;
        self.with(|x| {
            x.response.complete = complete;
            x.response.finished = true;
            line = Some(x.to_json_line());
        });
        if let (Some(file), Some(line)) = (&self.shared.record, line) {
            // Best effort: a failing record file must not change what the client sees.
            let _ = writeln!(lock(file), "{line}");
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.finish(false);
    }
}

/// How a body ends after its chunks.
enum End {
    Finish,
    Abort,
    Stall,
    /// Wait `ms` after the last chunk (the timer starts when it was handed over), then end
    /// cleanly or (`abort`) drop the connection.
    Late {
        ms: u64,
        abort: bool,
        timer: Option<Pin<Box<tokio::time::Sleep>>>,
    },
}

/// The error that makes hyper drop the connection mid-body.
#[derive(Debug, thiserror::Error)]
#[error("scripted disconnect")]
pub struct Disconnected;

/// A body that hands over its chunks one by one, recording each, then ends as scripted.
pub struct FakeBody {
    chunks: VecDeque<Bytes>,
    end: End,
    exact: Option<u64>,
    tracker: Option<Tracker>,
    flushed: bool,
}

impl FakeBody {
    fn full(b: Bytes) -> Self {
        let exact = Some(b.len() as u64);
        FakeBody { chunks: VecDeque::from([b]), end: End::Finish, exact, tracker: None, flushed: false }
    }
}

impl Body for FakeBody {
    type Data = Bytes;
    type Error = Disconnected;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Disconnected>>> {
        if let Some(c) = self.chunks.pop_front() {
            if let Some(t) = &self.tracker {
                t.with(|x| x.response.chunks.push(c.to_vec()));
            }
            // With a content-length hyper may not poll again after the last byte.
            if self.chunks.is_empty() && matches!(self.end, End::Finish) {
                if let Some(t) = self.tracker.as_mut() {
                    t.finish(true);
                }
            }
            return Poll::Ready(Some(Ok(Frame::data(c))));
        }
        match self.end {
            End::Finish => {
                if let Some(t) = self.tracker.as_mut() {
                    t.finish(true);
                }
                Poll::Ready(None)
            }
            // Pending once first, so that hyper flushes the chunks already handed over;
            // an error right away would drop them with the connection.
            End::Abort if !self.flushed => {
                self.flushed = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            End::Abort => Poll::Ready(Some(Err(Disconnected))),
            End::Late { .. } => {
                let this = &mut *self;
                let End::Late { ms, abort, timer } = &mut this.end else { return Poll::Ready(None) };
                // Pending until the timer fires: hyper flushes what it was handed meanwhile.
                let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(*ms))));
                if t.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                let abort = *abort;
                if let Some(tr) = this.tracker.as_mut() {
                    tr.finish(!abort);
                }
                if abort {
                    Poll::Ready(Some(Err(Disconnected)))
                } else {
                    Poll::Ready(None)
                }
            }
            // Never woken: the connection stays open until the client or shutdown drops it.
            End::Stall => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty() && matches!(self.end, End::Finish) && self.tracker.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.exact {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Anthropic,
    OpenAi,
    Responses,
    Gemini,
}

fn json_response(status: u16, body: Bytes) -> Response<FakeBody> {
    let mut r = Response::new(FakeBody::full(body));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
    r
}

/// The service: control endpoints under `/_fake/`, the two model endpoints, 404 otherwise.
pub(crate) async fn handle(req: Request<Incoming>, shared: Arc<Shared>) -> Result<Response<FakeBody>, Infallible> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(json_response(400, Bytes::from(format!("{{\"error\":\"reading the body: {e}\"}}")))),
    };
    if path.starts_with("/_fake/") {
        return Ok(control(parts.method.as_str(), &path, &body, &shared));
    }
    let headers: Vec<(String, Vec<u8>)> =
        parts.headers.iter().map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec())).collect();
    let request =
        RecordedRequest { method: parts.method.as_str().to_owned(), path: path.clone(), headers, body: body.to_vec() };
    let api = match path.split('?').next() {
        Some("/v1/messages") => Some(Api::Anthropic),
        Some("/v1/chat/completions") => Some(Api::OpenAi),
        Some("/v1/responses" | "/v1/responses/compact") => Some(Api::Responses),
        _ if crate::gemini::method_of(&path).is_some() => Some(Api::Gemini),
        _ => None,
    };
    let api = api.filter(|_| parts.method == hyper::Method::POST);
    let fault = if api.is_some() { lock(&shared.script).pop_front() } else { None };
    let seq = shared.next_seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Subscribed before the exchange is visible: a `release` after a test saw it frees it.
    let mut released = shared.release.subscribe();
    {
        let mut exchanges = lock(&shared.exchanges);
        let in_flight_on_arrival = exchanges.iter().filter(|x| !x.response.finished).count();
        exchanges.push(Exchange {
            seq,
            request: request.clone(),
            response: RecordedResponse::default(),
            fault: fault.clone(),
            in_flight_on_arrival,
        });
    }
    let tracker = Tracker { shared: shared.clone(), seq, done: false };
    let shape =
        api.unwrap_or(if request.header("x-api-key").is_some() || request.header("anthropic-version").is_some() {
            Api::Anthropic
        } else {
            Api::OpenAi
        });
    let error = |status: u16, msg: &str| match shape {
        Api::Anthropic => anthropic::error(status, msg),
        Api::OpenAi | Api::Responses => openai::error(status, msg),
        Api::Gemini => crate::gemini::error(status, msg),
    };
    if parts.method == hyper::Method::POST && path.split('?').next() == Some("/v1/messages/count_tokens") {
        let (status, b) = count_tokens(&shared, &body);
        return Ok(respond(tracker, status, vec![b], End::Finish, false, Api::Anthropic, None, None));
    }
    let Some(api) = api else {
        let msg = format!("Invalid URL ({} {path})", parts.method);
        return Ok(respond(tracker, 404, vec![error(404, &msg)], End::Finish, false, shape, None, None));
    };
    match &fault {
        Some(Fault::Hang) => std::future::pending::<()>().await,
        // The sender lives in `Shared`, which outlives this handler: only a release wakes it.
        Some(Fault::Hold) => {
            let _ = released.changed().await;
        }
        Some(Fault::Delay { ms }) => tokio::time::sleep(Duration::from_millis(*ms)).await,
        Some(Fault::Status { status, retry_after_secs }) => {
            let retry = retry_after_secs.or((*status == 429).then_some(1));
            let b = error(*status, &format!("scripted {status}"));
            return Ok(respond(tracker, *status, vec![b], End::Finish, false, api, retry, None));
        }
        _ => {}
    }
    let parsed: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v @ serde_json::Value::Object(_)) => v,
        Ok(_) => {
            return Ok(respond(
                tracker,
                400,
                vec![error(400, "body: expected a JSON object")],
                End::Finish,
                false,
                api,
                None,
                None,
            ))
        }
        Err(e) => {
            return Ok(respond(
                tracker,
                400,
                vec![error(400, &format!("body: invalid JSON: {e}"))],
                End::Finish,
                false,
                api,
                None,
                None,
            ))
        }
    };
    if api == Api::Responses {
        return Ok(serve_responses(&shared, tracker, &request, &parsed, &body, fault, seq));
    }
    if api == Api::Gemini {
        return Ok(serve_gemini(&shared, tracker, &request, &parsed, &body, fault, seq));
    }
    if !parsed.get("messages").is_some_and(serde_json::Value::is_array) {
        return Ok(respond(
            tracker,
            400,
            vec![error(400, "messages: Field required")],
            End::Finish,
            false,
            api,
            None,
            None,
        ));
    }
    let model = parsed.get("model").and_then(|m| m.as_str()).unwrap_or("fake-model").to_owned();
    let streaming = parsed.get("stream").and_then(serde_json::Value::as_bool) == Some(true);
    // A history with a compaction block: the API reads it from the latest one on.
    let compacted = (api == Api::Anthropic).then(|| crate::context_editing::after_compaction(&parsed)).flatten();
    let read_bytes = compacted.as_ref().and_then(|v| serde_json::to_vec(v).ok());
    let (read, read_body) = match (&compacted, &read_bytes) {
        (Some(v), Some(b)) => (v, b.as_slice()),
        _ => (&parsed, &body[..]),
    };
    let prompt = (read_body.len() as u64).div_ceil(4);
    let checked = {
        let strict = lock(&shared.strict);
        match api {
            Api::Anthropic => strict
                .anthropic(&parsed, prompt)
                .and_then(|()| crate::context_editing::checked(&strict, &parsed, request.header("anthropic-beta"))),
            Api::OpenAi | Api::Responses | Api::Gemini => strict.openai(&parsed, prompt),
        }
    };
    if let Err(Rejection { status, message, param, code }) = checked {
        let b = match api {
            Api::Anthropic => anthropic::error(status, &message),
            Api::OpenAi if code.as_deref() == Some(crate::strict::LLAMA_CONTEXT_CODE) => {
                openai::llama_context_error(prompt, lock(&shared.strict).context_of(false))
            }
            Api::OpenAi | Api::Responses | Api::Gemini => openai::invalid(&message, param.as_deref(), code.as_deref()),
        };
        return Ok(respond(tracker, status, vec![b], End::Finish, false, api, None, None));
    }
    let reply = reply::decide(&parsed);
    let thinking = (api == Api::Anthropic
        && parsed.pointer("/thinking/type").and_then(serde_json::Value::as_str).is_some_and(|t| t != "disabled"))
    .then(|| {
        format!(
            "The conversation has {} messages; a short answer will do.",
            parsed["messages"].as_array().map_or(0, Vec::len)
        )
    });
    let tokens = cache_tokens(&shared, &request, read, read_body, &reply, api, thinking.as_deref());
    // Context editing asked for: what the API would have cleared, reported with the answer;
    // server-side compaction: the compaction block when it is due.
    let extras = match api {
        Api::Anthropic => anthropic::Extras {
            context_management: crate::context_editing::applied(&parsed, prompt),
            compaction: crate::context_editing::compaction(&parsed, prompt),
        },
        _ => anthropic::Extras::default(),
    };
    let mut chunks = match (api, streaming) {
        (Api::Anthropic, false) => {
            vec![anthropic::message(&model, &reply, thinking.as_deref(), &tokens, seq, &extras)]
        }
        (Api::Anthropic, true) => anthropic::stream(&model, &reply, thinking.as_deref(), &tokens, seq, &extras),
        (Api::OpenAi | Api::Responses | Api::Gemini, false) => vec![openai::completion(&model, &reply, &tokens, seq)],
        (Api::OpenAi | Api::Responses | Api::Gemini, true) => {
            let usage =
                parsed.pointer("/stream_options/include_usage").and_then(serde_json::Value::as_bool) == Some(true);
            openai::stream(&model, &reply, &tokens, seq, usage)
        }
    };
    let mut end = End::Finish;
    let full_len = (!streaming).then(|| chunks.iter().map(|c| c.len() as u64).sum::<u64>());
    match fault {
        Some(Fault::Disconnect { after_events }) | Some(Fault::Stall { after_events }) => {
            if streaming {
                chunks.truncate(after_events);
            } else if let Some(b) = chunks.first().cloned() {
                chunks = vec![b.slice(..b.len() / 2)];
            }
            end = if matches!(fault, Some(Fault::Stall { .. })) { End::Stall } else { End::Abort };
        }
        Some(Fault::StreamError { after_events }) if streaming => {
            chunks.truncate(after_events);
            chunks.push(match api {
                Api::Anthropic => anthropic::stream_error(),
                Api::OpenAi | Api::Responses | Api::Gemini => openai::stream_error(),
            });
        }
        _ => end = late_end(&fault),
    }
    Ok(respond(tracker, 200, chunks, end, streaming, api, None, full_len))
}

/// A late end, if scripted; else a clean finish.
fn late_end(fault: &Option<Fault>) -> End {
    match fault {
        Some(Fault::LateEnd { ms, then }) => {
            End::Late { ms: *ms, abort: *then == crate::faults::LateEnd::Abort, timer: None }
        }
        _ => End::Finish,
    }
}

/// `POST /v1/responses`: checked, answered (JSON or events), stored unless `store: false`.
fn serve_responses(
    shared: &Shared,
    tracker: Tracker,
    request: &RecordedRequest,
    parsed: &serde_json::Value,
    body: &[u8],
    fault: Option<Fault>,
    seq: u64,
) -> Response<FakeBody> {
    let api = Api::Responses;
    let reject = |tracker, r: Rejection| {
        let b = openai::invalid(&r.message, r.param.as_deref(), r.code.as_deref());
        respond(tracker, r.status, vec![b], End::Finish, false, api, None, None)
    };
    let items = match responses::effective_input(parsed, &lock(&shared.stored)) {
        Ok(items) => items,
        Err(r) => return reject(tracker, r),
    };
    // The prompt the model reads: the stored context of `previous_response_id` counts too.
    let stored_bytes: usize = match parsed.get("previous_response_id").filter(|v| !v.is_null()) {
        Some(_) => serde_json::to_vec(&items).map_or(0, |v| v.len()),
        None => 0,
    };
    let prompt = ((body.len() + stored_bytes) as u64).div_ceil(4);
    let checked = responses::check(&lock(&shared.strict), parsed, &items, prompt);
    if let Err(r) = checked {
        return reject(tracker, r);
    }
    if request.path.split('?').next() == Some("/v1/responses/compact") {
        // No stream, nothing stored: the compacted history is the client's to send back.
        if parsed.get("stream").is_some() {
            return reject(
                tracker,
                Rejection {
                    status: 400,
                    message: "Unknown parameter: 'stream'.".into(),
                    param: Some("stream".into()),
                    code: Some("unknown_parameter".into()),
                },
            );
        }
        let mut tokens = cache_tokens(shared, request, parsed, body, &Reply::Text(String::new()), api, None);
        tokens.prompt = prompt;
        let b = Bytes::from(responses::compacted(&items, seq, &tokens).to_string());
        return respond(tracker, 200, vec![b], End::Finish, false, api, None, None);
    }
    let model = parsed.get("model").and_then(|m| m.as_str()).unwrap_or("fake-model").to_owned();
    let streaming = parsed.get("stream").and_then(serde_json::Value::as_bool) == Some(true);
    let reply = responses::decide(&items);
    let mut tokens = cache_tokens(shared, request, parsed, body, &reply, api, None);
    tokens.prompt = prompt;
    let output = responses::output(parsed, &reply, seq, responses::compacts(parsed, prompt));
    if parsed.get("store") != Some(&serde_json::Value::Bool(false)) {
        let mut context = items;
        context.extend(output.iter().cloned());
        lock(&shared.stored).keep(format!("resp_fake_{seq}"), context);
    }
    let mut chunks = if streaming {
        responses::stream(parsed, &model, seq, &output, &tokens)
    } else {
        vec![Bytes::from(responses::response(parsed, &model, seq, &output, Some(&tokens)).to_string())]
    };
    let full_len = (!streaming).then(|| chunks.iter().map(|c| c.len() as u64).sum::<u64>());
    let mut end = End::Finish;
    match fault {
        Some(Fault::Disconnect { after_events }) | Some(Fault::Stall { after_events }) => {
            if streaming {
                chunks.truncate(after_events);
            } else if let Some(b) = chunks.first().cloned() {
                chunks = vec![b.slice(..b.len() / 2)];
            }
            end = if matches!(fault, Some(Fault::Stall { .. })) { End::Stall } else { End::Abort };
        }
        Some(Fault::StreamError { after_events }) if streaming => {
            chunks.truncate(after_events);
            chunks.push(responses::stream_error(after_events as u64));
        }
        _ => end = late_end(&fault),
    }
    respond(tracker, 200, chunks, end, streaming, api, None, full_len)
}

/// `POST /v1beta/models/{model}:generateContent` / `:streamGenerateContent`: checked, answered.
fn serve_gemini(
    shared: &Shared,
    tracker: Tracker,
    request: &RecordedRequest,
    parsed: &serde_json::Value,
    body: &[u8],
    fault: Option<Fault>,
    seq: u64,
) -> Response<FakeBody> {
    let api = Api::Gemini;
    let (model, streaming) = crate::gemini::method_of(&request.path).unwrap_or_default();
    let prompt = (body.len() as u64).div_ceil(4);
    if let Err(r) = crate::gemini::check(&lock(&shared.strict), parsed, prompt) {
        return respond(
            tracker,
            r.status,
            vec![crate::gemini::error(r.status, &r.message)],
            End::Finish,
            false,
            api,
            None,
            None,
        );
    }
    if streaming && !request.path.contains("alt=sse") {
        // Google streams a JSON array then; the fake speaks only the SSE form.
        let b = crate::gemini::error(400, "the fake serves :streamGenerateContent with alt=sse only");
        return respond(tracker, 400, vec![b], End::Finish, false, api, None, None);
    }
    let reply = crate::gemini::decide(parsed);
    let tokens = cache_tokens(shared, request, parsed, body, &reply, api, None);
    let mut chunks = if streaming {
        crate::gemini::stream(&model, &reply, &tokens, seq)
    } else {
        vec![Bytes::from(crate::gemini::response(&model, &reply, &tokens, seq).to_string())]
    };
    let full_len = (!streaming).then(|| chunks.iter().map(|c| c.len() as u64).sum::<u64>());
    let mut end = End::Finish;
    match fault {
        Some(Fault::Disconnect { after_events }) | Some(Fault::Stall { after_events }) => {
            if streaming {
                chunks.truncate(after_events);
            } else if let Some(b) = chunks.first().cloned() {
                chunks = vec![b.slice(..b.len() / 2)];
            }
            end = if matches!(fault, Some(Fault::Stall { .. })) { End::Stall } else { End::Abort };
        }
        Some(Fault::StreamError { after_events }) if streaming => {
            chunks.truncate(after_events);
            chunks.push(crate::gemini::stream_error());
        }
        _ => end = late_end(&fault),
    }
    respond(tracker, 200, chunks, end, streaming, api, None, full_len)
}

/// Fields Anthropic's `POST /v1/messages/count_tokens` accepts (any other is a 400, as
/// `max_tokens` or `stream` are there).
const COUNT_TOKENS_FIELDS: [&str; 7] =
    ["model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers"];

/// `count_tokens`: `{"input_tokens": N}` with N the fake's count of the body (⌈bytes/4⌉), after
/// the checks a Messages request of the same content passes (tool pairs, breakpoints, …).
fn count_tokens(shared: &Shared, body: &[u8]) -> (u16, Bytes) {
    let parsed: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v @ serde_json::Value::Object(_)) => v,
        _ => return (400, anthropic::error(400, "body: expected a JSON object")),
    };
    if let Some(extra) = parsed.as_object().and_then(|o| o.keys().find(|k| !COUNT_TOKENS_FIELDS.contains(&k.as_str())))
    {
        return (400, anthropic::error(400, &format!("{extra}: Extra inputs are not permitted")));
    }
    for field in ["model", "messages"] {
        if parsed.get(field).is_none() {
            return (400, anthropic::error(400, &format!("{field}: Field required")));
        }
    }
    let tokens = (body.len() as u64).div_ceil(4);
    // The Messages checks, but for `max_tokens`, which count_tokens does not take.
    let mut as_request = parsed;
    as_request["max_tokens"] = 1.into();
    if let Err(Rejection { status, message, .. }) = lock(&shared.strict).anthropic(&as_request, tokens) {
        return (status, anthropic::error(status, &message));
    }
    (200, Bytes::from(format!("{{\"input_tokens\":{tokens}}}")))
}

/// The usage by the providers' caching rules; remembers what this request caches.
fn cache_tokens(
    shared: &Shared,
    req: &RecordedRequest,
    parsed: &serde_json::Value,
    body: &[u8],
    reply: &Reply,
    api: Api,
    thinking: Option<&str>,
) -> Tokens {
    let key = req
        .headers
        .iter()
        .find(|(n, _)| n == "x-api-key")
        .or_else(|| req.headers.iter().find(|(n, _)| n == "authorization"))
        .or_else(|| req.headers.iter().find(|(n, _)| n == "x-goog-api-key"))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let prompt = (body.len() as u64).div_ceil(4);
    let now = std::time::Instant::now() + *lock(&shared.clock_offset);
    let mut caches = lock(&shared.caches);
    let (cache_read, cache_creation) = match api {
        Api::Anthropic => {
            let c = caches.anthropic(&key, parsed, prompt, now);
            (c.read, c.written)
        }
        Api::OpenAi | Api::Responses => (caches.openai(&key, body, now), 0),
        Api::Gemini => {
            let model = crate::gemini::method_of(&req.path).map(|(m, _)| m).unwrap_or_default();
            (caches.gemini(&key, body, crate::gemini::cache_min(&model), now), 0)
        }
    };
    let output = reply.output_tokens() + thinking.map_or(0, |t| (t.len() as u64).div_ceil(4));
    Tokens { prompt, cache_read, cache_creation, output }
}

#[allow(clippy::too_many_arguments)]
fn respond(
    tracker: Tracker,
    status: u16,
    chunks: Vec<Bytes>,
    end: End,
    streaming: bool,
    api: Api,
    retry_after: Option<u64>,
    full_len: Option<u64>,
) -> Response<FakeBody> {
    let mut headers: Vec<(String, String)> = vec![(
        "content-type".into(),
        if streaming { "text/event-stream; charset=utf-8" } else { "application/json" }.into(),
    )];
    if streaming {
        headers.push(("cache-control".into(), "no-cache".into()));
    }
    let id = match api {
        Api::Anthropic => "request-id",
        Api::OpenAi | Api::Responses | Api::Gemini => "x-request-id",
    };
    headers.push((id.into(), format!("req_fake_{}", tracker.seq)));
    if let Some(s) = retry_after {
        headers.push(("retry-after".into(), s.to_string()));
    }
    // A JSON body has a content-length; a cut one announces its full length, so that the
    // client sees a truncated body rather than a short complete one.
    // A late end needs a chunked body: with a content-length the body is over at its last byte.
    let late = matches!(end, End::Late { .. });
    let exact = (!streaming && !late).then(|| full_len.unwrap_or_else(|| chunks.iter().map(|c| c.len() as u64).sum()));
    tracker.with(|x| {
        x.response.status = status;
        x.response.headers = headers.clone();
    });
    let mut r = Response::new(FakeBody { chunks: chunks.into(), end, exact, tracker: Some(tracker), flushed: false });
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    for (n, v) in headers {
        if let (Ok(n), Ok(v)) = (hyper::header::HeaderName::try_from(n), hyper::header::HeaderValue::try_from(v)) {
            r.headers_mut().insert(n, v);
        }
    }
    r
}

fn control(method: &str, path: &str, body: &[u8], shared: &Shared) -> Response<FakeBody> {
    match (method, path) {
        ("POST", "/_fake/script") => {
            let parsed = serde_json::from_slice::<Vec<ScriptEntry>>(body)
                .or_else(|_| serde_json::from_slice::<ScriptEntry>(body).map(|e| vec![e]));
            match parsed {
                Ok(entries) => {
                    shared.push_script(entries);
                    let n = lock(&shared.script).len();
                    json_response(200, Bytes::from(format!("{{\"queued\":{n}}}")))
                }
                Err(e) => {
                    json_response(400, Bytes::from(serde_json::json!({"error": format!("script: {e}")}).to_string()))
                }
            }
        }
        ("DELETE", "/_fake/script") => {
            lock(&shared.script).clear();
            json_response(200, Bytes::from_static(b"{\"queued\":0}"))
        }
        ("GET", "/_fake/requests") => {
            let mut out = String::new();
            for x in lock(&shared.exchanges).iter() {
                out.push_str(&x.to_json_line());
                out.push('\n');
            }
            let mut r = json_response(200, Bytes::from(out));
            r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/x-ndjson"));
            r
        }
        ("POST", "/_fake/config") => match serde_json::from_slice::<Config>(body) {
            Ok(c) => {
                shared.configure(&c);
                json_response(200, Bytes::from(shared.config_json().to_string()))
            }
            Err(e) => json_response(400, Bytes::from(serde_json::json!({"error": format!("config: {e}")}).to_string())),
        },
        ("GET", "/_fake/config") => json_response(200, Bytes::from(shared.config_json().to_string())),
        ("POST", "/_fake/release") => {
            shared.release.send_modify(|g| *g += 1);
            json_response(200, Bytes::from_static(b"{}"))
        }
        ("POST", "/_fake/reset") => {
            shared.reset();
            json_response(200, Bytes::from_static(b"{}"))
        }
        _ => json_response(404, Bytes::from_static(b"{\"error\":\"unknown control endpoint\"}")),
    }
}

impl Shared {
    pub(crate) fn reset(&self) {
        lock(&self.exchanges).clear();
        lock(&self.script).clear();
        *lock(&self.caches) = Caches::default();
        *lock(&self.stored) = responses::Stored::default();
    }
}

/// `POST /_fake/config`: every field optional.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// Rules to relax.
    #[serde(default)]
    pub(crate) relax: Vec<crate::strict::Rule>,
    /// Rules to enforce again.
    #[serde(default)]
    pub(crate) enforce: Vec<crate::strict::Rule>,
    /// Every model's context window in tokens (`null`: the providers' defaults); absent: unchanged.
    #[serde(default, with = "double_option")]
    pub(crate) context_tokens: Option<Option<u64>>,
    /// Moves the caches' clock forward (TTL tests without waiting).
    #[serde(default)]
    pub(crate) advance_clock_secs: u64,
    /// Answer context overflows as llama.cpp's server does; absent: unchanged.
    #[serde(default)]
    pub(crate) llama_cpp: Option<bool>,
}

mod double_option {
    use serde::{Deserialize, Deserializer};
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
        Option::<u64>::deserialize(d).map(Some)
    }
}

impl Shared {
    pub(crate) fn configure(&self, c: &Config) {
        let mut s = lock(&self.strict);
        for r in &c.relax {
            s.relaxed.insert(*r);
        }
        for r in &c.enforce {
            s.relaxed.remove(r);
        }
        if let Some(n) = c.context_tokens {
            s.context_tokens = n;
        }
        if let Some(l) = c.llama_cpp {
            s.llama_cpp = l;
        }
        *lock(&self.clock_offset) += Duration::from_secs(c.advance_clock_secs);
    }

    pub(crate) fn config_json(&self) -> serde_json::Value {
        let s = lock(&self.strict);
        let mut relaxed: Vec<String> = s
            .relaxed
            .iter()
            .map(|r| serde_json::to_value(r).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default())
            .collect();
        relaxed.sort();
        serde_json::json!({
            "relaxed": relaxed,
            "context_tokens": s.context_tokens,
            "llama_cpp": s.llama_cpp,
            "clock_offset_secs": lock(&self.clock_offset).as_secs(),
        })
    }
}
