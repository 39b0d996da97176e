//! `POST /v1/messages` and `POST /v1/chat/completions`: the history is logged, the planned
//! view forwarded, the answer streamed back and the call committed when it ends.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ctxlog::{RequestOptions, WireFormat};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::oneshot;

use crate::body::ClientBody;
use crate::identity::{digest, session_of, system_message};
use crate::reply::{error, full, Body, Shape};
use crate::server::Proxy;
use crate::sessions::{prepare, Item, PrepareError};
use crate::tee::{Outcome, Scan, Tee};

/// Serves one call of `format`. The body is already read (and within the limit).
pub(crate) async fn call(
    proxy: Arc<Proxy>,
    parts: http::request::Parts,
    bytes: Bytes,
    format: WireFormat,
    started: Instant,
) -> Response<Body> {
    let shape = if format == WireFormat::Anthropic { Shape::Anthropic } else { Shape::OpenAi };
    let bad = |field: &str, message: &str| {
        error(shape, StatusCode::BAD_REQUEST, "invalid_request_error", &format!("{field}: {message}"))
    };
    let body = match ClientBody::parse(&bytes) {
        Ok(b) => b,
        Err(e) => return bad(&e.field, &e.message),
    };
    if format == WireFormat::OpenAi && body.system.is_some() {
        return bad("system", "not a field of OpenAI chat requests (send a system message)");
    }
    let mut opts = RequestOptions::new();
    for (k, v) in &body.fields {
        opts = match opts.field(k, v.get()) {
            Ok(o) => o,
            Err(e) => return bad(&e.field, &e.message),
        };
    }
    // The history as spans of the body and their digests: the blocking task below rebuilds
    // borrowed items from the (refcounted) body instead of copying 600 KB into owned strings.
    let system = body.system.map(|s| {
        let raw = system_message(s);
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
    let base = session_of(&parts.headers, format, &body);
    let sse = body.streams();

    // One call in flight per session: wait for the one before, bounded.
    let slot = proxy.sessions.slot(base);
    let guard = match tokio::time::timeout(proxy.cfg.session_wait, slot.lock_owned()).await {
        Ok(g) => g,
        Err(_) => {
            proxy.metrics.busy_passthrough.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(session = %base, "session busy past the wait: passing the request through unmodified");
            return crate::server::forward(&proxy, parts, full(bytes), false).await;
        }
    };
    let store = Arc::clone(&proxy.store);
    let config = proxy.cfg.engine.clone();
    let raw = bytes.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        let mut guard = guard;
        let mut items = Vec::with_capacity(spans.len() + 1);
        if let Some((raw, digest)) = &system {
            items.push(Item { raw: raw.as_bytes(), digest: *digest, index: None });
        }
        for (i, (span, digest)) in spans.iter().enumerate() {
            items.push(Item { raw: raw.get(span.clone()).unwrap_or_default(), digest: *digest, index: Some(i) });
        }
        let r = prepare(&mut guard, &store, base, format, &config, &items, &opts, ctxlog_now());
        (guard, r, opts)
    })
    .await;
    let (guard, mut prepared, opts) = match prepared {
        Ok((g, Ok(p), o)) => (g, p, o),
        Ok((_, Err(PrepareError::Invalid { field, message }), _)) => return bad(&field, &message),
        Ok((_, Err(PrepareError::Session(e)), _)) => {
            tracing::error!(session = %base, error = %e, "the session failed");
            return error(shape, StatusCode::INTERNAL_SERVER_ERROR, "api_error", &format!("ctxlog: {e}"));
        }
        Err(_) => {
            return error(shape, StatusCode::INTERNAL_SERVER_ERROR, "api_error", "ctxlog: the session task failed")
        }
    };
    use std::sync::atomic::Ordering::Relaxed;
    if prepared.compaction {
        proxy.metrics.compactions.fetch_add(1, Relaxed);
    }
    if prepared.diverged {
        proxy.metrics.diverged.fetch_add(1, Relaxed);
    }
    let stream = prepared.stream;
    // The new suffix is written while the call is on its way (the store's fsync off the
    // client's path); the slot is released only once it is written.
    let write = prepared.pending.take().map(|p| {
        let store = Arc::clone(&proxy.store);
        tokio::task::spawn_blocking(move || p.write(&*store))
    });
    let mut up = Request::builder().method(parts.method.clone()).uri(proxy.upstream_uri(&parts.uri));
    if let Some(h) = up.headers_mut() {
        *h = crate::headers::request(&parts.headers, true);
    }
    let Ok(up) = up.body(full(prepared.body)) else {
        release(guard, write);
        return error(shape, StatusCode::BAD_GATEWAY, "api_error", "ctxlog: cannot build the upstream request");
    };
    let before = started.elapsed();
    let sent = tokio::time::timeout(proxy.cfg.upstream_timeout, proxy.client.request(up)).await;
    let after = Instant::now();
    let resp = match sent {
        Ok(Ok(r)) => r,
        // The plan is dropped with the guard: nothing but the appended messages stays.
        Ok(Err(e)) => {
            proxy.metrics.aborted.fetch_add(1, Relaxed);
            release(guard, write);
            return error(shape, StatusCode::BAD_GATEWAY, "api_error", &format!("ctxlog: upstream unreachable: {e}"));
        }
        Err(_) => {
            proxy.metrics.aborted.fetch_add(1, Relaxed);
            release(guard, write);
            return error(
                shape,
                StatusCode::GATEWAY_TIMEOUT,
                "timeout_error",
                "ctxlog: the upstream did not answer in time",
            );
        }
    };
    let (up_parts, up_body) = resp.into_parts();
    let mut out = Response::builder().status(up_parts.status);
    if let Some(h) = out.headers_mut() {
        *h = crate::headers::response(&up_parts.headers);
        if let Ok(v) = stream.to_string().parse() {
            h.insert(crate::headers::stream_header(), v);
        }
    }
    let body: Body = if up_parts.status.is_success() {
        let sse = sse
            || up_parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
        let (tx, rx) = oneshot::channel();
        let tee = Tee::new(up_body, Scan::new(format == WireFormat::Anthropic, sse), proxy.cfg.upstream_timeout, tx);
        let plan = prepared.plan;
        let proxy2 = Arc::clone(&proxy);
        tokio::spawn(async move { settle(proxy2, guard, write, plan, opts, rx).await });
        tee.boxed()
    } else {
        release(guard, write);
        proxy.metrics.aborted.fetch_add(1, Relaxed);
        up_body.map_err(Into::into).boxed()
    };
    proxy.metrics.added(before + after.elapsed());
    out.body(body)
        .unwrap_or_else(|_| error(shape, StatusCode::BAD_GATEWAY, "api_error", "ctxlog: bad upstream headers"))
}

