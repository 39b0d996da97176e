//! Provider-ready request bodies: every call of long, compacted sessions (flushes, ladder
//! edits, summaries, screenshots) renders a body the provider's API accepts, whose `messages`
//! are the digested view byte for byte, and which the log rebuilds byte for byte.
//!
//! The shape checks follow what the APIs enforce today. Anthropic Messages: no `system` role in
//! `messages` (the system prompt is the top-level `system`); roles `user` and `assistant`
//! only; consecutive turns of the same role are combined into one turn, so after combining the
//! turns alternate, starting with `user`; "each `tool_use` block must have a corresponding
//! `tool_result` block in the next message", and "messages following `tool_use` blocks must
//! begin with a matching number of `tool_result` blocks"; each `tool_result` answers a
//! `tool_use` of the previous turn; no empty content or empty text block; at most four
//! `cache_control` breakpoints; media as base64. OpenAI chat: an assistant message with
//! `tool_calls` must be followed by `tool` messages answering each id, and a `tool` message
//! must answer a call of the assistant message before it; images as `data:` URLs.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::BTreeSet;

use ctxlog::config::Config;
use ctxlog::event::Event;
use ctxlog::internal::wire::{self, Media, RenderOpts, WireFormat};
use ctxlog::message::{Block, Content, MediaData, MediaSource, Message, Role};
use ctxlog::replay;
use ctxlog::request::{CacheTtl, Request, RequestOptions};
use ctxlog::session::{Prepared, Produced};
use ctxlog::{MemoryStore, Session, StreamId, Timestamp};
use serde_json::value::RawValue;
use serde_json::{json, Value};

const TOOLS: &str = r#"[{"name":"read_file","description":"Read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}]"#;

