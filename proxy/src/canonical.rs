//! The canonical form a client's history is compared with the log by (docs/log-format.md,
//! "Canonical form of a message"): what a message *means* to the provider, not how its JSON
//! was spelled. Two spellings of one message — other separators or whitespace, keys in
//! another order (a jsonb round trip), other string escapes, a `cache_control` breakpoint
//! added, moved or dropped, a string content written as one text block — have one form; any
//! change a model would see changes it. The log keeps the client's bytes; this form is only
//! ever hashed.
//!
//! It is computed only where raw digests disagree (a moved breakpoint, a re-serialized
//! history, a session reopened from the store): the known prefix of a request is recognized
//! by the xxh3 digests of its raw bytes first.

use ctxlog::internal::wire::{Media, RenderOpts};
use ctxlog::message::{BlobRef, Block, Content, ImageUrl, MediaData, MediaSource, Message};
use ctxlog::BlobId;
use serde_json::{Map, Value};
use xxhash_rust::xxh3::Xxh3;

/// Request-only annotations: they tell the provider how to serve the request (where to cache),
/// never what the conversation says. Dropped from messages and content blocks (also inside
/// tool results), never from tool inputs, which are the tool's data.
const ANNOTATIONS: [&str; 1] = ["cache_control"];

/// The canonical digest of a message, as the client sent it (parsed) or as the log holds it:
/// both sides go through the same steps, media payloads become the blob references the log
/// keeps (SHA-256 of the decoded bytes).
pub(crate) fn digest(m: &Message) -> u128 {
    let m = as_logged(m);
    let (json, _) = ctxlog::internal::wire::to_json(&m, RenderOpts { meta: true, media: Media::Refs });
    let mut h = Xxh3::new();
    match serde_json::from_str::<Value>(&json) {
        Ok(mut v) => {
            normalize_message(&mut v);
            feed(&mut h, &v);
        }
        // Deeper than serde's recursion limit: its own spelling stands for it (still
        // deterministic; only a re-serialized copy of such a message is not recognized).
        Err(_) => {
            h.update(b"raw\0");
            h.update(json.as_bytes());
        }
    }
    h.digest128()
}

/// The message object: annotations and `null` fields dropped (an absent field and a `null`
/// one mean the same to both APIs), its content normalized.
fn normalize_message(v: &mut Value) {
    let Value::Object(o) = v else { return };
    strip(o);
    if let Some(c) = o.get_mut("content") {
        normalize_content(c);
    }
}

/// A content value: a string is one text block (clients turn one into the other to attach a
/// breakpoint); each block loses its annotations and `null` fields; a tool result's content
/// is a content value too.
fn normalize_content(c: &mut Value) {
    match c {
        Value::String(s) => {
            let mut block = Map::new();
            block.insert("type".into(), Value::String("text".into()));
            block.insert("text".into(), Value::String(std::mem::take(s)));
            *c = Value::Array(vec![Value::Object(block)]);
        }
        Value::Array(blocks) => {
            for b in blocks {
                let Value::Object(o) = b else { continue };
                strip(o);
                if o.get("type").and_then(Value::as_str) == Some("tool_result") {
                    if let Some(inner) = o.get_mut("content") {
                        normalize_content(inner);
                    }
                }
            }
        }
        _ => {}
    }
}

fn strip(o: &mut Map<String, Value>) {
    o.retain(|k, v| !v.is_null() && !ANNOTATIONS.contains(&k.as_str()));
}

