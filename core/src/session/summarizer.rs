//! The summary loop, built in: every job the engine has between two calls, written by a
//! [`Summarizer`] and recorded, up to a limit. What `ctxlog import`, `rerun`, the proxy and the
//! examples each wrote out by hand. No IO here: a model's call is the summarizer's (the host's),
//! and so is measuring its latency.

use crate::error::SessionError;
use crate::event::{Event, SummaryFailure};
use crate::store::Store;
use crate::summary::SummaryJob;
use crate::summary_call::{SummaryCall, SummaryRequest};

use super::{Committed, Prepared, Produced, Session, SummaryFinished, SummaryOutcome};

/// Who writes a session's summaries in [`Session::run_summaries`]: texts handed back with
/// [`Session::prepare`] (the default: the built-in summarizer's, or the host's own), or a
/// model asked for each job, every attempt recorded ([`Session::start_summary`],
/// [`Session::finish_summary`]).
pub trait Summarizer {
    /// The call each job is asked as when a model writes the summaries: jobs are fitted to it
    /// ([`Session::summary_job_for`]) and each attempt is recorded, failed ones included.
    /// `None` (the default): texts, through [`Summarizer::text`].
    fn model_call(&self) -> Option<&SummaryCall> {
        None
    }

    /// The model's answer to an attempt's request (asked only when [`Summarizer::model_call`]
    /// gives a call): send `request.body()` byte for byte.
    fn complete(&mut self, request: &SummaryRequest) -> SummaryOutcome {
        let _ = request;
        SummaryOutcome::failed(SummaryFailure::Provider("this summarizer is not a model".into()))
    }

    /// The host's own text for `job`, or `None` (the default) for the built-in summarizer's
    /// ([`Session::summarize`]). A host's text that `prepare` discards falls back to the
    /// built-in summarizer for the same job (a `rerun` reusing recorded summaries does this).
    fn text<S: Store>(&mut self, session: &Session<S>, job: &SummaryJob) -> Option<(String, Produced)> {
        let _ = (session, job);
        None
    }
}

/// The built-in summarizers: the extractive summary of a span, the condensed summary of the
/// oldest summaries.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extractive;

impl Summarizer for Extractive {}

/// Who wrote a step's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrittenBy {
    /// The host's text ([`Summarizer::text`]).
    Host,
    /// The built-in summarizer.
    BuiltIn,
    /// A model's attempt (its batch holds `SummaryPrepared` or `SummaryFailed`).
    Model,
}

/// One job of a run and the batch it wrote.
#[derive(Debug, Clone)]
pub struct SummaryStep {
    /// The job (for a model: as fitted to its context).
    pub job: SummaryJob,
    /// Who wrote it.
    pub by: WrittenBy,
    /// The batch.
    pub committed: Committed,
}

/// Why a run stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// The engine has no job (or none for this summarizer: paused, or the job it refused).
    NoJob,
    /// `limit` jobs ran; there may be more.
    Limit,
    /// The built-in summary was discarded, for this reason (asking again would only repeat it;
    /// the next call asks anew). Nothing was written for it.
    Discarded(String),
    /// A model's attempt failed (recorded as `SummaryFailed`, the last step).
    Failed(SummaryFailure),
}

/// What [`Session::run_summaries`] wrote, job by job, and why it stopped.
#[derive(Debug, Clone)]
pub struct SummaryRun {
    /// One per job, in order.
    pub steps: Vec<SummaryStep>,
    /// Why the run stopped.
    pub end: RunEnd,
}

impl SummaryRun {
    /// Summaries written (`SummaryPrepared`).
    pub fn prepared(&self) -> usize {
        let prepared = |s: &&SummaryStep| s.committed.events.iter().any(|e| matches!(e, Event::SummaryPrepared(_)));
        self.steps.iter().filter(prepared).count()
    }
}

