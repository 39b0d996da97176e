//! A multi-session service on tokio: five agent conversations at once on one shared SQLite
//! store, a fake provider that answers with realistic Anthropic usage (most of each prompt read
//! from its cache), 20 KB tool results, a screenshot, one failed call, summaries written in the
//! background, a restore, and a restart that reopens every session from the log.
//!
//! Run with `cargo run -p ctxlog-tokio --example service` (CI runs it). It uses only the API
//! semver covers (`docs/public-api.md`: the crate root and the public modules), as a service
//! outside this workspace would; `tests/tests/public_api.rs` checks that.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use ctxlog::{
    parse_message, session::RunEnd, CacheTtl, Config, Extractive, Message, RequestOptions, StreamId, Usage, WireFormat,
};
use ctxlog_store_sqlite::SqliteStore;
use ctxlog_tokio::{now, AsyncSession};
use serde_json::{json, Value};
use tokio::sync::Mutex;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Store = Arc<SqliteStore>;

const SESSIONS: usize = 5;
const TURNS: usize = 24;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("ctxlog.db");
    let provider = Arc::new(FakeProvider::default());
    let config = Config { budget: 60_000, cache_aware: true, ..Config::default() };

    // One store for every session; each conversation is its own task.
    let store: Store = Arc::new(SqliteStore::open(&path)?);
    let mut tasks = Vec::new();
    for user in 0..SESSIONS {
        let session =
            AsyncSession::create(store.clone(), StreamId::random(), WireFormat::Anthropic, config.clone(), now())
                .await?;
        tasks.push(tokio::spawn(converse(session, provider.clone(), user, 0..TURNS)));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await??);
    }

    // A restart: every handle and the store are dropped, then each session is reopened from
    // the log (snapshot + replay) and the conversation goes on.
    drop(store);
    let store: Store = Arc::new(SqliteStore::open(&path)?);
    let mut tasks = Vec::new();
    for (user, id) in ids.iter().enumerate() {
        let session = AsyncSession::open(store.clone(), *id).await?;
        tasks.push(tokio::spawn(converse(session, provider.clone(), user, TURNS..TURNS + 3)));
    }
    for task in tasks {
        task.await??;
    }

    // Every session's log verifies: invariants, every served view re-rendered to its digest.
    for id in &ids {
        let (store, id) = (store.clone(), *id);
        let (report, kinds) = tokio::task::spawn_blocking(move || {
            let mut kinds = BTreeMap::<&str, usize>::new();
            ctxlog::replay::for_each_event(store.as_ref(), id, 1, None, |_, ev| {
                *kinds.entry(ev.name()).or_default() += 1;
                Ok(())
            })?;
            Ok::<_, ctxlog::SessionError>((ctxlog::replay::verify(store.as_ref(), id)?, kinds))
        })
        .await??;
        assert!(report.ok(), "{:?}", report.problems);
        assert!(kinds.contains_key("SummaryPrepared") && kinds.contains_key("Restored"), "{kinds:?}");
        println!("session {id}: {} calls, verify ok; {kinds:?}", report.calls);
    }
    let stats = provider.stats.lock().await;
    println!(
        "provider: {} calls, {} failed, largest prompt {} tokens (budget {}), {:.0}% of prompt tokens read from cache",
        stats.calls,
        stats.failed,
        stats.largest,
        config.budget,
        100.0 * stats.cache_read as f64 / stats.prompt as f64
    );
    assert!(stats.largest <= config.budget, "a request over the budget");
    Ok(())
}

/// One user's conversation: each turn is one model call (plan → send → commit) followed by the
/// tool's 20 KB result; summaries are written in the background between calls.
async fn converse(
    session: AsyncSession<Store>,
    provider: Arc<FakeProvider>,
    user: usize,
    turns: std::ops::Range<usize>,
) -> Result<StreamId, Error> {
    let opts = RequestOptions::new()
        .model("claude-sonnet-4-5")
        .max_tokens(4_096)
        .tools(r#"[{"name":"read_file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}]"#)?
        .cache_breakpoints(CacheTtl::FiveMinutes);
    if turns.start == 0 {
        session.append(vec![system_prompt(), first_message(user)?]).await?;
    }
    // A prepare between a call's plan and its commit would make the plan stale: the turn lock
    // keeps summaries between calls, while their text is written concurrently.
    let turn_lock = Arc::new(Mutex::new(()));
    let mut summarizer = None;
    for turn in turns {
        let in_flight = turn_lock.lock().await;
        // The call: a plan (pure) and the exact request body, built on the blocking pool.
        let (plan, request) = session.plan_request(now(), &opts).await?;
        match provider.send(session.id(), request.body(), turn).await {
            Ok(usage) => {
                // Durable, then applied. The whole usage: cache reads and writes included.
                session.commit(plan, now(), Some(Usage::from_anthropic(&usage)?)).await?;
            }
            Err(e) => {
                // Nothing was written; the next call decides again.
                println!("session {}: call {} failed ({e}); aborted", session.id(), plan.call());
                session.abort(plan);
                continue;
            }
        }
        drop(in_flight);
        session.append(tool_turn(user, turn)).await?;
        // Summaries: a background task per session, one at a time.
        if summarizer.as_ref().is_none_or(|t: &tokio::task::JoinHandle<_>| t.is_finished()) {
            summarizer = Some(tokio::spawn(summarize(session.clone(), turn_lock.clone())));
        }
        if turn == TURNS - 2 {
            restore_first_hidden(&session).await?;
        }
    }
    if let Some(task) = summarizer {
        task.await??;
    }
    session.snapshot().await?;
    Ok(session.id())
}

/// Runs every summary job the engine has with the built-in summarizer (a model, as a
/// `Summarizer`, would go here), until none is left or one is discarded: one job at a time
/// (`Session::run_summaries` with a limit of 1), each between two calls of the conversation.
async fn summarize(session: AsyncSession<Store>, turn_lock: Arc<Mutex<()>>) -> Result<(), Error> {
    loop {
        let _between_calls = turn_lock.lock().await;
        let run = session.call(|s| s.run_summaries(&mut Extractive, 1)).await??;
        if run.end != RunEnd::Limit {
            return Ok(());
        }
    }
}

/// The user asks to see something compaction took out of the view: it comes back.
async fn restore_first_hidden(session: &AsyncSession<Store>) -> Result<(), Error> {
    let hidden = session
        .call(|s| {
            let st = s.state();
            (0..st.message_count())
                .find(|&seq| st.hidden_by_flush(seq) || st.entry(seq).is_some_and(|e| e.edit.is_some()))
        })
        .await?;
    if let Some(seq) = hidden {
        session.restore(seq, "user", "asked to see the original output again").await?;
        println!("session {}: restored message {seq}", session.id());
    }
    Ok(())
}

fn system_prompt() -> Message {
    let rules: String = (0..60).map(|i| format!("Rule {i}: keep the build green and explain each change.\n")).collect();
    message(json!({"role": "system", "content": format!("You are a coding agent.\n{rules}")}))
}

/// The first message carries a screenshot (a 32×24 PNG).
fn first_message(user: usize) -> Result<Message, Error> {
    let rows = std::iter::repeat_n(0, 1).chain(std::iter::repeat_n(user as u8 * 40, 3 * 32));
    let png = ctxlog_workload::encode_png(32, 24, &rows.cycle().take(24 * (1 + 3 * 32)).collect::<Vec<u8>>());
    Ok(message(json!({"role": "user", "content": [
        {"type": "text", "text": format!("PROJECT PATH IS ~/src/app{user}. The layout breaks like this; fix it.")},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64::engine::general_purpose::STANDARD.encode(&png)}}
    ]})))
}

