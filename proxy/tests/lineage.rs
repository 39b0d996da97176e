//! Real clients' histories through the proxy to the strict fake, each conversation ≥ 20 calls
//! on a small budget (so they compact): a history re-serialized between calls, a moving
//! `cache_control` breakpoint, an undo then a new turn (the Agents SDK's `pop_item`), a retry
//! of the last turn, an eval run twice, one `x-ctxlog-session` serving two conversations, a
//! client-side summary replacing old messages (LangChain's `SummarizationMiddleware`), and a
//! branch made on two proxies of a fleet at once. Each ends with: one stream per conversation
//! (a branch when its history forked), one lineage per opening, no `history_diverged`,
//! `verify` clean on every stream, every answered call in the log with its answer.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use ctxlog::event::GuardKind;
use ctxlog::{Event, MemoryStore, Session, Store, StreamId};
use ctxlog_fake_upstream::FakeUpstream;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

mod support;
use support::{calls, events, proxy_on, served, KEY};

const ANTHROPIC: &str = "/v1/messages";
const OPENAI: &str = "/v1/chat/completions";
const SYSTEM: &str = "You are a careful coding agent. Work in /srv/parser.";
/// Small enough that every conversation here is several budgets long.
const BUDGET: u64 = 3_000;

/// What a client got for one call.
#[derive(Debug, Clone)]
struct Answer {
    stream: StreamId,
    call: u64,
    fork: Option<(StreamId, u64)>,
    text: String,
}

/// A client of one API: its key, its headers, how it spells its history.
#[derive(Clone)]
struct Agent {
    addr: std::net::SocketAddr,
    path: &'static str,
    session: Option<&'static str>,
}

impl Agent {
    fn new(addr: std::net::SocketAddr, path: &'static str, session: Option<&'static str>) -> Self {
        Agent { addr, path, session }
    }

    /// The request body for `history` (messages as the client keeps them).
    fn body(&self, history: &[Value]) -> Value {
        if self.path == ANTHROPIC {
            json!({"model": "claude-x", "max_tokens": 256, "system": SYSTEM, "messages": history})
        } else {
            let mut all = vec![json!({"role": "system", "content": SYSTEM})];
            all.extend_from_slice(history);
            json!({"model": "gpt-x", "messages": all})
        }
    }

    /// Sends `history` spelled as `spelling` says; the answer and where it was logged.
    async fn send(&self, history: &[Value], spelling: Spelling) -> Answer {
        let body = spelling.write(&self.body(history));
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let mut req = http::Request::post(format!("http://{}{}", self.addr, self.path))
            .header("content-type", "application/json");
        req = if self.path == ANTHROPIC {
            req.header("x-api-key", KEY)
        } else {
            req.header("authorization", "Bearer sk-openai-SECRET-KEY-9876543210")
        };
        if let Some(s) = self.session {
            req = req.header("x-ctxlog-session", s);
        }
        let resp = client.request(req.body(Full::new(Bytes::from(body))).unwrap()).await.unwrap();
        let status = resp.status();
        let h = resp.headers().clone();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
        let get = |name: &str| h.get(name).map(|v| v.to_str().unwrap().to_owned());
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let text =
            if self.path == ANTHROPIC { &v["content"][0]["text"] } else { &v["choices"][0]["message"]["content"] };
        Answer {
            stream: get("x-ctxlog-stream").unwrap().parse().unwrap(),
            call: get("x-ctxlog-call").unwrap().parse().unwrap(),
            fork: get("x-ctxlog-branch-of")
                .map(|p| (p.parse().unwrap(), get("x-ctxlog-fork-at").unwrap().parse().unwrap())),
            text: text.as_str().unwrap().to_owned(),
        }
    }
}

/// How a client writes its JSON: serializers differ in separators, key order and escapes.
#[derive(Clone, Copy, Debug)]
enum Spelling {
    /// serde_json / JavaScript `JSON.stringify`.
    Compact,
    /// Python `json.dumps` defaults: `", "` and `": "`, non-ASCII as `\uXXXX`.
    Python,
    /// Keys in reverse order, as a jsonb round trip may give them back, pretty-printed.
    Reordered,
}

