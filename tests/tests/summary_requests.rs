//! Summaries written by a model: the request record, the standalone and fork requests the core
//! builds, the refusal ladder, and the attempt lifecycle as events.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use ctxlog::event::{Event, GuardKind, SummaryFailure, SummaryMode, ToolsRecord};
use ctxlog::replay::{self, Mode};
use ctxlog::session::{SummaryFinished, SummaryOutcome};
use ctxlog::summary_call::{self, SummaryCall, STANDALONE_PROMPT};
use ctxlog::{MemoryStore, Session, Store, StreamId, SummaryJob, Timestamp};
use ctxlog_tests::provider::{Api, FakeProvider};
use ctxlog_tests::summaries::{self, call, msg, options, start, turn, T0, TOOLS};
use serde_json::{json, Value};

/// Given a session served `calls` calls with their request records and turns appended after
/// each, with a summary job pending.
fn served(store: &MemoryStore, calls: usize) -> (Session<&MemoryStore>, SummaryJob) {
    let mut s = start(store, StreamId::random());
    let mut provider = FakeProvider::new(Api::Anthropic);
    for i in 0..calls {
        s.append(turn(i)).unwrap();
        call(&mut s, &mut provider, T0 + 20_000 * (i as u64 + 1));
    }
    let job = s.summary_job().expect("a summary job is due");
    (s, job)
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

fn fork() -> SummaryCall {
    SummaryCall::new(SummaryMode::Fork)
}

#[test]
fn commit_request_records_model_breakpoints_and_the_tools_once_as_a_blob() {
    let store = MemoryStore::new();
    let (s, _) = served(&store, 10);
    let mut records = Vec::new();
    replay::for_each_event(&store, s.id(), 1, None, |_, ev| {
        if let Event::RequestServed(r) = ev {
            records.push(r.request.unwrap());
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(records.len(), 10);
    let id = ctxlog::BlobId::of(TOOLS.as_bytes());
    for r in &records {
        assert_eq!(r.model.as_deref(), Some("claude-sonnet-4-5"));
        assert_eq!(r.tools, ToolsRecord::Blob { id: id.clone(), bytes: TOOLS.len() as u64 });
        assert_eq!(r.breakpoints, Some(ctxlog::CacheTtl::FiveMinutes));
    }
    assert_eq!(store.get_blob(&id).unwrap().unwrap(), TOOLS.as_bytes());
    // Without tools the record says so; a plain commit records nothing (tools unknown).
    let mut t = start(&store, StreamId::random());
    let plan = t.plan(Timestamp::from_millis(T0 + 1)).unwrap();
    let c = t.commit_request(plan, &ctxlog::RequestOptions::new().model("m"), Timestamp::from_millis(T0 + 2), None);
    let Some(Event::RequestServed(r)) = c.unwrap().events.pop() else { panic!() };
    assert_eq!(r.request.unwrap().tools, ToolsRecord::None);
    t.append(turn(0)).unwrap();
    let plan = t.plan(Timestamp::from_millis(T0 + 3)).unwrap();
    let Some(Event::RequestServed(r)) = t.commit(plan, Timestamp::from_millis(T0 + 4), None).unwrap().events.pop()
    else {
        panic!()
    };
    assert!(r.request.is_none());
}

#[test]
fn the_fork_request_is_the_last_served_request_byte_for_byte_plus_one_user_message() {
    let store = MemoryStore::new();
    let (s, job) = served(&store, 10);
    let req = s.summary_request(&job, &fork()).unwrap();
    assert_eq!((req.mode_used, &req.refusal), (SummaryMode::Fork, &None));
    // The last request, rebuilt from the log with the options it was sent with.
    let last = s.state().calls() - 1;
    assert_eq!(req.prefix_call, Some(last));
    let opts = options().max_tokens(summary_call::DEFAULT_MAX_TOKENS);
    let sent = replay::served_request(&store, s.id(), last, &opts).unwrap();
    let body = req.body();
    let messages = sent.messages_json();
    let open = &messages[..messages.len() - 1]; // without the closing `]`
    let at = body.windows(open.len()).position(|w| w == open).expect("the served messages, byte for byte");
    assert_eq!(body[at + open.len()], b',', "exactly one message follows");
    let (fork, sent_v) = (json(body), json(sent.body()));
    let (fm, sm) = (fork["messages"].as_array().unwrap(), sent_v["messages"].as_array().unwrap());
    assert_eq!(fm.len(), sm.len() + 1);
    assert_eq!(&fm[..sm.len()], &sm[..]);
    // No system message added: the system prompt is the served one, nothing else says system.
    assert_eq!(fork["system"], sent_v["system"]);
    assert!(fm.iter().all(|m| m["role"] != "system"));
    // Tools and model are the recorded ones.
    assert_eq!(fork["tools"], serde_json::from_str::<Value>(TOOLS).unwrap());
    assert_eq!(fork["model"], "claude-sonnet-4-5");
    // The one message is the user's instruction naming the span; the span is not sent again.
    let added = &fm[sm.len()];
    assert_eq!(added["role"], "user");
    let text = added["content"].as_str().unwrap();
    assert!(text.contains("following the system prompt"), "{text}");
    assert!(text.contains("LIMIT: the span takes about"), "the budget is stated: {text}");
    assert_eq!(fork["max_tokens"], req.max_tokens);
    let span = s.messages(job.from..job.to).unwrap();
    let first_result = summary_call::render_message(span.iter().find(|m| m.is_tool_result()).unwrap());
    assert!(first_result.len() > 1_000 && !text.contains(&first_result[..400]), "the span was re-sent");
    assert!(text.len() < summary_call::FORK_PROMPT.len() + 700, "{} bytes", text.len());
}

#[test]
fn the_standalone_request_is_byte_identical_to_a_reference_built_independently() {
    let store = MemoryStore::new();
    let mut s = start(&store, StreamId::random());
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    let args = format!("{{\"path\": \"src/{}.rs\"}}", "a".repeat(600));
    s.append(vec![
        msg(json!({"role": "assistant", "content": [
            {"type": "text", "text": "Let me look \"closely\"."},
            {"type": "thinking", "thinking": "private", "signature": "sig"},
            {"type": "tool_use", "id": "t1", "name": "read_file", "input": serde_json::from_str::<Value>(&args).unwrap()}
        ]})),
        msg(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "fn main() {}\n"},
            {"type": "text", "text": "and this screen"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
        ]})),
    ])
    .unwrap();
    for i in 1..11 {
        s.append(turn(i)).unwrap();
    }
    let job = s.summary_job().unwrap();
    // The span starts at the system prompt; it and the first question stay in the view
    // through a flush, so they are not part of the text to summarize.
    assert_eq!(job.from, 0);
    let req = s.summary_request(&job, &SummaryCall::default().model("claude-haiku-4-5")).unwrap();
    assert_eq!((req.mode_requested, req.mode_used), (SummaryMode::Standalone, SummaryMode::Standalone));
    // The reference: the rules of the README, applied by hand.
    let blob = ctxlog::BlobId::of(&ctxlog::internal::wire::decode_base64(png).unwrap());
    let compact_args = serde_json::from_str::<Value>(&args).unwrap().to_string();
    let cut: String = compact_args.chars().take(500).collect();
    let mut parts = vec![
        format!("[assistant]: Let me look \"closely\".\n  [tool_call: read_file({cut}…)]"),
        format!("[user]: and this screen\n[image image/png, 70 bytes, {blob}]\n[tool_result for t1]: fn main() {{}}\n"),
    ];
    for i in 1..11 {
        let id = format!("toolu_{i:03}");
        for m in turn(i) {
            let text = match m.role {
                ctxlog::message::Role::Assistant if m.call_ids().next().is_some() => {
                    format!("[assistant]: Reading handler {i}.\n  [tool_call: read_file({{\"path\":\"src/h{i}.rs\"}})]")
                }
                ctxlog::message::Role::User if m.is_tool_result() => {
                    format!("[tool_result for {id}]: {}", summaries::code(i, 1_500))
                }
                role => format!("[{}]: {}", role.as_str(), m.plain_text()),
            };
            parts.push(text);
        }
    }
    let span: Vec<String> = parts.into_iter().take((job.to - 2) as usize).collect();
    // The answer's budget is a quarter of the span, stated first; max_tokens is that plus half
    // again and 16.
    let budget = job.span_tokens / 4;
    let limit = format!(
        "LIMIT: the span takes about {} tokens; write at most {budget} tokens (about {} words).",
        job.span_tokens,
        budget * 3 / 4
    );
    let reference = format!(
        "{{\"model\":\"claude-haiku-4-5\",\"max_tokens\":{},\"system\":{},\"messages\":[{{\"role\":\"user\",\"content\":{}}}]}}",
        budget + budget / 2 + 16,
        serde_json::to_string(STANDALONE_PROMPT).unwrap(),
        serde_json::to_string(&format!("{limit}\n\n{}", span.join("\n\n"))).unwrap()
    );
    assert_eq!(req.max_tokens, budget + budget / 2 + 16);
    assert_eq!(std::str::from_utf8(req.body()).unwrap(), reference);
    for section in ["User Requests", "Files Examined", "Errors Encountered", "Current Task State", "Key Technical"] {
        assert!(STANDALONE_PROMPT.contains(section));
    }
}

/// The refusal `call` gets for the session's pending job.
fn refusal<S: Store>(s: &Session<S>, call: &SummaryCall) -> Option<&'static str> {
    let job = s.summary_job().unwrap();
    let req = s.summary_request(&job, call).unwrap();
    match &req.refusal {
        Some(r) if !r.is_decline() => {
            assert_eq!(req.mode_used, SummaryMode::Standalone, "a refusal falls back to standalone");
            assert_eq!(json(req.body())["system"], STANDALONE_PROMPT);
            Some(r.name())
        }
        _ => None,
    }
}

