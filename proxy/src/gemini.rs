//! What the Gemini routes (`POST /v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent`) need beyond the other routes.
//!
//! * The model is in the path, and streaming is the method (`:streamGenerateContent`, with
//!   `?alt=sse` for server-sent events); the body has `contents` and `systemInstruction`.
//! * The caller's key comes in `x-goog-api-key` or in `?key=`: either names the tenant (only
//!   its hash, as for the other headers); the query is forwarded as it came.
//! * `systemInstruction` is logged as a system message (`{"role":"system","parts":…}`); the view
//!   writes it back to the field.
//! * A stream's final event is its first chunk whose candidate carries a `finishReason` (Google
//!   puts the call's whole `usageMetadata` in it): held until the commit, like `message_stop`.

use http::HeaderMap;
use serde_json::value::RawValue;
use serde_json::Value;

/// A Gemini method path: the model and whether it streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Method {
    pub model: String,
    pub stream: bool,
}

/// The Gemini method a path names (`/v1beta/models/{model}:generateContent` or
/// `:streamGenerateContent`, also under `/v1/`), if it is one ctxlog serves.
pub(crate) fn method_of(path: &str) -> Option<Method> {
    let rest = path.strip_prefix("/v1beta/models/").or_else(|| path.strip_prefix("/v1/models/"))?;
    let (model, verb) = rest.rsplit_once(':')?;
    let stream = match verb {
        "generateContent" => false,
        "streamGenerateContent" => true,
        _ => return None,
    };
    (!model.is_empty() && !model.contains('/')).then(|| Method { model: model.to_owned(), stream })
}

/// The `systemInstruction` value as the message the log keeps: its `parts` under ctxlog's
/// `system` role (its own optional `role` means nothing to the API and is not kept).
pub(crate) fn system_message(system: &RawValue) -> String {
    #[derive(serde::Deserialize)]
    struct Instruction<'a> {
        #[serde(borrow)]
        parts: Option<&'a RawValue>,
    }
    match serde_json::from_str::<Instruction<'_>>(system.get()) {
        Ok(Instruction { parts: Some(parts) }) => format!(r#"{{"role":"system","parts":{}}}"#, parts.get()),
        // Not a content: refused when parsed, naming the field.
        _ => format!(r#"{{"role":"system","parts":{}}}"#, system.get()),
    }
}

/// The headers a caller is known by: a `?key=` in the query counts as `x-goog-api-key`.
pub(crate) fn identity_headers(headers: &HeaderMap, query: Option<&str>) -> HeaderMap {
    let mut h = headers.clone();
    if h.contains_key("x-goog-api-key") {
        return h;
    }
    let key = query.into_iter().flat_map(|q| q.split('&')).find_map(|kv| kv.strip_prefix("key="));
    if let Some(v) = key.and_then(|k| http::HeaderValue::from_str(k).ok()) {
        h.insert("x-goog-api-key", v);
    }
    h
}

/// `generationConfig.maxOutputTokens`: the output the request reserves.
pub(crate) fn max_output(fields: &[(&str, &RawValue)]) -> Option<u64> {
    let (_, raw) = fields.iter().find(|(k, _)| *k == "generationConfig")?;
    serde_json::from_str::<Value>(raw.get()).ok()?.get("maxOutputTokens")?.as_u64()
}

/// The answer's content (`candidates[0].content`) of a whole `generateContent` response.
pub(crate) fn answer_of(v: &Value) -> Option<String> {
    let content = v.pointer("/candidates/0/content")?;
    content.get("parts").filter(|p| p.as_array().is_some_and(|a| !a.is_empty()))?;
    Some(content.to_string())
}

/// A stream's answer, assembled from its chunks: consecutive text parts of one kind (thought
/// or not, no other field) are joined, every other part is kept as it came.
#[derive(Default)]
pub(crate) struct Chunks {
    parts: Vec<Value>,
    role: Option<String>,
}

impl Chunks {
    /// Takes one chunk; true when it is the stream's final one (it has a `finishReason`).
    pub fn take(&mut self, v: &Value) -> bool {
        let candidate = v.pointer("/candidates/0");
        let content = candidate.and_then(|c| c.get("content"));
        if let Some(r) = content.and_then(|c| c.get("role")).and_then(Value::as_str) {
            self.role = Some(r.to_owned());
        }
        for part in content.and_then(|c| c.get("parts")).and_then(Value::as_array).into_iter().flatten() {
            match (self.parts.last_mut(), joinable(part)) {
                (Some(last), Some((text, thought))) if joinable(last).is_some_and(|(_, t)| t == thought) => {
                    let joined = format!("{}{text}", last.get("text").and_then(Value::as_str).unwrap_or_default());
                    if let Some(o) = last.as_object_mut() {
                        o.insert("text".into(), Value::String(joined));
                    }
                }
                _ => self.parts.push(part.clone()),
            }
        }
        candidate.and_then(|c| c.get("finishReason")).is_some_and(|f| !f.is_null())
    }

    /// The assembled content, if the stream carried any part.
    pub fn finish(self) -> Option<String> {
        if self.parts.is_empty() {
            return None;
        }
        let role = self.role.unwrap_or_else(|| "model".into());
        Some(serde_json::json!({"role": role, "parts": self.parts}).to_string())
    }
}

/// A text part that can be joined with its neighbour: its text and whether it is a thought.
fn joinable(part: &Value) -> Option<(&str, bool)> {
    let o = part.as_object()?;
    let text = o.get("text")?.as_str()?;
    let thought = o.get("thought").and_then(Value::as_bool).unwrap_or(false);
    o.keys().all(|k| k == "text" || k == "thought").then_some((text, thought))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_model_and_the_stream() {
        let m = method_of("/v1beta/models/gemini-2.5-flash:generateContent").unwrap();
        assert_eq!((m.model.as_str(), m.stream), ("gemini-2.5-flash", false));
        assert!(method_of("/v1beta/models/gemini-2.5-pro:streamGenerateContent").unwrap().stream);
        assert_eq!(method_of("/v1beta/models/gemini-2.5-pro:countTokens"), None);
        assert_eq!(method_of("/v1beta/models/:generateContent"), None);
        assert_eq!(method_of("/v1beta/tunedModels/x:generateContent"), None);
    }

    #[test]
    fn a_query_key_names_the_caller_like_the_header() {
        let h = identity_headers(&HeaderMap::new(), Some("alt=sse&key=k1"));
        assert_eq!(h.get("x-goog-api-key").unwrap(), "k1");
        let mut given = HeaderMap::new();
        given.insert("x-goog-api-key", "k2".parse().unwrap());
        assert_eq!(identity_headers(&given, Some("key=k1")).get("x-goog-api-key").unwrap(), "k2");
    }

    #[test]
    fn stream_text_is_joined_and_calls_kept() {
        let mut c = Chunks::default();
        let chunk = |parts: Value, finish: Option<&str>| serde_json::json!({"candidates":[{"content":{"role":"model","parts":parts},"finishReason":finish}]});
        assert!(!c.take(&chunk(serde_json::json!([{"text":"a"}]), None)));
        assert!(!c.take(&chunk(serde_json::json!([{"text":"b"}]), None)));
        let call = serde_json::json!({"functionCall":{"name":"f","args":{}},"thoughtSignature":"s"});
        assert!(c.take(&chunk(serde_json::json!([call]), Some("STOP"))));
        let v: Value = serde_json::from_str(&c.finish().unwrap()).unwrap();
        assert_eq!(v, serde_json::json!({"role":"model","parts":[{"text":"ab"}, call]}));
    }
}
