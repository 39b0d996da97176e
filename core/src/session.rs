//! `Session`: drives the engine over a [`Store`]. The only place where the core meets storage.
//!
//! Every command follows decide → persist → advance: events are decided and validated against
//! the state without touching it, appended to the store as one atomic batch, and applied only
//! after the store acknowledged them.

use std::ops::Range;
use std::sync::Arc;

use uuid::Uuid;

use crate::codec::{self, DecodeError};
use crate::config::{Config, ConfigError};
use crate::engine;
use crate::event::{
    Event, ImportCompleted, ImportSource, MessageAppended, RequestServed, Restored, SessionStarted, SummaryMode,
    SummaryPrepared,
};
use crate::media;
use crate::message::{BlobRef, Block, Content, ImageUrl, MediaData, MediaSource, Message};
use crate::state::{State, Violation};
use crate::store::{BlobId, ExpectedVersion, Record, Snapshot, Store, StoreError, StreamId, Version};
use crate::summary::{self, SummaryJob};
use crate::time::Millis;
use crate::tokens::text_tokens;
use crate::view::{render_item_with, ViewCache};
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
pub const SNAPSHOT_LAYOUT: u32 = 5;

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
    /// An event would break (or a stored event breaks) an invariant.
    #[error("stream {stream}: {violation}")]
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
    /// The plan was made against an older state.
    #[error("stale plan: made at version {planned}, session is at version {current}")]
    StalePlan {
        /// Version the plan was made at.
        planned: Version,
        /// Current version.
        current: Version,
    },
    /// Encoding an event failed (a bug).
    #[error("cannot encode event: {0}")]
    Encode(String),
}

/// A call decided but not yet committed. Dropping it (or [`Session::abort`]) writes nothing.
#[derive(Debug, Clone)]
#[must_use = "a plan is committed with Session::commit or dropped with Session::abort"]
pub struct Plan {
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
}

impl Plan {
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

/// Outcome of [`Session::prepare`].
#[derive(Debug, Clone)]
pub enum Prepared {
    /// `SummaryPrepared` was written.
    Written(Committed),
    /// Nothing was written, for this reason.
    Discarded(String),
}

/// A session over a store.
pub struct Session<S: Store> {
    store: S,
    stream: StreamId,
    state: State,
    cache: ViewCache,
}

impl<S: Store> Session<S> {
    /// Creates a new session (writes `SessionStarted`).
    pub fn create(
        store: S,
        id: StreamId,
        format: WireFormat,
        config: Config,
        now: Millis,
    ) -> Result<Self, SessionError> {
        Self::start(store, SessionStarted { session: id.0, format, config, at: now, import: None })
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
        now: Millis,
        source: ImportSource,
    ) -> Result<Self, SessionError> {
        Self::start(store, SessionStarted { session: id.0, format, config, at: now, import: Some(source) })
    }

    fn start(store: S, started: SessionStarted) -> Result<Self, SessionError> {
        started.config.validate()?;
        let id = StreamId(started.session);
        if store.head(id)?.is_some() {
            return Err(SessionError::Exists(id));
        }
        let mut s = Session { store, stream: id, state: State::new(), cache: ViewCache::new() };
        let ev = Event::SessionStarted(started);
        s.state.check_event(1, &ev).map_err(|v| s.invariant(v))?;
        match s.persist_then_apply(vec![ev]) {
            Err(SessionError::Store(StoreError::Conflict { .. })) => Err(SessionError::Exists(id)),
            other => other.map(|_| s),
        }
    }

    /// Opens an existing session: the snapshot if it is valid, then a strict replay of the rest.
    /// An import that did not finish is refused ([`SessionError::Unfinished`]).
    pub fn open(store: S, id: StreamId) -> Result<Self, SessionError> {
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
        let mut s = Session { store, stream: id, state, cache: ViewCache::new() };
        s.catch_up()?;
        Ok(s)
    }

    /// Writes `ImportCompleted`: every message of the transcript is appended, the session is
    /// complete.
    pub fn complete_import(&mut self) -> Result<Committed, SessionError> {
        let ev =
            Event::ImportCompleted(ImportCompleted { messages: self.state.message_count(), calls: self.state.calls() });
        self.state.check_event(self.state.version() + 1, &ev).map_err(|v| self.invariant(v))?;
        let version = self.persist_then_apply(vec![ev.clone()])?;
        Ok(Committed { version, events: vec![ev] })
    }

