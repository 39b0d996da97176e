//! Prepare: choosing the span to summarize, and the built-in deterministic extractive
//! summarizer (the embedded default; an LLM summarizer is a host-side effect).

use std::sync::Arc;

use crate::config::{ratio_of, Config, SummarizerKind};
use crate::event::{EditKind, SummaryPrepared};
use crate::message::{Block, Content, Message};
use crate::state::{Item, State};
use crate::tokens::text_tokens;
use crate::view::{summary_message, thousands};

/// Characters of a human message kept verbatim by the extractive summarizer.
pub const HUMAN_CHARS: usize = 300;
/// Characters of assistant text kept.
pub const ASSISTANT_CHARS: usize = 200;
/// Characters of a tool input or a tool result's first line kept.
pub const TOOL_CHARS: usize = 100;

/// Characters of one line of a condensed summary.
pub const CONDENSED_LINE_CHARS: usize = 160;

/// A span to summarize: the engine's request to the host (an effect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryJob {
    /// First seq (= `compacted_prefix_messages` when the job was made, or the start of the
    /// oldest summary to condense).
    pub from: u64,
    /// One past the last seq.
    pub to: u64,
    /// Edits in force on the span when the job was made; a job with a message restored since is
    /// discarded (ladder edits since leave it good).
    pub edits: Vec<(u64, Option<EditKind>)>,
    /// Estimated tokens of the span (for a condense job: of the summaries it condenses, as
    /// they render in the view).
    pub span_tokens: u64,
    /// The summaries to condense into one (indices in prepare order, by position); empty for a
    /// span of messages.
    pub condense: Vec<u32>,
    /// A condensed summary longer than this is discarded: it must be much smaller than its
    /// inputs for the summaries to stay within their share whatever the session's length.
    pub max_tokens: Option<u32>,
}

impl SummaryJob {
    /// Does this job condense earlier summaries (rather than summarize messages)?
    pub fn is_condense(&self) -> bool {
        !self.condense.is_empty()
    }
}

/// The next job, if any. Condensing comes first when the summaries (in the view or about to
/// be) are over their share of the target; then a span of messages when the meter is over the
/// soft threshold; then condensing again once the summaries fill three quarters of their
/// share, so a host that runs one job per call condenses before the share is reached.
pub fn next_job(state: &State) -> Option<SummaryJob> {
    let config = &state.info()?.config;
    if config.summarizer == SummarizerKind::None {
        return None;
    }
    let current = current_summaries(state, config);
    let cap = config.summary_cap_tokens();
    condense_job(state, config, &current, cap)
        .or_else(|| message_job(state, config))
        .or_else(|| condense_job(state, config, &current, cap / 4 * 3))
}

/// The current summaries (shown or pending, neither condensed nor retired), by position, with
/// the tokens each takes in the view.
fn current_summaries(state: &State, config: &Config) -> Vec<(u32, u64)> {
    let shown: std::collections::BTreeMap<u32, u64> = state
        .view()
        .iter()
        .filter_map(|it| match it.item {
            Item::Summary(i) => Some((i, u64::from(it.tokens))),
            Item::Message(_) => None,
        })
        .collect();
    state
        .summary_ledger()
        .current()
        .into_iter()
        .filter_map(|i| {
            let tokens = match shown.get(&i) {
                Some(&t) => t,
                None => summary_tokens(state, config, state.summaries().get(i as usize)?),
            };
            Some((i, tokens))
        })
        .collect()
}

/// The oldest unprepared messages, cut at the start of a human turn (so whole turns and whole
/// tool pairs go together), outside the protected recent window of the view and before the
/// last human message, long enough to bring the view down to the target once flushed
/// (counting what prepared summaries not yet flushed will already free).
fn message_job(state: &State, config: &Config) -> Option<SummaryJob> {
    let metered = state.metered_tokens(state.view_tokens());
    if metered < config.prepare_tokens() {
        return None;
    }
    let count = state.message_count();
    let from = state.compacted();
    // The recent window is a share of the view, as in the ladder: a share of the whole
    // session would keep a growing tail out of reach of summaries.
    let live: Vec<u64> = state
        .view()
        .iter()
        .filter_map(|it| match it.item {
            Item::Message(seq) => Some(seq),
            Item::Summary(_) => None,
        })
        .collect();
    let cut = live.len() - ratio_of(live.len() as u64, config.protected_recent_ratio) as usize;
    let recent = live.get(cut).copied().unwrap_or(count);
    let boundary = recent.min(state.last_human()?);
    let excess = metered.saturating_sub(config.target_tokens()).saturating_sub(pending_savings(state, config));
    if excess == 0 {
        return None;
    }
    let mut acc = 0u64;
    let mut best = None;
    for p in from..boundary {
        // Messages a flush keeps verbatim (system, pinned, first human) free nothing.
        if !state.kept_through_flush(p) {
            acc += u64::from(state.entry(p)?.tokens);
        }
        let cut = p + 1;
        let starts_turn = state.entry(cut).is_some_and(|e| e.is_human());
        if starts_turn && acc > 0 && state.span_pairs_ok(from, cut).is_ok() {
            best = Some((cut, acc));
            if acc >= excess {
                break;
            }
        }
    }
    let (to, span_tokens) = best?;
    let edits = (from..to).filter_map(|s| Some((s, state.entry(s)?.edit.map(|e| e.kind)))).collect();
    Some(SummaryJob { from, to, edits, span_tokens, condense: Vec::new(), max_tokens: None })
}

