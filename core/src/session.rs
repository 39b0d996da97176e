//! `Session`: drives the engine over a [`Store`]. The only place where the core meets storage.
//!
//! Every command follows decide → persist → advance: events are decided and validated against
//! the state without touching it, appended to the store as one atomic batch, and applied only
//! after the store acknowledged them.

mod branch;

use std::ops::Range;
use std::sync::Arc;

use uuid::Uuid;

use crate::breakpoints::{Mark, Origin, Placement};
use crate::codec::{self, DecodeError};
use crate::config::{Config, ConfigError};
use crate::engine;
use crate::event::{
    AnswerReceived, CallRejected, Event, GuardKind, ImportCompleted, ImportSource, LimitLearned, MessageAppended,
    RequestRecord, RequestServed, Restored, SessionStarted, SummaryFailed, SummaryFailure, SummaryMode,
    SummaryPrepared, ToolsRecord,
};
use crate::media;
use crate::message::{BlobRef, Block, Content, ImageUrl, MediaData, MediaSource, Message};
use crate::policy::guards;
use crate::request::{self, CacheTtl, Request, RequestOptions, ServedView};
use crate::state::{State, Violation};
pub use crate::store::SnapshotError;
use crate::store::{BlobId, ExpectedVersion, Record, Snapshot, Store, StoreError, StreamId, Version};
use crate::summary::{self, SummaryJob};
use crate::summary_call::{self, SummaryCall, SummaryRequest};
use crate::time::Timestamp;
use crate::tokens::text_tokens;
use crate::usage::Usage;
use crate::view::{render_item_with, thousands, ViewCache};
use crate::wire::{self, BlobSource, Media, RenderOpts, WireError, WireFormat};

/// Records read per store round trip during replay.
pub const READ_CHUNK: usize = 1024;
/// Layout of a snapshot body; bump on any change to [`State`]'s fields *or* to what the fold
/// computes from an event (a snapshot is only valid for the fold that wrote it).
/// 2: the target guards re-arm after a call that needs no compaction.
/// 3: summaries carry their standing (pending, shown, condensed, retired); the view's summary
/// tokens are kept.
/// 4: the count of verbatim messages that carry tool ids includes system and first human ones.
/// 5: bounded memory: entries keep facts, their record's version and a body only while in the
/// view; a tool index replaces the id maps; summaries out of the view drop their text; imports.
/// 6: the config holds `usage_floor_ratio`; the meter anchors only on trusted reports (and
/// scales what was added since by the report's ratio), and a trusted report clears the
/// usage guard.
/// 7: the last served request (its record of model and tools), consecutive summary failures,
/// fork refusal counts; a call that needs no compaction ends a paused summarizer's wait.
/// 8: the config holds `view_version`; views of version 2 hold placeholders; the meter keeps the
/// provider's rate across history changes; restored messages and when; the first human message
/// over the target may be truncated once; the last request's breakpoint placement; the summary
/// job a provider refused (latched until the job changes).
pub const SNAPSHOT_LAYOUT: u32 = 8;

/// Everything a session command can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A record did not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// What the caller asked for is impossible (restore a message that was never edited, a
    /// time before the last event, a tool result with no call, ...): the event it would write
    /// breaks an invariant, so nothing was written and the log is intact. Fix the call.
    #[error("stream {stream}: refused, nothing written: {violation}")]
    Refused {
        /// The stream.
        stream: StreamId,
        /// The invariant the command would break.
        violation: Violation,
    },
    /// A stored event breaks an invariant: the log is corrupt (or was written by a buggy
    /// writer). Reading stops at `violation.version`; `ctxlog verify` reports it.
    #[error("stream {stream}: the log breaks an invariant: {violation}")]
    Invariant {
        /// The stream.
        stream: StreamId,
        /// What broke.
        violation: Violation,
    },
    /// The configuration cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No such session.
    #[error("no session {0} in this store")]
    NotFound(StreamId),
    /// The session id is taken.
    #[error("session {0} already exists in this store")]
    Exists(StreamId),
    /// The session is an import that did not finish: readers treat it as absent, and only a
    /// retried import of the same transcript may go on writing it.
    #[error(
        "session {stream} is an import that did not finish ({messages} of {announced} messages appended); \
         retry the import of the same transcript with this session id to finish it"
    )]
    Unfinished {
        /// The session.
        stream: StreamId,
        /// Messages appended so far.
        messages: u64,
        /// Messages the transcript holds.
        announced: u64,
    },
    /// A message's record could not be read back (it is out of the view, so only the log holds
    /// it).
    #[error("stream {stream}: cannot read back message {seq} (version {version}): {detail}")]
    Body {
        /// The stream.
        stream: StreamId,
        /// The message.
        seq: u64,
        /// The version its `MessageAppended` was recorded at.
        version: Version,
        /// What went wrong.
        detail: String,
    },
    /// A message to append is not valid in the session's format.
    #[error("message {index} of the batch: {error}")]
    Message {
        /// Position in the batch.
        index: usize,
        /// What is wrong.
        error: WireError,
    },
    /// The plan can no longer be committed: since it was made, something other than appends
    /// changed the session (`by`: another call was committed, a summary prepared, a message
    /// restored), or it belongs to another session. Plan again.
    #[error("stale plan: made at version {planned}, session is at version {current}: {by}")]
    StalePlan {
        /// Version the plan was made at.
        planned: Version,
        /// Current version.
        current: Version,
        /// What happened since.
        by: StaleCause,
    },
    /// The log has no such call.
    #[error("stream {stream}: no call {call} (the session served {calls})")]
    NoSuchCall {
        /// The stream.
        stream: StreamId,
        /// The call asked for.
        call: u64,
        /// Calls served.
        calls: u64,
    },
    /// A call's view, rebuilt from the log, does not hash to the digest recorded for it.
    #[error("stream {stream} call {call}: the rebuilt view hashes to {rebuilt}, the log recorded {recorded}")]
    ViewMismatch {
        /// The stream.
        stream: StreamId,
        /// The call.
        call: u64,
        /// Digest recorded in `RequestServed`.
        recorded: String,
        /// Digest of the rebuilt view.
        rebuilt: String,
    },
    /// Encoding an event failed (a bug).
    #[error("cannot encode event: {0}")]
    Encode(codec::EncodeError),
    /// Encoding the state as a snapshot failed (a bug).
    #[error("cannot encode the snapshot: {0}")]
    Snapshot(SnapshotError),
    /// A summary attempt is already in flight in this session (at most one at a time): finish
    /// or cancel it first.
    #[error("stream {0}: a summary attempt is already in flight; finish or cancel it first")]
    SummaryInFlight(StreamId),
    /// The attempt was not started by this session handle, or was already finished.
    #[error("stream {0}: this summary attempt is not the one in flight here")]
    NotInFlight(StreamId),
}

/// Why a plan can no longer be committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleCause {
    /// Another call was committed since (its `RequestServed`, flush or edits).
    CallCommitted,
    /// A summary was prepared since (the plan did not see it).
    SummaryPrepared,
    /// A message was restored since.
    Restored,
    /// The session was reopened or caught up past the plan's version: this handle cannot
    /// tell what was written before.
    Reopened,
    /// The plan was made by another session.
    OtherSession,
}

impl StaleCause {
    /// What `ev` does to a plan made before it; `None` when it leaves the plan committable
    /// (an append, or the import's completion marker: neither is part of a served view).
    fn of(ev: &Event) -> Option<StaleCause> {
        match ev {
            Event::MessageAppended(_)
            | Event::ImportCompleted(_)
            | Event::AnswerReceived(_)
            | Event::SessionNamed(_) => None,
            // A rejection records a call that was not served; it changes no view.
            Event::CallRejected(_) => None,
            // A failed summary attempt and the summarizer's guards change no view.
            Event::SummaryFailed(_) => None,
            Event::GuardRaised(g) if matches!(g.kind, GuardKind::ForkRefused { .. } | GuardKind::SummarizerPaused) => {
                None
            }
            Event::SummaryPrepared(_) => Some(StaleCause::SummaryPrepared),
            Event::Restored(_) => Some(StaleCause::Restored),
            Event::SessionStarted(_) | Event::Branched(_) => Some(StaleCause::Reopened),
            _ => Some(StaleCause::CallCommitted),
        }
    }
}

impl std::fmt::Display for StaleCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StaleCause::CallCommitted => "another call was committed since",
            StaleCause::SummaryPrepared => "a summary was prepared since",
            StaleCause::Restored => "a message was restored since",
            StaleCause::Reopened => "the session was reopened since",
            StaleCause::OtherSession => "the plan belongs to another session",
        })
    }
}

/// A call decided but not yet committed. Dropping it (or [`Session::abort`]) writes nothing.
#[derive(Debug, Clone)]
#[must_use = "a plan is committed with Session::commit or dropped with Session::abort"]
pub struct Plan {
    stream: StreamId,
    base_version: Version,
    call: u64,
    decision: engine::Decision,
    cache: Option<ViewCache>,
    /// sha256 of the view bytes.
    pub digest: String,
    /// Messages in the view.
    pub view_messages: u64,
    /// Estimated tokens of the view.
    pub view_tokens: u64,
    /// This view is the previous one plus new messages, byte for byte.
    pub prefix_reused: bool,
    /// Leading items of this view that the previous call's view had too (all of that view when
    /// `prefix_reused`): the part a provider's prompt cache may still hold.
    reused: usize,
}

impl Plan {
    /// How many leading items of this view were in the previous call's view (0 on the first
    /// call): the prefix a provider's prompt cache may still hold.
    pub fn reused_items(&self) -> usize {
        self.reused
    }

