//! The library's public surface is what other crates use (issue 24, item 6): the program
//! (`run`), and the modules the tests, benchmarks and fuzz targets import. Every other module
//! is the program's own; making one public (or a new `pub use`) is a reviewed change here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

/// `pub mod` and `pub use` lines of `src/lib.rs`, each with who needs it.
const PUBLIC: &[&str] = &[
    "pub mod analysis;",          // tests/rerun.rs: the postmortem fold
    "pub mod args;",              // bench soak (import flags), tests/rerun.rs (SummariesArg)
    "pub mod catalog;",           // bench sessions_bench
    "pub mod chart;",             // tests/report.rs (BUDGET_COLOR)
    "pub mod diff;",              // tests/rerun.rs
    "pub mod error;",             // fuzz transcript, tests/postgres_ops.rs
    "pub mod import;",            // bench, tests, fuzz: transcripts into a store
    "pub mod rerun;",             // tests/rerun.rs
    "pub mod stores;",            // bench, tests: a store from a URL
    "pub mod summarizer;",        // bench summary_cost: model summaries
    "pub mod transcript;",        // bench, tests, fuzz: JSONL transcripts
    "pub use crate::logs::Logs;", // the binary: where `-v` logs go
];

#[test]
fn the_public_modules_are_the_reviewed_list() {
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
    let found: Vec<&str> =
        lib.lines().map(str::trim).filter(|l| l.starts_with("pub mod ") || l.starts_with("pub use ")).collect();
    assert_eq!(found, PUBLIC, "tools/src/lib.rs's public modules changed: review them, then update this list");
}
