//! `store_bench`: each ctxlog `Store` backend against the raw library underneath it, measured
//! in the same run, median of N runs, printed as a markdown table.
//!
//! Workloads (one stream, 300-byte records by default):
//! * `durable`: 1 record per append; every append durable before the next.
//! * `batched`: 100 records per append.
//! * `replay`:  read every record of a pre-loaded stream (warm page cache) after reopening.
//!
//! Raw baselines do the same IO without the contract: no head check, no expected-version
//! transaction, no seal verification beyond what is stated.
//! * sqlite-raw: same table shape, autocommit INSERT (or one transaction per batch), WAL +
//!   synchronous=FULL; replay = one SELECT, no verification.
//! * fs-raw: one file kept open, `len | crc32c | payload` frame per append, `write` +
//!   `sync_data`; replay = 1 MiB BufReader, crc32c checked per frame.
//! * sled-raw: `insert` (or `Batch`) + `flush()`; replay = prefix scan.
//! * sled-fsync: `SledStore` with `Durability::FlushAndFsync` against sled-raw that also
//!   fdatasyncs `<dir>/db` after each flush.
//!
//! Every replay, raw or not, materialises owned records in chunks of 10,000 (what
//! `Store::read` returns), so the comparison is of the same output.
//!
//! Both sides run in lockstep (append by append, pass by pass) so that drift in the machine's
//! fsync latency hits both alike; "ctxlog / raw" is the median of the per-run ratios.
//!
//! Usage: `store_bench [--runs 3] [--durable-n 2000] [--batch-appends 300] [--replay-n 200000]
//! [--size 300] [--dir DIR] [--only sqlite,fs,sled,sled-fsync]`

// A benchmark binary: failing loudly on a setup error is the right behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use ctxlog::store::{ExpectedVersion, Record, Store, StreamId};

/// Records per `read` call in a replay; raw replays hand out owned records in chunks of the
/// same size, so both sides materialise the same output.
const CHUNK: usize = 10_000;

#[derive(Clone)]
struct Params {
    runs: usize,
    durable_n: usize,
    batch_appends: usize,
    batch_size: usize,
    replay_n: usize,
    size: usize,
    dir: PathBuf,
    only: Vec<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum Workload {
    Durable,
    Batched,
    Replay,
}

impl Workload {
    fn name(self, p: &Params) -> String {
        match self {
            Workload::Durable => "durable append (1/append)".into(),
            Workload::Batched => format!("batched append ({}/append)", p.batch_size),
            Workload::Replay => format!("replay of {} records", p.replay_n),
        }
    }
}

/// The minimal interface both sides of a comparison implement.
trait Target {
    fn append(&mut self, recs: &[Record]);
    /// Reads everything back; returns the number of records.
    fn replay(&mut self) -> usize;
    /// Closes and reopens (before a replay, so no in-process cache helps).
    fn reopen(&mut self);
}

struct Ours {
    kind: String,
    path: PathBuf,
    store: Option<Box<dyn Store>>,
    stream: StreamId,
    head: u64,
}

fn open_ours(kind: &str, path: &Path) -> Box<dyn Store> {
    match kind {
        "sqlite" => Box::new(ctxlog_store_sqlite::SqliteStore::open(path.join("ctxlog.db")).unwrap()),
        "fs" => Box::new(ctxlog_store_fs::FsStore::open(path).unwrap()),
        "sled" => Box::new(ctxlog_store_sled::SledStore::open(path).unwrap()),
        "sled-fsync" => Box::new(
            ctxlog_store_sled::SledStore::open_with(path, ctxlog_store_sled::Durability::FlushAndFsync).unwrap(),
        ),
        other => panic!("unknown backend {other}"),
    }
}

impl Target for Ours {
    fn append(&mut self, recs: &[Record]) {
        let store = self.store.as_ref().unwrap();
        self.head = store.append(self.stream, ExpectedVersion::Exact(self.head), recs).unwrap();
    }
    fn replay(&mut self) -> usize {
        let store = self.store.as_ref().unwrap();
        let mut from = 1;
        let mut n = 0;
        loop {
            let chunk = store.read(self.stream, from, CHUNK).unwrap();
            if chunk.is_empty() {
                return n;
            }
            n += chunk.len();
            from += chunk.len() as u64;
        }
    }
    fn reopen(&mut self) {
        drop(self.store.take());
        self.store = Some(open_ours(&self.kind, &self.path));
    }
}

struct RawSqlite {
    path: PathBuf,
    conn: Option<rusqlite::Connection>,
    stream: [u8; 16],
    version: i64,
}

impl RawSqlite {
    fn open(path: &Path) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open(path).unwrap();
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS events(stream BLOB, version INTEGER, bytes BLOB,
             PRIMARY KEY(stream, version)) WITHOUT ROWID",
        )
        .unwrap();
        conn
    }
}

