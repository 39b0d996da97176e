//! `POST /v1/responses/compact`: the client asks the provider to compact its history (OpenAI
//! returns a shorter one, the user messages and an opaque `compaction` item, which the client
//! sends from then on). The provider compacts what the client holds, so the body is forwarded
//! as it came; the exchange is recorded in the conversation's session as `ProviderCompacted`
//! (its model, items in and out, response id, usage) *before* the client gets the answer, and
//! when it cannot be recorded the client gets a 503 instead (nothing the client holds is
//! missing from the log). `replay` shows it after the call it follows.
//!
//! The session is the one a `/v1/responses` call with the same body would continue (derived or
//! named; a `previous_response_id` chain's); a conversation the proxy has not seen yet gets a
//! session holding only this record. A refused compaction is relayed as it came and recorded
//! nowhere (no call of the engine was planned for it).

use std::sync::Arc;

use bytes::Bytes;
use ctxlog::event::ProviderCompacted;
use ctxlog::{Session, StreamId, Usage, WireFormat};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;

use crate::body::{ClientBody, Keys};
use crate::reply::{error, full, unavailable, Body, Shape};
use crate::shared::Proxy;

/// The compaction endpoint's path.
pub(crate) const PATH: &str = "/v1/responses/compact";

/// Serves one `/v1/responses/compact` (the body is read, within the limit).
pub(crate) async fn compact(proxy: Arc<Proxy>, parts: http::request::Parts, bytes: Bytes) -> Response<Body> {
    let shape = Shape::Responses;
    let bad = |m: String| error(shape, StatusCode::BAD_REQUEST, "invalid_request_error", &m);
    // The history as a `/v1/responses` call would send it (a string `input` is one user item).
    let rewritten = match ClientBody::parse_as(&bytes, Keys::RESPONSES) {
        Ok(b) => crate::responses::with_items(&b),
        Err(e) => return bad(format!("{}: {}", e.field, e.message)),
    };
    let as_items = rewritten.map_or_else(|| bytes.clone(), Bytes::from);
    let body = match ClientBody::parse_as(&as_items, Keys::RESPONSES) {
        Ok(b) => b,
        Err(e) => return bad(format!("{}: {}", e.field, e.message)),
    };
    let tenant = crate::identity::key_hash(&parts.headers);
    let base = match crate::responses::previous_of(&body) {
        Some(p) => proxy.chains.session_of(&tenant, &p),
        None => {
            crate::identity::session_of(&parts.headers, WireFormat::OpenAiResponses, &body, &proxy.sessions.derived)
        }
    };
    let model = body.fields.iter().find(|(k, _)| *k == "model").and_then(|(_, v)| serde_json::from_str(v.get()).ok());
    let input_items = body.messages.len() as u64;
    let name = parts.headers.get(crate::SESSION_HEADER).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());

    let mut up = Request::builder().method(parts.method.clone()).uri(proxy.upstream_uri(&parts.uri));
    if let Some(h) = up.headers_mut() {
        *h = crate::headers::request(&parts.headers, false);
    }
    let Ok(up) = up.body(full(bytes)) else {
        return error(shape, StatusCode::BAD_GATEWAY, "api_error", "ctxlog: cannot build the upstream request");
    };
    let resp = match tokio::time::timeout(proxy.cfg.upstream_timeout, proxy.client.request(up)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            return error(shape, StatusCode::BAD_GATEWAY, "api_error", &format!("ctxlog: upstream unreachable: {e}"))
        }
        Err(_) => {
            return error(
                shape,
                StatusCode::GATEWAY_TIMEOUT,
                "timeout_error",
                "ctxlog: the upstream did not answer in time",
            )
        }
    };
    let (up_parts, up_body) = resp.into_parts();
    let answer = match tokio::time::timeout(proxy.cfg.upstream_timeout, up_body.collect()).await {
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(e)) => {
            return error(shape, StatusCode::BAD_GATEWAY, "api_error", &format!("ctxlog: the answer was cut: {e}"))
        }
        Err(_) => return error(shape, StatusCode::GATEWAY_TIMEOUT, "timeout_error", "ctxlog: the answer stalled"),
    };
    let mut headers = crate::headers::response(&up_parts.headers);
    let relay = |status, headers, answer: Bytes| {
        let mut out = Response::new(full(answer));
        *out.status_mut() = status;
        *out.headers_mut() = headers;
        out
    };
    if !up_parts.status.is_success() {
        return relay(up_parts.status, headers, answer);
    }
    let v: serde_json::Value = match serde_json::from_slice(&answer) {
        Ok(v) => v,
        Err(_) => return error(shape, StatusCode::BAD_GATEWAY, "api_error", "ctxlog: the answer is not JSON"),
    };
    let record = ProviderCompacted {
        at: ctxlog::Timestamp::from_system_time(std::time::SystemTime::now()).as_millis(),
        endpoint: PATH.to_owned(),
        model,
        response_id: v.get("id").and_then(|i| i.as_str()).map(str::to_owned),
        input_items,
        output_items: v.get("output").and_then(|o| o.as_array()).map_or(0, |o| o.len() as u64),
        usage: v.get("usage").and_then(|u| Usage::from_openai_responses(u).ok()),
    };
    match record_in(&proxy, base, name, record).await {
        Ok(stream) => {
            headers.remove(http::header::CONTENT_LENGTH);
            if let Ok(v) = stream.to_string().parse() {
                headers.insert(crate::headers::stream_header(), v);
            }
            relay(up_parts.status, headers, answer)
        }
        Err(why) => {
            tracing::error!(session = %base, error = %why, "a provider compaction could not be recorded");
            unavailable(shape, &format!("ctxlog: the compaction arrived but could not be recorded: {why}"), 1)
        }
    }
}

