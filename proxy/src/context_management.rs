//! A client's own `context_management` (Anthropic's context editing, beta
//! `context-management-2025-06-27`: `clear_tool_uses_20250919`, `clear_thinking_20251015`).
//! `--provider-context-management pass` (the default) forwards it as it came, for the provider
//! to apply; `apply` (for upstreams without it, e.g. llama.cpp) reads it as the call's knobs
//! ([`ctxlog::CallKnobs`]), leaves it and its beta out of the forwarded request and reports what
//! ctxlog cleared in the answer's `context_management.applied_edits`, in the API's shape. Either
//! way the response says so in `x-ctxlog-context-management`, and the log in a latched
//! `ClientContextManagement` guard (each call's edits are its `Edited` events).

use ctxlog::event::{EditKind, Event};
use ctxlog::{CallKnobs, Plan};
use serde_json::{json, Value};

use crate::item::Sess;

/// The beta flag that turns context editing on.
pub(crate) const BETA: &str = "context-management-2025-06-27";
/// The response header that tells what ctxlog did with a client's `context_management`.
pub const CONTEXT_MANAGEMENT_HEADER: &str = "x-ctxlog-context-management";

/// What the proxy does with a client's `context_management` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProviderContextManagement {
    /// Forward it as it came: the provider applies it (default).
    #[default]
    Pass,
    /// Apply it as the call's knobs and leave it (and its beta) out of the forwarded request.
    Apply,
}

/// A `--provider-context-management` value that is neither.
#[derive(Debug, thiserror::Error)]
#[error("{0:?}: expected pass or apply")]
pub struct UnknownContextManagementMode(String);

impl std::str::FromStr for ProviderContextManagement {
    type Err = UnknownContextManagementMode;
    fn from_str(s: &str) -> Result<Self, UnknownContextManagementMode> {
        match s {
            "pass" => Ok(ProviderContextManagement::Pass),
            "apply" => Ok(ProviderContextManagement::Apply),
            other => Err(UnknownContextManagementMode(other.to_owned())),
        }
    }
}

/// A client's edits, read as one call's knobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ClientEdits {
    pub knobs: CallKnobs,
    /// `clear_tool_uses_20250919` was asked for.
    pub tool_uses: bool,
    /// `clear_thinking_20251015` was asked for.
    pub thinking: bool,
    /// What ctxlog could not take as asked (a `tool_uses` trigger), for the header.
    pub notes: Vec<String>,
    /// Edits ctxlog does not apply but forwards (`compact_20260112`: the provider's
    /// summary, whose compaction block the client keeps), as they came.
    pub forwarded: Vec<Value>,
}

/// A malformed `context_management`: the field path and what is wrong (a 400, as the API's).
pub(crate) type Invalid = (String, String);

fn bad<T>(field: String, message: &str) -> Result<T, Invalid> {
    Err((field, message.to_owned()))
}

/// `{"type": T, "value": N}` with `type` one of `types`.
fn counted<'a>(v: &'a Value, field: &str, types: &[&str]) -> Result<(&'a str, u64), Invalid> {
    let t = v.get("type").and_then(Value::as_str).unwrap_or_default();
    if !types.contains(&t) {
        return bad(format!("{field}.type"), &format!("Input should be {}", types.join(" or ")));
    }
    match v.get("value").and_then(Value::as_u64) {
        Some(n) => Ok((t, n)),
        None => bad(format!("{field}.value"), "Input should be a non-negative integer"),
    }
}

