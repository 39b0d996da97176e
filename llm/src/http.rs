//! The one HTTP exchange both provider clients share: POST the body as given, one retry on
//! 429/5xx, every transport failure mapped to an [`LlmError`].

use std::thread;
use std::time::Duration;

use serde_json::Value;
use ureq::Agent;

use crate::error::{excerpt, LlmError};

/// The largest response body read (a summary is a few KiB; this bounds a misbehaving server).
const MAX_RESPONSE_BYTES: u64 = 16 * 1024 * 1024;

/// Timeouts and the retry policy of the HTTP clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpOptions {
    /// Whole-attempt limit: connect, send, and read the full answer.
    pub timeout: Duration,
    /// Limit on opening the connection (and TLS), inside `timeout`.
    pub connect_timeout: Duration,
    /// Wait before the one retry when the server does not say (`retry-after`).
    pub retry_backoff: Duration,
    /// The longest `retry-after` honoured; a larger one is cut to this.
    pub retry_after_cap: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            retry_backoff: Duration::from_secs(1),
            retry_after_cap: Duration::from_secs(10),
        }
    }
}

/// A configured agent plus the policy around it.
pub(crate) struct Http {
    agent: Agent,
    options: HttpOptions,
}

impl Http {
    pub(crate) fn new(options: HttpOptions) -> Http {
        let config = Agent::config_builder()
            .timeout_global(Some(options.timeout))
            .timeout_connect(Some(options.connect_timeout))
            // Statuses are ours to judge (retry, excerpt), not errors of the transport.
            .http_status_as_error(false)
            // A provider that redirects a POST is misconfigured; say so rather than follow.
            .max_redirects(0)
            .build();
        Http { agent: Agent::new_with_config(config), options }
    }

    /// POSTs `body` with `headers` and returns the parsed JSON of a 2xx answer. 429 and 5xx
    /// are retried once after `retry-after` (capped) or the backoff; nothing else is retried.
    pub(crate) fn post_json(&self, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<Value, LlmError> {
        let mut retried = false;
        loop {
            let (code, wait, bytes) = self.attempt(url, headers, body)?;
            if (200..300).contains(&code) {
                return serde_json::from_slice(&bytes).map_err(|e| LlmError::InvalidJson {
                    source_name: url.to_owned(),
                    detail: format!("body is not JSON: {e}"),
                });
            }
            let retryable = code == 429 || (500..600).contains(&code);
            if retryable && !retried {
                retried = true;
                thread::sleep(wait.map_or(self.options.retry_backoff, |w| w.min(self.options.retry_after_cap)));
                continue;
            }
            return Err(LlmError::Status { url: url.to_owned(), code, body_excerpt: excerpt(&bytes), retried });
        }
    }

    /// GETs `url` once (no retry) and returns the parsed JSON of a 2xx answer.
    pub(crate) fn get_json(&self, url: &str, headers: &[(&str, &str)]) -> Result<Value, LlmError> {
        let mut request = self.agent.get(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut response = request.call().map_err(|e| self.transport(url, e))?;
        let code = response.status().as_u16();
        let bytes = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_vec()
            .map_err(|e| self.transport(url, e))?;
        if !(200..300).contains(&code) {
            return Err(LlmError::Status { url: url.to_owned(), code, body_excerpt: excerpt(&bytes), retried: false });
        }
        serde_json::from_slice(&bytes).map_err(|e| LlmError::InvalidJson {
            source_name: url.to_owned(),
            detail: format!("body is not JSON: {e}"),
        })
    }

    /// One request: status, the server's `retry-after` (seconds form), body bytes.
    fn attempt(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(u16, Option<Duration>, Vec<u8>), LlmError> {
        let mut request = self.agent.post(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut response = request.send(body).map_err(|e| self.transport(url, e))?;
        let code = response.status().as_u16();
        let wait = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_vec()
            .map_err(|e| self.transport(url, e))?;
        Ok((code, wait, bytes))
    }

    fn transport(&self, url: &str, error: ureq::Error) -> LlmError {
        match error {
            ureq::Error::Timeout(_) => LlmError::Timeout { target: url.to_owned(), after: self.options.timeout },
            ureq::Error::Io(e)
                if e.kind() == std::io::ErrorKind::TimedOut || e.kind() == std::io::ErrorKind::WouldBlock =>
            {
                LlmError::Timeout { target: url.to_owned(), after: self.options.timeout }
            }
            ureq::Error::BodyExceedsLimit(n) => LlmError::InvalidJson {
                source_name: url.to_owned(),
                detail: format!("response body larger than {n} bytes"),
            },
            other => LlmError::Connect { url: url.to_owned(), detail: other.to_string() },
        }
    }
}

/// `base` + `path`, tolerating a trailing slash and a base that already ends in `/v1`.
pub(crate) fn endpoint(base: &str, path: &str) -> String {
    let base = base.trim_end_matches('/');
    match (base.strip_suffix("/v1"), path.strip_prefix("/v1")) {
        (Some(_), Some(rest)) => format!("{base}{rest}"),
        _ => format!("{base}{path}"),
    }
}

/// The model the answer names, if it names one.
pub(crate) fn answered_model(answer: &Value) -> Option<String> {
    answer.get("model").and_then(Value::as_str).map(str::to_owned)
}
