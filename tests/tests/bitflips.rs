//! Single-bit flips over every file of real stores, as a user would meet bit rot: for each
//! durable backend, a session written call by call through the engine (files taken while the
//! writer still held the store, as a `kill -9` leaves them) and a session written by
//! `ctxlog import`. Each flip is tried on a fresh copy:
//!
//! * `ctxlog verify --store URL` runs first. Exit 4 naming the stream and version, or a file of
//!   the store, is **detected**. Exit 3 naming the store (a header that now claims another
//!   format version) is **refused**.
//! * Exit 0 is followed by `export` and `replay --json` of the session: the same bytes as the
//!   intact store is **identical**; anything else is a **silent loss** (verify said ok, the
//!   content changed or cannot be read).
//! * Every file of the store is checksummed before and after those read-only commands: any
//!   change is a failure (**modified**). A panic anywhere is a failure.
//!
//! Positions are sampled deterministically (`CTXLOG_FLIPS_SEED`, default below): two per file,
//! the rest uniformly over all bytes; `CTXLOG_FLIPS` sets the flips per fixture (default 120).
//! The figures table of `RELIABILITY.md` is what these tests print (`--nocapture`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use ctxlog::Timestamp;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

use ctxlog_tests::scenario::cli;
use ctxlog_tests::store_files::{self as sf, Backend, Fixture, Rng};

const DEFAULT_FLIPS: u64 = 120;
const DEFAULT_SEED: u64 = 0x5eed_f11b_0000_0007;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Detected,
    Refused,
    Identical,
    SilentLoss,
    Unnamed,
    Panicked,
}

const OUTCOMES: [Outcome; 6] =
    [Outcome::Detected, Outcome::Refused, Outcome::Identical, Outcome::SilentLoss, Outcome::Unnamed, Outcome::Panicked];

/// Panics on threads the tests do not own (a library's background threads) are counted here.
static BACKGROUND_PANICS: AtomicUsize = AtomicUsize::new(0);
static HOOK: Once = Once::new();
static PRINT: Mutex<()> = Mutex::new(());

fn install_panic_counter() {
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let ours = std::thread::current().name().is_some_and(|n| n.contains("flips"));
            if !ours {
                BACKGROUND_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            default(info);
        }));
    });
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `(file, bit)` positions: two per file, the rest uniform over all bytes.
fn positions(root: &Path, n: u64, rng: &mut Rng) -> Vec<(PathBuf, u64)> {
    let files: Vec<(PathBuf, u64)> = sf::files(root).into_iter().filter(|(_, len)| *len > 0).collect();
    let mut out = Vec::new();
    for (rel, len) in &files {
        for _ in 0..2 {
            out.push((rel.clone(), rng.below(len * 8)));
        }
    }
    let total: u64 = files.iter().map(|(_, len)| len).sum();
    while (out.len() as u64) < n.max(files.len() as u64 * 2) {
        let mut at = rng.below(total);
        for (rel, len) in &files {
            if at < *len {
                out.push((rel.clone(), at * 8 + rng.below(8)));
                break;
            }
            at -= len;
        }
    }
    out
}

fn run_cli(args: &[&str]) -> Result<(i32, String, String), String> {
    std::panic::catch_unwind(AssertUnwindSafe(|| cli(args))).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default()
    })
}

