//! A Gemini agent session through the library: a `systemInstruction`, a user turn, then per
//! call a `model` turn with a `functionCall` (carrying its `thoughtSignature`) or text, the
//! function's long `functionResponse` in the next `user` turn, and a screenshot now and then.
//! Each call is planned, rendered as a Gemini request, committed with the answer's content and
//! the usage the strict fake's rules would give, and the extractive summarizer runs after it.
//! Shared by the Gemini tests.

use ctxlog::config::Config;
use ctxlog::internal::wire::gemini::parse_content_at;
use ctxlog::request::RequestOptions;
use ctxlog::session::Produced;
use ctxlog::{Message, Session, Store, StreamId, Timestamp, Usage, WireFormat};
use serde_json::{json, Value};

/// First timestamp of the session.
pub const T0: u64 = 1_767_225_600_000;

/// The tools every call sends.
pub const TOOLS: &str = r#"[{"functionDeclarations":[{"name":"read_file","description":"Read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}]}]"#;

/// The options every call sends (the model is in the URL, not the body).
pub fn options() -> RequestOptions {
    RequestOptions::new()
        .field("generationConfig", r#"{"temperature":0,"maxOutputTokens":1024}"#)
        .unwrap()
        .field("tools", TOOLS)
        .unwrap()
}

/// Parses a content at its position in `contents` (its seq, the system instruction first).
pub fn content(v: Value, seq: u64) -> Message {
    parse_content_at(&v.to_string(), seq).unwrap()
}

/// The session, with its system instruction and first user turn appended.
pub fn start<S: Store>(store: S, id: StreamId) -> Session<S> {
    start_with(store, id, Config { budget: 8_000, ..Config::default() })
}

/// [`start`] with other knobs.
pub fn start_with<S: Store>(store: S, id: StreamId, config: Config) -> Session<S> {
    let mut s = Session::create(store, id, WireFormat::Gemini, config, Timestamp::from_millis(T0)).unwrap();
    s.append(vec![
        content(json!({"role": "system", "parts": [{"text": "You are a coding agent. Be brief."}]}), 0),
        content(json!({"role": "user", "parts": [{"text": "Port every handler to the new router."}]}), 1),
    ])
    .unwrap();
    s
}

/// The model's answer to call `i`.
pub fn answer(i: usize) -> Value {
    if i % 3 == 2 {
        json!({"role": "model", "parts": [{"text": format!("Handler {i} is ported.")}]})
    } else {
        json!({"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {"path": format!("src/h{i}.rs")}},
            "thoughtSignature": format!("c2lnbmF0dXJl{i:03}+/==")}]})
    }
}

/// What the client sends after answer `i` (and the answer itself): the function's response, or the next user turn
/// (with a screenshot every fourth turn).
pub fn next_input(i: usize) -> Value {
    if i % 3 == 2 {
        let mut parts = vec![json!({"text": format!("Next: handler {}.", i + 1)})];
        if i.is_multiple_of(4) {
            parts.push(json!({"inlineData": {"mimeType": "image/png", "data": crate::engine_fixtures::PNG_1X1}}));
        }
        json!({"role": "user", "parts": parts})
    } else {
        let body = format!("fn handler_{i}(r: &Request) -> Response {{ route(r) }}\n").repeat(40);
        json!({"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {"output": body}}}]})
    }
}

/// Runs `calls` calls; returns each call's request body.
pub fn run<S: Store>(s: &mut Session<S>, calls: usize) -> Vec<Vec<u8>> {
    let opts = options();
    let mut bodies = Vec::new();
    for i in 0..calls {
        let now = Timestamp::from_millis(T0 + 30_000 * (i as u64 + 1));
        let plan = s.plan(now).unwrap();
        let request = s.request(&plan, &opts).unwrap();
        let prompt = (request.body().len() as u64).div_ceil(4);
        bodies.push(request.into_body());
        let usage = Usage { input: prompt, cache_read: 0, cache_write: 0, output: 12 };
        let at = s.state().message_count();
        let answered = content(answer(i), at - 1);
        s.commit_answered(plan, &opts, Timestamp::from_millis(now.as_millis() + 2_000), Some(usage), answered).unwrap();
        while let Some(job) = s.summary_job() {
            let text = s.summarize(&job).unwrap();
            if !matches!(s.prepare(&job, text, Produced::extractive()).unwrap(), ctxlog::session::Prepared::Written(_))
            {
                break;
            }
        }
        // The client sends the answer back, then its reply (positions in `contents`).
        let at = s.state().message_count() - 1;
        s.append(vec![content(answer(i), at), content(next_input(i), at + 1)]).unwrap();
    }
    bodies
}
