//! The multi-worker drill: a fleet of worker processes shares one PostgreSQL log while it is
//! being shot at.
//!
//! The binary starts a private cluster (fsync on), creates the sessions, then re-executes
//! itself as WORKERS worker processes (env `CTXLOG_DRILL_WORKER=<url>`). Each worker reads
//! `job <id> <session> <at>` lines and serves one call of that session with the README's retry
//! loop (`store-postgres/examples/serve_call.rs`): append a turn (a tool call, its result and
//! a user line naming the job), plan, dispatch, commit; it prints `ack <id> <version>
//! <digest>` once the commit is durable, `retry <id> <error>` for every conflict or outage it
//! rode out. Calls are dealt at random to idle workers; a tenth of the sessions are hammered
//! by two workers at once. Workers are SIGKILLed at random moments and restarted; the server
//! is restarted with `pg_ctl restart -m immediate` halfway through and crashed again
//! (`stop -m immediate`, 1.5 s down, start) at three quarters, so workers see it unavailable.
//!
//! At the end every acknowledged call must be in the log exactly once (its turn appended once,
//! a `RequestServed` with the acknowledged digest at the acknowledged version), no turn may be
//! in the log twice, and every session must pass `verify` (invariants, every served view
//! re-rendered to its recorded digest). Without PostgreSQL it is skipped, except in CI.
//!
//! Knobs: `CTXLOG_DRILL_SESSIONS` (200), `CTXLOG_DRILL_CALLS` (calls per session, 10),
//! `CTXLOG_DRILL_WORKERS` (8), `CTXLOG_DRILL_SEED`. The last line is `N passed, M failed`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../../store-postgres/examples/serve_call.rs"]
mod serve_call;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use ctxlog::event::Event;
use ctxlog::internal::wire::parse_message;
use ctxlog::message::{Content, Role};
use ctxlog::store::{StoreError, StreamId};
use ctxlog::{Config, Session, Timestamp, WireFormat};
use ctxlog_store_postgres::test_support::{self, Cluster, ClusterError, ClusterOptions};
use ctxlog_store_postgres::{PgOptions, PgStore};
use serve_call::{serve_call, Reply};

const WORKER_ENV: &str = "CTXLOG_DRILL_WORKER";
const TEST_NAME: &str = "postgres_multi_worker_drill";

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The turn a job appends: a tool call, its result, and a user line naming the job.
fn job_turn(job: u64) -> Vec<ctxlog::Message> {
    let call = format!(
        r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"j{job}","name":"read_file","input":{{"path":"f{job}.rs"}}}}]}}"#
    );
    let result = format!(
        r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"j{job}","content":"{}"}}]}}"#,
        "fn x() {} ".repeat(40)
    );
    let ask = format!(r#"{{"role":"user","content":"job {job}: keep going"}}"#);
    [call, result, ask].iter().map(|j| parse_message(j).unwrap()).collect()
}

/// The job a user message names, if it is one of ours.
fn job_of(message: &ctxlog::Message) -> Option<u64> {
    match (&message.role, &message.content) {
        (Role::User, Some(Content::Text(t))) => t.strip_prefix("job ")?.split(':').next()?.parse().ok(),
        _ => None,
    }
}

fn worker(url: &str) {
    // A short resolve window: a batch cut off by the outage is reported `Unavailable` (outcome
    // unknown) instead of waited out, so the retry loop's "did my turn land?" path runs too.
    let opts = PgOptions { pool_size: 2, resolve_window: Duration::from_millis(200), ..PgOptions::default() };
    let deadline = Instant::now() + Duration::from_secs(60);
    // The server may be restarting right now.
    let store = loop {
        match PgStore::open_with(url, opts.clone()) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                println!("retry - {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("worker: open: {e}"),
        }
    };
    let mut sessions: BTreeMap<StreamId, Session<&PgStore>> = BTreeMap::new();
    println!("ready");
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        let (job, id, at): (u64, StreamId, u64) = (w[1].parse().unwrap(), w[2].parse().unwrap(), w[3].parse().unwrap());
        // Said at once, so a worker killed while it rides out an outage still reports it.
        let retry = |e: &dyn std::fmt::Display| {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "retry {job} {e}");
            let _ = out.flush();
        };
        let result = (|| {
            let session = match sessions.entry(id) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => {
                    let mut tries = 0;
                    let s = loop {
                        match Session::open(&store, id) {
                            Ok(s) => break s,
                            Err(ctxlog::SessionError::Store(e @ StoreError::Unavailable { .. })) if tries < 50 => {
                                retry(&e);
                                tries += 1;
                                std::thread::sleep(Duration::from_millis(100));
                            }
                            Err(e) => return Err(format!("open: {e}")),
                        }
                    };
                    v.insert(s)
                }
            };
            let at = Timestamp::from_millis(at);
            let dispatch = |_: &[String]| Ok::<_, String>(Reply { at, usage: None });
            let done =
                serve_call(session, &job_turn(job), || at, dispatch, |e| retry(e)).map_err(|e| format!("{e:?}"))?;
            let digest = match done.events.last() {
                Some(Event::RequestServed(s)) => s.digest.clone(),
                other => return Err(format!("a commit ending in {other:?}")),
            };
            Ok((done.version, digest))
        })();
        match result {
            Ok((version, digest)) => println!("ack {job} {version} {digest}"),
            Err(e) => println!("fail {job} {}", e.replace('\n', " ")),
        }
        // Prepare a summary when the engine asks (best effort: another worker may win the race).
        if let Some(session) = sessions.get_mut(&id) {
            if let Some(job) = session.summary_job() {
                let text = session.summarize(&job).unwrap();
                if session.prepare(&job, text, ctxlog::session::Produced::extractive()).is_err() {
                    sessions.remove(&id);
                }
            }
        }
    }
}

