//! `State`: the fold of a session's events, with every invariant checked on each transition.
//!
//! **Architecture Invariant:** [`State::apply`] (and its lenient twin) is the only way state
//! changes; live commits and replay use it alike.
//!
//! The state keeps what the view and the policies need: per message a few facts and the tool
//! links ([`Entry`], [`tools`]), the bodies of the messages in the view (as appended, or the
//! small rendering of their edit), the text of the summaries still current. A message's body leaves memory when it leaves the view; an event that needs it
//! again (a restore, a second edit of the same message) is applied after [`State::hydrate`]
//! handed it over, read back from the log by whoever applies the event
//! ([`State::bodies_needed`] says which). Hydration fills a cache: what the fold computes is the
//! same with or without it, and an event whose body was not handed over is refused
//! ([`Invariant::BodyLoaded`]) rather than folded differently.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::Config;
use crate::event::{EditKind, Event, GuardKind, ImportSource, SummaryPrepared};
use crate::message::Message;
use crate::store::Version;
use crate::time::Millis;
use crate::view;
use crate::wire::WireFormat;

mod entry;
pub mod findings;
pub mod heap;
mod summaries;
pub mod tools;
pub use entry::{has_media, EditRecord, Entry};
use findings::{BodyError, PairError};
use heap::{btree_bytes, HeapSize};
pub use summaries::{Standing, Summaries, SummaryState};
use tools::{grow, Link, ToolIndex};

/// Calls during which the ladder leaves a restored message (and the partners restored with it)
/// as restored: a person asked for it back, so the next calls must not take it away again (issue
/// 21: a restored tool result was truncated again two calls later). A later explicit edit, a
/// flush or, after this many calls, the ladder may hide it again.
pub const RESTORE_HOLD_CALLS: u64 = 20;

/// Session-level facts from `SessionStarted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Session id.
    pub id: Uuid,
    /// Wire format.
    pub format: WireFormat,
    /// Knobs.
    pub config: Config,
    /// Creation time.
    pub started_at: Millis,
}

/// Where an import stands (`SessionStarted.import`, then `ImportCompleted`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportState {
    /// The transcript the import reads.
    pub source: ImportSource,
    /// `ImportCompleted` is in the log.
    pub completed: bool,
}

/// Message bodies read back from the log for the next event (see [`State::hydrate`]). A cache,
/// not part of the fold: never compared, never in a snapshot, emptied by every apply.
#[derive(Debug, Clone, Default)]
struct Loaded(BTreeMap<u64, Arc<Message>>);

impl PartialEq for Loaded {
    fn eq(&self, _: &Loaded) -> bool {
        true
    }
}

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

/// The provider-reported usage the meter anchors on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anchor {
    /// Reported input tokens of the call.
    pub reported: u64,
    /// Our estimate of that call's view.
    pub estimate: u64,
    /// View generation of that call (the anchor is void once the history changes).
    pub generation: u64,
}

/// How many hidden messages a view represents ([`State::coverage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Coverage {
    /// Messages up to the view's end that it does not show as themselves.
    pub hidden: u64,
    /// Of those, how many a summary or a placeholder in the view stands for (goal: all).
    pub represented: u64,
}

/// Where a state's heap bytes go ([`State::heap_report`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeapReport {
    /// Bodies of the messages in the view (as appended, or as their edits show them).
    pub bodies: usize,
    /// One [`Entry`] per message, by capacity.
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

/// Names of the invariants of DESIGN §7, for error messages and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Invariant {
    /// The first event is `SessionStarted`, and only the first.
    SessionStart,
    /// Versions are contiguous.
    VersionContiguous,
    /// `seq` of an append equals the message count.
    SeqDense,
    /// `0 ≤ flushed ≤ compacted ≤ message count`.
    Watermarks,
    /// Watermarks never move backwards; a summary starts where the last one ended.
    WatermarkBackwards,
    /// A prepared span does not split a tool call from its results.
    SpanSplitsToolPair,
    /// An edit targets an existing message that is in the view, with a kind fit for it.
    EditTarget,
    /// System and pinned messages and the first human message are never edited.
    EditProtected,
    /// The last user message is never removed.
    LastUserRemoved,
    /// An already-removed message is not edited again.
    AlreadyRemoved,
    /// A tool call without a result is never removed.
    UnansweredCallRemoved,
    /// The view has no orphan tool result and no answered call whose result is missing.
    ToolPairs,
    /// A tool result answers a call that exists.
    UnknownToolCall,
    /// `RequestServed.at` never goes backwards.
    TimeBackwards,
    /// Calls are numbered 0, 1, 2, …
    CallSequence,
    /// A restore targets an edited or flushed message.
    RestoreTarget,
    /// A condensed summary covers exactly the oldest current summaries, within what is prepared.
    CondensedSpan,
    /// Only the oldest summary in the view is retired.
    RetireTarget,
    /// An event that needs a message as appended (a restore, a second edit of one message)
    /// gets it: the message is in the view unedited, or its body was loaded
    /// ([`State::hydrate`]). Broken only by a caller that skipped hydration, never by a log.
    BodyLoaded,
    /// `ImportCompleted` ends an unfinished import once every announced message is appended.
    ImportCompleted,
    /// A session indexes at most 2^31 − 1 tool calls, 2^32 − 1 tool links, and tool links of
    /// messages below seq 2^32 − 1 (bounds no real session nears; beyond them an append is
    /// refused rather than mis-indexed).
    ToolCapacity,
    /// A `Branched` record follows exactly the records it says it copied, with the messages
    /// they hold.
    BranchPoint,
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// An event that breaks an invariant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("version {version}: {event} breaks invariant {invariant}: {detail}")]
pub struct Violation {
    /// The event's version.
    pub version: Version,
    /// The event kind.
    pub event: &'static str,
    /// Which invariant.
    pub invariant: Invariant,
    /// The numbers.
    pub detail: String,
}

