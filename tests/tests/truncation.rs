//! A store file cut short, as a copy stopped early or a truncating tool leaves it: no cut may
//! make an acknowledged call disappear while `ctxlog verify` exits 0.
//!
//! For each durable backend, the two fixtures of `bitflips.rs` (a session written call by call
//! through the engine, files taken while the writer held the store, and one written by
//! `ctxlog import`). Each cut is tried on a fresh copy, then `verify`, `sessions`, `replay` and
//! `export` run on it:
//!
//! * **detected**: `verify` exits 4 naming the stream or a file of the store;
//! * **refused**: `verify` exits 3 naming the store;
//! * **identical**: `verify` exits 0 and `export` and `replay --json` give the intact store's
//!   bytes (the cut took nothing anyone reads);
//! * **silent loss**: `verify` exits 0 and the content changed or cannot be read: a failure;
//! * any file changed by those read-only commands is a failure.
//!
//! fs logs get the full table the issue asks for: every frame boundary, inside every frame of
//! the last three batches (after 1 byte, after the 8-byte header, the middle, all but the last
//! byte), and cuts of 1 byte, 7 bytes and half the file; each must be detected with every
//! missing acknowledged version named (`versions A..=B`), `sessions`, `replay` and `export`
//! must exit 4 too, and a writer's open must refuse. Other files (and every file of SQLite and
//! sled) get cuts of 1 byte, 7 bytes, half, all but 1 byte, and every page or frame boundary of
//! the last 12 (SQLite pages and `-wal` frames, 64-byte slots of sled's `ctxlog.heads`).
//! `--nocapture` prints the figures table of `RELIABILITY.md`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Mutex;

use ctxlog::store::{Snapshot, Store};
use ctxlog_tests::scenario::cli;
use ctxlog_tests::store_files::{self as sf, Backend, Fixture};

static PRINT: Mutex<()> = Mutex::new(());

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Detected,
    Refused,
    Identical,
    SilentLoss,
    Other,
}

const OUTCOMES: [Outcome; 5] =
    [Outcome::Detected, Outcome::Refused, Outcome::Identical, Outcome::SilentLoss, Outcome::Other];

fn run_cli(args: &[&str]) -> (i32, String, String) {
    match std::panic::catch_unwind(AssertUnwindSafe(|| cli(args))) {
        Ok(r) => r,
        Err(_) => (-1, String::new(), format!("panicked: {args:?}")),
    }
}

fn cut_file(path: &Path, len: u64) {
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len).unwrap();
}

/// The frames of an fs stream log: (offset, length) each.
fn frames(bytes: &[u8]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        out.push((at as u64, (len + 12) as u64));
        at += len + 12;
    }
    assert_eq!(at, bytes.len(), "the fixture's log is whole");
    out
}

/// Where an fs stream log is cut: every frame boundary, inside each frame of the last three
/// batches, 1 byte, 7 bytes, half the file.
fn fs_log_cuts(bytes: &[u8]) -> Vec<(u64, String)> {
    let size = bytes.len() as u64;
    let fr = frames(bytes);
    let mut cuts: BTreeMap<u64, String> = BTreeMap::new();
    for (i, (off, _)) in fr.iter().enumerate() {
        cuts.entry(*off).or_insert(format!("boundary before frame {i}"));
    }
    for (i, (off, len)) in fr.iter().enumerate().skip(fr.len().saturating_sub(3)) {
        for (what, at) in [("1 byte", 1), ("its header", 8), ("half", len / 2), ("all but 1 byte", len - 1)] {
            cuts.entry(off + at).or_insert(format!("inside frame {i} after {what}"));
        }
    }
    for (what, at) in [("1 byte", size - 1), ("7 bytes", size - 7), ("half the file", size / 2)] {
        cuts.entry(at).or_insert(format!("{what} cut"));
    }
    cuts.into_iter().collect()
}

