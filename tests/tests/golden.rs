//! Golden logs (redb's backward-compatibility idea): small sessions written by each released
//! layout set on each file backend are committed under `tests/golden/`; this test checks that
//! they keep decoding to the same timeline and the same state. A format change can therefore
//! never slip in silently: it fails here until a new golden set is written *next to* the old
//! ones, which are never rewritten.
//!
//! * `v1-*`: the first release (record kinds 1–8), written by `ctxlog import`. Its expected
//!   timeline gained the timeline record's later fields (`summary_tokens`, `deferred`, the
//!   flush's `condensed`); every field it had before is unchanged.
//! * `v2-*`: kinds 2, 5, 6, 8–13 (config with the summary share and cache knobs, condensed
//!   summaries, retired summaries, deferred calls), written through the library by the
//!   `bless` of its day (git history) so a host that declines to condense is exercised too.
//! * `v3-*`: an import (kinds 14 and 15: `SessionStarted` with the transcript's facts, and
//!   `ImportCompleted` last) with v2's knobs, written by `ctxlog_tools::import` through the
//!   `bless` of its day.
//! * `v4-*`: the same import with the usage floor (kind 18: `SessionStarted` with
//!   `usage_floor_ratio` and the import's facts; kind 17: `RequestServed` with the provider's
//!   usage parts and `anchored`), written by `ctxlog_tools::import` through the `bless` of its day.
//! * `v5-*`: a session whose summaries a model wrote (kind 20: `RequestServed` with the request
//!   record; kind 21: `SummaryPrepared` with the fork's prefix call, usage and latency; kind 22:
//!   `SummaryFailed`; the tools as a blob), written through the library by [`bless`] from
//!   [`ctxlog_tests::summaries`].
//!
//! * `v6-*`: an OpenAI Responses session (the format `OpenAiResponses` in kind 18; items as
//!   messages, reasoning and compaction items verbatim; several `AnswerReceived` per call; a
//!   `GuardRaised` of kind `ProviderHeldHistory`), written through the library by [`bless`]
//!   from [`ctxlog_tests::responses`].
//! * `v6-gemini-*`: a Gemini session (the format `Gemini`, variant 3, in kind 18; contents as
//!   messages with `functionCall`/`functionResponse` pairs keyed by position, a
//!   `thoughtSignature`, a screenshot as a blob), written through the library by
//!   [`bless_gemini`] from [`ctxlog_tests::gemini`]: the v6 layout set, one new value in it
//!   (so it is not a new set; named apart so a later layout set can still be `v7`).
//!
//! To write the newest golden set (only when a layout set is released):
//! `CTXLOG_BLESS_GOLDEN=1 cargo test -p ctxlog-tests --test golden`. Blessing refuses to
//! overwrite an existing set (a released set never changes, and re-blessing would turn a
//! decoding regression into a new expectation), and the timeline it writes is the one the
//! engine produced live, not a replay of the stores it then checks: even a blessing run
//! compares two independent products.

// Test support code: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use ctxlog::replay::{replay, verify, Mode};
use ctxlog::{MemoryStore, Store, StreamId};
use ctxlog_store_fs::FsStore;
use ctxlog_store_sled::SledStore;
use ctxlog_store_sqlite::SqliteStore;

const SESSION: &str = "00000000-0000-0000-0000-00000000601d";
const BACKENDS: [&str; 3] = ["sqlite", "fs", "sled"];
/// The newest set, the one [`bless`] writes.
const NEWEST: &str = "v6";

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

fn store_path(root: &Path, set: &str, backend: &str) -> PathBuf {
    match backend {
        "sqlite" => root.join(format!("{set}-sqlite.db")),
        other => root.join(format!("{set}-{other}")),
    }
}

fn open(backend: &str, path: &Path) -> Box<dyn Store> {
    match backend {
        "sqlite" => Box::new(SqliteStore::open(path).unwrap()),
        "fs" => Box::new(FsStore::open(path).unwrap()),
        _ => Box::new(SledStore::open(path).unwrap()),
    }
}

