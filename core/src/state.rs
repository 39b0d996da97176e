//! `State`: the fold of a session's events, with every invariant checked on each transition.
//!
//! **Architecture Invariant:** [`State::apply`] (and its lenient twin) is the only way state
//! changes; live commits and replay use it alike.
//!
//! The state is composed of sub-folds, each in its own file, owning its fields and the rules of
//! the events it cares about (checked, clamped for a lenient replay, applied), in the order
//! every event goes through them:
//!
//! 1. `lifecycle`: the session's record: versions, `SessionStarted` first, the import,
//!    `SessionNamed`, `Branched`, `LimitLearned`;
//! 2. `compaction`: the summaries and the watermarks `flushed ≤ compacted`;
//! 3. `messages`: the entries and the tool index; appends, edits and restores;
//! 4. `view_index`: the view's items, tokens and bodies, rebuilt from the three above;
//! 5. `meter`: the calls, the meter's anchor, the breaker;
//! 6. `latches`: guards raised and re-armed, the summarizer's failures.
//!
//! The state keeps what the view and the policies need: per message a few facts and the tool
//! links ([`Entry`], [`tools`]), the bodies of the messages in the view (as appended, or the
//! small rendering of their edit), the text of the summaries still current. A message's body
//! leaves memory when it leaves the view; an event that needs it again (a restore, a second
//! edit of the same message) is applied after [`State::hydrate`] handed it over, read back from
//! the log by whoever applies the event ([`State::bodies_needed`] says which; `loaded.rs`).

use crate::event::Event;
use crate::store::Version;

mod compaction;
mod entry;
pub mod findings;
#[cfg(test)]
mod given;
pub mod heap;
mod invariant;
mod latches;
mod layout;
mod lifecycle;
mod loaded;
mod messages;
mod meter;
mod summaries;
pub mod tools;
mod view_index;

use compaction::Compaction;
pub use entry::{has_media, EditRecord, Entry};
pub use heap::HeapReport;
use invariant::violation;
pub use invariant::{Invariant, Violation};
use latches::Latches;
use lifecycle::Lifecycle;
pub use lifecycle::{ImportState, SessionInfo};
use loaded::Loaded;
pub use messages::RESTORE_HOLD_CALLS;
use messages::{Messages, Reads};
use meter::Meter;
pub use meter::{Anchor, LastServed};
pub use summaries::{Standing, Summaries, SummaryState};
pub use view_index::{Coverage, Item, ViewItem};
use view_index::{Sources, ViewIndex};

/// The folded state of a session: its sub-folds (see the module's docs), and the bodies handed
/// over for the next event. Serialized as the snapshot layout (`layout.rs`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct State {
    lifecycle: Lifecycle,
    messages: Messages,
    compaction: Compaction,
    view: ViewIndex,
    meter: Meter,
    latches: Latches,
    loaded: Loaded,
}

impl State {
    /// The empty state before `SessionStarted`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one event, checking every invariant. On `Err` the state may be partly updated
    /// and must be discarded (live commits apply to a copy; strict replay stops).
    pub fn apply(&mut self, version: Version, ev: &Event) -> Result<(), Violation> {
        let result = self.check(version, ev).and_then(|()| {
            self.fold(version, ev);
            self.post_check(version, ev)
        });
        self.loaded.clear();
        result
    }

    /// Applies one event for a postmortem of a log that breaks invariants: the event is
    /// clamped where that is meaningful or skipped, and every violation is returned.
    pub fn apply_lenient(&mut self, version: Version, ev: &Event) -> Vec<Violation> {
        let mut found = Vec::new();
        let expected = self.version() + 1;
        if version != expected {
            found.push(violation(
                version,
                ev,
                Invariant::VersionContiguous,
                format!("expected version {expected}, got {version}"),
            ));
            if version < expected {
                // A duplicate or out-of-order record: skip it, keep the version where it was.
                return found;
            }
            // A gap: take the writer's numbering and check the event on its own merits.
            self.lifecycle.skip_to(version - 1);
        }
        match self.check(version, ev) {
            Ok(()) => self.fold(version, ev),
            Err(v) => {
                let repaired = self.repair(ev, &v);
                found.push(v);
                match repaired {
                    Some(fixed) if self.check(version, &fixed).is_ok() => self.fold(version, &fixed),
                    _ => self.lifecycle.skip_to(version),
                }
            }
        }
        if let Err(v) = self.post_check(version, ev) {
            found.push(v);
        }
        self.loaded.clear();
        found
    }