/// Cuts of any other file: 1 byte, 7 bytes, half, all but 1 byte, and the last 12 boundaries
/// of its unit (page, frame, slot).
fn other_cuts(backend: Backend, rel: &Path, size: u64) -> Vec<(u64, String)> {
    let name = rel.file_name().unwrap().to_str().unwrap();
    let (first, unit) = match (backend, name) {
        (Backend::Sqlite, n) if n.ends_with("-wal") => (32, 24 + 4096),
        (Backend::Sqlite, n) if n.ends_with("-shm") => (0, 0),
        (Backend::Sqlite, _) => (0, 4096),
        (Backend::Sled, "ctxlog.heads") => (0, 64),
        _ => (0, 0),
    };
    let mut cuts: BTreeMap<u64, String> = BTreeMap::new();
    if unit > 0 && size > first {
        let n = (size - first) / unit;
        for k in n.saturating_sub(12)..n {
            cuts.insert(first + k * unit, format!("boundary {k}"));
        }
    }
    for (what, at) in [("1 byte", 1), ("7 bytes", 7), ("half", size - size / 2), ("all but 1 byte", size - 1)] {
        if at <= size {
            cuts.entry(size - at).or_insert(format!("{what} cut"));
        }
    }
    cuts.remove(&size);
    cuts.into_iter().collect()
}

struct Tried {
    outcome: Outcome,
    line: String,
    failure: Option<String>,
}

/// One cut of `rel` to `len` bytes on a fresh copy of the fixture.
fn try_cut(fx: &Fixture, rel: &Path, len: u64, what: &str, fs_log: bool) -> Tried {
    let scratch = tempfile::tempdir().unwrap();
    sf::copy_dir(fx.root.path(), scratch.path());
    cut_file(&scratch.path().join(rel), len);
    let before = sf::checksums(scratch.path());
    let url = fx.url(scratch.path());
    let id = fx.session.to_string();
    let at = format!("{} cut to {len} bytes ({what})", rel.display());
    let root = scratch.path().display().to_string();
    let (code, out, err) = run_cli(&["verify", "--store", &url]);
    let text = format!("{out}{err}");
    let mut failure = None;
    let outcome = match code {
        4 if text.contains(&id) || text.contains(&root) => Outcome::Detected,
        3 if text.contains(&root) => Outcome::Refused,
        0 => {
            let (ec, e, _) = run_cli(&["export", "--store", &url, "--session", &id]);
            let (tc, t, _) = run_cli(&["replay", "--json", "--store", &url, "--session", &id]);
            if ec == 0 && tc == 0 && e == fx.export && t == fx.timeline {
                Outcome::Identical
            } else {
                failure = Some(format!("verify passed; export exit {ec}, replay exit {tc}"));
                Outcome::SilentLoss
            }
        }
        _ => {
            failure = Some(format!("verify exit {code}: {text}"));
            Outcome::Other
        }
    };
    if fs_log {
        failure = failure.or_else(|| fs_log_checks(fx, scratch.path(), &url, &text, code));
    }
    let changed = sf::changes(&before, &sf::checksums(scratch.path()));
    if !changed.is_empty() {
        failure = Some(format!("read-only commands changed {changed:?}"));
    }
    // The fs writer's open refuses the same cut, and changes nothing either.
    if fs_log && failure.is_none() {
        match ctxlog_store_fs::FsStore::open(fx.backend.path(scratch.path())) {
            Err(ctxlog::StoreError::Corrupt { .. }) => {}
            other => failure = Some(format!("a writer's open gave {:?}", other.map(|_| "a store"))),
        }
        let changed = sf::changes(&before, &sf::checksums(scratch.path()));
        if !changed.is_empty() {
            failure = Some(format!("the refused writer's open changed {changed:?}"));
        }
    }
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_owned();
    Tried { outcome, line: format!("{at}: {first}"), failure: failure.map(|f| format!("{at}: {f}")) }
}

