//! `ctxlog rerun`: the recorded session's inputs — its messages, its calls' times and reported
//! usage, its summaries and restores — run again through the engine with other knobs, in
//! memory, and compared with the recorded timeline ([`crate::diff`]).
//!
//! The rerun acts as the host `ctxlog import` is: after each call it runs every summary job the
//! engine asks for. A recorded summary is reused only where the engine asks for exactly what it
//! covers (the same span of messages, or the condensing of summaries with the same texts);
//! anything else is re-made by the built-in summarizer, and the diff says which. Reported usage
//! describes the recorded view: it is passed on as recorded where the rerun's view is the same,
//! and scaled to the rerun's view otherwise. A restore is made again after the same call, and
//! skipped (and listed) where the rerun left nothing to restore.

use std::sync::Arc;

use ctxlog::config::Config;
use ctxlog::event::{Deferral, Event, SummaryPrepared};
use ctxlog::internal::wire::WireFormat;
use ctxlog::message::Message;
use ctxlog::replay::{for_each_event, Mode};
use ctxlog::session::{Produced, WrittenBy};
use ctxlog::summary::SummaryJob;
use ctxlog::time::Millis;
use ctxlog::{MemoryStore, Session, SessionError, Store, StreamId, Summarizer, Timestamp, Usage};

use crate::analysis::{analyze, Analysis, Keep, Until};
use crate::args::{RerunArgs, SessionArgs, StoreArgs, SummariesArg};
use crate::diff::{compare, print_diff, Side};
use crate::error::CliError;
use crate::output::Out;
pub use crate::rerun_notes::Notes;

/// The recorded inputs of a session.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The session.
    pub session: StreamId,
    /// Its wire format.
    pub format: WireFormat,
    /// The knobs it was recorded with.
    pub config: Config,
    /// When it started.
    pub started_at: Millis,
    /// What happened, in order.
    pub steps: Vec<Step>,
    /// Every recorded summary, in prepare order (the indices `merged` refers to).
    pub summaries: Vec<Arc<SummaryPrepared>>,
}

/// One recorded input.
#[derive(Debug, Clone)]
pub enum Step {
    /// Messages appended.
    Append(Vec<Message>),
    /// A call.
    Call {
        /// When it was planned: the dispatch time, or earlier when the log says how old the
        /// cache was at the plan (a flush's or a deferral's `cache_age_ms`).
        plan_at: Millis,
        /// When its dispatch completed.
        at: Millis,
        /// What the provider reported, if anything (a bare prompt total for logs older than
        /// record kind 17).
        reported: Option<Usage>,
        /// The recorded view's digest and tokens (what `reported` describes).
        digest: String,
        /// The recorded view's tokens.
        view_tokens: u64,
    },
    /// An explicit restore.
    Restore {
        /// The message.
        seq: u64,
        /// Who.
        by: String,
        /// Why.
        why: String,
    },
    /// An explicit pin or unpin (`Pinned`).
    Pin {
        /// The message.
        seq: u64,
        /// Pinned or unpinned.
        pin: bool,
        /// Who.
        by: String,
        /// Why.
        why: String,
    },
}

/// Reads the inputs of `session` from its log.
pub fn inputs(store: &dyn Store, session: StreamId) -> Result<Inputs, CliError> {
    if store.head(session)?.is_none() {
        return Err(SessionError::NotFound(session).into());
    }
    let mut started = None;
    let mut steps = Vec::new();
    let mut summaries = Vec::new();
    let mut batch: Vec<Message> = Vec::new();
    let mut cache_age = None;
    let mut last_at: Option<Millis> = None;
    for_each_event(store, session, 1, None, |_, ev| {
        if !matches!(ev, Event::MessageAppended(_)) && !batch.is_empty() {
            steps.push(Step::Append(std::mem::take(&mut batch)));
        }
        match ev {
            Event::SessionStarted(s) => started = Some((s.format, s.config, s.at)),
            Event::MessageAppended(m) => batch.push(m.message),
            Event::SummaryPrepared(s) => summaries.push(Arc::new(s)),
            Event::Flushed(f) => cache_age = cache_age.or(f.cache_age_ms),
            Event::Restored(r) => steps.push(Step::Restore { seq: r.seq, by: r.by, why: r.why }),
            Event::Pinned(p) => steps.push(Step::Pin { seq: p.seq, pin: p.pin, by: p.by, why: p.why }),
            Event::RequestServed(s) => {
                let deferred_age = match &s.deferred {
                    Some(Deferral::WarmCache { cache_age_ms, .. } | Deferral::TooLittleFreed { cache_age_ms, .. }) => {
                        Some(*cache_age_ms)
                    }
                    None => None,
                };
                let planned = last_at.zip(cache_age.take().or(deferred_age)).map(|(last, age)| last + age);
                steps.push(Step::Call {
                    plan_at: planned.filter(|p| *p <= s.at).unwrap_or(s.at),
                    at: s.at,
                    reported: s.usage.or(s.reported_tokens.map(Usage::prompt)),
                    digest: s.digest,
                    view_tokens: s.view_tokens,
                });
                last_at = Some(s.at);
            }
            _ => {}
        }
        Ok(())
    })?;
    if !batch.is_empty() {
        steps.push(Step::Append(batch));
    }
    let Some((format, config, started_at)) = started else {
        return Err(CliError::InvalidLog(format!("session {session}: the log does not start with SessionStarted")));
    };
    Ok(Inputs { session, format, config, started_at, steps, summaries })
}

