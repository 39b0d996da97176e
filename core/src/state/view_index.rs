//! The view index: which messages, summaries and placeholders the view holds, in order, with
//! their tokens (summing exactly to the view's), the bodies of its messages (and of no other:
//! the bound on a session's memory), and the generation every change other than an append
//! bumps. Appends extend it and an edit patches it in place; a flush, a retirement or a
//! restore rebuilds it. After a batch that changed it the view splits no tool pair.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::compaction::Compaction;
use super::findings::{BodyError, PairError};
use super::heap::HeapSize;
use super::messages::{Brought, Messages};
use super::summaries::{Summaries, SummaryState};
use super::tools::Link;
use crate::config::Config;
use crate::event::{EditKind, Event};
use crate::message::Message;
use crate::render;

/// One element of the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    /// The message with this seq (possibly edited).
    Message(u64),
    /// The summary with this index.
    Summary(u32),
    /// A placeholder for the hidden messages `[from, to)` that no summary in the view covers
    /// (view version 2, [`crate::placeholder`]); `from` is also the item's `seq`.
    Placeholder {
        /// First seq it stands for.
        from: u64,
        /// One past the last.
        to: u64,
    },
}

/// An element of the view with its token cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewItem {
    /// Position in the log: the message's seq, for a summary the seq of the first message it
    /// hides, for a placeholder the first message it stands for. Strictly increasing along the
    /// view.
    pub seq: u64,
    /// What.
    pub item: Item,
    /// Its tokens.
    pub tokens: u32,
}

impl HeapSize for ViewItem {
    fn heap_bytes(&self) -> usize {
        0
    }
}

/// How many hidden messages a view represents ([`super::State::coverage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Coverage {
    /// Messages up to the view's end that it does not show as themselves.
    pub hidden: u64,
    /// Of those, how many a summary or a placeholder in the view stands for (goal: all).
    pub represented: u64,
}

/// The sub-fold of the view. Fields are `pub(super)` for the snapshot layout and the heap
/// accounting; only [`ViewIndex::apply`] and [`ViewIndex::post_check`] write them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct ViewIndex {
    /// The bodies of the messages in the view: as appended, or as their edit shows them.
    pub(super) bodies: BTreeMap<u64, Arc<Message>>,
    pub(super) generation: u64,
    pub(super) served_generation: Option<u64>,
    pub(super) checked_generation: u64,
    pub(super) items: Vec<ViewItem>,
    pub(super) tokens: u64,
    pub(super) summary_tokens: u64,
}

/// What the view is built from: the messages, the summaries and the knobs.
pub(super) struct Sources<'a> {
    pub(super) messages: &'a Messages,
    pub(super) compaction: &'a Compaction,
    pub(super) config: &'a Config,
}

impl ViewIndex {
    /// The body the view holds for message `seq`.
    pub(super) fn body(&self, seq: u64) -> Option<&Arc<Message>> {
        self.bodies.get(&seq)
    }

    pub(super) fn position(&self, seq: u64) -> Option<usize> {
        let pos = self.items.partition_point(|it| it.seq < seq);
        matches!(self.items.get(pos), Some(ViewItem { item: Item::Message(s), .. }) if *s == seq).then_some(pos)
    }

    pub(super) fn oldest_summary(&self) -> Option<u32> {
        self.items.iter().find_map(|it| match it.item {
            Item::Summary(i) => Some(i),
            Item::Message(_) | Item::Placeholder { .. } => None,
        })
    }

    /// Applies an event (already checked) after the messages and the summaries took theirs;
    /// `brought` is what the messages handed over.
    pub(super) fn apply(&mut self, ev: &Event, brought: Brought, src: &Sources<'_>) {
        match (ev, brought) {
            (Event::MessageAppended(e), Brought::One(seq, body)) => {
                if let Some(body) = body {
                    self.bodies.insert(seq, body);
                }
                // Appends never hide anything, so the view just grows.
                self.items.push(ViewItem { seq, item: Item::Message(seq), tokens: e.tokens });
                self.tokens += u64::from(e.tokens);
            }
            (Event::Edited(e), brought) => {
                if let Brought::One(seq, shown) = brought {
                    self.edit(seq, e.kind, shown, src);
                }
                self.generation += 1;
            }
            (Event::Restored(_), Brought::Restored(bodies)) => {
                self.bodies.extend(bodies);
                self.changed(src);
            }
            (Event::Flushed(_) | Event::SummaryRetired(_), _) => self.changed(src),
            (Event::RequestServed(_), _) => self.served_generation = Some(self.generation),
            _ => {}
        }
    }

