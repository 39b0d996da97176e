//! Anthropic Messages API shapes: the JSON reply, the SSE event sequence, errors.

use crate::reply::{Reply, Tokens};
use crate::sse;
use bytes::Bytes;
use serde_json::{json, Value};

fn usage(t: &Tokens) -> Value {
    json!({
        "input_tokens": t.prompt - t.cache_read - t.cache_creation,
        "cache_creation_input_tokens": t.cache_creation,
        "cache_read_input_tokens": t.cache_read,
        "output_tokens": t.output,
    })
}

/// What context management adds to an answer.
#[derive(Debug, Default)]
pub struct Extras {
    /// `context_management` (its `applied_edits`), when the request asked for context editing.
    pub context_management: Option<Value>,
    /// The compaction block that opens the answer, and whether the answer pauses after it.
    pub compaction: Option<(Value, bool)>,
}

/// The answer's content blocks (a compaction block first when one is due, then a thinking
/// block when asked for; a tool call after a line of text, as the models write them) and its
/// stop reason (`compaction` when it pauses after the compaction).
fn blocks(reply: &Reply, thinking: Option<&str>, seq: u64, x: &Extras) -> (Vec<Value>, &'static str) {
    let mut out = Vec::new();
    if let Some((block, pause)) = &x.compaction {
        out.push(block.clone());
        if *pause {
            return (out, "compaction");
        }
    }
    if let Some(t) = thinking {
        out.push(json!({"type": "thinking", "thinking": t, "signature": crate::strict::sign(t)}));
    }
    match reply {
        Reply::Text(t) => {
            out.push(json!({"type": "text", "text": t}));
            (out, "end_turn")
        }
        Reply::Tool { name, args } => {
            let input: Value = serde_json::from_str(args).unwrap_or(Value::Null);
            out.push(json!({"type": "text", "text": format!("Calling {name}.")}));
            out.push(json!({"type": "tool_use", "id": format!("toolu_fake_{seq}"), "name": name, "input": input}));
            (out, "tool_use")
        }
    }
}

/// The non-streaming body; `cm` the `context_management` of a request that asked for context
/// editing (its `applied_edits`).
pub fn message(model: &str, reply: &Reply, thinking: Option<&str>, t: &Tokens, seq: u64, x: &Extras) -> Bytes {
    let (content, stop) = blocks(reply, thinking, seq, x);
    let mut v = json!({
        "id": format!("msg_fake_{seq}"), "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage(t),
    });
    if let Some(cm) = &x.context_management {
        v["context_management"] = cm.clone();
    }
    Bytes::from(v.to_string())
}

/// The SSE events, one chunk each, in the order the real API sends them: `message_start`, a
/// `ping`, then per content block `content_block_start`, its deltas (`thinking_delta` and a
/// `signature_delta`, `text_delta`, `input_json_delta`), `content_block_stop`; then
/// `message_delta` (stop reason, output tokens, the applied context edits) and `message_stop`.
pub fn stream(model: &str, reply: &Reply, thinking: Option<&str>, t: &Tokens, seq: u64, x: &Extras) -> Vec<Bytes> {
    let mut start_usage = usage(t);
    start_usage["output_tokens"] = json!(1);
    let mut out = vec![sse::named(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": format!("msg_fake_{seq}"), "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage}}),
    )];
    let (content, stop) = blocks(reply, thinking, seq, x);
    for (index, full) in content.iter().enumerate() {
        let kind = full.get("type").and_then(Value::as_str).unwrap_or("");
        let (first, deltas): (Value, Vec<Value>) = match kind {
            "thinking" => {
                let text = full.get("thinking").and_then(Value::as_str).unwrap_or("");
                let mut d: Vec<Value> = sse::pieces(text, 12)
                    .into_iter()
                    .map(|p| json!({"type": "thinking_delta", "thinking": p}))
                    .collect();
                d.push(json!({"type": "signature_delta", "signature": full.get("signature").cloned().unwrap_or(Value::Null)}));
                (json!({"type": "thinking", "thinking": ""}), d)
            }
            // The compaction block arrives whole in its start event.
            "compaction" => (full.clone(), Vec::new()),
            "tool_use" => {
                let mut start = full.clone();
                start["input"] = json!({});
                let args = match reply {
                    Reply::Tool { args, .. } => args.as_str(),
                    Reply::Text(_) => "",
                };
                let mut d = vec![json!({"type": "input_json_delta", "partial_json": ""})];
                d.extend(
                    sse::pieces(args, 5).into_iter().map(|p| json!({"type": "input_json_delta", "partial_json": p})),
                );
                (start, d)
            }
            _ => {
                let text = full.get("text").and_then(Value::as_str).unwrap_or("");
                (
                    json!({"type": "text", "text": ""}),
                    sse::pieces(text, 4).into_iter().map(|p| json!({"type": "text_delta", "text": p})).collect(),
                )
            }
        };
        out.push(sse::named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": first}),
        ));
        if index == 0 {
            out.push(sse::named("ping", &json!({"type": "ping"})));
        }
        for d in deltas {
            out.push(sse::named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": d}),
            ));
        }
        out.push(sse::named("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
    }
    let mut delta = json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": t.output}});
    if let Some(cm) = &x.context_management {
        delta["context_management"] = cm.clone();
    }
    out.push(sse::named("message_delta", &delta));
    out.push(sse::named("message_stop", &json!({"type": "message_stop"})));
    out
}

fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The error body for `status`.
pub fn error(status: u16, message: &str) -> Bytes {
    Bytes::from(json!({"type": "error", "error": {"type": error_type(status), "message": message}}).to_string())
}

/// The in-stream error event.
pub fn stream_error() -> Bytes {
    sse::named("error", &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
}