    /// The tentative events (flush, edits, guards) this call would commit.
    pub fn events(&self) -> &[Event] {
        &self.decision.events
    }

    /// Highest ladder level reached.
    pub fn level(&self) -> u8 {
        self.decision.level
    }

    /// The call number.
    pub fn call(&self) -> u64 {
        self.call
    }

    /// Work the cache-aware gate held back on this call, and why.
    pub fn deferred(&self) -> Option<&crate::event::Deferral> {
        self.decision.deferred.as_ref()
    }
}

/// What a commit wrote.
#[derive(Debug, Clone)]
pub struct Committed {
    /// Stream version after the commit.
    pub version: Version,
    /// The batch, ending with `RequestServed`.
    pub events: Vec<Event>,
}

/// What an append did.
#[derive(Debug, Clone, Default)]
pub struct Appended {
    /// Stream version after the append.
    pub version: Version,
    /// Blobs written (or found already present).
    pub blobs: Vec<BlobId>,
    /// Payloads kept inline because the blob could not be written, with the reason.
    pub inline_fallbacks: Vec<String>,
}

/// An append applied to its session but not written yet ([`Session::append_pending`]).
#[derive(Debug)]
#[must_use = "the session is ahead of its log until the append is written"]
pub struct PendingAppend {
    stream: StreamId,
    expected: Version,
    records: Vec<Record>,
}

impl PendingAppend {
    /// The stream version once written.
    pub fn version(&self) -> Version {
        self.expected + self.records.len() as u64
    }

    /// Writes the batch (atomically, at the version the session had before it). A conflict
    /// means the log moved under the session: nothing is written, the session must be reopened.
    pub fn write<S: Store + ?Sized>(self, store: &S) -> Result<Version, SessionError> {
        let _span =
            tracing::info_span!("ctxlog.append.write", session = %self.stream, version = self.expected).entered();
        Ok(store.append(self.stream, ExpectedVersion::Exact(self.expected), &self.records)?)
    }
}

/// What [`Session::reject_call`] wrote.
#[derive(Debug, Clone)]
pub struct CallRejectedOutcome {
    /// The batch (`CallRejected`, and `LimitLearned` when a limit was learned).
    pub committed: Committed,
    /// The budget the learned limit set, if one was learned.
    pub budget: Option<u64>,
}

/// How a summary was produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Produced {
    /// Mode the engine asked for.
    pub requested: SummaryMode,
    /// Mode used.
    pub used: SummaryMode,
    /// Why the requested mode was refused.
    pub refusal: Option<String>,
}

impl Produced {
    /// Produced by the built-in extractive summarizer.
    pub fn extractive() -> Produced {
        Produced { requested: SummaryMode::Extractive, used: SummaryMode::Extractive, refusal: None }
    }
}

/// A summary attempt in flight ([`Session::start_summary`]): the request to send, and what
/// [`Session::finish_summary`] needs to record its outcome.
#[derive(Debug, Clone)]
#[must_use = "an attempt is finished with Session::finish_summary or dropped with Session::cancel_summary"]
pub struct SummaryAttempt {
    stream: StreamId,
    id: u64,
    /// The job.
    pub job: SummaryJob,
    /// The request to send.
    pub request: SummaryRequest,
    max_failures: u32,
}

/// What the summarizer returned for an attempt, as the host saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryOutcome {
    /// The summary text, or why there is none.
    pub result: Result<String, SummaryFailure>,
    /// The summarizer's reported usage (input, cache read, cache write, output).
    pub usage: Option<Usage>,
    /// How long the call took.
    pub latency_ms: Option<u64>,
}

impl SummaryOutcome {
    /// The summarizer answered with `text`.
    pub fn text(text: impl Into<String>) -> Self {
        SummaryOutcome { result: Ok(text.into()), usage: None, latency_ms: None }
    }

    /// The summarizer failed.
    pub fn failed(failure: SummaryFailure) -> Self {
        SummaryOutcome { result: Err(failure), usage: None, latency_ms: None }
    }

    /// With the summarizer's usage.
    pub fn usage(mut self, usage: Option<Usage>) -> Self {
        self.usage = usage;
        self
    }

    /// With the measured latency.
    pub fn latency_ms(mut self, ms: u64) -> Self {
        self.latency_ms = Some(ms);
        self
    }
}

/// What [`Session::finish_summary`] recorded.
#[derive(Debug, Clone)]
pub enum SummaryFinished {
    /// `SummaryPrepared` was written.
    Prepared(Committed),
    /// `SummaryFailed` was written, for this reason; nothing else changed.
    Failed {
        /// Why.
        failure: SummaryFailure,
        /// The batch (guards and `SummaryFailed`).
        committed: Committed,
    },
}

/// Outcome of [`Session::prepare`].
#[derive(Debug, Clone)]
pub enum Prepared {
    /// `SummaryPrepared` was written.
    Written(Committed),
    /// Nothing was written, for this reason.
    Discarded(String),
}

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

impl<S: Store> Session<S> {
    /// Creates a new session (writes `SessionStarted`).
    ///
    /// ```
    /// use ctxlog::{Timestamp, Config, MemoryStore, Session, SessionError, StreamId, WireFormat};
    /// # fn main() -> Result<(), SessionError> {
    /// let store = MemoryStore::new();
    /// let id = StreamId::random();
    /// let config = Config { budget: 120_000, ..Config::default() };
    /// let session = Session::create(&store, id, WireFormat::Anthropic, config.clone(), Timestamp::from_millis(1_767_225_600_000))?;
    /// assert_eq!(session.config().budget, 120_000);
    /// // An id is created once.
    /// let again = Session::create(&store, id, WireFormat::Anthropic, config, Timestamp::from_millis(1_767_225_600_000));
    /// assert!(matches!(again, Err(SessionError::Exists(_))));
    /// # Ok(()) }
    /// ```
    pub fn create(
        store: S,
        id: StreamId,
        format: WireFormat,
        config: Config,
        now: Timestamp,
    ) -> Result<Self, SessionError> {
        Self::start(store, SessionStarted { session: id.0, format, config, at: now.as_millis(), import: None })
    }

    /// A session with nothing folded yet: what `create` and `create_with` start from.
    fn empty(store: S, id: StreamId) -> Self {
        Session {
            store,
            stream: id,
            state: State::new(),
            cache: ViewCache::new(),
            settled: (0, StaleCause::Reopened),
            in_flight: None,
            attempts: 0,
        }
    }

    /// Creates a session holding `messages` from the start: `SessionStarted` and their
    /// `MessageAppended` events are one atomic batch, validated together before anything is
    /// written. A host that learns of a session through its first request (a proxy) uses this,
    /// so a request whose messages are refused (an orphan tool result, say) leaves no empty
    /// session behind.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, SessionError, Store, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let orphan = parse_message(r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}"#)?;
    /// let id = StreamId::random();
    /// let refused = Session::create_with(&store, id, WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000), vec![orphan]);
    /// assert!(matches!(refused, Err(SessionError::Refused { .. })));
    /// assert_eq!(store.head(id)?, None); // nothing written
    /// let hi = parse_message(r#"{"role":"user","content":"hi"}"#)?;
    /// let (session, _) = Session::create_with(&store, id, WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000), vec![hi])?;
    /// assert_eq!((session.state().message_count(), store.head(id)?), (1, Some(2)));
    /// # Ok(()) }
    /// ```
    pub fn create_with(
        store: S,
        id: StreamId,
        format: WireFormat,
        config: Config,
        now: Timestamp,
        messages: Vec<Message>,
    ) -> Result<(Self, Appended), SessionError> {
        Self::create_named(store, id, format, config, now, None, messages)
    }

    /// [`Session::create_with`], recording the client's name for the conversation (a
    /// [`SessionNamed`](crate::event::SessionNamed) event right after `SessionStarted`, in the
    /// same batch) when `name` is given: the proxy passes its `x-ctxlog-session` header, so
    /// `ctxlog sessions` can show it and `--session NAME` find the session.
    pub fn create_named(
        store: S,
        id: StreamId,
        format: WireFormat,
        config: Config,
        now: Timestamp,
        name: Option<String>,
        messages: Vec<Message>,
    ) -> Result<(Self, Appended), SessionError> {
        config.validate()?;
        if store.head(id)?.is_some() {
            return Err(SessionError::Exists(id));
        }
        let started =
            Event::SessionStarted(SessionStarted { session: id.0, format, config, at: now.as_millis(), import: None });
        let mut s = Self::empty(store, id);
        s.state.check_event(1, &started).map_err(|v| s.refused(v))?;
        // The appends are validated against the started state; nothing is durable until the
        // one batch below is, so on any error the session is simply dropped.
        s.state.apply(1, &started).map_err(|v| s.refused(v))?;
        let named = name.map(|name| Event::SessionNamed(crate::event::SessionNamed { name }));
        if let Some(ev) = &named {
            s.state.apply(2, ev).map_err(|v| s.refused(v))?;
        }
        // `SessionStarted` and the name are applied already; the appends follow them.
        let applied = s.state.version() as usize;
        let (events, mut report) = s.append_events(messages)?;
        let mut batch = Vec::with_capacity(events.len() + 2);
        batch.push(started);
        batch.extend(named);
        batch.extend(events);
        let records =
            batch.iter().map(codec::encode).collect::<Result<Vec<Record>, _>>().map_err(SessionError::Encode)?;
        let version = match s.store.append(id, ExpectedVersion::Exact(0), &records) {
            Err(StoreError::Conflict { .. }) => return Err(SessionError::Exists(id)),
            other => other?,
        };
        for (ev, v) in batch.iter().zip(1..).skip(applied) {
            s.state.apply(v, ev).map_err(|violation| SessionError::Invariant { stream: id, violation })?;
        }
        report.version = version;
        Ok((s, report))
    }