/// Commits the call when its answer completed, else drops the plan; the session's slot stays
/// locked until then, so the next call of the session plans after this one's commit.
async fn settle(
    proxy: Arc<Proxy>,
    mut guard: Guard,
    write: Option<Write>,
    plan: ctxlog::Plan,
    opts: RequestOptions,
    rx: oneshot::Receiver<Outcome>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let outcome = rx.await.unwrap_or(Outcome::Failed("the answer was dropped".into()));
    if !written(&mut guard, write).await {
        proxy.metrics.aborted.fetch_add(1, Relaxed);
        return;
    }
    match outcome {
        Outcome::Complete(usage) => {
            if let Some(u) = &usage {
                proxy.metrics.usage(u);
            }
            let at = ctxlog_now();
            let done = tokio::task::spawn_blocking(move || {
                let mut guard = guard;
                let r = guard.commit(plan, &opts, at, usage);
                (guard, r)
            })
            .await;
            match done {
                Ok((guard, Ok(()))) => {
                    proxy.metrics.committed.fetch_add(1, Relaxed);
                    // The session's summary jobs run before its next call plans.
                    crate::summaries::after_commit(&proxy.cfg.summaries, guard).await;
                }
                Ok((_, Err(e))) => tracing::error!(error = %e, "commit failed"),
                Err(_) => tracing::error!("commit task failed"),
            }
        }
        Outcome::Failed(why) => {
            proxy.metrics.aborted.fetch_add(1, Relaxed);
            tracing::warn!(%why, "call aborted: only its appended messages stay in the log");
            drop(plan);
            drop(guard);
        }
    }
}

type Guard = tokio::sync::OwnedMutexGuard<crate::sessions::Slot>;
type Write = tokio::task::JoinHandle<Result<ctxlog::Version, ctxlog::SessionError>>;

/// Waits for the pending append's write; when it failed the slot forgets its session (which
/// is ahead of its log) and the next request reopens it. Returns whether it was written.
async fn written(guard: &mut Guard, write: Option<Write>) -> bool {
    let Some(write) = write else { return true };
    let failed = match write.await {
        Ok(Ok(_)) => return true,
        Ok(Err(e)) => e.to_string(),
        Err(e) => format!("the write task failed: {e}"),
    };
    tracing::error!(error = %failed, "the request's new messages could not be written: the call is not committed");
    guard.reset();
    false
}

/// Releases the slot once the pending append is written (the call was not committed).
fn release(guard: Guard, write: Option<Write>) {
    if write.is_none() {
        return drop(guard);
    }
    tokio::spawn(async move {
        let mut guard = guard;
        written(&mut guard, write).await;
    });
}

fn ctxlog_now() -> ctxlog::Timestamp {
    ctxlog::Timestamp::from_system_time(std::time::SystemTime::now())
}

/// Reads a request body up to `limit` bytes; `None` when it is larger.
pub(crate) async fn read_limited(body: Incoming, limit: usize) -> Result<Option<Bytes>, String> {
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(c) => Ok(Some(c.to_bytes())),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}
