//! Cache breakpoints placed by position (`RequestOptions::place_breakpoints`): the log keeps
//! every message's `cache_control` as the client first sent it, and a request rendered with a
//! placement carries none of them — only its own marks, each on the item the view shows at or
//! before the marked message — and the log rebuilds it byte for byte (`served_request`, the
//! fork summary's prefix) from the placement recorded with the call.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use ctxlog::config::Config;
use ctxlog::event::SummaryMode;
use ctxlog::internal::breakpoints::{Mark, Origin, Placement};
use ctxlog::session::{Prepared, Produced};
use ctxlog::SummaryCall;
use ctxlog::{
    parse_message, replay, CacheTtl, Event, MemoryStore, RequestOptions, Session, StreamId, Timestamp, WireFormat,
};
use serde_json::Value;

const T0: u64 = 1_767_225_600_000;
const SYSTEM: &str = r#"{"role":"system","content":[{"type":"text","text":"You port the ledger.","cache_control":{"type":"ephemeral"}}]}"#;

fn prose(i: usize, words: usize) -> String {
    (0..words).map(|w| format!("t{i}w{}", (w * 7919 + i * 104_729) % 1_000_003)).collect::<Vec<_>>().join(" ")
}

/// Every `cache_control` of an Anthropic body, as `where ttl`.
fn marks(body: &[u8]) -> Vec<String> {
    let v: Value = serde_json::from_slice(body).unwrap();
    let mut out = Vec::new();
    let ttl = |c: &Value| c.get("ttl").and_then(Value::as_str).unwrap_or("5m").to_owned();
    for (j, b) in v["system"].as_array().into_iter().flatten().enumerate() {
        if let Some(c) = b.get("cache_control") {
            out.push(format!("system.{j} {}", ttl(c)));
        }
    }
    for (i, m) in v["messages"].as_array().into_iter().flatten().enumerate() {
        for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
            if let Some(c) = b.get("cache_control") {
                out.push(format!("messages.{i}.{j} {}", ttl(c)));
            }
        }
    }
    out
}

fn summaries(session: &mut Session<&MemoryStore>) {
    while let Some(job) = session.summary_job() {
        let text = session.summarize(&job).unwrap();
        if let Prepared::Discarded(_) = session.prepare(&job, text, Produced::extractive()).unwrap() {
            break;
        }
    }
}

