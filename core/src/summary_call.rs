//! Summary requests built by the core (pure): what a host sends to a model so that it writes a
//! job's summary, in the session's wire format.
//!
//! * **standalone**: a system prompt of five sections plus guidelines ([`STANDALONE_PROMPT`])
//!   and one user message holding the span as text ([`render_messages`]).
//! * **fork**: the last served request, its messages byte for byte, with the model, tools and
//!   cache breakpoints recorded for it ([`crate::event::RequestRecord`]), plus exactly one
//!   appended user message ([`FORK_PROMPT`], the scope, an excerpt). No system message is added
//!   and the span is not sent again: the provider reads the whole prefix from its cache.
//! * **auto**: fork when `span_tokens / prefix_tokens ≥ fork_min_span_ratio`, else standalone
//!   (a *decline*).
//!
//! A fork is refused, falling back to standalone, by the first failing rung of the ladder
//! ([`ForkRefusal`], in order). The refusal travels with the attempt: [`crate::Session::finish_summary`]
//! records it in the attempt's event and raises `fork_refused:<reason>` once per reason.

use std::sync::Arc;

use crate::event::{RequestRecord, SummaryMode, ToolsRecord};
use crate::json::JsonWriter;
use crate::message::Message;
use crate::request::{self, RequestOptions, ServedView};
use crate::state::{Item, State};
use crate::store::BlobId;
use crate::summary::SummaryJob;
use crate::summary_fit;
// The knobs, the prompts and the span's text live apart (read by `summary_fit` too); their
// paths here are kept.
use crate::summary_prompt::cut;
pub use crate::summary_prompt::{
    render_message, render_messages, SummaryCall, DEFAULT_FORK_MIN_SPAN_RATIO, DEFAULT_MAX_FAILURES,
    DEFAULT_MAX_TOKENS, FORK_PROMPT, STANDALONE_PROMPT, TOOL_ARGS_CHARS,
};
use crate::tokens::text_tokens;
use crate::view::{item_message, summary_message, ViewCache};
use crate::wire::{BlobSource, WireFormat};

/// Characters of the span's last message quoted in a fork's scope (then `…`).
pub const EXCERPT_CHARS: usize = 300;

/// Why a fork was not used. The order of the variants is the ladder's.
#[derive(Debug, Clone, PartialEq)]
pub enum ForkRefusal {
    /// The last served request was committed without its record (plain `commit`): its tools
    /// are unknown, and a fork without them would not hit the cache.
    ToolsNotRecorded {
        /// That call.
        call: u64,
    },
    /// A summarization model other than the one the last request was sent to is configured.
    ModelDiffers {
        /// The configured one.
        configured: String,
        /// The recorded one.
        recorded: Option<String>,
    },
    /// No request was served yet: there is no prefix.
    NoRequestServed,
    /// The last served request ends with tool calls whose results it does not hold.
    UnansweredToolCalls {
        /// The call.
        call: u64,
    },
    /// The span is not inside the last served request (edits, a flush or a restore since, or
    /// the span is not shown there as one run).
    SpanNotServed(String),
    /// The fork request could not be built.
    Unbuildable(String),
    /// The fork's prompt (the whole prefix) and its answer do not fit the summarizer's context.
    OverContext {
        /// Estimated tokens of the fork's prompt.
        prompt_tokens: u64,
        /// The summarizer's context.
        context: u64,
    },
    /// `auto` only: the span is too small a share of the prefix for a fork to pay.
    Declined {
        /// Tokens of the span.
        span_tokens: u64,
        /// Tokens of the prefix.
        prefix_tokens: u64,
        /// The knob.
        min_ratio: f64,
    },
}

