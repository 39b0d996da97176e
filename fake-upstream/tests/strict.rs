//! The strict fake: what the real APIs reject (status, error shape, text), thinking
//! signatures, the caching limits, the relaxing switch and the config endpoint.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ctxlog_fake_upstream::{thinking_signature, FakeUpstream, Rule};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;

struct Resp {
    status: u16,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
    /// Anthropic's error message, checking the shape `{"type":"error","error":{"type","message"}}`.
    fn anthropic_error(&self) -> String {
        let v = self.json();
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        v["error"]["message"].as_str().unwrap().to_owned()
    }
    /// OpenAI's error: `(message, param, code)`, checking `type`.
    fn openai_error(&self) -> (String, Value, Value) {
        let v = self.json();
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        (v["error"]["message"].as_str().unwrap().to_owned(), v["error"]["param"].clone(), v["error"]["code"].clone())
    }
}

/// One request on its own connection (`connection: close`), the answer read to its end.
fn post(up: &FakeUpstream, path: &str, body: &Value) -> Resp {
    let body = body.to_string();
    let mut s = TcpStream::connect(up.addr()).unwrap();
    let auth = if path == "/v1/messages" { "x-api-key: k" } else { "authorization: Bearer k" };
    write!(
        s,
        "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{auth}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_lowercase();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut rest = &raw[split + 4..];
    let body = if head.contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        loop {
            let nl = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&rest[..nl]).unwrap(), 16).unwrap();
            if n == 0 {
                break out;
            }
            out.extend_from_slice(&rest[nl + 2..nl + 2 + n]);
            rest = &rest[nl + 4 + n..];
        }
    } else {
        rest.to_vec()
    };
    Resp { status, body }
}

fn anthropic(messages: Value) -> Value {
    json!({"model": "claude-x", "max_tokens": 64, "messages": messages})
}

fn openai(messages: Value) -> Value {
    json!({"model": "gpt-x", "messages": messages})
}

const ANT: &str = "/v1/messages";
const OAI: &str = "/v1/chat/completions";

#[test]
fn anthropic_tool_pairs() {
    let up = FakeUpstream::start().unwrap();
    let call = json!({"role": "assistant", "content": [{"type": "text", "text": "Calling f."},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]});
    let result =
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "out"}]});
    let ask = json!({"role": "user", "content": "go"});
    // The pair in place: accepted; an unanswered trailing call too (the client is answering it).
    assert_eq!(post(&up, ANT, &anthropic(json!([ask, call, result]))).status, 200);
    // A result without its call (the call removed).
    let r = post(&up, ANT, &anthropic(json!([ask, {"role": "assistant", "content": "ok"}, result])));
    assert_eq!(r.status, 400);
    assert_eq!(
        r.anthropic_error(),
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_1. Each `tool_result` block \
         must have a corresponding `tool_use` block in the previous message."
    );
    // A call whose result was removed before the next user turn.
    let r = post(&up, ANT, &anthropic(json!([ask, call, {"role": "user", "content": "next"}])));
    assert_eq!(r.status, 400);
    assert_eq!(
        r.anthropic_error(),
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. Each `tool_use` \
         block must have a corresponding `tool_result` block in the next message."
    );
    // Relaxed, the same body passes (the switch works, and only for this rule).
    up.relax(Rule::ToolPairs);
    assert_eq!(post(&up, ANT, &anthropic(json!([ask, call, {"role": "user", "content": "next"}]))).status, 200);
    assert_eq!(post(&up, ANT, &anthropic(json!([{"role": "user", "content": ""}]))).status, 400);
}

