//! The summaries of a session and where each one stands: waiting for a flush, in the view, or
//! out of it because a condensed summary replaced it or it was retired.
//!
//! Summaries of messages chain from `compacted_prefix_messages`; a condensed summary covers
//! the oldest current summaries (those neither condensed nor retired), so the summaries in the
//! view always cover disjoint spans, sorted by position.
//!
//! A summary that left the view for good (condensed or retired) keeps its span and numbers but
//! not its text: nothing renders it again, and the log keeps it (`SummaryPrepared`). So the
//! ledger grows by a few dozen bytes per summary, not by the summaries' text.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::heap::HeapSize;
use crate::event::{SummaryPrepared, SummaryRetired};

/// Where one summary stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SummaryState {
    /// Prepared; the next flush that reaches its end puts it in the view.
    Pending,
    /// In the view.
    Shown,
    /// Out of the view: the condensed summary with this index stands for it.
    Condensed(u32),
    /// Out of the view, with nothing standing for it (`SummaryRetired`).
    Retired,
}

/// Where one summary stands, and what is about to replace it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    /// Where it stands.
    pub state: SummaryState,
    /// The pending condensed summary that will replace it once flushed, if one was prepared.
    pub condensed_by: Option<u32>,
}

impl Standing {
    /// Neither condensed (or about to be) nor retired: a summary a new condensed summary may
    /// cover.
    pub fn is_current(&self) -> bool {
        matches!(self.state, SummaryState::Pending | SummaryState::Shown) && self.condensed_by.is_none()
    }
}

/// All summaries of a session, in prepare order, with their standing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summaries {
    prepared: Vec<Arc<SummaryPrepared>>,
    standing: Vec<Standing>,
}

impl Summaries {
    /// The prepared summaries, in prepare order (index = `Item::Summary` number). The text of
    /// one that left the view for good is empty (it is in the log).
    pub fn prepared(&self) -> &[Arc<SummaryPrepared>] {
        &self.prepared
    }

    /// The standing of every summary, in prepare order.
    pub fn standing(&self) -> &[Standing] {
        &self.standing
    }

    fn get(&self, i: u32) -> Option<(&SummaryPrepared, Standing)> {
        Some((self.prepared.get(i as usize)?, *self.standing.get(i as usize)?))
    }

    /// Indices of the current summaries (pending or shown, not condensed or retired), by
    /// position.
    pub fn current(&self) -> Vec<u32> {
        self.sorted(|e| e.is_current())
    }

    /// Indices of the summaries in the view, by position.
    pub fn shown(&self) -> Vec<u32> {
        self.sorted(|e| e.state == SummaryState::Shown)
    }

    fn sorted(&self, keep: impl Fn(&Standing) -> bool) -> Vec<u32> {
        let mut out: Vec<u32> =
            (0..self.standing.len() as u32).filter(|&i| self.get(i).is_some_and(|(_, s)| keep(&s))).collect();
        out.sort_by_key(|&i| self.get(i).map_or(0, |(p, _)| p.from));
        out
    }

    /// Condensed summaries prepared and waiting for a flush that reaches `flushed_to`.
    pub fn condensed_pending(&self, flushed_to: u64) -> Vec<u32> {
        (0..self.prepared.len() as u32)
            .filter(|&i| {
                self.get(i)
                    .is_some_and(|(p, s)| s.state == SummaryState::Pending && p.is_condensed() && p.to <= flushed_to)
            })
            .collect()
    }

    /// Why a flush to `flushed` may not bring in the condensed summaries `condensed`.
    pub fn check_flush(&self, flushed: u64, condensed: &[u32]) -> Result<(), LedgerError> {
        let ready = self.condensed_pending(flushed);
        match condensed.iter().find(|i| !ready.contains(i)) {
            Some(&summary) => Err(LedgerError::NotReady { summary, flushed }),
            None => Ok(()),
        }
    }

    /// Why a condensed summary `e` does not fit the summaries it claims to condense.
    pub fn check_condensed(&self, e: &SummaryPrepared, compacted: u64) -> Result<(), LedgerError> {
        let current = self.current();
        let covered: Vec<u32> = current
            .iter()
            .copied()
            .filter(|&i| self.get(i).is_some_and(|(p, _)| p.from >= e.from && p.to <= e.to))
            .collect();
        let oldest = current.first().and_then(|&i| self.get(i)).map(|(p, _)| p.from);
        let last_end = e.merged.last().and_then(|&i| self.get(i)).map(|(p, _)| p.to);
        if covered != e.merged {
            return Err(LedgerError::Lists { listed: e.merged.clone(), from: e.from, to: e.to, covered });
        }
        if oldest != Some(e.from) {
            return Err(LedgerError::Start { from: e.from, oldest });
        }
        if last_end != Some(e.to) {
            return Err(LedgerError::End { to: e.to, last_end });
        }
        if e.to > compacted {
            return Err(LedgerError::Beyond { to: e.to, compacted });
        }
        Ok(())
    }

    /// Adds a prepared summary (already checked).
    pub fn push(&mut self, e: &SummaryPrepared) {
        let index = self.prepared.len() as u32;
        for &i in &e.merged {
            if let Some(s) = self.standing.get_mut(i as usize) {
                s.condensed_by = Some(index);
            }
        }
        self.prepared.push(Arc::new(e.clone()));
        self.standing.push(Standing { state: SummaryState::Pending, condensed_by: None });
    }