/// Tokens the prepared, not yet flushed spans will free once flushed: what they show in the
/// view now minus their summaries.
fn pending_savings(state: &State, config: &Config) -> u64 {
    let (flushed, compacted) = (state.flushed(), state.compacted());
    if compacted <= flushed {
        return 0;
    }
    let view = state.view();
    let start = view.partition_point(|it| it.seq < flushed);
    let end = view.partition_point(|it| it.seq < compacted);
    let shown: u64 = view
        .get(start..end)
        .unwrap_or_default()
        .iter()
        .filter(|it| matches!(it.item, Item::Message(seq) if !state.kept_through_flush(seq)))
        .map(|it| u64::from(it.tokens))
        .sum();
    let summaries: u64 = state
        .summaries()
        .iter()
        .filter(|s| !s.is_condensed() && s.from >= flushed && s.to <= compacted)
        .map(|s| summary_tokens(state, config, s))
        .sum();
    shown.saturating_sub(summaries)
}

/// Tokens a summary takes in the view.
pub fn summary_tokens(state: &State, config: &Config, s: &SummaryPrepared) -> u64 {
    u64::from(config.estimator().message(&summary_message(state, s)))
}

/// When the `current` summaries take more than `threshold` tokens: condense the fewest oldest
/// of them so that the condensed one (at most a quarter of the share) and the rest fill at most
/// half the share, leaving room for the summaries of many later flushes before the next
/// condensing rewrite.
fn condense_job(state: &State, config: &Config, current: &[(u32, u64)], threshold: u64) -> Option<SummaryJob> {
    let cap = config.summary_cap_tokens();
    let total: u64 = current.iter().map(|(_, t)| t).sum();
    if total <= threshold {
        return None;
    }
    let max = (cap / 4).max(1);
    let mut taken = 0u64;
    let mut n = 0;
    for (_, t) in current {
        taken += t;
        n += 1;
        if max + (total - taken) <= cap / 2 {
            break;
        }
    }
    // At least two: every accepted condense job then lowers the number of current summaries,
    // so jobs between two calls always end. Rewriting one summary alone could repeat forever
    // on a tiny budget, where the summary's own wrapping in the view exceeds the share (found
    // by fuzzing at a 300-token budget).
    if n < 2 {
        if current.len() < 2 {
            return None;
        }
        taken += current.get(1)?.1;
        n = 2;
    }
    let chosen = current.get(..n)?;
    // Condensing what is already within the limit would not shrink anything.
    if taken <= max {
        return None;
    }
    let first = state.summaries().get(chosen.first()?.0 as usize)?;
    let last = state.summaries().get(chosen.last()?.0 as usize)?;
    Some(SummaryJob {
        from: first.from,
        to: last.to,
        edits: Vec::new(),
        span_tokens: taken,
        condense: chosen.iter().map(|(i, _)| *i).collect(),
        max_tokens: Some(u32::try_from(max).unwrap_or(u32::MAX)),
    })
}