/// Writes the newest golden set: the Responses session of [`ctxlog_tests::responses::run`],
/// 14 calls, then a `ProviderHeldHistory` guard.
fn bless() {
    let existing: Vec<PathBuf> = BACKENDS
        .iter()
        .map(|b| store_path(&golden(), NEWEST, b))
        .chain([golden().join(format!("{NEWEST}-timeline.jsonl"))])
        .filter(|p| p.exists())
        .collect();
    assert!(
        existing.is_empty(),
        "the golden set {NEWEST} exists ({existing:?}): a released set is never rewritten. Add a new \
         set next to it (bump NEWEST); to redo a set that was never released, delete its files first \
         (git rm), deliberately."
    );
    let id: StreamId = SESSION.parse().unwrap();
    let mem = MemoryStore::new();
    let mut session = ctxlog_tests::responses::start(&mem, id);
    ctxlog_tests::responses::run(&mut session, 14);
    session
        .raise_guard(
            ctxlog::event::GuardKind::ProviderHeldHistory,
            "the provider holds this chain's history".into(),
            "previous_response_id",
        )
        .unwrap();
    let records: String = replay(&mem, id, Mode::Strict, None).unwrap().timeline.iter().map(golden_line).collect();
    for backend in BACKENDS {
        let path = store_path(&golden(), NEWEST, backend);
        let store = open(backend, &path);
        ctxlog::transfer::copy_session(&mem, store.as_ref(), id).unwrap();
        drop(store);
        if backend == "fs" {
            // The lock file is a per-process artefact, not part of the log.
            let _ = std::fs::remove_file(path.join("LOCK"));
        }
    }
    std::fs::write(golden().join(format!("{NEWEST}-timeline.jsonl")), records).unwrap();
}

/// The Gemini set.
const GEMINI: &str = "v6-gemini";

/// Writes the Gemini golden set (refusing to overwrite it): 16 calls of
/// [`ctxlog_tests::gemini::run`].
fn bless_gemini() {
    let timeline_file = golden().join(format!("{GEMINI}-timeline.jsonl"));
    let exists = BACKENDS.iter().any(|b| store_path(&golden(), GEMINI, b).exists()) || timeline_file.exists();
    assert!(!exists, "the golden set {GEMINI} exists: a released set is never rewritten");
    let id: StreamId = SESSION.parse().unwrap();
    let mem = MemoryStore::new();
    let mut session = ctxlog_tests::gemini::start(&mem, id);
    ctxlog_tests::gemini::run(&mut session, 16);
    let records: String = replay(&mem, id, Mode::Strict, None).unwrap().timeline.iter().map(golden_line).collect();
    for backend in BACKENDS {
        let path = store_path(&golden(), GEMINI, backend);
        let store = open(backend, &path);
        ctxlog::transfer::copy_session(&mem, store.as_ref(), id).unwrap();
        drop(store);
        if backend == "fs" {
            let _ = std::fs::remove_file(path.join("LOCK"));
        }
    }
    std::fs::write(timeline_file, records).unwrap();
}

fn run(args: &[&str]) -> String {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = ctxlog_tools::run(args.iter().copied(), &mut out, &mut err);
    assert_eq!(code, 0, "{args:?}: {}", String::from_utf8_lossy(&err));
    String::from_utf8(out).unwrap()
}

fn timeline(store: &dyn Store) -> String {
    let r = replay(store, SESSION.parse().unwrap(), Mode::Strict, None).unwrap();
    r.timeline.iter().map(golden_line).collect()
}

/// A timeline record as the golden timelines hold it: without the coverage fields (issue 21),
/// which they predate (derived from the view, not decoded; sane on every set).
fn golden_line(c: &ctxlog::replay::CallRecord) -> String {
    assert!(c.represented <= c.hidden);
    let line = serde_json::to_string(c).unwrap();
    let cut = line.rfind(",\"hidden\":").unwrap();
    format!("{}}}\n", &line[..cut])
}

/// Copies a golden store into a temp dir: opening a store may write (locks, WAL, recovery),
/// and the committed files must stay byte-identical.
fn copy_out(src: &Path, dst: &Path) {
    if src.is_dir() {
        std::fs::create_dir_all(dst).unwrap();
        for entry in std::fs::read_dir(src).unwrap() {
            let entry = entry.unwrap();
            copy_out(&entry.path(), &dst.join(entry.file_name()));
        }
    } else {
        std::fs::copy(src, dst).unwrap();
    }
}

