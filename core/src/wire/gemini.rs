//! Google Gemini `contents` in the shared message model, and back.
//!
//! One `Content` (`{"role","parts"}`) is one message, so the ladder, the tool-pair index and the
//! summaries work on contents as on chat messages:
//!
//! | part | block |
//! |---|---|
//! | `{"text"}` (also a `thought` one) | a text block; `thought`, `thoughtSignature` kept as extra fields |
//! | `{"inlineData":{"mimeType","data"}}` | a media block (image for `image/*`, else document; externalized) |
//! | `{"functionCall":{"name","args","id"?}}` | a tool call: `args` kept as given, `thoughtSignature` byte for byte |
//! | `{"functionResponse":{"name","response","id"?}}` | a tool result whose content is the `response` object's text |
//! | `fileData`, `executableCode`, … | verbatim |
//!
//! Roles: `user` (or none: the API's default) is the user, `model` the assistant; ctxlog's own
//! `system` role holds the request's `systemInstruction` (the writer of a request puts it back
//! in that field). The API knows no other role.
//!
//! **Tool pairs.** Gemini pairs a `functionResponse` with a `functionCall` of the content just
//! before it, by name and order (or by `id` when both carry one). The index needs one key per
//! call, so a call without an `id` gets ctxlog's key `~{seq}:{name}:{k}` (the k-th call of that
//! name in the content at `seq`), and a response without one the key of the call it answers,
//! `~{seq-1}:{name}:{k}`. The key is never written: only an `id` the client gave is. This is why
//! a content is parsed at its position ([`parse_content_at`]): the seq it has (or will have) in
//! the session, i.e. its index in `contents`, plus one when a `systemInstruction` comes first.
//!
//! A truncated `response` is no longer a JSON object: it is written as `{"output": text}`, the
//! shape Google documents for a function's output.

use serde_json::value::RawValue;

use super::{
    check_base64, err, extra, join, kind_of, object, resolve, string, take_meta, take_string, write_blob_ref,
    write_extra, RenderOpts, Resolved, WireError,
};
use crate::json::JsonWriter;
use crate::message::{Block, Content, MediaData, MediaKind, MediaSource, Message, RawJson, Role};
use crate::store::BlobId;

/// Prefix of the extra fields that live inside a part's `functionCall` object.
const CALL: &str = "functionCall.";
/// Prefix of the extra fields that live inside a part's `functionResponse` object.
const RESPONSE: &str = "functionResponse.";

/// Parses one content (or an exported line, ctxlog's own fields included) that has, or will
/// have, `seq` in its session: the keys of its tool calls and results depend on it.
pub fn parse_content_at(json: &str, seq: u64) -> Result<Message, WireError> {
    let raw: &RawValue = serde_json::from_str(json).map_err(|e| err("", format!("invalid JSON: {e}")))?;
    let mut obj = object(raw, "")?;
    let role = match obj.remove("role").map(|r| string(r, "role")).transpose()?.as_deref() {
        None | Some("user") => Role::User,
        Some("model") => Role::Assistant,
        Some("system") => Role::System,
        Some(other) => {
            return Err(err("role", format!("Please use a valid role: user, model (found {other:?})")));
        }
    };
    let parts_raw = obj.remove("parts").ok_or_else(|| err("parts", "missing"))?;
    let items: Vec<&RawValue> = serde_json::from_str(parts_raw.get())
        .map_err(|_| err("parts", format!("expected an array, found {}", kind_of(parts_raw))))?;
    if items.is_empty() {
        return Err(err("parts", "must not be empty: a content needs at least one part"));
    }
    let mut calls: Vec<String> = Vec::new();
    let mut answers: Vec<String> = Vec::new();
    let blocks = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| parse_part(item, &format!("parts[{i}]"), seq, &mut calls, &mut answers))
        .collect::<Result<Vec<_>, _>>()?;
    let meta = take_meta(&mut obj)?;
    Ok(Message {
        role,
        content: Some(Content::Blocks(blocks)),
        tool_calls: None,
        tool_call_id: None,
        meta,
        extra: extra(obj),
    })
}

