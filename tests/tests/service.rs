//! A service embedding ctxlog: provider usage as the meter's anchor, the guard against partial
//! usage, and commits of requests that were sent while the user kept typing.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use ctxlog::config::Config;
use ctxlog::event::{Event, GuardKind};
use ctxlog::replay;
use ctxlog::request::{CacheTtl, RequestOptions};
use ctxlog::session::{Prepared, Produced};
use ctxlog::{MemoryStore, Message, Session, Store, StreamId, Timestamp, Usage, WireFormat};
use ctxlog_tests::provider::{Api, FakeProvider};
use serde_json::{json, Value};

const T0: u64 = 1_767_225_600_000;

fn msg(v: Value) -> Message {
    ctxlog::internal::wire::parse_message(&v.to_string()).unwrap()
}

/// About `bytes` of source code, different for each `seed`.
fn code(seed: usize, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 80);
    let mut j = 0;
    while out.len() < bytes {
        out.push_str(&format!(
            "pub fn handler_{seed}_{j}(input: &Request) -> Result<Response, Error> {{ route(input, {j}).map(|r| r.with_id({seed})) }}\n"
        ));
        j += 1;
    }
    out
}

/// The options a service sends with every call.
fn options() -> RequestOptions {
    RequestOptions::new()
        .model("claude-sonnet-4-5")
        .max_tokens(4_096)
        .tools(r#"[{"name":"read_file","description":"Read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}]"#)
        .unwrap()
        .cache_breakpoints(CacheTtl::FiveMinutes)
}

/// How the host turns the provider's usage object into what it commits.
#[derive(Clone, Copy)]
enum Wiring {
    /// `Usage::from_anthropic`: the whole prompt.
    Whole,
    /// What the old README did: Anthropic's `input_tokens` alone.
    InputTokensOnly,
}

struct Run {
    session_id: StreamId,
    counted: Vec<u64>,
    events: Vec<Event>,
}

/// An agent session of `calls` model calls, each answered by a tool call whose result is 20 KB
/// of code, on a cache-aware session with a 60,000-token budget, against the fake Anthropic
/// provider (calls 30 s apart: the cache stays warm).
fn agent(store: &MemoryStore, calls: usize, wiring: Wiring) -> Run {
    let config = Config { budget: 60_000, cache_aware: true, ..Config::default() };
    let id = StreamId::random();
    let mut session = Session::create(store, id, WireFormat::Anthropic, config, Timestamp::from_millis(T0)).unwrap();
    session
        .append(vec![
            msg(json!({"role": "system", "content": format!("You are a coding agent.\n{}", code(0, 4_000))})),
            msg(json!({"role": "user", "content": "PROJECT PATH IS ~/src/ora. Port every handler to the new router."})),
        ])
        .unwrap();
    let mut provider = FakeProvider::new(Api::Anthropic);
    let mut events = Vec::new();
    let mut now = T0;
    for call in 0..calls {
        now += 30_000;
        let plan = session.plan(Timestamp::from_millis(now)).unwrap();
        let request = session.request(&plan, &options()).unwrap();
        let usage = provider.send(request.body(), now);
        let reported = match wiring {
            Wiring::Whole => Usage::from_anthropic(&usage).unwrap(),
            Wiring::InputTokensOnly => Usage::prompt(usage["input_tokens"].as_u64().unwrap()),
        };
        events.extend(session.commit(plan, Timestamp::from_millis(now + 2_000), Some(reported)).unwrap().events);
        let id = format!("toolu_{call}");
        session
            .append(vec![
                msg(json!({"role": "assistant", "content": [
                    {"type": "text", "text": format!("Reading part {call}.")},
                    {"type": "tool_use", "id": id, "name": "read_file", "input": {"path": format!("src/h{call}.rs")}}
                ]})),
                msg(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": code(call + 1, 20_000)}
                ]})),
            ])
            .unwrap();
        while let Some(job) = session.summary_job() {
            let text = session.summarize(&job).unwrap();
            if let Prepared::Discarded(_) = session.prepare(&job, text, Produced::extractive()).unwrap() {
                break;
            }
        }
    }
    Run { session_id: id, counted: provider.counted.iter().map(|c| c.prompt).collect(), events }
}

