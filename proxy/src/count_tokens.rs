//! `POST /v1/messages/count_tokens`, answered for the view the next call would send: the
//! client's history continues a known session, so the view (its new messages appended on a
//! copy, planned as a call would be) is what the upstream's `count_tokens` counts — the
//! provider's own count of what it will be sent, not ctxlog's estimate. Nothing is written and
//! the session is unchanged; a history ctxlog does not know (or one that diverged) is
//! forwarded as it is. `x-ctxlog-counted: view` or `request` tells which was counted.

use std::sync::Arc;

use bytes::Bytes;
use ctxlog::internal::breakpoints::{Origin, Placement};
use ctxlog::{RequestOptions, WireFormat};
use http::{HeaderName, HeaderValue, Response, StatusCode};

use crate::body::{ClientBody, Keys};
use crate::identity::{digest, session_of, system_message};
use crate::reply::{error, full, Body, Shape};
use crate::sessions::{preview, Item, PrepareError};
use crate::shared::Proxy;

/// Answers one `count_tokens` request (its body already read, within the limit).
pub(crate) async fn count(proxy: Arc<Proxy>, parts: http::request::Parts, bytes: Bytes) -> Response<Body> {
    let view = match view_body(&proxy, &parts, &bytes).await {
        Ok(v) => v,
        Err(e) => return e,
    };
    let counted = if view.is_some() { "view" } else { "request" };
    let body = view.map_or(bytes, Bytes::from);
    let mut resp = crate::forward::forward(&proxy, parts, full(body), true).await;
    resp.headers_mut().insert(HeaderName::from_static("x-ctxlog-counted"), HeaderValue::from_static(counted));
    resp
}

/// The body of the view to count, `None` to count the request as it is, or the client's error.
async fn view_body(
    proxy: &Arc<Proxy>,
    parts: &http::request::Parts,
    bytes: &Bytes,
) -> Result<Option<Vec<u8>>, Response<Body>> {
    let bad = |m: String| error(Shape::Anthropic, StatusCode::BAD_REQUEST, "invalid_request_error", &m);
    // A body ctxlog cannot read is the upstream's to refuse, in its own words.
    let Ok(body) = ClientBody::parse_as(bytes, Keys::MESSAGES) else { return Ok(None) };
    let mut opts = RequestOptions::new();
    for (k, v) in &body.fields {
        let Ok(o) = opts.field(k, v.get()) else { return Ok(None) };
        opts = o;
    }
    // Breakpoints do not count, and the logged ones may be more than 4: none are sent.
    let opts = opts.place_breakpoints(Placement { origin: Origin::Off, marks: Vec::new() });
    let base = session_of(&parts.headers, WireFormat::Anthropic, &body, &proxy.sessions.derived);
    let system = body.system.map(system_message);
    let start = bytes.as_ptr() as usize;
    let spans: Vec<std::ops::Range<usize>> = body
        .messages
        .iter()
        .map(|m| {
            let at = m.as_ptr() as usize - start;
            at..at + m.len()
        })
        .collect();
    let slot = proxy.sessions.slot(base);
    // A call in flight on the session: its view is about to change; wait for it like a call.
    let Ok(mut guard) = tokio::time::timeout(proxy.cfg.session_wait, Arc::clone(&slot).lock_owned()).await else {
        return Ok(None);
    };
    let store = Arc::clone(&proxy.store);
    let raw = bytes.clone();
    let done = tokio::task::spawn_blocking(move || {
        let mut items = Vec::with_capacity(spans.len() + 1);
        if let Some(s) = &system {
            items.push(Item { raw: s.as_bytes(), digest: digest(s.as_bytes()), index: None, keys: Keys::MESSAGES });
        }
        for (i, span) in spans.iter().enumerate() {
            let r = raw.get(span.clone()).unwrap_or_default();
            items.push(Item { raw: r, digest: digest(r), index: Some(i), keys: Keys::MESSAGES });
        }
        let now = ctxlog::Timestamp::from_system_time(std::time::SystemTime::now());
        preview(&mut guard, &store, base, WireFormat::Anthropic, &items, &opts, now)
    })
    .await;
    match done {
        Ok(Ok(view)) => Ok(view),
        Ok(Err(PrepareError::Invalid { field, message })) => Err(bad(format!("{field}: {message}"))),
        Ok(Err(e)) => {
            tracing::warn!(session = %base, error = %e, "count_tokens: the view could not be built; the request is counted as it is");
            Ok(None)
        }
        Err(_) => Ok(None),
    }
}