    /// Creates a session that an import of `source` will fill: until [`Session::complete_import`]
    /// writes `ImportCompleted`, readers ([`Session::open`], copy) treat it as absent, so a failed
    /// import leaves no session behind, and a retried import resumes it
    /// ([`Session::open_import`]).
    pub fn create_import(
        store: S,
        id: StreamId,
        format: WireFormat,
        config: Config,
        now: Timestamp,
        source: ImportSource,
    ) -> Result<Self, SessionError> {
        let at = now.as_millis();
        Self::start(store, SessionStarted { session: id.0, format, config, at, import: Some(source) })
    }

    fn start(store: S, started: SessionStarted) -> Result<Self, SessionError> {
        started.config.validate()?;
        let id = StreamId(started.session);
        if store.head(id)?.is_some() {
            return Err(SessionError::Exists(id));
        }
        let mut s = Self::empty(store, id);
        let ev = Event::SessionStarted(started);
        s.state.check_event(1, &ev).map_err(|v| s.refused(v))?;
        match s.persist_then_apply(vec![ev]) {
            Err(SessionError::Store(StoreError::Conflict { .. })) => Err(SessionError::Exists(id)),
            other => other.map(|_| s),
        }
    }

    /// Opens an existing session: the snapshot if it is valid, then a strict replay of the rest.
    /// An import that did not finish is refused ([`SessionError::Unfinished`]).
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// let id = StreamId::random();
    /// let mut first = Session::create(&store, id, WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// first.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// drop(first); // a restart
    /// let reopened = Session::open(&store, id)?;
    /// assert_eq!(reopened.state().message_count(), 1);
    /// # Ok(()) }
    /// ```
    pub fn open(store: S, id: StreamId) -> Result<Self, SessionError> {
        let _span = tracing::info_span!("ctxlog.open", session = %id).entered();
        let s = Self::open_any(store, id)?;
        match s.state.import() {
            Some(i) if !i.completed => Err(SessionError::Unfinished {
                stream: id,
                messages: s.state.message_count(),
                announced: i.source.messages,
            }),
            _ => Ok(s),
        }
    }

    /// Opens a session whose import did not finish, for the import that resumes it; any other
    /// session is [`SessionError::Exists`].
    pub fn open_import(store: S, id: StreamId) -> Result<Self, SessionError> {
        let _span = tracing::info_span!("ctxlog.open_import", session = %id).entered();
        let s = Self::open_any(store, id)?;
        if s.state.import_unfinished() {
            Ok(s)
        } else {
            Err(SessionError::Exists(id))
        }
    }

    fn open_any(store: S, id: StreamId) -> Result<Self, SessionError> {
        if store.head(id)?.is_none() {
            return Err(SessionError::NotFound(id));
        }
        let state = load_snapshot(&store, id)?.unwrap_or_default();
        let snapshot = state.version();
        let settled = (state.version(), StaleCause::Reopened);
        let mut s =
            Session { store, stream: id, state, cache: ViewCache::new(), settled, in_flight: None, attempts: 0 };
        s.catch_up()?;
        tracing::debug!(snapshot, version = s.state.version(), "opened");
        Ok(s)
    }

    /// Writes `ImportCompleted`: every message of the transcript is appended, the session is
    /// complete.
    pub fn complete_import(&mut self) -> Result<Committed, SessionError> {
        let ev =
            Event::ImportCompleted(ImportCompleted { messages: self.state.message_count(), calls: self.state.calls() });
        self.state.check_event(self.state.version() + 1, &ev).map_err(|v| self.refused(v))?;
        let version = self.persist_then_apply(vec![ev.clone()])?;
        tracing::info!(messages = self.state.message_count(), version, "import completed");
        Ok(Committed { version, events: vec![ev] })
    }

    /// Folds records written since the state's version (by this or another writer).
    pub fn catch_up(&mut self) -> Result<(), SessionError> {
        let (stream, state, store, settled) = (self.stream, &mut self.state, &self.store, &mut self.settled);
        crate::replay::for_each_event(store, stream, state.version() + 1, None, |version, ev| {
            if let Some(cause) = StaleCause::of(&ev) {
                *settled = (version, cause);
            }
            hydrate(store, stream, state, &ev)?;
            state.apply(version, &ev).map_err(|violation| SessionError::Invariant { stream, violation })
        })
    }

    /// A command that would break an invariant: refused before anything is written.
    fn refused(&self, violation: Violation) -> SessionError {
        SessionError::Refused { stream: self.stream, violation }
    }

    /// The session id.
    pub fn id(&self) -> StreamId {
        self.stream
    }

    /// The folded state.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The session's wire format.
    pub fn format(&self) -> WireFormat {
        self.state.info().map_or(WireFormat::Anthropic, |i| i.format)
    }

    /// The session's knobs.
    pub fn config(&self) -> Config {
        self.state.info().map(|i| i.config.clone()).unwrap_or_default()
    }

    /// Appends messages as one atomic batch. Media payloads go to the blob area first.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    /// let appended = session.append(vec![parse_message(&format!(
    ///     r#"{{"role":"user","content":[{{"type":"text","text":"this screen"}},{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{png}"}}}}]}}"#
    /// ))?])?;
    /// assert_eq!(appended.blobs.len(), 1); // the image went to the blob area; the log keeps a reference
    /// # Ok(()) }
    /// ```
    pub fn append(&mut self, messages: Vec<Message>) -> Result<Appended, SessionError> {
        self.append_with(messages, Sync::Now)
    }

    /// [`Session::append`] whose sync to stable storage is left to the session's next write
    /// (see [`Store::append_unsynced`]): written and safe from a crash of this process when it
    /// returns, safe from a crash of the machine once the next write (e.g. the call's commit)
    /// lands. The proxy appends a request's messages this way before forwarding it, so a call
    /// costs one sync, the commit's, which still comes before the client has the answer.
    pub fn append_unsynced(&mut self, messages: Vec<Message>) -> Result<Appended, SessionError> {
        self.append_with(messages, Sync::WithNext)
    }

    fn append_with(&mut self, messages: Vec<Message>, sync: Sync) -> Result<Appended, SessionError> {
        let _span =
            tracing::info_span!("ctxlog.append", session = %self.stream, version = self.state.version()).entered();
        let (events, mut report) = self.append_events(messages)?;
        let messages = events.len();
        report.version = self.persist_then_apply_with(events, sync)?;
        for reason in &report.inline_fallbacks {
            tracing::warn!(%reason, "a media payload stays inline: its blob could not be written");
        }
        tracing::debug!(messages, blobs = report.blobs.len(), version = report.version, "appended");
        Ok(report)
    }

    /// [`Session::append`], but the batch is applied to the session first and written later
    /// by [`PendingAppend::write`], which the host may run on another thread while it plans,
    /// renders and sends the call (a proxy overlaps the store's fsync with the upstream
    /// request this way). Media payloads still go to the blob area here.
    ///
    /// Until the batch is written, every other write of this session fails with a conflict
    /// (the store is behind the session), so nothing can be committed on top of it. If the
    /// write fails, the session is ahead of its log: drop it and [`Session::open`] it again.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// let (_, pending) = session.append_pending(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// let plan = session.plan(Timestamp::from_millis(2_000))?; // plans on the appended message
    /// assert_eq!(plan.view_messages, 1);
    /// pending.write(&store)?; // e.g. on another thread, while the request is on its way
    /// session.commit(plan, Timestamp::from_millis(2_500), None)?;
    /// # Ok(()) }
    /// ```
    pub fn append_pending(&mut self, messages: Vec<Message>) -> Result<(Appended, PendingAppend), SessionError> {
        let _span = tracing::info_span!("ctxlog.append", session = %self.stream, version = self.state.version(), pending = true)
            .entered();
        let (events, mut report) = self.append_events(messages)?;
        let records =
            events.iter().map(codec::encode).collect::<Result<Vec<Record>, _>>().map_err(SessionError::Encode)?;
        let expected = self.state.version();
        let first = expected + 1;
        for (i, ev) in events.iter().enumerate() {
            let stream = self.stream;
            self.state
                .apply(first + i as u64, ev)
                .map_err(|violation| SessionError::Invariant { stream, violation })?;
        }
        report.version = self.state.version();
        Ok((report, PendingAppend { stream: self.stream, expected, records }))
    }

    /// The `MessageAppended` events of an append, validated against the state.
    fn append_events(&mut self, messages: Vec<Message>) -> Result<(Vec<Event>, Appended), SessionError> {
        let format = self.format();
        for (index, m) in messages.iter().enumerate() {
            wire::check_format(m, format).map_err(|error| SessionError::Message { index, error })?;
        }
        let estimator = self.config().estimator();
        let mut report = Appended::default();
        let mut events = Vec::with_capacity(messages.len());
        for (i, mut m) in messages.into_iter().enumerate() {
            self.externalize(&mut m, &mut report);
            let tokens = estimator.message(&m);
            events.push(Event::MessageAppended(MessageAppended {
                seq: self.state.message_count() + i as u64,
                message: m,
                tokens,
            }));
        }
        // Validate without copying the state (appends are the hot path); the caller persists
        // and applies.
        self.state.check_appends(self.state.version() + 1, &events).map_err(|v| self.refused(v))?;
        Ok((events, report))
    }

    fn externalize(&self, m: &mut Message, report: &mut Appended) {
        if let Some(Content::Blocks(blocks)) = &mut m.content {
            for b in blocks {
                self.externalize_block(b, report);
            }
        }
    }

