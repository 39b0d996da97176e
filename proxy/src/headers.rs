//! Which headers cross the proxy. Hop-by-hop headers (RFC 9110 §7.6.1) and those named in
//! `Connection` belong to one connection and are dropped both ways; `Host` and
//! `Content-Length` are set again for the forwarded request; ctxlog's own headers stop here.

use http::header::{self, HeaderMap, HeaderName};

const HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn named_by_connection(h: &HeaderMap) -> Vec<String> {
    h.get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

fn end_to_end(h: &HeaderMap, also_drop: &[&str]) -> HeaderMap {
    let named = named_by_connection(h);
    let mut out = HeaderMap::with_capacity(h.len());
    for (k, v) in h {
        let n = k.as_str();
        if HOP.contains(&n) || also_drop.contains(&n) || named.iter().any(|x| x == n) {
            continue;
        }
        out.append(k.clone(), v.clone());
    }
    out
}

/// Headers of a forwarded request. `rewrite`: the body is replaced (its length changes) and
/// the response must come back unencoded so its usage can be read.
pub(crate) fn request(h: &HeaderMap, rewrite: bool) -> HeaderMap {
    let own = [crate::SESSION_HEADER, crate::TOKEN_HEADER, "host"];
    if rewrite {
        let mut drop = own.to_vec();
        drop.extend(["content-length", "accept-encoding"]);
        end_to_end(h, &drop)
    } else {
        end_to_end(h, &own)
    }
}

/// Headers of an upstream response passed back.
pub(crate) fn response(h: &HeaderMap) -> HeaderMap {
    end_to_end(h, &[])
}

/// `x-ctxlog-stream`.
pub(crate) fn stream_header() -> HeaderName {
    HeaderName::from_static(crate::STREAM_HEADER)
}

/// `x-ctxlog-call`: the call's number in its stream (`ctxlog request --call N`).
pub(crate) fn call_header() -> HeaderName {
    HeaderName::from_static(crate::CALL_HEADER)
}

/// Where the call's stream forked, when it is a branch: `x-ctxlog-branch-of` (the parent
/// stream) and `x-ctxlog-fork-at` (the messages they share).
pub(crate) fn branch(fork: Option<crate::history::Fork>) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Some(f) = fork {
        if let Ok(v) = header::HeaderValue::from_str(&f.parent.to_string()) {
            h.insert(HeaderName::from_static(crate::BRANCH_OF_HEADER), v);
        }
        h.insert(HeaderName::from_static(crate::FORK_AT_HEADER), header::HeaderValue::from(f.at));
    }
    h
}

/// What ctxlog did to a call's request, for its client: `x-ctxlog-view-messages` and
/// `x-ctxlog-view-tokens` (what was sent), `x-ctxlog-edits` (ladder edits made by this call) and
/// `x-ctxlog-flushed` (1 when this call switched the view to prepared summaries).
pub(crate) fn what_was_done(plan: &ctxlog::Plan) -> HeaderMap {
    let edits = plan.events().iter().filter(|e| matches!(e, ctxlog::Event::Edited(_))).count();
    let flushed = plan.events().iter().any(|e| matches!(e, ctxlog::Event::Flushed(_)));
    let mut h = HeaderMap::new();
    for (name, v) in [
        ("x-ctxlog-view-messages", plan.view_messages),
        ("x-ctxlog-view-tokens", plan.view_tokens),
        ("x-ctxlog-edits", edits as u64),
        ("x-ctxlog-flushed", u64::from(flushed)),
    ] {
        h.insert(HeaderName::from_static(name), header::HeaderValue::from(v));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_hop_by_hop_and_own_headers() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-private"),
            ("x-private", "1"),
            ("transfer-encoding", "chunked"),
            ("x-api-key", "secret"),
            ("content-length", "10"),
            ("accept-encoding", "gzip"),
            ("x-ctxlog-token", "t"),
            ("x-ctxlog-session", "s"),
            ("host", "proxy"),
            ("anthropic-version", "2023-06-01"),
        ] {
            h.append(k, v.parse().unwrap());
        }
        let r = request(&h, true);
        let names: Vec<&str> = r.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["x-api-key", "anthropic-version"]);
        let p = request(&h, false);
        assert!(p.contains_key("content-length") && p.contains_key("accept-encoding"));
        assert!(!p.contains_key("x-private") && !p.contains_key("x-ctxlog-token"));
    }
}
