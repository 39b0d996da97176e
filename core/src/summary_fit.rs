//! Summary jobs fitted to the summarizer (pure): the answer's budget — stated in the prompt and
//! the source of the request's `max_tokens` — and a span cut short, at a turn boundary, so that
//! the rendered standalone request fits the summarizer's context with room for that answer.
//!
//! A llama.cpp server with an 8,192-token context answered every request of a 45,896-token job
//! with the same 400: a job is only worth sending when it fits. A span is cut at the last turn
//! boundary whose rendering fits; when even its first turn does not, that turn's rendering is
//! cut in the middle (named in the text), since a summary of most of a turn beats none.

use std::sync::Arc;

use crate::message::Message;
use crate::state::State;
use crate::summary::SummaryJob;
use crate::summary_prompt::{render_message, SummaryCall, DEFAULT_MAX_TOKENS, STANDALONE_PROMPT};
use crate::tokens::text_tokens;

/// Tokens a request takes besides its texts (roles, JSON framing, a chat template).
pub const REQUEST_OVERHEAD_TOKENS: u64 = 64;
/// A span's summary may take a quarter of the span...
pub const SPAN_SHARE: u64 = 4;
/// ...but at least this many tokens (a heading per section needs some room)...
pub const MIN_ANSWER_TOKENS: u64 = 96;
/// ...and at most this many (a summary is a page, not a chapter).
pub const MAX_ANSWER_TOKENS: u64 = 1_024;
/// ...and never a request's `max_tokens` of less than this.
pub const MIN_MAX_TOKENS: u64 = 16;

/// The summary's budget in the engine's tokens: a condense job's limit, else a quarter of the
/// span (at least [`MIN_ANSWER_TOKENS`], at most [`MAX_ANSWER_TOKENS`]), always below the
/// span itself (a summary not smaller than its span is discarded anyway).
pub fn answer_budget(job: &SummaryJob) -> u64 {
    if let Some(max) = job.max_tokens {
        return u64::from(max).max(1);
    }
    let share = (job.span_tokens / SPAN_SHARE).clamp(MIN_ANSWER_TOKENS, MAX_ANSWER_TOKENS);
    share.min(job.span_tokens.saturating_mul(3) / 4).max(1)
}

/// The request's `max_tokens`: the override, or the budget plus half again (the model's
/// tokenizer is not our chars/4 estimate, and a summary that ends a little over its budget is
/// better judged by the shrink and limit guards than cut), capped by the room the prompt
/// leaves in the summarizer's context; never over [`DEFAULT_MAX_TOKENS`] unless overridden.
pub fn max_tokens(job: &SummaryJob, call: &SummaryCall, prompt_tokens: u64) -> u64 {
    let wanted = call.max_tokens.unwrap_or_else(|| derived(job));
    match call.context {
        Some(context) => {
            wanted.min(context.saturating_sub(prompt_tokens + REQUEST_OVERHEAD_TOKENS)).max(MIN_MAX_TOKENS)
        }
        None => wanted,
    }
}

/// The derived `max_tokens`: the budget plus half again and a few.
fn derived(job: &SummaryJob) -> u64 {
    let budget = answer_budget(job);
    (budget + budget / 2 + MIN_MAX_TOKENS).min(DEFAULT_MAX_TOKENS)
}

/// The sentence stating the answer's budget and the span's size (in the standalone user
/// message and the fork's appended message).
pub fn limit_sentence(job: &SummaryJob) -> String {
    let budget = answer_budget(job);
    let words = budget * 3 / 4;
    if job.is_condense() {
        format!(
            "LIMIT: the {} summaries take about {} tokens; condense them into one summary of at most {budget} tokens \
             (about {words} words): a longer one is discarded.",
            job.condense.len(),
            job.span_tokens
        )
    } else {
        format!(
            "LIMIT: the span takes about {} tokens; write at most {budget} tokens (about {words} words).",
            job.span_tokens
        )
    }
}

/// A job as it will be sent standalone: possibly a shorter span, and the rendered text of what
/// it summarizes (cut in the middle when even the shortest span does not fit).
#[derive(Debug, Clone)]
pub(crate) struct Fitted {
    pub job: SummaryJob,
    /// The text to summarize.
    pub text: String,
}

/// The text of the span as the standalone request renders it, one entry per message (empty
/// for what a flush keeps verbatim: it is not summarized).
fn rendered(state: &State, job: &SummaryJob, span: &[Arc<Message>]) -> Vec<String> {
    span.iter()
        .enumerate()
        .map(|(i, m)| if state.kept_through_flush(job.from + i as u64) { String::new() } else { render_message(m) })
        .collect()
}

fn join(parts: &[String]) -> String {
    parts.iter().filter(|s| !s.is_empty()).cloned().collect::<Vec<_>>().join("\n\n")
}

/// Tokens the standalone prompt and the limit sentence take, plus the overhead.
fn fixed_tokens(job: &SummaryJob) -> u64 {
    u64::from(text_tokens(STANDALONE_PROMPT)) + u64::from(text_tokens(&limit_sentence(job))) + REQUEST_OVERHEAD_TOKENS
}

