//! Provider-ready request bodies: the view a plan serves, as the JSON a host POSTs to the
//! provider, so nothing has to re-parse or re-assemble it.
//!
//! * **Anthropic Messages** `{…fields, "system": …, "messages": [...]}`: system messages leave
//!   `messages` for the top-level `system` (the API has no system role); with
//!   [`RequestOptions::cache_breakpoints`], `cache_control` marks the last system block and the
//!   last block of the last message (the whole prefix the next call will reuse); with
//!   [`RequestOptions::place_breakpoints`], every `cache_control` the log carries is left out
//!   and the [`Placement`]'s marks are placed instead (see [`crate::breakpoints`]).
//! * **OpenAI chat** `{…fields, "messages": [...]}`: every message in place (`system` and
//!   `developer` are roles there); OpenAI caches prefixes without markers.
//! * **OpenAI Responses** `{…fields, "instructions": …, "input": [...]}`: the message tagged
//!   as the request's instructions goes back to `instructions`, every other item in place.
//! * **Gemini** `{…fields, "systemInstruction": …, "contents": [...]}`: system messages leave
//!   `contents` for `systemInstruction` (their parts, in order); the model is in the URL.
//!
//! The other fields (`model`, `max_tokens`, `tools`, `stream`, …) are the host's, passed
//! through byte for byte in the order given. `messages` is written last.
//!
//! **The bytes of `messages` are the digested view.** Each element is the view item's bytes as
//! [`crate::view::ViewCache`] rendered and hashed them, without the trailing newline, with two
//! deterministic exceptions: media stored as blobs are inlined as base64 (a provider cannot
//! read a blob reference), and a requested breakpoint adds `cache_control` as the last key of
//! the block it marks (with a placement, the logged `cache_control` members are cut out, and a
//! marked message whose content is a string is written as one text block carrying the mark). A past call's request is rebuilt byte for byte from the log by
//! [`crate::replay::served_request`].

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use serde_json::value::RawValue;

use crate::breakpoints::{self, Cuts, Mark, Placement};
use crate::json::JsonWriter;
use crate::message::{Block, Content, MediaData, MediaSource, Message, RawJson, Role};
use crate::state::{Item, State, ViewItem};
use crate::store::BlobId;
use crate::view::item_message;
use crate::wire::{self, BlobSource, Media, RenderOpts, WireFormat};

pub use crate::breakpoints::CacheTtl;

/// A field the options cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("request field `{field}`: {message}")]
pub struct RequestError {
    /// The field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn bad(field: &str, message: impl Into<String>) -> RequestError {
    RequestError { field: field.to_owned(), message: message.into() }
}

/// What a request carries besides the view: the host's fields and the cache breakpoints.
#[derive(Debug, Clone, Default)]
pub struct RequestOptions {
    fields: Vec<(String, Box<RawValue>)>,
    breakpoints: Option<CacheTtl>,
    placement: Option<Placement>,
}

/// Fields ctxlog writes itself (Anthropic's `system`, the messages; Responses' `instructions`
/// and `input`; Gemini's `systemInstruction` and `contents`).
const OWN_FIELDS: [&str; 6] = ["system", "messages", "instructions", "input", "systemInstruction", "contents"];

impl RequestOptions {
    /// No fields, no breakpoints.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every top-level field of a client's request body except `system` and `messages`, kept
    /// verbatim and in order: what a proxy forwards around the view it substitutes.
    pub fn from_client_body(body: &[u8]) -> Result<Self, RequestError> {
        let text = std::str::from_utf8(body).map_err(|e| bad("", format!("not UTF-8: {e}")))?;
        let fields: Vec<(String, Box<RawValue>)> =
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
                .map_err(|e| bad("", format!("not a JSON object: {e}")))
                .and_then(|_| {
                    // Read again as raw values, so numbers and strings keep their exact bytes.
                    serde_json::from_str::<RawObject>(text).map(|o| o.0).map_err(|e| bad("", e.to_string()))
                })?;
        Ok(RequestOptions {
            fields: fields.into_iter().filter(|(k, _)| !OWN_FIELDS.contains(&k.as_str())).collect(),
            breakpoints: None,
            placement: None,
        })
    }

