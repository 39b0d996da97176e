//! Summaries between calls: the job the engine asks for, the built-in summarizer, a text handed
//! back (`prepare`), and a model's attempt (`start_summary` → the host sends it →
//! `finish_summary`), recorded whatever its outcome.

use std::ops::Range;
use std::sync::Arc;

use crate::error::SessionError;
use crate::event::{Event, GuardKind, SummaryFailed, SummaryFailure, SummaryMode, SummaryPrepared};
use crate::log::{load_messages, StoreBlobs};
use crate::message::Message;
use crate::policy::guards;
use crate::store::{Store, StreamId};
use crate::summary::{self, SummaryJob};
use crate::summary_call::{self, SummaryCall, SummaryRequest};
use crate::tokens::text_tokens;
use crate::usage::Usage;

use super::{Committed, Session};

/// How a summary was produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Produced {
    /// Mode the engine asked for.
    pub requested: SummaryMode,
    /// Mode used.
    pub used: SummaryMode,
    /// Why the requested mode was refused.
    pub refusal: Option<String>,
}

impl Produced {
    /// Produced by the built-in extractive summarizer.
    pub fn extractive() -> Produced {
        Produced { requested: SummaryMode::Extractive, used: SummaryMode::Extractive, refusal: None }
    }
}

/// A summary attempt in flight ([`Session::start_summary`]): the request to send, and what
/// [`Session::finish_summary`] needs to record its outcome.
#[derive(Debug, Clone)]
#[must_use = "an attempt is finished with Session::finish_summary or dropped with Session::cancel_summary"]
pub struct SummaryAttempt {
    stream: StreamId,
    id: u64,
    /// The job.
    pub job: SummaryJob,
    /// The request to send.
    pub request: SummaryRequest,
    max_failures: u32,
}

/// What the summarizer returned for an attempt, as the host saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryOutcome {
    /// The summary text, or why there is none.
    pub result: Result<String, SummaryFailure>,
    /// The summarizer's reported usage (input, cache read, cache write, output).
    pub usage: Option<Usage>,
    /// How long the call took.
    pub latency_ms: Option<u64>,
}

impl SummaryOutcome {
    /// The summarizer answered with `text`.
    pub fn text(text: impl Into<String>) -> Self {
        SummaryOutcome { result: Ok(text.into()), usage: None, latency_ms: None }
    }

    /// The summarizer failed.
    pub fn failed(failure: SummaryFailure) -> Self {
        SummaryOutcome { result: Err(failure), usage: None, latency_ms: None }
    }

    /// With the summarizer's usage.
    pub fn usage(mut self, usage: Option<Usage>) -> Self {
        self.usage = usage;
        self
    }

    /// With the measured latency.
    pub fn latency_ms(mut self, ms: u64) -> Self {
        self.latency_ms = Some(ms);
        self
    }
}

/// What [`Session::finish_summary`] recorded.
#[derive(Debug, Clone)]
pub enum SummaryFinished {
    /// `SummaryPrepared` was written.
    Prepared(Committed),
    /// `SummaryFailed` was written, for this reason; nothing else changed.
    Failed {
        /// Why.
        failure: SummaryFailure,
        /// The batch (guards and `SummaryFailed`).
        committed: Committed,
    },
}

/// Outcome of [`Session::prepare`].
#[derive(Debug, Clone)]
pub enum Prepared {
    /// `SummaryPrepared` was written.
    Written(Committed),
    /// Nothing was written, for this reason.
    Discarded(String),
}