impl Spelling {
    fn nth(i: usize) -> Spelling {
        [Spelling::Compact, Spelling::Python, Spelling::Reordered][i % 3]
    }

    fn write(self, v: &Value) -> String {
        let (colon, comma, ascii, reverse) = match self {
            Spelling::Compact => (":", ",", false, false),
            Spelling::Python => (": ", ", ", true, false),
            Spelling::Reordered => (" : ", ",\n  ", false, true),
        };
        let mut out = String::new();
        spell(v, colon, comma, ascii, reverse, &mut out);
        out
    }
}

fn spell(v: &Value, colon: &str, comma: &str, ascii: bool, reverse: bool, out: &mut String) {
    let string = |s: &str, out: &mut String| {
        let quoted = serde_json::to_string(s).unwrap();
        if !ascii {
            return out.push_str(&quoted);
        }
        for c in quoted.chars() {
            if c.is_ascii() {
                out.push(c);
            } else {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
        }
    };
    match v {
        Value::Object(o) => {
            out.push('{');
            let mut entries: Vec<(&String, &Value)> = o.iter().collect();
            if reverse {
                entries.reverse();
            }
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(comma);
                }
                string(k, out);
                out.push_str(colon);
                spell(v, colon, comma, ascii, reverse, out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(comma);
                }
                spell(v, colon, comma, ascii, reverse, out);
            }
            out.push(']');
        }
        Value::String(s) => string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn user(conv: &str, turn: usize) -> Value {
    json!({"role": "user", "content": format!("{conv}, turn {turn}: keep porting the parser — {}", "next step of the plan. ".repeat(32))})
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

/// Anthropic's documented multi-turn caching: the breakpoint on the last user message, moved
/// each turn (the previous one goes back to a plain string).
fn with_moving_breakpoint(history: &[Value]) -> Vec<Value> {
    let mut h = history.to_vec();
    if let Some(last) = h.last_mut() {
        let text = last["content"].as_str().unwrap().to_owned();
        last["content"] = json!([{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]);
    }
    h
}

/// Runs `turns` turns of conversation `conv` on top of `history`; returns the answers.
async fn converse(agent: &Agent, conv: &str, history: &mut Vec<Value>, turns: std::ops::Range<usize>) -> Vec<Answer> {
    let mut out = Vec::new();
    for t in turns {
        history.push(user(conv, t));
        let a = agent.send(history, Spelling::Compact).await;
        history.push(assistant(&a.text));
        out.push(a);
    }
    out
}

/// The streams `answers` were logged in, in order of first use.
fn streams_of(answers: &[Answer]) -> Vec<StreamId> {
    let mut seen = Vec::new();
    for a in answers {
        if !seen.contains(&a.stream) {
            seen.push(a.stream);
        }
    }
    seen
}

/// What every scenario ends with, over the whole store: no divergence anywhere, `verify`
/// clean on every stream, every answered call in its stream's log with its answer, the
/// sessions compacted; returns the lineages (root → its streams).
async fn check_store(store: &dyn Store, answers: &[Answer]) -> BTreeMap<StreamId, BTreeSet<StreamId>> {
    let mut by_stream: BTreeMap<StreamId, Vec<&Answer>> = BTreeMap::new();
    for a in answers {
        by_stream.entry(a.stream).or_default().push(a);
    }
    for (id, mine) in &by_stream {
        let last = mine.iter().map(|a| a.call).max().unwrap();
        calls(store, *id, usize::try_from(last).unwrap() + 1).await;
    }
    let mut lineages: BTreeMap<StreamId, BTreeSet<StreamId>> = BTreeMap::new();
    let mut compacted = false;
    for id in store.streams().unwrap() {
        let evs = events(store, id);
        for e in &evs {
            if let Event::GuardRaised(g) = e {
                assert!(!matches!(g.kind, GuardKind::HistoryDiverged { .. }), "{id}: a divergence was recorded: {g:?}");
            }
        }
        compacted |= evs.iter().any(|e| matches!(e, Event::Flushed(_)));
        let report = ctxlog::replay::verify(store, id).unwrap();
        assert!(report.problems.is_empty(), "{id}: {:?}", report.problems);
        let root = evs
            .iter()
            .find_map(|e| if let Event::Branched(b) = e { Some(StreamId(b.parent)) } else { None })
            .unwrap_or(id);
        lineages.entry(root).or_default().insert(id);
        for a in by_stream.get(&id).into_iter().flatten() {
            assert!(served(&evs).iter().any(|s| s.call == a.call), "{id}: answered call {} is not in the log", a.call);
            let logged = evs.iter().find_map(|e| match e {
                Event::AnswerReceived(r) if r.call == a.call => Some(r.message.plain_text()),
                _ => None,
            });
            assert_eq!(logged.as_deref(), Some(a.text.as_str()), "{id}: call {}'s answer", a.call);
        }
    }
    assert!(compacted, "no session compacted: the scenario is too short for its budget");
    lineages
}

async fn setup() -> (FakeUpstream, Arc<dyn Store>, ctxlog_proxy::ProxyHandle) {
    let up = FakeUpstream::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let p = proxy_on(Arc::clone(&store), &up.url(), |c| {
        // The legacy gate: calls come back to back, and these conversations must compact
        // within a few calls (their subject is the lineage, not the gate).
        c.engine.budget = BUDGET;
        c.engine.cache_aware = false;
    })
    .await;
    (up, store, p)
}

/// One conversation whose client re-serializes its whole history differently on every call.
async fn respelled(path: &'static str, session: Option<&'static str>, breakpoints: bool) {
    let (up, store, p) = setup().await;
    let agent = Agent::new(p.addr(), path, session);
    let mut history = Vec::new();
    let mut answers = Vec::new();
    for t in 0..22 {
        history.push(user("respelled", t));
        let sent = if breakpoints { with_moving_breakpoint(&history) } else { history.clone() };
        let a = agent.send(&sent, Spelling::nth(t)).await;
        history.push(assistant(&a.text));
        answers.push(a);
    }
    let streams = streams_of(&answers);
    assert_eq!(streams.len(), 1, "a respelled history split the session: {streams:?}");
    assert!(answers.iter().all(|a| a.fork.is_none()));
    let lineages = check_store(&*store, &answers).await;
    assert_eq!(lineages.len(), 1);
    assert_eq!(store.streams().unwrap().len(), 1, "a branch was made");
    if breakpoints {
        // The log keeps every message as first sent, breakpoint included; a request carries
        // only this request's breakpoints, mapped onto the view (the client's one, on its latest
        // user message), never the older ones the log holds (the strict fake refuses a fifth).
        let last = up.requests().into_iter().last().unwrap();
        let body: Value = serde_json::from_slice(&last.request.body).unwrap();
        let msgs = body["messages"].as_array().unwrap();
        let marked: Vec<usize> = (0..msgs.len())
            .filter(|i| {
                msgs[*i]["content"].as_array().is_some_and(|b| b.iter().any(|b| b.get("cache_control").is_some()))
            })
            .collect();
        assert_eq!(marked, [msgs.len() - 1], "only the request's own breakpoint, where the client put it");
    }
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_respelled_anthropic_history_keeps_its_session_without_the_header() {
    respelled(ANTHROPIC, None, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_respelled_openai_history_keeps_its_session_with_the_header() {
    respelled(OPENAI, Some("agent-1"), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moving_breakpoint_keeps_the_session_with_and_without_the_header() {
    respelled(ANTHROPIC, None, true).await;
    respelled(ANTHROPIC, Some("agent-2"), true).await;
}

/// The OpenAI Agents SDK's `SQLiteSession.pop_item()` twice (the answer and the question), then
/// a corrected question: a branch at the corrected question that keeps the prefix's
/// compaction, and the conversation goes on in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undo_then_a_new_turn_is_a_branch_that_keeps_the_compaction() {
    for session in [None, Some("agents-sdk")] {
        let (_up, store, p) = setup().await;
        let agent = Agent::new(p.addr(), OPENAI, session);
        let mut history = Vec::new();
        let mut answers = converse(&agent, "undo", &mut history, 0..14).await;
        let root = answers[0].stream;
        history.truncate(history.len() - 2); // pop_item(), pop_item()
        let fork_at = history.len() as u64 + 1; // the system message is seq 0
        let after = converse(&agent, "undo (corrected)", &mut history, 13..24).await;
        let branch = after[0].stream;
        assert_ne!(branch, root);
        assert!(after.iter().all(|a| a.stream == branch && a.fork == Some((root, fork_at))), "{after:?}");
        let evs = events(&*store, branch);
        assert!(
            evs.iter().take_while(|e| !matches!(e, Event::Branched(_))).any(|e| matches!(e, Event::SummaryPrepared(_))),
            "the branch's copy has no summaries: compaction would start from scratch"
        );
        let own = served(&evs).into_iter().find(|s| s.call == after[0].call).unwrap();
        assert!(own.level < 3, "the branch's first call escalated to level {}", own.level);
        answers.extend(after);
        let lineages = check_store(&*store, &answers).await;
        assert_eq!(lineages.len(), 1);
        assert_eq!(lineages[&root], [root, branch].into_iter().collect());
        p.shutdown().await;
    }
}

/// A client that sends the same request again (a timeout, a regenerate): the same session, no
/// branch; each retry is a call of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_of_the_last_turn_continues_the_session() {
    let (_up, store, p) = setup().await;
    let agent = Agent::new(p.addr(), ANTHROPIC, None);
    let mut history = Vec::new();
    let mut answers = Vec::new();
    for t in 0..22 {
        history.push(user("retry", t));
        let tries = if t % 5 == 4 { 3 } else { 1 };
        let mut a = None;
        for i in 0..tries {
            let got = agent.send(&history, Spelling::nth(i)).await;
            answers.push(got.clone());
            a = Some(got);
        }
        history.push(assistant(&a.unwrap().text));
    }
    assert_eq!(streams_of(&answers).len(), 1, "a retry split the session");
    let calls: Vec<u64> = answers.iter().map(|a| a.call).collect();
    assert_eq!(calls, (0..answers.len() as u64).collect::<Vec<_>>(), "every retry is a call");
    check_store(&*store, &answers).await;
    assert_eq!(store.streams().unwrap().len(), 1);
    p.shutdown().await;
}

/// An eval run three times from the same opening (no header: the lineage is derived from it):
/// run 2 identical to run 1, run 3 with other questions from its fourth turn on. The first run's
/// session is untouched; each later run is one branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eval_run_again_is_a_branch_of_its_opening() {
    let (_up, store, p) = setup().await;
    let agent = Agent::new(p.addr(), ANTHROPIC, None);
    let mut runs = Vec::new();
    for run in 0..3 {
        let mut history = Vec::new();
        let mut answers = Vec::new();
        for t in 0..20 {
            let conv = if run == 2 && t >= 3 { "eval (other questions)" } else { "eval" };
            history.push(user(conv, t));
            let a = agent.send(&history, Spelling::Compact).await;
            history.push(assistant(&a.text));
            answers.push(a);
        }
        runs.push(answers);
    }
    let ids: Vec<Vec<StreamId>> = runs.iter().map(|r| streams_of(r)).collect();
    for (i, s) in ids.iter().enumerate() {
        assert_eq!(s.len(), 1, "run {i} was split: {s:?}");
    }
    let (first, second, third) = (ids[0][0], ids[1][0], ids[2][0]);
    assert!(first != second && second != third && first != third);
    assert_eq!(runs[0].iter().map(|a| a.fork).collect::<BTreeSet<_>>(), [None].into_iter().collect());
    // Run 2 forks where its first request ends (system prompt and first question).
    assert_eq!(runs[1][0].fork, Some((first, 2)));
    assert_eq!(served(&events(&*store, first)).len(), 20, "a later run wrote to the first run's session");
    let all: Vec<Answer> = runs.concat();
    let lineages = check_store(&*store, &all).await;
    assert_eq!(lineages.len(), 1, "{lineages:?}");
    assert_eq!(lineages[&first], [first, second, third].into_iter().collect());
    p.shutdown().await;
}

/// The README's fixed `x-ctxlog-session` serving two conversations in turn: two streams (the
/// second a branch after the shared system prompt), each conversation whole in one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_header_serving_two_conversations_gives_two_branches() {
    let (_up, store, p) = setup().await;
    let agent = Agent::new(p.addr(), ANTHROPIC, Some("my-agent"));
    let (mut x, mut y) = (Vec::new(), Vec::new());
    let (mut ax, mut ay) = (Vec::new(), Vec::new());
    for t in 0..20 {
        ax.extend(converse(&agent, "conversation X", &mut x, t..t + 1).await);
        ay.extend(converse(&agent, "conversation Y", &mut y, t..t + 1).await);
    }
    let (sx, sy) = (streams_of(&ax), streams_of(&ay));
    assert_eq!((sx.len(), sy.len()), (1, 1), "{sx:?} {sy:?}");
    assert!(ax.iter().all(|a| a.fork.is_none()));
    assert!(ay.iter().all(|a| a.fork == Some((sx[0], 1))), "Y forks after the system prompt");
    let all: Vec<Answer> = ax.into_iter().chain(ay).collect();
    let lineages = check_store(&*store, &all).await;
    assert_eq!(lineages.len(), 1);
    assert_eq!(store.streams().unwrap().len(), 2);
    p.shutdown().await;
}

/// LangChain's `SummarizationMiddleware`: past its threshold the client replaces everything but
/// the last messages by one user message carrying its summary. Each summary starts a branch of
/// the lineage (after the system prompt) whose first own message is the summary; the calls
/// after it continue that branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_side_summary_is_a_branch_of_the_lineage() {
    let (_up, store, p) = setup().await;
    let agent = Agent::new(p.addr(), ANTHROPIC, Some("langchain-agent"));
    let mut history = Vec::new();
    let mut answers = converse(&agent, "summarized", &mut history, 0..12).await;
    let root = answers[0].stream;
    let mut branches = Vec::new();
    for (n, turns) in [(1, 12..20), (2, 20..28)] {
        let kept = history.split_off(history.len() - 5); // from an answer on
        let summary =
            format!("Here is a summary of the conversation to date:\n\nSummary {n}: the parser is half ported.");
        history = vec![json!({"role": "user", "content": summary})];
        history.extend(kept);
        let after = converse(&agent, "summarized", &mut history, turns).await;
        let s = after[0].stream;
        assert!(after.iter().all(|a| a.stream == s && a.fork == Some((root, 1))), "{after:?}");
        let first_own = Session::open(Arc::clone(&store), s).unwrap().messages(1..2).unwrap();
        assert!(
            first_own[0].plain_text().starts_with("Here is a summary"),
            "the branch does not start with the summary"
        );
        branches.push(s);
        answers.extend(after);
    }
    let lineages = check_store(&*store, &answers).await;
    assert_eq!(lineages.len(), 1);
    assert_eq!(lineages[&root], [root, branches[0], branches[1]].into_iter().collect());
    p.shutdown().await;
}

/// The same without a header (LangChain's `SummarizationMiddleware` sends none): the summary
/// is the history's first user message, so the lineage id is new; the proxy recognizes the
/// end of the conversation it summarized and records the edge on the new session
/// (`ClientCompacted`: the predecessor and its first message kept). The calls after it
/// continue the new session; an unrelated conversation of the same tenant gets no edge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_side_summary_without_a_header_continues_the_lineage() {
    let (_up, store, p) = setup().await;
    let agent = Agent::new(p.addr(), ANTHROPIC, None);
    let mut history = Vec::new();
    let mut answers = converse(&agent, "summarized", &mut history, 0..12).await;
    let mut previous = answers[0].stream;
    let mut chain = vec![previous];
    for (n, turns) in [(1, 12..20), (2, 20..28)] {
        // The first message kept (seq 0 is the system prompt): the answer five from the end.
        let seq = 1 + history.len() as u64 - 5;
        let kept = history.split_off(history.len() - 5); // from an answer on
        let summary =
            format!("Here is a summary of the conversation to date:\n\nSummary {n}: the parser is half ported.");
        history = vec![json!({"role": "user", "content": summary})];
        history.extend(kept);
        let after = converse(&agent, "summarized", &mut history, turns).await;
        let s = after[0].stream;
        assert!(after.iter().all(|a| a.stream == s && a.fork.is_none()), "{after:?}");
        assert_ne!(s, previous);
        let edges: Vec<GuardKind> = events(&*store, s)
            .into_iter()
            .filter_map(|e| match e {
                Event::GuardRaised(g) if matches!(g.kind, GuardKind::ClientCompacted { .. }) => Some(g.kind),
                _ => None,
            })
            .collect();
        assert_eq!(edges, vec![GuardKind::ClientCompacted { predecessor: previous.to_string(), seq }]);
        previous = s;
        chain.push(s);
        answers.extend(after);
    }
    // Another conversation of the same tenant: no edge.
    let mut other = Vec::new();
    let unrelated = converse(&agent, "unrelated", &mut other, 0..3).await;
    let evs = events(&*store, unrelated[0].stream);
    assert!(!evs.iter().any(|e| matches!(e, Event::GuardRaised(_))), "an unrelated conversation got an edge");
    answers.extend(unrelated);
    let lineages = check_store(&*store, &answers).await;
    assert!(chain.iter().all(|s| lineages.contains_key(s)), "{lineages:?}");
    p.shutdown().await;
}

/// Two proxies on one SQLite file (as two processes would be): the same forked request sent to
/// both at once lands in one branch, and the conversation goes on in it whichever proxy serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_made_on_two_proxies_at_once_is_joined() {
    let up = FakeUpstream::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let mut proxies = Vec::new();
    for _ in 0..2 {
        let store: Arc<dyn Store> = Arc::new(ctxlog_store_sqlite::SqliteStore::open(&path).unwrap());
        proxies.push(
            proxy_on(store, &up.url(), |c| {
                // The legacy gate: calls come back to back, and these conversations must compact
                // within a few calls (their subject is the lineage, not the gate).
                c.engine.budget = BUDGET;
                c.engine.cache_aware = false;
            })
            .await,
        );
    }
    let agents: Vec<Agent> = proxies.iter().map(|p| Agent::new(p.addr(), ANTHROPIC, Some("fleet"))).collect();
    let mut history = Vec::new();
    let mut answers = Vec::new();
    for t in 0..12 {
        answers.extend(converse(&agents[t % 2], "fleet", &mut history, t..t + 1).await);
    }
    let root = answers[0].stream;
    // An edit of an early answer (seq 4: the system prompt is seq 0), sent to both proxies at
    // once.
    history[3] = assistant("EDITED");
    history.push(user("fleet", 12));
    let (a, b) = tokio::join!(agents[0].send(&history, Spelling::Compact), agents[1].send(&history, Spelling::Python));
    assert_eq!(a.stream, b.stream, "the two proxies made two branches");
    assert_eq!((a.fork, b.fork), (Some((root, 4)), Some((root, 4))));
    history.push(assistant(&a.text));
    answers.extend([a.clone(), b]);
    for t in 13..24 {
        let got = converse(&agents[t % 2], "fleet", &mut history, t..t + 1).await;
        assert!(got.iter().all(|g| g.stream == a.stream));
        answers.extend(got);
    }
    let store = ctxlog_store_sqlite::SqliteStore::open(&path).unwrap();
    let lineages = check_store(&store, &answers).await;
    assert_eq!(lineages.len(), 1);
    assert_eq!(lineages[&root], [root, a.stream].into_iter().collect());
    for p in proxies {
        p.shutdown().await;
    }
}