impl ForkRefusal {
    /// Snake-case name (the `fork_refused:<name>` guard and the attempt's `refusal`).
    pub fn name(&self) -> &'static str {
        match self {
            ForkRefusal::ToolsNotRecorded { .. } => "tools_not_recorded",
            ForkRefusal::ModelDiffers { .. } => "model_differs",
            ForkRefusal::NoRequestServed => "no_request_served",
            ForkRefusal::UnansweredToolCalls { .. } => "unanswered_tool_calls",
            ForkRefusal::SpanNotServed(_) => "span_not_in_last_request",
            ForkRefusal::Unbuildable(_) => "fork_unbuildable",
            ForkRefusal::OverContext { .. } => "over_context",
            ForkRefusal::Declined { .. } => "span_below_ratio",
        }
    }

    /// A decline (`auto`'s cost decision), not a refusal?
    pub fn is_decline(&self) -> bool {
        matches!(self, ForkRefusal::Declined { .. })
    }

    /// One sentence with the numbers.
    pub fn describe(&self) -> String {
        match self {
            ForkRefusal::ToolsNotRecorded { call } => format!(
                "call {call} was committed without its request record, so its tools are unknown; commit with \
                 Session::commit_request to allow forks"
            ),
            ForkRefusal::ModelDiffers { configured, recorded } => format!(
                "the summarization model {configured} is not the model of the last request ({}); a different \
                 model cannot read its cache",
                recorded.as_deref().unwrap_or("none recorded")
            ),
            ForkRefusal::NoRequestServed => "no request was served yet: there is no prefix to append to".into(),
            ForkRefusal::UnansweredToolCalls { call } => {
                format!("the request of call {call} ends with tool calls it holds no results for")
            }
            ForkRefusal::SpanNotServed(why) => format!("the span is not inside the last served request: {why}"),
            ForkRefusal::Unbuildable(why) => format!("the fork request could not be built: {why}"),
            ForkRefusal::OverContext { prompt_tokens, context } => format!(
                "the fork's prompt (about {prompt_tokens} tokens) and its answer do not fit the summarizer's context \
                 of {context} tokens (--summary-context)"
            ),
            ForkRefusal::Declined { span_tokens, prefix_tokens, min_ratio } => format!(
                "the span ({span_tokens} tokens) is {:.3} of the prefix ({prefix_tokens} tokens), below \
                 fork_min_span_ratio {min_ratio}: standalone is cheaper",
                ratio(*span_tokens, *prefix_tokens)
            ),
        }
    }
}

fn ratio(span: u64, prefix: u64) -> f64 {
    span as f64 / prefix as f64
}

/// `auto`'s cost predicate: fork when `span_tokens / prefix_tokens ≥ min_ratio`; a prefix of 0
/// has no opinion (fork).
pub fn auto_forks(span_tokens: u64, prefix_tokens: u64, min_ratio: f64) -> bool {
    prefix_tokens == 0 || ratio(span_tokens, prefix_tokens) >= min_ratio
}

/// The request to send for a summary job, and how it was decided.
#[derive(Debug, Clone)]
pub struct SummaryRequest {
    format: WireFormat,
    body: Vec<u8>,
    /// The instructions the request carries (the prompt, the scope and limit sentences): what
    /// an echoing answer repeats.
    pub(crate) instructions: String,
    /// The job as this request asks for it: a standalone span may be cut short to fit the
    /// summarizer's context (a fork always asks for the whole job).
    pub job: SummaryJob,
    /// The request's `max_tokens`.
    pub max_tokens: u64,
    /// Mode asked for.
    pub mode_requested: SummaryMode,
    /// Mode used (`Standalone` or `Fork`).
    pub mode_used: SummaryMode,
    /// Why a fork was refused or declined.
    pub refusal: Option<ForkRefusal>,
    /// The call whose request a fork appends to.
    pub prefix_call: Option<u64>,
    /// Estimated tokens of the span.
    pub span_tokens: u64,
    /// Estimated tokens of the last served request's view (0 when none).
    pub prefix_tokens: u64,
}

impl SummaryRequest {
    /// The JSON body, ready to POST to the session's provider API.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Its wire format.
    pub fn format(&self) -> WireFormat {
        self.format
    }

    /// The `model` field of the body, if any.
    pub fn model(&self) -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        v.get("model")?.as_str().map(str::to_owned)
    }
}