/// One worker process and the jobs it holds.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    generation: u64,
    ready: bool,
    jobs: BTreeSet<u64>,
}

enum Msg {
    Line(usize, u64, String),
}

fn spawn_worker(slot: usize, generation: u64, url: &str, tx: &mpsc::Sender<Msg>) -> Worker {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(WORKER_ENV, url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take().unwrap();
    let tx = tx.clone();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        while r.read_until(b'\n', &mut buf).unwrap_or(0) > 0 {
            // A line cut by the kill has no newline: nobody was told.
            if buf.ends_with(b"\n") {
                let _ = tx.send(Msg::Line(slot, generation, String::from_utf8_lossy(&buf).trim_end().to_owned()));
            }
            buf.clear();
        }
    });
    Worker { child, stdin, generation, ready: false, jobs: BTreeSet::new() }
}

#[derive(Default)]
struct Tally {
    acked: BTreeMap<u64, (StreamId, u64, String)>,
    killed: BTreeSet<u64>,
    failed: Vec<String>,
    retries: BTreeMap<&'static str, u64>,
    other_retries: Vec<String>,
    kills: u64,
}

fn drill(cluster: &mut Cluster, seed: u64) -> Result<String, String> {
    let (sessions_n, calls_n, workers_n) =
        (knob("CTXLOG_DRILL_SESSIONS", 200), knob("CTXLOG_DRILL_CALLS", 10), knob("CTXLOG_DRILL_WORKERS", 8) as usize);
    let url = cluster.url();
    let store = PgStore::open(&url).map_err(|e| e.to_string())?;
    let mut rng = Rng(seed);
    let config = Config { budget: 1_500, ..Config::default() };
    let ids: Vec<StreamId> = (0..sessions_n).map(|_| StreamId::random()).collect();
    for id in &ids {
        Session::create(&store, *id, WireFormat::Anthropic, config.clone(), Timestamp::from_millis(0))
            .map_err(|e| e.to_string())?;
    }
    // A tenth of the sessions get two calls in flight at once, on two workers.
    let hammered: BTreeSet<usize> = (0..ids.len()).filter(|i| i % 10 == 3).collect();
    let mut dealt = vec![0u64; ids.len()];
    let mut in_flight = vec![0u64; ids.len()];
    let mut job_session: BTreeMap<u64, usize> = BTreeMap::new();
    let total = sessions_n * calls_n;

    let (tx, rx) = mpsc::channel();
    let mut workers: Vec<Worker> = (0..workers_n).map(|w| spawn_worker(w, 0, &url, &tx)).collect();
    let mut t = Tally::default();
    let mut next_job = 0u64;
    let mut next_kill = Instant::now() + Duration::from_millis(50 + rng.below(200));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(knob("CTXLOG_DRILL_TIMEOUT_SECS", 600));
    let acked_now = &AtomicU64::new(0);
    std::thread::scope(|scope| -> Result<(), String> {
        let mut cluster = Some(&mut *cluster);
        let mut restart = None;
        loop {
            let done = t.acked.len() + t.killed.len() + t.failed.len();
            if done as u64 == total {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("timed out with {done} of {total} calls finished"));
            }
            // Deal: every idle worker gets a random session that may take another call.
            for (w, worker) in workers.iter_mut().enumerate() {
                if !worker.ready || !worker.jobs.is_empty() {
                    continue;
                }
                let open: Vec<usize> = (0..ids.len())
                    .filter(|&s| {
                        let limit = if hammered.contains(&s) { 2 } else { 1 };
                        dealt[s] < calls_n && in_flight[s] < limit
                    })
                    .collect();
                if open.is_empty() {
                    break;
                }
                let s = open[rng.below(open.len() as u64) as usize];
                let job = next_job;
                next_job += 1;
                dealt[s] += 1;
                in_flight[s] += 1;
                job_session.insert(job, s);
                worker.jobs.insert(job);
                // Each call is served later than the last (per session), with jitter between workers.
                let at = 1_000_000 + dealt[s] * 60_000 + rng.below(1_000);
                writeln!(worker.stdin, "job {job} {} {at}", ids[s]).map_err(|e| format!("worker {w}: {e}"))?;
            }
            // Chaos: SIGKILL a random busy worker now and then, and start a new one in its slot.
            if Instant::now() >= next_kill {
                next_kill = Instant::now() + Duration::from_millis(50 + rng.below(200));
                let busy: Vec<usize> = (0..workers.len()).filter(|&w| !workers[w].jobs.is_empty()).collect();
                if !busy.is_empty() {
                    let w = busy[rng.below(busy.len() as u64) as usize];
                    let old = &mut workers[w];
                    old.child.kill().map_err(|e| e.to_string())?;
                    old.child.wait().map_err(|e| e.to_string())?;
                    t.kills += 1;
                    // Its job is not re-dealt: it may or may not have reached the log (once).
                    for job in std::mem::take(&mut old.jobs) {
                        t.killed.insert(job);
                        in_flight[job_session[&job]] -= 1;
                    }
                    let generation = old.generation + 1;
                    workers[w] = spawn_worker(w, generation, &url, &tx);
                }
            }
            // Halfway: the server goes down hard and comes back, with the fleet at work.
            // Three quarters in: a crash that keeps the server away for 1.5 s, so every worker
            // meets the outage (the restart above may be over before most notice it).
            if restart.is_none() && t.acked.len() as u64 >= total / 2 {
                let c = cluster.take().ok_or("cluster gone")?;
                restart = Some(scope.spawn(move || {
                    c.restart_immediate()?;
                    // Bounded: if the main loop ends (done or timed out) before three quarters
                    // are acknowledged, the crash still happens and the thread can be joined.
                    let deadline = std::time::Instant::now() + Duration::from_secs(120);
                    while acked_now.load(Ordering::Relaxed) < total * 3 / 4 && std::time::Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    c.pg_ctl(&["stop", "-w", "-m", "immediate"])?;
                    std::thread::sleep(Duration::from_millis(1_500));
                    c.start_again()
                }));
            }
            let Ok(Msg::Line(w, generation, line)) = rx.recv_timeout(Duration::from_millis(20)) else { continue };
            let words: Vec<&str> = line.splitn(3, ' ').collect();
            let job = words.get(1).and_then(|j| j.parse::<u64>().ok());
            match (words[0], job) {
                ("ready", _) if workers[w].generation == generation => workers[w].ready = true,
                ("ack", Some(job)) => {
                    let rest: Vec<&str> = words[2].split(' ').collect();
                    let s = job_session[&job];
                    // An ack read after the kill was still printed before it: it counts.
                    t.killed.remove(&job);
                    if workers[w].generation == generation && workers[w].jobs.remove(&job) {
                        in_flight[s] -= 1;
                    }
                    t.acked.insert(job, (ids[s], rest[0].parse().unwrap(), rest[1].to_owned()));
                    acked_now.store(t.acked.len() as u64, Ordering::Relaxed);
                }
                ("fail", Some(job)) => {
                    t.failed.push(line.clone());
                    if workers[w].generation == generation && workers[w].jobs.remove(&job) {
                        in_flight[job_session[&job]] -= 1;
                    }
                }
                ("retry", _) => {
                    let kind = if words[2].contains("version conflict") {
                        "conflict"
                    } else if words[2].contains("unavailable") {
                        "unavailable"
                    } else {
                        t.other_retries.push(line.clone());
                        "other"
                    };
                    *t.retries.entry(kind).or_default() += 1;
                }
                _ => {}
            }
        }
        match restart {
            Some(h) => h.join().map_err(|_| "restart thread panicked")?.map_err(|e| e.to_string()),
            None => Err("the server restart never happened".into()),
        }
    })?;
    for mut w in workers {
        drop(w.stdin);
        let _ = w.child.wait();
    }
    check(&store, &ids, &t)?;
    Ok(format!(
        "{} calls dealt to {workers_n} workers over {} sessions ({} hammered): {} acknowledged, {} killed in flight, \
         {} failed; {} SIGKILLs, 1 `pg_ctl restart -m immediate` and 1 crash with 1.5 s down; retries: {:?}; 0 lost, 0 duplicated; every session verifies \
         ({:.1} s)",
        total,
        ids.len(),
        hammered.len(),
        t.acked.len(),
        t.killed.len(),
        t.failed.len(),
        t.kills,
        t.retries,
        started.elapsed().as_secs_f64()
    ))
}

