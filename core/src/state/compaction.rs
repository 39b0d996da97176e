//! The summaries with the two watermarks: `compacted_prefix_messages` (what `SummaryPrepared`
//! covered) and `flushed_prefix_messages` (what `Flushed` switched the view to), with
//! `0 ≤ flushed ≤ compacted ≤ message count`, neither moving backwards. It owns the rules of
//! `SummaryPrepared`, `Flushed` and `SummaryRetired`, strict and lenient.

use super::findings::LedgerError;
use super::invariant::{Broken, Invariant};
use super::messages::Messages;
use super::summaries::Summaries;
use crate::event::Event;

/// The sub-fold of the summaries. Fields are `pub(super)` for the snapshot layout and the heap
/// accounting; only [`Compaction::apply`] writes them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Compaction {
    pub(super) ledger: Summaries,
    pub(super) compacted: u64,
    pub(super) flushed: u64,
}

fn ledger(invariant: Invariant) -> impl Fn(LedgerError) -> Broken {
    move |d| (invariant, d.to_string())
}

impl Compaction {
    /// Something prepared waits for a flush: a span of messages, or a condensed summary.
    pub(super) fn flush_pending(&self) -> bool {
        self.compacted > self.flushed || !self.ledger.condensed_pending(self.compacted).is_empty()
    }

    /// `oldest_in_view`: the first summary in the view (only it may retire), asked only of a
    /// retirement (it walks the view).
    pub(super) fn check(
        &self,
        ev: &Event,
        messages: &Messages,
        oldest_in_view: impl Fn() -> Option<u32>,
    ) -> Result<(), Broken> {
        match ev {
            Event::SummaryPrepared(e) if e.is_condensed() => {
                self.ledger.check_condensed(e, self.compacted).map_err(ledger(Invariant::CondensedSpan))
            }
            Event::SummaryPrepared(e) => {
                if e.from != self.compacted {
                    return Err((
                        Invariant::WatermarkBackwards,
                        format!("summary starts at {} but compacted_prefix_messages is {}", e.from, self.compacted),
                    ));
                }
                let count = messages.count();
                if e.to <= e.from || e.to > count {
                    return Err((Invariant::Watermarks, format!("span {}..{} with {count} messages", e.from, e.to)));
                }
                messages.span_pairs_ok(e.from, e.to).map_err(|d| (Invariant::SpanSplitsToolPair, d.to_string()))
            }
            Event::Flushed(e) => {
                // A flush moves the watermark, or (to == from) only brings in condensed summaries.
                let advances = e.to > e.from || (e.to == e.from && !e.condensed.is_empty());
                if e.from != self.flushed || !advances {
                    return Err((
                        Invariant::WatermarkBackwards,
                        format!("flush {} → {} with flushed_prefix_messages {}", e.from, e.to, self.flushed),
                    ));
                }
                if e.to > self.compacted {
                    return Err((
                        Invariant::Watermarks,
                        format!("flush to {} beyond compacted_prefix_messages {}", e.to, self.compacted),
                    ));
                }
                self.ledger.check_flush(e.to, &e.condensed).map_err(ledger(Invariant::CondensedSpan))
            }
            Event::SummaryRetired(e) => {
                self.ledger.check_retire(e, oldest_in_view()).map_err(ledger(Invariant::RetireTarget))
            }
            _ => Ok(()),
        }
    }

    /// Lenient replay: a summary or a flush clamped to what the watermarks allow, or `None`.
    pub(super) fn repair(&self, ev: &Event, invariant: Invariant, count: u64) -> Option<Event> {
        match (ev, invariant) {
            (Event::SummaryPrepared(e), Invariant::WatermarkBackwards | Invariant::Watermarks)
                if e.to > self.compacted && !e.is_condensed() =>
            {
                let mut e = e.clone();
                e.from = self.compacted;
                e.to = e.to.min(count);
                (e.to > e.from).then_some(Event::SummaryPrepared(e))
            }
            (Event::Flushed(e), Invariant::Watermarks | Invariant::WatermarkBackwards | Invariant::CondensedSpan)
                if self.flush_pending() =>
            {
                let mut e = e.clone();
                e.from = self.flushed;
                let least = if self.compacted > self.flushed { self.flushed + 1 } else { self.flushed };
                e.to = e.to.clamp(least, self.compacted);
                let ready = self.ledger.condensed_pending(e.to);
                e.condensed.retain(|i| ready.contains(i));
                Some(Event::Flushed(e))
            }
            _ => None,
        }
    }

