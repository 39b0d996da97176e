//! `POST /v1/messages`, `POST /v1/chat/completions` and `POST /v1/responses`: the history is
//! logged, the planned view forwarded, the answer streamed back and the call committed when it
//! ends (Responses specifics: `responses.rs`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ctxlog::{RequestOptions, WireFormat};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::oneshot;

use crate::body::{ClientBody, Keys};
use crate::identity::{digest, session_of, system_message};
use crate::reply::{error, full, Body, Shape};
use crate::sessions::{prepare, Held, Item, PrepareError};
use crate::shared::{Proxy, Ticket};
use crate::tee::{json_outcome, Incomplete, NotRecorded, Outcome, Scan, Tee};

/// Serves one call of `format`. The body is already read (and within the limit).
pub(crate) async fn call(
    proxy: Arc<Proxy>,
    parts: http::request::Parts,
    bytes: Bytes,
    format: WireFormat,
    started: Instant,
) -> Response<Body> {
    let shape = match format {
        WireFormat::Anthropic => Shape::Anthropic,
        WireFormat::OpenAi => Shape::OpenAi,
        WireFormat::OpenAiResponses => Shape::Responses,
        WireFormat::Gemini => Shape::Gemini,
    };
    let bad = |field: &str, message: &str| {
        error(shape, StatusCode::BAD_REQUEST, "invalid_request_error", &format!("{field}: {message}"))
    };
    let responses = format == WireFormat::OpenAiResponses;
    let gemini = crate::gemini::method_of(parts.uri.path());
    let keys = match format {
        WireFormat::OpenAiResponses => Keys::RESPONSES,
        WireFormat::Gemini => Keys::GEMINI,
        WireFormat::Anthropic | WireFormat::OpenAi => Keys::MESSAGES,
    };
    // Gemini: a `?key=` names the caller as `x-goog-api-key` does.
    let id_headers = match &gemini {
        Some(_) => std::borrow::Cow::Owned(crate::gemini::identity_headers(&parts.headers, parts.uri.query())),
        None => std::borrow::Cow::Borrowed(&parts.headers),
    };
    // The client's own bytes: what a provider-held call forwards.
    let original = bytes;
    let parsed = match ClientBody::parse_as(&original, keys) {
        Ok(b) => b,
        Err(e) => return bad(&e.field, &e.message),
    };
    // Scanned once: only a Responses body with a string `input` is rewritten and read again.
    let rewritten = crate::responses::with_items(&parsed).map(Bytes::from);
    let bytes = rewritten.clone().unwrap_or_else(|| original.clone());
    let body = match &rewritten {
        None => parsed,
        Some(r) => match ClientBody::parse_as(r, keys) {
            Ok(b) => b,
            Err(e) => return bad(&e.field, &e.message),
        },
    };
    if format == WireFormat::OpenAi && body.system.is_some() {
        return bad("system", "not a field of OpenAI chat requests (send a system message)");
    }
    // The client's own context editing (Anthropic): passed upstream, or applied here.
    let field = |name: &str| body.fields.iter().find(|(k, _)| *k == name).map(|(_, v)| v.get());
    let client = match field("context_management").filter(|_| format == WireFormat::Anthropic) {
        None => None,
        Some(json) => {
            let applied = match proxy.cfg.provider_context_management {
                crate::ProviderContextManagement::Pass => None,
                crate::ProviderContextManagement::Apply => {
                    let thinking = crate::context_management::thinking_on(field("thinking"));
                    match crate::context_management::read(json, thinking) {
                        Ok(e) => Some(e),
                        Err((f, m)) => return bad(&f, &m),
                    }
                }
            };
            Some(crate::sessions::ClientManagement { types: crate::context_management::types(json), applied })
        }
    };
    let applying = client.as_ref().is_some_and(|c| c.applied.is_some());
    let client = Arc::new(client);
    let mut opts = RequestOptions::new();
    for (k, v) in &body.fields {
        if applying && *k == "context_management" {
            // Only what ctxlog leaves to the provider goes on (server-side compaction).
            let kept = client
                .as_ref()
                .as_ref()
                .and_then(|c| c.applied.as_ref())
                .and_then(crate::context_management::forwarded_field);
            if let Some(kept) = kept {
                opts = match opts.field(k, &kept) {
                    Ok(o) => o,
                    Err(e) => return bad(&e.field, &e.message),
                };
            }
            continue;
        }
        opts = match opts.field(k, v.get()) {
            Ok(o) => o,
            Err(e) => return bad(&e.field, &e.message),
        };
    }
    // Every call's usage is recorded: an OpenAI stream is asked for its usage chunk, which is
    // kept from a client that did not ask for it (LangChain's and the Agents SDK's default).
    let strip_usage = format == WireFormat::OpenAi && body.streams() && !asks_usage(&body);
    if strip_usage {
        opts = match opts.field("stream_options", &with_usage(&body)) {
            Ok(o) => o,
            Err(e) => return bad(&e.field, &e.message),
        };
    }
    // The history as spans of the body and their digests: the blocking task below rebuilds
    // borrowed items from the (refcounted) body instead of copying 600 KB into owned strings.
    let system = body.system.map(|s| {
        let raw = match format {
            WireFormat::OpenAiResponses => crate::responses::instructions_message(s),
            WireFormat::Gemini => crate::gemini::system_message(s),
            WireFormat::Anthropic | WireFormat::OpenAi => system_message(s),
        };
        let d = digest(raw.as_bytes());
        (raw, d)
    });
    let start = bytes.as_ptr() as usize;
    let spans: Vec<(std::ops::Range<usize>, u128)> = body
        .messages
        .iter()
        .map(|m| {
            let raw = m.as_bytes();
            let at = raw.as_ptr() as usize - start;
            (at..at + raw.len(), digest(raw))
        })
        .collect();
    let asked = Arc::new(crate::breakpoints::Asked::of(&body, format, proxy.cfg.cache_breakpoints));
    // `previous_response_id`: the provider holds the history; the call joins its chain.
    let previous = if responses { crate::responses::previous_of(&body) } else { None };
    let tenant = crate::identity::key_hash(&id_headers);
    let (base, earlier) = match &previous {
        Some(p) => proxy.chains.resolve(&tenant, p),
        None => {
            // A history that starts at a provider's compaction continues the session that got it.
            let named = parts.headers.contains_key(crate::SESSION_HEADER);
            let after =
                body.messages.first().filter(|_| !named).and_then(|m| proxy.aliases.resolve(&tenant, m.as_bytes()));
            (after.unwrap_or_else(|| session_of(&id_headers, format, &body, &proxy.sessions.derived)), Vec::new())
        }
    };
    let held_chain = previous.is_some();
    // A provider compaction the proxy relayed, among the history's leading items.
    let leading = body.messages.get(..body.messages.len().min(LEADING)).unwrap_or_default();
    let answered = proxy.aliases.answered(&tenant, base, leading);
    let earlier = Arc::new(earlier);
    // Gemini's model is in the path.
    let model = gemini.as_ref().map(|g| g.model.clone()).or_else(|| opts.model_name());
    // The output the request reserves (OpenAI's newer name included).
    let max_tokens = body
        .fields
        .iter()
        .find(|(k, _)| matches!(*k, "max_tokens" | "max_completion_tokens" | "max_output_tokens"))
        .and_then(|(_, v)| v.get().parse().ok())
        .or_else(|| gemini.as_ref().and_then(|_| crate::gemini::max_output(&body.fields)));
    // The header's bytes as text (a header value is visible ASCII in practice; anything else
    // is kept readable rather than refused: the id already depends on the exact bytes).
    let name = parts.headers.get(crate::SESSION_HEADER).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let sse = body.streams() || gemini.as_ref().is_some_and(|g| g.stream);
    // Without `alt=sse` Google streams one JSON array, which has no event to hold back.
    let alt_sse = parts.uri.query().is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
    if gemini.as_ref().is_some_and(|g| g.stream) && !alt_sse {
        return bad("alt", "ctxlog serves :streamGenerateContent as server-sent events only: add ?alt=sse");
    }
    // Shutdown waits for this call, through its commit and summaries.
    let ticket = Ticket::new(&proxy);
    let unavailable = |why: &str| crate::reply::unavailable(shape, &format!("ctxlog: {why}"), 1);

    // One call in flight per session: the slot in this process, the store's lease across a
    // fleet. Both waits share one bound; past it the client is told to retry (nothing sent).
    // What a retry after an overflow needs to place the breakpoints on its new plan.
    let replace = crate::overflow::Replace {
        asked: Arc::clone(&asked),
        items: spans.len() + usize::from(system.is_some()),
        has_system: system.is_some(),
        knobs: client.as_ref().as_ref().and_then(|c| c.applied.as_ref()).map(|e| e.knobs.clone()).unwrap_or_default(),
    };
    let deadline = tokio::time::Instant::now() + proxy.cfg.session_wait;
    let slot = proxy.sessions.slot(base);
    let mut pending = Some((spans, opts));
    // Past `lease_soon`'s quick tries the wait is on the runtime's timer (1 ms steps).
    let mut backoff = std::time::Duration::from_millis(1);
    let (held, prepared, mut opts) = loop {
        let Ok(guard) = tokio::time::timeout_at(deadline, Arc::clone(&slot).lock_owned()).await else {
            proxy.metrics.busy.fetch_add(1, Relaxed);
            tracing::warn!(session = %base, "session busy past the wait: the client is told to retry");
            return unavailable("the session is busy with another call past --session-wait; retry");
        };
        let store = Arc::clone(&proxy.store);
        // A new session starts within its model's configured budget and what it was learned to take.
        let config = proxy.limits.config_for(&proxy.cfg.engine_for(model.as_deref(), max_tokens), model.as_deref());
        let raw = bytes.clone();
        let Some((span_list, o)) = pending.take() else {
            return error(shape, StatusCode::INTERNAL_SERVER_ERROR, "api_error", "ctxlog: lost the request");
        };
        let system = system.clone();
        let earlier = Arc::clone(&earlier);
        let original = original.clone();
        let asked = Arc::clone(&asked);
        let name = name.clone();
        let tails = Arc::clone(&proxy);
        let client = Arc::clone(&client);
        let step = crate::blocking::run(move || {
            let mut guard = guard;
            let derived = name.is_none() && !held_chain;
            guard.name = name;
            let lease = match lease_soon(&store, base, &tails.metrics) {
                Ok(Some(lease)) => lease,
                Ok(None) => return Step::LeaseTaken(span_list, o),
                Err(e) => return Step::Failed(PrepareError::Unavailable(e.into())),
            };
            let mut items = Vec::with_capacity(span_list.len() + 1);
            if let Some((raw, digest)) = &system {
                items.push(Item { raw: raw.as_bytes(), digest: *digest, index: None, keys });
            }
            for (i, (span, digest)) in span_list.iter().enumerate() {
                let raw = raw.get(span.clone()).unwrap_or_default();
                items.push(Item { raw, digest: *digest, index: Some(i), keys });
            }
            // A lineage new to this slot may be a conversation its client summarized.
            guard.summarizes = None;
            if derived && guard.current_digests().is_none() {
                guard.summarizes = tails.tails.summarized(&tenant, &items);
            }
            let prepared = if held_chain {
                let body = original.to_vec();
                crate::responses::prepare_provider_held(
                    &mut guard,
                    &store,
                    base,
                    &config,
                    &earlier,
                    &items,
                    &o,
                    ctxlog_now(),
                    body,
                )
            } else {
                let client = client.as_ref().as_ref();
                prepare(&mut guard, &store, base, format, &config, &items, &o, &asked, ctxlog_now(), answered, client)
            };
            match prepared {
                Ok(p) => Step::Ready(Held::new(guard, lease), Box::new(p)),
                Err(e) => Step::Failed(e),
            }
        })
        .await;
        match step {
            Ok(Step::Ready(held, prepared)) => {
                let mut prepared = *prepared;
                let opts = std::mem::take(&mut prepared.opts);
                break (held, prepared, opts);
            }
            Ok(Step::LeaseTaken(sp, o)) => {
                // Another proxy holds the session: wait for it, bounded, without a busy loop.
                pending = Some((sp, o));
                if tokio::time::Instant::now() + backoff >= deadline {
                    proxy.metrics.busy.fetch_add(1, Relaxed);
                    return unavailable("another proxy holds the session past --session-wait; retry");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_millis(100));
            }
            Ok(Step::Failed(PrepareError::Invalid { field, message })) => return bad(&field, &message),
            Ok(Step::Failed(PrepareError::Unavailable(e))) => {
                proxy.metrics.failed_writes.fetch_add(1, Relaxed);
                tracing::error!(session = %base, error = %e, "the request's messages could not be logged: nothing forwarded");
                return unavailable(&format!("the call cannot be logged now, nothing was sent upstream: {e}"));
            }
            Ok(Step::Failed(PrepareError::Session(e))) => {
                tracing::error!(session = %base, error = %e, "the session failed");
                return error(shape, StatusCode::INTERNAL_SERVER_ERROR, "api_error", &format!("ctxlog: {e}"));
            }
            Err(_) => {
                return error(shape, StatusCode::INTERNAL_SERVER_ERROR, "api_error", "ctxlog: the session task failed")
            }
        }
    };
    if prepared.compaction {
        proxy.metrics.compactions.fetch_add(1, Relaxed);
    }
    if prepared.branched {
        proxy.metrics.branched.fetch_add(1, Relaxed);
    }
    if prepared.caught_up {
        proxy.metrics.catch_ups.fetch_add(1, Relaxed);
    }
    let stream = prepared.stream;
    let call_no = prepared.plan.call();
    let fork = prepared.fork;
    let (mut held, mut plan, mut forward) = (held, prepared.plan, prepared.body);
    let mut prepared_breakpoints = prepared.breakpoints;
    let mut retried = false;
    let before = started.elapsed();
    let (after, up_parts, up_body, told) = loop {
        let mut told = crate::headers::what_was_done(&plan);
        told.extend(crate::headers::branch(fork));
        let mut up = Request::builder().method(parts.method.clone()).uri(proxy.upstream_uri(&parts.uri));
        if let Some(h) = up.headers_mut() {
            *h = crate::headers::request(&parts.headers, true);
            if applying {
                crate::context_management::strip_beta(h);
            }
        }
        let Ok(up) = up.body(full(std::mem::take(&mut forward))) else {
            return error(shape, StatusCode::BAD_GATEWAY, "api_error", "ctxlog: cannot build the upstream request");
        };
        let sent = tokio::time::timeout(proxy.cfg.upstream_timeout, proxy.client.request(up)).await;
        let after = Instant::now();
        // The plan is dropped with `held` on every early return: only the appended messages stay.
        let resp = match sent {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                proxy.metrics.aborted.fetch_add(1, Relaxed);
                return error(
                    shape,
                    StatusCode::BAD_GATEWAY,
                    "api_error",
                    &format!("ctxlog: upstream unreachable: {e}"),
                );
            }
            Err(_) => {
                proxy.metrics.aborted.fetch_add(1, Relaxed);
                return error(
                    shape,
                    StatusCode::GATEWAY_TIMEOUT,
                    "timeout_error",
                    "ctxlog: the upstream did not answer in time",
                );
            }
        };
        let (up_parts, up_body) = resp.into_parts();
        if up_parts.status.is_success() {
            break (after, up_parts, up_body, told);
        }
        // Refused: recorded; an overflow that taught the model's limit is re-planned and sent
        // once more before the client hears anything (proxy/src/overflow.rs).
        proxy.metrics.aborted.fetch_add(1, Relaxed);
        let raw = read_answer(up_body, proxy.cfg.upstream_timeout).await.unwrap_or_default();
        let status = up_parts.status.as_u16();
        match crate::overflow::on_rejection(&proxy.limits, &replace, held, plan, &opts, status, &raw, !retried).await {
            crate::overflow::AfterRejection::Retry { held: h, plan: p, body, opts: o, breakpoints } => {
                (held, plan, forward, opts, prepared_breakpoints, retried) = (h, *p, body, o, breakpoints, true);
            }
            crate::overflow::AfterRejection::Answer => {
                let mut headers = crate::headers::response(&up_parts.headers);
                headers.remove(http::header::CONTENT_LENGTH);
                if let Ok(v) = stream.to_string().parse() {
                    headers.insert(crate::headers::stream_header(), v);
                }
                headers.insert(crate::headers::call_header(), http::HeaderValue::from(call_no));
                let mut out = Response::builder().status(up_parts.status);
                if let Some(h) = out.headers_mut() {
                    *h = headers;
                }
                return out.body(full(raw)).unwrap_or_else(|_| {
                    error(shape, StatusCode::BAD_GATEWAY, "api_error", "ctxlog: bad upstream headers")
                });
            }
        }
    };
    let mut headers = crate::headers::response(&up_parts.headers);
    if let Ok(v) = stream.to_string().parse() {
        headers.insert(crate::headers::stream_header(), v);
    }
    headers.insert(crate::headers::call_header(), http::HeaderValue::from(call_no));
    headers.extend(told);
    // What was done with the client's context_management, and for `apply` its applied_edits.
    let mut answer_cm = None;
    if let Some(c) = client.as_ref() {
        let applied = c
            .applied
            .as_ref()
            .and_then(|e| held.session_mut().map(|s| (e, crate::context_management::applied(s, &plan))));
        headers.insert(
            http::HeaderName::from_static(crate::CONTEXT_MANAGEMENT_HEADER),
            crate::context_management::header(applied.as_ref().map(|(e, a)| (*e, a))),
        );
        answer_cm = applied.map(|(e, a)| crate::context_management::applied_json(e, &a));
    }
    if let Some(v) = prepared_breakpoints {
        headers.insert(http::HeaderName::from_static(crate::BREAKPOINTS_HEADER), v);
    }
    let reply = |status, headers, body: Body| {
        let mut out = Response::builder().status(status);
        if let Some(h) = out.headers_mut() {
            *h = headers;
        }
        out.body(body)
            .unwrap_or_else(|_| error(shape, StatusCode::BAD_GATEWAY, "api_error", "ctxlog: bad upstream headers"))
    };
    let sse = sse
        || up_parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
    let chain = held_chain.then_some(stream);
    let call = Call { proxy: Arc::clone(&proxy), held, plan, opts, format, chain, tenant, _ticket: ticket };
    if sse {
        let (tx, rx) = oneshot::channel();
        let (committed_tx, committed_rx) = oneshot::channel();
        let mut tee = Tee::new(up_body, Scan::new(format), shape, proxy.cfg.upstream_timeout, tx, committed_rx);
        if strip_usage {
            tee = tee.without_usage_chunk();
        }
        if let Some(cm) = answer_cm.take() {
            tee = tee.with_context_management(cm);
        }
        tokio::spawn(async move {
            let outcome = rx.await.unwrap_or(Outcome::Failed(Incomplete::Dropped));
            let tell = |r| {
                let _ = committed_tx.send(r);
            };
            if let Some(later) = call.settle(outcome, tell, true).await {
                later.run().await;
            }
        });
        proxy.metrics.added(before + after.elapsed());
        return reply(up_parts.status, headers, tee.boxed());
    }
    // A JSON answer is held whole until its call is committed: the status the client gets
    // says whether the log has it.
    let body = match read_answer(up_body, proxy.cfg.upstream_timeout).await {
        Ok(b) => b,
        Err(why) => {
            proxy.metrics.aborted.fetch_add(1, Relaxed);
            tracing::warn!(%why, "call aborted: only its appended messages stay in the log");
            let mut r = error(
                shape,
                StatusCode::BAD_GATEWAY,
                "api_error",
                &format!("ctxlog: the upstream answer was cut, nothing recorded: {why}"),
            );
            // The upstream's request id still names the exchange, for the client's report.
            for (k, v) in headers.iter().filter(|(k, _)| k.as_str().ends_with("request-id")) {
                r.headers_mut().insert(k.clone(), v.clone());
            }
            return r;
        }
    };
    let outcome = json_outcome(format, &body);
    // Committed in this task: the answer goes out as soon as the commit is durable, with no
    // hand-off to another task; the summary jobs follow in a task of their own.
    let (tx, mut rx) = oneshot::channel();
    let tell = |r| {
        let _ = tx.send(r);
    };
    if let Some(later) = call.settle(outcome, tell, false).await {
        tokio::spawn(later.run());
    }
    proxy.metrics.added(before + after.elapsed());
    match rx.try_recv() {
        Ok(Ok(())) => {
            headers.remove(http::header::CONTENT_LENGTH);
            let body = match &answer_cm {
                Some(cm) if up_parts.status.is_success() => {
                    crate::context_management::into_json_answer(&body, cm).map(Bytes::from).unwrap_or(body)
                }
                _ => body,
            };
            reply(up_parts.status, headers, full(body))
        }
        Ok(Err(why)) => unavailable(&format!("the answer arrived but the call could not be recorded: {why}")),
        Err(_) => unavailable("the answer arrived but the commit task ended"),
    }
}

