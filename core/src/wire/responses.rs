//! OpenAI Responses `input` items in the shared message model, and back.
//!
//! One item is one message (one `seq`), so the ladder, the tool-pair index and the summaries
//! work on items as they work on chat messages:
//!
//! | item | message |
//! |---|---|
//! | `message` (typed or the bare `{"role","content"}`) | its role and content; `input_text` / `output_text` parts are text blocks (the type follows the role), `input_image` with an `image_url` an image part (media externalized), other parts verbatim; `id`, `status`, `type` kept as extra fields |
//! | `function_call` | an assistant message with one tool call (`call_id`, `name`, `arguments` text kept as given) |
//! | `function_call_output` | a `tool` message answering `call_id` (a string `output` is text, a list of parts is blocks) |
//! | `reasoning`, `compaction` and every other item | an assistant message holding the item verbatim (`encrypted_content` byte for byte), tagged with its `type` |
//! | the request's `instructions` | a system message tagged `"type":"instructions"` (ctxlog's own tag: the writer of a request puts it back in the top-level field; an `input` item of that type is refused) |
//!
//! Tool pairs are indexed by `call_id` in both directions, as chat's `tool_call_id`.

use serde_json::value::RawValue;

use super::{
    err, extra, join, kind_of, object, parse_image_url, resolve, string, take_meta, take_string, write_blob_ref,
    write_block, write_extra, RenderOpts, Resolved, WireError,
};
use crate::json::JsonWriter;
use crate::message::{Block, Content, ImageUrl, Message, Meta, RawJson, Role, ToolCall};
use crate::store::BlobId;

/// ctxlog's tag of the message that holds a request's `instructions`.
pub(crate) const INSTRUCTIONS: &str = "instructions";

/// Parses one `input` item (or an exported line, ctxlog's own fields included).
pub fn parse_item(json: &str) -> Result<Message, WireError> {
    let raw: &RawValue = serde_json::from_str(json).map_err(|e| err("", format!("invalid JSON: {e}")))?;
    let mut obj = object(raw, "")?;
    let kind = obj.get("type").map(|t| string(t, "type")).transpose()?;
    match kind.as_deref() {
        None | Some("message") | Some(INSTRUCTIONS) => {
            let role_text = take_string(&mut obj, "role", "")?;
            let role = match (role_text.as_str(), kind.as_deref()) {
                ("system", Some(INSTRUCTIONS)) => Role::System,
                (_, Some(INSTRUCTIONS)) => return Err(err("role", "instructions are a system message")),
                ("user", _) => Role::User,
                ("assistant", _) => Role::Assistant,
                ("system", _) => Role::System,
                ("developer", _) => Role::Developer,
                (other, _) => {
                    return Err(err(
                        "role",
                        format!("unknown role {other:?} (expected user, assistant, system or developer)"),
                    ))
                }
            };
            let content_raw = obj.remove("content").ok_or_else(|| err("content", "missing"))?;
            let content = parse_content(content_raw, "content", role)?;
            let meta = take_meta(&mut obj)?;
            Ok(Message { role, content: Some(content), tool_calls: None, tool_call_id: None, meta, extra: extra(obj) })
        }
        Some("function_call") => {
            obj.remove("type");
            let id = take_string(&mut obj, "call_id", "")?;
            let name = take_string(&mut obj, "name", "")?;
            let arguments = take_string(&mut obj, "arguments", "")?;
            let meta = take_meta(&mut obj)?;
            let call = ToolCall {
                id,
                kind: "function_call".into(),
                name,
                arguments,
                extra: extra(obj),
                function_extra: Vec::new(),
            };
            Ok(Message {
                role: Role::Assistant,
                content: None,
                tool_calls: Some(vec![call]),
                tool_call_id: None,
                meta,
                extra: Vec::new(),
            })
        }
        Some("function_call_output") => {
            obj.remove("type");
            let call_id = take_string(&mut obj, "call_id", "")?;
            let output = obj.remove("output").ok_or_else(|| err("output", "missing"))?;
            let content = parse_content(output, "output", Role::User)?;
            let meta = take_meta(&mut obj)?;
            Ok(Message {
                role: Role::Tool,
                content: Some(content),
                tool_calls: None,
                tool_call_id: Some(call_id),
                meta,
                extra: extra(obj),
            })
        }
        Some(other) => Ok(opaque(raw, other)),
    }
}

