//! One fold over a session's log that keeps what postmortems ask about: the timeline, each
//! call's view digest, price and (on request) composition, and every decision about every
//! message. `report`, `why`, `inspect --call`, `replay --call`, `rerun` and `diff` all read it,
//! so they agree with each other and with `replay` by construction.

use std::collections::BTreeMap;
use std::sync::Arc;

use ctxlog::codec;
use ctxlog::cost::{PrefixCache, Totals};
use ctxlog::event::{EditReason, Event, FlushReason, SummaryMode};
use ctxlog::internal::view::ViewCache;
use ctxlog::message::{Block, MediaKind, Message};
use ctxlog::replay::{CallRecord, GuardRecord, Mode, Timeline};
use ctxlog::session::READ_CHUNK;
use ctxlog::state::{Item, State, Violation};
use ctxlog::time::Millis;
use ctxlog::{Session, SessionError, Store, StreamId, Version};

use crate::args::SessionArgs;
use crate::error::CliError;
use crate::lineage::{link_of, Link};
use crate::session_id::pick_session;
use crate::stores::{open_store, Access};

/// Where the fold stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The head of the log.
    Head,
    /// After this stream version.
    Version(Version),
    /// After the commit of this call (0-based).
    Call(u64),
}

/// What to keep besides the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// Each call's view as runs of items (for the report's "view at this call").
    pub views: bool,
}

/// A session's log, folded for a postmortem.
#[derive(Debug, Clone)]
pub struct Analysis {
    /// The session.
    pub session: StreamId,
    /// The state where the fold stopped.
    pub state: State,
    /// One entry per call, in order.
    pub calls: Vec<Call>,
    /// Per message (index = seq): where it came from and what was decided about it.
    pub messages: Vec<MessageHistory>,
    /// Per summary (index = prepare order): when it was made and where it went.
    pub summaries: Vec<SummaryHistory>,
    /// Cost of every call under the prompt-cache price model, summed.
    pub totals: Totals,
    /// Violations a lenient fold went past.
    pub violations: Vec<Violation>,
    /// Guards a host raised between calls (a `history_diverged`), in log order.
    pub host_guards: Vec<HostGuard>,
    /// Pins and unpins a person made between calls (`Pinned`, `restore --pin`), in log order.
    pub pins: Vec<PinNote>,
    /// Edges to other sessions this log records (`lineage.rs`, `link_of`).
    pub links: Vec<Link>,
    /// Summary attempts and refused requests after the last call (or after `--call N`).
    pub trailing: ctxlog::replay::Trailing,
}

/// A guard raised outside any call (by a host: the proxy's `history_diverged`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostGuard {
    /// Stream version of its `GuardRaised`.
    pub version: Version,
    /// The last call before it (`None`: before the first call).
    pub after_call: Option<u64>,
    /// Kind and sentence, as the timeline shows a call's guards.
    pub record: GuardRecord,
}

impl HostGuard {
    /// The detail line under the row of the call it follows.
    pub fn detail_line(&self) -> String {
        let when = self.after_call.map_or_else(|| "before the first call".to_owned(), |c| format!("after call {c}"));
        format!("      guard {} ({when}, version {}): {}", self.record.kind, self.version, self.record.detail)
    }

    /// As JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"kind": self.record.kind, "detail": self.record.detail, "version": self.version,
                           "after_call": self.after_call})
    }
}

/// A pin (or unpin) made between calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinNote {
    /// Stream version of its `Pinned`.
    pub version: Version,
    /// The last call before it (`None`: before the first call).
    pub after_call: Option<u64>,
    /// The event.
    pub pinned: ctxlog::event::Pinned,
}

impl PinNote {
    /// The detail line under the row of the call it follows.
    pub fn detail_line(&self) -> String {
        let when = self.after_call.map_or_else(|| "before the first call".to_owned(), |c| format!("after call {c}"));
        let p = &self.pinned;
        let done = if p.pin { "pinned (never edited nor flushed until unpinned)" } else { "unpinned" };
        format!("      seq {} {done} ({when}, version {}) by {}: {}", p.seq, self.version, p.by, p.why)
    }

