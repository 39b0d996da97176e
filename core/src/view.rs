//! Rendering the view: what an edited message, a summary and the whole request look like, and
//! a cache that keeps rendering and hashing O(new messages) while the view only grows.
//!
//! The view's bytes are `message JSON ‖ '\n'` for each item, media as blob references; its
//! digest is the sha256 of those bytes. A host that dispatches renders the same messages with
//! media inlined ([`crate::wire::Media::Inline`]).

use std::borrow::Cow;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::event::{EditKind, SummaryPrepared};
use crate::json::JsonWriter;
use crate::message::{Block, Content, MediaData, MediaSource, Message, Role};
use crate::state::{Item, State, ViewItem};
use crate::store::{hex, BlobId};
use crate::tokens::text_tokens;
use crate::wire::{write_in, Media, RenderOpts, WireFormat};

/// Characters of a user message shown in its stub.
pub const STUB_PREVIEW_CHARS: u32 = 50;
/// User text at or below this length is never stubbed (a stub would not be smaller).
pub const STUB_MIN_CHARS: usize = 80;

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

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

/// The message as an edit shows it. `Removed` returns the message unchanged (it is not shown).
pub fn edited_message(m: &Message, kind: EditKind) -> Message {
    let mut out = m.clone();
    match kind {
        EditKind::Removed => {}
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

/// Would stubbing change this message (is its text long enough)?
pub fn stubbable(m: &Message) -> bool {
    m.plain_text().chars().count() > STUB_MIN_CHARS
}

/// Messages in `[from, to)` that a flush hides and that carry tool output or media: the
/// summary lists them as restorable references.
pub fn flush_stubs(state: &State, from: u64, to: u64) -> Vec<u64> {
    (from..to)
        .filter(|&seq| state.hidden_by_flush_at(seq, to))
        .filter(|&seq| state.entry(seq).is_some_and(|e| e.is_tool_result() || e.has_media()))
        .collect()
}

/// How a summary lists the base64 media blocks of `m` (`image image/png 800x600 (1,234 bytes,
/// sha256:…)`), or `None` if it has none. Computed at append and kept by the state, so a summary
/// renders without the bodies of the messages it hides.
pub fn media_note(m: &Message) -> Option<String> {
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

fn describe_stub(state: &State, seq: u64) -> String {
    let Some(e) = state.entry(seq) else { return format!("seq {seq}") };
    let mut parts: Vec<String> =
        state.result_tool_names(seq).into_iter().map(|name| format!("{name} output")).collect();
    parts.extend(state.media_note(seq).map(str::to_owned));
    format!("seq {seq}: {} ({} tokens)", parts.join(", "), thousands(u64::from(e.tokens)))
}

/// The user message that stands for a flushed span in the view.
pub fn summary_message(state: &State, s: &SummaryPrepared) -> Message {
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
    let stubs = flush_stubs(state, s.from, s.to);
    if stubs.is_empty() {
        return Message::text(Role::User, text);
    }
    text.push_str("\nElided from this span, restorable by seq:");
    if state.info().is_some_and(|i| i.config.placeholders()) {
        // View version 2: tool outputs in one line (a tool loop's span elides thousands), media
        // one by one (their notes say what each image was).
        let (media, outputs): (Vec<u64>, Vec<u64>) =
            stubs.into_iter().partition(|&seq| state.media_note(seq).is_some());
        if let (Some(first), Some(last)) = (outputs.first(), outputs.last()) {
            let mut names: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
            let mut tokens = 0u64;
            for &seq in &outputs {
                for name in state.result_tool_names(seq) {
                    *names.entry(name).or_default() += 1;
                }
                tokens += state.entry(seq).map_or(0, |e| u64::from(e.tokens));
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
            text.push_str(&describe_stub(state, seq));
        }
        return Message::text(Role::User, text);
    }
    for seq in stubs {
        text.push_str("\n- ");
        text.push_str(&describe_stub(state, seq));
    }
    Message::text(Role::User, text)
}

/// The message an item of the view shows (`None` for a message that is not in the view: only
/// those keep their body).
pub fn item_message(state: &State, item: Item) -> Option<Cow<'_, Message>> {
    match item {
        Item::Message(seq) => state.shown(seq).map(|m| Cow::Borrowed(m.as_ref())),
        Item::Summary(i) => state.summaries().get(i as usize).map(|s| Cow::Owned(summary_message(state, s))),
        Item::Placeholder { from, to } => Some(Cow::Owned(crate::state::placeholder::message(state, from, to))),
    }
}

/// One item's view bytes (`JSON ‖ '\n'`, media as references).
pub fn render_item(state: &State, item: Item) -> Arc<[u8]> {
    render_item_with(state, item, RenderOpts { meta: false, media: Media::Refs }, &mut Vec::new())
}

/// One item rendered with explicit options (e.g. media inlined for dispatch).
pub fn render_item_with(state: &State, item: Item, opts: RenderOpts<'_>, missing: &mut Vec<BlobId>) -> Arc<[u8]> {
    let mut w = JsonWriter::new();
    if let Some(m) = item_message(state, item) {
        // A Responses session's view is its `input` items.
        let format = state.info().map_or(WireFormat::Anthropic, |i| i.format);
        write_in(format, &mut w, &m, opts, missing);
    }
    let mut bytes = w.into_bytes();
    bytes.push(b'\n');
    bytes.into()
}

/// Rendered bytes of the current view, kept incrementally.
#[derive(Clone, Default)]
pub struct ViewCache {
    generation: Option<u64>,
    items: Vec<ViewItem>,
    bytes: Vec<Arc<[u8]>>,
    /// Where the items that carry a logged `cache_control` have it, by index (found once, when
    /// the item is rendered: a request that places its own breakpoints cuts them out).
    cuts: Vec<(usize, crate::breakpoints::Cuts)>,
    hasher: Sha256,
}

/// What [`ViewCache::sync`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synced {
    /// The cached view was extended by appends only (no earlier byte changed).
    pub appended_only: bool,
    /// Items rendered by this sync.
    pub rendered: usize,
}

impl std::fmt::Debug for ViewCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ViewCache({} items, generation {:?})", self.items.len(), self.generation)
    }
}

