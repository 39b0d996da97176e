//! The assistant message of an answer, assembled from a JSON body or a stream's events, in the
//! session's wire format: what the call records as `AnswerReceived`.
//!
//! Anthropic streams build content blocks by index (`content_block_start`, then `text_delta`,
//! `input_json_delta`, `thinking_delta` and `signature_delta` deltas); OpenAI streams build one
//! choice's `content` and its `tool_calls` by index. Only the first choice is kept (a proxied
//! agent asks for one). A Responses answer is its response's `output` items, from the JSON
//! body or the final event (`response.completed` carries the whole response).

use serde_json::{json, Map, Value};

/// The response id and output items of an answer (the `{"id","output"}` the scan keeps).
pub(crate) fn answer_parts(answer: &str) -> Option<(String, Vec<String>)> {
    #[derive(serde::Deserialize)]
    struct Answer<'a> {
        id: String,
        #[serde(borrow)]
        output: Vec<&'a serde_json::value::RawValue>,
    }
    let a: Answer<'_> = serde_json::from_str(answer).ok()?;
    Some((a.id, a.output.into_iter().map(|r| r.get().to_owned()).collect()))
}

/// A message being assembled from stream events.
#[derive(Default)]
pub(crate) struct Answer {
    /// Anthropic: blocks by index; OpenAI: unused.
    blocks: Vec<Value>,
    /// Anthropic: each tool_use block's `partial_json` so far, by block index.
    inputs: Vec<String>,
    /// OpenAI: the text so far.
    text: String,
    /// OpenAI: tool calls by index (`id`, `name`, `arguments` so far).
    calls: Vec<(String, String, String)>,
    /// Whether any event contributed (a stream with none has no answer to record).
    seen: bool,
}