/// One flip on a fresh copy of the fixture; returns the outcome, whether the read-only commands
/// changed any file, and a line describing it.
fn try_flip(fx: &Fixture, rel: &Path, bit: u64) -> (Outcome, bool, String) {
    let scratch = tempfile::tempdir().unwrap();
    sf::copy_dir(fx.root.path(), scratch.path());
    sf::flip_bit(&scratch.path().join(rel), bit);
    let before = sf::checksums(scratch.path());
    let url = fx.url(scratch.path());
    let id = fx.session.to_string();
    let at = format!("{} bit {bit} (byte {})", rel.display(), bit / 8);
    let verify = run_cli(&["verify", "--store", &url]);
    let (outcome, what) = match verify {
        Err(p) => (Outcome::Panicked, format!(": verify panicked: {p}")),
        Ok((4, out, err)) => {
            let text = format!("{out}{err}");
            let root = scratch.path().display().to_string();
            let names_record = text.contains(&id) && (text.contains("version") || text.contains("blob sha256:"));
            if names_record || text.contains(&root) {
                (Outcome::Detected, first_line(&text))
            } else {
                (Outcome::Unnamed, format!(": {text}"))
            }
        }
        Ok((3, out, err)) if format!("{out}{err}").contains(&scratch.path().display().to_string()) => {
            (Outcome::Refused, first_line(&format!("{out}{err}")))
        }
        Ok((0, _, _)) => {
            let export = run_cli(&["export", "--store", &url, "--session", &id]);
            let timeline = run_cli(&["replay", "--json", "--store", &url, "--session", &id]);
            match (export, timeline) {
                (Err(p), _) | (_, Err(p)) => (Outcome::Panicked, format!(": export or replay panicked: {p}")),
                (Ok((0, e, _)), Ok((0, t, _))) if e == fx.export && t == fx.timeline => {
                    (Outcome::Identical, String::new())
                }
                (Ok((ec, e, ee)), Ok((tc, t, te))) => (
                    Outcome::SilentLoss,
                    format!(
                        ": verify passed; export exit {ec} ({} of {} bytes{}), replay exit {tc} ({} of {} lines{})",
                        e.len(),
                        fx.export.len(),
                        first_line(&ee),
                        t.lines().count(),
                        fx.timeline.lines().count(),
                        first_line(&te)
                    ),
                ),
            }
        }
        Ok((code, out, err)) => (Outcome::Unnamed, format!(": exit {code}: {out}{err}")),
    };
    let changed = sf::changes(&before, &sf::checksums(scratch.path()));
    if changed.is_empty() {
        (outcome, false, format!("{at}{what}"))
    } else {
        (outcome, true, format!("{at}{what}; read-only commands changed {changed:?}"))
    }
}

fn first_line(s: &str) -> String {
    let line = s.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    if line.is_empty() {
        String::new()
    } else {
        format!(": {line}")
    }
}

#[derive(Default)]
struct Tally {
    /// (fixture kind, file kind) -> outcome -> count
    counts: BTreeMap<(String, String), BTreeMap<Outcome, u64>>,
    /// (fixture kind, file kind) -> flips after which a read-only command had changed a file
    modified: BTreeMap<(String, String), u64>,
    failures: Vec<String>,
    refused: Vec<String>,
}

impl Tally {
    fn add(&mut self, kind: &str, file: String, outcome: Outcome, modified: bool, line: String) {
        let key = (kind.to_owned(), file);
        *self.counts.entry(key.clone()).or_default().entry(outcome).or_default() += 1;
        if modified {
            *self.modified.entry(key).or_default() += 1;
        }
        if modified || !matches!(outcome, Outcome::Detected | Outcome::Refused | Outcome::Identical) {
            self.failures.push(format!("[{kind}] {outcome:?} {line}"));
        } else if outcome == Outcome::Refused {
            self.refused.push(format!("[{kind}] {line}"));
        }
    }

    fn total(&self, outcome: Outcome) -> u64 {
        self.counts.values().map(|m| m.get(&outcome).copied().unwrap_or(0)).sum()
    }

    fn print(&self, backend: Backend) {
        let _guard = PRINT.lock().unwrap_or_else(|e| e.into_inner());
        println!(
            "\n| backend | session | file | flips | detected | refused | identical | silent loss | unnamed | panic | store modified |"
        );
        println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (key, m) in &self.counts {
            let n: u64 = m.values().sum();
            let cells: Vec<String> = OUTCOMES.iter().map(|o| m.get(o).copied().unwrap_or(0).to_string()).collect();
            let modified = self.modified.get(key).copied().unwrap_or(0);
            println!("| {} | {} | {} | {n} | {} | {modified} |", backend.name(), key.0, key.1, cells.join(" | "));
        }
        let n: u64 = self.counts.values().flat_map(|m| m.values()).sum();
        let cells: Vec<String> = OUTCOMES.iter().map(|o| self.total(*o).to_string()).collect();
        let modified: u64 = self.modified.values().sum();
        println!("| {} | **all** | | {n} | {} | {modified} |", backend.name(), cells.join(" | "));
        for r in &self.refused {
            println!("    refused: {r}");
        }
        for f in self.failures.iter().take(40) {
            println!("    {f}");
        }
    }
}