    /// Sets a top-level field to a JSON value (replacing an earlier one of the same name).
    /// `system` and `messages` are ctxlog's and refused.
    pub fn field(mut self, name: &str, json: &str) -> Result<Self, RequestError> {
        if OWN_FIELDS.contains(&name) {
            return Err(bad(name, "is written by ctxlog from the view"));
        }
        let value: Box<RawValue> = serde_json::from_str(json).map_err(|e| bad(name, format!("invalid JSON: {e}")))?;
        match self.fields.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value,
            None => self.fields.push((name.to_owned(), value)),
        }
        Ok(self)
    }

    /// `"model": name`.
    pub fn model(self, name: &str) -> Self {
        let mut w = JsonWriter::new();
        w.string(name);
        self.raw_field("model", w.into_bytes())
    }

    /// `"max_tokens": n`.
    pub fn max_tokens(self, n: u64) -> Self {
        self.raw_field("max_tokens", n.to_string().into_bytes())
    }

    /// `"tools": [...]`, passed through verbatim; must be a JSON array.
    pub fn tools(self, json: &str) -> Result<Self, RequestError> {
        if !json.trim_start().starts_with('[') {
            return Err(bad("tools", "must be a JSON array"));
        }
        self.field("tools", json)
    }

    /// Anthropic: mark the last system block and the last block of the last message with
    /// `cache_control` (ignored for OpenAI, which caches without markers).
    pub fn cache_breakpoints(mut self, ttl: CacheTtl) -> Self {
        self.breakpoints = Some(ttl);
        self.placement = None;
        self
    }

    /// Anthropic: place exactly these breakpoints, by position in the log (mapped onto the
    /// view), and none of the `cache_control` the logged messages carry. Replaces
    /// [`RequestOptions::cache_breakpoints`]; ignored for OpenAI.
    pub fn place_breakpoints(mut self, placement: Placement) -> Self {
        self.placement = Some(placement);
        self.breakpoints = None;
        self
    }

    /// The breakpoints placed by position, if set.
    pub fn placement(&self) -> Option<&Placement> {
        self.placement.as_ref()
    }

    /// The fields, in order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &str)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), v.get()))
    }

    /// The cache breakpoints requested, if any.
    pub fn breakpoints(&self) -> Option<CacheTtl> {
        self.breakpoints
    }

    /// The `model` field, if set to a string.
    pub fn model_name(&self) -> Option<String> {
        let (_, v) = self.fields().find(|(k, _)| *k == "model")?;
        serde_json::from_str::<String>(v).ok()
    }

    /// The `tools` field, if set.
    pub fn tools_json(&self) -> Option<&str> {
        self.fields().find(|(k, _)| *k == "tools").map(|(_, v)| v)
    }

    fn raw_field(self, name: &str, json: Vec<u8>) -> Self {
        // Built by our own writer: always valid JSON.
        match String::from_utf8(json).ok().and_then(|s| RawValue::from_string(s).ok()) {
            Some(value) => {
                let mut out = self;
                match out.fields.iter_mut().find(|(k, _)| k == name) {
                    Some(slot) => slot.1 = value,
                    None => out.fields.push((name.to_owned(), value)),
                }
                out
            }
            None => self,
        }
    }
}

