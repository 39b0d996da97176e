//! Server-sent-event framing as both providers send it.

use bytes::Bytes;

/// `event: NAME\ndata: JSON\n\n` (Anthropic).
pub fn named(event: &str, data: &serde_json::Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// `data: JSON\n\n` (OpenAI).
pub fn data(data: &serde_json::Value) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// OpenAI's terminator.
pub fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

/// Splits `s` into pieces of at most `n` bytes on char boundaries (deltas of a stream).
pub fn pieces(s: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in s.chars() {
        if cur.len() + c.len_utf8() > n && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}