/// Every golden set decodes, on every backend, to its recorded timeline and passes `verify`;
/// returns the event names it holds.
fn check_set(set: &str) -> std::collections::BTreeSet<&'static str> {
    let expected = std::fs::read_to_string(golden().join(format!("{set}-timeline.jsonl"))).unwrap();
    assert!(expected.lines().count() > 10, "{set}: the golden timeline has too few calls");
    let id: StreamId = SESSION.parse().unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for backend in BACKENDS {
        let tmp = tempfile::tempdir().unwrap();
        let src = store_path(&golden(), set, backend);
        let dst = tmp.path().join(src.file_name().unwrap());
        copy_out(&src, &dst);
        let store = open(backend, &dst);
        assert_eq!(
            timeline(store.as_ref()),
            expected,
            "{set} {backend}: the golden log no longer replays to the same timeline"
        );
        let report = verify(store.as_ref(), id).unwrap();
        assert!(report.ok(), "{set} {backend}: {:?}", report.problems);
        ctxlog::replay::for_each_event(store.as_ref(), id, 1, None, |_, ev| {
            kinds.insert(ev.name());
            Ok(())
        })
        .unwrap();
    }
    // PostgreSQL has no files to commit: the golden session goes in through `ctxlog copy` and
    // must replay to the same timeline there too.
    if let Some(db) = ctxlog_tests::postgres::database("golden logs on postgres") {
        let (_dir, copy) = copy_to_temp(set);
        let from = format!("sqlite:{}", copy.display());
        run(&["ctxlog", "copy", "--from", &from, "--to", db.url()]);
        let store = ctxlog_store_postgres::PgStore::open_read_only(db.url()).unwrap();
        assert_eq!(timeline(&store), expected, "{set} postgres: the golden log no longer replays to the same timeline");
        let report = verify(&store, id).unwrap();
        assert!(report.ok(), "{set} postgres: {:?}", report.problems);
    }
    kinds
}