#[test]
fn rung_1_a_request_committed_without_its_record_refuses_the_fork() {
    let store = MemoryStore::new();
    let mut s = start(&store, StreamId::random());
    for i in 0..10 {
        s.append(turn(i)).unwrap();
    }
    let plan = s.plan(Timestamp::from_millis(T0 + 1_000_000)).unwrap();
    s.commit(plan, Timestamp::from_millis(T0 + 1_000_000), None).unwrap();
    // Even with a different model configured, the first rung speaks first.
    assert_eq!(refusal(&s, &fork().model("other")), Some("tools_not_recorded"));
    // The next recorded request makes forks possible again (the stale record is not used).
    let mut p = FakeProvider::new(Api::Anthropic);
    s.append(turn(50)).unwrap();
    call(&mut s, &mut p, T0 + 1_100_000);
    // That call's ladder brought the view below the soft threshold; one more turn brings a job.
    s.append(turn(51)).unwrap();
    assert_eq!(refusal(&s, &fork()), None);
}

#[test]
fn rung_2_a_different_summarization_model_refuses_the_fork() {
    let store = MemoryStore::new();
    let (s, _) = served(&store, 10);
    assert_eq!(refusal(&s, &fork().model("claude-haiku-4-5")), Some("model_differs"));
    assert_eq!(refusal(&s, &fork().model("claude-sonnet-4-5")), None, "the same model forks");
}

