//! `import` streams (issue 8): it reads the transcript line by line and writes the session as it
//! goes, so its atomicity rests on a completion marker. An import that fails half-way leaves an
//! unfinished session that every reader treats as absent (`sessions`, `open`, `replay`,
//! `inspect`, `export`, `restore`, `copy`; `verify` reports it); retrying the same import
//! resumes it and ends with the log a clean import writes, byte for byte; another transcript or
//! other options under the same id are refused and change nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use ctxlog::config::Config;
use ctxlog::store::StoredRecord;
use ctxlog::{BlobId, ExpectedVersion, Record, Session, SessionError, Snapshot, Store, StoreError, StreamId, Version};
use ctxlog_store_sqlite::SqliteStore;
use ctxlog_tests::scenario::cli;
use ctxlog_tools::import::{import_in_chunks, ImportOptions};
use ctxlog_tools::transcript::{check_file, read, FormatArg, Source};
use serde_json::Value;

const SESSION: &str = "00000000-0000-0000-0000-00000005ea11";
const BUDGET: u64 = 6_000;

/// A transcript long enough to compact: tool rounds with 2–6 kB results, a human follow-up
/// every eighth round.
fn transcript(rounds: usize, tag: &str) -> String {
    let mut lines = vec![
        r#"{"role":"system","content":"You are a coding agent.","timestamp":"2026-03-01T09:00:00Z"}"#.to_owned(),
        format!(r#"{{"role":"user","content":"Fix the build ({tag})."}}"#),
    ];
    for i in 0..rounds {
        let id = format!("toolu_{i:04}");
        lines.push(format!(
            r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"{id}","name":"run","input":{{"cmd":"step {i}"}}}}]}}"#
        ));
        let output = format!("line {i} of the output\n").repeat(100 + (i % 3) * 100);
        lines.push(
            serde_json::json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": output}]})
                .to_string(),
        );
        if i % 8 == 7 {
            lines.push(format!(r#"{{"role":"user","content":"Round {i} looks good, continue."}}"#));
        }
    }
    lines.push(r#"{"role":"assistant","content":"Done."}"#.to_owned());
    lines.join("\n") + "\n"
}

/// A store whose appends fail (as a server going away would) after the first `ok` ones, or,
/// with `marker_only`, at the `ImportCompleted` record of an append (the records before it
/// land, as when a chunk ends right before the marker).
struct Failing<'a> {
    inner: &'a dyn Store,
    ok: usize,
    appends: AtomicUsize,
    marker_only: bool,
}

fn is_marker(r: &Record) -> bool {
    r.body().get(1) == Some(&ctxlog::codec::kind::IMPORT_COMPLETED)
}

impl Store for Failing<'_> {
    fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
        let refused = if self.marker_only {
            // The chunk is cut right before the marker: what precedes it lands.
            let at = records.iter().position(is_marker);
            if let Some(at) = at.filter(|&at| at > 0) {
                self.inner.append(stream, expected, &records[..at])?;
            }
            at.is_some()
        } else {
            self.appends.fetch_add(1, Ordering::SeqCst) >= self.ok
        };
        if refused {
            return Err(StoreError::Unavailable {
                backend: "test",
                location: "failing".into(),
                detail: "connection lost".into(),
            });
        }
        self.inner.append(stream, expected, records)
    }
    fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError> {
        self.inner.read(stream, from, max)
    }
    fn head(&self, stream: StreamId) -> Result<Option<Version>, StoreError> {
        self.inner.head(stream)
    }
    fn streams(&self) -> Result<Vec<StreamId>, StoreError> {
        self.inner.streams()
    }
    fn put_snapshot(&self, stream: StreamId, snap: &Snapshot) -> Result<(), StoreError> {
        self.inner.put_snapshot(stream, snap)
    }
    fn get_snapshot(&self, stream: StreamId) -> Result<Option<Snapshot>, StoreError> {
        self.inner.get_snapshot(stream)
    }
    fn put_blob(&self, bytes: &[u8]) -> Result<BlobId, StoreError> {
        self.inner.put_blob(bytes)
    }
    fn get_blob(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get_blob(id)
    }
}

