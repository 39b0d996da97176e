//! Rendering the view: the bytes of each of its items (what an edited message, a summary or a
//! placeholder look like is `render.rs`'s), and a cache that keeps rendering and hashing
//! O(new messages) while the view only grows.
//!
//! The view's bytes are `message JSON ‖ '\n'` for each item, media as blob references; its
//! digest is the sha256 of those bytes. A host that dispatches renders the same messages with
//! media inlined ([`crate::wire::Media::Inline`]).

use std::borrow::Cow;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::event::SummaryPrepared;
use crate::json::JsonWriter;
use crate::message::Message;
use crate::state::{Item, State, ViewItem};
use crate::store::{hex, BlobId};
use crate::wire::{write_in, Media, RenderOpts, WireFormat};

pub use crate::numbers::thousands;
pub(crate) use crate::render::stubbable;
pub use crate::render::{edited_message, edited_message_as, STUB_MIN_CHARS, STUB_PREVIEW_CHARS};

/// Messages in `[from, to)` that a flush hides and that carry tool output or media: the
/// summary lists them as restorable references.
pub(crate) fn flush_stubs(state: &State, from: u64, to: u64) -> Vec<u64> {
    state.elided(from, to)
}

/// The user message that stands for a flushed span in the view.
pub(crate) fn summary_message(state: &State, s: &SummaryPrepared) -> Message {
    state.summary_message(s)
}

/// The message an item of the view shows (`None` for a message that is not in the view: only
/// those keep their body).
pub fn item_message(state: &State, item: Item) -> Option<Cow<'_, Message>> {
    match item {
        Item::Message(seq) => state.shown(seq).map(|m| Cow::Borrowed(m.as_ref())),
        Item::Summary(i) => state.summaries().get(i as usize).map(|s| Cow::Owned(state.summary_message(s))),
        Item::Placeholder { from, to } => Some(Cow::Owned(state.placeholder_message(from, to))),
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
