//! `ctxlog demo --summarizer command:… | openai:URL`: summaries written by a model end to end,
//! against a local program and a loopback OpenAI-compatible server (real sockets).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::Value;

fn cli(args: &[&str]) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = ctxlog_tools::run(std::iter::once("ctxlog").chain(args.iter().copied()), &mut out, &mut err);
    (code, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
}

/// A program that reads the request from stdin, keeps it in `dir`, and answers `answer`.
fn script(dir: &std::path::Path, answer: &str, exit: i32) -> String {
    let path = dir.join("summarize.sh");
    let seen = dir.join("requests");
    std::fs::create_dir_all(&seen).unwrap();
    let body = format!("#!/bin/sh\ncat > \"{}/$$.json\"\nprintf '%s' '{answer}'\nexit {exit}\n", seen.display());
    std::fs::write(&path, body).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    path.display().to_string()
}

fn requests(dir: &std::path::Path) -> Vec<Value> {
    std::fs::read_dir(dir.join("requests"))
        .unwrap()
        .map(|e| serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap())
        .collect()
}

/// The attempts of a `--json` timeline's call records (not those after the last call: that
/// last object, `after_calls`, is printed only when there are some).
fn attempts(out: &str) -> Vec<Value> {
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r.get("after_calls").is_none())
        .flat_map(|r| r["summaries"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[test]
fn demo_with_a_command_summarizer_forks_and_the_table_shows_each_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let prog = script(dir.path(), "Summary: the exporter writes CSV; tests pass.", 0);
    let store = format!("sqlite:{}", dir.path().join("d.db").display());
    let spec = format!("command:{prog}");
    let args = ["demo", "--store", &store, "--summarizer", &spec, "--summary-call", "fork", "--summary-model", "m1"];
    let (code, out, err) = cli(&args);
    assert_eq!(code, 0, "{err}");
    // Each attempt is printed under its call's row, and the closing note sums them up.
    assert!(out.contains("      summary "), "{out}");
    assert!(out.contains("summary attempts:"), "{out}");
    // The program got fork requests: the session's last request plus one user message.
    let seen = requests(dir.path());
    assert!(!seen.is_empty());
    let forks: Vec<&Value> = seen.iter().filter(|r| r["messages"].as_array().unwrap().len() > 2).collect();
    assert!(!forks.is_empty(), "no fork request among {}", seen.len());
    for f in &forks {
        assert_eq!(f["model"], "m1");
        let last = f["messages"].as_array().unwrap().last().unwrap();
        assert_eq!(last["role"], "user");
        assert!(last["content"].as_str().unwrap().contains("SCOPE:"));
    }
    assert_eq!(cli(&["verify", "--store", &store]).0, 0);
    // `replay` prints the same attempts from the log.
    let (code, replayed, err) = cli(&["replay", "--store", &store]);
    assert_eq!(code, 0, "{err}");
    let rows = |t: &str| t.lines().filter(|l| l.starts_with("      summary ")).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(rows(&replayed), rows(&out));
    // A rerun re-makes summaries with the built-in summarizer only: a model is refused.
    let (code, _, err) = cli(&["rerun", "--store", &store, "--summarizer", &spec]);
    assert_eq!(code, 2, "{err}");
    // The same with --json: every attempt is in the timeline records.
    let store2 = format!("sqlite:{}", dir.path().join("e.db").display());
    let (code, out, err) =
        cli(&["demo", "--json", "--store", &store2, "--summarizer", &spec, "--summary-call", "auto"]);
    assert_eq!(code, 0, "{err}");
    let all = attempts(&out);
    assert!(!all.is_empty());
    assert!(all.iter().all(|a| a["mode_requested"] == "auto"));
    // `replay --json` prints what `demo --json` printed, what followed the last call included.
    let (code, replayed, err) = cli(&["replay", "--json", "--store", &store2]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(replayed, out);
    assert!(all.iter().any(|a| a["outcome"] == "prepared"));
}

#[test]
fn a_failing_summarizer_is_recorded_and_pauses_without_failing_the_demo() {
    let dir = tempfile::tempdir().unwrap();
    let prog = script(dir.path(), "", 3);
    let store = format!("sqlite:{}", dir.path().join("d.db").display());
    let spec = format!("command:{prog}");
    let (code, out, err) = cli(&["demo", "--json", "--store", &store, "--summarizer", &spec]);
    assert_eq!(code, 0, "{err}");
    let all = attempts(&out);
    assert!(!all.is_empty() && all.iter().all(|a| a["outcome"] == "provider_error"), "{all:?}");
    assert!(all[0]["detail"].as_str().unwrap().contains("exit"), "{}", all[0]);
    // Three failures in a row pause the summarizer, said once per pause; while paused it is not
    // asked (the pause ends when the ladder brings a call under the soft threshold): so every
    // pause stands for exactly three attempts, and fewer than three follow the last one.
    let pauses = out.matches("\"summarizer_paused\"").count();
    assert!(pauses >= 1, "{out}");
    assert!(all.len() >= 3 * pauses && all.len() < 3 * (pauses + 1), "{} attempts, {pauses} pauses", all.len());
    // Attempts after the last call, if any, are printed last, as `replay --json` prints them
    // (whether the demo's last attempts follow its last call depends on where the pauses fall;
    // `summary_fit.rs` pins the trailing record itself).
    let calls = out.lines().filter(|l| l.contains("\"view_messages\"")).count();
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    if last.get("after_calls").is_some() {
        assert_eq!(last["after_calls"], calls, "{last}");
        assert!(!last["summaries"].as_array().unwrap().is_empty());
    }
    assert_eq!(cli(&["replay", "--json", "--store", &store]).1, out);
}

/// A loopback OpenAI-compatible server: every request recorded, answered with a completion.
struct Server {
    base: String,
    seen: Arc<Mutex<Vec<(String, Value)>>>,
}

/// `n_ctx`: what `GET /props` states, as llama.cpp's server does (`None`: 404, as OpenAI).
fn serve(n_ctx: Option<u64>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let rec = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let path = line.split_whitespace().nth(1).unwrap_or_default().to_owned();
            let mut length = 0;
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                if h.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().unwrap();
                    }
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            if line.starts_with("GET ") {
                let reply = match (path.as_str(), n_ctx) {
                    ("/props", Some(n)) => {
                        let props = format!(r#"{{"default_generation_settings":{{"n_ctx":{n}}},"total_slots":1}}"#);
                        format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{props}", props.len())
                    }
                    _ => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned(),
                };
                stream.write_all(reply.as_bytes()).unwrap();
                continue;
            }
            rec.lock().unwrap().push((path, serde_json::from_slice(&body).unwrap()));
            let answer = r#"{"id":"c1","object":"chat.completion","model":"local","choices":[{"index":0,"message":{"role":"assistant","content":"Summary: handlers ported, router in src/router.rs."},"finish_reason":"stop"}],"usage":{"prompt_tokens":900,"completion_tokens":20,"total_tokens":920,"prompt_tokens_details":{"cached_tokens":0}}}"#;
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
            stream.write_all(reply.as_bytes()).unwrap();
        }
    });
    Server { base, seen }
}

