//! Long agent sessions through the proxy: the summary jobs run between calls keep every
//! forwarded view under the budget (and the first user message in it); without summaries the
//! same session does not stay under it. Model summarizers: attempts recorded, a slow one does
//! not hold the session's next call, a failing one is recorded and calls keep being served.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ctxlog::event::{SummaryFailure, SummaryMode};
use ctxlog::{Event, MemoryStore, RequestOptions, Store, StreamId, SummaryCall};
use ctxlog_fake_upstream::FakeUpstream;
use ctxlog_proxy::{ProxyConfig, ProxyHandle, Summaries};
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

mod support;
use support::{calls, events, proxy_on, served, KEY, SETTLE};

const ORIGIN: &str = "ORIGIN-TASK-7f3a: port the billing service to the new ledger API";

struct Answer {
    status: u16,
    stream: StreamId,
    seq: u64,
    body: Value,
}

async fn post(addr: std::net::SocketAddr, body: &Value) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{addr}/v1/messages"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let h = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let stream = h.get("x-ctxlog-stream").expect("no stream header").to_str().unwrap().parse().unwrap();
    let seq = h.get("request-id").unwrap().to_str().unwrap().strip_prefix("req_fake_").unwrap().parse().unwrap();
    Answer { status, stream, seq, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null) }
}

fn count(evs: &[Event], kind: &str) -> usize {
    evs.iter().filter(|e| e.name() == kind).count()
}

/// A tool result of about `words` words, different in every step.
fn tool_output(step: usize, words: usize) -> String {
    (0..words).map(|w| format!("f{step}x{}", (w * 7919 + step * 104_729) % 1_000_003)).collect::<Vec<_>>().join(" ")
}

/// The client's history: the task, then per step the assistant's reasoning and tool call and
/// the tool's result, or (every fourth step) the upstream's text answer and a human remark.
struct Agent {
    messages: Vec<Value>,
    words: usize,
}

impl Agent {
    fn new(words: usize) -> Self {
        Agent { messages: vec![json!({"role": "user", "content": ORIGIN})], words }
    }

    fn step(&mut self, i: usize, answer: &Value) {
        let said = answer["content"][0]["text"].as_str().unwrap_or("ok").to_owned();
        if i % 4 == 0 {
            // The upstream answered the last tool result with text: the human speaks next.
            self.messages.push(json!({"role": "assistant", "content": said}));
            let remark = format!(
                "Remark {i}: keep the error codes of module {i} stable; {}",
                "the downstream reconciliation jobs parse them and must not see a change in wording. ".repeat(4)
            );
            self.messages.push(json!({"role": "user", "content": remark}));
            return;
        }
        let reasoning = format!(
            "Step {i}: reading module {i} of the ledger port, then checking its callers. {}",
            "I compare the old and new signatures and note every mismatch before editing. ".repeat(3)
        );
        self.messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": reasoning},
            {"type": "tool_use", "id": format!("tu_{i}"), "name": "read_file", "input": {"path": format!("src/m{i}.rs")}}
        ]}));
        self.messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("tu_{i}"), "content": tool_output(i, self.words)}
        ]}));
    }

    fn body(&self) -> Value {
        json!({"model": "claude-test", "max_tokens": 64, "messages": self.messages})
    }
}

/// What a run found.
struct Run {
    store: Arc<dyn Store>,
    id: StreamId,
    evs: Vec<Event>,
    up: FakeUpstream,
    answers: Vec<Answer>,
}

async fn run_session(cfg: impl FnOnce(&mut ProxyConfig), steps: usize, words: usize) -> Run {
    run_session_on(Arc::new(MemoryStore::new()), cfg, steps, words).await
}