impl<S: Store> Session<S> {
    /// The next summary the host should write (an effect): a span of messages when the meter is
    /// over the soft threshold, or the oldest summaries to condense into one when summaries
    /// take more than their share. Pure: nothing is written until [`Session::prepare`]. A host
    /// may run jobs until this returns `None` (or a job is discarded); one that cannot condense
    /// may skip those jobs, and the engine then retires the oldest summaries instead.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Prepared, Produced, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// let config = Config { budget: 4_000, ..Config::default() };
    /// let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, config, Timestamp::from_millis(0))?;
    /// for i in 0..12 {
    ///     session.append(vec![parse_message(&format!(r#"{{"role":"user","content":"step {i}: {}"}}"#, "details ".repeat(150)))?])?;
    ///     session.append(vec![parse_message(r#"{"role":"assistant","content":"done"}"#)?])?;
    /// }
    /// let job = session.summary_job().expect("over the soft threshold");
    /// let text = session.summarize(&job)?; // the built-in summarizer; a model call would go here
    /// assert!(matches!(session.prepare(&job, text, Produced::extractive())?, Prepared::Written(_)));
    /// assert_eq!(session.state().compacted(), job.to); // prepared: the next call's gate may flush it
    /// # Ok(()) }
    /// ```
    ///
    /// No job is offered while a summary attempt is in flight ([`Session::start_summary`]), nor
    /// while the summarizer is paused after consecutive failures (until a call's view is under the soft threshold again).
    pub fn summary_job(&self) -> Option<SummaryJob> {
        if self.in_flight.is_some() || self.state.summarizer_paused() {
            return None;
        }
        summary::next_job(&self.state).filter(|j| !self.state.summary_rejected(j.from, j.to, &j.condense))
    }

    /// [`Session::summary_job`] as `call`'s summarizer would be asked for it: a standalone span
    /// cut to fit `call.context` ([`crate::summary_fit`]); `None` also when that job is the one
    /// the summarizer last refused deterministically (a 4xx, recorded as `rejected`): it waits
    /// until the job changes (more messages, a different span or limit, another context).
    pub fn summary_job_for(&self, call: &SummaryCall) -> Result<Option<SummaryJob>, SessionError> {
        if self.in_flight.is_some() || self.state.summarizer_paused() {
            return Ok(None);
        }
        // The latch is checked on the job as fitted: a refused span may fit another context.
        let Some(job) = summary::next_job(&self.state) else { return Ok(None) };
        let job = self.summary_request(&job, call)?.job;
        Ok((!self.state.summary_rejected(job.from, job.to, &job.condense)).then_some(job))
    }

    /// The exact request that asks a model for `job`'s summary, in the session's wire format:
    /// standalone, fork or auto as `call` says, falling back to standalone down the refusal
    /// ladder (see [`crate::summary_call`]). Pure: nothing is written; the refusal is recorded
    /// with the attempt's outcome ([`Session::start_summary`], [`Session::finish_summary`]).
    pub fn summary_request(&self, job: &SummaryJob, call: &SummaryCall) -> Result<SummaryRequest, SessionError> {
        let span = if job.is_condense() { Vec::new() } else { self.messages(job.from..job.to)? };
        Ok(summary_call::build(&self.state, self.format(), job, &span, call, &StoreBlobs(&self.store)))
    }

    /// Starts a summary attempt: builds its request ([`Session::summary_request`]) and marks it
    /// in flight (at most one per session: [`SessionError::SummaryInFlight`]). Send
    /// `attempt.request.body()`, then hand the outcome to [`Session::finish_summary`].
    pub fn start_summary(&mut self, job: &SummaryJob, call: &SummaryCall) -> Result<SummaryAttempt, SessionError> {
        if self.in_flight.is_some() {
            return Err(SessionError::SummaryInFlight(self.stream));
        }
        let request = self.summary_request(job, call)?;
        self.attempts += 1;
        self.in_flight = Some(self.attempts);
        tracing::info!(
            from = job.from,
            to = job.to,
            requested = request.mode_requested.as_str(),
            used = request.mode_used.as_str(),
            refusal = request.refusal.as_ref().map(|r| r.name()),
            "summary attempt started"
        );
        Ok(SummaryAttempt {
            stream: self.stream,
            id: self.attempts,
            job: request.job.clone(),
            request,
            max_failures: call.max_failures,
        })
    }

    /// Drops an attempt without recording anything (the host gave up before sending it).
    pub fn cancel_summary(&mut self, attempt: SummaryAttempt) {
        if attempt.stream == self.stream && self.in_flight == Some(attempt.id) {
            self.in_flight = None;
        }
    }

