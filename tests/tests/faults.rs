//! Fault injection as a suite: a real engine session driven over a [`FaultyStore`] on every
//! backend, with one fault injected at every operation of a representative run.
//!
//! The run (create → appends with an image → calls that flush, edit and prepare summaries → an
//! aborted plan → snapshot → reopen → restore → more calls) is first made without faults; its
//! trace of store operations is the list of fault positions. Then, for each position and each
//! fault (fail, lost reply, delay, crash before, crash after; on fs also a short write with six
//! different cuts), the run is made again on a fresh store, as a host would: a store error is
//! retried once, a `Conflict`/`Exists` on the retry (the first attempt did reach the store) is
//! answered by reopening the session. Checked every time:
//! * the host sees a typed `SessionError::Store` naming the injected fault (or, on the retry
//!   of a write whose reply was lost, `Conflict`/`Exists`), never a panic and never a fault
//!   swallowed silently (a failed `put_blob` must show as an inline fallback, a failed
//!   `get_blob` as a missing blob);
//! * after a store error the live session's state is still the fold of the stored log (nothing
//!   was applied that was not durable);
//! * after the run the real backend, reopened from its files, holds exactly the batches that
//!   reached the store, in order, each once: every acknowledged call, append, summary and
//!   restore with the very events the host was given, and nothing half-written; after a crash
//!   that is a prefix of the fault-free log;
//! * `verify` passes (the library's, and `ctxlog verify` in-process on the durable backends),
//!   the session reopens to the replayed state and takes another call.
//!
//! Beside the sweep: a failed `put_blob` keeps the payload inline and the provider gets the
//! same request; a failed snapshot write costs only a replay.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ctxlog::codec;
use ctxlog::event::Event;
use ctxlog::message::{Block, Content, MediaData, MediaSource, Message};
use ctxlog::replay::{replay, verify, Mode};
use ctxlog::session::{Prepared, Produced};
use ctxlog::time::Millis;
use ctxlog::{Config, MemoryStore, Session, SessionError, Store, StoreError, StreamId, Timestamp, Version, WireFormat};
use ctxlog_store_fs::FsStore;
use ctxlog_store_sled::SledStore;
use ctxlog_store_sqlite::SqliteStore;
use ctxlog_tests::engine_fixtures::{Wire, T0};
use ctxlog_tests::faulty_store::{fs_frame, is_injected, tear_fs, Cut, Fault, FaultyStore, Injection, Interrupted, Op};
use tempfile::TempDir;

const SESSION: &str = "00000000-0000-0000-0000-0000000fa017";
const STEP_MS: u64 = 30_000;

fn session_id() -> StreamId {
    SESSION.parse().unwrap()
}

// ---------------------------------------------------------------------------------------------
// Backends

/// A real backend in a temp dir, opened afresh from its files each time.
trait Backend {
    fn open(&self) -> Box<dyn Store>;
    /// The `--store` URL of the CLI (durable backends only).
    fn url(&self) -> Option<String>;
    /// The directory of an fs store.
    fn fs_dir(&self) -> Option<&Path> {
        None
    }
}

struct Mem(Arc<MemoryStore>);
struct Sqlite(TempDir);
struct Fs(TempDir);
struct Sled(TempDir);

fn temp_dir() -> TempDir {
    tempfile::tempdir().unwrap()
}

impl Backend for Mem {
    fn open(&self) -> Box<dyn Store> {
        Box::new(Arc::clone(&self.0))
    }
    fn url(&self) -> Option<String> {
        None
    }
}

impl Sqlite {
    fn path(&self) -> PathBuf {
        self.0.path().join("ctxlog.db")
    }
}

impl Backend for Sqlite {
    fn open(&self) -> Box<dyn Store> {
        Box::new(SqliteStore::open(self.path()).unwrap())
    }
    fn url(&self) -> Option<String> {
        Some(format!("sqlite:{}", self.path().display()))
    }
}

impl Backend for Fs {
    fn open(&self) -> Box<dyn Store> {
        Box::new(FsStore::open(self.0.path()).unwrap())
    }
    fn url(&self) -> Option<String> {
        Some(format!("fs:{}", self.0.path().display()))
    }
    fn fs_dir(&self) -> Option<&Path> {
        Some(self.0.path())
    }
}