    /// As JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let p = &self.pinned;
        serde_json::json!({"seq": p.seq, "pin": p.pin, "by": p.by, "why": p.why, "version": self.version,
                           "after_call": self.after_call})
    }
}

/// One call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The timeline record (`replay --json` prints exactly this).
    pub record: CallRecord,
    /// sha256 of the view it served.
    pub digest: String,
    /// When its dispatch completed.
    pub at_ms: Millis,
    /// Its price under the prompt-cache model.
    pub price: Price,
    /// The view it served, as runs of items (empty unless [`Keep::views`]).
    pub view: Vec<Run>,
}

/// One call under the prompt-cache price model (`ctxlog::cost`), in base-price tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// The previous call was less than the cache's TTL ago.
    pub warm: bool,
    /// Tokens read from the cache.
    pub cached: f64,
    /// What this call cost.
    pub cost: f64,
    /// What the calls so far cost.
    pub cumulative: f64,
    /// What the calls so far cost at least.
    pub cumulative_lower_bound: f64,
}

/// A stretch of the view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Run {
    /// Messages `from..=to` that are in the view (not necessarily every seq of the range:
    /// removed ones are left out), shown verbatim.
    Messages {
        /// First seq.
        from: u64,
        /// Last seq.
        to: u64,
        /// How many.
        count: u64,
        /// Their tokens.
        tokens: u64,
    },
    /// One message shown edited.
    Edited {
        /// The seq.
        seq: u64,
        /// `truncated` or `stubbed`.
        kind: &'static str,
        /// Its tokens as shown.
        tokens: u64,
    },
    /// A summary.
    Summary {
        /// Its index in prepare order.
        index: u32,
        /// First seq it covers.
        from: u64,
        /// One past the last.
        to: u64,
        /// A condensed summary (of earlier summaries).
        condensed: bool,
        /// Its tokens.
        tokens: u64,
    },
    /// A placeholder for hidden messages no summary covers.
    Placeholder {
        /// First seq it stands for.
        from: u64,
        /// One past the last.
        to: u64,
        /// Its tokens.
        tokens: u64,
    },
}

/// A message and the decisions about it.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageHistory {
    /// `user`, `assistant`, …
    pub role: String,
    /// Its token estimate.
    pub tokens: u32,
    /// A few words on what it is (text preview, tool call or result).
    pub gist: String,
    /// Version of its `MessageAppended`.
    pub appended: Version,
    /// The last call before it was appended (`None`: before the first call).
    pub appended_after_call: Option<u64>,
    /// The first call whose view was decided with it in the log.
    pub first_call: Option<u64>,
    /// Flushes, edits and restores of it, in log order.
    pub decisions: Vec<Decision>,
    /// It carries a provider's compaction (an Anthropic `compaction` block, a Responses
    /// `compaction` item): the provider's summary of everything before it.
    pub provider_compaction: bool,
}

/// A decision that changed a message's status.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Stream version of the event.
    pub version: Version,
    /// The call that committed it (`None` for a restore, which happens between calls).
    pub call: Option<u64>,
    /// For a restore: the last call before it.
    pub after_call: Option<u64>,
    /// When the committing call's dispatch completed.
    pub at_ms: Option<Millis>,
    /// What.
    pub what: What,
}

/// What a decision did.
#[derive(Debug, Clone, PartialEq)]
pub enum What {
    /// A flush hid it behind its summary.
    Flushed {
        /// Why then.
        reason: FlushReason,
        /// Time since the previous call (`None`: never served).
        cache_age_ms: Option<u64>,
        /// The flush's old watermark.
        from: u64,
        /// Its new watermark.
        to: u64,
    },
    /// The ladder edited it.
    Edited {
        /// `removed`, `truncated` or `stubbed`.
        kind: &'static str,
        /// Level, rule, target and guard.
        reason: EditReason,
    },
    /// It came back into the view.
    Restored {
        /// Who asked.
        by: String,
        /// Why.
        why: String,
        /// Set when it came back as the tool partner of this seq.
        partner_of: Option<u64>,
    },
    /// A person pinned (or unpinned) it (`Pinned`).
    Pinned {
        /// Pinned, or unpinned.
        pin: bool,
        /// Who asked.
        by: String,
        /// Why.
        why: String,
    },
}

