//! The prompt caches, as the providers document them.
//!
//! **Anthropic** caches only what a request marks: a `cache_control` breakpoint (on a tool, a
//! system block or a message content block) caches the prefix `tools → system → messages` up
//! to and including that block, when that prefix is at least the model's minimum cacheable
//! length (1,024 tokens; 2,048 for Sonnet 4.6 and the Haiku 3 models; 4,096 for Haiku 4.5 and
//! Opus 4.5/4.6), for its `ttl` (`5m` default, or `1h`),
//! refreshed on every hit. A later request reads the longest cached prefix that ends at one of
//! its breakpoints or at one of the 20 blocks before a breakpoint; what lies between that and
//! its last cacheable breakpoint is written (`cache_creation_input_tokens`); the rest is
//! `input_tokens`. No breakpoint: nothing is read or written.
//!
//! **OpenAI** caches automatically: a prompt of at least 1,024 tokens shares, with the recent
//! prompts of the same key (kept 10 minutes after their last use), a common prefix; the cached
//! tokens are that prefix rounded down to a multiple of 128, reported only from 1,024 on.
//!
//! Tokens: a prefix is `ceil(bytes / 4)` of its canonical JSON (`cache_control` left out), the
//! prompt `ceil(body bytes / 4)`; both are the fake's count, not a tokenizer's.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How far before a breakpoint Anthropic looks for an earlier cached prefix.
const LOOKBACK_BLOCKS: usize = 20;
/// OpenAI's minimum cached prompt and its step.
const OPENAI_MIN: u64 = 1024;
const OPENAI_STEP: u64 = 128;
const OPENAI_TTL: Duration = Duration::from_secs(600);
const OPENAI_KEEP: usize = 16;

/// Token counts of one exchange's prompt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cached {
    /// Read from the cache.
    pub read: u64,
    /// Written to the cache (Anthropic only).
    pub written: u64,
}

/// Both caches, keyed by API key (and model for Anthropic).
#[derive(Default)]
pub struct Caches {
    anthropic: HashMap<[u8; 32], (u64, Instant)>,
    openai: HashMap<Vec<u8>, Vec<(Vec<u8>, Instant)>>,
    gemini: HashMap<Vec<u8>, Vec<(Vec<u8>, Instant)>>,
}

struct Block {
    /// Hash of the prefix up to and including this block.
    hash: [u8; 32],
    /// Tokens of that prefix.
    tokens: u64,
    /// `Some(ttl)` when this block is a breakpoint.
    breakpoint: Option<Duration>,
}

fn strip_cache_control(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| k.as_str() != "cache_control")
                .map(|(k, x)| (k.clone(), strip_cache_control(x)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_cache_control).collect()),
        x => x.clone(),
    }
}

fn ttl_of(b: &Value) -> Option<Duration> {
    let c = b.get("cache_control")?;
    Some(if c.get("ttl").and_then(Value::as_str) == Some("1h") {
        Duration::from_secs(3600)
    } else {
        Duration::from_secs(300)
    })
}