    pub(super) fn apply(&mut self, ev: &Event) {
        match ev {
            Event::SummaryPrepared(e) => {
                if !e.is_condensed() {
                    self.compacted = e.to;
                }
                self.ledger.push(e);
            }
            Event::Flushed(e) => {
                self.flushed = e.to;
                self.ledger.flush(e.to, &e.condensed);
            }
            Event::SummaryRetired(e) => self.ledger.retire(e.summary),
            _ => {}
        }
    }
}

impl super::State {
    /// Prepared summaries, in order.
    pub fn summaries(&self) -> &[std::sync::Arc<crate::event::SummaryPrepared>] {
        self.compaction.ledger.prepared()
    }

    /// The summaries with their standing (pending, shown, condensed, retired).
    pub fn summary_ledger(&self) -> &Summaries {
        &self.compaction.ledger
    }

    /// Something prepared waits for a flush: a span of messages, or a condensed summary.
    pub fn flush_pending(&self) -> bool {
        self.compaction.flush_pending()
    }

    /// `compacted_prefix_messages`.
    pub fn compacted(&self) -> u64 {
        self.compaction.compacted
    }

    /// `flushed_prefix_messages`.
    pub fn flushed(&self) -> u64 {
        self.compaction.flushed
    }
}

#[cfg(test)]
mod tests {
    use super::super::given::*;
    use super::super::Invariant;

    #[test]
    fn given_a_prepared_prefix_when_a_flush_goes_past_it_then_the_watermarks_are_broken() {
        let history = conversation_then(vec![summary_prepared(0, 2)]);
        let v = given(history.clone()).when(flushed(0, 4)).then_violates(Invariant::Watermarks);
        assert!(v.detail.contains("beyond compacted_prefix_messages 2"), "{v}");
        let st = given(history).when(flushed(0, 2)).then_ok();
        assert_eq!((st.flushed(), st.compacted()), (2, 2), "flushed ≤ compacted, both moved");
    }

    #[test]
    fn given_a_flush_when_the_next_one_starts_elsewhere_or_stands_still_then_it_moves_backwards() {
        let history = conversation_then(vec![summary_prepared(0, 2), summary_prepared(2, 4), flushed(0, 2)]);
        given(history.clone()).when(flushed(0, 4)).then_violates(Invariant::WatermarkBackwards);
        given(history.clone()).when(flushed(2, 2)).then_violates(Invariant::WatermarkBackwards);
        assert_eq!(given(history).when(flushed(2, 4)).then_ok().flushed(), 4);
    }

    #[test]
    fn given_a_summary_when_the_next_skips_a_gap_or_passes_the_messages_then_it_is_refused() {
        let history = conversation_then(vec![summary_prepared(0, 2)]);
        given(history.clone()).when(summary_prepared(3, 4)).then_violates(Invariant::WatermarkBackwards);
        given(history.clone()).when(summary_prepared(2, 99)).then_violates(Invariant::Watermarks);
        // t1's call (seq 2) and result (seq 3) go together.
        given(history.clone()).when(summary_prepared(2, 3)).then_violates(Invariant::SpanSplitsToolPair);
        assert_eq!(given(history).when(summary_prepared(2, 4)).then_ok().compacted(), 4);
    }

    #[test]
    fn given_a_flush_past_compacted_when_replayed_leniently_then_it_is_clamped_to_compacted() {
        let mut st = fold(&conversation_then(vec![summary_prepared(0, 2)]));
        let found = st.apply_lenient(st.version() + 1, &flushed(0, 5));
        assert_eq!(found.first().map(|v| v.invariant), Some(Invariant::Watermarks));
        assert_eq!((st.flushed(), st.compacted()), (2, 2), "the flush is clamped, the invariant kept");
    }

    #[test]
    fn given_two_shown_summaries_when_the_newer_retires_then_only_the_oldest_may() {
        // Seqs 0 and 1 stay verbatim; summary 0 stands at seq 2, summary 1 at seq 4.
        let history = conversation_then(vec![summary_prepared(0, 4), summary_prepared(4, 5), flushed(0, 5)]);
        given(history.clone()).when(retired(1, 4, 5)).then_violates(Invariant::RetireTarget);
        given(history.clone()).when(retired(0, 0, 3)).then_violates(Invariant::RetireTarget);
        let st = given(history).when(retired(0, 0, 4)).then_ok();
        assert_eq!(st.oldest_summary_in_view(), Some(1));
    }
}
