//! Prepare: choosing the span to summarize, and the built-in deterministic extractive
//! summarizer (the embedded default; an LLM summarizer is a host-side effect).

use crate::config::{ratio_of, SummarizerKind};
use crate::event::EditKind;
use crate::message::{Block, Content, Message};
use crate::state::State;
use crate::view::thousands;

/// Characters of a human message kept verbatim by the extractive summarizer.
pub const HUMAN_CHARS: usize = 300;
/// Characters of assistant text kept.
pub const ASSISTANT_CHARS: usize = 200;
/// Characters of a tool input or a tool result's first line kept.
pub const TOOL_CHARS: usize = 100;

/// A span to summarize: the engine's request to the host (an effect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryJob {
    /// First seq (= `compacted_prefix_messages` when the job was made).
    pub from: u64,
    /// One past the last seq.
    pub to: u64,
    /// Edits in force on the span when the job was made; a job whose span was edited since is
    /// discarded.
    pub edits: Vec<(u64, Option<EditKind>)>,
    /// Estimated tokens of the span.
    pub span_tokens: u64,
}

/// The next span to prepare, if the meter is over the soft threshold: the oldest unprepared
/// messages, cut at the start of a human turn (so whole turns and whole tool pairs go
/// together), outside the protected recent window and before the last human message, long
/// enough to bring the view down to the target once flushed.
pub fn next_job(state: &State) -> Option<SummaryJob> {
    let config = &state.info()?.config;
    if config.summarizer == SummarizerKind::None {
        return None;
    }
    let metered = state.metered_tokens(state.view_tokens());
    if metered < config.prepare_tokens() {
        return None;
    }
    let count = state.message_count();
    let from = state.compacted();
    let boundary = (count - ratio_of(count, config.protected_recent_ratio)).min(state.last_human()?);
    let excess = metered.saturating_sub(config.target_tokens());
    let mut acc = 0u64;
    let mut best = None;
    for p in from..boundary {
        acc += u64::from(state.entry(p)?.tokens);
        let cut = p + 1;
        let starts_turn = state.entry(cut).is_some_and(|e| e.message.is_human());
        if starts_turn && state.span_pairs_ok(from, cut).is_ok() {
            best = Some((cut, acc));
            if acc >= excess {
                break;
            }
        }
    }
    let (to, span_tokens) = best?;
    let edits = (from..to).filter_map(|s| Some((s, state.entry(s)?.edit.as_ref().map(|e| e.kind)))).collect();
    Some(SummaryJob { from, to, edits, span_tokens })
}

/// Whether a job still describes the state (same start, span not edited since).
pub fn still_valid(state: &State, job: &SummaryJob) -> Result<(), String> {
    if job.from != state.compacted() {
        return Err(format!(
            "the span starts at {} but compacted_prefix_messages is now {}",
            job.from,
            state.compacted()
        ));
    }
    for (seq, kind) in &job.edits {
        let now = state.entry(*seq).and_then(|e| e.edit.as_ref().map(|e| e.kind));
        if now != *kind {
            return Err(format!("seq {seq} was edited after the job was made"));
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
                let name = state.call_seq(tool_use_id).and_then(|c| state.entry(c)).and_then(|c| {
                    c.message.blocks().iter().find_map(|b| match b {
                        Block::ToolUse { id, name, .. } if id == tool_use_id => Some(name.clone()),
                        _ => None,
                    })
                });
                let err = if *is_error == Some(true) { " (error)" } else { "" };
                parts.push(format!(
                    "{} returned {} chars{err}: {}",
                    name.unwrap_or_else(|| "tool".into()),
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
/// what was said, the tools called and what they returned. Deterministic.
pub fn extractive(state: &State, job: &SummaryJob) -> String {
    let mut out = format!(
        "Extractive summary of messages {}–{} ({} messages, ~{} tokens):",
        job.from,
        job.to.saturating_sub(1),
        job.to - job.from,
        thousands(job.span_tokens)
    );
    for seq in job.from..job.to {
        let Some(e) = state.entry(seq) else { continue };
        if e.message.role.is_system() || e.message.is_pinned() || Some(seq) == state.first_human() {
            continue; // kept verbatim in the view anyway
        }
        out.push('\n');
        out.push_str(&describe(state, seq, &e.message));
    }
    out
}