#[test]
fn openai_tool_pairs() {
    let up = FakeUpstream::start().unwrap();
    let call = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]});
    let r1 = json!({"role": "tool", "tool_call_id": "call_1", "content": "one"});
    let r2 = json!({"role": "tool", "tool_call_id": "call_2", "content": "two"});
    let ask = json!({"role": "user", "content": "go"});
    assert_eq!(post(&up, OAI, &openai(json!([ask, call, r1, r2]))).status, 200);
    let r = post(&up, OAI, &openai(json!([ask, {"role": "assistant", "content": "ok"}, r1])));
    assert_eq!(r.status, 400);
    let (msg, param, code) = r.openai_error();
    assert_eq!(
        msg,
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
    );
    assert_eq!((param, code), (json!("messages.[2].role"), Value::Null));
    let r = post(&up, OAI, &openai(json!([ask, call, r1, {"role": "user", "content": "next"}])));
    assert_eq!(r.status, 400);
    let (msg, param, _) = r.openai_error();
    assert_eq!(
        msg,
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. \
         The following tool_call_ids did not have response messages: call_2"
    );
    assert_eq!(param, json!("messages.[1].role"));
    // A tool message whose id is not among the calls it follows.
    let stray = json!({"role": "tool", "tool_call_id": "call_9", "content": "?"});
    assert_eq!(post(&up, OAI, &openai(json!([ask, call, r1, r2, stray]))).status, 400);
}

#[test]
fn empty_content_roles_and_max_tokens() {
    let up = FakeUpstream::start().unwrap();
    let r = post(
        &up,
        ANT,
        &anthropic(json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": []},
        {"role": "user", "content": "again"}])),
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.anthropic_error(),
        "messages.1: all messages must have non-empty content except for the optional final assistant message"
    );
    // The final assistant message may be empty (a prefill).
    let ok = anthropic(json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]));
    assert_eq!(post(&up, ANT, &ok).status, 200);
    let r = post(&up, ANT, &anthropic(json!([{"role": "user", "content": [{"type": "text", "text": ""}]}])));
    assert_eq!(r.anthropic_error(), "messages.0.content.0.text: text content blocks must be non-empty");
    let r = post(&up, ANT, &anthropic(json!([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}])));
    assert!(r.anthropic_error().starts_with("messages: Unexpected role \"system\""));
    let r = post(&up, ANT, &json!({"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!((r.status, r.anthropic_error().as_str()), (400, "max_tokens: Field required"));
    // OpenAI: an empty parts array; an assistant message with neither content nor calls.
    let r = post(&up, OAI, &openai(json!([{"role": "user", "content": []}])));
    let (msg, param, _) = r.openai_error();
    assert!(msg.starts_with("Invalid 'messages[0].content': empty array."), "{msg}");
    assert_eq!(param, json!("messages.[0].content"));
    let r = post(
        &up,
        OAI,
        &openai(json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": null},
        {"role": "user", "content": "b"}])),
    );
    assert_eq!(r.openai_error().0, "Invalid value for 'content': expected a string, got null.");
    let r = post(&up, OAI, &openai(json!([])));
    assert_eq!(r.openai_error().0, "[] is too short - 'messages'");
}

#[test]
fn thinking_is_signed_and_checked() {
    let up = FakeUpstream::start().unwrap();
    let mut body = anthropic(json!([{"role": "user", "content": "think [[tool:f]]"}]));
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    // The budget's documented bounds: at least 1,024, below max_tokens (64 here).
    let r = post(&up, ANT, &body);
    assert_eq!(
        (r.status, r.anthropic_error().as_str()),
        (400, "`max_tokens` must be greater than `thinking.budget_tokens`")
    );
    body["max_tokens"] = json!(4096);
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 1023});
    let r = post(&up, ANT, &body);
    assert!(r.anthropic_error().contains("greater than or equal to 1024"));
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    let answer = post(&up, ANT, &body).json();
    let content = answer["content"].as_array().unwrap().clone();
    let kinds: Vec<&str> = content.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use"]);
    let thinking = content[0]["thinking"].as_str().unwrap();
    assert_eq!(content[0]["signature"], thinking_signature(thinking));
    // Sent back unchanged with the tool result: accepted.
    let result =
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": content[2]["id"], "content": "x"}]});
    let mut next = body.clone();
    next["messages"] = json!([body["messages"][0], {"role": "assistant", "content": content}, result]);
    assert_eq!(post(&up, ANT, &next).status, 200);
    // The thinking text changed: the signature no longer matches.
    let mut edited = next.clone();
    edited["messages"][1]["content"][0]["thinking"] = json!(format!("{thinking} (shortened)"));
    let r = post(&up, ANT, &edited);
    assert_eq!(r.status, 400);
    assert_eq!(r.anthropic_error(), "messages.1.content.0: Invalid `signature` in `thinking` block");
    // The thinking block dropped from the assistant turn that the trailing tool result answers.
    let mut dropped = next.clone();
    dropped["messages"][1]["content"].as_array_mut().unwrap().remove(0);
    let r = post(&up, ANT, &dropped);
    assert!(r.anthropic_error().starts_with(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. When `thinking` is enabled"
    ));
    // Streaming: thinking deltas, then the signature, then the text and the tool call.
    let mut s = body.clone();
    s["stream"] = json!(true);
    let text = String::from_utf8(post(&up, ANT, &s).body).unwrap();
    let deltas: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.split_once("data: ").map(|(_, d)| serde_json::from_str::<Value>(d).unwrap()))
        .filter(|v| v["type"] == "content_block_delta")
        .collect();
    let kinds: Vec<&str> = deltas.iter().map(|d| d["delta"]["type"].as_str().unwrap()).collect();
    let sig = kinds.iter().position(|k| *k == "signature_delta").unwrap();
    assert!(sig > 0 && kinds[..sig].iter().all(|k| *k == "thinking_delta"), "{kinds:?}");
    assert!(kinds[sig + 1..].contains(&"text_delta") && kinds.ends_with(&["input_json_delta"]), "{kinds:?}");
    let streamed: String = deltas[..sig].iter().map(|d| d["delta"]["thinking"].as_str().unwrap()).collect();
    assert_eq!(deltas[sig]["delta"]["signature"], thinking_signature(&streamed));
}

