//! `ctxlog request`: the body a call served, rebuilt from the log, equals byte for byte the body
//! the embedded session handed to the host when it served the call (compacted calls and an
//! image included); the client's other fields go around the view in its order, as the proxy
//! passes them; bad calls and bad field files exit 2 naming what is wrong.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use ctxlog::config::Config;
use ctxlog::request::RequestOptions;
use ctxlog::{Session, StreamId, Timestamp, Usage, WireFormat};
use ctxlog_tests::scenario::{b64, cli, png};
use serde_json::{json, Value};

const T0: u64 = 1_767_225_600_000;

/// The client body whose fields the proxy would pass through: `model` before the view, the
/// rest after it, a field repeated (the last value wins, in the first place).
const CLIENT_BODY: &str = r#"{"model":"claude-x","max_tokens":512,"system":"ignored: the log's","messages":[],"stream":true,"tools":[{"name":"read","input_schema":{"type":"object"}}],"max_tokens":1024}"#;

fn opts() -> RequestOptions {
    RequestOptions::new()
        .field("model", r#""claude-x""#)
        .unwrap()
        .field("max_tokens", "1024")
        .unwrap()
        .field("stream", "true")
        .unwrap()
        .field("tools", r#"[{"name":"read","input_schema":{"type":"object"}}]"#)
        .unwrap()
}

fn msg(v: Value) -> ctxlog::Message {
    ctxlog::internal::wire::parse_message(&v.to_string()).unwrap()
}

/// Each call's served body: with the client's fields, and bare.
type Served = Vec<(Vec<u8>, Vec<u8>)>;

/// A session of `calls` calls on a small budget (so that later calls compact), written to a
/// SQLite store at `path`; returns its id and each call's served body with and without fields.
fn session(path: &std::path::Path, calls: u64) -> (StreamId, Served) {
    let store = ctxlog_store_sqlite::SqliteStore::open(path).unwrap();
    let config = Config { budget: 3_000, ..Config::default() };
    let id = StreamId::random();
    let mut s = Session::create(&store, id, WireFormat::Anthropic, config, Timestamp::from_millis(T0)).unwrap();
    let image = b64(&png(8, 8));
    s.append(vec![
        msg(json!({"role": "system", "content": "You are a careful agent."})),
        msg(json!({"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image}}]})),
    ])
    .unwrap();
    let mut served = Vec::new();
    for call in 0..calls {
        let at = Timestamp::from_millis(T0 + 1_000 * (call + 1));
        let plan = s.plan(at).unwrap();
        let with = s.request(&plan, &opts()).unwrap().into_body();
        let bare = s.request(&plan, &RequestOptions::new()).unwrap().into_body();
        served.push((with, bare));
        s.commit(plan, at, Some(Usage::prompt(100 + call))).unwrap();
        s.append(vec![
            msg(json!({"role": "assistant", "content": format!("answer {call}")})),
            msg(json!({"role": "user", "content": format!("step {call}: {}", "more detail please ".repeat(60))})),
        ])
        .unwrap();
    }
    (id, served)
}

fn request(store: &str, id: StreamId, call: u64, extra: &[&str]) -> (i32, String, String) {
    let id = id.to_string();
    let call = call.to_string();
    let mut args = vec!["request", "--store", store, "--session", &id, "--call", &call];
    args.extend_from_slice(extra);
    cli(&args)
}

#[test]
fn request_n_rebuilt_from_the_log_equals_the_body_the_session_served() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (id, served) = session(&db, 12);
    let store = format!("sqlite:{}", db.display());
    let fields = dir.path().join("client.json");
    std::fs::write(&fields, CLIENT_BODY).unwrap();
    let fields = fields.to_str().unwrap();
    let mut compacted = 0;
    for (call, (with, bare)) in served.iter().enumerate() {
        let (code, out, err) = request(&store, id, call as u64, &["--fields-from", fields]);
        assert_eq!(code, 0, "call {call}: {err}");
        assert_eq!(out.as_bytes(), &with[..], "call {call} with the client's fields");
        let (code, out, err) = request(&store, id, call as u64, &[]);
        assert_eq!(code, 0, "call {call}: {err}");
        assert_eq!(out.as_bytes(), &bare[..], "call {call} without fields");
        let body: Value = serde_json::from_slice(with).unwrap();
        // The client's order, a repeated field in its first place with its last value.
        let head = br#"{"model":"claude-x","max_tokens":1024,"stream":true,"tools":[{"name":"read""#;
        assert!(with.starts_with(head), "call {call}: {}", String::from_utf8_lossy(&with[..80]));
        compacted += usize::from(body["messages"].as_array().unwrap().len() < 2 * call + 1);
    }
    assert!(compacted > 0, "the budget was meant to make later calls compact");
    // The image is inlined again (the log keeps it as a blob).
    assert!(String::from_utf8_lossy(&served[0].0).contains(&b64(&png(8, 8))));
    // --json: the digest and size instead of the body.
    let (code, out, err) = request(&store, id, 3, &["--json"]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(doc["bytes"], served[3].1.len());
    assert_eq!(doc["call"], 3);
}

#[test]
fn an_unknown_call_or_a_bad_fields_file_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (id, _) = session(&db, 3);
    let store = format!("sqlite:{}", db.display());
    let (code, out, err) = request(&store, id, 3, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("--call 3") && err.contains("served 3"), "{err}");
    // A fields file that is not a JSON object, or sets a field that is not JSON-shaped as
    // the options need, is refused naming the file.
    let bad = dir.path().join("bad.json");
    for content in ["[1, 2]", "{\"model\": ", "not json"] {
        std::fs::write(&bad, content).unwrap();
        let (code, out, err) = request(&store, id, 0, &["--fields-from", bad.to_str().unwrap()]);
        assert_eq!(code, 2, "{content}: {err}");
        assert!(out.is_empty());
        assert!(err.contains("bad.json"), "{err}");
    }
    let missing = dir.path().join("missing.json");
    let (code, _, err) = request(&store, id, 0, &["--fields-from", missing.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("missing.json"), "{err}");
    // An unknown session is not a call of another one.
    let other = StreamId::random();
    let (code, _, err) = request(&store, other, 0, &[]);
    assert_ne!(code, 0);
    assert!(err.contains(&other.to_string()), "{err}");
}
