//! Support for the postmortem tests (`report`, `why`, `rerun`, `diff`, JSON errors): sessions
//! recorded through the CLI into a fresh SQLite store, and their timelines read back through
//! the core (not through the CLI code under test).

use ctxlog::replay::{self, CallRecord, Mode};
use ctxlog::StreamId;

use crate::scenario::cli;

/// The session id the postmortem tests give the bundled demo.
pub const DEMO: &str = "00000000-0000-0000-0000-0000000de3a0";

/// A store holding sessions recorded for one test.
pub struct Recorded {
    /// Keeps the store's directory alive.
    pub dir: tempfile::TempDir,
    /// `sqlite:PATH`.
    pub store: String,
}

impl Recorded {
    /// An empty store in a fresh directory.
    pub fn new() -> Recorded {
        let dir = tempfile::tempdir().unwrap();
        let store = format!("sqlite:{}", dir.path().join("ctxlog.db").display());
        Recorded { dir, store }
    }

    /// A store with the bundled demo recorded as [`DEMO`] with `flags`.
    pub fn demo(flags: &[&str]) -> Recorded {
        let r = Recorded::new();
        r.run_demo(DEMO, flags);
        r
    }

    /// Records the bundled demo as `session` with `flags`.
    pub fn run_demo(&self, session: &str, flags: &[&str]) {
        let mut args = vec!["demo", "--json", "--store", &self.store, "--session", session];
        args.extend_from_slice(flags);
        let (code, _, err) = cli(&args);
        assert_eq!(code, 0, "demo {flags:?}: {err}");
    }

    /// Imports `transcript` as `session` with `flags`.
    pub fn import(&self, session: &str, transcript: &str, flags: &[&str]) {
        let path = self.dir.path().join(format!("{session}.jsonl"));
        std::fs::write(&path, transcript).unwrap();
        let path = path.to_str().unwrap();
        let mut args = vec!["import", path, "--json", "--store", &self.store, "--session", session];
        args.extend_from_slice(flags);
        let (code, _, err) = cli(&args);
        assert_eq!(code, 0, "import {flags:?}: {err}");
    }

    /// Runs the CLI with `--store` set to this store; asserts success and returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    }

    /// Runs the CLI with `--store` set to this store.
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--store", &self.store]);
        cli(&all)
    }

    /// A path in the store's directory.
    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_owned()
    }

    /// The session's timeline, folded by the core from the log.
    pub fn timeline(&self, session: &str) -> Vec<CallRecord> {
        let path = self.store.strip_prefix("sqlite:").unwrap();
        let store = ctxlog_store_sqlite::SqliteStore::open_read_only(path).unwrap();
        let id: StreamId = session.parse().unwrap();
        replay::replay(&store, id, Mode::Strict, None).unwrap().timeline
    }
}

impl Default for Recorded {
    fn default() -> Self {
        Recorded::new()
    }
}
