//! What ctxlog writes in place of what it hides: an edited message (truncated, stubbed, a first
//! message cut to fit), a summary standing for a flushed span, the note listing a message's
//! media, a placeholder for hidden messages no summary covers. Pure functions of a message or
//! of facts the state hands over ([`SpanFacts`], [`Composition`]): the state estimates these
//! renderings and the view writes them, and neither is imported here.

use std::collections::BTreeMap;

use crate::event::{EditKind, SummaryPrepared};
use crate::message::{Block, Content, MediaData, MediaSource, Message, Role};
use crate::numbers::thousands;
use crate::tokens::text_tokens;

/// What a summary says about the messages of its span, answered from the state's per-message
/// facts (its tool index, tokens and media notes), so a summary renders without the bodies of
/// the messages it hides.
pub(crate) trait SpanFacts {
    /// The messages of `[from, to)` that a flush to `to` hides and that carry tool output or
    /// media: the summary lists them as restorable references.
    fn elided(&self, from: u64, to: u64) -> Vec<u64>;
    /// The token estimate of message `seq`, if it exists.
    fn tokens(&self, seq: u64) -> Option<u32>;
    /// The names of the tools whose results `seq` carries, in message order.
    fn result_tool_names(&self, seq: u64) -> Vec<&str>;
    /// How a summary lists the media of `seq` ([`media_note`]).
    fn media_note(&self, seq: u64) -> Option<&str>;
}

/// Characters of a user message shown in its stub.
pub const STUB_PREVIEW_CHARS: u32 = 50;
/// User text at or below this length is never stubbed (a stub would not be smaller).
pub const STUB_MIN_CHARS: usize = 80;

fn truncate_text(text: &str, keep: u32) -> Option<String> {
    let keep = keep as usize;
    if text.chars().count() <= keep {
        return None;
    }
    let head: String = text.chars().take(keep).collect();
    Some(format!(
        "[truncated: ~{} tokens - call tool again if needed] {head}...",
        thousands(u64::from(text_tokens(text)))
    ))
}

