//! Soak benchmark: long generated agent sessions (5,000 and 20,000 messages; 100,000 with
//! `--full`) imported with the default configuration, with `--cache-aware` and with
//! `--summarizer none`, on every backend, measured against the goals of issue 8.
//!
//! For each session length and configuration:
//! - **policy** (one in-process import on a `MemoryStore`, with `--views` read as it is
//!   written): calls over budget, max view ÷ budget, breaker trips, prefix rewrites (and how
//!   many while the cache was warm), cost ÷ lower bound (`ctxlog::cost`), views
//!   missing the first user message, summary tokens in the view ÷ target. These do not depend
//!   on the backend: `import` runs the same engine whatever store it writes to; each backend's
//!   session is checked to end at the same version.
//! - **per backend**: `ctxlog import` in a fresh process (this binary re-executes itself and
//!   calls `ctxlog_tools::run`, the whole `ctxlog` program): its peak RSS (`VmHWM`) ÷ transcript
//!   bytes, wall time, p50/p99 time per call (between consecutive timeline lines); then the
//!   store's bytes on disk ÷ transcript bytes, and the heap a live session holds once opened
//!   and planned (counted by a counting global allocator, the store's own caches excluded).
//!
//! `cargo run --release -p ctxlog-bench --bin soak [-- --full] [--sizes 5000,20000]
//! [--configs default,legacy,cache-aware,no-summaries] (`legacy`: `--no-cache-aware`, the gate that
//! was the default before issue 21) [--backends mem,sqlite,fs,sled]
//! [--budget 131104] [--seed N] [--dir DIR] [--shape agent|tool-loop]`
//!
//! `--shape tool-loop` (issue 21) imports single-human sessions instead
//! (`ctxlog_workload::tool_loop`: one instruction, then tool calls only) and adds two columns:
//! calls whose view leaves a hidden message unrepresented (no summary or placeholder names it),
//! and how many of the facts planted in the first tool results are still stated in the view on
//! the calls after their message was flushed out of it.

// A benchmark aborts on a broken fixture; there is nothing to recover.
#![allow(clippy::panic)]

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;
use std::time::Instant;

use clap::Parser as _;
use ctxlog::cost::{PrefixCache, TTL_MS};
use ctxlog::replay::CallRecord;
use ctxlog::{MemoryStore, Session, Store, StreamId, Timestamp};
use ctxlog_bench::machine;
use ctxlog_bench::views::{Diff, ViewTracker};
use ctxlog_tools::args::{Cli, Command as CliCommand};
use ctxlog_tools::import::{import, ImportOptions};
use ctxlog_tools::transcript::check_file;

#[global_allocator]
static ALLOCATOR: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);

