//! OpenAI Responses (`POST /v1/responses`): what the API refuses, the response object, its
//! event stream, and the responses it stores for `previous_response_id`.
//!
//! Refusals (status 400, OpenAI's error shape with `param` and `code`), each under a rule
//! of [`Rule`] so a test can relax it:
//! * `max_tokens` (the API names it `max_output_tokens`) — [`Rule::MaxTokens`];
//! * an item `type` or a content part `type` the API does not know, or a part in the wrong role
//!   (`output_text` in a user message, `input_text` in an assistant one) — [`Rule::ItemTypes`];
//! * a message role other than `user`, `assistant`, `system`, `developer` — [`Rule::Roles`];
//! * a `function_call_output` whose `call_id` no earlier `function_call` has, and a
//!   `function_call` with no output after it — [`Rule::ToolPairs`] (with
//!   `previous_response_id` the stored history counts as earlier);
//! * a `reasoning` or `compaction` item whose `encrypted_content` the fake did not issue —
//!   [`Rule::EncryptedContent`];
//! * a prompt over the context window — [`Rule::ContextLength`];
//! * an unknown `previous_response_id` (never stored, or sent with `store: false`).
//!
//! Replies: the deterministic reply of [`crate::reply`] over the items (a user message with
//! `[[tool:NAME]]` gets one `function_call`); a `compaction` item first when
//! `context_management` asks for compaction and the prompt reached its `compact_threshold`;
//! a `reasoning` item with `encrypted_content` first when `include` asks for it. Usage:
//! `input_tokens` (cached part included), `input_tokens_details.cached_tokens` by the same
//! automatic prefix cache as chat completions, `output_tokens`.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use serde_json::{json, Value};

use crate::reply::{Reply, Tokens};
use crate::sse;
use crate::strict::{sign, Rejection, Rule, Strictness};

/// `created_at` is fixed so that replies are reproducible.
const CREATED: u64 = 1_700_000_000;

/// Responses stored for `previous_response_id`: the whole context each one ended with.
#[derive(Default)]
pub struct Stored {
    by_id: HashMap<String, Vec<Value>>,
}

impl Stored {
    /// Keeps the context (input and output) a response ended with.
    pub fn keep(&mut self, id: String, context: Vec<Value>) {
        self.by_id.insert(id, context);
    }
}

fn invalid(message: String, param: &str, code: &str) -> Rejection {
    Rejection { status: 400, message, param: Some(param.to_owned()), code: Some(code.to_owned()) }
}

/// Item types the API accepts in `input`.
const ITEM_TYPES: [&str; 14] = [
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "compaction",
    "item_reference",
    "file_search_call",
    "web_search_call",
    "computer_call",
    "computer_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "image_generation_call",
    "code_interpreter_call",
];

/// The request's items: `input` as a list (a string is one user message), after the stored
/// context of `previous_response_id`.
pub fn effective_input(body: &Value, stored: &Stored) -> Result<Vec<Value>, Rejection> {
    let mut items = Vec::new();
    if let Some(prev) = body.get("previous_response_id").filter(|v| !v.is_null()) {
        let id = prev.as_str().unwrap_or_default();
        match stored.by_id.get(id) {
            Some(context) => items.extend(context.iter().cloned()),
            None => {
                return Err(invalid(
                    format!("Previous response with id '{id}' not found."),
                    "previous_response_id",
                    "previous_response_not_found",
                ))
            }
        }
    }
    match body.get("input") {
        Some(Value::String(s)) => items.push(json!({"role": "user", "content": s})),
        Some(Value::Array(a)) => items.extend(a.iter().cloned()),
        None if !items.is_empty() => {}
        _ => {
            return Err(invalid(
                "Invalid type for 'input': expected a string or an array of input items.".into(),
                "input",
                "invalid_type",
            ))
        }
    }
    Ok(items)
}

fn kind(item: &Value) -> &str {
    item.get("type").and_then(Value::as_str).unwrap_or("message")
}

