//! What a provider reports it billed for one call, in one shape for every provider.
//!
//! Providers split the prompt differently: Anthropic's `input_tokens` counts only the tokens
//! that were neither read from nor written to the prompt cache, while OpenAI's `prompt_tokens`
//! (chat) and `input_tokens` (Responses) count the whole prompt, cached part included. The
//! meter must anchor on the whole prompt ([`Usage::prompt_total`]); anchoring on Anthropic's
//! `input_tokens` alone once let a session reach 94,454 provider tokens on a 60,000 budget.
//!
//! [`Usage`] is part of the log format (it is recorded in `RequestServed`), so its fields are
//! frozen: a provider field added later needs a new record kind.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Tokens one call was billed for, split the way providers price them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens neither read from nor written to the prompt cache (full price).
    pub input: u64,
    /// Prompt tokens read from the prompt cache.
    pub cache_read: u64,
    /// Prompt tokens written to the prompt cache (Anthropic; OpenAI does not report them).
    pub cache_write: u64,
    /// Output tokens.
    pub output: u64,
}

/// A `usage` object that does not say what was billed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("usage{}: {message}", if field.is_empty() { String::new() } else { format!(" field `{field}`") })]
pub struct UsageError {
    /// Path of the offending field (empty for the object as a whole).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn fail(field: &str, message: impl Into<String>) -> UsageError {
    UsageError { field: field.to_owned(), message: message.into() }
}

/// The wire shapes of a `usage` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageFormat {
    /// Anthropic Messages: `input_tokens` (uncached), `cache_creation_input_tokens`,
    /// `cache_read_input_tokens`, `output_tokens`.
    Anthropic,
    /// OpenAI chat completions: `prompt_tokens` (cached included),
    /// `prompt_tokens_details.cached_tokens`, `completion_tokens`.
    OpenAiChat,
    /// OpenAI Responses: `input_tokens` (cached included), `input_tokens_details.cached_tokens`,
    /// `output_tokens`.
    OpenAiResponses,
    /// Google Gemini `usageMetadata`: `promptTokenCount` (cached included),
    /// `cachedContentTokenCount`, `candidatesTokenCount` (+ `thoughtsTokenCount`).
    Gemini,
}

impl Usage {
    /// A bare prompt total, when a provider reports nothing finer.
    pub fn prompt(tokens: u64) -> Usage {
        Usage { input: tokens, ..Usage::default() }
    }

    /// Every prompt token the provider counted: uncached, cache reads and cache writes. This
    /// is what the meter anchors on.
    pub fn prompt_total(&self) -> u64 {
        self.input.saturating_add(self.cache_read).saturating_add(self.cache_write)
    }

    /// From an Anthropic `usage` object (a response's, or `message_start`'s in a stream).
    pub fn from_anthropic(usage: &Value) -> Result<Usage, UsageError> {
        let obj = object(usage)?;
        if count(obj, "input_tokens")?.is_none() {
            return Err(fail("input_tokens", "missing"));
        }
        let mut out = Usage::default();
        out.update_from_anthropic(usage)?;
        Ok(out)
    }

    /// Folds in a later Anthropic `usage` object of the same call: the `message_delta` of a
    /// stream carries cumulative counts, and only the fields it carries replace this one's.
    pub fn update_from_anthropic(&mut self, usage: &Value) -> Result<(), UsageError> {
        let obj = object(usage)?;
        if let Some(n) = count(obj, "input_tokens")? {
            self.input = n;
        }
        if let Some(n) = count(obj, "cache_read_input_tokens")? {
            self.cache_read = n;
        }
        match count(obj, "cache_creation_input_tokens")? {
            Some(n) => self.cache_write = n,
            // Only the per-TTL breakdown: its sum is the same number.
            None => {
                if let Some(Value::Object(by_ttl)) = obj.get("cache_creation") {
                    let mut sum = 0u64;
                    for key in by_ttl.keys() {
                        sum = sum.saturating_add(count(by_ttl, key)?.unwrap_or(0));
                    }
                    self.cache_write = sum;
                }
            }
        }
        if let Some(n) = count(obj, "output_tokens")? {
            self.output = n;
        }
        Ok(())
    }

