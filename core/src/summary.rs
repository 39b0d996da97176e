//! Prepare: choosing the span to summarize, and the built-in deterministic extractive
//! summarizer (the embedded default; an LLM summarizer is a host-side effect).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::config::{ratio_of, Config, SummarizerKind};
use crate::event::{EditKind, SummaryPrepared};
use crate::message::{Block, Content, Message};
use crate::state::tools::Link;
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
            _ => None,
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

/// The oldest unprepared messages, cut at the start of a human turn or after a complete tool
/// exchange (an assistant's calls with all their results, so no tool pair is split and a session
/// of one instruction and thousands of tool calls is summarized as it goes), outside the
/// protected recent window of the view and before the last human message (unless a flush keeps
/// that one verbatim anyway, as it does the first), long enough to bring the view down to the
/// target once flushed (counting what prepared summaries not yet flushed will already free).
fn message_job(state: &State, config: &Config) -> Option<SummaryJob> {
    let metered = state.metered_tokens(state.view_tokens());
    if metered < config.prepare_tokens() {
        return None;
    }
    let count = state.message_count();
    let from = state.compacted();
    let last_human = state.last_human()?;
    let pending = pending_savings(state, config);
    let excess = metered.saturating_sub(config.target_tokens()).saturating_sub(pending);
    // Spans end after any tool exchange, so a span could be two messages long: each summary
    // costs its header and a flush (a prefix rewrite). A span frees at least half the gap
    // between the soft threshold and the target, and a remainder smaller than that waits while
    // a prepared span is pending.
    let least = (config.prepare_tokens().saturating_sub(config.target_tokens()) / 2).max(1);
    if excess == 0 || (pending > 0 && excess < least) {
        return None;
    }
    let excess = excess.max(least);
    // The recent window is a share of the view, as in the ladder (a share of the whole session
    // would keep a growing tail out of reach of summaries): of the view as the span leaves it.
    // A share of today's view shrinks with each flush and lets the next span reach further, so
    // a view the window holds over its limit (a large recent tool result) would be rewritten
    // once per step, the large result with it, instead of once.
    let window = RecentWindow::new(state, config.protected_recent_ratio);
    // Past today's window, never past what the model was last sent: a message appended since
    // (a tool result the model has not read yet) is summarized only after it was served whole.
    let today = window.start_today();
    let served = served_end(state).filter(|_| config.window_after_flush()).unwrap_or(0);
    let allowed = |cut: u64| cut <= today || (cut <= served && window.outside(cut));
    // A flush would hide the last human message (the request being worked on) unless it is kept
    // verbatim: only then may a span run past it.
    let boundary = if state.kept_through_flush(last_human) { count } else { last_human };
    let best = span_end(state, from, boundary, excess, allowed)?;
    let (to, span_tokens) = best?;
    state.span_pairs_ok(from, to).ok()?;
    let edits = (from..to).filter_map(|s| Some((s, state.entry(s)?.edit.map(|e| e.kind)))).collect();
    Some(SummaryJob { from, to, edits, span_tokens, condense: Vec::new(), max_tokens: None })
}

/// The protected recent window of the view a flush up to a cut would leave.
struct RecentWindow {
    /// The messages of the view, by seq.
    live: Vec<u64>,
    /// `kept[i]`: how many of `live[..i]` a flush keeps verbatim.
    kept: Vec<usize>,
    ratio: f64,
    count: u64,
}

impl RecentWindow {
    fn new(state: &State, ratio: f64) -> Self {
        let live: Vec<u64> = state.view_message_seqs().collect();
        let mut kept = Vec::with_capacity(live.len() + 1);
        kept.push(0);
        let mut n = 0;
        for &seq in &live {
            n += usize::from(state.kept_through_flush(seq));
            kept.push(n);
        }
        RecentWindow { live, kept, ratio, count: state.message_count() }
    }

    /// The first message of the recent window of the view as it is.
    fn start_today(&self) -> u64 {
        let n = ratio_of(self.live.len() as u64, self.ratio) as usize;
        self.live.get(self.live.len() - n).copied().unwrap_or(self.count)
    }