/// Tokens the span's text may take so that the request and its answer fit `context`.
fn room(job: &SummaryJob, call: &SummaryCall, context: u64) -> u64 {
    let answer = call.max_tokens.unwrap_or_else(|| derived(job));
    context.saturating_sub(fixed_tokens(job) + answer)
}

/// Fits a span job (`span`: its messages as appended) or a condense job (`condensed`: the text
/// of the summaries it condenses) to `call.context`. Without a context, the job as it is.
pub(crate) fn fit(
    state: &State,
    job: &SummaryJob,
    span: &[Arc<Message>],
    condensed: Option<String>,
    call: &SummaryCall,
) -> Fitted {
    if let Some(text) = condensed {
        let text = match call.context {
            Some(context) => cut_middle(&text, room(job, call, context), context),
            None => text,
        };
        return Fitted { job: job.clone(), text };
    }
    let parts = rendered(state, job, span);
    let Some(context) = call.context else {
        return Fitted { job: job.clone(), text: join(&parts) };
    };
    let room = room(job, call, context);
    // The longest prefix ending at a turn boundary (or the span's end) whose text fits.
    let mut acc = 0u64;
    let mut first_cut = None;
    let mut best = None;
    for (i, part) in parts.iter().enumerate() {
        if !part.is_empty() {
            acc += u64::from(text_tokens(part)) + 1;
        }
        let cut = job.from + i as u64 + 1;
        let boundary = cut == job.to
            || (state.entry(cut).is_some_and(|e| e.is_human()) && state.span_pairs_ok(job.from, cut).is_ok());
        if !boundary || acc == 0 {
            continue;
        }
        first_cut.get_or_insert(i + 1);
        if acc <= room {
            best = Some(i + 1);
        } else {
            break;
        }
    }
    let Some(n) = best.or(first_cut) else {
        return Fitted { job: job.clone(), text: join(&parts) };
    };
    let to = job.from + n as u64;
    let shorter = SummaryJob {
        from: job.from,
        to,
        edits: job.edits.iter().filter(|(s, _)| *s < to).cloned().collect(),
        span_tokens: (job.from..to)
            .filter(|&s| !state.kept_through_flush(s))
            .filter_map(|s| state.entry(s))
            .map(|e| u64::from(e.tokens))
            .sum(),
        condense: Vec::new(),
        max_tokens: job.max_tokens,
    };
    let text = join(parts.get(..n).unwrap_or_default());
    let text = cut_middle(&text, self::room(&shorter, call, context), context);
    Fitted { job: if to == job.to { job.clone() } else { shorter }, text }
}

/// `text` within `tokens` (chars/4): its head and tail, the middle replaced by a line saying
/// how much was left out and why.
fn cut_middle(text: &str, tokens: u64, context: u64) -> String {
    let chars = text.chars().count();
    let keep = usize::try_from(tokens.saturating_mul(4)).unwrap_or(usize::MAX).saturating_sub(160);
    if chars <= keep.saturating_add(160) {
        return text.to_owned();
    }
    let head: String = text.chars().take(keep * 2 / 3).collect();
    let tail: String = text.chars().skip(chars - (keep - keep * 2 / 3)).collect();
    format!(
        "{head}\n\n[… {} characters left out here: the summarizer's context holds {context} tokens …]\n\n{tail}",
        chars - keep
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(span_tokens: u64, max: Option<u32>) -> SummaryJob {
        SummaryJob { from: 0, to: 10, edits: Vec::new(), span_tokens, condense: Vec::new(), max_tokens: max }
    }

    #[test]
    fn the_budget_is_a_quarter_of_the_span_within_bounds_or_the_condense_limit() {
        assert_eq!(answer_budget(&job(947, None)), 236);
        assert_eq!(answer_budget(&job(100, None)), 75, "below the span");
        assert_eq!(answer_budget(&job(100_000, None)), MAX_ANSWER_TOKENS);
        assert_eq!(max_tokens(&job(100_000, None), &SummaryCall::default(), 0), 1_024 + 512 + 16);
        assert_eq!(answer_budget(&job(400, Some(78))), 78);
    }

    #[test]
    fn max_tokens_follows_the_budget_the_override_and_the_context() {
        let call = SummaryCall::default();
        assert_eq!(max_tokens(&job(947, None), &call, 1_000), 236 + 118 + 16);
        assert_eq!(max_tokens(&job(400, Some(78)), &call, 500), 78 + 39 + 16);
        let fixed = SummaryCall { max_tokens: Some(999), ..SummaryCall::default() };
        assert_eq!(max_tokens(&job(947, None), &fixed, 1_000), 999);
        let small = SummaryCall { context: Some(1_200), ..SummaryCall::default() };
        assert_eq!(max_tokens(&job(947, None), &small, 1_000), 1_200 - 1_000 - REQUEST_OVERHEAD_TOKENS);
    }

    #[test]
    fn a_cut_text_fits_and_says_so() {
        let text = "word ".repeat(10_000);
        let out = cut_middle(&text, 1_000, 2_048);
        assert!(u64::from(text_tokens(&out)) <= 1_000, "{}", text_tokens(&out));
        assert!(out.contains("left out here: the summarizer's context holds 2048 tokens"));
        assert_eq!(cut_middle("short", 1_000, 2_048), "short");
    }
}