    fn externalize_block(&self, b: &mut Block, report: &mut Appended) {
        match b {
            Block::Media { source: MediaSource::Base64 { data, .. }, .. } => self.externalize_data(data, report),
            Block::ImageUrl { url: ImageUrl::Data { data, .. }, .. } => self.externalize_data(data, report),
            Block::ToolResult { content: Some(Content::Blocks(inner)), .. } => {
                for b in inner {
                    self.externalize_block(b, report);
                }
            }
            _ => {}
        }
    }

    fn externalize_data(&self, data: &mut MediaData, report: &mut Appended) {
        let MediaData::Inline(b64) = data else { return };
        let Ok(bytes) = wire::decode_base64(b64) else {
            report.inline_fallbacks.push("payload is not valid base64".into());
            return;
        };
        match self.store.put_blob(&bytes) {
            Ok(id) => {
                let dims = media::dimensions(&bytes);
                report.blobs.push(id.clone());
                *data = MediaData::Blob(BlobRef {
                    id,
                    bytes: bytes.len() as u64,
                    width: dims.map(|d| d.0),
                    height: dims.map(|d| d.1),
                });
            }
            Err(e) => report.inline_fallbacks.push(e.to_string()),
        }
    }

    /// Decides the next call at `now` without writing anything.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// # let head = ctxlog::Store::head(&store, session.id())?;
    /// let plan = session.plan(Timestamp::from_millis(2_000))?;
    /// assert_eq!((plan.call(), plan.view_messages), (0, 1));
    /// assert!(plan.events().is_empty()); // nothing to compact yet
    /// assert_eq!(ctxlog::Store::head(&store, session.id())?, head); // nothing written
    /// # Ok(()) }
    /// ```
    pub fn plan(&mut self, now: Timestamp) -> Result<Plan, SessionError> {
        let now = now.as_millis();
        let _span = self.call_span(self.state.calls()).entered();
        let decision = engine::decide(&self.state, now).map_err(|v| self.refused(v))?;
        let (cache, view_state) = match &decision.scratch {
            // The scratch view differs from the cached one (new generation), so it is rendered
            // afresh; bringing the cache up to date or copying it first would only be thrown
            // away (a later plan catches it up if this one is aborted).
            Some(scratch) => {
                let mut c = ViewCache::new();
                c.sync(scratch);
                (Some(c), scratch)
            }
            None => {
                self.cache.sync(&self.state);
                (None, &self.state)
            }
        };
        let digest = cache.as_ref().unwrap_or(&self.cache).digest();
        let prefix_reused = self.state.calls() > 0 && view_state.prefix_stable_since_last_call();
        let previous = self.state.last_served().map_or(0, |l| usize::try_from(l.view_messages).unwrap_or(usize::MAX));
        // Between calls the view only grows (flushes and edits are a call's; a restore is the
        // exception, and only costs a breakpoint that misses), so the previous view is the head
        // of the current one; this call's flush or edits end the shared part.
        let reused = if prefix_reused || decision.scratch.is_none() {
            previous.min(view_state.view().len())
        } else {
            self.state.view().iter().zip(view_state.view()).take(previous).take_while(|(a, b)| a == b).count()
        };
        tracing::debug!(
            view_messages = view_state.view().len(),
            view_tokens = view_state.view_tokens(),
            metered_tokens = decision.metered_tokens,
            level = decision.level,
            tentative_events = decision.events.len(),
            prefix_reused,
            "planned"
        );
        Ok(Plan {
            stream: self.stream,
            base_version: self.state.version(),
            call: self.state.calls(),
            digest,
            view_messages: view_state.view().len() as u64,
            view_tokens: view_state.view_tokens(),
            prefix_reused,
            reused,
            decision,
            cache,
        })
    }

    /// The request to send for `plan`, in the session's wire format: the view it serves with
    /// media inlined, the host's fields from `opts` passed through (model, tools, …), and for
    /// Anthropic the system prompt in `system` and the requested cache breakpoints. See
    /// [`crate::request`] for the exact bytes. Fails with [`SessionError::StalePlan`] when the
    /// plan can no longer be committed.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// use ctxlog::{Timestamp, CacheTtl, RequestOptions};
    /// let plan = session.plan(Timestamp::from_millis(2_000))?;
    /// let opts = RequestOptions::new().model("claude-sonnet-4-5").max_tokens(1_024).cache_breakpoints(CacheTtl::FiveMinutes);
    /// let request = session.request(&plan, &opts)?;
    /// assert_eq!(
    ///     std::str::from_utf8(request.body())?,
    ///     r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"hi"}]}"#
    /// );
    /// assert_eq!(request.view_digest(), plan.digest);
    /// # Ok(()) }
    /// ```
    pub fn request(&self, plan: &Plan, opts: &RequestOptions) -> Result<Request, SessionError> {
        let _span = self.call_span(plan.call).entered();
        let view = self.served_view(plan)?;
        let request = request::render(&view, self.format(), opts, &StoreBlobs(&self.store));
        if !request.missing_blobs().is_empty() {
            tracing::warn!(missing = request.missing_blobs().len(), "media of the view are missing from the blob area");
        }
        tracing::debug!(bytes = request.body().len(), breakpoints = request.breakpoints(), "request rendered");
        Ok(request)
    }

    /// The request the next call would send if `messages` were appended first, rendered with
    /// `opts`: appends, plan and render on a copy of the state; nothing is written (media
    /// stay inline, no blob is stored) and the session is left as it was. What a proxy answers
    /// `count_tokens` with.
    pub fn preview(
        &self,
        messages: Vec<Message>,
        now: Timestamp,
        opts: &RequestOptions,
    ) -> Result<Request, SessionError> {
        let format = self.format();
        let estimator = self.config().estimator();
        let mut state = self.state.clone();
        for (index, m) in messages.into_iter().enumerate() {
            wire::check_format(&m, format).map_err(|error| SessionError::Message { index, error })?;
            let tokens = estimator.message(&m);
            let ev = Event::MessageAppended(MessageAppended { seq: state.message_count(), message: m, tokens });
            state.apply(state.version() + 1, &ev).map_err(|v| self.refused(v))?;
        }
        let decision = engine::decide(&state, now.as_millis()).map_err(|v| self.refused(v))?;
        let served = decision.scratch.as_ref().unwrap_or(&state);
        let mut cache = ViewCache::new();
        cache.sync(served);
        let digest = cache.digest();
        let view = ServedView {
            state: served,
            items: cache.items(),
            bytes: cache.bytes(),
            cuts: cache.cuts(),
            digest: &digest,
        };
        Ok(request::render(&view, format, opts, &StoreBlobs(&self.store)))
    }

    /// Breakpoints for a client that placed none (Anthropic caches only up to breakpoints): the
    /// system prompt (with the tools before it), the last item of the part of `plan`'s view
    /// the previous call's view had too (the provider may hold it: read), and the view's last
    /// message (the prefix the next call reuses: written). At most 3, by position in the log.
    pub fn auto_breakpoints(&self, plan: &Plan, ttl: CacheTtl) -> Result<Placement, SessionError> {
        let view = self.served_view(plan)?;
        let system = |it: &crate::state::ViewItem| match it.item {
            crate::state::Item::Message(seq) => view.state.entry(seq).is_some_and(|e| e.is_system()),
            crate::state::Item::Summary(_) | crate::state::Item::Placeholder { .. } => false,
        };
        let mut marks = Vec::new();
        if view.items.iter().any(system) {
            marks.push(Mark::System(ttl));
        }
        let reused = plan.reused.min(view.items.len());
        for it in [reused.checked_sub(1).and_then(|i| view.items.get(i)), view.items.last()].into_iter().flatten() {
            let mark = Mark::Message { seq: it.seq, block: None, ttl };
            if !system(it) && !marks.contains(&mark) {
                marks.push(mark);
            }
        }
        Ok(Placement { origin: Origin::Auto, marks })
    }

    /// The span of call `call`: session, call number, the version it starts from.
    fn call_span(&self, call: u64) -> tracing::Span {
        tracing::info_span!("ctxlog.call", session = %self.stream, call, version = self.state.version())
    }

    /// The planned view as the provider needs it: one JSON message per element, media
    /// inlined from the blob area. Missing blobs stay references and are returned.
    pub fn render_plan(&self, plan: &Plan) -> (Vec<String>, Vec<BlobId>) {
        let Ok(view) = self.served_view(plan) else { return (Vec::new(), Vec::new()) };
        let source = StoreBlobs(&self.store);
        let opts = RenderOpts { meta: false, media: Media::Inline(&source) };
        let mut missing = Vec::new();
        let msgs = view
            .items
            .iter()
            .map(|it| {
                let bytes = render_item_with(view.state, it.item, opts, &mut missing);
                String::from_utf8_lossy(bytes.strip_suffix(b"\n").unwrap_or(&bytes)).into_owned()
            })
            .collect();
        (msgs, missing)
    }

    /// The view bytes of a plan (media as references), one JSON message per element.
    pub fn plan_view(&self, plan: &Plan) -> Vec<Arc<[u8]>> {
        self.served_view(plan).map(|v| v.bytes.to_vec()).unwrap_or_default()
    }

    /// The view `plan` serves: its own rendering when it changed the view, else the first
    /// `view_messages` items of the session's (messages appended since come after them).
    fn served_view<'a>(&'a self, plan: &'a Plan) -> Result<ServedView<'a>, SessionError> {
        self.check_fresh(plan)?;
        let (state, cache) = match (&plan.decision.scratch, &plan.cache) {
            (Some(scratch), Some(cache)) => (scratch, cache),
            _ => (&self.state, &self.cache),
        };
        let n = usize::try_from(plan.view_messages).unwrap_or(usize::MAX);
        let (items, bytes) = (cache.items(), cache.bytes());
        Ok(ServedView {
            state,
            items: items.get(..n).unwrap_or(items),
            bytes: bytes.get(..n).unwrap_or(bytes),
            cuts: cache.cuts(),
            digest: &plan.digest,
        })
    }

