//! `Session`: drives the engine over a [`Store`]. The only place where the core meets storage.
//!
//! Every command follows decide → persist → advance: events are decided and validated against
//! the state without touching it, appended to the store as one atomic batch, and applied only
//! after the store acknowledged them (`persist.rs`). One file per concern, each one `impl` block;
//! the order of use is written on [`Session`].

mod append;
mod branch;
mod call;
mod edits;
mod lifecycle;
mod persist;
mod rejections;
mod summaries;
mod summarizer;

use std::sync::Arc;

use crate::request::Request;
use crate::state::State;
use crate::store::{Store, StreamId, Version};
use crate::view::ViewCache;

pub use self::append::{Appended, PendingAppend};
pub use self::call::Plan;
pub use self::lifecycle::new_session_id;
pub use self::persist::Committed;
pub use self::rejections::CallRejectedOutcome;
pub use self::summaries::{Prepared, Produced, SummaryAttempt, SummaryFinished, SummaryOutcome};
pub use self::summarizer::{Extractive, RunEnd, Summarizer, SummaryRun, SummaryStep, WrittenBy};
// The paths these had when they were written here (the public API keeps them).
pub use crate::error::{SessionError, StaleCause};
pub use crate::log::{hydrate, load_messages, READ_CHUNK};
pub use crate::snapshot::{decode_snapshot, encode_snapshot, SnapshotError, SNAPSHOT_LAYOUT};

// A session, its plans and its requests move between threads (a worker pool, tokio's blocking
// pool): checked here so that a field that is not `Send` fails this crate's build.
const _: () = {
    const fn send<T: Send>() {}
    send::<Session<crate::store::MemoryStore>>();
    send::<Session<Arc<dyn Store>>>();
    send::<Plan>();
    send::<Request>();
};

/// A session over a store. `Send` when its store handle is: one shared store (`Arc<S>`, `&S`)
/// serves any number of sessions on any number of threads; one session is driven by one thread
/// at a time (`&mut self`).
///
/// # Method groups, in the order a host uses them
///
/// 1. **Lifecycle** (`lifecycle.rs`): [`create`](Session::create) /
///    [`create_with`](Session::create_with) / [`create_named`](Session::create_named) /
///    [`create_import`](Session::create_import) … [`complete_import`](Session::complete_import),
///    [`open`](Session::open) / [`open_import`](Session::open_import),
///    [`catch_up`](Session::catch_up), [`snapshot`](Session::snapshot), the getters
///    ([`id`](Session::id), [`state`](Session::state), [`config`](Session::config), …); and
///    [`branch`](Session::branch) (`branch.rs`).
/// 2. **Append** (`append.rs`): [`append`](Session::append),
///    [`append_unsynced`](Session::append_unsynced), [`append_pending`](Session::append_pending).
/// 3. **The call** (`call.rs`): [`plan`](Session::plan) (pure) → [`request`](Session::request)
///    (the exact body; [`auto_breakpoints`](Session::auto_breakpoints) before it) → the host
///    sends it → [`commit`](Session::commit) / [`commit_request`](Session::commit_request) /
///    [`commit_answered`](Session::commit_answered) | [`abort`](Session::abort) (writes nothing)
///    | [`reject_call`](Session::reject_call) (the provider refused it: `rejections.rs`).
///    [`preview`](Session::preview) plans on a copy.
/// 4. **Summaries**, between calls (`summaries.rs`): [`summary_job`](Session::summary_job) →
///    [`summarize`](Session::summarize) (built in) or the host's text →
///    [`prepare`](Session::prepare); by a model: [`summary_job_for`](Session::summary_job_for) →
///    [`start_summary`](Session::start_summary) → the host sends it →
///    [`finish_summary`](Session::finish_summary) | [`cancel_summary`](Session::cancel_summary).
///    [`run_summaries`](Session::run_summaries) (`summarizer.rs`) is that loop, built in.
/// 5. **Edits** (`edits.rs`): [`restore`](Session::restore); a host's guard:
///    [`raise_guard`](Session::raise_guard) (`rejections.rs`).
///
/// So one turn is `append → plan → request → send → commit | abort → summaries`. A plan stays
/// committable across appends only ([`StaleCause`]).
pub struct Session<S: Store> {
    store: S,
    stream: StreamId,
    state: State,
    cache: ViewCache,
    /// Version and kind of the last event that was not an append: a plan made at or after it
    /// can still be committed (appends since then are not part of the view it served).
    settled: (Version, StaleCause),
    /// The summary attempt in flight, by id (at most one).
    in_flight: Option<u64>,
    attempts: u64,
}
