//! Edits a host asks for: a restore brings a message (and its tool partners) back into the view.

use crate::error::SessionError;
use crate::event::{Event, Restored};
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