/// The key of the `k`-th call named `name` (counted in `seen`) of the content at `seq`.
fn key(seq: Option<u64>, name: &str, seen: &mut Vec<String>) -> String {
    let k = seen.iter().filter(|n| *n == name).count();
    seen.push(name.to_owned());
    match seq {
        Some(s) => format!("~{s}:{name}:{k}"),
        // A response in the first content answers nothing: an orphan the fold refuses.
        None => format!("~none:{name}:{k}"),
    }
}

fn parse_part(
    raw: &RawValue,
    path: &str,
    seq: u64,
    calls: &mut Vec<String>,
    answers: &mut Vec<String>,
) -> Result<Block, WireError> {
    let mut obj = object(raw, path)?;
    if let Some(text) = obj.remove("text") {
        let text = string(text, &join(path, "text"))?;
        return Ok(Block::Text { text, extra: extra(obj) });
    }
    if let Some(data) = obj.remove("inlineData") {
        let p = join(path, "inlineData");
        let mut inner = object(data, &p)?;
        let media_type = take_string(&mut inner, "mimeType", &p)?;
        let bytes = take_string(&mut inner, "data", &p)?;
        check_base64(&bytes, &join(&p, "data"))?;
        let kind = if media_type.starts_with("image/") { MediaKind::Image } else { MediaKind::Document };
        let source = MediaSource::Base64 { media_type, data: MediaData::Inline(bytes), extra: extra(inner) };
        return Ok(Block::Media { kind, source, extra: extra(obj) });
    }
    if let Some(call) = obj.remove("functionCall") {
        let p = join(path, "functionCall");
        let mut inner = object(call, &p)?;
        let name = take_string(&mut inner, "name", &p)?;
        let input = inner.remove("args").map_or_else(|| RawJson("{}".into()), |a| RawJson(a.get().to_owned()));
        if !input.as_str().trim_start().starts_with('{') {
            return Err(err(&join(&p, "args"), "expected an object"));
        }
        let id = match inner.get("id") {
            Some(id) => string(id, &join(&p, "id"))?,
            None => key(Some(seq), &name, calls),
        };
        let mut fields = prefixed(CALL, inner);
        fields.extend(extra(obj));
        return Ok(Block::ToolUse { id, name, input, extra: fields });
    }
    if let Some(response) = obj.remove("functionResponse") {
        let p = join(path, "functionResponse");
        let mut inner = object(response, &p)?;
        let name = inner.get("name").ok_or_else(|| err(&join(&p, "name"), "missing"))?;
        let name = string(name, &join(&p, "name"))?;
        let body = inner.remove("response").ok_or_else(|| err(&join(&p, "response"), "missing"))?;
        if !body.get().trim_start().starts_with('{') {
            return Err(err(&join(&p, "response"), "expected an object"));
        }
        let tool_use_id = match inner.get("id") {
            Some(id) => string(id, &join(&p, "id"))?,
            None => key(seq.checked_sub(1), &name, answers),
        };
        let mut fields = prefixed(RESPONSE, inner);
        fields.extend(extra(obj));
        return Ok(Block::ToolResult {
            tool_use_id,
            content: Some(Content::Text(body.get().to_owned())),
            is_error: None,
            extra: fields,
        });
    }
    // `fileData`, `executableCode`, `codeExecutionResult`, …: verbatim.
    Ok(Block::Other(RawJson(raw.get().to_owned())))
}

fn prefixed(prefix: &str, obj: super::Obj<'_>) -> Vec<(String, RawJson)> {
    obj.into_iter().map(|(k, v)| (format!("{prefix}{k}"), RawJson(v.get().to_owned()))).collect()
}