fn options(format: WireFormat, breakpoints: bool) -> RequestOptions {
    let opts = match format {
        WireFormat::Anthropic => {
            RequestOptions::new().model("claude-sonnet-4-5").max_tokens(8_192).tools(TOOLS).unwrap()
        }
        WireFormat::OpenAi => {
            let tools = r#"[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}]"#;
            RequestOptions::new().model("gpt-5").tools(tools).unwrap().field("stream", "true").unwrap()
        }
        WireFormat::OpenAiResponses => ctxlog_tests::responses::options(),
        WireFormat::Gemini => RequestOptions::new().field("generationConfig", r#"{"maxOutputTokens":512}"#).unwrap(),
    };
    if breakpoints {
        opts.cache_breakpoints(CacheTtl::FiveMinutes)
    } else {
        opts
    }
}

/// One call's request and what the engine planned.
struct Sent {
    call: u64,
    request: Request,
    view: Vec<Vec<u8>>,
    digest: String,
}

/// Feeds `lines` through a session as `ctxlog import` does (a call before every assistant
/// line, summaries between calls) and builds each call's request.
fn run(lines: &[Message], format: WireFormat, config: Config, breakpoints: bool) -> (MemoryStore, StreamId, Vec<Sent>) {
    let store = MemoryStore::new();
    let id = StreamId::random();
    let mut session = Session::create(&store, id, format, config, Timestamp::from_millis(1_767_225_600_000)).unwrap();
    let mut sent = Vec::new();
    let mut pending = Vec::new();
    let mut clock = 1_767_225_600_000;
    for m in lines {
        if m.role == Role::Assistant {
            session.append(std::mem::take(&mut pending)).unwrap();
            clock += 45_000;
            let plan = session.plan(Timestamp::from_millis(clock)).unwrap();
            let request = session.request(&plan, &options(format, breakpoints)).unwrap();
            let view = session.plan_view(&plan).iter().map(|b| b.to_vec()).collect();
            sent.push(Sent { call: plan.call(), request, view, digest: plan.digest.clone() });
            session.commit(plan, Timestamp::from_millis(clock), None).unwrap();
            while let Some(job) = session.summary_job() {
                let text = session.summarize(&job).unwrap();
                if let Prepared::Discarded(_) = session.prepare(&job, text, Produced::extractive()).unwrap() {
                    break;
                }
            }
        }
        pending.push(m.clone());
    }
    (store, id, sent)
}

fn demo() -> Vec<Message> {
    ctxlog_workload::demo_transcript().lines().map(|l| wire::parse_message(l).unwrap()).collect()
}

/// The demo session converted to OpenAI chat: `tool_use` → `tool_calls`, each `tool_result` →
/// a `tool` message, images → `image_url` data URLs.
fn demo_openai() -> Vec<Message> {
    let mut out = Vec::new();
    for line in ctxlog_workload::demo_transcript().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let role = v["role"].as_str().unwrap();
        let blocks = match &v["content"] {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(b) => b.clone(),
            _ => vec![],
        };
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        for b in &blocks {
            match b["type"].as_str().unwrap() {
                "text" => parts.push(json!({"type": "text", "text": b["text"]})),
                "image" => {
                    let url = format!(
                        "data:{};base64,{}",
                        b["source"]["media_type"].as_str().unwrap(),
                        b["source"]["data"].as_str().unwrap()
                    );
                    parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
                }
                "tool_use" => calls.push(json!({"id": b["id"], "type": "function",
                    "function": {"name": b["name"], "arguments": b["input"].to_string()}})),
                "tool_result" => {
                    let text = match &b["content"] {
                        Value::String(s) => s.clone(),
                        Value::Array(inner) => {
                            inner.iter().filter_map(|i| i["text"].as_str()).collect::<Vec<_>>().join("\n")
                        }
                        _ => String::new(),
                    };
                    out.push(json!({"role": "tool", "tool_call_id": b["tool_use_id"], "content": text}));
                }
                _ => {}
            }
        }
        let mut m = json!({"role": role});
        if !parts.is_empty() {
            m["content"] = if parts.len() == 1 && parts[0]["type"] == "text" {
                parts[0]["text"].clone()
            } else {
                Value::Array(parts)
            };
        } else if calls.is_empty() {
            continue;
        } else {
            m["content"] = Value::Null;
        }
        if !calls.is_empty() {
            m["tool_calls"] = Value::Array(calls);
        }
        out.push(m);
    }
    out.iter().map(|m| wire::parse_message(&m.to_string()).unwrap()).collect()
}

