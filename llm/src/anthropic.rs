//! The Anthropic Messages API, non-streaming.

use std::fmt;
use std::time::Instant;

use ctxlog::{Usage, WireFormat};
use serde_json::Value;

use crate::error::LlmError;
use crate::http::{answered_model, endpoint, Http, HttpOptions};
use crate::secret::ApiKey;
use crate::{Completion, Summarizer};

/// The API version header this client speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `POST {base}/v1/messages` with `x-api-key`; the text is the concatenated `text` blocks.
pub struct AnthropicClient {
    url: String,
    key: ApiKey,
    model: Option<String>,
    http: Http,
}

impl AnthropicClient {
    /// A client for `base` (e.g. `https://api.anthropic.com`).
    pub fn new(base: &str, key: ApiKey, model: Option<String>, options: HttpOptions) -> AnthropicClient {
        AnthropicClient { url: endpoint(base, "/v1/messages"), key, model, http: Http::new(options) }
    }

    /// The URL requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn call(&self, body: &[u8]) -> Result<Completion, LlmError> {
        let start = Instant::now();
        let headers = [
            ("x-api-key", self.key.expose()),
            ("anthropic-version", ANTHROPIC_VERSION),
            ("content-type", "application/json"),
        ];
        let answer = self.http.post_json(&self.url, &headers, body)?;
        let text = text_of(&answer, &self.url)?;
        if text.trim().is_empty() {
            return Err(LlmError::Empty { source_name: self.url.clone() });
        }
        let usage = match answer.get("usage") {
            None | Some(Value::Null) => None,
            Some(u) => Some(
                Usage::from_anthropic(u)
                    .map_err(|e| LlmError::InvalidJson { source_name: self.url.clone(), detail: e.to_string() })?,
            ),
        };
        Ok(Completion { text, usage, latency: start.elapsed(), model: answered_model(&answer) })
    }
}

/// The concatenated `text` of the `content` blocks of type `text` (others, e.g. `thinking`,
/// are skipped).
fn text_of(answer: &Value, url: &str) -> Result<String, LlmError> {
    let bad = |detail: String| LlmError::InvalidJson { source_name: url.to_owned(), detail };
    let blocks = match answer.get("content") {
        Some(Value::Array(blocks)) => blocks,
        Some(_) => return Err(bad("field `content`: expected an array".to_owned())),
        None => return Err(bad("field `content`: missing".to_owned())),
    };
    let mut text = String::new();
    for (i, block) in blocks.iter().enumerate() {
        if block.get("type").and_then(Value::as_str) != Some("text") {
            continue;
        }
        match block.get("text") {
            Some(Value::String(t)) => text.push_str(t),
            _ => return Err(bad(format!("field `content[{i}].text`: expected a string"))),
        }
    }
    Ok(text)
}

impl Summarizer for AnthropicClient {
    fn complete(&self, body: &[u8]) -> Result<Completion, LlmError> {
        self.call(body).map_err(|e| e.scrubbed(&self.key))
    }

    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    fn wire_format(&self) -> Option<WireFormat> {
        Some(WireFormat::Anthropic)
    }
}

impl fmt::Debug for AnthropicClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicClient")
            .field("url", &self.url)
            .field("key", &self.key)
            .field("model", &self.model)
            .finish()
    }
}