/// Checks a request whose items are `items`; `prompt` is the fake's count of it.
pub fn check(strict: &Strictness, body: &Value, items: &[Value], prompt: u64) -> Result<(), Rejection> {
    let on = |r: Rule| !strict.relaxed.contains(&r);
    if on(Rule::MaxTokens) && body.get("max_tokens").is_some() {
        return Err(invalid(
            "Unsupported parameter: 'max_tokens'. In the Responses API, this parameter has moved to 'max_output_tokens'."
                .into(),
            "max_tokens",
            "unsupported_parameter",
        ));
    }
    let given = match body.get("input") {
        Some(Value::Array(a)) => a.len(),
        Some(Value::String(_)) => 1,
        _ => 0,
    };
    let offset = items.len().saturating_sub(given);
    let at = |i: usize| format!("input[{}]", i.saturating_sub(offset));
    let mut calls: HashSet<&str> = HashSet::new();
    let mut answered: HashSet<&str> = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let t = kind(item);
        if on(Rule::ItemTypes) && !ITEM_TYPES.contains(&t) {
            let supported = ITEM_TYPES.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ");
            return Err(invalid(
                format!("Invalid value: '{t}'. Supported values are: {supported}."),
                &format!("{}.type", at(i)),
                "invalid_value",
            ));
        }
        match t {
            "message" => {
                let role = item.get("role").and_then(Value::as_str).unwrap_or("");
                if on(Rule::Roles) && !matches!(role, "user" | "assistant" | "system" | "developer") {
                    return Err(invalid(
                        format!(
                            "Invalid value: '{role}'. Supported values are: 'assistant', 'system', 'developer', and 'user'."
                        ),
                        &format!("{}.role", at(i)),
                        "invalid_value",
                    ));
                }
                let parts = item.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                for (j, p) in parts.iter().enumerate() {
                    let pt = p.get("type").and_then(Value::as_str).unwrap_or("");
                    let (ok, supported) = if role == "assistant" {
                        (matches!(pt, "output_text" | "refusal"), "'output_text' and 'refusal'")
                    } else {
                        (
                            matches!(pt, "input_text" | "input_image" | "input_file"),
                            "'input_text', 'input_image', and 'input_file'",
                        )
                    };
                    if on(Rule::ItemTypes) && !ok {
                        return Err(invalid(
                            format!("Invalid value: '{pt}'. Supported values are: {supported}."),
                            &format!("{}.content[{j}].type", at(i)),
                            "invalid_value",
                        ));
                    }
                }
            }
            "function_call" => {
                if let Some(id) = item.get("call_id").and_then(Value::as_str) {
                    calls.insert(id);
                }
            }
            "function_call_output" => {
                let id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                if on(Rule::ToolPairs) && !calls.contains(id) {
                    return Err(invalid(
                        format!("No tool call found for function call output with call_id {id}."),
                        "input",
                        "",
                    ));
                }
                answered.insert(id);
            }
            "reasoning" | "compaction" => {
                let id = item.get("id").and_then(Value::as_str).unwrap_or("");
                let content = item.get("encrypted_content").and_then(Value::as_str);
                if on(Rule::EncryptedContent) && content.is_some_and(|c| c != sign(id)) {
                    return Err(invalid(
                        format!("The encrypted content for item {id} could not be verified."),
                        &format!("{}.encrypted_content", at(i)),
                        "invalid_encrypted_content",
                    ));
                }
                if on(Rule::EncryptedContent) && t == "compaction" && content.is_none() {
                    return Err(invalid(
                        "Missing required parameter: 'encrypted_content'.".into(),
                        &format!("{}.encrypted_content", at(i)),
                        "missing_required_parameter",
                    ));
                }
            }
            _ => {}
        }
    }
    if on(Rule::ToolPairs) {
        if let Some(open) = items.iter().filter(|x| kind(x) == "function_call").find_map(|x| {
            let id = x.get("call_id").and_then(Value::as_str).unwrap_or("");
            (!answered.contains(id)).then_some(id)
        }) {
            return Err(invalid(format!("No tool output found for function call {open}."), "input", ""));
        }
    }
    let window = strict.context_of(false);
    if on(Rule::ContextLength) && prompt > window {
        return Err(invalid(
            "Your input exceeds the context window of this model. Please adjust your input and try again.".into(),
            "input",
            "context_length_exceeded",
        ));
    }
    Ok(())
}

/// The reply: [`crate::reply::decide`] over the items seen as chat messages (a function call's
/// output counts as a tool message, so an agent loop ends after the tool ran).
pub fn decide(items: &[Value]) -> Reply {
    let messages: Vec<Value> = items
        .iter()
        .map(|x| match kind(x) {
            "message" => json!({"role": x.get("role").cloned().unwrap_or(Value::Null), "content": x.get("content").cloned().unwrap_or(Value::Null)}),
            "function_call_output" => json!({"role": "tool"}),
            _ => json!({"role": "assistant"}),
        })
        .collect();
    crate::reply::decide(&json!({ "messages": messages }))
}

/// Whether the request asks for compaction at `prompt` tokens
/// (`context_management: [{"type":"compaction","compact_threshold":N}]`).
pub fn compacts(body: &Value, prompt: u64) -> bool {
    body.get("context_management").and_then(Value::as_array).into_iter().flatten().any(|e| {
        e.get("type").and_then(Value::as_str) == Some("compaction")
            && e.get("compact_threshold").and_then(Value::as_u64).is_some_and(|t| prompt >= t)
    })
}

fn usage(t: &Tokens) -> Value {
    json!({
        "input_tokens": t.prompt, "input_tokens_details": {"cached_tokens": t.cache_read},
        "output_tokens": t.output, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": t.prompt + t.output,
    })
}

