//! Approximate heap accounting: what a value holds beyond its own `size_of`, counting vectors and
//! strings by capacity, boxes and `Arc`s by what they point to (plus the `Arc` counters), and
//! B-tree maps by their entries and node overhead. Approximate because the allocator's own
//! rounding and headers are not counted; honest because everything the state holds is.

use std::collections::BTreeMap;
use std::mem::size_of;
use std::sync::Arc;

use crate::event::{EditKind, SummaryPrepared};
use crate::message::{Block, Content, ImageUrl, MediaData, MediaSource, Message, RawJson, ToolCall};

/// Bytes a value owns on the heap.
pub trait HeapSize {
    /// Heap bytes owned (not counting `size_of::<Self>()`).
    fn heap_bytes(&self) -> usize;
}

/// Heap bytes of a `BTreeMap` of `len` entries: its nodes hold up to 11 keys and values and are
/// about two thirds full, plus a parent pointer and lengths per node (children pointers of
/// internal nodes are a small share and are not counted).
pub fn btree_bytes<K, V>(len: usize) -> usize {
    let per_node = 11 * (size_of::<K>() + size_of::<V>()) + 16;
    len.div_ceil(7) * per_node
}

impl HeapSize for String {
    fn heap_bytes(&self) -> usize {
        self.capacity()
    }
}

impl HeapSize for Box<str> {
    fn heap_bytes(&self) -> usize {
        self.len()
    }
}

impl HeapSize for RawJson {
    fn heap_bytes(&self) -> usize {
        self.0.heap_bytes()
    }
}

impl<T: HeapSize> HeapSize for Option<T> {
    fn heap_bytes(&self) -> usize {
        self.as_ref().map_or(0, HeapSize::heap_bytes)
    }
}

impl<T: HeapSize> HeapSize for Vec<T> {
    fn heap_bytes(&self) -> usize {
        self.capacity() * size_of::<T>() + self.iter().map(HeapSize::heap_bytes).sum::<usize>()
    }
}

impl<T: HeapSize> HeapSize for Arc<T> {
    fn heap_bytes(&self) -> usize {
        // The two reference counters, the value, and what it owns.
        2 * size_of::<usize>() + size_of::<T>() + (**self).heap_bytes()
    }
}

impl<A: HeapSize, B: HeapSize> HeapSize for (A, B) {
    fn heap_bytes(&self) -> usize {
        self.0.heap_bytes() + self.1.heap_bytes()
    }
}

impl<K: HeapSize, V: HeapSize> HeapSize for BTreeMap<K, V> {
    fn heap_bytes(&self) -> usize {
        btree_bytes::<K, V>(self.len()) + self.iter().map(|(k, v)| k.heap_bytes() + v.heap_bytes()).sum::<usize>()
    }
}

macro_rules! plain {
    ($($t:ty),*) => {$(
        impl HeapSize for $t {
            fn heap_bytes(&self) -> usize {
                0
            }
        }
    )*};
}
// The state's own plain types implement it beside their definitions.
plain!(u8, u32, u64, bool, EditKind);

impl HeapSize for Message {
    fn heap_bytes(&self) -> usize {
        self.content.heap_bytes()
            + self.tool_calls.heap_bytes()
            + self.tool_call_id.heap_bytes()
            + self.meta.timestamp.heap_bytes()
            + self.meta.usage.heap_bytes()
            + self.extra.heap_bytes()
    }
}

impl HeapSize for Content {
    fn heap_bytes(&self) -> usize {
        match self {
            Content::Null => 0,
            Content::Text(t) => t.heap_bytes(),
            Content::Blocks(b) => b.heap_bytes(),
        }
    }
}

impl HeapSize for ToolCall {
    fn heap_bytes(&self) -> usize {
        self.id.heap_bytes()
            + self.kind.heap_bytes()
            + self.name.heap_bytes()
            + self.arguments.heap_bytes()
            + self.extra.heap_bytes()
            + self.function_extra.heap_bytes()
    }
}

impl HeapSize for MediaData {
    fn heap_bytes(&self) -> usize {
        match self {
            MediaData::Inline(b64) => b64.heap_bytes(),
            MediaData::Blob(r) => r.id.as_str().len(),
        }
    }
}

impl HeapSize for Block {
    fn heap_bytes(&self) -> usize {
        match self {
            Block::Text { text, extra } => text.heap_bytes() + extra.heap_bytes(),
            Block::Media { source, extra, .. } => {
                extra.heap_bytes()
                    + match source {
                        MediaSource::Base64 { media_type, data, extra } => {
                            media_type.heap_bytes() + data.heap_bytes() + extra.heap_bytes()
                        }
                        MediaSource::Other(raw) => raw.heap_bytes(),
                    }
            }
            Block::ImageUrl { url, inner, extra } => {
                inner.heap_bytes()
                    + extra.heap_bytes()
                    + match url {
                        ImageUrl::Data { media_type, data } => media_type.heap_bytes() + data.heap_bytes(),
                        ImageUrl::Link(l) => l.heap_bytes(),
                    }
            }
            Block::ToolUse { id, name, input, extra } => {
                id.heap_bytes() + name.heap_bytes() + input.heap_bytes() + extra.heap_bytes()
            }
            Block::ToolResult { tool_use_id, content, extra, .. } => {
                tool_use_id.heap_bytes() + content.heap_bytes() + extra.heap_bytes()
            }
            Block::Thinking { thinking, signature, extra } => {
                thinking.heap_bytes() + signature.heap_bytes() + extra.heap_bytes()
            }
            Block::Other(raw) => raw.heap_bytes(),
        }
    }
}

impl HeapSize for SummaryPrepared {
    fn heap_bytes(&self) -> usize {
        self.text.heap_bytes() + self.refusal.heap_bytes() + self.merged.heap_bytes()
    }
}

/// Where a state's heap bytes go ([`super::State::heap_report`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeapReport {
    /// Bodies of the messages in the view (as appended, or as their edits show them).
    pub bodies: usize,
    /// One [`super::Entry`] per message, by capacity.
    pub entries: usize,
    /// The tool-pair index and the media notes.
    pub tools: usize,
    /// The summary ledger (text only for summaries still current).
    pub summaries: usize,
    /// The view's items.
    pub view: usize,
    /// Latched guards, the import's facts.
    pub other: usize,
}

impl HeapReport {
    /// All of it.
    pub fn total(&self) -> usize {
        self.bodies + self.entries + self.tools + self.summaries + self.view + self.other
    }
}

impl super::State {
    /// Approximate bytes this state holds on the heap: message bodies of the view, summaries,
    /// per-message facts, the tool index and the view, with vectors counted by capacity (see
    /// [`super::heap`]). What a live session costs beyond its `Session` handle and view cache.
    pub fn heap_bytes(&self) -> usize {
        self.heap_report().total()
    }

    /// [`super::State::heap_bytes`], part by part.
    pub fn heap_report(&self) -> HeapReport {
        let (bodies, view) = self.view_heap_bytes();
        let (entries, tools) = self.messages.heap_bytes();
        HeapReport {
            bodies,
            entries,
            tools,
            summaries: self.compaction.ledger.heap_bytes(),
            view,
            other: self.latches.heap_bytes() + self.lifecycle.heap_bytes(),
        }
    }
}
