//! Replays for postmortems: the per-call timeline, strict or lenient folding, and `verify`
//! (full re-fold, invariants, re-rendered view digests, blobs, snapshot against replay).

use std::borrow::Cow;

use serde::Serialize;

use crate::codec;
use crate::error::SessionError;
use crate::event::{Event, GuardRaised, SummaryMode};
pub use crate::log::for_each_event;
use crate::log::{hydrate, StoreBlobs, READ_CHUNK};
use crate::message::{Block, Content, ImageUrl, MediaData, MediaSource, Message};
pub use crate::problem::{Problem, ProblemKind};
use crate::request::{self, Request, RequestOptions, ServedView};
use crate::snapshot::{self, Finding};
use crate::state::{State, Violation};
use crate::store::{Store, StoreError, StreamId, Version};
use crate::view::ViewCache;

/// One call of the timeline (`import --json`, `replay --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallRecord {
    /// 0-based call number.
    pub call: u64,
    /// Stream version after the call's commit.
    pub version: Version,
    /// When the dispatch completed, in seconds since the epoch.
    pub at: f64,
    /// Messages appended so far.
    pub messages: u64,
    /// Messages in the view.
    pub view_messages: u64,
    /// Estimated tokens of the view.
    pub view_tokens: u64,
    /// Provider-reported prompt tokens (cache reads and writes included), if given.
    pub reported_tokens: Option<u64>,
    /// The provider's usage in parts, when the host gave them (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::usage::Usage>,
    /// The budget.
    pub budget: u64,
    /// Hard threshold in tokens.
    pub trigger_tokens: u64,
    /// Ladder target in tokens.
    pub target_tokens: u64,
    /// Ladder level reached (0 = none).
    pub level: u8,
    /// `compacted_prefix_messages` after the call.
    pub compacted: u64,
    /// `flushed_prefix_messages` after the call.
    pub flushed: u64,
    /// The flush committed by this call.
    pub flush: Option<FlushRecord>,
    /// Edits committed by this call.
    pub edits: Vec<TimelineEdit>,
    /// Guards raised by this call.
    pub guards: Vec<GuardRecord>,
    /// The view was the previous view plus new messages, byte for byte.
    pub prefix_reused: bool,
    /// Tokens of the summaries in the served view.
    pub summary_tokens: u64,
    /// Work the cache-aware gate held back on this call, and why (`null` when nothing was).
    pub deferred: Option<DeferRecord>,
    /// Summary attempts recorded since the previous call (a model asked: standalone, fork or
    /// auto, and every failed attempt); absent when there were none. The built-in extractive
    /// summaries are not attempts: they show in `compacted`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub summaries: Vec<SummaryAttemptRecord>,
    /// Messages up to the end of the served view that it does not show as themselves (removed,
    /// or flushed into a summary).
    pub hidden: u64,
    /// Of those, how many a summary or a placeholder in the served view represents (goal:
    /// all of them; fewer only in sessions of view version 1, whose removals left no trace).
    pub represented: u64,
    /// Requests the provider refused since the previous call (this call's earlier tries, or
    /// calls that were never served); absent when there were none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<RejectionRecord>,
}

/// A refused request in the timeline (`CallRejected`, with the `LimitLearned` of the same batch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RejectionRecord {
    /// The call number the refused request had.
    pub call: u64,
    /// The HTTP status.
    pub status: u16,
    /// The provider's error type or code.
    pub error: String,
    /// The start of its message.
    pub message: String,
    /// The prompt was over the model's context.
    pub overflow: bool,
    /// The provider's count of the prompt, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// The model's limit, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The budget the learned limit set, when one was learned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learned_budget: Option<u64>,
}

/// What the log holds after the last call: summary attempts and refused requests no call
/// record carries yet (`replay` shows them after the last call).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Trailing {
    /// The number of calls served before them.
    pub after_calls: u64,
    /// Summary attempts since the last call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub summaries: Vec<SummaryAttemptRecord>,
    /// Refused requests since the last call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<RejectionRecord>,
    /// Guards raised since the last call (the summarizer's pause, a fork refusal).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub guards: Vec<GuardRecord>,
}

impl Trailing {
    /// Nothing after the last call?
    pub fn is_empty(&self) -> bool {
        self.summaries.is_empty() && self.rejected.is_empty() && self.guards.is_empty()
    }
}

