//! `lease_bench`: what a stream lease (`Store::try_lease`, issue 19) costs per call.
//!
//! * PostgreSQL, on a private cluster (fsync on), over TCP on `127.0.0.1` and over the Unix
//!   socket: `try_lease` then drop, `--n` times on one stream. *acquire* is the time of the
//!   `try_lease` call (one round trip to the server on the store's lease connection, through
//!   the lease thread); *acquire+release* is the time of one whole iteration (the release is
//!   sent to the lease thread on drop, and the next acquire queues behind its unlock, so this
//!   is the throughput of one stream's lease). Beside it, the same two statements on a raw
//!   client (`pg_try_advisory_lock` + `pg_advisory_unlock`), the floor.
//! * SQLite: `try_lease` then drop (open the lease file, `flock`, close).
//!
//! Prints a markdown table of p50 and p99 in microseconds.
//!
//! Usage: `lease_bench [--n 5000]`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::time::{Duration, Instant};

use ctxlog::store::{Store, StreamId};
use ctxlog_store_postgres::test_support::{Cluster, ClusterOptions};
use ctxlog_store_postgres::PgStore;
use ctxlog_store_sqlite::SqliteStore;
use postgres::{Client, NoTls};

fn n_arg() -> usize {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => 5000,
        [flag, n] if flag == "--n" => n.parse().unwrap(),
        other => panic!("usage: lease_bench [--n N], not {other:?}"),
    }
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e6
}

struct Row {
    what: String,
    acquire: Vec<Duration>,
    pair: Vec<Duration>,
}

impl Row {
    fn print(mut self) {
        let (a50, a99) = (pct(&mut self.acquire, 0.5), pct(&mut self.acquire, 0.99));
        let (p50, p99) = (pct(&mut self.pair, 0.5), pct(&mut self.pair, 0.99));
        println!("| {} | {a50:.0} | {a99:.0} | {p50:.0} | {p99:.0} |", self.what);
    }
}

fn store_loop(what: &str, store: &dyn Store, n: usize) -> Row {
    let s = StreamId::random();
    // Warm up: the lease connection opens on first use.
    for _ in 0..50 {
        drop(store.try_lease(s).unwrap().unwrap());
    }
    let mut row = Row { what: what.to_owned(), acquire: Vec::with_capacity(n), pair: Vec::with_capacity(n) };
    let mut retries = 0u64;
    for _ in 0..n {
        let start = Instant::now();
        // The previous release is queued before this acquire on the lease thread, so it never
        // finds its own stream taken; count it if it ever did.
        let lease = loop {
            match store.try_lease(s).unwrap() {
                Some(l) => break l,
                None => retries += 1,
            }
        };
        row.acquire.push(start.elapsed());
        drop(lease);
        row.pair.push(start.elapsed());
    }
    // Include the last release in the figures' honesty: wait until it has landed.
    drop(store.try_lease(s).unwrap());
    assert_eq!(retries, 0, "{what}: the stream was found taken by its own released lease");
    row
}

fn raw_loop(what: &str, url: &str, n: usize) -> Row {
    let mut c = Client::connect(url, NoTls).unwrap();
    let (lock, unlock) =
        (c.prepare("SELECT pg_try_advisory_lock($1)").unwrap(), c.prepare("SELECT pg_advisory_unlock($1)").unwrap());
    let key = 42i64;
    let mut row = Row { what: what.to_owned(), acquire: Vec::with_capacity(n), pair: Vec::with_capacity(n) };
    for _ in 0..n {
        let start = Instant::now();
        let got: bool = c.query_one(&lock, &[&key]).unwrap().get(0);
        assert!(got);
        row.acquire.push(start.elapsed());
        c.query_one(&unlock, &[&key]).unwrap();
        row.pair.push(start.elapsed());
    }
    row
}

fn main() {
    let n = n_arg();
    let port = Cluster::free_port().unwrap();
    let cluster =
        Cluster::start_with(ClusterOptions { fsync: true, tcp_port: Some(port), ..ClusterOptions::default() }).unwrap();
    let data = cluster.data_dir();
    let mut hba = std::fs::read_to_string(data.join("pg_hba.conf")).unwrap();
    hba.push_str("host all all 127.0.0.1/32 trust\n");
    std::fs::write(data.join("pg_hba.conf"), hba).unwrap();
    cluster.connect().unwrap().batch_execute("SELECT pg_reload_conf()").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let tcp = format!("{}?sslmode=disable", cluster.tcp_url_for("postgres", "postgres").unwrap());
    let socket = cluster.url();

    println!("lease round trips, {n} iterations each (µs)\n");
    println!("| lease | acquire p50 | acquire p99 | acquire+release p50 | acquire+release p99 |");
    println!("|---|---:|---:|---:|---:|");
    let store = PgStore::open(&tcp).unwrap();
    store_loop("PostgreSQL, TCP 127.0.0.1: `try_lease` + drop", &store, n).print();
    raw_loop("PostgreSQL, TCP 127.0.0.1: raw try_lock + unlock", &tcp, n).print();
    let store = PgStore::open(&socket).unwrap();
    store_loop("PostgreSQL, Unix socket: `try_lease` + drop", &store, n).print();
    raw_loop("PostgreSQL, Unix socket: raw try_lock + unlock", &socket, n).print();
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("ctxlog.db")).unwrap();
    store_loop("SQLite: `try_lease` + drop (open, flock, close)", &sqlite, n).print();
}
