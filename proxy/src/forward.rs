//! The pass-through of a request the proxy does not manage (and of a `count_tokens` whose view
//! it forwards): sent upstream as it is, the answer streamed back. Apart from the server so the
//! routes that use it need not import the server that routes to them.

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;

use crate::reply::{error, Body, Shape};
use crate::shared::Proxy;

/// Sends a request upstream as it is (`rewrite`: its body was replaced) and streams the answer
/// back.
pub(crate) async fn forward(proxy: &Proxy, parts: http::request::Parts, body: Body, rewrite: bool) -> Response<Body> {
    let shape = Shape::of_path(parts.uri.path());
    let mut up = Request::builder().method(parts.method.clone()).uri(proxy.upstream_uri(&parts.uri));
    if let Some(h) = up.headers_mut() {
        *h = crate::headers::request(&parts.headers, rewrite);
    }
    let Ok(up) = up.body(body) else {
        return error(shape, StatusCode::BAD_GATEWAY, "api_error", "ctxlog: cannot build the upstream request");
    };
    match tokio::time::timeout(proxy.cfg.upstream_timeout, proxy.client.request(up)).await {
        Ok(Ok(resp)) => {
            let (p, b) = resp.into_parts();
            let mut out = Response::new(b.map_err(Into::into).boxed());
            *out.status_mut() = p.status;
            *out.headers_mut() = crate::headers::response(&p.headers);
            out
        }
        Ok(Err(e)) => error(shape, StatusCode::BAD_GATEWAY, "api_error", &format!("ctxlog: upstream unreachable: {e}")),
        Err(_) => {
            error(shape, StatusCode::GATEWAY_TIMEOUT, "timeout_error", "ctxlog: the upstream did not answer in time")
        }
    }
}