/// A summary attempt in the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryAttemptRecord {
    /// First seq of the span.
    pub from: u64,
    /// One past its last seq.
    pub to: u64,
    /// `standalone` | `fork` | `auto` | `extractive`.
    pub mode_requested: &'static str,
    /// The mode used.
    pub mode_used: &'static str,
    /// Why a fork was refused or declined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// `prepared`, or the failure (`timeout`, `provider_error`, `empty`, `stale`, `not_smaller`,
    /// `over_limit`, `truncated`, `echo`, `rejected`).
    pub outcome: &'static str,
    /// The failure in a sentence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The summarizer's usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::usage::Usage>,
    /// Its latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
}

/// A deferral in the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeferRecord {
    /// `warm_cache` | `clear_at_least`.
    pub reason: &'static str,
    /// The sentence with the numbers.
    pub detail: String,
}

/// A flush in the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlushRecord {
    /// `legacy_immediate` | `cold_cache` | `size_threshold`.
    pub reason: &'static str,
    /// Old watermark.
    pub from: u64,
    /// New watermark.
    pub to: u64,
    /// Condensed summaries brought into the view.
    pub condensed: usize,
}

/// An edit as a line of the timeline (what a call did). The edit in force on a message is
/// [`crate::state::EditRecord`]; one name per concept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimelineEdit {
    /// The message.
    pub seq: u64,
    /// `removed` | `truncated` | `stubbed` | `summary_retired` (then `seq` is the first seq the
    /// summary covered).
    pub kind: &'static str,
    /// Level, rule, target and guard.
    pub reason: String,
}

/// A guard in the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GuardRecord {
    /// e.g. `target_unreachable`.
    pub kind: String,
    /// The sentence with the numbers and the knob.
    pub detail: String,
}

/// Turns a stream of applied events into [`CallRecord`]s. Import and replay both use it, so
/// their timelines are identical by construction.
#[derive(Debug, Default)]
pub struct Timeline {
    summaries: Vec<SummaryAttemptRecord>,
    rejected: Vec<RejectionRecord>,
    calls: u64,
    flush: Option<FlushRecord>,
    edits: Vec<TimelineEdit>,
    guards: Vec<GuardRecord>,
}

impl Timeline {
    /// A fresh builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one event (after it was applied to `state`); returns a record at `RequestServed`.
    pub fn feed(&mut self, version: Version, ev: &Event, state: &State) -> Option<CallRecord> {
        match ev {
            Event::Flushed(f) => {
                self.flush = Some(FlushRecord {
                    reason: f.reason.as_str(),
                    from: f.from,
                    to: f.to,
                    condensed: f.condensed.len(),
                })
            }
            Event::SummaryPrepared(p) if p.mode_requested != SummaryMode::Extractive => {
                self.summaries.push(SummaryAttemptRecord {
                    from: p.from,
                    to: p.to,
                    mode_requested: p.mode_requested.as_str(),
                    mode_used: p.mode_used.as_str(),
                    refusal: p.refusal.clone(),
                    outcome: "prepared",
                    detail: None,
                    usage: p.usage,
                    latency_ms: p.latency_ms,
                })
            }
            Event::SummaryFailed(f) => self.summaries.push(SummaryAttemptRecord {
                from: f.from,
                to: f.to,
                mode_requested: f.mode_requested.as_str(),
                mode_used: f.mode_used.as_str(),
                refusal: f.refusal.clone(),
                outcome: f.reason.as_str(),
                detail: Some(f.reason.describe()),
                usage: f.usage,
                latency_ms: f.latency_ms,
            }),
            Event::CallRejected(r) => self.rejected.push(RejectionRecord {
                call: r.call,
                status: r.status,
                error: r.error.clone(),
                message: r.message.clone(),
                overflow: r.overflow,
                prompt_tokens: r.prompt_tokens,
                limit: r.limit,
                learned_budget: None,
            }),
            Event::LimitLearned(l) => {
                if let Some(r) = self.rejected.last_mut().filter(|r| r.call == l.call) {
                    r.learned_budget = Some(l.budget);
                }
            }
            Event::SummaryRetired(r) => {
                self.edits.push(TimelineEdit { seq: r.from, kind: "summary_retired", reason: r.reason.clone() })
            }
            Event::Edited(e) => {
                self.edits.push(TimelineEdit { seq: e.seq, kind: e.kind.as_str(), reason: e.reason.describe() })
            }
            Event::GuardRaised(GuardRaised { call: Some(_), kind, detail, knob }) => {
                self.guards.push(GuardRecord { kind: kind.name(), detail: format!("{detail} (knob: {knob})") })
            }
            Event::RequestServed(s) => {
                self.calls = s.call + 1;
                let config = state.info().map(|i| i.config.clone()).unwrap_or_default();
                let coverage = state.coverage(usize::try_from(s.view_messages).unwrap_or(usize::MAX));
                return Some(CallRecord {
                    call: s.call,
                    version,
                    at: s.at as f64 / 1000.0,
                    messages: state.message_count(),
                    view_messages: s.view_messages,
                    view_tokens: s.view_tokens,
                    reported_tokens: s.reported_tokens,
                    usage: s.usage,
                    budget: config.budget,
                    trigger_tokens: config.trigger_tokens(),
                    target_tokens: config.target_tokens(),
                    level: s.level,
                    compacted: state.compacted(),
                    flushed: state.flushed(),
                    flush: self.flush.take(),
                    edits: std::mem::take(&mut self.edits),
                    guards: std::mem::take(&mut self.guards),
                    prefix_reused: s.prefix_reused,
                    summary_tokens: state.view_summary_tokens(),
                    deferred: s.deferred.as_ref().map(|d| DeferRecord { reason: d.as_str(), detail: d.describe() }),
                    summaries: std::mem::take(&mut self.summaries),
                    hidden: coverage.hidden,
                    represented: coverage.represented,
                    rejected: std::mem::take(&mut self.rejected),
                });
            }
            _ => {}
        }
        None
    }
}