/// The budget of issue 8's report.
const BUDGET: u64 = 131_104;
/// First argument that makes this binary the `ctxlog import` child.
const CHILD: &str = "__import-child";
const SESSION: &str = "00000000-0000-0000-0000-00000000500a";

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    panic!("{what}: {e}")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(CHILD) {
        child(args.get(2..).unwrap_or_default());
    }
    let opts = Options::parse(args.get(1..).unwrap_or_default());
    let started = Instant::now();
    println!("soak: budget {}, seed {:#x}, {}", opts.budget, opts.seed, machine::describe());
    println!("commit {}, {}", git_commit(), rustc_version());
    if !opts.extra.is_empty() {
        println!("every configuration also gets: {}", opts.extra.join(" "));
    }
    let dir = match &opts.dir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .unwrap_or_else(|e| fail("temp dir", e));
    let mut policies = Vec::new();
    let mut stores = Vec::new();
    for &n in &opts.sizes {
        let path = dir.path().join(format!("session-{n}.jsonl"));
        let file = std::fs::File::create(&path).unwrap_or_else(|e| fail("transcript", e));
        let lines = match opts.shape {
            Shape::Agent => ctxlog_workload::session(opts.seed, n),
            Shape::ToolLoop => ctxlog_workload::tool_loop(opts.seed, n),
        }
        .unwrap_or_else(|e| fail("--sizes", e));
        let bytes = lines.write_jsonl(std::io::BufWriter::new(file)).unwrap_or_else(|e| fail("transcript", e));
        eprintln!("[{:>6.0} s] {n} messages: {bytes} bytes of JSONL", started.elapsed().as_secs_f64());
        for config in &opts.configs {
            let mut flags = config.flags(opts.budget);
            flags.extend(opts.extra.iter().cloned());
            let (policy, mem) = policy_run(&path, &flags, opts.shape);
            eprintln!(
                "[{:>6.0} s] {n} {}: policy run done ({} calls, {:.1} s)",
                started.elapsed().as_secs_f64(),
                config.name(),
                policy.calls,
                policy.wall_s
            );
            for &backend in &opts.backends {
                let row = backend_run(&path, &flags, backend, dir.path(), &mem, &policy);
                eprintln!(
                    "[{:>6.0} s] {n} {} {backend}: import {:.1} s, peak RSS {:.1} MB",
                    started.elapsed().as_secs_f64(),
                    config.name(),
                    row.wall_s,
                    row.peak_rss as f64 / 1e6
                );
                stores.push((n, *config, backend, bytes, row));
            }
            policies.push((n, *config, bytes, policy));
        }
        let _ = std::fs::remove_file(&path);
    }
    print_tables(&policies, &stores, opts.budget, opts.shape);
    println!();
    println!("total {:.0} s; load average at the end {}", started.elapsed().as_secs_f64(), machine::load_average());
}

// ---- options ------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Config {
    Default,
    Legacy,
    CacheAware,
    NoSummaries,
}

impl Config {
    fn name(self) -> &'static str {
        match self {
            Config::Default => "default",
            Config::Legacy => "--no-cache-aware",
            Config::CacheAware => "--cache-aware",
            Config::NoSummaries => "--summarizer none",
        }
    }

    fn flags(self, budget: u64) -> Vec<String> {
        let mut f = vec!["--budget".to_string(), budget.to_string()];
        match self {
            Config::Default => {}
            Config::Legacy => f.push("--no-cache-aware".into()),
            Config::CacheAware => f.push("--cache-aware".into()),
            Config::NoSummaries => f.extend(["--summarizer".into(), "none".into()]),
        }
        f
    }
}

/// Which sessions the soak imports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// The demo's shape: human follow-ups every 8–15 turns.
    Agent,
    /// One instruction, then tool calls only (issue 21).
    ToolLoop,
}

struct Options {
    shape: Shape,
    sizes: Vec<u64>,
    configs: Vec<Config>,
    backends: Vec<&'static str>,
    budget: u64,
    seed: u64,
    dir: Option<PathBuf>,
    /// `--flags "…"`: more `ctxlog import` flags for every configuration (to evaluate a rule).
    extra: Vec<String>,
}

impl Options {
    fn parse(args: &[String]) -> Options {
        let mut o = Options {
            shape: Shape::Agent,
            sizes: vec![5_000, 20_000],
            configs: vec![Config::Default, Config::CacheAware, Config::NoSummaries],
            backends: vec!["mem", "sqlite", "fs", "sled"],
            budget: BUDGET,
            seed: ctxlog_workload::DEMO_SEED,
            dir: None,
            extra: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = || it.next().cloned().unwrap_or_else(|| fail(a, "needs a value"));
            match a.as_str() {
                "--full" => o.sizes.push(100_000),
                "--shape" => {
                    o.shape = match value().as_str() {
                        "agent" => Shape::Agent,
                        "tool-loop" => Shape::ToolLoop,
                        other => fail("--shape (agent or tool-loop)", other),
                    }
                }
                "--sizes" => o.sizes = list(&value(), |s| s.parse().ok()),
                "--configs" => {
                    o.configs = list(&value(), |s| match s {
                        "default" => Some(Config::Default),
                        "legacy" => Some(Config::Legacy),
                        "cache-aware" => Some(Config::CacheAware),
                        "no-summaries" => Some(Config::NoSummaries),
                        _ => None,
                    })
                }
                "--backends" => {
                    o.backends = list(&value(), |s| ["mem", "sqlite", "fs", "sled"].into_iter().find(|b| *b == s))
                }
                "--budget" => o.budget = value().parse().unwrap_or_else(|e| fail("--budget", e)),
                "--seed" => o.seed = value().parse().unwrap_or_else(|e| fail("--seed", e)),
                "--dir" => o.dir = Some(PathBuf::from(value())),
                "--flags" => o.extra = value().split_whitespace().map(String::from).collect(),
                other => fail("unknown flag", other),
            }
        }
        o
    }
}