#[test]
fn media_and_breakpoint_limits() {
    let up = FakeUpstream::start().unwrap();
    let img = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}});
    let images = |n: usize| anthropic(json!([{"role": "user", "content": vec![img.clone(); n]}]));
    assert_eq!(post(&up, ANT, &images(100)).status, 200);
    let r = post(&up, ANT, &images(101));
    assert_eq!(r.anthropic_error(), "Too much media: 0 document pages + 101 images > 100");
    let marked = |n: usize| {
        let blocks: Vec<Value> = (0..n)
            .map(|i| json!({"type": "text", "text": format!("b{i}"), "cache_control": {"type": "ephemeral"}}))
            .collect();
        anthropic(json!([{"role": "user", "content": blocks}]))
    };
    assert_eq!(post(&up, ANT, &marked(4)).status, 200);
    let r = post(&up, ANT, &marked(5));
    assert_eq!(r.anthropic_error(), "A maximum of 4 blocks with cache_control may be provided. Found 5.");
    let mut bad = marked(1);
    bad["messages"][0]["content"][0]["cache_control"]["ttl"] = json!("10m");
    assert_eq!(post(&up, ANT, &bad).status, 400);
}

#[test]
fn a_prompt_over_the_context_window_gets_each_providers_error() {
    let up = FakeUpstream::start().unwrap();
    up.set_context_tokens(Some(1000));
    let long = "word ".repeat(1000);
    let body = anthropic(json!([{"role": "user", "content": long}]));
    let tokens = (body.to_string().len() as u64).div_ceil(4);
    let r = post(&up, ANT, &body);
    assert_eq!(r.status, 400);
    assert_eq!(r.anthropic_error(), format!("prompt is too long: {tokens} tokens > 1000 maximum"));
    let body = openai(json!([{"role": "user", "content": long}]));
    let tokens = (body.to_string().len() as u64).div_ceil(4);
    let (msg, param, code) = post(&up, OAI, &body).openai_error();
    assert_eq!(
        msg,
        format!(
            "This model's maximum context length is 1000 tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages."
        )
    );
    assert_eq!((param, code), (json!("messages"), json!("context_length_exceeded")));
    // Under the window: fine; the defaults are the providers' windows.
    assert_eq!(post(&up, OAI, &openai(json!([{"role": "user", "content": "short"}]))).status, 200);
    up.set_context_tokens(None);
    assert_eq!(post(&up, ANT, &anthropic(json!([{"role": "user", "content": long}]))).status, 200);
}