/// Every acknowledged call exactly once, no turn twice, every session verified.
fn check(store: &PgStore, ids: &[StreamId], t: &Tally) -> Result<(), String> {
    if t.retries.get("unavailable").copied().unwrap_or(0) == 0 {
        return Err(format!(
            "no worker noticed the outage: the drill did not test what it claims (retries {:?}, {} acked, {} killed)",
            t.retries,
            t.acked.len(),
            t.killed.len()
        ));
    }
    if !t.failed.is_empty() || !t.other_retries.is_empty() {
        return Err(format!("calls failed: {:?}; unexpected retried errors: {:?}", t.failed, t.other_retries));
    }
    let mut turns: BTreeMap<u64, Vec<(StreamId, u64)>> = BTreeMap::new();
    let mut served: BTreeMap<(StreamId, u64), String> = BTreeMap::new();
    for id in ids {
        let report = ctxlog::replay::verify(store, *id).map_err(|e| format!("verify {id}: {e}"))?;
        if !report.ok() {
            return Err(format!("session {id} does not verify: {:?}", report.problems));
        }
        ctxlog::replay::for_each_event(store, *id, 1, None, |version, ev| {
            match &ev {
                Event::MessageAppended(m) => {
                    if let Some(job) = job_of(&m.message) {
                        turns.entry(job).or_default().push((*id, version));
                    }
                }
                Event::RequestServed(s) => {
                    served.insert((*id, version), s.digest.clone());
                }
                _ => {}
            }
            Ok(())
        })
        .map_err(|e| format!("read {id}: {e}"))?;
    }
    let duplicated: Vec<_> = turns.iter().filter(|(_, at)| at.len() > 1).collect();
    if !duplicated.is_empty() {
        return Err(format!("turns in the log more than once: {duplicated:?}"));
    }
    for (job, (id, version, digest)) in &t.acked {
        match turns.get(job) {
            Some(at) if at[0].0 == *id && at[0].1 < *version => {}
            other => {
                return Err(format!("acknowledged job {job} (session {id}, version {version}): turn at {other:?}"))
            }
        }
        match served.get(&(*id, *version)) {
            Some(d) if d == digest => {}
            other => {
                return Err(format!(
                    "acknowledged job {job}: session {id} version {version} should be RequestServed with digest \
                     {digest}, found {other:?}"
                ))
            }
        }
    }
    Ok(())
}