impl Target for RawSqlite {
    fn append(&mut self, recs: &[Record]) {
        let conn = self.conn.as_mut().unwrap();
        let sql = "INSERT INTO events(stream, version, bytes) VALUES (?1, ?2, ?3)";
        if recs.len() == 1 {
            self.version += 1;
            conn.prepare_cached(sql)
                .unwrap()
                .execute(rusqlite::params![&self.stream[..], self.version, recs[0].as_bytes()])
                .unwrap();
        } else {
            let tx = conn.transaction().unwrap();
            {
                let mut stmt = tx.prepare_cached(sql).unwrap();
                for r in recs {
                    self.version += 1;
                    stmt.execute(rusqlite::params![&self.stream[..], self.version, r.as_bytes()]).unwrap();
                }
            }
            tx.commit().unwrap();
        }
    }
    fn replay(&mut self) -> usize {
        let conn = self.conn.as_ref().unwrap();
        let mut stmt =
            conn.prepare_cached("SELECT version, bytes FROM events WHERE stream = ?1 ORDER BY version").unwrap();
        let rows = stmt.query_map([&self.stream[..]], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))).unwrap();
        let mut n = 0;
        let mut chunk = Vec::with_capacity(CHUNK);
        for row in rows {
            chunk.push(row.unwrap());
            n += 1;
            if chunk.len() == CHUNK {
                std::hint::black_box(std::mem::take(&mut chunk));
            }
        }
        std::hint::black_box(chunk);
        n
    }
    fn reopen(&mut self) {
        drop(self.conn.take());
        self.conn = Some(Self::open(&self.path));
    }
}

struct RawFile {
    path: PathBuf,
    file: Option<File>,
}

impl Target for RawFile {
    fn append(&mut self, recs: &[Record]) {
        let mut payload = Vec::new();
        for r in recs {
            payload.extend_from_slice(&(r.as_bytes().len() as u32).to_le_bytes());
            payload.extend_from_slice(r.as_bytes());
        }
        let mut frame = Vec::with_capacity(payload.len() + 8);
        frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        frame.extend_from_slice(&payload);
        let f = self.file.as_mut().unwrap();
        f.write_all(&frame).unwrap();
        f.sync_data().unwrap();
    }
    fn replay(&mut self) -> usize {
        let mut r = BufReader::with_capacity(1 << 20, File::open(&self.path).unwrap());
        let mut header = [0u8; 8];
        let mut payload = Vec::new();
        let mut n = 0;
        let mut chunk = Vec::with_capacity(CHUNK);
        while r.read_exact(&mut header).is_ok() {
            let len = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
            payload.resize(len, 0);
            r.read_exact(&mut payload).unwrap();
            assert_eq!(crc32c::crc32c(&payload), u32::from_le_bytes(header[4..].try_into().unwrap()));
            let mut at = 0;
            while at < len {
                let rl = u32::from_le_bytes(payload[at..at + 4].try_into().unwrap()) as usize;
                chunk.push(payload[at + 4..at + 4 + rl].to_vec());
                at += 4 + rl;
                n += 1;
                if chunk.len() == CHUNK {
                    std::hint::black_box(std::mem::take(&mut chunk));
                }
            }
        }
        std::hint::black_box(chunk);
        n
    }
    fn reopen(&mut self) {
        drop(self.file.take());
        self.file = Some(OpenOptions::new().create(true).append(true).open(&self.path).unwrap());
    }
}