impl ViewCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Brings the cache up to `state`'s view, rendering only new items when the view has only
    /// grown since the last sync.
    pub fn sync(&mut self, state: &State) -> Synced {
        self.sync_prefix(state, usize::MAX)
    }

    /// Like [`ViewCache::sync`], but only up to the first `len` items of the view: the view a
    /// call served when messages were appended between its plan and its commit.
    pub fn sync_prefix(&mut self, state: &State, len: usize) -> Synced {
        let all = state.view();
        let view = all.get(..len.min(all.len())).unwrap_or(all);
        let grown = self.generation == Some(state.generation())
            && view.len() >= self.items.len()
            && self.items.last().is_none_or(|last| view.get(self.items.len() - 1) == Some(last));
        if !grown {
            self.items.clear();
            self.bytes.clear();
            self.cuts.clear();
            self.hasher = Sha256::new();
            self.generation = Some(state.generation());
        }
        let start = self.items.len();
        for it in view.iter().skip(start) {
            let bytes = render_item(state, it.item);
            self.hasher.update(&bytes);
            if let Some(c) = crate::breakpoints::cuts(&bytes) {
                self.cuts.push((self.items.len(), c));
            }
            self.items.push(*it);
            self.bytes.push(bytes);
        }
        Synced { appended_only: grown, rendered: view.len() - start }
    }

    /// sha256 of the view bytes, lower-case hex.
    pub fn digest(&self) -> String {
        hex(&self.hasher.clone().finalize())
    }

    /// The rendered items.
    pub fn bytes(&self) -> &[Arc<[u8]>] {
        &self.bytes
    }

    /// The items as rendered.
    pub fn items(&self) -> &[ViewItem] {
        &self.items
    }

    /// The `cache_control` members of the rendered items, by index ([`crate::breakpoints::cuts`]).
    pub fn cuts(&self) -> &[(usize, crate::breakpoints::Cuts)] {
        &self.cuts
    }

    /// Bytes of the rendered view (media as references).
    pub fn view_bytes(&self) -> usize {
        self.bytes.iter().map(|b| b.len()).sum()
    }

    /// Approximate heap bytes held: the rendered items with their `Arc` counters, and the item
    /// and pointer vectors by capacity.
    pub fn heap_bytes(&self) -> usize {
        let arcs = 2 * std::mem::size_of::<usize>();
        self.bytes.iter().map(|b| b.len() + arcs).sum::<usize>()
            + self.bytes.capacity() * std::mem::size_of::<Arc<[u8]>>()
            + self.items.capacity() * std::mem::size_of::<ViewItem>()
            + self.cuts.iter().map(|(_, c)| 24 + 8 * c.len()).sum::<usize>()
    }
}

/// Renders and hashes a whole view from scratch (for `verify`).
pub fn digest_of(state: &State) -> String {
    let mut h = Sha256::new();
    for it in state.view() {
        h.update(render_item(state, it.item));
    }
    hex(&h.finalize())
}