#[test]
fn demo_with_an_openai_compatible_server_summarizes_over_real_sockets() {
    let server = serve(None);
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("d.db").display());
    let spec = format!("openai:{}", server.base);
    let (code, out, err) = cli(&[
        "demo",
        "--json",
        "--store",
        &store,
        "--summarizer",
        &spec,
        "--summary-call",
        "fork",
        "--summary-model",
        "qwen2.5-7b",
        "--summary-timeout",
        "20",
    ]);
    assert_eq!(code, 0, "{err}");
    let seen = server.seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    // With an `openai:` summarizer the demo session is in OpenAI chat format, so the fork is
    // the session's last request plus one user message, in the server's own format.
    for (path, body) in &seen {
        assert!(path.ends_with("/chat/completions"), "{path}");
        assert_eq!(body["model"], "qwen2.5-7b");
        assert_eq!(body["messages"][0]["role"], "system");
        let last = body["messages"].as_array().unwrap().last().unwrap();
        assert_eq!(last["role"], "user");
    }
    let all = attempts(&out);
    assert_eq!(all.len(), seen.len(), "one attempt recorded per request");
    let forks = all.iter().filter(|a| a["mode_used"] == "fork").count();
    assert!(forks > 0, "no fork: {all:?}");
    assert!(!out.contains("fork_refused:fork_unbuildable"), "the fork was unbuildable");
    assert!(all.iter().any(|a| a["outcome"] == "prepared" && a["usage"]["input"] == 900));
    assert_eq!(cli(&["verify", "--store", &store]).0, 0);
    // `--format anthropic` is the old pairing: the fork cannot be built across formats.
    let store2 = format!("sqlite:{}", dir.path().join("a.db").display());
    let (code, out, err) = cli(&[
        "demo",
        "--json",
        "--store",
        &store2,
        "--format",
        "anthropic",
        "--summarizer",
        &spec,
        "--summary-call",
        "fork",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(attempts(&out).iter().all(|a| a["refusal"] == "fork_unbuildable"));
}

#[test]
fn a_llama_cpp_servers_context_from_props_bounds_every_summary_request() {
    let n_ctx = 2_048;
    let server = serve(Some(n_ctx));
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("d.db").display());
    let spec = format!("openai:{}", server.base);
    let (code, out, err) =
        cli(&["demo", "--json", "--store", &store, "--summarizer", &spec, "--summary-timeout", "20"]);
    assert_eq!(code, 0, "{err}");
    let seen = server.seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for (_, body) in &seen {
        // Every string of the request at chars/4, plus the answer's room, within the context.
        let text: u64 = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().map_or(0, |c| c.chars().count() as u64 / 4))
            .sum();
        let max = body["max_tokens"].as_u64().unwrap();
        assert!(text + max <= n_ctx, "{text} + {max} over {n_ctx}");
        assert!(max < 2_048, "max_tokens is derived from the job, not a constant: {max}");
    }
    assert!(attempts(&out).iter().any(|a| a["outcome"] == "prepared"));
    // A flag wins over /props; 0 is refused.
    let (code, _, err) = cli(&["demo", "--store", &store, "--summarizer", &spec, "--summary-context", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--summary-context"), "{err}");
}

#[test]
fn bad_summarizer_flags_are_usage_errors_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("d.db").display());
    let (code, _, err) = cli(&["demo", "--store", &store, "--summarizer", "gpt"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("gpt"), "{err}");
    let (code, _, err) = cli(&["demo", "--store", &store, "--summarizer", "openai:ftp://x"]);
    assert_ne!(code, 0);
    assert!(err.contains("http"), "{err}");
    let (code, _, err) = cli(&["demo", "--store", &store, "--summary-call", "fork"]);
    assert_ne!(code, 0);
    assert!(err.contains("--summarizer"), "{err}");
    let env = "CTXLOG_TEST_KEY_THAT_IS_NOT_SET";
    let (code, _, err) = cli(&[
        "demo",
        "--store",
        &store,
        "--summarizer",
        "anthropic:https://example.invalid",
        "--summary-key-env",
        env,
    ]);
    assert_ne!(code, 0);
    assert!(err.contains(env), "{err}");
}
