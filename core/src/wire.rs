//! The wire formats: parsing one JSON message into the model, validating it against a
//! format, and writing it back (to a view, or losslessly for export). OpenAI Responses items
//! have their own reader and writer in [`responses`], Gemini contents in [`gemini`].

pub(crate) mod gemini;
pub(crate) mod responses;

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::json::JsonWriter;
use crate::message::{
    Block, Content, Extra, ImageUrl, MediaData, MediaKind, MediaSource, Message, Meta, RawJson, Role, ToolCall,
};
use crate::store::BlobId;
use crate::usage::Usage;

/// A session's wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireFormat {
    /// Anthropic Messages style.
    Anthropic,
    /// OpenAI chat-completions style.
    OpenAi,
    /// OpenAI Responses style: `input` items (see [`responses`]).
    OpenAiResponses,
    /// Google Gemini style: `contents` (see [`gemini`]). Appended last: the variant index is
    /// the log's, so the earlier ones keep theirs.
    Gemini,
}

impl WireFormat {
    /// Name used by the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            WireFormat::Anthropic => "anthropic",
            WireFormat::OpenAi => "openai",
            WireFormat::OpenAiResponses => "responses",
            WireFormat::Gemini => "gemini",
        }
    }
}

/// A message that could not be parsed. `field` is a path such as `content[2].source.data`, or
/// empty when the problem is the line as a whole (not JSON, not an object).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if field.is_empty() { String::new() } else { format!("field `{field}`: ") })]
pub struct WireError {
    /// Path of the offending field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

pub(crate) fn err(field: &str, message: impl Into<String>) -> WireError {
    WireError { field: field.to_owned(), message: message.into() }
}

pub(crate) type Obj<'a> = BTreeMap<String, &'a RawValue>;

pub(crate) fn object<'a>(raw: &'a RawValue, path: &str) -> Result<Obj<'a>, WireError> {
    serde_json::from_str(raw.get()).map_err(|_| err(path, format!("expected an object, found {}", kind_of(raw))))
}

pub(crate) fn kind_of(raw: &RawValue) -> &'static str {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

pub(crate) fn string(raw: &RawValue, path: &str) -> Result<String, WireError> {
    serde_json::from_str(raw.get()).map_err(|e| match kind_of(raw) {
        // A string that does not decode (e.g. a lone surrogate escape): say why.
        "a string" => err(path, format!("invalid string: {e}")),
        kind => err(path, format!("expected a string, found {kind}")),
    })
}

pub(crate) fn boolean(raw: &RawValue, path: &str) -> Result<bool, WireError> {
    serde_json::from_str(raw.get()).map_err(|_| err(path, format!("expected a boolean, found {}", kind_of(raw))))
}

pub(crate) fn take_string(obj: &mut Obj<'_>, key: &str, path: &str) -> Result<String, WireError> {
    let p = join(path, key);
    match obj.remove(key) {
        Some(raw) => string(raw, &p),
        None => Err(err(&p, "missing")),
    }
}

pub(crate) fn take_opt_string(obj: &mut Obj<'_>, key: &str, path: &str) -> Result<Option<String>, WireError> {
    obj.remove(key).map(|raw| string(raw, &join(path, key))).transpose()
}

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

pub(crate) fn extra(obj: Obj<'_>) -> Extra {
    obj.into_iter().map(|(k, v)| (k, RawJson(v.get().to_owned()))).collect()
}

/// Parses one message object. Base64 payloads are validated (strictly: canonical padding) so
/// that a later export reproduces them byte for byte.
pub fn parse_message(json: &str) -> Result<Message, WireError> {
    let raw: &RawValue = serde_json::from_str(json).map_err(|e| err("", format!("invalid JSON: {e}")))?;
    let mut obj = object(raw, "")?;
    let role_text = take_string(&mut obj, "role", "")?;
    let role = Role::parse(&role_text).ok_or_else(|| {
        err("role", format!("unknown role {role_text:?} (expected system, developer, user, assistant or tool)"))
    })?;
    let content = obj.remove("content").map(|raw| parse_content(raw, "content", 0)).transpose()?;
    let tool_calls = obj.remove("tool_calls").map(|raw| parse_tool_calls(raw, "tool_calls")).transpose()?;
    let tool_call_id = take_opt_string(&mut obj, "tool_call_id", "")?;
    let meta = take_meta(&mut obj)?;
    Ok(Message { role, content, tool_calls, tool_call_id, meta, extra: extra(obj) })
}