/// A JSON object read as raw members, in order.
struct RawObject(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for RawObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawObject;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Box<RawValue>>()? {
                    out.push((k, v));
                }
                Ok(RawObject(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A request body ready to send, and where its parts are.
#[derive(Debug, Clone)]
pub struct Request {
    format: WireFormat,
    body: Vec<u8>,
    system: Option<Range<usize>>,
    messages: Range<usize>,
    view_digest: String,
    missing_blobs: Vec<BlobId>,
    breakpoints: usize,
}

impl Request {
    /// The wire format of the body.
    pub fn format(&self) -> WireFormat {
        self.format
    }

    /// The JSON body, ready to POST.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The JSON body, owned.
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }

    /// The body parsed (for hosts that want to inspect or adjust it; sending [`Request::body`]
    /// avoids the copy).
    pub fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// The bytes of the `messages` array.
    pub fn messages_json(&self) -> &[u8] {
        self.body.get(self.messages.clone()).unwrap_or_default()
    }

    /// The bytes of the Anthropic `system` value, if the view has system messages.
    pub fn system_json(&self) -> Option<&[u8]> {
        self.system.clone().and_then(|r| self.body.get(r))
    }

    /// The digest of the view this request carries (what `RequestServed` records).
    pub fn view_digest(&self) -> &str {
        &self.view_digest
    }

    /// Blobs that could not be read: their media stayed references, which no provider reads.
    /// A request with missing blobs should not be sent.
    pub fn missing_blobs(&self) -> &[BlobId] {
        &self.missing_blobs
    }

    /// How many `cache_control` breakpoints ctxlog placed.
    pub fn breakpoints(&self) -> usize {
        self.breakpoints
    }
}

/// The view a plan serves: its items and their view bytes (`JSON ‖ '\n'`), as hashed.
pub(crate) struct ServedView<'a> {
    pub state: &'a State,
    pub items: &'a [ViewItem],
    pub bytes: &'a [Arc<[u8]>],
    /// The `cache_control` members of items' bytes, by view index (see [`breakpoints::cuts`]).
    pub cuts: &'a [(usize, Cuts)],
    pub digest: &'a str,
}

/// Builds the request for `view` in `format`.
pub(crate) fn render(
    view: &ServedView<'_>,
    format: WireFormat,
    opts: &RequestOptions,
    blobs: &dyn BlobSource,
) -> Request {
    let mut missing = Vec::new();
    let anthropic = format == WireFormat::Anthropic;
    let placement = if anthropic { opts.placement.as_ref() } else { None };
    let marks = if anthropic { opts.breakpoints } else { None };
    let is_system = |it: &ViewItem| match it.item {
        Item::Message(seq) => view.state.entry(seq).is_some_and(|e| e.is_system()),
        Item::Summary(_) | Item::Placeholder { .. } => false,
    };
    // Sized up front: a 150k-token view is ~600 KB, and growing to it by doubling copied and
    // faulted in twice as much (measured by the proxy, issue 13).
    let fields: usize = opts.fields.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum();
    let mut body = Vec::with_capacity(64 + fields + view.bytes.iter().map(|b| b.len()).sum::<usize>());
    body.push(b'{');
    for (k, v) in &opts.fields {
        escape(&mut body, k);
        body.push(b':');
        body.extend_from_slice(v.get().as_bytes());
        body.push(b',');
    }
    let mut breakpoints = 0;
    let mut system = None;
    let responses = format == WireFormat::OpenAiResponses;
    let is_instructions = |it: &ViewItem| {
        responses
            && is_system(it)
            && item_message(view.state, it.item).is_some_and(|m| wire::responses::is_instructions(&m))
    };
    if responses {
        // The request's `instructions` come back to their field; input system messages stay items.
        if let Some(m) =
            view.items.iter().find(|it| is_instructions(it)).and_then(|it| item_message(view.state, it.item))
        {
            body.extend_from_slice(br#""instructions":"#);
            let start = body.len();
            let mut w = JsonWriter::new();
            wire::responses::write_instructions(&mut w, &m, inline(blobs), &mut missing);
            body.extend_from_slice(&w.into_bytes());
            system = Some(start..body.len());
            body.push(b',');
        }
    }
    let gemini = format == WireFormat::Gemini;
    if gemini {
        let parts: Vec<Block> = view
            .items
            .iter()
            .filter(|it| is_system(it))
            .filter_map(|it| item_message(view.state, it.item))
            .flat_map(|m| match m.content.clone() {
                Some(Content::Blocks(b)) => b,
                Some(Content::Text(text)) => vec![Block::Text { text, extra: Vec::new() }],
                Some(Content::Null) | None => Vec::new(),
            })
            .collect();
        if !parts.is_empty() {
            body.extend_from_slice(br#""systemInstruction":"#);
            let start = body.len();
            let mut w = JsonWriter::new();
            let m = Message { content: Some(Content::Blocks(parts)), ..Message::text(Role::System, "") };
            wire::gemini::write_system_instruction(&mut w, &m, inline(blobs), &mut missing);
            body.extend_from_slice(&w.into_bytes());
            system = Some(start..body.len());
            body.push(b',');
        }
    }
    if anthropic {
        let mut system_msgs: Vec<Message> = view
            .items
            .iter()
            .filter(|it| is_system(it))
            .filter_map(|it| item_message(view.state, it.item).map(|m| m.into_owned()))
            .collect();
        if !system_msgs.is_empty() {
            body.extend_from_slice(br#""system":"#);
            let start = body.len();
            let mut w = JsonWriter::new();
            let system_mark = match placement {
                Some(p) => {
                    system_msgs.iter_mut().for_each(breakpoints::strip);
                    p.system()
                }
                None => marks,
            };
            let content = system_content(system_msgs, system_mark, &mut breakpoints);
            wire::write_content_value(&mut w, &content, inline(blobs), &mut missing);
            body.extend_from_slice(&w.into_bytes());
            system = Some(start..body.len());
            body.push(b',');
        }
    }
    body.extend_from_slice(match format {
        WireFormat::OpenAiResponses => br#""input":"#,
        WireFormat::Gemini => br#""contents":"#,
        WireFormat::Anthropic | WireFormat::OpenAi => br#""messages":"#,
    });
    let start = body.len();
    body.push(b'[');
    let sent: Vec<(usize, &ViewItem, &Arc<[u8]>)> = view
        .items
        .iter()
        .zip(view.bytes)
        .enumerate()
        .filter(|(_, (it, _))| !(is_instructions(it) || (anthropic || gemini) && is_system(it)))
        .map(|(j, (it, b))| (j, it, b))
        .collect();
    let marked: Vec<(usize, Message)> = match placement {
        Some(p) => place(p, &sent, view.state),
        // The message breakpoint goes on the last message that has a block to carry it.
        None => marks
            .and_then(|ttl| {
                sent.iter().enumerate().rev().find_map(|(i, (_, it, _))| {
                    let mut m = item_message(view.state, it.item)?.into_owned();
                    mark_last_block(&mut m, ttl).then_some((i, m))
                })
            })
            .into_iter()
            .collect(),
    };
    breakpoints += marked.iter().map(|(_, m)| marks_in(m)).sum::<usize>();
    let mut next_mark = marked.iter().peekable();
    for (i, (j, it, bytes)) in sent.into_iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        let m = match next_mark.next_if(|(at, _)| *at == i) {
            Some((_, m)) => Cow::Borrowed(m),
            None if has_blobs(view.state, it.item) => match item_message(view.state, it.item) {
                Some(m) if placement.is_some() => {
                    let mut m = m.into_owned();
                    breakpoints::strip(&mut m);
                    Cow::Owned(m)
                }
                Some(m) => m,
                None => continue,
            },
            None => {
                let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
                match placement.and_then(|_| cuts_of(view.cuts, j)) {
                    Some(cuts) => breakpoints::apply_cuts(&mut body, bytes, cuts),
                    None => body.extend_from_slice(bytes),
                }
                continue;
            }
        };
        let mut w = JsonWriter::new();
        wire::write_in(format, &mut w, &m, inline(blobs), &mut missing);
        body.extend_from_slice(&w.into_bytes());
    }
    body.push(b']');
    let messages = start..body.len();
    body.push(b'}');
    missing.sort();
    missing.dedup();
    Request { format, body, system, messages, view_digest: view.digest.to_owned(), missing_blobs: missing, breakpoints }
}

/// The cuts of view item `j`, if it has any.
fn cuts_of(cuts: &[(usize, Cuts)], j: usize) -> Option<&[(u32, u32)]> {
    cuts.binary_search_by_key(&j, |(k, _)| *k).ok().and_then(|i| cuts.get(i)).map(|(_, c)| &c[..])
}

/// The placement's message marks on the sent items: each on the item the view shows at or before
/// its seq (a string content written as one text block), walking back past items that cannot
/// carry one (an empty content, only thinking). Returns the marked messages (every
/// logged `cache_control` stripped) by index in `sent`, in order.
fn place(p: &Placement, sent: &[(usize, &ViewItem, &Arc<[u8]>)], state: &State) -> Vec<(usize, Message)> {
    let mut out: std::collections::BTreeMap<usize, Message> = std::collections::BTreeMap::new();
    for mark in &p.marks {
        let Mark::Message { seq, block, ttl } = mark else { continue };
        let Some(target) = sent.partition_point(|(_, it, _)| it.seq <= *seq).checked_sub(1) else { continue };
        let exact =
            sent.get(target).is_some_and(|(_, it, _)| it.item == Item::Message(*seq)) && state.original(*seq).is_some();
        for k in (0..=target).rev() {
            let Some((_, it, _)) = sent.get(k) else { continue };
            let mut m = match out.remove(&k) {
                Some(m) => m,
                None => match item_message(state, it.item) {
                    Some(m) => {
                        let mut m = m.into_owned();
                        breakpoints::strip(&mut m);
                        // A string content is one text block to the API (its documented
                        // shorthand): written as that block, it can carry the mark.
                        if let Some(Content::Text(text)) = &m.content {
                            if !text.is_empty() {
                                let text = text.clone();
                                m.content = Some(Content::Blocks(vec![Block::Text { text, extra: Vec::new() }]));
                            }
                        }
                        m
                    }
                    None => continue,
                },
            };
            let done = match block.filter(|_| exact && k == target) {
                Some(b) => mark_block(&mut m, b as usize, *ttl) || mark_longest(&mut m, *ttl),
                None => mark_longest(&mut m, *ttl),
            };
            if done || marks_in(&m) > 0 {
                out.insert(k, m);
            }
            if done {
                break;
            }
        }
    }
    out.into_iter().collect()
}

/// [`mark_last_block`], where a block marked already (by an earlier mark of the same placement)
/// takes the longer TTL of the two.
fn mark_longest(m: &mut Message, ttl: CacheTtl) -> bool {
    if ttl == CacheTtl::OneHour {
        let mut fresh = m.clone();
        breakpoints::strip(&mut fresh);
        if mark_last_block(&mut fresh, ttl) {
            // The block the mark lands on, re-marked 1h; the others keep theirs.
            let marked_at = last_markable(&fresh);
            if let (Some(at), Some(Content::Blocks(blocks)), Some(Content::Blocks(new))) =
                (marked_at, &mut m.content, &fresh.content)
            {
                if let (Some(b), Some(n)) = (blocks.get_mut(at), new.get(at)) {
                    *b = n.clone();
                }
            }
            return true;
        }
        return false;
    }
    mark_last_block(m, ttl)
}

/// The index of the last block of `m` that carries a `cache_control`.
fn last_markable(m: &Message) -> Option<usize> {
    m.blocks().iter().rposition(|b| marks_in(&one_block(b)) > 0)
}

fn one_block(b: &Block) -> Message {
    let mut m = Message::text(Role::User, String::new());
    m.content = Some(Content::Blocks(vec![b.clone()]));
    m
}

/// Breakpoints on a message's blocks.
fn marks_in(m: &Message) -> usize {
    m.blocks()
        .iter()
        .filter(|b| match b {
            Block::Text { extra, .. }
            | Block::Media { extra, .. }
            | Block::ImageUrl { extra, .. }
            | Block::ToolUse { extra, .. }
            | Block::ToolResult { extra, .. }
            | Block::Thinking { extra, .. } => extra.iter().any(|(k, _)| k == "cache_control"),
            Block::Other(raw) => serde_json::from_str::<serde_json::Value>(raw.as_str())
                .ok()
                .is_some_and(|v| v.get("cache_control").is_some()),
        })
        .count()
}

/// Marks block `at` of `m`, when it can carry a breakpoint.
fn mark_block(m: &mut Message, at: usize, ttl: CacheTtl) -> bool {
    let Some(Content::Blocks(blocks)) = &mut m.content else { return false };
    let Some(b) = blocks.get_mut(at) else { return false };
    let mut one = one_block(b);
    if ttl == CacheTtl::OneHour {
        breakpoints::strip(&mut one);
    }
    if !mark_last_block(&mut one, ttl) {
        return false;
    }
    if let Some(Content::Blocks(mut v)) = one.content {
        if let Some(marked) = v.pop() {
            *b = marked;
        }
    }
    true
}

fn inline(blobs: &dyn BlobSource) -> RenderOpts<'_> {
    RenderOpts { meta: false, media: Media::Inline(blobs) }
}

fn escape(out: &mut Vec<u8>, s: &str) {
    crate::json::escape_into(out, s);
}

/// The `system` value: a single system message's string content as it is; otherwise (several
/// system messages, blocks, or a breakpoint to place: a string cannot carry one) one array of
/// their blocks in order, strings as text blocks.
fn system_content(msgs: Vec<Message>, marks: Option<CacheTtl>, placed: &mut usize) -> Content {
    if let ([only], None) = (msgs.as_slice(), marks) {
        if let Some(c @ Content::Text(_)) = &only.content {
            return c.clone();
        }
    }
    let mut blocks = Vec::new();
    for m in msgs {
        match m.content {
            Some(Content::Text(text)) => blocks.push(Block::Text { text, extra: Vec::new() }),
            Some(Content::Blocks(bs)) => blocks.extend(bs),
            Some(Content::Null) | None => {}
        }
    }
    let mut merged = Message::text(Role::System, String::new());
    merged.content = Some(Content::Blocks(blocks));
    if let Some(ttl) = marks {
        *placed += usize::from(mark_last_block(&mut merged, ttl));
    }
    merged.content.unwrap_or(Content::Null)
}

/// Adds `cache_control` as the last key of the last block that may carry one (not a thinking
/// block, not an empty text). A string content has no block to carry it (the message is left
/// alone: its bytes stay the view's). A block that already has a `cache_control` keeps it.
/// Returns whether a breakpoint is now there.
fn mark_last_block(m: &mut Message, ttl: CacheTtl) -> bool {
    let cc = || ("cache_control".to_owned(), RawJson(ttl.json().to_owned()));
    let has = |extra: &[(String, RawJson)]| extra.iter().any(|(k, _)| k == "cache_control");
    let Some(Content::Blocks(blocks)) = &mut m.content else { return false };
    for b in blocks.iter_mut().rev() {
        let extra = match b {
            Block::Text { text, extra } if !text.is_empty() => extra,
            Block::Media { extra, .. }
            | Block::ImageUrl { extra, .. }
            | Block::ToolUse { extra, .. }
            | Block::ToolResult { extra, .. } => extra,
            Block::Other(raw) => match mark_raw(raw, ttl) {
                Some(marked) => return marked,
                None => continue,
            },
            Block::Text { .. } | Block::Thinking { .. } => continue,
        };
        if !has(extra) {
            extra.push(cc());
        }
        return true;
    }
    false
}

/// A block kept verbatim (a type ctxlog does not model): `cache_control` is spliced in as its
/// last key, unless it is a thinking block, which cannot carry one. `None`: skip it.
fn mark_raw(raw: &mut RawJson, ttl: CacheTtl) -> Option<bool> {
    let v: serde_json::Value = serde_json::from_str(raw.as_str()).ok()?;
    let obj = v.as_object()?;
    if matches!(obj.get("type").and_then(|t| t.as_str()), Some("thinking" | "redacted_thinking")) {
        return None;
    }
    if obj.contains_key("cache_control") {
        return Some(true);
    }
    let text = raw.as_str().trim_end();
    let body = text.strip_suffix('}')?;
    let sep = if obj.is_empty() { "" } else { "," };
    raw.0 = format!("{body}{sep}\"cache_control\":{}}}", ttl.json());
    Some(true)
}

/// Does this item's message hold media stored as blobs (to inline for the provider)? Edits
/// never add media, summaries have none.
fn has_blobs(state: &State, item: Item) -> bool {
    let Item::Message(seq) = item else { return false };
    let Some(m) = state.shown(seq) else { return false };
    fn block(b: &Block) -> bool {
        match b {
            Block::Media { source: MediaSource::Base64 { data: MediaData::Blob(_), .. }, .. } => true,
            Block::ImageUrl { url: crate::message::ImageUrl::Data { data: MediaData::Blob(_), .. }, .. } => true,
            Block::ToolResult { content: Some(Content::Blocks(inner)), .. } => inner.iter().any(block),
            _ => false,
        }
    }
    m.blocks().iter().any(block)
}