/// Anthropic's moving-breakpoint pattern as the log holds it once identity ignores
/// `cache_control`: every user message was logged with the mark it had when it was the last.
/// Rendered as logged, the view carries them all (more than 4: a 400 from the real API); with
/// the request's own placement — the system prompt, the last user message (1 h), and a mark on
/// an early message the view no longer shows — every one of 30 compacting calls carries
/// exactly those, the early one moved onto the nearest item the view shows at or before it.
#[test]
fn a_placement_replaces_the_logged_breakpoints_on_every_compacting_call() {
    let store = MemoryStore::new();
    let id = StreamId::random();
    let config = Config { budget: 3_000, ..Config::default() };
    let mut s = Session::create(&store, id, WireFormat::Anthropic, config, Timestamp::from_millis(T0)).unwrap();
    s.append(vec![parse_message(SYSTEM).unwrap()]).unwrap();
    let base = RequestOptions::new().model("claude-sonnet-4-5").max_tokens(1_024);
    let (mut compacted, mut moved, mut most_logged, mut forks) = (0, 0, 0, 0);
    for i in 0..30u64 {
        let user = format!(
            r#"{{"role":"user","content":[{{"type":"text","text":"Step {i}: {}","cache_control":{{"type":"ephemeral"}}}}]}}"#,
            prose(i as usize, 100)
        );
        s.append(vec![parse_message(&user).unwrap()]).unwrap();
        let last = s.state().message_count() - 1;
        let now = Timestamp::from_millis(T0 + 60_000 * (i + 1));
        let plan = s.plan(now).unwrap();
        let logged = s.request(&plan, &base).unwrap();
        let placement = Placement {
            origin: Origin::Client,
            marks: vec![
                Mark::System(CacheTtl::FiveMinutes),
                Mark::Message { seq: 3, block: Some(0), ttl: CacheTtl::FiveMinutes },
                Mark::Message { seq: last, block: Some(0), ttl: CacheTtl::OneHour },
            ],
        };
        let opts = base.clone().place_breakpoints(placement.clone());
        let req = s.request(&plan, &opts).unwrap();
        let got = marks(req.body());
        let n = serde_json::from_slice::<Value>(req.body()).unwrap()["messages"].as_array().unwrap().len();
        if last <= 3 {
            // Message 3 is the last (or not there yet): both marks land on the last message,
            // which takes the longer TTL.
            assert_eq!(got, ["system.0 5m".to_owned(), format!("messages.{}.0 1h", n - 1)]);
            assert_eq!(req.breakpoints(), 2);
            s.commit_request(plan, &opts, now, None).unwrap();
            s.append(vec![parse_message(r#"{"role":"assistant","content":[{"type":"text","text":"ack"}]}"#).unwrap()])
                .unwrap();
            continue;
        }
        assert_eq!(got.len(), 3, "call {i}: {got:?}");
        assert_eq!(req.breakpoints(), 3);
        assert_eq!(got[0], "system.0 5m");
        assert_eq!(got[2], format!("messages.{}.0 1h", n - 1), "call {i}: the last message keeps its 1h mark");
        // The early mark: on message 3 while the view shows it (its index after the system
        // message and the first user message), else on something before it.
        let early: usize = got[1].split('.').nth(1).unwrap().parse().unwrap();
        assert!(early <= 2, "call {i}: {got:?}");
        moved += usize::from(early < 2 || plan.view_messages < s.state().message_count());
        compacted += usize::from(plan.view_messages < s.state().message_count());
        most_logged = most_logged.max(marks(logged.body()).len());
        let committed = s.commit_request(plan, &opts, now, None).unwrap();
        let Some(served) = committed.events.iter().find_map(|e| match e {
            Event::RequestServed(r) => Some(r),
            _ => None,
        }) else {
            panic!("no RequestServed")
        };
        assert_eq!(served.request.as_ref().and_then(|r| r.placement.clone()), Some(placement));
        // `ctxlog request --call N` (the client's fields only) rebuilds the body.
        let rebuilt = replay::served_request(&store, id, served.call, &base).unwrap();
        assert_eq!(String::from_utf8_lossy(rebuilt.body()), String::from_utf8_lossy(req.body()), "call {i}");
        // A fork summary appends to exactly that request: the placement is its record's.
        if let Some(job) = s.summary_job() {
            let fork = s.summary_request(&job, &SummaryCall::new(SummaryMode::Fork)).unwrap();
            if fork.mode_used == SummaryMode::Fork {
                let m = req.messages_json();
                let open = &m[..m.len() - 1];
                assert!(
                    fork.body().windows(open.len()).any(|w| w == open),
                    "call {i}: the fork's prefix is not the request"
                );
                let system = |b: &[u8]| serde_json::from_slice::<Value>(b).unwrap()["system"].clone();
                assert_eq!(system(fork.body()), system(req.body()));
                forks += 1;
            }
        }
        summaries(&mut s);
        let answer = format!(r#"{{"role":"assistant","content":[{{"type":"text","text":"ack {i}"}}]}}"#);
        s.append(vec![parse_message(&answer).unwrap()]).unwrap();
    }
    assert!(compacted >= 20, "only {compacted} calls compacted");
    assert!(moved >= 10, "the early mark never moved: {moved}");
    assert!(forks > 0, "no fork summary was built: the test proves little");
    assert!(most_logged > 4, "the logged views carried at most {most_logged} marks: the test proves little");
}

/// With `Origin::Off` nothing is marked, the logged marks included. A mark on a string content
/// writes it as one text block carrying the mark; one on a block that cannot carry it (thinking)
/// goes to the message's last block that can; one on a message with none passes to the item
/// before it.
#[test]
fn off_strips_and_marks_land_on_blocks_that_can_carry_them() {
    let store = MemoryStore::new();
    let id = StreamId::random();
    let mut s =
        Session::create(&store, id, WireFormat::Anthropic, Config::default(), Timestamp::from_millis(T0)).unwrap();
    let msgs = [
        SYSTEM,
        r#"{"role":"user","content":[{"type":"text","text":"one","cache_control":{"type":"ephemeral"}}]}"#,
        r#"{"role":"assistant","content":[{"type":"text","text":"two"},{"type":"thinking","thinking":"t","signature":"s"}]}"#,
        r#"{"role":"user","content":"three"}"#,
        r#"{"role":"assistant","content":[{"type":"thinking","thinking":"u","signature":"s"}]}"#,
    ];
    s.append(msgs.iter().map(|m| parse_message(m).unwrap()).collect()).unwrap();
    let plan = s.plan(Timestamp::from_millis(T0 + 1_000)).unwrap();
    let off = RequestOptions::new().place_breakpoints(Placement { origin: Origin::Off, marks: vec![] });
    let r = s.request(&plan, &off).unwrap();
    assert_eq!(marks(r.body()), Vec::<String>::new());
    assert!(!String::from_utf8_lossy(r.body()).contains("cache_control"));
    let ttl = CacheTtl::FiveMinutes;
    let placed = Placement {
        origin: Origin::Client,
        marks: vec![Mark::Message { seq: 2, block: Some(1), ttl }, Mark::Message { seq: 4, block: None, ttl }],
    };
    let r = s.request(&plan, &RequestOptions::new().place_breakpoints(placed)).unwrap();
    assert_eq!(marks(r.body()), ["messages.1.0 5m", "messages.2.0 5m"]);
    let sent: Value = serde_json::from_slice(r.body()).unwrap();
    assert_eq!(
        sent["messages"][2]["content"],
        serde_json::json!([{"type":"text","text":"three","cache_control":{"type":"ephemeral"}}])
    );
    assert_eq!(r.breakpoints(), 2);
}

/// The proxy's own breakpoints for a client that set none: the system prompt, the end of the
/// part of the view the previous call had too, and the view's last message.
#[test]
fn auto_breakpoints_mark_the_system_the_reused_prefix_and_the_last_message() {
    let store = MemoryStore::new();
    let id = StreamId::random();
    let mut s =
        Session::create(&store, id, WireFormat::Anthropic, Config::default(), Timestamp::from_millis(T0)).unwrap();
    let user =
        |i: u64| parse_message(&format!(r#"{{"role":"user","content":[{{"type":"text","text":"q{i}"}}]}}"#)).unwrap();
    let answer = |i: u64| {
        parse_message(&format!(r#"{{"role":"assistant","content":[{{"type":"text","text":"a{i}"}}]}}"#)).unwrap()
    };
    s.append(vec![parse_message(SYSTEM).unwrap(), user(0)]).unwrap();
    let plan = s.plan(Timestamp::from_millis(T0 + 1_000)).unwrap();
    let auto = s.auto_breakpoints(&plan, CacheTtl::FiveMinutes).unwrap();
    // First call: nothing reused, so the system and the last message.
    assert_eq!(
        auto.marks,
        [Mark::System(CacheTtl::FiveMinutes), Mark::Message { seq: 1, block: None, ttl: CacheTtl::FiveMinutes }]
    );
    s.commit(plan, Timestamp::from_millis(T0 + 2_000), None).unwrap();
    s.append(vec![answer(0), user(1)]).unwrap();
    let plan = s.plan(Timestamp::from_millis(T0 + 3_000)).unwrap();
    assert_eq!(plan.reused_items(), 2);
    let auto = s.auto_breakpoints(&plan, CacheTtl::FiveMinutes).unwrap();
    assert_eq!(
        auto.marks,
        [
            Mark::System(CacheTtl::FiveMinutes),
            Mark::Message { seq: 1, block: None, ttl: CacheTtl::FiveMinutes },
            Mark::Message { seq: 3, block: None, ttl: CacheTtl::FiveMinutes },
        ]
    );
    let r = s.request(&plan, &RequestOptions::new().place_breakpoints(auto)).unwrap();
    assert_eq!(marks(r.body()), ["system.0 5m", "messages.0.0 5m", "messages.2.0 5m"]);
}