impl Sled {
    fn path(&self) -> PathBuf {
        self.0.path().join("sled")
    }
}

impl Backend for Sled {
    fn open(&self) -> Box<dyn Store> {
        Box::new(SledStore::open(self.path()).unwrap())
    }
    fn url(&self) -> Option<String> {
        Some(format!("sled:{}", self.path().display()))
    }
}

fn fresh(name: &str) -> Box<dyn Backend> {
    match name {
        "mem" => Box::new(Mem(Arc::new(MemoryStore::new()))),
        "sqlite" => Box::new(Sqlite(temp_dir())),
        "fs" => Box::new(Fs(temp_dir())),
        "sled" => Box::new(Sled(temp_dir())),
        other => panic!("unknown backend {other}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The representative run

/// One host action.
#[derive(Debug, Clone)]
enum Step {
    Create,
    Append(Vec<Message>),
    /// plan → render (inlines blobs) → commit.
    Call,
    /// plan → abort.
    Abort,
    /// summary_job → prepare with the extractive summarizer.
    Prepare,
    Snapshot,
    /// Drop the session and open it again from the store.
    Reopen,
    /// Restore the first edited message.
    Restore,
}

fn config() -> Config {
    // Small enough that calls flush, edit (truncate, remove, stub) and prepare summaries.
    Config { budget: 2_400, prepare_ratio: 0.5, protected_tool_results: 1, ..Config::default() }
}

/// A tool call, its result (`size` lines of code) and a user turn.
fn turn(w: Wire, i: usize, size: usize) -> Vec<Message> {
    let id = format!("t{i}");
    vec![
        w.calls(&format!("step {i}: reading"), &[&id], "read_file"),
        w.result(&id, &format!("fn f{i}() {{}} ").repeat(size)),
        w.user(&format!("step {i}: {}", "keep going and mind the tests ".repeat(6))),
    ]
}

fn script() -> Vec<Step> {
    let w = Wire(WireFormat::Anthropic);
    vec![
        Step::Create,
        Step::Append(vec![w.system("You are a careful coding agent."), w.pinned_user("The project is in /srv/app.")]),
        Step::Append(vec![w.user_with_image(&["this is the failing screen", "please fix it"])]),
        Step::Call,
        Step::Append(turn(w, 1, 120)),
        Step::Call,
        Step::Append(turn(w, 2, 120)),
        Step::Call,
        Step::Snapshot,
        Step::Append(turn(w, 3, 120)),
        Step::Abort,
        Step::Call,
        // Over the soft threshold: a summary is prepared, and the next call flushes it.
        Step::Prepare,
        Step::Reopen,
        Step::Append(turn(w, 4, 120)),
        Step::Call,
        // Over the hard threshold: the ladder edits, and one edit is undone.
        Step::Append(turn(w, 5, 240)),
        Step::Call,
        Step::Restore,
        Step::Call,
        Step::Append(turn(w, 6, 120)),
        Step::Call,
        Step::Prepare,
        Step::Snapshot,
        Step::Append(turn(w, 7, 120)),
        Step::Call,
    ]
}

/// Something the store acknowledged to the host.
#[derive(Debug, Clone, PartialEq)]
struct Ack {
    step: usize,
    /// Stream version after the write.
    version: Version,
    /// The call number, for a commit.
    call: Option<u64>,
    /// The batch, when the session reports it (commit, prepare, restore).
    events: Option<Vec<Event>>,
}

type Faulty = FaultyStore<Box<dyn Store>>;

/// A host driving the script over a (possibly faulty) store.
struct Host<'a> {
    store: &'a Faulty,
    session: Option<Session<&'a Faulty>>,
    now: Millis,
    acks: Vec<Ack>,
    /// Every store error the host saw, with its step.
    errors: Vec<(usize, String)>,
    /// A fault showed up somewhere the host can see it (error, inline fallback, missing blob).
    fault_visible: bool,
    /// What the provider was sent, per committed call.
    requests: Vec<Vec<String>>,
    /// Retry a failed step once (else go on with the next one).
    retry: bool,
    /// Retries that found the first attempt had reached the store (`Conflict`/`Exists`).
    conflicts: usize,
}

impl<'a> Host<'a> {
    fn new(store: &'a Faulty) -> Self {
        Host {
            store,
            session: None,
            now: T0,
            acks: Vec::new(),
            errors: Vec::new(),
            fault_visible: false,
            requests: Vec::new(),
            retry: true,
            conflicts: 0,
        }
    }

    fn session(&mut self) -> &mut Session<&'a Faulty> {
        self.session.as_mut().expect("a step needs a session but none is open")
    }

    fn exec(&mut self, index: usize, step: &Step) -> Result<(), SessionError> {
        match step {
            Step::Create => {
                let s = Session::create(
                    self.store,
                    session_id(),
                    WireFormat::Anthropic,
                    config(),
                    Timestamp::from_millis(self.now),
                )?;
                self.session = Some(s);
                self.acks.push(Ack { step: index, version: 1, call: None, events: None });
            }
            Step::Append(messages) => {
                let appended = self.session().append(messages.clone())?;
                if !appended.inline_fallbacks.is_empty() {
                    assert!(
                        appended.inline_fallbacks.iter().all(|why| why.contains("injected fault")),
                        "unexpected inline fallback: {:?}",
                        appended.inline_fallbacks
                    );
                    self.fault_visible = true;
                }
                self.acks.push(Ack { step: index, version: appended.version, call: None, events: None });
            }
            Step::Call => {
                let now = self.now;
                let s = self.session();
                let plan = s.plan(Timestamp::from_millis(now))?;
                let call = plan.call();
                let (request, missing) = s.render_plan(&plan);
                let committed = s.commit(plan, Timestamp::from_millis(now), None)?;
                if !missing.is_empty() {
                    self.fault_visible = true;
                }
                self.requests.push(request);
                self.now += STEP_MS;
                self.acks.push(Ack {
                    step: index,
                    version: committed.version,
                    call: Some(call),
                    events: Some(committed.events),
                });
            }
            Step::Abort => {
                let now = self.now;
                let s = self.session();
                let plan = s.plan(Timestamp::from_millis(now))?;
                s.abort(plan);
            }
            Step::Prepare => {
                let s = self.session();
                if let Some(job) = s.summary_job() {
                    let text = s.summarize(&job)?;
                    if let Prepared::Written(c) = s.prepare(&job, text, Produced::extractive())? {
                        self.acks.push(Ack { step: index, version: c.version, call: None, events: Some(c.events) });
                    }
                }
            }
            Step::Snapshot => self.session().snapshot()?,
            Step::Reopen => {
                self.session = None;
                self.session = Some(Session::open(self.store, session_id())?);
            }
            Step::Restore => {
                let s = self.session();
                let seq = (0..s.state().message_count())
                    .find(|&q| s.state().entry(q).is_some_and(|e| e.edit.is_some()))
                    .expect("the run edits a message before it restores one");
                let c = s.restore(seq, "faults suite", "bring it back")?;
                self.acks.push(Ack { step: index, version: c.version, call: None, events: Some(c.events) });
            }
        }
        Ok(())
    }

    /// Runs the script with the host's recovery policy; stops when the store crashed.
    fn run(&mut self, steps: &[Step]) {
        for (i, step) in steps.iter().enumerate() {
            let Err(first) = self.exec(i, step) else { continue };
            self.fault_visible = true;
            let injected = matches!(&first, SessionError::Store(e) if is_injected(e));
            assert!(injected, "step {i} {step:?}: expected the injected store error, got {first:?}");
            self.errors.push((i, first.to_string()));
            if self.store.crashed() {
                return;
            }
            // A failed command must leave the live state equal to the stored log's fold.
            if let Some(s) = &self.session {
                assert_state_is_fold(self.store.inner().as_ref(), s.state());
            }
            if !self.retry {
                continue;
            }
            // The host retries once; a Conflict/Exists means the first attempt did reach the
            // store (its reply was lost), so the host reopens the session from the log.
            match self.exec(i, step) {
                Ok(()) => {}
                Err(SessionError::Store(StoreError::Conflict { .. }) | SessionError::Exists(_)) => {
                    self.conflicts += 1;
                    self.session = Some(Session::open(self.store, session_id()).unwrap());
                }
                Err(e) => panic!("step {i} {step:?}: the retry failed: {e:?}"),
            }
        }
    }
}

/// `state` is the strict replay of `store` up to `state`'s version.
fn assert_state_is_fold(store: &dyn Store, state: &ctxlog::State) {
    let until = state.version();
    let replayed = replay(store, session_id(), Mode::Strict, Some(until)).unwrap().state;
    assert!(replayed == *state, "after a failed command the live state differs from the log's fold at {until}");
}

fn log_records(store: &dyn Store) -> Vec<Vec<u8>> {
    store.read(session_id(), 1, usize::MAX).unwrap().into_iter().map(|r| r.record.into_bytes()).collect()
}

fn log_events(store: &dyn Store) -> Vec<Event> {
    store
        .read(session_id(), 1, usize::MAX)
        .unwrap()
        .iter()
        .map(|r| codec::decode(session_id(), r.version, &r.record).unwrap())
        .collect()
}

/// The fault-free run on one backend.
struct Reference {
    trace: Vec<Op>,
    log: Vec<Vec<u8>>,
    acks: Vec<Ack>,
    requests: Vec<Vec<String>>,
}

fn reference(backend: &str) -> Reference {
    let b = fresh(backend);
    let store = FaultyStore::new(b.open());
    let mut host = Host::new(&store);
    host.run(&script());
    assert!(host.errors.is_empty());
    let (acks, requests) = (host.acks, host.requests);
    drop(host.session);
    let trace = store.trace();
    let log = log_records(store.inner().as_ref());
    let events = log_events(store.inner().as_ref());
    let has = |f: fn(&Event) -> bool| events.iter().any(f);
    assert!(has(|e| matches!(e, Event::Flushed(_))), "the run must flush");
    assert!(has(|e| matches!(e, Event::Edited(_))), "the run must edit");
    assert!(has(|e| matches!(e, Event::SummaryPrepared(_))), "the run must prepare a summary");
    assert!(has(|e| matches!(e, Event::Restored(_))), "the run must restore");
    for op in [Op::Append, Op::Read, Op::Head, Op::PutBlob, Op::GetBlob, Op::PutSnapshot, Op::GetSnapshot] {
        assert!(trace.contains(&op), "the run never calls {op}");
    }
    Reference { trace, log, acks, requests }
}

// ---------------------------------------------------------------------------------------------
// Checks after a fault

/// Checks the reopened real backend against what reached the store and what the host was
/// told, then reopens the session, makes one more call and runs `verify` (also the CLI's).
fn check_after(
    backend: &dyn Backend,
    store: Box<dyn Store>,
    journal: &[ctxlog_tests::faulty_store::Forwarded],
    host_acks: &[Ack],
    reference: Option<&Reference>,
) {
    let id = session_id();
    // Exactly the batches that reached the store, in order, each once.
    let expected: Vec<Vec<u8>> = journal
        .iter()
        .filter(|f| f.stored.is_ok())
        .flat_map(|f| f.records.iter().map(|r| r.as_bytes().to_vec()))
        .collect();
    let log = log_records(store.as_ref());
    assert!(
        log == expected,
        "the log ({} records) is not the {} records that reached the store",
        log.len(),
        expected.len()
    );
    for f in journal.iter().filter(|f| f.acknowledged) {
        assert!(f.stored.is_ok(), "an append was acknowledged that the store refused");
    }
    if let Some(r) = reference {
        assert!(r.log.starts_with(&log), "after a crash the log must be a prefix of the fault-free log");
    }
    let head = store.head(id).unwrap().unwrap_or(0);
    assert_eq!(head, log.len() as Version);
    if head == 0 {
        assert!(host_acks.is_empty(), "acknowledged writes but no session in the store");
        let s =
            Session::create(store.as_ref(), id, WireFormat::Anthropic, config(), Timestamp::from_millis(T0)).unwrap();
        assert_eq!(s.state().version(), 1);
        return;
    }
    // Every acknowledged write is there with the events the host was given.
    let events = log_events(store.as_ref());
    let replayed = replay(store.as_ref(), id, Mode::Strict, None).unwrap();
    for ack in host_acks {
        assert!(ack.version <= head, "acknowledged version {} is beyond the head {head}", ack.version);
        if let Some(batch) = &ack.events {
            let first = ack.version as usize - batch.len();
            assert!(events[first..ack.version as usize] == batch[..], "acknowledged batch at {} differs", ack.version);
        }
        if let Some(call) = ack.call {
            let records: Vec<_> = replayed.timeline.iter().filter(|r| r.call == call).collect();
            assert_eq!(records.len(), 1, "call {call} is in the timeline {} times", records.len());
            assert_eq!(records[0].version, ack.version, "call {call}");
        }
    }
    let report = verify(store.as_ref(), id).unwrap();
    assert!(report.ok(), "verify after the fault: {:?}", report.problems);

    // The session reopens to the replayed state and goes on.
    let mut s = Session::open(store.as_ref(), id).unwrap();
    assert!(*s.state() == replayed.state, "the reopened session differs from a full replay");
    let now = s.state().last_request_at().unwrap_or(T0) + STEP_MS;
    s.append(turn(Wire(WireFormat::Anthropic), 99, 10)).unwrap();
    let plan = s.plan(Timestamp::from_millis(now)).unwrap();
    s.commit(plan, Timestamp::from_millis(now), None).unwrap();
    drop(s);
    let report = verify(store.as_ref(), id).unwrap();
    assert!(report.ok(), "verify after the next call: {:?}", report.problems);
    drop(store);
    if let Some(url) = backend.url() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = ctxlog_tools::run(["ctxlog", "verify", "--store", &url], &mut out, &mut err);
        assert_eq!(code, 0, "ctxlog verify: {}", String::from_utf8_lossy(&err));
    }
}

