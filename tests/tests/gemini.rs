//! A Gemini session through the library and the CLI: every request it renders is one the API
//! accepts (the strict fake's rules: roles, no empty parts, every function response turn right
//! after its call turn with as many parts), the ladder and summaries work on contents, a
//! `thoughtSignature` reaches the API byte for byte, and `rerun`, `request`, `export` and
//! `verify` read it like any other session.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use ctxlog_fake_upstream::gemini;
use ctxlog_fake_upstream::strict::Strictness;
use ctxlog_store_sqlite::SqliteStore;
use ctxlog_tests::gemini::{run, start};
use ctxlog_tests::postmortem::Recorded;
use serde_json::Value;

const SESSION: &str = "00000000-0000-0000-0000-000000000034";
const CALLS: usize = 40;

fn record() -> (Recorded, Vec<Vec<u8>>) {
    let r = Recorded::new();
    let store = SqliteStore::open(std::path::Path::new(&r.path("ctxlog.db"))).unwrap();
    let mut s = start(&store, SESSION.parse().unwrap());
    let bodies = run(&mut s, CALLS);
    (r, bodies)
}

#[test]
fn every_request_is_one_the_api_accepts_through_every_compaction() {
    let (r, bodies) = record();
    let strict = Strictness::default();
    for (i, b) in bodies.iter().enumerate() {
        let v: Value = serde_json::from_slice(b).unwrap();
        if let Err(e) = gemini::check(&strict, &v, 1) {
            panic!("call {i}: the API would refuse this request: {e:?}\n{}", String::from_utf8_lossy(b));
        }
        assert_eq!(v["systemInstruction"]["parts"][0]["text"], "You are a coding agent. Be brief.", "call {i}");
        assert_eq!(v["generationConfig"]["maxOutputTokens"], 1024);
        let text = String::from_utf8_lossy(b);
        // The first user turn is in every view (never summarized away); signatures as given.
        assert!(text.contains("Port every handler to the new router."), "call {i}");
        if i > 0 && v["contents"].as_array().unwrap().len() > 3 {
            assert!(text.contains(r#""thoughtSignature":"c2lnbmF0dXJl"#) || text.contains("[ctxlog"), "call {i}");
        }
    }
    let timeline = r.timeline(SESSION);
    assert_eq!(timeline.len(), CALLS);
    let compacting = timeline.iter().filter(|c| c.level > 0 || c.view_messages < c.messages).count();
    assert!(compacting >= 20, "{compacting} compacting calls: the test proves little");
    let verify = r.ok(&["verify", "--json"]);
    assert!(!verify.contains("\"problems\":[{"), "{verify}");
}

/// Without summaries the ladder does the work: tool responses cut (sent as `{"output": …}`),
/// function pairs removed together behind a placeholder; every request is still one the API
/// accepts, and the first user turn and the system instruction stay.
#[test]
fn the_ladder_on_contents_sends_only_what_the_api_accepts() {
    let store = ctxlog::MemoryStore::new();
    let config = ctxlog::config::Config {
        budget: 6_000,
        summarizer: ctxlog::config::SummarizerKind::None,
        ..ctxlog::config::Config::default()
    };
    let mut s = ctxlog_tests::gemini::start_with(&store, SESSION.parse().unwrap(), config);
    let bodies = run(&mut s, CALLS);
    let strict = Strictness::default();
    let (mut cut, mut placeholders) = (0, 0);
    for (i, b) in bodies.iter().enumerate() {
        let v: Value = serde_json::from_slice(b).unwrap();
        if let Err(e) = gemini::check(&strict, &v, 1) {
            panic!("call {i}: the API would refuse this request: {e:?}\n{}", String::from_utf8_lossy(b));
        }
        let text = String::from_utf8_lossy(b);
        assert!(text.contains("Port every handler to the new router."), "call {i}");
        assert_eq!(v["systemInstruction"]["parts"][0]["text"], "You are a coding agent. Be brief.");
        cut += usize::from(text.contains(r#""response":{"output":"[truncated"#));
        placeholders += usize::from(text.contains("[ctxlog: "));
    }
    assert!(cut > 0 && placeholders > 0, "{cut} requests with a cut response, {placeholders} with a placeholder");
    assert!(ctxlog::replay::verify(&store, SESSION.parse().unwrap()).unwrap().problems.is_empty());
}

#[test]
fn rerun_request_and_export_read_a_gemini_session() {
    let (r, bodies) = record();
    let (code, out, err) = r.run(&["rerun", "--session", SESSION, "--json", "--exit-code"]);
    assert_eq!(code, 0, "{err}\n{out}");
    let diff: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(diff["identical"], true, "{out}");
    // `ctxlog request --call N` is the body the session rendered for call N.
    for call in [0, 17, CALLS - 1] {
        let (code, out, err) = r.run(&["request", "--session", SESSION, "--call", &call.to_string()]);
        assert_eq!(code, 0, "{err}");
        let (got, sent): (Value, Value) =
            (serde_json::from_str(&out).unwrap(), serde_json::from_slice(&bodies[call]).unwrap());
        assert_eq!(got["contents"], sent["contents"], "call {call}");
        assert_eq!(got["systemInstruction"], sent["systemInstruction"], "call {call}");
    }
    // Export gives the contents back as they were appended, the system instruction first.
    let exported = r.ok(&["export", "--session", SESSION]);
    let lines: Vec<Value> = exported.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["role"], "system");
    assert!(lines.iter().skip(1).all(|l| l["role"] == "user" || l["role"] == "model"), "{exported}");
    assert!(lines.iter().any(|l| l["parts"][0]["thoughtSignature"] == "c2lnbmF0dXJl000+/=="));
    assert!(!exported.contains('~'), "ctxlog's pairing keys leaked into the export");
}