/// A cut fs log: every missing acknowledged version named, and the other read-only commands
/// fail with exit 4 too.
fn fs_log_checks(fx: &Fixture, root: &Path, url: &str, verify: &str, code: i32) -> Option<String> {
    if code != 4 {
        return Some(format!("verify exit {code}"));
    }
    let log = fx.backend.path(root).join("streams").join(format!("{}.log", fx.session));
    let head = ctxlog_store_fs::FsStore::open_read_only(fx.backend.path(root))
        .unwrap()
        .damaged()
        .first()
        .map(|d| d.version - 1)
        .unwrap_or(fx.events);
    let named = format!("versions {}..={}", head + 1, fx.events);
    if !verify.contains(&named) || !verify.contains(&log.display().to_string()) {
        return Some(format!("verify does not name {named} and the log: {verify}"));
    }
    let id = fx.session.to_string();
    for args in [
        vec!["sessions", "--store", url],
        vec!["replay", "--store", url, "--session", &id],
        vec!["export", "--store", url, "--session", &id],
    ] {
        let (c, o, e) = run_cli(&args);
        if c != 4 || !format!("{o}{e}").contains(&named) {
            return Some(format!("{} exit {c}: {o}{e}", args[0]));
        }
    }
    None
}

#[derive(Default)]
struct Tally {
    counts: BTreeMap<(String, String), BTreeMap<Outcome, u64>>,
    failures: Vec<String>,
}

impl Tally {
    fn add(&mut self, kind: &str, file: String, t: Tried) {
        *self.counts.entry((kind.to_owned(), file)).or_default().entry(t.outcome).or_default() += 1;
        if let Some(f) = t.failure {
            self.failures.push(format!("[{kind}] {f}"));
        } else if !matches!(t.outcome, Outcome::Detected | Outcome::Refused | Outcome::Identical) {
            self.failures.push(format!("[{kind}] {:?} {}", t.outcome, t.line));
        }
    }

    fn print(&self, backend: Backend) {
        let _guard = PRINT.lock().unwrap_or_else(|e| e.into_inner());
        println!("\n| backend | session | file | cuts | detected | refused | identical | silent loss | other |");
        println!("|---|---|---|---:|---:|---:|---:|---:|---:|");
        for ((kind, file), m) in &self.counts {
            let n: u64 = m.values().sum();
            let cells: Vec<String> = OUTCOMES.iter().map(|o| m.get(o).copied().unwrap_or(0).to_string()).collect();
            println!("| {} | {kind} | {file} | {n} | {} |", backend.name(), cells.join(" | "));
        }
        for f in self.failures.iter().take(40) {
            println!("    {f}");
        }
    }
}

fn truncations(backend: Backend) {
    let fixtures = [sf::call_by_call(backend, 24), sf::imported(backend, 24)];
    let mut tally = Tally::default();
    for fx in &fixtures {
        for (rel, size) in sf::files(fx.root.path()) {
            let kind = backend.file_kind(&rel);
            let fs_log = backend == Backend::Fs && rel.extension().is_some_and(|e| e == "log");
            let cuts = match fs_log {
                true => fs_log_cuts(&std::fs::read(fx.root.path().join(&rel)).unwrap()),
                false => other_cuts(backend, &rel, size),
            };
            for (len, what) in cuts {
                let t = try_cut(fx, &rel, len, &what, fs_log);
                tally.add(fx.kind, kind.clone(), t);
            }
        }
    }
    tally.print(backend);
    assert!(tally.failures.is_empty(), "{} cuts failed:\n{}", tally.failures.len(), tally.failures.join("\n"));
}

#[test]
fn fs_cuts_are_detected_never_repaired_away() {
    truncations(Backend::Fs);
}

#[test]
fn sqlite_cuts_are_detected_or_harmless() {
    truncations(Backend::Sqlite);
}

#[test]
fn sled_cuts_are_detected_or_harmless() {
    truncations(Backend::Sled);
}

/// `sessions` on a store where one session's log is cut lists the other and reports the cut one.
#[test]
fn sessions_lists_the_intact_sessions_and_reports_the_damaged_one() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("t.jsonl");
    std::fs::write(&file, sf::transcript(6)).unwrap();
    let url = format!("fs:{}", root.path().join("store").display());
    let (a, b) = ("00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b");
    for id in [a, b] {
        let (code, _, err) = cli(&["import", file.to_str().unwrap(), "--store", &url, "--session", id]);
        assert_eq!(code, 0, "{err}");
    }
    let log = root.path().join("store/streams").join(format!("{a}.log"));
    let len = std::fs::metadata(&log).unwrap().len();
    cut_file(&log, len - 7);
    let (code, out, err) = cli(&["sessions", "--json", "--store", &url]);
    assert_eq!(code, 4, "{out}{err}");
    let listed: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{out}");
    assert_eq!(listed[0]["session"], b);
    assert!(err.contains(a) && err.contains("missing"), "{err}");
}

