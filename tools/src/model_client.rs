//! The `ctxlog-llm` clients behind `--summarizer anthropic:|openai:|command:`.

use ctxlog::event::SummaryFailure;
use ctxlog::summary_call::SummaryCall;

use crate::error::CliError;
use crate::summarizer::{Reply, SummaryClient};

/// A `ctxlog-llm` client as the import's summarizer: its errors become the attempt's recorded
/// failure (a timeout as such, an empty answer as such, anything else as a provider error with
/// the client's sentence, which never holds the API key).
pub struct LlmClient(pub Box<dyn ctxlog_llm::Summarizer>);

impl SummaryClient for LlmClient {
    fn summarize(&self, body: &[u8]) -> Result<Reply, SummaryFailure> {
        match self.0.complete(body) {
            Ok(c) => Ok(Reply {
                text: c.text,
                usage: c.usage,
                latency_ms: u64::try_from(c.latency.as_millis()).unwrap_or(u64::MAX),
            }),
            Err(e) => Err(e.into_failure()),
        }
    }
}

/// The model summarizer the flags name, built now (the API key is read from the environment
/// here, so a missing key fails before anything is written); `None` for `extractive`, `none`
/// or no `--summarizer`.
pub fn from_args(a: &crate::args::ConfigArgs) -> Result<Option<(LlmClient, SummaryCall)>, CliError> {
    let Some(crate::args::SummarizerArg::Model(spec)) = &a.summarizer else {
        if a.summary_call.is_some()
            || a.summary_model.is_some()
            || a.summary_context.is_some()
            || a.summary_max_tokens.is_some()
        {
            return Err(CliError::Usage(
                "--summary-call, --summary-model, --summary-context and --summary-max-tokens need a model: --summarizer anthropic:URL, openai:URL or \
                 command:PROGRAM"
                    .into(),
            ));
        }
        return Ok(None);
    };
    let spec = ctxlog_llm::SummarizerSpec::parse(spec).map_err(|e| CliError::Usage(e.to_string()))?;
    let mut options = ctxlog_llm::ClientOptions {
        model: a.summary_model.clone(),
        api_key_env: a.summary_key_env.clone(),
        ..ctxlog_llm::ClientOptions::default()
    };
    if let Some(secs) = a.summary_timeout {
        if !(secs.is_finite() && secs > 0.0) {
            return Err(CliError::Usage(format!("--summary-timeout {secs} is not a positive number of seconds")));
        }
        options.http.timeout = std::time::Duration::from_secs_f64(secs);
    }
    let client = spec.build(&options).map_err(|e| CliError::Usage(format!("--summarizer: {e}")))?;
    let mut call = SummaryCall::new(a.summary_call.map_or(ctxlog::event::SummaryMode::Standalone, |c| c.mode()));
    call.model = a.summary_model.clone();
    call.format = spec.wire_format();
    call.max_tokens = a.summary_max_tokens;
    call.context = match a.summary_context {
        Some(0) => {
            return Err(CliError::Usage("--summary-context 0: the summarizer's context must be positive".into()))
        }
        Some(n) => Some(n),
        // A llama.cpp-style server says its context at `/props`; others have no such page.
        None => client.context_window(),
    };
    if a.summary_max_tokens == Some(0) {
        return Err(CliError::Usage("--summary-max-tokens 0: a summary needs room".into()));
    }
    Ok(Some((LlmClient(client), call)))
}