/// Feeds a value to the hash in a self-delimiting encoding, object keys sorted (whatever
/// order serde_json's map keeps).
fn feed(h: &mut Xxh3, v: &Value) {
    match v {
        Value::Null => h.update(b"n"),
        Value::Bool(b) => h.update(if *b { b"t" } else { b"f" }),
        Value::Number(n) => {
            let s = n.to_string();
            h.update(b"#");
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        Value::String(s) => {
            h.update(b"s");
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        Value::Array(items) => {
            h.update(b"[");
            h.update(&(items.len() as u64).to_le_bytes());
            items.iter().for_each(|i| feed(h, i));
        }
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort_unstable();
            h.update(b"{");
            h.update(&(keys.len() as u64).to_le_bytes());
            for k in keys {
                h.update(&(k.len() as u64).to_le_bytes());
                h.update(k.as_bytes());
                if let Some(v) = o.get(k) {
                    feed(h, v);
                }
            }
        }
    }
}

/// The message with its base64 payloads as the blob references the log keeps for them.
pub(crate) fn as_logged(m: &Message) -> Message {
    let mut m = m.clone();
    if let Some(Content::Blocks(blocks)) = &mut m.content {
        blocks.iter_mut().for_each(externalize);
    }
    m
}

fn externalize(b: &mut Block) {
    match b {
        Block::Media { source: MediaSource::Base64 { data, .. }, .. } => as_blob(data),
        Block::ImageUrl { url: ImageUrl::Data { data, .. }, .. } => as_blob(data),
        Block::ToolResult { content: Some(Content::Blocks(inner)), .. } => inner.iter_mut().for_each(externalize),
        _ => {}
    }
}

fn as_blob(data: &mut MediaData) {
    let MediaData::Inline(b64) = data else { return };
    let Ok(bytes) = ctxlog::internal::wire::decode_base64(b64) else { return };
    let dims = ctxlog::internal::media::dimensions(&bytes);
    *data = MediaData::Blob(BlobRef {
        id: BlobId::of(&bytes),
        bytes: bytes.len() as u64,
        width: dims.map(|d| d.0),
        height: dims.map(|d| d.1),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxlog::parse_message;
    use proptest::prelude::*;
    use serde_json::json;

    fn form(raw: &str) -> u128 {
        digest(&parse_message(raw).unwrap())
    }

    #[test]
    fn annotations_spelling_and_block_form_do_not_count() {
        let plain = r#"{"role":"user","content":"hello"}"#;
        for same in [
            r#"{ "content" : "hello", "role" : "user" }"#,
            r#"{"role":"user","content":[{"type":"text","text":"hello"}]}"#,
            r#"{"role":"user","content":[{"type":"text","text":"hello","cache_control":{"type":"ephemeral"}}]}"#,
            r#"{"role":"user","content":[{"cache_control":{"type":"ephemeral","ttl":"1h"},"text":"hel\u006co","type":"text"}]}"#,
            r#"{"role":"user","content":"hello","cache_control":{"type":"ephemeral"}}"#,
            r#"{"role":"user","content":"hello","name":null}"#,
        ] {
            assert_eq!(form(same), form(plain), "{same}");
        }
        for other in [
            r#"{"role":"user","content":"hello!"}"#,
            r#"{"role":"assistant","content":"hello"}"#,
            r#"{"role":"user","content":"hello","name":"bob"}"#,
            r#"{"role":"user","content":[{"type":"text","text":"hello"},{"type":"text","text":""}]}"#,
            r#"{"role":"user","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]}"#,
        ] {
            assert_ne!(form(other), form(plain), "{other}");
        }
    }

    #[test]
    fn tool_inputs_compare_by_value_and_keep_their_own_fields() {
        let a = r#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"ls","input":{"path":"/","all":true}}]}"#;
        let reordered = r#"{"role":"assistant","content":[{"input":{"all":true,"path":"/"},"name":"ls","id":"t1","type":"tool_use"}]}"#;
        assert_eq!(form(a), form(reordered));
        // A `cache_control` (or a null) inside a tool's input is the tool's data.
        let data = r#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"ls","input":{"path":"/","all":true,"cache_control":1}}]}"#;
        assert_ne!(form(a), form(data));
        let result = r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}"#;
        let blocks = r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}],"cache_control":{"type":"ephemeral"}}]}"#;
        assert_eq!(form(result), form(blocks));
    }

    #[test]
    fn media_compare_as_the_blobs_they_become() {
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
        let img = |data: &str| {
            format!(
                r#"{{"role":"user","content":[{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{data}"}}}}]}}"#
            )
        };
        let m = parse_message(&img(png)).unwrap();
        let mut logged = m.clone();
        if let Some(Content::Blocks(b)) = &mut logged.content {
            b.iter_mut().for_each(externalize);
        }
        assert_ne!(m, logged);
        assert_eq!(digest(&m), digest(&logged));
        assert_ne!(form(&img(png)), form(&img(&png.replace("AAAADUlEQVR42", "AAAADUlEQVR43"))));
    }

    /// Message-shaped JSON: the fields the APIs have, content as a string or blocks, tool
    /// inputs of any shape.
    fn message() -> impl Strategy<Value = Value> {
        let text = "[a-z é\"\\\\/\n{}]{0,12}";
        let input = proptest::collection::btree_map(
            "[a-z_]{1,6}",
            prop_oneof![
                any::<i64>().prop_map(|n| json!(n)),
                text.prop_map(Value::String),
                any::<bool>().prop_map(Value::Bool),
                Just(Value::Null),
            ],
            0..4,
        )
        .prop_map(|m| Value::Object(m.into_iter().collect()));
        let block = prop_oneof![
            text.prop_map(|t| json!({"type": "text", "text": t})),
            (text, input).prop_map(
                |(n, i)| json!({"type": "tool_use", "id": format!("t_{}", n.len()), "name": "f", "input": i})
            ),
            text.prop_map(|t| json!({"type": "tool_result", "tool_use_id": "t_1", "content": t})),
        ];
        let content =
            prop_oneof![text.prop_map(Value::String), proptest::collection::vec(block, 1..4).prop_map(Value::Array),];
        (prop_oneof![Just("user"), Just("assistant")], content)
            .prop_map(|(role, content)| json!({"role": role, "content": content}))
    }

    /// Another spelling of the same message: keys in reverse order (as a jsonb round trip may
    /// order them), `colon` and `comma` as separators (Python's `", "`/`": "`, pretty
    /// newlines), non-ASCII escaped as `\uXXXX` when `ascii` (Python's default), breakpoints
    /// added on the message and on every block, a string content turned into one text block.
    fn respell(v: &Value, colon: &str, comma: &str, ascii: bool, breakpoints: bool) -> String {
        fn string(s: &str, ascii: bool, out: &mut String) {
            let quoted = serde_json::to_string(s).unwrap();
            if !ascii {
                out.push_str(&quoted);
                return;
            }
            for c in quoted.chars() {
                if c.is_ascii() {
                    out.push(c);
                } else {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
            }
        }
        fn spell(v: &Value, colon: &str, comma: &str, ascii: bool, out: &mut String) {
            match v {
                Value::Object(o) => {
                    out.push('{');
                    for (i, (k, v)) in o.iter().rev().enumerate() {
                        if i > 0 {
                            out.push_str(comma);
                        }
                        string(k, ascii, out);
                        out.push_str(colon);
                        spell(v, colon, comma, ascii, out);
                    }
                    out.push('}');
                }
                Value::Array(a) => {
                    out.push('[');
                    for (i, v) in a.iter().enumerate() {
                        if i > 0 {
                            out.push_str(comma);
                        }
                        spell(v, colon, comma, ascii, out);
                    }
                    out.push(']');
                }
                Value::String(s) => string(s, ascii, out),
                other => out.push_str(&other.to_string()),
            }
        }
        let mut v = v.clone();
        if breakpoints {
            let bp = json!({"type": "ephemeral", "ttl": "5m"});
            if let Some(o) = v.as_object_mut() {
                match o.get_mut("content") {
                    Some(Value::String(s)) => {
                        let text = std::mem::take(s);
                        o.insert("content".into(), json!([{"type": "text", "text": text, "cache_control": bp}]));
                    }
                    Some(Value::Array(blocks)) => {
                        for b in blocks.iter_mut().filter_map(Value::as_object_mut) {
                            b.insert("cache_control".into(), bp.clone());
                        }
                    }
                    _ => {}
                }
                o.insert("cache_control".into(), bp);
            }
        }
        let mut out = String::new();
        spell(&v, colon, comma, ascii, &mut out);
        out
    }

    proptest! {
        #[test]
        fn any_respelling_has_the_same_form(
            m in message(),
            seps in prop_oneof![Just((":", ",")), Just((": ", ", ")), Just((" : ", ",\n  "))],
            ascii: bool,
            breakpoints: bool,
        ) {
            let original = m.to_string();
            let respelled = respell(&m, seps.0, seps.1, ascii, breakpoints);
            let (a, b) = (parse_message(&original).unwrap(), parse_message(&respelled).unwrap());
            prop_assert_eq!(digest(&a), digest(&b), "{} vs {}", original, respelled);
        }

        #[test]
        fn a_content_change_changes_the_form(m in message(), extra in "[a-z]{1,4}") {
            let original = parse_message(&m.to_string()).unwrap();
            let mut changed = m.clone();
            match changed.get_mut("content") {
                Some(Value::String(s)) => s.push_str(&extra),
                Some(Value::Array(blocks)) => blocks.push(json!({"type": "text", "text": extra})),
                _ => unreachable!(),
            }
            let changed = parse_message(&changed.to_string()).unwrap();
            prop_assert_ne!(digest(&original), digest(&changed));
        }
    }
}