/// The model's tool call and the tool's 20 KB result; every third turn the model reports and
/// the user asks for the next module.
fn tool_turn(user: usize, turn: usize) -> Vec<Message> {
    if turn % 3 == 2 {
        return vec![
            message(json!({"role": "assistant", "content": format!("Modules up to {turn} are ported.")})),
            message(json!({"role": "user", "content": "Good. Go on with the next ones."})),
        ];
    }
    let id = format!("toolu_{user}_{turn}");
    let output: String = (0..200)
        .map(|line| {
            format!("{turn:03}:{line:04} fn handler_{line}(req: &Request) -> Response {{ route(req, {line}) }}\n")
        })
        .collect();
    vec![
        message(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Reading module {turn}.")},
            {"type": "tool_use", "id": id, "name": "read_file", "input": {"path": format!("src/m{turn}.rs")}}
        ]})),
        message(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": output}]})),
    ]
}

fn message(v: Value) -> Message {
    // The examples' messages are well-formed; a service would return the error to its client.
    parse_message(&v.to_string()).unwrap_or_else(|e| unreachable!("{e}"))
}

/// A stand-in for the Anthropic API: it counts a body's tokens (text at ~3.3 characters per
/// token, images at 1,600), reads from its cache the messages a session's previous request
/// shared with this one (the cache key ignores `cache_control`), and fails one call.
#[derive(Default)]
struct FakeProvider {
    previous: Mutex<BTreeMap<StreamId, Vec<String>>>,
    stats: Mutex<Stats>,
}

#[derive(Default)]
struct Stats {
    calls: u64,
    failed: u64,
    largest: u64,
    prompt: u64,
    cache_read: u64,
}

impl FakeProvider {
    async fn send(&self, session: StreamId, body: &[u8], turn: usize) -> Result<Value, Error> {
        tokio::time::sleep(Duration::from_millis(2)).await; // the network
        let body: Value = serde_json::from_slice(body)?;
        let mut stats = self.stats.lock().await;
        stats.calls += 1;
        if turn == 5 && stats.failed == 0 {
            stats.failed += 1;
            return Err("529 overloaded".into());
        }
        let mut parts = vec![strip(body["system"].clone())];
        parts.extend(body["messages"].as_array().into_iter().flatten().cloned().map(strip));
        let keys: Vec<String> = parts.iter().map(Value::to_string).collect();
        let tokens: Vec<u64> = parts.iter().map(count).collect();
        let mut previous = self.previous.lock().await;
        let shared = previous.get(&session).map_or(0, |p| keys.iter().zip(p).take_while(|(a, b)| a == b).count());
        previous.insert(session, keys);
        let prompt: u64 = tokens.iter().sum();
        let cache_read: u64 = tokens[..shared].iter().sum();
        let last = tokens.last().copied().unwrap_or(0).min(prompt - cache_read);
        let cache_write = prompt - cache_read - last;
        stats.largest = stats.largest.max(prompt);
        stats.prompt += prompt;
        stats.cache_read += cache_read;
        Ok(json!({"input_tokens": last, "cache_creation_input_tokens": cache_write,
                  "cache_read_input_tokens": cache_read, "output_tokens": 120}))
    }
}

fn strip(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.into_iter().filter(|(k, _)| k != "cache_control").map(|(k, v)| (k, strip(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(strip).collect()),
        other => other,
    }
}

fn count(v: &Value) -> u64 {
    match v {
        Value::String(s) => (s.len() as u64 * 10).div_ceil(33),
        Value::Array(a) => 1 + a.iter().map(count).sum::<u64>(),
        Value::Object(m) if m.get("type") == Some(&json!("image")) => 1_600,
        Value::Object(m) => 2 + m.values().map(|v| 1 + count(v)).sum::<u64>(),
        _ => 1,
    }
}
