//! The CLI contract, run in-process through `ctxlog_tools::run`: bad input exits 2 naming the
//! file, line and field and writes nothing; a tampered store makes `verify` exit 4 naming the
//! stream and version; `import` is deterministic and `replay` reproduces its timeline; `--views`
//! writes each call's view.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use ctxlog_tests::scenario::{b64, cli, png, rich_anthropic, rich_openai};
use serde_json::Value;
use tempfile::TempDir;

const SESSION: &str = "00000000-0000-0000-0000-0000000c1100";

struct Env {
    dir: TempDir,
}

impl Env {
    fn new() -> Env {
        Env { dir: tempfile::tempdir().unwrap() }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn file(&self, name: &str, bytes: impl AsRef<[u8]>) -> String {
        let p = self.path(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_str().unwrap().to_owned()
    }
    fn store(&self, name: &str) -> String {
        format!("sqlite:{}", self.path(name).display())
    }
}

fn sessions(store: &str) -> Value {
    let (code, out, err) = cli(&["sessions", "--json", "--store", store]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(out.trim()).unwrap()
}

fn json_lines(s: &str) -> Vec<Value> {
    s.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// A text-only conversation with tool calls: `turns` assistant calls.
fn conversation(turns: usize) -> String {
    let mut out = String::from("{\"role\":\"system\",\"content\":\"You are a coding agent.\"}\n");
    for i in 0..turns {
        out += &format!("{{\"role\":\"user\",\"content\":\"Step {i}: please look at file_{i}.rs\"}}\n");
        out += &format!(
            "{{\"role\":\"assistant\",\"content\":[{{\"type\":\"tool_use\",\"id\":\"t{i}\",\"name\":\"read\",\"input\":{{\"path\": \"file_{i}.rs\"}}}}]}}\n"
        );
        out += &format!(
            "{{\"role\":\"user\",\"content\":[{{\"type\":\"tool_result\",\"tool_use_id\":\"t{i}\",\"content\":\"{}\"}}]}}\n",
            format!("line {i} of the file. ").repeat(20)
        );
        out += &format!("{{\"role\":\"assistant\",\"content\":\"File {i} is fine.\"}}\n");
    }
    out
}

// ---- Bad input -------------------------------------------------------------------------------

/// Imports `bytes` as `name`; asserts exit 2, stderr naming the file and `expect`ed parts, and
/// that no store was created (input is validated before the store is opened).
fn rejected(name: &str, bytes: &[u8], expect: &[&str]) -> String {
    let env = Env::new();
    let file = env.file(name, bytes);
    let store = env.store("x.db");
    let (code, out, err) = cli(&["import", &file, "--json", "--store", &store, "--session", SESSION]);
    assert_eq!(code, 2, "exit code; stderr: {err}");
    assert!(out.is_empty(), "nothing on stdout: {out}");
    assert!(err.contains(&file), "stderr names the file: {err}");
    for e in expect {
        assert!(err.contains(e), "stderr should contain {e:?}: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    assert!(!env.path("x.db").exists(), "nothing was written, not even an empty store");
    let (code, _, missing) = cli(&["sessions", "--store", &store]);
    assert_eq!(code, 3, "{missing}");
    assert!(missing.contains("no sqlite store at"), "{missing}");
    err
}

#[test]
fn import_of_invalid_json_names_the_line_and_writes_nothing() {
    let t = "{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"assistant\",\"content\":\n";
    let err = rejected("bad.jsonl", t.as_bytes(), &[":2:", "invalid JSON"]);
    assert!(!err.contains("field ``"), "{err}");
}

#[test]
fn import_of_an_unknown_role_names_the_line_and_the_field() {
    let t = "{\"role\":\"user\",\"content\":\"hi\"}\n\n{\"role\":\"wizard\",\"content\":\"x\"}\n";
    // Blank lines still count: the bad line is line 3.
    rejected("role.jsonl", t.as_bytes(), &[":3:", "`role`", "wizard"]);
}

#[test]
fn import_of_bad_base64_names_the_field_and_writes_nothing() {
    let good = b64(&png(4, 4));
    let t = format!(
        "{{\"role\":\"user\",\"content\":[{{\"type\":\"image\",\"source\":{{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"{good}\"}}}}]}}\n\
         {{\"role\":\"assistant\",\"content\":\"ok\"}}\n\
         {{\"role\":\"user\",\"content\":[{{\"type\":\"text\",\"text\":\"again\"}},{{\"type\":\"image\",\"source\":{{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"{good}%%\"}}}}]}}\n"
    );
    rejected("b64.jsonl", t.as_bytes(), &[":3:", "content[1].source.data", "base64"]);
}

#[test]
fn import_of_binary_garbage_is_refused_as_not_utf8() {
    let mut bytes = b"{\"role\":\"user\",\"content\":\"hi\"}\n".to_vec();
    bytes.extend([0xff, 0xfe, 0x00, 0x89, b'P', b'N', b'G', 0xc3, 0x28, b'\n']);
    rejected("garbage.jsonl", &bytes, &[":2:", "UTF-8"]);
    rejected("png.jsonl", &png(3, 3), &[":1:", "UTF-8"]);
}

#[test]
fn import_of_an_empty_file_is_refused() {
    rejected("empty.jsonl", b"", &["no messages"]);
    rejected("blank.jsonl", b"\n  \n\n", &["no messages"]);
}

#[test]
fn import_of_a_fifty_megabyte_line_is_refused_without_reading_it_whole() {
    let mut t = b"{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"user\",\"content\":\"".to_vec();
    t.resize(t.len() + 50 * 1024 * 1024, b'a');
    t.extend_from_slice(b"\"}\n");
    rejected("huge.jsonl", &t, &[":2:", "longer than"]);
}

#[test]
fn import_of_a_tool_result_for_an_unknown_id_is_refused() {
    let t = "{\"role\":\"user\",\"content\":\"hi\"}\n\
             {\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"ls\",\"input\":{}}]}\n\
             {\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t2\",\"content\":\"x\"}]}\n";
    rejected("orphan.jsonl", t.as_bytes(), &[":3:", "unknown call", "t2"]);
    let twice = "{\"role\":\"user\",\"content\":\"hi\"}\n\
             {\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}\n\
             {\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"1\"}\n\
             {\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"2\"}\n";
    rejected("twice.jsonl", twice.as_bytes(), &[":4:", "answered twice"]);
}

#[test]
fn import_of_mixed_formats_names_both_lines() {
    let t =
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"ls\",\"input\":{}}]}\n\
             {\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":\"x\"}\n";
    let err = rejected("mixed.jsonl", t.as_bytes(), &[":2:", "line 1", "--format"]);
    assert!(err.contains("anthropic") && err.contains("openai"), "{err}");
    // Forcing a format turns it into a field error on the offending line.
    let env = Env::new();
    let file = env.file("mixed.jsonl", t);
    let (code, _, err) = cli(&["import", &file, "--format", "anthropic", "--store", "mem:"]);
    assert_eq!(code, 2);
    assert!(err.contains(":2:") && err.contains("`role`"), "{err}");
}

#[test]
fn bad_flags_and_missing_files_exit_2() {
    let env = Env::new();
    let file = env.file("ok.jsonl", conversation(1));
    for args in [
        vec!["import", file.as_str(), "--store", "mem:", "--budget", "0"],
        vec!["import", file.as_str(), "--store", "mem:", "--target", "0.9"],
        vec!["import", file.as_str(), "--store", "bogus:x"],
        vec!["import", file.as_str(), "--store", "mem:", "--session", "not-a-uuid"],
        vec!["import", file.as_str(), "--store", "mem:", "--call-interval", "NaN"],
        vec!["import", "/nonexistent/dir/t.jsonl", "--store", "mem:"],
        vec!["frobnicate"],
    ] {
        let (code, out, err) = cli(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(!err.is_empty(), "{args:?}");
    }
    let (_, _, err) = cli(&["import", "/nonexistent/dir/t.jsonl", "--store", "mem:"]);
    assert!(err.contains("/nonexistent/dir/t.jsonl"), "{err}");
}

#[test]
fn importing_the_same_session_twice_is_refused_and_changes_nothing() {
    let env = Env::new();
    let file = env.file("t.jsonl", conversation(2));
    let store = env.store("x.db");
    let (code, _, err) = cli(&["import", &file, "--json", "--store", &store, "--session", SESSION]);
    assert_eq!(code, 0, "{err}");
    let before = sessions(&store);
    let (code, _, err) = cli(&["import", &file, "--json", "--store", &store, "--session", SESSION]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(SESSION), "{err}");
    assert_eq!(sessions(&store), before);
}

// ---- A tampered store ------------------------------------------------------------------------

fn flip_one_byte(db: &Path, version: i64) -> usize {
    let conn = rusqlite::Connection::open(db).unwrap();
    let (stream, mut bytes): (Vec<u8>, Vec<u8>) = conn
        .query_row("SELECT stream, bytes FROM records WHERE version = ?1", [version], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    conn.execute(
        "UPDATE records SET bytes = ?1 WHERE stream = ?2 AND version = ?3",
        rusqlite::params![bytes, stream, version],
    )
    .unwrap()
}

#[test]
fn verify_of_a_tampered_sqlite_store_exits_4_naming_stream_and_version() {
    let env = Env::new();
    let file = env.file("t.jsonl", rich_anthropic());
    let store = env.store("x.db");
    let (code, _, err) = cli(&["import", &file, "--json", "--store", &store, "--session", SESSION]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&["verify", "--store", &store]);
    assert_eq!(code, 0, "clean store verifies: {out}{err}");
    assert!(out.starts_with("ok "), "{out}");

    assert_eq!(flip_one_byte(&env.path("x.db"), 3), 1);
    let (code, out, err) = cli(&["verify", "--store", &store]);
    assert_eq!(code, 4, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(all.contains(SESSION) && all.contains("version 3"), "names stream and version: {all}");
    assert!(all.contains("corrupt"), "{all}");
    let (code, out, _) = cli(&["verify", "--store", &store, "--json"]);
    assert_eq!(code, 4);
    let report: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["ok"], Value::Bool(false));
    assert!(report["problems"][0].as_str().unwrap().contains("version 3"));
    // A strict replay and an export refuse it too, with the same exit code.
    let (code, _, err) = cli(&["replay", "--store", &store, "--json"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("version 3"), "{err}");
    let (code, _, _) = cli(&["export", "--store", &store]);
    assert_eq!(code, 4);
}

#[test]
fn verify_of_a_tampered_blob_reports_it() {
    let env = Env::new();
    let file = env.file("t.jsonl", rich_anthropic());
    let store = env.store("x.db");
    assert_eq!(cli(&["import", &file, "--store", &store]).0, 0);
    let conn = rusqlite::Connection::open(env.path("x.db")).unwrap();
    let n = conn.execute("UPDATE blobs SET bytes = x'00' WHERE id = (SELECT MIN(id) FROM blobs)", []).unwrap();
    assert_eq!(n, 1);
    drop(conn);
    let (code, out, err) = cli(&["verify", "--store", &store]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(format!("{out}{err}").contains("sha256:"), "{out}{err}");
}

// ---- Determinism and replay ------------------------------------------------------------------

#[test]
fn import_is_deterministic_and_replay_prints_the_same_timeline() {
    let env = Env::new();
    let file = env.file("t.jsonl", rich_anthropic());
    let a = env.store("a.db");
    let b = env.store("b.db");
    let args = |store: &str| -> Vec<String> {
        ["import", &file, "--json", "--session", SESSION, "--store", store].map(str::to_owned).to_vec()
    };
    let run = |args: Vec<String>| {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(&argv)
    };
    let (ca, out_a, err_a) = run(args(&a));
    let (cb, out_b, err_b) = run(args(&b));
    assert_eq!((ca, cb), (0, 0), "{err_a}{err_b}");
    assert_eq!(out_a, out_b, "byte-identical timelines");
    let (cm, out_m, _) = run(args("mem:"));
    assert_eq!(cm, 0);
    assert_eq!(out_m, out_a, "identical across backends");

    let timeline = json_lines(&out_a);
    assert_eq!(timeline.len(), 3, "one record per assistant line");
    for (i, r) in timeline.iter().enumerate() {
        assert_eq!(r["call"], Value::from(i as u64));
        for key in [
            "version",
            "at",
            "messages",
            "view_messages",
            "view_tokens",
            "reported_tokens",
            "budget",
            "trigger_tokens",
            "target_tokens",
            "level",
            "compacted",
            "flushed",
            "flush",
            "edits",
            "guards",
            "prefix_reused",
        ] {
            assert!(r.get(key).is_some(), "record {i} lacks {key}: {r}");
        }
    }
    // Usage on the assistant line is the call's reported tokens (input + cache reads).
    assert_eq!(timeline[0]["reported_tokens"], Value::from(1500));
    assert_eq!(timeline[1]["reported_tokens"], Value::Null);
    // Timestamps on assistant lines drive the clock.
    assert_eq!(timeline[0]["at"], Value::from(1_767_225_605.0));

    let (code, replayed, err) = cli(&["replay", "--json", "--store", &a]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(replayed, out_a, "replay prints exactly the import's lines");
    let (code, replayed_b, _) = cli(&["replay", "--json", "--store", &b, "--session", SESSION]);
    assert_eq!(code, 0);
    assert_eq!(replayed_b, out_a);
    // --until stops at a version.
    let v1 = timeline[1]["version"].as_u64().unwrap();
    let (code, until, _) = cli(&["replay", "--json", "--store", &a, "--until", &v1.to_string()]);
    assert_eq!(code, 0);
    assert_eq!(json_lines(&until), timeline[..2].to_vec());
}

#[test]
fn sessions_and_inspect_report_the_imported_session() {
    let env = Env::new();
    let file = env.file("t.jsonl", rich_openai());
    let store = env.store("x.db");
    assert_eq!(cli(&["import", &file, "--store", &store, "--session", SESSION]).0, 0);
    let list = sessions(&store);
    assert_eq!(list[0]["session"], Value::from(SESSION));
    assert_eq!(list[0]["messages"], Value::from(7));
    assert_eq!(list[0]["calls"], Value::from(2));
    let (code, out, err) = cli(&["inspect", "--json", "--store", &store]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    let msgs = doc["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 7);
    assert_eq!(msgs[4]["role"], Value::from("tool"));
    assert!(msgs.iter().all(|m| m["status"] == "live"));
    let sum: u64 = msgs.iter().map(|m| m["tokens"].as_u64().unwrap()).sum();
    assert_eq!(doc["view_tokens"].as_u64().unwrap(), sum);
}

// ---- --views ---------------------------------------------------------------------------------

#[test]
fn views_file_has_one_line_per_call_and_each_view_extends_the_previous() {
    let env = Env::new();
    let file = env.file("t.jsonl", conversation(6));
    let views = env.path("views.jsonl");
    let (code, out, err) = cli(&[
        "import",
        &file,
        "--json",
        "--store",
        "mem:",
        "--budget",
        "100000000",
        "--views",
        views.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let timeline = json_lines(&out);
    let lines = json_lines(&std::fs::read_to_string(&views).unwrap());
    assert_eq!(lines.len(), 12, "one view per assistant line");
    assert_eq!(lines.len(), timeline.len());
    let transcript: Vec<Value> = json_lines(&conversation(6));
    let mut prev: Vec<Value> = Vec::new();
    let mut assistant_lines = transcript.iter().enumerate().filter(|(_, m)| m["role"] == "assistant").map(|(i, _)| i);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["call"], Value::from(i as u64));
        let msgs = line["messages"].as_array().unwrap().clone();
        assert_eq!(msgs.len() as u64, timeline[i]["view_messages"].as_u64().unwrap());
        assert!(msgs.len() > prev.len(), "call {i} added messages");
        assert_eq!(msgs[..prev.len()], prev[..], "call {i}'s view does not extend the previous one");
        // Nothing compacted: the view is exactly the transcript before this assistant line.
        let upto = assistant_lines.next().unwrap();
        assert_eq!(msgs[..], transcript[..upto], "call {i}");
        if i > 0 {
            assert_eq!(timeline[i]["prefix_reused"], Value::Bool(true), "call {i}");
        }
        prev = msgs;
    }
}

#[test]
fn views_show_media_as_blob_references_unless_inline_media() {
    let env = Env::new();
    let file = env.file("t.jsonl", rich_anthropic());
    let refs = env.path("refs.jsonl");
    let inline = env.path("inline.jsonl");
    for (out, extra) in [(&refs, None), (&inline, Some("--inline-media"))] {
        let mut args = vec!["import", &file, "--store", "mem:", "--views", out.to_str().unwrap()];
        args.extend(extra);
        let (code, _, err) = cli(&args);
        assert_eq!(code, 0, "{err}");
    }
    let img = b64(&png(800, 600));
    let refs = std::fs::read_to_string(refs).unwrap();
    let inline = std::fs::read_to_string(inline).unwrap();
    assert!(!refs.contains(&img) && refs.contains("sha256:"));
    assert!(inline.contains(&img));
    // Views never carry ctxlog's own fields.
    assert!(!inline.contains("\"pinned\"") && !inline.contains("\"timestamp\""));
}

// ---- restore ---------------------------------------------------------------------------------

#[test]
fn restore_of_a_non_edited_seq_exits_nonzero_and_writes_nothing() {
    let env = Env::new();
    let file = env.file("t.jsonl", conversation(2));
    let store = env.store("x.db");
    assert_eq!(cli(&["import", &file, "--store", &store, "--budget", "100000000"]).0, 0);
    let before = sessions(&store);
    let (_, timeline_before, _) = cli(&["replay", "--json", "--store", &store]);
    for seq in ["1", "999"] {
        let (code, out, err) = cli(&["restore", "--store", &store, "--seq", seq]);
        // A bad --seq is an input error (2), not an invalid log (4).
        assert_eq!(code, 2, "restore --seq {seq}: {out}");
        assert!(err.contains("RestoreTarget"), "{err}");
    }
    assert_eq!(sessions(&store), before);
    let (_, timeline_after, _) = cli(&["replay", "--json", "--store", &store]);
    assert_eq!(timeline_after, timeline_before);
    let (code, out, err) = cli(&["verify", "--store", &store]);
    assert_eq!(code, 0, "{out}{err}");
}

// ---- Postmortems of bad logs, missing blobs, copy --------------------------------------------

#[test]
fn replay_is_strict_by_default_and_lenient_on_request() {
    use ctxlog::Store as _;
    use ctxlog_tests::scenario::{conversation_then, flushed, request_served, summary_prepared, SESSION as ID};
    let env = Env::new();
    let store = env.store("bad.db");
    {
        // A log from a buggy writer: it flushed past what was summarized (version 9).
        let events = conversation_then(vec![
            request_served(0, 10),
            summary_prepared(0, 2),
            flushed(0, 4),
            request_served(1, 20),
        ]);
        let s = ctxlog_store_sqlite::SqliteStore::open(env.path("bad.db")).unwrap();
        let records: Vec<_> = events.iter().map(|e| ctxlog::codec::encode(e).unwrap()).collect();
        s.append(ctxlog::StreamId(ID), ctxlog::ExpectedVersion::Exact(0), &records).unwrap();
    }
    let (code, out, err) = cli(&["replay", "--json", "--store", &store]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(err.contains("version 10") && err.contains("Watermarks"), "{err}");
    let (code, out, err) = cli(&["replay", "--json", "--lenient", "--store", &store]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json_lines(&out).len(), 2, "both calls are in the timeline");
    assert!(err.contains("violation") && err.contains("version 10") && err.contains("Watermarks"), "{err}");
    // The lenient timeline shows the clamped watermark.
    assert_eq!(json_lines(&out)[1]["flushed"], Value::from(2));
    let (code, out, _) = cli(&["verify", "--store", &store]);
    assert_eq!(code, 4);
    assert!(out.contains("version 10"), "{out}");
}

#[test]
fn a_missing_blob_is_reported_by_verify_and_export_keeps_the_reference() {
    let env = Env::new();
    let file = env.file("t.jsonl", rich_openai());
    let store = env.store("x.db");
    assert_eq!(cli(&["import", &file, "--store", &store]).0, 0);
    let conn = rusqlite::Connection::open(env.path("x.db")).unwrap();
    assert_eq!(conn.execute("DELETE FROM blobs", []).unwrap(), 1);
    drop(conn);
    let (code, out, _) = cli(&["verify", "--store", &store]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("missing") && out.contains("sha256:"), "{out}");
    let (code, out, err) = cli(&["export", "--store", &store]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning") && err.contains("sha256:"), "{err}");
    assert!(out.contains("ctxlog-blob:sha256:"), "the reference stays in place: {out}");
    assert_eq!(json_lines(&out).len(), 7);
}

#[test]
fn copy_moves_a_session_with_its_blobs_between_stores() {
    let env = Env::new();
    let file = env.file("t.jsonl", rich_anthropic());
    let (a, b) = (env.store("a.db"), env.store("b.db"));
    let (code, imported, err) = cli(&["import", &file, "--json", "--store", &a, "--session", SESSION]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&["copy", "--from", &a, "--to", &b, "--json"]);
    assert_eq!(code, 0, "{err}");
    let c: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(c["session"], Value::from(SESSION));
    assert_eq!(c["blobs"], Value::from(3), "image, document and the tool-result image");
    assert_eq!(c["missing_blobs"], Value::Array(vec![]));
    assert_eq!(cli(&["verify", "--store", &b]).0, 0);
    assert_eq!(cli(&["replay", "--json", "--store", &b]).1, imported);
    assert_eq!(cli(&["export", "--store", &b]).1, cli(&["export", "--store", &a]).1);
    // Copying again is refused: the session exists in the target.
    let (code, _, err) = cli(&["copy", "--from", &a, "--to", &b]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn a_transcript_clock_going_backwards_never_makes_a_call_go_backwards() {
    let env = Env::new();
    let t = [
        r#"{"role":"user","content":"a","timestamp":"2026-05-01T10:00:00Z"}"#,
        r#"{"role":"assistant","content":"1","timestamp":"2026-05-01T10:00:10Z"}"#,
        r#"{"role":"user","content":"b"}"#,
        r#"{"role":"assistant","content":"2","timestamp":"2026-05-01T09:00:00Z"}"#,
        r#"{"role":"user","content":"c"}"#,
        r#"{"role":"assistant","content":"3"}"#,
    ]
    .join("\n");
    let file = env.file("t.jsonl", t);
    let (code, out, err) = cli(&["import", &file, "--json", "--store", "mem:", "--call-interval", "5"]);
    assert_eq!(code, 0, "{err}");
    let at: Vec<f64> = json_lines(&out).iter().map(|r| r["at"].as_f64().unwrap()).collect();
    let t0 = 1_777_629_600.0; // 2026-05-01T10:00:00Z
    assert_eq!(at, [t0 + 10.0, t0 + 10.0, t0 + 15.0]);
}

#[test]
fn restore_brings_an_edited_or_flushed_message_back_with_its_tool_partners() {
    use ctxlog::Store as _;
    use ctxlog_tests::scenario::{conversation_then, flushed, removed, summary_prepared, SESSION as ID};
    let env = Env::new();
    let store = env.store("x.db");
    {
        // Seq 4 removed by the ladder; 0..4 summarized and flushed (2 and 3 are the t1 pair).
        let events = conversation_then(vec![removed(4), summary_prepared(0, 4), flushed(0, 4)]);
        let s = ctxlog_store_sqlite::SqliteStore::open(env.path("x.db")).unwrap();
        let records: Vec<_> = events.iter().map(|e| ctxlog::codec::encode(e).unwrap()).collect();
        s.append(ctxlog::StreamId(ID), ctxlog::ExpectedVersion::Exact(0), &records).unwrap();
    }
    let status = || -> Vec<String> {
        let (code, out, err) = cli(&["inspect", "--json", "--store", &store]);
        assert_eq!(code, 0, "{err}");
        let doc: Value = serde_json::from_str(out.trim()).unwrap();
        doc["messages"].as_array().unwrap().iter().map(|m| m["status"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(status(), ["live", "live", "flushed", "flushed", "removed", "live"]);
    let (code, out, err) = cli(&["restore", "--store", &store, "--seq", "4", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(out.trim()).unwrap()["version"], Value::from(11));
    assert_eq!(status(), ["live", "live", "flushed", "flushed", "live", "live"]);
    // Restoring the flushed call brings its result back too, so no pair is split.
    let (code, _, err) = cli(&["restore", "--store", &store, "--seq", "2"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(status(), ["live"; 6]);
    // Nothing left to restore.
    let (code, _, _) = cli(&["restore", "--store", &store, "--seq", "3"]);
    assert_eq!(code, 2);
    let (code, _, err) = cli(&["replay", "--store", &store]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn restore_pin_pins_a_message_and_replay_inspect_and_why_say_so() {
    use ctxlog::Store as _;
    use ctxlog_tests::scenario::{conversation_then, removed, request_served, SESSION as ID};
    let env = Env::new();
    let store = env.store("x.db");
    {
        let events = conversation_then(vec![removed(4), request_served(0, 10)]);
        let s = ctxlog_store_sqlite::SqliteStore::open(env.path("x.db")).unwrap();
        let records: Vec<_> = events.iter().map(|e| ctxlog::codec::encode(e).unwrap()).collect();
        s.append(ctxlog::StreamId(ID), ctxlog::ExpectedVersion::Exact(0), &records).unwrap();
    }
    // Restored and pinned in one batch.
    let (code, out, err) = cli(&["restore", "--store", &store, "--seq", "4", "--pin", "--why", "the spec", "--json"]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(doc["pinned"], Value::Bool(true));
    let (code, out, err) = cli(&["inspect", "--json", "--store", &store]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    let m = &doc["messages"][4];
    assert_eq!(m["status"], "live");
    assert!(
        m["reason"]
            .as_str()
            .unwrap()
            .starts_with("pinned (never edited nor flushed until unpinned) by ctxlog restore --pin: the spec"),
        "{m}"
    );
    assert_eq!(m["set_by"]["event"], "pinned");
    let (code, out, err) = cli(&["why", "--store", &store, "--seq", "4"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("it was pinned: no ladder level edits it and no flush hides it until it is unpinned"),
        "{out}"
    );
    let (code, out, err) = cli(&["replay", "--store", &store]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("seq 4 pinned (never edited nor flushed until unpinned)"), "{out}");
    let (code, out, err) = cli(&["replay", "--store", &store, "--json"]);
    assert_eq!(code, 0, "{err}");
    let pins: Vec<Value> = json_lines(&out).into_iter().filter_map(|r| r.get("pins_after").cloned()).collect();
    assert_eq!(pins.len(), 1, "{out}");
    assert_eq!(pins[0][0]["seq"], 4);
    // Pinned twice, or a pin of a message that is not shown as appended: a bad --seq, exit 2.
    assert_eq!(cli(&["restore", "--store", &store, "--seq", "4", "--pin"]).0, 2);
    // Unpinned by an explicit edit; a second unpin has nothing to undo.
    let (code, out, err) = cli(&["restore", "--store", &store, "--seq", "4", "--unpin"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("unpinned seq 4"), "{out}");
    let (code, _, err) = cli(&["restore", "--store", &store, "--seq", "4", "--unpin"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot unpin --seq 4"), "{err}");
    let (code, out, err) = cli(&["replay", "--store", &store]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("seq 4 unpinned"), "{out}");
}

#[test]
fn verify_of_a_session_that_is_not_in_the_store_fails() {
    // Regression: verify --session of an unknown id printed "ok ... 0 events" and exited 0.
    let env = Env::new();
    let file = env.file("t.jsonl", conversation(1));
    let store = env.store("x.db");
    assert_eq!(cli(&["import", &file, "--store", &store, "--session", SESSION]).0, 0);
    let other = "00000000-0000-0000-0000-000000000001";
    let (code, out, err) = cli(&["verify", "--store", &store, "--session", other]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains(other) && out.is_empty(), "{out}{err}");
    assert_eq!(cli(&["verify", "--store", &store, "--session", SESSION]).0, 0);
}

#[test]
fn import_accepts_a_utf8_byte_order_mark_and_crlf_line_ends() {
    // Regression: a BOM at the start of the file was reported as invalid JSON on line 1.
    let env = Env::new();
    let plain = conversation(2);
    let windows = format!("\u{feff}{}", plain.replace('\n', "\r\n"));
    let a = env.file("plain.jsonl", &plain);
    let b = env.file("windows.jsonl", &windows);
    let (ca, out_a, err_a) = cli(&["import", &a, "--json", "--store", "mem:", "--session", SESSION]);
    let (cb, out_b, err_b) = cli(&["import", &b, "--json", "--store", "mem:", "--session", SESSION]);
    assert_eq!((ca, cb), (0, 0), "{err_a}{err_b}");
    assert_eq!(out_a, out_b);
    // A BOM anywhere else is still an error.
    let c = env.file("mid.jsonl", format!("{}\u{feff}{{\"role\":\"user\",\"content\":\"x\"}}\n", plain));
    let (code, _, err) = cli(&["import", &c, "--store", "mem:"]);
    assert_eq!(code, 2);
    assert!(err.contains(":10:"), "{err}");
}

#[test]
fn deeply_nested_tool_input_neither_overflows_the_stack_nor_changes_on_export() {
    // Tool inputs are kept as raw text, so nesting depth never reaches a recursive decoder.
    let depth = 100_000;
    let input = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let t = format!(
        "{{\"role\":\"user\",\"content\":\"hi\"}}\n{{\"role\":\"assistant\",\"content\":[{{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{input}}}]}}\n"
    );
    let env = Env::new();
    let file = env.file("deep.jsonl", &t);
    let store = env.store("x.db");
    let (code, _, err) = cli(&["import", &file, "--store", &store]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&["export", "--store", &store]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, t, "byte-identical");
    assert_eq!(cli(&["verify", "--store", &store]).0, 0);
}

#[test]
fn import_of_deeply_nested_tool_results_is_refused_not_a_stack_overflow() {
    // Regression: ~1,000 tool_result blocks nested in each other (a 60 kB line) overflowed the
    // stack and aborted the process.
    let mut content = String::from("\"x\"");
    for _ in 0..5_000 {
        content = format!("[{{\"type\":\"tool_result\",\"tool_use_id\":\"t\",\"content\":{content}}}]");
    }
    let t = format!(
        "{{\"role\":\"assistant\",\"content\":[{{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{{}}}}]}}\n{{\"role\":\"user\",\"content\":{content}}}\n"
    );
    rejected("nested.jsonl", t.as_bytes(), &[":2:", "field `content[0].content[0].content", "nested"]);
}

#[test]
fn inspect_view_at_a_call_version_prints_exactly_the_view_that_call_served() {
    // With a budget small enough to compact, the view at a call's version must be the bytes
    // that `--views` recorded for that call (edits, flushes and summaries included).
    let env = Env::new();
    let file = env.file("t.jsonl", conversation(30));
    let store = format!("sqlite:{}", env.path("x.db").display());
    let views = env.path("views.jsonl");
    let (code, out, err) =
        cli(&["import", &file, "--json", "--store", &store, "--budget", "1500", "--views", views.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let timeline = json_lines(&out);
    let recorded = json_lines(&std::fs::read_to_string(&views).unwrap());
    let compacted = timeline.iter().filter(|r| r["level"] != 0 || !r["flush"].is_null()).count();
    assert!(compacted > 0, "the fixture must exercise compaction");
    for (r, v) in timeline.iter().zip(&recorded) {
        let version = r["version"].as_u64().unwrap().to_string();
        let (code, view, err) = cli(&["inspect", "--store", &store, "--version", &version, "--view"]);
        assert_eq!(code, 0, "{err}");
        let printed: Vec<Value> = json_lines(&view);
        assert_eq!(Value::from(printed), v["messages"], "call {}", r["call"]);
    }
}

#[test]
fn a_failed_import_leaves_no_views_file_behind() {
    let env = Env::new();
    let file = env.file("t.jsonl", conversation(3));
    let store = format!("sqlite:{}", env.path("x.db").display());
    let views = env.path("views.jsonl");
    let session = "00000000-0000-0000-0000-0000000000aa";
    let args = ["import", &file, "--store", &store, "--session", session, "--views", views.to_str().unwrap()];
    let (code, _, err) = cli(&args);
    assert_eq!(code, 0, "{err}");
    assert!(views.exists(), "a successful import writes its views");
    std::fs::remove_file(&views).unwrap();
    // The same session id again: the import is refused.
    let (code, _, err) = cli(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already exists"), "{err}");
    assert!(!views.exists(), "views of a session that was not stored");
    assert!(!env.path("views.jsonl.partial").exists(), "the partial views file is cleaned up");
}

// ---- demo --messages -------------------------------------------------------------------------

#[test]
fn demo_with_messages_runs_a_generated_session_of_exactly_that_length() {
    let env = Env::new();
    let n = 401;
    let store = env.store("demo.db");
    let (code, _, err) = cli(&["demo", "--messages", "401", "--store", &store, "--session", SESSION]);
    assert_eq!(code, 0, "{err}");
    let text = ctxlog_workload::session(ctxlog_workload::DEMO_SEED, n).unwrap().into_jsonl();
    let calls = json_lines(&text).iter().filter(|m| m["role"] == "assistant").count();
    let list = sessions(&store);
    assert_eq!(list[0]["messages"], Value::from(n));
    assert_eq!(list[0]["calls"], Value::from(calls));
    assert_eq!(cli(&["verify", "--store", &store]).0, 0);
    // The same bytes imported with the demo's budget give the same timeline.
    let file = env.file("generated.jsonl", &text);
    let budget = ctxlog_tools::DEMO_BUDGET.to_string();
    let (code, imported, err) =
        cli(&["import", &file, "--json", "--store", "mem:", "--session", SESSION, "--budget", &budget]);
    assert_eq!(code, 0, "{err}");
    let (code, replayed, err) = cli(&["replay", "--json", "--store", &store]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(replayed, imported);
}

#[test]
fn demo_with_too_few_messages_exits_2_and_writes_nothing() {
    let env = Env::new();
    let store = env.store("demo.db");
    let (code, _, err) = cli(&["demo", "--messages", "2", "--store", &store]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--messages 2") && err.contains("at least 3 messages"), "{err}");
    assert!(!env.path("demo.db").exists() || sessions(&store).as_array().unwrap().is_empty());
}
