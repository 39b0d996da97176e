//! Anthropic's context editing as the fake speaks it: the request's `context_management` is
//! accepted only with the beta `context-management-2025-06-27` and as documented
//! (`clear_tool_uses_20250919`: `trigger` in `input_tokens` or `tool_uses`, `keep` in
//! `tool_uses`, `clear_at_least` in `input_tokens`, `exclude_tools` names, `clear_tool_inputs` a
//! boolean or names; `clear_thinking_20251015`: `keep` in `thinking_turns` or `"all"`, only with
//! thinking enabled and first in `edits`; `compact_20260112` with its own beta
//! `compact-2026-01-12`: `trigger` of at least 50,000 input tokens, `pause_after_compaction`,
//! `instructions`), and the answer reports what the fake would have
//! cleared in `context_management.applied_edits` (top level of the JSON, on `message_delta` in a
//! stream), tokens counted as the fake counts them (bytes / 4).

use serde_json::{json, Value};

use crate::strict::{Rejection, Rule, Strictness};

/// The beta flag context editing needs.
pub const BETA: &str = "context-management-2025-06-27";
/// The beta flag server-side compaction (`compact_20260112`) needs.
pub const COMPACT_BETA: &str = "compact-2026-01-12";
/// The least `trigger` compaction accepts, and its default.
pub const COMPACT_MIN_TRIGGER: u64 = 50_000;
const COMPACT_DEFAULT_TRIGGER: u64 = 150_000;

fn reject(message: String) -> Rejection {
    Rejection { status: 400, message, param: None, code: None }
}

fn counted(v: Option<&Value>, field: &str, types: &[&str]) -> Result<Option<(String, u64)>, Rejection> {
    let Some(v) = v else { return Ok(None) };
    let t = v.get("type").and_then(Value::as_str).unwrap_or_default();
    if !types.contains(&t) {
        return Err(reject(format!("{field}.type: Input should be {}", types.join(" or "))));
    }
    let Some(n) = v.get("value").and_then(Value::as_u64) else {
        return Err(reject(format!("{field}.value: Input should be a valid integer")));
    };
    Ok(Some((t.to_owned(), n)))
}

/// [`check`], unless `strict` relaxed [`Rule::ContextManagement`].
pub fn checked(strict: &Strictness, body: &Value, betas: Option<&str>) -> Result<(), Rejection> {
    if strict.on(Rule::ContextManagement) {
        check(body, betas)
    } else {
        Ok(())
    }
}

