//! An agent session whose summaries a model writes: every call committed with its request
//! record (model, tools, breakpoints), every summary job fulfilled through
//! `start_summary`/`finish_summary` against the [`crate::provider::FakeProvider`] (so each
//! summary reports the usage a prompt cache would give it), in fork, standalone or auto mode,
//! with one failed attempt on the way. Shared by the summary tests and the golden set v5.

use ctxlog::config::Config;
use ctxlog::event::{SummaryFailure, SummaryMode};
use ctxlog::request::{CacheTtl, RequestOptions};
use ctxlog::session::{SummaryFinished, SummaryOutcome};
use ctxlog::summary_call::SummaryCall;
use ctxlog::{Message, Session, Store, StreamId, Timestamp, Usage, WireFormat};
use serde_json::json;

use crate::provider::{Api, FakeProvider};

/// First timestamp of the session.
pub const T0: u64 = 1_767_225_600_000;

/// The tools every call sends.
pub const TOOLS: &str = r#"[{"name":"read_file","description":"Read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}]"#;

/// The options every call sends.
pub fn options() -> RequestOptions {
    RequestOptions::new()
        .model("claude-sonnet-4-5")
        .max_tokens(4_096)
        .tools(TOOLS)
        .unwrap()
        .cache_breakpoints(CacheTtl::FiveMinutes)
}

/// Parses a message.
pub fn msg(v: serde_json::Value) -> Message {
    ctxlog::internal::wire::parse_message(&v.to_string()).unwrap()
}

/// About `bytes` of source code, different for each `seed`.
pub fn code(seed: usize, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 80);
    let mut j = 0;
    while out.len() < bytes {
        out.push_str(&format!("fn handler_{seed}_{j}(r: &Request) -> Response {{ route(r, {j}).with_id({seed}) }}\n"));
        j += 1;
    }
    out
}

/// One turn: a tool call, its 1,500-byte result, an answer, the next question.
pub fn turn(i: usize) -> Vec<Message> {
    let id = format!("toolu_{i:03}");
    vec![
        msg(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Reading handler {i}.")},
            {"type": "tool_use", "id": id, "name": "read_file", "input": {"path": format!("src/h{i}.rs")}}
        ]})),
        msg(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": code(i, 1_500)}
        ]})),
        msg(json!({"role": "assistant", "content": format!("Handler {i} ported to the new router.")})),
        msg(json!({"role": "user", "content": format!("Good. Now handler {}.", i + 1)})),
    ]
}

/// A session started with a system prompt and the first question (budget 6,000 tokens).
pub fn start<S: Store>(store: S, id: StreamId) -> Session<S> {
    let config = Config { budget: 6_000, ..Config::default() };
    let mut s = Session::create(store, id, WireFormat::Anthropic, config, Timestamp::from_millis(T0)).unwrap();
    s.append(vec![
        msg(json!({"role": "system", "content": format!("You are a coding agent.\n{}", code(0, 1_200))})),
        msg(json!({"role": "user", "content": "PROJECT PATH IS ~/src/ora. Port every handler to the new router."})),
    ])
    .unwrap();
    s
}

/// One call: plan, render, send to `provider`, commit with the request record.
pub fn call<S: Store>(s: &mut Session<S>, provider: &mut FakeProvider, at: u64) -> ctxlog::Committed {
    let plan = s.plan(Timestamp::from_millis(at)).unwrap();
    let opts = options();
    let request = s.request(&plan, &opts).unwrap();
    let usage = provider.send(request.body(), at);
    s.commit_request(plan, &opts, Timestamp::from_millis(at), Some(Usage::from_anthropic(&usage).unwrap())).unwrap()
}

/// What [`run`] did with each attempt: (mode used, refusal, failed).
pub type Attempt = (SummaryMode, Option<String>, bool);

/// `calls` calls 20 s apart; between calls every summary job is asked of the fake provider in
/// `mode` (the attempt numbered `fail_at`, if any, times out). Returns the attempts.
pub fn run<S: Store>(s: &mut Session<S>, calls: usize, mode: SummaryMode, fail_at: Option<usize>) -> Vec<Attempt> {
    let mut provider = FakeProvider::new(Api::Anthropic);
    // The fake keeps one cached prefix (the previous request's); a real cache keeps every
    // prefix within its TTL. A standalone request shares no prefix with the main line, so it
    // goes to a provider of its own and does not evict the main line's.
    let mut other = FakeProvider::new(Api::Anthropic);
    let mut attempts = Vec::new();
    let mut at = T0;
    for i in 0..calls {
        at += 20_000;
        s.append(turn(i)).unwrap();
        call(s, &mut provider, at);
        while let Some(job) = s.summary_job() {
            let attempt = s.start_summary(&job, &SummaryCall::new(mode)).unwrap();
            let (used, refusal) =
                (attempt.request.mode_used, attempt.request.refusal.as_ref().map(|r| r.name().into()));
            let outcome = if fail_at == Some(attempts.len()) {
                SummaryOutcome::failed(SummaryFailure::Timeout).latency_ms(30_000)
            } else {
                at += 2_000;
                let usage = match used {
                    SummaryMode::Fork => provider.send(attempt.request.body(), at),
                    _ => other.send(attempt.request.body(), at),
                };
                SummaryOutcome::text(format!("Handlers up to seq {} ported; the router is in src/router.rs.", job.to))
                    .usage(Some(Usage::from_anthropic(&usage).unwrap()))
                    .latency_ms(1_800)
            };
            let failed = matches!(s.finish_summary(attempt, outcome).unwrap(), SummaryFinished::Failed { .. });
            attempts.push((used, refusal, failed));
            if failed {
                break;
            }
        }
    }
    attempts
}
