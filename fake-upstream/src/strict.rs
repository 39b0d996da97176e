//! What the real APIs reject, with their status codes and error texts (checked against the
//! errors the providers return, as quoted in their users' bug reports), and the thinking
//! signatures. Every rule is on by default; [`Rule`] names one so that a test can relax it
//! (`FakeUpstream::relax`, `POST /_fake/config {"relax": [...]}`).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashSet;

/// One rule of the strict fake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// Anthropic `max_tokens` is required.
    MaxTokens,
    /// Roles: Anthropic `user`/`assistant` only (no `system` message); OpenAI's known roles.
    Roles,
    /// No empty message content, no empty text block; an OpenAI assistant message has content
    /// or tool calls.
    EmptyContent,
    /// Every tool result answers a call of the message before it (OpenAI: of the assistant
    /// message its run of `tool` messages follows); every tool call is answered by the next
    /// message (OpenAI: by the `tool` messages after it).
    ToolPairs,
    /// A `thinking` block carries the signature the fake gave it; with thinking enabled, the
    /// assistant message before a trailing tool result starts with a thinking block, and the
    /// budget is at least 1,024 tokens and below `max_tokens`.
    Thinking,
    /// Anthropic: at most 100 images in a request.
    Media,
    /// Anthropic: at most 4 `cache_control` breakpoints, `ttl` `5m` or `1h`.
    CacheBreakpoints,
    /// The prompt fits the model's context window.
    ContextLength,
    /// Responses: only the item and content part types the API knows, parts in their role.
    ItemTypes,
    /// Responses: `encrypted_content` of `reasoning` and `compaction` items is what the fake
    /// issued (a compaction item must carry one).
    EncryptedContent,
    /// Anthropic: `context_management` needs the beta `context-management-2025-06-27` and the
    /// documented edits (`crate::context_editing::check`).
    ContextManagement,
}

/// A request the real API would refuse: status and error fields in its shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// HTTP status (400).
    pub status: u16,
    /// The provider's error message text.
    pub message: String,
    /// OpenAI's `param`.
    pub param: Option<String>,
    /// OpenAI's `code`.
    pub code: Option<String>,
}

fn reject(message: String) -> Rejection {
    Rejection { status: 400, message, param: None, code: None }
}

/// The rules in force and the context windows.
#[derive(Clone, Debug, Default)]
pub struct Strictness {
    /// Relaxed rules.
    pub relaxed: HashSet<Rule>,
    /// Overrides every model's context window (tokens) when set.
    pub context_tokens: Option<u64>,
    /// `/v1/chat/completions` answers a prompt over the context as llama.cpp's server does
    /// (`exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`), not as OpenAI does.
    pub llama_cpp: bool,
}

/// The `code` of a [`Rejection`] that the server renders as llama.cpp's context error.
pub const LLAMA_CONTEXT_CODE: &str = "exceed_context_size_error";

/// Anthropic's documented limit on images in one request.
pub const MAX_IMAGES: usize = 100;
/// Anthropic's limit on `cache_control` breakpoints.
pub const MAX_BREAKPOINTS: usize = 4;

impl Strictness {
    pub(crate) fn on(&self, r: Rule) -> bool {
        !self.relaxed.contains(&r)
    }

    /// The context window of `model` in the fake: Anthropic 200,000 tokens, OpenAI 128,000,
    /// unless overridden.
    pub fn context_of(&self, anthropic: bool) -> u64 {
        self.context_tokens.unwrap_or(if anthropic { 200_000 } else { 128_000 })
    }