    /// Folds records written since the state's version (by this or another writer).
    pub fn catch_up(&mut self) -> Result<(), SessionError> {
        let (stream, state, store) = (self.stream, &mut self.state, &self.store);
        crate::replay::for_each_event(store, stream, state.version() + 1, None, |version, ev| {
            hydrate(store, stream, state, &ev)?;
            state.apply(version, &ev).map_err(|violation| SessionError::Invariant { stream, violation })
        })
    }

    fn invariant(&self, violation: Violation) -> SessionError {
        SessionError::Invariant { stream: self.stream, violation }
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
    pub fn append(&mut self, messages: Vec<Message>) -> Result<Appended, SessionError> {
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
        // Validate without copying the state (appends are the hot path), persist, then apply.
        self.state.check_appends(self.state.version() + 1, &events).map_err(|v| self.invariant(v))?;
        report.version = self.persist_then_apply(events)?;
        Ok(report)
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
    pub fn plan(&mut self, now: Millis) -> Result<Plan, SessionError> {
        let decision = engine::decide(&self.state, now).map_err(|v| self.invariant(v))?;
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
        Ok(Plan {
            base_version: self.state.version(),
            call: self.state.calls(),
            digest,
            view_messages: view_state.view().len() as u64,
            view_tokens: view_state.view_tokens(),
            prefix_reused,
            decision,
            cache,
        })
    }

    /// The planned view as the provider needs it: one JSON message per element, media
    /// inlined from the blob area. Missing blobs stay references and are returned.
    pub fn render_plan(&self, plan: &Plan) -> (Vec<String>, Vec<BlobId>) {
        let state = plan.decision.scratch.as_ref().unwrap_or(&self.state);
        let source = StoreBlobs(&self.store);
        let opts = RenderOpts { meta: false, media: Media::Inline(&source) };
        let mut missing = Vec::new();
        let msgs = state
            .view()
            .iter()
            .map(|it| {
                let bytes = render_item_with(state, it.item, opts, &mut missing);
                String::from_utf8_lossy(bytes.strip_suffix(b"\n").unwrap_or(&bytes)).into_owned()
            })
            .collect();
        (msgs, missing)
    }

    /// The view bytes of a plan (media as references), one JSON message per element.
    pub fn plan_view(&self, plan: &Plan) -> Vec<Arc<[u8]>> {
        plan.cache.as_ref().unwrap_or(&self.cache).bytes().to_vec()
    }

    /// Commits a dispatched call: its tentative events plus `RequestServed`, as one batch.
    /// `at` is when the dispatch completed; `reported` the provider's input tokens, if known.
    pub fn commit(&mut self, plan: Plan, at: Millis, reported: Option<u64>) -> Result<Committed, SessionError> {
        if plan.base_version != self.state.version() {
            return Err(SessionError::StalePlan { planned: plan.base_version, current: self.state.version() });
        }
        let Plan { decision, cache, digest, view_messages, view_tokens, prefix_reused, call, .. } = plan;
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
        });
        let served_version = self.state.version() + decision.events.len() as u64 + 1;
        let mut events = decision.events;
        let version = match decision.scratch {
            // The view changed: the scratch state already holds the batch; finish it there.
            Some(mut next) => {
                next.apply(served_version, &served).map_err(|v| self.invariant(v))?;
                events.push(served);
                self.persist(events.clone(), next)?
            }
            // Only `RequestServed`: validate in place, no copy of the state.
            None => {
                self.state.check_event(served_version, &served).map_err(|v| self.invariant(v))?;
                events.push(served);
                self.persist_then_apply(events.clone())?
            }
        };
        if let Some(c) = cache {
            self.cache = c;
        }
        Ok(Committed { version, events })
    }

    /// Drops a plan: nothing was written, nothing changes; the next call decides again.
    pub fn abort(&mut self, plan: Plan) {
        drop(plan);
    }