async fn run_session_on(store: Arc<dyn Store>, cfg: impl FnOnce(&mut ProxyConfig), steps: usize, words: usize) -> Run {
    let up = FakeUpstream::start().unwrap();
    let p = proxy_on(Arc::clone(&store), &up.url(), cfg).await;
    let mut agent = Agent::new(words);
    let mut answers = Vec::new();
    let mut last = Value::Null;
    for i in 0..steps {
        if i > 0 {
            agent.step(i, &last);
        }
        let a = post(p.addr(), &agent.body()).await;
        assert_eq!(a.status, 200, "call {i}: {}", a.body);
        last = a.body.clone();
        answers.push(a);
    }
    let id = answers[0].stream;
    assert!(answers.iter().all(|a| a.stream == id), "the session moved");
    let evs = calls(&*store, id, steps).await;
    p.shutdown().await;
    Run { store, id, evs, up, answers }
}

/// Every forwarded body is the request rebuilt from the log, holds the first user message,
/// and its view is under the budget; the log verifies.
fn check_under_budget(r: &Run, budget: u64) {
    let calls = served(&r.evs);
    assert_eq!(calls.len(), r.answers.len());
    let exchanges = r.up.requests();
    for (call, a) in calls.iter().zip(&r.answers) {
        let x = exchanges.iter().find(|x| x.seq == a.seq).unwrap();
        let rebuilt = ctxlog::replay::served_request(
            &*r.store,
            r.id,
            call.call,
            &RequestOptions::from_client_body(&x.request.body).unwrap(),
        )
        .unwrap();
        assert!(
            rebuilt.body() == x.request.body.as_slice(),
            "call {}: the forwarded body is not the logged one",
            call.call
        );
        let body: Value = serde_json::from_slice(&x.request.body).unwrap();
        // A string, or the one text block it is to the API when the proxy marked it.
        let first = &body["messages"][0]["content"];
        let text =
            first.as_str().or_else(|| first[0]["text"].as_str().filter(|_| first.as_array().map(Vec::len) == Some(1)));
        assert_eq!(text, Some(ORIGIN), "call {}: the first user message is gone", call.call);
        assert!(
            call.view_tokens <= budget,
            "call {}: view of {} tokens over the budget {budget}",
            call.call,
            call.view_tokens
        );
    }
    let report = ctxlog::replay::verify(&*r.store, r.id).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_session_stays_under_a_small_budget_with_the_default_summaries() {
    let budget = 6_000;
    // The legacy gate (the default before issue 21): calls come back to back, so the cache-aware
    // default would defer every flush to its hard limit and then run the ladder down to the
    // target; this test is about flushes alone keeping the view small.
    let r = run_session(
        |c| {
            c.engine.budget = budget;
            c.engine.cache_aware = false;
        },
        120,
        120,
    )
    .await;
    check_under_budget(&r, budget);
    assert!(count(&r.evs, "SummaryPrepared") >= 3, "too few summaries: {}", count(&r.evs, "SummaryPrepared"));
    assert!(count(&r.evs, "Flushed") >= 3, "too few flushes: {}", count(&r.evs, "Flushed"));
    // Flushes alone kept the view under the trigger: the ladder never had to remove anything.
    assert!(served(&r.evs).iter().all(|s| s.level == 0), "the ladder ran although summaries were on");
    // The session is several budgets long.
    let appended = r.appended_tokens();
    assert!(appended > 3 * budget, "the session is not long: {appended} tokens");
}

/// What a [`Watched`] store was asked, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Lease,
    Release,
    /// An append that wrote versions `.0..=.1`.
    Append(u64, u64),
}

/// A memory store that records its leases, their release and its appends, in order.
struct Watched {
    inner: MemoryStore,
    ops: Arc<Mutex<Vec<Op>>>,
}

struct Released(Arc<Mutex<Vec<Op>>>);

impl Drop for Released {
    fn drop(&mut self) {
        self.0.lock().unwrap().push(Op::Release);
    }
}

impl Watched {
    fn wrote(
        &self,
        records: &[ctxlog::store::Record],
        head: Result<u64, ctxlog::StoreError>,
    ) -> Result<u64, ctxlog::StoreError> {
        if let Ok(v) = head {
            if !records.is_empty() {
                self.ops.lock().unwrap().push(Op::Append(v + 1 - records.len() as u64, v));
            }
        }
        head
    }
}

