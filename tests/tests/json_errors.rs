//! Under `--json`, a failing command prints nothing on stdout and one JSON object on stderr:
//! `{"error", "exit", "file", "line", "field"}`, with the same exit code as without `--json`.
//! Mistyped flags get clap's suggestion, with or without `--json`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use ctxlog_tests::postmortem::{Recorded, DEMO};
use ctxlog_tests::scenario::cli;
use serde_json::Value;

/// Runs a command that must fail; returns its exit code and the JSON error.
fn fails(args: &[&str]) -> (i32, Value) {
    let (code, out, err) = cli(args);
    assert_ne!(code, 0, "{args:?} succeeded");
    assert_eq!(out, "", "{args:?}: nothing on stdout");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line on stderr: {err}");
    let v: Value = serde_json::from_str(&err).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {err}"));
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["error", "exit", "field", "file", "line"], "{args:?}");
    assert_eq!(v["exit"], code, "{args:?}");
    // The same command without --json fails the same way, in words.
    let plain: Vec<&str> = args.iter().copied().filter(|a| *a != "--json").collect();
    let (code2, _, err2) = cli(&plain);
    assert_eq!(code2, code, "{plain:?}");
    assert!(err2.contains(v["error"].as_str().unwrap().split(';').next().unwrap()), "{err2}");
    (code, v)
}

#[test]
fn a_missing_store_names_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nothing-here.db");
    let store = format!("sqlite:{}", path.display());
    let (code, v) = fails(&["inspect", "--json", "--store", &store]);
    assert_eq!(code, 3);
    assert_eq!(v["file"], path.display().to_string());
    assert!(v["error"].as_str().unwrap().contains("nothing-here.db"));
    assert!(!path.exists(), "a read-only command created the store");
    let (code, v) = fails(&["rerun", "--json", "--store", &format!("fs:{}", dir.path().join("none").display())]);
    assert_eq!((code, v["file"].as_str().is_some()), (3, true), "{v}");
}

#[test]
fn an_unknown_session_names_the_flag() {
    let r = Recorded::demo(&[]);
    let other = "00000000-0000-0000-0000-00000000beef";
    for command in ["inspect", "replay", "why", "report", "rerun"] {
        let mut args = vec![command, "--json", "--store", &r.store, "--session", other];
        let out = r.path("r.html");
        match command {
            "why" => args.extend(["--seq", "1"]),
            "report" => args.extend(["--out", &out]),
            _ => {}
        }
        let (code, v) = fails(&args);
        assert_eq!(code, 2, "{command}");
        assert_eq!(
            (v["field"].as_str(), v["file"].as_str(), v["line"].as_u64()),
            (Some("--session"), None, None),
            "{command}"
        );
        assert!(v["error"].as_str().unwrap().contains(other), "{command}: {v}");
    }
    let (code, v) = fails(&["diff", DEMO, other, "--json", "--store", &r.store]);
    assert_eq!((code, v["field"].as_str()), (2, Some("--session")));
    let (code, v) = fails(&["inspect", "--json", "--store", &r.store, "--session", "not-a-uuid"]);
    assert_eq!((code, v["field"].as_str()), (2, Some("--session")));
}

#[test]
fn a_version_or_call_past_the_head_is_an_error() {
    let r = Recorded::demo(&[]);
    let state: Value = serde_json::from_str(&r.ok(&["inspect", "--json"])).unwrap();
    let head = state["version"].as_u64().unwrap();
    let past = (head + 1).to_string();
    let (code, v) = fails(&["inspect", "--json", "--store", &r.store, "--version", &past]);
    assert_eq!((code, v["field"].as_str()), (2, Some("--version")));
    assert!(v["error"].as_str().unwrap().contains(&format!("which is version {head}")), "{v}");
    let (code, v) = fails(&["inspect", "--json", "--store", &r.store, "--version", "0"]);
    assert_eq!((code, v["field"].as_str()), (2, Some("--version")));
    let (code, v) = fails(&["replay", "--json", "--store", &r.store, "--until", &past]);
    assert_eq!((code, v["field"].as_str()), (2, Some("--until")));
    let (code, v) = fails(&["replay", "--json", "--store", &r.store, "--call", "271"]);
    assert_eq!((code, v["field"].as_str()), (2, Some("--call")));
    // The head itself is fine.
    let (code, _, err) = r.run(&["inspect", "--json", "--version", &head.to_string()]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_malformed_config_names_the_file_the_line_and_the_key() {
    let r = Recorded::demo(&[]);
    let transcript = r.path("t.jsonl");
    std::fs::write(
        &transcript,
        "{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"assistant\",\"content\":\"hello\"}\n",
    )
    .unwrap();
    let config = r.path("knobs.toml");
    for (text, line, key) in [
        ("budget = 1000\ncache-aware = true\nbudgt = 5\n", 3, "budgt"),
        ("budget = 1000\n\ntrigger = \"high\"\n", 3, "trigger"),
        ("budget = [1,\n", 1, "budget"),
    ] {
        std::fs::write(&config, text).unwrap();
        for args in [
            vec!["import", transcript.as_str(), "--json", "--store", "mem:", "--config", config.as_str()],
            vec!["rerun", "--json", "--store", r.store.as_str(), "--config", config.as_str()],
        ] {
            let (code, v) = fails(&args);
            assert_eq!(code, 2, "{text:?}");
            assert_eq!(v["file"], config.as_str(), "{text:?}");
            assert_eq!(v["line"], line, "{text:?}: {v}");
            assert_eq!(v["field"], key, "{text:?}: {v}");
        }
    }
    // Knobs that parse but cannot work name the knob.
    std::fs::write(&config, "target = 0.9\ntrigger = 0.5\n").unwrap();
    let (code, v) = fails(&["rerun", "--json", "--store", &r.store, "--config", &config]);
    assert_eq!((code, v["field"].as_str()), (2, Some("target")), "{v}");
}

#[test]
fn a_mistyped_flag_gets_a_suggestion() {
    let (code, out, err) = cli(&["replay", "--untill", "3"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("a similar argument exists: '--until'"), "{err}");
    let (code, out, err) = cli(&["replay", "--json", "--untill", "3"]);
    assert_eq!((code, out.as_str()), (2, ""));
    let v: Value = serde_json::from_str(&err).unwrap();
    assert_eq!(v["field"], "--untill");
    assert!(v["error"].as_str().unwrap().contains("'--until'"), "{v}");
    let (code, _, err) = cli(&["rerun", "--cache-awre"]);
    assert_eq!(code, 2);
    assert!(err.contains("'--cache-aware'"), "{err}");
    let (code, _, err) = cli(&["reprot"]);
    assert_eq!(code, 2);
    assert!(err.contains("'report'"), "{err}");
}

#[test]
fn without_json_errors_stay_one_plain_line() {
    let r = Recorded::demo(&[]);
    let (code, out, err) = r.run(&["why", "--seq", "99999"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.starts_with("error: --seq 99999") && err.lines().count() == 1, "{err}");
}

#[test]
fn a_bad_transcript_line_names_the_file_the_line_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, "{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"robot\",\"content\":\"beep\"}\n")
        .unwrap();
    let (code, v) = fails(&["import", path.to_str().unwrap(), "--json", "--store", "mem:"]);
    assert_eq!(code, 2);
    assert_eq!(
        (v["file"].as_str(), v["line"].as_u64(), v["field"].as_str()),
        (path.to_str(), Some(2), Some("role")),
        "{v}"
    );
}
