//! `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent?alt=sse` (also under
//! `/v1/`): Google's
//! refusals (texts as the API returns them), replies, usage with implicit caching, SSE chunks.
//!
//! Reply: as the other APIs (`reply.rs`), over `contents`: `ack N`, or a `functionCall` of NAME
//! when the last content is a user turn whose text carries `[[tool:NAME]]`.
//! Usage: `promptTokenCount` = ⌈body bytes/4⌉, `cachedContentTokenCount` the implicit cache's
//! hit (the longest prefix of a recent request of the same key, whole tokens, only when the
//! prompt and the hit reach the model's minimum: 1,024 tokens for Flash models, 4,096 for the
//! others, as Google's caching page lists for Gemini 2.5).

use bytes::Bytes;
use serde_json::{json, Value};

use crate::reply::{Reply, Tokens};
use crate::strict::{Rejection, Rule, Strictness};

/// The context window of Gemini 2.5 models.
/// (tokens)
pub const CONTEXT: u64 = 1_048_576;

/// The implicit cache's minimum of a model.
pub fn cache_min(model: &str) -> u64 {
    if model.contains("flash") {
        1_024
    } else {
        4_096
    }
}

/// The model and whether the path streams (`None`: not a method the fake serves).
pub fn method_of(path: &str) -> Option<(String, bool)> {
    let path = path.split('?').next()?;
    // Google serves both API versions (the SDKs' default moved from `v1beta` to `v1`).
    let rest = path.strip_prefix("/v1beta/models/").or_else(|| path.strip_prefix("/v1/models/"))?;
    let (model, verb) = rest.rsplit_once(':')?;
    match verb {
        "generateContent" => Some((model.to_owned(), false)),
        "streamGenerateContent" => Some((model.to_owned(), true)),
        _ => None,
    }
}

/// Google's error body.
pub fn error(status: u16, message: &str) -> Bytes {
    let name = match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    };
    Bytes::from(json!({"error": {"code": status, "message": message, "status": name}}).to_string())
}

fn reject(message: String) -> Rejection {
    Rejection { status: 400, message, param: None, code: None }
}