impl What {
    /// The status this decision left the message in.
    pub fn status(&self) -> &'static str {
        match self {
            What::Flushed { .. } => "flushed",
            What::Edited { kind, .. } => kind,
            What::Restored { .. } | What::Pinned { .. } => "live",
        }
    }
}

/// A summary and where it went.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryHistory {
    /// First seq covered.
    pub from: u64,
    /// One past the last.
    pub to: u64,
    /// Its tokens.
    pub tokens: u32,
    /// Tokens of what it replaces.
    pub replaced_tokens: u64,
    /// Indices of the summaries it condenses (empty: a summary of messages).
    pub merged: Vec<u32>,
    /// How it was made.
    pub mode: SummaryMode,
    /// Version of its `SummaryPrepared`.
    pub version: Version,
    /// The last call before it was prepared.
    pub after_call: Option<u64>,
    /// The call whose flush put it in the view.
    pub shown_at: Option<u64>,
    /// The condensed summary that replaced it, and the call that showed that one.
    pub condensed_into: Option<(u32, Option<u64>)>,
    /// The call that retired it, and why.
    pub retired: Option<(u64, String)>,
}

/// Opens the store `args` names for reading, and the session it selects.
pub fn open_session(args: &SessionArgs) -> Result<(Box<dyn Store>, StreamId), CliError> {
    let store = open_store(&args.store.store, Access::ReadOnly)?;
    let id = pick_session(store.as_ref(), args.session.as_deref())?;
    Ok((store, id))
}

/// Folds `stream` of `store` up to `until`.
pub fn analyze(
    store: &dyn Store,
    stream: StreamId,
    mode: Mode,
    until: Until,
    keep: Keep,
) -> Result<Analysis, CliError> {
    if store.head(stream)?.is_none() {
        return Err(SessionError::NotFound(stream).into());
    }
    // An unfinished import is not a session yet: a strict fold of a past version refuses it
    // too (a fold to the head finds out by itself, below).
    if mode == Mode::Strict && until != Until::Head {
        if let Err(e @ SessionError::Unfinished { .. }) = Session::open(store, stream) {
            return Err(e.into());
        }
    }
    let mut fold = Fold::new(stream, keep);
    let mut from = 1;
    'read: loop {
        let batch = store.read(stream, from, READ_CHUNK)?;
        let Some(last) = batch.last().map(|r| r.version) else { break };
        for rec in batch {
            if matches!(until, Until::Version(v) if rec.version > v) {
                break 'read;
            }
            let ev = codec::decode(stream, rec.version, &rec.record).map_err(SessionError::from)?;
            // The state keeps bodies only for the view: a restore or a second edit reads its
            // message back from the log first, as `replay` does.
            ctxlog::session::hydrate(store, stream, &mut fold.state, &ev)?;
            let served = fold.feed(rec.version, &ev, mode)?;
            if matches!((until, served), (Until::Call(n), Some(c)) if c == n) {
                break 'read;
            }
        }
        from = last + 1;
    }
    let analysis = fold.finish();
    if let (Mode::Strict, Until::Head, Some(e)) = (mode, until, unfinished(stream, &analysis.state)) {
        return Err(e.into());
    }
    match until {
        Until::Call(n) if analysis.calls.len() as u64 <= n => Err(CliError::Flag {
            flag: "--call",
            message: format!("--call {n}: session {stream} has {}", calls_phrase(analysis.calls.len() as u64)),
        }),
        _ => Ok(analysis),
    }
}

/// `Unfinished` if `state` is an import that did not finish (a lenient fold shows it, with
/// this as a warning).
pub fn unfinished(stream: StreamId, state: &State) -> Option<SessionError> {
    state.import().filter(|i| !i.completed).map(|i| SessionError::Unfinished {
        stream,
        messages: state.message_count(),
        announced: i.source.messages,
    })
}

/// `271 calls (0–270)`, `1 call (0)`, `no calls`.
pub fn calls_phrase(n: u64) -> String {
    match n {
        0 => "no calls".into(),
        1 => "1 call (0)".into(),
        n => format!("{n} calls (0–{})", n - 1),
    }
}

