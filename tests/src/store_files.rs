//! Real stores on disk for the integrity tests (`tests/bitflips.rs`, `tests/read_only.rs`): one
//! session written call by call through the engine and one written by `ctxlog import`, on each
//! durable backend, plus helpers to copy, checksum and damage the files of a store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ctxlog::session::Produced;
use ctxlog::{Config, Session, Store, StreamId, Timestamp, WireFormat};
use sha2::{Digest, Sha256};

use crate::scenario::{b64, cli, png};

/// A durable backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite:<root>/ctxlog.db`
    Sqlite,
    /// `fs:<root>/store`
    Fs,
    /// `sled:<root>/sled`
    Sled,
}

impl Backend {
    /// Every durable backend.
    pub const ALL: [Backend; 3] = [Backend::Sqlite, Backend::Fs, Backend::Sled];

    /// Its name in store URLs.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Fs => "fs",
            Backend::Sled => "sled",
        }
    }

    /// Where the store lives inside `root` (a file for SQLite, a directory otherwise).
    pub fn path(self, root: &Path) -> PathBuf {
        match self {
            Backend::Sqlite => root.join("ctxlog.db"),
            Backend::Fs => root.join("store"),
            Backend::Sled => root.join("sled"),
        }
    }

    /// The CLI store URL of the store inside `root`.
    pub fn url(self, root: &Path) -> String {
        format!("{}:{}", self.name(), self.path(root).display())
    }

    /// Opens (creating) the store inside `root` for writing.
    pub fn open_writer(self, root: &Path) -> Box<dyn Store> {
        let path = self.path(root);
        match self {
            Backend::Sqlite => Box::new(ctxlog_store_sqlite::SqliteStore::open(path).unwrap()),
            Backend::Fs => Box::new(ctxlog_store_fs::FsStore::open(path).unwrap()),
            Backend::Sled => Box::new(ctxlog_store_sled::SledStore::open(path).unwrap()),
        }
    }

    /// A short label for the kind of a store file (for per-file-type figures).
    pub fn file_kind(self, rel: &Path) -> String {
        let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let parent = rel.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap_or("");
        match self {
            Backend::Sqlite => match name.rsplit_once('-') {
                Some((_, "wal")) => "-wal".into(),
                Some((_, "shm")) => "-shm".into(),
                _ => "db".into(),
            },
            Backend::Fs => {
                let grand = rel.components().nth(1).and_then(|c| c.as_os_str().to_str()).unwrap_or("");
                match grand {
                    "streams" if name.ends_with(".anchor") => "anchor".into(),
                    "streams" => "stream log".into(),
                    "blobs" => "blob".into(),
                    "snapshots" => "snapshot".into(),
                    _ => name.into(),
                }
            }
            Backend::Sled => {
                if parent == "blobs" {
                    "blobs/*".into()
                } else if name.starts_with("snap.") {
                    "snap.*".into()
                } else {
                    name.into()
                }
            }
        }
    }
}

/// A stored session: the directory holding the store and what it must read back as.
pub struct Fixture {
    /// The backend.
    pub backend: Backend,
    /// `"calls"` (call by call through the engine) or `"import"` (`ctxlog import`).
    pub kind: &'static str,
    /// The directory that holds the store (see [`Backend::path`]).
    pub root: tempfile::TempDir,
    /// The session id.
    pub session: StreamId,
    /// `ctxlog export` of the intact store.
    pub export: String,
    /// `ctxlog replay --json` of the intact store.
    pub timeline: String,
    /// Events in the session.
    pub events: u64,
}

impl Fixture {
    /// The store URL of this fixture's store, or of a copy of it in `root`.
    pub fn url(&self, root: &Path) -> String {
        self.backend.url(root)
    }
}

/// The session id every fixture uses.
pub const SESSION: &str = "00000000-0000-4000-8000-0000000f11b5";

/// A writer that appended `calls` calls one by one through the engine (tool calls and results,
/// images as blobs, a summary prepared when asked, a snapshot every 8 calls), in two runs (the
/// store is closed and reopened halfway), and was then killed: the files are copied while the
/// writer still holds the store, which is what a `kill -9` right after the last
/// acknowledgement leaves behind (a SQLite `-wal` and `-shm`, say).
pub fn call_by_call(backend: Backend, calls: u64) -> Fixture {
    let live = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let id: StreamId = SESSION.parse().unwrap();
    for run in [0..calls / 2, calls / 2..calls] {
        let store = backend.open_writer(live.path());
        let mut session = if run.start == 0 {
            let config = Config { budget: 3_000, ..Config::default() };
            Session::create(store.as_ref(), id, WireFormat::Anthropic, config, Timestamp::from_millis(1_000)).unwrap()
        } else {
            Session::open(store.as_ref(), id).unwrap()
        };
        for i in run.clone() {
            engine_call(&mut session, i);
            if i % 8 == 7 {
                session.snapshot().unwrap();
            }
        }
        if run.end == calls {
            // "Killed" here: the writer still holds the store while its files are copied.
            copy_dir(live.path(), root.path());
        }
    }
    finish(backend, "calls", root, id)
}

/// The same kind of conversation imported with `ctxlog import` (one atomic append).
pub fn imported(backend: Backend, turns: u64) -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("transcript.jsonl");
    std::fs::write(&file, transcript(turns)).unwrap();
    let url = backend.url(root.path());
    let (code, _, err) =
        cli(&["import", file.to_str().unwrap(), "--store", &url, "--session", SESSION, "--budget", "3000"]);
    assert_eq!(code, 0, "import into {url}: {err}");
    std::fs::remove_file(&file).unwrap();
    finish(backend, "import", root, SESSION.parse().unwrap())
}

