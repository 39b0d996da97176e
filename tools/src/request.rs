//! `ctxlog request`: the request body a past call served, rebuilt byte for byte from the log
//! (what `ctxlog proxy` forwarded for that call, when given the client's other fields).

use std::path::Path;

use ctxlog::replay::served_request;
use ctxlog::{RequestOptions, SessionError};
use serde_json::value::RawValue;

use crate::args::RequestArgs;
use crate::error::CliError;
use crate::output::Out;
use crate::session_id::pick_session;
use crate::stores::{open_store, Access};

/// Prints the body of call `--call` of the session, exactly as it was served (no newline).
pub fn request(a: &RequestArgs, out: &mut Out<'_>) -> Result<(), CliError> {
    let opts = match &a.fields_from {
        Some(path) => options_from(path)?,
        None => RequestOptions::new(),
    };
    let store = open_store(&a.session.store.store, Access::ReadOnly)?;
    let id = pick_session(store.as_ref(), a.session.session.as_deref())?;
    let served = served_request(store.as_ref(), id, a.call, &opts).map_err(|e| match e {
        SessionError::NoSuchCall { calls, .. } => CliError::Flag {
            flag: "--call",
            message: format!("--call {}: session {id} has no such call (it served {calls})", a.call),
        },
        e => e.into(),
    })?;
    if a.session.store.json {
        let doc = serde_json::json!({
            "session": id.to_string(),
            "call": a.call,
            "view_digest": served.view_digest(),
            "bytes": served.body().len(),
        });
        return out.line(&doc.to_string());
    }
    out.raw(served.body())
}

/// The top-level fields of a client's request body other than its history (`system` and
/// `messages`, `instructions` and `input`, or `systemInstruction` and `contents`), in its
/// order and set one by one, as `ctxlog proxy` builds them (a repeated key keeps its first
/// place and its last value).
fn options_from(path: &Path) -> Result<RequestOptions, CliError> {
    let file = path.display().to_string();
    let bad = |field: &str, message: String| CliError::Input {
        file: file.clone(),
        line: 0,
        field: Some(field.to_owned()).filter(|f| !f.is_empty()),
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| bad("", format!("cannot read it: {e}")))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| bad("", format!("not UTF-8: {e}")))?;
    let fields: Vec<(String, Box<RawValue>)> =
        serde_json::from_str::<Fields>(text).map_err(|e| bad("", format!("not a JSON object: {e}")))?.0;
    let mut opts = RequestOptions::new();
    for (k, v) in &fields {
        // The history fields are the view's (Responses: `instructions`, `input`; Gemini:
        // `systemInstruction`, `contents`).
        if matches!(k.as_str(), "system" | "messages" | "instructions" | "input" | "systemInstruction" | "contents") {
            continue;
        }
        opts = opts.field(k, v.get()).map_err(|e| bad(&e.field, e.to_string()))?;
    }
    Ok(opts)
}

/// A JSON object's entries in order, values as their raw bytes.
struct Fields(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    out.push(entry);
                }
                Ok(Fields(out))
            }
        }
        d.deserialize_map(V)
    }
}