    /// Commits a dispatched call: its tentative events plus `RequestServed`, as one batch.
    /// `at` is when the dispatch completed; `usage` what the provider reported for it, if known.
    ///
    /// Messages appended since the plan was made do not make it stale: they were not part of
    /// the view it served, which is what `RequestServed` records (its digest is the one sent).
    /// Anything else written since (another call's commit, a prepared summary, a restore) does:
    /// [`SessionError::StalePlan`], and nothing is written.
    ///
    /// The meter anchors on the reported prompt total ([`Usage::prompt_total`]) unless it is
    /// below `usage_floor_ratio ×` the estimate of the served view: such a report is recorded
    /// but not trusted, and raises `usage_below_estimate` once.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// use ctxlog::{Timestamp, Event, Usage};
    /// let plan = session.plan(Timestamp::from_millis(2_000))?;
    /// // The provider's usage object, as Anthropic returns it: most of the prompt from the cache.
    /// let usage = serde_json::json!({"input_tokens": 3, "cache_read_input_tokens": 7, "output_tokens": 20});
    /// let committed = session.commit(plan, Timestamp::from_millis(2_500), Some(Usage::from_anthropic(&usage)?))?;
    /// let Some(Event::RequestServed(served)) = committed.events.last() else { unreachable!() };
    /// assert_eq!(served.reported_tokens, Some(10)); // the whole prompt, cache included
    /// # Ok(()) }
    /// ```
    pub fn commit(&mut self, plan: Plan, at: Timestamp, usage: Option<Usage>) -> Result<Committed, SessionError> {
        self.commit_with(plan, at, usage, None, Vec::new())
    }