fn truncate_content(c: &Content, keep: u32) -> Content {
    match c {
        Content::Text(t) => truncate_text(t, keep).map_or_else(|| c.clone(), Content::Text),
        Content::Blocks(blocks) => {
            // Text parts are joined and cut once; non-text parts (images in a tool result) stay.
            let joined: Vec<&str> = blocks
                .iter()
                .filter_map(|b| match b {
                    Block::Text { text, .. } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            match truncate_text(&joined.join("\n"), keep) {
                None => c.clone(),
                Some(cut) => {
                    let mut out = vec![Block::Text { text: cut, extra: Vec::new() }];
                    out.extend(blocks.iter().filter(|b| !matches!(b, Block::Text { .. })).cloned());
                    Content::Blocks(out)
                }
            }
        }
        Content::Null => Content::Null,
    }
}

fn stub_text(text: &str) -> String {
    let preview: String = text.chars().take(STUB_PREVIEW_CHARS as usize).collect::<String>().replace('\n', " ");
    let ellipsis = if text.chars().count() > STUB_PREVIEW_CHARS as usize { "..." } else { "" };
    format!("[User message compacted - original: \"{}{ellipsis}\"]", preview.trim())
}

/// A human message cut to its first `keep` characters of text (non-text blocks stay), saying so.
fn truncate_human(m: &Message, keep: u32) -> Option<Content> {
    let text = m.plain_text();
    let total = text.chars().count();
    if total <= keep as usize {
        return m.content.clone();
    }
    let head: String = text.chars().take(keep as usize).collect();
    let cut = format!(
        "{head}…\n[ctxlog: this message was cut to its first {} of {} characters (~{} tokens) to fit the budget; \
         the whole message is in the log: ctxlog restore]",
        thousands(u64::from(keep)),
        thousands(total as u64),
        thousands(u64::from(text_tokens(&text)))
    );
    match &m.content {
        Some(Content::Blocks(blocks)) => {
            let mut out = vec![Block::Text { text: cut, extra: Vec::new() }];
            out.extend(blocks.iter().filter(|b| !matches!(b, Block::Text { .. })).cloned());
            Some(Content::Blocks(out))
        }
        _ => Some(Content::Text(cut)),
    }
}

/// The message as an edit shows it. `Removed` returns the message unchanged (it is not shown);
/// a cleared tool result says [`crate::config::DEFAULT_TOOL_PLACEHOLDER`] (see [`edited_message_as`]).
pub fn edited_message(m: &Message, kind: EditKind) -> Message {
    edited_message_as(m, kind, crate::config::DEFAULT_TOOL_PLACEHOLDER)
}

/// [`edited_message`] with the session's placeholder for a cleared tool result
/// ([`crate::config::Config::placeholder_text`]).
pub fn edited_message_as(m: &Message, kind: EditKind, placeholder: &str) -> Message {
    let mut out = m.clone();
    match kind {
        EditKind::Removed => {}
        EditKind::Cleared => out.content = cleared_results(m, placeholder),
        EditKind::Trimmed { thinking, inputs } => trim(&mut out, thinking, inputs),
        // Only an oversized first human message is truncated (the fold allows nothing else).
        EditKind::Truncated { keep_chars } if m.is_human() => out.content = truncate_human(m, keep_chars),
        EditKind::Truncated { keep_chars } => {
            out.content = match &m.content {
                Some(Content::Blocks(blocks)) => Some(Content::Blocks(
                    blocks
                        .iter()
                        .map(|b| match b {
                            Block::ToolResult { tool_use_id, content: Some(c), is_error, extra } => Block::ToolResult {
                                tool_use_id: tool_use_id.clone(),
                                content: Some(truncate_content(c, keep_chars)),
                                is_error: *is_error,
                                extra: extra.clone(),
                            },
                            other => other.clone(),
                        })
                        .collect(),
                )),
                Some(c) if m.role == Role::Tool => Some(truncate_content(c, keep_chars)),
                other => other.clone(),
            };
        }
        EditKind::Stubbed { .. } => {
            out.content = match &m.content {
                Some(Content::Text(t)) if t.chars().count() > STUB_MIN_CHARS => Some(Content::Text(stub_text(t))),
                Some(Content::Blocks(blocks)) => {
                    let text = m.plain_text();
                    if text.chars().count() > STUB_MIN_CHARS {
                        // Stub by cost: the text goes, images and documents stay verbatim.
                        let mut kept = vec![Block::Text { text: stub_text(&text), extra: Vec::new() }];
                        kept.extend(blocks.iter().filter(|b| !matches!(b, Block::Text { .. })).cloned());
                        Some(Content::Blocks(kept))
                    } else {
                        m.content.clone()
                    }
                }
                other => other.clone(),
            };
        }
    }
    out
}

/// Every tool result of `m` saying only `placeholder` (Anthropic's cleared tool result).
fn cleared_results(m: &Message, placeholder: &str) -> Option<Content> {
    match &m.content {
        Some(Content::Blocks(blocks)) => Some(Content::Blocks(
            blocks
                .iter()
                .map(|b| match b {
                    Block::ToolResult { tool_use_id, is_error, extra, .. } => Block::ToolResult {
                        tool_use_id: tool_use_id.clone(),
                        content: Some(Content::Text(placeholder.to_owned())),
                        is_error: *is_error,
                        extra: extra.clone(),
                    },
                    other => other.clone(),
                })
                .collect(),
        )),
        Some(_) if m.role == Role::Tool => Some(Content::Text(placeholder.to_owned())),
        other => other.clone(),
    }
}

/// Drops the thinking blocks of an assistant message whole and/or clears its calls' inputs to
/// `{}` (ids and names stay, so every pair stays valid).
fn trim(out: &mut Message, thinking: bool, inputs: bool) {
    if let Some(Content::Blocks(blocks)) = &mut out.content {
        if thinking {
            blocks.retain(|b| !b.is_thinking());
        }
        if inputs {
            for b in blocks.iter_mut() {
                if let Block::ToolUse { input, .. } = b {
                    *input = crate::message::RawJson("{}".into());
                }
            }
        }
    }
    if inputs {
        for c in out.tool_calls.iter_mut().flatten() {
            c.arguments = "{}".into();
        }
    }
}

/// Would stubbing change this message (is its text long enough)?
pub(crate) fn stubbable(m: &Message) -> bool {
    m.plain_text().chars().count() > STUB_MIN_CHARS
}

/// How a summary lists the base64 media blocks of `m` (`image image/png 800x600 (1,234 bytes,
/// sha256:…)`), or `None` if it has none. Computed at append and kept by the state, so a summary
/// renders without the bodies of the messages it hides.
pub(crate) fn media_note(m: &Message) -> Option<String> {
    let parts: Vec<String> = m
        .blocks()
        .iter()
        .filter_map(|b| match b {
            Block::Media { kind, source: MediaSource::Base64 { media_type, data, .. }, .. } => Some(match data {
                MediaData::Blob(r) => match (r.width, r.height) {
                    (Some(w), Some(h)) => {
                        format!("{} {media_type} {w}x{h} ({} bytes, {})", kind.as_str(), thousands(r.bytes), r.id)
                    }
                    _ => format!("{} {media_type} ({} bytes, {})", kind.as_str(), thousands(r.bytes), r.id),
                },
                MediaData::Inline(_) => format!("{} {media_type}", kind.as_str()),
            }),
            _ => None,
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

fn describe_stub(span: &impl SpanFacts, seq: u64) -> String {
    let Some(tokens) = span.tokens(seq) else { return format!("seq {seq}") };
    let mut parts: Vec<String> = span.result_tool_names(seq).into_iter().map(|name| format!("{name} output")).collect();
    parts.extend(span.media_note(seq).map(str::to_owned));
    format!("seq {seq}: {} ({} tokens)", parts.join(", "), thousands(u64::from(tokens)))
}

/// The user message that stands for a flushed span in the view; `listed` says whether tool
/// outputs are listed in one line (view version 2) or one by one.
pub(crate) fn summary_message(span: &impl SpanFacts, s: &SummaryPrepared, listed: bool) -> Message {
    let mut text = format!(
        "<ctxlog-summary seq=\"{}-{}\">\n{}\n</ctxlog-summary>",
        s.from,
        s.to.saturating_sub(1),
        s.text.trim_end()
    );
    if s.is_condensed() {
        // A condensed summary may cover most of a long session: one sentence instead of a
        // line per elided output keeps it as small as its text.
        text.push_str(&format!(
            "\nTool outputs and media of messages {}-{} are elided; each is restorable by seq.",
            s.from,
            s.to.saturating_sub(1)
        ));
        return Message::text(Role::User, text);
    }
    let stubs = span.elided(s.from, s.to);
    if stubs.is_empty() {
        return Message::text(Role::User, text);
    }
    text.push_str("\nElided from this span, restorable by seq:");
    if listed {
        // View version 2: tool outputs in one line (a tool loop's span elides thousands), media
        // one by one (their notes say what each image was).
        let (media, outputs): (Vec<u64>, Vec<u64>) = stubs.into_iter().partition(|&seq| span.media_note(seq).is_some());
        if let (Some(first), Some(last)) = (outputs.first(), outputs.last()) {
            let mut names: BTreeMap<&str, u64> = BTreeMap::new();
            let mut tokens = 0u64;
            for &seq in &outputs {
                for name in span.result_tool_names(seq) {
                    *names.entry(name).or_default() += 1;
                }
                tokens += span.tokens(seq).map_or(0, u64::from);
            }
            let mut names: Vec<(&str, u64)> = names.into_iter().collect();
            names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            let listed: Vec<String> = names.iter().map(|(n, k)| format!("{n} ×{}", thousands(*k))).collect();
            let range = if first == last { format!("seq {first}") } else { format!("seq {first}–{last}") };
            text.push_str(&format!(
                "\n- {} tool outputs ({range}: {}; ~{} tokens)",
                thousands(outputs.len() as u64),
                listed.join(", "),
                thousands(tokens)
            ));
        }
        for seq in media {
            text.push_str("\n- ");
            text.push_str(&describe_stub(span, seq));
        }
        return Message::text(Role::User, text);
    }
    for seq in stubs {
        text.push_str("\n- ");
        text.push_str(&describe_stub(span, seq));
    }
    Message::text(Role::User, text)
}

/// Tool names listed by name in a placeholder; the rest are counted.
pub(crate) const NAMED_TOOLS: usize = 6;

/// What a run of hidden messages `[from, to)` held (read from the state's tool index).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Composition {
    /// Tool calls made by the run's messages, by tool name.
    pub calls: BTreeMap<String, u64>,
    /// Messages of the run that make no call and carry no result (text of either side).
    pub other: u64,
}

/// The placeholder's text for the hidden messages `[from, to)` holding `c`, e.g.
/// `[ctxlog: 41 tool calls removed (seq 2–83): read_file ×41 — restore with ctxlog restore --seq N, N in 2–83]`.
pub(crate) fn placeholder_text(c: &Composition, from: u64, to: u64) -> String {
    let calls: u64 = c.calls.values().sum();
    let plural = |n: u64, one: &str, many: &str| format!("{} {}", thousands(n), if n == 1 { one } else { many });
    let what = match (calls, c.other) {
        (0, n) => plural(n, "message", "messages"),
        (k, 0) => plural(k, "tool call", "tool calls"),
        (k, n) => {
            format!("{} and {}", plural(k, "tool call", "tool calls"), plural(n, "other message", "other messages"))
        }
    };
    let last = to.saturating_sub(1);
    let (range, restore) = if last <= from {
        (format!("seq {from}"), format!("ctxlog restore --seq {from}"))
    } else {
        (format!("seq {from}–{last}"), format!("ctxlog restore --seq N, N in {from}–{last}"))
    };
    let mut names: Vec<(&String, &u64)> = c.calls.iter().collect();
    // Most used first, then by name: a deterministic order.
    names.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut listed: Vec<String> =
        names.iter().take(NAMED_TOOLS).map(|(name, n)| format!("{name} ×{}", thousands(**n))).collect();
    if names.len() > NAMED_TOOLS {
        listed.push(format!("{} more tools", names.len() - NAMED_TOOLS));
    }
    let tools = if listed.is_empty() { String::new() } else { format!(": {}", listed.join(", ")) };
    format!("[ctxlog: {what} removed ({range}){tools} — restore with {restore}]")
}

/// The user message a placeholder is in the view.
pub(crate) fn placeholder_message(c: &Composition, from: u64, to: u64) -> Message {
    Message::text(Role::User, placeholder_text(c, from, to))
}