/// The folded state of a session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    info: Option<SessionInfo>,
    version: Version,
    entries: Vec<Entry>,
    /// The bodies of the messages in the view: as appended, or as their edit shows them.
    bodies: BTreeMap<u64, Arc<Message>>,
    tools: ToolIndex,
    media: BTreeMap<u64, Box<str>>,
    summaries: Summaries,
    compacted: u64,
    flushed: u64,
    calls: u64,
    last_request_at: Option<Millis>,
    anchor: Option<Anchor>,
    /// The last trusted report and its view's estimate: the provider's rate, kept across
    /// history changes and calls without a report.
    rate: Option<(u64, u64)>,
    /// Restored messages and the call count when each was restored: the ladder leaves them be
    /// for [`RESTORE_HOLD_CALLS`] calls.
    restored_at: BTreeMap<u64, u64>,
    breaker: u32,
    raised: BTreeSet<GuardKind>,
    first_human: Option<u64>,
    last_human: Option<u64>,
    generation: u64,
    served_generation: Option<u64>,
    checked_generation: u64,
    view: Vec<ViewItem>,
    view_tokens: u64,
    view_summary_tokens: u64,
    verbatim_tool_messages: u64,
    import: Option<ImportState>,
    last_served: Option<LastServed>,
    summary_failures: u32,
    fork_refusals: BTreeMap<String, u64>,
    /// The last summary job the summarizer refused deterministically (a 4xx): `(from, to,
    /// merged)`. It is not offered again until the job differs; a prepared summary clears it.
    summary_rejected: Option<(u64, u64, Vec<u32>)>,
    #[serde(skip)]
    loaded: Loaded,
}

/// What the last `RequestServed` recorded: the prefix a fork summary appends to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastServed {
    /// Its call number.
    pub call: u64,
    /// Digest of its view.
    pub digest: String,
    /// Messages in its view.
    pub view_messages: u64,
    /// Estimated tokens of its view.
    pub view_tokens: u64,
    /// What it carried besides the messages, if the host said.
    pub request: Option<crate::event::RequestRecord>,
}

fn violation(version: Version, ev: &Event, invariant: Invariant, detail: impl fmt::Display) -> Violation {
    Violation { version, event: ev.name(), invariant, detail: detail.to_string() }
}

impl State {
    /// The empty state before `SessionStarted`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Session facts (`None` before `SessionStarted`).
    pub fn info(&self) -> Option<&SessionInfo> {
        self.info.as_ref()
    }

    /// Stream version of the last applied event.
    pub fn version(&self) -> Version {
        self.version
    }

    /// All appended messages.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Message count.
    pub fn message_count(&self) -> u64 {
        self.entries.len() as u64
    }

    /// The message with this seq.
    pub fn entry(&self, seq: u64) -> Option<&Entry> {
        usize::try_from(seq).ok().and_then(|i| self.entries.get(i))
    }

    /// The message `seq` as appended, when it is in the view unedited (otherwise it is in the
    /// log: `Session::messages`).
    pub fn original(&self, seq: u64) -> Option<&Arc<Message>> {
        self.entry(seq).filter(|e| e.edit.is_none()).and_then(|_| self.bodies.get(&seq))
    }

    /// The message `seq` as the view shows it (as appended, or as its edit shows it), when it
    /// is in the view.
    pub fn shown(&self, seq: u64) -> Option<&Arc<Message>> {
        self.bodies.get(&seq)
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

    /// Where the import that created this session stands (`None`: not an import).
    pub fn import(&self) -> Option<&ImportState> {
        self.import.as_ref()
    }

    /// An import created this session and has not finished it: readers treat the session as
    /// absent, and only a retried import of the same transcript may write to it.
    pub fn import_unfinished(&self) -> bool {
        self.import.as_ref().is_some_and(|i| !i.completed)
    }

    /// Prepared summaries, in order.
    pub fn summaries(&self) -> &[Arc<SummaryPrepared>] {
        self.summaries.prepared()
    }

    /// The summaries with their standing (pending, shown, condensed, retired).
    pub fn summary_ledger(&self) -> &Summaries {
        &self.summaries
    }

    /// Tokens of the summaries in the current view.
    pub fn view_summary_tokens(&self) -> u64 {
        self.view_summary_tokens
    }

    /// The first summary in the view (a shown summary whose messages are all kept verbatim
    /// takes no place in it).
    pub fn oldest_summary_in_view(&self) -> Option<u32> {
        self.view.iter().find_map(|it| match it.item {
            Item::Summary(i) => Some(i),
            Item::Message(_) | Item::Placeholder { .. } => None,
        })
    }

    /// Something prepared waits for a flush: a span of messages, or a condensed summary.
    pub fn flush_pending(&self) -> bool {
        self.compacted > self.flushed || !self.summaries.condensed_pending(self.compacted).is_empty()
    }

    /// `compacted_prefix_messages`.
    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    /// `flushed_prefix_messages`.
    pub fn flushed(&self) -> u64 {
        self.flushed
    }

    /// Calls served so far.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// When the last call completed.
    pub fn last_request_at(&self) -> Option<Millis> {
        self.last_request_at
    }

    /// Consecutive passes that needed compaction and still ended over the budget.
    pub fn breaker_count(&self) -> u32 {
        self.breaker
    }

    /// The last served request, if any.
    pub fn last_served(&self) -> Option<&LastServed> {
        self.last_served.as_ref()
    }

    /// Summary attempts that failed in a row (reset by a prepared summary, and by a call whose
    /// view is under the soft threshold).
    pub fn summary_failures(&self) -> u32 {
        self.summary_failures
    }

    /// Was a job with this span (and these merged summaries) refused deterministically by the
    /// summarizer, with no summary prepared since? Such a job is not offered again.
    pub fn summary_rejected(&self, from: u64, to: u64, merged: &[u32]) -> bool {
        self.summary_rejected.as_ref().is_some_and(|(f, t, m)| *f == from && *t == to && m.as_slice() == merged)
    }

    /// Is the engine holding back summary jobs after consecutive failures?
    pub fn summarizer_paused(&self) -> bool {
        self.raised.contains(&GuardKind::SummarizerPaused)
    }

    /// How often each fork refusal or decline occurred (by reason name), over every recorded
    /// summary attempt.
    pub fn fork_refusals(&self) -> &BTreeMap<String, u64> {
        &self.fork_refusals
    }

    /// Guards currently latched (raised and not re-armed).
    pub fn raised(&self) -> &BTreeSet<GuardKind> {
        &self.raised
    }

    /// Seq of the first human message.
    pub fn first_human(&self) -> Option<u64> {
        self.first_human
    }

    /// Seq of the last human message.
    pub fn last_human(&self) -> Option<u64> {
        self.last_human
    }

    /// Seq of the message that makes call `id`.
    pub fn call_seq(&self, id: &str) -> Option<u64> {
        self.tools.pair(id).map(|p| p.call())
    }

    /// Seq of the message that answers call `id`.
    pub fn result_seq(&self, id: &str) -> Option<u64> {
        self.tools.pair(id).and_then(|p| p.result())
    }

    /// The tool links of `seq`: the calls it makes and the calls it answers, in message order.
    pub fn tool_links(&self, seq: u64) -> impl Iterator<Item = Link> + '_ {
        let (start, end) = match self.entry(seq) {
            Some(e) => (e.links, self.entry(seq + 1).map_or(self.tools.next_link(), |next| next.links)),
            None => (0, 0),
        };
        self.tools.links(start, end.max(start))
    }

