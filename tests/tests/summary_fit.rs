//! Summaries that fit the summarizer (issue 22): a standalone job cut to the summarizer's
//! context with room for its answer, `max_tokens` from the job's limit, the limit stated in
//! the request, a fork over the context refused, an echoed prompt rejected, and a
//! deterministic 4xx not sent again until the job changes.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use ctxlog::event::{Event, SummaryFailure, SummaryMode};
use ctxlog::internal::tokens::text_tokens;
use ctxlog::session::{SummaryFinished, SummaryOutcome};
use ctxlog::summary_call::SummaryCall;
use ctxlog::summary_fit;
use ctxlog::{MemoryStore, Session, StreamId, SummaryJob};
use ctxlog_tests::provider::{Api, FakeProvider};
use ctxlog_tests::summaries::{call, start, turn, T0};
use serde_json::Value;

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

/// The estimated tokens of a request body's texts (what the summarizer's context must hold
/// besides the answer): every string in it, chars/4.
fn prompt_tokens(body: &[u8]) -> u64 {
    fn walk(v: &Value, n: &mut u64) {
        match v {
            Value::String(s) => *n += u64::from(text_tokens(s)),
            Value::Array(a) => a.iter().for_each(|x| walk(x, n)),
            Value::Object(o) => o.values().for_each(|x| walk(x, n)),
            _ => {}
        }
    }
    let mut n = 0;
    walk(&serde_json::from_slice(body).unwrap(), &mut n);
    n
}

#[test]
fn a_standalone_job_is_cut_at_a_turn_to_fit_the_context_with_room_for_the_answer() {
    let store = MemoryStore::new();
    let (mut s, job) = served(&store, 14);
    let whole = s.summary_request(&job, &SummaryCall::default()).unwrap();
    let context = 2_000;
    assert!(prompt_tokens(whole.body()) + whole.max_tokens > context, "the job must not fit as it is");
    let call = SummaryCall::default().context(context);
    let req = s.summary_request(&job, &call).unwrap();
    // Cut: a shorter span, ending where a human turn starts, and the request fits.
    assert_eq!(req.job.from, job.from);
    assert!(req.job.to < job.to, "{:?} vs {:?}", req.job, job);
    assert!(s.state().entry(req.job.to).unwrap().is_human());
    assert!(req.job.span_tokens < job.span_tokens);
    let body: Value = serde_json::from_slice(req.body()).unwrap();
    assert_eq!(body["max_tokens"], req.max_tokens);
    assert!(
        prompt_tokens(req.body()) + req.max_tokens + summary_fit::REQUEST_OVERHEAD_TOKENS <= context,
        "{} + {} over {context}",
        prompt_tokens(req.body()),
        req.max_tokens
    );
    // The limit and the span's size are stated.
    let text = body["messages"][0]["content"].as_str().unwrap();
    let budget = summary_fit::answer_budget(&req.job);
    assert!(
        text.starts_with(&format!(
            "LIMIT: the span takes about {} tokens; write at most {budget} tokens",
            req.job.span_tokens
        )),
        "{text}"
    );
    // Without a context, the job as the engine made it.
    assert_eq!(whole.job, job);
    // The attempt summarizes the shorter span, and its summary is recorded for it.
    let ask = s.summary_job_for(&call).unwrap().unwrap();
    assert_eq!(ask, req.job);
    let attempt = s.start_summary(&job, &call).unwrap();
    assert_eq!(attempt.job, req.job);
    let done = s.finish_summary(attempt, SummaryOutcome::text("Handlers 0-1 ported; error codes stable.")).unwrap();
    let SummaryFinished::Prepared(c) = done else { panic!("prepared") };
    let Some(Event::SummaryPrepared(p)) = c.events.last() else { panic!() };
    assert_eq!((p.from, p.to), (req.job.from, req.job.to));
    assert_eq!(s.state().compacted(), req.job.to);
}

#[test]
fn a_first_turn_too_big_for_the_context_is_cut_in_the_middle_and_says_so() {
    let store = MemoryStore::new();
    let (s, job) = served(&store, 14);
    let context = 800;
    let req = s.summary_request(&job, &SummaryCall::default().context(context)).unwrap();
    let body: Value = serde_json::from_slice(req.body()).unwrap();
    let text = body["messages"][0]["content"].as_str().unwrap();
    assert!(text.contains("characters left out here: the summarizer's context holds 800 tokens"), "{text}");
    assert!(prompt_tokens(req.body()) + req.max_tokens + summary_fit::REQUEST_OVERHEAD_TOKENS <= context);
}