/// Parses one message of `format`: a chat or Anthropic message, or a Responses `input` item.
/// A Gemini content is read as the first of its session ([`parse_at`] gives its place).
pub fn parse_in(json: &str, format: WireFormat) -> Result<Message, WireError> {
    parse_at(json, format, 0)
}

/// Parses one message of `format` that has (or will have) `seq` in its session: Gemini's tool
/// pairs are keyed by position ([`gemini`]); the other formats ignore it.
pub fn parse_at(json: &str, format: WireFormat, seq: u64) -> Result<Message, WireError> {
    match format {
        WireFormat::OpenAiResponses => responses::parse_item(json),
        WireFormat::Gemini => gemini::parse_content_at(json, seq),
        WireFormat::Anthropic | WireFormat::OpenAi => parse_message(json),
    }
}

/// ctxlog's own fields of a message (`pinned`, `timestamp`, `usage`), checked.
pub(crate) fn take_meta(obj: &mut Obj<'_>) -> Result<Meta, WireError> {
    let pinned = obj.remove("pinned").map(|raw| boolean(raw, "pinned")).transpose()?;
    let timestamp = obj.remove("timestamp").map(|raw| RawJson(raw.get().to_owned()));
    if let Some(ts) = &timestamp {
        parse_timestamp_ms(ts).map_err(|m| err("timestamp", m.to_string()))?;
    }
    let usage = obj.remove("usage").map(|raw| RawJson(raw.get().to_owned()));
    if let Some(u) = &usage {
        usage_input_tokens(u).map_err(|m| err("usage", m.to_string()))?;
    }
    Ok(Meta { timestamp, pinned, usage })
}

/// Deepest nesting of `tool_result` blocks inside `tool_result` content. Providers nest at most
/// one level; the bound keeps the recursive parse (and everything downstream that walks the
/// message: estimator, codec, writer) far from the stack limit on hostile input.
pub const MAX_CONTENT_NESTING: usize = 16;

fn parse_content(raw: &RawValue, path: &str, depth: usize) -> Result<Content, WireError> {
    if depth > MAX_CONTENT_NESTING {
        return Err(err(path, format!("content nested more than {MAX_CONTENT_NESTING} levels deep")));
    }
    match raw.get().trim_start().as_bytes().first() {
        Some(b'"') => Ok(Content::Text(string(raw, path)?)),
        Some(b'n') => Ok(Content::Null),
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(raw.get()).map_err(|e| err(path, e.to_string()))?;
            let blocks = items
                .into_iter()
                .enumerate()
                .map(|(i, item)| parse_block(item, &format!("{path}[{i}]"), depth))
                .collect::<Result<_, _>>()?;
            Ok(Content::Blocks(blocks))
        }
        _ => Err(err(path, format!("expected a string, an array of blocks or null, found {}", kind_of(raw)))),
    }
}