/// Every shape rule of the Anthropic Messages API listed at the top; returns the number of
/// places where the API combines consecutive same-role messages.
fn check_anthropic(body: &Value) -> Result<usize, String> {
    let obj = body.as_object().ok_or("not an object")?;
    match obj.get("system") {
        None => {}
        Some(Value::String(s)) if !s.is_empty() => {}
        Some(Value::Array(blocks)) => {
            for b in blocks {
                if b["type"] != "text" || b["text"].as_str().is_none_or(str::is_empty) {
                    return Err(format!("system block {b} is not a non-empty text block"));
                }
            }
        }
        Some(other) => return Err(format!("system is {other}")),
    }
    let messages = obj["messages"].as_array().ok_or("messages is not an array")?;
    // Combine consecutive same-role messages into turns, as the API does.
    let mut turns: Vec<(String, Vec<Value>)> = Vec::new();
    let mut combined = 0;
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().ok_or(format!("messages[{i}] has no role"))?;
        if role != "user" && role != "assistant" {
            return Err(format!("messages[{i}] has role {role}"));
        }
        let blocks = match &m["content"] {
            Value::String(s) if !s.is_empty() => vec![json!({"type": "text", "text": s})],
            Value::Array(b) if !b.is_empty() => b.clone(),
            other => return Err(format!("messages[{i}] has empty content {other}")),
        };
        for b in &blocks {
            if b["type"] == "text" && b["text"].as_str().is_none_or(str::is_empty) {
                return Err(format!("messages[{i}] has an empty text block"));
            }
            if b["type"] == "image" && b["source"]["type"] != "base64" {
                return Err(format!("messages[{i}] has an image that is not base64: {}", b["source"]["type"]));
            }
        }
        match turns.last_mut() {
            Some((r, b)) if r == role => {
                combined += 1;
                b.extend(blocks);
            }
            _ => turns.push((role.to_owned(), blocks)),
        }
    }
    if turns.first().is_some_and(|(r, _)| r != "user") {
        return Err("the first turn is not the user's".into());
    }
    let ids = |blocks: &[Value], kind: &str, key: &str| -> Vec<String> {
        blocks.iter().filter(|b| b["type"] == kind).map(|b| b[key].as_str().unwrap().to_owned()).collect()
    };
    for (t, (role, blocks)) in turns.iter().enumerate() {
        let results = ids(blocks, "tool_result", "tool_use_id");
        if role == "user" && !results.is_empty() {
            let leading = blocks.iter().take_while(|b| b["type"] == "tool_result").count();
            if leading != results.len() {
                return Err(format!("turn {t}: tool_result blocks are not at the beginning"));
            }
            let prev = t.checked_sub(1).map(|p| ids(&turns[p].1, "tool_use", "id")).unwrap_or_default();
            if let Some(r) = results.iter().find(|r| !prev.contains(r)) {
                return Err(format!("turn {t}: tool_result {r} answers no tool_use of the previous turn"));
            }
        }
        let calls = ids(blocks, "tool_use", "id");
        if role == "assistant" && !calls.is_empty() {
            let next = turns.get(t + 1).map(|(_, b)| ids(b, "tool_result", "tool_use_id")).unwrap_or_default();
            if let Some(c) = calls.iter().find(|c| !next.contains(c)) {
                return Err(format!("turn {t}: tool_use {c} has no tool_result in the next turn"));
            }
        }
    }
    let marks = body.to_string().matches("\"cache_control\"").count();
    if marks > 4 {
        return Err(format!("{marks} cache_control breakpoints (at most 4)"));
    }
    Ok(combined)
}

/// Every shape rule of OpenAI chat completions listed at the top.
fn check_openai(body: &Value) -> Result<(), String> {
    let messages = body["messages"].as_array().ok_or("messages is not an array")?;
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().ok_or(format!("messages[{i}] has no role"))?;
        if !["system", "developer", "user", "assistant", "tool"].contains(&role) {
            return Err(format!("messages[{i}] has role {role}"));
        }
        if role == "tool" {
            let id = m["tool_call_id"].as_str().ok_or(format!("messages[{i}] has no tool_call_id"))?;
            if !open.iter().any(|c| c == id) {
                return Err(format!("messages[{i}] answers {id}, not a call of the assistant message before it"));
            }
            open.retain(|c| c != id);
            continue;
        }
        if let Some(c) = open.first() {
            return Err(format!("messages[{i}] ({role}) comes before call {c} was answered"));
        }
        if let Some(calls) = m["tool_calls"].as_array() {
            open = calls.iter().map(|c| c["id"].as_str().unwrap().to_owned()).collect();
        }
        if role != "assistant" && m["content"].is_null() {
            return Err(format!("messages[{i}] ({role}) has no content"));
        }
        for part in m["content"].as_array().into_iter().flatten() {
            if part["type"] == "image_url" && !part["image_url"]["url"].as_str().unwrap().starts_with("data:") {
                return Err(format!("messages[{i}] has an image that is not a data URL"));
            }
        }
    }
    match open.first() {
        Some(c) => Err(format!("call {c} is never answered")),
        None => Ok(()),
    }
}