/// Builds the request for `job` (`span`: its messages as appended; empty for a condense job).
/// `blobs` reads the recorded tools and the media a fork inlines.
pub(crate) fn build(
    state: &State,
    format: WireFormat,
    job: &SummaryJob,
    span: &[Arc<Message>],
    call: &SummaryCall,
    blobs: &dyn BlobSource,
) -> SummaryRequest {
    let prefix_tokens = state.last_served().map_or(0, |l| l.view_tokens);
    let requested = call.mode;
    let own = call.format.unwrap_or(format);
    let standalone = |refusal: Option<ForkRefusal>| {
        let s = standalone_body(state, own, job, span, call);
        SummaryRequest {
            format: own,
            body: s.body,
            instructions: s.instructions,
            span_tokens: s.job.span_tokens,
            job: s.job,
            max_tokens: s.max_tokens,
            mode_requested: requested,
            mode_used: SummaryMode::Standalone,
            refusal,
            prefix_call: None,
            prefix_tokens,
        }
    };
    if !matches!(requested, SummaryMode::Fork | SummaryMode::Auto) {
        return standalone(None);
    }
    match fork(state, format, job, call, blobs) {
        Err(refusal) => standalone(Some(refusal)),
        Ok(Fork { body, prefix_call, instructions, max_tokens }) => {
            // The cost predicate runs after the alignment checks; a prefix of 0 has no opinion.
            if requested == SummaryMode::Auto && !auto_forks(job.span_tokens, prefix_tokens, call.fork_min_span_ratio) {
                return standalone(Some(ForkRefusal::Declined {
                    span_tokens: job.span_tokens,
                    prefix_tokens,
                    min_ratio: call.fork_min_span_ratio,
                }));
            }
            SummaryRequest {
                format,
                body,
                instructions,
                job: job.clone(),
                max_tokens,
                mode_requested: requested,
                mode_used: SummaryMode::Fork,
                refusal: None,
                prefix_call: Some(prefix_call),
                span_tokens: job.span_tokens,
                prefix_tokens,
            }
        }
    }
}

/// A fork request.
struct Fork {
    body: Vec<u8>,
    prefix_call: u64,
    instructions: String,
    max_tokens: u64,
}