fn main() {
    if let Ok(url) = std::env::var(WORKER_ENV) {
        worker(&url);
        return;
    }
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
    let seed = knob("CTXLOG_DRILL_SEED", 0).max(1);
    let seed = if seed > 1 {
        seed
    } else {
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
    };
    let mut cluster = match Cluster::start_with(ClusterOptions { fsync: true, ..ClusterOptions::default() }) {
        Ok(c) => c,
        Err(ClusterError::NotInstalled(why)) if !test_support::in_ci() => {
            println!("SKIPPED {TEST_NAME}: no PostgreSQL ({why}); to run it, {}", test_support::HOW_TO_ENABLE);
            println!("0 passed, 0 failed, 1 skipped");
            return;
        }
        Err(e) => {
            println!("{TEST_NAME}: FAILED: PostgreSQL is required (CI is set): {e}");
            println!("0 passed, 1 failed");
            std::process::exit(1);
        }
    };
    println!("{TEST_NAME}: seed {seed} (CTXLOG_DRILL_SEED={seed} to replay)");
    match drill(&mut cluster, seed) {
        Ok(summary) => {
            println!("{TEST_NAME}: ok: {summary}");
            println!("1 passed, 0 failed");
        }
        Err(e) => {
            println!("{TEST_NAME}: FAILED (seed {seed}): {e}");
            println!("0 passed, 1 failed");
            drop(cluster); // `exit` runs no destructors: stop the server first.
            std::process::exit(1);
        }
    }
}