/// How many leading history items are looked at for a provider compaction the client kept
/// while dropping what came before it.
const LEADING: usize = 8;

/// Whether an OpenAI request asks for its stream's usage (`stream_options.include_usage`).
fn asks_usage(body: &ClientBody<'_>) -> bool {
    stream_options(body).and_then(|o| o.get("include_usage").and_then(serde_json::Value::as_bool)).unwrap_or(false)
}

fn stream_options(body: &ClientBody<'_>) -> Option<serde_json::Map<String, serde_json::Value>> {
    let (_, raw) = body.fields.iter().find(|(k, _)| *k == "stream_options")?;
    serde_json::from_str::<serde_json::Value>(raw.get()).ok()?.as_object().cloned()
}

/// The client's `stream_options` with `include_usage` on.
fn with_usage(body: &ClientBody<'_>) -> String {
    let mut o = stream_options(body).unwrap_or_default();
    o.insert("include_usage".into(), true.into());
    serde_json::Value::Object(o).to_string()
}

/// Pauses between the quick tries of a session's lease taken by another process.
const LEASE_TRIES: [std::time::Duration; 4] = [
    std::time::Duration::from_micros(50),
    std::time::Duration::from_micros(100),
    std::time::Duration::from_micros(200),
    std::time::Duration::from_micros(400),
];