    /// Records an attempt's outcome as one batch: the fork refusal's guard (once per reason
    /// per session), then `SummaryPrepared`, or `SummaryFailed` when the summarizer failed,
    /// returned nothing, returned after its span was edited, flushed or summarized (stale), or
    /// wrote a summary not smaller than what it replaces. A failure changes nothing else; the
    /// one that makes `max_failures` in a row also raises `summarizer_paused`, and no job is
    /// offered until a call's view is under the soft threshold again.
    pub fn finish_summary(
        &mut self,
        attempt: SummaryAttempt,
        outcome: SummaryOutcome,
    ) -> Result<SummaryFinished, SessionError> {
        if attempt.stream != self.stream || self.in_flight != Some(attempt.id) {
            return Err(SessionError::NotInFlight(self.stream));
        }
        self.in_flight = None;
        let _span =
            tracing::info_span!("ctxlog.finish_summary", session = %self.stream, version = self.state.version())
                .entered();
        let SummaryAttempt { job, request, max_failures, .. } = attempt;
        let call = self.state.calls();
        let mut events = Vec::new();
        if let Some(r) = &request.refusal {
            let kind = GuardKind::ForkRefused { reason: r.name().to_owned() };
            let knob = if r.is_decline() { "fork_min_span_ratio (--summary-call)" } else { "--summary-call" };
            events.extend(guards::raise(&self.state, call, kind, r.describe(), knob));
        }
        let refusal = request.refusal.as_ref().map(|r| r.name().to_owned());
        let SummaryOutcome { result, usage, latency_ms } = outcome;
        let verdict = result.and_then(|text| self.judge(&job, text, &request));
        let ev = match verdict {
            Ok((text, tokens, replaced_tokens)) => Event::SummaryPrepared(SummaryPrepared {
                from: job.from,
                to: job.to,
                text,
                tokens,
                replaced_tokens,
                mode_requested: request.mode_requested,
                mode_used: request.mode_used,
                refusal,
                merged: job.condense.clone(),
                prefix_call: request.prefix_call,
                usage,
                latency_ms,
            }),
            Err(reason) => {
                if self.state.summary_failures().saturating_add(1) >= max_failures {
                    let detail = format!(
                        "{} summary attempts failed in a row (the last: {}); no summary job is offered until a \
                         call's view is under the soft threshold again",
                        self.state.summary_failures().saturating_add(1),
                        reason.describe()
                    );
                    events.extend(guards::raise(
                        &self.state,
                        call,
                        GuardKind::SummarizerPaused,
                        detail,
                        "--summarizer",
                    ));
                }
                Event::SummaryFailed(SummaryFailed {
                    from: job.from,
                    to: job.to,
                    merged: job.condense.clone(),
                    mode_requested: request.mode_requested,
                    mode_used: request.mode_used,
                    refusal,
                    prefix_call: request.prefix_call,
                    reason,
                    usage,
                    latency_ms,
                })
            }
        };
        let failure = match &ev {
            Event::SummaryFailed(f) => Some(f.reason.clone()),
            _ => None,
        };
        events.push(ev);
        let next = self.replayed(&events, self.state.version() + 1)?;
        let version = self.persist(events.clone(), next)?;
        let committed = Committed { version, events };
        Ok(match failure {
            None => {
                tracing::info!(from = job.from, to = job.to, version, "summary prepared");
                SummaryFinished::Prepared(committed)
            }
            Some(failure) => {
                tracing::info!(from = job.from, to = job.to, reason = failure.as_str(), version, "summary failed");
                SummaryFinished::Failed { failure, committed }
            }
        })
    }

    /// The text, its tokens and the tokens it replaces, or why it cannot be used.
    fn judge(
        &self,
        job: &SummaryJob,
        text: String,
        request: &SummaryRequest,
    ) -> Result<(String, u32, u64), SummaryFailure> {
        if text.trim().is_empty() {
            return Err(SummaryFailure::Empty);
        }
        if let Some(per_mille) = crate::summary_echo::is_echo(&text, &request.instructions) {
            return Err(SummaryFailure::Echo { per_mille });
        }
        summary::still_valid(&self.state, job).map_err(|why| SummaryFailure::Stale(why.to_string()))?;
        let replaced_tokens = self.replaced_tokens(job);
        let tokens = text_tokens(&text);
        if u64::from(tokens) >= replaced_tokens {
            return Err(SummaryFailure::NotSmaller { tokens, replaced_tokens });
        }
        if let Some(max_tokens) = job.max_tokens.filter(|&max| tokens > max) {
            return Err(SummaryFailure::OverLimit { tokens, max_tokens });
        }
        Ok((text, tokens, replaced_tokens))
    }

