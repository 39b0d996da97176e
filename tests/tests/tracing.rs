//! What a service's logs show: spans per call (session, call, version), events for flushes,
//! edits, guards, summary attempts, conflicts, stale plans and torn-tail repairs, never the
//! content of a message above `trace`; and the CLI's `-v`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use ctxlog::config::Config;
use ctxlog::session::{Prepared, Produced};
use ctxlog::{MemoryStore, Message, Session, Store, StreamId, Timestamp, Usage, WireFormat};
use serde_json::json;
use tracing::Level;

/// Every message carries this; no log line above `trace` may.
const SECRET: &str = "PATIENT-RECORD-7731";

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with a subscriber at `level`; returns what it logged.
fn logged(level: Level, f: impl FnOnce()) -> String {
    let buf = Buffer::default();
    let sink = buf.clone();
    let subscriber =
        tracing_subscriber::fmt().with_max_level(level).with_writer(move || sink.clone()).without_time().finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = buf.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

fn msg(v: serde_json::Value) -> Message {
    ctxlog::internal::wire::parse_message(&v.to_string()).unwrap()
}

/// A session that flushes, edits, raises guards, prepares and discards summaries, restores,
/// meets a stale plan and a conflict.
fn eventful(store: &MemoryStore) -> StreamId {
    let config = Config { budget: 4_000, ..Config::default() };
    let mut s =
        Session::create(store, StreamId::random(), WireFormat::Anthropic, config, Timestamp::from_millis(0)).unwrap();
    s.append(vec![msg(json!({"role": "system", "content": format!("{SECRET} system")}))]).unwrap();
    s.append(vec![msg(json!({"role": "user", "content": format!("{SECRET} first")}))]).unwrap();
    let mut at = 0;
    for i in 0..12 {
        at += 10_000;
        let plan = s.plan(Timestamp::from_millis(at)).unwrap();
        let request = s.request(&plan, &ctxlog::RequestOptions::new()).unwrap();
        assert!(String::from_utf8_lossy(request.body()).contains(SECRET));
        let tokens = plan.view_tokens;
        // One report is a partial count: the usage guard speaks.
        let usage = if i == 3 { Usage::prompt(tokens / 10) } else { Usage::prompt(tokens) };
        s.commit(plan, Timestamp::from_millis(at), Some(usage)).unwrap();
        let id = format!("t{i}");
        s.append(vec![
            msg(json!({"role": "assistant", "content": [
                {"type": "text", "text": format!("{SECRET} calling")},
                {"type": "tool_use", "id": id, "name": "read", "input": {"q": SECRET}}]})),
            msg(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
                "content": format!("{SECRET} ").repeat(150)}]})),
            msg(json!({"role": "assistant", "content": format!("{SECRET} done")})),
            msg(json!({"role": "user", "content": format!("{SECRET} next, {}", "please ".repeat(30))})),
        ])
        .unwrap();
        // No summaries for the first calls: the ladder edits.
        if let Some(job) = s.summary_job().filter(|_| i >= 6) {
            let text = s.summarize(&job).unwrap();
            // The first attempt is too long: discarded, with its reason.
            let too_long = format!("{SECRET} ").repeat(5_000);
            assert!(matches!(s.prepare(&job, too_long, Produced::extractive()).unwrap(), Prepared::Discarded(_)));
            s.prepare(&job, text, Produced::extractive()).unwrap();
        }
    }
    let hidden = (0..s.state().message_count()).find(|&q| s.state().hidden_by_flush(q)).unwrap();
    s.restore(hidden, "test", SECRET).unwrap();
    // A stale plan, then a conflict between two handles.
    let stale = s.plan(Timestamp::from_millis(at + 1)).unwrap();
    let plan = s.plan(Timestamp::from_millis(at + 1)).unwrap();
    s.commit(plan, Timestamp::from_millis(at + 1), None).unwrap();
    assert!(s.commit(stale, Timestamp::from_millis(at + 2), None).is_err());
    let mut other = Session::open(store, s.id()).unwrap();
    let theirs = other.plan(Timestamp::from_millis(at + 3)).unwrap();
    let ours = s.plan(Timestamp::from_millis(at + 3)).unwrap();
    s.commit(ours, Timestamp::from_millis(at + 3), None).unwrap();
    assert!(other.commit(theirs, Timestamp::from_millis(at + 4), None).is_err());
    s.id()
}

