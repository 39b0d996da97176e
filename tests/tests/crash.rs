//! Kill -9 crash test for the durable backends (sled's `tests/test_crash_recovery.rs` idea).
//!
//! The binary re-executes itself as a writer child (env `CTXLOG_CRASH_CHILD=<backend>:<dir>`).
//! The child opens the store, prints `ready`, then appends batches of 1–5 records, printing
//! `ack <batch> <head>` after each `Ok` (odd batches through `append_unsynced`; and
//! `blob <batch> <id>` after each acknowledged blob).
//! The parent SIGKILLs it a random 5–80 ms after `ready` (one time in four: after spawn, so
//! some kills hit `open` and its recovery), reopens the store and checks that every
//! acknowledged batch and blob is there, no partial batch is visible, the batches form a
//! gap-free sequence and every record verifies. Each backend gets ITERATIONS kills on the same
//! directory, so recovery runs on top of recovery. For fs and sled the parent also opens the
//! store while the child holds it, which must fail with `Locked`.
//! Beside the raw records, the child also drives a real engine session on a second stream
//! (append a tool call, its result and a user turn, plan, commit, prepare), printing
//! `call <n> <version>` after each committed call; after every kill the parent runs the full
//! `ctxlog verify` check on that session (invariants, re-rendered view digests, blobs) and checks
//! that every acknowledged call is in the log. The child reopens the session each time, so the
//! engine's own recovery (snapshot or replay) runs after every kill too.
//! `CTXLOG_CRASH_SEED` replays a run. The last line printed is `N passed, M failed`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ctxlog::store::{BlobId, ExpectedVersion, Record, Store, StoreError, StreamId};
use ctxlog::Timestamp;

const CHILD_ENV: &str = "CTXLOG_CRASH_CHILD";
const TEST_NAME: &str = "crash_kill9_all_backends";
const ITERATIONS: usize = 10; // override with CTXLOG_CRASH_ITERATIONS
const BACKENDS: [&str; 3] = ["sqlite", "fs", "sled"];
/// The stream of raw records the child writes.
const STREAM: &str = "6c1b2a8e-9f51-4c55-9a57-1c2d3e4f5a6b";
/// The engine session the child drives.
const SESSION: &str = "6c1b2a8e-9f51-4c55-9a57-00000000c0de";

/// Opens (or creates) the engine session on `store`.
fn engine_session(store: &dyn Store) -> ctxlog::Session<&dyn Store> {
    let id: StreamId = SESSION.parse().unwrap();
    if store.head(id).unwrap().is_some() {
        return ctxlog::Session::open(store, id).unwrap();
    }
    // A small budget so calls flush, edit and raise guards while the child is being killed.
    let config = ctxlog::Config { budget: 2_000, ..ctxlog::Config::default() };
    ctxlog::Session::create(store, id, ctxlog::WireFormat::Anthropic, config, Timestamp::from_millis(0)).unwrap()
}

/// One engine step: a tool call, its result and a user turn, then a committed call and a
/// prepared summary if the engine asks for one. Returns `(call, version)` once durable.
fn engine_step(session: &mut ctxlog::Session<&dyn Store>) -> (u64, u64) {
    use ctxlog::internal::wire::parse_message;
    let v = session.state().version();
    let now = session.state().last_request_at().unwrap_or(0) + 30_000;
    let call = format!(
        r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"t{v}","name":"read_file","input":{{"path":"f{v}.rs"}}}}]}}"#
    );
    let result = format!(
        r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{v}","content":"{}"}}]}}"#,
        "fn x() {} ".repeat(60)
    );
    let turn = format!(r#"{{"role":"user","content":"step {v}: {}"}}"#, "keep going ".repeat(12));
    let messages = [call, result, turn].iter().map(|j| parse_message(j).unwrap()).collect();
    session.append(messages).unwrap();
    let plan = session.plan(Timestamp::from_millis(now)).unwrap();
    let committed = session.commit(plan, Timestamp::from_millis(now), None).unwrap();
    if let Some(job) = session.summary_job() {
        let text = session.summarize(&job).unwrap();
        session.prepare(&job, text, ctxlog::session::Produced::extractive()).unwrap();
    }
    (session.state().calls() - 1, committed.version)
}

