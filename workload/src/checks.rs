//! Test helpers: read a generated transcript back and check the properties every session has.

use base64::Engine as _;
use serde_json::Value;

/// Parses JSONL text (which must end with a newline).
pub(crate) fn parse(t: &str) -> Vec<Value> {
    assert!(t.ends_with('\n'));
    t.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `(tool_use_id, text)` of every tool result.
pub(crate) fn tool_results(v: &[Value]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in v {
        if let Some(bs) = m["content"].as_array() {
            for b in bs {
                if b["type"] == "tool_result" {
                    let text = match &b["content"] {
                        Value::String(s) => s.clone(),
                        Value::Array(a) => a[0]["text"].as_str().unwrap().to_string(),
                        other => panic!("bad content {other}"),
                    };
                    out.push((b["tool_use_id"].as_str().unwrap().to_string(), text));
                }
            }
        }
    }
    out
}

/// The decoded bytes of every image, checking they sit in user messages as base64 PNGs.
pub(crate) fn images(v: &[Value]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for m in v {
        if let Some(bs) = m["content"].as_array() {
            for b in bs.iter().filter(|b| b["type"] == "image") {
                assert_eq!(m["role"], "user");
                assert_eq!(b["source"]["type"], "base64");
                assert_eq!(b["source"]["media_type"], "image/png");
                let data = b["source"]["data"].as_str().unwrap();
                out.push(base64::engine::general_purpose::STANDARD.decode(data).unwrap());
            }
        }
    }
    out
}

/// Indexes of the human messages after the instructions (user messages that carry no tool
/// result).
pub(crate) fn humans(v: &[Value]) -> Vec<usize> {
    (2..v.len())
        .filter(|&i| {
            let m = &v[i];
            m["role"] == "user"
                && (m["content"].is_string()
                    || m["content"].as_array().unwrap().iter().all(|b| b["type"] != "tool_result"))
        })
        .collect()
}

/// The text of a human message (its first text block when it has blocks).
pub(crate) fn text_of(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(bs) => bs[0]["text"].as_str().unwrap().to_string(),
        other => panic!("bad content {other}"),
    }
}

/// Every tool call is answered by the next message, in order, by ids never used before; no
/// result answers anything else.
pub(crate) fn check_pairing(v: &[Value]) {
    let ids_of = |m: &Value, ty: &str, key: &str| -> Vec<String> {
        m["content"]
            .as_array()
            .map(|bs| bs.iter().filter(|b| b["type"] == ty).map(|b| b[key].as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    };
    let mut seen = std::collections::HashSet::new();
    let mut uses = 0;
    for (i, m) in v.iter().enumerate() {
        let u = ids_of(m, "tool_use", "id");
        let r = ids_of(m, "tool_result", "tool_use_id");
        if !u.is_empty() {
            uses += u.len();
            assert!(u.len() <= 4);
            for id in &u {
                assert!(seen.insert(id.clone()), "duplicate id {id}");
            }
            let next = &v[i + 1];
            assert_eq!(next["role"], "user");
            let bs = next["content"].as_array().unwrap();
            assert!(bs.iter().all(|b| b["type"] == "tool_result"));
            assert_eq!(ids_of(next, "tool_result", "tool_use_id"), u);
        }
        if !r.is_empty() {
            assert_eq!(ids_of(&v[i - 1], "tool_use", "id"), r);
        }
    }
    assert!(uses > 0);
}

/// Roles alternate after the system prompt: user, assistant, user, ...
pub(crate) fn check_alternation(v: &[Value]) {
    assert_eq!(v[0]["role"], "system");
    for (i, m) in v.iter().enumerate().skip(1) {
        let want = if i % 2 == 1 { "user" } else { "assistant" };
        assert_eq!(m["role"], want, "message {i}");
    }
}

/// `(p50, p90, p99, max)` of the tool result sizes.
pub(crate) fn result_quantiles(v: &[Value]) -> (usize, usize, usize, usize) {
    let mut sizes: Vec<usize> = tool_results(v).iter().map(|(_, t)| t.len()).collect();
    sizes.sort_unstable();
    let q = |p: f64| sizes[((sizes.len() - 1) as f64 * p).round() as usize];
    (q(0.5), q(0.9), q(0.99), *sizes.last().unwrap())
}