#[test]
fn rung_3_no_request_served_refuses_the_fork() {
    let store = MemoryStore::new();
    let mut s = start(&store, StreamId::random());
    for i in 0..10 {
        s.append(turn(i)).unwrap();
    }
    assert_eq!(refusal(&s, &fork()), Some("no_request_served"));
    assert_eq!(refusal(&s, &SummaryCall::new(SummaryMode::Auto)), Some("no_request_served"));
}

#[test]
fn rung_4_a_request_ending_with_unanswered_tool_calls_refuses_the_fork() {
    let store = MemoryStore::new();
    let (mut s, _) = served(&store, 10);
    s.append(vec![msg(json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "pending", "name": "read_file", "input": {"path": "x"}}
    ]}))])
    .unwrap();
    let mut p = FakeProvider::new(Api::Anthropic);
    call(&mut s, &mut p, T0 + 1_000_000);
    assert_eq!(refusal(&s, &fork()), Some("unanswered_tool_calls"));
}

#[test]
fn rung_5_a_span_not_inside_the_last_request_refuses_the_fork() {
    // Appended after the last call: the span reaches past the served prefix.
    let store = MemoryStore::new();
    let mut s = start(&store, StreamId::random());
    let mut p = FakeProvider::new(Api::Anthropic);
    call(&mut s, &mut p, T0 + 1_000);
    for i in 0..10 {
        s.append(turn(i)).unwrap();
    }
    assert_eq!(refusal(&s, &fork()), Some("span_not_in_last_request"));
    // A restore since the last call: the record is stale, never used.
    let store = MemoryStore::new();
    let (mut s, _) = served(&store, 14);
    let edited = (0..s.state().message_count()).find(|&q| s.state().entry(q).is_some_and(|e| e.edit.is_some()));
    let edited = edited.expect("the ladder edited a message");
    s.restore(edited, "test", "stale record").unwrap();
    assert!(!s.state().prefix_stable_since_last_call());
    let mut i = 100;
    while s.summary_job().is_none() {
        s.append(turn(i)).unwrap();
        i += 1;
    }
    let req = s.summary_request(&s.summary_job().unwrap(), &fork()).unwrap();
    let refused = req.refusal.unwrap();
    assert_eq!(refused.name(), "span_not_in_last_request");
    assert!(refused.describe().contains("the view changed since call"), "{}", refused.describe());
}