struct Fold {
    stream: StreamId,
    keep: Keep,
    state: State,
    timeline: Timeline,
    calls: Vec<Call>,
    messages: Vec<MessageHistory>,
    summaries: Vec<SummaryHistory>,
    violations: Vec<Violation>,
    /// Decisions of the call being committed, waiting for its time: (seq, index in decisions).
    pending: Vec<(u64, usize)>,
    /// Messages before this seq were in the log at an earlier call.
    unserved_from: u64,
    cache: ViewCache,
    previous_view: Vec<Arc<[u8]>>,
    pricing: PrefixCache,
    /// Tool names by call id, to say what a tool result answers.
    tool_names: BTreeMap<String, String>,
    host_guards: Vec<HostGuard>,
    pins: Vec<PinNote>,
    links: Vec<Link>,
}

impl Fold {
    fn new(stream: StreamId, keep: Keep) -> Fold {
        Fold {
            stream,
            keep,
            state: State::new(),
            timeline: Timeline::new(),
            calls: Vec::new(),
            messages: Vec::new(),
            summaries: Vec::new(),
            violations: Vec::new(),
            pending: Vec::new(),
            unserved_from: 0,
            cache: ViewCache::new(),
            previous_view: Vec::new(),
            pricing: PrefixCache::new(),
            tool_names: BTreeMap::new(),
            host_guards: Vec::new(),
            pins: Vec::new(),
            links: Vec::new(),
        }
    }

    /// Applies one event; returns the call number when it was a `RequestServed`.
    fn feed(&mut self, version: Version, ev: &Event, mode: Mode) -> Result<Option<u64>, CliError> {
        let stream = self.stream;
        // What the event is about, looked up before it changes the state.
        let last_call = self.state.calls().checked_sub(1);
        match mode {
            Mode::Strict => {
                self.state.apply(version, ev).map_err(|violation| SessionError::Invariant { stream, violation })?
            }
            Mode::Lenient => self.violations.extend(self.state.apply_lenient(version, ev)),
        }
        let call = self.state.calls();
        match ev {
            Event::MessageAppended(m) => {
                for b in m.message.blocks() {
                    if let Block::ToolUse { id, name, .. } = b {
                        self.tool_names.insert(id.clone(), name.clone());
                    }
                }
                for c in m.message.tool_calls.iter().flatten() {
                    self.tool_names.insert(c.id.clone(), c.name.clone());
                }
                self.messages.push(MessageHistory {
                    role: m.message.role.as_str().to_owned(),
                    tokens: m.tokens,
                    gist: gist(&m.message, &self.tool_names),
                    appended: version,
                    appended_after_call: last_call,
                    first_call: None,
                    decisions: Vec::new(),
                    provider_compaction: m.message.provider_compaction(),
                });
            }
            Event::SummaryPrepared(s) => {
                let index = self.summaries.len() as u32;
                for &m in &s.merged {
                    if let Some(h) = self.summaries.get_mut(m as usize) {
                        h.condensed_into = Some((index, None));
                    }
                }
                self.summaries.push(SummaryHistory {
                    from: s.from,
                    to: s.to,
                    tokens: s.tokens,
                    replaced_tokens: s.replaced_tokens,
                    merged: s.merged.clone(),
                    mode: s.mode_used,
                    version,
                    after_call: last_call,
                    shown_at: None,
                    condensed_into: None,
                    retired: None,
                });
            }
            Event::Flushed(f) => {
                for seq in f.from..f.to {
                    if self.state.hidden_by_flush(seq) {
                        let what =
                            What::Flushed { reason: f.reason, cache_age_ms: f.cache_age_ms, from: f.from, to: f.to };
                        self.decide(seq, version, Some(call), None, what);
                    }
                }
                for (i, s) in self.summaries.iter_mut().enumerate() {
                    let brought = f.condensed.contains(&(i as u32));
                    let reached = s.merged.is_empty() && s.shown_at.is_none() && s.to <= f.to && s.to > f.from;
                    if brought || reached {
                        s.shown_at = Some(call);
                    }
                }
                for s in &mut self.summaries {
                    if let Some((by, None)) = s.condensed_into {
                        if f.condensed.contains(&by) {
                            s.condensed_into = Some((by, Some(call)));
                        }
                    }
                }
            }
            Event::Edited(e) => {
                let what = What::Edited { kind: e.kind.as_str(), reason: e.reason.clone() };
                self.decide(e.seq, version, Some(call), None, what);
            }
            Event::SummaryRetired(r) => {
                if let Some(s) = self.summaries.get_mut(r.summary as usize) {
                    s.retired = Some((call, r.reason.clone()));
                }
            }
            Event::Restored(r) => {
                let what = |partner_of| What::Restored { by: r.by.clone(), why: r.why.clone(), partner_of };
                self.decide(r.seq, version, None, last_call, what(None));
                for &p in &r.partners {
                    self.decide(p, version, None, last_call, what(Some(r.seq)));
                }
            }
            Event::Pinned(p) => {
                let what = What::Pinned { pin: p.pin, by: p.by.clone(), why: p.why.clone() };
                self.decide(p.seq, version, None, last_call, what);
                self.pins.push(PinNote { version, after_call: last_call, pinned: p.clone() });
            }
            Event::GuardRaised(g) if g.call.is_none() => {
                let record = GuardRecord { kind: g.kind.name(), detail: format!("{} (knob: {})", g.detail, g.knob) };
                self.host_guards.push(HostGuard { version, after_call: last_call, record });
            }
            // Shown where a host's guards are: between the calls it came after.
            Event::ProviderCompacted(p) => {
                let record = GuardRecord { kind: "provider_compacted".into(), detail: compaction_sentence(p) };
                self.host_guards.push(HostGuard { version, after_call: last_call, record });
            }
            _ => {}
        }
        self.links.extend(link_of(stream, version, ev));
        let record = self.timeline.feed(version, ev, &self.state);
        let Event::RequestServed(s) = ev else { return Ok(None) };
        let Some(record) = record else { return Ok(None) };
        for (seq, i) in std::mem::take(&mut self.pending) {
            if let Some(d) = self.messages.get_mut(seq as usize).and_then(|m| m.decisions.get_mut(i)) {
                d.at_ms = Some(s.at);
            }
        }
        let count = self.state.message_count();
        for m in self.messages.iter_mut().take(count as usize).skip(self.unserved_from as usize) {
            m.first_call = Some(s.call);
        }
        self.unserved_from = count;
        let price = self.price(s.at, s.view_tokens);
        let view = if self.keep.views { runs(&self.state) } else { Vec::new() };
        self.calls.push(Call { record, digest: s.digest.clone(), at_ms: s.at, price, view });
        Ok(Some(s.call))
    }

