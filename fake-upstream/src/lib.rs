//! A loopback fake of the Anthropic Messages, OpenAI Chat Completions and OpenAI Responses APIs for tests and
//! benchmarks: real HTTP/1.1 (keep-alive), JSON and SSE replies shaped like the real APIs',
//! a deterministic reply and usage model (see [`reply`]), scripted faults ([`Fault`]), and a
//! byte-exact record of every exchange ([`Exchange`]). Strict by default: it refuses what the
//! real APIs refuse, with their errors ([`strict`]), and caches only as they do. See README.md.
//!
//! Control endpoints (for the binary and non-Rust tests): `POST /_fake/script` with a
//! [`ScriptEntry`] or an array of them, `DELETE /_fake/script`, `GET /_fake/requests` (JSONL),
//! `POST /_fake/release` (frees held requests, see [`Fault::Hold`]), `POST /_fake/reset`,
//! `POST /_fake/config` (relax a [`Rule`], set the context window, move the caches' clock).

mod anthropic;
mod cache;
pub mod context_editing;
mod faults;
pub mod gemini;
mod openai;
mod record;
pub mod reply;
pub mod responses;
mod server;
mod sse;
pub mod strict;

pub use faults::{Fault, LateEnd, ScriptEntry};
pub use record::{Exchange, RecordedRequest, RecordedResponse};
pub use strict::{sign as thinking_signature, Rule};

use server::{lock, Shared};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why the fake did not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The record file could not be created.
    #[error("creating record file {}: {source}", path.display())]
    Record {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The runtime or its thread could not start.
    #[error("starting the server runtime: {0}")]
    Runtime(std::io::Error),
}

/// A running fake upstream; stops on [`FakeUpstream::shutdown`] or drop.
pub struct FakeUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeUpstream {
    /// Starts on `127.0.0.1:0` without a record file.
    pub fn start() -> Result<Self, Error> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), None)
    }

    /// Starts on `addr`, appending each finished exchange as a JSON line to `record` if given.
    pub fn start_on(addr: SocketAddr, record: Option<&Path>) -> Result<Self, Error> {
        let file = match record {
            Some(p) => Some(std::sync::Mutex::new(
                std::fs::File::create(p).map_err(|source| Error::Record { path: p.to_owned(), source })?,
            )),
            None => None,
        };
        let shared = Arc::new(Shared { record: file, ..Shared::default() });
        let std_listener = std::net::TcpListener::bind(addr).map_err(|source| Error::Bind { addr, source })?;
        let local = std_listener.local_addr().map_err(|source| Error::Bind { addr, source })?;
        std_listener.set_nonblocking(true).map_err(|source| Error::Bind { addr, source })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("fake-upstream")
            .enable_io()
            .enable_time()
            .build()
            .map_err(Error::Runtime)?;
        let listener = {
            let _g = rt.enter();
            tokio::net::TcpListener::from_std(std_listener).map_err(Error::Runtime)?
        };
        let (stop, stop_rx) = tokio::sync::oneshot::channel();
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("fake-upstream-accept".into())
            .spawn(move || {
                rt.block_on(accept(listener, sh, stop_rx));
                // Drops every connection task: hung and stalled exchanges end here.
                rt.shutdown_timeout(std::time::Duration::from_secs(1));
            })
            .map_err(Error::Runtime)?;
        Ok(FakeUpstream { addr: local, shared, stop: Some(stop), thread: Some(thread) })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR` (no trailing slash): the base URL for clients.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A snapshot of every exchange so far, in arrival order (control endpoints excluded).
    pub fn requests(&self) -> Vec<Exchange> {
        lock(&self.shared.exchanges).clone()
    }

    /// Queues `fault` for the next `times` model requests (after those already queued).
    pub fn script(&self, fault: Fault, times: usize) {
        self.shared.push_script([ScriptEntry { fault, times }]);
    }

    /// Drops all queued faults.
    pub fn clear_script(&self) {
        lock(&self.shared.script).clear();
    }

    /// Frees every request waiting on a [`Fault::Hold`] now (later holds wait for the next call).
    pub fn release(&self) {
        self.shared.release.send_modify(|g| *g += 1);
    }

    /// Relaxes `rule` (strict by default): only for a test whose input must break it.
    pub fn relax(&self, rule: Rule) {
        self.shared.configure(&server::Config { relax: vec![rule], ..Default::default() });
    }

    /// Sets every model's context window (`None`: Anthropic 200,000, OpenAI 128,000 tokens).
    pub fn set_context_tokens(&self, tokens: Option<u64>) {
        self.shared.configure(&server::Config { context_tokens: Some(tokens), ..Default::default() });
    }

    /// Answers `/v1/chat/completions` context overflows as llama.cpp's server does
    /// (`exceed_context_size_error`, `n_prompt_tokens`, `n_ctx`) instead of as OpenAI does.
    pub fn speak_llama_cpp(&self, on: bool) {
        self.shared.configure(&server::Config { llama_cpp: Some(on), ..Default::default() });
    }

    /// Moves the prompt caches' clock forward (their TTLs expire without waiting).
    pub fn advance_clock(&self, by: std::time::Duration) {
        *server::lock(&self.shared.clock_offset) += by;
    }

    /// Forgets exchanges, queued faults and the prompt-cache model's state.
    pub fn reset(&self) {
        self.shared.reset();
    }

    /// Stops accepting, drops open connections, joins the server thread.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.stop_now();
    }
}

async fn accept(listener: tokio::net::TcpListener, shared: Arc<Shared>, mut stop: tokio::sync::oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            _ = &mut stop => return,
            r = listener.accept() => {
                let Ok((stream, _)) = r else { continue };
                let sh = shared.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| server::handle(req, sh.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        }
    }
}