fn flips(backend: Backend) {
    install_panic_counter();
    let n = env_u64("CTXLOG_FLIPS", DEFAULT_FLIPS);
    let mut rng = Rng(env_u64("CTXLOG_FLIPS_SEED", DEFAULT_SEED) ^ (backend as u64 + 1).wrapping_mul(0x9e37_79b9));
    let fixtures = [sf::call_by_call(backend, 24), sf::imported(backend, 24)];
    let mut tally = Tally::default();
    for fx in &fixtures {
        for (rel, bit) in positions(fx.root.path(), n, &mut rng) {
            let (outcome, modified, line) = try_flip(fx, &rel, bit);
            tally.add(fx.kind, backend.file_kind(&rel), outcome, modified, line);
        }
    }
    tally.print(backend);
    let tried: u64 = tally.counts.values().flat_map(|m| m.values()).sum();
    assert!(tried >= 200, "only {tried} flips");
    assert_eq!(BACKGROUND_PANICS.load(Ordering::SeqCst), 0, "a background thread panicked");
    assert!(tally.failures.is_empty(), "{} flips failed:\n{}", tally.failures.len(), tally.failures.join("\n"));
}

#[test]
fn sqlite_flips_are_detected_or_harmless() {
    flips(Backend::Sqlite);
}

#[test]
fn fs_flips_are_detected_or_harmless() {
    flips(Backend::Fs);
}

#[test]
fn sled_flips_are_detected_or_harmless() {
    flips(Backend::Sled);
}

/// Regression (issue 7, case 2): a `-wal` left by a writer killed while a reader blocked its
/// checkpoints holds many commits. A flipped bit in a frame used to make SQLite's recovery drop
/// every later commit (4–600 versions) and `verify` checkpoint that loss and exit 0. Now every
/// flip in a frame followed by a later commit is reported naming the `-wal`, and nothing is
/// written. The last transaction of the file cannot be told from a torn write (see
/// `store-sqlite/src/wal.rs`), so the store never leaves an append there: when readers block
/// its checkpoint it commits an empty transaction after it, and a flip in that one is harmless.
#[test]
fn sqlite_flips_in_a_hot_wal_never_drop_later_commits_silently() {
    let live = tempfile::tempdir().unwrap();
    let killed = tempfile::tempdir().unwrap();
    let backend = Backend::Sqlite;
    let id: ctxlog::StreamId = sf::SESSION.parse().unwrap();
    {
        let store = backend.open_writer(live.path());
        let reader = rusqlite::Connection::open(backend.path(live.path())).unwrap();
        reader.execute_batch("BEGIN; SELECT count(*) FROM records;").unwrap();
        let config = ctxlog::Config { budget: 3_000, ..ctxlog::Config::default() };
        let mut session = ctxlog::Session::create(
            store.as_ref(),
            id,
            ctxlog::WireFormat::Anthropic,
            config,
            Timestamp::from_millis(1_000),
        )
        .unwrap();
        for i in 0..16 {
            sf::engine_call(&mut session, i);
        }
        sf::copy_dir(live.path(), killed.path());
    }
    let sid = id.to_string();
    let wal = killed.path().join("ctxlog.db-wal");
    let bytes = std::fs::read(&wal).unwrap();
    let pristine_timeline = {
        let scratch = tempfile::tempdir().unwrap();
        sf::copy_dir(killed.path(), scratch.path());
        let (code, timeline, err) =
            cli(&["replay", "--json", "--store", &backend.url(scratch.path()), "--session", &sid]);
        assert_eq!(code, 0, "{err}");
        timeline
    };
    let page = u32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let frame = 24 + page;
    let frames = (bytes.len() - 32) / frame;
    let commit = |i: usize| bytes[32 + i * frame + 4..32 + i * frame + 8] != [0, 0, 0, 0];
    let last_tx = (0..frames - 1).rev().find(|&i| commit(i)).map_or(0, |i| i + 1);
    assert!(frames > 40 && last_tx > frames / 2, "{frames} frames, last transaction from frame {last_tx}");
    let mut rng = Rng(DEFAULT_SEED);
    let (mut detected, mut harmless, mut lost, mut modified) = (0, 0, Vec::new(), 0);
    for _ in 0..120 {
        let at = 32 + rng.below((frames * frame) as u64) as usize;
        let scratch = tempfile::tempdir().unwrap();
        sf::copy_dir(killed.path(), scratch.path());
        sf::flip_bit(&scratch.path().join("ctxlog.db-wal"), at as u64 * 8 + rng.below(8));
        let before = sf::checksums(scratch.path());
        let url = backend.url(scratch.path());
        let (code, out, err) = cli(&["verify", "--store", &url]);
        modified += usize::from(!sf::changes(&before, &sf::checksums(scratch.path())).is_empty());
        let (_, timeline, _) = cli(&["replay", "--json", "--store", &url, "--session", &sid]);
        if code == 4 {
            assert!(err.contains("ctxlog.db-wal") && err.contains("drop"), "byte {at}: {out}{err}");
            detected += 1;
        } else if code == 0 && timeline == pristine_timeline {
            // In the frames of the empty transaction that seals the last append (or in bytes
            // SQLite does not read): dropping it loses nothing.
            harmless += 1;
        } else {
            let kept = timeline.lines().count();
            lost.push(format!("byte {at} (frame {}): exit {code}, {kept} of 16 calls left", (at - 32) / frame));
        }
    }
    println!(
        "hot -wal of {frames} frames: 120 flips, {detected} reported naming the -wal, {harmless} harmless, {} silent \
         losses, {modified} changed the store",
        lost.len()
    );
    assert!(lost.is_empty() && modified == 0, "{lost:#?}");
    assert!(detected > 60, "{detected}");
}

