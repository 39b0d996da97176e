//! A client history after a provider's compaction (an Anthropic `compaction` block, a
//! Responses `compaction` item): the provider reads it as the summary of everything before it,
//! so the client may stop sending what came before. That is a continuation, not a divergence:
//!
//! * [`align`] lines such a history up with the log — the client's items up to the compaction
//!   are the log's first ones (the system prompt or instructions, the messages the client
//!   kept), then it jumps to the logged compaction; the messages it skipped stand in with their
//!   logged digests (or their logged bodies, after a reopen), so the comparison by digests and
//!   the append of the new suffix go on as for a whole history.
//! * [`Aliases`] finds the session of a derived id again: such a history no longer starts with
//!   the messages its id was derived from, so each compaction seen in an answer is remembered
//!   (in memory: after a restart, a named session `x-ctxlog-session` still continues, a derived
//!   one starts again) with the session it belongs to.

use std::collections::HashMap;
use std::sync::Mutex;

use ctxlog::{Message, Session, StreamId, WireFormat};
use serde_json::Value;

use crate::identity::digest;
use crate::item::{Item, PrepareError, Store};

/// The payload of a provider compaction in one raw message or item (`encrypted_content` of a
/// Responses item, `content` of an Anthropic block); a cheap byte test first.
pub(crate) fn payload(raw: &[u8]) -> Option<String> {
    memchr::memmem::find(raw, b"compaction")?;
    let v: Value = serde_json::from_slice(raw).ok()?;
    let of = |o: &Value| {
        (o.get("type").and_then(Value::as_str) == Some("compaction"))
            .then(|| o.get("encrypted_content").or_else(|| o.get("content")).map(Value::to_string))
            .flatten()
    };
    of(&v).or_else(|| v.get("content")?.as_array()?.iter().find_map(of))
}

/// Compactions seen in answers, by tenant and payload, with the session they belong to.
#[derive(Default)]
pub(crate) struct Aliases {
    /// By tenant and payload: the session's base id, and how many messages its log held when
    /// the answer came (the answer's items follow them).
    map: Mutex<HashMap<u128, (StreamId, u64)>>,
}

/// A compaction the proxy relayed in an answer: the messages logged before that answer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Answered {
    pub logged: u64,
}

/// Aliases kept before the oldest are forgotten.
const ALIASES_KEPT: usize = 100_000;

fn key_of(tenant: &[u8; 32], payload: &str) -> u128 {
    let mut b = tenant.to_vec();
    b.extend_from_slice(payload.as_bytes());
    digest(&b)
}

impl Aliases {
    /// Remembers that a compaction with `payload` was answered in the session of `base`.
    pub fn remember(&self, tenant: &[u8; 32], payload: &str, base: StreamId, logged: u64) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= ALIASES_KEPT {
            map.clear();
        }
        map.insert(key_of(tenant, payload), (base, logged));
    }

    fn get(&self, tenant: &[u8; 32], raw: &[u8]) -> Option<(StreamId, u64)> {
        let p = payload(raw)?;
        self.map.lock().unwrap_or_else(|p| p.into_inner()).get(&key_of(tenant, &p)).copied()
    }

    /// The session of a history that starts (after its system prompt) with a compaction.
    pub fn resolve(&self, tenant: &[u8; 32], first: &[u8]) -> Option<StreamId> {
        self.get(tenant, first).map(|(base, _)| base)
    }

    /// The relayed answer that brought the first compaction among a history's leading items.
    pub fn answered(&self, tenant: &[u8; 32], base: StreamId, leading: &[&str]) -> Option<Answered> {
        leading
            .iter()
            .find_map(|m| self.get(tenant, m.as_bytes()).filter(|(b, _)| *b == base))
            .map(|(_, logged)| Answered { logged })
    }
}

/// The payloads of the compactions in an answer (its raw message, or a Responses answer's
/// output items).
pub(crate) fn in_answer(format: WireFormat, answer: &str) -> Vec<String> {
    match format {
        WireFormat::OpenAiResponses => crate::answer::answer_parts(answer)
            .map(|(_, items)| items.iter().filter_map(|i| payload(i.as_bytes())).collect())
            .unwrap_or_default(),
        _ => payload(answer.as_bytes()).into_iter().collect(),
    }
}

/// Stand-ins for the logged messages a client skipped: at `at` in its history, the raw bytes
/// and digest of each.
pub(crate) struct Skipped {
    pub at: usize,
    pub items: Vec<(Vec<u8>, u128)>,
}

impl Skipped {
    /// `items` with the stand-ins in place.
    pub fn apply<'a>(&'a self, items: &[Item<'a>]) -> Vec<Item<'a>> {
        let (head, tail) = items.split_at(self.at.min(items.len()));
        let keys = items.first().map_or(crate::body::Keys::MESSAGES, |i| i.keys);
        let fill = self.items.iter().map(|(raw, d)| Item { raw, digest: *d, index: None, keys });
        head.iter().copied().chain(fill).chain(tail.iter().copied()).collect()
    }
}

/// When the client's history skips logged messages before a logged provider compaction, the
/// stand-ins that line it up with the log (`None`: it does not, compare it as it is).
pub(crate) fn align(
    s: &Session<Store>,
    digests: &[u128],
    items: &[Item<'_>],
    answered: Option<Answered>,
) -> Result<Option<Skipped>, PrepareError> {
    let logged = s.state().provider_compactions();
    if logged.is_empty() && answered.is_none() {
        return Ok(None);
    }
    let format = s.format();
    // The client's first item carrying a compaction, and the logged one it is.
    let Some((j, client)) = items.iter().enumerate().find_map(|(j, it)| {
        payload(it.raw)?;
        let m = std::str::from_utf8(it.raw).ok().and_then(|t| ctxlog::internal::wire::parse_in(t, format).ok())?;
        Some((j, m))
    }) else {
        return Ok(None);
    };
    // Logged as a message (a whole history brought it), or the answer of a call: its items
    // would have followed the messages logged then.
    let in_log = logged.into_iter().find(|seq| {
        s.state().shown(*seq).is_some_and(|m| same(&client, m)) && usize::try_from(*seq).is_ok_and(|k| k > j)
    });
    let Some(k) = in_log.or(answered.map(|a| a.logged)).filter(|k| *k > j as u64 && *k <= s.state().message_count())
    else {
        return Ok(None);
    };
    let (from, to) = (j as u64, k);
    // Known digests stand in as they are; otherwise the logged bodies, compared by content.
    let stand_ins = match digests.get(j..usize::try_from(k).unwrap_or(usize::MAX)) {
        Some(known) => known.iter().map(|d| (Vec::new(), *d)).collect(),
        None => s
            .messages(from..to)
            .map_err(PrepareError::from)?
            .iter()
            .map(|m| {
                let (json, _) = ctxlog::internal::wire::to_json_in(format, m, refs());
                let d = digest(json.as_bytes());
                (json.into_bytes(), d)
            })
            .collect(),
    };
    Ok(Some(Skipped { at: j, items: stand_ins }))
}

fn refs() -> ctxlog::internal::wire::RenderOpts<'static> {
    ctxlog::internal::wire::RenderOpts { meta: false, media: ctxlog::internal::wire::Media::Refs }
}

fn same(client: &Message, logged: &Message) -> bool {
    client == logged
}