/// The fork request, or the first rung of the ladder that refuses it.
fn fork(
    state: &State,
    format: WireFormat,
    job: &SummaryJob,
    call: &SummaryCall,
    blobs: &dyn BlobSource,
) -> Result<Fork, ForkRefusal> {
    // A Responses request names its bound `max_output_tokens` and may rely on the provider's
    // stored state: a fork of one is not built (standalone instead).
    if format == WireFormat::OpenAiResponses {
        return Err(ForkRefusal::Unbuildable("forks of OpenAI Responses requests are not built".into()));
    }
    // A Gemini request has no `max_tokens` a fork could bound (its bound sits in
    // `generationConfig`): standalone instead.
    if format == WireFormat::Gemini {
        return Err(ForkRefusal::Unbuildable("forks of Gemini requests are not built".into()));
    }
    let last = state.last_served();
    // 1. Tools never recorded (for the request a fork would append to).
    if let Some(l) = last.filter(|l| l.request.is_none()) {
        return Err(ForkRefusal::ToolsNotRecorded { call: l.call });
    }
    // 2. A different summarization model.
    if let (Some(configured), Some(l)) = (&call.model, last) {
        let recorded = l.request.as_ref().and_then(|r| r.model.clone());
        if recorded.as_ref() != Some(configured) {
            return Err(ForkRefusal::ModelDiffers { configured: configured.clone(), recorded });
        }
    }
    // 3. No request served yet.
    let (Some(last), Some(record)) = (last, last.and_then(|l| l.request.as_ref())) else {
        return Err(ForkRefusal::NoRequestServed);
    };
    // The served view is the current view's first `view_messages` items only while nothing but
    // appends happened since (rung 5 refuses otherwise; rung 4 needs it to read the request).
    let fresh = state.prefix_stable_since_last_call();
    let mut cache = ViewCache::new();
    if fresh {
        cache.sync_prefix(state, usize::try_from(last.view_messages).unwrap_or(usize::MAX));
        // 4. The request ends with unanswered tool calls.
        let ends_calling = cache
            .items()
            .last()
            .and_then(|it| item_message(state, it.item))
            .is_some_and(|m| m.call_ids().next().is_some());
        if ends_calling {
            return Err(ForkRefusal::UnansweredToolCalls { call: last.call });
        }
    }
    // 5. The span is not inside the last served request.
    if !fresh {
        return Err(ForkRefusal::SpanNotServed(format!(
            "the view changed since call {} (an edit, a flush or a restore)",
            last.call
        )));
    }
    let is_system = |item: Item| match item {
        Item::Message(seq) => state.entry(seq).is_some_and(|e| e.is_system()),
        Item::Summary(_) | Item::Placeholder { .. } => false,
    };
    let in_span = |item: Item| match item {
        Item::Message(seq) if !job.is_condense() => (job.from..job.to).contains(&seq),
        Item::Summary(i) => job.condense.contains(&i),
        // A placeholder for messages of the span goes with them.
        Item::Placeholder { from, .. } if !job.is_condense() => (job.from..job.to).contains(&from),
        Item::Message(_) | Item::Placeholder { .. } => false,
    };
    // Positions among the messages after the system prompt (how the scope names them).
    let after_system: Vec<Item> = cache.items().iter().map(|it| it.item).filter(|&i| !is_system(i)).collect();
    let positions: Vec<usize> = after_system.iter().enumerate().filter(|(_, &i)| in_span(i)).map(|(p, _)| p).collect();
    let (Some(&first), Some(&last_pos)) = (positions.first(), positions.last()) else {
        return Err(ForkRefusal::SpanNotServed(format!("none of it is in the view of call {}", last.call)));
    };
    // Every message of the span still in the view must be in the served prefix: the part
    // appended since would otherwise be summarized unseen.
    let shown = state.view().iter().filter(|it| in_span(it.item) && !is_system(it.item)).count();
    if shown != positions.len() {
        return Err(ForkRefusal::SpanNotServed(format!(
            "{} of its {shown} messages in the view came after call {}",
            shown - positions.len(),
            last.call
        )));
    }
    if last_pos - first + 1 != positions.len() {
        return Err(ForkRefusal::SpanNotServed(format!(
            "it is not one run of messages in the view of call {}",
            last.call
        )));
    }
    // 6. The fork request cannot be built.
    if let Some(other) = call.format.filter(|&f| f != format) {
        return Err(ForkRefusal::Unbuildable(format!(
            "the summarizer speaks {}, the session {}",
            other.as_str(),
            format.as_str()
        )));
    }
    if cache.digest() != last.digest {
        return Err(ForkRefusal::Unbuildable(format!(
            "the rebuilt prefix hashes to {}, call {} recorded {}",
            cache.digest(),
            last.call,
            last.digest
        )));
    }
    let excerpt_of = after_system.get(last_pos).and_then(|&i| item_message(state, i)).map(|m| excerpt(&m));
    let text = format!(
        "{}\n\n{}",
        fork_message(first, positions.len(), excerpt_of.as_deref().unwrap_or("")),
        summary_fit::limit_sentence(job)
    );
    let prompt_tokens = last.view_tokens + u64::from(text_tokens(&text));
    let max_tokens = summary_fit::max_tokens(job, call, prompt_tokens);
    if let Some(context) = call.context {
        if prompt_tokens + summary_fit::REQUEST_OVERHEAD_TOKENS + summary_fit::answer_budget(job) > context {
            return Err(ForkRefusal::OverContext { prompt_tokens, context });
        }
    }
    let opts = options(record, max_tokens, blobs).map_err(|e| ForkRefusal::Unbuildable(e.to_string()))?;
    let view =
        ServedView { state, items: cache.items(), bytes: cache.bytes(), cuts: cache.cuts(), digest: &last.digest };
    let served = request::render(&view, format, &opts, blobs);
    if let Some(id) = served.missing_blobs().first() {
        return Err(ForkRefusal::Unbuildable(format!("media blob {id} of the prefix is missing")));
    }
    let body = append_user_message(served.into_body(), &text)
        .ok_or_else(|| ForkRefusal::Unbuildable("the rendered request does not end with its messages array".into()))?;
    Ok(Fork { body, prefix_call: last.call, instructions: text, max_tokens })
}

/// Why a call's recorded tools cannot be sent again.
#[derive(Debug, thiserror::Error)]
enum RecordedTools {
    #[error("the recorded tools (blob {0}) are missing")]
    Missing(crate::store::BlobId),
    #[error("the recorded tools (blob {0}) are not UTF-8")]
    NotUtf8(crate::store::BlobId),
    #[error("the recorded tools (blob {id}): {error}")]
    Invalid { id: crate::store::BlobId, error: crate::request::RequestError },
}