#[test]
fn a_fork_over_the_context_falls_back_to_a_standalone_that_fits() {
    let store = MemoryStore::new();
    let (s, job) = served(&store, 14);
    let fork = SummaryCall::new(SummaryMode::Fork);
    let free = s.summary_request(&job, &fork).unwrap();
    assert_eq!(free.mode_used, SummaryMode::Fork);
    let body: Value = serde_json::from_slice(free.body()).unwrap();
    let added = body["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_owned();
    assert!(added.contains("LIMIT: the span takes about"), "{added}");
    assert_eq!(body["max_tokens"], free.max_tokens);
    let tight = s.summary_request(&job, &fork.clone().context(2_000)).unwrap();
    assert_eq!(tight.mode_used, SummaryMode::Standalone);
    assert_eq!(tight.refusal.as_ref().map(|r| r.name()), Some("over_context"));
    assert!(prompt_tokens(tight.body()) + tight.max_tokens <= 2_000);
}

#[test]
fn max_tokens_is_derived_from_the_job_or_set_by_the_override() {
    let store = MemoryStore::new();
    let (s, job) = served(&store, 14);
    let derived = s.summary_request(&job, &SummaryCall::default()).unwrap();
    let b = summary_fit::answer_budget(&job);
    assert_eq!(derived.max_tokens, b + b / 2 + 16);
    assert!(derived.max_tokens < job.span_tokens, "a summary never asks for more than its span");
    let fixed = s.summary_request(&job, &SummaryCall::default().max_tokens(300)).unwrap();
    assert_eq!(fixed.max_tokens, 300);
    assert_eq!(serde_json::from_slice::<Value>(fixed.body()).unwrap()["max_tokens"], 300);
}

#[test]
fn an_answer_that_echoes_the_scope_sentence_is_rejected_as_echo() {
    let store = MemoryStore::new();
    let (mut s, job) = served(&store, 10);
    let attempt = s.start_summary(&job, &SummaryCall::new(SummaryMode::Fork)).unwrap();
    assert_eq!(attempt.request.mode_used, SummaryMode::Fork);
    let body: Value = serde_json::from_slice(attempt.request.body()).unwrap();
    let added = body["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_owned();
    let scope = added.split("SCOPE: ").nth(1).unwrap().split(" The last message").next().unwrap().to_owned();
    let done = s.finish_summary(attempt, SummaryOutcome::text(format!("SCOPE: {scope}"))).unwrap();
    let SummaryFinished::Failed { failure: SummaryFailure::Echo { per_mille }, .. } = done else {
        panic!("echo: {done:?}")
    };
    assert!(per_mille >= 500);
    assert_eq!(s.state().compacted(), job.from, "an echo replaces nothing");
    // A real summary of the same job is accepted.
    let attempt = s.start_summary(&job, &SummaryCall::new(SummaryMode::Fork)).unwrap();
    let summary = "1. User Requests & Decisions: port every handler of ~/src/ora to the new router.\n\
                   4. Current Task State: handlers 0 to 3 ported; handler 4 is next.";
    assert!(matches!(s.finish_summary(attempt, SummaryOutcome::text(summary)).unwrap(), SummaryFinished::Prepared(_)));
}

#[test]
fn a_truncated_answer_is_a_recorded_failure() {
    let store = MemoryStore::new();
    let (mut s, job) = served(&store, 10);
    let attempt = s.start_summary(&job, &SummaryCall::default()).unwrap();
    let done =
        s.finish_summary(attempt, SummaryOutcome::failed(SummaryFailure::Truncated { max_tokens: None })).unwrap();
    let SummaryFinished::Failed { failure, committed } = done else { panic!() };
    assert_eq!(failure.as_str(), "truncated");
    assert!(matches!(committed.events.last(), Some(Event::SummaryFailed(f)) if f.reason.as_str() == "truncated"));
    // It round-trips through the log as it was written.
    let r = ctxlog::replay::replay(&store, s.id(), ctxlog::replay::Mode::Strict, None).unwrap();
    let t = r.trailing;
    assert_eq!(t.summaries.len(), 1, "the attempt after the last call is in the replay");
    assert_eq!(t.summaries[0].outcome, "truncated");
    assert_eq!(t.after_calls, s.state().calls());
}

#[test]
fn a_deterministic_4xx_is_recorded_once_and_the_job_waits_until_it_changes() {
    let store = MemoryStore::new();
    let (mut s, job) = served(&store, 10);
    let call_ = SummaryCall::default();
    let attempt = s.start_summary(&job, &call_).unwrap();
    let refused = SummaryFailure::Rejected { status: 400, detail: "exceed_context_size_error".into() };
    let done = s.finish_summary(attempt, SummaryOutcome::failed(refused)).unwrap();
    assert!(matches!(done, SummaryFinished::Failed { failure: SummaryFailure::Rejected { status: 400, .. }, .. }));
    // The same job is not offered again: not by summary_job, not for this summarizer, and not
    // after a reopen (the latch is in the log).
    assert_eq!(s.summary_job(), None);
    assert_eq!(s.summary_job_for(&call_).unwrap(), None);
    let id = s.id();
    drop(s);
    let mut s = Session::open(&store, id).unwrap();
    assert_eq!(s.summary_job(), None);
    // A different context cuts the span elsewhere: that job is a new request, offered.
    let cut = [2_000, 1_600, 1_300, 1_000]
        .into_iter()
        .find(|&c| s.summary_request(&job, &SummaryCall::default().context(c)).unwrap().job != job)
        .expect("some context cuts the job");
    let other = s.summary_job_for(&SummaryCall::default().context(cut)).unwrap();
    assert!(other.is_some_and(|j| j.to < job.to));
    // More of the conversation makes a different job, offered again.
    let mut provider = FakeProvider::new(Api::Anthropic);
    let mut offered = None;
    for i in 10..30 {
        s.append(turn(i)).unwrap();
        call(&mut s, &mut provider, T0 + 20_000 * (i as u64 + 1));
        offered = s.summary_job();
        if offered.is_some() {
            break;
        }
    }
    let offered = offered.expect("a changed job is offered again");
    assert!(offered != job);
    let events = ctxlog::replay::replay(&store, id, ctxlog::replay::Mode::Strict, None).unwrap();
    let failed = events.timeline.iter().flat_map(|c| &c.summaries).filter(|a| a.outcome == "rejected").count();
    assert_eq!(failed + events.trailing.summaries.len(), 1, "recorded once");
}

#[test]
fn a_summary_whose_span_the_ladder_edited_meanwhile_is_still_prepared_and_flushed() {
    let store = MemoryStore::new();
    let mut s = start(&store, StreamId::random());
    let mut provider = FakeProvider::new(Api::Anthropic);
    let mut i = 0;
    let job = loop {
        s.append(turn(i)).unwrap();
        call(&mut s, &mut provider, T0 + 20_000 * (i as u64 + 1));
        i += 1;
        if let Some(job) = s.summary_job() {
            break job;
        }
    };
    let edited_then =
        |s: &Session<&MemoryStore>| (job.from..job.to).filter(|&q| s.state().entry(q).unwrap().edit.is_some()).count();
    let before = edited_then(&s);
    let attempt = s.start_summary(&job, &SummaryCall::default()).unwrap();
    // While the model writes, the agent goes on and the ladder edits messages of the span.
    while edited_then(&s) == before {
        assert!(i < 60, "the ladder never edited the span");
        s.append(turn(i)).unwrap();
        call(&mut s, &mut provider, T0 + 20_000 * (i as u64 + 1));
        i += 1;
    }
    let done =
        s.finish_summary(attempt, SummaryOutcome::text("Handlers ported one by one; error codes kept.")).unwrap();
    assert!(matches!(done, SummaryFinished::Prepared(_)), "wasted: {done:?}");
    assert_eq!(s.state().compacted(), job.to);
    // And the next call can flush it.
    s.append(turn(i)).unwrap();
    let c = call(&mut s, &mut provider, T0 + 20_000 * (i as u64 + 1) + 600_000);
    assert!(c.events.iter().any(|e| matches!(e, Event::Flushed(f) if f.to >= job.to)), "{:?}", c.events);
}
