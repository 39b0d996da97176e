//! OpenAI Chat Completions shapes: the JSON reply, the chunk stream, errors.

use crate::reply::{Reply, Tokens};
use crate::sse;
use bytes::Bytes;
use serde_json::{json, Value};

/// `created` is fixed so that replies are reproducible.
const CREATED: u64 = 1_700_000_000;

fn usage(t: &Tokens) -> Value {
    json!({
        "prompt_tokens": t.prompt, "completion_tokens": t.output, "total_tokens": t.prompt + t.output,
        "prompt_tokens_details": {"cached_tokens": t.cache_read, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    })
}

/// The non-streaming body.
pub fn completion(model: &str, reply: &Reply, t: &Tokens, seq: u64) -> Bytes {
    let (message, finish) = match reply {
        Reply::Text(text) => (json!({"role": "assistant", "content": text, "refusal": null}), "stop"),
        Reply::Tool { name, args } => (
            json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                {"id": format!("call_fake_{seq}"), "type": "function", "function": {"name": name, "arguments": args}}]}),
            "tool_calls",
        ),
    };
    let v = json!({
        "id": format!("chatcmpl-fake-{seq}"), "object": "chat.completion", "created": CREATED, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": usage(t), "system_fingerprint": null,
    });
    Bytes::from(v.to_string())
}

/// The chunks (`data: ...`), ending with the usage chunk when asked for and `[DONE]`.
pub fn stream(model: &str, reply: &Reply, t: &Tokens, seq: u64, include_usage: bool) -> Vec<Bytes> {
    let chunk = |delta: Value, finish: Value| {
        let mut c = json!({
            "id": format!("chatcmpl-fake-{seq}"), "object": "chat.completion.chunk", "created": CREATED,
            "model": model, "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if include_usage {
            c["usage"] = Value::Null;
        }
        sse::data(&c)
    };
    let mut out = Vec::new();
    let finish = match reply {
        Reply::Text(text) => {
            out.push(chunk(json!({"role": "assistant", "content": "", "refusal": null}), Value::Null));
            for p in sse::pieces(text, 4) {
                out.push(chunk(json!({"content": p}), Value::Null));
            }
            "stop"
        }
        Reply::Tool { name, args } => {
            out.push(chunk(
                json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                    "id": format!("call_fake_{seq}"), "type": "function", "function": {"name": name, "arguments": ""}}]}),
                Value::Null,
            ));
            for p in sse::pieces(args, 5) {
                out.push(chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}), Value::Null));
            }
            "tool_calls"
        }
    };
    out.push(chunk(json!({}), json!(finish)));
    if include_usage {
        out.push(sse::data(&json!({
            "id": format!("chatcmpl-fake-{seq}"), "object": "chat.completion.chunk", "created": CREATED,
            "model": model, "system_fingerprint": null, "choices": [], "usage": usage(t),
        })));
    }
    out.push(sse::done());
    out
}

/// A validation error: `invalid_request_error` with its `param` and `code`.
pub fn invalid(message: &str, param: Option<&str>, code: Option<&str>) -> Bytes {
    Bytes::from(
        json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}})
            .to_string(),
    )
}

/// llama.cpp's server's answer to a prompt over its context (`/v1/chat/completions`, 400).
pub fn llama_context_error(prompt_tokens: u64, n_ctx: u64) -> Bytes {
    Bytes::from(
        json!({"error": {
            "code": 400,
            "message": format!("request ({prompt_tokens} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"),
            "type": "exceed_context_size_error",
            "n_prompt_tokens": prompt_tokens,
            "n_ctx": n_ctx
        }})
        .to_string(),
    )
}

/// The error body for `status`.
pub fn error(status: u16, message: &str) -> Bytes {
    let (kind, code) = match status {
        400 | 404 | 413 => ("invalid_request_error", Value::Null),
        401 => ("invalid_request_error", json!("invalid_api_key")),
        429 => ("requests", json!("rate_limit_exceeded")),
        _ => ("server_error", Value::Null),
    };
    Bytes::from(json!({"error": {"message": message, "type": kind, "param": null, "code": code}}).to_string())
}

/// The in-stream error chunk.
pub fn stream_error() -> Bytes {
    sse::data(
        &json!({"error": {"message": "The server had an error", "type": "server_error", "param": null, "code": null}}),
    )
}