/// The recorded fields as request options: model, the summary's `max_tokens`, the recorded
/// tools verbatim, the recorded breakpoints.
fn options(record: &RequestRecord, max_tokens: u64, blobs: &dyn BlobSource) -> Result<RequestOptions, RecordedTools> {
    let mut opts = RequestOptions::new();
    if let Some(m) = &record.model {
        opts = opts.model(m);
    }
    opts = opts.max_tokens(max_tokens);
    if let ToolsRecord::Blob { id, .. } = &record.tools {
        let bytes = blobs.blob(id).ok_or_else(|| RecordedTools::Missing(id.clone()))?;
        let json = String::from_utf8(bytes).map_err(|_| RecordedTools::NotUtf8(id.clone()))?;
        opts = opts.field("tools", &json).map_err(|error| RecordedTools::Invalid { id: id.clone(), error })?;
    }
    if let Some(ttl) = record.breakpoints {
        opts = opts.cache_breakpoints(ttl);
    }
    if let Some(p) = &record.placement {
        opts = opts.place_breakpoints(p.clone());
    }
    Ok(opts)
}

/// The appended user message: the prompt, the scope, the excerpt.
pub fn fork_message(skip: usize, n: usize, excerpt: &str) -> String {
    let plural = |k: usize| if k == 1 { "message" } else { "messages" };
    let scope = if skip == 0 {
        format!("the first {n} {} following the system prompt", plural(n))
    } else {
        format!("the {n} {} following the first {skip} {} after the system prompt", plural(n), plural(skip))
    };
    format!(
        "{FORK_PROMPT}\n\nSCOPE: summarize only {scope}; your summary replaces them, and the messages after them \
         stay as they are. The last message of that span reads: \"{excerpt}\""
    )
}

/// At most [`EXCERPT_CHARS`] characters of a message as the span renders it.
pub fn excerpt(m: &Message) -> String {
    let text = render_message(m);
    cut(&text, EXCERPT_CHARS)
}