/// A writing command refuses the cut store (exit 4, nothing changed); with `--accept-loss` it
/// goes on, and `verify` reports the recorded loss until it is accepted in turn.
#[test]
fn a_writing_command_refuses_a_cut_store_unless_told_to_accept_the_loss() {
    let fx = sf::imported(Backend::Fs, 6);
    let root = fx.root.path();
    let url = fx.url(root);
    let log = Backend::Fs.path(root).join("streams").join(format!("{}.log", fx.session));
    let len = std::fs::metadata(&log).unwrap().len();
    cut_file(&log, len - 7);
    let before = sf::checksums(root);
    let file = root.join("other.jsonl");
    std::fs::write(&file, sf::transcript(3)).unwrap();
    let other = "00000000-0000-4000-8000-00000000000c";
    let import = |extra: &[&str]| {
        let mut args = vec!["import", file.to_str().unwrap(), "--store", &url, "--session", other];
        args.extend_from_slice(extra);
        cli(&args)
    };
    let (code, out, err) = import(&[]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(err.contains("--accept-loss") && err.contains(&fx.session.to_string()), "{err}");
    let mut after = sf::checksums(root);
    after.remove(Path::new("other.jsonl"));
    assert!(sf::changes(&before, &after).is_empty(), "{:?}", sf::changes(&before, &after));
    let (code, out, err) = import(&["--accept-loss"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cli(&["verify", "--store", &url]);
    assert_eq!(code, 4, "the accepted loss is reported: {out}{err}");
    assert!(out.contains("accepted the loss"), "{out}");
    let (code, out, err) = cli(&["verify", "--store", &url, "--accept-repairs"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// One rule for every backend: a snapshot beyond the log's head is damage `verify` reports.
#[test]
fn a_snapshot_beyond_the_head_is_damage_on_every_backend() {
    for backend in Backend::ALL {
        let root = tempfile::tempdir().unwrap();
        let id: ctxlog::StreamId = sf::SESSION.parse().unwrap();
        let head = {
            let store = backend.open_writer(root.path());
            let config = ctxlog::Config { budget: 3_000, ..ctxlog::Config::default() };
            let mut session = ctxlog::Session::create(
                store.as_ref(),
                id,
                ctxlog::WireFormat::Anthropic,
                config,
                ctxlog::Timestamp::from_millis(1_000),
            )
            .unwrap();
            for i in 0..4 {
                sf::engine_call(&mut session, i);
            }
            session.snapshot().unwrap();
            store.head(id).unwrap().unwrap()
        };
        let ahead = head + 5;
        let path = backend.path(root.path());
        match backend {
            Backend::Sqlite => {
                let db = rusqlite::Connection::open(&path).unwrap();
                db.execute("UPDATE snapshots SET version = ?1", [ahead as i64]).unwrap();
            }
            Backend::Fs => {
                let snap = path.join("snapshots").join(format!("{id}.snap"));
                let mut bytes = std::fs::read(&snap).unwrap();
                bytes[8..16].copy_from_slice(&ahead.to_le_bytes());
                let crc = crc32c::crc32c(&bytes[..16]);
                bytes[16..20].copy_from_slice(&crc.to_le_bytes());
                std::fs::write(&snap, bytes).unwrap();
            }
            Backend::Sled => {
                let db = sled::open(&path).unwrap();
                let tree = db.open_tree("snapshots").unwrap();
                let mut manifest = tree.get(id.0.as_bytes()).unwrap().unwrap().to_vec();
                manifest[..8].copy_from_slice(&ahead.to_le_bytes());
                tree.insert(id.0.as_bytes(), manifest).unwrap();
                db.flush().unwrap();
            }
        }
        let (code, out, err) = cli(&["verify", "--store", &backend.url(root.path())]);
        assert_eq!(code, 4, "{}: {out}{err}", backend.name());
        let named = format!("versions {}..={ahead}", head + 1);
        assert!(out.contains(&named) || err.contains(&named), "{}: {out}{err}", backend.name());
    }
    // And through the library, on any store: the memory store never stores one, so a store
    // that claims one is simulated.
    let store = AheadSnapshot(ctxlog::MemoryStore::new());
    let id = ctxlog::StreamId::random();
    let mut session = ctxlog::Session::create(
        &store as &dyn Store,
        id,
        ctxlog::WireFormat::Anthropic,
        ctxlog::Config::default(),
        ctxlog::Timestamp::from_millis(1_000),
    )
    .unwrap();
    sf::engine_call(&mut session, 0);
    let report = ctxlog::replay::verify(&store, id).unwrap();
    assert!(report.problems.iter().any(|p| p.to_string().contains("beyond the log head")), "{report:?}");
}

/// A store whose snapshot claims 100 versions more than its log holds.
struct AheadSnapshot(ctxlog::MemoryStore);

impl Store for AheadSnapshot {
    fn append(
        &self,
        s: ctxlog::StreamId,
        e: ctxlog::store::ExpectedVersion,
        r: &[ctxlog::store::Record],
    ) -> Result<u64, ctxlog::StoreError> {
        self.0.append(s, e, r)
    }
    fn read(
        &self,
        s: ctxlog::StreamId,
        from: u64,
        max: usize,
    ) -> Result<Vec<ctxlog::store::StoredRecord>, ctxlog::StoreError> {
        self.0.read(s, from, max)
    }
    fn head(&self, s: ctxlog::StreamId) -> Result<Option<u64>, ctxlog::StoreError> {
        self.0.head(s)
    }
    fn streams(&self) -> Result<Vec<ctxlog::StreamId>, ctxlog::StoreError> {
        self.0.streams()
    }
    fn put_snapshot(&self, s: ctxlog::StreamId, snap: &Snapshot) -> Result<(), ctxlog::StoreError> {
        self.0.put_snapshot(s, snap)
    }
    fn get_snapshot(&self, s: ctxlog::StreamId) -> Result<Option<Snapshot>, ctxlog::StoreError> {
        let head = self.0.head(s)?.unwrap_or(0);
        Ok(Some(Snapshot::seal(head + 100, b"not a state".to_vec())))
    }
    fn put_blob(&self, b: &[u8]) -> Result<ctxlog::BlobId, ctxlog::StoreError> {
        self.0.put_blob(b)
    }
    fn get_blob(&self, id: &ctxlog::BlobId) -> Result<Option<Vec<u8>>, ctxlog::StoreError> {
        self.0.get_blob(id)
    }
}

/// The same rule on PostgreSQL (skipped, with a message, where PostgreSQL cannot run).
#[test]
fn a_snapshot_beyond_the_head_is_damage_on_postgres() {
    let Some(db) = ctxlog_tests::postgres::database("snapshot_beyond_head") else { return };
    let id: ctxlog::StreamId = sf::SESSION.parse().unwrap();
    let head = {
        let store = ctxlog_store_postgres::PgStore::open(db.url()).unwrap();
        let store: &dyn Store = &store;
        let config = ctxlog::Config { budget: 3_000, ..ctxlog::Config::default() };
        let mut session = ctxlog::Session::create(
            store,
            id,
            ctxlog::WireFormat::Anthropic,
            config,
            ctxlog::Timestamp::from_millis(1_000),
        )
        .unwrap();
        for i in 0..3 {
            sf::engine_call(&mut session, i);
        }
        session.snapshot().unwrap();
        store.head(id).unwrap().unwrap()
    };
    let ahead = head + 5;
    let rows = db.connect().unwrap().execute("UPDATE ctxlog_snapshots SET version = $1", &[&(ahead as i64)]).unwrap();
    assert_eq!(rows, 1);
    let (code, out, err) = cli(&["verify", "--store", db.url()]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(format!("{out}{err}").contains(&format!("versions {}..={ahead}", head + 1)), "{out}{err}");
}
