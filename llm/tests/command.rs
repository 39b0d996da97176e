//! The command client: stdin gets the exact bytes, stdout is the summary, and every failure
//! (exit status, hang, empty output, a grandchild holding the pipe) is a bounded typed error.
#![cfg(unix)]

use std::time::Duration;

use ctxlog_llm::{ClientOptions, CommandClient, HttpOptions, LlmError, Summarizer, SummarizerSpec};

fn sh(script: &str) -> CommandClient {
    CommandClient::new("sh", vec!["-c".into(), script.into()], Some("tiny-1".into()), Duration::from_secs(5))
}

fn sh_with_timeout(script: &str, timeout: Duration) -> CommandClient {
    CommandClient::new("sh", vec!["-c".into(), script.into()], None, timeout)
}

#[test]
fn stdin_gets_the_exact_bytes_and_stdout_is_the_summary() {
    let body = b"{\"b\":1,  \"a\":\"\\u00e9\"}\n";
    let done = sh("cat").complete(body).unwrap();
    assert_eq!(done.text.as_bytes(), &body[..body.len() - 1], "trimmed, otherwise byte for byte");
    assert_eq!(done.usage, None);
    assert_eq!(done.model.as_deref(), Some("tiny-1"));
}

#[test]
fn the_model_reaches_the_program_in_its_environment() {
    assert_eq!(sh("cat >/dev/null; echo \"$CTXLOG_SUMMARY_MODEL\"").complete(b"{}").unwrap().text, "tiny-1");
}

#[test]
fn a_program_that_ignores_a_large_stdin_still_succeeds() {
    let body = vec![b'x'; 4 * 1024 * 1024];
    assert_eq!(sh("echo done").complete(&body).unwrap().text, "done");
}

#[test]
fn a_nonzero_exit_is_an_error_with_the_status_and_stderr() {
    let err = sh("cat >/dev/null; echo partial; echo 'model not loaded' >&2; exit 3").complete(b"{}").unwrap_err();
    match &err {
        LlmError::Command { program, detail, stderr } => {
            assert_eq!(program, "sh");
            assert!(detail.contains('3'), "{detail}");
            assert_eq!(stderr, "model not loaded");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("model not loaded"), "{err}");
}

#[test]
fn a_hanging_program_is_killed_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > '{}'; exec sleep 30", pidfile.display());
    let err = sh_with_timeout(&script, Duration::from_millis(300)).complete(b"{}").unwrap_err();
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    // Killed and reaped: the pid no longer names a process.
    let alive = std::process::Command::new("kill")
        .args(["-0", pid.trim()])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!alive.success(), "process {pid} still running");
}

#[test]
fn a_grandchild_holding_stdout_open_cannot_hang_the_call() {
    let err = sh_with_timeout("echo hi; sleep 30 &", Duration::from_millis(300)).complete(b"{}").unwrap_err();
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
}

#[test]
fn empty_or_blank_output_is_empty() {
    for script in ["cat >/dev/null", "printf '  \\n\\n'"] {
        assert!(matches!(sh(script).complete(b"{}"), Err(LlmError::Empty { .. })), "{script}");
    }
}

#[test]
fn output_that_is_not_utf8_is_refused() {
    let err = sh("printf '\\377\\376'").complete(b"{}").unwrap_err();
    assert!(matches!(&err, LlmError::Command { detail, .. } if detail.contains("UTF-8")), "{err:?}");
}

#[test]
fn a_missing_program_is_a_command_error() {
    let client = CommandClient::new("/nonexistent/ctxlog-summarizer", vec![], None, Duration::from_secs(1));
    assert!(matches!(client.complete(b"{}"), Err(LlmError::Command { detail, .. }) if detail.contains("cannot start")));
}

#[test]
fn the_example_summarizer_prints_the_first_texts() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/first-lines.sh");
    let spec = SummarizerSpec::parse(&format!("command:sh {script} 2")).unwrap();
    let options = ClientOptions {
        http: HttpOptions { timeout: Duration::from_secs(10), ..HttpOptions::default() },
        ..ClientOptions::default()
    };
    let client = spec.build(&options).unwrap();
    assert_eq!(client.wire_format(), None);
    let body = br#"{"model":"m","messages":[{"role":"user","content":"Plan the trip to Lyon."},{"role":"assistant","content":[{"type":"text","text":"Trains leave at 9."}]},{"role":"user","content":"third"}]}"#;
    assert_eq!(client.complete(body).unwrap().text, "- Plan the trip to Lyon.\n- Trains leave at 9.");
}