/// The output items of the reply.
pub fn output(body: &Value, reply: &Reply, seq: u64, compaction: bool) -> Vec<Value> {
    let mut out = Vec::new();
    if compaction {
        let id = format!("cmp_fake_{seq}");
        out.push(json!({"id": id, "type": "compaction", "encrypted_content": sign(&id)}));
    }
    let include = body.get("include").and_then(Value::as_array).into_iter().flatten();
    if include.filter_map(Value::as_str).any(|s| s == "reasoning.encrypted_content") {
        let id = format!("rs_fake_{seq}");
        out.push(json!({"id": id, "type": "reasoning", "summary": [], "encrypted_content": sign(&id)}));
    }
    out.push(match reply {
        Reply::Text(text) => json!({
            "id": format!("msg_fake_{seq}"), "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}],
        }),
        Reply::Tool { name, args } => json!({
            "id": format!("fc_fake_{seq}"), "type": "function_call", "status": "completed",
            "arguments": args, "call_id": format!("call_fake_{seq}"), "name": name,
        }),
    });
    out
}

/// `POST /v1/responses/compact`'s answer: the input's user messages as they came, then one
/// signed `compaction` item standing for everything else (`object: "response.compaction"`).
pub fn compacted(items: &[Value], seq: u64, t: &Tokens) -> Value {
    let mut output: Vec<Value> = items
        .iter()
        .filter(|i| kind(i) == "message" && i.get("role").and_then(Value::as_str) == Some("user"))
        .cloned()
        .collect();
    let id = format!("cmp_fake_{seq}");
    output.push(json!({"id": id, "type": "compaction", "encrypted_content": sign(&id)}));
    json!({"id": format!("resp_fake_{seq}"), "object": "response.compaction", "created_at": CREATED,
        "output": output, "usage": usage(t)})
}

/// The response object (`status` completed, or in progress with no output or usage yet).
pub fn response(body: &Value, model: &str, seq: u64, output: &[Value], t: Option<&Tokens>) -> Value {
    let field = |k: &str, default: Value| body.get(k).cloned().unwrap_or(default);
    json!({
        "id": format!("resp_fake_{seq}"), "object": "response", "created_at": CREATED,
        "status": if t.is_some() { "completed" } else { "in_progress" },
        "background": false, "error": null, "incomplete_details": null,
        "instructions": field("instructions", Value::Null),
        "max_output_tokens": field("max_output_tokens", Value::Null), "model": model,
        "output": if t.is_some() { output.to_vec() } else { Vec::new() },
        "parallel_tool_calls": field("parallel_tool_calls", json!(true)),
        "previous_response_id": field("previous_response_id", Value::Null),
        "reasoning": {"effort": null, "summary": null}, "store": field("store", json!(true)),
        "temperature": 1.0, "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": field("tool_choice", json!("auto")), "tools": field("tools", json!([])),
        "top_p": 1.0, "truncation": "disabled", "usage": t.map_or(Value::Null, usage),
        "user": null, "metadata": {},
    })
}

/// The event stream: `response.created`, `response.in_progress`, each item's events
/// (`output_item.added`, its deltas, `output_item.done`), `response.completed` last.
pub fn stream(body: &Value, model: &str, seq: u64, output: &[Value], t: &Tokens) -> Vec<Bytes> {
    let mut n = 0u64;
    let mut out = Vec::new();
    let mut event = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(n);
        n += 1;
        out.push(sse::named(name, &data));
    };
    let pending = response(body, model, seq, output, None);
    event("response.created", json!({"response": pending}));
    event("response.in_progress", json!({"response": pending}));
    for (i, item) in output.iter().enumerate() {
        let id = item.get("id").cloned().unwrap_or(Value::Null);
        match kind(item) {
            "message" => {
                let text = item.pointer("/content/0/text").and_then(Value::as_str).unwrap_or("");
                let mut added = item.clone();
                added["status"] = json!("in_progress");
                added["content"] = json!([]);
                event("response.output_item.added", json!({"output_index": i, "item": added}));
                let empty = json!({"type": "output_text", "annotations": [], "logprobs": [], "text": ""});
                event(
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "part": empty}),
                );
                for p in sse::pieces(text, 4) {
                    event(
                        "response.output_text.delta",
                        json!({"item_id": id, "output_index": i, "content_index": 0, "delta": p, "logprobs": []}),
                    );
                }
                event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "text": text, "logprobs": []}),
                );
                let part = item.pointer("/content/0").cloned().unwrap_or(Value::Null);
                event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "part": part}),
                );
            }
            "function_call" => {
                let args = item.get("arguments").and_then(Value::as_str).unwrap_or("");
                let mut added = item.clone();
                added["status"] = json!("in_progress");
                added["arguments"] = json!("");
                event("response.output_item.added", json!({"output_index": i, "item": added}));
                for p in sse::pieces(args, 5) {
                    event(
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": i, "delta": p}),
                    );
                }
                event(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": i, "arguments": args, "name": item.get("name")}),
                );
            }
            _ => event("response.output_item.added", json!({"output_index": i, "item": item})),
        }
        event("response.output_item.done", json!({"output_index": i, "item": item}));
    }
    event("response.completed", json!({"response": response(body, model, seq, output, Some(t))}));
    out
}

/// The in-stream error event.
pub fn stream_error(seq: u64) -> Bytes {
    sse::named(
        "error",
        &json!({"type": "error", "code": "server_error", "message": "The server had an error", "param": null,
            "sequence_number": seq}),
    )
}
