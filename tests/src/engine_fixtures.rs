//! Shared support for the compaction-engine tests: a [`Harness`] that drives a [`Session`] on a
//! [`MemoryStore`] with a simulated clock, message builders for both wire formats, and checks
//! that read the *rendered* view (never the engine's own bookkeeping).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ctxlog::config::{Config, SummarizerKind};
use ctxlog::event::{EditKind, Event, GuardKind};
use ctxlog::replay::{self, CallRecord, Timeline};
use ctxlog::session::{Prepared, Produced};
use ctxlog::time::Millis;
use ctxlog::{MemoryStore, Message, Session, Store, StreamId, Timestamp, WireFormat};
use serde_json::{json, Value};

/// Start of the simulated clock (2026-01-01T00:00:00Z).
pub const T0: Millis = 1_767_225_600_000;
/// Default simulated time between two calls.
pub const STEP_MS: u64 = 30_000;

/// Knobs for a scenario: the given budget and ratios, no summarizer, legacy gate, everything else
/// at its default.
pub fn config(budget: u64, trigger: f64, target: f64) -> Config {
    Config {
        budget,
        trigger_ratio: trigger,
        target_ratio: target,
        prepare_ratio: trigger.min(0.7),
        summarizer: SummarizerKind::None,
        cache_aware: false,
        ..Config::default()
    }
}

/// Parses one wire message (panics on invalid JSON: a broken fixture).
pub fn msg(v: Value) -> Message {
    ctxlog::internal::wire::parse_message(&v.to_string()).unwrap()
}

/// A 1×1 PNG (its dimensions are read at append, so it costs a few tokens).
pub const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// Message builders for one wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wire(pub WireFormat);

impl Wire {
    /// `{"role":"system"}`.
    pub fn system(self, text: &str) -> Message {
        msg(json!({"role": "system", "content": text}))
    }

    /// A human message.
    pub fn user(self, text: &str) -> Message {
        msg(json!({"role": "user", "content": text}))
    }

    /// A pinned human message.
    pub fn pinned_user(self, text: &str) -> Message {
        msg(json!({"role": "user", "content": text, "pinned": true}))
    }

    /// An assistant text message.
    pub fn assistant(self, text: &str) -> Message {
        msg(json!({"role": "assistant", "content": text}))
    }

    /// A human message with text blocks around one image.
    pub fn user_with_image(self, texts: &[&str]) -> Message {
        let image = match self.0 {
            WireFormat::Anthropic => {
                json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_1X1}})
            }
            WireFormat::OpenAi => {
                json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_1X1}")}})
            }
            WireFormat::OpenAiResponses => panic!("Responses sessions are built by ctxlog_tests::responses"),
            WireFormat::Gemini => panic!("Gemini sessions are built by ctxlog_tests::gemini"),
        };
        let mut blocks: Vec<Value> = Vec::new();
        if let Some((first, rest)) = texts.split_first() {
            blocks.push(json!({"type": "text", "text": first}));
            blocks.push(image);
            blocks.extend(rest.iter().map(|t| json!({"type": "text", "text": t})));
        } else {
            blocks.push(image);
        }
        msg(json!({"role": "user", "content": blocks}))
    }

    /// An assistant message calling `ids` (tool `name`), with optional text.
    pub fn calls(self, text: &str, ids: &[&str], name: &str) -> Message {
        match self.0 {
            WireFormat::Anthropic => {
                let mut blocks: Vec<Value> = Vec::new();
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                blocks.extend(
                    ids.iter().map(|id| json!({"type": "tool_use", "id": id, "name": name, "input": {"path": "f"}})),
                );
                msg(json!({"role": "assistant", "content": blocks}))
            }
            WireFormat::OpenAi => {
                let calls: Vec<Value> = ids
                    .iter()
                    .map(|id| json!({"id": id, "type": "function", "function": {"name": name, "arguments": "{\"path\":\"f\"}"}}))
                    .collect();
                let content = if text.is_empty() { Value::Null } else { json!(text) };
                msg(json!({"role": "assistant", "content": content, "tool_calls": calls}))
            }
            WireFormat::OpenAiResponses => panic!("Responses sessions are built by ctxlog_tests::responses"),
            WireFormat::Gemini => panic!("Gemini sessions are built by ctxlog_tests::gemini"),
        }
    }

    /// The result of call `id`.
    pub fn result(self, id: &str, text: &str) -> Message {
        match self.0 {
            WireFormat::Anthropic => {
                msg(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": text}]}))
            }
            WireFormat::OpenAi => msg(json!({"role": "tool", "tool_call_id": id, "content": text})),
            WireFormat::OpenAiResponses => panic!("Responses sessions are built by ctxlog_tests::responses"),
            WireFormat::Gemini => panic!("Gemini sessions are built by ctxlog_tests::gemini"),
        }
    }
}

