//! The session's summary jobs, fulfilled after each committed call (before the next call of the
//! session plans), so that a long session stays under its budget: summaries prepared now are
//! what the next call's gate flushes.
//!
//! The built-in extractive summarizer is fast and pure: it runs on the blocking pool while the
//! session's slot is held. A model summarizer is a network call: its attempt is started under
//! the slot, the slot is released while the client runs, and the slot is taken again to record
//! the outcome (the engine records a result whose span was edited or flushed meanwhile as a
//! stale `SummaryFailed`). The next call of the session is served meanwhile.

use std::sync::Arc;

use ctxlog::event::SummaryFailure;
use ctxlog::session::{SummaryFinished, SummaryOutcome};
use ctxlog::summary_call::SummaryCall;
use ctxlog::{Extractive, StreamId};

use crate::sessions::{Held, Slot, Store};

/// At most this many model attempts between two calls of a session (as `ctxlog import`).
pub const MODEL_ATTEMPTS_BETWEEN_CALLS: usize = 64;

/// Who writes the proxy's summaries.
#[derive(Clone, Default)]
pub enum Summaries {
    /// None: the session's floor grows with it (for comparisons and tests).
    Off,
    /// The engine's built-in extractive summarizer (the default).
    #[default]
    Extractive,
    /// A model, asked through a blocking client (`ctxlog-llm`), with `call`'s mode and model.
    Model {
        /// The client (its API key is its own: never the client's key of a proxied call).
        client: Arc<dyn ctxlog_llm::Summarizer>,
        /// Mode, model and knobs of each attempt.
        call: SummaryCall,
    },
}

impl std::fmt::Debug for Summaries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Summaries::Off => f.write_str("Off"),
            Summaries::Extractive => f.write_str("Extractive"),
            Summaries::Model { client, call } => f
                .debug_struct("Model")
                .field("model", &client.model())
                .field("wire_format", &client.wire_format())
                .field("mode", &call.mode)
                .finish(),
        }
    }
}

pub(crate) type Guard = Held;

/// Runs the session's summary jobs after a committed call; the slot is released when this
/// returns (extractive) or once the first model attempt is sent (the rest runs in a task that
/// takes the slot again only to record each outcome).
pub(crate) async fn after_commit(summaries: &Summaries, store: &Store, guard: Guard) {
    match summaries {
        Summaries::Off => drop(guard),
        Summaries::Extractive => {
            let done = crate::blocking::run(move || {
                let mut guard = guard;
                extractive_logged(&mut guard);
            })
            .await;
            if done.is_err() {
                tracing::error!("summary task failed");
            }
        }
        Summaries::Model { client, call } => {
            let client = Arc::clone(client);
            let call = call.clone();
            let store = Arc::clone(store);
            tokio::spawn(async move { model(client, call, store, guard).await });
        }
    }
}

/// [`extractive`] on the calling thread (the blocking pool's: the commit's task runs it right
/// after telling the client), its outcome logged.
pub(crate) fn extractive_logged(slot: &mut Slot) {
    let started = std::time::Instant::now();
    match extractive(slot) {
        Ok(written) if written > 0 => {
            tracing::debug!(written, took_us = started.elapsed().as_micros() as u64, "extractive summaries prepared")
        }
        Ok(_) => {}
        // Written under the session's lease, so only a writer that ignores leases (a lease
        // that expired while this process stalled) gets here first. Its events are in the log;
        // the summaries are prepared again after a later call.
        Err(ctxlog::SessionError::Store(ctxlog::StoreError::Conflict { .. })) => {
            tracing::warn!("summaries not written: another writer's events came first");
            // What this process holds is behind the log: the next call catches up.
        }
        Err(e) => tracing::error!(error = %e, "summaries failed"),
    }
}

/// Prepares extractive summaries until no job is left or one is discarded
/// ([`ctxlog::Session::run_summaries`]); returns how many were written.
pub(crate) fn extractive(slot: &mut Slot) -> Result<usize, ctxlog::SessionError> {
    let Some(session) = slot.session_mut() else { return Ok(0) };
    Ok(session.run_summaries(&mut Extractive, usize::MAX)?.prepared())
}