/// An item ctxlog does not model, kept whole: the view writes its original bytes.
fn opaque(raw: &RawValue, kind: &str) -> Message {
    let mut tag = JsonWriter::new();
    tag.string(kind);
    Message {
        role: Role::Assistant,
        content: Some(Content::Blocks(vec![Block::Other(RawJson(raw.get().to_owned()))])),
        tool_calls: None,
        tool_call_id: None,
        meta: Meta::default(),
        extra: vec![("type".into(), RawJson(String::from_utf8_lossy(&tag.into_bytes()).into_owned()))],
    }
}

/// The `type` of an item kept verbatim (`reasoning`, `compaction`, …), if `m` is one.
pub(crate) fn opaque_kind(m: &Message) -> Option<String> {
    let (_, tag) = m.extra.iter().find(|(k, _)| k == "type")?;
    let kind: String = serde_json::from_str(tag.as_str()).ok()?;
    let verbatim = matches!(m.blocks(), [Block::Other(_)]) && m.tool_calls.is_none() && m.tool_call_id.is_none();
    (verbatim && kind != "message" && kind != INSTRUCTIONS).then_some(kind)
}

/// Whether `m` holds a request's `instructions`.
pub fn is_instructions(m: &Message) -> bool {
    m.role == Role::System && m.extra.iter().any(|(k, v)| k == "type" && v.as_str() == "\"instructions\"")
}

fn parse_content(raw: &RawValue, path: &str, role: Role) -> Result<Content, WireError> {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'"') => Ok(Content::Text(string(raw, path)?)),
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(raw.get()).map_err(|e| err(path, e.to_string()))?;
            let parts = items
                .into_iter()
                .enumerate()
                .map(|(i, item)| parse_part(item, &format!("{path}[{i}]"), role))
                .collect::<Result<_, _>>()?;
            Ok(Content::Blocks(parts))
        }
        _ => Err(err(path, format!("expected a string or an array of content parts, found {}", kind_of(raw)))),
    }
}

/// The text part type of a role: what the model wrote is `output_text`, the rest `input_text`.
fn text_type(role: Role) -> &'static str {
    if role == Role::Assistant {
        "output_text"
    } else {
        "input_text"
    }
}

fn parse_part(raw: &RawValue, path: &str, role: Role) -> Result<Block, WireError> {
    let mut obj = object(raw, path)?;
    let kind = take_string(&mut obj, "type", path)?;
    if kind == text_type(role) {
        return Ok(Block::Text { text: take_string(&mut obj, "text", path)?, extra: extra(obj) });
    }
    if kind == "input_image" && role != Role::Assistant {
        if let Some(url) = obj.remove("image_url") {
            let url = parse_image_url(string(url, &join(path, "image_url"))?, &join(path, "image_url"))?;
            return Ok(Block::ImageUrl { url, inner: Vec::new(), extra: extra(obj) });
        }
    }
    // `input_file`, `refusal`, an image by `file_id`, or a part in the wrong role (the API
    // refuses that one): verbatim.
    Ok(Block::Other(RawJson(raw.get().to_owned())))
}

/// Checks that a message can be written as a Responses item.
pub(crate) fn check(m: &Message) -> Result<(), WireError> {
    let modelled = |b: &Block| matches!(b, Block::Text { .. } | Block::ImageUrl { .. } | Block::Other(_));
    if let Some(i) = m.blocks().iter().position(|b| !modelled(b)) {
        return Err(err(&format!("content[{i}]"), "anthropic blocks are not valid in the responses format"));
    }
    if m.role == Role::Tool && m.tool_call_id.is_none() {
        return Err(err("call_id", "missing on a function_call_output"));
    }
    if let Some(calls) = &m.tool_calls {
        if calls.len() != 1 || m.content.is_some() {
            return Err(err("tool_calls", "a function_call item carries exactly one call and no content"));
        }
    }
    Ok(())
}