fn list<T>(s: &str, parse: impl Fn(&str) -> Option<T>) -> Vec<T> {
    s.split(',').map(|x| parse(x.trim()).unwrap_or_else(|| fail("bad list item", x))).collect()
}

// ---- the policy run: one in-process import, views read as they are written ------------------

/// What the policy did over one session.
#[derive(Debug, Default)]
struct Policy {
    calls: u64,
    over_budget: u64,
    max_view: u64,
    /// A uniform chars/4 count of each view (its messages' JSON bytes ÷ 4), as a provider whose
    /// tokenizer is not ctxlog's estimator would: calls over the budget by it, and the largest.
    over_by_chars: u64,
    max_view_chars: u64,
    breaker_trips: u64,
    rewrites: u64,
    warm_rewrites: u64,
    first_user_missing: u64,
    /// Calls whose view leaves a hidden message unrepresented (timeline `represented < hidden`).
    unrepresented_calls: u64,
    /// Per planted fact: calls after its message was flushed out of the view, and of those the
    /// calls whose view still states it.
    facts: [(u64, u64); 4],
    max_summary_share: f64,
    cost_ratio: f64,
    cost_per_call: f64,
    /// First call that raised each guard kind, and how often each was raised.
    guards: BTreeMap<String, (u64, u64)>,
    first_over_budget: Option<u64>,
    last_view: (u64, u64),
    last_at_ms: f64,
    /// The stream version the session ends at.
    version: u64,
    wall_s: f64,
}

/// Per message of the current view: its summary tokens (0 if not a summary) and whether it
/// is the first user message.
#[derive(Debug, Clone, Copy)]
struct Note {
    summary_tokens: u64,
    first_user: bool,
    /// Which planted facts the message states (bit k: `PLANTED_FACTS[k]`).
    facts: u8,
}

/// Follows the views and prices the calls.
#[derive(Default)]
struct Probe {
    tracker: ViewTracker,
    buf: Vec<u8>,
    spare: Vec<u8>,
    notes: Vec<Note>,
    first_user: Option<Vec<u8>>,
    summary_tokens: HashMap<Vec<u8>, u64>,
    pending: Option<Diff>,
    cache: PrefixCache,
    previous_at: Option<f64>,
    policy: Policy,
    /// Look for the planted facts (tool-loop sessions).
    plant: bool,
}

const SUMMARY_TAG: &[u8] = b"<ctxlog-summary seq=";

impl Probe {
    fn view(&mut self, line: &mut Vec<u8>) {
        let diff = self.tracker.feed(line).unwrap_or_else(|e| fail("views", e));
        self.notes.truncate(diff.shared);
        for i in diff.rescanned() {
            let m = self.tracker.message(i).unwrap_or_else(|| fail("views", "message out of range"));
            if self.first_user.is_none() && m.starts_with(b"{\"role\":\"user\"") {
                self.first_user = Some(m.to_vec());
            }
            let first_user = self.first_user.as_deref() == Some(m);
            let head = m.get(..m.len().min(80)).unwrap_or_default();
            let summary_tokens = if head.windows(SUMMARY_TAG.len()).any(|w| w == SUMMARY_TAG) {
                summary_tokens(&mut self.summary_tokens, m)
            } else {
                0
            };
            let facts = if self.plant { facts_in(m) } else { 0 };
            self.notes.push(Note { summary_tokens, first_user, facts });
        }
        self.pending = Some(diff);
    }