#[test]
fn rung_6_a_fork_that_cannot_be_built_falls_back() {
    // The session's records without its blobs: the recorded tools cannot be read back.
    let store = MemoryStore::new();
    let (s, _) = served(&store, 10);
    let bare = MemoryStore::new();
    let records: Vec<_> = store.read(s.id(), 1, 100_000).unwrap().into_iter().map(|r| r.record).collect();
    bare.append(s.id(), ctxlog::ExpectedVersion::Exact(0), &records).unwrap();
    let t = Session::open(&bare, s.id()).unwrap();
    assert_eq!(refusal(&t, &fork()), Some("fork_unbuildable"));
    // A summarizer speaking another API: no fork, and the standalone request is in its format.
    let job = s.summary_job().unwrap();
    let req = s.summary_request(&job, &fork().format(ctxlog::WireFormat::OpenAi)).unwrap();
    assert_eq!(req.refusal.as_ref().map(|r| r.name()), Some("fork_unbuildable"));
    let v = json(req.body());
    assert!(v.get("system").is_none());
    assert_eq!(v["messages"][0]["role"], "system");
    assert_eq!(v["messages"][0]["content"], STANDALONE_PROMPT);
    assert_eq!(req.format(), ctxlog::WireFormat::OpenAi);
}

#[test]
fn each_refusal_is_raised_once_per_session_and_counted_every_time() {
    let store = MemoryStore::new();
    let mut s = start(&store, StreamId::random());
    for i in 0..10 {
        s.append(turn(i)).unwrap();
    }
    for n in 1..=3u64 {
        let job = s.summary_job().unwrap();
        let attempt = s.start_summary(&job, &fork()).unwrap();
        let failed = s.finish_summary(attempt, SummaryOutcome::failed(SummaryFailure::Provider("HTTP 500".into())));
        assert!(matches!(failed.unwrap(), SummaryFinished::Failed { .. }));
        assert_eq!(s.state().fork_refusals().get("no_request_served"), Some(&n));
        if s.state().summarizer_paused() {
            break;
        }
    }
    let raised =
        guards(&store, s.id(), |k| matches!(k, GuardKind::ForkRefused { reason } if reason == "no_request_served"));
    assert_eq!(raised, 1, "raised once");
    // Every attempt carries its refusal in its own record.
    let r = replay::replay(&store, s.id(), Mode::Strict, None).unwrap();
    assert_eq!(r.state.fork_refusals().get("no_request_served"), Some(&3));
}

#[test]
fn a_refusal_after_requests_is_also_raised_once_and_counted_per_attempt() {
    let store = MemoryStore::new();
    let (mut s, _) = served(&store, 10);
    let other = fork().model("claude-haiku-4-5");
    for n in 1..=2u64 {
        let job = s.summary_job().unwrap();
        let attempt = s.start_summary(&job, &other).unwrap();
        assert_eq!(attempt.request.refusal.as_ref().map(|r| r.name()), Some("model_differs"));
        assert_eq!(attempt.request.model().as_deref(), Some("claude-haiku-4-5"), "standalone names its model");
        let done = s.finish_summary(attempt, SummaryOutcome::failed(SummaryFailure::Timeout)).unwrap();
        assert!(matches!(done, SummaryFinished::Failed { failure: SummaryFailure::Timeout, .. }));
        assert_eq!(s.state().fork_refusals().get("model_differs"), Some(&n));
    }
    let raised =
        guards(&store, s.id(), |k| matches!(k, GuardKind::ForkRefused { reason } if reason == "model_differs"));
    assert_eq!(raised, 1);
    // A wrong attempt handle is refused.
    let job = s.summary_job().unwrap();
    let attempt = s.start_summary(&job, &fork()).unwrap();
    let stray = attempt.clone();
    s.cancel_summary(attempt);
    assert!(matches!(s.finish_summary(stray, SummaryOutcome::text("x")), Err(ctxlog::SessionError::NotInFlight(_))));
}

