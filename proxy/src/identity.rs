//! Which session a request belongs to, and the digests its history is compared by.
//!
//! The API key enters only a SHA-256 (tagged, so the hash is useless for anything else); the
//! key itself is never stored or logged. Two tenants (keys) never share a session, even with
//! the same `x-ctxlog-session` header or the same prompt.

use ctxlog::{StreamId, WireFormat};
use http::HeaderMap;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::body::{role_of, ClientBody};

/// Digest of one history item's raw JSON bytes (xxh3-128: fast enough for 150k tokens per
/// request; collisions only matter inside one tenant's own session).
pub(crate) fn digest(raw: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(raw)
}

fn id_of(parts: &[&[u8]]) -> StreamId {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    let d = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    StreamId(uuid::Builder::from_custom_bytes(b).into_uuid())
}

/// The tagged hash of the caller's credentials (`x-api-key`, else `Authorization`).
fn key_hash(headers: &HeaderMap) -> [u8; 32] {
    let key = headers.get("x-api-key").or_else(|| headers.get(http::header::AUTHORIZATION));
    let mut h = Sha256::new();
    h.update(b"ctxlog-proxy api key\0");
    h.update(key.map(|v| v.as_bytes()).unwrap_or_default());
    h.finalize().into()
}

fn format_tag(format: WireFormat) -> &'static [u8] {
    match format {
        WireFormat::Anthropic => b"anthropic",
        _ => b"openai",
    }
}

/// The session of a request: from `x-ctxlog-session` when given, else from the system prompt
/// and the leading messages up to the first user message; always under the key's hash.
pub(crate) fn session_of(headers: &HeaderMap, format: WireFormat, body: &ClientBody<'_>) -> StreamId {
    let key = key_hash(headers);
    if let Some(name) = headers.get(crate::SESSION_HEADER) {
        return id_of(&[b"named", &key, format_tag(format), name.as_bytes()]);
    }
    let mut parts: Vec<&[u8]> = vec![b"derived", &key, format_tag(format)];
    if let Some(system) = body.system {
        parts.push(system.get().as_bytes());
    }
    for m in &body.messages {
        parts.push(m.as_bytes());
        if role_of(m).as_deref() == Some("user") {
            break;
        }
    }
    id_of(&parts)
}

/// The session that continues `old` after its history diverged.
pub(crate) fn successor_of(old: StreamId) -> StreamId {
    id_of(&[b"successor", old.0.as_bytes()])
}

/// An Anthropic top-level `system` value as the system message the log keeps.
pub(crate) fn system_message(system: &RawValue) -> String {
    format!(r#"{{"role":"system","content":{}}}"#, system.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn tenants_never_share_a_session() {
        let b = br#"{"system":"s","messages":[{"role":"user","content":"hi"}]}"#;
        let body = ClientBody::parse(b).unwrap();
        let a = session_of(&headers(&[("x-api-key", "k1")]), WireFormat::Anthropic, &body);
        let a2 = session_of(&headers(&[("x-api-key", "k1")]), WireFormat::Anthropic, &body);
        let b2 = session_of(&headers(&[("x-api-key", "k2")]), WireFormat::Anthropic, &body);
        assert_eq!(a, a2);
        assert_ne!(a, b2);
        let n1 = session_of(&headers(&[("x-api-key", "k1"), ("x-ctxlog-session", "x")]), WireFormat::Anthropic, &body);
        let n2 = session_of(&headers(&[("x-api-key", "k2"), ("x-ctxlog-session", "x")]), WireFormat::Anthropic, &body);
        assert_ne!(n1, n2);
        assert_ne!(n1, a);
    }

    #[test]
    fn later_turns_keep_the_derived_id() {
        let first = br#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}]}"#;
        let later = br#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":"more"}]}"#;
        let h = headers(&[("authorization", "Bearer k")]);
        let id = |b: &[u8]| session_of(&h, WireFormat::OpenAi, &ClientBody::parse(b).unwrap());
        assert_eq!(id(first), id(later));
        let other = br#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"bye"}]}"#;
        assert_ne!(id(first), id(other));
    }
}