/// Checks that a message can be written as a Gemini content.
pub(crate) fn check(m: &Message) -> Result<(), WireError> {
    if matches!(m.role, Role::Tool | Role::Developer) {
        return Err(err("role", format!("role {:?} is not valid in the gemini format", m.role.as_str())));
    }
    if m.tool_calls.is_some() || m.tool_call_id.is_some() {
        return Err(err("tool_calls", "OpenAI tool fields are not valid in the gemini format"));
    }
    let foreign = |b: &Block| matches!(b, Block::ImageUrl { .. } | Block::Thinking { .. });
    if let Some(i) = m.blocks().iter().position(foreign) {
        return Err(err(&format!("parts[{i}]"), "this block is not valid in the gemini format"));
    }
    Ok(())
}

/// The API's name of a role.
fn role_name(role: Role) -> &'static str {
    match role {
        Role::Assistant => "model",
        Role::System | Role::Developer => "system",
        Role::User | Role::Tool => "user",
    }
}

/// Writes `m` as a content (a view item, or an exported line with `opts.meta`).
pub(crate) fn write_content(w: &mut JsonWriter, m: &Message, opts: RenderOpts<'_>, missing: &mut Vec<BlobId>) {
    w.begin_object();
    w.field_str("role", role_name(m.role));
    w.key("parts");
    write_parts(w, m.content.as_ref(), opts, missing);
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

/// Writes the request's `systemInstruction` value from its message.
pub(crate) fn write_system_instruction(
    w: &mut JsonWriter,
    m: &Message,
    opts: RenderOpts<'_>,
    missing: &mut Vec<BlobId>,
) {
    w.begin_object();
    w.key("parts");
    write_parts(w, m.content.as_ref(), opts, missing);
    w.end_object();
}

fn write_parts(w: &mut JsonWriter, c: Option<&Content>, opts: RenderOpts<'_>, missing: &mut Vec<BlobId>) {
    w.begin_array();
    match c {
        // ctxlog's own messages (summaries, placeholders, stubs) are strings.
        Some(Content::Text(t)) => {
            w.begin_object();
            w.field_str("text", t);
            w.end_object();
        }
        Some(Content::Blocks(blocks)) => {
            for b in blocks {
                write_part(w, b, opts, missing);
            }
        }
        None | Some(Content::Null) => {
            w.begin_object();
            w.field_str("text", "");
            w.end_object();
        }
    }
    w.end_array();
}

/// Writes the extra fields that belong to the part (not inside its `functionCall` /
/// `functionResponse`).
fn write_part_extra(w: &mut JsonWriter, extra: &[(String, RawJson)]) {
    for (k, v) in extra.iter().filter(|(k, _)| !k.starts_with(CALL) && !k.starts_with(RESPONSE)) {
        w.key(k);
        w.raw(v.as_str());
    }
}

fn write_inner(w: &mut JsonWriter, extra: &[(String, RawJson)], prefix: &str, skip: &str) {
    for (k, v) in extra {
        if let Some(inner) = k.strip_prefix(prefix).filter(|inner| *inner != skip) {
            w.key(inner);
            w.raw(v.as_str());
        }
    }
}

fn write_part(w: &mut JsonWriter, b: &Block, opts: RenderOpts<'_>, missing: &mut Vec<BlobId>) {
    match b {
        Block::Text { text, extra } => {
            w.begin_object();
            w.field_str("text", text);
            write_extra(w, extra);
            w.end_object();
        }
        Block::Media { source: MediaSource::Base64 { media_type, data, extra: inner }, extra, .. } => {
            w.begin_object();
            w.key("inlineData");
            w.begin_object();
            w.field_str("mimeType", media_type);
            match resolve(data, opts, missing) {
                Resolved::Base64(b64) => w.field_str("data", &b64),
                Resolved::Ref(r) => write_blob_ref(w, r),
            }
            write_extra(w, inner);
            w.end_object();
            write_extra(w, extra);
            w.end_object();
        }
        Block::ToolUse { name, input, extra, .. } => {
            w.begin_object();
            w.key("functionCall");
            w.begin_object();
            w.field_str("name", name);
            w.key("args");
            w.raw(input.as_str());
            write_inner(w, extra, CALL, "");
            w.end_object();
            write_part_extra(w, extra);
            w.end_object();
        }
        Block::ToolResult { content, extra, tool_use_id, .. } => {
            w.begin_object();
            w.key("functionResponse");
            w.begin_object();
            let name = extra.iter().find(|(k, _)| k.strip_prefix(RESPONSE) == Some("name"));
            match name {
                Some((_, n)) => {
                    w.key("name");
                    w.raw(n.as_str());
                }
                // Only a response parsed from JSON is written, and it always has its name.
                None => w.field_str("name", tool_use_id),
            }
            w.key("response");
            write_response(w, content.as_ref());
            write_inner(w, extra, RESPONSE, "name");
            w.end_object();
            write_part_extra(w, extra);
            w.end_object();
        }
        Block::Other(raw) => w.raw(raw.as_str()),
        // A checked message has none of these; written as text so the JSON stays valid.
        Block::Media { .. } | Block::ImageUrl { .. } | Block::Thinking { .. } => {
            w.begin_object();
            w.field_str("text", "");
            w.end_object();
        }
    }
}

/// A `response` object: as the client sent it, or (cut by the ladder) `{"output": text}`.
fn write_response(w: &mut JsonWriter, c: Option<&Content>) {
    let text = match c {
        Some(Content::Text(t)) => t.clone(),
        Some(c @ Content::Blocks(_)) => {
            let m = Message {
                role: Role::User,
                content: Some(c.clone()),
                tool_calls: None,
                tool_call_id: None,
                meta: Default::default(),
                extra: Vec::new(),
            };
            m.plain_text()
        }
        None | Some(Content::Null) => String::new(),
    };
    let object = text.trim_start().starts_with('{') && serde_json::from_str::<&RawValue>(&text).is_ok();
    if object {
        w.raw(&text);
    } else {
        w.begin_object();
        w.field_str("output", &text);
        w.end_object();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{check_format, Media, RenderOpts, WireFormat};

    fn view(m: &Message) -> String {
        let mut w = JsonWriter::new();
        write_content(&mut w, m, RenderOpts { meta: false, media: Media::Refs }, &mut Vec::new());
        String::from_utf8(w.into_bytes()).unwrap()
    }

    fn same_json(a: &str, b: &str) {
        let (x, y): (serde_json::Value, serde_json::Value) =
            (serde_json::from_str(a).unwrap(), serde_json::from_str(b).unwrap());
        assert_eq!(x, y, "\n{a}\n{b}");
    }

    #[test]
    fn every_part_kind_round_trips() {
        let contents = [
            r#"{"role":"user","parts":[{"text":"hi"}]}"#,
            r#"{"role":"user","parts":[{"text":"look"},{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}},{"fileData":{"mimeType":"application/pdf","fileUri":"gs://b/a.pdf"}}]}"#,
            r#"{"role":"model","parts":[{"text":"thinking…","thought":true},{"functionCall":{"name":"read","args":{"path": "a.rs"}},"thoughtSignature":"c2ln"}]}"#,
            r#"{"role":"model","parts":[{"functionCall":{"id":"call_1","name":"ls","args":{}}}]}"#,
            r#"{"role":"user","parts":[{"functionResponse":{"name":"read","response":{"output":"fn main() {}"}}}]}"#,
            r#"{"role":"user","parts":[{"functionResponse":{"id":"call_1","name":"ls","response":{"output":"a b"}}}]}"#,
        ];
        for (seq, c) in contents.iter().enumerate() {
            let m = parse_content_at(c, seq as u64 + 1).unwrap();
            check_format(&m, WireFormat::Gemini).unwrap();
            same_json(&view(&m), c);
            // The view is stable: parsing it again gives the same message.
            assert_eq!(parse_content_at(&view(&m), seq as u64 + 1).unwrap(), m);
        }
    }

    #[test]
    fn args_and_signatures_are_kept_as_given() {
        let c = r#"{"role":"model","parts":[{"functionCall":{"name":"f","args":{"b": 1,  "a": [2]}},"thoughtSignature":"AAA+/="}]}"#;
        let v = view(&parse_content_at(c, 3).unwrap());
        assert!(v.contains(r#""args":{"b": 1,  "a": [2]}"#), "{v}");
        assert!(v.contains(r#""thoughtSignature":"AAA+/=""#), "{v}");
    }

    #[test]
    fn pairs_by_name_and_order_or_by_id() {
        let call = parse_content_at(
            r#"{"role":"model","parts":[{"functionCall":{"name":"read","args":{}}},{"functionCall":{"name":"read","args":{"p":1}}},{"functionCall":{"name":"ls"}}]}"#,
            4,
        )
        .unwrap();
        let answer = parse_content_at(
            r#"{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{}}},{"functionResponse":{"name":"read","response":{}}},{"functionResponse":{"name":"read","response":{}}}]}"#,
            5,
        )
        .unwrap();
        let mut calls: Vec<_> = call.call_ids().collect();
        let mut results: Vec<_> = answer.result_ids().collect();
        calls.sort();
        results.sort();
        assert_eq!(calls, results);
        assert!(answer.is_tool_result() && !answer.is_human());
        // By id: the position does not matter.
        let a = parse_content_at(r#"{"role":"model","parts":[{"functionCall":{"id":"x","name":"f"}}]}"#, 1).unwrap();
        let b = parse_content_at(
            r#"{"role":"user","parts":[{"functionResponse":{"id":"x","name":"f","response":{}}}]}"#,
            9,
        )
        .unwrap();
        assert_eq!(a.call_ids().collect::<Vec<_>>(), b.result_ids().collect::<Vec<_>>());
        // ctxlog's keys are never written.
        assert!(!view(&call).contains('~'));
    }

    #[test]
    fn a_cut_response_is_written_as_output() {
        let mut m = parse_content_at(
            r#"{"role":"user","parts":[{"functionResponse":{"name":"read","response":{"output":"long"}}}]}"#,
            2,
        )
        .unwrap();
        if let Some(Content::Blocks(b)) = &mut m.content {
            if let Some(Block::ToolResult { content, .. }) = b.first_mut() {
                *content = Some(Content::Text("[truncated] {\"output\":\"lo...".into()));
            }
        }
        same_json(
            &view(&m),
            r#"{"role":"user","parts":[{"functionResponse":{"name":"read","response":{"output":"[truncated] {\"output\":\"lo..."}}}]}"#,
        );
    }

    #[test]
    fn what_the_api_refuses_is_refused() {
        let e = |s: &str| parse_content_at(s, 1).unwrap_err().field;
        assert_eq!(e(r#"{"role":"assistant","parts":[{"text":"x"}]}"#), "role");
        assert_eq!(e(r#"{"role":"function","parts":[{"text":"x"}]}"#), "role");
        assert_eq!(e(r#"{"role":"user","parts":[]}"#), "parts");
        assert_eq!(e(r#"{"role":"user"}"#), "parts");
        assert_eq!(e(r#"{"role":"user","parts":[{"text":5}]}"#), "parts[0].text");
        assert_eq!(e(r#"{"role":"model","parts":[{"functionCall":{"args":{}}}]}"#), "parts[0].functionCall.name");
        assert_eq!(
            e(r#"{"role":"user","parts":[{"functionResponse":{"name":"f"}}]}"#),
            "parts[0].functionResponse.response"
        );
        assert_eq!(
            e(r#"{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"%%"}}]}"#),
            "parts[0].inlineData.data"
        );
        // No role is the user (the API's default); it is written back explicitly.
        let m = parse_content_at(r#"{"parts":[{"text":"x"}]}"#, 0).unwrap();
        assert!(m.is_human());
    }

    #[test]
    fn ctxlog_text_is_one_text_part() {
        let m = Message {
            role: Role::User,
            content: Some(Content::Text("[ctxlog: summary]".into())),
            tool_calls: None,
            tool_call_id: None,
            meta: Default::default(),
            extra: Vec::new(),
        };
        assert_eq!(view(&m), r#"{"role":"user","parts":[{"text":"[ctxlog: summary]"}]}"#);
    }
}