/// Checks the request's `context_management` against the beta header (`betas`, the
/// `anthropic-beta` value) and the documented shape.
pub fn check(body: &Value, betas: Option<&str>) -> Result<(), Rejection> {
    let Some(cm) = body.get("context_management") else { return Ok(()) };
    let has = |flag: &str| betas.is_some_and(|b| b.split(',').any(|f| f.trim() == flag));
    if !has(BETA) && !has(COMPACT_BETA) {
        return Err(reject("context_management: Extra inputs are not permitted".into()));
    }
    let Some(edits) = cm.get("edits").and_then(Value::as_array) else {
        return Err(reject("context_management.edits: Field required".into()));
    };
    // Each strategy is its own beta.
    for (i, e) in edits.iter().enumerate() {
        let t = e.get("type").and_then(Value::as_str).unwrap_or_default();
        let needs = if t == "compact_20260112" { COMPACT_BETA } else { BETA };
        if !has(needs) && (t == "compact_20260112" || t.starts_with("clear_")) {
            return Err(reject(format!("context_management.edits.{i}: {t} requires the beta header {needs}")));
        }
    }
    let thinking_on =
        body.pointer("/thinking/type").and_then(Value::as_str).is_some_and(|t| t == "enabled" || t == "adaptive");
    for (i, e) in edits.iter().enumerate() {
        let at = format!("context_management.edits.{i}");
        match e.get("type").and_then(Value::as_str) {
            Some("clear_tool_uses_20250919") => {
                counted(e.get("trigger"), &format!("{at}.trigger"), &["input_tokens", "tool_uses"])?;
                counted(e.get("keep"), &format!("{at}.keep"), &["tool_uses"])?;
                counted(e.get("clear_at_least"), &format!("{at}.clear_at_least"), &["input_tokens"])?;
                if let Some(x) = e.get("exclude_tools") {
                    if !x.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
                        return Err(reject(format!("{at}.exclude_tools: Input should be a valid list of strings")));
                    }
                }
                match e.get("clear_tool_inputs") {
                    None | Some(Value::Null | Value::Bool(_)) => {}
                    Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
                    Some(_) => {
                        return Err(reject(format!(
                            "{at}.clear_tool_inputs: Input should be a valid boolean or a list of strings"
                        )))
                    }
                }
            }
            Some("clear_thinking_20251015") => {
                if !thinking_on {
                    return Err(reject(format!(
                        "{at}: clear_thinking_20251015 strategy requires thinking to be enabled"
                    )));
                }
                if i != 0 {
                    return Err(reject(format!(
                        "{at}: clear_thinking_20251015 must be listed first in context_management.edits"
                    )));
                }
                match e.get("keep") {
                    None => {}
                    Some(Value::String(s)) if s == "all" => {}
                    k => {
                        counted(k, &format!("{at}.keep"), &["thinking_turns"])?;
                    }
                }
            }
            Some("compact_20260112") => {
                if let Some((_, n)) = counted(e.get("trigger"), &format!("{at}.trigger"), &["input_tokens"])? {
                    if n < COMPACT_MIN_TRIGGER {
                        return Err(reject(format!(
                            "{at}.trigger.value: must be at least {COMPACT_MIN_TRIGGER} tokens"
                        )));
                    }
                }
                if e.get("pause_after_compaction").is_some_and(|p| !p.is_boolean()) {
                    return Err(reject(format!("{at}.pause_after_compaction: Input should be a valid boolean")));
                }
                if e.get("instructions").is_some_and(|p| !p.is_string() && !p.is_null()) {
                    return Err(reject(format!("{at}.instructions: Input should be a valid string")));
                }
            }
            other => {
                return Err(reject(format!(
                    "{at}.type: Input tag '{}' found using 'type' does not match any of the expected tags: \
                     'clear_tool_uses_20250919', 'clear_thinking_20251015', 'compact_20260112'",
                    other.unwrap_or("")
                )))
            }
        }
    }
    Ok(())
}

/// Server-side compaction asked for and due (`prompt` over its trigger): the compaction block
/// that opens the answer (its summary names the messages it covers), and whether the answer
/// pauses after it (`pause_after_compaction`).
pub fn compaction(body: &Value, prompt: u64) -> Option<(Value, bool)> {
    let edits = body.pointer("/context_management/edits")?.as_array()?;
    let e = edits.iter().find(|e| e.get("type").and_then(Value::as_str) == Some("compact_20260112"))?;
    let trigger = e.pointer("/trigger/value").and_then(Value::as_u64).unwrap_or(COMPACT_DEFAULT_TRIGGER);
    if prompt <= trigger {
        return None;
    }
    let n = body.get("messages").and_then(Value::as_array).map_or(0, Vec::len);
    let summary = format!("Summary of the {n} messages so far: the work goes on as planned.");
    let pause = e.get("pause_after_compaction").and_then(Value::as_bool) == Some(true);
    Some((json!({"type": "compaction", "content": summary}), pause))
}

/// The prompt the API reads of a history holding a compaction block: it drops every message
/// block before the latest one, so only the system prompt, the tools and what follows count.
pub fn after_compaction(body: &Value) -> Option<Value> {
    let messages = body.get("messages")?.as_array()?;
    let at = messages
        .iter()
        .rposition(|m| blocks(m).iter().any(|b| b.get("type").and_then(Value::as_str) == Some("compaction")))?;
    let mut b = body.clone();
    b["messages"] = Value::Array(messages.get(at..)?.to_vec());
    Some(b)
}

