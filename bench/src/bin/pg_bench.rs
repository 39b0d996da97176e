//! `pg_bench`: the PostgreSQL store against a raw `INSERT`/`SELECT` loop with the same client
//! (`postgres` crate) on the same private server (fsync on, Unix socket), in the same run,
//! plus `pgbench`'s TPC-B-like figure on that server for context. Prints markdown tables.
//!
//! * `sessions`: W threads, each appending 1-record batches (300 bytes) to its own session,
//!   each append durable before the next. ctxlog: one `PgStore` shared by the threads (pool of
//!   W). Raw: one client per thread, autocommit `INSERT` into a table of the same shape.
//! * `hot`: W threads appending to one session, each reading the head and appending at it;
//!   losers get `Conflict` and try again. Raw: `SELECT max(version)` + `INSERT` at max + 1,
//!   a `unique_violation` is the conflict. Reports appends/s and the conflict rate.
//! * `replay`: read a 100,000-record session in chunks of 10,000. ctxlog: `Store::read`
//!   (seal verified). Raw: keyset-paginated `SELECT`, no verification.
//!
//! Each cell alternates ctxlog and raw for `--secs` each, `--runs` times; figures are
//! medians and "ctxlog / raw" is the median of the per-run ratios.
//!
//! Usage: `pg_bench [--runs 3] [--secs 2] [--writers 1,4,16] [--replay-n 100000]`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ctxlog::store::{ExpectedVersion, Record, Store, StoreError, StreamId};
use ctxlog_store_postgres::test_support::{Cluster, ClusterOptions};
use ctxlog_store_postgres::{PgOptions, PgStore};
use postgres::{Client, NoTls};

const SIZE: usize = 300;
const CHUNK: usize = 10_000;

struct Params {
    runs: usize,
    secs: f64,
    writers: Vec<usize>,
    replay_n: usize,
}

fn params() -> Params {
    let mut p = Params { runs: 3, secs: 2.0, writers: vec![1, 4, 16], replay_n: 100_000 };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let v = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--runs" => p.runs = v.parse().unwrap(),
            "--secs" => p.secs = v.parse().unwrap(),
            "--writers" => p.writers = v.split(',').map(|w| w.parse().unwrap()).collect(),
            "--replay-n" => p.replay_n = v.parse().unwrap(),
            other => panic!("unknown argument {other}"),
        }
    }
    p
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn payload(tag: u64) -> Vec<u8> {
    let mut b = format!("record {tag} ").into_bytes();
    b.resize(SIZE, b'.');
    b
}

/// Outcome of one timed pass: successful appends and conflicts, per second of wall time.
#[derive(Clone, Copy, Default)]
struct Pass {
    per_sec: f64,
    conflict_rate: f64,
}

/// Runs `writers` threads of `body` for `secs`; `body(thread, stop)` returns (appends, conflicts).
fn timed(writers: usize, secs: f64, body: impl Fn(usize, &AtomicBool) -> (u64, u64) + Sync) -> Pass {
    let stop = AtomicBool::new(false);
    let (ok, lost) = (AtomicU64::new(0), AtomicU64::new(0));
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..writers {
            let (body, stop, ok, lost) = (&body, &stop, &ok, &lost);
            s.spawn(move || {
                let (a, c) = body(t, stop);
                ok.fetch_add(a, Ordering::Relaxed);
                lost.fetch_add(c, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    });
    let elapsed = started.elapsed().as_secs_f64();
    let (ok, lost) = (ok.load(Ordering::Relaxed) as f64, lost.load(Ordering::Relaxed) as f64);
    Pass { per_sec: ok / elapsed, conflict_rate: if ok + lost > 0.0 { lost / (ok + lost) } else { 0.0 } }
}

fn ctxlog_sessions(store: &PgStore, writers: usize, secs: f64) -> Pass {
    timed(writers, secs, |_, stop| {
        let s = StreamId::random();
        let mut head = 0;
        while !stop.load(Ordering::Relaxed) {
            head = store.append(s, ExpectedVersion::Exact(head), &[Record::seal(payload(head))]).unwrap();
        }
        (head, 0)
    })
}

fn raw_sessions(url: &str, writers: usize, secs: f64) -> Pass {
    timed(writers, secs, |_, stop| {
        let mut c = Client::connect(url, NoTls).unwrap();
        let insert = c.prepare("INSERT INTO raw_records (stream, version, bytes) VALUES ($1, $2, $3)").unwrap();
        let s = uuid::Uuid::new_v4();
        let mut v = 0i64;
        while !stop.load(Ordering::Relaxed) {
            v += 1;
            let body = Record::seal(payload(v as u64)).into_bytes();
            c.execute(&insert, &[&s, &v, &body]).unwrap();
        }
        (v as u64, 0)
    })
}

fn ctxlog_hot(store: &PgStore, writers: usize, secs: f64) -> Pass {
    let s = StreamId::random();
    timed(writers, secs, |t, stop| {
        let (mut ok, mut lost) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            let head = store.head(s).unwrap().unwrap_or(0);
            match store.append(s, ExpectedVersion::Exact(head), &[Record::seal(payload(t as u64))]) {
                Ok(_) => ok += 1,
                Err(StoreError::Conflict { .. }) => lost += 1,
                Err(e) => panic!("{e}"),
            }
        }
        (ok, lost)
    })
}

fn raw_hot(url: &str, writers: usize, secs: f64) -> Pass {
    let s = uuid::Uuid::new_v4();
    timed(writers, secs, |t, stop| {
        let mut c = Client::connect(url, NoTls).unwrap();
        let head = c.prepare("SELECT max(version) FROM raw_records WHERE stream = $1").unwrap();
        let insert = c.prepare("INSERT INTO raw_records (stream, version, bytes) VALUES ($1, $2, $3)").unwrap();
        let (mut ok, mut lost) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            let v: Option<i64> = c.query_one(&head, &[&s]).unwrap().get(0);
            let body = Record::seal(payload(t as u64)).into_bytes();
            match c.execute(&insert, &[&s, &(v.unwrap_or(0) + 1), &body]) {
                Ok(_) => ok += 1,
                Err(e) if e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION) => lost += 1,
                Err(e) => panic!("{e}"),
            }
        }
        (ok, lost)
    })
}

