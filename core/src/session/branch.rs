//! A branch: a new session that continues another's history from a fork point.
//!
//! The branch is self-contained: its log starts with a copy of the parent's records up to the
//! fork point, then `Branched`, then its own messages. So its state is the parent's as it was
//! with that many messages — summaries, flushes and edits of the shared prefix included, no
//! compaction from scratch — and every reader (`replay`, `export`, `verify`, `copy`) reads it
//! like any other session.

use crate::codec;
use crate::event::{Branched, Event};
use crate::message::Message;
use crate::state::State;
use crate::store::{ExpectedVersion, Record, Store, StoreError, StreamId};
use crate::time::Timestamp;
use crate::view::ViewCache;

use crate::error::{SessionError, StaleCause};
use crate::log::{hydrate, READ_CHUNK};

use super::{Appended, Session};

impl<S: Store + Clone> Session<S> {
    /// Creates session `child`, a branch of this one holding its first `at` messages, then
    /// `messages`: the parent's records up to the append of message `at` (copied, the first
    /// with `child`'s id), `Branched`, and the appends are one atomic batch, validated before
    /// anything is written (refused messages leave no branch behind). `at` may equal the
    /// message count (a branch that shares everything so far).
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let m = |role: &str, text: &str| parse_message(&format!(r#"{{"role":"{role}","content":"{text}"}}"#));
    /// let (parent, _) = Session::create_with(&store, StreamId::random(), WireFormat::Anthropic, Config::default(),
    ///     Timestamp::from_millis(1_000), vec![m("user", "hi")?, m("assistant", "hello")?, m("user", "bye")?])?;
    /// // The client took its last message back and said something else.
    /// let (branch, _) = parent.branch(StreamId::random(), 2, Timestamp::from_millis(2_000), vec![m("user", "more")?])?;
    /// assert_eq!(branch.state().message_count(), 3);
    /// assert_eq!(branch.messages(2..3)?[0].plain_text(), "more");
    /// # Ok(()) }
    /// ```
    pub fn branch(
        &self,
        child: StreamId,
        at: u64,
        now: Timestamp,
        messages: Vec<Message>,
    ) -> Result<(Session<S>, Appended), SessionError> {
        let parent = self.stream;
        let store = self.store.clone();
        if store.head(child)?.is_some() {
            return Err(SessionError::Exists(child));
        }
        // The fork version: the last record before message `at` was appended.
        let fork = match self.state.entry(at) {
            Some(e) => e.version.saturating_sub(1),
            None => self.state.version(),
        };
        let mut state = State::new();
        let mut records: Vec<Record> = Vec::new();
        let mut from = 1;
        while from <= fork {
            let batch = store.read(parent, from, READ_CHUNK)?;
            let Some(last) = batch.last().map(|r| r.version) else { break };
            for stored in batch.into_iter().take_while(|r| r.version <= fork) {
                let version = stored.version;
                let ev = match codec::decode(parent, version, &stored.record)? {
                    Event::SessionStarted(mut started) => {
                        started.session = child.0;
                        let ev = Event::SessionStarted(started);
                        records.push(codec::encode(&ev).map_err(SessionError::Encode)?);
                        ev
                    }
                    // Copied as they are: the bytes stay the parent's.
                    ev => {
                        records.push(stored.record);
                        ev
                    }
                };
                hydrate(&store, parent, &mut state, &ev)?;
                state.apply(version, &ev).map_err(|violation| SessionError::Invariant { stream: parent, violation })?;
            }
            from = last + 1;
        }
        let branched =
            Event::Branched(Branched { parent: parent.0, parent_version: fork, messages: at, at: now.as_millis() });
        let mut s = Session {
            store,
            stream: child,
            state,
            cache: ViewCache::new(),
            settled: (fork + 1, StaleCause::Reopened),
            in_flight: None,
            attempts: 0,
        };
        s.state.apply(fork + 1, &branched).map_err(|v| s.refused(v))?;
        let (events, mut report) = s.append_events(messages)?;
        records.push(codec::encode(&branched).map_err(SessionError::Encode)?);
        for ev in &events {
            records.push(codec::encode(ev).map_err(SessionError::Encode)?);
        }
        let version = match s.store.append(child, ExpectedVersion::Exact(0), &records) {
            Err(StoreError::Conflict { .. }) => return Err(SessionError::Exists(child)),
            other => other?,
        };
        for (ev, v) in events.iter().zip(fork + 2..) {
            s.state.apply(v, ev).map_err(|violation| SessionError::Invariant { stream: child, violation })?;
        }
        report.version = version;
        tracing::info!(%parent, %child, at, version, "branched");
        Ok((s, report))
    }
}
