//! Which session a request belongs to, and the digests its history is compared by.
//!
//! The API key enters only a SHA-256 (tagged, so the hash is useless for anything else); the
//! key itself is never stored or logged. Two tenants (keys) never share a session, even with
//! the same `x-ctxlog-session` header or the same prompt.

use std::collections::HashMap;
use std::sync::Mutex;

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

/// Every header a provider takes a credential in: Anthropic's `x-api-key`, the bearer token of
/// OpenAI and others, Azure's `api-key`, Google's `x-goog-api-key`.
const CREDENTIALS: [&str; 4] = ["x-api-key", "authorization", "api-key", "x-goog-api-key"];

/// The tagged hash of the caller's credentials: every credential header present with a
/// non-empty value (an empty one counts as absent), so two callers that differ in any
/// credential never share a session. A lone `x-api-key` or `Authorization` hashes as it always
/// did (sessions of earlier versions are found again); any other set hashes with the headers'
/// names under another tag.
pub(crate) fn key_hash(headers: &HeaderMap) -> [u8; 32] {
    let given: Vec<(&str, &[u8])> = CREDENTIALS
        .iter()
        .flat_map(|name| headers.get_all(*name).iter().map(move |v| (*name, v.as_bytes())))
        .filter(|(_, v)| !v.iter().all(|b| b.is_ascii_whitespace()))
        .collect();
    let mut h = Sha256::new();
    match given.as_slice() {
        [] => h.update(b"ctxlog-proxy api key\0"),
        [(name, v)] if *name == "x-api-key" || *name == "authorization" => {
            h.update(b"ctxlog-proxy api key\0");
            h.update(v);
        }
        all => {
            h.update(b"ctxlog-proxy credentials\0");
            for (name, v) in all {
                h.update((name.len() as u64).to_le_bytes());
                h.update(name.as_bytes());
                h.update((v.len() as u64).to_le_bytes());
                h.update(v);
            }
        }
    }
    h.finalize().into()
}

fn format_tag(format: WireFormat) -> &'static [u8] {
    match format {
        WireFormat::Anthropic => b"anthropic",
        WireFormat::OpenAiResponses => b"responses",
        WireFormat::Gemini => b"gemini",
        _ => b"openai",
    }
}

/// Derived lineage ids by the raw digest of what they are derived from, so a client that
/// keeps its spelling costs one xxh3 of its leading messages, not their canonical form.
#[derive(Default)]
pub(crate) struct Derived {
    known: Mutex<HashMap<u128, StreamId>>,
}

/// Entries [`Derived`] keeps before it starts again (an id is cheap to derive again).
const DERIVED_KEPT: usize = 16_384;

/// The lineage of a request: from `x-ctxlog-session` when given, else from the system prompt
/// and the leading messages up to the first user message in canonical form (a client that
/// re-serializes its history keeps its lineage); always under the key's hash.
pub(crate) fn session_of(headers: &HeaderMap, format: WireFormat, body: &ClientBody<'_>, ids: &Derived) -> StreamId {
    let key = key_hash(headers);
    if let Some(name) = headers.get(crate::SESSION_HEADER) {
        return id_of(&[b"named", &key, format_tag(format), name.as_bytes()]);
    }
    let mut leading: Vec<std::borrow::Cow<'_, str>> = Vec::new();
    if let Some(system) = body.system {
        leading.push(system_message(system).into());
    }
    for m in &body.messages {
        leading.push((*m).into());
        if role_of(m).as_deref() == Some("user") {
            break;
        }
    }
    let mut raw = xxhash_rust::xxh3::Xxh3::new();
    raw.update(&key);
    raw.update(format_tag(format));
    for l in &leading {
        raw.update(&(l.len() as u64).to_le_bytes());
        raw.update(l.as_bytes());
    }
    let raw = raw.digest128();
    let mut known = ids.known.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(id) = known.get(&raw) {
        return *id;
    }
    // A message that does not parse is refused later; its bytes stand for it meanwhile.
    let forms: Vec<[u8; 16]> = leading
        .iter()
        .map(|l| {
            ctxlog::internal::wire::parse_in(l, format)
                .map_or_else(|_| digest(l.as_bytes()), |m| crate::canonical::digest(&m))
        })
        .map(u128::to_le_bytes)
        .collect();
    let mut parts: Vec<&[u8]> = vec![b"derived v2", &key, format_tag(format)];
    parts.extend(forms.iter().map(|f| &f[..]));
    let id = id_of(&parts);
    if known.len() >= DERIVED_KEPT {
        known.clear();
    }
    known.insert(raw, id);
    id
}