fn finish(backend: Backend, kind: &'static str, root: tempfile::TempDir, session: StreamId) -> Fixture {
    // Read it back from a scratch copy, so whatever the commands do to files cannot leak into
    // the fixture.
    let scratch = tempfile::tempdir().unwrap();
    copy_dir(root.path(), scratch.path());
    let url = backend.url(scratch.path());
    let id = session.to_string();
    let (code, export, err) = cli(&["export", "--store", &url, "--session", &id]);
    assert_eq!(code, 0, "export of the intact {kind} fixture on {url}: {err}");
    let (code, timeline, err) = cli(&["replay", "--json", "--store", &url, "--session", &id]);
    assert_eq!(code, 0, "replay of the intact {kind} fixture on {url}: {err}");
    let (code, out, err) = cli(&["verify", "--store", &url]);
    assert_eq!(code, 0, "verify of the intact {kind} fixture on {url}: {out}{err}");
    let (code, out, err) = cli(&["sessions", "--json", "--store", &url]);
    assert_eq!(code, 0, "{err}");
    let listed: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let events = listed[0]["events"].as_u64().unwrap();
    Fixture { backend, kind, root, session, export, timeline, events }
}

fn image_block(i: u64) -> String {
    let side = 8 + (i % 5) as u32;
    format!(
        r#"{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{}"}}}}"#,
        b64(&png(side, side))
    )
}

/// The messages of turn `i`: a tool call, its result (with a screenshot every fourth turn) and
/// a user message.
fn turn(i: u64) -> [String; 3] {
    let call = format!(
        r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"t{i}","name":"read_file","input":{{"path":"src/f{i}.rs"}}}}]}}"#
    );
    let text = format!("fn f{i}() {{ /* line */ }} ").repeat(20 + (i % 7) as usize);
    let result = if i % 4 == 1 {
        format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{i}","content":[{{"type":"text","text":"{text}"}},{}]}}]}}"#,
            image_block(i)
        )
    } else {
        format!(r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{i}","content":"{text}"}}]}}"#)
    };
    let ask = format!(r#"{{"role":"user","content":"step {i}: {}"}}"#, "check the next file please ".repeat(3));
    [call, result, ask]
}

/// One call of turn `i` through the engine: append the turn, plan, commit, prepare if asked.
pub fn engine_call(session: &mut Session<&dyn Store>, i: u64) {
    let now = 1_000 + (i + 1) * 45_000;
    let messages = turn(i).iter().map(|j| ctxlog::internal::wire::parse_message(j).unwrap()).collect();
    session.append(messages).unwrap();
    let plan = session.plan(Timestamp::from_millis(now)).unwrap();
    session.commit(plan, Timestamp::from_millis(now), None).unwrap();
    if let Some(job) = session.summary_job() {
        let text = session.summarize(&job).unwrap();
        session.prepare(&job, text, Produced::extractive()).unwrap();
    }
}

/// A transcript of `turns` turns like the ones [`call_by_call`] writes, each closed by an
/// assistant answer (one model call per assistant line).
pub fn transcript(turns: u64) -> String {
    let mut out = String::from("{\"role\":\"system\",\"content\":\"You are a coding agent.\"}\n");
    out += "{\"role\":\"user\",\"content\":\"Please review the files in src/.\"}\n";
    for i in 0..turns {
        let [call, result, ask] = turn(i);
        for line in [call, result, ask] {
            out += &line;
            out.push('\n');
        }
    }
    out += "{\"role\":\"assistant\",\"content\":\"All files reviewed.\"}\n";
    out
}

/// Copies the files under `from` into `to` (directories created as needed).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

/// Every file under `root` (relative paths, sorted) with its length.
pub fn files(root: &Path) -> Vec<(PathBuf, u64)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, u64)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                walk(root, &entry.path(), out);
            } else {
                let rel = entry.path().strip_prefix(root).unwrap().to_path_buf();
                out.push((rel, entry.metadata().unwrap().len()));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// sha256 of every file under `root`, by relative path (directories are implied by the paths).
pub fn checksums(root: &Path) -> BTreeMap<PathBuf, String> {
    files(root)
        .into_iter()
        .map(|(rel, _)| {
            let bytes = std::fs::read(root.join(&rel)).unwrap();
            (rel, ctxlog::store::hex(&Sha256::digest(&bytes)))
        })
        .collect()
}

/// What changed between two [`checksums`]: one line per added, removed or changed file.
pub fn changes(before: &BTreeMap<PathBuf, String>, after: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (path, sum) in before {
        match after.get(path) {
            None => out.push(format!("{} removed", path.display())),
            Some(s) if s != sum => out.push(format!("{} changed", path.display())),
            _ => {}
        }
    }
    for path in after.keys().filter(|p| !before.contains_key(*p)) {
        out.push(format!("{} created", path.display()));
    }
    out
}

/// Flips bit `bit` (0 = least significant bit of the first byte) of the file at `path`.
pub fn flip_bit(path: &Path, bit: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    let byte = usize::try_from(bit / 8).unwrap();
    bytes[byte] ^= 1 << (bit % 8);
    std::fs::write(path, bytes).unwrap();
}

/// xorshift64*: deterministic positions without a dependency.
pub struct Rng(pub u64);

impl Rng {
    /// The next pseudo-random number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