fn parse_block(raw: &RawValue, path: &str, depth: usize) -> Result<Block, WireError> {
    let mut obj = object(raw, path)?;
    let kind = take_string(&mut obj, "type", path)?;
    Ok(match kind.as_str() {
        "text" => Block::Text { text: take_string(&mut obj, "text", path)?, extra: extra(obj) },
        "image" | "document" => {
            let kind = if kind == "image" { MediaKind::Image } else { MediaKind::Document };
            let src_path = join(path, "source");
            let source = match obj.remove("source") {
                Some(src) => parse_media_source(src, &src_path)?,
                None => return Err(err(&src_path, "missing")),
            };
            Block::Media { kind, source, extra: extra(obj) }
        }
        "image_url" => {
            let inner_path = join(path, "image_url");
            let inner_raw = obj.remove("image_url").ok_or_else(|| err(&inner_path, "missing"))?;
            let mut inner = object(inner_raw, &inner_path)?;
            let url_path = join(&inner_path, "url");
            let url_text = take_string(&mut inner, "url", &inner_path)?;
            let url = parse_image_url(url_text, &url_path)?;
            Block::ImageUrl { url, inner: extra(inner), extra: extra(obj) }
        }
        "tool_use" => {
            let id = take_string(&mut obj, "id", path)?;
            let name = take_string(&mut obj, "name", path)?;
            let input_path = join(path, "input");
            let input = obj.remove("input").ok_or_else(|| err(&input_path, "missing"))?;
            Block::ToolUse { id, name, input: RawJson(input.get().to_owned()), extra: extra(obj) }
        }
        "tool_result" => {
            let tool_use_id = take_string(&mut obj, "tool_use_id", path)?;
            let content =
                obj.remove("content").map(|c| parse_content(c, &join(path, "content"), depth + 1)).transpose()?;
            let is_error = obj.remove("is_error").map(|b| boolean(b, &join(path, "is_error"))).transpose()?;
            Block::ToolResult { tool_use_id, content, is_error, extra: extra(obj) }
        }
        "thinking" => {
            let thinking = take_string(&mut obj, "thinking", path)?;
            let signature = take_opt_string(&mut obj, "signature", path)?;
            Block::Thinking { thinking, signature, extra: extra(obj) }
        }
        _ => Block::Other(RawJson(raw.get().to_owned())),
    })
}

fn parse_media_source(raw: &RawValue, path: &str) -> Result<MediaSource, WireError> {
    let mut obj = object(raw, path)?;
    let kind = take_string(&mut obj, "type", path)?;
    if kind != "base64" {
        return Ok(MediaSource::Other(RawJson(raw.get().to_owned())));
    }
    let media_type = take_string(&mut obj, "media_type", path)?;
    let data_path = join(path, "data");
    let data = take_string(&mut obj, "data", path)?;
    check_base64(&data, &data_path)?;
    Ok(MediaSource::Base64 { media_type, data: MediaData::Inline(data), extra: extra(obj) })
}

pub(crate) fn parse_image_url(url: String, path: &str) -> Result<ImageUrl, WireError> {
    let Some(rest) = url.strip_prefix("data:") else { return Ok(ImageUrl::Link(url)) };
    let Some((media_type, data)) = rest.split_once(";base64,") else { return Ok(ImageUrl::Link(url)) };
    check_base64(data, path)?;
    Ok(ImageUrl::Data { media_type: media_type.to_owned(), data: MediaData::Inline(data.to_owned()) })
}

pub(crate) fn check_base64(data: &str, path: &str) -> Result<(), WireError> {
    decode_base64(data).map(|_| ()).map_err(|e| err(path, format!("invalid base64: {e}")))
}

/// Strict standard base64 (canonical padding), so re-encoding reproduces the input exactly.
pub fn decode_base64(data: &str) -> Result<Vec<u8>, base64::DecodeError> {
    base64::engine::general_purpose::STANDARD.decode(data)
}

/// Standard base64 with padding.
pub fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn parse_tool_calls(raw: &RawValue, path: &str) -> Result<Vec<ToolCall>, WireError> {
    let items: Vec<&RawValue> =
        serde_json::from_str(raw.get()).map_err(|_| err(path, format!("expected an array, found {}", kind_of(raw))))?;
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let p = format!("{path}[{i}]");
            let mut obj = object(item, &p)?;
            let id = take_string(&mut obj, "id", &p)?;
            // Absent stays absent (empty) so that export reproduces the input.
            let kind = take_opt_string(&mut obj, "type", &p)?.unwrap_or_default();
            let fpath = join(&p, "function");
            let fraw = obj.remove("function").ok_or_else(|| err(&fpath, "missing"))?;
            let mut f = object(fraw, &fpath)?;
            let name = take_string(&mut f, "name", &fpath)?;
            let arguments = take_string(&mut f, "arguments", &fpath)?;
            Ok(ToolCall { id, kind, name, arguments, extra: extra(obj), function_extra: extra(f) })
        })
        .collect()
}