/// The blocks of an Anthropic request in cache order: tools, system, messages.
fn anthropic_blocks(key: &[u8], body: &Value) -> Vec<Block> {
    let mut h = Sha256::new();
    h.update(key);
    h.update(b"\0");
    h.update(body.get("model").and_then(Value::as_str).unwrap_or("").as_bytes());
    let mut bytes = 0u64;
    let mut out = Vec::new();
    let mut push = |h: &mut Sha256, part: &Value, tag: &str, bp: Option<Duration>| {
        let text = strip_cache_control(part).to_string();
        h.update(tag.as_bytes());
        h.update(text.as_bytes());
        bytes += text.len() as u64;
        out.push(Block { hash: h.clone().finalize().into(), tokens: bytes.div_ceil(4), breakpoint: bp });
    };
    if let Some(Value::Array(tools)) = body.get("tools") {
        for t in tools {
            push(&mut h, t, "\0tool\0", ttl_of(t));
        }
    }
    match body.get("system") {
        Some(Value::Array(sys)) => {
            for b in sys {
                push(&mut h, b, "\0system\0", ttl_of(b));
            }
        }
        // A string is the documented shorthand of one text block: the same prompt, cached alike.
        Some(Value::String(s)) => push(&mut h, &serde_json::json!({"type": "text", "text": s}), "\0system\0", None),
        _ => {}
    }
    if let Some(Value::Array(messages)) = body.get("messages") {
        for m in messages {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("");
            match m.get("content") {
                Some(Value::Array(blocks)) => {
                    for (j, b) in blocks.iter().enumerate() {
                        let tag = if j == 0 { format!("\0{role}\0") } else { "\0+\0".to_owned() };
                        push(&mut h, b, &tag, ttl_of(b));
                    }
                }
                Some(Value::String(s)) => {
                    push(&mut h, &serde_json::json!({"type": "text", "text": s}), &format!("\0{role}\0"), None)
                }
                Some(c) => push(&mut h, c, &format!("\0{role}\0"), None),
                None => {}
            }
        }
    }
    out
}

/// The model's minimum cacheable prompt length, as Anthropic's prompt-caching page lists it.
fn anthropic_min(model: &str) -> u64 {
    let newer = |family: &str, versions: &[&str]| versions.iter().any(|v| model.contains(&format!("{family}-{v}")));
    if newer("haiku", &["4"]) || newer("opus", &["4-5", "4-6"]) {
        4096
    } else if model.contains("haiku") || newer("sonnet", &["4-6"]) {
        2048
    } else {
        1024
    }
}

impl Caches {
    /// Anthropic: what this request reads and writes; remembers what it writes.
    pub fn anthropic(&mut self, key: &[u8], body: &Value, prompt: u64, now: Instant) -> Cached {
        let blocks = anthropic_blocks(key, body);
        self.anthropic.retain(|_, (_, exp)| *exp > now);
        let mut read = 0u64;
        let mut hit: Option<[u8; 32]> = None;
        for (i, b) in blocks.iter().enumerate() {
            if b.breakpoint.is_none() {
                continue;
            }
            for k in (i.saturating_sub(LOOKBACK_BLOCKS)..=i).rev() {
                let Some(c) = blocks.get(k) else { continue };
                if let Some((tokens, _)) = self.anthropic.get(&c.hash) {
                    if *tokens > read {
                        read = *tokens;
                        hit = Some(c.hash);
                    }
                    break;
                }
            }
        }
        let min = anthropic_min(body.get("model").and_then(Value::as_str).unwrap_or(""));
        let mut top = read;
        for b in blocks.iter().filter(|b| b.tokens >= min) {
            let Some(ttl) = b.breakpoint else { continue };
            let e = self.anthropic.entry(b.hash).or_insert((b.tokens, now + ttl));
            e.1 = e.1.max(now + ttl);
            top = top.max(b.tokens);
        }
        if let Some(h) = hit {
            // A hit refreshes the entry for its own ttl (the longest it was written with is kept).
            if let Some(e) = self.anthropic.get_mut(&h) {
                e.1 = e.1.max(now + Duration::from_secs(300));
            }
        }
        let read = read.min(prompt);
        Cached { read, written: top.min(prompt) - read }
    }

    /// Gemini's implicit cache: the tokens of the longest prefix this prompt shares with a
    /// recent one of the same key, when both the prompt and that prefix reach `min`; remembers
    /// the prompt (Google keeps no finer granularity than tokens).
    pub fn gemini(&mut self, key: &[u8], body: &[u8], min: u64, now: Instant) -> u64 {
        let prompt = (body.len() as u64).div_ceil(4);
        let recent = self.gemini.entry(key.to_vec()).or_default();
        recent.retain(|(_, exp)| *exp > now);
        let best = recent.iter().map(|(p, _)| p.iter().zip(body).take_while(|(a, b)| a == b).count()).max();
        let lcp_tokens = (best.unwrap_or(0) as u64 / 4).min(prompt);
        let cached = if prompt >= min && lcp_tokens >= min { lcp_tokens } else { 0 };
        if prompt >= min {
            recent.push((body.to_vec(), now + OPENAI_TTL));
            if recent.len() > OPENAI_KEEP {
                recent.remove(0);
            }
        }
        cached
    }

