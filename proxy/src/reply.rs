//! Response bodies and the errors the proxy itself answers, in the provider's error shape.

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};

/// Boxed error of the bodies the proxy moves.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The one body type the proxy sends and answers with.
pub(crate) type Body = BoxBody<Bytes, BoxError>;

/// A complete body.
pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

/// Which provider's error shape an answer takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// `{"type":"error","error":{"type":..,"message":..}}`
    Anthropic,
    /// `{"error":{"message":..,"type":..,"code":..}}`
    OpenAi,
    /// OpenAI's, with Responses' stream events (`event: error`).
    Responses,
    /// Google's `{"error":{"code":..,"message":..,"status":..}}`.
    Gemini,
}

impl Shape {
    /// The shape of a path's provider (OpenAI's for everything not under `/v1/messages`).
    pub fn of_path(path: &str) -> Shape {
        if path.starts_with("/v1/messages") {
            Shape::Anthropic
        } else if path.starts_with("/v1/responses") {
            Shape::Responses
        } else if path.starts_with("/v1beta/") || crate::gemini::method_of(path).is_some() {
            // `/v1/models/{model}:generateContent` is Gemini's; `/v1/models/gpt-4o` OpenAI's.
            Shape::Gemini
        } else {
            Shape::OpenAi
        }
    }
}

/// An error answered by the proxy. `kind` is Anthropic's error type (OpenAI's `code`).
pub(crate) fn error(shape: Shape, status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    let message = serde_json::Value::String(message.to_owned());
    let body = match shape {
        Shape::Anthropic => format!(r#"{{"type":"error","error":{{"type":"{kind}","message":{message}}}}}"#),
        Shape::OpenAi | Shape::Responses => {
            let ty = if status.is_server_error() { "server_error" } else { "invalid_request_error" };
            format!(r#"{{"error":{{"message":{message},"type":"{ty}","code":"{kind}"}}}}"#)
        }
        Shape::Gemini => {
            format!(
                r#"{{"error":{{"code":{},"message":{message},"status":"{}"}}}}"#,
                status.as_u16(),
                google_status(status)
            )
        }
    };
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    r
}

/// The answer when ctxlog cannot keep its promise for this call right now (the store cannot
/// write, the session stays busy): nothing was forwarded, and the client should retry after
/// `retry_after` seconds. Anthropic's 529 `overloaded_error`, OpenAI's 503: the status both
/// official SDKs retry on their own.
pub(crate) fn unavailable(shape: Shape, message: &str, retry_after: u32) -> Response<Body> {
    let mut r = match shape {
        Shape::Anthropic => {
            let status = StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            error(shape, status, "overloaded_error", message)
        }
        Shape::OpenAi | Shape::Responses | Shape::Gemini => {
            error(shape, StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", message)
        }
    };
    r.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from(retry_after));
    r
}

/// The SSE event that ends a stream whose call could not be recorded, in place of its final
/// event: the client's SDK raises it as an error instead of returning an answer the log lacks.
pub(crate) fn stream_error(shape: Shape, message: &str) -> Bytes {
    let message = serde_json::Value::String(message.to_owned());
    match shape {
        Shape::Anthropic => format!(
            "event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":{message}}}}}\n\n"
        )
        .into(),
        Shape::OpenAi => format!(
            "data: {{\"error\":{{\"message\":{message},\"type\":\"server_error\",\"code\":\"ctxlog_not_recorded\"}}}}\n\n"
        )
        .into(),
        // In place of `response.completed`: the SDKs raise an `error` event.
        Shape::Responses => format!(
            "event: error\ndata: {{\"type\":\"error\",\"code\":\"ctxlog_not_recorded\",\"message\":{message},\"param\":null}}\n\n"
        )
        .into(),
        // In place of the chunk with `finishReason`: an error object, as Google ends a stream.
        Shape::Gemini => {
            format!("data: {{\"error\":{{\"code\":503,\"message\":{message},\"status\":\"UNAVAILABLE\"}}}}\r\n\r\n").into()
        }
    }
}

/// Google's canonical status name of an HTTP status.
fn google_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 413 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        503 | 529 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        s if s >= 500 => "INTERNAL",
        _ => "FAILED_PRECONDITION",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn json(r: Response<Body>) -> serde_json::Value {
        let b = r.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&b).unwrap()
    }

    #[tokio::test]
    async fn provider_shapes() {
        let a = json(error(Shape::Anthropic, StatusCode::PAYLOAD_TOO_LARGE, "request_too_large", "too \"big\"")).await;
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "request_too_large");
        assert_eq!(a["error"]["message"], "too \"big\"");
        let o = json(error(Shape::OpenAi, StatusCode::BAD_REQUEST, "invalid_message", "m")).await;
        let g = json(error(Shape::Gemini, StatusCode::BAD_REQUEST, "invalid_request_error", "contents: x")).await;
        assert_eq!(
            g,
            serde_json::json!({"error": {"code": 400, "message": "contents: x", "status": "INVALID_ARGUMENT"}})
        );
        assert_eq!(Shape::of_path("/v1/models/gemini-2.5-flash:generateContent"), Shape::Gemini);
        assert_eq!(Shape::of_path("/v1/models/gpt-4o"), Shape::OpenAi);
        assert_eq!(o["error"]["code"], "invalid_message");
        assert_eq!(o["error"]["type"], "invalid_request_error");
        assert_eq!(o["error"]["message"], "m");
    }
}