/// One run with `injection` on a fresh `backend`; `cut` leaves a short write on fs.
fn run_one(backend_name: &str, injection: Injection, cut: Option<Cut>, reference: &Reference) {
    let backend = fresh(backend_name);
    let store = FaultyStore::with(backend.open(), injection);
    let mut host = Host::new(&store);
    host.run(&script());
    assert!(store.fired(), "{injection} never fired");
    let (acks, errors, visible, requests) = (host.acks, host.errors, host.fault_visible, host.requests);
    // A retried write conflicts exactly when its first attempt reached the store.
    let expected_conflicts = usize::from(injection.fault == Fault::LostAck && injection.op == Op::Append);
    if matches!(injection.fault, Fault::Fail | Fault::LostAck) {
        assert_eq!(host.conflicts, expected_conflicts, "{injection}: conflicts on retry");
    }
    drop(host.session);
    let journal = store.forwarded();
    let interrupted = store.interrupted();
    match injection.fault {
        Fault::Delay(_) => {
            assert!(errors.is_empty(), "a slow store caused errors: {errors:?}");
            assert!(acks == reference.acks, "a slow store changed what was acknowledged");
            assert!(requests == reference.requests, "a slow store changed what the provider was sent");
        }
        _ => assert!(visible, "{injection} fired but the host never saw it"),
    }
    drop(store.into_inner());
    if let (Some(cut), Some(write)) = (cut, &interrupted) {
        tear(backend.as_ref(), write, cut);
    }
    let crash_reference = injection.fault.crashes().then_some(reference);
    // CLI verify after a repaired torn write is the repair report's business, not this suite's.
    let cli_backend: Box<dyn Backend> = if cut.is_some() { Box::new(NoCli(backend)) } else { backend };
    check_after(cli_backend.as_ref(), cli_backend.open(), &journal, &acks, crash_reference);
}