    /// Does a span ending at `cut` stay out of the recent window of the view it leaves (the
    /// messages from `cut` on, and those before it a flush keeps verbatim)?
    fn outside(&self, cut: u64) -> bool {
        let at = self.live.partition_point(|&s| s < cut);
        let after = self.live.len() - at;
        let left = after + self.kept.get(at).copied().unwrap_or(0);
        let n = ratio_of(left as u64, self.ratio) as usize;
        match n {
            0 => cut <= self.count,
            // The window's first message, counted from the end of the view.
            n if n <= after => self.live.get(self.live.len() - n).is_some_and(|&start| cut <= start),
            // The window reaches back past the cut into the messages kept verbatim.
            _ => false,
        }
    }
}

/// One past the last message of the last served view, while nothing but appends happened
/// since (then that view is the current one's first items); `None` otherwise.
fn served_end(state: &State) -> Option<u64> {
    let last = state.last_served()?;
    if !state.prefix_stable_since_last_call() {
        return None;
    }
    let n = usize::try_from(last.view_messages).ok()?;
    Some(state.item_end(state.view().get(..n)?.last()?))
}

/// The span from `from` ending at a whole cut before `boundary` that `allowed` accepts: the
/// first that frees `excess` tokens, else the longest; with the tokens it frees.
fn span_end(
    state: &State,
    from: u64,
    boundary: u64,
    excess: u64,
    allowed: impl Fn(u64) -> bool,
) -> Option<Option<(u64, u64)>> {
    let mut acc = 0u64;
    let mut best = None;
    // Tool pairs the span has opened and not closed yet: the latest result they wait for. A cut
    // is whole when every call made inside the span is answered inside it.
    let mut open_until = 0u64;
    for p in from..boundary {
        let entry = state.entry(p)?;
        // Messages a flush keeps verbatim (system, pinned, first human) free nothing.
        if !state.kept_through_flush(p) {
            acc += u64::from(entry.tokens);
        }
        for link in state.tool_links(p) {
            match link {
                Link::Call(pair) => match pair.result() {
                    Some(r) => open_until = open_until.max(r),
                    // An unanswered call: no span may end after it.
                    None => open_until = u64::MAX,
                },
                // A result whose call is before the span: the span can never be whole (a
                // log whose earlier span split a pair); the check below refuses it.
                Link::Result(pair) if pair.call() < from => open_until = u64::MAX,
                Link::Result(_) => {}
            }
        }
        let cut = p + 1;
        // A provider's compaction ends every span that holds something before it: the provider
        // drops what precedes it, so a summary placed before it must not hold what follows it.
        // (A span that starts with it puts its summary after it: it is kept verbatim.)
        if acc > 0 && state.shown(p).is_some_and(|m| m.provider_compaction()) {
            if open_until < cut && allowed(cut) {
                best = Some((cut, acc));
            }
            break;
        }
        let next = state.entry(cut);
        let starts_turn = next.is_some_and(|e| e.is_human());
        // After a complete exchange: the message is a result and nothing opened is pending.
        let ends_exchange = entry.is_tool_result() && open_until < cut && !next.is_some_and(|e| e.is_tool_result());
        if (starts_turn || ends_exchange) && acc > 0 && open_until < cut && allowed(cut) {
            best = Some((cut, acc));
            if acc >= excess {
                break;
            }
        }
    }
    Some(best)
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
        .filter(|it| match it.item {
            Item::Message(seq) => !state.kept_through_flush(seq),
            // A placeholder in the flushed range goes with the messages it stands for.
            Item::Placeholder { .. } => true,
            Item::Summary(_) => false,
        })
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
/// How many of the oldest `current` summaries lie on one side of every provider compaction in
/// the view (none of them covers a message before one and another after it).
fn within_one_side(state: &State, current: &[(u32, u64)]) -> usize {
    let compactions = state.provider_compactions();
    let Some(first) = current.first().and_then(|(i, _)| state.summaries().get(*i as usize)) else { return 0 };
    let wall = compactions.iter().copied().find(|&c| c >= first.from);
    match wall {
        None => current.len(),
        Some(c) => current
            .iter()
            .take_while(|(i, _)| state.summaries().get(*i as usize).is_some_and(|s| s.to <= c + 1))
            .count(),
    }
}

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
        n = 2;
    }
    // Never across a provider's compaction (a condensed summary sits where its first did).
    let n = n.min(within_one_side(state, current));
    if n < 2 {
        return None;
    }
    let chosen = current.get(..n)?;
    let taken: u64 = chosen.iter().map(|(_, t)| t).sum();
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