impl Answer {
    /// Takes one Anthropic stream event's data.
    pub fn anthropic(&mut self, v: &Value) {
        let index = v.get("index").and_then(Value::as_u64).and_then(|i| usize::try_from(i).ok());
        match (v.get("type").and_then(Value::as_str), index) {
            (Some("content_block_start"), Some(i)) => {
                let Some(block) = v.get("content_block") else { return };
                self.seen = true;
                if self.blocks.len() <= i {
                    self.blocks.resize(i + 1, Value::Null);
                    self.inputs.resize(i + 1, String::new());
                }
                self.blocks[i] = block.clone();
            }
            (Some("content_block_delta"), Some(i)) => {
                let (Some(block), Some(delta)) = (self.blocks.get_mut(i), v.get("delta")) else { return };
                let text = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => append(block, "text", &text("text")),
                    Some("thinking_delta") => append(block, "thinking", &text("thinking")),
                    Some("signature_delta") => append(block, "signature", &text("signature")),
                    Some("input_json_delta") => {
                        if let Some(input) = self.inputs.get_mut(i) {
                            input.push_str(&text("partial_json"));
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    /// Takes one OpenAI chat stream chunk.
    pub fn openai(&mut self, v: &Value) {
        let Some(delta) = v.get("choices").and_then(|c| c.get(0)).and_then(|c| c.get("delta")) else { return };
        self.seen = true;
        if let Some(t) = delta.get("content").and_then(Value::as_str) {
            self.text.push_str(t);
        }
        for call in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let Some(i) = call.get("index").and_then(Value::as_u64).and_then(|i| usize::try_from(i).ok()) else {
                continue;
            };
            if self.calls.len() <= i {
                self.calls.resize(i + 1, Default::default());
            }
            let (id, name, args) = &mut self.calls[i];
            let f = call.get("function");
            id.push_str(call.get("id").and_then(Value::as_str).unwrap_or_default());
            name.push_str(f.and_then(|f| f.get("name")).and_then(Value::as_str).unwrap_or_default());
            args.push_str(f.and_then(|f| f.get("arguments")).and_then(Value::as_str).unwrap_or_default());
        }
    }

    /// The assembled message as JSON text, if the stream carried one.
    pub fn finish(self, anthropic: bool) -> Option<String> {
        if !self.seen {
            return None;
        }
        if anthropic {
            let mut blocks = self.blocks;
            for (block, input) in blocks.iter_mut().zip(&self.inputs) {
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    // An empty partial input is the empty object (a tool without arguments).
                    let parsed = if input.is_empty() { Ok(json!({})) } else { serde_json::from_str(input) };
                    if let (Ok(v), Some(o)) = (parsed, block.as_object_mut()) {
                        o.insert("input".into(), v);
                    }
                }
            }
            blocks.retain(|b| !b.is_null());
            return Some(json!({"role": "assistant", "content": blocks}).to_string());
        }
        let mut m = Map::new();
        m.insert("role".into(), "assistant".into());
        m.insert("content".into(), if self.text.is_empty() { Value::Null } else { self.text.into() });
        if !self.calls.is_empty() {
            let calls = self
                .calls
                .into_iter()
                .map(|(id, name, arguments)| {
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                })
                .collect();
            m.insert("tool_calls".into(), Value::Array(calls));
        }
        Some(Value::Object(m).to_string())
    }
}

fn append(block: &mut Value, key: &str, more: &str) {
    let Some(o) = block.as_object_mut() else { return };
    let now = o.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    o.insert(key.into(), Value::String(now + more));
}

/// A Responses answer, `{"id","output"}` of its response object (the output items are the
/// call's answer; the id is what a `previous_response_id` continues). `None` without output.
pub(crate) fn of_response(r: &Value) -> Option<String> {
    let id = r.get("id")?;
    let output = r.get("output").filter(|o| o.is_array())?;
    Some(json!({"id": id, "output": output}).to_string())
}

/// The assistant message of a whole JSON answer.
pub(crate) fn of_json(anthropic: bool, v: &Value) -> Option<String> {
    if anthropic {
        let content = v.get("content")?;
        return Some(json!({"role": "assistant", "content": content}).to_string());
    }
    let message = v.get("choices")?.get(0)?.get("message")?.as_object()?;
    // The fields of the chat message format; the provider's extras (refusal: null,
    // annotations: [], audio) are not part of it.
    let mut m = Map::new();
    m.insert("role".into(), "assistant".into());
    m.insert("content".into(), message.get("content").cloned().unwrap_or(Value::Null));
    if let Some(calls) = message.get("tool_calls").filter(|c| c.as_array().is_some_and(|a| !a.is_empty())) {
        m.insert("tool_calls".into(), calls.clone());
    }
    Some(Value::Object(m).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(lines: &[&str], anthropic: bool) -> Option<String> {
        let mut a = Answer::default();
        for l in lines {
            let v: Value = serde_json::from_str(l).unwrap();
            if anthropic {
                a.anthropic(&v)
            } else {
                a.openai(&v)
            }
        }
        a.finish(anthropic)
    }

    #[test]
    fn anthropic_blocks_from_their_deltas() {
        let got = events(
            &[
                r#"{"type":"message_start","message":{"role":"assistant","content":[]}}"#,
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"let me "}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"see"}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig=="}}"#,
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Reading "}}"#,
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"it."}}"#,
                r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"read","input":{}}}"#,
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"pa"}}"#,
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"th\": \"a.rs\"}"}}"#,
            ],
            true,
        )
        .unwrap();
        let v: Value = serde_json::from_str(&got).unwrap();
        assert_eq!(
            v,
            json!({"role":"assistant","content":[
                {"type":"thinking","thinking":"let me see","signature":"sig=="},
                {"type":"text","text":"Reading it."},
                {"type":"tool_use","id":"toolu_1","name":"read","input":{"path":"a.rs"}}]})
        );
        ctxlog::parse_message(&got).unwrap();
    }

    #[test]
    fn openai_text_and_tool_calls_from_their_deltas() {
        let got = events(
            &[
                r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"content":"On it"}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"ls","arguments":""}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"dir\":"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"src\"}"}}]}}]}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
            ],
            false,
        )
        .unwrap();
        let v: Value = serde_json::from_str(&got).unwrap();
        assert_eq!(
            v,
            json!({"role":"assistant","content":"On it","tool_calls":[
                {"id":"call_1","type":"function","function":{"name":"ls","arguments":"{\"dir\":\"src\"}"}}]})
        );
        ctxlog::parse_message(&got).unwrap();
        assert_eq!(events(&[r#"{"choices":[],"usage":{"prompt_tokens":3}}"#], false), None);
    }

    #[test]
    fn json_answers() {
        let a = json!({"id":"msg_1","content":[{"type":"text","text":"hi"}],"usage":{}});
        assert_eq!(of_json(true, &a).unwrap(), r#"{"content":[{"text":"hi","type":"text"}],"role":"assistant"}"#);
        let o = json!({"choices":[{"message":{"role":"assistant","content":"hi","refusal":null,"annotations":[]}}]});
        let m = of_json(false, &o).unwrap();
        assert_eq!(m, r#"{"content":"hi","role":"assistant"}"#);
        ctxlog::parse_message(&m).unwrap();
        assert_eq!(of_json(false, &json!({"error": {}})), None);
    }
}
