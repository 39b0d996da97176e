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
}

impl Shape {
    /// The shape of a path's provider (OpenAI's for everything not under `/v1/messages`).
    pub fn of_path(path: &str) -> Shape {
        if path.starts_with("/v1/messages") {
            Shape::Anthropic
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
        Shape::OpenAi => {
            let ty = if status.is_server_error() { "server_error" } else { "invalid_request_error" };
            format!(r#"{{"error":{{"message":{message},"type":"{ty}","code":"{kind}"}}}}"#)
        }
    };
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    r
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
        assert_eq!(o["error"]["code"], "invalid_message");
        assert_eq!(o["error"]["type"], "invalid_request_error");
        assert_eq!(o["error"]["message"], "m");
    }
}