/// The session's lease, tried again a few times within a millisecond when it is taken: the
/// lease a call meets is most often its session's previous call's, on another proxy of a
/// fleet, being released as that call's commit lands (on PostgreSQL the unlock is a round
/// trip behind the answer its client already has). A wait on the runtime's timer would cost
/// a millisecond at least. Counts a lease wait when the first try finds it taken.
pub(crate) fn lease_soon(
    store: &crate::sessions::Store,
    base: ctxlog::StreamId,
    metrics: &crate::Metrics,
) -> Result<Option<ctxlog::Lease>, ctxlog::StoreError> {
    if let Some(lease) = store.try_lease(base)? {
        return Ok(Some(lease));
    }
    metrics.lease_waits.fetch_add(1, Relaxed);
    for pause in LEASE_TRIES {
        std::thread::sleep(pause);
        if let Some(lease) = store.try_lease(base)? {
            return Ok(Some(lease));
        }
    }
    Ok(None)
}

/// One prepare attempt's result, carried out of the blocking task.
enum Step {
    Ready(Held, Box<crate::sessions::Prepared>),
    LeaseTaken(Vec<(std::ops::Range<usize>, u128)>, RequestOptions),
    Failed(PrepareError),
}

/// A forwarded call waiting for its answer's outcome.
struct Call {
    proxy: Arc<Proxy>,
    held: Held,
    plan: ctxlog::Plan,
    opts: RequestOptions,
    format: WireFormat,
    /// A provider-held chain's session (`previous_response_id`), else `None`.
    chain: Option<ctxlog::StreamId>,
    /// The caller's key hash (what a provider compaction in the answer is remembered under).
    tenant: [u8; 32],
    _ticket: Ticket,
}