/// Reads a client's `context_management` (the field's JSON text) as the API documents it;
/// `thinking_on`: the request enables extended thinking (`clear_thinking` requires it).
pub(crate) fn read(json: &str, thinking_on: bool) -> Result<ClientEdits, Invalid> {
    let v: Value =
        serde_json::from_str(json).map_err(|e| ("context_management".to_owned(), format!("invalid JSON: {e}")))?;
    let Some(edits) = v.get("edits").and_then(Value::as_array) else {
        return bad("context_management.edits".into(), "Field required (a list of edits)");
    };
    let mut out = ClientEdits::default();
    for (i, e) in edits.iter().enumerate() {
        let at = format!("context_management.edits.{i}");
        match e.get("type").and_then(Value::as_str) {
            Some("clear_tool_uses_20250919") => {
                out.tool_uses = true;
                out.knobs.clear_tool_results = true;
                // The API's defaults: trigger 100,000 input tokens, keep 3 tool uses.
                let (kind, value) = match e.get("trigger") {
                    Some(t) => counted(t, &format!("{at}.trigger"), &["input_tokens", "tool_uses"])?,
                    None => ("input_tokens", 100_000),
                };
                if kind == "input_tokens" {
                    out.knobs.trigger_tokens = Some(value);
                } else {
                    out.notes.push(format!("trigger {value} tool_uses taken as the session's token trigger"));
                }
                let keep = match e.get("keep") {
                    Some(k) => counted(k, &format!("{at}.keep"), &["tool_uses"])?.1,
                    None => 3,
                };
                out.knobs.keep_tool_uses = Some(u32::try_from(keep).unwrap_or(u32::MAX));
                if let Some(c) = e.get("clear_at_least") {
                    out.knobs.clear_at_least = Some(counted(c, &format!("{at}.clear_at_least"), &["input_tokens"])?.1);
                }
                if let Some(x) = e.get("exclude_tools") {
                    let names: Option<Vec<String>> =
                        x.as_array().and_then(|a| a.iter().map(|n| n.as_str().map(str::to_owned)).collect());
                    match names {
                        Some(n) => out.knobs.exclude_tools = Some(n),
                        None => return bad(format!("{at}.exclude_tools"), "Input should be a list of tool names"),
                    }
                }
                match e.get("clear_tool_inputs") {
                    None | Some(Value::Null) => {}
                    Some(Value::Bool(b)) => out.knobs.clear_tool_inputs = Some(*b),
                    // A list names the tools whose inputs go: ctxlog clears the inputs of
                    // every cleared call when it is not empty (docs/decisions.md).
                    Some(Value::Array(a)) if a.iter().all(Value::is_string) => {
                        out.knobs.clear_tool_inputs = Some(!a.is_empty());
                    }
                    Some(_) => {
                        return bad(
                            format!("{at}.clear_tool_inputs"),
                            "Input should be a boolean or a list of tool names",
                        )
                    }
                }
            }
            Some("clear_thinking_20251015") => {
                if !thinking_on {
                    return bad(format!("{at}.type"), "clear_thinking_20251015 requires `thinking` to be enabled");
                }
                if i != 0 {
                    return bad(format!("{at}.type"), "clear_thinking_20251015 must be the first edit in `edits`");
                }
                out.thinking = true;
                out.knobs.keep_thinking_turns = Some(match e.get("keep") {
                    Some(Value::String(s)) if s == "all" => None,
                    Some(k) => Some(
                        u32::try_from(counted(k, &format!("{at}.keep"), &["thinking_turns"])?.1).unwrap_or(u32::MAX),
                    ),
                    None => Some(1),
                });
            }
            // Server-side compaction is the provider's own summary: it stays in the request.
            Some("compact_20260112") => out.forwarded.push(e.clone()),
            _ => {
                return bad(
                    format!("{at}.type"),
                    "Input should be 'clear_tool_uses_20250919', 'clear_thinking_20251015' or 'compact_20260112'",
                )
            }
        }
    }
    Ok(out)
}

/// The `context_management` forwarded when ctxlog applies the rest: the edits it leaves to the
/// provider, or nothing.
pub(crate) fn forwarded_field(edits: &ClientEdits) -> Option<String> {
    (!edits.forwarded.is_empty()).then(|| json!({"edits": edits.forwarded}).to_string())
}

/// The edit types a `context_management` names, for the log (`clear_tool_uses_20250919, …`).
pub(crate) fn types(json: &str) -> String {
    let v: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    let names: Vec<&str> = v
        .get("edits")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|e| e.get("type").and_then(Value::as_str)).collect())
        .unwrap_or_default();
    if names.is_empty() {
        "no edits".to_owned()
    } else {
        names.join(", ")
    }
}

/// Does the request enable extended thinking (`thinking.type` `enabled` or `adaptive`)?
pub(crate) fn thinking_on(thinking_json: Option<&str>) -> bool {
    thinking_json
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .is_some_and(|v| matches!(v.get("type").and_then(Value::as_str), Some("enabled" | "adaptive")))
}

/// What ctxlog cleared for one call, in the API's terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    pub tool_uses: u64,
    pub tool_tokens: u64,
    pub thinking_turns: u64,
    pub thinking_tokens: u64,
}