/// Whether a job still describes the state (same start, span not edited since; for a condense
/// job, the same summaries are still the oldest current ones).
pub fn still_valid(state: &State, job: &SummaryJob) -> Result<(), String> {
    if job.is_condense() {
        let current = state.summary_ledger().current();
        if !current.starts_with(&job.condense) {
            return Err(format!(
                "the summaries to condense {:?} are no longer the oldest current ones {:?}",
                job.condense,
                current.get(..job.condense.len().min(current.len())).unwrap_or_default()
            ));
        }
        return Ok(());
    }
    if job.from != state.compacted() {
        return Err(format!(
            "the span starts at {} but compacted_prefix_messages is now {}",
            job.from,
            state.compacted()
        ));
    }
    // A ladder edit of the span since (a removal, a truncation, a stub) leaves the summary
    // good: it was written from the messages as appended, and its flush hides the whole span
    // anyway. A restore does not: someone wanted that message back in the view as it was.
    for (seq, kind) in &job.edits {
        let now = state.entry(*seq).and_then(|e| e.edit.map(|e| e.kind));
        if kind.is_some() && now.is_none() {
            return Err(format!("seq {seq} was restored after the job was made"));
        }
    }
    Ok(())
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

fn content_text(c: &Option<Content>) -> String {
    match c {
        Some(Content::Text(t)) => t.clone(),
        Some(Content::Blocks(bs)) => bs
            .iter()
            .filter_map(|b| match b {
                Block::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn describe(state: &State, seq: u64, m: &Message) -> String {
    let role = m.role.as_str();
    let mut parts = Vec::new();
    let text = m.plain_text();
    if !text.trim().is_empty() {
        let max = if m.is_human() { HUMAN_CHARS } else { ASSISTANT_CHARS };
        parts.push(one_line(&text, max));
    }
    for b in m.blocks() {
        match b {
            Block::ToolUse { name, input, .. } => {
                parts.push(format!("called {name} {}", one_line(input.as_str(), TOOL_CHARS)))
            }
            Block::ToolResult { tool_use_id, content, is_error, .. } => {
                let body = content_text(content);
                let name = state.tool_name(tool_use_id);
                let err = if *is_error == Some(true) { " (error)" } else { "" };
                parts.push(format!(
                    "{} returned {} chars{err}: {}",
                    name.unwrap_or("tool"),
                    thousands(body.chars().count() as u64),
                    one_line(body.lines().next().unwrap_or(""), TOOL_CHARS)
                ));
            }
            Block::Media { kind, .. } => parts.push(format!("[{}]", kind.as_str())),
            Block::ImageUrl { .. } => parts.push("[image]".into()),
            _ => {}
        }
    }
    for c in m.tool_calls.iter().flatten() {
        parts.push(format!("called {} {}", c.name, one_line(&c.arguments, TOOL_CHARS)));
    }
    if m.role == crate::message::Role::Tool {
        let body = content_text(&m.content);
        parts = vec![format!(
            "returned {} chars: {}",
            thousands(body.chars().count() as u64),
            one_line(body.lines().next().unwrap_or(""), TOOL_CHARS)
        )];
    }
    format!("- [{seq}] {role}: {}", parts.join(" | "))
}

/// The built-in extractive summary of `[from, to)`: one line per message with the beginning of
/// what was said, the tools called and what they returned. Deterministic. `span` holds the
/// messages of the span as appended, in order (`Session::messages`: those out of the view or
/// edited are read back from the log).
pub fn extractive(state: &State, job: &SummaryJob, span: &[Arc<Message>]) -> String {
    let mut out = format!(
        "Extractive summary of messages {}–{} ({} messages, ~{} tokens):",
        job.from,
        job.to.saturating_sub(1),
        job.to - job.from,
        thousands(job.span_tokens)
    );
    for (seq, m) in (job.from..job.to).zip(span) {
        if m.role.is_system() || m.is_pinned() || Some(seq) == state.first_human() {
            continue; // kept verbatim in the view anyway
        }
        out.push('\n');
        out.push_str(&describe(state, seq, m));
    }
    out
}

/// The built-in condensed summary of earlier summaries: their human requests and the latest
/// activity, newest first until `job.max_tokens` is reached (shown in order), so the result is
/// bounded whatever it condenses, and a condensed summary condensed again keeps the most recent
/// requests. Works on the summaries' own lines (`- [seq] role: …`), so it is a summary of
/// summaries, not a re-read of the messages. Deterministic.
pub fn condense(state: &State, job: &SummaryJob) -> String {
    let max = job.max_tokens.map_or(usize::MAX, |m| m as usize);
    let covered = job.condense.iter().filter_map(|&i| state.summaries().get(i as usize));
    let messages: u64 = covered.clone().map(|s| s.to - s.from).sum();
    let header = format!(
        "Condensed summary of messages {}–{} ({} messages in {} summaries; the user's requests, newest kept):",
        job.from,
        job.to.saturating_sub(1),
        thousands(messages),
        job.condense.len()
    );
    let mut requests = Vec::new();
    let mut latest = None;
    for line in covered.flat_map(|s| s.text.lines()) {
        let Some((seq, _)) = line.strip_prefix("- [").and_then(|l| l.split_once(']')) else { continue };
        let Ok(seq) = seq.parse::<u64>() else { continue };
        let short = one_line(line, CONDENSED_LINE_CHARS);
        if state.entry(seq).is_some_and(|e| e.is_human()) {
            requests.push(short);
        } else {
            latest = Some(short);
        }
    }
    // Newest first within the limit (in characters: tokens are chars / 4).
    let limit = max.saturating_mul(4);
    let mut used = header.chars().count();
    let mut kept: Vec<String> = Vec::new();
    if let Some(l) = latest {
        if used + 1 + l.chars().count() <= limit {
            used += 1 + l.chars().count();
            kept.push(format!("Latest: {}", l.trim_start_matches("- ")));
        }
    }
    let mut omitted = 0usize;
    for r in requests.iter().rev() {
        let n = 1 + r.chars().count();
        if omitted == 0 && used + n <= limit {
            used += n;
            kept.push(r.clone());
        } else {
            omitted += 1;
        }
    }
    kept.reverse();
    let mut out = header;
    for l in kept {
        out.push('\n');
        out.push_str(&l);
    }
    if omitted > 0 {
        let note = format!("\n({omitted} earlier requests omitted)");
        if out.chars().count() + note.chars().count() <= limit {
            out.push_str(&note);
        }
    }
    if text_tokens(&out) as usize > max {
        out = out.chars().take(limit).collect();
    }
    out
}