    /// [`Session::commit`], recording what the request carried besides its messages: `opts`
    /// are the options it was rendered with ([`Session::request`]). Its `model`, its cache
    /// breakpoints and its `tools` (stored once per distinct value in the blob area) go into
    /// `RequestServed`, so a fork summary can rebuild this request byte for byte. A call
    /// committed with plain [`Session::commit`] is recorded as not saying (tools unknown), and
    /// a fork refuses to append to it. Fails like `commit`, and with a store error when the
    /// tools cannot be written (then nothing is).
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat, RequestOptions, Event};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// let opts = RequestOptions::new().model("claude-sonnet-4-5").tools(r#"[{"name":"ls","input_schema":{"type":"object"}}]"#)?;
    /// let plan = session.plan(Timestamp::from_millis(2_000))?;
    /// let request = session.request(&plan, &opts)?;
    /// // ... send request.body() ...
    /// let committed = session.commit_request(plan, &opts, Timestamp::from_millis(2_500), None)?;
    /// let Some(Event::RequestServed(served)) = committed.events.last() else { unreachable!() };
    /// assert_eq!(served.request.as_ref().and_then(|r| r.model.as_deref()), Some("claude-sonnet-4-5"));
    /// # Ok(()) }
    /// ```
    pub fn commit_request(
        &mut self,
        plan: Plan,
        opts: &RequestOptions,
        at: Timestamp,
        usage: Option<Usage>,
    ) -> Result<Committed, SessionError> {
        self.check_fresh(&plan)?;
        let tools = self.tools_record(opts)?;
        let record = RequestRecord {
            model: opts.model_name(),
            tools,
            breakpoints: opts.breakpoints(),
            placement: opts.placement().cloned(),
        };
        self.commit_with(plan, at, usage, Some(record), Vec::new())
    }

    /// [`Session::commit_request`] with the assistant message the provider answered, recorded
    /// in the same atomic batch as an [`AnswerReceived`] event (a record of the call, not a
    /// message of the conversation: the client's next request brings its own copy). A host
    /// that relays answers (a proxy) uses it so that the log holds every answer, the last one
    /// of a conversation included. An answer not valid in the session's format is refused.
    pub fn commit_answered(
        &mut self,
        plan: Plan,
        opts: &RequestOptions,
        at: Timestamp,
        usage: Option<Usage>,
        answer: Message,
    ) -> Result<Committed, SessionError> {
        self.commit_answers(plan, opts, at, usage, vec![answer])
    }

    /// [`Session::commit_answered`] for an answer of several messages: a Responses answer's
    /// `output` items (reasoning, messages, function calls), one [`AnswerReceived`] each, in
    /// order, in the same batch.
    pub fn commit_answers(
        &mut self,
        plan: Plan,
        opts: &RequestOptions,
        at: Timestamp,
        usage: Option<Usage>,
        answers: Vec<Message>,
    ) -> Result<Committed, SessionError> {
        for (index, answer) in answers.iter().enumerate() {
            wire::check_format(answer, self.format()).map_err(|error| SessionError::Message { index, error })?;
        }
        let tools = self.tools_record(opts)?;
        let record = RequestRecord {
            model: opts.model_name(),
            tools,
            breakpoints: opts.breakpoints(),
            placement: opts.placement().cloned(),
        };
        self.commit_with(plan, at, usage, Some(record), answers)
    }

    /// The tools a request carried, stored once per distinct value in the blob area.
    fn tools_record(&self, opts: &RequestOptions) -> Result<ToolsRecord, SessionError> {
        Ok(match opts.tools_json() {
            None => ToolsRecord::None,
            Some(json) => {
                let id = summary_call::tools_id(json);
                let known = self.state.last_served().and_then(|l| l.request.as_ref()).map(|r| &r.tools);
                // The same tools as last time are in the blob area already.
                if !matches!(known, Some(ToolsRecord::Blob { id: k, .. }) if *k == id) {
                    self.store.put_blob(json.as_bytes())?;
                }
                ToolsRecord::Blob { id, bytes: json.len() as u64 }
            }
        })
    }

    fn commit_with(
        &mut self,
        plan: Plan,
        at: Timestamp,
        usage: Option<Usage>,
        request: Option<RequestRecord>,
        answers: Vec<Message>,
    ) -> Result<Committed, SessionError> {
        let at = at.as_millis();
        let _span = self.call_span(plan.call).entered();
        self.check_fresh(&plan)?;
        let Plan { decision, cache, digest, view_messages, view_tokens, prefix_reused, call, base_version, .. } = plan;
        let reported = usage.map(|u| u.prompt_total());
        let config = self.config();
        let anchored = reported.is_some_and(|r| config.trusts_usage(r, view_tokens));
        let mut events = decision.events;
        if let (Some(r), false) = (reported, anchored) {
            let detail = format!(
                "the provider reported {} prompt tokens for a view estimated at {}, below {}x the estimate; \
                 the meter keeps the estimate. Likely cause: a partial count was passed, such as Anthropic's \
                 `input_tokens` alone (it excludes cache reads and writes): pass the whole usage \
                 (Usage::from_anthropic / from_openai_chat / from_openai_responses)",
                thousands(r),
                thousands(view_tokens),
                config.usage_floor_ratio
            );
            let guard = guards::raise(&self.state, call, GuardKind::UsageBelowEstimate, detail, "usage_floor_ratio");
            events.extend(guard);
        }
        let served = Event::RequestServed(RequestServed {
            call,
            at,
            digest,
            view_messages,
            view_tokens,
            metered_tokens: decision.metered_tokens,
            reported_tokens: reported,
            level: decision.level,
            needed: decision.needed,
            prefix_reused,
            deferred: decision.deferred,
            usage,
            anchored,
            request,
        });
        let first = self.state.version() + 1;
        let planned_here = base_version == self.state.version();
        let scratch = match decision.scratch {
            // Only appends since the plan: its decisions are taken again on top of them.
            Some(_) if !planned_here => Some(self.replayed(&events, first)?),
            // The scratch state holds the decided events; add the usage guard, if any.
            Some(mut next) => {
                let decided = usize::try_from(next.version() - base_version).unwrap_or(usize::MAX);
                for (ev, version) in events.iter().skip(decided).zip(next.version() + 1..) {
                    next.apply(version, ev).map_err(|v| self.refused(v))?;
                }
                Some(next)
            }
            None if events.is_empty() => None,
            None => Some(self.replayed(&events, first)?),
        };
        let version = match scratch {
            // The view changed: the scratch state already holds the batch; finish it there.
            Some(mut next) => {
                next.apply(first + events.len() as u64, &served).map_err(|v| self.refused(v))?;
                events.push(served);
                for message in answers {
                    let ev = Event::AnswerReceived(AnswerReceived { call, message });
                    next.apply(first + events.len() as u64, &ev).map_err(|v| self.refused(v))?;
                    events.push(ev);
                }
                self.persist(events.clone(), next)?
            }
            // Only `RequestServed` (and the answer): validate in place, no copy of the state.
            None => {
                self.state.check_event(first, &served).map_err(|v| self.refused(v))?;
                events.push(served);
                // The answer's only rule is that its call is served: checked against the count.
                for message in answers {
                    events.push(Event::AnswerReceived(AnswerReceived { call, message }));
                }
                self.persist_then_apply(events.clone())?
            }
        };
        if let Some(c) = cache {
            self.cache = c;
        }
        crate::trace::committed(&events, version);
        Ok(Committed { version, events })
    }

    /// A copy of the state with `events` applied from `first` on (validating each).
    fn replayed(&self, events: &[Event], first: Version) -> Result<State, SessionError> {
        let mut next = self.state.clone();
        for (ev, version) in events.iter().zip(first..) {
            hydrate(&self.store, self.stream, &mut next, ev)?;
            next.apply(version, ev).map_err(|v| self.refused(v))?;
        }
        Ok(next)
    }

    /// Is `plan` still committable here: this session's, and nothing but appends since?
    fn check_fresh(&self, plan: &Plan) -> Result<(), SessionError> {
        let (changed, by) = self.settled;
        let stale = |by| SessionError::StalePlan { planned: plan.base_version, current: self.state.version(), by };
        if plan.stream != self.stream {
            return Err(stale(StaleCause::OtherSession));
        }
        if changed > plan.base_version || plan.base_version > self.state.version() {
            tracing::info!(planned = plan.base_version, changed_at = changed, %by, "stale plan");
            return Err(stale(by));
        }
        Ok(())
    }

    /// Drops a plan: nothing was written, nothing changes; the next call decides again.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// let plan = session.plan(Timestamp::from_millis(2_000))?;
    /// // ... the provider call failed ...
    /// session.abort(plan);
    /// assert_eq!(session.plan(Timestamp::from_millis(3_000))?.call(), 0); // the same call, decided again
    /// # Ok(()) }
    /// ```
    pub fn abort(&mut self, plan: Plan) {
        drop(plan);
    }

    /// Records that the provider refused `plan`'s request (an HTTP error status: read its body
    /// with [`crate::overflow::parse_rejection`]) instead of dropping it silently: a
    /// `CallRejected`, and, when the rejection says the prompt is over the model's context and
    /// gives the limit, a `LimitLearned` that lowers the session's budget for every later plan
    /// (it is in the log, so also after a restart). Plan again and retry: the new plan fits the
    /// lowered budget.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # use ctxlog::overflow::parse_rejection;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::OpenAi, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// let plan = session.plan(Timestamp::from_millis(2_000))?;
    /// let body = br#"{"error":{"code":400,"message":"request (9000 tokens) exceeds the available context size (8192 tokens)","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#;
    /// let learned = session.reject_call(plan, &parse_rejection(400, body), None, Timestamp::from_millis(2_100))?;
    /// assert!(learned.budget.is_some());
    /// assert!(session.config().budget <= 8_192);
    /// # Ok(()) }
    /// ```
    pub fn reject_call(
        &mut self,
        plan: Plan,
        rejection: &crate::overflow::Rejection,
        model: Option<&str>,
        at: Timestamp,
    ) -> Result<CallRejectedOutcome, SessionError> {
        if plan.stream != self.stream {
            let current = self.state.version();
            return Err(SessionError::StalePlan { planned: plan.base_version, current, by: StaleCause::OtherSession });
        }
        let call = plan.call;
        let mut events = vec![Event::CallRejected(CallRejected {
            call,
            at: at.as_millis(),
            model: model.map(str::to_owned),
            status: rejection.status,
            error: rejection.error.clone(),
            message: rejection.message.clone(),
            overflow: rejection.overflow,
            prompt_tokens: rejection.prompt_tokens,
            limit: rejection.limit,
            view_tokens: plan.view_tokens,
        })];
        let mut budget = None;
        if let (true, Some(limit)) = (rejection.overflow, rejection.limit) {
            let learned = crate::overflow::learned_budget(limit, rejection.prompt_tokens, plan.view_tokens);
            // Only news is written: a budget already at or below it learns nothing.
            if learned < self.config().budget {
                events.push(Event::LimitLearned(LimitLearned {
                    call,
                    model: model.map(str::to_owned),
                    limit,
                    budget: learned,
                }));
                budget = Some(learned);
            }
        }
        drop(plan);
        tracing::warn!(
            session = %self.stream,
            call,
            status = rejection.status,
            error = %rejection.error,
            overflow = rejection.overflow,
            learned = budget,
            "call rejected by the provider"
        );
        let version = self.persist_then_apply(events.clone())?;
        Ok(CallRejectedOutcome { committed: Committed { version, events }, budget })
    }

    /// Undoes the edit (or flush) of `seq`, together with its tool partners.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, SessionError, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// let config = Config { budget: 2_000, ..Config::default() };
    /// let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, config, Timestamp::from_millis(0))?;
    /// for i in 0..8 {
    ///     session.append(vec![parse_message(&format!(r#"{{"role":"user","content":"question {i} {}"}}"#, "x".repeat(900)))?])?;
    ///     session.append(vec![parse_message(r#"{"role":"assistant","content":"answer"}"#)?])?;
    /// }
    /// let plan = session.plan(Timestamp::from_millis(1_000))?; // over the trigger: the ladder edits
    /// session.commit(plan, Timestamp::from_millis(1_000), None)?;
    /// let edited = (0..16).find(|&seq| session.state().entry(seq).is_some_and(|e| e.edit.is_some())).unwrap();
    /// session.restore(edited, "support", "the user asked for the original")?;
    /// assert!(session.state().in_view(edited));
    /// // Restoring what is in the view is a mistake of the caller, refused with a typed error.
    /// assert!(matches!(session.restore(edited, "support", "again"), Err(SessionError::Refused { .. })));
    /// # Ok(()) }
    /// ```
    pub fn restore(&mut self, seq: u64, by: &str, why: &str) -> Result<Committed, SessionError> {
        let _span =
            tracing::info_span!("ctxlog.restore", session = %self.stream, version = self.state.version()).entered();
        let partners = self.restore_partners(seq);
        let restored_with = partners.len();
        let ev = Event::Restored(Restored { seq, partners, by: by.to_owned(), why: why.to_owned() });
        let mut next = self.state.clone();
        hydrate(&self.store, self.stream, &mut next, &ev)?;
        next.apply(self.state.version() + 1, &ev).map_err(|v| self.refused(v))?;
        let version = self.persist(vec![ev.clone()], next)?;
        tracing::info!(seq, partners = restored_with, by, version, "restored");
        Ok(Committed { version, events: vec![ev] })
    }

    /// Tool partners of `seq` that are also out of the view (they come back with it).
    fn restore_partners(&self, seq: u64) -> Vec<u64> {
        let st = &self.state;
        if st.entry(seq).is_none() {
            return Vec::new();
        }
        let mut out = st.tool_partners(seq);
        // A call's other results come back with it too.
        let calls: Vec<u64> = out.clone();
        for c in calls {
            out.extend(st.tool_links(c).filter_map(|l| match l {
                crate::state::tools::Link::Call(p) => p.result(),
                crate::state::tools::Link::Result(_) => None,
            }));
        }
        out.retain(|&p| p != seq && !st.in_view(p));
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Records a guard a host raised outside a call (e.g. the proxy's
    /// [`GuardKind::HistoryDiverged`]): one `GuardRaised` event with no call. Raising a kind
    /// that is already latched writes nothing and returns the current version.
    pub fn raise_guard(&mut self, kind: GuardKind, detail: String, knob: &str) -> Result<Version, SessionError> {
        if self.state.raised().contains(&kind) {
            return Ok(self.state.version());
        }
        let events =
            vec![Event::GuardRaised(crate::event::GuardRaised { call: None, kind, detail, knob: knob.into() })];
        let version = self.persist_then_apply(events.clone())?;
        // `-v` shows a host's guard (a divergence) like the engine's own.
        crate::trace::committed(&events, version);
        Ok(version)
    }

    /// The next summary the host should write (an effect): a span of messages when the meter is
    /// over the soft threshold, or the oldest summaries to condense into one when summaries
    /// take more than their share. Pure: nothing is written until [`Session::prepare`]. A host
    /// may run jobs until this returns `None` (or a job is discarded); one that cannot condense
    /// may skip those jobs, and the engine then retires the oldest summaries instead.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Prepared, Produced, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// let config = Config { budget: 4_000, ..Config::default() };
    /// let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, config, Timestamp::from_millis(0))?;
    /// for i in 0..12 {
    ///     session.append(vec![parse_message(&format!(r#"{{"role":"user","content":"step {i}: {}"}}"#, "details ".repeat(150)))?])?;
    ///     session.append(vec![parse_message(r#"{"role":"assistant","content":"done"}"#)?])?;
    /// }
    /// let job = session.summary_job().expect("over the soft threshold");
    /// let text = session.summarize(&job)?; // the built-in summarizer; a model call would go here
    /// assert!(matches!(session.prepare(&job, text, Produced::extractive())?, Prepared::Written(_)));
    /// assert_eq!(session.state().compacted(), job.to); // prepared: the next call's gate may flush it
    /// # Ok(()) }
    /// ```
    ///
    /// No job is offered while a summary attempt is in flight ([`Session::start_summary`]), nor
    /// while the summarizer is paused after consecutive failures (until a call's view is under the soft threshold again).
    pub fn summary_job(&self) -> Option<SummaryJob> {
        if self.in_flight.is_some() || self.state.summarizer_paused() {
            return None;
        }
        summary::next_job(&self.state).filter(|j| !self.state.summary_rejected(j.from, j.to, &j.condense))
    }

    /// [`Session::summary_job`] as `call`'s summarizer would be asked for it: a standalone span
    /// cut to fit `call.context` ([`crate::summary_fit`]); `None` also when that job is the one
    /// the summarizer last refused deterministically (a 4xx, recorded as `rejected`): it waits
    /// until the job changes (more messages, a different span or limit, another context).
    pub fn summary_job_for(&self, call: &SummaryCall) -> Result<Option<SummaryJob>, SessionError> {
        if self.in_flight.is_some() || self.state.summarizer_paused() {
            return Ok(None);
        }
        // The latch is checked on the job as fitted: a refused span may fit another context.
        let Some(job) = summary::next_job(&self.state) else { return Ok(None) };
        let job = self.summary_request(&job, call)?.job;
        Ok((!self.state.summary_rejected(job.from, job.to, &job.condense)).then_some(job))
    }

    /// The exact request that asks a model for `job`'s summary, in the session's wire format:
    /// standalone, fork or auto as `call` says, falling back to standalone down the refusal
    /// ladder (see [`crate::summary_call`]). Pure: nothing is written; the refusal is recorded
    /// with the attempt's outcome ([`Session::start_summary`], [`Session::finish_summary`]).
    pub fn summary_request(&self, job: &SummaryJob, call: &SummaryCall) -> Result<SummaryRequest, SessionError> {
        let span = if job.is_condense() { Vec::new() } else { self.messages(job.from..job.to)? };
        Ok(summary_call::build(&self.state, self.format(), job, &span, call, &StoreBlobs(&self.store)))
    }

    /// Starts a summary attempt: builds its request ([`Session::summary_request`]) and marks it
    /// in flight (at most one per session: [`SessionError::SummaryInFlight`]). Send
    /// `attempt.request.body()`, then hand the outcome to [`Session::finish_summary`].
    pub fn start_summary(&mut self, job: &SummaryJob, call: &SummaryCall) -> Result<SummaryAttempt, SessionError> {
        if self.in_flight.is_some() {
            return Err(SessionError::SummaryInFlight(self.stream));
        }
        let request = self.summary_request(job, call)?;
        self.attempts += 1;
        self.in_flight = Some(self.attempts);
        tracing::info!(
            from = job.from,
            to = job.to,
            requested = request.mode_requested.as_str(),
            used = request.mode_used.as_str(),
            refusal = request.refusal.as_ref().map(|r| r.name()),
            "summary attempt started"
        );
        Ok(SummaryAttempt {
            stream: self.stream,
            id: self.attempts,
            job: request.job.clone(),
            request,
            max_failures: call.max_failures,
        })
    }

    /// Drops an attempt without recording anything (the host gave up before sending it).
    pub fn cancel_summary(&mut self, attempt: SummaryAttempt) {
        if attempt.stream == self.stream && self.in_flight == Some(attempt.id) {
            self.in_flight = None;
        }
    }

    /// Records an attempt's outcome as one batch: the fork refusal's guard (once per reason
    /// per session), then `SummaryPrepared`, or `SummaryFailed` when the summarizer failed,
    /// returned nothing, returned after its span was edited, flushed or summarized (stale), or
    /// wrote a summary not smaller than what it replaces. A failure changes nothing else; the
    /// one that makes `max_failures` in a row also raises `summarizer_paused`, and no job is
    /// offered until a call's view is under the soft threshold again.
    pub fn finish_summary(
        &mut self,
        attempt: SummaryAttempt,
        outcome: SummaryOutcome,
    ) -> Result<SummaryFinished, SessionError> {
        if attempt.stream != self.stream || self.in_flight != Some(attempt.id) {
            return Err(SessionError::NotInFlight(self.stream));
        }
        self.in_flight = None;
        let _span =
            tracing::info_span!("ctxlog.finish_summary", session = %self.stream, version = self.state.version())
                .entered();
        let SummaryAttempt { job, request, max_failures, .. } = attempt;
        let call = self.state.calls();
        let mut events = Vec::new();
        if let Some(r) = &request.refusal {
            let kind = GuardKind::ForkRefused { reason: r.name().to_owned() };
            let knob = if r.is_decline() { "fork_min_span_ratio (--summary-call)" } else { "--summary-call" };
            events.extend(guards::raise(&self.state, call, kind, r.describe(), knob));
        }
        let refusal = request.refusal.as_ref().map(|r| r.name().to_owned());
        let SummaryOutcome { result, usage, latency_ms } = outcome;
        let verdict = result.and_then(|text| self.judge(&job, text, &request));
        let ev = match verdict {
            Ok((text, tokens, replaced_tokens)) => Event::SummaryPrepared(SummaryPrepared {
                from: job.from,
                to: job.to,
                text,
                tokens,
                replaced_tokens,
                mode_requested: request.mode_requested,
                mode_used: request.mode_used,
                refusal,
                merged: job.condense.clone(),
                prefix_call: request.prefix_call,
                usage,
                latency_ms,
            }),
            Err(reason) => {
                if self.state.summary_failures().saturating_add(1) >= max_failures {
                    let detail = format!(
                        "{} summary attempts failed in a row (the last: {}); no summary job is offered until a \
                         call's view is under the soft threshold again",
                        self.state.summary_failures().saturating_add(1),
                        reason.describe()
                    );
                    events.extend(guards::raise(
                        &self.state,
                        call,
                        GuardKind::SummarizerPaused,
                        detail,
                        "--summarizer",
                    ));
                }
                Event::SummaryFailed(SummaryFailed {
                    from: job.from,
                    to: job.to,
                    merged: job.condense.clone(),
                    mode_requested: request.mode_requested,
                    mode_used: request.mode_used,
                    refusal,
                    prefix_call: request.prefix_call,
                    reason,
                    usage,
                    latency_ms,
                })
            }
        };
        let failure = match &ev {
            Event::SummaryFailed(f) => Some(f.reason.clone()),
            _ => None,
        };
        events.push(ev);
        let next = self.replayed(&events, self.state.version() + 1)?;
        let version = self.persist(events.clone(), next)?;
        let committed = Committed { version, events };
        Ok(match failure {
            None => {
                tracing::info!(from = job.from, to = job.to, version, "summary prepared");
                SummaryFinished::Prepared(committed)
            }
            Some(failure) => {
                tracing::info!(from = job.from, to = job.to, reason = failure.as_str(), version, "summary failed");
                SummaryFinished::Failed { failure, committed }
            }
        })
    }

    /// The text, its tokens and the tokens it replaces, or why it cannot be used.
    fn judge(
        &self,
        job: &SummaryJob,
        text: String,
        request: &SummaryRequest,
    ) -> Result<(String, u32, u64), SummaryFailure> {
        if text.trim().is_empty() {
            return Err(SummaryFailure::Empty);
        }
        if let Some(per_mille) = crate::summary_echo::is_echo(&text, &request.instructions) {
            return Err(SummaryFailure::Echo { per_mille });
        }
        summary::still_valid(&self.state, job).map_err(|why| SummaryFailure::Stale(why.to_string()))?;
        let replaced_tokens = self.replaced_tokens(job);
        let tokens = text_tokens(&text);
        if u64::from(tokens) >= replaced_tokens {
            return Err(SummaryFailure::NotSmaller { tokens, replaced_tokens });
        }
        if let Some(max_tokens) = job.max_tokens.filter(|&max| tokens > max) {
            return Err(SummaryFailure::OverLimit { tokens, max_tokens });
        }
        Ok((text, tokens, replaced_tokens))
    }

    fn replaced_tokens(&self, job: &SummaryJob) -> u64 {
        if job.is_condense() {
            job.span_tokens
        } else {
            (job.from..job.to).filter_map(|s| self.state.entry(s)).map(|e| u64::from(e.tokens)).sum()
        }
    }

    /// The messages `range` as appended, in order: from the state for those in the view
    /// unedited, read back from the log for the others. What a host's summarizer reads.
    pub fn messages(&self, range: Range<u64>) -> Result<Vec<Arc<Message>>, SessionError> {
        load_messages(&self.store, self.stream, &self.state, range)
    }

    /// Runs the built-in summarizer for `job`: the condensed summary of summaries, or the
    /// extractive summary of a span of messages (read back from the log where needed). What a
    /// host without a model for summaries hands to [`Session::prepare`].
    pub fn summarize(&self, job: &SummaryJob) -> Result<String, SessionError> {
        if job.is_condense() {
            return Ok(summary::condense(&self.state, job));
        }
        let span = self.messages(job.from..job.to)?;
        Ok(summary::extractive(&self.state, job, &span))
    }

    /// Bytes of the view served by the last call (one JSON message per element, media as
    /// references).
    pub fn view_bytes(&self) -> usize {
        self.cache.view_bytes()
    }

    /// Approximate heap bytes this session holds: its state ([`State::heap_bytes`]) and the
    /// rendered bytes of its current view.
    pub fn heap_bytes(&self) -> usize {
        self.state.heap_bytes() + self.cache.heap_bytes()
    }

    /// Hands a summary back. It is written as `SummaryPrepared` unless the job went stale (the
    /// span was edited meanwhile, or the summaries to condense changed), the summary is not
    /// smaller than what it replaces, or a condensed summary is over the job's `max_tokens`; a
    /// discarded summary writes nothing and says why.
    pub fn prepare(&mut self, job: &SummaryJob, text: String, produced: Produced) -> Result<Prepared, SessionError> {
        let _span =
            tracing::info_span!("ctxlog.prepare", session = %self.stream, version = self.state.version()).entered();
        let mode = produced.used;
        let prepared = self.try_prepare(job, text, produced)?;
        match &prepared {
            Prepared::Written(c) => tracing::info!(
                from = job.from,
                to = job.to,
                condense = job.is_condense(),
                mode = ?mode,
                version = c.version,
                "summary prepared"
            ),
            Prepared::Discarded(reason) => {
                tracing::info!(from = job.from, to = job.to, condense = job.is_condense(), %reason, "summary discarded")
            }
        }
        Ok(prepared)
    }

    fn try_prepare(&mut self, job: &SummaryJob, text: String, produced: Produced) -> Result<Prepared, SessionError> {
        if let Err(why) = summary::still_valid(&self.state, job) {
            return Ok(Prepared::Discarded(why.to_string()));
        }
        let replaced_tokens = self.replaced_tokens(job);
        let tokens = text_tokens(&text);
        if u64::from(tokens) >= replaced_tokens {
            return Ok(Prepared::Discarded(format!(
                "the summary ({tokens} tokens) is not smaller than the span it replaces ({replaced_tokens} tokens)"
            )));
        }
        if let Some(max) = job.max_tokens.filter(|&max| tokens > max) {
            return Ok(Prepared::Discarded(format!(
                "the condensed summary ({tokens} tokens) is over its limit of {max} tokens"
            )));
        }
        let ev = Event::SummaryPrepared(SummaryPrepared {
            from: job.from,
            to: job.to,
            text,
            tokens,
            replaced_tokens,
            mode_requested: produced.requested,
            mode_used: produced.used,
            refusal: produced.refusal,
            merged: job.condense.clone(),
            prefix_call: None,
            usage: None,
            latency_ms: None,
        });
        self.state.check_event(self.state.version() + 1, &ev).map_err(|v| self.refused(v))?;
        let version = self.persist_then_apply(vec![ev.clone()])?;
        Ok(Prepared::Written(Committed { version, events: vec![ev] }))
    }

    /// Writes a snapshot of the current state (a cache for faster opens).
    pub fn snapshot(&self) -> Result<(), SessionError> {
        let snap = encode_snapshot(&self.state).map_err(SessionError::Snapshot)?;
        self.store.put_snapshot(self.stream, &snap)?;
        tracing::debug!(session = %self.stream, version = snap.version, bytes = snap.bytes.len(), "snapshot written");
        Ok(())
    }

    /// Appends already-validated `events`, then applies them to the state in place. A failure
    /// to apply after a successful append is a bug in the validation; the session then reports
    /// it and must be reopened from the store.
    fn persist_then_apply(&mut self, events: Vec<Event>) -> Result<Version, SessionError> {
        self.persist_then_apply_with(events, Sync::Now)
    }

    fn persist_then_apply_with(&mut self, events: Vec<Event>, sync: Sync) -> Result<Version, SessionError> {
        let first = self.state.version() + 1;
        let version = self.write_with(&events, sync)?;
        self.note_settled(&events, version);
        for (i, ev) in events.iter().enumerate() {
            let stream = self.stream;
            self.state
                .apply(first + i as u64, ev)
                .map_err(|violation| SessionError::Invariant { stream, violation })?;
        }
        Ok(version)
    }

    /// Appends `events` (already applied to the copy `next`), then adopts `next`.
    fn persist(&mut self, events: Vec<Event>, next: State) -> Result<Version, SessionError> {
        let version = self.write(&events)?;
        self.note_settled(&events, version);
        self.state = next;
        Ok(version)
    }

    fn note_settled(&mut self, events: &[Event], version: Version) {
        if let Some(cause) = events.iter().rev().find_map(StaleCause::of) {
            self.settled = (version, cause);
        }
    }

    /// Encodes `events` and appends them as one atomic batch at the current version.
    fn write(&self, events: &[Event]) -> Result<Version, SessionError> {
        self.write_with(events, Sync::Now)
    }

    fn write_with(&self, events: &[Event], sync: Sync) -> Result<Version, SessionError> {
        let records =
            events.iter().map(codec::encode).collect::<Result<Vec<Record>, _>>().map_err(SessionError::Encode)?;
        let expected = ExpectedVersion::Exact(self.state.version());
        let written = match sync {
            Sync::Now => self.store.append(self.stream, expected, &records),
            Sync::WithNext => self.store.append_unsynced(self.stream, expected, &records),
        };
        match written {
            Err(e @ StoreError::Conflict { .. }) => {
                tracing::warn!(
                    error = %e,
                    "conflict: another handle wrote this session first; nothing was written (catch up, then plan again)"
                );
                Err(e.into())
            }
            other => Ok(other?),
        }
    }
}

/// When a write reaches stable storage: before it returns, or with the next write.
#[derive(Clone, Copy)]
enum Sync {
    Now,
    WithNext,
}

/// A store's blob area as the renderer's blob source (a blob that cannot be read is missing).
pub(crate) struct StoreBlobs<'a, S: Store + ?Sized>(pub &'a S);