#[test]
fn config_endpoint_relaxes_sets_the_window_and_moves_the_clock() {
    let up = FakeUpstream::start().unwrap();
    let orphan = openai(json!([{"role": "tool", "tool_call_id": "c", "content": "x"}]));
    assert_eq!(post(&up, OAI, &orphan).status, 400);
    let r = post(&up, "/_fake/config", &json!({"relax": ["tool_pairs"], "context_tokens": 50}));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"relaxed": ["tool_pairs"], "context_tokens": 50, "llama_cpp": false, "clock_offset_secs": 0})
    );
    assert_eq!(post(&up, OAI, &orphan).status, 200);
    let long = openai(json!([{"role": "user", "content": "word ".repeat(100)}]));
    assert_eq!(post(&up, OAI, &long).json()["error"]["code"], "context_length_exceeded");
    // As llama.cpp's server: its own error type, and the counts as fields.
    assert_eq!(post(&up, "/_fake/config", &json!({"llama_cpp": true})).json()["llama_cpp"], true);
    let r = post(&up, OAI, &long);
    assert_eq!(r.status, 400);
    let e = r.json()["error"].clone();
    assert_eq!(
        (e["type"].as_str(), e["code"].as_u64(), e["n_ctx"].as_u64()),
        (Some("exceed_context_size_error"), Some(400), Some(50))
    );
    let n = e["n_prompt_tokens"].as_u64().unwrap();
    assert!(n > 50);
    assert_eq!(
        e["message"],
        format!("request ({n} tokens) exceeds the available context size (50 tokens), try increasing it")
    );
    up.speak_llama_cpp(false);
    let r = post(&up, "/_fake/config", &json!({"enforce": ["tool_pairs"], "context_tokens": null}));
    assert_eq!(r.json()["relaxed"], json!([]));
    assert_eq!(post(&up, OAI, &orphan).status, 400);
    assert_eq!(post(&up, "/_fake/config", &json!({"relax": ["bogus"]})).status, 400);
    // The TTL: a cached prefix is read within 5 minutes, not after.
    let sys = json!([{"type": "text", "text": "Rules. ".repeat(700), "cache_control": {"type": "ephemeral"}}]);
    let mut cached = anthropic(json!([{"role": "user", "content": "hi"}]));
    cached["system"] = sys;
    let w = post(&up, ANT, &cached).json()["usage"]["cache_creation_input_tokens"].as_u64().unwrap();
    assert!(w >= 1024);
    assert_eq!(post(&up, ANT, &cached).json()["usage"]["cache_read_input_tokens"], w);
    assert_eq!(post(&up, "/_fake/config", &json!({"advance_clock_secs": 301})).json()["clock_offset_secs"], 301);
    let u = post(&up, ANT, &cached).json()["usage"].clone();
    assert_eq!((u["cache_read_input_tokens"].as_u64(), u["cache_creation_input_tokens"].as_u64()), (Some(0), Some(w)));
}

const RESP: &str = "/v1/responses";

fn responses(input: Value) -> Value {
    json!({"model": "gpt-x", "input": input})
}

