//! Edits a host asks for: a restore brings a message (and its tool partners) back into the view;
//! a pin keeps it there for good (until it is unpinned).

use crate::error::SessionError;
use crate::event::{Event, Pinned, Restored};
use crate::log::hydrate;
use crate::store::Store;

use super::{Committed, Session};

impl<S: Store> Session<S> {
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

    /// Undoes the edit (or flush) of `seq` like [`Session::restore`] and pins it in the same
    /// batch (`ctxlog restore --pin`): from then on no ladder level edits it and no flush hides
    /// it (its tool partners stay with it), for good, until [`Session::pin`] unpins it. A
    /// message already in the view is only pinned.
    pub fn restore_pinned(&mut self, seq: u64, by: &str, why: &str) -> Result<Committed, SessionError> {
        let _span =
            tracing::info_span!("ctxlog.restore", session = %self.stream, version = self.state.version(), pin = true)
                .entered();
        let mut events = Vec::new();
        let mut next = self.state.clone();
        if !self.state.in_view(seq) || self.state.entry(seq).is_some_and(|e| e.edit.is_some()) {
            let partners = self.restore_partners(seq);
            let ev = Event::Restored(Restored { seq, partners, by: by.to_owned(), why: why.to_owned() });
            hydrate(&self.store, self.stream, &mut next, &ev)?;
            next.apply(self.state.version() + 1, &ev).map_err(|v| self.refused(v))?;
            events.push(ev);
        }
        let ev = Event::Pinned(Pinned { seq, pin: true, by: by.to_owned(), why: why.to_owned() });
        next.apply(self.state.version() + events.len() as u64 + 1, &ev).map_err(|v| self.refused(v))?;
        events.push(ev);
        let version = self.persist(events.clone(), next)?;
        tracing::info!(seq, by, version, "restored and pinned");
        Ok(Committed { version, events })
    }

    /// Pins (`pin`) or unpins a message: a pinned message is never edited by the ladder nor
    /// hidden by a flush. Pinning needs the message in the view as appended (see
    /// [`Session::restore_pinned`]); unpinning, a pin made this way (a message appended
    /// `"pinned": true` stays pinned). Refused with a typed error otherwise, writing nothing.
    pub fn pin(&mut self, seq: u64, pin: bool, by: &str, why: &str) -> Result<Committed, SessionError> {
        let ev = Event::Pinned(Pinned { seq, pin, by: by.to_owned(), why: why.to_owned() });
        let mut next = self.state.clone();
        next.apply(self.state.version() + 1, &ev).map_err(|v| self.refused(v))?;
        let version = self.persist(vec![ev.clone()], next)?;
        tracing::info!(seq, pin, by, version, "pinned");
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
}
