//! ctxlog keeps an LLM conversation inside its context window without losing anything,
//! without breaking the provider's prompt cache, and with every decision recorded as an event.
//!
//! A host appends messages to a [`Session`], asks it before each model call what to send
//! ([`Session::plan`], pure: flush gate, ladder, guards), sends the exact body
//! ([`Session::request`]), and commits what the provider reported ([`Session::commit`]): the
//! call's decisions and the served request are appended to the session's log as one atomic
//! batch, then applied. Between calls it writes the summaries the engine asks for.
//!
//! ```
//! use std::time::Duration;
//! use ctxlog::{parse_message, Config, Extractive, MemoryStore, RequestOptions, Session, StreamId, Timestamp, Usage, WireFormat};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new(); // or SqliteStore, FsStore, SledStore, PgStore: the `Store` trait
//! let config = Config { budget: 200_000, cache_aware: true, ..Config::default() };
//! let mut now = Timestamp::from_secs(1_767_225_600); // the host's clock: Timestamp::from_system_time(SystemTime::now())
//! let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, config, now)?;
//! session.append(vec![parse_message(r#"{"role":"user","content":"Add CSV export to ~/src/ora."}"#)?])?;
//! let opts = RequestOptions::new().model("claude-sonnet-4-5").max_tokens(4_096);
//! for turn in 0..3 {
//!     let plan = session.plan(now)?; // decided, nothing written
//!     let request = session.request(&plan, &opts)?; // the exact JSON body to POST
//!     // ... send `request.body()`; if the call fails: `session.abort(plan)` writes nothing.
//!     let reported = serde_json::json!({"input_tokens": 30, "cache_read_input_tokens": 1_200 * turn, "output_tokens": 90});
//!     now = now + Duration::from_secs(4);
//!     session.commit(plan, now, Some(Usage::from_anthropic(&reported)?))?; // durable, then applied
//!     session.append(vec![
//!         parse_message(r#"{"role":"assistant","content":"Done: the exporter writes RFC 4180 CSV."}"#)?,
//!         parse_message(r#"{"role":"user","content":"Now add a header row."}"#)?,
//!     ])?;
//!     // Effects the host fulfils between calls: summaries (the built-in one here, or a model).
//!     // By hand: `summary_job` → `summarize` (or a model) → `prepare`, until none is left.
//!     session.run_summaries(&mut Extractive, usize::MAX)?;
//! }
//! // The log explains itself: every served view re-renders to the digest recorded for it.
//! assert!(ctxlog::replay::verify(&store, session.id())?.ok());
//! # Ok(()) }
//! ```
//!
//! This crate is the sans-IO core: it performs no IO and reads no clock. Time comes in as an
//! argument (`now`, `at`), storage through the [`Store`] trait, summaries through effects the
//! host fulfils. Backends live in their own crates (`ctxlog-store-sqlite`, `-fs`, `-sled`,
//! `-postgres`); `ctxlog-tokio` runs a session's store IO off a tokio runtime's workers.
//! Decisions are also emitted as `tracing` events (no message content above `trace`).
// A `pub` item that no path outside the crate reaches is `pub(crate)`: the surface says what it is.
#![warn(unreachable_pub)]

// The public surface is curated (ARCHITECTURE.md "Public API", `docs/public-api.md` is the
// semver list): the root re-exports what a host uses; the modules below hold the data types
// a host reads (events, state, timeline). Every other module is private, reachable only through
// the root's re-exports and `internal`: the engine parts the workspace's own tools, proxy,
// benchmarks and tests share, each named there on purpose, outside the semver promise.
mod breakpoints;
pub mod codec;
pub mod config;
pub mod cost;
mod engine;
mod error;
pub mod event;
#[doc(hidden)]
pub mod internal;
mod json;
mod log;
mod media;
pub mod message;
mod numbers;
pub mod overflow;
mod placeholder;
mod policy;
mod problem;
mod render;
pub mod replay;
pub mod request;
pub mod session;
mod snapshot;
pub mod state;
pub mod store;
pub mod summary;
pub mod summary_call;
pub mod summary_echo;
pub mod summary_fit;
mod summary_prompt;
pub mod time;
mod tokens;
mod trace;
pub mod transfer;
pub mod usage;
mod view;
mod wire;

pub use codec::DecodeError;
pub use config::{CallKnobs, Config, ConfigError};
pub use error::{SessionError, StaleCause};
pub use event::Event;
pub use message::Message;
pub use request::{CacheTtl, Request, RequestError, RequestOptions};
pub use session::{
    Appended, Committed, Extractive, PendingAppend, Plan, Prepared, Produced, Session, Summarizer, SummaryAttempt,
    SummaryFinished, SummaryOutcome, SummaryRun,
};
pub use state::{State, Violation};
pub use store::{
    BlobId, ExpectedVersion, IntegrityReport, Lease, MemoryStore, Record, Snapshot, Store, StoreError, StoredRecord,
    StreamId, Version,
};
pub use summary::SummaryJob;
pub use summary_call::{ForkRefusal, SummaryCall, SummaryRequest};
pub use time::{Millis, Timestamp};
pub use usage::{Usage, UsageError, UsageFormat};
pub use wire::{parse_message, WireError, WireFormat};