    /// An edit touches one visible message: patch the view in place instead of rebuilding it,
    /// so a ladder pass of many edits stays cheap.
    fn edit(&mut self, seq: u64, kind: EditKind, shown: Option<Arc<Message>>, src: &Sources<'_>) {
        let pos = self.position(seq);
        match shown {
            Some(m) => self.bodies.insert(seq, m),
            None => self.bodies.remove(&seq),
        };
        let tokens = src.messages.entry(seq).and_then(|e| e.edit).map_or(0, |e| e.tokens);
        if let Some((p, item)) = pos.and_then(|p| Some((p, self.items.get_mut(p)?))) {
            self.tokens = self.tokens - u64::from(item.tokens) + u64::from(tokens);
            item.tokens = tokens;
            if kind == EditKind::Removed {
                self.items.remove(p);
                if src.config.placeholders() {
                    self.refill_gap(p, src);
                }
            }
        }
    }

    /// After a batch that changed the view (checked on `RequestServed` and `Restored`): no tool
    /// pair is split.
    pub(super) fn post_check(&mut self, ev: &Event, messages: &Messages) -> Result<(), PairError> {
        if !matches!(ev, Event::RequestServed(_) | Event::Restored(_)) || self.checked_generation == self.generation {
            return Ok(());
        }
        self.checked_generation = self.generation;
        self.check_tool_pairs(messages)
    }