    fn call(&mut self, r: &CallRecord) {
        let diff = self.pending.take().unwrap_or_else(|| fail("views", "a call without a view"));
        assert_eq!(
            diff.messages as u64, r.view_messages,
            "call {}: the views line disagrees with the timeline",
            r.call
        );
        let p = &mut self.policy;
        let at_ms = r.at * 1000.0;
        p.calls += 1;
        if r.view_tokens > r.budget {
            p.over_budget += 1;
            p.first_over_budget.get_or_insert(r.call);
        }
        p.max_view = p.max_view.max(r.view_tokens);
        let by_chars = diff.total_bytes.div_ceil(4);
        p.over_by_chars += u64::from(by_chars > r.budget);
        p.max_view_chars = p.max_view_chars.max(by_chars);
        for g in &r.guards {
            let e = p.guards.entry(g.kind.clone()).or_insert((r.call, 0));
            e.1 += 1;
            p.breaker_trips += u64::from(g.kind == "breaker_tripped");
        }
        if r.call > 0 && !r.prefix_reused {
            p.rewrites += 1;
            let warm = self.previous_at.is_some_and(|prev| at_ms - prev < TTL_MS);
            p.warm_rewrites += u64::from(warm);
        }
        self.previous_at = Some(at_ms);
        self.cache.call(at_ms, r.view_tokens, diff.shared_bytes, diff.total_bytes);
        p.first_user_missing += u64::from(!self.notes.iter().any(|n| n.first_user));
        p.unrepresented_calls += u64::from(r.represented < r.hidden);
        if self.plant {
            let stated = self.notes.iter().fold(0u8, |acc, n| acc | n.facts);
            for (k, f) in p.facts.iter_mut().enumerate() {
                // The result of tool turn k is message 3 + 2k; flushed means out of the view
                // (only a summary or the condensed summaries can still state it).
                if r.flushed > 3 + 2 * k as u64 {
                    f.0 += 1;
                    f.1 += u64::from(stated & (1 << k) != 0);
                }
            }
        }
        let summaries: u64 = self.notes.iter().map(|n| n.summary_tokens).sum();
        if r.target_tokens > 0 {
            p.max_summary_share = p.max_summary_share.max(summaries as f64 / r.target_tokens as f64);
        }
        p.last_view = (r.view_messages, r.view_tokens);
        p.last_at_ms = at_ms;
    }
}

/// Which of the planted facts a rendered message states.
fn facts_in(m: &[u8]) -> u8 {
    let mut mask = 0u8;
    for (k, fact) in ctxlog_workload::PLANTED_FACTS.iter().enumerate() {
        let f = fact.as_bytes();
        if m.windows(f.len()).any(|w| w == f) {
            mask |= 1 << k;
        }
    }
    mask
}

/// The estimator's tokens of a summary message, parsed once per distinct summary.
fn summary_tokens(known: &mut HashMap<Vec<u8>, u64>, m: &[u8]) -> u64 {
    // A summary is identified by its span (`seq="a-b"`, in its first bytes) and its length.
    let mut key = m.get(..m.len().min(96)).unwrap_or_default().to_vec();
    key.extend_from_slice(&(m.len() as u64).to_le_bytes());
    *known.entry(key).or_insert_with(|| {
        let text = std::str::from_utf8(m).unwrap_or_else(|e| fail("summary", e));
        let message = ctxlog::internal::wire::parse_message(text).unwrap_or_else(|e| fail("summary", e));
        u64::from(ctxlog::internal::tokens::Estimator::default().message(&message))
    })
}