fn options() -> ImportOptions<'static> {
    ImportOptions {
        config: Config { budget: BUDGET, ..Config::default() },
        session: Some(SESSION.parse().unwrap()),
        call_interval_ms: 30_000,
        views: None,
        inline_media: false,
        summaries: None,
    }
}

/// Imports `file` into the SQLite store at `db`, failing after `ok` appends of 16 kB chunks.
fn interrupted_import(file: &Path, db: &Path, ok: usize) -> u64 {
    let inner = SqliteStore::open(db).unwrap();
    let failing = Failing { inner: &inner, ok, appends: AtomicUsize::new(0), marker_only: false };
    let checked = check_file(file, FormatArg::Auto).unwrap();
    let err = import_in_chunks(&checked, &failing, options(), 16 << 10, |_| Ok(())).unwrap_err();
    assert!(err.to_string().contains("connection lost"), "{err}");
    inner.head(SESSION.parse().unwrap()).unwrap().expect("the interrupted import wrote part of the session")
}

fn records(store_url_path: &Path) -> Vec<Vec<u8>> {
    let store = SqliteStore::open(store_url_path).unwrap();
    store.read(SESSION.parse().unwrap(), 1, usize::MAX).unwrap().into_iter().map(|r| r.record.into_bytes()).collect()
}

#[test]
fn an_interrupted_import_is_absent_to_readers_and_a_retry_finishes_it_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    std::fs::write(&file, transcript(120, "a")).unwrap();
    let f = file.to_str().unwrap();
    let budget = BUDGET.to_string();
    let import_args = |url: &str| -> Vec<String> {
        ["import", f, "--json", "--session", SESSION, "--budget", &budget, "--store", url].map(str::to_owned).to_vec()
    };
    let call = |v: Vec<String>| cli(&v.iter().map(String::as_str).collect::<Vec<_>>());

    // Given the reference: a clean import of the transcript,
    let clean_db = dir.path().join("clean.db");
    let clean = format!("sqlite:{}", clean_db.display());
    let (code, reference, err) = call(import_args(&clean));
    assert_eq!(code, 0, "{err}");
    let reference_log = records(&clean_db);
    assert!(reference.lines().count() > 100);

    // when an import of it into another store fails after a few chunks,
    let db = dir.path().join("x.db");
    let url = format!("sqlite:{}", db.display());
    let written = interrupted_import(&file, &db, 3);
    assert!(written > 10 && (written as usize) < reference_log.len(), "{written} of {}", reference_log.len());
    assert_eq!(records(&db)[..], reference_log[..written as usize], "what was written is the clean import's prefix");

    // then readers treat the session as absent,
    let (code, out, err) = cli(&["sessions", "--json", "--store", &url]);
    assert_eq!((code, out.trim()), (0, "[]"), "{err}");
    assert!(err.contains("did not finish") && err.contains(SESSION), "{err}");
    let store = SqliteStore::open(&db).unwrap();
    let id: StreamId = SESSION.parse().unwrap();
    assert!(matches!(Session::open(&store, id), Err(SessionError::Unfinished { .. })));
    drop(store);
    for args in [
        vec!["replay", "--store", &url],
        vec!["inspect", "--store", &url],
        vec!["export", "--store", &url],
        vec!["restore", "--store", &url, "--seq", "3", "--why", "x"],
        vec!["copy", "--from", &url, "--to", "mem:", "--session", SESSION],
    ] {
        let (code, _, err) = cli(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("did not finish"), "{args:?}: {err}");
    }
    let (code, out, err) = cli(&["copy", "--from", &url, "--to", "mem:"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("copied") && err.contains("not copied"), "{out}{err}");
    let (code, out, _) = cli(&["verify", "--store", &url]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("did not finish"), "{out}");
    // (a postmortem still shows what it did)
    let (code, partial, err) = cli(&["replay", "--json", "--lenient", "--store", &url]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("did not finish"), "{err}");
    assert!(reference.starts_with(&partial) && !partial.is_empty());

    // and retrying the same import resumes it: the same timeline, the same log, byte for byte.
    let (code, resumed, err) = call(import_args(&url));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("resumed"), "{err}");
    assert_eq!(resumed, reference);
    assert_eq!(records(&db), reference_log);
    let (code, out, err) = cli(&["verify", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, listed, _) = cli(&["sessions", "--json", "--store", &url]);
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed[0]["session"], Value::from(SESSION));
    // Once complete, the same import again is refused like any existing session.
    let (code, _, err) = call(import_args(&url));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already exists"), "{err}");
}