    /// From an OpenAI chat-completions `usage` object (a response's, or the final chunk's of a
    /// stream with `stream_options.include_usage`).
    pub fn from_openai_chat(usage: &Value) -> Result<Usage, UsageError> {
        let obj = object(usage)?;
        let prompt = count(obj, "prompt_tokens")?.ok_or_else(|| fail("prompt_tokens", "missing"))?;
        Self::split_openai(obj, prompt, "prompt_tokens", "completion_tokens")
    }

    /// From an OpenAI Responses `usage` object.
    pub fn from_openai_responses(usage: &Value) -> Result<Usage, UsageError> {
        let obj = object(usage)?;
        let prompt = count(obj, "input_tokens")?.ok_or_else(|| fail("input_tokens", "missing"))?;
        Self::split_openai(obj, prompt, "input_tokens", "output_tokens")
    }

    /// From a Gemini `usageMetadata` object (a response's, or a stream chunk's: each carries
    /// the call's counts so far, the last one the whole call's). Thinking tokens are billed
    /// as output.
    pub fn from_gemini(usage: &Value) -> Result<Usage, UsageError> {
        let obj = object(usage)?;
        let prompt = count(obj, "promptTokenCount")?.ok_or_else(|| fail("promptTokenCount", "missing"))?;
        let cached = count(obj, "cachedContentTokenCount")?.unwrap_or(0);
        if cached > prompt {
            return Err(fail(
                "cachedContentTokenCount",
                format!("{cached} cached tokens is more than the {prompt} of `promptTokenCount`"),
            ));
        }
        let output = count(obj, "candidatesTokenCount")?
            .unwrap_or(0)
            .saturating_add(count(obj, "thoughtsTokenCount")?.unwrap_or(0));
        Ok(Usage { input: prompt - cached, cache_read: cached, cache_write: 0, output })
    }

    fn split_openai(obj: &Map<String, Value>, prompt: u64, total: &str, output: &str) -> Result<Usage, UsageError> {
        let details = format!("{total}_details");
        let cached = match obj.get(&details) {
            Some(Value::Object(d)) => count(d, "cached_tokens").map_err(|e| nested(&details, e))?.unwrap_or(0),
            None | Some(Value::Null) => 0,
            Some(_) => return Err(fail(&details, "expected an object")),
        };
        if cached > prompt {
            return Err(fail(
                &format!("{details}.cached_tokens"),
                format!("{cached} cached tokens is more than the {prompt} of `{total}`"),
            ));
        }
        let output = count(obj, output)?.unwrap_or(0);
        Ok(Usage { input: prompt - cached, cache_read: cached, cache_write: 0, output })
    }

    /// Which shape `usage` has, from the fields it carries; `None` when it carries no prompt
    /// count at all. An object with only `input_tokens` and `output_tokens` reads the same in
    /// both shapes that use those names (with no cache, uncached input is the whole prompt).
    pub fn detect(usage: &Value) -> Option<UsageFormat> {
        let obj = usage.as_object()?;
        if obj.contains_key("prompt_tokens") {
            Some(UsageFormat::OpenAiChat)
        } else if obj.contains_key("input_tokens_details") {
            Some(UsageFormat::OpenAiResponses)
        } else if obj.contains_key("input_tokens") {
            Some(UsageFormat::Anthropic)
        } else if obj.contains_key("promptTokenCount") {
            Some(UsageFormat::Gemini)
        } else {
            None
        }
    }

    /// From a `usage` object of any of the three shapes ([`Usage::detect`]); `Ok(None)` when
    /// it carries no prompt count.
    pub fn from_json(usage: &Value) -> Result<Option<Usage>, UsageError> {
        object(usage)?;
        match Self::detect(usage) {
            Some(UsageFormat::Anthropic) => Self::from_anthropic(usage).map(Some),
            Some(UsageFormat::OpenAiChat) => Self::from_openai_chat(usage).map(Some),
            Some(UsageFormat::OpenAiResponses) => Self::from_openai_responses(usage).map(Some),
            Some(UsageFormat::Gemini) => Self::from_gemini(usage).map(Some),
            None => Ok(None),
        }
    }
}

fn object(v: &Value) -> Result<&Map<String, Value>, UsageError> {
    v.as_object().ok_or_else(|| fail("", "expected an object"))
}