/// Runs `inputs` through the engine with `config` in a fresh in-memory store.
pub fn run(inputs: &Inputs, config: Config, summaries: SummariesArg) -> Result<(MemoryStore, Notes), CliError> {
    let store = MemoryStore::new();
    let mut notes = Notes::default();
    let mut session =
        Session::create(&store, inputs.session, inputs.format, config, Timestamp::from_millis(inputs.started_at))?;
    for step in &inputs.steps {
        match step {
            Step::Append(messages) => {
                session.append(messages.clone())?;
            }
            Step::Call { plan_at, at, reported, digest, view_tokens } => {
                let plan = session.plan(Timestamp::from_millis(*plan_at))?;
                let reported = match reported {
                    Some(r) if plan.digest != *digest && *view_tokens > 0 => {
                        notes.usage_scaled += 1;
                        let total = r.prompt_total() as f64 * plan.view_tokens as f64 / *view_tokens as f64;
                        Some(Usage::prompt(total.round() as u64))
                    }
                    r => *r,
                };
                session.commit(plan, Timestamp::from_millis(*at), reported)?;
                run_jobs(&mut session, &inputs.summaries, summaries, &mut notes)?;
            }
            Step::Restore { seq, by, why } => match session.restore(*seq, by, why) {
                Ok(_) => {}
                Err(SessionError::Refused { .. }) => notes.restores_skipped.push(*seq),
                Err(e) => return Err(e.into()),
            },
            // A pin is taken over like a restore: skipped (and noted) where the rerun's view
            // does not hold the message as appended.
            Step::Pin { seq, pin, by, why } => match session.pin(*seq, *pin, by, why) {
                Ok(_) => {}
                Err(SessionError::Refused { .. }) => notes.restores_skipped.push(*seq),
                Err(e) => return Err(e.into()),
            },
        }
    }
    drop(session);
    Ok((store, notes))
}

/// Every job the engine asks for, as `ctxlog import` runs them: a recorded summary where one
/// fits, else (or when it is discarded) the built-in one.
fn run_jobs<S: Store>(
    session: &mut Session<S>,
    recorded: &[Arc<SummaryPrepared>],
    mode: SummariesArg,
    notes: &mut Notes,
) -> Result<(), CliError> {
    let run = session.run_summaries(&mut Recorded { recorded, mode }, usize::MAX)?;
    for step in run.steps {
        match step.by {
            WrittenBy::Host => notes.summaries_reused += 1,
            _ => notes.summaries_remade.push((step.job.from, step.job.to, step.job.is_condense())),
        }
    }
    Ok(())
}

/// The recorded summaries as the rerun's summarizer.
struct Recorded<'a> {
    recorded: &'a [Arc<SummaryPrepared>],
    mode: SummariesArg,
}

impl Summarizer for Recorded<'_> {
    fn text<S: Store>(&mut self, session: &Session<S>, job: &SummaryJob) -> Option<(String, Produced)> {
        let r = match self.mode {
            SummariesArg::Recorded => fitting(session.state(), job, self.recorded)?,
            SummariesArg::Remake => return None,
        };
        Some((r.text.clone(), Produced { requested: r.mode_requested, used: r.mode_used, refusal: r.refusal.clone() }))
    }
}

fn text_of(list: &[Arc<SummaryPrepared>], i: u32) -> Option<&str> {
    list.get(i as usize).map(|s| s.text.as_str())
}

/// The recorded summary that answers `job`, if one does: the same span of messages, or a
/// condensing of summaries whose texts are the recorded ones it condensed.
fn fitting<'a>(
    state: &ctxlog::State,
    job: &SummaryJob,
    recorded: &'a [Arc<SummaryPrepared>],
) -> Option<&'a SummaryPrepared> {
    recorded.iter().map(AsRef::as_ref).find(|r| {
        r.from == job.from
            && r.to == job.to
            && r.merged.len() == job.condense.len()
            && r.merged
                .iter()
                .zip(&job.condense)
                .all(|(&ri, &ji)| text_of(recorded, ri).is_some_and(|t| Some(t) == text_of(state.summaries(), ji)))
    })
}

/// `rerun`
pub fn rerun(args: &RerunArgs, out: &mut Out<'_>) -> Result<(), CliError> {
    let selection = SessionArgs {
        store: StoreArgs { store: args.store.store.clone(), json: args.store.json },
        session: args.config.session.clone(),
    };
    let (store, id) = crate::analysis::open_session(&selection)?;
    let inputs = inputs(store.as_ref(), id)?;
    // A rerun is a regression check: it re-makes summaries with the built-in summarizer only.
    if let Some(crate::args::SummarizerArg::Model(spec)) = &args.config.summarizer {
        return Err(CliError::Usage(format!(
            "--summarizer {spec}: rerun re-makes summaries with the built-in summarizer (or reuses the recorded \
             ones); model summarizers run in demo and import"
        )));
    }
    let config = args.config.resolve(inputs.config.clone())?;
    config.validate()?;
    let recorded = analyze(store.as_ref(), id, Mode::Strict, Until::Head, Keep { views: false })?;
    let (mem, notes) = run(&inputs, config.clone(), args.summaries)?;
    let rerun: Analysis = analyze(&mem, id, Mode::Strict, Until::Head, Keep { views: false })?;
    let left = Side { label: "recorded".into(), analysis: &recorded, config: &inputs.config };
    let right = Side { label: "rerun".into(), analysis: &rerun, config: &config };
    let diff = compare(&left, &right);
    print_diff(out, &diff, &left, &right, Some(&notes), args.store.json)?;
    match (args.exit_code, diff.differing()) {
        (true, n) if n > 0 => Err(CliError::Differs(n)),
        _ => Ok(()),
    }
}