fn ctxlog_replay(store: &PgStore, s: StreamId, n: usize) -> f64 {
    let started = Instant::now();
    let mut from = 1;
    let mut seen = 0;
    loop {
        let batch = store.read(s, from, CHUNK).unwrap();
        let Some(last) = batch.last() else { break };
        from = last.version + 1;
        seen += batch.len();
    }
    assert_eq!(seen, n);
    n as f64 / started.elapsed().as_secs_f64()
}

fn raw_replay(c: &mut Client, s: uuid::Uuid, n: usize) -> f64 {
    let select = c
        .prepare("SELECT version, bytes FROM raw_records WHERE stream = $1 AND version >= $2 ORDER BY version LIMIT $3")
        .unwrap();
    let started = Instant::now();
    let (mut from, mut seen) = (1i64, 0);
    loop {
        let rows = c.query(&select, &[&s, &from, &(CHUNK as i64)]).unwrap();
        let Some(last) = rows.last() else { break };
        from = last.get::<_, i64>(0) + 1;
        let batch: Vec<(i64, Vec<u8>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        seen += batch.len();
    }
    assert_eq!(seen, n);
    n as f64 / started.elapsed().as_secs_f64()
}

fn pgbench(cluster: &Cluster, clients: usize, secs: u64) -> f64 {
    let host = cluster.socket_dir().display().to_string();
    let run = |args: &[&str]| {
        let mut cmd = std::process::Command::new(cluster.bindir().join("pgbench"));
        cmd.args(["-h", &host, "-U", "postgres"]).args(args).arg("postgres");
        let out = cluster.as_owner(&mut cmd).output().unwrap();
        assert!(out.status.success(), "pgbench {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (c, t) = (clients.to_string(), secs.to_string());
    let jobs = clients.min(2).to_string();
    let out = run(&["-c", &c, "-j", &jobs, "-T", &t, "-n"]);
    out.lines()
        .find_map(|l| l.strip_prefix("tps = ")?.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no tps in pgbench output:\n{out}"))
}

struct Row {
    name: String,
    ctxlog: Vec<f64>,
    raw: Vec<f64>,
    conflicts: Vec<f64>,
    raw_conflicts: Vec<f64>,
}

impl Row {
    fn new(name: String) -> Row {
        Row { name, ctxlog: vec![], raw: vec![], conflicts: vec![], raw_conflicts: vec![] }
    }
    fn print(&self) {
        let ratios: Vec<f64> = self.ctxlog.iter().zip(&self.raw).map(|(a, b)| a / b).collect();
        let conflicts = if self.conflicts.is_empty() {
            String::new()
        } else {
            format!(
                " | {:.1}% / {:.1}%",
                100.0 * median(self.conflicts.clone()),
                100.0 * median(self.raw_conflicts.clone())
            )
        };
        println!(
            "| {} | {:.0} | {:.0} | {:.2}{conflicts} |",
            self.name,
            median(self.ctxlog.clone()),
            median(self.raw.clone()),
            median(ratios)
        );
    }
}

fn main() {
    let p = params();
    let mut cluster = Cluster::start_with(ClusterOptions {
        fsync: true,
        max_connections: 200,
        shared_buffers: "128MB".into(),
        ..ClusterOptions::default()
    })
    .unwrap();
    let url = cluster.url();
    let mut admin = Client::connect(&url, NoTls).unwrap();
    admin
        .batch_execute(
            "CREATE TABLE raw_records (stream uuid NOT NULL, version bigint NOT NULL, bytes bytea NOT NULL,
             PRIMARY KEY (stream, version))",
        )
        .unwrap();
    let version: String = admin.query_one("SHOW server_version", &[]).unwrap().get(0);
    println!(
        "pg_bench: PostgreSQL {version}, private cluster (fsync=on, synchronous_commit=on, Unix socket), \
         {} runs of {} s per side, {SIZE}-byte records",
        p.runs, p.secs
    );
    let max_w = p.writers.iter().copied().max().unwrap_or(1);
    let store = PgStore::open_with(&url, PgOptions { pool_size: max_w, ..PgOptions::default() }).unwrap();
    let quiet =
        PgStore::open_with(&url, PgOptions { pool_size: max_w, notify: false, ..PgOptions::default() }).unwrap();

    let mut rows = Vec::new();
    for &w in &p.writers {
        let mut sessions = Row::new(format!("durable appends/s, {w} writer(s), different sessions"));
        let mut silent = Row::new(format!("… same, `notify: false`, {w} writer(s)"));
        let mut hot = Row::new(format!("durable appends/s, {w} writer(s), one hot session"));
        for _ in 0..p.runs {
            sessions.ctxlog.push(ctxlog_sessions(&store, w, p.secs).per_sec);
            sessions.raw.push(raw_sessions(&url, w, p.secs).per_sec);
            silent.ctxlog.push(ctxlog_sessions(&quiet, w, p.secs).per_sec);
            silent.raw.push(raw_sessions(&url, w, p.secs).per_sec);
            let (a, b) = (ctxlog_hot(&store, w, p.secs), raw_hot(&url, w, p.secs));
            hot.ctxlog.push(a.per_sec);
            hot.raw.push(b.per_sec);
            hot.conflicts.push(a.conflict_rate);
            hot.raw_conflicts.push(b.conflict_rate);
        }
        eprintln!("done: {w} writers");
        rows.push((sessions, silent, hot));
    }

    // Replay: the same records in both tables.
    let s = StreamId::random();
    let mut head = 0;
    while (head as usize) < p.replay_n {
        let n = 1_000.min(p.replay_n - head as usize);
        let recs: Vec<Record> = (0..n).map(|i| Record::seal(payload(head + i as u64))).collect();
        head = store.append(s, ExpectedVersion::Exact(head), &recs).unwrap();
    }
    admin
        .execute(
            "INSERT INTO raw_records SELECT '00000000-0000-0000-0000-000000000001', version, bytes
             FROM ctxlog_records WHERE stream = $1",
            &[&s.0],
        )
        .unwrap();
    admin.batch_execute("VACUUM ANALYZE").unwrap();
    let raw_id = uuid::Uuid::from_u128(1);
    let mut replay = Row::new(format!("replay records/s ({} records, chunks of {CHUNK})", p.replay_n));
    for _ in 0..p.runs {
        replay.ctxlog.push(ctxlog_replay(&store, s, p.replay_n));
        replay.raw.push(raw_replay(&mut admin, raw_id, p.replay_n));
    }

    println!();
    println!("| workload | ctxlog | raw | ctxlog / raw | conflicts ctxlog / raw |");
    println!("|---|---:|---:|---:|---:|");
    for (sessions, silent, hot) in &rows {
        sessions.print();
        silent.print();
        hot.print();
    }
    replay.print();

    println!();
    println!("| pgbench (TPC-B-like, scale 1, {} s) | tps |", p.secs.max(5.0) as u64);
    println!("|---|---:|");
    {
        let host = cluster.socket_dir().display().to_string();
        let mut cmd = std::process::Command::new(cluster.bindir().join("pgbench"));
        cmd.args(["-h", &host, "-U", "postgres", "-i", "-q", "-s", "1", "postgres"]);
        let out = cluster.as_owner(&mut cmd).output().unwrap();
        assert!(out.status.success(), "pgbench -i: {}", String::from_utf8_lossy(&out.stderr));
    }
    for &w in &p.writers {
        println!("| {w} client(s) | {:.0} |", pgbench(&cluster, w, p.secs.max(5.0) as u64));
    }
    drop(store);
    drop(quiet);
    cluster.stop().unwrap();
}