/// Appends `{"role":"user","content":text}` to the `messages` array that ends `body`.
fn append_user_message(mut body: Vec<u8>, text: &str) -> Option<Vec<u8>> {
    if !body.ends_with(b"]}") {
        return None;
    }
    body.truncate(body.len() - 2);
    let empty = body.ends_with(b"[");
    let mut w = JsonWriter::new();
    w.raw(if empty { "" } else { "," });
    w.raw(r#"{"role":"user","content":"#);
    w.string(text);
    w.raw("}]}");
    body.extend_from_slice(&w.into_bytes());
    Some(body)
}

/// A standalone request and what went into it.
struct Standalone {
    body: Vec<u8>,
    instructions: String,
    job: SummaryJob,
    max_tokens: u64,
}

/// The standalone body: `{"model"?, "max_tokens", system prompt, one user message}` (the limit
/// sentence, then the span as text), for the job fitted to the summarizer's context.
fn standalone_body(
    state: &State,
    format: WireFormat,
    job: &SummaryJob,
    span: &[Arc<Message>],
    call: &SummaryCall,
) -> Standalone {
    let model = call.model.clone().or_else(|| state.last_served()?.request.as_ref()?.model.clone());
    // What a flush keeps verbatim (system, pinned, first human) stays in the view: not
    // summarized (the fit renders it as nothing).
    let condensed = job.is_condense().then(|| {
        let msgs: Vec<Message> = job
            .condense
            .iter()
            .filter_map(|&i| state.summaries().get(i as usize).map(|s| summary_message(state, s)))
            .collect();
        render_messages(msgs.iter())
    });
    let fitted = summary_fit::fit(state, job, span, condensed, call);
    let limit = summary_fit::limit_sentence(&fitted.job);
    let text = format!("{limit}\n\n{}", fitted.text);
    let prompt_tokens = u64::from(text_tokens(STANDALONE_PROMPT)) + u64::from(text_tokens(&text));
    let max_tokens = summary_fit::max_tokens(&fitted.job, call, prompt_tokens);
    Standalone {
        body: standalone_json(format, model.as_deref(), max_tokens, &text),
        instructions: format!("{STANDALONE_PROMPT}\n{limit}"),
        job: fitted.job,
        max_tokens,
    }
}

/// The standalone body for a rendered span.
pub fn standalone_json(format: WireFormat, model: Option<&str>, max_tokens: u64, span_text: &str) -> Vec<u8> {
    let mut w = JsonWriter::new();
    if format == WireFormat::Gemini {
        // The model is in the URL; the bound in `generationConfig`.
        w.raw(r#"{"systemInstruction":{"parts":[{"text":"#);
        w.string(STANDALONE_PROMPT);
        w.raw(r#"}]},"contents":[{"role":"user","parts":[{"text":"#);
        w.string(span_text);
        w.raw(&format!(r#"}}]}}],"generationConfig":{{"maxOutputTokens":{max_tokens}}}}}"#));
        return w.into_bytes();
    }
    w.raw("{");
    if let Some(m) = model {
        w.raw(r#""model":"#);
        w.string(m);
        w.raw(",");
    }
    // Responses names the bound `max_output_tokens`.
    let bound = if format == WireFormat::OpenAiResponses { "max_output_tokens" } else { "max_tokens" };
    w.raw(&format!(r#""{bound}":{max_tokens},"#));
    match format {
        WireFormat::Anthropic => {
            w.raw(r#""system":"#);
            w.string(STANDALONE_PROMPT);
            w.raw(r#","messages":[{"role":"user","content":"#);
            w.string(span_text);
            w.raw("}]}");
        }
        WireFormat::OpenAiResponses => {
            w.raw(r#""instructions":"#);
            w.string(STANDALONE_PROMPT);
            w.raw(r#","input":[{"role":"user","content":"#);
            w.string(span_text);
            w.raw("}]}");
        }
        WireFormat::OpenAi | WireFormat::Gemini => {
            w.raw(r#""messages":[{"role":"system","content":"#);
            w.string(STANDALONE_PROMPT);
            w.raw(r#"},{"role":"user","content":"#);
            w.string(span_text);
            w.raw("}]}");
        }
    }
    w.into_bytes()
}

/// Content address a tools JSON gets in the blob area.
pub fn tools_id(json: &str) -> BlobId {
    BlobId::of(json.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Block, Content, RawJson, Role};

    #[test]
    fn auto_forks_from_the_ratio_on_and_without_a_prefix() {
        let r = DEFAULT_FORK_MIN_SPAN_RATIO;
        assert!(!auto_forks(21, 100, r));
        assert!(auto_forks(22, 100, r));
        assert!(auto_forks(23, 100, r));
        assert!(auto_forks(1, 0, r), "a prefix of 0 has no opinion");
        assert!(!auto_forks(999, 1_000, 1.0));
    }

    #[test]
    fn a_message_renders_role_text_calls_results_and_media_references() {
        let long = format!("{{\"q\":\"{}\"}}", "x".repeat(600));
        let mut m = Message::text(Role::Assistant, "");
        m.content = Some(Content::Blocks(vec![
            Block::Text { text: "Looking.".into(), extra: Vec::new() },
            Block::Thinking { thinking: "secret".into(), signature: None, extra: Vec::new() },
            Block::ToolUse { id: "t1".into(), name: "grep".into(), input: RawJson(long), extra: Vec::new() },
        ]));
        let out = render_message(&m);
        assert!(out.starts_with("[assistant]: Looking.\n  [tool_call: grep({\"q\":\"xxx"), "{out}");
        assert!(out.ends_with("…)]"), "{out}");
        assert!(!out.contains("secret"));
        let call = out.lines().nth(1).unwrap_or_default();
        assert_eq!(call.chars().count(), "  [tool_call: grep(".len() + TOOL_ARGS_CHARS + "…)]".chars().count());
        let mut r = Message::text(Role::User, "");
        r.content = Some(Content::Blocks(vec![Block::ToolResult {
            tool_use_id: "t1".into(),
            content: Some(Content::Text("3 matches".into())),
            is_error: None,
            extra: Vec::new(),
        }]));
        assert_eq!(render_message(&r), "[tool_result for t1]: 3 matches");
        assert_eq!(cut(&"é".repeat(301), EXCERPT_CHARS).chars().count(), EXCERPT_CHARS + 1);
    }

    #[test]
    fn the_fork_message_names_the_span_after_the_system_prompt() {
        assert!(fork_message(0, 1, "x").contains("the first 1 message following the system prompt"));
        assert!(
            fork_message(2, 5, "x").contains("the 5 messages following the first 2 messages after the system prompt")
        );
        let body =
            append_user_message(br#"{"messages":[{"role":"user","content":"a"}]}"#.to_vec(), "b\"").unwrap_or_default();
        assert_eq!(body, br#"{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b\""}]}"#.to_vec());
        assert!(append_user_message(b"{}".to_vec(), "b").is_none());
    }
}
