//! ctxlog for tokio services.
//!
//! The core (`ctxlog`) is synchronous and does no IO of its own, but its [`Session`] calls the
//! [`Store`] it drives, and stores block: SQLite and fs `fsync` every commit, PostgreSQL waits
//! for the server. On a tokio worker thread that would stall every other task scheduled there.
//! [`AsyncSession`] is the session behind an async handle: each operation takes the session's
//! lock (one operation at a time per session, in arrival order) and runs on tokio's blocking
//! pool, so the runtime's workers never wait on a disk.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use std::sync::Arc;
//! use ctxlog::{parse_message, Config, MemoryStore, RequestOptions, StreamId, Usage, WireFormat};
//! use ctxlog_tokio::{now, AsyncSession};
//!
//! let store = Arc::new(MemoryStore::new()); // shared by every session of the service
//! let session = AsyncSession::create(store, StreamId::random(), WireFormat::Anthropic, Config::default(), now()).await?;
//! session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?]).await?;
//! let (plan, request) = session.plan_request(now(), &RequestOptions::new().model("claude-sonnet-4-5")).await?;
//! // ... POST `request.body()` to the provider, await its answer ...
//! session.commit(plan, now(), Some(Usage { input: 12, cache_read: 0, cache_write: 0, output: 5 })).await?;
//! # Ok(()) }
//! ```
//!
//! The handle is cheap to clone; clones drive the same session. A plan taken by one task and
//! committed after another task committed a call is stale, exactly as with the sync API
//! ([`ctxlog::SessionError::StalePlan`]); a service that wants one call in flight per session
//! holds its own lock (or a queue) across plan → provider → commit.

use std::sync::Arc;
use std::time::SystemTime;

use ctxlog::request::{Request, RequestOptions};
use ctxlog::session::{Appended, Committed, Prepared, Produced};
use ctxlog::summary::SummaryJob;
use ctxlog::{Config, Message, Plan, Session, SessionError, Store, StreamId, Timestamp, Usage, WireFormat};
use tokio::sync::Mutex;

/// What an async session operation can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The session refused or the store failed (see [`SessionError`]).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The runtime is shutting down: the operation did not run.
    #[error("the tokio runtime is shutting down; the session operation did not run")]
    Shutdown,
}

/// A [`Session`] for async code: every operation runs on tokio's blocking pool, one at a time
/// per session.
pub struct AsyncSession<S: Store + 'static> {
    id: StreamId,
    inner: Arc<Mutex<Session<S>>>,
}

impl<S: Store + 'static> Clone for AsyncSession<S> {
    fn clone(&self) -> Self {
        AsyncSession { id: self.id, inner: Arc::clone(&self.inner) }
    }
}

impl<S: Store + 'static> std::fmt::Debug for AsyncSession<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AsyncSession({})", self.id)
    }
}

