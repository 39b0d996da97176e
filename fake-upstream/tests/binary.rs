#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The binary: first stdout line, record file, bad arguments; and the library's shutdown.

use ctxlog_fake_upstream::{FakeUpstream, Fault};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_ctxlog-fake-upstream");

#[test]
fn prints_address_first_and_records_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--record"])
        .arg(&rec)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let addr = first.trim().strip_prefix("listening on http://").unwrap().to_owned();
    let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(s, "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer k\r\nconnection: close\r\ncontent-length: {}\r\n\r\n", body.len()).unwrap();
    s.write_all(body).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200") && resp.contains("ack 1"));
    // The line is written when the exchange finishes, just before the last byte is handed over.
    let mut text = String::new();
    for _ in 0..200 {
        text = std::fs::read_to_string(&rec).unwrap();
        if !text.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    let line: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(line["request"]["body"], std::str::from_utf8(body).unwrap());
    assert!(resp.ends_with(line["response"]["chunks"][0].as_str().unwrap()));
}

#[test]
fn bad_arguments_exit_2() {
    for args in [&["--listen", "nope"][..], &["--bogus"][..], &["--listen"][..]] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn shutdown_ends_a_hung_exchange_and_closes_the_port() {
    let up = FakeUpstream::start().unwrap();
    up.script(Fault::Hang, 1);
    let addr = up.addr();
    let mut s = TcpStream::connect(addr).unwrap();
    let body = br#"{"messages":[]}"#;
    write!(s, "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n", body.len()).unwrap();
    s.write_all(body).unwrap();
    // Wait until the fake has the request (no timing assumption: poll the record).
    while up.requests().is_empty() {
        std::thread::yield_now();
    }
    assert!(!up.requests()[0].response.finished);
    let shared_view = up.requests();
    up.shutdown();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(buf.is_empty(), "a hang sends nothing, even at shutdown");
    assert_eq!(shared_view[0].fault, Some(Fault::Hang));
    assert!(TcpStream::connect(addr).is_err());
}