    fn decide(&mut self, seq: u64, version: Version, call: Option<u64>, after_call: Option<u64>, what: What) {
        let Some(m) = self.messages.get_mut(seq as usize) else { return };
        m.decisions.push(Decision { version, call, after_call, at_ms: None, what });
        if call.is_some() {
            self.pending.push((seq, m.decisions.len() - 1));
        }
    }

    /// Prices the view just served: its leading messages identical to the previous view's are
    /// what the provider can read from its cache.
    fn price(&mut self, at: Millis, tokens: u64) -> Price {
        let synced = self.cache.sync(&self.state);
        let view = self.cache.bytes();
        let shared = if synced.appended_only {
            self.previous_view.len()
        } else {
            view.iter().zip(&self.previous_view).take_while(|(a, b)| a == b).count()
        };
        let bytes = |items: &[Arc<[u8]>]| items.iter().map(|b| b.len() as u64).sum::<u64>();
        let shared_bytes = view.get(..shared).map_or(0, bytes);
        let warm = self.calls.last().is_some_and(|c| (at as f64 - c.at_ms as f64) < ctxlog::cost::TTL_MS);
        let before = self.pricing.totals.cost;
        let cached = self.pricing.call(at as f64, tokens, shared_bytes, bytes(view));
        self.previous_view = view.to_vec();
        let t = self.pricing.totals;
        Price { warm, cached, cost: t.cost - before, cumulative: t.cost, cumulative_lower_bound: t.lower_bound }
    }