/// A backend whose CLI check is skipped.
struct NoCli(Box<dyn Backend>);

impl Backend for NoCli {
    fn open(&self) -> Box<dyn Store> {
        self.0.open()
    }
    fn url(&self) -> Option<String> {
        None
    }
    fn fs_dir(&self) -> Option<&Path> {
        self.0.fs_dir()
    }
}

/// Leaves a short write in the closed fs store and checks that the next open repairs it.
fn tear(backend: &dyn Backend, write: &Interrupted, cut: Cut) {
    let dir = backend.fs_dir().expect("short writes are simulated on fs only").to_path_buf();
    let stream_file = dir.join("streams").join(format!("{SESSION}.log"));
    let before = std::fs::read(&stream_file).unwrap_or_default();
    let (path, n) = tear_fs(&dir, write, cut);
    let store = FsStore::open(&dir).unwrap();
    assert!(store.damaged().is_empty(), "a short write was taken for damage: {:?}", store.damaged());
    match write {
        Interrupted::Append { .. } if n > 0 => {
            let cuts = store.recovered();
            assert_eq!(cuts.len(), 1, "the torn frame ({n} bytes, {cut:?}) was not repaired: {cuts:?}");
            assert_eq!(cuts[0].bytes_dropped, n as u64);
            assert_eq!(cuts[0].offset, before.len() as u64);
        }
        _ => assert!(store.recovered().is_empty()),
    }
    drop(store);
    assert_eq!(std::fs::read(&stream_file).unwrap_or_default(), before, "the stream file after repair");
    assert!(!path.starts_with(dir.join("tmp")) || !path.exists(), "open left the torn temp file {}", path.display());
}