/// The messages part is the digested view: each element equals the view item's bytes, except
/// that media are inlined (storing them back as blob references gives the view bytes again)
/// and the breakpoint adds `cache_control` to one block.
fn check_bytes(sent: &Sent, format: WireFormat) -> Result<(), String> {
    let raw: Vec<&RawValue> = serde_json::from_slice(sent.request.messages_json()).map_err(|e| e.to_string())?;
    let view: Vec<&Vec<u8>> = sent
        .view
        .iter()
        .filter(|b| !(format == WireFormat::Anthropic && b.starts_with(br#"{"role":"system""#)))
        .collect();
    if raw.len() != view.len() {
        return Err(format!("{} messages sent for a view of {}", raw.len(), view.len()));
    }
    let mut marked = 0;
    for (i, (r, v)) in raw.iter().zip(&view).enumerate() {
        let v = v.strip_suffix(b"\n").unwrap();
        if r.get().as_bytes() == v {
            continue;
        }
        let mut m = wire::parse_message(r.get()).unwrap();
        marked += usize::from(unmark(&mut m));
        externalize(&mut m);
        let (back, _) = wire::to_json(&m, RenderOpts { meta: false, media: Media::Refs });
        if back.as_bytes() != v {
            return Err(format!(
                "message {i} differs from the view:\n sent {}\n view {}",
                r.get(),
                String::from_utf8_lossy(v)
            ));
        }
    }
    if marked > 1 {
        return Err(format!("{marked} messages carry a breakpoint"));
    }
    Ok(())
}

fn unmark(m: &mut Message) -> bool {
    let mut found = false;
    if let Some(Content::Blocks(blocks)) = &mut m.content {
        for b in blocks {
            let extra = match b {
                Block::Text { extra, .. }
                | Block::Media { extra, .. }
                | Block::ToolUse { extra, .. }
                | Block::ToolResult { extra, .. } => extra,
                _ => continue,
            };
            let before = extra.len();
            extra.retain(|(k, _)| k != "cache_control");
            found |= before != extra.len();
        }
    }
    found
}

fn externalize(m: &mut Message) {
    fn data(d: &mut MediaData) {
        let MediaData::Inline(b64) = d else { return };
        let bytes = wire::decode_base64(b64).unwrap();
        let dims = ctxlog::internal::media::dimensions(&bytes);
        *d = MediaData::Blob(ctxlog::message::BlobRef {
            id: ctxlog::BlobId::of(&bytes),
            bytes: bytes.len() as u64,
            width: dims.map(|d| d.0),
            height: dims.map(|d| d.1),
        });
    }
    fn block(b: &mut Block) {
        match b {
            Block::Media { source: MediaSource::Base64 { data: d, .. }, .. } => data(d),
            Block::ImageUrl { url: ctxlog::message::ImageUrl::Data { data: d, .. }, .. } => data(d),
            Block::ToolResult { content: Some(Content::Blocks(inner)), .. } => inner.iter_mut().for_each(block),
            _ => {}
        }
    }
    if let Some(Content::Blocks(blocks)) = &mut m.content {
        blocks.iter_mut().for_each(block);
    }
}

fn compacting(budget: u64, cache_aware: bool) -> Config {
    Config { budget, cache_aware, summary_share: 0.15, ..Config::default() }
}

/// What a run went through, so a test can tell it exercised compaction.
fn events(store: &MemoryStore, id: StreamId) -> BTreeSet<&'static str> {
    let mut names = BTreeSet::new();
    replay::for_each_event(store, id, 1, None, |_, ev| {
        names.insert(match &ev {
            Event::Edited(e) => e.kind.as_str(),
            other => other.name(),
        });
        Ok(())
    })
    .unwrap();
    names
}

#[test]
fn anthropic_bodies_of_a_compacted_multimodal_session_have_the_shape_the_messages_api_expects() {
    for (budget, cache_aware, breakpoints) in [(30_000, false, true), (40_000, true, true), (30_000, true, false)] {
        // Given the demo agent session (screenshots, heavy tool output) under a budget that
        // makes it flush, edit and summarize,
        let (store, id, sent) = run(&demo(), WireFormat::Anthropic, compacting(budget, cache_aware), breakpoints);
        let seen = events(&store, id);
        for kind in ["Flushed", "removed", "truncated", "SummaryPrepared"] {
            assert!(seen.contains(kind), "budget {budget}: the run never saw {kind}: {seen:?}");
        }
        let mut combined = 0;
        for s in &sent {
            // then every request has the Messages API's shape,
            let body = s.request.to_value().unwrap();
            combined += check_anthropic(&body).unwrap_or_else(|e| panic!("call {}: {e}", s.call));
            // the system prompt is out of the messages, the tools are passed through verbatim,
            assert!(body["system"].is_string() || body["system"].is_array(), "call {}", s.call);
            let text = std::str::from_utf8(s.request.body()).unwrap();
            assert!(text.contains(&format!(r#""tools":{TOOLS}"#)));
            assert!(s.request.missing_blobs().is_empty());
            // the messages are the digested view byte for byte (less the marker and the inlining),
            check_bytes(s, WireFormat::Anthropic).unwrap_or_else(|e| panic!("call {}: {e}", s.call));
            assert_eq!(s.request.view_digest(), s.digest);
            // and the breakpoints sit on the system prompt and the last message's blocks.
            if breakpoints {
                let messages = body["messages"].as_array().unwrap();
                let with_blocks = messages.iter().rposition(|m| m["content"].is_array());
                assert_eq!(s.request.breakpoints(), 1 + usize::from(with_blocks.is_some()), "call {}", s.call);
                if let Some(i) = with_blocks {
                    assert!(messages[i].to_string().contains("cache_control"), "call {}", s.call);
                    assert!(messages[i + 1..].iter().all(|m| m["content"].is_string()));
                }
                assert!(body["system"].as_array().unwrap().last().unwrap()["cache_control"]["type"] == "ephemeral");
            } else {
                assert_eq!(s.request.breakpoints(), 0);
                assert!(!text.contains("cache_control"));
            }
        }
        // Summaries sit next to the user's first message: the API combines those turns.
        assert!(combined > 0);
        // Every request is rebuilt byte for byte from the log.
        for s in sent.iter().step_by(7) {
            let rebuilt =
                replay::served_request(&store, id, s.call, &options(WireFormat::Anthropic, breakpoints)).unwrap();
            assert_eq!(rebuilt.body(), s.request.body(), "call {}", s.call);
        }
    }
}

#[test]
fn openai_bodies_of_a_compacted_multimodal_session_have_the_shape_chat_completions_expects() {
    let lines = demo_openai();
    assert!(lines.iter().any(|m| m.role == Role::Tool) && lines.iter().any(|m| m.tool_calls.is_some()));
    for cache_aware in [false, true] {
        let (store, id, sent) = run(&lines, WireFormat::OpenAi, compacting(30_000, cache_aware), true);
        let seen = events(&store, id);
        for kind in ["Flushed", "removed", "SummaryPrepared"] {
            assert!(seen.contains(kind), "the run never saw {kind}: {seen:?}");
        }
        for s in &sent {
            let body = s.request.to_value().unwrap();
            check_openai(&body).unwrap_or_else(|e| panic!("call {}: {e}", s.call));
            assert_eq!(body["messages"][0]["role"], "system", "system stays a message");
            assert!(
                body.get("system").is_none()
                    && !std::str::from_utf8(s.request.body()).unwrap().contains("cache_control")
            );
            assert_eq!(body["stream"], true);
            check_bytes(s, WireFormat::OpenAi).unwrap_or_else(|e| panic!("call {}: {e}", s.call));
        }
        let last = sent.last().unwrap();
        let rebuilt = replay::served_request(&store, id, last.call, &options(WireFormat::OpenAi, true)).unwrap();
        assert_eq!(rebuilt.body(), last.request.body());
    }
}

#[test]
fn the_validators_catch_what_the_apis_reject() {
    // The checks above can fail: each rule, broken once.
    let ok = json!({"system": "s", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r"}, {"type": "text", "text": "go"}]}
    ]});
    assert_eq!(check_anthropic(&ok), Ok(0));
    let broken = [
        json!({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]}),
        json!({"messages": [{"role": "assistant", "content": "hi"}]}),
        json!({"messages": [{"role": "user", "content": ""}]}),
        json!({"messages": [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}}]},
            {"role": "user", "content": "no result"}]}),
        json!({"messages": [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}}]},
            {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "tool_result", "tool_use_id": "a"}]}]}),
        json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "z"}]}]}),
        json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "blob", "blob": "sha256:00"}}]}]}),
    ];
    for b in &broken {
        assert!(check_anthropic(b).is_err(), "accepted {b}");
    }
    let ok = json!({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "x", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "r"}]});
    assert_eq!(check_openai(&ok), Ok(()));
    let broken = [
        json!({"messages": [{"role": "tool", "tool_call_id": "c", "content": "r"}]}),
        json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "x", "arguments": "{}"}}]},
            {"role": "user", "content": "before the result"}, {"role": "tool", "tool_call_id": "c", "content": "r"}]}),
        json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ctxlog-blob:sha256:00"}}]}]}),
    ];
    for b in &broken {
        assert!(check_openai(b).is_err(), "accepted {b}");
    }
}