    fn finish(self) -> Analysis {
        Analysis {
            session: self.stream,
            state: self.state,
            calls: self.calls,
            messages: self.messages,
            summaries: self.summaries,
            totals: self.pricing.totals,
            violations: self.violations,
            host_guards: self.host_guards,
            pins: self.pins,
            links: self.links,
            trailing: self.timeline.trailing(),
        }
    }
}

/// The view as runs: verbatim messages merged while nothing else stands between them.
fn runs(state: &State) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for it in state.view() {
        let tokens = u64::from(it.tokens);
        match it.item {
            Item::Summary(index) => {
                let Some(s) = state.summaries().get(index as usize) else { continue };
                out.push(Run::Summary { index, from: s.from, to: s.to, condensed: s.is_condensed(), tokens });
            }
            Item::Placeholder { from, to } => out.push(Run::Placeholder { from, to, tokens }),
            Item::Message(seq) => match state.entry(seq).and_then(|e| e.edit.as_ref()) {
                Some(edit) => out.push(Run::Edited { seq, kind: edit.kind.as_str(), tokens }),
                None => match out.last_mut() {
                    Some(Run::Messages { to, count, tokens: t, .. }) => {
                        *to = seq;
                        *count += 1;
                        *t += tokens;
                    }
                    _ => out.push(Run::Messages { from: seq, to: seq, count: 1, tokens }),
                },
            },
        }
    }
    out
}

/// A few words on what a message is: the tools it calls (with counts), the tools whose results
/// it carries (named from `tool_names`, call id → name), its media, and the start of its text.
pub fn gist(m: &Message, tool_names: &BTreeMap<String, String>) -> String {
    let mut tools: Vec<(String, usize)> = Vec::new();
    let mut call = |name: &str| match tools.iter_mut().find(|(n, _)| n == name) {
        Some((_, k)) => *k += 1,
        None => tools.push((name.to_owned(), 1)),
    };
    let (mut images, mut documents) = (0, 0);
    for b in m.blocks() {
        match b {
            Block::ToolUse { name, .. } => call(name),
            Block::Media { kind: MediaKind::Image, .. } | Block::ImageUrl { .. } => images += 1,
            Block::Media { kind: MediaKind::Document, .. } => documents += 1,
            _ => {}
        }
    }
    for c in m.tool_calls.iter().flatten() {
        call(&c.name);
    }
    let answered: Vec<String> =
        m.result_ids().map(|id| tool_names.get(id).map_or_else(|| "a tool".to_owned(), |n| format!("`{n}`"))).collect();
    let count = |n: usize, one: &str, many: &str| match n {
        0 => None,
        1 => Some(one.to_owned()),
        n => Some(format!("{n} {many}")),
    };
    let mut parts: Vec<String> = Vec::new();
    if !tools.is_empty() {
        let names: Vec<String> =
            tools.iter().map(|(n, k)| if *k > 1 { format!("`{n}` ×{k}") } else { format!("`{n}`") }).collect();
        parts.push(format!("calls {}", names.join(", ")));
    }
    if !answered.is_empty() {
        parts.push(format!("the result of {}", answered.join(", ")));
    }
    parts.extend(count(images, "an image", "images"));
    parts.extend(count(documents, "a document", "documents"));
    let text = m.plain_text();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if !text.is_empty() {
        let preview: String = text.chars().take(60).collect();
        let more = if text.chars().count() > 60 { "…" } else { "" };
        parts.push(format!("\"{preview}{more}\""));
    }
    parts.join(", ")
}

/// What `replay` says of a compaction the provider made on the client's request.
fn compaction_sentence(p: &ctxlog::event::ProviderCompacted) -> String {
    let model = p.model.as_deref().map(|m| format!(" ({m})")).unwrap_or_default();
    let id = p.response_id.as_deref().map(|i| format!(" as {i}")).unwrap_or_default();
    let usage = p
        .usage
        .map(|u| format!("; billed {} prompt tokens ({} cached), {} output", u.prompt_total(), u.cache_read, u.output))
        .unwrap_or_default();
    format!(
        "the client asked the provider to compact its history ({}{model}): {} items in, {} out{id}{usage}; \
         the client's next history may start from them (knob: none, the client's call)",
        p.endpoint, p.input_items, p.output_items
    )
}