/// Every fault at every position of the reference trace on `backend`.
fn sweep(backend: &str) {
    let reference = reference(backend);
    let mut counts = std::collections::BTreeMap::<Op, usize>::new();
    let positions: Vec<(Op, usize)> = reference
        .trace
        .iter()
        .map(|&op| {
            let n = counts.entry(op).or_insert(0);
            *n += 1;
            (op, *n - 1)
        })
        .collect();
    let faults = [Fault::Fail, Fault::LostAck, Fault::Delay(Duration::from_millis(1)), Fault::Crash, Fault::CrashAfter];
    let mut runs = Vec::new();
    for &(op, nth) in &positions {
        for fault in faults {
            runs.push((Injection { op, nth, fault }, None));
        }
        if backend == "fs" && op.writes() {
            let cuts: &[Cut] = if op == Op::Append { &Cut::ALL } else { &[Cut::Half] };
            for &cut in cuts {
                runs.push((Injection { op, nth, fault: Fault::Torn }, Some(cut)));
            }
        }
    }
    let mut failures = Vec::new();
    for (injection, cut) in &runs {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run_one(backend, *injection, *cut, &reference))) {
            let msg =
                panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
            failures.push(format!("{injection} {cut:?}: {}", msg.unwrap_or_default()));
        }
    }
    let kinds: Vec<String> = counts.iter().map(|(op, n)| format!("{n} {op}")).collect();
    println!(
        "faults {backend}: {} operations in the run ({}), {} injected runs, {} failures",
        positions.len(),
        kinds.join(", "),
        runs.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{backend}: {} of {} runs failed:\n{}",
        failures.len(),
        runs.len(),
        failures.join("\n")
    );
}