/// What the plan's edits cleared, counted as the API counts: tool uses whose result was cleared,
/// truncated or removed (with their inputs' tokens when cleared too), thinking turns dropped.
pub(crate) fn applied(s: &Sess, plan: &Plan) -> Applied {
    let st = s.state();
    let config = st.info().map(|i| i.config.clone()).unwrap_or_default();
    let est = config.estimator();
    let mut a = Applied::default();
    for ev in plan.events() {
        let Event::Edited(e) = ev else { continue };
        let Some(entry) = st.entry(e.seq) else { continue };
        let Some(body) = st.original(e.seq).or_else(|| st.shown(e.seq)) else { continue };
        let before = u64::from(est.message(body));
        let after = |kind| {
            u64::from(est.message(&ctxlog::internal::view::edited_message_as(body, kind, config.placeholder_text())))
        };
        match e.kind {
            EditKind::Removed if entry.is_tool_result() => {
                a.tool_uses += body.result_ids().count() as u64;
                a.tool_tokens += before;
            }
            EditKind::Removed => a.tool_tokens += before,
            EditKind::Cleared | EditKind::Truncated { .. } if entry.is_tool_result() => {
                a.tool_uses += body.result_ids().count() as u64;
                a.tool_tokens += before.saturating_sub(after(e.kind));
            }
            EditKind::Trimmed { thinking, inputs } => {
                let dropped = after(EditKind::Trimmed { thinking, inputs: false });
                if thinking && body.has_thinking() {
                    a.thinking_turns += 1;
                    a.thinking_tokens += before.saturating_sub(dropped);
                }
                if inputs {
                    a.tool_tokens += dropped.saturating_sub(after(e.kind));
                }
            }
            _ => {}
        }
    }
    a
}

/// The answer's `context_management`: `{"applied_edits": [...]}`, one entry per edit that
/// cleared something (the thinking one first, as the API lists the edits in their order).
pub(crate) fn applied_json(edits: &ClientEdits, a: &Applied) -> Value {
    let mut list = Vec::new();
    if edits.thinking && a.thinking_turns > 0 {
        list.push(json!({"type": "clear_thinking_20251015", "cleared_thinking_turns": a.thinking_turns, "cleared_input_tokens": a.thinking_tokens}));
    }
    if edits.tool_uses && a.tool_uses > 0 {
        list.push(json!({"type": "clear_tool_uses_20250919", "cleared_tool_uses": a.tool_uses, "cleared_input_tokens": a.tool_tokens}));
    }
    json!({"applied_edits": list})
}

/// `x-ctxlog-context-management`: `passed`, or `applied` and what was cleared.
pub(crate) fn header(applied: Option<(&ClientEdits, &Applied)>) -> http::HeaderValue {
    let text = match applied {
        None => "passed".to_owned(),
        Some((e, a)) => {
            let mut parts = vec!["applied".to_owned()];
            if e.tool_uses {
                parts.push(format!(
                    "clear_tool_uses_20250919 cleared_tool_uses={} cleared_input_tokens={}",
                    a.tool_uses, a.tool_tokens
                ));
            }
            if e.thinking {
                parts.push(format!(
                    "clear_thinking_20251015 cleared_thinking_turns={} cleared_input_tokens={}",
                    a.thinking_turns, a.thinking_tokens
                ));
            }
            parts.extend(e.notes.iter().cloned());
            parts.join("; ")
        }
    };
    http::HeaderValue::from_str(&text).unwrap_or_else(|_| http::HeaderValue::from_static("applied"))
}

/// The `anthropic-beta` header without context editing's flag (dropped when nothing is left).
pub(crate) fn strip_beta(headers: &mut http::HeaderMap) {
    let name = http::HeaderName::from_static("anthropic-beta");
    let kept: Vec<String> = headers
        .get_all(&name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|f| !f.is_empty() && *f != BETA)
        .map(str::to_owned)
        .collect();
    headers.remove(&name);
    if let Ok(v) = http::HeaderValue::from_str(&kept.join(",")) {
        if !kept.is_empty() {
            headers.insert(name, v);
        }
    }
}

/// A JSON answer with `context_management` set (the API puts it at the top level).
pub(crate) fn into_json_answer(body: &[u8], cm: &Value) -> Option<Vec<u8>> {
    let mut v: serde_json::Map<String, Value> = serde_json::from_slice(body).ok()?;
    v.insert("context_management".into(), cm.clone());
    serde_json::to_vec(&v).ok()
}