    /// Undoes the edit (or flush) of `seq`, together with its tool partners.
    pub fn restore(&mut self, seq: u64, by: &str, why: &str) -> Result<Committed, SessionError> {
        let partners = self.restore_partners(seq);
        let ev = Event::Restored(Restored { seq, partners, by: by.to_owned(), why: why.to_owned() });
        let mut next = self.state.clone();
        hydrate(&self.store, self.stream, &mut next, &ev)?;
        next.apply(self.state.version() + 1, &ev).map_err(|v| self.invariant(v))?;
        let version = self.persist(vec![ev.clone()], next)?;
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

    /// The next summary the host should write (an effect): a span of messages when the meter is
    /// over the soft threshold, or the oldest summaries to condense into one when summaries
    /// take more than their share. Pure: nothing is written until [`Session::prepare`]. A host
    /// may run jobs until this returns `None` (or a job is discarded); one that cannot condense
    /// may skip those jobs, and the engine then retires the oldest summaries instead.
    pub fn summary_job(&self) -> Option<SummaryJob> {
        summary::next_job(&self.state)
    }

    /// The messages `range` as appended, in order: from the state for those in the view
    /// unedited, read back from the log for the others. What a host's summarizer reads.
    pub fn messages(&self, range: Range<u64>) -> Result<Vec<Arc<Message>>, SessionError> {
        load_messages(&self.store, self.stream, &self.state, range)
    }

    /// Runs the built-in summarizer for `job`: the condensed summary of summaries, or the
    /// extractive summary of a span of messages (read back from the log where needed).
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
        if let Err(why) = summary::still_valid(&self.state, job) {
            return Ok(Prepared::Discarded(why));
        }
        let replaced_tokens: u64 = if job.is_condense() {
            job.span_tokens
        } else {
            (job.from..job.to).filter_map(|s| self.state.entry(s)).map(|e| u64::from(e.tokens)).sum()
        };
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
        });
        self.state.check_event(self.state.version() + 1, &ev).map_err(|v| self.invariant(v))?;
        let version = self.persist_then_apply(vec![ev.clone()])?;
        Ok(Prepared::Written(Committed { version, events: vec![ev] }))
    }

    /// Writes a snapshot of the current state (a cache for faster opens).
    pub fn snapshot(&self) -> Result<(), SessionError> {
        let snap = encode_snapshot(&self.state).map_err(SessionError::Encode)?;
        self.store.put_snapshot(self.stream, &snap)?;
        Ok(())
    }

    /// Appends already-validated `events`, then applies them to the state in place. A failure
    /// to apply after a successful append is a bug in the validation; the session then reports
    /// it and must be reopened from the store.
    fn persist_then_apply(&mut self, events: Vec<Event>) -> Result<Version, SessionError> {
        let first = self.state.version() + 1;
        let version = self.write(&events)?;
        for (i, ev) in events.iter().enumerate() {
            self.state.apply(first + i as u64, ev).map_err(|v| self.invariant(v))?;
        }
        Ok(version)
    }

    /// Appends `events` (already applied to the copy `next`), then adopts `next`.
    fn persist(&mut self, events: Vec<Event>, next: State) -> Result<Version, SessionError> {
        let version = self.write(&events)?;
        self.state = next;
        Ok(version)
    }

    /// Encodes `events` and appends them as one atomic batch at the current version.
    fn write(&self, events: &[Event]) -> Result<Version, SessionError> {
        let records =
            events.iter().map(codec::encode).collect::<Result<Vec<Record>, _>>().map_err(SessionError::Encode)?;
        Ok(self.store.append(self.stream, ExpectedVersion::Exact(self.state.version()), &records)?)
    }
}

struct StoreBlobs<'a, S: Store>(&'a S);

impl<S: Store> BlobSource for StoreBlobs<'_, S> {
    fn blob(&self, id: &BlobId) -> Option<Vec<u8>> {
        self.0.get_blob(id).ok().flatten()
    }
}

/// Encodes a state as a sealed snapshot.
pub fn encode_snapshot(state: &State) -> Result<Snapshot, String> {
    let mut body = SNAPSHOT_LAYOUT.to_le_bytes().to_vec();
    bincode::serde::encode_into_std_write(state, &mut body, bincode::config::standard()).map_err(|e| e.to_string())?;
    Ok(Snapshot::seal(state.version(), body))
}

/// Decodes a snapshot; any problem (seal, layout, payload, version mismatch) is reported so
/// the caller can fall back to a full replay.
pub fn decode_snapshot(snap: &Snapshot) -> Result<State, String> {
    let body = snap.body()?;
    let (layout, rest) = body.split_at_checked(4).ok_or("snapshot shorter than its header")?;
    let layout = u32::from_le_bytes([layout[0], layout[1], layout[2], layout[3]]);
    if layout != SNAPSHOT_LAYOUT {
        return Err(format!("snapshot layout {layout}, this build reads {SNAPSHOT_LAYOUT}"));
    }
    let config = bincode::config::standard().with_limit::<{ codec::MAX_PAYLOAD_BYTES }>();
    let (state, _): (State, usize) = bincode::serde::decode_from_slice(rest, config).map_err(|e| e.to_string())?;
    if state.version() != snap.version {
        return Err(format!("snapshot claims version {} but holds state at version {}", snap.version, state.version()));
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
