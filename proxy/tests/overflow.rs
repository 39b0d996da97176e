//! Overflow recovery through the proxy, against the strict fake (issue 22): a request the
//! provider refuses as too long for the model's context is recorded (`CallRejected`), the
//! model's limit learned (`LimitLearned`), the call re-planned within it and sent once more,
//! and the client gets the answer — for Anthropic's "prompt is too long", OpenAI's
//! `context_length_exceeded` and llama.cpp's `exceed_context_size_error`. The limit holds for
//! the session's later calls, also after the proxy restarts (it is in the log).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use bytes::Bytes;
use ctxlog::{Event, MemoryStore, Store, StreamId};
use ctxlog_fake_upstream::FakeUpstream;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

mod support;
use support::{calls, events, proxy_on, served, KEY};

const CONTEXT: u64 = 4_000;

#[derive(Clone, Copy, PartialEq)]
enum Api {
    Anthropic,
    OpenAi,
}

async fn post(addr: std::net::SocketAddr, api: Api, body: &Value) -> (u16, StreamId, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = match api {
        Api::Anthropic => Request::post(format!("http://{addr}/v1/messages"))
            .header("x-api-key", KEY)
            .header("anthropic-version", "2023-06-01"),
        Api::OpenAi => Request::post(format!("http://{addr}/v1/chat/completions"))
            .header("authorization", "Bearer sk-openai-overflow-test"),
    };
    let req = req
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let stream = resp.headers().get("x-ctxlog-stream").unwrap().to_str().unwrap().parse().unwrap();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, stream, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// An agent's history: the task, then per step a tool call and a ~1.2 KB result.
struct Agent {
    api: Api,
    messages: Vec<Value>,
}

impl Agent {
    fn new(api: Api) -> Self {
        let task = json!({"role": "user", "content": "TASK-91: port the ledger; keep the error codes stable."});
        Agent { api, messages: vec![task] }
    }

    fn step(&mut self, i: usize) {
        let output: String =
            (0..200).map(|w| format!("v{i}x{}", (w * 7919 + i * 104_729) % 1_000_003)).collect::<Vec<_>>().join(" ");
        let id = format!("call_{i}");
        match self.api {
            Api::Anthropic => {
                self.messages.push(json!({"role": "assistant", "content": [
                    {"type": "text", "text": format!("Reading module {i}.")},
                    {"type": "tool_use", "id": id, "name": "read_file", "input": {"path": format!("src/m{i}.rs")}}
                ]}));
                self.messages.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": output}
                ]}));
            }
            Api::OpenAi => {
                self.messages.push(json!({"role": "assistant", "content": format!("Reading module {i}."), "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": "read_file", "arguments": format!("{{\"path\":\"src/m{i}.rs\"}}")}}
                ]}));
                self.messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
            }
        }
    }

    fn body(&self) -> Value {
        match self.api {
            Api::Anthropic => json!({"model": "claude-test", "max_tokens": 64, "messages": self.messages}),
            Api::OpenAi => json!({"model": "gpt-test", "messages": self.messages}),
        }
    }
}

fn rejected(evs: &[Event]) -> Vec<&ctxlog::event::CallRejected> {
    evs.iter().filter_map(|e| if let Event::CallRejected(r) = e { Some(r) } else { None }).collect()
}

fn learned(evs: &[Event]) -> Vec<&ctxlog::event::LimitLearned> {
    evs.iter().filter_map(|e| if let Event::LimitLearned(l) = e { Some(l) } else { None }).collect()
}

/// Drives `steps` calls; every one must reach the client as a 200.
async fn drive(p: &ctxlog_proxy::ProxyHandle, agent: &mut Agent, from: usize, steps: usize) -> StreamId {
    let mut id = None;
    for i in from..from + steps {
        agent.step(i);
        let (status, stream, body) = post(p.addr(), agent.api, &agent.body()).await;
        assert_eq!(status, 200, "step {i}: the client got {body}");
        id = Some(stream);
    }
    id.unwrap()
}