    fn replaced_tokens(&self, job: &SummaryJob) -> u64 {
        if job.is_condense() {
            job.span_tokens
        } else {
            (job.from..job.to).filter_map(|s| self.state.entry(s)).map(|e| u64::from(e.tokens)).sum()
        }
    }

    /// The messages `range` as appended, in order: from the state for those in the view
    /// unedited, read back from the log for the others. What a host's summarizer reads.
    pub fn messages(&self, range: Range<u64>) -> Result<Vec<Arc<Message>>, SessionError> {
        load_messages(&self.store, self.stream, &self.state, range)
    }

    /// Runs the built-in summarizer for `job`: the condensed summary of summaries, or the
    /// extractive summary of a span of messages (read back from the log where needed). What a
    /// host without a model for summaries hands to [`Session::prepare`].
    pub fn summarize(&self, job: &SummaryJob) -> Result<String, SessionError> {
        if job.is_condense() {
            return Ok(summary::condense(&self.state, job));
        }
        let span = self.messages(job.from..job.to)?;
        Ok(summary::extractive(&self.state, job, &span))
    }

    /// Hands a summary back. It is written as `SummaryPrepared` unless the job went stale (the
    /// span was edited meanwhile, or the summaries to condense changed), the summary is not
    /// smaller than what it replaces, or a condensed summary is over the job's `max_tokens`; a
    /// discarded summary writes nothing and says why.
    pub fn prepare(&mut self, job: &SummaryJob, text: String, produced: Produced) -> Result<Prepared, SessionError> {
        let _span =
            tracing::info_span!("ctxlog.prepare", session = %self.stream, version = self.state.version()).entered();
        let mode = produced.used;
        let prepared = self.try_prepare(job, text, produced)?;
        match &prepared {
            Prepared::Written(c) => tracing::info!(
                from = job.from,
                to = job.to,
                condense = job.is_condense(),
                mode = ?mode,
                version = c.version,
                "summary prepared"
            ),
            Prepared::Discarded(reason) => {
                tracing::info!(from = job.from, to = job.to, condense = job.is_condense(), %reason, "summary discarded")
            }
        }
        Ok(prepared)
    }

    fn try_prepare(&mut self, job: &SummaryJob, text: String, produced: Produced) -> Result<Prepared, SessionError> {
        if let Err(why) = summary::still_valid(&self.state, job) {
            return Ok(Prepared::Discarded(why.to_string()));
        }
        let replaced_tokens = self.replaced_tokens(job);
        let tokens = text_tokens(&text);
        if u64::from(tokens) >= replaced_tokens {
            return Ok(Prepared::Discarded(format!(
                "the summary ({tokens} tokens) is not smaller than the span it replaces ({replaced_tokens} tokens)"
            )));
        }
        if let Some(max) = job.max_tokens.filter(|&max| tokens > max) {
            return Ok(Prepared::Discarded(format!(
                "the condensed summary ({tokens} tokens) is over its limit of {max} tokens"
            )));
        }
        let ev = Event::SummaryPrepared(SummaryPrepared {
            from: job.from,
            to: job.to,
            text,
            tokens,
            replaced_tokens,
            mode_requested: produced.requested,
            mode_used: produced.used,
            refusal: produced.refusal,
            merged: job.condense.clone(),
            prefix_call: None,
            usage: None,
            latency_ms: None,
        });
        self.state.check_event(self.state.version() + 1, &ev).map_err(|v| self.refused(v))?;
        let version = self.persist_then_apply(vec![ev.clone()])?;
        Ok(Prepared::Written(Committed { version, events: vec![ev] }))
    }
}
