//! `open_bench`: what a read-only open costs next to a writer's open, per backend, on a store
//! of `--records` 300-byte records (one stream, appended in batches of 1,000).
//!
//! A read-only open never writes: fs scans the stream files as a writer does, minus the lock;
//! SQLite reads its `-wal` first (none here) and opens `immutable`; sled copies the whole
//! directory to `$TMPDIR` (sled rewrites its files on every open) and opens the copy.
//! Writer and reader opens alternate so that machine noise hits both alike; medians of
//! `--runs` runs, printed as a markdown table.
//!
//! Usage: `open_bench [--records 200000] [--runs 5] [--dir DIR] [--only sqlite,fs,sled]`

// A benchmark binary: failing loudly on a setup error is the right behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use ctxlog::store::{ExpectedVersion, Record, Store, StreamId};

fn open(kind: &str, root: &Path, read_only: bool) -> Box<dyn Store> {
    match (kind, read_only) {
        ("sqlite", false) => Box::new(ctxlog_store_sqlite::SqliteStore::open(root.join("ctxlog.db")).unwrap()),
        ("sqlite", true) => Box::new(ctxlog_store_sqlite::SqliteStore::open_read_only(root.join("ctxlog.db")).unwrap()),
        ("fs", false) => Box::new(ctxlog_store_fs::FsStore::open(root.join("fs")).unwrap()),
        ("fs", true) => Box::new(ctxlog_store_fs::FsStore::open_read_only(root.join("fs")).unwrap()),
        ("sled", false) => Box::new(ctxlog_store_sled::SledStore::open(root.join("sled")).unwrap()),
        ("sled", true) => Box::new(ctxlog_store_sled::SledStore::open_read_only(root.join("sled")).unwrap()),
        (other, _) => panic!("unknown backend {other}"),
    }
}

fn size_of(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                size_of(&e.path())
            } else {
                e.metadata().unwrap().len()
            }
        })
        .sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let records: u64 = arg(&args, "--records", 200_000);
    let runs: usize = arg(&args, "--runs", 5);
    let dir = PathBuf::from(arg(&args, "--dir", std::env::temp_dir().display().to_string()));
    let only: Vec<String> = arg(&args, "--only", "sqlite,fs,sled".to_owned()).split(',').map(str::to_owned).collect();
    println!("open_bench: {records} records of 300 B, median of {runs} runs, dir {}", dir.display());
    println!();
    println!("| backend | store on disk | writer's open | read-only open | read-only / writer |");
    println!("|---|---:|---:|---:|---:|");
    for kind in ["sqlite", "fs", "sled"].into_iter().filter(|k| only.iter().any(|o| o == k)) {
        let root = tempfile::tempdir_in(&dir).unwrap();
        {
            let store = open(kind, root.path(), false);
            let s = StreamId::random();
            let mut head = 0;
            while head < records {
                let n = 1_000.min(records - head);
                let batch: Vec<Record> = (0..n).map(|i| Record::seal(vec![(head + i) as u8; 296])).collect();
                head = store.append(s, ExpectedVersion::Exact(head), &batch).unwrap();
            }
        }
        let (mut writer, mut reader) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            for (read_only, out) in [(false, &mut writer), (true, &mut reader)] {
                let start = Instant::now();
                let store = open(kind, root.path(), read_only);
                out.push(start.elapsed().as_secs_f64());
                drop(store);
            }
        }
        let (w, r) = (median(writer), median(reader));
        println!(
            "| {kind} | {:.1} MB | {:.1} ms | {:.1} ms | {:.2}× |",
            size_of(root.path()) as f64 / 1e6,
            w * 1e3,
            r * 1e3,
            r / w
        );
    }
}