/// The `--views` writer: hands each complete line to the probe.
struct ViewSink(Rc<RefCell<Probe>>);

impl Write for ViewSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut probe = self.0.borrow_mut();
        let probe = &mut *probe;
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            probe.buf.extend_from_slice(rest.get(..nl).unwrap_or_default());
            rest = rest.get(nl + 1..).unwrap_or_default();
            let mut line = std::mem::take(&mut probe.buf);
            probe.view(&mut line);
            // `line` now holds the previous view: keep its buffer for the next one.
            line.clear();
            probe.buf = std::mem::replace(&mut probe.spare, line);
        }
        probe.buf.extend_from_slice(rest);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn import_args(path: &Path, flags: &[String]) -> ctxlog_tools::args::ImportArgs {
    let argv = ["ctxlog", "import"].into_iter().map(String::from).chain([path.display().to_string()]);
    match Cli::try_parse_from(argv.chain(flags.iter().cloned())) {
        Ok(Cli { command: CliCommand::Import(a), .. }) => a,
        Ok(_) => fail("flags", "not an import"),
        Err(e) => fail("flags", e),
    }
}

fn policy_run(path: &Path, flags: &[String], shape: Shape) -> (Policy, MemoryStore) {
    let args = import_args(path, flags);
    let config = args.config.resolve(ctxlog::Config::default()).unwrap_or_else(|e| fail("config", e));
    let transcript = check_file(path, args.format).unwrap_or_else(|e| fail("transcript", e));
    let probe = Rc::new(RefCell::new(Probe { plant: shape == Shape::ToolLoop, ..Probe::default() }));
    let mut sink = ViewSink(Rc::clone(&probe));
    let store = MemoryStore::new();
    let id = SESSION.parse::<StreamId>().unwrap_or_else(|e| fail("session id", e));
    let opts = ImportOptions {
        config,
        session: Some(id),
        call_interval_ms: (args.call_interval * 1000.0).round() as u64,
        views: Some(&mut sink),
        inline_media: false,
        summaries: None,
    };
    let start = Instant::now();
    import(&transcript, &store, opts, |r| {
        probe.borrow_mut().call(r);
        Ok(())
    })
    .unwrap_or_else(|e| fail("import", e));
    drop(sink);
    let mut probe = Rc::try_unwrap(probe).unwrap_or_else(|_| fail("probe", "still shared")).into_inner();
    let p = &mut probe.policy;
    p.wall_s = start.elapsed().as_secs_f64();
    p.cost_ratio = probe.cache.totals.ratio();
    p.cost_per_call = probe.cache.totals.cost / probe.cache.totals.calls.max(1) as f64;
    p.version = store.head(id).unwrap_or_else(|e| fail("head", e)).unwrap_or(0);
    (probe.policy, store)
}

// ---- per backend: a fresh `ctxlog import` process, then the store it left ----------------------

#[derive(Debug)]
struct StoreRow {
    peak_rss: u64,
    wall_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    disk: Option<u64>,
    resident: Resident,
}

#[derive(Debug)]
struct Resident {
    bytes: u64,
    view_bytes: u64,
    messages: u64,
}

impl Resident {
    /// The goal's allowance: 3× the current view's bytes plus 100 bytes per message.
    fn allowance(&self) -> u64 {
        3 * self.view_bytes + 100 * self.messages
    }
}

