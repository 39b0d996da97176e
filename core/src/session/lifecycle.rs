//! A session's lifecycle and getters: create (plain, with messages, named, an import), open
//! (snapshot, then the rest of the log), catch up with other writers, complete an import,
//! write a snapshot.

use uuid::Uuid;

use crate::codec;
use crate::config::Config;
use crate::error::{SessionError, StaleCause};
use crate::event::{Event, ImportCompleted, ImportSource, SessionStarted};
use crate::log::{for_each_event, hydrate};
use crate::message::Message;
use crate::snapshot::encode_snapshot;
use crate::state::State;
use crate::store::{ExpectedVersion, Record, Store, StoreError, StreamId};
use crate::time::Timestamp;
use crate::view::ViewCache;
use crate::wire::WireFormat;

use super::{Appended, Committed, Session};

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
        let state = crate::snapshot::load(&store, id)?.unwrap_or_default();
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
        for_each_event(store, stream, state.version() + 1, None, |version, ev| {
            if let Some(cause) = StaleCause::of(&ev) {
                *settled = (version, cause);
            }
            hydrate(store, stream, state, &ev)?;
            state.apply(version, &ev).map_err(|violation| SessionError::Invariant { stream, violation })
        })
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

    /// Writes a snapshot of the current state (a cache for faster opens).
    pub fn snapshot(&self) -> Result<(), SessionError> {
        let snap = encode_snapshot(&self.state).map_err(SessionError::Snapshot)?;
        self.store.put_snapshot(self.stream, &snap)?;
        tracing::debug!(session = %self.stream, version = snap.version, bytes = snap.bytes.len(), "snapshot written");
        Ok(())
    }
}

/// A fresh random session id.
pub fn new_session_id() -> StreamId {
    StreamId(Uuid::new_v4())
}
