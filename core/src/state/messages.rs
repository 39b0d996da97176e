//! The messages of a session as the fold keeps them: one [`Entry`] each (facts, tokens, the edit
//! in force), the tool-pair index, media notes, the first and last human message, and which
//! messages a person restored. It owns the rules of the events that add or change a message:
//! `MessageAppended` (dense seqs, known tool calls, room in the index), `Edited` (a target in
//! the view, never a protected one, a kind fit for it) and `Restored` (a target that is edited
//! or flushed); for the last two, that the message as appended is at hand.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::entry::{EditRecord, Entry};
use super::findings::{BodyError, PairError};
use super::heap::HeapSize;
use super::invariant::{Broken, Invariant};
use super::loaded::Loaded;
use super::tools::{self, grow, Link, ToolIndex};
use crate::config::Config;
use crate::event::{EditKind, Event, MessageAppended};
use crate::message::{Message, Role};
use crate::render::{self, Composition, SpanFacts};
use crate::store::Version;

/// Calls during which the ladder leaves a restored message (and the partners restored with it)
/// as restored: a person asked for it back, so the next calls must not take it away again (issue
/// 21: a restored tool result was truncated again two calls later). A later explicit edit, a
/// flush or, after this many calls, the ladder may hide it again.
pub const RESTORE_HOLD_CALLS: u64 = 20;

/// The sub-fold of the messages. Fields are `pub(super)` for the snapshot layout and the heap
/// accounting; only [`Messages::apply`] writes them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Messages {
    pub(super) entries: Vec<Entry>,
    pub(super) tools: ToolIndex,
    pub(super) media: BTreeMap<u64, Box<str>>,
    /// Restored messages and the call count when each was restored: the ladder leaves them be
    /// for [`RESTORE_HOLD_CALLS`] calls.
    pub(super) restored_at: BTreeMap<u64, u64>,
    pub(super) first_human: Option<u64>,
    pub(super) last_human: Option<u64>,
    /// Verbatim messages (system, pinned, first human) that carry a tool call or result: while
    /// there are none, no tool group is kept through a flush and its walk is skipped.
    pub(super) verbatim_tool_messages: u64,
}

/// The bodies of the messages in the view (the view index holds them): as appended, or as their
/// edit shows them.
pub(super) type Bodies = BTreeMap<u64, Arc<Message>>;

/// What the checks of `Edited` and `Restored` read beyond the messages.
pub(super) struct Reads<'a> {
    /// `flushed_prefix_messages`.
    pub(super) flushed: u64,
    pub(super) config: &'a Config,
    /// The bodies of the view's messages.
    pub(super) view: &'a Bodies,
    /// The bodies handed over for the event.
    pub(super) loaded: &'a Loaded,
}

/// The bodies an event brings into the view (or takes out of it): the message as appended, as
/// its edit shows it (`None`: removed), as restored.
pub(super) enum Brought {
    Nothing,
    One(u64, Option<Arc<Message>>),
    Restored(Vec<(u64, Arc<Message>)>),
}

impl Messages {
    pub(super) fn count(&self) -> u64 {
        self.entries.len() as u64
    }

    pub(super) fn entry(&self, seq: u64) -> Option<&Entry> {
        usize::try_from(seq).ok().and_then(|i| self.entries.get(i))
    }