struct RawSled {
    path: PathBuf,
    db: Option<(sled::Db, sled::Tree)>,
    stream: [u8; 16],
    version: u64,
    /// `Some` for sled-fsync: sled's log file, fdatasynced after each flush.
    fsync: Option<File>,
}

impl RawSled {
    fn open(path: &Path) -> (sled::Db, sled::Tree) {
        // sled's IO threads may hold the lock for a moment after a drop (see SledStore's Drop).
        let mut tries = 0;
        let db = loop {
            match sled::Config::new().path(path).cache_capacity(ctxlog_store_sled::CACHE_CAPACITY).open() {
                Ok(db) => break db,
                Err(_) if tries < 5000 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
        };
        let tree = db.open_tree("events").unwrap();
        (db, tree)
    }
    fn key(&self, v: u64) -> [u8; 24] {
        let mut k = [0u8; 24];
        k[..16].copy_from_slice(&self.stream);
        k[16..].copy_from_slice(&v.to_be_bytes());
        k
    }
}

impl Target for RawSled {
    fn append(&mut self, recs: &[Record]) {
        let mut batch = sled::Batch::default();
        for r in recs {
            self.version += 1;
            batch.insert(&self.key(self.version)[..], r.as_bytes());
        }
        let (db, tree) = self.db.as_ref().unwrap();
        tree.apply_batch(batch).unwrap();
        db.flush().unwrap();
        if let Some(f) = &self.fsync {
            f.sync_data().unwrap();
        }
    }
    fn replay(&mut self) -> usize {
        let (_, tree) = self.db.as_ref().unwrap();
        let mut n = 0;
        let mut chunk = Vec::with_capacity(CHUNK);
        for kv in tree.scan_prefix(self.stream) {
            chunk.push(kv.unwrap().1.to_vec());
            n += 1;
            if chunk.len() == CHUNK {
                std::hint::black_box(std::mem::take(&mut chunk));
            }
        }
        std::hint::black_box(chunk);
        n
    }
    fn reopen(&mut self) {
        drop(self.db.take());
        self.db = Some(Self::open(&self.path));
    }
}

fn make(kind: &str, raw: bool, dir: &Path) -> Box<dyn Target> {
    let stream = StreamId::random();
    match (kind, raw) {
        (k, false) => Box::new(Ours {
            kind: k.to_owned(),
            path: dir.to_path_buf(),
            store: Some(open_ours(k, dir)),
            stream,
            head: 0,
        }),
        ("sqlite", true) => {
            let path = dir.join("raw.db");
            Box::new(RawSqlite { conn: Some(RawSqlite::open(&path)), path, stream: *stream.0.as_bytes(), version: 0 })
        }
        ("fs", true) => {
            let path = dir.join("raw.log");
            let file = OpenOptions::new().create(true).append(true).open(&path).unwrap();
            Box::new(RawFile { path, file: Some(file) })
        }
        (k @ ("sled" | "sled-fsync"), true) => {
            let path = dir.join("raw.sled");
            let db = RawSled::open(&path);
            let fsync = (k == "sled-fsync").then(|| File::open(path.join("db")).unwrap());
            Box::new(RawSled { db: Some(db), path, stream: *stream.0.as_bytes(), version: 0, fsync })
        }
        (other, _) => panic!("unknown backend {other}"),
    }
}

fn record(i: u64, size: usize) -> Record {
    let mut body = vec![0u8; size.saturating_sub(ctxlog::store::CHECKSUM_LEN)];
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in body.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    Record::seal(body)
}

/// One run of a workload on both sides in lockstep: the ctxlog side and the raw side take
/// turns append by append (or pass by pass for replay), so a change in the machine's fsync
/// latency or load mid-run hits both alike. Returns records/s and open seconds, ours then raw.
fn measure_pair(kind: &str, w: Workload, p: &Params) -> [(f64, f64); 2] {
    let dirs: Vec<tempfile::TempDir> =
        (0..2).map(|_| tempfile::Builder::new().prefix("store_bench").tempdir_in(&p.dir).unwrap()).collect();
    let mut ts: Vec<Box<dyn Target>> = vec![make(kind, false, dirs[0].path()), make(kind, true, dirs[1].path())];
    let mut secs = [0f64; 2];
    let mut open = [0f64; 2];
    let n = match w {
        Workload::Durable | Workload::Batched => {
            let (appends, per) =
                if w == Workload::Durable { (p.durable_n, 1) } else { (p.batch_appends, p.batch_size) };
            for a in 0..appends {
                let batch: Vec<Record> = (0..per).map(|i| record((a * per + i) as u64, p.size)).collect();
                for (side, t) in ts.iter_mut().enumerate() {
                    let start = Instant::now();
                    t.append(&batch);
                    secs[side] += start.elapsed().as_secs_f64();
                }
            }
            appends * per
        }
        Workload::Replay => {
            let chunk = 1000;
            let mut i = 0;
            while i < p.replay_n {
                let n = chunk.min(p.replay_n - i);
                let b: Vec<Record> = (0..n).map(|k| record((i + k) as u64, p.size)).collect();
                for t in ts.iter_mut() {
                    t.append(&b);
                }
                i += n;
            }
            for (side, t) in ts.iter_mut().enumerate() {
                let start = Instant::now();
                t.reopen();
                open[side] = start.elapsed().as_secs_f64();
            }
            for (side, t) in ts.iter_mut().enumerate() {
                let start = Instant::now();
                let n = t.replay();
                secs[side] = start.elapsed().as_secs_f64();
                assert_eq!(n, p.replay_n);
            }
            p.replay_n
        }
    };
    [(n as f64 / secs[0], open[0]), (n as f64 / secs[1], open[1])]
}

fn median(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v[v.len() / 2];
    let spread = (v[v.len() - 1] - v[0]) / m;
    (m, spread)
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu =
        read("/proc/cpuinfo").lines().find(|l| l.starts_with("model name")).map(|l| l.to_owned()).unwrap_or_default();
    let mem = read("/proc/meminfo").lines().next().unwrap_or_default().to_owned();
    format!(
        "kernel {}, {} CPUs ({}), {}",
        read("/proc/sys/kernel/osrelease").trim(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu.split(':').nth(1).unwrap_or("?").trim(),
        mem.split_whitespace().collect::<Vec<_>>().join(" ")
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let p = Params {
        runs: arg(&args, "--runs", 3),
        durable_n: arg(&args, "--durable-n", 2000),
        batch_appends: arg(&args, "--batch-appends", 300),
        batch_size: arg(&args, "--batch-size", 100),
        replay_n: arg(&args, "--replay-n", 200_000),
        size: arg(&args, "--size", 300),
        dir: PathBuf::from(arg(&args, "--dir", std::env::temp_dir().display().to_string())),
        only: arg(&args, "--only", "sqlite,fs,sled,sled-fsync".to_owned()).split(',').map(str::to_owned).collect(),
    };
    println!("store_bench: {} B records, median of {} runs, dir {}", p.size, p.runs, p.dir.display());
    println!("machine: {}", machine());
    println!();
    println!(
        "| backend | workload | ctxlog records/s | spread | raw records/s | spread | ctxlog / raw \
         | open before replay (ctxlog / raw) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---|");
    for kind in ["sqlite", "fs", "sled", "sled-fsync"] {
        if !p.only.iter().any(|o| o == kind) {
            continue;
        }
        for w in [Workload::Durable, Workload::Batched, Workload::Replay] {
            let (mut ours, mut raw, mut ratio, mut open_ours, mut open_raw) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for _ in 0..p.runs {
                let [(o, oo), (r, ro)] = measure_pair(kind, w, &p);
                ours.push(o);
                raw.push(r);
                ratio.push(o / r);
                open_ours.push(oo);
                open_raw.push(ro);
            }
            let ((o, os), (r, rs), (q, _)) = (median(ours), median(raw), median(ratio));
            let open = if w == Workload::Replay {
                format!("{:.3} s / {:.3} s", median(open_ours).0, median(open_raw).0)
            } else {
                "".into()
            };
            println!(
                "| {kind} | {} | {o:.0} | {:.0}% | {r:.0} | {:.0}% | {:.0}% | {open} |",
                w.name(&p),
                os * 100.0,
                rs * 100.0,
                q * 100.0
            );
        }
    }
}