/// The branch of `parent` forked after its first `at` messages whose first own message has
/// the canonical digest `first` (`None`: a branch whose history ends at the fork point, for a
/// client that took messages back and asks again). Derived, never random, so every proxy
/// sharing the store finds the same branch for the same history; the canonical form is
/// therefore part of the log format ("canonical form v1").
pub(crate) fn branch_of(parent: StreamId, at: u64, first: Option<u128>) -> StreamId {
    match first {
        Some(d) => id_of(&[b"branch v1", parent.0.as_bytes(), &at.to_le_bytes(), &d.to_le_bytes()]),
        None => id_of(&[b"branch v1 ends", parent.0.as_bytes(), &at.to_le_bytes()]),
    }
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
        let a = session_of(&headers(&[("x-api-key", "k1")]), WireFormat::Anthropic, &body, &Derived::default());
        let a2 = session_of(&headers(&[("x-api-key", "k1")]), WireFormat::Anthropic, &body, &Derived::default());
        let b2 = session_of(&headers(&[("x-api-key", "k2")]), WireFormat::Anthropic, &body, &Derived::default());
        assert_eq!(a, a2);
        assert_ne!(a, b2);
        let n1 = session_of(
            &headers(&[("x-api-key", "k1"), ("x-ctxlog-session", "x")]),
            WireFormat::Anthropic,
            &body,
            &Derived::default(),
        );
        let n2 = session_of(
            &headers(&[("x-api-key", "k2"), ("x-ctxlog-session", "x")]),
            WireFormat::Anthropic,
            &body,
            &Derived::default(),
        );
        assert_ne!(n1, n2);
        assert_ne!(n1, a);
    }

    #[test]
    fn every_credential_header_separates_tenants() {
        let b = br#"{"messages":[{"role":"user","content":"hi"}]}"#;
        let body = ClientBody::parse(b).unwrap();
        let id = |h: &[(&'static str, &'static str)]| {
            session_of(&headers(h), WireFormat::OpenAi, &body, &Derived::default())
        };
        let tenants = [
            id(&[("x-api-key", "k1")]),
            id(&[("x-api-key", "k2")]),
            id(&[("authorization", "Bearer k1")]),
            id(&[("authorization", "Bearer k2")]),
            id(&[("api-key", "k1")]),
            id(&[("api-key", "k2")]),
            id(&[("x-goog-api-key", "k1")]),
            id(&[("x-goog-api-key", "k2")]),
            id(&[]),
        ];
        let distinct: std::collections::BTreeSet<_> = tenants.iter().collect();
        assert_eq!(distinct.len(), tenants.len(), "two credentials shared a session");
        // An empty `x-api-key` beside a bearer token is no credential: the token decides.
        let empty_beside = |bearer| id(&[("x-api-key", ""), ("authorization", bearer)]);
        assert_ne!(empty_beside("Bearer k1"), empty_beside("Bearer k2"));
        assert_eq!(empty_beside("Bearer k1"), id(&[("authorization", "Bearer k1")]));
    }

    #[test]
    fn later_turns_keep_the_derived_id() {
        let first = br#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}]}"#;
        let later = br#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":"more"}]}"#;
        let h = headers(&[("authorization", "Bearer k")]);
        let id = |b: &[u8]| session_of(&h, WireFormat::OpenAi, &ClientBody::parse(b).unwrap(), &Derived::default());
        assert_eq!(id(first), id(later));
        let other = br#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"bye"}]}"#;
        assert_ne!(id(first), id(other));
        // Respelled (keys, separators, a breakpoint): the same lineage.
        let respelled = br#"{"messages":[{"content":"s","role":"system"}, {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]}"#;
        assert_eq!(id(first), id(respelled));
    }
}