/// Regression (issue 7, case 3): a flipped bit in an interior page of the `records` b-tree used
/// to hide the end of a session (`MAX(version)` stopped early, `verify` passed with 79 of 125
/// events) and the next append hit an existing key and got `Conflict` forever. Now each such
/// flip is reported by `verify`, and no append after it is ever a `Conflict`.
#[test]
fn sqlite_flips_in_interior_pages_are_reported_and_never_turn_appends_into_conflicts() {
    let fx = sf::imported(Backend::Sqlite, 150);
    let db = Backend::Sqlite.path(fx.root.path());
    let bytes = std::fs::read(&db).unwrap();
    let page = match u16::from_be_bytes([bytes[16], bytes[17]]) {
        1 => 65_536,
        n => usize::from(n),
    };
    let interior: Vec<usize> = (1..bytes.len() / page).filter(|&n| matches!(bytes[n * page], 0x02 | 0x05)).collect();
    assert!(interior.len() >= 2, "the session is large enough for interior pages: {interior:?}");
    let mut rng = Rng(DEFAULT_SEED ^ 3);
    let (mut detected, mut harmless, mut silent, mut conflicts) = (0, 0, Vec::new(), Vec::new());
    let sid = fx.session.to_string();
    for k in 0..80 {
        let n = interior[k % interior.len()];
        // The page header and the cell pointers and keys after it: where a flip redirects a search.
        let at = n * page + rng.below(64.min(page as u64)) as usize;
        let scratch = tempfile::tempdir().unwrap();
        sf::copy_dir(fx.root.path(), scratch.path());
        sf::flip_bit(&Backend::Sqlite.path(scratch.path()), at as u64 * 8 + rng.below(8));
        let url = fx.url(scratch.path());
        let (code, out, err) = cli(&["verify", "--store", &url]);
        let (_, timeline, _) = cli(&["replay", "--json", "--store", &url, "--session", &sid]);
        match code {
            4 => detected += 1,
            0 if timeline == fx.timeline => harmless += 1,
            _ => silent.push(format!(
                "page {} byte {at}: exit {code}, {} of {} calls: {out}{err}",
                n + 1,
                timeline.lines().count(),
                fx.timeline.lines().count()
            )),
        }
        // A writer appending next: damage is Corrupt (or the append works), never a Conflict.
        if let Ok(store) = ctxlog_store_sqlite::SqliteStore::open(Backend::Sqlite.path(scratch.path())) {
            use ctxlog::store::{ExpectedVersion, Record, Store, StoreError};
            if let Ok(head) = store.head(fx.session) {
                let head = head.unwrap_or(0);
                let r = store.append(fx.session, ExpectedVersion::Exact(head), &[Record::seal(b"next".to_vec())]);
                if matches!(r, Err(StoreError::Conflict { .. })) {
                    conflicts.push(format!("page {} byte {at}: {r:?}", n + 1));
                }
            }
        }
    }
    println!(
        "interior pages {:?}: 80 flips, {detected} reported, {harmless} harmless, {} silent losses, {} appends \
         refused as Conflict",
        interior.iter().map(|n| n + 1).collect::<Vec<_>>(),
        silent.len(),
        conflicts.len()
    );
    assert!(silent.is_empty() && conflicts.is_empty(), "{silent:#?}\n{conflicts:#?}");
}