#[test]
fn every_fault_at_every_operation_mem() {
    sweep("mem");
}

#[test]
fn every_fault_at_every_operation_sqlite() {
    sweep("sqlite");
}

#[test]
fn every_fault_at_every_operation_fs() {
    sweep("fs");
}

#[test]
fn every_fault_at_every_operation_sled() {
    sweep("sled");
}

// ---------------------------------------------------------------------------------------------
// Focused checks

/// The fault-free run issues the same store operations on every backend, so a position means
/// the same thing everywhere.
#[test]
fn the_run_is_the_same_on_every_backend() {
    let mem = reference("mem");
    for backend in ["sqlite", "fs", "sled"] {
        let other = reference(backend);
        assert_eq!(other.trace, mem.trace, "{backend}");
        assert!(other.log == mem.log, "{backend}: the log differs");
        assert!(other.acks == mem.acks, "{backend}: the acknowledgements differ");
    }
}

/// The wrapper fires once, where told; a crash stops all forwarding; a lost reply reaches the
/// store; a fail does not.
#[test]
fn faulty_store_fires_exactly_where_told() {
    use ctxlog::store::{ExpectedVersion, Record};
    let s = session_id();
    let rec = |t: &str| Record::seal(t.as_bytes().to_vec());
    let inject = |op, nth, fault| {
        FaultyStore::with(Box::new(MemoryStore::new()) as Box<dyn Store>, Injection { op, nth, fault })
    };

    let f = inject(Op::Append, 1, Fault::Fail);
    assert_eq!(f.append(s, ExpectedVersion::Exact(0), &[rec("a")]).unwrap(), 1);
    let e = f.append(s, ExpectedVersion::Exact(1), &[rec("b")]).unwrap_err();
    assert!(is_injected(&e) && e.to_string().contains("append #1"), "{e}");
    assert_eq!(f.inner().head(s).unwrap(), Some(1), "a failed append writes nothing");
    assert_eq!(f.append(s, ExpectedVersion::Exact(1), &[rec("b")]).unwrap(), 2, "later appends work");
    assert_eq!(f.trace(), [Op::Append; 3]);

    let f = inject(Op::Append, 0, Fault::LostAck);
    assert!(f.append(s, ExpectedVersion::Exact(0), &[rec("a")]).is_err());
    assert_eq!(f.inner().head(s).unwrap(), Some(1), "a lost reply's write is durable");
    let journal = f.forwarded();
    assert_eq!((journal.len(), journal[0].acknowledged, journal[0].stored.clone()), (1, false, Ok(1)));
    assert!(matches!(f.append(s, ExpectedVersion::Exact(0), &[rec("a")]), Err(StoreError::Conflict { .. })));

    let f = inject(Op::Head, 0, Fault::Crash);
    assert!(f.head(s).is_err());
    assert!(f.crashed());
    assert!(f.append(s, ExpectedVersion::Exact(0), &[rec("a")]).is_err(), "nothing is forwarded after a crash");
    assert_eq!(f.inner().head(s).unwrap(), None);
    assert!(f.forwarded().is_empty());

    let f = inject(Op::PutBlob, 0, Fault::CrashAfter);
    let e = f.put_blob(b"png").unwrap_err();
    assert!(e.to_string().contains("reached the store"), "{e}");
    assert_eq!(f.inner().get_blob(&ctxlog::BlobId::of(b"png")).unwrap().as_deref(), Some(&b"png"[..]));
    assert!(f.get_blob(&ctxlog::BlobId::of(b"png")).is_err());

    let f = inject(Op::Append, 0, Fault::Torn);
    assert!(f.append(s, ExpectedVersion::Exact(0), &[rec("a"), rec("b")]).is_err());
    assert_eq!(f.interrupted(), Some(Interrupted::Append { stream: s, first: 1, records: vec![rec("a"), rec("b")] }));
    assert_eq!(f.inner().head(s).unwrap(), None);

    let f = inject(Op::Read, 5, Fault::Fail);
    for _ in 0..3 {
        f.read(s, 1, 10).unwrap();
    }
    assert!(!f.fired(), "an injection past the run never fires");
}