impl Store for Watched {
    fn append(
        &self,
        stream: StreamId,
        expected: ctxlog::store::ExpectedVersion,
        records: &[ctxlog::store::Record],
    ) -> Result<u64, ctxlog::StoreError> {
        let head = self.inner.append(stream, expected, records);
        self.wrote(records, head)
    }
    fn append_unsynced(
        &self,
        stream: StreamId,
        expected: ctxlog::store::ExpectedVersion,
        records: &[ctxlog::store::Record],
    ) -> Result<u64, ctxlog::StoreError> {
        let head = self.inner.append_unsynced(stream, expected, records);
        self.wrote(records, head)
    }
    fn read(
        &self,
        stream: StreamId,
        from: u64,
        max: usize,
    ) -> Result<Vec<ctxlog::store::StoredRecord>, ctxlog::StoreError> {
        self.inner.read(stream, from, max)
    }
    fn head(&self, stream: StreamId) -> Result<Option<u64>, ctxlog::StoreError> {
        self.inner.head(stream)
    }
    fn streams(&self) -> Result<Vec<StreamId>, ctxlog::StoreError> {
        self.inner.streams()
    }
    fn put_snapshot(&self, stream: StreamId, snap: &ctxlog::store::Snapshot) -> Result<(), ctxlog::StoreError> {
        self.inner.put_snapshot(stream, snap)
    }
    fn get_snapshot(&self, stream: StreamId) -> Result<Option<ctxlog::store::Snapshot>, ctxlog::StoreError> {
        self.inner.get_snapshot(stream)
    }
    fn put_blob(&self, bytes: &[u8]) -> Result<ctxlog::store::BlobId, ctxlog::StoreError> {
        self.inner.put_blob(bytes)
    }
    fn get_blob(&self, id: &ctxlog::store::BlobId) -> Result<Option<Vec<u8>>, ctxlog::StoreError> {
        self.inner.get_blob(id)
    }
    /// Exclusive, as a real store's lease (one session here): taken only while none is held,
    /// decided under the same lock that records it, so the log of ops is the leases' order.
    fn try_lease(&self, _stream: StreamId) -> Result<Option<ctxlog::Lease>, ctxlog::StoreError> {
        let mut ops = self.ops.lock().unwrap();
        let held: i32 = ops.iter().map(|op| i32::from(*op == Op::Lease) - i32::from(*op == Op::Release)).sum();
        if held > 0 {
            return Ok(None);
        }
        ops.push(Op::Lease);
        Ok(Some(ctxlog::Lease::new(Released(Arc::clone(&self.ops)))))
    }
}

/// Every write to a session is made under its store lease: a call's messages and commit, and
/// the summaries prepared after it. A summary written after the lease's release could land
/// between another proxy's plan and its commit, and that call, already answered upstream,
/// would fail to commit (issue 19: the fleet's racing calls). The lease goes as soon as the
/// last write is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_to_a_session_holds_its_lease() {
    let ops = Arc::new(Mutex::new(Vec::new()));
    let store: Arc<dyn Store> = Arc::new(Watched { inner: MemoryStore::new(), ops: Arc::clone(&ops) });
    let budget = 6_000;
    let r = run_session_on(store, |c| c.engine.budget = budget, 60, 120).await;
    check_under_budget(&r, budget);
    let kind_at = |v: u64| r.evs.get(usize::try_from(v - 1).unwrap()).map(Event::name);
    let ops = ops.lock().unwrap().clone();
    let (mut held, mut summaries, mut calls) = (0i32, 0, 0);
    for op in ops {
        match op {
            Op::Lease => held += 1,
            Op::Release => held -= 1,
            Op::Append(from, to) => {
                for v in from..=to {
                    let kind = kind_at(v);
                    assert_eq!(held, 1, "version {v} ({kind:?}) written without the session's lease");
                    match kind {
                        Some("SummaryPrepared") => summaries += 1,
                        Some("RequestServed") => calls += 1,
                        _ => {}
                    }
                }
            }
        }
    }
    assert_eq!(held, 0, "a lease was never released");
    assert!(summaries >= 1, "no summaries were written: the test shows nothing");
    assert_eq!(calls, 60);
}

