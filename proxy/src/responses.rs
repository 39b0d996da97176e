//! What `POST /v1/responses` needs beyond the other two routes.
//!
//! * A string `input` is one user message: the body is rewritten with it as an item list, so
//!   the rest of the route sees items only.
//! * `instructions` are logged as a system message tagged `"type":"instructions"` (the view
//!   writes them back to the field).
//! * `previous_response_id`: the provider holds the history, so ctxlog cannot decide what the
//!   model sees. The call goes to a session of its own chain (found by the response id it
//!   continues), created with `ProviderHeldHistory` raised and knobs that never compact; the
//!   previous answer's items (known from its commit) and the new input are appended, durable
//!   before the forward, the client's body is forwarded byte for byte, and the answer is
//!   committed as on the other routes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ctxlog::event::GuardKind;
use ctxlog::{Config, RequestOptions, Session, StreamId, Timestamp, WireFormat};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::body::ClientBody;
use crate::item::{Item, PrepareError, Store};
use crate::sessions::{Prepared, Slot};

/// The `previous_response_id` of a request, if it continues a stored response.
pub(crate) fn previous_of(body: &ClientBody<'_>) -> Option<String> {
    let (_, raw) = body.fields.iter().find(|(k, _)| *k == "previous_response_id")?;
    serde_json::from_str::<Option<String>>(raw.get()).ok().flatten()
}

/// The body with a string `input` made one user message item (`None`: it has items already).
pub(crate) fn with_items(body: &ClientBody<'_>) -> Option<Vec<u8>> {
    let text = body.text_input?;
    let mut out = format!(r#"{{"input":[{{"role":"user","content":{}}}]"#, text.get());
    for (k, v) in &body.fields {
        out.push(',');
        out.push_str(&serde_json::Value::String((*k).to_owned()).to_string());
        out.push(':');
        out.push_str(v.get());
    }
    if let Some(i) = body.system {
        out.push_str(r#","instructions":"#);
        out.push_str(i.get());
    }
    out.push('}');
    Some(out.into_bytes())
}

/// The `instructions` value as the message the log keeps.
pub(crate) fn instructions_message(instructions: &RawValue) -> String {
    format!(r#"{{"type":"instructions","role":"system","content":{}}}"#, instructions.get())
}

/// Which chain each answered response belongs to, and its output items until the chain's next
/// call logs them (in memory: after a restart, a chain goes on in a new session).
#[derive(Default)]
pub(crate) struct Chains {
    map: Mutex<HashMap<String, Link>>,
}

/// By response id: the chain's session (`None`: the response came from a call with the whole
/// history, so a chain continuing it starts a session of its own) and its output items, until
/// the chain's next call logs them.
type Link = (Option<StreamId>, Option<Vec<String>>);

/// Chains remembered before the oldest are forgotten (a response id is a few dozen bytes).
const CHAINS_KEPT: usize = 100_000;

impl Chains {
    /// The session of the chain `previous` belongs to, and its output items if not yet logged.
    fn take(&self, previous: &str) -> Option<Link> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.get_mut(previous)?;
        Some((entry.0, entry.1.take()))
    }

    /// Records an answered response: of a chain's `session`, or (`None`) of a managed one.
    pub fn remember(&self, response: String, session: Option<StreamId>, output: Vec<String>) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= CHAINS_KEPT {
            map.clear();
        }
        map.insert(response, (session, Some(output)));
    }

    /// The session a call continuing `previous` goes to, leaving what its next call logs.
    pub fn session_of(&self, key: &[u8; 32], previous: &str) -> StreamId {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.get(previous).and_then(|(id, _)| *id).unwrap_or_else(|| chain_id(key, previous))
    }

    /// The session a call continuing `previous` goes to, and the items to log before its input.
    pub fn resolve(&self, key: &[u8; 32], previous: &str) -> (StreamId, Vec<String>) {
        match self.take(previous) {
            Some((id, items)) => (id.unwrap_or_else(|| chain_id(key, previous)), items.unwrap_or_default()),
            None => (chain_id(key, previous), Vec::new()),
        }
    }
}

/// The session of a chain first seen at `previous` (under the caller's key hash).
fn chain_id(key: &[u8; 32], previous: &str) -> StreamId {
    let mut h = Sha256::new();
    h.update(b"ctxlog-proxy provider-held chain\0");
    h.update(key);
    h.update(previous.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    StreamId(uuid::Builder::from_custom_bytes(b).into_uuid())
}

/// Knobs that never compact: the provider holds the history, ctxlog only records it.
fn unmanaged(config: &Config) -> Config {
    Config { budget: 1 << 50, summarizer: ctxlog::config::SummarizerKind::None, ..config.clone() }
}

/// Logs a `previous_response_id` call's items (durable before this returns) and plans it; the
/// body forwarded is the client's own.
#[allow(clippy::too_many_arguments)] // one call's inputs, each from a different place
pub(crate) fn prepare_provider_held(
    slot: &mut Slot,
    store: &Store,
    id: StreamId,
    config: &Config,
    earlier: &[String],
    items: &[Item<'_>],
    opts: &RequestOptions,
    now: Timestamp,
    body: Vec<u8>,
) -> Result<Prepared, PrepareError> {
    let mut caught_up = false;
    if slot.session_mut().is_none() {
        let s = match Session::open(Arc::clone(store), id) {
            Ok(s) => s,
            Err(ctxlog::SessionError::NotFound(_)) => {
                let format = WireFormat::OpenAiResponses;
                let name = slot.name.clone();
                let (mut s, _) =
                    Session::create_named(Arc::clone(store), id, format, unmanaged(config), now, name, Vec::new())?;
                s.raise_guard(
                    GuardKind::ProviderHeldHistory,
                    "the client continues a response the provider stores (previous_response_id): ctxlog logs \
                     each call, its new input and its answer, forwards the client's body unchanged and never \
                     compacts"
                        .into(),
                    "previous_response_id",
                )?;
                s
            }
            Err(e) => return Err(e.into()),
        };
        slot.set_session(s);
    }
    let Some(s) = slot.session_mut() else { return Err(ctxlog::SessionError::NotFound(id).into()) };
    let before = s.state().version();
    s.catch_up()?;
    caught_up |= s.state().version() > before;
    let mut messages = Vec::with_capacity(earlier.len() + items.len());
    for (i, raw) in earlier.iter().enumerate() {
        let m =
            ctxlog::internal::wire::parse_in(raw, WireFormat::OpenAiResponses).map_err(|e| PrepareError::Invalid {
                field: format!("previous_response_id (its output[{i}]).{}", e.field),
                message: e.message,
            })?;
        messages.push(m);
    }
    messages.extend(crate::item::parse_all(items, WireFormat::OpenAiResponses)?);
    if !messages.is_empty() {
        // Unsynced: the commit's sync covers it before the client has the answer.
        s.append_unsynced(messages).map_err(|e| match e {
            ctxlog::SessionError::Refused { violation, .. } => PrepareError::Invalid {
                field: "input".into(),
                message: format!(
                    "{}: {} (ctxlog logs a previous_response_id chain from the calls it relayed; this one \
                     continues a response it has not seen: send the whole history instead)",
                    violation.invariant, violation.detail
                ),
            },
            e => e.into(),
        })?;
    }
    let plan = s.plan(now)?;
    let compaction = !plan.events().is_empty();
    Ok(Prepared {
        stream: s.id(),
        fork: None,
        body,
        plan,
        compaction,
        branched: false,
        caught_up,
        opts: opts.clone(),
        breakpoints: None,
    })
}
