//! Golden logs (redb's backward-compatibility idea): a small session written by today's format
//! on each file backend is committed under `tests/golden/`; this test checks that it keeps
//! decoding to the same timeline and the same state. A format change can therefore never slip
//! in silently: it fails here until a new golden set is written *next to* the old one.
//!
//! To write the golden set (only when a format version is released):
//! `CTXLOG_BLESS_GOLDEN=1 cargo test -p ctxlog-tests --test golden`.

// Test support code: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use ctxlog::replay::{replay, verify, Mode};
use ctxlog::{Store, StreamId};
use ctxlog_store_fs::FsStore;
use ctxlog_store_sled::SledStore;
use ctxlog_store_sqlite::SqliteStore;

const SESSION: &str = "00000000-0000-0000-0000-00000000601d";
const BACKENDS: [&str; 3] = ["sqlite", "fs", "sled"];

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

fn store_path(root: &Path, backend: &str) -> PathBuf {
    match backend {
        "sqlite" => root.join("v1-sqlite.db"),
        other => root.join(format!("v1-{other}")),
    }
}

fn open(backend: &str, path: &Path) -> Box<dyn Store> {
    match backend {
        "sqlite" => Box::new(SqliteStore::open(path).unwrap()),
        "fs" => Box::new(FsStore::open(path).unwrap()),
        _ => Box::new(SledStore::open(path).unwrap()),
    }
}

fn run(args: &[&str]) -> String {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = ctxlog_cli::run(args.iter().copied(), &mut out, &mut err);
    assert_eq!(code, 0, "{args:?}: {}", String::from_utf8_lossy(&err));
    String::from_utf8(out).unwrap()
}

/// Writes the golden set: import with a budget small enough to flush, truncate, remove, stub
/// and raise guards, then restore one removed message.
fn bless() {
    let transcript = golden().join("transcript.jsonl");
    for backend in BACKENDS {
        let path = store_path(&golden(), backend);
        let _ = std::fs::remove_dir_all(&path);
        let _ = std::fs::remove_file(&path);
        let url = format!("{backend}:{}", path.display());
        let t = transcript.to_str().unwrap();
        run(&["ctxlog", "import", t, "--store", &url, "--session", SESSION, "--budget", "3000"]);
        let store = open(backend, &path);
        let state = replay(store.as_ref(), SESSION.parse().unwrap(), Mode::Strict, None).unwrap().state;
        drop(store);
        let removed = state.entries().iter().position(|e| e.edit.is_some()).unwrap();
        run(&[
            "ctxlog",
            "restore",
            "--store",
            &url,
            "--session",
            SESSION,
            "--seq",
            &removed.to_string(),
            "--why",
            "golden",
        ]);
        if backend == "fs" {
            // The lock file and the temp dir are per-process artefacts, not part of the log.
            let _ = std::fs::remove_file(path.join("LOCK"));
        }
    }
    let store = open("sqlite", &store_path(&golden(), "sqlite"));
    std::fs::write(golden().join("v1-timeline.jsonl"), timeline(store.as_ref())).unwrap();
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

#[test]
fn golden_logs_of_format_1_keep_decoding_to_the_same_timeline_on_every_backend() {
    if std::env::var_os("CTXLOG_BLESS_GOLDEN").is_some() {
        bless();
    }
    let expected = std::fs::read_to_string(golden().join("v1-timeline.jsonl")).unwrap();
    assert!(expected.lines().count() > 10, "the golden timeline has too few calls");
    let id: StreamId = SESSION.parse().unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for backend in BACKENDS {
        let tmp = tempfile::tempdir().unwrap();
        let src = store_path(&golden(), backend);
        let dst = tmp.path().join(src.file_name().unwrap());
        copy_out(&src, &dst);
        let store = open(backend, &dst);
        assert_eq!(
            timeline(store.as_ref()),
            expected,
            "{backend}: the golden log no longer replays to the same timeline"
        );
        let report = verify(store.as_ref(), id).unwrap();
        assert!(report.ok(), "{backend}: {:?}", report.problems);
        ctxlog::replay::for_each_event(store.as_ref(), id, 1, None, |_, ev| {
            kinds.insert(ev.name());
            Ok(())
        })
        .unwrap();
    }
    // PostgreSQL has no files to commit: the golden session goes in through `ctxlog copy` and
    // must replay to the same timeline there too.
    if let Some(db) = ctxlog_tests::postgres::database("golden logs on postgres") {
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join("v1-sqlite.db");
        copy_out(&store_path(&golden(), "sqlite"), &copy);
        let from = format!("sqlite:{}", copy.display());
        run(&["ctxlog", "copy", "--from", &from, "--to", db.url()]);
        let store = ctxlog_store_postgres::PgStore::open_read_only(db.url()).unwrap();
        assert_eq!(timeline(&store), expected, "postgres: the golden log no longer replays to the same timeline");
        let report = verify(&store, id).unwrap();
        assert!(report.ok(), "postgres: {:?}", report.problems);
    }
    // The golden set covers every event kind of the format, so no layout goes untested.
    let all = [
        "SessionStarted",
        "MessageAppended",
        "SummaryPrepared",
        "Flushed",
        "Edited",
        "Restored",
        "RequestServed",
        "GuardRaised",
    ];
    assert_eq!(kinds.into_iter().collect::<Vec<_>>(), {
        let mut v = all.to_vec();
        v.sort_unstable();
        v
    });
}