impl<S: Store + ?Sized> BlobSource for StoreBlobs<'_, S> {
    fn blob(&self, id: &BlobId) -> Option<Vec<u8>> {
        self.0.get_blob(id).ok().flatten()
    }
}

/// Encodes a state as a sealed snapshot.
pub fn encode_snapshot(state: &State) -> Result<Snapshot, SnapshotError> {
    let mut body = SNAPSHOT_LAYOUT.to_le_bytes().to_vec();
    bincode::serde::encode_into_std_write(state, &mut body, bincode::config::standard())
        .map_err(|e| SnapshotError::Payload(e.to_string()))?;
    Ok(Snapshot::seal(state.version(), body))
}

/// Decodes a snapshot; any problem (seal, layout, payload, version mismatch) is reported so
/// the caller can fall back to a full replay.
pub fn decode_snapshot(snap: &Snapshot) -> Result<State, SnapshotError> {
    let body = snap.body()?;
    let (layout, rest) = body.split_at_checked(4).ok_or(SnapshotError::Short)?;
    let found = u32::from_le_bytes([layout[0], layout[1], layout[2], layout[3]]);
    if found != SNAPSHOT_LAYOUT {
        return Err(SnapshotError::Layout { found, reads: SNAPSHOT_LAYOUT });
    }
    let config = bincode::config::standard().with_limit::<{ codec::MAX_PAYLOAD_BYTES }>();
    let (state, _): (State, usize) =
        bincode::serde::decode_from_slice(rest, config).map_err(|e| SnapshotError::Payload(e.to_string()))?;
    if state.version() != snap.version {
        return Err(SnapshotError::Version { claimed: snap.version, held: state.version() });
    }
    Ok(state)
}

