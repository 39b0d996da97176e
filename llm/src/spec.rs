//! `anthropic:URL`, `openai:URL`, `command:PROGRAM [ARGS]`: how a user names a summarizer.

use std::time::Duration;

use crate::command::CommandClient;
use crate::error::LlmError;
use crate::http::HttpOptions;
use crate::secret::ApiKey;
use crate::{AnthropicClient, OpenAiClient, Summarizer};

/// The key variable read by `anthropic:` when none is configured.
pub const DEFAULT_ANTHROPIC_KEY_ENV: &str = "ANTHROPIC_API_KEY";
/// The key variable read (if set) by `openai:` when none is configured.
pub const DEFAULT_OPENAI_KEY_ENV: &str = "OPENAI_API_KEY";

/// A parsed summarizer name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SummarizerSpec {
    /// `anthropic:URL`: the Messages API at `URL` (base, e.g. `https://api.anthropic.com`).
    Anthropic {
        /// Base URL.
        base_url: String,
    },
    /// `openai:URL`: chat completions at `URL` (base, with or without `/v1`).
    OpenAi {
        /// Base URL.
        base_url: String,
    },
    /// `command:PROGRAM [ARGS]`: arguments split on whitespace, no shell, no quoting.
    Command {
        /// The program (a path, or a name looked up in `PATH`).
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
}

/// A summarizer name that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("summarizer `{input}`: {reason}")]
pub struct SpecError {
    /// What was given.
    pub input: String,
    /// Why it is refused.
    pub reason: String,
}

/// What a spec leaves to configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientOptions {
    /// The model the request builder should name (see [`Summarizer::model`]); a command gets
    /// it as `CTXLOG_SUMMARY_MODEL`.
    pub model: Option<String>,
    /// The NAME of the environment variable holding the API key. Unset: `ANTHROPIC_API_KEY`
    /// (required) for `anthropic:`, `OPENAI_API_KEY` (used if set) for `openai:`. Set: the
    /// variable is required for either.
    pub api_key_env: Option<String>,
    /// Timeouts and retry policy (HTTP); a command uses `http.timeout` as its limit.
    pub http: HttpOptions,
}

impl SummarizerSpec {
    /// Parses `anthropic:URL`, `openai:URL` or `command:PROGRAM [ARGS]`.
    pub fn parse(input: &str) -> Result<SummarizerSpec, SpecError> {
        let refuse = |reason: &str| SpecError { input: input.to_owned(), reason: reason.to_owned() };
        let (scheme, rest) = input
            .split_once(':')
            .ok_or_else(|| refuse("expected `anthropic:URL`, `openai:URL` or `command:PROGRAM`"))?;
        let rest = rest.trim();
        match scheme {
            "anthropic" | "openai" => {
                if !(rest.starts_with("http://") || rest.starts_with("https://")) {
                    return Err(refuse("the URL must start with http:// or https://"));
                }
                if rest.len() <= "https://".len() || rest.contains(char::is_whitespace) {
                    return Err(refuse("the URL has no host or contains whitespace"));
                }
                let base_url = rest.to_owned();
                Ok(if scheme == "anthropic" {
                    SummarizerSpec::Anthropic { base_url }
                } else {
                    SummarizerSpec::OpenAi { base_url }
                })
            }
            "command" => {
                let mut words = rest.split_whitespace().map(str::to_owned);
                let program = words.next().ok_or_else(|| refuse("no program after `command:`"))?;
                Ok(SummarizerSpec::Command { program, args: words.collect() })
            }
            _ => Err(refuse("unknown kind; expected `anthropic:`, `openai:` or `command:`")),
        }
    }

    /// The client this spec names, reading the API key from the environment now.
    pub fn build(&self, options: &ClientOptions) -> Result<Box<dyn Summarizer>, LlmError> {
        let model = options.model.clone();
        Ok(match self {
            SummarizerSpec::Anthropic { base_url } => {
                let env = options.api_key_env.as_deref().unwrap_or(DEFAULT_ANTHROPIC_KEY_ENV);
                let key = ApiKey::from_env(env).ok_or_else(|| LlmError::MissingKey { env: env.to_owned() })?;
                Box::new(AnthropicClient::new(base_url, key, model, options.http))
            }
            SummarizerSpec::OpenAi { base_url } => {
                let key = match options.api_key_env.as_deref() {
                    Some(env) => {
                        Some(ApiKey::from_env(env).ok_or_else(|| LlmError::MissingKey { env: env.to_owned() })?)
                    }
                    None => ApiKey::from_env(DEFAULT_OPENAI_KEY_ENV),
                };
                Box::new(OpenAiClient::new(base_url, key, model, options.http))
            }
            SummarizerSpec::Command { program, args } => {
                Box::new(CommandClient::new(program.clone(), args.clone(), model, options.http.timeout))
            }
        })
    }

    /// The wire format the request body must be in (`None` for a command: it gets whatever
    /// the session speaks).
    pub fn wire_format(&self) -> Option<ctxlog::WireFormat> {
        match self {
            SummarizerSpec::Anthropic { .. } => Some(ctxlog::WireFormat::Anthropic),
            SummarizerSpec::OpenAi { .. } => Some(ctxlog::WireFormat::OpenAi),
            SummarizerSpec::Command { .. } => None,
        }
    }
}

/// A convenience for callers that hold only a timeout.
impl From<Duration> for ClientOptions {
    fn from(timeout: Duration) -> Self {
        ClientOptions { http: HttpOptions { timeout, ..HttpOptions::default() }, ..ClientOptions::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_kind() {
        assert_eq!(
            SummarizerSpec::parse("anthropic:https://api.anthropic.com").unwrap(),
            SummarizerSpec::Anthropic { base_url: "https://api.anthropic.com".into() }
        );
        assert_eq!(
            SummarizerSpec::parse("openai:http://127.0.0.1:8080/v1").unwrap(),
            SummarizerSpec::OpenAi { base_url: "http://127.0.0.1:8080/v1".into() }
        );
        assert_eq!(
            SummarizerSpec::parse("command:sh  scripts/s.sh 8").unwrap(),
            SummarizerSpec::Command { program: "sh".into(), args: vec!["scripts/s.sh".into(), "8".into()] }
        );
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        for bad in [
            "",
            "anthropic",
            "gemini:https://x",
            "openai:ftp://x",
            "openai:127.0.0.1:8080",
            "anthropic:https://",
            "openai:http://a b",
            "command:",
            "command:   ",
        ] {
            let err = SummarizerSpec::parse(bad).unwrap_err();
            assert_eq!(err.input, bad);
            assert!(!err.reason.is_empty());
        }
    }

    #[test]
    fn joins_base_and_path() {
        use crate::http::endpoint;
        assert_eq!(endpoint("http://h:1", "/v1/messages"), "http://h:1/v1/messages");
        assert_eq!(endpoint("http://h:1/", "/v1/messages"), "http://h:1/v1/messages");
        assert_eq!(endpoint("http://h:1/v1", "/v1/chat/completions"), "http://h:1/v1/chat/completions");
        assert_eq!(endpoint("http://h:1/api/v1/", "/v1/chat/completions"), "http://h:1/api/v1/chat/completions");
    }
}
