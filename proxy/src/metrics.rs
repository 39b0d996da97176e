//! `/metrics` in the Prometheus text format: requests by path and status, compactions,
//! divergences, busy pass-throughs, commits and aborts, prompt-cache reuse from the reported
//! usage, and the latency the proxy adds (a histogram).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use ctxlog::Usage;

/// Upper bounds of the added-latency buckets, in seconds.
const BUCKETS: [f64; 10] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0];

/// The proxy's counters (shared by every connection).
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    pub(crate) compactions: AtomicU64,
    pub(crate) branched: AtomicU64,
    pub(crate) busy: AtomicU64,
    pub(crate) failed_writes: AtomicU64,
    pub(crate) failed_commits: AtomicU64,
    pub(crate) catch_ups: AtomicU64,
    pub(crate) lease_waits: AtomicU64,
    pub(crate) committed: AtomicU64,
    pub(crate) aborted: AtomicU64,
    pub(crate) resident: AtomicU64,
    prompt_tokens: AtomicU64,
    cache_read_tokens: AtomicU64,
    latency: Mutex<([u64; BUCKETS.len()], u64, f64)>,
}

impl Metrics {
    pub(crate) fn request(&self, path: &str, status: u16) {
        // Paths are labels: only the ones the proxy knows, so a client cannot grow the map.
        let path = match path {
            "/v1/messages"
            | "/v1/chat/completions"
            | "/v1/responses"
            | "/v1/responses/compact"
            | "/healthz"
            | "/readyz"
            | "/metrics" => path,
            // Gemini's paths name the model: one label per method.
            p => match crate::gemini::method_of(p) {
                Some(m) if m.stream => "/v1beta/models/*:streamGenerateContent",
                Some(_) => "/v1beta/models/*:generateContent",
                None => "other",
            },
        };
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((path.to_owned(), status)).or_default() += 1;
        }
    }

    pub(crate) fn usage(&self, u: &Usage) {
        self.prompt_tokens.fetch_add(u.prompt_total(), Relaxed);
        self.cache_read_tokens.fetch_add(u.cache_read, Relaxed);
    }

    pub(crate) fn added(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Ok(mut l) = self.latency.lock() {
            for (i, b) in BUCKETS.iter().enumerate() {
                if s <= *b {
                    l.0[i] += 1;
                }
            }
            l.1 += 1;
            l.2 += s;
        }
    }

    /// Requests answered with `status` on `path` so far.
    pub fn requests(&self, path: &str, status: u16) -> u64 {
        self.requests.lock().ok().and_then(|m| m.get(&(path.to_owned(), status)).copied()).unwrap_or(0)
    }

    /// Requests answered "retry" because their session stayed busy past the wait.
    pub fn busy(&self) -> u64 {
        self.busy.load(Relaxed)
    }

    /// Requests whose messages could not be logged (nothing was forwarded).
    pub fn failed_writes(&self) -> u64 {
        self.failed_writes.load(Relaxed)
    }

    /// Answers whose call could not be committed (the client got an error in place of the end).
    pub fn failed_commits(&self) -> u64 {
        self.failed_commits.load(Relaxed)
    }

    /// Calls that first folded in records of other writers (a fleet, a restore).
    pub fn catch_ups(&self) -> u64 {
        self.catch_ups.load(Relaxed)
    }

    /// Times a request waited for another process's lease on its session.
    pub fn lease_waits(&self) -> u64 {
        self.lease_waits.load(Relaxed)
    }

    /// Sessions held in memory at the last idle sweep.
    pub fn sessions_in_memory(&self) -> u64 {
        self.resident.load(Relaxed)
    }

    /// Calls committed so far.
    pub fn committed(&self) -> u64 {
        self.committed.load(Relaxed)
    }

    /// Calls whose plan compacted the view.
    pub fn compactions(&self) -> u64 {
        self.compactions.load(Relaxed)
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "# HELP ctxlog_proxy_requests_total Requests answered, by path and status.");
        let _ = writeln!(o, "# TYPE ctxlog_proxy_requests_total counter");
        if let Ok(m) = self.requests.lock() {
            for ((path, status), n) in m.iter() {
                let _ = writeln!(o, "ctxlog_proxy_requests_total{{path=\"{path}\",status=\"{status}\"}} {n}");
            }
        }
        let counters = [
            ("compactions", "Calls whose plan changed the view (flushes, edits, summaries).", &self.compactions),
            ("branched", "Requests whose history forked from the log (a branch began).", &self.branched),
            ("busy", "Requests told to retry: their session stayed busy past the wait.", &self.busy),
            ("failed_writes", "Requests whose messages could not be logged (nothing forwarded).", &self.failed_writes),
            (
                "failed_commits",
                "Answers whose call could not be committed (the client got an error instead).",
                &self.failed_commits,
            ),
            ("catch_ups", "Calls that first folded in other writers' records.", &self.catch_ups),
            ("lease_waits", "Waits for another process's lease on a session.", &self.lease_waits),
            ("committed", "Calls committed.", &self.committed),
            ("aborted", "Calls aborted (upstream error, timeout, client gone).", &self.aborted),
            ("prompt_tokens", "Prompt tokens the upstream reported.", &self.prompt_tokens),
            ("cache_read_tokens", "Prompt tokens the upstream reported read from its cache.", &self.cache_read_tokens),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(o, "# HELP ctxlog_proxy_{name}_total {help}");
            let _ = writeln!(o, "# TYPE ctxlog_proxy_{name}_total counter");
            let _ = writeln!(o, "ctxlog_proxy_{name}_total {}", v.load(Relaxed));
        }
        let _ = writeln!(o, "# HELP ctxlog_proxy_sessions_in_memory Sessions held in memory at the last idle sweep.");
        let _ = writeln!(o, "# TYPE ctxlog_proxy_sessions_in_memory gauge");
        let _ = writeln!(o, "ctxlog_proxy_sessions_in_memory {}", self.resident.load(Relaxed));
        let prompt = self.prompt_tokens.load(Relaxed);
        let ratio = if prompt == 0 { 0.0 } else { self.cache_read_tokens.load(Relaxed) as f64 / prompt as f64 };
        let _ = writeln!(o, "# HELP ctxlog_proxy_cache_reuse_ratio Cache-read share of the reported prompt tokens.");
        let _ = writeln!(o, "# TYPE ctxlog_proxy_cache_reuse_ratio gauge");
        let _ = writeln!(o, "ctxlog_proxy_cache_reuse_ratio {ratio}");
        let _ = writeln!(o, "# HELP ctxlog_proxy_added_latency_seconds Time the proxy adds to a call (before forwarding, after the upstream headers).");
        let _ = writeln!(o, "# TYPE ctxlog_proxy_added_latency_seconds histogram");
        if let Ok(l) = self.latency.lock() {
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(o, "ctxlog_proxy_added_latency_seconds_bucket{{le=\"{b}\"}} {}", l.0[i]);
            }
            let _ = writeln!(o, "ctxlog_proxy_added_latency_seconds_bucket{{le=\"+Inf\"}} {}", l.1);
            let _ = writeln!(o, "ctxlog_proxy_added_latency_seconds_sum {}", l.2);
            let _ = writeln!(o, "ctxlog_proxy_added_latency_seconds_count {}", l.1);
        }
        o
    }
}