fn guards(events: &[Event], kind: &GuardKind) -> usize {
    events.iter().filter(|e| matches!(e, Event::GuardRaised(g) if &g.kind == kind)).count()
}

#[test]
fn anthropic_usage_with_cache_reads_keeps_every_served_view_within_the_budget() {
    // Given a provider that reads most of each prompt from its cache (Anthropic's
    // `input_tokens` is then a few hundred tokens) and counts 30% more than the estimate,
    let store = MemoryStore::new();
    // when a service commits what the provider reported for 50 calls,
    let run = agent(&store, 50, Wiring::Whole);
    // then the provider never counted a request over the 60,000-token budget (the issue's
    // session reached 94,454), although the conversation grew to over 300,000 tokens,
    let max = *run.counted.iter().max().unwrap();
    assert!(max <= 60_000, "a request of {max} provider tokens on a 60,000 budget: {:?}", run.counted);
    assert!(run.counted.len() == 50 && run.counted.iter().filter(|&&c| c > 40_000).count() > 10);
    // the reports were trusted, the cache was used, and the log verifies.
    assert_eq!(guards(&run.events, &GuardKind::UsageBelowEstimate), 0);
    let served: Vec<_> =
        run.events.iter().filter_map(|e| if let Event::RequestServed(s) = e { Some(s) } else { None }).collect();
    assert!(served.iter().all(|s| s.anchored && s.usage.is_some()));
    assert!(served.iter().filter(|s| s.usage.unwrap().cache_read > s.usage.unwrap().input * 10).count() > 25);
    assert!(served.iter().skip(1).all(|s| s.reported_tokens.unwrap() > s.view_tokens), "the provider counts more");
    let report = replay::verify(&store, run.session_id).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[test]
fn a_report_far_below_the_estimate_is_not_trusted_and_raises_the_guard_once() {
    // Given a host wired the way the old README was (Anthropic's `input_tokens` alone),
    let store = MemoryStore::new();
    // when it commits 30 calls whose cached prompts make that number tiny,
    let run = agent(&store, 30, Wiring::InputTokensOnly);
    // then the guard speaks once, naming the likely cause and the knob,
    assert_eq!(guards(&run.events, &GuardKind::UsageBelowEstimate), 1);
    let Some(Event::GuardRaised(g)) =
        run.events.iter().find(|e| matches!(e, Event::GuardRaised(g) if g.kind == GuardKind::UsageBelowEstimate))
    else {
        unreachable!()
    };
    assert!(g.detail.contains("input_tokens") && g.detail.contains("cache"), "{}", g.detail);
    assert_eq!(g.knob, "usage_floor_ratio");
    // and the meter did not anchor on those numbers: every such call is recorded unanchored,
    // with the report kept for the postmortem.
    let served: Vec<_> =
        run.events.iter().filter_map(|e| if let Event::RequestServed(s) = e { Some(s) } else { None }).collect();
    let low: Vec<_> = served.iter().filter(|s| s.reported_tokens.unwrap() * 2 < s.view_tokens).collect();
    assert!(low.len() > 20);
    assert!(low.iter().all(|s| !s.anchored && s.metered_tokens >= s.view_tokens));
    // Such a host overflows the budget (the meter is left with the estimate, which this
    // provider outcounts): the guard is how it finds out.
    assert!(*run.counted.iter().max().unwrap() > 60_000);
    // The timeline shows it on the call that raised it.
    let replayed = replay::replay(&store, run.session_id, replay::Mode::Strict, None).unwrap();
    let raised: Vec<_> =
        replayed.timeline.iter().filter(|c| c.guards.iter().any(|g| g.kind == "usage_below_estimate")).collect();
    assert_eq!(raised.len(), 1);
}

#[test]
fn the_usage_guard_re_arms_after_a_trusted_report() {
    let store = MemoryStore::new();
    let mut s = Session::create(
        &store,
        StreamId::random(),
        WireFormat::Anthropic,
        Config::default(),
        Timestamp::from_millis(T0),
    )
    .unwrap();
    s.append(vec![msg(json!({"role": "user", "content": code(1, 8_000)}))]).unwrap();
    let mut at = T0;
    let mut commit = |s: &mut Session<&MemoryStore>, usage: Usage| {
        at += 1_000;
        let plan = s.plan(Timestamp::from_millis(at)).unwrap();
        let estimate = plan.view_tokens;
        let events = s.commit(plan, Timestamp::from_millis(at), Some(usage)).unwrap().events;
        s.append(vec![msg(json!({"role": "assistant", "content": "ok"}))]).unwrap();
        s.append(vec![msg(json!({"role": "user", "content": "go on"}))]).unwrap();
        (estimate, guards(&events, &GuardKind::UsageBelowEstimate))
    };
    // The estimate is about 2,000 tokens: 900 is below half of it, 2,300 is not.
    let (estimate, raised) = commit(&mut s, Usage::prompt(900));
    assert!((1_900..2_100).contains(&estimate) && raised == 1, "{estimate} {raised}");
    assert_eq!(commit(&mut s, Usage::prompt(900)).1, 0, "latched: once per episode");
    assert_eq!(commit(&mut s, Usage::prompt(2_300)).1, 0);
    assert_eq!(commit(&mut s, Usage::prompt(900)).1, 1, "a trusted report re-armed it");
    // A floor of 0 trusts every report.
    let store = MemoryStore::new();
    let config = Config { usage_floor_ratio: 0.0, ..Config::default() };
    let mut s =
        Session::create(&store, StreamId::random(), WireFormat::Anthropic, config, Timestamp::from_millis(T0)).unwrap();
    s.append(vec![msg(json!({"role": "user", "content": code(1, 8_000)}))]).unwrap();
    let plan = s.plan(Timestamp::from_millis(T0)).unwrap();
    let events = s.commit(plan, Timestamp::from_millis(T0), Some(Usage::prompt(1))).unwrap().events;
    assert!(matches!(events.last(), Some(Event::RequestServed(r)) if r.anchored && r.reported_tokens == Some(1)));
    assert!(Config { usage_floor_ratio: 1.5, ..Config::default() }.validate().is_err());
}

#[test]
fn messages_appended_between_plan_and_commit_leave_the_served_request_committable() {
    // Given a call planned and sent,
    let store = MemoryStore::new();
    let mut s = Session::create(
        &store,
        StreamId::random(),
        WireFormat::Anthropic,
        Config::default(),
        Timestamp::from_millis(T0),
    )
    .unwrap();
    s.append(vec![msg(json!({"role": "user", "content": "Summarize the design doc."}))]).unwrap();
    let plan = s.plan(Timestamp::from_millis(T0 + 1_000)).unwrap();
    let sent = s.request(&plan, &RequestOptions::new()).unwrap();
    let sent_digest = plan.digest.clone();
    // when the user types two more messages while the model answers,
    s.append(vec![msg(json!({"role": "user", "content": "Also the appendix."}))]).unwrap();
    s.append(vec![msg(json!({"role": "user", "content": "And keep it short."}))]).unwrap();
    // then the request that was sent can still be rendered and committed, and the log records
    // the digest of what was sent, not of the view as it is now,
    assert_eq!(s.request(&plan, &RequestOptions::new()).unwrap().body(), sent.body());
    let committed = s.commit(plan, Timestamp::from_millis(T0 + 3_000), Some(Usage::prompt(12))).unwrap();
    let Some(Event::RequestServed(r)) = committed.events.last() else { panic!() };
    assert_eq!(r.digest, sent_digest);
    assert_eq!(r.view_messages, 1);
    // the next call serves the previous view plus the two new messages (a pure append),
    let next = s.plan(Timestamp::from_millis(T0 + 5_000)).unwrap();
    assert!(next.prefix_reused);
    assert_eq!(next.view_messages, 3);
    s.commit(next, Timestamp::from_millis(T0 + 6_000), None).unwrap();
    // and verify re-renders the served view from the log and agrees.
    let report = replay::verify(&store, s.id()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.calls, 2);
    let rebuilt = replay::served_request(&store, s.id(), 0, &RequestOptions::new()).unwrap();
    assert_eq!(rebuilt.body(), sent.body());
}

#[test]
fn a_plan_that_flushed_or_edited_is_committed_on_top_of_the_appends() {
    // Given a call that compacts (its plan edits the view on a scratch copy),
    let store = MemoryStore::new();
    let config = Config { budget: 6_000, ..Config::default() };
    let mut s =
        Session::create(&store, StreamId::random(), WireFormat::Anthropic, config, Timestamp::from_millis(T0)).unwrap();
    s.append(vec![msg(json!({"role": "user", "content": "Start."}))]).unwrap();
    for i in 0..6 {
        let id = format!("t{i}");
        s.append(vec![
            msg(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "read", "input": {}}]})),
            msg(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": code(i, 4_000)}]})),
        ])
        .unwrap();
    }
    let plan = s.plan(Timestamp::from_millis(T0 + 1_000)).unwrap();
    assert!(!plan.events().is_empty(), "the plan compacts");
    let sent = s.request(&plan, &RequestOptions::new()).unwrap();
    // when a message arrives before the commit,
    s.append(vec![msg(json!({"role": "user", "content": "One more thing."}))]).unwrap();
    // then the batch is validated and applied on top of it, with the digest that was sent,
    let committed = s.commit(plan, Timestamp::from_millis(T0 + 2_000), None).unwrap();
    let Some(Event::RequestServed(r)) = committed.events.last() else { panic!() };
    assert_eq!(r.digest, sent.view_digest());
    assert!(s.plan(Timestamp::from_millis(T0 + 3_000)).unwrap().prefix_reused);
    let report = replay::verify(&store, s.id()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[test]
fn only_a_competing_commit_a_prepare_or_a_restore_makes_a_plan_stale() {
    use ctxlog::session::StaleCause;
    use ctxlog::SessionError;
    let store = MemoryStore::new();
    let config = Config { budget: 3_000, ..Config::default() };
    let mut s =
        Session::create(&store, StreamId::random(), WireFormat::Anthropic, config, Timestamp::from_millis(T0)).unwrap();
    s.append(vec![msg(json!({"role": "user", "content": "Start."}))]).unwrap();
    for i in 0..8 {
        s.append(vec![msg(json!({"role": "assistant", "content": code(i, 1_500)}))]).unwrap();
        s.append(vec![msg(json!({"role": "user", "content": format!("next {i}")}))]).unwrap();
    }
    let stale = |err: SessionError| match err {
        SessionError::StalePlan { by, .. } => by,
        other => panic!("{other}"),
    };
    // A prepare the plan did not see.
    let plan = s.plan(Timestamp::from_millis(T0 + 1_000)).unwrap();
    let job = s.summary_job().expect("over the soft threshold");
    let text = s.summarize(&job).unwrap();
    assert!(matches!(s.prepare(&job, text, Produced::extractive()).unwrap(), Prepared::Written(_)));
    let head = store.head(s.id()).unwrap();
    assert_eq!(
        stale(s.commit(plan, Timestamp::from_millis(T0 + 2_000), None).unwrap_err()),
        StaleCause::SummaryPrepared
    );
    assert_eq!(store.head(s.id()).unwrap(), head, "nothing written");
    // A restore.
    let plan = s.plan(Timestamp::from_millis(T0 + 3_000)).unwrap();
    s.commit(plan, Timestamp::from_millis(T0 + 3_000), None).unwrap();
    let st = s.state();
    let hidden = (0..st.message_count()).find(|&seq| st.hidden_by_flush(seq) || st.entry(seq).unwrap().edit.is_some());
    let plan = s.plan(Timestamp::from_millis(T0 + 4_000)).unwrap();
    s.restore(hidden.expect("the call flushed or edited"), "test", "need it").unwrap();
    assert_eq!(stale(s.request(&plan, &RequestOptions::new()).unwrap_err()), StaleCause::Restored);
    assert_eq!(stale(s.commit(plan, Timestamp::from_millis(T0 + 5_000), None).unwrap_err()), StaleCause::Restored);
    // Another session's plan.
    let other_store = MemoryStore::new();
    let mut other = Session::create(
        &other_store,
        StreamId::random(),
        WireFormat::Anthropic,
        Config::default(),
        Timestamp::from_millis(T0),
    )
    .unwrap();
    other.append(vec![msg(json!({"role": "user", "content": "hi"}))]).unwrap();
    let foreign = other.plan(Timestamp::from_millis(T0)).unwrap();
    assert_eq!(
        stale(s.commit(foreign, Timestamp::from_millis(T0 + 6_000), None).unwrap_err()),
        StaleCause::OtherSession
    );
}