impl Timeline {
    /// What was fed after the last call record: attempts and refusals no record carries yet.
    pub fn trailing(&self) -> Trailing {
        Trailing {
            after_calls: self.calls,
            summaries: self.summaries.clone(),
            rejected: self.rejected.clone(),
            guards: self.guards.clone(),
        }
    }
}

/// How replay treats a log that breaks an invariant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Stop with a typed error naming the version and the invariant.
    Strict,
    /// Clamp or skip, record the violation, go on.
    Lenient,
}

/// Result of a replay.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// The folded state.
    pub state: State,
    /// One record per call.
    pub timeline: Vec<CallRecord>,
    /// Violations found (lenient mode only; strict stops at the first).
    pub violations: Vec<Violation>,
    /// What the log holds after the last call.
    pub trailing: Trailing,
}

/// Folds a stream from the start.
pub fn replay<S: Store + ?Sized>(
    store: &S,
    stream: StreamId,
    mode: Mode,
    until: Option<Version>,
) -> Result<Replayed, SessionError> {
    if store.head(stream)?.is_none() {
        return Err(SessionError::NotFound(stream));
    }
    let mut state = State::new();
    let mut timeline = Timeline::new();
    let mut out = Vec::new();
    let mut violations = Vec::new();
    for_each_event(store, stream, 1, until, |version, ev| {
        hydrate(store, stream, &mut state, &ev)?;
        match mode {
            Mode::Strict => {
                state.apply(version, &ev).map_err(|violation| SessionError::Invariant { stream, violation })?
            }
            Mode::Lenient => violations.extend(state.apply_lenient(version, &ev)),
        }
        out.extend(timeline.feed(version, &ev, &state));
        Ok(())
    })?;
    Ok(Replayed { state, timeline: out, violations, trailing: timeline.trailing() })
}

/// The request call `call` sent, rebuilt byte for byte from the log: the view it served
/// (checked against the recorded digest) rendered with `opts`, as [`crate::Session::request`]
/// built it at the time with the same options.
pub fn served_request<S: Store + ?Sized>(
    store: &S,
    stream: StreamId,
    call: u64,
    opts: &RequestOptions,
) -> Result<Request, SessionError> {
    if store.head(stream)?.is_none() {
        return Err(SessionError::NotFound(stream));
    }
    let mut state = State::new();
    let mut from = 1;
    loop {
        let batch = store.read(stream, from, READ_CHUNK)?;
        let Some(last) = batch.last().map(|r| r.version) else {
            return Err(SessionError::NoSuchCall { stream, call, calls: state.calls() });
        };
        for rec in batch {
            let ev = codec::decode(stream, rec.version, &rec.record)?;
            if let Event::RequestServed(s) = &ev {
                if s.call == call {
                    let mut cache = ViewCache::new();
                    cache.sync_prefix(&state, usize::try_from(s.view_messages).unwrap_or(usize::MAX));
                    if cache.digest() != s.digest {
                        let rebuilt = cache.digest();
                        return Err(SessionError::ViewMismatch { stream, call, recorded: s.digest.clone(), rebuilt });
                    }
                    let view = ServedView {
                        state: &state,
                        items: cache.items(),
                        bytes: cache.bytes(),
                        cuts: cache.cuts(),
                        digest: &s.digest,
                    };
                    let format = state.info().map_or(crate::wire::WireFormat::Anthropic, |i| i.format);
                    // Breakpoints placed by position are the call's own: recorded with it.
                    let placed = s.request.as_ref().and_then(|r| r.placement.clone());
                    let opts = match placed {
                        Some(p) if opts.placement().is_none() && opts.breakpoints().is_none() => {
                            Cow::Owned(opts.clone().place_breakpoints(p))
                        }
                        _ => Cow::Borrowed(opts),
                    };
                    return Ok(request::render(&view, format, &opts, &StoreBlobs(store)));
                }
            }
            hydrate(store, stream, &mut state, &ev)?;
            state.apply(rec.version, &ev).map_err(|violation| SessionError::Invariant { stream, violation })?;
        }
        from = last + 1;
    }
}