#[test]
fn an_import_with_every_message_but_no_completion_marker_is_unfinished_to_every_reader() {
    // Given an import that appended every message of its transcript and then failed to write
    // its completion marker,
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    std::fs::write(&file, transcript(40, "a")).unwrap();
    let db = dir.path().join("x.db");
    let url = format!("sqlite:{}", db.display());
    let checked = check_file(&file, FormatArg::Auto).unwrap();
    let inner = SqliteStore::open(&db).unwrap();
    let failing = Failing { inner: &inner, ok: usize::MAX, appends: AtomicUsize::new(0), marker_only: true };
    let err = import_in_chunks(&checked, &failing, options(), 16 << 10, |_| Ok(())).unwrap_err();
    assert!(err.to_string().contains("connection lost"), "{err}");
    let id: StreamId = SESSION.parse().unwrap();
    let log = inner.read(id, 1, usize::MAX).unwrap();
    assert!(!log.iter().any(|r| is_marker(&r.record)));
    // then opening it says it did not finish although no message is missing,
    match Session::open(&inner, id) {
        Err(SessionError::Unfinished { messages, announced, .. }) => {
            assert_eq!((messages, announced), (checked.facts().messages, checked.facts().messages));
        }
        other => panic!("expected Unfinished, got {:?}", other.map(|s| s.state().version())),
    }
    drop(inner);
    // `sessions` lists it aside, not as a session,
    let (code, out, err) = cli(&["sessions", "--json", "--store", &url]);
    assert_eq!((code, out.trim()), (0, "[]"), "{err}");
    assert!(err.contains("did not finish") && err.contains(SESSION), "{err}");
    // `verify` reports it,
    let (code, out, _) = cli(&["verify", "--store", &url]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("did not finish") && out.contains("no ImportCompleted"), "{out}");
    // and `copy` refuses it by name and passes over it when copying every session.
    let (code, _, err) = cli(&["copy", "--from", &url, "--to", "mem:", "--session", SESSION]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("did not finish"), "{err}");
    let (code, out, err) = cli(&["copy", "--from", &url, "--to", "mem:"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("copied") && err.contains("not copied"), "{out}{err}");
}

#[test]
fn an_unfinished_import_is_only_resumed_by_the_same_transcript_and_options() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    std::fs::write(&file, transcript(80, "a")).unwrap();
    let db = dir.path().join("x.db");
    let url = format!("sqlite:{}", db.display());
    let written = interrupted_import(&file, &db, 2);
    let budget = BUDGET.to_string();

    // Another transcript under the same id,
    let other = dir.path().join("other.jsonl");
    std::fs::write(&other, transcript(80, "b")).unwrap();
    let (code, _, err) =
        cli(&["import", other.to_str().unwrap(), "--session", SESSION, "--budget", &budget, "--store", &url]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("another transcript") && err.contains("sha256"), "{err}");
    // or other options,
    let (code, _, err) =
        cli(&["import", file.to_str().unwrap(), "--session", SESSION, "--budget", "7000", "--store", &url]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("other engine options"), "{err}");
    // are refused and change nothing.
    assert_eq!(records(&db).len() as u64, written);
}