/// Model attempts, one at a time, until no job is left, one fails, or the bound is reached:
/// `Session::run_summaries`' loop, taken apart because the slot is released while the model
/// writes (the built-in loop holds its session throughout).
/// The session's own work (building the request: reading its span from the log; recording the
/// outcome: a durable append) runs on the blocking pool, never on the runtime's threads, where
/// it would hold up other sessions' calls; the model's call runs with the slot released.
async fn model(client: Arc<dyn ctxlog_llm::Summarizer>, call: SummaryCall, store: Store, guard: Guard) {
    let mut guard = guard;
    for _ in 0..MODEL_ATTEMPTS_BETWEEN_CALLS {
        let c = call.clone();
        let started = tokio::task::spawn_blocking(move || {
            let mut guard = guard;
            let r = start(&mut guard, &c);
            (guard, r)
        })
        .await;
        let (held, (stream, attempt)) = match started {
            Ok((held, Some(Ok(s)))) => (held, s),
            Ok((_, None)) => return,
            Ok((_, Some(Err(e)))) => return tracing::error!(error = %e, "summary attempt not started"),
            Err(_) => return tracing::error!("summary task failed"),
        };
        let slot = held.mutex();
        drop(held); // the next call of the session may plan while the model writes
        let body = attempt.request.body().to_vec();
        let c = Arc::clone(&client);
        let outcome = match tokio::task::spawn_blocking(move || c.complete(&body)).await {
            Ok(Ok(c)) => SummaryOutcome::text(c.text)
                .usage(c.usage)
                .latency_ms(u64::try_from(c.latency.as_millis()).unwrap_or(u64::MAX)),
            Ok(Err(e)) => SummaryOutcome::failed(e.into_failure()),
            Err(e) => SummaryOutcome::failed(SummaryFailure::Provider(format!("the summary task failed: {e}"))),
        };
        let Some(held) = retake(&slot, &store, stream).await else {
            return tracing::warn!(session = %stream, "summary attempt dropped: the session's lease stayed taken");
        };
        let recorded = tokio::task::spawn_blocking(move || {
            let mut held = held;
            let r = finish(&mut held, stream, attempt, outcome);
            (held, r)
        })
        .await;
        match recorded {
            Ok((held, true)) => guard = held,
            Ok((_, false)) => return,
            Err(_) => return tracing::error!(session = %stream, "summary task failed"),
        }
    }
}

/// The next job and its attempt, started under the slot; `None` when there is none.
fn start(
    guard: &mut Guard,
    call: &SummaryCall,
) -> Option<Result<(StreamId, ctxlog::SummaryAttempt), ctxlog::SessionError>> {
    let session = guard.session_mut()?;
    // The job as this summarizer is asked for it; one it refused with a 4xx waits for a change.
    let job = match session.summary_job_for(call) {
        Ok(job) => job?,
        Err(e) => return Some(Err(e)),
    };
    let stream: StreamId = session.id();
    Some(session.start_summary(&job, call).map(|a| (stream, a)))
}

/// Records an attempt's outcome on the session it belongs to; whether to go on.
fn finish(held: &mut Guard, stream: StreamId, attempt: ctxlog::SummaryAttempt, outcome: SummaryOutcome) -> bool {
    // The session may have been shrunk, reset or moved to a successor meanwhile: the attempt
    // then belongs to a session no longer in memory, and nothing is recorded.
    let Some(session) = held.session_mut().filter(|s| s.id() == stream) else {
        tracing::info!(session = %stream, "summary attempt dropped: the session left memory meanwhile");
        return false;
    };
    // Another proxy of a fleet may have written meanwhile: the outcome is recorded on top.
    if let Err(e) = session.catch_up() {
        tracing::warn!(session = %stream, error = %e, "summary attempt dropped: cannot catch up");
        session.cancel_summary(attempt); // the job is offered again after the next call
        return false;
    }
    match session.finish_summary(attempt, outcome) {
        Ok(SummaryFinished::Prepared(_)) => true,
        Ok(SummaryFinished::Failed { failure, .. }) => {
            tracing::warn!(session = %stream, reason = failure.as_str(), "summary attempt failed");
            false
        }
        Err(e) => {
            tracing::warn!(session = %stream, error = %e, "summary attempt not recorded");
            false
        }
    }
}

/// Takes a session's slot and its lease again to record a model attempt (bounded: a lease that
/// stays taken for ~30 s drops the attempt, which the engine offers again later).
async fn retake(slot: &Arc<tokio::sync::Mutex<Slot>>, store: &Store, stream: StreamId) -> Option<Held> {
    let _ = stream;
    for _ in 0..300 {
        let guard = Arc::clone(slot).lock_owned().await;
        let lease_of = guard.lease_key();
        let s = Arc::clone(store);
        let lease = tokio::task::spawn_blocking(move || s.try_lease(lease_of)).await;
        match lease {
            Ok(Ok(Some(lease))) => return Some(Held::new(guard, lease)),
            _ => {
                drop(guard);
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
    None
}