    /// A flush to `flushed`: every pending summary of messages that ends there or before, and
    /// the condensed summaries listed, enter the view; the summaries a shown condensed summary
    /// stands for leave it.
    pub fn flush(&mut self, flushed: u64, condensed: &[u32]) {
        for (i, (p, s)) in self.prepared.iter().zip(&mut self.standing).enumerate() {
            let listed = condensed.contains(&(i as u32));
            if s.state == SummaryState::Pending && (listed || (!p.is_condensed() && p.to <= flushed)) {
                s.state = SummaryState::Shown;
            }
        }
        let shown: Vec<bool> = self.standing.iter().map(|s| s.state == SummaryState::Shown).collect();
        let mut gone = Vec::new();
        for (i, s) in self.standing.iter_mut().enumerate() {
            if let Some(by) = s.condensed_by.filter(|&by| shown.get(by as usize) == Some(&true)) {
                if matches!(s.state, SummaryState::Pending | SummaryState::Shown) {
                    s.state = SummaryState::Condensed(by);
                    gone.push(i);
                }
            }
        }
        for i in gone {
            self.forget_text(i);
        }
    }

    /// Drops the text of summary `i`, which left the view for good.
    fn forget_text(&mut self, i: usize) {
        if let Some(p) = self.prepared.get_mut(i) {
            if !p.text.is_empty() {
                let mut kept = SummaryPrepared::clone(p);
                kept.text = String::new();
                *p = Arc::new(kept);
            }
        }
    }

    /// Heap bytes held (see [`crate::state::State::heap_bytes`]).
    pub fn heap_bytes(&self) -> usize {
        self.prepared.heap_bytes() + self.standing.heap_bytes()
    }

    /// Why `e` may not retire its summary: only the oldest summary in the view
    /// (`oldest_in_view`) retires.
    pub fn check_retire(&self, e: &SummaryRetired, oldest_in_view: Option<u32>) -> Result<(), LedgerError> {
        let summary = e.summary;
        let Some((p, s)) = self.get(summary) else {
            return Err(LedgerError::Missing { summary, count: self.prepared.len() });
        };
        if s.state != SummaryState::Shown {
            return Err(LedgerError::NotShown { summary, state: s.state });
        }
        if oldest_in_view != Some(summary) {
            return Err(LedgerError::NotOldest(summary));
        }
        if (p.from, p.to) != (e.from, e.to) {
            return Err(LedgerError::Span { summary, from: p.from, to: p.to, named_from: e.from, named_to: e.to });
        }
        Ok(())
    }

    /// Retires a summary (already checked).
    pub fn retire(&mut self, summary: u32) {
        if let Some(s) = self.standing.get_mut(summary as usize) {
            s.state = SummaryState::Retired;
            self.forget_text(summary as usize);
        }
    }
}

impl HeapSize for Standing {
    fn heap_bytes(&self) -> usize {
        0
    }
}

/// A summary event that does not fit the summaries' ledger.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// A flush lists a summary that is not a condensed one waiting for it.
    #[error("summary {summary} is not a condensed summary waiting for a flush to {flushed}")]
    NotReady {
        /// The summary.
        summary: u32,
        /// Where the flush goes.
        flushed: u64,
    },
    /// A condensed summary lists other summaries than the current ones it covers.
    #[error("it lists summaries {listed:?} but the current summaries within {from}..{to} are {covered:?}")]
    Lists {
        /// What it lists.
        listed: Vec<u32>,
        /// Its span's start.
        from: u64,
        /// Its span's end.
        to: u64,
        /// The current summaries within the span.
        covered: Vec<u32>,
    },
    /// A condensed summary that does not start at the oldest current summary.
    #[error("it starts at seq {from} but the oldest current summary starts at {oldest:?}")]
    Start {
        /// Its start.
        from: u64,
        /// The oldest current summary's start.
        oldest: Option<u64>,
    },
    /// A condensed summary that does not end where the last summary it condenses ends.
    #[error("it ends at seq {to} but the last summary it condenses ends at {last_end:?}")]
    End {
        /// Its end.
        to: u64,
        /// The end of the last summary it lists.
        last_end: Option<u64>,
    },
    /// A condensed summary past the compacted prefix.
    #[error("it ends at seq {to} beyond compacted_prefix_messages {compacted}")]
    Beyond {
        /// Its end.
        to: u64,
        /// `compacted_prefix_messages`.
        compacted: u64,
    },
    /// A retirement of a summary that does not exist.
    #[error("summary {summary} does not exist ({count} summaries)")]
    Missing {
        /// The summary.
        summary: u32,
        /// Summaries prepared.
        count: usize,
    },
    /// A retirement of a summary not in the view.
    #[error("summary {summary} is not in the view ({state:?})")]
    NotShown {
        /// The summary.
        summary: u32,
        /// Where it stands.
        state: SummaryState,
    },
    /// A retirement of another summary than the oldest in the view.
    #[error("summary {0} is not the oldest summary in the view")]
    NotOldest(u32),
    /// A retirement naming another span than its summary's.
    #[error("summary {summary} covers {from}..{to}, not {named_from}..{named_to}")]
    Span {
        /// The summary.
        summary: u32,
        /// Its start.
        from: u64,
        /// Its end.
        to: u64,
        /// The start the retirement names.
        named_from: u64,
        /// The end the retirement names.
        named_to: u64,
    },
}