/// The stored snapshot if it is usable; `None` (full replay) if missing or unusable.
fn load_snapshot<S: Store>(store: &S, id: StreamId) -> Result<Option<State>, SessionError> {
    let Some(snap) = store.get_snapshot(id)? else { return Ok(None) };
    let head = store.head(id)?.unwrap_or(0);
    if snap.version > head {
        return Ok(None);
    }
    Ok(decode_snapshot(&snap).ok())
}

/// Reads back the messages `range` as appended: the state's own where it holds them (in the
/// view, unedited), the others from their `MessageAppended` records, reading the versions in
/// between in chunks.
pub fn load_messages<S: Store + ?Sized>(
    store: &S,
    stream: StreamId,
    state: &State,
    range: Range<u64>,
) -> Result<Vec<Arc<Message>>, SessionError> {
    let mut out: Vec<Option<Arc<Message>>> = range.clone().map(|seq| state.original(seq).cloned()).collect();
    let missing: Vec<u64> = range.clone().filter(|&seq| state.original(seq).is_none()).collect();
    let mut versions = Vec::with_capacity(missing.len());
    for &seq in &missing {
        let entry = state.entry(seq).ok_or(SessionError::Body {
            stream,
            seq,
            version: 0,
            detail: format!("the session has {} messages", state.message_count()),
        })?;
        versions.push((entry.version, seq));
    }
    let (Some(&(first, _)), Some(&(last, _))) = (versions.first(), versions.last()) else {
        return collect_loaded(out, stream, &range);
    };
    let mut wanted = versions.iter().copied().peekable();
    let mut from = first;
    while from <= last {
        // Never past the last wanted record: hydrating one message reads one record.
        let max = usize::try_from(last - from + 1).unwrap_or(READ_CHUNK).min(READ_CHUNK);
        let batch = store.read(stream, from, max)?;
        let Some(end) = batch.last().map(|r| r.version) else { break };
        for rec in batch {
            let Some(&(version, seq)) = wanted.peek() else { break };
            if rec.version != version {
                continue;
            }
            wanted.next();
            let fail = |detail: String| SessionError::Body { stream, seq, version, detail };
            match codec::decode(stream, version, &rec.record)? {
                Event::MessageAppended(e) if e.seq == seq => {
                    let slot = usize::try_from(seq - range.start).ok().and_then(|i| out.get_mut(i));
                    if let Some(slot) = slot {
                        *slot = Some(Arc::new(e.message));
                    }
                }
                Event::MessageAppended(e) => return Err(fail(format!("the record holds message {}", e.seq))),
                other => return Err(fail(format!("the record holds {}", other.name()))),
            }
        }
        from = match wanted.peek() {
            Some(&(next, _)) => next.max(end + 1),
            None => break,
        };
    }
    collect_loaded(out, stream, &range)
}

fn collect_loaded(
    out: Vec<Option<Arc<Message>>>,
    stream: StreamId,
    range: &Range<u64>,
) -> Result<Vec<Arc<Message>>, SessionError> {
    out.into_iter()
        .zip(range.clone())
        .map(|(m, seq)| {
            m.ok_or(SessionError::Body { stream, seq, version: 0, detail: "the log ends before its record".into() })
        })
        .collect()
}

/// Loads from `store` the messages `ev` needs and `state` does not hold
/// ([`State::bodies_needed`]), and hands them over ([`State::hydrate`]). Call it before applying
/// any event read from a log or decided live; for almost every event it does nothing.
pub fn hydrate<S: Store + ?Sized>(
    store: &S,
    stream: StreamId,
    state: &mut State,
    ev: &Event,
) -> Result<(), SessionError> {
    for seq in state.bodies_needed(ev) {
        let m = load_messages(store, stream, state, seq..seq + 1)?;
        if let Some(m) = m.into_iter().next() {
            state.hydrate(seq, m);
        }
    }
    Ok(())
}

/// A fresh random session id.
pub fn new_session_id() -> StreamId {
    StreamId(Uuid::new_v4())
}