/// Milliseconds since the Unix epoch of a `timestamp` field: unix seconds (number) or an
/// RFC 3339 string.
pub fn parse_timestamp_ms(ts: &RawJson) -> Result<u64, crate::time::TimestampError> {
    use crate::time::TimestampError;
    let v: serde_json::Value = serde_json::from_str(ts.as_str()).map_err(|e| TimestampError::Json(e.to_string()))?;
    match v {
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(secs) if (0.0..1e11).contains(&secs) => Ok((secs * 1000.0).round() as u64),
            _ => Err(TimestampError::Seconds(n.to_string())),
        },
        serde_json::Value::String(s) => crate::time::parse_rfc3339_ms(&s),
        other => Err(TimestampError::NotATimestamp(other.to_string())),
    }
}

/// The provider's [`Usage`] recorded on a transcript line (`usage`, in any of the shapes
/// [`Usage::from_json`] reads); `None` when it carries no prompt count.
pub fn usage_of(usage: &RawJson) -> Result<Option<Usage>, crate::usage::UsageError> {
    // Raw JSON of a parsed message always parses; a caller's own RawJson may not.
    let v: serde_json::Value = serde_json::from_str(usage.as_str())
        .map_err(|e| crate::usage::UsageError { field: String::new(), message: e.to_string() })?;
    Usage::from_json(&v)
}

/// Provider-reported prompt tokens of a `usage` object: its [`Usage::prompt_total`], so
/// Anthropic's cache reads and writes count (its `input_tokens` excludes them) and OpenAI's
/// cached tokens are not counted twice.
pub(crate) fn usage_input_tokens(usage: &RawJson) -> Result<Option<u64>, crate::usage::UsageError> {
    Ok(usage_of(usage)?.map(|u| u.prompt_total()))
}

/// Checks that a parsed message is valid in `format`.
pub fn check_format(m: &Message, format: WireFormat) -> Result<(), WireError> {
    match format {
        WireFormat::Anthropic => {
            if matches!(m.role, Role::Tool | Role::Developer) {
                return Err(err("role", format!("role {:?} is not valid in the anthropic format", m.role.as_str())));
            }
            if m.tool_calls.is_some() || m.tool_call_id.is_some() {
                return Err(err("tool_calls", "OpenAI tool fields are not valid in the anthropic format"));
            }
            if let Some(i) = m.blocks().iter().position(|b| matches!(b, Block::ImageUrl { .. })) {
                return Err(err(&format!("content[{i}]"), "image_url parts are not valid in the anthropic format"));
            }
        }
        WireFormat::OpenAi => {
            let anthropic_only = |b: &Block| {
                matches!(
                    b,
                    Block::Media { .. } | Block::ToolUse { .. } | Block::ToolResult { .. } | Block::Thinking { .. }
                )
            };
            if let Some(i) = m.blocks().iter().position(anthropic_only) {
                return Err(err(&format!("content[{i}]"), "anthropic blocks are not valid in the openai format"));
            }
            if m.role == Role::Tool && m.tool_call_id.is_none() {
                return Err(err("tool_call_id", "missing on a tool message"));
            }
        }
        WireFormat::OpenAiResponses => responses::check(m)?,
        WireFormat::Gemini => gemini::check(m)?,
    }
    Ok(())
}

/// Evidence of a format in one message, for `--format auto`.
pub fn detect(m: &Message) -> Option<WireFormat> {
    if matches!(m.role, Role::Tool | Role::Developer) || m.tool_calls.is_some() || m.tool_call_id.is_some() {
        return Some(WireFormat::OpenAi);
    }
    m.blocks().iter().find_map(|b| match b {
        Block::ImageUrl { .. } => Some(WireFormat::OpenAi),
        Block::Media { .. } | Block::ToolUse { .. } | Block::ToolResult { .. } | Block::Thinking { .. } => {
            Some(WireFormat::Anthropic)
        }
        _ => None,
    })
}

/// Looks up externalized payloads while rendering.
pub trait BlobSource {
    /// The blob's bytes, or `None` if missing.
    fn blob(&self, id: &BlobId) -> Option<Vec<u8>>;
}

impl<F: Fn(&BlobId) -> Option<Vec<u8>>> BlobSource for F {
    fn blob(&self, id: &BlobId) -> Option<Vec<u8>> {
        self(id)
    }
}

/// How to write media payloads.
#[derive(Clone, Copy)]
pub enum Media<'a> {
    /// As blob references (compact views, audits).
    Refs,
    /// Resolved back to base64 (what a provider needs, and export).
    Inline(&'a dyn BlobSource),
}