/// The independent frame encoder used for short writes produces exactly what store-fs writes.
#[test]
fn fs_frame_matches_what_store_fs_writes() {
    let b = fresh("fs");
    let store = FaultyStore::new(b.open());
    let mut host = Host::new(&store);
    host.run(&script());
    drop(host);
    let journal = store.forwarded();
    drop(store);
    let mut expected = Vec::new();
    let mut first = 1;
    for f in &journal {
        expected.extend(fs_frame(f.stream, first, &f.records));
        first += f.records.len() as Version;
    }
    let file = std::fs::read(b.fs_dir().unwrap().join("streams").join(format!("{SESSION}.log"))).unwrap();
    assert!(file == expected, "the independent frame encoder disagrees with store-fs");
}

fn inline_payloads(m: &Message) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    if let Some(Content::Blocks(blocks)) = &m.content {
        for b in blocks {
            if let Block::Media { source: MediaSource::Base64 { data, .. }, .. } = b {
                match data {
                    MediaData::Inline(b64) => out.push((true, b64.clone())),
                    MediaData::Blob(r) => out.push((false, r.id.to_string())),
                }
            }
        }
    }
    out
}

/// A blob that cannot be written stays inline in the message: the append succeeds and says
/// why, the provider gets the same image bytes, and the log verifies.
#[test]
fn failed_put_blob_keeps_the_payload_inline() {
    for backend in ["mem", "sqlite", "fs", "sled"] {
        let reference = reference(backend);
        let b = fresh(backend);
        let store = FaultyStore::with(b.open(), Injection { op: Op::PutBlob, nth: 0, fault: Fault::Fail });
        let mut host = Host::new(&store);
        host.run(&script());
        assert!(host.errors.is_empty(), "{backend}: {:?}", host.errors);
        assert!(host.fault_visible, "{backend}: the fallback was not reported");
        // The provider gets the same bytes for the image. (Later requests may differ: an inline
        // payload's dimensions are not known to the estimator, so it costs the flat image
        // price and the session compacts earlier; see RELIABILITY.md.)
        assert!(host.requests[0] == reference.requests[0], "{backend}: the first request differs");
        drop(host);
        let inner = store.into_inner();
        let events = log_events(inner.as_ref());
        let image = events
            .iter()
            .find_map(|e| match e {
                Event::MessageAppended(m) if !inline_payloads(&m.message).is_empty() => {
                    Some(inline_payloads(&m.message))
                }
                _ => None,
            })
            .unwrap();
        assert_eq!(image.len(), 1);
        assert!(image[0].0, "{backend}: the image must be stored inline, found {:?}", image[0]);
        assert_eq!(image[0].1, ctxlog_tests::engine_fixtures::PNG_1X1);
        let report = verify(inner.as_ref(), session_id()).unwrap();
        assert!(report.ok(), "{backend}: {:?}", report.problems);
        assert_eq!(report.blobs, 0, "{backend}: no blob is referenced");
    }
}

