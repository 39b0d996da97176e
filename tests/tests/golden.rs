//! Golden logs (redb's backward-compatibility idea): a small session written by each released
//! format on each file backend is committed under `tests/golden/` (`v<format>-*`); this test
//! checks that every set keeps decoding to the timeline the engine printed live when the set was
//! written, and passes `verify`. A format change can therefore never slip in silently: it fails
//! here until a new golden set is written *next to* the old ones.
//!
//! To write the golden set of a new format (only when `codec::FORMAT_VERSION` is bumped):
//! `CTXLOG_BLESS_GOLDEN=1 cargo test -p ctxlog-tests --test golden`. Blessing refuses to
//! overwrite an existing set (a released format's logs never change, and re-blessing would
//! turn a decoding regression into a new expectation), and the timeline it writes is the
//! engine's live `import --json` output, not a replay of the stores it checks: even a blessing
//! run compares two independent products.

// Test support code: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};

use ctxlog::codec::FORMAT_VERSION;
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

fn store_path(root: &Path, format: u8, backend: &str) -> PathBuf {
    match backend {
        "sqlite" => root.join(format!("v{format}-sqlite.db")),
        other => root.join(format!("v{format}-{other}")),
    }
}

fn timeline_path(format: u8) -> PathBuf {
    golden().join(format!("v{format}-timeline.jsonl"))
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

/// Writes the golden set of this build's format: import with a budget small enough to flush,
/// truncate, remove, stub and raise guards, then restore one removed message. The timeline is
/// what `import --json` printed live (the same on every backend).
fn bless() {
    let format = FORMAT_VERSION;
    let existing: Vec<PathBuf> = BACKENDS
        .iter()
        .map(|b| store_path(&golden(), format, b))
        .chain([timeline_path(format)])
        .filter(|p| p.exists())
        .collect();
    assert!(
        existing.is_empty(),
        "the golden set of format {format} exists ({existing:?}): a released format's logs are never rewritten. \
         Bump codec::FORMAT_VERSION to add a set next to it; to redo a set that was never released, \
         delete its files first (git rm), deliberately."
    );
    let transcript = golden().join("transcript.jsonl");
    let mut live: Option<String> = None;
    for backend in BACKENDS {
        let path = store_path(&golden(), format, backend);
        let url = format!("{backend}:{}", path.display());
        let t = transcript.to_str().unwrap();
        let printed =
            run(&["ctxlog", "import", t, "--store", &url, "--session", SESSION, "--budget", "3000", "--json"]);
        match &live {
            Some(first) => assert_eq!(&printed, first, "{backend}: import printed another timeline"),
            None => live = Some(printed),
        }
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
    std::fs::write(timeline_path(format), live.unwrap()).unwrap();
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
fn golden_logs_of_every_released_format_keep_decoding_to_the_same_timeline_on_every_backend() {
    if std::env::var_os("CTXLOG_BLESS_GOLDEN").is_some() {
        bless();
    }
    for format in 1..=FORMAT_VERSION {
        check_golden_set(format);
    }
}

/// Every backend's store of the set replays to the set's timeline and passes `verify`, and the
/// set covers every event kind.
fn check_golden_set(format: u8) {
    let expected = std::fs::read_to_string(timeline_path(format))
        .unwrap_or_else(|e| panic!("format {format} has no golden set ({e}): bless one (see the module doc)"));
    assert!(expected.lines().count() > 10, "the golden timeline of format {format} has too few calls");
    let id: StreamId = SESSION.parse().unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for backend in BACKENDS {
        let tmp = tempfile::tempdir().unwrap();
        let src = store_path(&golden(), format, backend);
        let dst = tmp.path().join(src.file_name().unwrap());
        copy_out(&src, &dst);
        let store = open(backend, &dst);
        assert_eq!(
            timeline(store.as_ref()),
            expected,
            "format {format}, {backend}: the golden log no longer replays to the same timeline"
        );
        let report = verify(store.as_ref(), id).unwrap();
        assert!(report.ok(), "format {format}, {backend}: {:?}", report.problems);
        ctxlog::replay::for_each_event(store.as_ref(), id, 1, None, |_, ev| {
            kinds.insert(ev.name());
            Ok(())
        })
        .unwrap();
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