/// Why a provider compaction could not be recorded (the client gets a 503 saying it).
#[derive(Debug, thiserror::Error)]
enum RecordError {
    #[error("the session is busy with another call past --session-wait; retry")]
    Busy,
    #[error("another proxy holds the session; retry")]
    Leased,
    #[error("the session left memory")]
    Gone,
    #[error("the recording task failed")]
    Task,
    #[error(transparent)]
    Store(#[from] ctxlog::StoreError),
    #[error(transparent)]
    Session(#[from] ctxlog::SessionError),
}

/// Writes `record` to the lineage `base`'s current session (opened, or created when the
/// conversation is new), under its slot and lease; returns the stream written to.
async fn record_in(
    proxy: &Arc<Proxy>,
    base: StreamId,
    name: Option<String>,
    record: ProviderCompacted,
) -> Result<StreamId, RecordError> {
    let slot = proxy.sessions.slot(base);
    let Ok(mut guard) = tokio::time::timeout(proxy.cfg.session_wait, slot.lock_owned()).await else {
        return Err(RecordError::Busy);
    };
    let store = Arc::clone(&proxy.store);
    let config = proxy.cfg.engine.clone();
    let done = tokio::task::spawn_blocking(move || {
        let _lease = match store.try_lease(base) {
            Ok(Some(lease)) => lease,
            Ok(None) => return Err(RecordError::Leased),
            Err(e) => return Err(e.into()),
        };
        if guard.session_mut().is_none() {
            let s = match Session::open(Arc::clone(&store), base) {
                Ok(s) => s,
                Err(ctxlog::SessionError::NotFound(_)) => {
                    let now = ctxlog::Timestamp::from_system_time(std::time::SystemTime::now());
                    let format = WireFormat::OpenAiResponses;
                    Session::create_named(Arc::clone(&store), base, format, config, now, name, Vec::new())
                        .map(|(s, _)| s)?
                }
                Err(e) => return Err(e.into()),
            };
            guard.set_session(s);
        }
        let Some(s) = guard.session_mut() else { return Err(RecordError::Gone) };
        s.catch_up()?;
        let id = s.id();
        match s.record_provider_compaction(record) {
            Ok(_) => Ok(id),
            Err(e) => {
                // The write may or may not have landed: the next call reopens from the store.
                guard.reset();
                Err(e.into())
            }
        }
    })
    .await;
    done.unwrap_or(Err(RecordError::Task))
}