/// What one call did, as the test saw it.
#[derive(Debug, Clone)]
pub struct Call {
    /// The call number.
    pub call: u64,
    /// Committed events, ending with `RequestServed`.
    pub events: Vec<Event>,
    /// Ladder level.
    pub level: u8,
    /// View tokens of the served view.
    pub view_tokens: u64,
    /// Messages in the served view.
    pub view_messages: u64,
    /// What the plan claimed.
    pub prefix_reused: bool,
    /// The digest of the served view.
    pub digest: String,
    /// The served view bytes, one rendered message per element.
    pub view: Vec<Arc<[u8]>>,
    /// The previous served view is a byte prefix of this one (computed by the test).
    pub bytes_appended_only: bool,
    /// Messages appended since the previous call.
    pub new_messages: u64,
}

impl Call {
    /// Edits committed by this call.
    pub fn edits(&self) -> Vec<(u64, EditKind)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Edited(e) => Some((e.seq, e.kind)),
                _ => None,
            })
            .collect()
    }

    /// Seqs removed by this call.
    pub fn removed(&self) -> Vec<u64> {
        self.edits().into_iter().filter(|(_, k)| *k == EditKind::Removed).map(|(s, _)| s).collect()
    }

    /// Guards raised by this call.
    pub fn guards(&self) -> Vec<GuardKind> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::GuardRaised(g) => Some(g.kind.clone()),
                _ => None,
            })
            .collect()
    }

    /// Did this call commit a `Flushed`, `Edited`, `SummaryRetired` or `Restored`?
    pub fn rewrote(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, Event::Flushed(_) | Event::Edited(_) | Event::SummaryRetired(_) | Event::Restored(_)))
    }

    /// The served view as text (for `contains` checks).
    pub fn view_text(&self) -> String {
        self.view.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect()
    }
}

/// A session on a memory store with a simulated clock.
pub struct Harness {
    /// The store (shared with the session).
    pub store: Arc<MemoryStore>,
    /// The session.
    pub session: Session<Arc<MemoryStore>>,
    /// The simulated clock.
    pub now: Millis,
    /// Time added after each call.
    pub step_ms: u64,
    /// Message builders.
    pub wire: Wire,
    /// Every call made so far.
    pub calls: Vec<Call>,
    /// The timeline built live from the committed batches.
    pub live_timeline: Vec<CallRecord>,
    live: Timeline,
    prev_view: Option<Vec<Arc<[u8]>>>,
    messages_at_last_call: u64,
}

impl Harness {
    /// A new session in `format` with `config`, at [`T0`].
    pub fn new(format: WireFormat, config: Config) -> Harness {
        let store = Arc::new(MemoryStore::new());
        let session =
            Session::create(Arc::clone(&store), StreamId::random(), format, config, Timestamp::from_millis(T0))
                .unwrap();
        Harness {
            store,
            session,
            now: T0,
            step_ms: STEP_MS,
            wire: Wire(format),
            calls: Vec::new(),
            live_timeline: Vec::new(),
            live: Timeline::new(),
            prev_view: None,
            messages_at_last_call: 0,
        }
    }

    /// Appends messages (one batch).
    pub fn append(&mut self, messages: Vec<Message>) {
        self.session.append(messages).unwrap();
    }

    /// Plans and commits one call at the current time, then advances the clock.
    pub fn call(&mut self) -> &Call {
        self.call_reported(None)
    }

    /// Like [`Harness::call`] with provider-reported input tokens.
    pub fn call_reported(&mut self, reported: Option<u64>) -> &Call {
        let plan = self.session.plan(Timestamp::from_millis(self.now)).unwrap();
        let view = self.session.plan_view(&plan);
        let (level, view_tokens, view_messages, prefix_reused, digest) =
            (plan.level(), plan.view_tokens, plan.view_messages, plan.prefix_reused, plan.digest.clone());
        let call = plan.call();
        let committed =
            self.session.commit(plan, Timestamp::from_millis(self.now), reported.map(ctxlog::Usage::prompt)).unwrap();
        for ev in &committed.events {
            let version = committed.version;
            if let Some(rec) = self.live.feed(version, ev, self.session.state()) {
                self.live_timeline.push(rec);
            }
        }
        let bytes_appended_only = self.prev_view.as_ref().is_some_and(|p| view.starts_with(p));
        let count = self.session.state().message_count();
        let new_messages = count - self.messages_at_last_call;
        self.messages_at_last_call = count;
        self.prev_view = Some(view.clone());
        self.now += self.step_ms;
        self.calls.push(Call {
            call,
            events: committed.events,
            level,
            view_tokens,
            view_messages,
            prefix_reused,
            digest,
            view,
            bytes_appended_only,
            new_messages,
        });
        self.calls.last().unwrap()
    }

    /// Asks for a summary job and prepares it with the built-in summarizer (extractive for a
    /// span of messages, condensed for earlier summaries). Returns whether a `SummaryPrepared`
    /// was written.
    pub fn prepare_extractive(&mut self) -> bool {
        let Some(job) = self.session.summary_job() else { return false };
        let text = self.session.summarize(&job).unwrap();
        matches!(self.session.prepare(&job, text, Produced::extractive()).unwrap(), Prepared::Written(_))
    }