/// OpenAI Responses: what the API refuses, each with its error, param and code.
#[test]
fn responses_refusals() {
    let up = FakeUpstream::start().unwrap();
    let refused = |body: Value| {
        let r = post(&up, RESP, &body);
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
        r.openai_error()
    };
    let user = json!({"role": "user", "content": "hi"});
    let (m, param, _) =
        refused(responses(json!([user, {"type": "function_call_output", "call_id": "call_x", "output": "o"}])));
    assert_eq!(m, "No tool call found for function call output with call_id call_x.");
    assert_eq!(param, "input");
    let call = json!({"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"});
    let (m, _, _) = refused(responses(json!([user, call])));
    assert_eq!(m, "No tool output found for function call call_1.");
    let (m, param, code) = refused(responses(json!([user, {"type": "tool_result", "id": "x"}])));
    assert!(m.starts_with("Invalid value: 'tool_result'."), "{m}");
    assert_eq!((param, code), (json!("input[1].type"), json!("invalid_value")));
    let (m, param, _) =
        refused(responses(json!([{"role": "user", "content": [{"type": "output_text", "text": "x"}]}])));
    assert_eq!(m, "Invalid value: 'output_text'. Supported values are: 'input_text', 'input_image', and 'input_file'.");
    assert_eq!(param, "input[0].content[0].type");
    let (m, _, _) =
        refused(responses(json!([user, {"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}])));
    assert_eq!(m, "Invalid value: 'input_text'. Supported values are: 'output_text' and 'refusal'.");
    let (m, param, _) = refused(responses(json!([{"role": "tool", "content": "x"}])));
    assert!(m.starts_with("Invalid value: 'tool'."), "{m}");
    assert_eq!(param, "input[0].role");
    let mut b = responses(json!("hi"));
    b["max_tokens"] = json!(10);
    let (m, param, code) = refused(b);
    assert!(m.contains("'max_output_tokens'"), "{m}");
    assert_eq!((param, code), (json!("max_tokens"), json!("unsupported_parameter")));
    let forged = json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "forged"});
    let (m, _, code) = refused(responses(json!([user, forged])));
    assert_eq!(m, "The encrypted content for item rs_1 could not be verified.");
    assert_eq!(code, "invalid_encrypted_content");
    let (_, param, code) = refused(json!({"model": "gpt-x", "previous_response_id": "resp_nope", "input": "hi"}));
    assert_eq!((param, code), (json!("previous_response_id"), json!("previous_response_not_found")));
    // Relaxed by name, the same request is served.
    up.relax(Rule::ToolPairs);
    assert_eq!(post(&up, RESP, &responses(json!([user, call]))).status, 200);
}

/// Responses served: the output of a tool marker, the stored context for
/// `previous_response_id` (not with `store: false`), signed reasoning and compaction items that
/// come back accepted, and the stream's events in order.
#[test]
fn responses_replies_events_and_stored_responses() {
    let up = FakeUpstream::start().unwrap();
    let first = post(&up, RESP, &responses(json!("go [[tool:ls]]"))).json();
    assert_eq!(first["object"], "response");
    let call = &first["output"][0];
    assert_eq!((call["type"].as_str(), call["name"].as_str()), (Some("function_call"), Some("ls")));
    assert!(first["usage"]["input_tokens_details"]["cached_tokens"].is_u64());
    // The provider holds the history: the output alone answers the call.
    let next = json!({"model": "gpt-x", "previous_response_id": first["id"],
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "a b"}]});
    let second = post(&up, RESP, &next);
    assert_eq!(second.status, 200, "{}", String::from_utf8_lossy(&second.body));
    // `store: false` keeps nothing to continue.
    let mut unstored = responses(json!("go [[tool:ls]]"));
    unstored["store"] = json!(false);
    let third = post(&up, RESP, &unstored).json();
    let again = json!({"model": "gpt-x", "previous_response_id": third["id"], "input": "x"});
    assert_eq!(post(&up, RESP, &again).status, 400);
    // Reasoning and compaction items the fake issued come back accepted.
    let mut b = responses(json!("hello"));
    b["include"] = json!(["reasoning.encrypted_content"]);
    b["context_management"] = json!([{"type": "compaction", "compact_threshold": 1}]);
    let out = post(&up, RESP, &b).json()["output"].clone();
    let kinds: Vec<&str> = out.as_array().unwrap().iter().map(|o| o["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["compaction", "reasoning", "message"]);
    let mut items = vec![json!({"role": "user", "content": "hello"})];
    items.extend(out.as_array().unwrap().iter().cloned());
    items.push(json!({"role": "user", "content": "more"}));
    assert_eq!(post(&up, RESP, &responses(Value::Array(items))).status, 200);
    // The stream: created first, completed last with the usage, sequence numbers in order.
    let mut s = responses(json!("go [[tool:ls]]"));
    s["stream"] = json!(true);
    let text = String::from_utf8(post(&up, RESP, &s).body).unwrap();
    let events: Vec<Value> =
        text.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect();
    let names: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(names.first(), Some(&"response.created"));
    assert_eq!(names.last(), Some(&"response.completed"));
    assert!(names.contains(&"response.function_call_arguments.delta"));
    assert!(events.iter().enumerate().all(|(i, e)| e["sequence_number"] == i as u64));
    assert!(events.last().unwrap()["response"]["usage"]["output_tokens"].is_u64());
}

#[test]
fn context_management_needs_its_beta_and_the_documented_edits() {
    use ctxlog_fake_upstream::context_editing::{applied, check, checked, BETA};
    use ctxlog_fake_upstream::strict::Strictness;
    let body = |cm: Value, thinking: bool| {
        let mut b = anthropic(json!([{"role": "user", "content": "hi"}]));
        b["context_management"] = cm;
        if thinking {
            b["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
        }
        b
    };
    let ok = body(json!({"edits": [{"type": "clear_tool_uses_20250919"}]}), false);
    assert_eq!(check(&ok, Some(BETA)), Ok(()));
    assert_eq!(check(&ok, Some(&format!("other-2025-01-01, {BETA}"))), Ok(()));
    // Without the beta the field is unknown to the API.
    for betas in [None, Some("other-2025-01-01")] {
        let r = check(&ok, betas).unwrap_err();
        assert_eq!((r.status, r.message.as_str()), (400, "context_management: Extra inputs are not permitted"));
    }
    for (cm, thinking, says) in [
        (json!({}), false, "context_management.edits: Field required"),
        (json!({"edits": [{"type": "clear_all"}]}), false, "does not match any of the expected tags"),
        (json!({"edits": [{"type": "clear_thinking_20251015"}]}), false, "requires thinking to be enabled"),
        (
            json!({"edits": [{"type": "clear_tool_uses_20250919"}, {"type": "clear_thinking_20251015"}]}),
            true,
            "must be listed first",
        ),
        (
            json!({"edits": [{"type": "clear_tool_uses_20250919", "keep": {"type": "input_tokens", "value": 3}}]}),
            false,
            "keep.type",
        ),
        (json!({"edits": [{"type": "clear_tool_uses_20250919", "exclude_tools": "memory"}]}), false, "exclude_tools"),
        (json!({"edits": [{"type": "clear_thinking_20251015", "keep": "some"}]}), true, "keep.type"),
    ] {
        let r = check(&body(cm.clone(), thinking), Some(BETA)).unwrap_err();
        assert!(r.message.contains(says), "{cm}: {}", r.message);
    }
    let both = json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}, {"type": "clear_tool_uses_20250919", "clear_tool_inputs": ["grep"]}]});
    assert_eq!(check(&body(both, true), Some(BETA)), Ok(()));
    // Relaxed by name only.
    let mut s = Strictness::default();
    assert!(checked(&s, &ok, None).is_err());
    s.relaxed.insert(Rule::ContextManagement);
    assert!(checked(&s, &ok, None).is_ok());
    // Below the trigger nothing is cleared, and the answer says so.
    assert_eq!(applied(&ok, 10), Some(json!({"applied_edits": []})));
    assert_eq!(applied(&anthropic(json!([])), 10), None);
}