fn guards(store: &MemoryStore, id: StreamId, want: impl Fn(&GuardKind) -> bool) -> usize {
    let mut n = 0;
    replay::for_each_event(store, id, 1, None, |_, ev| {
        if let Event::GuardRaised(g) = ev {
            n += usize::from(want(&g.kind));
        }
        Ok(())
    })
    .unwrap();
    n
}

#[test]
fn auto_forks_at_and_above_the_ratio_and_declines_below_it() {
    let store = MemoryStore::new();
    let (mut s, job) = served(&store, 10);
    let forked = s.summary_request(&job, &fork()).unwrap();
    let r = forked.span_tokens as f64 / forked.prefix_tokens as f64;
    for (knob, forks) in [(r - 0.01, true), (r, true), (r + 0.01, false)] {
        let req = s.summary_request(&job, &SummaryCall::new(SummaryMode::Auto).fork_min_span_ratio(knob)).unwrap();
        assert_eq!(req.mode_used == SummaryMode::Fork, forks, "ratio {r} against {knob}");
        assert_eq!(req.refusal.as_ref().map(|r| r.name()), (!forks).then_some("span_below_ratio"));
        if forks {
            assert_eq!(req.body(), forked.body(), "auto's fork is the fork");
        }
    }
    // A decline is recorded with the attempt and raised once.
    let auto = SummaryCall::new(SummaryMode::Auto).fork_min_span_ratio(0.99);
    let attempt = s.start_summary(&job, &auto).unwrap();
    let done = s.finish_summary(attempt, SummaryOutcome::text("Handlers 0-1 ported.")).unwrap();
    let SummaryFinished::Prepared(c) = done else { panic!("prepared") };
    let Some(Event::SummaryPrepared(p)) = c.events.last() else { panic!() };
    assert_eq!((p.mode_requested, p.mode_used), (SummaryMode::Auto, SummaryMode::Standalone));
    assert_eq!(p.refusal.as_deref(), Some("span_below_ratio"));
    assert!(c
        .events
        .iter()
        .any(|e| matches!(e, Event::GuardRaised(g) if g.kind.name() == "fork_refused:span_below_ratio")));
}

#[test]
fn a_summary_returning_after_its_span_was_summarized_or_edited_is_discarded_with_a_record() {
    let store = MemoryStore::new();
    let (mut s, job) = served(&store, 10);
    let attempt = s.start_summary(&job, &fork()).unwrap();
    // One attempt at a time, and no job is offered meanwhile.
    assert!(s.summary_job().is_none());
    assert!(matches!(s.start_summary(&job, &fork()), Err(ctxlog::SessionError::SummaryInFlight(_))));
    // Meanwhile the host's other path prepares the same span.
    let text = s.summarize(&job).unwrap();
    assert!(matches!(s.prepare(&job, text, ctxlog::Produced::extractive()).unwrap(), ctxlog::Prepared::Written(_)));
    let compacted = s.state().compacted();
    let done = s.finish_summary(attempt, SummaryOutcome::text("late").latency_ms(9_000)).unwrap();
    let SummaryFinished::Failed { failure: SummaryFailure::Stale(why), committed } = done else { panic!("stale") };
    assert!(!why.is_empty());
    let Some(Event::SummaryFailed(f)) = committed.events.last() else { panic!() };
    assert_eq!((f.latency_ms, f.mode_used), (Some(9_000), SummaryMode::Fork));
    assert_eq!(s.state().compacted(), compacted, "a failed attempt changes nothing else");
    assert_eq!(s.state().summaries().len(), 1);
    // An edit of the span (a restore of an edited message) makes the attempt stale too.
    let store = MemoryStore::new();
    let (mut s, _) = served(&store, 14);
    let job = s.summary_job().unwrap();
    let attempt = s.start_summary(&job, &SummaryCall::default()).unwrap();
    let edited = (job.from..job.to).find(|&q| s.state().entry(q).is_some_and(|e| e.edit.is_some()));
    let q = edited.expect("the ladder edited a message of the span");
    s.restore(q, "test", "edit the span meanwhile").unwrap();
    let done = s.finish_summary(attempt, SummaryOutcome::text("x")).unwrap();
    assert!(matches!(done, SummaryFinished::Failed { failure: SummaryFailure::Stale(_), .. }));
}