impl Call {
    /// Commits the call when its answer completed (else drops the plan), releases the store's
    /// lease, tells `told` whether the log has it — the client's final event or status waits
    /// for that — and returns the session's summary jobs, to run before the slot is released.
    /// The commit and the telling run as one piece of blocking work ([`crate::blocking`]):
    /// the client hears from the thread that made the commit durable. With `summaries_here`,
    /// extractive summaries run there too, right after the telling.
    async fn settle(
        self,
        outcome: Outcome,
        told: impl FnOnce(Result<(), NotRecorded>) + Send + 'static,
        summaries_here: bool,
    ) -> Option<Later> {
        let Call { proxy, held, plan, opts, format, chain, tenant, _ticket: ticket } = self;
        let (usage, answer) = match outcome {
            Outcome::Complete(usage, answer) => (usage, answer),
            Outcome::Failed(why) => {
                proxy.metrics.aborted.fetch_add(1, Relaxed);
                tracing::warn!(%why, "call aborted: only its appended messages stay in the log");
                told(Err(why.into()));
                return None;
            }
        };
        let at = ctxlog_now();
        let p = Arc::clone(&proxy);
        let done = crate::blocking::run(move || {
            let proxy = p;
            let mut held = held;
            if let Some(u) = &usage {
                proxy.metrics.usage(u);
            }
            // A Responses answer may be continued by `previous_response_id`: its chain is kept.
            let response = match format {
                WireFormat::OpenAiResponses => answer.as_deref().and_then(crate::answer::answer_parts),
                _ => None,
            };
            let compactions = answer.as_deref().map(|a| crate::compaction::in_answer(format, a)).unwrap_or_default();
            let base = held.lease_key();
            let logged = held.session_mut().map_or(0, |s| s.state().message_count());
            if let Err(e) = held.commit(plan, &opts, at, usage, answer.as_deref()) {
                proxy.metrics.failed_commits.fetch_add(1, Relaxed);
                tracing::error!(error = %e, "commit failed: the client gets an error instead of the answer's end");
                // The write may or may not have landed: the next call reopens from the store.
                held.reset();
                told(Err(NotRecorded::Commit(e.to_string())));
                return None;
            }
            proxy.metrics.committed.fetch_add(1, Relaxed);
            if let Some((id, output)) = response {
                proxy.chains.remember(id, chain, output);
            }
            for payload in &compactions {
                proxy.aliases.remember(&tenant, payload, base, logged);
            }
            if let Some((stream, digests)) = held.current_digests() {
                proxy.tails.record(&tenant, stream, digests);
            }
            // Every write to the session holds its lease: extractive summaries are written under
            // it (a summary landing between another proxy's plan and its commit would make that
            // call, already answered upstream, fail to commit); a model's attempts take it again
            // to record their outcome (`summaries::retake`). With nothing to write it goes now.
            let job = held.session().is_some_and(|s| s.summary_job().is_some());
            let extractive = matches!(proxy.cfg.summaries, crate::summaries::Summaries::Extractive);
            if !(extractive && job) {
                held.release_lease();
            }
            told(Ok(()));
            // Run here when nothing waits for this thread (or there is nothing to summarize):
            // a task of their own would cost a JSON answer a hand-off before it leaves.
            let here = summaries_here || !job;
            match proxy.cfg.summaries {
                crate::summaries::Summaries::Off => None,
                crate::summaries::Summaries::Extractive if here => {
                    crate::summaries::extractive_logged(&mut held);
                    None
                }
                _ => Some(held),
            }
        })
        .await;
        match done {
            Ok(held) => held.map(|held| Later { proxy, held, _ticket: ticket }),
            // `told` went with the work: the client hears that the commit task ended.
            Err(crate::blocking::Panicked) => {
                proxy.metrics.failed_commits.fetch_add(1, Relaxed);
                tracing::error!("commit task failed");
                None
            }
        }
    }
}

