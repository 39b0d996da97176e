//! The deterministic reply and usage model shared by both protocols.
//!
//! Reply: text `ack N` (N = number of entries in `messages`), or, when the last message is a
//! user message whose text contains `[[tool:NAME]]`, one tool call of NAME with arguments
//! `{"n":N}`. A tool result (an OpenAI `tool` message, an Anthropic user message of
//! `tool_result` blocks) gets text, as from a model that read it: an agent loop ends.
//! Usage: the prompt is `ceil(body bytes / 4)` tokens; cache reads and writes follow the
//! providers' caching rules (see `cache.rs`). Output tokens are `ceil(reply bytes / 4)`, at
//! least 1.

use serde_json::Value;

/// What the fake answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Plain text.
    Text(String),
    /// A tool call: name and JSON arguments (serialized).
    Tool {
        /// Tool name from the marker.
        name: String,
        /// Arguments JSON text.
        args: String,
    },
}

/// Token counts of one exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tokens {
    /// Whole prompt.
    pub prompt: u64,
    /// Served from the modelled cache.
    pub cache_read: u64,
    /// Anthropic only: written to the cache.
    pub cache_creation: u64,
    /// Reply tokens.
    pub output: u64,
}

/// Decides the reply from a parsed request body.
pub fn decide(body: &Value) -> Reply {
    let messages = body.get("messages").and_then(Value::as_array);
    let n = messages.map_or(0, Vec::len);
    let last_user = messages.and_then(|m| m.last()).filter(|x| x.get("role").and_then(Value::as_str) == Some("user"));
    if let Some(name) = last_user.and_then(|m| tool_marker(&text_of(m))) {
        return Reply::Tool { name, args: format!("{{\"n\":{n}}}") };
    }
    Reply::Text(format!("ack {n}"))
}

/// The text parts of a message in either wire format.
fn text_of(m: &Value) -> String {
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

fn tool_marker(text: &str) -> Option<String> {
    let start = text.find("[[tool:")? + "[[tool:".len();
    let rest = text.get(start..)?;
    let name = rest.get(..rest.find("]]")?)?;
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    ok.then(|| name.to_owned())
}

impl Reply {
    /// `ceil(bytes / 4)`, at least 1.
    pub fn output_tokens(&self) -> u64 {
        let len = match self {
            Reply::Text(t) => t.len(),
            Reply::Tool { name, args } => name.len() + args.len(),
        };
        (len as u64).div_ceil(4).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_and_count() {
        let b: Value = serde_json::json!({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"},{"role":"user","content":[{"type":"text","text":"go [[tool:get_x]] now"}]}]});
        assert_eq!(decide(&b), Reply::Tool { name: "get_x".into(), args: "{\"n\":3}".into() });
        let b: Value = serde_json::json!({"messages":[{"role":"user","content":"[[tool:bad name]]"}]});
        assert_eq!(decide(&b), Reply::Text("ack 1".into()));
    }

    #[test]
    fn a_tool_result_gets_text_not_the_same_call_again() {
        let asked = serde_json::json!({"role":"user","content":"go [[tool:f]]"});
        let call = serde_json::json!({"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]});
        let result = serde_json::json!({"role":"tool","tool_call_id":"c1","content":"out"});
        let b = serde_json::json!({"messages":[asked, call, result]});
        assert_eq!(decide(&b), Reply::Text("ack 3".into()));
        let asked = serde_json::json!({"role":"user","content":"go [[tool:f]]"});
        let call =
            serde_json::json!({"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]});
        let result =
            serde_json::json!({"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"out"}]});
        let b = serde_json::json!({"messages":[asked, call, result]});
        assert_eq!(decide(&b), Reply::Text("ack 3".into()));
    }
}
