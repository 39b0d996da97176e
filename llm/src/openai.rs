//! OpenAI-compatible chat completions, non-streaming: OpenAI, llama.cpp's server, vLLM, Ollama.

use std::fmt;
use std::time::Instant;

use ctxlog::{Usage, WireFormat};
use serde_json::Value;

use crate::error::LlmError;
use crate::http::{answered_model, endpoint, Http, HttpOptions};
use crate::secret::ApiKey;
use crate::{Completion, Summarizer};

/// `POST {base}/v1/chat/completions`, `Authorization: Bearer` when a key is given; the text
/// is `choices[0].message.content`.
pub struct OpenAiClient {
    url: String,
    key: Option<ApiKey>,
    model: Option<String>,
    http: Http,
}

impl OpenAiClient {
    /// A client for `base` (e.g. `https://api.openai.com` or `http://127.0.0.1:8080`); local
    /// servers usually need no key.
    pub fn new(base: &str, key: Option<ApiKey>, model: Option<String>, options: HttpOptions) -> OpenAiClient {
        OpenAiClient { url: endpoint(base, "/v1/chat/completions"), key, model, http: Http::new(options) }
    }

    /// The URL requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The server's context window per slot, as a llama.cpp-style server states it at
    /// `GET {base}/props` (`default_generation_settings.n_ctx`, or a top-level `n_ctx`);
    /// `None` when the server has no such endpoint or does not say.
    pub fn props_context(&self) -> Option<u64> {
        let props = self.url.strip_suffix("/v1/chat/completions").map(|b| format!("{b}/props"))?;
        let bearer = self.key.as_ref().map(|k| format!("Bearer {}", k.expose()));
        let mut headers = Vec::new();
        if let Some(b) = &bearer {
            headers.push(("authorization", b.as_str()));
        }
        let answer = self.http.get_json(&props, &headers).ok()?;
        answer
            .pointer("/default_generation_settings/n_ctx")
            .or_else(|| answer.get("n_ctx"))
            .and_then(Value::as_u64)
            .filter(|&n| n > 0)
    }

    fn call(&self, body: &[u8]) -> Result<Completion, LlmError> {
        let start = Instant::now();
        let bearer = self.key.as_ref().map(|k| format!("Bearer {}", k.expose()));
        let mut headers = vec![("content-type", "application/json")];
        if let Some(b) = &bearer {
            headers.push(("authorization", b.as_str()));
        }
        let answer = self.http.post_json(&self.url, &headers, body)?;
        let invalid = |detail: String| LlmError::InvalidJson { source_name: self.url.clone(), detail };
        let first = match answer.get("choices") {
            Some(Value::Array(choices)) => choices.first(),
            Some(_) => return Err(invalid("field `choices`: expected an array".to_owned())),
            None => return Err(invalid("field `choices`: missing".to_owned())),
        };
        let text = match first.map(|c| c.get("message").and_then(|m| m.get("content"))) {
            // No choice, or a null content (e.g. a refusal or tool call only): nothing to use.
            None | Some(None) | Some(Some(Value::Null)) => String::new(),
            Some(Some(Value::String(t))) => t.clone(),
            Some(Some(_)) => return Err(invalid("field `choices[0].message.content`: expected a string".to_owned())),
        };
        // A cut answer is not a summary, however small (llama.cpp and OpenAI say `length`).
        if let Some(reason) = first.and_then(|c| c.get("finish_reason")).and_then(Value::as_str) {
            if reason == "length" {
                return Err(LlmError::Truncated { source_name: self.url.clone(), reason: reason.to_owned() });
            }
        }
        if text.trim().is_empty() {
            return Err(LlmError::Empty { source_name: self.url.clone() });
        }
        let usage = match answer.get("usage") {
            None | Some(Value::Null) => None,
            Some(u) => Some(Usage::from_openai_chat(u).map_err(|e| invalid(e.to_string()))?),
        };
        Ok(Completion { text, usage, latency: start.elapsed(), model: answered_model(&answer) })
    }
}

impl Summarizer for OpenAiClient {
    fn complete(&self, body: &[u8]) -> Result<Completion, LlmError> {
        let result = self.call(body);
        match &self.key {
            Some(key) => result.map_err(|e| e.scrubbed(key)),
            None => result,
        }
    }

    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    fn wire_format(&self) -> Option<WireFormat> {
        Some(WireFormat::OpenAi)
    }

    fn context_window(&self) -> Option<u64> {
        self.props_context()
    }
}

impl fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("url", &self.url)
            .field("key", &self.key)
            .field("model", &self.model)
            .finish()
    }
}