fn nested(parent: &str, e: UsageError) -> UsageError {
    UsageError { field: format!("{parent}.{}", e.field), message: e.message }
}

/// A token count: absent and `null` are `None`; anything but a non-negative integer is an error.
fn count(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, UsageError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n.as_u64().map(Some).ok_or_else(|| fail(key, format!("expected a non-negative integer, found {n}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gemini_counts_the_cache_inside_the_prompt() {
        let u = json!({"promptTokenCount": 5_000, "cachedContentTokenCount": 4_096,
                       "candidatesTokenCount": 12, "thoughtsTokenCount": 30, "totalTokenCount": 5_042});
        let usage = Usage::from_gemini(&u).unwrap();
        assert_eq!(usage, Usage { input: 904, cache_read: 4_096, cache_write: 0, output: 42 });
        assert_eq!(usage.prompt_total(), 5_000);
        assert_eq!(Usage::detect(&u), Some(UsageFormat::Gemini));
        assert_eq!(Usage::from_json(&u).unwrap(), Some(usage));
        assert!(Usage::from_gemini(&json!({"promptTokenCount": 1, "cachedContentTokenCount": 2})).is_err());
        assert!(Usage::from_gemini(&json!({"candidatesTokenCount": 1})).is_err());
    }

    #[test]
    fn anthropic_counts_the_cache_as_prompt() {
        let u = json!({"input_tokens": 1_854, "cache_creation_input_tokens": 2_100,
                       "cache_read_input_tokens": 90_500, "output_tokens": 312});
        let usage = Usage::from_anthropic(&u).unwrap();
        assert_eq!(usage, Usage { input: 1_854, cache_read: 90_500, cache_write: 2_100, output: 312 });
        assert_eq!(usage.prompt_total(), 94_454);
        assert_eq!(Usage::from_json(&u).unwrap(), Some(usage));
    }

    #[test]
    fn anthropic_stream_delta_replaces_only_what_it_carries() {
        let mut usage = Usage::from_anthropic(&json!({"input_tokens": 10, "cache_read_input_tokens": 5_000,
                                                      "cache_creation_input_tokens": 0, "output_tokens": 1}))
        .unwrap();
        usage.update_from_anthropic(&json!({"output_tokens": 420})).unwrap();
        assert_eq!(usage, Usage { input: 10, cache_read: 5_000, cache_write: 0, output: 420 });
        let by_ttl = json!({"input_tokens": 3, "cache_creation": {"ephemeral_5m_input_tokens": 100,
                                                                  "ephemeral_1h_input_tokens": 20}});
        assert_eq!(Usage::from_anthropic(&by_ttl).unwrap().cache_write, 120);
    }

    #[test]
    fn openai_prompt_includes_the_cached_part() {
        let chat = json!({"prompt_tokens": 50_000, "completion_tokens": 200, "total_tokens": 50_200,
                          "prompt_tokens_details": {"cached_tokens": 48_000}});
        let u = Usage::from_openai_chat(&chat).unwrap();
        assert_eq!(u, Usage { input: 2_000, cache_read: 48_000, cache_write: 0, output: 200 });
        assert_eq!(u.prompt_total(), 50_000);
        let responses = json!({"input_tokens": 9_000, "input_tokens_details": {"cached_tokens": 8_000},
                               "output_tokens": 7});
        assert_eq!(Usage::detect(&responses), Some(UsageFormat::OpenAiResponses));
        assert_eq!(Usage::from_json(&responses).unwrap().unwrap().prompt_total(), 9_000);
    }

    #[test]
    fn bad_usage_names_the_field() {
        let e = Usage::from_openai_chat(&json!({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 11}}))
            .unwrap_err();
        assert_eq!(e.field, "prompt_tokens_details.cached_tokens");
        let e = Usage::from_anthropic(&json!({"input_tokens": -3})).unwrap_err();
        assert_eq!(e.to_string(), "usage field `input_tokens`: expected a non-negative integer, found -3");
        assert_eq!(Usage::from_anthropic(&json!({"output_tokens": 3})).unwrap_err().field, "input_tokens");
        assert!(Usage::from_json(&json!([1])).is_err());
        assert_eq!(Usage::from_json(&json!({"output_tokens": 3})).unwrap(), None);
    }
}