/// A committed call's summary jobs, holding the session's slot (not its lease) until done.
struct Later {
    proxy: Arc<Proxy>,
    held: Held,
    /// Shutdown waits for the summaries too.
    _ticket: Ticket,
}

impl Later {
    async fn run(self) {
        let Later { proxy, held, _ticket } = self;
        crate::summaries::after_commit(&proxy.cfg.summaries, &proxy.store, held).await;
    }
}

/// Reads a whole JSON answer, each chunk within `idle` of the one before.
async fn read_answer(mut body: Incoming, idle: std::time::Duration) -> Result<Bytes, Incomplete> {
    let mut buf = bytes::BytesMut::new();
    loop {
        match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => return Err(Incomplete::Quiet),
            Ok(None) => return Ok(buf.freeze()),
            Ok(Some(Err(e))) => return Err(Incomplete::Upstream(e.to_string())),
            Ok(Some(Ok(frame))) => {
                if let Ok(d) = frame.into_data() {
                    buf.extend_from_slice(&d);
                }
            }
        }
    }
}

fn ctxlog_now() -> ctxlog::Timestamp {
    ctxlog::Timestamp::from_system_time(std::time::SystemTime::now())
}

/// A request body that could not be read (the connection's error).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct ReadError(Box<dyn std::error::Error + Send + Sync>);

/// Reads a request body up to `limit` bytes; `None` when it is larger.
pub(crate) async fn read_limited(body: Incoming, limit: usize) -> Result<Option<Bytes>, ReadError> {
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(c) => Ok(Some(c.to_bytes())),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Ok(None),
        Err(e) => Err(ReadError(e)),
    }
}