/// Writes `m` as a Responses item.
pub(crate) fn write_item(w: &mut JsonWriter, m: &Message, opts: RenderOpts<'_>, missing: &mut Vec<BlobId>) {
    if let (Some(_), Some(Content::Blocks(blocks))) = (opaque_kind(m), &m.content) {
        if let [Block::Other(raw)] = blocks.as_slice() {
            w.raw(raw.as_str());
            return;
        }
    }
    w.begin_object();
    match (&m.tool_calls, m.role) {
        (Some(calls), _) if !calls.is_empty() => {
            // One call per item (`check`); a merged message would be several items.
            for c in calls.iter().take(1) {
                w.field_str("type", "function_call");
                w.field_str("call_id", &c.id);
                w.field_str("name", &c.name);
                w.field_str("arguments", &c.arguments);
                write_extra(w, &c.extra);
            }
        }
        (_, Role::Tool) => {
            w.field_str("type", "function_call_output");
            w.field_str("call_id", m.tool_call_id.as_deref().unwrap_or_default());
            w.key("output");
            match &m.content {
                Some(c) => write_content(w, c, Role::User, opts, missing),
                None => w.string(""),
            }
            write_extra(w, &m.extra);
        }
        (_, role) => {
            w.field_str("role", role.as_str());
            w.key("content");
            match &m.content {
                Some(c) => write_content(w, c, role, opts, missing),
                None => w.string(""),
            }
            write_extra(w, &m.extra);
        }
    }
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

/// Writes a content value (a string, or parts) of a message in `role`.
pub(crate) fn write_content(
    w: &mut JsonWriter,
    c: &Content,
    role: Role,
    opts: RenderOpts<'_>,
    missing: &mut Vec<BlobId>,
) {
    match c {
        Content::Null => w.string(""),
        Content::Text(t) => w.string(t),
        Content::Blocks(blocks) => {
            w.begin_array();
            for b in blocks {
                write_part(w, b, role, opts, missing);
            }
            w.end_array();
        }
    }
}

fn write_part(w: &mut JsonWriter, b: &Block, role: Role, opts: RenderOpts<'_>, missing: &mut Vec<BlobId>) {
    match b {
        Block::Text { text, extra } => {
            w.begin_object();
            w.field_str("type", text_type(role));
            w.field_str("text", text);
            write_extra(w, extra);
            w.end_object();
        }
        Block::ImageUrl { url, inner: _, extra } => {
            w.begin_object();
            w.field_str("type", "input_image");
            match url {
                ImageUrl::Link(u) => w.field_str("image_url", u),
                ImageUrl::Data { media_type, data } => match resolve(data, opts, missing) {
                    Resolved::Base64(b64) => w.field_str("image_url", &format!("data:{media_type};base64,{b64}")),
                    Resolved::Ref(r) => {
                        w.field_str("image_url", &format!("ctxlog-blob:{}", r.id));
                        w.field_str("media_type", media_type);
                        write_blob_ref(w, r);
                    }
                },
            }
            write_extra(w, extra);
            w.end_object();
        }
        // Verbatim parts, and (never in a checked message) the other formats' blocks.
        other => write_block(w, other, opts, missing),
    }
}

/// Writes the `instructions` value of a request from its message.
pub(crate) fn write_instructions(w: &mut JsonWriter, m: &Message, opts: RenderOpts<'_>, missing: &mut Vec<BlobId>) {
    match &m.content {
        Some(c) => write_content(w, c, Role::System, opts, missing),
        None => w.string(""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{check_format, Media, RenderOpts, WireFormat};

    fn view(m: &Message) -> String {
        let mut w = JsonWriter::new();
        write_item(&mut w, m, RenderOpts { meta: false, media: Media::Refs }, &mut Vec::new());
        String::from_utf8(w.into_bytes()).unwrap()
    }

    fn same_json(a: &str, b: &str) {
        let (x, y): (serde_json::Value, serde_json::Value) =
            (serde_json::from_str(a).unwrap(), serde_json::from_str(b).unwrap());
        assert_eq!(x, y, "\n{a}\n{b}");
    }

    #[test]
    fn every_item_kind_round_trips() {
        let items = [
            r#"{"role":"user","content":"hi"}"#,
            r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"https://x/y.png","detail":"low"},{"type":"input_file","filename":"a.pdf","file_data":"data:application/pdf;base64,AAAA"}]}"#,
            r#"{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"ok"}]}"#,
            r#"{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"path\": \"a.rs\"}","call_id":"call_1","name":"read"}"#,
            r#"{"type":"function_call_output","call_id":"call_1","output":"fn main() {}"}"#,
            r#"{"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"see"}]}"#,
            r#"{"role":"developer","content":"be brief"}"#,
        ];
        for item in items {
            let m = parse_item(item).unwrap();
            check_format(&m, WireFormat::OpenAiResponses).unwrap();
            same_json(&view(&m), item);
            // The view is stable: parsing it again gives the same message.
            assert_eq!(parse_item(&view(&m)).unwrap(), m);
        }
    }

    #[test]
    fn opaque_items_are_kept_byte_for_byte() {
        // Odd spacing and key order: an encrypted payload must reach the provider as it came.
        let reasoning = r#"{ "type" : "reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAAB\u002bc=="}"#;
        let compaction = r#"{"id":"cmp_1","type":"compaction","encrypted_content":"Zm9v"}"#;
        for item in [reasoning, compaction] {
            let m = parse_item(item).unwrap();
            assert_eq!(view(&m), item);
            assert_eq!(m.role, Role::Assistant);
        }
        assert_eq!(opaque_kind(&parse_item(reasoning).unwrap()).as_deref(), Some("reasoning"));
        let c = parse_item(compaction).unwrap();
        assert!(c.provider_compaction() && c.is_pinned(), "a compaction item is never edited");
        assert!(!parse_item(reasoning).unwrap().is_pinned());
    }

    #[test]
    fn tool_pairs_by_call_id() {
        let call = parse_item(r#"{"type":"function_call","call_id":"call_9","name":"ls","arguments":"{}"}"#).unwrap();
        let out = parse_item(r#"{"type":"function_call_output","call_id":"call_9","output":"a b"}"#).unwrap();
        assert_eq!(call.call_ids().collect::<Vec<_>>(), ["call_9"]);
        assert_eq!(out.result_ids().collect::<Vec<_>>(), ["call_9"]);
        assert!(out.is_tool_result() && !out.is_human());
    }

    #[test]
    fn instructions_are_a_tagged_system_message() {
        let m = parse_item(r#"{"type":"instructions","role":"system","content":"You are terse."}"#).unwrap();
        assert!(is_instructions(&m) && m.role.is_system());
        assert!(!is_instructions(&parse_item(r#"{"role":"system","content":"x"}"#).unwrap()));
        assert!(parse_item(r#"{"type":"instructions","role":"user","content":"x"}"#).is_err());
    }

    #[test]
    fn parts_take_their_type_from_the_role() {
        // A part in the wrong role stays verbatim (the API refuses it; ctxlog does not fix it).
        let m = parse_item(r#"{"role":"user","content":[{"type":"output_text","text":"x"}]}"#).unwrap();
        assert!(matches!(m.blocks(), [Block::Other(_)]));
        let m = parse_item(r#"{"role":"assistant","content":[{"type":"output_text","text":"x"}]}"#).unwrap();
        assert!(matches!(m.blocks(), [Block::Text { .. }]));
    }

    #[test]
    fn errors_name_the_field() {
        let e = |s: &str| parse_item(s).unwrap_err().field;
        assert_eq!(e(r#"{"role":"tool","content":"x"}"#), "role");
        assert_eq!(e(r#"{"role":"user"}"#), "content");
        assert_eq!(e(r#"{"type":"function_call","name":"f","arguments":"{}"}"#), "call_id");
        assert_eq!(e(r#"{"type":"function_call_output","call_id":"c"}"#), "output");
        assert_eq!(e(r#"{"role":"user","content":[{"type":"input_text"}]}"#), "content[0].text");
        assert_eq!(e(r#"{"role":"user","content":5}"#), "content");
    }

    #[test]
    fn media_is_externalizable_and_written_back() {
        let png = "iVBORw0KGgo=";
        let item = format!(
            r#"{{"role":"user","content":[{{"type":"input_image","image_url":"data:image/png;base64,{png}","detail":"auto"}}]}}"#
        );
        let m = parse_item(&item).unwrap();
        assert!(matches!(m.blocks(), [Block::ImageUrl { url: ImageUrl::Data { .. }, .. }]));
        same_json(&view(&m), &item);
    }
}