fn open(backend: &str, dir: &Path, report: bool) -> Box<dyn Store> {
    match backend {
        "sqlite" => Box::new(ctxlog_store_sqlite::SqliteStore::open(dir.join("ctxlog.db")).unwrap()),
        "fs" => {
            let s = ctxlog_store_fs::FsStore::open(dir).unwrap();
            for t in s.recovered().iter().filter(|_| report) {
                println!(
                    "    fs recovery: truncated {} bytes at offset {} of {}",
                    t.bytes_dropped,
                    t.offset,
                    t.path.display()
                );
            }
            assert!(s.damaged().is_empty(), "fs reports damage after a kill: {:?}", s.damaged());
            Box::new(s)
        }
        "sled" => Box::new(ctxlog_store_sled::SledStore::open(dir.join("sled")).unwrap()),
        other => panic!("unknown backend {other}"),
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: enough to scatter kill points; no dependency needed.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// Record body: `batch <id> <index>/<count>` plus padding so records have a realistic size.
fn body(batch: u64, index: u64, count: u64) -> Vec<u8> {
    let mut b = format!("batch {batch} {index}/{count} ").into_bytes();
    b.resize(300, b'.');
    b
}

fn parse(body: &[u8]) -> (u64, u64, u64) {
    let text = std::str::from_utf8(body).unwrap();
    let mut words = text.split_whitespace();
    assert_eq!(words.next(), Some("batch"));
    let batch = words.next().unwrap().parse().unwrap();
    let (i, n) = words.next().unwrap().split_once('/').unwrap();
    (batch, i.parse().unwrap(), n.parse().unwrap())
}

fn blob_bytes(batch: u64) -> Vec<u8> {
    (0..50_000u64).map(|i| (i.wrapping_mul(31) ^ batch) as u8).collect()
}

fn child(spec: &str) {
    let (backend, dir) = spec.split_once(':').unwrap();
    let store = open(backend, Path::new(dir), false);
    let stream: StreamId = STREAM.parse().unwrap();
    let mut head = store.head(stream).unwrap().unwrap_or(0);
    let mut batch = match store.read(stream, head, 1).unwrap().first() {
        Some(last) => parse(last.record.body()).0 + 1,
        None => 0,
    };
    let mut rng = Rng(u64::from(std::process::id()) | 1);
    let mut session = engine_session(store.as_ref());
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    loop {
        let count = rng.range(1, 5);
        let records: Vec<Record> = (0..count).map(|i| Record::seal(body(batch, i, count))).collect();
        // Every other batch unsynced (`Store::append_unsynced`): it is acknowledged like the
        // others, and a kill -9 of the process must not lose it either.
        head = if batch % 2 == 1 {
            store.append_unsynced(stream, ExpectedVersion::Exact(head), &records).unwrap()
        } else {
            store.append(stream, ExpectedVersion::Exact(head), &records).unwrap()
        };
        writeln!(out, "ack {batch} {head}").unwrap();
        out.flush().unwrap();
        if batch % 7 == 3 {
            let id = store.put_blob(&blob_bytes(batch)).unwrap();
            writeln!(out, "blob {batch} {id}").unwrap();
            out.flush().unwrap();
        }
        let (call, version) = engine_step(&mut session);
        writeln!(out, "call {call} {version}").unwrap();
        out.flush().unwrap();
        batch += 1;
    }
}

/// Runs one child, kills it, and returns the acknowledged lines.
fn run_child(backend: &str, dir: &Path, rng: &mut Rng, locked_checks: &mut usize) -> Result<Vec<String>, String> {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .env(CHILD_ENV, format!("{backend}:{}", dir.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let stdout = child.stdout.take().unwrap();
    let acks = Arc::new(AtomicUsize::new(0));
    let acks_seen = Arc::clone(&acks);
    // Read concurrently so the child never blocks on a full pipe.
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        while r.read_until(b'\n', &mut buf).unwrap_or(0) > 0 {
            // A line cut by the kill has no newline: it was not acknowledged to anyone.
            if buf.ends_with(b"\n") {
                lines.push(String::from_utf8_lossy(&buf).trim_end().to_owned());
                acks_seen.fetch_add(1, Ordering::SeqCst);
            }
            buf.clear();
        }
        lines
    });
    // Most kills land while the writer appends (the delay starts once the store is open, which
    // can take a while for sled or a debug build); every fourth lands anywhere, open included.
    if rng.range(0, 3) != 0 {
        let deadline = Instant::now() + Duration::from_secs(20);
        while acks.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::thread::sleep(Duration::from_millis(rng.range(5, 80)));
    if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
        return Err(format!("writer exited on its own before the kill: {status}"));
    }
    // A single-writer backend must refuse a second process while the child holds it.
    if backend != "sqlite" && acks.load(Ordering::SeqCst) > 0 {
        // (The first line is "ready", printed once the child holds the store.)
        let second = match backend {
            "fs" => ctxlog_store_fs::FsStore::open(dir).map(|_| ()),
            _ => ctxlog_store_sled::SledStore::open(dir.join("sled")).map(|_| ()),
        };
        if !matches!(second, Err(StoreError::Locked { .. })) {
            let _ = child.kill();
            return Err(format!("a second process opened the {backend} store while the writer held it: {second:?}"));
        }
        *locked_checks += 1;
    }
    child.kill().map_err(|e| format!("kill: {e}"))?; // SIGKILL on Unix
    child.wait().map_err(|e| format!("wait: {e}"))?;
    Ok(reader.join().unwrap())
}

/// Reopens the store and checks it against everything ever acknowledged.
fn verify(
    backend: &str,
    dir: &Path,
    acked: &BTreeMap<u64, u64>,
    blobs: &BTreeMap<u64, BlobId>,
    calls: &BTreeMap<u64, u64>,
) -> Result<u64, String> {
    let store = open(backend, dir, true);
    let stream: StreamId = STREAM.parse().unwrap();
    let records = store.read(stream, 1, usize::MAX).map_err(|e| format!("read: {e}"))?;
    let head = store.head(stream).map_err(|e| e.to_string())?.unwrap_or(0);
    if records.len() as u64 != head {
        return Err(format!("head {head} but {} records readable", records.len()));
    }
    // Walk the log batch by batch: ids 0, 1, 2, ... each with indices 0..count, no gaps.
    let mut ends = BTreeMap::new();
    let mut expect_batch = 0;
    let mut i = 0;
    while i < records.len() {
        let (batch, index, count) = parse(records[i].record.body());
        if batch != expect_batch || index != 0 {
            return Err(format!(
                "version {}: expected batch {expect_batch} index 0, found {batch} {index}/{count}",
                i + 1
            ));
        }
        for k in 0..count {
            let Some(r) = records.get(i + k as usize) else {
                return Err(format!("partial batch {batch}: only {k} of {count} records visible"));
            };
            if parse(r.record.body()) != (batch, k, count) {
                return Err(format!("batch {batch} broken at version {}", r.version));
            }
        }
        i += count as usize;
        ends.insert(batch, i as u64);
        expect_batch += 1;
    }
    for (batch, head) in acked {
        if ends.get(batch) != Some(head) {
            return Err(format!("acknowledged batch {batch} ending at version {head} is missing (log ends at {i})"));
        }
    }
    for (batch, id) in blobs {
        match store.get_blob(id) {
            Ok(Some(b)) if b == blob_bytes(*batch) => {}
            other => return Err(format!("acknowledged blob of batch {batch} ({id}): {other:?}")),
        }
    }
    verify_session(store.as_ref(), calls)?;
    Ok(head)
}

/// The engine session must pass `ctxlog verify` and hold every acknowledged call.
fn verify_session(store: &dyn Store, calls: &BTreeMap<u64, u64>) -> Result<(), String> {
    let id: StreamId = SESSION.parse().unwrap();
    if store.head(id).map_err(|e| e.to_string())?.is_none() {
        return match calls.is_empty() {
            true => Ok(()),
            false => Err(format!("{} calls were acknowledged but the session is gone", calls.len())),
        };
    }
    let report = ctxlog::replay::verify(store, id).map_err(|e| format!("verify: {e}"))?;
    if !report.ok() {
        return Err(format!("verify of the engine session: {:?}", report.problems));
    }
    let replayed = ctxlog::replay::replay(store, id, ctxlog::replay::Mode::Strict, None).map_err(|e| e.to_string())?;
    for (call, version) in calls {
        match replayed.timeline.get(*call as usize) {
            Some(r) if r.version == *version => {}
            other => return Err(format!("acknowledged call {call} at version {version}: found {other:?}")),
        }
    }
    Ok(())
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        return;
    }
    // Speak enough of libtest's command line for `cargo nextest` (it lists, then runs by
    // name) and for `cargo test <filter>` (skip when the filter names another test).
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("{TEST_NAME}: test");
        }
        return;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| TEST_NAME.contains(f.as_str())) {
        println!("0 passed, 0 failed");
        return;
    }
    let seed = std::env::var("CTXLOG_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
    });
    let iterations: usize =
        std::env::var("CTXLOG_CRASH_ITERATIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(ITERATIONS);
    println!("crash test: {iterations} SIGKILLs per backend, seed {seed} (CTXLOG_CRASH_SEED={seed} to replay)");
    println!(
        "note: sled's flush() is sync_file_range, not fsync: its acknowledged writes are NOT guaranteed to survive \
         power loss, but must survive a process kill (the data is in the OS page cache). This test checks the latter."
    );
    let mut rng = Rng(seed);
    let (mut passed, mut failed) = (0usize, 0usize);
    let started = Instant::now();
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let mut acked: BTreeMap<u64, u64> = BTreeMap::new();
        let mut blobs: BTreeMap<u64, BlobId> = BTreeMap::new();
        let mut calls: BTreeMap<u64, u64> = BTreeMap::new();
        let mut backend_failed = false;
        let mut locked_checks = 0;
        for iteration in 1..=iterations {
            let result = run_child(backend, dir.path(), &mut rng, &mut locked_checks).and_then(|lines| {
                for line in &lines {
                    let parts: Vec<&str> = line.split(' ').collect();
                    match parts.as_slice() {
                        ["ack", b, h] => {
                            acked.insert(b.parse().unwrap(), h.parse().unwrap());
                        }
                        ["ready"] => {}
                        ["blob", b, id] => {
                            blobs.insert(b.parse().unwrap(), BlobId::parse(id).unwrap());
                        }
                        ["call", c, v] => {
                            calls.insert(c.parse().unwrap(), v.parse().unwrap());
                        }
                        _ => return Err(format!("unexpected child output {line:?}")),
                    }
                }
                verify(backend, dir.path(), &acked, &blobs, &calls).map(|head| (lines.len(), head))
            });
            match result {
                Ok((lines, head)) => {
                    passed += 1;
                    let (total, engine) = (acked.len(), calls.len());
                    let summary =
                        format!("{lines} lines this run, head {head}, {total} batches and {engine} engine calls acked");
                    println!("  {backend} kill {iteration:2}: ok ({summary})");
                }
                Err(e) => {
                    failed += 1;
                    backend_failed = true;
                    println!("  {backend} kill {iteration:2}: FAILED: {e}");
                    break;
                }
            }
        }
        if backend != "sqlite" {
            println!("  {backend}: {locked_checks} opens from this process while the writer ran got Locked");
        }
        if !backend_failed && (acked.is_empty() || calls.is_empty()) {
            failed += 1;
            println!("  {backend}: FAILED: no append or no engine call was ever acknowledged, the test proved nothing");
        }
    }
    println!("crash test took {:.1} s", started.elapsed().as_secs_f64());
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
