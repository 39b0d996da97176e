//! Blocking clients that turn a summary request (the exact body bytes the core built) into a
//! summary: the Anthropic Messages API, OpenAI-compatible chat completions (OpenAI, llama.cpp's
//! server, vLLM, Ollama) and a local command (`command:PROGRAM [ARGS]`).
//!
//! The clients never re-serialize the request: fork-mode summaries rely on the provider seeing
//! the very bytes (and so the very prompt-cache prefix) the core produced. Every failure is an
//! [`LlmError`] with one reason; the API key never appears in an error, a `Debug` or a log line.

mod anthropic;
mod command;
mod error;
mod http;
mod openai;
mod secret;
mod spec;

use std::time::Duration;

pub use anthropic::{AnthropicClient, ANTHROPIC_VERSION};
pub use command::{CommandClient, MODEL_ENV};
pub use error::LlmError;
pub use http::HttpOptions;
pub use openai::OpenAiClient;
pub use secret::ApiKey;
pub use spec::{ClientOptions, SpecError, SummarizerSpec, DEFAULT_ANTHROPIC_KEY_ENV, DEFAULT_OPENAI_KEY_ENV};

/// What one successful call produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The summary text (never empty: an empty answer is [`LlmError::Empty`]).
    pub text: String,
    /// What the provider says it billed, when it says so (a command never does).
    pub usage: Option<ctxlog::Usage>,
    /// Wall time of the call, retry and backoff included.
    pub latency: Duration,
    /// The model the provider says answered, when it says so.
    pub model: Option<String>,
}

/// A blocking summarizer: one request body in, one summary out.
pub trait Summarizer: Send + Sync {
    /// Sends `body` (a complete JSON request, sent byte for byte) and returns the summary.
    fn complete(&self, body: &[u8]) -> Result<Completion, LlmError>;

    /// The model the request builder should name in the body, when one was configured (the
    /// client does not rewrite the body to put it there).
    fn model(&self) -> Option<&str>;

    /// The wire format the request body must be in; `None` when any JSON will do (a command).
    fn wire_format(&self) -> Option<ctxlog::WireFormat>;

    /// The summarizer's context window in tokens, when the server states it (llama.cpp's
    /// `/props`); asked once, when the summarizer is set up.
    fn context_window(&self) -> Option<u64> {
        None
    }
}
