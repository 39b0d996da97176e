//! Persist, then advance: every write of a session goes through here (encode, append at the
//! version the session holds, then apply — or adopt the scratch state the batch was validated
//! on), and notes what a write does to plans made before it.

use crate::codec;
use crate::error::{SessionError, StaleCause};
use crate::event::Event;
use crate::log::hydrate;
use crate::state::State;
use crate::store::{ExpectedVersion, Record, Store, StoreError, Version};

use super::Session;

/// What a commit wrote.
#[derive(Debug, Clone)]
pub struct Committed {
    /// Stream version after the commit.
    pub version: Version,
    /// The batch, ending with `RequestServed`.
    pub events: Vec<Event>,
}

impl<S: Store> Session<S> {
    /// A copy of the state with `events` applied from `first` on (validating each).
    pub(super) fn replayed(&self, events: &[Event], first: Version) -> Result<State, SessionError> {
        let mut next = self.state.clone();
        for (ev, version) in events.iter().zip(first..) {
            hydrate(&self.store, self.stream, &mut next, ev)?;
            next.apply(version, ev).map_err(|v| self.refused(v))?;
        }
        Ok(next)
    }

    /// Appends already-validated `events`, then applies them to the state in place. A failure
    /// to apply after a successful append is a bug in the validation; the session then reports
    /// it and must be reopened from the store.
    pub(super) fn persist_then_apply(&mut self, events: Vec<Event>) -> Result<Version, SessionError> {
        self.persist_then_apply_with(events, Sync::Now)
    }

    pub(super) fn persist_then_apply_with(&mut self, events: Vec<Event>, sync: Sync) -> Result<Version, SessionError> {
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
    pub(super) fn persist(&mut self, events: Vec<Event>, next: State) -> Result<Version, SessionError> {
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
pub(super) enum Sync {
    Now,
    WithNext,
}
