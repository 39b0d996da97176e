//! Summaries written by a model during `demo` and `import`: the client seam, and the loop that
//! fulfils the engine's jobs through `start_summary` / `finish_summary`.

use ctxlog::event::SummaryFailure;
use ctxlog::session::SummaryOutcome;
use ctxlog::summary_call::SummaryCall;
use ctxlog::{Committed, RequestOptions, Session, Store, Usage};

use crate::error::CliError;

/// What a summarizer answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The summary.
    pub text: String,
    /// What the provider billed, if it said.
    pub usage: Option<Usage>,
    /// Wall time of the call.
    pub latency_ms: u64,
}

/// A blocking summarizer: one request body in, one summary (or a typed failure) out.
pub trait SummaryClient {
    /// Sends `body` byte for byte.
    fn summarize(&self, body: &[u8]) -> Result<Reply, SummaryFailure>;
}

/// A model summarizer and how to ask it.
pub struct ModelSummaries<'a> {
    /// The client.
    pub client: &'a dyn SummaryClient,
    /// Mode, model, knobs (and the client's wire format, when it is not the session's).
    pub call: SummaryCall,
}

impl ModelSummaries<'_> {
    /// What each main call is recorded as having carried besides its messages: the
    /// summarization model (the import stands for a host whose model it is), no tools. Recorded
    /// with every call, so a fork can rebuild the call's request.
    pub fn request_options(&self) -> RequestOptions {
        match &self.call.model {
            Some(m) => RequestOptions::new().model(m),
            None => RequestOptions::new(),
        }
    }

    /// Fulfils the engine's jobs until none is left or an attempt fails (the next call asks
    /// again; after `max_failures` in a row the engine pauses them itself). Every attempt, its
    /// mode, refusal and outcome, is recorded by the session.
    /// Returns what each attempt wrote, for the timeline.
    pub fn run<S: Store>(&self, session: &mut Session<S>, max_jobs: usize) -> Result<Vec<Committed>, CliError> {
        let run = session.run_summaries(&mut &*self, max_jobs)?;
        Ok(run.steps.into_iter().map(|s| s.committed).collect())
    }
}

impl ctxlog::Summarizer for &ModelSummaries<'_> {
    fn model_call(&self) -> Option<&SummaryCall> {
        Some(&self.call)
    }

    fn complete(&mut self, request: &ctxlog::SummaryRequest) -> SummaryOutcome {
        match self.client.summarize(request.body()) {
            Ok(r) => SummaryOutcome::text(r.text).usage(r.usage).latency_ms(r.latency_ms),
            Err(failure) => SummaryOutcome::failed(failure),
        }
    }
}