impl Run {
    /// Tokens of every message the session appended (what a view without compaction holds).
    fn appended_tokens(&self) -> u64 {
        self.evs.iter().map(|e| if let Event::MessageAppended(m) = e { u64::from(m.tokens) } else { 0 }).sum()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_summaries_the_same_session_outgrows_its_budget() {
    let budget = 6_000;
    let r = run_session(
        |c| {
            c.engine.budget = budget;
            c.summaries = Summaries::Off;
        },
        120,
        120,
    )
    .await;
    assert_eq!(count(&r.evs, "SummaryPrepared"), 0);
    // The ladder removes messages instead, more and more often, and its floor ends above the
    // target it aims at (the ladder could not reach it).
    let target = budget / 2;
    let laddered = served(&r.evs).iter().filter(|s| s.level > 0).count();
    let floor_above = served(&r.evs).iter().filter(|s| s.level > 0 && s.view_tokens > target).count();
    assert!(laddered >= 10, "the ladder ran {laddered} times only");
    assert!(floor_above >= 5, "the ladder reached its target {floor_above}");
}

/// `Config::default()` unchanged (200,000 tokens), a session several budgets long (big tool
/// results): the same guarantees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_several_default_budgets_long_stays_under_it() {
    let budget = ctxlog::Config::default().budget;
    let r = run_session(|_| {}, 130, 2_500).await;
    let appended = r.appended_tokens();
    assert!(appended > 3 * budget, "the session is not long: {appended} tokens");
    check_under_budget(&r, budget);
    assert!(count(&r.evs, "SummaryPrepared") >= 1);
    assert!(count(&r.evs, "Flushed") >= 1);
}

/// A model summarizer in the test: answers a short summary, or fails, and can be held until
/// the test releases it (counting the attempts it started).
struct TestModel {
    fail: bool,
    started: AtomicUsize,
    /// While set, `complete` waits until it is cleared.
    hold: Mutex<bool>,
    released: std::sync::Condvar,
}

impl TestModel {
    fn new(fail: bool, hold: bool) -> Arc<Self> {
        Arc::new(TestModel {
            fail,
            started: AtomicUsize::new(0),
            hold: Mutex::new(hold),
            released: std::sync::Condvar::new(),
        })
    }
    fn release(&self) {
        *self.hold.lock().unwrap() = false;
        self.released.notify_all();
    }
}

impl ctxlog_llm::Summarizer for TestModel {
    fn complete(&self, body: &[u8]) -> Result<ctxlog_llm::Completion, ctxlog_llm::LlmError> {
        assert!(serde_json::from_slice::<Value>(body).is_ok(), "the summary request is not JSON");
        self.started.fetch_add(1, Ordering::SeqCst);
        let mut held = self.hold.lock().unwrap();
        while *held {
            held = self.released.wait(held).unwrap();
        }
        if self.fail {
            return Err(ctxlog_llm::LlmError::Command {
                program: "test-model".into(),
                detail: "exit status 3".into(),
                stderr: String::new(),
            });
        }
        Ok(ctxlog_llm::Completion {
            text: "The agent ported the ledger modules one by one; error codes stay stable.".into(),
            usage: None,
            latency: Duration::from_millis(1),
            model: Some("test-model".into()),
        })
    }
    fn model(&self) -> Option<&str> {
        Some("test-model")
    }
    fn wire_format(&self) -> Option<ctxlog::WireFormat> {
        None
    }
}

fn model_summaries(m: &Arc<TestModel>) -> Summaries {
    let mut call = SummaryCall::new(SummaryMode::Standalone);
    call.model = Some("test-model".into());
    Summaries::Model { client: Arc::clone(m) as Arc<dyn ctxlog_llm::Summarizer>, call }
}

/// Drives the agent through the proxy until `until` holds for the session's log (bounded).
async fn drive_until(
    p: &ProxyHandle,
    store: &dyn Store,
    agent: &mut Agent,
    last: &mut Value,
    step: &mut usize,
    until: impl Fn(&[Event], usize) -> bool,
) -> StreamId {
    let mut id = None;
    for _ in 0..400 {
        if *step > 0 {
            agent.step(*step, last);
        }
        *step += 1;
        let a = post(p.addr(), &agent.body()).await;
        assert_eq!(a.status, 200, "{}", a.body);
        *last = a.body;
        let sid = a.stream;
        id = Some(sid);
        let evs = calls(store, sid, *step).await;
        if until(&evs, *step) {
            return sid;
        }
    }
    panic!("condition never reached (session {id:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_summaries_are_recorded_and_keep_the_session_under_budget() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = TestModel::new(false, false);
    let budget = 6_000;
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.engine.budget = budget;
        c.summaries = model_summaries(&model);
    })
    .await;
    let (mut agent, mut last, mut step) = (Agent::new(120), Value::Null, 0);
    let id = drive_until(&p, &*store, &mut agent, &mut last, &mut step, |_, n| n >= 120).await;
    p.shutdown().await;
    let evs = events(&*store, id);
    let prepared: Vec<_> = evs
        .iter()
        .filter_map(|e| if let Event::SummaryPrepared(s) = e { Some(s) } else { None })
        .filter(|s| s.mode_used == SummaryMode::Standalone)
        .collect();
    assert!(prepared.len() >= 3, "model summaries: {}", prepared.len());
    assert!(model.started.load(Ordering::SeqCst) >= prepared.len());
    assert!(count(&evs, "Flushed") >= 1);
    for s in served(&evs) {
        assert!(s.view_tokens <= budget, "call {}: {}", s.call, s.view_tokens);
    }
    assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_model_summary_does_not_hold_the_next_call() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = TestModel::new(false, true);
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.engine.budget = 6_000;
        c.summaries = model_summaries(&model);
    })
    .await;
    let (mut agent, mut last, mut step) = (Agent::new(120), Value::Null, 0);
    let m = Arc::clone(&model);
    let id =
        drive_until(&p, &*store, &mut agent, &mut last, &mut step, move |_, _| m.started.load(Ordering::SeqCst) > 0)
            .await;
    // The attempt is held inside the summarizer: the session's next calls are served (and
    // committed) meanwhile, without a second attempt.
    let before = served(&events(&*store, id)).len();
    for _ in 0..3 {
        agent.step(step, &last);
        step += 1;
        let a = tokio::time::timeout(SETTLE, post(p.addr(), &agent.body()))
            .await
            .expect("the next call waited for the summary");
        assert_eq!(a.status, 200);
        last = a.body;
    }
    let evs = calls(&*store, id, before + 3).await;
    assert_eq!(count(&evs, "SummaryPrepared") + count(&evs, "SummaryFailed"), 0, "the held attempt was recorded");
    assert_eq!(model.started.load(Ordering::SeqCst), 1, "a second attempt started while one was in flight");
    // Released, its outcome lands after the calls served meanwhile (they waited for nothing),
    // and it is prepared: ladder edits of its span meanwhile leave a summary good.
    model.release();
    let deadline = tokio::time::Instant::now() + SETTLE;
    let evs = loop {
        let evs = events(&*store, id);
        let done = count(&evs, "SummaryPrepared") + count(&evs, "SummaryFailed");
        if done > 0 {
            break evs;
        }
        assert!(tokio::time::Instant::now() < deadline, "the released attempt was never recorded");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let outcome = evs.iter().position(|e| matches!(e, Event::SummaryPrepared(_) | Event::SummaryFailed(_))).unwrap();
    let last_call = evs.iter().rposition(|e| matches!(e, Event::RequestServed(_))).unwrap();
    assert!(outcome > last_call, "the attempt was recorded before the calls served while it was held");
    assert_eq!(served(&evs[..outcome]).len(), before + 3);
    assert!(matches!(evs[outcome], Event::SummaryPrepared(_)), "wasted: {:?}", evs[outcome]);
    // And the session goes on.
    agent.step(step, &last);
    assert_eq!(post(p.addr(), &agent.body()).await.status, 200);
    p.shutdown().await;
    assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_model_summarizer_is_recorded_and_calls_go_on() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = TestModel::new(true, false);
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.engine.budget = 6_000;
        c.summaries = model_summaries(&model);
    })
    .await;
    let (mut agent, mut last, mut step) = (Agent::new(120), Value::Null, 0);
    let id =
        drive_until(&p, &*store, &mut agent, &mut last, &mut step, |evs, _| count(evs, "SummaryFailed") >= 2).await;
    // Calls keep being served after the failures (the ladder keeps the view in budget).
    for _ in 0..10 {
        agent.step(step, &last);
        step += 1;
        let a = post(p.addr(), &agent.body()).await;
        assert_eq!(a.status, 200);
        last = a.body;
    }
    let evs = calls(&*store, id, step).await;
    p.shutdown().await;
    let failed: Vec<_> =
        evs.iter().filter_map(|e| if let Event::SummaryFailed(f) = e { Some(f) } else { None }).collect();
    assert!(
        failed.iter().all(|f| matches!(&f.reason, SummaryFailure::Provider(m) if m.contains("exit status 3"))),
        "{failed:?}"
    );
    assert_eq!(count(&evs, "SummaryPrepared"), 0);
    for s in served(&evs) {
        assert!(s.view_tokens <= 6_000);
    }
    assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
}