#[test]
fn request_options_pass_fields_through_and_refuse_what_is_ctxlogs() {
    let client = br#"{"model":"claude-x","max_tokens":1024,"system":"old","messages":[],"metadata":{"user_id":"u1"},"temperature":0.70,"stream":true}"#;
    let opts = RequestOptions::from_client_body(client).unwrap();
    let fields: Vec<_> = opts.fields().collect();
    assert_eq!(
        fields,
        [
            ("model", r#""claude-x""#),
            ("max_tokens", "1024"),
            ("metadata", r#"{"user_id":"u1"}"#),
            ("temperature", "0.70"),
            ("stream", "true")
        ]
    );
    assert!(RequestOptions::new().field("messages", "[]").is_err());
    assert!(RequestOptions::new().field("system", "\"s\"").is_err());
    assert!(RequestOptions::new().field("x", "{not json").is_err());
    assert!(RequestOptions::new().tools("{}").is_err());
    assert!(RequestOptions::from_client_body(b"[1]").is_err());
    // A field set twice keeps its first place and its last value.
    let opts = RequestOptions::new().model("a").max_tokens(5).model("b");
    assert_eq!(opts.fields().collect::<Vec<_>>(), [("model", r#""b""#), ("max_tokens", "5")]);
    // In a request they come first, in that order, then system and messages.
    let store = MemoryStore::new();
    let mut s = Session::create(
        &store,
        StreamId::random(),
        WireFormat::Anthropic,
        Config::default(),
        Timestamp::from_millis(0),
    )
    .unwrap();
    s.append(vec![
        wire::parse_message(r#"{"role":"system","content":"Be brief."}"#).unwrap(),
        wire::parse_message(r#"{"role":"user","content":"hi"}"#).unwrap(),
    ])
    .unwrap();
    let plan = s.plan(Timestamp::from_millis(1)).unwrap();
    let r = s.request(&plan, &opts).unwrap();
    assert_eq!(
        std::str::from_utf8(r.body()).unwrap(),
        r#"{"model":"b","max_tokens":5,"system":"Be brief.","messages":[{"role":"user","content":"hi"}]}"#
    );
    assert_eq!(r.system_json(), Some(&br#""Be brief.""#[..]));
    assert_eq!(r.messages_json(), br#"[{"role":"user","content":"hi"}]"#);
    // With breakpoints the string system prompt becomes one marked text block; a string message
    // cannot carry one, so the marker goes to the last message that has a block.
    let r = s.request(&plan, &RequestOptions::new().cache_breakpoints(CacheTtl::OneHour)).unwrap();
    assert_eq!(
        std::str::from_utf8(r.body()).unwrap(),
        r#"{"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[{"role":"user","content":"hi"}]}"#
    );
    assert_eq!(r.breakpoints(), 1);
}