/// What `verify` found.
#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    /// Records read.
    pub events: u64,
    /// Calls checked.
    pub calls: u64,
    /// Blobs checked.
    pub blobs: u64,
    /// Whether a snapshot was compared.
    pub snapshot_checked: bool,
    /// Every problem, each naming the stream and, where it has one, the version.
    pub problems: Vec<Problem>,
    /// Things worth knowing that are not damage (e.g. a snapshot from another build).
    pub notes: Vec<String>,
}

impl VerifyReport {
    /// No problem found.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Full check of one stream: every record's checksum and decoding, every invariant (strict),
/// every served view re-rendered and compared with its recorded digest and sizes, every
/// referenced blob present and intact, and the snapshot equal to the replayed state.
pub fn verify<S: Store + ?Sized>(store: &S, stream: StreamId) -> Result<VerifyReport, SessionError> {
    let Some(head) = store.head(stream)? else {
        return Err(SessionError::NotFound(stream));
    };
    let mut report = VerifyReport::default();
    let mut snapshot = store.get_snapshot(stream)?;
    // One rule for every backend: a store only keeps snapshots of versions its log held, so a
    // snapshot beyond the head means the log lost acknowledged versions, whatever the
    // snapshot's bytes (a stale layout included).
    if let Some(snap) = snapshot.take_if(|s| s.version > head) {
        report.snapshot_checked = true;
        report.problems.push(Problem {
            stream,
            version: Some(snap.version),
            kind: ProblemKind::SnapshotBeyondHead { head },
        });
    }
    let mut state = State::new();
    let mut cache = ViewCache::new();
    let mut snap_state = None;
    let mut blobs = std::collections::BTreeSet::new();
    let result = for_each_event(store, stream, 1, None, |version, ev| {
        report.events += 1;
        if let Event::RequestServed(s) = &ev {
            // The view this call served is the state right before its RequestServed, less the
            // messages appended between the call's plan and its commit: they come last in the
            // view, after the `view_messages` it served.
            let view = state.view();
            let recorded = usize::try_from(s.view_messages).unwrap_or(usize::MAX).min(view.len());
            // Messages appended after the plan can only be plain, unedited messages at the end.
            let late_from = view.len()
                - view
                    .iter()
                    .rev()
                    .zip((0..state.message_count()).rev())
                    .take_while(|(it, seq)| {
                        it.item == crate::state::Item::Message(*seq)
                            && state.entry(*seq).is_some_and(|e| e.edit.is_none() && !e.restored)
                    })
                    .count();
            let mut synced = Some(cache.sync_prefix(&state, recorded));
            let mut served = recorded;
            if cache.digest() != s.digest {
                // A wrong `view_messages` alone: another prefix the late appends allow hashes to
                // the recorded digest. Then that is the one problem (not a digest and a count).
                let other = (late_from..=view.len()).rev().filter(|&n| n != recorded).find(|&n| {
                    let mut c = ViewCache::new();
                    c.sync_prefix(&state, n);
                    c.digest() == s.digest
                });
                if let Some(n) = other {
                    served = n;
                    cache.sync_prefix(&state, n);
                    synced = None; // the chain to the previous call is not known through a lie
                }
            }
            let digest = cache.digest();
            let tokens: u64 = view.iter().take(served).map(|i| u64::from(i.tokens)).sum();
            let sum: u64 = view.iter().map(|i| u64::from(i.tokens)).sum();
            let mut bad = |kind: ProblemKind| report.problems.push(Problem { stream, version: Some(version), kind });
            let call = s.call;
            if digest != s.digest {
                bad(ProblemKind::ViewDigest { call, rebuilt: digest.to_string(), recorded: s.digest.clone() });
            }
            if tokens != s.view_tokens || sum != state.view_tokens() {
                let (recorded, state_sum) = (s.view_tokens, state.view_tokens());
                bad(ProblemKind::ViewTokens { call, recorded, rebuilt: tokens, sum, state_sum });
            }
            if served != recorded || (view.len() as u64) < s.view_messages || served < late_from {
                bad(ProblemKind::ViewMessages {
                    call,
                    recorded: s.view_messages,
                    rebuilt: served as u64,
                    view: view.len() as u64,
                    late: (view.len() - late_from) as u64,
                });
            }
            // Call 0 reused nothing (nothing was served before it); the first sync of the cache
            // says so by itself, so every call is checked.
            if let Some(synced) = synced.filter(|sy| sy.appended_only != s.prefix_reused) {
                bad(ProblemKind::PrefixReused { call, recorded: s.prefix_reused, rebuilt: synced.appended_only });
            }
            report.calls += 1;
        }
        if let Event::MessageAppended(m) = &ev {
            collect_blobs(&m.message, &mut blobs);
        }
        if let Event::RequestServed(crate::event::RequestServed { request: Some(r), .. }) = &ev {
            if let crate::event::ToolsRecord::Blob { id, .. } = &r.tools {
                blobs.insert(id.clone());
            }
        }
        hydrate(store, stream, &mut state, &ev)?;
        state.apply(version, &ev).map_err(|violation| SessionError::Invariant { stream, violation })?;
        if snapshot.as_ref().is_some_and(|s| s.version == version) {
            snap_state = Some(state.clone());
        }
        Ok(())
    });
    let damaged_at = match &result {
        Ok(()) => None,
        Err(SessionError::Store(StoreError::Corrupt { version, .. })) => Some(*version),
        Err(SessionError::Decode(e)) => Some(e.version),
        Err(SessionError::Invariant { violation, .. }) => Some(violation.version),
        Err(SessionError::Body { version, .. }) => Some(*version),
        Err(_) => None,
    };
    match (result, damaged_at) {
        (Ok(()), _) => {}
        (Err(e), Some(version)) => report.problems.push(Problem {
            stream,
            version: Some(version),
            kind: ProblemKind::Damaged { error: e.to_string() },
        }),
        (Err(e), None) => return Err(e),
    }
    for id in blobs {
        report.blobs += 1;
        match store.get_blob(&id) {
            Ok(Some(_)) => {}
            Ok(None) => {
                report.problems.push(Problem { stream, version: None, kind: ProblemKind::BlobMissing { blob: id } })
            }
            Err(e) => report.problems.push(Problem {
                stream,
                version: None,
                kind: ProblemKind::BlobUnreadable { blob: id, error: e.to_string() },
            }),
        }
    }
    if let Some(i) = state.import().filter(|i| !i.completed) {
        report.problems.push(Problem {
            stream,
            version: None,
            kind: ProblemKind::ImportUnfinished { appended: state.message_count(), announced: i.source.messages },
        });
    }
    if let Some(snap) = snapshot {
        report.snapshot_checked = true;
        let problem = |kind| Problem { stream, version: Some(snap.version), kind };
        match snapshot::check(&snap, snap_state.as_ref()) {
            Finding::Sound => {}
            Finding::Stale(e) => {
                report.notes.push(format!("stream {stream}: snapshot at version {} ignored: {e}", snap.version))
            }
            Finding::Problem(kind) => report.problems.push(problem(kind)),
        }
    }
    Ok(report)
}

pub(crate) fn collect_blobs(m: &Message, out: &mut std::collections::BTreeSet<crate::store::BlobId>) {
    fn block(b: &Block, out: &mut std::collections::BTreeSet<crate::store::BlobId>) {
        match b {
            Block::Media { source: MediaSource::Base64 { data: MediaData::Blob(r), .. }, .. }
            | Block::ImageUrl { url: ImageUrl::Data { data: MediaData::Blob(r), .. }, .. } => {
                out.insert(r.id.clone());
            }
            Block::ToolResult { content: Some(Content::Blocks(inner)), .. } => inner.iter().for_each(|b| block(b, out)),
            _ => {}
        }
    }
    m.blocks().iter().for_each(|b| block(b, out));
}