impl<S: Store> Session<S> {
    /// Runs the engine's summary jobs, at most `limit` of them, until none is left, a built-in
    /// summary is discarded, or a model's attempt fails. Every job is recorded as it would be
    /// by hand ([`Session::prepare`], or [`Session::start_summary`] then
    /// [`Session::finish_summary`]), so the log is the same as a host's own loop writes.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// use ctxlog::session::{Extractive, RunEnd};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// let config = Config { budget: 4_000, ..Config::default() };
    /// let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, config, Timestamp::from_millis(0))?;
    /// for i in 0..12 {
    ///     session.append(vec![parse_message(&format!(r#"{{"role":"user","content":"step {i}: {}"}}"#, "details ".repeat(150)))?])?;
    ///     session.append(vec![parse_message(r#"{"role":"assistant","content":"done"}"#)?])?;
    /// }
    /// let run = session.run_summaries(&mut Extractive, usize::MAX)?;
    /// assert!(run.prepared() > 0 && run.end != RunEnd::Limit);
    /// assert!(session.summary_job().is_none() || matches!(run.end, RunEnd::Discarded(_)));
    /// # Ok(()) }
    /// ```
    pub fn run_summaries(
        &mut self,
        summarizer: &mut impl Summarizer,
        limit: usize,
    ) -> Result<SummaryRun, SessionError> {
        let call = summarizer.model_call().cloned();
        let mut steps = Vec::new();
        for _ in 0..limit {
            let (step, end) = match &call {
                Some(call) => self.model_step(summarizer, call)?,
                None => self.text_step(summarizer)?,
            };
            steps.extend(step);
            if let Some(end) = end {
                return Ok(SummaryRun { steps, end });
            }
        }
        Ok(SummaryRun { steps, end: RunEnd::Limit })
    }

    /// One job by text: the host's, else (or when it is discarded) the built-in one.
    fn text_step(
        &mut self,
        summarizer: &mut impl Summarizer,
    ) -> Result<(Option<SummaryStep>, Option<RunEnd>), SessionError> {
        let Some(job) = self.summary_job() else { return Ok((None, Some(RunEnd::NoJob))) };
        if let Some((text, produced)) = summarizer.text(self, &job) {
            if let Prepared::Written(committed) = self.prepare(&job, text, produced)? {
                return Ok((Some(SummaryStep { job, by: WrittenBy::Host, committed }), None));
            }
        }
        let text = self.summarize(&job)?;
        Ok(match self.prepare(&job, text, Produced::extractive())? {
            Prepared::Written(committed) => (Some(SummaryStep { job, by: WrittenBy::BuiltIn, committed }), None),
            Prepared::Discarded(why) => (None, Some(RunEnd::Discarded(why))),
        })
    }