fn backend_run(
    path: &Path,
    flags: &[String],
    backend: &str,
    dir: &Path,
    mem: &MemoryStore,
    policy: &Policy,
) -> StoreRow {
    let store_dir = dir.join(format!("store-{backend}"));
    let _ = std::fs::remove_dir_all(&store_dir);
    std::fs::create_dir_all(&store_dir).unwrap_or_else(|e| fail("store dir", e));
    let url = match backend {
        "mem" => "mem:".to_string(),
        "sqlite" => format!("sqlite:{}", store_dir.join("ctxlog.db").display()),
        other => format!("{other}:{}", store_dir.join("store").display()),
    };
    let mut cmd = Command::new(std::env::current_exe().unwrap_or_else(|e| fail("current exe", e)));
    cmd.arg(CHILD).arg("import").arg(path).args(["--store", &url, "--json", "--session", SESSION]).args(flags);
    let out = cmd.output().unwrap_or_else(|e| fail("child", e));
    let report = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        fail("ctxlog import", format!("{}: {}{}", out.status, report, String::from_utf8_lossy(&out.stderr)));
    }
    let field = |key: &str| -> f64 {
        report
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| fail("child report", format!("no {key} in {report}")))
    };
    let calls = field("calls ") as u64;
    assert_eq!(calls, policy.calls, "{backend}: the child made a different number of calls");
    let disk = (backend != "mem").then(|| machine::apparent_bytes(&store_dir).unwrap_or_else(|e| fail("du", e)));
    let id = SESSION.parse::<StreamId>().unwrap_or_else(|e| fail("session id", e));
    // The reopened session plans one call a cache lifetime after the last one.
    let now = (policy.last_at_ms + TTL_MS) as u64;
    let resident = if backend == "mem" {
        resident(mem, id, now, policy.version)
    } else {
        let store = ctxlog_tools::stores::open_store(&url, ctxlog_tools::stores::Access::ReadWrite)
            .unwrap_or_else(|e| fail("open store", e));
        resident(store.as_ref(), id, now, policy.version)
    };
    let _ = std::fs::remove_dir_all(&store_dir);
    StoreRow {
        peak_rss: field("peak_rss_bytes ") as u64,
        wall_s: field("wall_ms ") / 1000.0,
        p50_ms: field("p50_us ") / 1000.0,
        p99_ms: field("p99_us ") / 1000.0,
        disk,
        resident,
    }
}

/// Heap a live session holds: opened (snapshot + the rest of the log), one call planned and
/// aborted, the store's own allocations excluded (measured after the session is dropped).
fn resident<S: Store + ?Sized>(store: &S, id: StreamId, now: u64, version: u64) -> Resident {
    let mut session = Session::open(store, id).unwrap_or_else(|e| fail("open session", e));
    assert_eq!(session.state().version(), version, "the stored session ends elsewhere than the policy run's");
    let plan = session.plan(Timestamp::from_millis(now)).unwrap_or_else(|e| fail("plan", e));
    let view_bytes = session.plan_view(&plan).iter().map(|m| m.len() as u64).sum();
    session.abort(plan);
    let messages = session.state().message_count();
    let with = ALLOCATOR.allocated();
    drop(session);
    let without = ALLOCATOR.allocated();
    Resident { bytes: with.saturating_sub(without) as u64, view_bytes, messages }
}

// ---- the child: `ctxlog import` in its own process ------------------------------------------

/// Stdout of the child's `ctxlog import --json`: notes when each timeline line ends.
struct LineClock {
    ends: Vec<Instant>,
}