    /// OpenAI: the cached tokens of this prompt; remembers it.
    pub fn openai(&mut self, key: &[u8], body: &[u8], now: Instant) -> u64 {
        let prompt = (body.len() as u64).div_ceil(4);
        let recent = self.openai.entry(key.to_vec()).or_default();
        recent.retain(|(_, exp)| *exp > now);
        let mut best = 0usize;
        let mut best_i = None;
        for (i, (p, _)) in recent.iter().enumerate() {
            let lcp = p.iter().zip(body).take_while(|(a, b)| a == b).count();
            if lcp > best {
                best = lcp;
                best_i = Some(i);
            }
        }
        let lcp_tokens = (best as u64 / 4).min(prompt);
        let cached =
            if prompt >= OPENAI_MIN && lcp_tokens >= OPENAI_MIN { lcp_tokens / OPENAI_STEP * OPENAI_STEP } else { 0 };
        if let Some(i) = best_i.filter(|_| cached > 0) {
            if let Some(e) = recent.get_mut(i) {
                e.1 = now + OPENAI_TTL;
            }
        }
        if prompt >= OPENAI_MIN {
            recent.push((body.to_vec(), now + OPENAI_TTL));
            if recent.len() > OPENAI_KEEP {
                recent.remove(0);
            }
        }
        cached
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn big(n: usize) -> String {
        "x".repeat(n)
    }

    #[test]
    fn anthropic_caches_only_marked_prefixes_of_the_minimum_length() {
        let mut c = Caches::default();
        let t0 = Instant::now();
        // No breakpoint: nothing, however long.
        let b = json!({"model":"claude-x","system":big(8000),"messages":[{"role":"user","content":"hi"}]});
        assert_eq!(c.anthropic(b"k", &b, 3000, t0), Cached { read: 0, written: 0 });
        assert_eq!(c.anthropic(b"k", &b, 3000, t0), Cached { read: 0, written: 0 });
        // A short marked system: under 1,024 tokens, not cached.
        let short = json!({"model":"claude-x","system":[{"type":"text","text":big(400),"cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]});
        assert_eq!(c.anthropic(b"k", &short, 200, t0), Cached { read: 0, written: 0 });
        // A long one: written, then read; the user turn after it is neither.
        let sys = json!([{"type":"text","text":big(6000),"cache_control":{"type":"ephemeral"}}]);
        let b1 = json!({"model":"claude-x","system":sys,"messages":[{"role":"user","content":"one"}]});
        let first = c.anthropic(b"k", &b1, 2000, t0);
        assert_eq!(first.read, 0);
        assert!(first.written >= 1500, "{first:?}");
        let b2 = json!({"model":"claude-x","system":sys,"messages":[{"role":"user","content":"two"}]});
        assert_eq!(c.anthropic(b"k", &b2, 2000, t0), Cached { read: first.written, written: 0 });
        // Another key reads nothing; a haiku model needs 2,048 tokens.
        assert_eq!(c.anthropic(b"other", &b2, 2000, t0).read, 0);
        let h = json!({"model":"claude-haiku-x","system":sys,"messages":[{"role":"user","content":"two"}]});
        assert_eq!(c.anthropic(b"k", &h, 2000, t0), Cached { read: 0, written: 0 });
        // Expired after 5 minutes without a hit; 1h lives on.
        assert_eq!(c.anthropic(b"k", &b2, 2000, t0 + Duration::from_secs(301)).read, 0);
        let sys1h = json!([{"type":"text","text":"y".repeat(6000),"cache_control":{"type":"ephemeral","ttl":"1h"}}]);
        let l = json!({"model":"claude-x","system":sys1h,"messages":[{"role":"user","content":"x"}]});
        let t1 = t0 + Duration::from_secs(400);
        assert!(c.anthropic(b"k", &l, 2000, t1).written > 0);
        assert!(c.anthropic(b"k", &l, 2000, t1 + Duration::from_secs(3000)).read > 0);
        assert_eq!(c.anthropic(b"k", &l, 2000, t1 + Duration::from_secs(3000 + 3601)).read, 0);
    }

    #[test]
    fn minimum_lengths_follow_the_model() {
        for (model, min) in [
            ("claude-sonnet-4-5-20250929", 1024),
            ("claude-opus-4-1", 1024),
            ("claude-3-7-sonnet-latest", 1024),
            ("claude-sonnet-4-6", 2048),
            ("claude-3-5-haiku-latest", 2048),
            ("claude-haiku-4-5", 4096),
            ("claude-opus-4-5-20251101", 4096),
            ("claude-opus-4-6", 4096),
        ] {
            assert_eq!(anthropic_min(model), min, "{model}");
        }
    }

    #[test]
    fn anthropic_a_moving_breakpoint_reads_the_previous_one_within_twenty_blocks() {
        let mut c = Caches::default();
        let t = Instant::now();
        let turn = |n: usize, marked: usize| {
            let msgs: Vec<Value> = (0..n)
                .map(|i| {
                    let mut b = json!({"type":"text","text":format!("{i} {}", big(2000))});
                    if i == marked {
                        b["cache_control"] = json!({"type":"ephemeral"});
                    }
                    json!({"role": if i % 2 == 0 {"user"} else {"assistant"}, "content":[b]})
                })
                .collect();
            json!({"model":"claude-x","messages":msgs})
        };
        let a = c.anthropic(b"k", &turn(3, 2), 10_000, t);
        assert!(a.read == 0 && a.written > 1000);
        let b = c.anthropic(b"k", &turn(5, 4), 10_000, t);
        assert_eq!(b.read, a.written, "the prefix up to message 2 is found from the breakpoint on 4");
        assert!(b.written > 900);
        // More than 20 blocks later, the old prefix is not looked up.
        let far = c.anthropic(b"k", &turn(30, 29), 100_000, t);
        assert_eq!(far.read, 0, "{far:?}");
    }

    #[test]
    fn openai_caches_from_1024_tokens_in_128_token_steps() {
        let mut c = Caches::default();
        let t = Instant::now();
        let short = big(3000).into_bytes();
        assert_eq!(c.openai(b"k", &short, t), 0);
        assert_eq!(c.openai(b"k", &short, t), 0, "under 1,024 tokens: never cached");
        let mut long = big(5000).into_bytes();
        assert_eq!(c.openai(b"k", &long, t), 0);
        long.extend_from_slice(b"more");
        assert_eq!(c.openai(b"k", &long, t), 1152, "5000 bytes = 1250 tokens shared -> 1152");
        assert_eq!(c.openai(b"other", &long, t), 0);
        assert_eq!(c.openai(b"k", &long, t + Duration::from_secs(601)), 0, "expired");
    }

    #[test]
    fn gemini_caches_whole_tokens_from_the_models_minimum() {
        let mut c = Caches::default();
        let t = Instant::now();
        let flash = crate::gemini::cache_min("gemini-2.5-flash");
        let pro = crate::gemini::cache_min("gemini-2.5-pro");
        assert_eq!((flash, pro), (1_024, 4_096));
        let short = big(4_000).into_bytes();
        assert_eq!(c.gemini(b"k", &short, flash, t), 0);
        assert_eq!(c.gemini(b"k", &short, flash, t), 0, "under 1,024 tokens: never cached");
        let mut long = big(5_000).into_bytes();
        assert_eq!(c.gemini(b"k", &long, flash, t), 0, "nothing to share yet");
        long.extend_from_slice(b"more");
        assert_eq!(c.gemini(b"k", &long, flash, t), 1_250, "the whole shared prefix, no step");
        assert_eq!(c.gemini(b"k", &long, pro, t), 0, "a Pro model's minimum is 4,096");
        assert_eq!(c.gemini(b"other", &long, flash, t), 0, "per key");
    }
}