    /// The message `seq` as appended, if the view holds it unedited.
    pub(super) fn original<'a>(&self, seq: u64, view: &'a Bodies) -> Option<&'a Arc<Message>> {
        self.entry(seq).filter(|e| e.edit.is_none()).and_then(|_| view.get(&seq))
    }

    /// The original of `seq` for the event being applied: held by the view, or handed over.
    pub(super) fn original_for_event<'a>(
        &self,
        seq: u64,
        view: &'a Bodies,
        loaded: &'a Loaded,
    ) -> Option<&'a Arc<Message>> {
        self.original(seq, view).or_else(|| loaded.get(seq))
    }

    /// The body an edit of `seq` renders from: the original, or for a trim of a trimmed message
    /// the trimmed one (a trim only drops and clears, and a later one shows at least what the
    /// earlier showed, so trimming it again equals trimming the original).
    fn body_for_edit<'a>(
        &self,
        seq: u64,
        kind: EditKind,
        view: &'a Bodies,
        loaded: &'a Loaded,
    ) -> Option<&'a Arc<Message>> {
        self.original_for_event(seq, view, loaded).or_else(|| match (kind, self.entry(seq)?.edit?.kind) {
            (EditKind::Trimmed { .. }, EditKind::Trimmed { .. }) => view.get(&seq),
            _ => None,
        })
    }

    pub(super) fn check(&self, ev: &Event, r: &Reads<'_>) -> Result<(), Broken> {
        match ev {
            Event::MessageAppended(e) => self.check_append(e, self.count(), &|_| false, &|_| false),
            Event::Edited(e) => {
                self.check_edit(e.seq, e.kind, r)?;
                if e.kind == EditKind::Removed || self.body_for_edit(e.seq, e.kind, r.view, r.loaded).is_some() {
                    return Ok(());
                }
                self.check_loaded(std::iter::once(e.seq), r)
            }
            Event::Restored(e) => {
                let Some(entry) = self.entry(e.seq) else {
                    return Err((Invariant::RestoreTarget, format!("seq {} does not exist", e.seq)));
                };
                if entry.edit.is_none() && !self.hidden_by_flush_at(e.seq, r.flushed) {
                    return Err((Invariant::RestoreTarget, format!("seq {} is neither edited nor flushed", e.seq)));
                }
                if let Some(p) = e.partners.iter().find(|p| self.entry(**p).is_none()) {
                    return Err((Invariant::RestoreTarget, format!("partner seq {p} does not exist")));
                }
                self.check_loaded(std::iter::once(e.seq).chain(e.partners.iter().copied()), r)
            }
            Event::Pinned(e) => self.check_pin(e.seq, e.pin, r),
            _ => Ok(()),
        }
    }

    /// A pin targets a message in the view as appended (restore it first), not pinned already;
    /// an unpin, a message an earlier `Pinned` pinned (a message appended pinned stays so).
    fn check_pin(&self, seq: u64, pin: bool, r: &Reads<'_>) -> Result<(), Broken> {
        let Some(entry) = self.entry(seq) else {
            return Err((Invariant::EditTarget, format!("seq {seq} does not exist ({} messages)", self.count())));
        };
        if !pin {
            return match entry.is_pinned_later() {
                true => Ok(()),
                false if entry.is_pinned() => Err((
                    Invariant::EditProtected,
                    format!("seq {seq} was appended pinned; only a later pin can be undone"),
                )),
                false => Err((Invariant::EditTarget, format!("seq {seq} is not pinned"))),
            };
        }
        if entry.is_pinned() {
            return Err((Invariant::EditTarget, format!("seq {seq} is already pinned")));
        }
        if entry.edit.is_some() || self.hidden_by_flush_at(seq, r.flushed) {
            return Err((Invariant::EditTarget, format!("seq {seq} is not in the view as appended: restore it first")));
        }
        Ok(())
    }

    /// Every seq of `seqs` has its original at hand (in the view unedited, or hydrated).
    fn check_loaded(&self, mut seqs: impl Iterator<Item = u64>, r: &Reads<'_>) -> Result<(), Broken> {
        match seqs.find(|&s| self.original_for_event(s, r.view, r.loaded).is_none()) {
            Some(s) => Err((Invariant::BodyLoaded, BodyError::NotLoaded(s).to_string())),
            None => Ok(()),
        }
    }

    /// Checks an append against the messages plus an overlay of earlier appends of the same
    /// batch (`pending_call`/`pending_answer`), so a batch is validated without a copy.
    pub(super) fn check_append(
        &self,
        e: &MessageAppended,
        count: u64,
        pending_call: &dyn Fn(&str) -> bool,
        pending_answer: &dyn Fn(&str) -> bool,
    ) -> Result<(), Broken> {
        if e.seq != count {
            return Err((Invariant::SeqDense, format!("seq {} appended at message count {count}", e.seq)));
        }
        if !self.tools.room_for(e.seq, &e.message) {
            return Err((
                Invariant::ToolCapacity,
                format!("seq {}: the session already indexes {} tool calls", e.seq, tools::MAX_PAIRS),
            ));
        }
        for id in e.message.result_ids() {
            let pair = self.tools.pair(id);
            let known = pair.is_some() || pending_call(id) || e.message.call_ids().any(|c| c == id);
            if !known {
                return Err((Invariant::UnknownToolCall, format!("seq {} answers unknown tool call {id:?}", e.seq)));
            }
            if let Some(prev) = pair.and_then(|p| p.result()) {
                return Err((
                    Invariant::UnknownToolCall,
                    format!("seq {}: call {id:?} already answered by seq {prev}", e.seq),
                ));
            }
            if pending_answer(id) {
                return Err((
                    Invariant::UnknownToolCall,
                    format!("seq {}: call {id:?} already answered in this batch", e.seq),
                ));
            }
        }
        Ok(())
    }

    fn check_edit(&self, seq: u64, kind: EditKind, r: &Reads<'_>) -> Result<(), Broken> {
        let Some(entry) = self.entry(seq) else {
            return Err((Invariant::EditTarget, format!("seq {seq} does not exist ({} messages)", self.count())));
        };
        if entry.is_system() || entry.is_pinned() {
            return Err((
                Invariant::EditProtected,
                format!("seq {seq} is a {} message", if entry.is_pinned() { "pinned" } else { "system" }),
            ));
        }
        // The first human message holds the user's own instructions (the seeds' incident lost
        // its project path with it); unlike the last one it never changes, so no edit is valid,
        // but one: a first message too large to work beside (`first_message_limit_tokens`) is
        // truncated once (keeping its head and its media), or the ladder would strip
        // everything else on every call.
        if Some(seq) == self.first_human {
            let oversized = u64::from(entry.tokens) > r.config.first_message_limit_tokens();
            if !(oversized && matches!(kind, EditKind::Truncated { .. }) && entry.edit.is_none()) {
                return Err((Invariant::EditProtected, format!("seq {seq} is the first human message")));
            }
        }
        if entry.is_removed() {
            return Err((Invariant::AlreadyRemoved, format!("seq {seq} is already removed")));
        }
        if self.hidden_by_flush_at(seq, r.flushed) {
            return Err((Invariant::EditTarget, format!("seq {seq} is not in the view (flushed)")));
        }
        match kind {
            EditKind::Removed => {
                if Some(seq) == self.last_human {
                    return Err((Invariant::LastUserRemoved, format!("seq {seq} is the last user message")));
                }
                if self.has_unanswered_call(seq) {
                    // The body is at hand: the message is in the view (checked above).
                    let id = r
                        .view
                        .get(&seq)
                        .and_then(|m| m.call_ids().find(|id| self.result_seq(id).is_none()).map(str::to_owned))
                        .unwrap_or_default();
                    return Err((
                        Invariant::UnansweredCallRemoved,
                        format!("seq {seq} makes call {id:?} which has no result yet"),
                    ));
                }
            }
            EditKind::Truncated { .. } if !entry.is_tool_result() && Some(seq) != self.first_human => {
                return Err((Invariant::EditTarget, format!("seq {seq} is not a tool result and cannot be truncated")));
            }
            EditKind::Stubbed { .. } if entry.role() != Role::User => {
                return Err((Invariant::EditTarget, format!("seq {seq} is not a user message and cannot be stubbed")));
            }
            EditKind::Cleared if !entry.is_tool_result() => {
                return Err((Invariant::EditTarget, format!("seq {seq} is not a tool result and cannot be cleared")));
            }
            EditKind::Trimmed { .. } if entry.role() != Role::Assistant => {
                return Err((
                    Invariant::EditTarget,
                    format!("seq {seq} is not an assistant message and cannot be trimmed"),
                ));
            }
            EditKind::Trimmed { thinking, inputs } => {
                if let Some(EditKind::Trimmed { thinking: was_t, inputs: was_i }) = entry.edit.map(|e| e.kind) {
                    if (was_t && !thinking) || (was_i && !inputs) {
                        return Err((
                            Invariant::EditTarget,
                            format!("seq {seq}: a trim must keep what the earlier trim dropped"),
                        ));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Lenient replay: an append at the wrong seq is taken at the message count.
    pub(super) fn repair(&self, ev: &Event, invariant: Invariant) -> Option<Event> {
        match (ev, invariant) {
            (Event::MessageAppended(e), Invariant::SeqDense) => {
                let mut e = e.clone();
                e.seq = self.count();
                Some(Event::MessageAppended(e))
            }
            _ => None,
        }
    }

    /// Applies an event (already checked) and returns the bodies it brings into the view.
    /// `calls` is the count of served calls before it.
    pub(super) fn apply(&mut self, version: Version, ev: &Event, r: &Reads<'_>, calls: u64) -> Brought {
        let (view, loaded) = (r.view, r.loaded);
        match ev {
            Event::MessageAppended(e) => {
                let seq = self.count();
                let m = &e.message;
                let links = self.tools.add(seq, m);
                let first_human = m.is_human() && self.first_human.is_none();
                if m.is_human() {
                    self.first_human.get_or_insert(seq);
                    self.last_human = Some(seq);
                }
                let verbatim = m.is_pinned() || m.role.is_system() || first_human;
                if verbatim && self.tools.next_link() > links {
                    self.verbatim_tool_messages += 1;
                }
                if let Some(note) = render::media_note(m) {
                    self.media.insert(seq, note.into());
                }
                grow(&mut self.entries);
                self.entries.push(Entry::new(version, e.tokens, m, links));
                Brought::One(seq, Some(Arc::new(m.clone())))
            }
            Event::Edited(e) => {
                // The message as its edit shows it replaces its body: the original (a tool
                // output of many kilobytes, say) is in the log.
                let shown = match e.kind {
                    EditKind::Removed => None,
                    kind => self
                        .body_for_edit(e.seq, kind, view, loaded)
                        .map(|m| Arc::new(render::edited_message_as(m, kind, r.config.placeholder_text()))),
                };
                let estimator = r.config.estimator();
                match usize::try_from(e.seq).ok().and_then(|i| self.entries.get_mut(i)) {
                    Some(entry) => {
                        let tokens = shown.as_ref().map_or(0, |m| estimator.message(m));
                        entry.edit = Some(EditRecord { kind: e.kind, tokens });
                        Brought::One(e.seq, shown)
                    }
                    None => Brought::Nothing,
                }
            }
            Event::Restored(e) => {
                let seqs = std::iter::once(e.seq).chain(e.partners.iter().copied());
                // Each original as the event found it (a partner listed twice finds it once).
                let originals: Vec<(u64, Option<Arc<Message>>)> =
                    seqs.map(|seq| (seq, self.original_for_event(seq, view, loaded).cloned())).collect();
                let mut brought = Vec::with_capacity(originals.len());
                for (seq, original) in originals {
                    self.restored_at.insert(seq, calls);
                    if let Some(entry) = usize::try_from(seq).ok().and_then(|i| self.entries.get_mut(i)) {
                        entry.edit = None;
                        entry.restored = seq < r.flushed;
                        if let Some(m) = original {
                            brought.push((seq, m));
                        }
                    }
                }
                Brought::Restored(brought)
            }
            Event::Pinned(e) => {
                let verbatim_anyway = Some(e.seq) == self.first_human;
                let has_links = self.tool_links(e.seq).next().is_some();
                if let Some(entry) = usize::try_from(e.seq).ok().and_then(|i| self.entries.get_mut(i)) {
                    // A pinned tool message keeps its group through a flush, as one appended pinned.
                    if has_links && !verbatim_anyway && !entry.is_system() {
                        self.verbatim_tool_messages = match e.pin {
                            true => self.verbatim_tool_messages + 1,
                            false => self.verbatim_tool_messages.saturating_sub(1),
                        };
                    }
                    entry.set_pinned(e.pin);
                }
                Brought::Nothing
            }
            Event::RequestServed(e) => {
                let calls = e.call + 1;
                self.restored_at.retain(|_, at| calls < *at + RESTORE_HOLD_CALLS);
                Brought::Nothing
            }
            _ => Brought::Nothing,
        }
    }

    /// Would `seq` be hidden if `flushed_prefix_messages` were `flushed`?
    pub(super) fn hidden_by_flush_at(&self, seq: u64, flushed: u64) -> bool {
        seq < flushed && !self.kept_through_flush(seq) && !self.entry(seq).is_some_and(|e| e.restored)
    }

    /// See [`super::State::kept_through_flush`].
    pub(super) fn kept_through_flush(&self, seq: u64) -> bool {
        if self.kept_verbatim(seq) {
            return true;
        }
        // Only a verbatim message (system, pinned, first human) that carries a call or result keeps
        // a tool group: without one, skip the walk (a flush rebuilds the view over the whole session).
        if self.verbatim_tool_messages == 0 || self.tool_links(seq).next().is_none() {
            return false;
        }
        // Walk the tool group: calls to their results, results to their calls.
        let mut group = vec![seq];
        let mut i = 0;
        while let Some(&s) = group.get(i) {
            i += 1;
            if self.kept_verbatim(s) {
                return true;
            }
            for p in self.tool_partners(s) {
                if !group.contains(&p) {
                    group.push(p);
                }
            }
        }
        false
    }

    /// Is `seq` itself one of the messages a flush never hides: system, pinned, first human?
    fn kept_verbatim(&self, seq: u64) -> bool {
        Some(seq) == self.first_human || self.entry(seq).is_some_and(|e| e.is_system() || e.is_pinned())
    }

    pub(super) fn tool_links(&self, seq: u64) -> impl Iterator<Item = Link> + '_ {
        let (start, end) = match self.entry(seq) {
            Some(e) => (e.links, self.entry(seq + 1).map_or(self.tools.next_link(), |next| next.links)),
            None => (0, 0),
        };
        self.tools.links(start, end.max(start))
    }

    pub(super) fn tool_partners(&self, seq: u64) -> Vec<u64> {
        let calls = self.tool_links(seq).filter_map(|l| match l {
            Link::Call(p) => p.result(),
            Link::Result(_) => None,
        });
        let owners = self.tool_links(seq).filter_map(|l| match l {
            Link::Result(p) => Some(p.call()),
            Link::Call(_) => None,
        });
        calls.chain(owners).collect()
    }

    fn result_seq(&self, id: &str) -> Option<u64> {
        self.tools.pair(id).and_then(|p| p.result())
    }

    pub(super) fn has_unanswered_call(&self, seq: u64) -> bool {
        self.tool_links(seq).any(|l| matches!(l, Link::Call(p) if p.result().is_none()))
    }

    /// A span `[from, to)` must contain both ends of every tool pair it touches.
    pub(super) fn span_pairs_ok(&self, from: u64, to: u64) -> Result<(), PairError> {
        let inside = |s: u64| (from..to).contains(&s);
        for seq in from..to {
            for link in self.tool_links(seq) {
                match link {
                    Link::Call(p) => match p.result() {
                        Some(result) if !inside(result) => {
                            return Err(PairError::AnsweredOutside { call: seq, result, from, to })
                        }
                        None => return Err(PairError::Unanswered(seq)),
                        _ => {}
                    },
                    Link::Result(p) if !inside(p.call()) => {
                        return Err(PairError::CallOutside { result: seq, call: p.call(), from, to })
                    }
                    Link::Result(_) => {}
                }
            }
        }
        Ok(())
    }

    /// What the hidden run `[from, to)` held, read from the tool index (no message bodies).
    pub(super) fn composition(&self, from: u64, to: u64) -> Composition {
        let mut c = Composition::default();
        for seq in from..to {
            let mut linked = false;
            for link in self.tool_links(seq) {
                linked = true;
                if let Link::Call(p) = link {
                    let name = self.tools.name(&p);
                    match c.calls.get_mut(name) {
                        Some(n) => *n += 1,
                        None => {
                            c.calls.insert(name.to_owned(), 1);
                        }
                    }
                }
            }
            if !linked && self.entry(seq).is_some() {
                c.other += 1;
            }
        }
        c
    }

    /// Heap bytes of the entries (by capacity), and of the tool index with the media notes.
    pub(super) fn heap_bytes(&self) -> (usize, usize) {
        (self.entries.capacity() * std::mem::size_of::<Entry>(), self.tools.heap_bytes() + self.media.heap_bytes())
    }
}

impl SpanFacts for Messages {
    fn elided(&self, from: u64, to: u64) -> Vec<u64> {
        (from..to)
            .filter(|&seq| self.hidden_by_flush_at(seq, to))
            .filter(|&seq| self.entry(seq).is_some_and(|e| e.is_tool_result() || e.has_media()))
            .collect()
    }

    fn tokens(&self, seq: u64) -> Option<u32> {
        self.entry(seq).map(|e| e.tokens)
    }

    fn result_tool_names(&self, seq: u64) -> Vec<&str> {
        self.tool_links(seq)
            .filter_map(|l| match l {
                Link::Result(p) => Some(self.tools.name(&p)),
                Link::Call(_) => None,
            })
            .collect()
    }

    fn media_note(&self, seq: u64) -> Option<&str> {
        self.media.get(&seq).map(|n| &**n)
    }
}

impl super::State {
    /// All appended messages.
    pub fn entries(&self) -> &[Entry] {
        &self.messages.entries
    }

    /// Message count.
    pub fn message_count(&self) -> u64 {
        self.messages.count()
    }

    /// The message with this seq.
    pub fn entry(&self, seq: u64) -> Option<&Entry> {
        self.messages.entry(seq)
    }

    /// The message `seq` as appended, when it is in the view unedited (otherwise it is in the
    /// log: `Session::messages`).
    pub fn original(&self, seq: u64) -> Option<&Arc<Message>> {
        self.messages.original(seq, &self.view.bodies)
    }

    /// Seq of the first human message.
    pub fn first_human(&self) -> Option<u64> {
        self.messages.first_human
    }

    /// Seq of the last human message.
    pub(crate) fn last_human(&self) -> Option<u64> {
        self.messages.last_human
    }

    /// The tool links of `seq`: the calls it makes and the calls it answers, in message order.
    pub(crate) fn tool_links(&self, seq: u64) -> impl Iterator<Item = Link> + '_ {
        self.messages.tool_links(seq)
    }

    /// The messages tied to `seq` by a tool call: the results of its answered calls, then the
    /// calls it answers.
    pub(crate) fn tool_partners(&self, seq: u64) -> Vec<u64> {
        self.messages.tool_partners(seq)
    }

    /// The results of the calls `seq` makes, or `None` if one of them is not answered yet.
    pub(crate) fn call_results(&self, seq: u64) -> Option<Vec<u64>> {
        self.tool_links(seq)
            .filter_map(|l| match l {
                Link::Call(p) => Some(p.result()),
                Link::Result(_) => None,
            })
            .collect()
    }

    /// The names of the tools `seq` calls or answers, in message order.
    pub(crate) fn tool_names(&self, seq: u64) -> Vec<&str> {
        self.tool_links(seq)
            .map(|l| match l {
                Link::Call(p) | Link::Result(p) => self.messages.tools.name(&p),
            })
            .collect()
    }

    /// The name of the tool of call `id`.
    pub(crate) fn tool_name(&self, id: &str) -> Option<&str> {
        self.messages.tools.pair(id).map(|p| self.messages.tools.name(&p))
    }

    /// How a summary lists the media of `seq` (see [`crate::view::media_note`]).
    pub fn media_note(&self, seq: u64) -> Option<&str> {
        self.messages.media_note(seq)
    }

    /// Is `seq` a restored message the ladder still leaves be ([`RESTORE_HOLD_CALLS`])?
    pub(crate) fn restore_held(&self, seq: u64) -> bool {
        self.messages.restored_at.get(&seq).is_some_and(|&at| self.meter.calls < at + RESTORE_HOLD_CALLS)
    }

    /// Is `seq` hidden because a flush covered it?
    pub fn hidden_by_flush(&self, seq: u64) -> bool {
        self.messages.hidden_by_flush_at(seq, self.compaction.flushed)
    }

    /// System, pinned and the first human message stay verbatim through a flush, together with
    /// the whole tool group of any of them (its call and every result of that call, so no pair
    /// is split: a pinned result of a parallel call keeps its siblings too, and a system or
    /// first human message that makes a call keeps its result).
    pub(crate) fn kept_through_flush(&self, seq: u64) -> bool {
        self.messages.kept_through_flush(seq)
    }

    /// A span `[from, to)` must contain both ends of every tool pair it touches.
    pub(crate) fn span_pairs_ok(&self, from: u64, to: u64) -> Result<(), PairError> {
        self.messages.span_pairs_ok(from, to)
    }

    /// What the hidden run `[from, to)` held (what [`crate::placeholder::text`] names).
    pub(crate) fn composition(&self, from: u64, to: u64) -> Composition {
        self.messages.composition(from, to)
    }

    /// Messages in `[from, to)` that a flush hides and that carry tool output or media.
    pub(crate) fn elided(&self, from: u64, to: u64) -> Vec<u64> {
        self.messages.elided(from, to)
    }
}

#[cfg(test)]
mod tests {
    use super::super::given::*;
    use super::super::Invariant;
    use crate::event::EditKind;

    #[test]
    fn given_messages_when_an_append_skips_a_seq_or_answers_no_call_then_it_is_refused() {
        given(conversation()).when(assistant(7, "skips 6")).then_violates(Invariant::SeqDense);
        given(conversation()).when(user(5, "reuses 5")).then_violates(Invariant::SeqDense);
        let answers_nothing = tool_result_of(6, "t9");
        given(conversation()).when(answers_nothing).then_violates(Invariant::UnknownToolCall);
        given(conversation()).when(tool_result_of(6, "t1")).then_violates(Invariant::UnknownToolCall);
        let st = given(conversation()).when(assistant(6, "ok")).then_ok();
        assert_eq!((st.message_count(), st.view().len()), (7, 7));
    }

    #[test]
    fn given_protected_messages_when_the_ladder_edits_them_then_the_edit_is_refused() {
        given(conversation()).when(removed(0)).then_violates(Invariant::EditProtected); // system
        given(conversation()).when(removed(1)).then_violates(Invariant::EditProtected); // first human
        given(conversation()).when(removed(5)).then_violates(Invariant::LastUserRemoved);
        given(conversation())
            .when(edited(4, EditKind::Truncated { keep_chars: 3 }))
            .then_violates(Invariant::EditTarget);
        given(conversation_then(vec![removed(4)])).when(removed(4)).then_violates(Invariant::AlreadyRemoved);
        given(conversation()).when(removed(9)).then_violates(Invariant::EditTarget);
        let st = given(conversation()).when(edited(3, EditKind::Truncated { keep_chars: 3 })).then_ok();
        let edit = st.entry(3).and_then(|e| e.edit).unwrap();
        assert!(
            edit.tokens > 0 && st.original(3).is_none() && st.shown(3).is_some(),
            "the rendering replaces the body"
        );
    }

    #[test]
    fn given_an_unanswered_call_when_it_is_removed_then_the_refusal_names_the_call() {
        let history = conversation_then(vec![tool_use_of(6, "t2"), user(7, "and?")]);
        let v = given(history).when(removed(6)).then_violates(Invariant::UnansweredCallRemoved);
        assert!(v.detail.contains("\"t2\""), "{v}");
    }

    #[test]
    fn given_an_edited_message_when_it_is_restored_then_it_needs_its_body_and_is_held() {
        let history = conversation_then(vec![edited(3, EditKind::Truncated { keep_chars: 3 })]);
        given(history.clone()).when(restored(4, vec![])).then_violates(Invariant::RestoreTarget);
        given(history.clone()).when(restored(3, vec![9])).then_violates(Invariant::RestoreTarget);
        // Without hydration the original is not at hand: refused, never folded differently.
        let mut st = fold(&history);
        let v = st.apply(st.version() + 1, &restored(3, vec![])).unwrap_err();
        assert_eq!(v.invariant, Invariant::BodyLoaded);
        let st = given(history).when(restored(3, vec![])).then_ok();
        assert!(st.entry(3).is_some_and(|e| e.edit.is_none()) && st.original(3).is_some());
        assert!(st.restore_held(3), "the ladder leaves a restored message be");
    }

    fn tool_use_of(seq: u64, id: &str) -> crate::event::Event {
        let json = format!(
            r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"{id}","name":"grep","input":{{}}}}]}}"#
        );
        message(seq, &json)
    }

    fn tool_result_of(seq: u64, id: &str) -> crate::event::Event {
        message(
            seq,
            &format!(r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"{id}","content":"x"}}]}}"#),
        )
    }
}
