//! An OpenAI Responses session through the library and the CLI: every request it renders is one
//! the API accepts (the strict fake's rules), the ladder and summaries work on items, the
//! provider's compaction item stays byte for byte in every later view, and `rerun`, `why`,
//! `report`, `export` and `verify` read it like any other session.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use ctxlog::{Event, StreamId};
use ctxlog_fake_upstream::responses;
use ctxlog_fake_upstream::strict::{Rule, Strictness};
use ctxlog_store_sqlite::SqliteStore;
use ctxlog_tests::postmortem::Recorded;
use ctxlog_tests::responses::{run, start, COMPACTION_CALL};
use serde_json::Value;

const SESSION: &str = "00000000-0000-0000-0000-000000000023";
const CALLS: usize = 40;

fn record() -> (Recorded, Vec<Vec<u8>>) {
    let r = Recorded::new();
    let store = SqliteStore::open(std::path::Path::new(&r.path("ctxlog.db"))).unwrap();
    let mut s = start(&store, SESSION.parse().unwrap());
    let bodies = run(&mut s, CALLS);
    (r, bodies)
}

#[test]
fn every_request_is_one_the_api_accepts_and_the_compaction_item_stays_as_it_came() {
    let (r, bodies) = record();
    // The session's reasoning and compaction payloads are made up here, not issued by the fake:
    // the one rule they must break is relaxed, by name.
    let mut strict = Strictness::default();
    strict.relaxed.insert(Rule::EncryptedContent);
    for (i, b) in bodies.iter().enumerate() {
        let v: Value = serde_json::from_slice(b).unwrap();
        assert_eq!(v["instructions"], "You are a coding agent. Be brief.", "call {i}");
        let items = responses::effective_input(&v, &Default::default()).unwrap();
        if let Err(e) = responses::check(&strict, &v, &items, 1) {
            panic!("call {i}: the API would refuse this request: {e:?}\n{}", String::from_utf8_lossy(b));
        }
        let text = String::from_utf8_lossy(b);
        if i > COMPACTION_CALL {
            // Byte for byte as the provider issued it, in every later view.
            let issued = ctxlog_tests::responses::answer(COMPACTION_CALL)[0].to_string();
            assert!(issued.contains("compaction") && text.contains(&issued), "call {i}");
        }
    }
    let timeline = r.timeline(SESSION);
    assert_eq!(timeline.len(), CALLS);
    assert!(timeline.iter().any(|c| c.level > 0 || c.flush.is_some()), "nothing compacted: the test proves nothing");
    // The first user item and the instructions are in every view (never summarized away).
    for (i, b) in bodies.iter().enumerate() {
        assert!(String::from_utf8_lossy(b).contains("Port every handler to the new router."), "call {i}");
    }
    let verify = r.ok(&["verify", "--json"]);
    assert!(!verify.contains("\"problems\":[{"), "{verify}");
}

#[test]
fn rerun_why_report_and_export_read_a_responses_session() {
    let (r, _) = record();
    let (code, out, err) = r.run(&["rerun", "--session", SESSION, "--json", "--exit-code"]);
    assert_eq!(code, 0, "{err}\n{out}");
    let diff: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(diff["identical"], true, "{out}");
    // The compaction item's seq: instructions and the first user item, then three items per
    // tool call, two per answered turn, before the answer of call 9.
    let store = SqliteStore::open_read_only(std::path::Path::new(&r.path("ctxlog.db"))).unwrap();
    let id: StreamId = SESSION.parse().unwrap();
    let mut seq = None;
    let mut answers_per_call = std::collections::BTreeMap::<u64, usize>::new();
    ctxlog::replay::for_each_event(&store, id, 1, None, |_, ev| {
        match ev {
            Event::MessageAppended(m) if m.message.provider_compaction() => seq = seq.or(Some(m.seq)),
            Event::AnswerReceived(a) => *answers_per_call.entry(a.call).or_default() += 1,
            _ => {}
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(answers_per_call.get(&0), Some(&2), "a Responses answer is its output items, one event each");
    let seq = seq.expect("the compaction item was never appended");
    let why: Value =
        serde_json::from_str(&r.ok(&["why", "--session", SESSION, "--seq", &seq.to_string(), "--json"])).unwrap();
    assert_eq!(why["provider_compaction"], true);
    assert!(why["text"].as_str().unwrap().contains("provider's compaction"), "{why}");
    let before: Value = serde_json::from_str(&r.ok(&["why", "--session", SESSION, "--seq", "3", "--json"])).unwrap();
    assert_eq!(before["covered_by_provider_compaction"], seq, "{before}");
    let page = r.path("report.html");
    r.ok(&["report", "--session", SESSION, "--out", &page]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains(&format!("provider compaction at seq {seq}")), "the report does not show it");
    // Export gives the items back as they were appended (and the last call's answer items).
    let exported = r.ok(&["export", "--session", SESSION]);
    let lines: Vec<Value> = exported.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["type"], "instructions");
    assert!(lines.iter().any(|l| l["type"] == "reasoning" && l["encrypted_content"] == "gAAAA000/reasoned="));
    assert!(lines.iter().all(|l| l.get("role").is_some() || l.get("type").is_some()));
}

/// A compaction the provider made on the client's request (`/v1/responses/compact`, recorded by
/// the proxy as `ProviderCompacted`) is shown by `replay` after the call it follows, in the table
/// and as `guards_after` in JSON; `verify` and `rerun` read the session as before.
#[test]
fn replay_shows_a_provider_compaction_between_calls() {
    let (r, _) = record();
    {
        let store = SqliteStore::open(std::path::Path::new(&r.path("ctxlog.db"))).unwrap();
        let mut s = ctxlog::Session::open(&store, SESSION.parse().unwrap()).unwrap();
        s.record_provider_compaction(ctxlog::event::ProviderCompacted {
            at: ctxlog_tests::responses::T0 + 3_600_000,
            endpoint: "/v1/responses/compact".into(),
            model: Some("gpt-5".into()),
            response_id: Some("resp_cmp_1".into()),
            input_items: 120,
            output_items: 9,
            usage: Some(ctxlog::Usage { input: 2_000, cache_read: 8_000, cache_write: 0, output: 700 }),
        })
        .unwrap();
    }
    let table = r.ok(&["replay", "--session", SESSION]);
    assert!(table.contains("guard provider_compacted (after call 39"), "{table}");
    assert!(
        table.contains("120 items in, 9 out as resp_cmp_1; billed 10000 prompt tokens (8000 cached), 700 output"),
        "{table}"
    );
    let json = r.ok(&["replay", "--session", SESSION, "--json"]);
    let last: Value = serde_json::from_str(json.lines().last().unwrap()).unwrap();
    assert_eq!(last["guards_after"][0]["kind"], "provider_compacted", "{json}");
    let verify = r.ok(&["verify", "--json"]);
    assert!(!verify.contains("\"problems\":[{"), "{verify}");
    let (code, out, err) = r.run(&["rerun", "--session", SESSION, "--json", "--exit-code"]);
    assert_eq!(code, 0, "{err}\n{out}");
}