    /// Checks an Anthropic Messages request; `prompt_tokens` is the fake's count of it.
    pub fn anthropic(&self, body: &Value, prompt_tokens: u64) -> Result<(), Rejection> {
        if self.on(Rule::MaxTokens) && body.get("max_tokens").and_then(Value::as_u64).is_none_or(|n| n < 1) {
            return Err(reject("max_tokens: Field required".into()));
        }
        let empty = Vec::new();
        let messages = body.get("messages").and_then(Value::as_array).unwrap_or(&empty);
        let thinking_on =
            body.pointer("/thinking/type").and_then(Value::as_str).is_some_and(|t| t == "enabled" || t == "adaptive");
        if self.on(Rule::Thinking) && body.pointer("/thinking/type").and_then(Value::as_str) == Some("enabled") {
            // The documented bounds of an enabled thinking budget.
            let budget = body.pointer("/thinking/budget_tokens").and_then(Value::as_u64);
            match budget {
                None => return Err(reject("thinking.enabled.budget_tokens: Field required".into())),
                Some(b) if b < 1024 => {
                    return Err(reject(
                        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024".into(),
                    ))
                }
                Some(b) if body.get("max_tokens").and_then(Value::as_u64).is_some_and(|m| m <= b) => {
                    return Err(reject("`max_tokens` must be greater than `thinking.budget_tokens`".into()))
                }
                Some(_) => {}
            }
        }
        let mut images = 0usize;
        let mut breakpoints = count_breakpoints(body.get("tools")) + count_breakpoints(body.get("system"));
        if let Some(sys) = body.get("system").and_then(Value::as_array) {
            if self.on(Rule::EmptyContent) {
                if let Some(j) =
                    sys.iter().position(|b| b.get("text").and_then(Value::as_str).is_some_and(str::is_empty))
                {
                    return Err(reject(format!("system.{j}: text content blocks must be non-empty")));
                }
            }
        }
        for (i, m) in messages.iter().enumerate() {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("");
            if self.on(Rule::Roles) && role != "user" && role != "assistant" {
                return Err(reject(if role == "system" {
                    "messages: Unexpected role \"system\". The Messages API accepts a top-level `system` parameter, \
                     not \"system\" as an input message role."
                        .into()
                } else {
                    format!("messages.{i}.role: Input should be 'user' or 'assistant'")
                }));
            }
            let last = i + 1 == messages.len();
            let blocks = blocks_of(m);
            if self.on(Rule::EmptyContent) {
                let is_empty = match m.get("content") {
                    Some(Value::String(s)) => s.is_empty(),
                    Some(Value::Array(a)) => a.is_empty(),
                    _ => true,
                };
                if is_empty && !(last && role == "assistant") {
                    return Err(reject(format!(
                        "messages.{i}: all messages must have non-empty content except for the optional final assistant message"
                    )));
                }
                for (j, b) in blocks.iter().enumerate().filter(|_| !(last && role == "assistant")) {
                    if b.get("type").and_then(Value::as_str) == Some("text") {
                        let t = b.get("text").and_then(Value::as_str).unwrap_or("");
                        if t.is_empty() {
                            return Err(reject(format!(
                                "messages.{i}.content.{j}.text: text content blocks must be non-empty"
                            )));
                        }
                        if t.trim().is_empty() {
                            return Err(reject(format!(
                                "messages.{i}.content.{j}.text: text content blocks must contain non-whitespace text"
                            )));
                        }
                    }
                }
            }
            for b in &blocks {
                images += count_images(b);
                breakpoints += usize::from(b.get("cache_control").is_some());
                if let Some(Value::Array(inner)) = b.get("content") {
                    breakpoints += inner.iter().filter(|x| x.get("cache_control").is_some()).count();
                }
            }
            if self.on(Rule::Thinking) && role == "assistant" {
                for (j, b) in blocks.iter().enumerate() {
                    if b.get("type").and_then(Value::as_str) == Some("thinking") {
                        let text = b.get("thinking").and_then(Value::as_str).unwrap_or("");
                        let sig = b.get("signature").and_then(Value::as_str).unwrap_or("");
                        if sig != sign(text) {
                            return Err(reject(format!(
                                "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                            )));
                        }
                    }
                }
            }
            if self.on(Rule::ToolPairs) {
                if role == "assistant" && !last {
                    let calls = ids(&blocks, "tool_use", "id");
                    if !calls.is_empty() {
                        let next = messages.get(i + 1).map(blocks_of).unwrap_or_default();
                        let answered = ids(&next, "tool_result", "tool_use_id");
                        let missing: Vec<&str> =
                            calls.iter().filter(|c| !answered.contains(c)).map(String::as_str).collect();
                        if !missing.is_empty() {
                            return Err(reject(format!(
                                "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. \
                                 Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                                missing.join(", ")
                            )));
                        }
                    }
                }
                if role == "user" {
                    let prev = if i > 0 { messages.get(i - 1).map(blocks_of).unwrap_or_default() } else { Vec::new() };
                    let calls = ids(&prev, "tool_use", "id");
                    for (j, b) in blocks.iter().enumerate() {
                        if b.get("type").and_then(Value::as_str) == Some("tool_result") {
                            let id = b.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
                            if !calls.iter().any(|c| c == id) {
                                return Err(reject(format!(
                                    "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. \
                                     Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                                )));
                            }
                        }
                    }
                }
            }
        }
        if self.on(Rule::Thinking) && thinking_on && messages.len() >= 2 {
            let last = &messages[messages.len() - 1];
            let before = &messages[messages.len() - 2];
            let ends_in_results =
                blocks_of(last).iter().any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"));
            if ends_in_results && before.get("role").and_then(Value::as_str) == Some("assistant") {
                let first = blocks_of(before)
                    .first()
                    .and_then(|b| b.get("type").and_then(Value::as_str))
                    .unwrap_or("text")
                    .to_owned();
                if first != "thinking" && first != "redacted_thinking" {
                    return Err(reject(format!(
                        "messages.{}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. When \
                         `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the \
                         lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from \
                         previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at \
                         https://docs.claude.com/en/docs/build-with-claude/extended-thinking",
                        messages.len() - 2
                    )));
                }
            }
        }
        if self.on(Rule::Media) && images > MAX_IMAGES {
            return Err(reject(format!("Too much media: 0 document pages + {images} images > {MAX_IMAGES}")));
        }
        if self.on(Rule::CacheBreakpoints) {
            if breakpoints > MAX_BREAKPOINTS {
                return Err(reject(format!(
                    "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {breakpoints}."
                )));
            }
            if let Some(bad) = bad_ttl(body) {
                return Err(reject(format!("cache_control.ttl: Input should be '5m' or '1h' (got {bad})")));
            }
        }
        let limit = self.context_of(true);
        if self.on(Rule::ContextLength) && prompt_tokens > limit {
            return Err(reject(format!("prompt is too long: {prompt_tokens} tokens > {limit} maximum")));
        }
        Ok(())
    }

    /// Checks an OpenAI Chat Completions request.
    pub fn openai(&self, body: &Value, prompt_tokens: u64) -> Result<(), Rejection> {
        let empty = Vec::new();
        let messages = body.get("messages").and_then(Value::as_array).unwrap_or(&empty);
        if messages.is_empty() {
            return Err(Rejection {
                status: 400,
                message: "[] is too short - 'messages'".into(),
                param: Some("messages".into()),
                code: None,
            });
        }
        let bad = |i: usize, field: &str, message: String| Rejection {
            status: 400,
            message,
            param: Some(format!("messages.[{i}].{field}")),
            code: None,
        };
        for (i, m) in messages.iter().enumerate() {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("");
            if self.on(Rule::Roles)
                && !matches!(role, "system" | "developer" | "user" | "assistant" | "tool" | "function")
            {
                return Err(bad(
                    i,
                    "role",
                    format!(
                        "Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."
                    ),
                ));
            }
            let calls: Vec<String> = m
                .get("tool_calls")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_owned)).collect())
                .unwrap_or_default();
            if self.on(Rule::EmptyContent) {
                match m.get("content") {
                    Some(Value::Array(a)) if a.is_empty() => {
                        return Err(bad(
                            i,
                            "content",
                            format!(
                                "Invalid 'messages[{i}].content': empty array. Expected an array with minimum length 1, but got an empty array instead."
                            ),
                        ))
                    }
                    None | Some(Value::Null) if role != "assistant" || calls.is_empty() => {
                        return Err(bad(i, "content", "Invalid value for 'content': expected a string, got null.".into()))
                    }
                    _ => {}
                }
            }
            if self.on(Rule::ToolPairs) {
                if role == "tool" {
                    // The run of tool messages this one belongs to follows an assistant message with calls.
                    let mut k = i;
                    while k > 0 && messages[k - 1].get("role").and_then(Value::as_str) == Some("tool") {
                        k -= 1;
                    }
                    let owner = if k > 0 { messages.get(k - 1) } else { None };
                    let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
                    let ok = owner.is_some_and(|o| {
                        o.get("role").and_then(Value::as_str) == Some("assistant")
                            && o.get("tool_calls")
                                .and_then(Value::as_array)
                                .is_some_and(|a| a.iter().any(|c| c.get("id").and_then(Value::as_str) == Some(id)))
                    });
                    if !ok {
                        return Err(bad(
                            i,
                            "role",
                            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.".into(),
                        ));
                    }
                }
                if role == "assistant" && !calls.is_empty() {
                    let answered: Vec<&str> = messages[i + 1..]
                        .iter()
                        .take_while(|x| x.get("role").and_then(Value::as_str) == Some("tool"))
                        .filter_map(|x| x.get("tool_call_id").and_then(Value::as_str))
                        .collect();
                    let missing: Vec<&str> =
                        calls.iter().map(String::as_str).filter(|c| !answered.contains(c)).collect();
                    if !missing.is_empty() {
                        return Err(bad(
                            i,
                            "role",
                            format!(
                                "An assistant message with 'tool_calls' must be followed by tool messages responding to each \
                                 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                                missing.join(", ")
                            ),
                        ));
                    }
                }
            }
        }
        let limit = self.context_of(false);
        if self.on(Rule::ContextLength) && prompt_tokens > limit && self.llama_cpp {
            return Err(Rejection {
                status: 400,
                message: format!(
                    "request ({prompt_tokens} tokens) exceeds the available context size ({limit} tokens)"
                ),
                param: None,
                code: Some(LLAMA_CONTEXT_CODE.into()),
            });
        }
        if self.on(Rule::ContextLength) && prompt_tokens > limit {
            return Err(Rejection {
                status: 400,
                message: format!(
                    "This model's maximum context length is {limit} tokens. However, your messages resulted in {prompt_tokens} tokens. Please reduce the length of the messages."
                ),
                param: Some("messages".into()),
                code: Some("context_length_exceeded".into()),
            });
        }
        Ok(())
    }
}

/// A message's content as blocks (a string is one text block).
pub(crate) fn blocks_of(m: &Value) -> Vec<Value> {
    match m.get("content") {
        Some(Value::Array(a)) => a.clone(),
        Some(Value::String(s)) => vec![serde_json::json!({"type": "text", "text": s})],
        _ => Vec::new(),
    }
}

fn ids(blocks: &[Value], kind: &str, field: &str) -> Vec<String> {
    blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some(kind))
        .filter_map(|b| b.get(field).and_then(Value::as_str).map(str::to_owned))
        .collect()
}

fn count_images(b: &Value) -> usize {
    match b.get("type").and_then(Value::as_str) {
        Some("image") => 1,
        Some("tool_result") => match b.get("content") {
            Some(Value::Array(inner)) => inner.iter().map(count_images).sum(),
            _ => 0,
        },
        _ => 0,
    }
}

fn count_breakpoints(v: Option<&Value>) -> usize {
    match v {
        Some(Value::Array(a)) => a.iter().filter(|x| x.get("cache_control").is_some()).count(),
        _ => 0,
    }
}

/// The first `cache_control.ttl` that is neither `5m` nor `1h`, anywhere in the body.
fn bad_ttl(v: &Value) -> Option<String> {
    match v {
        Value::Object(o) => {
            if let Some(t) = o.get("cache_control").and_then(|c| c.get("ttl")) {
                if t.as_str() != Some("5m") && t.as_str() != Some("1h") {
                    return Some(t.to_string());
                }
            }
            o.values().find_map(bad_ttl)
        }
        Value::Array(a) => a.iter().find_map(bad_ttl),
        _ => None,
    }
}

/// The signature the fake gives a thinking text (what a client must send back unchanged).
pub fn sign(thinking: &str) -> String {
    use base64::Engine as _;
    let mut h = Sha256::new();
    h.update(b"ctxlog-fake-upstream thinking signature v1\n");
    h.update(thinking.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}