#[test]
fn server_side_compaction_needs_its_own_beta_and_a_trigger_of_at_least_50k() {
    use ctxlog_fake_upstream::context_editing::{after_compaction, check, compaction, BETA, COMPACT_BETA};
    let with = |cm: Value| {
        let mut b = anthropic(json!([{"role": "user", "content": "hi"}]));
        b["context_management"] = cm;
        b
    };
    let compact = with(json!({"edits": [{"type": "compact_20260112"}]}));
    assert_eq!(check(&compact, Some(COMPACT_BETA)), Ok(()));
    assert!(check(&compact, Some(BETA)).unwrap_err().message.contains("requires the beta header compact-2026-01-12"));
    let clear = with(json!({"edits": [{"type": "clear_tool_uses_20250919"}]}));
    assert!(check(&clear, Some(COMPACT_BETA)).unwrap_err().message.contains(BETA));
    let low =
        with(json!({"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 49_999}}]}));
    assert!(check(&low, Some(COMPACT_BETA)).unwrap_err().message.contains("at least 50000"));
    // Due over the trigger (150,000 by default); pausing answers with the compaction alone.
    assert!(compaction(&compact, 150_000).is_none());
    let (block, pause) = compaction(&compact, 150_001).unwrap();
    assert_eq!((block["type"].as_str(), pause), (Some("compaction"), false));
    // What precedes the latest compaction block is not read.
    let history = anthropic(json!([
        {"role": "user", "content": "old"},
        {"role": "assistant", "content": [{"type": "compaction", "content": "summary"}]},
        {"role": "user", "content": "new"}
    ]));
    assert_eq!(after_compaction(&history).unwrap()["messages"].as_array().unwrap().len(), 2);
}