    /// One model attempt, recorded whatever its outcome.
    fn model_step(
        &mut self,
        summarizer: &mut impl Summarizer,
        call: &SummaryCall,
    ) -> Result<(Option<SummaryStep>, Option<RunEnd>), SessionError> {
        let Some(job) = self.summary_job_for(call)? else { return Ok((None, Some(RunEnd::NoJob))) };
        let attempt = self.start_summary(&job, call)?;
        let job = attempt.job.clone();
        let outcome = summarizer.complete(&attempt.request);
        Ok(match self.finish_summary(attempt, outcome)? {
            SummaryFinished::Prepared(committed) => (Some(SummaryStep { job, by: WrittenBy::Model, committed }), None),
            SummaryFinished::Failed { failure, committed } => {
                (Some(SummaryStep { job, by: WrittenBy::Model, committed }), Some(RunEnd::Failed(failure)))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

    use super::*;
    use crate::config::Config;
    use crate::event::SummaryMode;
    use crate::store::{MemoryStore, StreamId};
    use crate::time::Timestamp;
    use crate::wire::{parse_message, WireFormat};

    /// A session over its own store, `turns` long turns in: well over its soft threshold.
    fn long_session(id: StreamId, turns: usize) -> Session<MemoryStore> {
        let config = Config { budget: 4_000, ..Config::default() };
        let mut s =
            Session::create(MemoryStore::new(), id, WireFormat::Anthropic, config, Timestamp::from_millis(0)).unwrap();
        for i in 0..turns {
            let user = format!(r#"{{"role":"user","content":"step {i}: {}"}}"#, "details ".repeat(150));
            s.append(vec![parse_message(&user).unwrap()]).unwrap();
            s.append(vec![parse_message(r#"{"role":"assistant","content":"done"}"#).unwrap()]).unwrap();
        }
        s
    }

    /// The loop a host writes by hand: every job it was offered, and why it stopped.
    fn by_hand(s: &mut Session<MemoryStore>) -> (Vec<SummaryJob>, RunEnd) {
        let mut jobs = Vec::new();
        while let Some(job) = s.summary_job() {
            let text = s.summarize(&job).unwrap();
            match s.prepare(&job, text, Produced::extractive()).unwrap() {
                Prepared::Written(_) => jobs.push(job),
                Prepared::Discarded(why) => return (jobs, RunEnd::Discarded(why)),
            }
        }
        (jobs, RunEnd::NoJob)
    }

    fn log(s: &Session<MemoryStore>) -> Vec<Vec<u8>> {
        s.store().read(s.id(), 1, usize::MAX).unwrap().into_iter().map(|r| r.record.as_bytes().to_vec()).collect()
    }

    /// Built-in texts, noting every job it is asked for.
    #[derive(Default)]
    struct Noting(Vec<SummaryJob>);

    impl Summarizer for Noting {
        fn text<S: Store>(&mut self, _: &Session<S>, job: &SummaryJob) -> Option<(String, Produced)> {
            self.0.push(job.clone());
            None
        }
    }

    #[test]
    fn the_built_in_loop_runs_the_jobs_a_host_would_in_order_and_stops_at_its_limit() {
        // Given two copies of a session with several summary jobs waiting, one summarized by
        // hand,
        let id = StreamId::random();
        let (mut hand, mut built_in) = (long_session(id, 14), long_session(id, 14));
        let (jobs, end) = by_hand(&mut hand);
        assert!(jobs.len() >= 3, "the scenario needs several jobs: {jobs:?}");
        // when the other runs its summaries two at a time,
        let mut noting = Noting::default();
        let first = built_in.run_summaries(&mut noting, 2).unwrap();
        // then the first run wrote exactly the first two jobs and stopped at its limit, with the
        // third job still offered (none skipped, none run past the limit),
        let written: Vec<&SummaryJob> = first.steps.iter().map(|s| &s.job).collect();
        assert_eq!(written, jobs.iter().take(2).collect::<Vec<_>>());
        assert_eq!((first.end.clone(), first.prepared()), (RunEnd::Limit, 2));
        assert!(first.steps.iter().all(|s| s.by == WrittenBy::BuiltIn));
        assert_eq!(built_in.summary_job().as_ref(), jobs.get(2));
        // and a run without a limit writes the rest and ends as the host's loop did, leaving the
        // same log byte for byte.
        let rest = built_in.run_summaries(&mut noting, usize::MAX).unwrap();
        let written: Vec<&SummaryJob> = rest.steps.iter().map(|s| &s.job).collect();
        assert_eq!(written, jobs.iter().skip(2).collect::<Vec<_>>());
        assert_eq!(rest.end, end);
        assert_eq!(noting.0.len(), jobs.len() + usize::from(matches!(end, RunEnd::Discarded(_))));
        assert_eq!(log(&built_in), log(&hand));
        // A limit of zero runs nothing.
        assert!(built_in.run_summaries(&mut Extractive, 0).unwrap().steps.is_empty());
    }

    /// A model that answers its first `good` attempts and fails the next.
    struct Model {
        call: SummaryCall,
        good: usize,
        asked: usize,
    }

    impl Summarizer for Model {
        fn model_call(&self) -> Option<&SummaryCall> {
            Some(&self.call)
        }

        fn complete(&mut self, request: &SummaryRequest) -> SummaryOutcome {
            assert!(!request.body().is_empty());
            self.asked += 1;
            if self.asked <= self.good {
                SummaryOutcome::text(format!("Summary {}: the steps were done.", self.asked)).latency_ms(5)
            } else {
                SummaryOutcome::failed(SummaryFailure::Timeout)
            }
        }
    }

    #[test]
    fn a_model_is_asked_at_most_limit_times_and_its_failure_ends_the_run_recorded() {
        // Given a session with a job waiting and a model that answers once, then times out,
        let mut s = long_session(StreamId::random(), 14);
        let mut model = Model { call: SummaryCall::new(SummaryMode::Standalone), good: 1, asked: 0 };
        // when it runs no job, nothing is asked;
        assert!(s.run_summaries(&mut model, 0).unwrap().steps.is_empty());
        assert_eq!(model.asked, 0);
        // when it runs one, one attempt is made and recorded, and the run stops at its limit;
        let one = s.run_summaries(&mut model, 1).unwrap();
        assert_eq!((model.asked, one.prepared(), one.end), (1, 1, RunEnd::Limit));
        assert_eq!(one.steps[0].by, WrittenBy::Model);
        // once the session has grown, a run without a limit asks again, and the failure is
        // recorded and ends the run while the job is still offered (the next call asks anew).
        for i in 0..14 {
            let user = format!(r#"{{"role":"user","content":"more {i}: {}"}}"#, "details ".repeat(150));
            s.append(vec![parse_message(&user).unwrap()]).unwrap();
        }
        let rest = s.run_summaries(&mut model, usize::MAX).unwrap();
        assert_eq!((model.asked, rest.steps.len(), rest.prepared()), (2, 1, 0));
        assert_eq!(rest.end, RunEnd::Failed(SummaryFailure::Timeout));
        let last = rest.steps[0].committed.events.last().unwrap();
        assert!(matches!(last, Event::SummaryFailed(f) if f.reason == SummaryFailure::Timeout), "{last:?}");
        assert!(s.summary_job_for(&model.call).unwrap().is_some());
    }
}