/// What to write.
#[derive(Clone, Copy)]
pub struct RenderOpts<'a> {
    /// Include ctxlog's own fields (`timestamp`, `pinned`, `usage`): export only.
    pub meta: bool,
    /// How to write media.
    pub media: Media<'a>,
}

/// Writes a message as JSON. Blobs that cannot be resolved stay references and are pushed to
/// `missing`.
pub(crate) fn write_message(w: &mut JsonWriter, m: &Message, opts: RenderOpts<'_>, missing: &mut Vec<BlobId>) {
    w.begin_object();
    w.field_str("role", m.role.as_str());
    if let Some(c) = &m.content {
        w.key("content");
        write_content(w, c, opts, missing);
    }
    if let Some(calls) = &m.tool_calls {
        w.key("tool_calls");
        w.begin_array();
        for c in calls {
            w.begin_object();
            w.field_str("id", &c.id);
            match (c.kind.as_str(), opts.meta) {
                // Export: the input had no `type`, so neither does the output.
                ("", true) => {}
                // A view: providers expect the type.
                ("", false) => w.field_str("type", "function"),
                (kind, _) => w.field_str("type", kind),
            }
            w.key("function");
            w.begin_object();
            w.field_str("name", &c.name);
            w.field_str("arguments", &c.arguments);
            write_extra(w, &c.function_extra);
            w.end_object();
            write_extra(w, &c.extra);
            w.end_object();
        }
        w.end_array();
    }
    if let Some(id) = &m.tool_call_id {
        w.field_str("tool_call_id", id);
    }
    write_extra(w, &m.extra);
    if opts.meta {
        if let Some(ts) = &m.meta.timestamp {
            w.key("timestamp");
            w.raw(ts.as_str());
        }
        if let Some(p) = m.meta.pinned {
            w.key("pinned");
            w.bool(p);
        }
        if let Some(u) = &m.meta.usage {
            w.key("usage");
            w.raw(u.as_str());
        }
    }
    w.end_object();
}

pub(crate) fn write_extra(w: &mut JsonWriter, extra: &Extra) {
    for (k, v) in extra {
        w.key(k);
        w.raw(v.as_str());
    }
}

/// Writes a message's `content` value alone (a string or an array of blocks).
pub(crate) fn write_content_value(w: &mut JsonWriter, c: &Content, opts: RenderOpts<'_>, missing: &mut Vec<BlobId>) {
    write_content(w, c, opts, missing);
}

fn write_content(w: &mut JsonWriter, c: &Content, opts: RenderOpts<'_>, missing: &mut Vec<BlobId>) {
    match c {
        Content::Null => w.null(),
        Content::Text(t) => w.string(t),
        Content::Blocks(blocks) => {
            w.begin_array();
            for b in blocks {
                write_block(w, b, opts, missing);
            }
            w.end_array();
        }
    }
}