    /// Validates a batch of appends starting at `version` without changing the state.
    pub(crate) fn check_appends(&self, version: Version, events: &[Event]) -> Result<(), Violation> {
        let mut calls: Vec<&str> = Vec::new();
        let mut answers: Vec<&str> = Vec::new();
        for (i, ev) in events.iter().enumerate() {
            let v = version + i as u64;
            let Event::MessageAppended(e) = ev else {
                return Err(violation(v, ev, Invariant::SeqDense, "an append batch holds only MessageAppended"));
            };
            if i == 0 {
                self.check(v, ev)?;
            } else {
                let count = self.message_count() + i as u64;
                let (pending_call, pending_answer) = (|id: &str| calls.contains(&id), |id: &str| answers.contains(&id));
                self.messages
                    .check_append(e, count, &pending_call, &pending_answer)
                    .map_err(|(inv, d)| violation(v, ev, inv, d))?;
            }
            calls.extend(e.message.call_ids());
            answers.extend(e.message.result_ids());
        }
        Ok(())
    }

    /// Validates one event without changing the state. The event's post-conditions (tool
    /// pairs after a view change) are only checked by [`State::apply`].
    pub fn check_event(&self, version: Version, ev: &Event) -> Result<(), Violation> {
        self.check(version, ev)
    }

    /// Each sub-fold checks the events it owns (one rule, one place); the envelope first.
    fn check(&self, version: Version, ev: &Event) -> Result<(), Violation> {
        let config = self.config();
        let reads =
            Reads { flushed: self.compaction.flushed, config: &config, view: &self.view.bodies, loaded: &self.loaded };
        self.lifecycle
            .check(version, ev, self.messages.count(), self.meter.calls)
            .and_then(|()| self.compaction.check(ev, &self.messages, || self.view.oldest_summary()))
            .and_then(|()| self.messages.check(ev, &reads))
            .and_then(|()| self.meter.check(ev))
            .map_err(|(invariant, detail)| violation(version, ev, invariant, detail))
    }

    /// Lenient replay: the closest event that keeps the invariants, or `None` to skip.
    fn repair(&self, ev: &Event, v: &Violation) -> Option<Event> {
        let count = self.messages.count();
        self.messages
            .repair(ev, v.invariant)
            .or_else(|| self.compaction.repair(ev, v.invariant, count))
            .or_else(|| self.meter.repair(ev, v.invariant))
    }

    /// Each sub-fold applies its part of a checked event, in the order of the module's docs:
    /// each reads only what the ones before it already applied.
    fn fold(&mut self, version: Version, ev: &Event) {
        self.lifecycle.apply(version, ev);
        let config = self.config();
        self.compaction.apply(ev);
        let reads =
            Reads { flushed: self.compaction.flushed, config: &config, view: &self.view.bodies, loaded: &self.loaded };
        let brought = self.messages.apply(version, ev, &reads, self.meter.calls);
        let sources = Sources { messages: &self.messages, compaction: &self.compaction, config: &config };
        self.view.apply(ev, brought, &sources);
        self.meter.apply(ev, self.view.generation, config.budget);
        self.latches.apply(ev, &config);
    }

    fn post_check(&mut self, version: Version, ev: &Event) -> Result<(), Violation> {
        self.view.post_check(ev, &self.messages).map_err(|d| violation(version, ev, Invariant::ToolPairs, d))
    }
}
