//! `POST /v1/messages` and `POST /v1/chat/completions`: the history is logged, the planned
//! view forwarded, the answer streamed back and the call committed when it ends.

use std::borrow::Cow;
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
    let mut items = Vec::with_capacity(body.messages.len() + 1);
    if let Some(system) = body.system {
        let raw = system_message(system);
        items.push(Item { digest: digest(raw.as_bytes()), raw: Cow::Owned(raw), field: "system".into() });
    }
    for (i, m) in body.messages.iter().enumerate() {
        items.push(Item {
            raw: Cow::Borrowed(m.get()),
            digest: digest(m.get().as_bytes()),
            field: format!("messages[{i}]"),
        });
    }
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
    let items: Vec<Item<'static>> = items
        .into_iter()
        .map(|i| Item { raw: Cow::Owned(i.raw.into_owned()), digest: i.digest, field: i.field })
        .collect();
    let prepared = tokio::task::spawn_blocking(move || {
        let mut guard = guard;
        let r = prepare(&mut guard, &store, base, format, &config, &items, &opts, ctxlog_now());
        (guard, r)
    })
    .await;
    let (guard, prepared) = match prepared {
        Ok((g, Ok(p))) => (g, p),
        Ok((_, Err(PrepareError::Invalid { field, message }))) => return bad(&field, &message),
        Ok((_, Err(PrepareError::Session(e)))) => {
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
    let mut up = Request::builder().method(parts.method.clone()).uri(proxy.upstream_uri(&parts.uri));
    if let Some(h) = up.headers_mut() {
        *h = crate::headers::request(&parts.headers, true);
    }
    let Ok(up) = up.body(full(prepared.body)) else {
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
            return error(shape, StatusCode::BAD_GATEWAY, "api_error", &format!("ctxlog: upstream unreachable: {e}"));
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
        tokio::spawn(async move { settle(proxy2, guard, plan, rx).await });
        tee.boxed()
    } else {
        drop(guard);
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
    guard: tokio::sync::OwnedMutexGuard<crate::sessions::Slot>,
    plan: ctxlog::Plan,
    rx: oneshot::Receiver<Outcome>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let outcome = rx.await.unwrap_or(Outcome::Failed("the answer was dropped".into()));
    match outcome {
        Outcome::Complete(usage) => {
            if let Some(u) = &usage {
                proxy.metrics.usage(u);
            }
            let at = ctxlog_now();
            let done = tokio::task::spawn_blocking(move || {
                let mut guard = guard;
                guard.commit(plan, at, usage)
            })
            .await;
            match done {
                Ok(Ok(())) => {
                    proxy.metrics.committed.fetch_add(1, Relaxed);
                }
                Ok(Err(e)) => tracing::error!(error = %e, "commit failed"),
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
