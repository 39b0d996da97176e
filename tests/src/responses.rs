//! An OpenAI Responses agent session through the library: `instructions`, a user item, then
//! per call a `reasoning` item with `encrypted_content` and a `function_call` (or a message), the
//! function's long output, and a new user turn; the provider's `compaction` item arrives in one
//! answer and the client keeps it. Each call is planned, rendered as a Responses request,
//! committed with the answer's output items and the usage the strict fake's rules would give,
//! and the extractive summarizer runs after it. Shared by the Responses tests and the golden
//! set v6.

use ctxlog::config::Config;
use ctxlog::internal::wire::responses::parse_item;
use ctxlog::request::RequestOptions;
use ctxlog::session::Produced;
use ctxlog::{Message, Session, Store, StreamId, Timestamp, Usage, WireFormat};
use serde_json::{json, Value};

/// First timestamp of the session.
pub const T0: u64 = 1_767_225_600_000;
/// The call whose answer carries the provider's compaction item.
pub const COMPACTION_CALL: usize = 9;

/// The tools every call sends.
pub const TOOLS: &str = r#"[{"type":"function","name":"read_file","description":"Read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}]"#;

/// The options every call sends.
pub fn options() -> RequestOptions {
    RequestOptions::new().model("gpt-5").field("store", "false").unwrap().tools(TOOLS).unwrap()
}

/// Parses an item.
pub fn item(v: Value) -> Message {
    parse_item(&v.to_string()).unwrap()
}

/// The session, with its instructions and first user item appended.
pub fn start<S: Store>(store: S, id: StreamId) -> Session<S> {
    let config = Config { budget: 12_000, ..Config::default() };
    let mut s = Session::create(store, id, WireFormat::OpenAiResponses, config, Timestamp::from_millis(T0)).unwrap();
    s.append(vec![
        item(json!({"type": "instructions", "role": "system", "content": "You are a coding agent. Be brief."})),
        item(json!({"role": "user", "content": [{"type": "input_text", "text": "Port every handler to the new router."}]})),
    ])
    .unwrap();
    s
}

/// The provider's answer to call `i`: its output items.
pub fn answer(i: usize) -> Vec<Value> {
    let mut out = Vec::new();
    if i == COMPACTION_CALL {
        out.push(json!({"id": format!("cmp_{i:03}"), "type": "compaction", "encrypted_content": format!("gAAAA{i:03}+/compacted==")}));
    }
    if i % 3 == 2 {
        out.push(json!({"id": format!("msg_{i:03}"), "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "text": format!("Handler {i} is ported.")}]}));
    } else {
        out.push(json!({"id": format!("rs_{i:03}"), "type": "reasoning", "summary": [], "encrypted_content": format!("gAAAA{i:03}/reasoned=")}));
        out.push(json!({"id": format!("fc_{i:03}"), "type": "function_call", "status": "completed",
            "arguments": format!("{{\"path\":\"src/h{i}.rs\"}}"), "call_id": format!("call_{i:03}"), "name": "read_file"}));
    }
    out
}

/// What the client sends after answer `i`: the answer's items, then the function's output or
/// the next user turn.
pub fn next_input(i: usize) -> Vec<Message> {
    let mut items: Vec<Message> = answer(i).into_iter().map(item).collect();
    if i % 3 == 2 {
        items.push(item(json!({"role": "user", "content": format!("Next: handler {}.", i + 1)})));
    } else {
        let body = format!("fn handler_{i}(r: &Request) -> Response {{ route(r) }}\n").repeat(40);
        items.push(item(json!({"type": "function_call_output", "call_id": format!("call_{i:03}"), "output": body})));
    }
    items
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
        let usage = Usage { input: prompt, cache_read: 0, cache_write: 0, output: 40 };
        let answers = answer(i).into_iter().map(item).collect();
        s.commit_answers(plan, &opts, Timestamp::from_millis(now.as_millis() + 2_000), Some(usage), answers).unwrap();
        while let Some(job) = s.summary_job() {
            let text = s.summarize(&job).unwrap();
            if !matches!(s.prepare(&job, text, Produced::extractive()).unwrap(), ctxlog::session::Prepared::Written(_))
            {
                break;
            }
        }
        s.append(next_input(i)).unwrap();
    }
    bodies
}