fn tokens_of(v: &Value) -> u64 {
    (v.to_string().len() as u64).div_ceil(4)
}

/// What the API would report for an accepted request with `context_management`, `prompt`
/// being the fake's count of it: `{"applied_edits": [...]}`, `None` without the field.
pub fn applied(body: &Value, prompt: u64) -> Option<Value> {
    let edits = body.pointer("/context_management/edits")?.as_array()?;
    let messages = body.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut out = Vec::new();
    for e in edits {
        match e.get("type").and_then(Value::as_str) {
            Some("clear_thinking_20251015") => {
                let keep = match e.get("keep") {
                    Some(Value::String(s)) if s == "all" => usize::MAX,
                    Some(k) => k.get("value").and_then(Value::as_u64).unwrap_or(1) as usize,
                    None => 1,
                };
                let turns: Vec<&Value> = messages
                    .iter()
                    .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
                    .filter(|m| blocks(m).iter().any(|b| is_thinking(b)))
                    .collect();
                let cleared = turns.len().saturating_sub(keep);
                if cleared > 0 {
                    let tokens: u64 = turns
                        .iter()
                        .take(cleared)
                        .flat_map(|m| blocks(m))
                        .filter(|b| is_thinking(b))
                        .map(tokens_of)
                        .sum();
                    out.push(json!({"type": "clear_thinking_20251015", "cleared_thinking_turns": cleared, "cleared_input_tokens": tokens}));
                }
            }
            Some("clear_tool_uses_20250919") => {
                let results: Vec<(String, &Value)> = messages
                    .iter()
                    .flat_map(|m| blocks(m))
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                    .map(|b| (b.get("tool_use_id").and_then(Value::as_str).unwrap_or("").to_owned(), b))
                    .collect();
                let (kind, value) = match e.get("trigger") {
                    Some(t) => (
                        t.get("type").and_then(Value::as_str).unwrap_or("input_tokens"),
                        t.get("value").and_then(Value::as_u64).unwrap_or(100_000),
                    ),
                    None => ("input_tokens", 100_000),
                };
                let over = if kind == "tool_uses" { results.len() as u64 > value } else { prompt > value };
                if !over {
                    continue;
                }
                let keep = e.pointer("/keep/value").and_then(Value::as_u64).unwrap_or(3) as usize;
                let excluded: Vec<&str> = e
                    .get("exclude_tools")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let name_of = |id: &str| {
                    messages
                        .iter()
                        .flat_map(|m| blocks(m))
                        .find(|b| b.get("id").and_then(Value::as_str) == Some(id))
                        .and_then(|b| b.get("name").and_then(Value::as_str))
                        .unwrap_or("")
                        .to_owned()
                };
                let clearable = results.len().saturating_sub(keep);
                let cleared: Vec<&Value> = results
                    .iter()
                    .take(clearable)
                    .filter(|(id, _)| !excluded.contains(&name_of(id).as_str()))
                    .map(|(_, b)| *b)
                    .collect();
                let tokens: u64 = cleared.iter().map(|b| b.get("content").map_or(0, tokens_of)).sum();
                let least = e.pointer("/clear_at_least/value").and_then(Value::as_u64).unwrap_or(0);
                if !cleared.is_empty() && tokens >= least {
                    out.push(json!({"type": "clear_tool_uses_20250919", "cleared_tool_uses": cleared.len(), "cleared_input_tokens": tokens}));
                }
            }
            _ => {}
        }
    }
    Some(json!({"applied_edits": out}))
}

fn blocks(m: &Value) -> Vec<&Value> {
    m.get("content").and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default()
}

fn is_thinking(b: &Value) -> bool {
    matches!(b.get("type").and_then(Value::as_str), Some("thinking" | "redacted_thinking"))
}
