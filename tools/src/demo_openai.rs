//! The demo session in OpenAI chat format (`demo --format openai`, the default with an
//! `openai:` summarizer): the bundled Anthropic-style transcript converted message by message,
//! so that a fork summary on an OpenAI-compatible server appends to a request that server can
//! read from its cache.
//!
//! Text blocks become the content string (several joined by blank lines), `tool_use` blocks
//! `tool_calls` (the input as the `arguments` JSON text), each `tool_result` a `tool` message
//! right after its call (text only: the API's tool messages hold no images, so an image in a
//! result goes to a user message after the results), images `image_url` parts with a `data:`
//! URL; thinking is dropped (no OpenAI chat equivalent). `timestamp` and `pinned` stay.

use serde_json::{json, Map, Value};

use crate::error::CliError;

/// Converts one JSONL transcript (Anthropic style) into OpenAI chat style.
pub fn convert(anthropic: &str) -> Result<String, CliError> {
    let mut out = String::with_capacity(anthropic.len());
    for (i, line) in anthropic.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let m: Value = serde_json::from_str(line)
            .map_err(|e| CliError::Usage(format!("the bundled demo transcript, line {}: {e}", i + 1)))?;
        for converted in message(&m) {
            out.push_str(&converted.to_string());
            out.push('\n');
        }
    }
    Ok(out)
}

/// The ctxlog fields a message keeps (`timestamp`, `pinned`).
fn with_extras(mut m: Map<String, Value>, from: &Value) -> Value {
    for k in ["timestamp", "pinned"] {
        if let Some(v) = from.get(k) {
            m.insert(k.into(), v.clone());
        }
    }
    Value::Object(m)
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn image_part(block: &Value) -> Option<Value> {
    let src = block.get("source")?;
    match src.get("type").and_then(Value::as_str)? {
        "base64" => {
            let media = src.get("media_type").and_then(Value::as_str)?;
            let data = src.get("data").and_then(Value::as_str)?;
            Some(json!({"type": "image_url", "image_url": {"url": format!("data:{media};base64,{data}")}}))
        }
        "url" => Some(json!({"type": "image_url", "image_url": {"url": src.get("url")?}})),
        _ => None,
    }
}

fn text_of(content: Option<&Value>, images: &mut Vec<Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => {
            let mut texts = Vec::new();
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => texts.push(b.get("text").and_then(Value::as_str).unwrap_or_default().to_owned()),
                    Some("image") => images.extend(image_part(b)),
                    _ => {}
                }
            }
            texts.join("\n\n")
        }
        _ => String::new(),
    }
}

fn message(m: &Value) -> Vec<Value> {
    let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
    let Some(Value::Array(blocks)) = m.get("content") else {
        // A string (or nothing): the same in both formats.
        return vec![m.clone()];
    };
    match role {
        "assistant" => {
            let mut texts = Vec::new();
            let mut calls = Vec::new();
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => texts.push(b.get("text").and_then(Value::as_str).unwrap_or_default().to_owned()),
                    Some("tool_use") => calls.push(json!({
                        "id": b.get("id").cloned().unwrap_or(Value::Null),
                        "type": "function",
                        "function": {
                            "name": b.get("name").cloned().unwrap_or(Value::Null),
                            "arguments": b.get("input").map_or_else(|| "{}".to_owned(), Value::to_string),
                        }
                    })),
                    _ => {}
                }
            }
            let content = if texts.is_empty() { Value::Null } else { Value::String(texts.join("\n\n")) };
            let mut out = object(json!({"role": "assistant", "content": content}));
            if !calls.is_empty() {
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            vec![with_extras(out, m)]
        }
        _ => {
            let mut out = Vec::new();
            let mut images = Vec::new();
            let mut parts = Vec::new();
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("tool_result") => {
                        let text = text_of(b.get("content"), &mut images);
                        let tool = object(json!({
                            "role": "tool",
                            "tool_call_id": b.get("tool_use_id").cloned().unwrap_or(Value::Null),
                            "content": if text.is_empty() { "(no output)".to_owned() } else { text },
                        }));
                        out.push(with_extras(tool, m));
                    }
                    Some("text") => {
                        parts.push(json!({"type": "text", "text": b.get("text").cloned().unwrap_or_default()}))
                    }
                    Some("image") => parts.extend(image_part(b)),
                    _ => {}
                }
            }
            parts.extend(images);
            if !parts.is_empty() {
                let content = match parts.as_slice() {
                    [one] if one.get("type").and_then(Value::as_str) == Some("text") => one["text"].clone(),
                    _ => Value::Array(parts),
                };
                out.push(with_extras(object(json!({"role": role, "content": content})), m));
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_pairs_images_and_text_convert_to_the_chat_shape() {
        let a = [
            r#"{"role":"system","content":"sys","timestamp":"2026-03-02T09:00:00Z"}"#,
            r#"{"role":"assistant","content":[{"type":"thinking","thinking":"x","signature":"s"},{"type":"text","text":"Looking."},{"type":"tool_use","id":"t1","name":"grep","input":{"q":"a"}}]}"#,
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"3 hits"}]},{"type":"text","text":"and this"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}"#,
        ]
        .join("\n");
        let out = convert(&a).unwrap();
        let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0]["timestamp"], "2026-03-02T09:00:00Z");
        assert_eq!(lines[1]["content"], "Looking.");
        assert_eq!(lines[1]["tool_calls"][0]["function"]["arguments"], r#"{"q":"a"}"#);
        assert_eq!((lines[2]["role"].as_str(), lines[2]["content"].as_str()), (Some("tool"), Some("3 hits")));
        assert_eq!(lines[3]["content"][1]["image_url"]["url"], "data:image/png;base64,AAAA");
    }
}