fn parts(c: &Value) -> &[Value] {
    c.get("parts").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn count(c: &Value, kind: &str) -> usize {
    parts(c).iter().filter(|p| p.get(kind).is_some()).count()
}

/// What the API refuses of a request (`prompt`: the fake's count of it).
pub fn check(strict: &Strictness, body: &Value, prompt: u64) -> Result<(), Rejection> {
    let on = |r: Rule| !strict.relaxed.contains(&r);
    let Some(contents) = body.get("contents").and_then(Value::as_array) else {
        return Err(reject("* GenerateContentRequest.contents: contents is not specified\n".into()));
    };
    if contents.is_empty() {
        return Err(reject("* GenerateContentRequest.contents: contents is not specified\n".into()));
    }
    for (i, c) in contents.iter().enumerate() {
        let role = c.get("role").and_then(Value::as_str).unwrap_or("user");
        if on(Rule::Roles) && role != "user" && role != "model" {
            return Err(reject("Please use a valid role: user, model.".into()));
        }
        if on(Rule::EmptyContent) && parts(c).is_empty() {
            return Err(reject(format!(
                "* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty.\n"
            )));
        }
        for (j, p) in parts(c).iter().enumerate() {
            let known = [
                "text",
                "inlineData",
                "functionCall",
                "functionResponse",
                "fileData",
                "executableCode",
                "codeExecutionResult",
            ];
            if on(Rule::ItemTypes) && !known.iter().any(|k| p.get(*k).is_some()) {
                return Err(reject(format!(
                    "Invalid JSON payload received. Unknown name in contents[{i}].parts[{j}]."
                )));
            }
            let response_name = p.pointer("/functionResponse/name").and_then(Value::as_str);
            if on(Rule::ToolPairs) && p.get("functionResponse").is_some() && response_name.is_none_or(str::is_empty) {
                return Err(reject(format!(
                    "* GenerateContentRequest.contents[{i}].parts[{j}].function_response.name: Name cannot be empty.\n"
                )));
            }
            let call_name = p.pointer("/functionCall/name").and_then(Value::as_str);
            if on(Rule::ToolPairs) && p.get("functionCall").is_some() && call_name.is_none_or(str::is_empty) {
                return Err(reject(format!(
                    "* GenerateContentRequest.contents[{i}].parts[{j}].function_call.name: Name cannot be empty.\n"
                )));
            }
        }
    }
    if on(Rule::ToolPairs) {
        for (i, c) in contents.iter().enumerate() {
            let before = i.checked_sub(1).and_then(|k| contents.get(k));
            let responses = count(c, "functionResponse");
            if responses > 0 {
                let calls = before.map_or(0, |b| count(b, "functionCall"));
                if calls == 0 {
                    return Err(reject(
                        "Please ensure that function response turn comes immediately after a function call turn."
                            .into(),
                    ));
                }
                if calls != responses {
                    return Err(reject("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.".into()));
                }
            }
            if count(c, "functionCall") > 0 {
                let after_user =
                    before.is_none_or(|b| b.get("role").and_then(Value::as_str).unwrap_or("user") == "user");
                if !after_user {
                    return Err(reject("Please ensure that function call turns come immediately after a user turn or after a function response turn.".into()));
                }
            }
        }
    }
    let limit = strict.context_tokens.unwrap_or(CONTEXT);
    if on(Rule::ContextLength) && prompt > limit {
        return Err(reject(format!(
            "The input token count ({prompt}) exceeds the maximum number of tokens allowed ({limit})."
        )));
    }
    Ok(())
}

/// The reply to `contents`.
pub fn decide(body: &Value) -> Reply {
    let contents = body.get("contents").and_then(Value::as_array);
    let n = contents.map_or(0, Vec::len);
    let last = contents.and_then(|c| c.last());
    let human = last.filter(|c| {
        c.get("role").and_then(Value::as_str).unwrap_or("user") == "user" && count(c, "functionResponse") == 0
    });
    let text: String = human
        .map(|c| parts(c).iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n"))
        .unwrap_or_default();
    if let Some(name) = marker(&text) {
        return Reply::Tool { name, args: format!("{{\"n\":{n}}}") };
    }
    Reply::Text(format!("ack {n}"))
}

fn marker(text: &str) -> Option<String> {
    let start = text.find("[[tool:")? + "[[tool:".len();
    let rest = text.get(start..)?;
    let name = rest.get(..rest.find("]]")?)?;
    let ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    ok.then(|| name.to_owned())
}

fn usage(tokens: &Tokens) -> Value {
    let mut u = json!({
        "promptTokenCount": tokens.prompt,
        "candidatesTokenCount": tokens.output,
        "totalTokenCount": tokens.prompt + tokens.output,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": tokens.prompt}],
    });
    if tokens.cache_read > 0 {
        u["cachedContentTokenCount"] = json!(tokens.cache_read);
    }
    u
}

fn part(reply: &Reply) -> Value {
    match reply {
        Reply::Text(t) => json!({"text": t}),
        Reply::Tool { name, args } => {
            let args: Value = serde_json::from_str(args).unwrap_or_else(|_| json!({}));
            json!({"functionCall": {"name": name, "args": args}})
        }
    }
}

/// A whole `GenerateContentResponse`.
pub fn response(model: &str, reply: &Reply, tokens: &Tokens, seq: u64) -> Value {
    json!({
        "candidates": [{"content": {"parts": [part(reply)], "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage(tokens),
        "modelVersion": model,
        "responseId": format!("fake-gemini-{seq}"),
    })
}

/// The SSE chunks (`data: …\r\n\r\n`): text in pieces, a call whole; the last chunk carries
/// `finishReason` and the whole usage.
pub fn stream(model: &str, reply: &Reply, tokens: &Tokens, seq: u64) -> Vec<Bytes> {
    let pieces: Vec<Value> = match reply {
        Reply::Text(t) => crate::sse::pieces(t, 4).into_iter().map(|p| json!({"text": p})).collect(),
        tool => vec![part(tool)],
    };
    let n = pieces.len();
    let so_far = Tokens { output: 0, cache_read: tokens.cache_read, ..*tokens };
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let last = i + 1 == n;
            let mut candidate = json!({"content": {"parts": [p], "role": "model"}, "index": 0});
            if last {
                candidate["finishReason"] = json!("STOP");
            }
            let chunk = json!({
                "candidates": [candidate],
                "usageMetadata": usage(if last { tokens } else { &so_far }),
                "modelVersion": model,
                "responseId": format!("fake-gemini-{seq}"),
            });
            Bytes::from(format!("data: {chunk}\r\n\r\n"))
        })
        .collect()
}

/// A stream that breaks with an error object (as Google ends one that failed).
pub fn stream_error() -> Bytes {
    Bytes::from(format!("data: {}\r\n\r\n", String::from_utf8_lossy(&error(503, "The model is overloaded."))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict() -> Strictness {
        Strictness::default()
    }

    fn refused(body: Value) -> String {
        check(&strict(), &body, 10).unwrap_err().message
    }

    #[test]
    fn refuses_what_the_api_refuses() {
        let call = json!({"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]});
        let answer = json!({"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]});
        let user = json!({"role":"user","parts":[{"text":"go"}]});
        assert!(check(&strict(), &json!({"contents":[user, call, answer]}), 10).is_ok());
        assert!(refused(json!({"contents":[user, answer]})).contains("function response turn comes immediately after"));
        let two = json!({"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}},{"functionResponse":{"name":"f","response":{}}}]});
        assert!(refused(json!({"contents":[user, call, two]})).contains("number of function response parts"));
        assert!(refused(json!({"contents":[{"role":"assistant","parts":[{"text":"x"}]}]})).contains("valid role"));
        assert!(refused(json!({"contents":[{"role":"user","parts":[]}]})).contains("must not be empty"));
        let unnamed = json!({"role":"user","parts":[{"functionResponse":{"name":"","response":{}}}]});
        assert!(refused(json!({"contents":[user, call, unnamed]})).contains("Name cannot be empty"));
        assert!(refused(json!({"contents":[]})).contains("contents is not specified"));
        let big = check(&Strictness { context_tokens: Some(5), ..strict() }, &json!({"contents":[user]}), 10);
        assert!(big.unwrap_err().message.contains("exceeds the maximum number of tokens"));
        let mut relaxed = strict();
        relaxed.relaxed.insert(Rule::ToolPairs);
        assert!(check(&relaxed, &json!({"contents":[user, answer]}), 10).is_ok());
    }

    #[test]
    fn replies_and_streams() {
        let b = json!({"contents":[{"role":"user","parts":[{"text":"please [[tool:read]]"}]}]});
        assert_eq!(decide(&b), Reply::Tool { name: "read".into(), args: "{\"n\":1}".into() });
        let t = Tokens { prompt: 2_000, cache_read: 1_500, cache_creation: 0, output: 3 };
        let r = response("gemini-2.5-flash", &Reply::Text("ack 9".into()), &t, 4);
        assert_eq!(r["usageMetadata"]["cachedContentTokenCount"], 1_500);
        let chunks = stream("m", &Reply::Text("ack 12345".into()), &t, 1);
        assert!(chunks.len() > 1);
        let last = String::from_utf8(chunks.last().unwrap().to_vec()).unwrap();
        assert!(last.contains("\"finishReason\":\"STOP\"") && last.ends_with("\r\n\r\n"));
        assert_eq!(
            method_of("/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"),
            Some(("gemini-2.5-pro".into(), true))
        );
    }
}