/// Why a summary job no longer describes the state (recorded as the reason of a stale
/// `SummaryFailed` or a discarded summary).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StaleJob {
    /// The summaries a condense job named are no longer the oldest current ones.
    #[error("the summaries to condense {condense:?} are no longer the oldest current ones {current:?}")]
    Condensed {
        /// What the job condenses.
        condense: Vec<u32>,
        /// The oldest current summaries now (as many as the job names).
        current: Vec<u32>,
    },
    /// Another summary moved the compacted prefix past the job's start.
    #[error("the span starts at {from} but compacted_prefix_messages is now {compacted}")]
    Moved {
        /// The job's first message.
        from: u64,
        /// `compacted_prefix_messages` now.
        compacted: u64,
    },
    /// A message of the span was restored since (a ladder edit leaves the job good: its flush
    /// hides the whole span anyway).
    #[error("seq {0} was restored after the job was made")]
    Restored(u64),
}

/// Whether a job still describes the state (same start, span not edited since; for a condense
/// job, the same summaries are still the oldest current ones).
pub fn still_valid(state: &State, job: &SummaryJob) -> Result<(), StaleJob> {
    if job.is_condense() {
        let current = state.summary_ledger().current();
        if !current.starts_with(&job.condense) {
            return Err(StaleJob::Condensed {
                condense: job.condense.clone(),
                current: current.get(..job.condense.len().min(current.len())).unwrap_or_default().to_vec(),
            });
        }
        return Ok(());
    }
    if job.from != state.compacted() {
        return Err(StaleJob::Moved { from: job.from, compacted: state.compacted() });
    }
    // A ladder edit of the span since (a removal, a truncation, a stub) leaves the summary
    // good: it was written from the messages as appended, and its flush hides the whole span
    // anyway. A restore does not: someone wanted that message back in the view as it was.
    for (seq, kind) in &job.edits {
        let now = state.entry(*seq).and_then(|e| e.edit.map(|e| e.kind));
        if kind.is_some() && now.is_none() {
            return Err(StaleJob::Restored(*seq));
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

/// What a tool result says, in one short phrase: its size, whether it is an error, its first line.
fn outcome(body: &str, is_error: bool) -> String {
    let err = if is_error { " (error)" } else { "" };
    format!(
        "{} chars{err}: {}",
        thousands(body.chars().count() as u64),
        one_line(body.lines().find(|l| !l.trim().is_empty()).unwrap_or(""), TOOL_CHARS)
    )
}

/// The outcome of every call answered in `span`, by call id.
fn outcomes(span: &[Arc<Message>]) -> BTreeMap<&str, String> {
    let mut out = BTreeMap::new();
    for m in span {
        for b in m.blocks() {
            if let Block::ToolResult { tool_use_id, content, is_error, .. } = b {
                out.insert(tool_use_id.as_str(), outcome(&content_text(content), *is_error == Some(true)));
            }
        }
        if let (crate::message::Role::Tool, Some(id)) = (m.role, m.tool_call_id.as_deref()) {
            out.insert(id, outcome(&content_text(&m.content), false));
        }
    }
    out
}

/// One line for a message. A call answered within the span is described with its outcome
/// (`read_file {"path":"a.rs"} → 8,000 chars: …`), so a tool exchange takes one line and its
/// result message none; `None` for a result message whose calls are all described so.
fn describe(
    state: &State,
    seq: u64,
    m: &Message,
    answered: &BTreeMap<&str, String>,
    called: &BTreeSet<&str>,
) -> Option<String> {
    let role = m.role.as_str();
    let mut parts = Vec::new();
    let text = m.plain_text();
    if !text.trim().is_empty() && m.role != crate::message::Role::Tool {
        let max = if m.is_human() { HUMAN_CHARS } else { ASSISTANT_CHARS };
        parts.push(one_line(&text, max));
    }
    let call = |name: &str, input: &str, id: &str| match answered.get(id) {
        Some(o) => format!("{name} {} → {o}", one_line(input, TOOL_CHARS)),
        None => format!("called {name} {}", one_line(input, TOOL_CHARS)),
    };
    let mut results = 0usize;
    for b in m.blocks() {
        match b {
            Block::ToolUse { id, name, input, .. } => parts.push(call(name, input.as_str(), id)),
            Block::ToolResult { tool_use_id, content, is_error, .. } => {
                results += 1;
                if called.contains(tool_use_id.as_str()) {
                    continue;
                }
                let name = state.tool_name(tool_use_id).unwrap_or("tool");
                parts.push(format!("{name} returned {}", outcome(&content_text(content), *is_error == Some(true))));
            }
            Block::Media { kind, .. } => parts.push(format!("[{}]", kind.as_str())),
            Block::ImageUrl { .. } => parts.push("[image]".into()),
            _ => {}
        }
    }
    for c in m.tool_calls.iter().flatten() {
        parts.push(call(&c.name, &c.arguments, &c.id));
    }
    if m.role == crate::message::Role::Tool {
        results += 1;
        match m.tool_call_id.as_deref() {
            Some(id) if called.contains(id) => {}
            id => {
                let name = id.and_then(|id| state.tool_name(id)).unwrap_or("tool");
                parts.push(format!("{name} returned {}", outcome(&content_text(&m.content), false)));
            }
        }
    }
    if parts.is_empty() && results > 0 {
        return None;
    }
    Some(format!("- [{seq}] {role}: {}", parts.join(" | ")))
}

/// The built-in extractive summary of `[from, to)`: one line per message with the beginning of
/// what was said, and one per tool exchange (the tool, its arguments, what it returned or the
/// error: the call's line carries its result's outcome). Deterministic. `span` holds the
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
    let answered = outcomes(span);
    let called: BTreeSet<&str> =
        span.iter().flat_map(|m| m.call_ids()).filter(|id| answered.contains_key(id)).collect();
    for (seq, m) in (job.from..job.to).zip(span) {
        if m.role.is_system() || state.entry(seq).is_some_and(|e| e.is_pinned()) || Some(seq) == state.first_human() {
            continue; // kept verbatim in the view anyway
        }
        if let Some(line) = describe(state, seq, m, &answered, &called) {
            out.push('\n');
            out.push_str(&line);
        }
    }
    out
}

/// What a line of a summary tells, for condensing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tells {
    /// The user's own words.
    Request,
    /// A tool exchange that failed.
    Error,
    /// A tool exchange (what was done and found).
    Work,
    /// Anything else the agent said.
    Other,
}

/// A summary line (`- [seq] role: part | part`) as a condensed summary keeps it: the user's
/// words as they were, tool work as its exchanges only (`- [seq] read_file {…} → 1,234 chars:
/// first line`), shortened to [`CONDENSED_LINE_CHARS`].
fn condensed_line(state: &State, line: &str) -> Option<(u64, Tells, String)> {
    let (seq, rest) = line.strip_prefix("- [").and_then(|l| l.split_once(']'))?;
    let seq = seq.parse::<u64>().ok()?;
    if state.entry(seq).is_some_and(|e| e.is_human()) {
        return Some((seq, Tells::Request, one_line(line, CONDENSED_LINE_CHARS)));
    }
    // A message's line names its role (`- [seq] assistant: …`); a line kept by an earlier
    // condensing does not (`- [seq] read_file … → …`).
    let rest = rest.trim_start();
    let body = ["user: ", "assistant: ", "tool: ", "system: ", "developer: "]
        .iter()
        .find_map(|role| rest.strip_prefix(role))
        .unwrap_or(rest);
    let work: Vec<&str> = body.split(" | ").filter(|p| p.contains(" → ") || p.contains(" returned ")).collect();
    if work.is_empty() {
        return Some((seq, Tells::Other, one_line(line, CONDENSED_LINE_CHARS)));
    }
    let tells = if work.iter().any(|p| p.contains("(error)")) { Tells::Error } else { Tells::Work };
    Some((seq, tells, one_line(&format!("- [{seq}] {}", work.join(" | ")), CONDENSED_LINE_CHARS)))
}

/// The built-in condensed summary of earlier summaries, bounded by `job.max_tokens` whatever it
/// condenses: the user's requests (newest first), then failed tool exchanges (newest first),
/// then the other tool work, taken from both ends (the oldest findings and the latest state),
/// shown in log order, and the latest activity. Works on the summaries' own lines (`- [seq]
/// role: …`), so it is a summary of summaries, not a re-read of the messages, and a condensed
/// summary condensed again keeps the same kinds of lines. Deterministic.
pub fn condense(state: &State, job: &SummaryJob) -> String {
    let max = job.max_tokens.map_or(usize::MAX, |m| m as usize);
    let covered = job.condense.iter().filter_map(|&i| state.summaries().get(i as usize));
    let messages: u64 = covered.clone().map(|s| s.to - s.from).sum();
    let header = format!(
        "Condensed summary of messages {}–{} ({} messages in {} summaries; the user's requests, errors and tool work kept):",
        job.from,
        job.to.saturating_sub(1),
        thousands(messages),
        job.condense.len()
    );
    let mut lines: Vec<(u64, Tells, String)> = Vec::new();
    let mut latest = None;
    for line in covered.flat_map(|s| s.text.lines()) {
        if let Some(l) = line.strip_prefix("Latest: ") {
            latest = Some(l.to_owned());
            continue;
        }
        let Some(entry) = condensed_line(state, line) else { continue };
        if entry.1 != Tells::Request {
            latest = Some(entry.2.trim_start_matches("- ").to_owned());
        }
        lines.push(entry);
    }
    // Which lines fit (in characters: tokens are chars / 4), by priority.
    let limit = max.saturating_mul(4);
    let mut used = header.chars().count();
    if let Some(l) = &latest {
        used += 1 + "Latest: ".len() + l.chars().count();
    }
    let mut keep = vec![false; lines.len()];
    let take = |i: usize, until: usize, used: &mut usize, keep: &mut Vec<bool>| -> bool {
        let n = 1 + lines.get(i).map_or(0, |l| l.2.chars().count());
        if *used + n > until.min(limit) {
            return false;
        }
        *used += n;
        if let Some(k) = keep.get_mut(i) {
            *k = true;
        }
        true
    };
    // Requests may fill half the room, errors a quarter more: tool work keeps the rest, so the
    // session's findings are not crowded out by a long run of failures.
    for (tells, until) in [(Tells::Request, limit / 2), (Tells::Error, limit / 4 * 3)] {
        let idx: Vec<usize> = (0..lines.len()).rev().filter(|&i| lines.get(i).is_some_and(|l| l.1 == tells)).collect();
        for i in idx {
            if !take(i, until.max(used), &mut used, &mut keep) {
                break;
            }
        }
    }
    // Tool work from both ends: what was found first, and where the work stands.
    let work: Vec<usize> = (0..lines.len()).filter(|&i| lines.get(i).is_some_and(|l| l.1 == Tells::Work)).collect();
    let (mut lo, mut hi) = (0usize, work.len());
    let mut from_start = true;
    while lo < hi {
        let i = if from_start { work.get(lo).copied() } else { work.get(hi - 1).copied() };
        let Some(i) = i else { break };
        if !take(i, limit, &mut used, &mut keep) {
            break;
        }
        if from_start {
            lo += 1;
        } else {
            hi -= 1;
        }
        from_start = !from_start;
    }
    let omitted = keep.iter().filter(|k| !**k).count();
    let mut out = header;
    for (line, _) in lines.iter().zip(&keep).filter(|(_, k)| **k) {
        out.push('\n');
        out.push_str(&line.2);
    }
    if omitted > 0 {
        let note = format!("\n({} earlier lines omitted)", thousands(omitted as u64));
        if out.chars().count() + note.chars().count() <= limit {
            out.push_str(&note);
        }
    }
    if let Some(l) = latest {
        out.push_str("\nLatest: ");
        out.push_str(&l);
    }
    if text_tokens(&out) as usize > max {
        out = out.chars().take(limit).collect();
    }
    out
}
