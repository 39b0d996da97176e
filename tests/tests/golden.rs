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
//!   summaries, retired summaries, deferred calls), written through the library by [`bless`]
//!   so a host that declines to condense is exercised too.
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

use ctxlog::config::Config;
use ctxlog::message::Role;
use ctxlog::replay::{replay, verify, Mode};
use ctxlog::session::{Prepared, Produced};
use ctxlog::wire::parse_timestamp_ms;
use ctxlog::{MemoryStore, Session, Store, StreamId, Timestamp};
use ctxlog_cli::transcript::{read, FormatArg};
use ctxlog_store_fs::FsStore;
use ctxlog_store_sled::SledStore;
use ctxlog_store_sqlite::SqliteStore;

const SESSION: &str = "00000000-0000-0000-0000-00000000601d";
const BACKENDS: [&str; 3] = ["sqlite", "fs", "sled"];
/// The newest set, the one [`bless`] writes.
const NEWEST: &str = "v2";

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

/// Writes the newest golden set: the golden transcript through a cache-aware session with a
/// 4,000-token budget and a 10% summary share, so it flushes, condenses, edits, defers and
/// raises guards. The host declines condense jobs for the first three quarters of the calls, so the
/// engine retires summaries, then condenses; at the end one edited message is restored.
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
    let text = std::fs::read(golden().join("transcript.jsonl")).unwrap();
    let transcript = read(&text[..], Path::new("transcript.jsonl"), FormatArg::Auto).unwrap();
    let config = Config { budget: 4_000, cache_aware: true, summary_share: 0.1, ..Config::default() };
    let id: StreamId = SESSION.parse().unwrap();
    let mem = MemoryStore::new();
    let stamp = |i: usize| {
        transcript.lines.get(i).and_then(|l| l.message.meta.timestamp.as_ref()).map(|t| parse_timestamp_ms(t).unwrap())
    };
    let start = stamp(0).unwrap_or(ctxlog_cli::import::DEFAULT_START_MS);
    let mut session = Session::create(&mem, id, transcript.format, config, Timestamp::from_millis(start)).unwrap();
    let calls = transcript.lines.iter().filter(|l| l.message.role == Role::Assistant).count();
    let (mut clock, mut call, mut pending) = (start, 0, Vec::new());
    let (mut live, mut records) = (ctxlog::replay::Timeline::new(), String::new());
    for (i, line) in transcript.lines.iter().enumerate() {
        if line.message.role == Role::Assistant {
            session.append(std::mem::take(&mut pending)).unwrap();
            clock = stamp(i).unwrap_or(clock + 30_000).max(clock);
            let plan = session.plan(Timestamp::from_millis(clock)).unwrap();
            let committed = session.commit(plan, Timestamp::from_millis(clock), None).unwrap();
            let first = committed.version + 1 - committed.events.len() as u64;
            for (i, ev) in committed.events.iter().enumerate() {
                if let Some(rec) = live.feed(first + i as u64, ev, session.state()) {
                    records += &(serde_json::to_string(&rec).unwrap() + "\n");
                }
            }
            call += 1;
            while let Some(job) = session.summary_job() {
                let text = match job.is_condense() {
                    true if call < calls * 3 / 4 => break,
                    true => ctxlog::summary::condense(session.state(), &job),
                    false => ctxlog::summary::extractive(session.state(), &job),
                };
                if let Prepared::Discarded(why) = session.prepare(&job, text, Produced::extractive()).unwrap() {
                    panic!("{why}");
                }
            }
        }
        pending.push(line.message.clone());
    }
    session.append(pending).unwrap();
    let edited = session.state().entries().iter().position(|e| e.edit.is_some()).expect("nothing was edited");
    session.restore(edited as u64, "golden", "golden").unwrap();
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

fn run(args: &[&str]) -> String {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = ctxlog_cli::run(args.iter().copied(), &mut out, &mut err);
    assert_eq!(code, 0, "{args:?}: {}", String::from_utf8_lossy(&err));
    String::from_utf8(out).unwrap()
}

fn timeline(store: &dyn Store) -> String {
    let r = replay(store, SESSION.parse().unwrap(), Mode::Strict, None).unwrap();
    r.timeline.iter().map(|c| serde_json::to_string(c).unwrap() + "\n").collect()
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
    if std::env::var_os("CTXLOG_BLESS_GOLDEN").is_some() {
        bless();
    }
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
