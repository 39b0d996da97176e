//! Latches: the guards raised and not yet re-armed (each speaks once per distinct condition),
//! and the summarizer's record of failures (consecutive failures, the job a provider refused,
//! fork refusals by reason). Nothing here is checked: `GuardRaised` and `SummaryFailed` are
//! facts; what re-arms each latch is written once, in [`Latches::apply`].

use std::collections::{BTreeMap, BTreeSet};

use super::heap::btree_bytes;
use crate::config::Config;
use crate::event::{Event, GuardKind, SummaryFailure};

/// The sub-fold of the latches. Fields are `pub(super)` for the snapshot layout and the heap
/// accounting; only [`Latches::apply`] writes them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Latches {
    pub(super) raised: BTreeSet<GuardKind>,
    pub(super) summary_failures: u32,
    pub(super) fork_refusals: BTreeMap<String, u64>,
    /// The last summary job the summarizer refused deterministically (a 4xx): `(from, to,
    /// merged)`. It is not offered again until the job differs; a prepared summary clears it.
    pub(super) summary_rejected: Option<(u64, u64, Vec<u32>)>,
}

impl Latches {
    pub(super) fn apply(&mut self, ev: &Event, config: &Config) {
        match ev {
            Event::GuardRaised(e) => {
                self.raised.insert(e.kind.clone());
            }
            Event::SummaryPrepared(e) => {
                self.summary_failures = 0;
                self.summary_rejected = None;
                if let Some(r) = &e.refusal {
                    *self.fork_refusals.entry(r.clone()).or_default() += 1;
                }
            }
            Event::SummaryFailed(e) => {
                if matches!(e.reason, SummaryFailure::Rejected { .. }) {
                    self.summary_rejected = Some((e.from, e.to, e.merged.clone()));
                }
                self.summary_failures = self.summary_failures.saturating_add(1);
                if let Some(r) = &e.refusal {
                    *self.fork_refusals.entry(r.clone()).or_default() += 1;
                }
            }
            Event::RequestServed(e) => {
                if e.anchored {
                    self.raised.remove(&GuardKind::UsageBelowEstimate);
                }
                let budget = config.budget;
                // The breaker (`Meter`) counts on while passes that needed compaction end over
                // the budget; any other call resets it and re-arms its guard.
                if !(e.needed && e.metered_tokens > budget) {
                    self.raised.remove(&GuardKind::BreakerTripped);
                }
                if e.metered_tokens <= budget {
                    self.raised.remove(&GuardKind::OverBudget);
                }
                // A call that needed no compaction ends the episode: the target guards may
                // speak again the next time the view comes under pressure.
                if !e.needed {
                    self.raised.remove(&GuardKind::TargetUnreachable);
                    self.raised.remove(&GuardKind::TargetClamped);
                }
                // A call whose view is under the soft threshold again (no summary is due) ends
                // the episode: a paused summarizer may be asked again, failures count afresh.
                if e.metered_tokens < config.prepare_tokens() {
                    self.raised.remove(&GuardKind::SummarizerPaused);
                    self.summary_failures = 0;
                }
            }
            _ => {}
        }
    }

    pub(super) fn heap_bytes(&self) -> usize {
        btree_bytes::<GuardKind, ()>(self.raised.len())
    }
}

impl super::State {
    /// Summary attempts that failed in a row (reset by a prepared summary, and by a call whose
    /// view is under the soft threshold).
    pub fn summary_failures(&self) -> u32 {
        self.latches.summary_failures
    }

    /// Was a job with this span (and these merged summaries) refused deterministically by the
    /// summarizer, with no summary prepared since? Such a job is not offered again.
    pub(crate) fn summary_rejected(&self, from: u64, to: u64, merged: &[u32]) -> bool {
        let rejected = self.latches.summary_rejected.as_ref();
        rejected.is_some_and(|(f, t, m)| *f == from && *t == to && m.as_slice() == merged)
    }

    /// Is the engine holding back summary jobs after consecutive failures?
    pub fn summarizer_paused(&self) -> bool {
        self.latches.raised.contains(&GuardKind::SummarizerPaused)
    }

    /// How often each fork refusal or decline occurred (by reason name), over every recorded
    /// summary attempt.
    pub fn fork_refusals(&self) -> &BTreeMap<String, u64> {
        &self.latches.fork_refusals
    }

    /// Guards currently latched (raised and not re-armed).
    pub fn raised(&self) -> &BTreeSet<GuardKind> {
        &self.latches.raised
    }
}

#[cfg(test)]
mod tests {
    use super::super::given::*;
    use crate::event::GuardKind;

    #[test]
    fn given_a_raised_guard_when_calls_come_then_only_its_own_condition_re_arms_it() {
        let history = conversation_then(vec![guard(GuardKind::OverBudget), guard(GuardKind::TargetUnreachable)]);
        // A call that needed compaction and stayed over the budget re-arms neither.
        let st = given(history.clone()).when(served_metered(0, 1, true, 10_000_000)).then_ok();
        assert!(st.raised().contains(&GuardKind::OverBudget) && st.raised().contains(&GuardKind::TargetUnreachable));
        // Within the budget, but still under pressure: the budget guard re-arms, the target's waits.
        let st = given(history.clone()).when(served_metered(0, 1, true, 10)).then_ok();
        assert!(!st.raised().contains(&GuardKind::OverBudget) && st.raised().contains(&GuardKind::TargetUnreachable));
        let st = given(history).when(served_metered(0, 1, false, 10)).then_ok();
        assert!(st.raised().is_empty(), "{:?}", st.raised());
    }

    #[test]
    fn given_failed_summaries_when_one_is_prepared_then_the_failures_and_the_refused_job_are_forgotten() {
        let history = conversation_then(vec![summary_failed(0, 2, true), summary_failed(0, 2, false)]);
        let st = fold(&history);
        assert_eq!(st.summary_failures(), 2);
        assert!(st.summary_rejected(0, 2, &[]) && !st.summary_rejected(0, 4, &[]));
        let st = given(history).when(summary_prepared(0, 2)).then_ok();
        assert_eq!(st.summary_failures(), 0);
        assert!(!st.summary_rejected(0, 2, &[]));
    }
}