    /// No orphan tool result, and no answered call whose result is missing from the view.
    pub(super) fn check_tool_pairs(&self, messages: &Messages) -> Result<(), PairError> {
        let in_view = |seq| self.position(seq).is_some();
        for it in &self.items {
            let Item::Message(seq) = it.item else { continue };
            for link in messages.tool_links(seq) {
                match link {
                    Link::Result(p) if !in_view(p.call()) => {
                        return Err(PairError::OrphanResult { result: seq, call: p.call() })
                    }
                    Link::Call(p) if p.result().is_some_and(|r| !in_view(r)) => {
                        return Err(PairError::MissingResult { call: seq, result: p.result().unwrap_or_default() })
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// One past the last seq item `it` accounts for: the message itself, a summary's span, a
    /// placeholder's run.
    pub(super) fn item_end(it: &ViewItem, ledger: &Summaries) -> u64 {
        match it.item {
            Item::Message(seq) => seq + 1,
            Item::Summary(i) => ledger.prepared().get(i as usize).map_or(it.seq + 1, |s| s.to.max(it.seq + 1)),
            Item::Placeholder { to, .. } => to,
        }
    }

    /// The view changed other than by appending: bump the generation and rebuild it.
    fn changed(&mut self, src: &Sources<'_>) {
        self.generation += 1;
        self.rebuild_items(src);
        // A message that left the view leaves memory (its record keeps it). A rebuild never
        // brings a message in: only appends and restores do, with their bodies.
        let view = &self.items;
        self.bodies.retain(|&seq, _| {
            let pos = view.partition_point(|it| it.seq < seq);
            matches!(view.get(pos), Some(ViewItem { item: Item::Message(s), .. }) if *s == seq)
        });
    }

    fn rebuild_items(&mut self, src: &Sources<'_>) {
        let (messages, compaction) = (src.messages, src.compaction);
        let estimator = src.config.estimator();
        let mut items = Vec::new();
        // The summaries in the view cover disjoint spans; walk them by position.
        let shown = compaction.ledger.shown();
        let prepared = compaction.ledger.prepared();
        let mut next = 0usize;
        let mut placed = None;
        for seq in 0..messages.count() {
            if messages.hidden_by_flush_at(seq, compaction.flushed) {
                // The summary covering this seq sits where its first hidden message was; a
                // retired summary leaves its hidden messages with nothing in their place.
                while shown.get(next).and_then(|&i| prepared.get(i as usize)).is_some_and(|s| s.to <= seq) {
                    next += 1;
                }
                let covering = shown.get(next).and_then(|&i| Some((i, prepared.get(i as usize)?)));
                if let Some((i, s)) = covering.filter(|(_, s)| s.from <= seq) {
                    if placed != Some(i) {
                        placed = Some(i);
                        let tokens =
                            estimator.message(&render::summary_message(messages, s, src.config.placeholders()));
                        items.push(ViewItem { seq, item: Item::Summary(i), tokens });
                    }
                }
                continue;
            }
            let Some(entry) = messages.entry(seq) else { continue };
            let tokens = match &entry.edit {
                Some(e) if e.kind == EditKind::Removed => continue,
                Some(e) => e.tokens,
                None => entry.tokens,
            };
            items.push(ViewItem { seq, item: Item::Message(seq), tokens });
        }
        if src.config.placeholders() {
            items = with_placeholders(items, src);
        }
        self.tokens = items.iter().map(|i| u64::from(i.tokens)).sum();
        self.summary_tokens =
            items.iter().filter(|i| matches!(i.item, Item::Summary(_))).map(|i| u64::from(i.tokens)).sum();
        items.shrink_to_fit();
        self.items = items;
    }

    /// After the message at view position `pos` was removed: merges the placeholders on either
    /// side of that position and the removed message into one placeholder for the whole gap.
    fn refill_gap(&mut self, pos: usize, src: &Sources<'_>) {
        // At most one placeholder on each side: gaps are maximal.
        let mut start = pos;
        if start > 0 && matches!(self.items.get(start - 1), Some(ViewItem { item: Item::Placeholder { .. }, .. })) {
            start -= 1;
        }
        let mut end = pos;
        if matches!(self.items.get(end), Some(ViewItem { item: Item::Placeholder { .. }, .. })) {
            end += 1;
        }
        let removed: u64 = self.items.drain(start..end).map(|it| u64::from(it.tokens)).sum();
        self.tokens -= removed;
        let prev = start.checked_sub(1).and_then(|i| self.items.get(i)).copied();
        let next_seq = self.items.get(start).map_or(src.messages.count(), |it| it.seq);
        // Covered up to: the previous item's end, or any summary before the gap reaching further
        // (a summary's span runs on past the messages it keeps verbatim).
        let ledger = &src.compaction.ledger;
        let mut covered = prev.map_or(0, |p| Self::item_end(&p, ledger));
        for (i, standing) in ledger.standing().iter().enumerate() {
            if standing.state == SummaryState::Shown {
                if let Some(s) = ledger.prepared().get(i).filter(|s| s.from < next_seq) {
                    covered = covered.max(s.to);
                }
            }
        }
        if covered < next_seq {
            if let Some(item) = placeholder_item(prev.as_ref(), covered, next_seq, src) {
                self.tokens += u64::from(item.tokens);
                self.items.insert(start, item);
            }
        }
    }
}

/// `items` (messages and summaries, by seq) with a placeholder in every gap: a run of seqs that
/// no item shows or covers. A gap inside an open tool exchange (a call in the view whose result
/// comes after the gap, which only a malformed log has) gets none: a message between a call and
/// its result would break the pairing every provider enforces.
fn with_placeholders(items: Vec<ViewItem>, src: &Sources<'_>) -> Vec<ViewItem> {
    let mut out = Vec::with_capacity(items.len() + 8);
    let mut covered = 0u64;
    let mut prev: Option<ViewItem> = None;
    for it in items {
        if covered < it.seq {
            out.extend(placeholder_item(prev.as_ref(), covered, it.seq, src));
        }
        covered = covered.max(ViewIndex::item_end(&it, &src.compaction.ledger));
        prev = Some(it);
        out.push(it);
    }
    let count = src.messages.count();
    if covered < count {
        out.extend(placeholder_item(prev.as_ref(), covered, count, src));
    }
    out
}

/// The placeholder for the gap `[from, to)` after the view item `prev`, unless the gap sits
/// inside `prev`'s open tool exchange.
fn placeholder_item(prev: Option<&ViewItem>, from: u64, to: u64, src: &Sources<'_>) -> Option<ViewItem> {
    if let Some(ViewItem { item: Item::Message(p), .. }) = prev {
        let open = src
            .messages
            .tool_links(*p)
            .any(|l| matches!(l, Link::Call(pair) if pair.result().is_some_and(|r| r >= to)));
        if open {
            return None;
        }
    }
    let message = render::placeholder_message(&src.messages.composition(from, to), from, to);
    let tokens = src.config.estimator().message(&message);
    Some(ViewItem { seq: from, item: Item::Placeholder { from, to }, tokens })
}

impl super::State {
    /// The message `seq` as the view shows it (as appended, or as its edit shows it), when it
    /// is in the view.
    pub fn shown(&self, seq: u64) -> Option<&Arc<Message>> {
        self.view.body(seq)
    }

    /// The seqs of the messages carrying a provider's compaction (an Anthropic `compaction`
    /// block, a Responses `compaction` item), oldest first. The provider reads each as the
    /// summary of everything before it, so a client may stop sending what precedes the latest:
    /// its later histories continue the log from there. They are pinned, so always in the view.
    pub fn provider_compactions(&self) -> Vec<u64> {
        (0..self.message_count())
            .filter(|seq| self.entry(*seq).is_some_and(|e| e.is_pinned()))
            .filter(|seq| self.shown(*seq).is_some_and(|m| m.provider_compaction()))
            .collect()
    }

    /// Tokens of the summaries in the current view.
    pub fn view_summary_tokens(&self) -> u64 {
        self.view.summary_tokens
    }

    /// The first summary in the view (a shown summary whose messages are all kept verbatim
    /// takes no place in it).
    pub fn oldest_summary_in_view(&self) -> Option<u32> {
        self.view.oldest_summary()
    }

    /// Bumped by every event that changes the view other than by appending.
    pub fn generation(&self) -> u64 {
        self.view.generation
    }

    /// True when a call was served and the view has only grown by appends since.
    pub fn prefix_stable_since_last_call(&self) -> bool {
        self.view.served_generation == Some(self.view.generation)
    }

    /// The current view.
    pub fn view(&self) -> &[ViewItem] {
        &self.view.items
    }

    /// The seqs of the messages the current view shows as themselves, in order.
    pub(crate) fn view_message_seqs(&self) -> impl Iterator<Item = u64> + '_ {
        self.view.items.iter().filter_map(|it| match it.item {
            Item::Message(seq) => Some(seq),
            Item::Summary(_) | Item::Placeholder { .. } => None,
        })
    }

    /// Estimated tokens of the current view (exactly the sum of its items).
    pub fn view_tokens(&self) -> u64 {
        self.view.tokens
    }

    /// Is `seq` in the view (not removed, not hidden by a flush)?
    pub fn in_view(&self, seq: u64) -> bool {
        self.view.position(seq).is_some()
    }

    /// Index of `seq` in the view.
    pub fn view_position(&self, seq: u64) -> Option<usize> {
        self.view.position(seq)
    }

    /// No orphan tool result, and no answered call whose result is missing from the view.
    pub fn check_tool_pairs(&self) -> Result<(), PairError> {
        self.view.check_tool_pairs(&self.messages)
    }

    /// Every message in the view holds its body (as appended, or as its edit shows it) and no
    /// other message holds one: the bound on a session's memory.
    pub fn check_bodies(&self) -> Result<(), BodyError> {
        let items = &self.view.items;
        let mut view = items.iter().filter_map(|it| match it.item {
            Item::Message(seq) => Some(seq),
            Item::Summary(_) | Item::Placeholder { .. } => None,
        });
        let mut next = view.next();
        for (seq, e) in self.entries().iter().enumerate() {
            let seq = seq as u64;
            let in_view = next == Some(seq);
            if in_view {
                next = view.next();
            }
            let body = self.view.body(seq);
            if body.is_some() != in_view {
                return Err(BodyError::Misplaced { seq, in_view, holds: body.is_some() });
            }
            // An edited message holds its rendering, never its (bigger) original.
            if let (Some(body), Some(edit)) = (body, e.edit) {
                let seen = self.estimator().message(body);
                if seen != edit.tokens {
                    return Err(BodyError::EditTokens { seq, seen, edit: edit.tokens });
                }
            }
        }
        let bodies = self.view.bodies.len();
        if bodies != items.iter().filter(|it| matches!(it.item, Item::Message(_))).count() {
            return Err(BodyError::Count(bodies));
        }
        Ok(())
    }

    /// One past the last seq item `it` accounts for: the message itself, a summary's span, a
    /// placeholder's run.
    pub fn item_end(&self, it: &ViewItem) -> u64 {
        ViewIndex::item_end(it, &self.compaction.ledger)
    }

    /// Of the view's first `len` items (the view a call served): how many messages up to its
    /// end are hidden (in no item as themselves), and how many of those a summary or a
    /// placeholder in those items represents.
    pub fn coverage(&self, len: usize) -> Coverage {
        let all = &self.view.items;
        let items = all.get(..len.min(all.len())).unwrap_or_default();
        let visible: Vec<u64> = items
            .iter()
            .filter_map(|it| match it.item {
                Item::Message(seq) => Some(seq),
                _ => None,
            })
            .collect();
        let end = items.iter().map(|it| self.item_end(it)).max().unwrap_or(0);
        let hidden = end - visible.len() as u64;
        let mut represented = 0u64;
        for it in items {
            let (from, to) = match it.item {
                Item::Message(_) => continue,
                Item::Summary(i) => match self.summaries().get(i as usize) {
                    Some(s) => (s.from, s.to),
                    None => continue,
                },
                Item::Placeholder { from, to } => (from, to),
            };
            let shown = visible.partition_point(|&s| s < to) - visible.partition_point(|&s| s < from);
            represented += (to - from) - shown as u64;
        }
        Coverage { hidden, represented: represented.min(hidden) }
    }

    /// The user message that stands for summary `s` in the view ([`crate::render::summary_message`]).
    pub(crate) fn summary_message(&self, s: &crate::event::SummaryPrepared) -> Message {
        let listed = self.info().is_some_and(|i| i.config.placeholders());
        render::summary_message(&self.messages, s, listed)
    }

    /// The user message a placeholder for the hidden messages `[from, to)` is in the view.
    pub(crate) fn placeholder_message(&self, from: u64, to: u64) -> Message {
        render::placeholder_message(&self.messages.composition(from, to), from, to)
    }

    /// Heap bytes of the view's message bodies, and of its items.
    pub(super) fn view_heap_bytes(&self) -> (usize, usize) {
        (self.view.bodies.heap_bytes(), self.view.items.heap_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::super::given::*;
    use super::super::Invariant;
    use crate::event::EditKind;

    #[test]
    fn given_a_tool_pair_when_only_its_call_is_removed_then_the_served_view_splits_it() {
        // t1 is called at seq 2 and answered at seq 3: removing the call alone leaves an orphan.
        let history = conversation_then(vec![removed(2)]);
        let v = given(history).when(request_served(0, 1)).then_violates(Invariant::ToolPairs);
        assert!(v.detail.contains("seq 3"), "{v}");
        let st = given(conversation_then(vec![removed(2), removed(3)])).when(request_served(0, 1)).then_ok();
        assert!(!st.in_view(2) && !st.in_view(3));
    }

    #[test]
    fn given_a_view_when_messages_are_edited_and_flushed_then_its_tokens_are_its_items_and_bodies_follow_it() {
        let history = conversation_then(vec![edited(3, EditKind::Truncated { keep_chars: 4 }), summary_prepared(0, 4)]);
        let st = fold(&history);
        assert_eq!(st.view_tokens(), st.view().iter().map(|i| u64::from(i.tokens)).sum::<u64>());
        st.check_bodies().unwrap();
        let before = st.generation();
        let st = given(history).when(flushed(0, 4)).then_ok();
        assert_eq!(st.view_tokens(), st.view().iter().map(|i| u64::from(i.tokens)).sum::<u64>());
        assert!(st.generation() > before, "a flush changes the view's generation");
        assert!(
            st.shown(3).is_none() && st.shown(1).is_some(),
            "a flushed message leaves memory, the first human stays"
        );
        st.check_bodies().unwrap();
    }
}
