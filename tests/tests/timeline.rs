//! Timeline snapshots: the bundled demo transcript and a small hand-written one, imported through
//! the CLI into every backend (`mem:`, SQLite, fs, sled, PostgreSQL). The per-call records must be identical across backends and
//! equal to `replay`, and they are pinned with insta so any behaviour change shows up as a
//! reviewable diff (re-accept with `cargo insta test --accept` when the change is intended).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ctxlog_tests::scenario::cli;
use ctxlog_workload::demo_transcript;

const DEMO_SESSION: &str = "00000000-0000-0000-0000-00000000d3e0";
const SMALL_SESSION: &str = "00000000-0000-0000-0000-0000000005a1";

/// Imports `transcript` into `mem:` and into fresh SQLite, fs, sled and PostgreSQL stores with `extra`
/// flags; asserts every timeline and every replay are identical; returns the JSONL.
fn timeline(transcript: &str, session: &str, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, transcript).unwrap();
    let path = path.to_str().unwrap();
    let sqlite = format!("sqlite:{}", dir.path().join("x.db").display());
    let import = |store: &str| {
        let mut args = vec!["import", path, "--json", "--session", session, "--store", store];
        args.extend_from_slice(extra);
        let (code, out, err) = cli(&args);
        assert_eq!(code, 0, "import into {store}: {err}");
        out
    };
    let mem = import("mem:");
    assert!(!mem.is_empty());
    let fs = format!("fs:{}", dir.path().join("fs").display());
    let sled = format!("sled:{}", dir.path().join("sled").display());
    let pg = ctxlog_tests::postgres::database("timeline on postgres"); // None: skipped (message printed)
    let pg = pg.as_ref().map(|db| db.url().to_owned());
    for store in [Some(&sqlite), Some(&fs), Some(&sled), pg.as_ref()].into_iter().flatten() {
        assert_eq!(import(store), mem, "mem: and {store} timelines differ");
        let (code, replayed, err) = cli(&["replay", "--json", "--store", store]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(replayed, mem, "replay of {store} differs from import");
        let (code, out, err) = cli(&["verify", "--store", store]);
        assert_eq!(code, 0, "verify {store}: {out}{err}");
    }
    mem
}

#[test]
fn demo_transcript_timeline() {
    // The demo's own budget, so the snapshot pins flushes, ladder edits and guards.
    let budget = ctxlog_tools::DEMO_BUDGET.to_string();
    let jsonl = timeline(&demo_transcript(), DEMO_SESSION, &["--budget", &budget]);
    for (i, line) in jsonl.lines().enumerate() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(r["call"], serde_json::Value::from(i as u64));
    }
    insta::assert_snapshot!("demo_timeline", jsonl);
}

#[test]
fn demo_transcript_timeline_is_the_same_through_the_demo_command() {
    // `ctxlog demo` runs the same transcript with its own budget; with that budget passed
    // explicitly, `import` must print the same timeline (the demo's table is derived from it).
    let dir = tempfile::tempdir().unwrap();
    let a = format!("sqlite:{}", dir.path().join("demo.db").display());
    let (code, _, err) = cli(&["demo", "--store", &a, "--session", DEMO_SESSION]);
    assert_eq!(code, 0, "{err}");
    let (code, from_demo, err) = cli(&["replay", "--json", "--store", &a]);
    assert_eq!(code, 0, "{err}");
    let budget = ctxlog_tools::DEMO_BUDGET.to_string();
    let imported = timeline(&demo_transcript(), DEMO_SESSION, &["--budget", &budget, "--format", "anthropic"]);
    assert_eq!(from_demo, imported);
}

#[test]
fn small_transcript_timeline() {
    let transcript = [
        r#"{"role":"system","content":"You are a coding agent.","timestamp":"2026-03-01T09:00:00Z"}"#,
        r#"{"role":"user","content":"Why does `cargo test` fail?","pinned":true}"#,
        r#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"run","input":{"cmd": "cargo test"}}],"timestamp":"2026-03-01T09:00:04Z","usage":{"input_tokens":120,"output_tokens":9}}"#,
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"error[E0308]: mismatched types\n --> src/lib.rs:3:5","is_error":true}]}"#,
        r#"{"role":"assistant","content":"A type mismatch at src/lib.rs:3. Shall I fix it?","timestamp":"2026-03-01T09:00:09Z"}"#,
        r#"{"role":"user","content":"Yes please."}"#,
        r#"{"role":"assistant","content":[{"type":"text","text":"Fixing."},{"type":"tool_use","id":"t2","name":"edit","input":{"path":"src/lib.rs","line":3}}],"timestamp":"2026-03-01T09:10:00Z","usage":{"input_tokens":300,"cache_read_input_tokens":120,"output_tokens":20}}"#,
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"ok"}]}"#,
        r#"{"role":"assistant","content":"Done: `cargo test` passes."}"#,
    ]
    .join("\n");
    let jsonl = timeline(&transcript, SMALL_SESSION, &[]);
    insta::assert_snapshot!("small_timeline", jsonl);
}
