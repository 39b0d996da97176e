//! `ctxlog proxy`: an HTTP proxy between any agent and the Anthropic Messages or OpenAI chat
//! API. Each request's history is diffed with the session's log, the new suffix appended, a
//! call planned, and the planned view forwarded; the upstream answer streams back byte for
//! byte while a copy is scanned for usage, and the call is committed when the answer ends.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! let store: Arc<dyn ctxlog::Store> = Arc::new(ctxlog::MemoryStore::new());
//! let cfg = ctxlog_proxy::ProxyConfig::new("127.0.0.1:8787".parse()?, "https://api.anthropic.com");
//! let handle = ctxlog_proxy::serve(cfg, store).await?;
//! println!("listening on {}", handle.addr());
//! handle.shutdown().await;
//! # Ok(()) }
//! ```

mod answer;
mod api;
mod blocking;
mod body;
mod breakpoints;
mod canonical;
mod compact;
mod compaction;
mod context_management;
mod count_tokens;
mod forward;
mod gemini;
mod headers;
mod history;
mod identity;
mod item;
mod metrics;
mod models;
mod overflow;
mod reply;
mod responses;
mod server;
mod sessions;
mod shared;
mod shedding;
mod summaries;
mod tails;
mod tee;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::time::Duration;

pub use breakpoints::{CacheBreakpoints, UnknownBreakpointMode};
pub use context_management::{ProviderContextManagement, UnknownContextManagementMode, CONTEXT_MANAGEMENT_HEADER};
pub use metrics::Metrics;
pub use models::{Models, ModelsError};
pub use server::{serve, ProxyHandle};
pub use summaries::{Summaries, MODEL_ATTEMPTS_BETWEEN_CALLS};

/// Header naming the session explicitly (else it is derived from the key and the history).
pub const SESSION_HEADER: &str = "x-ctxlog-session";
/// Header carrying the client token when one is configured.
pub const TOKEN_HEADER: &str = "x-ctxlog-token";
/// Response header telling the client which stream its call was logged in.
pub const STREAM_HEADER: &str = "x-ctxlog-stream";
/// Response header naming the stream a branch forked from (only on a branch's calls).
pub const BRANCH_OF_HEADER: &str = "x-ctxlog-branch-of";
/// Response header telling how many messages a branch shares with the stream it forked from.
pub const FORK_AT_HEADER: &str = "x-ctxlog-fork-at";
/// Response header telling the client the call's number in that stream.
pub const CALL_HEADER: &str = "x-ctxlog-call";
/// Response header telling an Anthropic client how many cache breakpoints its forwarded request
/// carried and who placed them (`3 auto`, `2 client`, `0 off`).
pub const BREAKPOINTS_HEADER: &str = "x-ctxlog-breakpoints";

/// How the proxy runs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Where to listen (port 0: any free port; [`ProxyHandle::addr`] says which).
    pub listen: SocketAddr,
    /// Base URL of the provider (`https://api.anthropic.com`, `http://127.0.0.1:9000/base`).
    pub upstream: String,
    /// The engine's knobs for sessions this proxy creates.
    pub engine: ctxlog::Config,
    /// Largest request body accepted (default 32 MiB); larger ones get 413.
    pub max_body: usize,
    /// When set, every request except `/healthz` must carry it in `x-ctxlog-token`.
    pub client_token: Option<String>,
    /// Longest wait for the upstream's response headers, and between two chunks of its body.
    pub upstream_timeout: Duration,
    /// Longest wait of a request for another request of the same session to finish; after it
    /// the request is passed through unmodified (and counted in `/metrics`).
    pub session_wait: Duration,
    /// A session unused this long is shrunk to the digests of its history (a few bytes per
    /// message): its state and view cache leave memory, and the next request reopens it from
    /// the store's snapshot without comparing the history by content (default 60 s).
    pub idle_shrink: Duration,
    /// A session unused this long is dropped from memory entirely, digests included (it is
    /// reopened from the store, and its history compared once by content).
    pub idle_evict: Duration,
    /// Accept a listen address that is not loopback.
    pub allow_remote: bool,
    /// Who writes the sessions' summaries between calls (default: the built-in extractive
    /// summarizer); without them a long session's floor outgrows its budget.
    pub summaries: Summaries,
    /// Connections served at once (default 1024); past it the listener waits for one to close
    /// instead of accepting (no busy loop), so a flood of idle connections cannot starve it.
    pub max_connections: usize,
    /// Longest wait for a request's headers, from its connection's accept or the end of the
    /// previous request on it (default 30 s): a client that sends them byte by byte, or
    /// holds an idle connection open, is disconnected after it.
    pub header_timeout: Duration,
    /// Longest wait for a request's whole body once its headers arrived (default 60 s).
    pub body_timeout: Duration,
    /// On shutdown, how long calls in flight may take to end and commit (default 30 s).
    pub drain_timeout: Duration,
    /// Whose prompt-cache breakpoints a forwarded Anthropic request carries (default `auto`).
    pub cache_breakpoints: CacheBreakpoints,
    /// Context windows by model: when set, a session is created with the budget of its
    /// request's model ([`Models::budget`]; `engine.budget` for a model not in the table).
    /// `None` (the default; `ctxlog proxy --budget`): `engine.budget` for every session.
    pub models: Option<Models>,
    /// What a client's own Anthropic `context_management` gets: forwarded for the provider
    /// (`pass`, default), or applied by ctxlog as the call's knobs and left out (`apply`).
    pub provider_context_management: ProviderContextManagement,
}

impl ProxyConfig {
    /// The engine's knobs for a session created by a request for `model` reserving
    /// `max_tokens` of output.
    pub fn engine_for(&self, model: Option<&str>, max_tokens: Option<u64>) -> ctxlog::Config {
        let mut c = self.engine.clone();
        if let Some(b) = self.models.as_ref().zip(model).and_then(|(t, m)| t.budget(m, max_tokens)) {
            c.budget = b;
        }
        c
    }
}

impl ProxyConfig {
    /// Defaults for everything but the two addresses.
    pub fn new(listen: SocketAddr, upstream: &str) -> Self {
        ProxyConfig {
            listen,
            upstream: upstream.to_owned(),
            engine: ctxlog::Config::default(),
            max_body: 32 * 1024 * 1024,
            client_token: None,
            upstream_timeout: Duration::from_secs(600),
            session_wait: Duration::from_secs(120),
            idle_shrink: Duration::from_secs(60),
            idle_evict: Duration::from_secs(600),
            allow_remote: false,
            summaries: Summaries::Extractive,
            max_connections: 1024,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(30),
            cache_breakpoints: CacheBreakpoints::Auto,
            models: None,
            provider_context_management: ProviderContextManagement::Pass,
        }
    }
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The listen address is not loopback and `allow_remote` is off.
    #[error("refusing to listen on {0}: not a loopback address (pass --allow-remote to accept it)")]
    NotLoopback(SocketAddr),
    /// The upstream URL is not an absolute http(s) URL.
    #[error("upstream URL {url:?}: {message}")]
    Upstream {
        /// The URL.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// The listen socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The engine configuration is invalid.
    #[error(transparent)]
    Config(#[from] ctxlog::ConfigError),
}