/// A stream's `message_delta` event with `context_management` set (where the API streams it);
/// `None` for every other event.
pub(crate) fn into_delta_event(event: &[u8], cm: &Value) -> Option<Vec<u8>> {
    // A cheap byte test first: most events are deltas of content.
    memchr::memmem::find(event, b"message_delta")?;
    let mut out = Vec::with_capacity(event.len() + 128);
    let mut patched = false;
    for line in event.split_inclusive(|b| *b == b'\n') {
        let bare = line.strip_suffix(b"\n").unwrap_or(line);
        let bare = bare.strip_suffix(b"\r").unwrap_or(bare);
        if let Some(data) = bare.strip_prefix(b"data:") {
            if let Ok(mut v) = serde_json::from_slice::<serde_json::Map<String, Value>>(data.trim_ascii_start()) {
                if v.get("type").and_then(Value::as_str) == Some("message_delta") {
                    v.insert("context_management".into(), cm.clone());
                    out.extend_from_slice(b"data: ");
                    out.extend_from_slice(&serde_json::to_vec(&v).ok()?);
                    out.push(b'\n');
                    patched = true;
                    continue;
                }
            }
        }
        out.extend_from_slice(line);
    }
    patched.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_apis() {
        let e = read(r#"{"edits":[{"type":"clear_tool_uses_20250919"}]}"#, false).unwrap();
        assert_eq!((e.knobs.trigger_tokens, e.knobs.keep_tool_uses), (Some(100_000), Some(3)));
        assert!(e.tool_uses && !e.thinking && e.knobs.clear_tool_results);
        let e = read(r#"{"edits":[{"type":"clear_thinking_20251015"},{"type":"clear_tool_uses_20250919","keep":{"type":"tool_uses","value":5},"exclude_tools":["memory"],"clear_tool_inputs":true,"clear_at_least":{"type":"input_tokens","value":5000}}]}"#, true).unwrap();
        assert_eq!(e.knobs.keep_thinking_turns, Some(Some(1)));
        assert_eq!(e.knobs.keep_tool_uses, Some(5));
        assert_eq!(e.knobs.exclude_tools, Some(vec!["memory".to_owned()]));
        assert_eq!((e.knobs.clear_tool_inputs, e.knobs.clear_at_least), (Some(true), Some(5_000)));
        let all = read(r#"{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}"#, true).unwrap();
        assert_eq!(all.knobs.keep_thinking_turns, Some(None));
    }

    #[test]
    fn what_the_api_refuses_is_refused_naming_the_field() {
        for (body, thinking, field) in [
            (r#"{}"#, false, "context_management.edits"),
            (r#"{"edits":[{"type":"clear_everything"}]}"#, false, "context_management.edits.0.type"),
            (r#"{"edits":[{"type":"clear_thinking_20251015"}]}"#, false, "context_management.edits.0.type"),
            (
                r#"{"edits":[{"type":"clear_tool_uses_20250919"},{"type":"clear_thinking_20251015"}]}"#,
                true,
                "context_management.edits.1.type",
            ),
            (
                r#"{"edits":[{"type":"clear_tool_uses_20250919","keep":{"type":"input_tokens","value":3}}]}"#,
                false,
                "context_management.edits.0.keep.type",
            ),
            (
                r#"{"edits":[{"type":"clear_tool_uses_20250919","exclude_tools":"memory"}]}"#,
                false,
                "context_management.edits.0.exclude_tools",
            ),
        ] {
            assert_eq!(read(body, thinking).unwrap_err().0, field, "{body}");
        }
    }

    #[test]
    fn the_beta_flag_goes_and_the_others_stay() {
        let mut h = http::HeaderMap::new();
        h.insert("anthropic-beta", http::HeaderValue::from_static("context-management-2025-06-27, other-2025-01-01"));
        strip_beta(&mut h);
        assert_eq!(h.get("anthropic-beta").unwrap(), "other-2025-01-01");
        let mut h = http::HeaderMap::new();
        h.insert("anthropic-beta", http::HeaderValue::from_static(BETA));
        strip_beta(&mut h);
        assert!(h.get("anthropic-beta").is_none());
    }

    #[test]
    fn a_message_delta_carries_the_applied_edits() {
        let cm = json!({"applied_edits": []});
        let ev =
            b"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n";
        let out = String::from_utf8(into_delta_event(ev, &cm).unwrap()).unwrap();
        assert!(out.starts_with("event: message_delta\ndata: {") && out.ends_with("}\n\n"), "{out}");
        assert!(out.contains(r#""context_management":{"applied_edits":[]}"#), "{out}");
        assert!(into_delta_event(b"event: ping\ndata: {\"type\":\"ping\"}\n\n", &cm).is_none());
    }
}