/// A snapshot write that fails costs a longer replay at the next open, nothing else: the run
/// goes on to the same log, the same acknowledgements and the same requests, and the session
/// reopens to the same state.
#[test]
fn failed_snapshot_write_costs_only_a_replay() {
    for backend in ["mem", "sqlite", "fs", "sled"] {
        let reference = reference(backend);
        let snapshots = reference.trace.iter().filter(|&&op| op == Op::PutSnapshot).count();
        assert_eq!(snapshots, 2);
        // Records read by the whole run plus a final open, and the state that open finds.
        let run = |injection: Option<Injection>| {
            let b = fresh(backend);
            let store = match injection {
                Some(i) => FaultyStore::with(b.open(), i),
                None => FaultyStore::new(b.open()),
            };
            let mut host = Host::new(&store);
            host.retry = false;
            host.run(&script());
            assert!(host.acks == reference.acks, "{backend}: a snapshot failure changed what was acknowledged");
            assert!(host.requests == reference.requests, "{backend}: a snapshot failure changed a request");
            let errors = host.errors.len();
            drop(host);
            let state = Session::open(&store, session_id()).unwrap().state().clone();
            assert!(log_records(store.inner().as_ref()) == reference.log, "{backend}: the log differs");
            let report = verify(store.inner().as_ref(), session_id()).unwrap();
            assert!(report.ok(), "{backend}: {:?}", report.problems);
            (store.records_read(), state, errors)
        };
        let (clean_reads, clean_state, _) = run(None);
        for nth in 0..snapshots {
            let (reads, state, errors) = run(Some(Injection { op: Op::PutSnapshot, nth, fault: Fault::Fail }));
            assert_eq!(errors, 1, "{backend}: the failed snapshot write is reported to the host");
            assert!(state == clean_state, "{backend}: the state after a failed snapshot write differs");
            assert!(
                reads > clean_reads,
                "{backend} snapshot #{nth}: {reads} records replayed, {clean_reads} without the fault"
            );
        }
    }
}