async fn recovers(api: Api, llama: bool) {
    let up = FakeUpstream::start().unwrap();
    up.set_context_tokens(Some(CONTEXT));
    up.speak_llama_cpp(llama);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // The proxy's budget is far above the model's real window: only the provider knows it.
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.engine.budget = 200_000).await;
    let mut agent = Agent::new(api);
    let id = drive(&p, &mut agent, 0, 24).await;
    let evs = calls(&*store, id, 24).await;
    p.shutdown().await;

    // The fake refused one request, with its own text; the proxy recorded it and learned.
    let refusals: Vec<_> = up.requests().into_iter().filter(|x| x.response.status != 200).collect();
    assert_eq!(refusals.len(), 1, "one overflow, then every call within the learned limit");
    let r = rejected(&evs);
    assert_eq!(r.len(), 1);
    let r = r[0];
    assert!(r.overflow && r.status == 400, "{r:?}");
    assert_eq!(r.limit, Some(CONTEXT));
    let n = r.prompt_tokens.expect("the provider's count");
    assert!(n > CONTEXT);
    let expected = match (api, llama) {
        (Api::Anthropic, _) => "invalid_request_error",
        (Api::OpenAi, false) => "context_length_exceeded",
        (Api::OpenAi, true) => "exceed_context_size_error",
    };
    assert_eq!(r.error, expected);
    let l = learned(&evs);
    assert_eq!(l.len(), 1);
    assert_eq!((l[0].call, l[0].limit), (r.call, CONTEXT));
    assert!(l[0].budget < CONTEXT && l[0].budget == ctxlog::overflow::learned_budget(CONTEXT, Some(n), r.view_tokens));
    // The retried call is served with the rejected call's number, compacted to fit.
    let s = served(&evs);
    let retry = s.iter().find(|c| c.call == r.call).expect("the refused call was served on its retry");
    assert!(retry.view_tokens <= l[0].budget, "{} over {}", retry.view_tokens, l[0].budget);
    // The rejection comes first in the log, then the served retry.
    let at = |pred: &dyn Fn(&Event) -> bool| evs.iter().position(pred).unwrap();
    assert!(
        at(&|e| matches!(e, Event::CallRejected(_)))
            < at(&|e| matches!(e, Event::RequestServed(x) if x.call == r.call))
    );
    for c in s.iter().filter(|c| c.call >= r.call) {
        assert!(c.view_tokens <= l[0].budget, "call {} over the learned budget", c.call);
    }
    // `replay` shows it on the call it preceded.
    let timeline = ctxlog::replay::replay(&*store, id, ctxlog::replay::Mode::Strict, None).unwrap().timeline;
    let rec = timeline.iter().find(|c| c.call == r.call).unwrap();
    assert_eq!(rec.rejected.len(), 1);
    assert_eq!(rec.rejected[0].learned_budget, Some(l[0].budget));
    assert_eq!(rec.budget, l[0].budget, "the timeline states the budget in force");
    assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());

    // A restart: the budget is read back from the log; no call overflows again.
    let before = up.requests().len();
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.engine.budget = 200_000).await;
    let again = drive(&p, &mut agent, 24, 6).await;
    assert_eq!(again, id, "the same session");
    calls(&*store, id, 30).await;
    p.shutdown().await;
    let after: Vec<_> = up.requests().into_iter().skip(before).collect();
    assert_eq!(after.len(), 6);
    assert!(after.iter().all(|x| x.response.status == 200), "a call overflowed after the restart");
    assert_eq!(rejected(&events(&*store, id)).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_prompt_too_long_is_recorded_learned_compacted_and_retried_once() {
    recovers(Api::Anthropic, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_context_length_exceeded_is_recorded_learned_compacted_and_retried_once() {
    recovers(Api::OpenAi, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpp_exceed_context_size_error_is_recorded_learned_compacted_and_retried_once() {
    recovers(Api::OpenAi, true).await;
}

/// A refusal that is not an overflow is recorded and reaches the client as the provider sent
/// it: no retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_other_refusal_is_recorded_and_passed_on_without_a_retry() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |_| {}).await;
    // No max_tokens: Anthropic's 400 "max_tokens: Field required".
    let body = json!({"model": "claude-test", "messages": [{"role": "user", "content": "hello"}]});
    let (status, id, answer) = post(p.addr(), Api::Anthropic, &body).await;
    p.shutdown().await;
    assert_eq!(status, 400);
    assert_eq!(answer["error"]["message"], "max_tokens: Field required");
    assert_eq!(up.requests().len(), 1, "not retried");
    let evs = events(&*store, id);
    let r = rejected(&evs);
    assert_eq!(r.len(), 1);
    assert!(!r[0].overflow);
    assert_eq!((r[0].status, r[0].message.as_str()), (400, "max_tokens: Field required"));
    assert!(learned(&evs).is_empty() && served(&evs).is_empty());
    let trailing = ctxlog::replay::replay(&*store, id, ctxlog::replay::Mode::Strict, None).unwrap().trailing;
    assert_eq!(trailing.rejected.len(), 1, "replay shows the refusal after the last call");
}

/// What one session learned about a model, a new session of that model starts with: it never
/// overflows to find out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_of_the_model_starts_within_the_learned_limit() {
    let up = FakeUpstream::start().unwrap();
    up.set_context_tokens(Some(CONTEXT));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| c.engine.budget = 200_000).await;
    let mut first = Agent::new(Api::Anthropic);
    let a = drive(&p, &mut first, 0, 24).await;
    let evs = calls(&*store, a, 24).await;
    let budget = learned(&evs)[0].budget;
    let refused = up.requests().iter().filter(|x| x.response.status != 200).count();
    let mut second = Agent::new(Api::Anthropic);
    second.messages[0] = json!({"role": "user", "content": "TASK-92: a different task, the same model."});
    let b = drive(&p, &mut second, 0, 24).await;
    assert_ne!(a, b, "a second session");
    let evs = calls(&*store, b, 24).await;
    p.shutdown().await;
    let Some(Event::SessionStarted(s)) = evs.first() else { panic!() };
    assert_eq!(s.config.budget, budget, "the new session starts within the learned limit");
    assert!(rejected(&evs).is_empty());
    assert_eq!(up.requests().iter().filter(|x| x.response.status != 200).count(), refused, "no new overflow");
}
