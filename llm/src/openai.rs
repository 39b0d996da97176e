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