pub(crate) fn write_block(w: &mut JsonWriter, b: &Block, opts: RenderOpts<'_>, missing: &mut Vec<BlobId>) {
    match b {
        Block::Other(raw) => w.raw(raw.as_str()),
        Block::Text { text, extra } => {
            w.begin_object();
            w.field_str("type", "text");
            w.field_str("text", text);
            write_extra(w, extra);
            w.end_object();
        }
        Block::Media { kind, source, extra } => {
            w.begin_object();
            w.field_str("type", kind.as_str());
            w.key("source");
            match source {
                MediaSource::Other(raw) => w.raw(raw.as_str()),
                MediaSource::Base64 { media_type, data, extra } => {
                    w.begin_object();
                    match resolve(data, opts, missing) {
                        Resolved::Base64(b64) => {
                            w.field_str("type", "base64");
                            w.field_str("media_type", media_type);
                            w.field_str("data", &b64);
                        }
                        Resolved::Ref(r) => {
                            w.field_str("type", "blob");
                            w.field_str("media_type", media_type);
                            write_blob_ref(w, r);
                        }
                    }
                    write_extra(w, extra);
                    w.end_object();
                }
            }
            write_extra(w, extra);
            w.end_object();
        }
        Block::ImageUrl { url, inner, extra } => {
            w.begin_object();
            w.field_str("type", "image_url");
            w.key("image_url");
            w.begin_object();
            match url {
                ImageUrl::Link(u) => w.field_str("url", u),
                ImageUrl::Data { media_type, data } => match resolve(data, opts, missing) {
                    Resolved::Base64(b64) => w.field_str("url", &format!("data:{media_type};base64,{b64}")),
                    Resolved::Ref(r) => {
                        w.field_str("url", &format!("ctxlog-blob:{}", r.id));
                        w.field_str("media_type", media_type);
                        write_blob_ref(w, r);
                    }
                },
            }
            write_extra(w, inner);
            w.end_object();
            write_extra(w, extra);
            w.end_object();
        }
        Block::ToolUse { id, name, input, extra } => {
            w.begin_object();
            w.field_str("type", "tool_use");
            w.field_str("id", id);
            w.field_str("name", name);
            w.key("input");
            w.raw(input.as_str());
            write_extra(w, extra);
            w.end_object();
        }
        Block::ToolResult { tool_use_id, content, is_error, extra } => {
            w.begin_object();
            w.field_str("type", "tool_result");
            w.field_str("tool_use_id", tool_use_id);
            if let Some(c) = content {
                w.key("content");
                write_content(w, c, opts, missing);
            }
            if let Some(e) = is_error {
                w.key("is_error");
                w.bool(*e);
            }
            write_extra(w, extra);
            w.end_object();
        }
        Block::Thinking { thinking, signature, extra } => {
            w.begin_object();
            w.field_str("type", "thinking");
            w.field_str("thinking", thinking);
            if let Some(s) = signature {
                w.field_str("signature", s);
            }
            write_extra(w, extra);
            w.end_object();
        }
    }
}

pub(crate) fn write_blob_ref(w: &mut JsonWriter, r: &crate::message::BlobRef) {
    w.field_str("blob", r.id.as_str());
    w.key("bytes");
    w.u64(r.bytes);
    if let (Some(wd), Some(h)) = (r.width, r.height) {
        w.key("width");
        w.u64(u64::from(wd));
        w.key("height");
        w.u64(u64::from(h));
    }
}

pub(crate) enum Resolved<'m> {
    Base64(std::borrow::Cow<'m, str>),
    Ref(&'m crate::message::BlobRef),
}

pub(crate) fn resolve<'m>(data: &'m MediaData, opts: RenderOpts<'_>, missing: &mut Vec<BlobId>) -> Resolved<'m> {
    match (data, opts.media) {
        (MediaData::Inline(b64), _) => Resolved::Base64(b64.as_str().into()),
        (MediaData::Blob(r), Media::Refs) => Resolved::Ref(r),
        (MediaData::Blob(r), Media::Inline(src)) => match src.blob(&r.id) {
            Some(bytes) => Resolved::Base64(encode_base64(&bytes).into()),
            None => {
                missing.push(r.id.clone());
                Resolved::Ref(r)
            }
        },
    }
}

/// Writes a message as JSON in `format` ([`write_message`], or a Responses item).
pub(crate) fn write_in(
    format: WireFormat,
    w: &mut JsonWriter,
    m: &Message,
    opts: RenderOpts<'_>,
    missing: &mut Vec<BlobId>,
) {
    match format {
        WireFormat::OpenAiResponses => responses::write_item(w, m, opts, missing),
        WireFormat::Gemini => gemini::write_content(w, m, opts, missing),
        WireFormat::Anthropic | WireFormat::OpenAi => write_message(w, m, opts, missing),
    }
}

/// Renders one message of `format` to a JSON string (export).
pub fn to_json_in(format: WireFormat, m: &Message, opts: RenderOpts<'_>) -> (String, Vec<BlobId>) {
    let mut w = JsonWriter::new();
    let mut missing = Vec::new();
    write_in(format, &mut w, m, opts, &mut missing);
    (String::from_utf8_lossy(&w.into_bytes()).into_owned(), missing)
}

/// Renders one message to a JSON string (convenience for tests and export).
pub fn to_json(m: &Message, opts: RenderOpts<'_>) -> (String, Vec<BlobId>) {
    let mut w = JsonWriter::new();
    let mut missing = Vec::new();
    write_message(&mut w, m, opts, &mut missing);
    (String::from_utf8_lossy(&w.into_bytes()).into_owned(), missing)
}