fn sorted(names: &[&'static str]) -> Vec<&'static str> {
    let mut v = names.to_vec();
    v.sort_unstable();
    v
}

const FIRST_RELEASE: [&str; 8] = [
    "SessionStarted",
    "MessageAppended",
    "SummaryPrepared",
    "Flushed",
    "Edited",
    "Restored",
    "RequestServed",
    "GuardRaised",
];

#[test]
fn golden_logs_of_format_1_keep_decoding_to_the_same_timeline_on_every_backend() {
    // The first release's set covers every event kind it had, so no layout goes untested.
    assert_eq!(check_set("v1").into_iter().collect::<Vec<_>>(), sorted(&FIRST_RELEASE));
}

#[test]
fn golden_logs_of_the_second_layout_set_keep_decoding_on_every_backend() {
    let mut all = FIRST_RELEASE.to_vec();
    all.push("SummaryRetired");
    assert_eq!(check_set("v2").into_iter().collect::<Vec<_>>(), sorted(&all));
    // The set holds every record kind written today: condensed summaries, condensing flushes,
    // deferred calls, retired summaries (checked through the records, not the fold).
    let (_dir, path) = copy_to_temp("v2");
    let store = open("sqlite", &path);
    let mut condensed = (false, false, false);
    ctxlog::replay::for_each_event(store.as_ref(), SESSION.parse().unwrap(), 1, None, |_, ev| {
        match &ev {
            ctxlog::Event::SummaryPrepared(s) if s.is_condensed() => condensed.0 = true,
            ctxlog::Event::Flushed(f) if !f.condensed.is_empty() => condensed.1 = true,
            ctxlog::Event::RequestServed(r) if r.deferred.is_some() => condensed.2 = true,
            _ => {}
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(condensed, (true, true, true), "(condensed summary, condensing flush, deferred call)");
}

fn copy_to_temp(set: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = store_path(&golden(), set, "sqlite");
    let dst = dir.path().join(src.file_name().unwrap());
    copy_out(&src, &dst);
    (dir, dst)
}

#[test]
fn golden_logs_of_an_import_keep_decoding_on_every_backend() {
    let mut all = FIRST_RELEASE.to_vec();
    all.push("ImportCompleted");
    all.retain(|k| *k != "Restored");
    assert_eq!(check_set("v3").into_iter().collect::<Vec<_>>(), sorted(&all));
    // Kind 14 is the only layout that decodes to a `SessionStarted` with import facts, and the
    // import is complete: `ImportCompleted` is its last record and reports every message.
    let (_dir, path) = copy_to_temp("v3");
    let store = open("sqlite", &path);
    let id: StreamId = SESSION.parse().unwrap();
    let (mut first, mut last) = (None, None);
    ctxlog::replay::for_each_event(store.as_ref(), id, 1, None, |v, ev| {
        if v == 1 {
            first = Some(ev.clone());
        }
        last = Some(ev);
        Ok(())
    })
    .unwrap();
    let Some(ctxlog::Event::SessionStarted(started)) = first else { panic!("v3 does not start a session") };
    let facts = started.import.expect("v3's SessionStarted carries no import facts (kind 9, not 14)");
    let transcript = std::fs::read(golden().join("transcript.jsonl")).unwrap();
    assert_eq!(facts.transcript_bytes, transcript.len() as u64);
    let Some(ctxlog::Event::ImportCompleted(done)) = last else { panic!("v3 does not end with ImportCompleted") };
    assert_eq!(done.messages, facts.messages);
    let r = replay(store.as_ref(), id, Mode::Strict, None).unwrap();
    assert_eq!(r.state.message_count(), facts.messages);
    assert!(ctxlog::Session::open(store.as_ref(), id).is_ok(), "a completed import opens");
}

/// The record kinds of the golden session in `set` (from the sqlite store), in log order.
fn record_kinds(set: &str) -> Vec<u8> {
    let (_dir, path) = copy_to_temp(set);
    let store = open("sqlite", &path);
    let id: StreamId = SESSION.parse().unwrap();
    let mut kinds = Vec::new();
    loop {
        let batch = store.read(id, kinds.len() as u64 + 1, 1024).unwrap();
        if batch.is_empty() {
            return kinds;
        }
        kinds.extend(batch.iter().map(|r| r.record.body()[1]));
    }
}

#[test]
fn golden_logs_of_an_import_with_usage_keep_decoding_on_every_backend() {
    let mut all = FIRST_RELEASE.to_vec();
    all.push("ImportCompleted");
    all.retain(|k| *k != "Restored");
    assert_eq!(check_set("v4").into_iter().collect::<Vec<_>>(), sorted(&all));
    // The set pins the layouts of its day: it starts with kind 18 and serves its calls in kind
    // 17 (frozen since kind 20), and holds no kind frozen before it.
    use ctxlog::codec::kind;
    let kinds = record_kinds("v4");
    assert_eq!(kinds.first(), Some(&kind::SESSION_STARTED_V4));
    assert_eq!(kinds.last(), Some(&kind::IMPORT_COMPLETED));
    assert!(kinds.contains(&kind::REQUEST_SERVED_V3));
    let frozen = [
        kind::SESSION_STARTED_V1,
        kind::SUMMARY_PREPARED_V1,
        kind::FLUSHED_V1,
        kind::REQUEST_SERVED_V1,
        kind::SESSION_STARTED_V2,
        kind::REQUEST_SERVED_V2,
        kind::SESSION_STARTED_V2_IMPORT,
        kind::SESSION_STARTED_V3,
    ];
    assert!(!kinds.iter().any(|k| frozen.contains(k)), "{kinds:?}");
    // What only kinds 17 and 18 hold decodes: the usage floor and the import's facts, the
    // provider's usage parts and the anchoring decision.
    let (_dir, path) = copy_to_temp("v4");
    let store = open("sqlite", &path);
    let (mut started, mut with_usage, mut anchored) = (None, 0, 0);
    ctxlog::replay::for_each_event(store.as_ref(), SESSION.parse().unwrap(), 1, None, |_, ev| {
        match ev {
            ctxlog::Event::SessionStarted(s) => started = Some(s),
            ctxlog::Event::RequestServed(r) => {
                with_usage += usize::from(r.usage.is_some_and(|u| Some(u.prompt_total()) == r.reported_tokens));
                anchored += usize::from(r.anchored);
            }
            _ => {}
        }
        Ok(())
    })
    .unwrap();
    let started = started.expect("v4 starts no session");
    assert_eq!(started.config.usage_floor_ratio, 0.25);
    assert!(started.import.is_some(), "v4's SessionStarted carries no import facts");
    assert!(with_usage > 10 && anchored > 0, "{with_usage} calls with usage parts, {anchored} anchored");
}

#[test]
fn golden_logs_of_model_written_summaries_keep_decoding_on_every_backend() {
    let all = ["SessionStarted", "MessageAppended", "RequestServed", "SummaryPrepared", "SummaryFailed", "Flushed"];
    let found = check_set("v5");
    for k in &all {
        assert!(found.contains(k), "v5 lacks {k}: {found:?}");
    }
    use ctxlog::codec::kind;
    let kinds = record_kinds("v5");
    // Kind 20 is frozen since kind 30 (the placement) replaced it.
    for k in [kind::REQUEST_SERVED_V4, kind::SUMMARY_PREPARED, kind::SUMMARY_FAILED] {
        assert!(kinds.contains(&k), "kind {k} not in v5: {kinds:?}");
    }
    assert!(!kinds.contains(&kind::REQUEST_SERVED_V3) && !kinds.contains(&kind::SUMMARY_PREPARED_V2));
    // What only kinds 20–22 hold decodes: the request record (tools as a blob that the copy
    // carried), a fork's prefix call and usage, a failed attempt's reason.
    let (_dir, path) = copy_to_temp("v5");
    let store = open("sqlite", &path);
    let (mut recorded, mut forks, mut failed) = (0, 0, 0);
    ctxlog::replay::for_each_event(store.as_ref(), SESSION.parse().unwrap(), 1, None, |_, ev| {
        match ev {
            ctxlog::Event::RequestServed(r) => {
                if let Some(ctxlog::event::ToolsRecord::Blob { id, .. }) = r.request.map(|q| q.tools) {
                    assert!(store.get_blob(&id).unwrap().is_some(), "the tools blob is in the set");
                    recorded += 1;
                }
            }
            ctxlog::Event::SummaryPrepared(p) if p.mode_used == ctxlog::event::SummaryMode::Fork => {
                assert!(p.prefix_call.is_some() && p.usage.is_some_and(|u| u.cache_read > 0));
                forks += 1;
            }
            ctxlog::Event::SummaryFailed(f) => {
                assert_eq!(f.reason, ctxlog::event::SummaryFailure::Timeout);
                failed += 1;
            }
            _ => {}
        }
        Ok(())
    })
    .unwrap();
    assert!(recorded >= 10 && forks >= 1 && failed == 1, "{recorded} recorded, {forks} forks, {failed} failed");
}

#[test]
fn golden_logs_of_a_responses_session_keep_decoding_on_every_backend() {
    if std::env::var_os("CTXLOG_BLESS_GOLDEN").is_some() {
        bless();
    }
    let kinds = check_set("v6");
    for k in ["SessionStarted", "MessageAppended", "RequestServed", "AnswerReceived", "GuardRaised"] {
        assert!(kinds.contains(k), "v6 holds no {k}");
    }
    let (_dir, path) = copy_to_temp("v6");
    let store = open("sqlite", &path);
    let (mut format, mut compaction, mut held, mut answers) = (None, false, false, Vec::new());
    ctxlog::replay::for_each_event(store.as_ref(), SESSION.parse().unwrap(), 1, None, |_, ev| {
        match &ev {
            ctxlog::Event::SessionStarted(s) => format = Some(s.format),
            ctxlog::Event::MessageAppended(m) => compaction |= m.message.provider_compaction() && m.message.is_pinned(),
            ctxlog::Event::GuardRaised(g) => held |= g.kind == ctxlog::event::GuardKind::ProviderHeldHistory,
            ctxlog::Event::AnswerReceived(a) => answers.push(a.call),
            _ => {}
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(format, Some(ctxlog::WireFormat::OpenAiResponses));
    assert!(compaction && held, "(pinned compaction item, provider-held guard)");
    assert!(answers.windows(2).any(|w| w[0] == w[1]), "no call answered with several items");
}

#[test]
fn golden_logs_of_a_gemini_session_keep_decoding_on_every_backend() {
    if std::env::var_os("CTXLOG_BLESS_GEMINI").is_some() {
        bless_gemini();
    }
    let kinds = check_set(GEMINI);
    for k in ["SessionStarted", "MessageAppended", "RequestServed", "AnswerReceived", "Flushed"] {
        assert!(kinds.contains(k), "{GEMINI} holds no {k}");
    }
    let (_dir, path) = copy_to_temp(GEMINI);
    let store = open("sqlite", &path);
    let (mut format, mut pairs, mut signed) = (None, 0, false);
    ctxlog::replay::for_each_event(store.as_ref(), SESSION.parse().unwrap(), 1, None, |_, ev| {
        if let ctxlog::Event::SessionStarted(s) = &ev {
            format = Some(s.format);
        }
        if let ctxlog::Event::MessageAppended(m) = &ev {
            pairs += m.message.result_ids().filter(|id| id.starts_with('~')).count();
            let (json, _) = ctxlog::internal::wire::to_json_in(
                ctxlog::WireFormat::Gemini,
                &m.message,
                ctxlog::internal::wire::RenderOpts { meta: false, media: ctxlog::internal::wire::Media::Refs },
            );
            signed |= json.contains(r#""thoughtSignature":"c2lnbmF0dXJl000+/==""#);
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(format, Some(ctxlog::WireFormat::Gemini));
    assert!(pairs >= 5 && signed, "({pairs} results paired by position, a signature kept)");
    // `rerun` of the golden session is identical to its log.
    let from = path.display().to_string();
    let out = run(&["ctxlog", "rerun", "--store", &format!("sqlite:{from}"), "--session", SESSION, "--json"]);
    let diff: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(diff["identical"], true, "{out}");
}
