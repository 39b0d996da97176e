//! A provider's error answer read as a rejection (pure): its type, its text, and whether it
//! says the prompt is longer than the model's context, with the counts when it gives them.
//!
//! * Anthropic: `400 invalid_request_error` "prompt is too long: 210000 tokens > 200000 maximum".
//! * OpenAI: `400` code `context_length_exceeded` "This model's maximum context length is 128000
//!   tokens. However, your messages resulted in 130000 tokens. …".
//! * llama.cpp: `400` type `exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`
//!   ("request (4476 tokens) exceeds the available context size (4096 tokens)").

use serde_json::Value;

/// Characters of the provider's message kept in the log.
pub const MESSAGE_CHARS: usize = 500;

/// What a provider's error answer said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The HTTP status.
    pub status: u16,
    /// The error type or code (`context_length_exceeded` wins over OpenAI's generic type).
    pub error: String,
    /// The start of the message.
    pub message: String,
    /// The prompt is longer than the model's context.
    pub overflow: bool,
    /// The provider's count of the prompt.
    pub prompt_tokens: Option<u64>,
    /// The model's limit.
    pub limit: Option<u64>,
}

/// Reads an error answer (`body` may be anything: a proxy in between, an HTML page).
pub fn parse_rejection(status: u16, body: &[u8]) -> Rejection {
    let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let err = json.get("error").unwrap_or(&Value::Null);
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let message = match err.get("message") {
        Some(m) => text(Some(m)),
        None => String::from_utf8_lossy(body).trim().to_owned(),
    };
    let kind = text(err.get("type"));
    let code = text(err.get("code"));
    let error = if code == "context_length_exceeded" || kind.is_empty() { code } else { kind };
    let mut r = Rejection { status, error, message: cut(&message), overflow: false, prompt_tokens: None, limit: None };
    if r.error == "exceed_context_size_error" {
        r.overflow = true;
        r.prompt_tokens = err.get("n_prompt_tokens").and_then(Value::as_u64);
        r.limit = err.get("n_ctx").and_then(Value::as_u64);
    } else if r.error == "context_length_exceeded" || message.contains("maximum context length is") {
        r.overflow = true;
        r.limit = number_after(&message, "maximum context length is ");
        r.prompt_tokens = number_after(&message, "resulted in ");
    } else if let Some(rest) = message.strip_prefix("prompt is too long: ") {
        // "N tokens > M maximum"
        r.overflow = true;
        r.prompt_tokens = number_after(rest, "");
        r.limit = number_after(rest, "> ");
    }
    r
}

/// The unsigned integer right after `marker` in `s` (commas allowed).
fn number_after(s: &str, marker: &str) -> Option<u64> {
    let at = s.find(marker)? + marker.len();
    let digits: String =
        s.get(at..)?.chars().take_while(|c| c.is_ascii_digit() || *c == ',').filter(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn cut(s: &str) -> String {
    match s.char_indices().nth(MESSAGE_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The budget a learned limit sets, in the engine's tokens: the limit scaled down by how much
/// the provider counted over our estimate of the rejected view (`prompt_tokens / view_tokens`),
/// never above the limit, at least 1.
pub fn learned_budget(limit: u64, prompt_tokens: Option<u64>, view_tokens: u64) -> u64 {
    let scaled = match prompt_tokens {
        Some(n) if n > view_tokens && view_tokens > 0 => {
            u64::try_from(u128::from(limit) * u128::from(view_tokens) / u128::from(n)).unwrap_or(limit)
        }
        _ => limit,
    };
    scaled.clamp(1, limit.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_providers_overflow_is_read_with_its_counts() {
        let a = br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        let r = parse_rejection(400, a);
        assert_eq!((r.overflow, r.prompt_tokens, r.limit), (true, Some(210_000), Some(200_000)));
        assert_eq!(r.error, "invalid_request_error");
        let o = br#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130001 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        let r = parse_rejection(400, o);
        assert_eq!((r.overflow, r.prompt_tokens, r.limit), (true, Some(130_001), Some(128_000)));
        assert_eq!(r.error, "context_length_exceeded");
        let l = br#"{"error":{"code":400,"message":"request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#;
        let r = parse_rejection(400, l);
        assert_eq!((r.overflow, r.prompt_tokens, r.limit), (true, Some(9_000), Some(8_192)));
        let other =
            br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}"#;
        let r = parse_rejection(400, other);
        assert!(!r.overflow);
        assert_eq!(r.message, "max_tokens: Field required");
        let html = parse_rejection(502, b"<html>bad gateway</html>");
        assert_eq!(
            (html.error.as_str(), html.message.as_str(), html.overflow),
            ("", "<html>bad gateway</html>", false)
        );
    }

    #[test]
    fn the_learned_budget_allows_for_the_providers_count() {
        assert_eq!(learned_budget(8_192, Some(9_000), 6_000), 5_461);
        assert_eq!(learned_budget(8_192, Some(5_000), 6_000), 8_192, "never above the limit");
        assert_eq!(learned_budget(8_192, None, 6_000), 8_192);
        assert_eq!(learned_budget(0, None, 6_000), 1);
    }
}