impl<S: Store + 'static> AsyncSession<S> {
    /// Creates a session ([`Session::create`]).
    pub async fn create(
        store: S,
        id: StreamId,
        format: WireFormat,
        config: Config,
        now: Timestamp,
    ) -> Result<Self, Error> {
        let session = blocking(move || Session::create(store, id, format, config, now)).await??;
        Ok(Self::from(session))
    }

    /// Opens a session from its log ([`Session::open`]: snapshot, then replay).
    pub async fn open(store: S, id: StreamId) -> Result<Self, Error> {
        let session = blocking(move || Session::open(store, id)).await??;
        Ok(Self::from(session))
    }

    /// The session id.
    pub fn id(&self) -> StreamId {
        self.id
    }

    /// Runs `f` on the session, on the blocking pool, after the operations queued before it.
    /// The escape hatch for everything without a method here (reading the state, the built-in
    /// summarizer, …); the current tracing span goes with it.
    pub async fn call<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&mut Session<S>) -> T + Send + 'static,
    {
        let mut session = Arc::clone(&self.inner).lock_owned().await;
        let span = tracing::Span::current();
        blocking(move || span.in_scope(|| f(&mut session))).await
    }

    async fn try_call<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&mut Session<S>) -> Result<T, SessionError> + Send + 'static,
    {
        Ok(self.call(f).await??)
    }

    /// Appends messages as one batch ([`Session::append`]).
    pub async fn append(&self, messages: Vec<Message>) -> Result<Appended, Error> {
        self.try_call(move |s| s.append(messages)).await
    }

    /// Decides the next call ([`Session::plan`]).
    pub async fn plan(&self, now: Timestamp) -> Result<Plan, Error> {
        self.try_call(move |s| s.plan(now)).await
    }

    /// Decides the next call and builds its request body in one operation
    /// ([`Session::plan`] then [`Session::request`]).
    pub async fn plan_request(&self, now: Timestamp, opts: &RequestOptions) -> Result<(Plan, Request), Error> {
        let opts = opts.clone();
        self.try_call(move |s| {
            let plan = s.plan(now)?;
            let request = s.request(&plan, &opts)?;
            Ok((plan, request))
        })
        .await
    }

    /// The request body of a plan ([`Session::request`]); the plan is handed back.
    pub async fn request(&self, plan: Plan, opts: &RequestOptions) -> Result<(Plan, Request), Error> {
        let opts = opts.clone();
        self.try_call(move |s| s.request(&plan, &opts).map(|r| (plan, r))).await
    }

    /// Commits a dispatched call ([`Session::commit`]).
    pub async fn commit(&self, plan: Plan, at: Timestamp, usage: Option<Usage>) -> Result<Committed, Error> {
        self.try_call(move |s| s.commit(plan, at, usage)).await
    }

    /// Drops a plan: nothing is written ([`Session::abort`]).
    pub fn abort(&self, plan: Plan) {
        drop(plan);
    }

    /// The next summary the host should write, if any ([`Session::summary_job`]; pure, so it
    /// runs right here).
    pub async fn summary_job(&self) -> Option<SummaryJob> {
        self.inner.lock().await.summary_job()
    }

    /// Runs the built-in summarizer for `job` ([`Session::summarize`]; a span's messages out of
    /// the view are read back from the log, so it runs on the blocking pool).
    pub async fn summarize(&self, job: SummaryJob) -> Result<String, Error> {
        self.try_call(move |s| s.summarize(&job)).await
    }

    /// Hands a summary back ([`Session::prepare`]).
    pub async fn prepare(&self, job: SummaryJob, text: String, produced: Produced) -> Result<Prepared, Error> {
        self.try_call(move |s| s.prepare(&job, text, produced)).await
    }

    /// Undoes the edit or flush of `seq` ([`Session::restore`]).
    pub async fn restore(&self, seq: u64, by: &str, why: &str) -> Result<Committed, Error> {
        let (by, why) = (by.to_owned(), why.to_owned());
        self.try_call(move |s| s.restore(seq, &by, &why)).await
    }

    /// Writes a snapshot ([`Session::snapshot`]).
    pub async fn snapshot(&self) -> Result<(), Error> {
        self.try_call(|s| s.snapshot()).await
    }

    /// Folds what other writers committed ([`Session::catch_up`]).
    pub async fn catch_up(&self) -> Result<(), Error> {
        self.try_call(|s| s.catch_up()).await
    }
}

impl<S: Store + 'static> From<Session<S>> for AsyncSession<S> {
    fn from(session: Session<S>) -> Self {
        AsyncSession { id: session.id(), inner: Arc::new(Mutex::new(session)) }
    }
}

/// Runs `f` on the blocking pool. A panic in `f` resumes here, as if `f` had run inline.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Error> {
    match tokio::task::spawn_blocking(f).await {
        Ok(value) => Ok(value),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(Error::Shutdown),
    }
}

/// The host's clock as the core's time type. (The core reads no clock; this is the host side.)
/// A clock before 1970 reads as the epoch.
pub fn now() -> Timestamp {
    Timestamp::from_system_time(SystemTime::now())
}

/// The README's "Embedding it" example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
