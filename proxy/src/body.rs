//! The client's request body read without parsing its messages: each top-level field and each
//! element of `messages` stays a borrowed slice of the raw bytes, so a request of 150k tokens
//! costs one scan, and only the messages the log does not have yet are parsed.

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// A request body's parts, borrowed from its bytes.
pub(crate) struct ClientBody<'a> {
    /// Top-level fields other than `system` and `messages`, in order.
    pub fields: Vec<(&'a str, &'a RawValue)>,
    /// The Anthropic top-level `system`, if given.
    pub system: Option<&'a RawValue>,
    /// The elements of `messages`.
    pub messages: Vec<&'a RawValue>,
}

/// A body that is not a request: the field and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {message}")]
pub(crate) struct BodyError {
    pub field: String,
    pub message: String,
}

fn bad(field: &str, message: impl Into<String>) -> BodyError {
    BodyError { field: field.to_owned(), message: message.into() }
}

impl<'a> ClientBody<'a> {
    /// Splits `bytes` (a JSON object with a `messages` array).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, BodyError> {
        let text = std::str::from_utf8(bytes).map_err(|e| bad("body", format!("not UTF-8: {e}")))?;
        let mut de = serde_json::Deserializer::from_str(text);
        let body = de.deserialize_map(BodyVisitor).map_err(|e| {
            // The one error raised inside `messages` names it (see `MessagesVisitor`).
            let field = if e.to_string().contains(EXPECTED_MESSAGES) { "messages" } else { "body" };
            bad(field, format!("invalid JSON: {e}"))
        })?;
        de.end().map_err(|e| bad("body", format!("invalid JSON: {e}")))?;
        let messages = body.messages.ok_or_else(|| bad("messages", "missing"))?;
        if messages.is_empty() {
            return Err(bad("messages", "must not be empty"));
        }
        if let Some(i) = messages.iter().position(|m| !m.get().starts_with('{')) {
            return Err(bad(&format!("messages[{i}]"), "expected an object"));
        }
        Ok(ClientBody { fields: body.fields, system: body.system, messages })
    }

    /// `"stream": true`.
    pub fn streams(&self) -> bool {
        self.fields.iter().any(|(k, v)| *k == "stream" && v.get() == "true")
    }
}

struct Parts<'a> {
    fields: Vec<(&'a str, &'a RawValue)>,
    system: Option<&'a RawValue>,
    messages: Option<Vec<&'a RawValue>>,
}

const EXPECTED_MESSAGES: &str = "`messages`: an array of message objects";

/// `messages` read straight into its elements: one scan of the body, not two.
struct Messages<'a>(Vec<&'a RawValue>);

impl<'de> serde::Deserialize<'de> for Messages<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Messages<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(EXPECTED_MESSAGES)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Messages<'de>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(64));
                while let Some(m) = seq.next_element::<&'de RawValue>()? {
                    out.push(m);
                }
                Ok(Messages(out))
            }
        }
        d.deserialize_seq(V)
    }
}

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = Parts<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parts<'de>, A::Error> {
        let mut parts = Parts { fields: Vec::new(), system: None, messages: None };
        while let Some(key) = map.next_key::<&'de str>()? {
            match key {
                "messages" => parts.messages = Some(map.next_value::<Messages<'de>>()?.0),
                "system" => parts.system = Some(map.next_value()?),
                _ => parts.fields.push((key, map.next_value()?)),
            }
        }
        Ok(parts)
    }
}

/// The `role` of a raw message, read without parsing the rest.
pub(crate) fn role_of(raw: &RawValue) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Role {
        role: String,
    }
    serde_json::from_str::<Role>(raw.get()).ok().map(|r| r.role)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fields_system_and_messages_in_order() {
        let b = br#"{"model":"m","system":"be brief","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
        let body = ClientBody::parse(b).unwrap();
        assert_eq!(body.fields.iter().map(|(k, _)| *k).collect::<Vec<_>>(), ["model", "stream"]);
        assert_eq!(body.system.unwrap().get(), r#""be brief""#);
        assert_eq!(body.messages[0].get(), r#"{"role":"user","content":"hi"}"#);
        assert!(body.streams());
    }

    #[test]
    fn names_the_bad_field() {
        let e = |b: &[u8]| ClientBody::parse(b).err().unwrap().field;
        assert_eq!(e(b"{"), "body");
        assert_eq!(e(br#"{"model":"m"}"#), "messages");
        assert_eq!(e(br#"{"messages":{}}"#), "messages");
        assert_eq!(e(br#"{"messages":[]}"#), "messages");
        assert_eq!(e(br#"{"messages":[{"role":"user"},3]}"#), "messages[1]");
        assert_eq!(e(br#"{"messages":[]} trailing"#), "body");
        assert_eq!(e(b"[1]"), "body");
    }
}