#[test]
fn empty_and_oversized_summaries_fail_and_three_failures_pause_the_summarizer_once() {
    let store = MemoryStore::new();
    let (mut s, job) = served(&store, 10);
    let outcomes = [
        (SummaryOutcome::text("   "), "empty"),
        (SummaryOutcome::text("word ".repeat(50_000)), "not_smaller"),
        (SummaryOutcome::failed(SummaryFailure::Timeout), "timeout"),
    ];
    for (i, (outcome, name)) in outcomes.into_iter().enumerate() {
        let attempt = s.start_summary(&s.summary_job().unwrap(), &fork()).unwrap();
        let SummaryFinished::Failed { failure, committed } = s.finish_summary(attempt, outcome).unwrap() else {
            panic!("{name} must fail")
        };
        assert_eq!(failure.as_str(), name);
        let paused = committed
            .events
            .iter()
            .any(|e| matches!(e, Event::GuardRaised(g) if g.kind == GuardKind::SummarizerPaused));
        assert_eq!(paused, i == 2, "the third failure in a row pauses, and says so");
    }
    assert_eq!(s.state().summary_failures(), 3);
    assert!(s.summary_job().is_none(), "paused: no job offered");
    assert_eq!(s.state().compacted(), job.from, "nothing prepared");
    // A call that needs no compaction ends the pause: here after a prepared summary is flushed.
    let text = s.summarize(&job).unwrap();
    s.prepare(&job, text, ctxlog::Produced::extractive()).unwrap();
    let mut p = FakeProvider::new(Api::Anthropic);
    for k in 0..4 {
        if !s.state().summarizer_paused() {
            break;
        }
        call(&mut s, &mut p, T0 + 2_000_000 + k * 1_000);
    }
    assert!(!s.state().summarizer_paused(), "a call that fits ends the pause");
    assert_eq!(s.state().summary_failures(), 0);
}

#[test]
fn a_session_with_fork_summaries_replays_to_its_timeline_and_verifies() {
    let store = MemoryStore::new();
    let id = StreamId::random();
    let mut s = start(&store, id);
    let attempts = summaries::run(&mut s, 14, SummaryMode::Fork, Some(1));
    let forks = attempts.iter().filter(|a| a.0 == SummaryMode::Fork && !a.2).count();
    assert!(forks >= 2, "{attempts:?}");
    assert!(attempts.iter().any(|a| a.2), "one failed attempt");
    let r = replay::replay(&store, id, Mode::Strict, None).unwrap();
    let recorded: usize = r.timeline.iter().map(|c| c.summaries.len()).sum();
    // Attempts after the last call are recorded, but belong to no call row yet.
    assert!(recorded <= attempts.len() && recorded >= attempts.len().saturating_sub(2), "{recorded} of {attempts:?}");
    let fork_rows: Vec<_> = r
        .timeline
        .iter()
        .flat_map(|c| &c.summaries)
        .filter(|a| a.mode_used == "fork" && a.outcome == "prepared")
        .collect();
    assert!(fork_rows.len() >= 2);
    assert!(
        fork_rows.iter().all(|a| a.usage.is_some_and(|u| u.cache_read > 0)),
        "a fork reads its prefix from the cache"
    );
    assert!(ctxlog::replay::verify(&store, id).unwrap().ok());
    // Reopened from the log (no snapshot) the session decides the same fork.
    let job = s.summary_job();
    let again = Session::open(&store, id).unwrap();
    if let Some(job) = job {
        assert_eq!(
            s.summary_request(&job, &fork()).unwrap().body(),
            again.summary_request(&job, &fork()).unwrap().body()
        );
    }
}