    /// The messages tied to `seq` by a tool call: the results of its answered calls, then the
    /// calls it answers.
    pub fn tool_partners(&self, seq: u64) -> Vec<u64> {
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

    /// The results of the calls `seq` makes, or `None` if one of them is not answered yet.
    pub fn call_results(&self, seq: u64) -> Option<Vec<u64>> {
        self.tool_links(seq)
            .filter_map(|l| match l {
                Link::Call(p) => Some(p.result()),
                Link::Result(_) => None,
            })
            .collect()
    }

    /// Does `seq` make a call that has no result in the log yet?
    pub fn has_unanswered_call(&self, seq: u64) -> bool {
        self.tool_links(seq).any(|l| matches!(l, Link::Call(p) if p.result().is_none()))
    }

    /// The names of the tools whose results `seq` carries, in message order.
    pub fn result_tool_names(&self, seq: u64) -> Vec<&str> {
        self.tool_links(seq)
            .filter_map(|l| match l {
                Link::Result(p) => Some(self.tools.name(&p)),
                Link::Call(_) => None,
            })
            .collect()
    }

    /// The name of the tool of call `id`.
    pub fn tool_name(&self, id: &str) -> Option<&str> {
        self.tools.pair(id).map(|p| self.tools.name(&p))
    }

    /// The name of the tool of a pair.
    pub fn tool_name_of(&self, pair: &tools::Pair) -> &str {
        self.tools.name(pair)
    }

    /// How a summary lists the media of `seq` (see [`view::media_note`]).
    pub fn media_note(&self, seq: u64) -> Option<&str> {
        self.media.get(&seq).map(|n| &**n)
    }

    /// Bumped by every event that changes the view other than by appending.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// True when a call was served and the view has only grown by appends since.
    pub fn prefix_stable_since_last_call(&self) -> bool {
        self.served_generation == Some(self.generation)
    }

    /// The current view.
    pub fn view(&self) -> &[ViewItem] {
        &self.view
    }

    /// Estimated tokens of the current view (exactly the sum of its items).
    pub fn view_tokens(&self) -> u64 {
        self.view_tokens
    }

    /// The meter: the last provider-reported total plus the estimate of what was added since,
    /// or the plain estimate when there is no valid anchor. What was added is counted at the
    /// rate the provider counted the anchored view (reported ÷ estimate) when that is above 1:
    /// a provider whose tokenizer counts 30% more than the estimate will count the new messages
    /// 30% higher too, and a cache-aware session may let the meter reach the budget itself.
    /// Once the history changed (a flush, an edit, a restore) the anchor's total no longer
    /// applies, but the provider still counts at its rate: the whole estimate is scaled by the
    /// last trusted rate above 1 (issue 21: the call after a restore went over the budget by
    /// the provider's count while the plain estimate said it fit).
    pub fn metered_tokens(&self, estimate: u64) -> u64 {
        let scaled = |n: u64, (reported, est): (u64, u64)| -> u64 {
            match reported > est && est > 0 {
                true => u64::try_from(u128::from(n) * u128::from(reported) / u128::from(est)).unwrap_or(u64::MAX),
                false => n,
            }
        };
        match self.anchor {
            Some(a) if a.generation == self.generation => {
                let added = scaled(estimate.saturating_sub(a.estimate), (a.reported, a.estimate));
                a.reported.saturating_add(added)
            }
            _ => self.rate.map_or(estimate, |r| scaled(estimate, r)),
        }
    }

    /// Is `seq` a restored message the ladder still leaves be ([`RESTORE_HOLD_CALLS`])?
    pub fn restore_held(&self, seq: u64) -> bool {
        self.restored_at.get(&seq).is_some_and(|&at| self.calls < at + RESTORE_HOLD_CALLS)
    }

    /// Is `seq` in the view (not removed, not hidden by a flush)?
    pub fn in_view(&self, seq: u64) -> bool {
        self.view_position(seq).is_some()
    }

    /// Index of `seq` in the view.
    pub fn view_position(&self, seq: u64) -> Option<usize> {
        let pos = self.view.partition_point(|it| it.seq < seq);
        matches!(self.view.get(pos), Some(ViewItem { item: Item::Message(s), .. }) if *s == seq).then_some(pos)
    }

    /// Is `seq` hidden because a flush covered it?
    pub fn hidden_by_flush(&self, seq: u64) -> bool {
        self.hidden_by_flush_at(seq, self.flushed)
    }

    /// Would `seq` be hidden if `flushed_prefix_messages` were `flushed`?
    pub fn hidden_by_flush_at(&self, seq: u64, flushed: u64) -> bool {
        seq < flushed && !self.kept_through_flush(seq) && !self.entry(seq).is_some_and(|e| e.restored)
    }

    /// System, pinned and the first human message stay verbatim through a flush, together with
    /// the whole tool group of any of them (its call and every result of that call, so no pair
    /// is split: a pinned result of a parallel call keeps its siblings too, and a system or
    /// first human message that makes a call keeps its result).
    pub fn kept_through_flush(&self, seq: u64) -> bool {
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

    /// Seqs whose message as appended `ev` needs and this state does not hold: load each from
    /// the log and [`State::hydrate`] it before applying `ev`. Empty for almost every event:
    /// only a restore, and a second edit of an already edited message, need one.
    pub fn bodies_needed(&self, ev: &Event) -> Vec<u64> {
        let seqs: Vec<u64> = match ev {
            Event::Restored(e) => std::iter::once(e.seq).chain(e.partners.iter().copied()).collect(),
            Event::Edited(e) if e.kind != EditKind::Removed => vec![e.seq],
            _ => return Vec::new(),
        };
        let mut out: Vec<u64> =
            seqs.into_iter().filter(|&s| self.entry(s).is_some() && self.original(s).is_none()).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Hands over the message `seq` as appended, read back from the log, for the next event
    /// ([`State::bodies_needed`]). It fills a cache: the fold's results do not depend on it,
    /// and the next apply empties it. A message that does not exist is ignored.
    pub fn hydrate(&mut self, seq: u64, message: Arc<Message>) {
        if self.entry(seq).is_some() {
            self.loaded.0.insert(seq, message);
        }
    }

    /// The original of `seq` for the event being applied: held, or handed over.
    fn original_for_event(&self, seq: u64) -> Option<&Arc<Message>> {
        self.original(seq).or_else(|| self.loaded.0.get(&seq))
    }

    /// Is `seq` itself one of the messages a flush never hides: system, pinned, first human?
    fn kept_verbatim(&self, seq: u64) -> bool {
        Some(seq) == self.first_human || self.entry(seq).is_some_and(|e| e.is_system() || e.is_pinned())
    }

    /// Applies one event, checking every invariant. On `Err` the state may be partly updated
    /// and must be discarded (live commits apply to a copy; strict replay stops).
    pub fn apply(&mut self, version: Version, ev: &Event) -> Result<(), Violation> {
        let result = self.check(version, ev).and_then(|()| {
            self.mutate(version, ev);
            self.post_check(version, ev)
        });
        self.loaded.0.clear();
        result
    }

    /// Applies one event for a postmortem of a log that breaks invariants: the event is
    /// clamped where that is meaningful or skipped, and every violation is returned.
    pub fn apply_lenient(&mut self, version: Version, ev: &Event) -> Vec<Violation> {
        let mut found = Vec::new();
        if version != self.version + 1 {
            found.push(violation(
                version,
                ev,
                Invariant::VersionContiguous,
                format!("expected version {}, got {version}", self.version + 1),
            ));
            if version <= self.version {
                // A duplicate or out-of-order record: skip it, keep the version where it was.
                return found;
            }
            // A gap: take the writer's numbering and check the event on its own merits.
            self.version = version - 1;
        }
        match self.check(version, ev) {
            Ok(()) => self.mutate(version, ev),
            Err(v) => {
                let repaired = self.repair(ev, &v);
                found.push(v);
                match repaired {
                    Some(fixed) if self.check(version, &fixed).is_ok() => self.mutate(version, &fixed),
                    _ => self.version = version,
                }
            }
        }
        if let Err(v) = self.post_check(version, ev) {
            found.push(v);
        }
        self.loaded.0.clear();
        found
    }

    fn count(&self) -> u64 {
        self.entries.len() as u64
    }

    fn check(&self, version: Version, ev: &Event) -> Result<(), Violation> {
        let fail = |inv, detail: String| Err(violation(version, ev, inv, detail));
        if version != self.version + 1 {
            return fail(Invariant::VersionContiguous, format!("expected version {}, got {version}", self.version + 1));
        }
        match (ev, &self.info) {
            (Event::SessionStarted(_), None) => return Ok(()),
            (Event::SessionStarted(_), Some(_)) => {
                return fail(Invariant::SessionStart, "session already started".into())
            }
            (_, None) => return fail(Invariant::SessionStart, "the first event must be SessionStarted".into()),
            _ => {}
        }
        match ev {
            Event::SessionStarted(_) | Event::GuardRaised(_) | Event::SummaryFailed(_) => Ok(()),
            // A rejection changes nothing; a learned limit only lowers the budget.
            Event::CallRejected(_) | Event::LimitLearned(_) => Ok(()),
            // An answer follows the call it answers.
            Event::AnswerReceived(e) if e.call >= self.calls => fail(
                Invariant::CallSequence,
                format!("an answer to call {} after {} calls were served", e.call, self.calls),
            ),
            Event::AnswerReceived(_) => Ok(()),
            Event::Branched(e) if e.parent_version + 1 != version || e.messages != self.count() => fail(
                Invariant::BranchPoint,
                format!(
                    "it says {} records holding {} messages were copied; {} records holding {} messages precede it",
                    e.parent_version,
                    e.messages,
                    version - 1,
                    self.count()
                ),
            ),
            Event::Branched(_) => Ok(()),
            // Readers find a session's name at version 2 without reading further.
            Event::SessionNamed(_) if version != 2 => {
                fail(Invariant::SessionStart, "SessionNamed must directly follow SessionStarted".into())
            }
            Event::SessionNamed(_) => Ok(()),
            Event::MessageAppended(e) => self.check_append(version, ev, e, self.count(), &|_| false, &|_| false),
            Event::SummaryPrepared(e) if e.is_condensed() => self
                .summaries
                .check_condensed(e, self.compacted)
                .map_err(|d| violation(version, ev, Invariant::CondensedSpan, d)),
            Event::SummaryPrepared(e) => {
                if e.from != self.compacted {
                    return fail(
                        Invariant::WatermarkBackwards,
                        format!("summary starts at {} but compacted_prefix_messages is {}", e.from, self.compacted),
                    );
                }
                if e.to <= e.from || e.to > self.count() {
                    return fail(
                        Invariant::Watermarks,
                        format!("span {}..{} with {} messages", e.from, e.to, self.count()),
                    );
                }
                self.span_pairs_ok(e.from, e.to).map_err(|d| violation(version, ev, Invariant::SpanSplitsToolPair, d))
            }
            Event::Flushed(e) => {
                // A flush moves the watermark, or (to == from) only brings in condensed summaries.
                let advances = e.to > e.from || (e.to == e.from && !e.condensed.is_empty());
                if e.from != self.flushed || !advances {
                    return fail(
                        Invariant::WatermarkBackwards,
                        format!("flush {} → {} with flushed_prefix_messages {}", e.from, e.to, self.flushed),
                    );
                }
                if e.to > self.compacted {
                    return fail(
                        Invariant::Watermarks,
                        format!("flush to {} beyond compacted_prefix_messages {}", e.to, self.compacted),
                    );
                }
                self.summaries
                    .check_flush(e.to, &e.condensed)
                    .map_err(|d| violation(version, ev, Invariant::CondensedSpan, d))
            }
            Event::Edited(e) => {
                self.check_edit(e.seq, e.kind).map_err(|(inv, d)| violation(version, ev, inv, d))?;
                if e.kind == EditKind::Removed {
                    return Ok(());
                }
                self.check_loaded(std::iter::once(e.seq)).map_err(|d| violation(version, ev, Invariant::BodyLoaded, d))
            }
            Event::SummaryRetired(e) => self
                .summaries
                .check_retire(e, self.oldest_summary_in_view())
                .map_err(|d| violation(version, ev, Invariant::RetireTarget, d)),
            Event::Restored(e) => {
                let Some(entry) = self.entry(e.seq) else {
                    return fail(Invariant::RestoreTarget, format!("seq {} does not exist", e.seq));
                };
                if entry.edit.is_none() && !self.hidden_by_flush(e.seq) {
                    return fail(Invariant::RestoreTarget, format!("seq {} is neither edited nor flushed", e.seq));
                }
                if let Some(p) = e.partners.iter().find(|p| self.entry(**p).is_none()) {
                    return fail(Invariant::RestoreTarget, format!("partner seq {p} does not exist"));
                }
                self.check_loaded(std::iter::once(e.seq).chain(e.partners.iter().copied()))
                    .map_err(|d| violation(version, ev, Invariant::BodyLoaded, d))
            }
            Event::ImportCompleted(e) => {
                let count = self.count();
                let detail = match &self.import {
                    None => "the session is not an import".to_owned(),
                    Some(i) if i.completed => "the import is already completed".to_owned(),
                    Some(i) if i.source.messages != count || e.messages != count => format!(
                        "it reports {} messages; the transcript announced {} and {count} are appended",
                        e.messages, i.source.messages
                    ),
                    Some(_) if e.calls != self.calls => {
                        format!("it reports {} calls but {} were served", e.calls, self.calls)
                    }
                    Some(_) => return Ok(()),
                };
                fail(Invariant::ImportCompleted, detail)
            }
            Event::RequestServed(e) => {
                if e.call != self.calls {
                    return fail(Invariant::CallSequence, format!("call {} served after {} calls", e.call, self.calls));
                }
                match self.last_request_at {
                    Some(last) if e.at < last => fail(
                        Invariant::TimeBackwards,
                        format!("served at {} ms, before the previous call at {last} ms", e.at),
                    ),
                    _ => Ok(()),
                }
            }
        }
    }

    /// Every seq of `seqs` has its original at hand (in the view unedited, or hydrated).
    fn check_loaded(&self, mut seqs: impl Iterator<Item = u64>) -> Result<(), BodyError> {
        match seqs.find(|&s| self.original_for_event(s).is_none()) {
            Some(s) => Err(BodyError::NotLoaded(s)),
            None => Ok(()),
        }
    }

    /// Checks an append against the state plus an overlay of earlier appends of the same
    /// batch (`pending_call`/`pending_answer`), so a batch is validated without a copy.
    fn check_append(
        &self,
        version: Version,
        ev: &Event,
        e: &crate::event::MessageAppended,
        count: u64,
        pending_call: &dyn Fn(&str) -> bool,
        pending_answer: &dyn Fn(&str) -> bool,
    ) -> Result<(), Violation> {
        let fail = |inv, detail: String| Err(violation(version, ev, inv, detail));
        if e.seq != count {
            return fail(Invariant::SeqDense, format!("seq {} appended at message count {count}", e.seq));
        }
        if !self.tools.room_for(e.seq, &e.message) {
            return fail(
                Invariant::ToolCapacity,
                format!("seq {}: the session already indexes {} tool calls", e.seq, tools::MAX_PAIRS),
            );
        }
        for id in e.message.result_ids() {
            let pair = self.tools.pair(id);
            let known = pair.is_some() || pending_call(id) || e.message.call_ids().any(|c| c == id);
            if !known {
                return fail(Invariant::UnknownToolCall, format!("seq {} answers unknown tool call {id:?}", e.seq));
            }
            if let Some(prev) = pair.and_then(|p| p.result()) {
                return fail(
                    Invariant::UnknownToolCall,
                    format!("seq {}: call {id:?} already answered by seq {prev}", e.seq),
                );
            }
            if pending_answer(id) {
                return fail(
                    Invariant::UnknownToolCall,
                    format!("seq {}: call {id:?} already answered in this batch", e.seq),
                );
            }
        }
        Ok(())
    }

    /// Validates a batch of appends starting at `version` without changing the state.
    pub fn check_appends(&self, version: Version, events: &[Event]) -> Result<(), Violation> {
        let mut calls: Vec<&str> = Vec::new();
        let mut answers: Vec<&str> = Vec::new();
        for (i, ev) in events.iter().enumerate() {
            let v = version + i as u64;
            let Event::MessageAppended(e) = ev else {
                return Err(violation(v, ev, Invariant::SeqDense, "an append batch holds only MessageAppended"));
            };
            if i == 0 {
                self.check(v, ev)?;
            } else {
                self.check_append(v, ev, e, self.count() + i as u64, &|id| calls.contains(&id), &|id| {
                    answers.contains(&id)
                })?;
            }
            calls.extend(e.message.call_ids());
            answers.extend(e.message.result_ids());
        }
        Ok(())
    }

    /// Validates one event without changing the state. The event's post-conditions (tool
    /// pairs after a view change) are only checked by [`State::apply`].
    pub fn check_event(&self, version: Version, ev: &Event) -> Result<(), Violation> {
        self.check(version, ev)
    }

    fn check_edit(&self, seq: u64, kind: EditKind) -> Result<(), (Invariant, String)> {
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
        // but one: a first message over the budget is truncated once (keeping its head
        // and its media), or the ladder would strip everything else on every call.
        if Some(seq) == self.first_human {
            let oversized = u64::from(entry.tokens) > self.config().first_message_limit_tokens();
            if !(oversized && matches!(kind, EditKind::Truncated { .. }) && entry.edit.is_none()) {
                return Err((Invariant::EditProtected, format!("seq {seq} is the first human message")));
            }
        }
        if entry.is_removed() {
            return Err((Invariant::AlreadyRemoved, format!("seq {seq} is already removed")));
        }
        if self.hidden_by_flush(seq) {
            return Err((Invariant::EditTarget, format!("seq {seq} is not in the view (flushed)")));
        }
        match kind {
            EditKind::Removed => {
                if Some(seq) == self.last_human {
                    return Err((Invariant::LastUserRemoved, format!("seq {seq} is the last user message")));
                }
                if self.has_unanswered_call(seq) {
                    // The body is at hand: the message is in the view (checked above).
                    let id = self
                        .shown(seq)
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
            EditKind::Stubbed { .. } if entry.role() != crate::message::Role::User => {
                return Err((Invariant::EditTarget, format!("seq {seq} is not a user message and cannot be stubbed")));
            }
            _ => {}
        }
        Ok(())
    }

    /// A span `[from, to)` must contain both ends of every tool pair it touches.
    pub fn span_pairs_ok(&self, from: u64, to: u64) -> Result<(), PairError> {
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

    /// Lenient replay: the closest event that keeps the invariants, or `None` to skip.
    fn repair(&self, ev: &Event, v: &Violation) -> Option<Event> {
        match (ev, v.invariant) {
            (Event::MessageAppended(e), Invariant::SeqDense) => {
                let mut e = e.clone();
                e.seq = self.count();
                Some(Event::MessageAppended(e))
            }
            (Event::SummaryPrepared(e), Invariant::WatermarkBackwards | Invariant::Watermarks)
                if e.to > self.compacted && !e.is_condensed() =>
            {
                let mut e = e.clone();
                e.from = self.compacted;
                e.to = e.to.min(self.count());
                (e.to > e.from).then_some(Event::SummaryPrepared(e))
            }
            (Event::Flushed(e), Invariant::Watermarks | Invariant::WatermarkBackwards | Invariant::CondensedSpan)
                if self.flush_pending() =>
            {
                let mut e = e.clone();
                e.from = self.flushed;
                let least = if self.compacted > self.flushed { self.flushed + 1 } else { self.flushed };
                e.to = e.to.clamp(least, self.compacted);
                let ready = self.summaries.condensed_pending(e.to);
                e.condensed.retain(|i| ready.contains(i));
                Some(Event::Flushed(e))
            }
            (Event::RequestServed(e), Invariant::TimeBackwards | Invariant::CallSequence) => {
                let mut e = e.clone();
                e.at = e.at.max(self.last_request_at.unwrap_or(0));
                e.call = self.calls;
                Some(Event::RequestServed(e))
            }
            _ => None,
        }
    }

    fn mutate(&mut self, version: Version, ev: &Event) {
        self.version = version;
        match ev {
            Event::SessionStarted(e) => {
                self.info =
                    Some(SessionInfo { id: e.session, format: e.format, config: e.config.clone(), started_at: e.at });
                self.import = e.import.clone().map(|source| ImportState { source, completed: false });
            }
            Event::ImportCompleted(_) => {
                if let Some(i) = &mut self.import {
                    i.completed = true;
                }
            }
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
                if let Some(note) = view::media_note(m) {
                    self.media.insert(seq, note.into());
                }
                grow(&mut self.entries);
                self.entries.push(Entry::new(version, e.tokens, m, links));
                self.bodies.insert(seq, Arc::new(m.clone()));
                // Appends never hide anything, so the view just grows.
                self.view.push(ViewItem { seq, item: Item::Message(seq), tokens: e.tokens });
                self.view_tokens += u64::from(e.tokens);
            }
            Event::SummaryPrepared(e) => {
                if !e.is_condensed() {
                    self.compacted = e.to;
                }
                self.summaries.push(e);
                self.summary_failures = 0;
                self.summary_rejected = None;
                if let Some(r) = &e.refusal {
                    *self.fork_refusals.entry(r.clone()).or_default() += 1;
                }
            }
            // A record of the call: the conversation and its view do not change.
            Event::AnswerReceived(_) | Event::SessionNamed(_) => {}
            // A record of the lineage: the copied prefix is the state.
            Event::Branched(_) => {}
            Event::CallRejected(_) => {}
            Event::LimitLearned(e) => {
                if let Some(info) = self.info.as_mut() {
                    info.config.budget = info.config.budget.min(e.budget.max(1));
                }
            }
            Event::SummaryFailed(e) => {
                if matches!(e.reason, crate::event::SummaryFailure::Rejected { .. }) {
                    self.summary_rejected = Some((e.from, e.to, e.merged.clone()));
                }
                self.summary_failures = self.summary_failures.saturating_add(1);
                if let Some(r) = &e.refusal {
                    *self.fork_refusals.entry(r.clone()).or_default() += 1;
                }
            }
            Event::Flushed(e) => {
                self.flushed = e.to;
                self.summaries.flush(e.to, &e.condensed);
                self.changed();
            }
            Event::SummaryRetired(e) => {
                self.summaries.retire(e.summary);
                self.changed();
            }
            Event::Edited(e) => {
                let estimator = self.config().estimator();
                let pos = self.view_position(e.seq);
                // The message as its edit shows it replaces its body: the original (a tool
                // output of many kilobytes, say) is in the log.
                let shown = match e.kind {
                    EditKind::Removed => None,
                    kind => self.original_for_event(e.seq).map(|m| Arc::new(view::edited_message(m, kind))),
                };
                if let Some(entry) = usize::try_from(e.seq).ok().and_then(|i| self.entries.get_mut(i)) {
                    let tokens = shown.as_ref().map_or(0, |m| estimator.message(m));
                    entry.edit = Some(EditRecord { kind: e.kind, tokens });
                    match shown {
                        Some(m) => self.bodies.insert(e.seq, m),
                        None => self.bodies.remove(&e.seq),
                    };
                    // An edit touches one visible message: patch the view in place instead of
                    // rebuilding it, so a ladder pass of many edits stays cheap.
                    if let Some(item) = pos.and_then(|p| self.view.get_mut(p)) {
                        self.view_tokens = self.view_tokens - u64::from(item.tokens) + u64::from(tokens);
                        item.tokens = tokens;
                        if e.kind == EditKind::Removed {
                            if let Some(p) = pos {
                                self.view.remove(p);
                                if self.config().placeholders() {
                                    self.refill_gap(p);
                                }
                            }
                        }
                    }
                }
                self.generation += 1;
            }
            Event::Restored(e) => {
                let flushed = self.flushed;
                for seq in std::iter::once(e.seq).chain(e.partners.iter().copied()) {
                    self.restored_at.insert(seq, self.calls);
                    let original = self.original_for_event(seq).cloned();
                    if let Some(entry) = usize::try_from(seq).ok().and_then(|i| self.entries.get_mut(i)) {
                        entry.edit = None;
                        entry.restored = seq < flushed;
                        if let Some(m) = original {
                            self.bodies.insert(seq, m);
                        }
                    }
                }
                self.changed();
            }
            Event::RequestServed(e) => {
                self.calls = e.call + 1;
                self.last_request_at = Some(e.at);
                self.served_generation = Some(self.generation);
                self.last_served = Some(LastServed {
                    call: e.call,
                    digest: e.digest.clone(),
                    view_messages: e.view_messages,
                    view_tokens: e.view_tokens,
                    request: e.request.clone(),
                });
                // A report the commit did not trust leaves the meter on the estimate.
                self.anchor = e.reported_tokens.filter(|_| e.anchored).map(|reported| Anchor {
                    reported,
                    estimate: e.view_tokens,
                    generation: self.generation,
                });
                if let Some(a) = self.anchor {
                    self.rate = Some((a.reported, a.estimate));
                }
                let calls = self.calls;
                self.restored_at.retain(|_, at| calls < *at + RESTORE_HOLD_CALLS);
                if e.anchored {
                    self.raised.remove(&GuardKind::UsageBelowEstimate);
                }
                let budget = self.config().budget;
                if e.needed && e.metered_tokens > budget {
                    self.breaker += 1;
                } else {
                    self.breaker = 0;
                    self.raised.remove(&GuardKind::BreakerTripped);
                }
                if e.metered_tokens <= budget {
                    self.raised.remove(&GuardKind::OverBudget);
                }
                // A call that needed no compaction ends the episode: the target guards may
                // speak again the next time the view comes under pressure.
                if !e.needed {
                    self.raised.remove(&GuardKind::TargetUnreachable);
                    self.raised.remove(&GuardKind::TargetClamped);
                }
                // A call whose view is under the soft threshold again (no summary is due) ends
                // the episode: a paused summarizer may be asked again, failures count afresh.
                if e.metered_tokens < self.config().prepare_tokens() {
                    self.raised.remove(&GuardKind::SummarizerPaused);
                    self.summary_failures = 0;
                }
            }
            Event::GuardRaised(e) => {
                self.raised.insert(e.kind.clone());
            }
        }
    }

    fn post_check(&mut self, version: Version, ev: &Event) -> Result<(), Violation> {
        if !matches!(ev, Event::RequestServed(_) | Event::Restored(_)) || self.checked_generation == self.generation {
            return Ok(());
        }
        self.checked_generation = self.generation;
        self.check_tool_pairs().map_err(|d| violation(version, ev, Invariant::ToolPairs, d))
    }

    /// No orphan tool result, and no answered call whose result is missing from the view.
    pub fn check_tool_pairs(&self) -> Result<(), PairError> {
        for it in &self.view {
            let Item::Message(seq) = it.item else { continue };
            for link in self.tool_links(seq) {
                match link {
                    Link::Result(p) if !self.in_view(p.call()) => {
                        return Err(PairError::OrphanResult { result: seq, call: p.call() })
                    }
                    Link::Call(p) if p.result().is_some_and(|r| !self.in_view(r)) => {
                        return Err(PairError::MissingResult { call: seq, result: p.result().unwrap_or_default() })
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Every message in the view holds its body (as appended, or as its edit shows it) and no
    /// other message holds one: the bound on a session's memory.
    pub fn check_bodies(&self) -> Result<(), BodyError> {
        let mut view = self.view.iter().filter_map(|it| match it.item {
            Item::Message(seq) => Some(seq),
            Item::Summary(_) | Item::Placeholder { .. } => None,
        });
        let mut next = view.next();
        for (seq, e) in self.entries.iter().enumerate() {
            let seq = seq as u64;
            let in_view = next == Some(seq);
            if in_view {
                next = view.next();
            }
            let body = self.bodies.get(&seq);
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
        if self.bodies.len() != self.view.iter().filter(|it| matches!(it.item, Item::Message(_))).count() {
            return Err(BodyError::Count(self.bodies.len()));
        }
        Ok(())
    }

    /// Approximate bytes this state holds on the heap: message bodies of the view, summaries,
    /// per-message facts, the tool index and the view, with vectors counted by capacity (see
    /// [`heap`]). What a live session costs beyond its `Session` handle and view cache.
    pub fn heap_bytes(&self) -> usize {
        self.heap_report().total()
    }

    /// [`State::heap_bytes`], part by part.
    pub fn heap_report(&self) -> HeapReport {
        let bodies = self.bodies.heap_bytes();
        let import = self.import.as_ref().map_or(0, |i| i.source.transcript_sha256.heap_bytes());
        HeapReport {
            bodies,
            entries: self.entries.capacity() * std::mem::size_of::<Entry>(),
            tools: self.tools.heap_bytes() + self.media.heap_bytes(),
            summaries: self.summaries.heap_bytes(),
            view: self.view.heap_bytes(),
            other: btree_bytes::<GuardKind, ()>(self.raised.len()) + import,
        }
    }

    fn estimator(&self) -> crate::tokens::Estimator {
        self.config().estimator()
    }

    fn config(&self) -> Config {
        self.info.as_ref().map(|i| i.config.clone()).unwrap_or_default()
    }

    /// One past the last seq item `it` accounts for: the message itself, a summary's span, a
    /// placeholder's run.
    pub fn item_end(&self, it: &ViewItem) -> u64 {
        match it.item {
            Item::Message(seq) => seq + 1,
            Item::Summary(i) => self.summaries.prepared().get(i as usize).map_or(it.seq + 1, |s| s.to.max(it.seq + 1)),
            Item::Placeholder { to, .. } => to,
        }
    }

    /// `items` (messages and summaries, by seq) with a placeholder in every gap: a run of seqs
    /// that no item shows or covers. A gap inside an open tool exchange (a call in the view whose
    /// result comes after the gap, which only a malformed log has) gets none: a message between
    /// a call and its result would break the pairing every provider enforces.
    fn with_placeholders(&self, items: Vec<ViewItem>) -> Vec<ViewItem> {
        let mut out = Vec::with_capacity(items.len() + 8);
        let mut covered = 0u64;
        let mut prev: Option<ViewItem> = None;
        for it in items {
            if covered < it.seq {
                out.extend(self.placeholder_item(prev.as_ref(), covered, it.seq));
            }
            covered = covered.max(self.item_end(&it));
            prev = Some(it);
            out.push(it);
        }
        if covered < self.count() {
            out.extend(self.placeholder_item(prev.as_ref(), covered, self.count()));
        }
        out
    }

    /// The placeholder for the gap `[from, to)` after the view item `prev`, unless the gap sits
    /// inside `prev`'s open tool exchange.
    fn placeholder_item(&self, prev: Option<&ViewItem>, from: u64, to: u64) -> Option<ViewItem> {
        if let Some(ViewItem { item: Item::Message(p), .. }) = prev {
            let open =
                self.tool_links(*p).any(|l| matches!(l, Link::Call(pair) if pair.result().is_some_and(|r| r >= to)));
            if open {
                return None;
            }
        }
        let tokens = self.config().estimator().message(&placeholder::message(self, from, to));
        Some(ViewItem { seq: from, item: Item::Placeholder { from, to }, tokens })
    }

    /// After the message at view position `pos` was removed: merges the placeholders on either
    /// side of that position and the removed message into one placeholder for the whole gap.
    fn refill_gap(&mut self, pos: usize) {
        // At most one placeholder on each side: gaps are maximal.
        let mut start = pos;
        if start > 0 && matches!(self.view.get(start - 1), Some(ViewItem { item: Item::Placeholder { .. }, .. })) {
            start -= 1;
        }
        let mut end = pos;
        if matches!(self.view.get(end), Some(ViewItem { item: Item::Placeholder { .. }, .. })) {
            end += 1;
        }
        let removed: u64 = self.view.drain(start..end).map(|it| u64::from(it.tokens)).sum();
        self.view_tokens -= removed;
        let prev = start.checked_sub(1).and_then(|i| self.view.get(i)).copied();
        let next_seq = self.view.get(start).map_or(self.count(), |it| it.seq);
        // Covered up to: the previous item's end, or any summary before the gap reaching further
        // (a summary's span runs on past the messages it keeps verbatim).
        let mut covered = prev.map_or(0, |p| self.item_end(&p));
        for (i, standing) in self.summaries.standing().iter().enumerate() {
            if standing.state == SummaryState::Shown {
                if let Some(s) = self.summaries.prepared().get(i).filter(|s| s.from < next_seq) {
                    covered = covered.max(s.to);
                }
            }
        }
        if covered < next_seq {
            if let Some(item) = self.placeholder_item(prev.as_ref(), covered, next_seq) {
                self.view_tokens += u64::from(item.tokens);
                self.view.insert(start, item);
            }
        }
    }

    /// Of the view's first `len` items (the view a call served): how many messages up to its
    /// end are hidden (in no item as themselves), and how many of those a summary or a
    /// placeholder in those items represents.
    pub fn coverage(&self, len: usize) -> Coverage {
        let items = self.view.get(..len.min(self.view.len())).unwrap_or_default();
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
                Item::Summary(i) => match self.summaries.prepared().get(i as usize) {
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

    /// The view changed other than by appending: bump the generation and rebuild it.
    fn changed(&mut self) {
        self.generation += 1;
        self.rebuild_view();
    }

    fn rebuild_view(&mut self) {
        self.rebuild_items();
        // A message that left the view leaves memory (its record keeps it). A rebuild never
        // brings a message in: only appends and restores do, with their bodies.
        let view = &self.view;
        self.bodies.retain(|&seq, _| {
            let pos = view.partition_point(|it| it.seq < seq);
            matches!(view.get(pos), Some(ViewItem { item: Item::Message(s), .. }) if *s == seq)
        });
    }

    fn rebuild_items(&mut self) {
        let estimator = self.config().estimator();
        let mut items = Vec::new();
        // The summaries in the view cover disjoint spans; walk them by position.
        let shown = self.summaries.shown();
        let prepared = self.summaries.prepared();
        let mut next = 0usize;
        let mut placed = None;
        for seq in 0..self.count() {
            if self.hidden_by_flush(seq) {
                // The summary covering this seq sits where its first hidden message was; a
                // retired summary leaves its hidden messages with nothing in their place.
                while shown.get(next).and_then(|&i| prepared.get(i as usize)).is_some_and(|s| s.to <= seq) {
                    next += 1;
                }
                let covering = shown.get(next).and_then(|&i| Some((i, prepared.get(i as usize)?)));
                if let Some((i, s)) = covering.filter(|(_, s)| s.from <= seq) {
                    if placed != Some(i) {
                        placed = Some(i);
                        let tokens = estimator.message(&view::summary_message(self, s));
                        items.push(ViewItem { seq, item: Item::Summary(i), tokens });
                    }
                }
                continue;
            }
            let Some(entry) = self.entry(seq) else { continue };
            let tokens = match &entry.edit {
                Some(e) if e.kind == EditKind::Removed => continue,
                Some(e) => e.tokens,
                None => entry.tokens,
            };
            items.push(ViewItem { seq, item: Item::Message(seq), tokens });
        }
        if self.config().placeholders() {
            items = self.with_placeholders(items);
        }
        self.view_tokens = items.iter().map(|i| u64::from(i.tokens)).sum();
        self.view_summary_tokens =
            items.iter().filter(|i| matches!(i.item, Item::Summary(_))).map(|i| u64::from(i.tokens)).sum();
        items.shrink_to_fit();
        self.view = items;
    }
}

/// The placeholder's composition and text ([`crate::placeholder`] re-exports them): here, in the
/// state's file, so the state's estimate of a placeholder imports nothing that imports the state.
pub(crate) mod placeholder {
    use std::collections::BTreeMap;

    use super::tools::Link;
    use super::State;
    use crate::message::{Message, Role};
    use crate::view::thousands;

    /// Tool names listed by name in a placeholder; the rest are counted.
    pub const NAMED_TOOLS: usize = 6;

    /// What a run of hidden messages `[from, to)` held.
    #[derive(Debug, Default, Clone, PartialEq, Eq)]
    pub struct Composition {
        /// Tool calls made by the run's messages, by tool name.
        pub calls: BTreeMap<String, u64>,
        /// Messages of the run that make no call and carry no result (text of either side).
        pub other: u64,
    }

    /// The composition of `[from, to)`, read from the state's tool index (no message bodies).
    pub fn composition(state: &State, from: u64, to: u64) -> Composition {
        let mut c = Composition::default();
        for seq in from..to {
            let mut linked = false;
            for link in state.tool_links(seq) {
                linked = true;
                if let Link::Call(p) = link {
                    let name = state.tool_name_of(&p);
                    match c.calls.get_mut(name) {
                        Some(n) => *n += 1,
                        None => {
                            c.calls.insert(name.to_owned(), 1);
                        }
                    }
                }
            }
            if !linked && state.entry(seq).is_some() {
                c.other += 1;
            }
        }
        c
    }

    /// The placeholder's text for the hidden messages `[from, to)`, e.g.
    /// `[ctxlog: 41 tool calls removed (seq 2–83): read_file ×41 — restore with ctxlog restore --seq N, N in 2–83]`.
    pub fn text(state: &State, from: u64, to: u64) -> String {
        let c = composition(state, from, to);
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
    pub fn message(state: &State, from: u64, to: u64) -> Message {
        Message::text(Role::User, text(state, from, to))
    }
}
