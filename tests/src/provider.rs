//! A fake model provider for the service tests: it counts a request body's tokens the way a
//! real tokenizer does *more* than ctxlog's estimate (JSON structure counts, text at about
//! three characters per token instead of four), simulates the prompt cache (the prefix of
//! messages shared with the previous request, read if it came within the TTL, written up to
//! the last `cache_control` breakpoint), and answers with the `usage` object of the Anthropic
//! Messages API or of OpenAI chat completions.

use serde_json::{json, Map, Value};

/// What the provider counted for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    /// Every prompt token (what the budget is about).
    pub prompt: u64,
    /// Of those, read from the cache.
    pub cache_read: u64,
    /// Of those, written to the cache.
    pub cache_write: u64,
}

/// The provider's wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Anthropic Messages: `system` apart, cache written up to the breakpoints.
    Anthropic,
    /// OpenAI chat completions: cache read without markers, `prompt_tokens` includes it.
    OpenAiChat,
}

/// The fake provider.
#[derive(Debug)]
pub struct FakeProvider {
    api: Api,
    ttl_ms: u64,
    /// When the previous request came, its parts' cache keys, and how far it marked.
    previous: Option<(u64, Vec<String>, usize)>,
    /// Every request counted, in order.
    pub counted: Vec<Counted>,
}

impl FakeProvider {
    /// A provider speaking `api`, whose cache lives five minutes.
    pub fn new(api: Api) -> Self {
        FakeProvider { api, ttl_ms: 300_000, previous: None, counted: Vec::new() }
    }

    /// Receives `body` at `at` (ms) and answers with its `usage` object.
    pub fn send(&mut self, body: &[u8], at: u64) -> Value {
        let v: Value = serde_json::from_slice(body).expect("the request body is JSON");
        let mut parts: Vec<Value> = Vec::new();
        if let Some(system) = v.get("system") {
            parts.push(json!({"system": system}));
        }
        if let Some(tools) = v.get("tools") {
            parts.insert(0, json!({"tools": tools}));
        }
        parts.extend(v["messages"].as_array().expect("messages").iter().cloned());
        let tokens: Vec<u64> = parts.iter().map(count).collect();
        // The cache key ignores the markers, as the provider's does.
        let keys: Vec<String> = parts.iter().map(|p| strip_markers(p.clone()).to_string()).collect();
        let shared = match &self.previous {
            Some((when, prev, _)) if at.saturating_sub(*when) < self.ttl_ms => {
                keys.iter().zip(prev).take_while(|(a, b)| a == b).count()
            }
            _ => 0,
        };
        let last_mark = parts.iter().rposition(has_marker).map(|i| i + 1);
        let cached_prefix = match (self.api, &self.previous) {
            // Anthropic reads only what an earlier request marked; OpenAI caches any prefix.
            (Api::Anthropic, Some((_, _, marked))) => shared.min(*marked),
            (Api::Anthropic, None) => 0,
            (Api::OpenAiChat, _) => shared,
        };
        let sum = |r: std::ops::Range<usize>| tokens.get(r).map_or(0, |t| t.iter().sum::<u64>());
        let prompt = sum(0..tokens.len());
        let cache_read = sum(0..cached_prefix);
        let cache_write = match (self.api, last_mark) {
            (Api::Anthropic, Some(end)) if end > cached_prefix => sum(cached_prefix..end),
            _ => 0,
        };
        let input = prompt - cache_read - cache_write;
        self.previous = Some((at, keys, last_mark.unwrap_or(0)));
        self.counted.push(Counted { prompt, cache_read, cache_write });
        match self.api {
            Api::Anthropic => json!({
                "input_tokens": input,
                "cache_creation_input_tokens": cache_write,
                "cache_read_input_tokens": cache_read,
                "output_tokens": 180,
            }),
            Api::OpenAiChat => json!({
                "prompt_tokens": prompt,
                "completion_tokens": 180,
                "total_tokens": prompt + 180,
                "prompt_tokens_details": {"cached_tokens": cache_read},
            }),
        }
    }
}

/// The provider's count of one part: text at three characters per token, one per key and
/// value, images at the 1,600-token flat rate (their base64 is not text).
fn count(v: &Value) -> u64 {
    match v {
        Value::String(s) => (s.chars().count() as u64).div_ceil(3),
        Value::Array(items) => 1 + items.iter().map(count).sum::<u64>(),
        Value::Object(map) => {
            let image = map.get("type").and_then(Value::as_str) == Some("image")
                || map.get("type").and_then(Value::as_str) == Some("image_url");
            if image {
                return 1_600;
            }
            2 + map.iter().filter(|(k, _)| *k != "cache_control").map(|(_, v)| 1 + count(v)).sum::<u64>()
        }
        _ => 1,
    }
}

fn has_marker(v: &Value) -> bool {
    match v {
        Value::Object(map) => map.contains_key("cache_control") || map.values().any(has_marker),
        Value::Array(items) => items.iter().any(has_marker),
        _ => false,
    }
}

fn strip_markers(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| k != "cache_control")
                .map(|(k, v)| (k, strip_markers(v)))
                .collect::<Map<_, _>>(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(strip_markers).collect()),
        other => other,
    }
}