impl Write for LineClock {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let now = Instant::now();
        self.ends.extend(bytes.iter().filter(|&&b| b == b'\n').map(|_| now));
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn child(args: &[String]) -> ! {
    let mut out = LineClock { ends: Vec::new() };
    let mut err = Vec::new();
    let start = Instant::now();
    let code = ctxlog_tools::run(std::iter::once("ctxlog").chain(args.iter().map(String::as_str)), &mut out, &mut err);
    let wall = start.elapsed();
    if code != 0 {
        let _ = std::io::stderr().write_all(&err);
        std::process::exit(code);
    }
    // The first interval also reads and validates the transcript: left out.
    let mut per_call: Vec<f64> = out
        .ends
        .windows(2)
        .filter_map(|w| w.get(1).zip(w.first()))
        .map(|(b, a)| (*b - *a).as_secs_f64() * 1e6)
        .collect();
    let peak = machine::peak_rss_bytes().unwrap_or_else(|| fail("VmHWM", "not in /proc/self/status"));
    println!("calls {}", out.ends.len());
    println!("peak_rss_bytes {peak}");
    println!("wall_ms {}", wall.as_secs_f64() * 1000.0);
    println!("p50_us {}", machine::quantile(&mut per_call, 0.5));
    println!("p99_us {}", machine::quantile(&mut per_call, 0.99));
    std::process::exit(0);
}

// ---- report ---------------------------------------------------------------------------------

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn print_tables(
    policies: &[(u64, Config, u64, Policy)],
    stores: &[(u64, Config, &str, u64, StoreRow)],
    budget: u64,
    shape: Shape,
) {
    println!();
    println!("Policy (the same on every backend); goals in brackets.");
    println!();
    println!("| messages | config | calls | over budget [0] | max view ÷ budget [≤ 1] | over by bytes/4 [0] | max bytes/4 ÷ budget | breaker trips [0] | prefix rewrites (warm) | cost ÷ lower bound [≤ 1.05 with --cache-aware] | cost per call (k base tokens) | views without the first user message [0] | summaries ÷ target, max [≤ 0.25] |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (n, config, _, p) in policies {
        println!(
            "| {} | {} | {} | {} | {:.2} | {} | {:.2} | {} | {} ({}) | {:.3} | {:.1} | {} | {:.2} |",
            thousands(*n),
            config.name(),
            thousands(p.calls),
            thousands(p.over_budget),
            p.max_view as f64 / budget as f64,
            thousands(p.over_by_chars),
            p.max_view_chars as f64 / budget as f64,
            p.breaker_trips,
            thousands(p.rewrites),
            thousands(p.warm_rewrites),
            p.cost_ratio,
            p.cost_per_call / 1000.0,
            p.first_user_missing,
            p.max_summary_share
        );
    }
    println!();
    println!("Coverage and what summaries keep ({:?} sessions).", shape);
    println!();
    println!("| messages | config | calls with a hidden message unrepresented [0] | planted facts stated after they left the view [≥ 80%] |");
    println!("|---:|---|---:|---:|");
    for (n, config, _, p) in policies {
        let (kept, out) = p.facts.iter().fold((0u64, 0u64), |(k, o), f| (k + f.1, o + f.0));
        let facts = if shape == Shape::ToolLoop && out > 0 {
            format!("{:.1}% ({} of {} fact-calls)", 100.0 * kept as f64 / out as f64, thousands(kept), thousands(out))
        } else {
            "—".to_string()
        };
        println!("| {} | {} | {} | {facts} |", thousands(*n), config.name(), thousands(p.unrepresented_calls));
    }
    println!();
    println!("Per backend; goals in brackets. Allowance of a live session: 3× its current view bytes + 100 bytes per message.");
    println!();
    println!("| messages | config | backend | import s | p50 / p99 ms per call | import peak RSS ÷ transcript [≤ 2] | live session heap (MB) | ÷ allowance [≤ 1] | disk ÷ transcript |");
    println!("|---:|---|---|---:|---:|---:|---:|---:|---:|");
    for (n, config, backend, bytes, r) in stores {
        println!(
            "| {} | {} | {backend} | {:.1} | {:.3} / {:.1} | {:.2} | {:.1} | {:.2} | {} |",
            thousands(*n),
            config.name(),
            r.wall_s,
            r.p50_ms,
            r.p99_ms,
            r.peak_rss as f64 / *bytes as f64,
            r.resident.bytes as f64 / 1e6,
            r.resident.bytes as f64 / r.resident.allowance().max(1) as f64,
            r.disk.map_or("—".to_string(), |d| format!("{:.2}", d as f64 / *bytes as f64)),
        );
    }
    println!();
    println!("Details:");
    for (n, config, bytes, p) in policies {
        let guards: Vec<String> =
            p.guards.iter().map(|(k, (first, count))| format!("{k} ×{count} from call {first}")).collect();
        println!(
            "- {} messages ({:.1} MB), {}: first over budget at call {}; guards: {}; last view {} messages / {} tokens; policy run {:.1} s",
            thousands(*n),
            *bytes as f64 / 1e6,
            config.name(),
            p.first_over_budget.map_or("—".into(), thousands),
            if guards.is_empty() { "none".into() } else { guards.join(", ") },
            thousands(p.last_view.0),
            thousands(p.last_view.1),
            p.wall_s
        );
    }
    // The live session's heap excludes the store's own allocations, so it is the same on every
    // backend: one line per session length and configuration.
    let mut seen = Vec::new();
    for (n, config, _, _, r) in stores {
        let line = format!(
            "- {} messages, {}: live session of {} messages, view {:.1} MB, heap {:.1} MB (allowance {:.1} MB)",
            thousands(*n),
            config.name(),
            thousands(r.resident.messages),
            r.resident.view_bytes as f64 / 1e6,
            r.resident.bytes as f64 / 1e6,
            r.resident.allowance() as f64 / 1e6
        );
        if !seen.contains(&line) {
            println!("{line}");
            seen.push(line);
        }
    }
}

fn git_commit() -> String {
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(|| "unknown".into(), |o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn rustc_version() -> String {
    Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(|| "rustc unknown".into(), |o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(probe: &mut Probe, messages: &[&str]) {
        probe.view(&mut format!("{{\"call\":0,\"messages\":[{}]}}", messages.join(",")).into_bytes());
    }

    #[test]
    fn the_probe_finds_the_first_user_message_and_prices_summaries() {
        let system = r#"{"role":"system","content":"You are an agent."}"#;
        let first = r#"{"role":"user","content":"PROJECT PATH IS ~/x"}"#;
        let answer = r#"{"role":"assistant","content":"ok"}"#;
        let summary = r#"{"role":"user","content":"<ctxlog-summary seq=\"1-2\">\nThe user asked for x; the agent said ok.\n</ctxlog-summary>"}"#;
        let mut probe = Probe::default();
        feed(&mut probe, &[system, first, answer]);
        assert!(probe.notes.get(1).is_some_and(|n| n.first_user));
        assert_eq!(probe.notes.iter().filter(|n| n.first_user).count(), 1);
        assert!(probe.notes.iter().all(|n| n.summary_tokens == 0));
        // A view that lost the first user message and holds a summary instead.
        feed(&mut probe, &[system, summary, answer]);
        assert!(probe.notes.iter().all(|n| !n.first_user));
        let m = ctxlog::internal::wire::parse_message(summary).unwrap();
        let tokens = u64::from(ctxlog::internal::tokens::Estimator::default().message(&m));
        assert!(tokens > 10);
        assert_eq!(probe.notes.iter().map(|n| n.summary_tokens).sum::<u64>(), tokens);
    }

    fn policy_of(flags: &[&str]) -> Policy {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        ctxlog_workload::session(3, 401).unwrap().write_jsonl(std::fs::File::create(&path).unwrap()).unwrap();
        policy_run(&path, &flags.iter().map(|f| f.to_string()).collect::<Vec<_>>(), Shape::Agent).0
    }

    #[test]
    fn a_small_session_through_the_policy_run() {
        let text = ctxlog_workload::session(3, 401).unwrap().into_jsonl();
        let calls = text.lines().filter(|l| l.starts_with("{\"role\":\"assistant\"")).count() as u64;
        let p = policy_of(&["--budget", "30000"]);
        assert_eq!(p.calls, calls);
        assert_eq!(p.first_user_missing, 0);
        assert!(p.rewrites > 0 && p.max_summary_share > 0.0, "{p:?}");
        assert!(p.cost_ratio >= 1.0);
        assert!(p.version > p.calls);
        let none = policy_of(&["--budget", "30000", "--summarizer", "none"]);
        assert_eq!(none.max_summary_share, 0.0);
        assert_eq!(none.calls, calls);
    }
}