#[test]
fn a_transcript_that_changes_during_the_import_leaves_it_unfinished() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    std::fs::write(&file, transcript(60, "a")).unwrap();
    // Validated, then edited before it is read again:
    let checked = check_file(&file, FormatArg::Auto).unwrap();
    let mut text = std::fs::read_to_string(&file).unwrap();
    text = text.replace("looks good", "looks fine");
    std::fs::write(&file, &text).unwrap();
    let db = dir.path().join("x.db");
    let store = SqliteStore::open(&db).unwrap();
    let err = import_in_chunks(&checked, &store, options(), 16 << 10, |_| Ok(())).unwrap_err();
    assert!(err.to_string().contains("changed while it was imported"), "{err}");
    let id: StreamId = SESSION.parse().unwrap();
    assert!(matches!(Session::open(&store, id), Err(SessionError::Unfinished { .. })));
}

#[test]
fn validation_reads_the_file_once_and_agrees_with_reading_it_into_memory() {
    // The streamed check keeps no message but knows what the in-memory reader knows.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    let text = transcript(40, "a");
    std::fs::write(&file, &text).unwrap();
    let streamed = check_file(&file, FormatArg::Auto).unwrap();
    let in_memory = read(text.as_bytes(), &file, FormatArg::Auto).unwrap();
    assert_eq!(streamed.facts(), in_memory.facts());
    assert_eq!(streamed.format(), in_memory.format());
    assert_eq!(streamed.facts().messages, in_memory.lines.len() as u64);
    let again: Vec<_> = streamed.messages().map(Result::unwrap).collect();
    let held: Vec<_> = in_memory.lines.iter().map(|l| l.message.clone()).collect();
    assert_eq!(again, held);
    assert_eq!(streamed.facts().calls, 41);
    assert_eq!(streamed.facts().bytes, text.len() as u64);
}

#[test]
fn a_retry_resumes_from_wherever_the_log_was_cut() {
    // With one append per batch, cuts land after a call, amid summary jobs, after an append of
    // messages: each resumes to the clean import's log.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    std::fs::write(&file, transcript(40, "a")).unwrap();
    let checked = check_file(&file, FormatArg::Auto).unwrap();
    let id: StreamId = SESSION.parse().unwrap();
    let clean_db = dir.path().join("clean.db");
    import_in_chunks(&checked, &SqliteStore::open(&clean_db).unwrap(), options(), 1, |_| Ok(())).unwrap();
    let reference = records(&clean_db);
    let mut cut_after = std::collections::BTreeSet::new();
    for ok in (1..200).step_by(7) {
        let db = dir.path().join(format!("cut{ok}.db"));
        let inner = SqliteStore::open(&db).unwrap();
        let failing = Failing { inner: &inner, ok, appends: AtomicUsize::new(0), marker_only: false };
        if import_in_chunks(&checked, &failing, options(), 1, |_| Ok(())).is_ok() {
            break;
        }
        let cut = inner.head(id).unwrap().unwrap();
        let last = &inner.read(id, cut, 1).unwrap()[0];
        cut_after.insert(ctxlog::codec::decode(id, cut, &last.record).unwrap().name());
        let resumed = import_in_chunks(&checked, &inner, options(), 1, |_| Ok(())).unwrap();
        assert_eq!(resumed.resumed_at, Some(cut));
        drop(inner);
        assert_eq!(records(&db), reference, "cut after {ok} appends (version {cut})");
    }
    for kind in ["MessageAppended", "RequestServed", "SummaryPrepared"] {
        assert!(cut_after.contains(kind), "no cut after a {kind}: {cut_after:?}");
    }
}

/// Found by fuzzing: on a 300-token budget the engine kept offering condense jobs that were
/// accepted, and `import` never returned. A condense job now takes at least two summaries.
#[test]
fn an_import_on_a_tiny_budget_returns_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let transcript = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/condense-loop.jsonl");
    let url = format!("sqlite:{}", dir.path().join("t.db").display());
    let run = |args: &[&str]| {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = ctxlog_tools::run(args.iter().copied(), &mut out, &mut err);
        assert_eq!(code, 0, "{args:?}: {}", String::from_utf8_lossy(&err));
    };
    run(&["ctxlog", "import", transcript, "--budget", "300", "--store", &url]);
    run(&["ctxlog", "verify", "--store", &url]);
}