    /// Seqs currently removed by an edit.
    pub fn removed_set(&self) -> BTreeSet<u64> {
        edited_set(self, |k| k == EditKind::Removed)
    }

    /// Seqs currently stubbed.
    pub fn stubbed_set(&self) -> BTreeSet<u64> {
        edited_set(self, |k| matches!(k, EditKind::Stubbed { .. }))
    }

    /// Seqs currently truncated.
    pub fn truncated_set(&self) -> BTreeSet<u64> {
        edited_set(self, |k| matches!(k, EditKind::Truncated { .. }))
    }

    /// Every `GuardRaised` of the run, by kind.
    pub fn guard_counts(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for c in &self.calls {
            for g in c.guards() {
                *out.entry(g.name()).or_insert(0) += 1;
            }
        }
        out
    }

    /// The timeline replayed (strict) from the store.
    pub fn replayed_timeline(&self) -> Vec<CallRecord> {
        replay::replay(self.store.as_ref(), self.session.id(), replay::Mode::Strict, None).unwrap().timeline
    }

    /// `verify` passes and the replayed timeline equals the live one.
    pub fn assert_verified(&self) {
        let report = replay::verify(self.store.as_ref(), self.session.id()).unwrap();
        assert!(report.ok(), "verify: {:?}", report.problems);
        assert_eq!(report.calls, self.calls.len() as u64);
        assert_eq!(self.replayed_timeline(), self.live_timeline, "replayed timeline differs from the live one");
    }

    /// All stored record bytes of the session.
    pub fn log_bytes(&self) -> Vec<Vec<u8>> {
        self.store
            .read(self.session.id(), 1, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|r| r.record.as_bytes().to_vec())
            .collect()
    }
}

fn edited_set(h: &Harness, pred: impl Fn(EditKind) -> bool) -> BTreeSet<u64> {
    h.session
        .state()
        .entries()
        .iter()
        .enumerate()
        .filter(|(_, e)| e.edit.as_ref().is_some_and(|r| pred(r.kind)))
        .map(|(i, _)| i as u64)
        .collect()
}

/// Tool-pair problems of a rendered view, read from its JSON alone: a result whose call is
/// not earlier in the view, or a call answered somewhere in the log (`answered`) whose result
/// is not in the view. Empty when the view is sound.
pub fn rendered_pair_problems(view: &[Arc<[u8]>], answered: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut calls_seen = BTreeSet::new();
    let mut results_seen = BTreeSet::new();
    for (i, bytes) in view.iter().enumerate() {
        let v: Value = serde_json::from_slice(bytes).unwrap();
        let (calls, results) = pair_ids(&v);
        for id in results {
            if !calls_seen.contains(&id) {
                problems.push(format!("view[{i}] answers {id:?} whose call is not earlier in the view"));
            }
            results_seen.insert(id);
        }
        calls_seen.extend(calls);
    }
    for id in calls_seen.intersection(answered) {
        if !results_seen.contains(id) {
            problems.push(format!("call {id:?} is answered in the log but its result is not in the view"));
        }
    }
    problems
}

/// (call ids made, result ids answered) of one rendered message, both wire formats.
pub fn pair_ids(v: &Value) -> (Vec<String>, Vec<String>) {
    let s = |x: &Value| x.as_str().map(str::to_owned);
    let mut calls = Vec::new();
    let mut results = Vec::new();
    if let Some(blocks) = v.get("content").and_then(Value::as_array) {
        for b in blocks {
            match b.get("type").and_then(Value::as_str) {
                Some("tool_use") => calls.extend(b.get("id").and_then(s)),
                Some("tool_result") => results.extend(b.get("tool_use_id").and_then(s)),
                _ => {}
            }
        }
    }
    if let Some(tc) = v.get("tool_calls").and_then(Value::as_array) {
        calls.extend(tc.iter().filter_map(|c| c.get("id").and_then(s)));
    }
    results.extend(v.get("tool_call_id").and_then(s));
    (calls, results)
}

/// Compact JSONL of a timeline for snapshots: one line per call with the numbers that matter.
pub fn timeline_jsonl(timeline: &[CallRecord]) -> String {
    let mut out = String::new();
    for r in timeline {
        let by = |kind: &str| -> Vec<u64> { r.edits.iter().filter(|e| e.kind == kind).map(|e| e.seq).collect() };
        let line = json!({
            "call": r.call,
            "messages": r.messages,
            "view_messages": r.view_messages,
            "view_tokens": r.view_tokens,
            "level": r.level,
            "compacted": r.compacted,
            "flushed": r.flushed,
            "flush": r.flush.as_ref().map(|f| format!("{} {}→{}", f.reason, f.from, f.to)),
            "removed": by("removed"),
            "truncated": by("truncated"),
            "stubbed": by("stubbed"),
            "guards": r.guards.iter().map(|g| format!("{}: {}", g.kind, g.detail)).collect::<Vec<_>>(),
            "prefix_reused": r.prefix_reused,
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}