#[test]
fn a_services_logs_show_every_decision_and_no_message_content() {
    let store = MemoryStore::new();
    let mut id = None;
    let debug = logged(Level::DEBUG, || id = Some(eventful(&store)));
    let id = id.unwrap();
    // Spans name the session, the call and the version.
    assert!(debug.contains(&format!("ctxlog.call{{session={id} call=3 version=")), "{debug}");
    assert!(debug.contains(&format!("ctxlog.append{{session={id} version=")));
    for needle in [
        "planned",
        "served",
        "flushed to prepared summaries",
        "edited",
        "guard raised kind=usage_below_estimate",
        "summary prepared",
        "summary discarded",
        "restored",
        "stale plan",
        "conflict: another handle wrote this session first",
        "opened",
        "request rendered",
    ] {
        assert!(debug.contains(needle), "no `{needle}` in the debug log");
    }
    // Nothing above trace carries message content (not even the restore's `why`).
    assert!(!debug.contains(SECRET), "message content in the debug log");
    let trace = logged(Level::TRACE, || {
        eventful(&MemoryStore::new());
    });
    assert!(!trace.contains(SECRET));
    // At `-v` (info): the decisions, without the per-call chatter.
    let info = logged(Level::INFO, || {
        eventful(&MemoryStore::new());
    });
    assert!(info.contains("flushed to prepared summaries") && info.contains("guard raised"));
    assert!(info.contains("ctxlog.call{session="), "info events carry their call's span");
    assert!(!info.contains(" planned ") && !info.contains("edited"));
    // With no subscriber at all, nothing is written and nothing breaks.
    eventful(&MemoryStore::new());
}

#[test]
fn a_torn_tail_repaired_by_the_fs_store_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = ctxlog_store_fs::FsStore::open(dir.path()).unwrap();
        let mut s = Session::create(
            &store,
            StreamId::random(),
            WireFormat::Anthropic,
            Config::default(),
            Timestamp::from_millis(0),
        )
        .unwrap();
        s.append(vec![msg(json!({"role": "user", "content": "hi"}))]).unwrap();
        s.id()
    };
    // A crash in the middle of an append: half a frame at the end of the stream file.
    let path = dir.path().join("streams").join(format!("{id}.log"));
    let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&[0x40, 0, 0, 0, 1, 2, 3]).unwrap();
    drop(f);
    let log = logged(Level::INFO, || {
        let store = ctxlog_store_fs::FsStore::open(dir.path()).unwrap();
        assert_eq!(store.recovered().len(), 1);
        assert_eq!(store.head(id).unwrap(), Some(2));
    });
    assert!(log.contains("torn tail cut into a quarantine file"), "{log}");
    assert!(log.contains(&format!("stream={id}")) && log.contains("bytes_dropped=7"), "{log}");
}

#[test]
fn the_cli_prints_the_logs_under_v() {
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("t.jsonl");
    let mut lines = String::new();
    lines.push_str(&json!({"role": "user", "content": format!("{SECRET} start")}).to_string());
    lines.push('\n');
    for i in 0..30 {
        lines.push_str(
            &json!({"role": "assistant", "content": format!("{SECRET} answer {i} {}", "words ".repeat(60))})
                .to_string(),
        );
        lines.push('\n');
        lines.push_str(&json!({"role": "user", "content": format!("{SECRET} more {i}")}).to_string());
        lines.push('\n');
    }
    std::fs::write(&transcript, lines).unwrap();
    let run = |extra: &[&str]| {
        let store = format!("sqlite:{}", dir.path().join(format!("c{}.db", extra.len())).display());
        let mut args = vec!["ctxlog", "import", transcript.to_str().unwrap(), "--store", &store, "--budget", "3000"];
        args.extend_from_slice(extra);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(ctxlog_tools::run(args, &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
        String::from_utf8(err).unwrap()
    };
    assert_eq!(run(&[]), "", "silent without -v");
    let info = run(&["-v"]);
    assert!(info.contains("INFO") && info.contains("flushed to prepared summaries"), "{info}");
    assert!(!info.contains("DEBUG"));
    let debug = run(&["-v", "-v"]);
    assert!(debug.contains("DEBUG") && debug.contains("served"));
    assert!(!debug.contains(SECRET));
}

/// A guard a host raises between calls (the proxy's `history_diverged`) is logged like the
/// engine's own, at `-v` (warn), with the successor it names.
#[test]
fn a_host_guard_is_logged() {
    let store = MemoryStore::new();
    let mut s = Session::create(
        &store,
        StreamId::random(),
        WireFormat::Anthropic,
        Config::default(),
        Timestamp::from_millis(0),
    )
    .unwrap();
    s.append(vec![msg(json!({"role": "user", "content": "hi"}))]).unwrap();
    let successor = StreamId::random().to_string();
    let kind = ctxlog::event::GuardKind::HistoryDiverged { seq: 0, successor: successor.clone() };
    let logs = logged(Level::INFO, || {
        s.raise_guard(kind.clone(), format!("continues in session {successor}"), "x-ctxlog-session").unwrap();
    });
    assert!(logs.contains("guard raised") && logs.contains("history_diverged") && logs.contains(&successor), "{logs}");
    // Latched: raised again, it writes and logs nothing.
    let again = logged(Level::INFO, || {
        s.raise_guard(kind, "again".into(), "x").unwrap();
    });
    assert!(again.is_empty(), "{again}");
}