/// Sessions shrunk out of memory between calls (reopened from the store each time) keep their
/// summaries going: the jobs run on the reopened session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summaries_go_on_across_idle_shrinks() {
    let budget = 6_000;
    let r = run_session(
        |c| {
            c.engine.budget = budget;
            c.idle_shrink = Duration::ZERO;
        },
        120,
        120,
    )
    .await;
    check_under_budget(&r, budget);
    assert!(count(&r.evs, "SummaryPrepared") >= 3);
    assert!(count(&r.evs, "Flushed") >= 3);
}

/// A model attempt in flight keeps its slot from being shrunk (the sweep skips a slot someone
/// holds); once recorded, the session shrinks and reopens as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_model_attempt_outlives_the_idle_sweep() {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = TestModel::new(false, true);
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        c.engine.budget = 6_000;
        c.idle_shrink = Duration::ZERO;
        c.summaries = model_summaries(&model);
    })
    .await;
    let (mut agent, mut last, mut step) = (Agent::new(120), Value::Null, 0);
    let m = Arc::clone(&model);
    let id =
        drive_until(&p, &*store, &mut agent, &mut last, &mut step, move |_, _| m.started.load(Ordering::SeqCst) > 0)
            .await;
    // Let the sweep run many times while the attempt is held.
    tokio::time::sleep(Duration::from_millis(100)).await;
    model.release();
    let deadline = tokio::time::Instant::now() + SETTLE;
    while count(&events(&*store, id), "SummaryPrepared") + count(&events(&*store, id), "SummaryFailed") == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the attempt was never recorded");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for _ in 0..20 {
        agent.step(step, &last);
        step += 1;
        let a = post(p.addr(), &agent.body()).await;
        assert_eq!(a.status, 200);
        last = a.body;
    }
    let evs = calls(&*store, id, step).await;
    p.shutdown().await;
    assert!(count(&evs, "SummaryPrepared") >= 1, "the held attempt's summary was lost");
    assert!(ctxlog::replay::verify(&*store, id).unwrap().problems.is_empty());
}
