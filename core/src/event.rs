//! The events: past tense, self-explanatory in a postmortem. The engine state is their fold
//! ([`crate::state::State::apply`]). Each event's layout is frozen once shipped; see
//! [`crate::codec`] for how a changed event gets a new kind and an upcast.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::breakpoints::CacheTtl;
use crate::config::Config;
use crate::message::Message;
use crate::store::BlobId;
use crate::time::Millis;
use crate::usage::Usage;
use crate::wire::WireFormat;

/// Every event of a session stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// The session was created.
    SessionStarted(SessionStarted),
    /// A message was appended.
    MessageAppended(MessageAppended),
    /// A summary of a span was prepared (the view is unchanged).
    SummaryPrepared(SummaryPrepared),
    /// A call switched the view to the prepared summaries.
    Flushed(Flushed),
    /// A call's ladder edited a message in the view.
    Edited(Edited),
    /// A call took a summary out of the view (summaries over their share, none condensed).
    SummaryRetired(SummaryRetired),
    /// An edit (or a flush) of a message was undone.
    Restored(Restored),
    /// A model call was served with a view.
    RequestServed(RequestServed),
    /// A guard decided something worth knowing.
    GuardRaised(GuardRaised),
    /// An import appended every message of its transcript: the session is complete.
    ImportCompleted(ImportCompleted),
    /// A summary attempt failed, went stale or was not smaller than its span: recorded with its
    /// reason, it changes nothing else.
    SummaryFailed(SummaryFailed),
    /// The assistant message a served call was answered with, as the host that relayed it saw
    /// it; it changes nothing else (see [`AnswerReceived`]).
    AnswerReceived(AnswerReceived),
    /// This session is a branch of another: the records before this one are the parent's,
    /// copied up to the fork point (see [`Branched`]).
    Branched(Branched),
    /// The client's own name for the conversation, written with `SessionStarted` (see
    /// [`SessionNamed`]); it changes nothing else.
    SessionNamed(SessionNamed),
    /// The provider refused a planned call (an HTTP error status): nothing was served; it
    /// changes nothing else (see [`CallRejected`]).
    CallRejected(CallRejected),
    /// The provider's real context limit for a model, learned from a rejection: from then on
    /// it caps the session's budget (see [`LimitLearned`]).
    LimitLearned(LimitLearned),
    /// A message was pinned (or unpinned) by a person: from then on no ladder level edits it
    /// and no flush hides it, until it is unpinned (see [`Pinned`]).
    Pinned(Pinned),
    /// The provider compacted the conversation on the client's request, outside a call
    /// (OpenAI `POST /v1/responses/compact`); it changes nothing else (see
    /// [`ProviderCompacted`]).
    ProviderCompacted(ProviderCompacted),
}

impl Event {
    /// Stable name of the event kind.
    pub fn name(&self) -> &'static str {
        match self {
            Event::SessionStarted(_) => "SessionStarted",
            Event::MessageAppended(_) => "MessageAppended",
            Event::SummaryPrepared(_) => "SummaryPrepared",
            Event::Flushed(_) => "Flushed",
            Event::Edited(_) => "Edited",
            Event::SummaryRetired(_) => "SummaryRetired",
            Event::Restored(_) => "Restored",
            Event::RequestServed(_) => "RequestServed",
            Event::GuardRaised(_) => "GuardRaised",
            Event::ImportCompleted(_) => "ImportCompleted",
            Event::SummaryFailed(_) => "SummaryFailed",
            Event::AnswerReceived(_) => "AnswerReceived",
            Event::Branched(_) => "Branched",
            Event::SessionNamed(_) => "SessionNamed",
            Event::CallRejected(_) => "CallRejected",
            Event::LimitLearned(_) => "LimitLearned",
            Event::Pinned(_) => "Pinned",
            Event::ProviderCompacted(_) => "ProviderCompacted",
        }
    }
}

/// `SessionStarted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStarted {
    /// Session id (= stream id).
    pub session: Uuid,
    /// The session's wire format.
    pub format: WireFormat,
    /// The knobs in force.
    pub config: Config,
    /// Creation time.
    pub at: Millis,
    /// Set when `ctxlog import` creates the session: the session is complete only once its
    /// `ImportCompleted` is in the log, and readers treat it as absent until then. Added in
    /// record kind 14, written in kind 18 (kinds 1, 9 and 16 upcast to `None`).
    pub import: Option<ImportSource>,
}

/// The transcript an import reads, announced when the session is created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportSource {
    /// sha256 of the transcript's bytes, lower-case hex (a retried import of the same file
    /// resumes the session; another file may not).
    pub transcript_sha256: String,
    /// Length of the transcript in bytes.
    pub transcript_bytes: u64,
    /// Messages the transcript holds: the import is complete once all are appended.
    pub messages: u64,
    /// Simulated time between calls for lines without a timestamp.
    pub call_interval_ms: u64,
}

/// `AnswerReceived`: what the provider answered a served call with, assembled by a host that
/// relayed the answer (the proxy: from the JSON body or the stream's events). It is a record of
/// the call, not a message of the conversation: the client's next request carries its own copy
/// of the answer, which is appended as usual, so a retried or regenerated call is no
/// divergence. It lets the log hold a conversation's last answer (`export` ends with it) and
/// what each call returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnswerReceived {
    /// The call it answered (its `RequestServed` comes first).
    pub call: u64,
    /// The assistant message, in the session's wire format.
    pub message: Message,
}

/// `Branched`: the session continues another session's history from a fork point. Every record
/// before this one is a copy of the parent's first `parent_version` records (the first,
/// `SessionStarted`, with this session's id), so the state here is the parent's as it was when
/// it held `messages` messages: the summaries, flushes and edits of the shared prefix are this
/// session's too, and `replay`, `export` and `verify` read a branch like any session. A
/// branch of a branch carries its ancestors' `Branched` records in its copy, oldest first: the
/// lineage from the root, each with its fork point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Branched {
    /// The session it branched from.
    pub parent: Uuid,
    /// How many of the parent's records were copied (this record's version is one more).
    pub parent_version: u64,
    /// The fork point: the messages shared with the parent (seqs `0..messages`); this branch's
    /// own messages start at seq `messages`.
    pub messages: u64,
    /// When the branch was made.
    pub at: Millis,
}

/// `SessionNamed`: the name a client gave its conversation (the proxy: the `x-ctxlog-session`
/// header), written in the batch that creates the session, right after `SessionStarted`. The
/// stream id a host derives from a name is a one-way hash (it mixes in the tenant's key), so
/// without this record a person could not find a named session again. A record for readers
/// (`ctxlog sessions`, `--session NAME`): the fold only checks it follows `SessionStarted`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionNamed {
    /// The name as the client sent it (not unique: two tenants may use the same one).
    pub name: String,
}

/// `CallRejected`: the provider answered a planned call with an error status, so nothing was
/// served (the plan was dropped; the call's number is used again by the next plan). Written by
/// the host that dispatched the call ([`crate::Session::reject_call`]); every rejected call
/// leaves one, so `replay` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRejected {
    /// The number the rejected call had (the next served call has it too).
    pub call: u64,
    /// When the rejection arrived (ms since the epoch).
    pub at: Millis,
    /// The model the request named, when known.
    pub model: Option<String>,
    /// The HTTP status.
    pub status: u16,
    /// The provider's error type or code (`invalid_request_error`, `context_length_exceeded`,
    /// `exceed_context_size_error`, …), empty when it gave none.
    pub error: String,
    /// The start of the provider's error message.
    pub message: String,
    /// The rejection says the prompt is longer than the model's context.
    pub overflow: bool,
    /// The provider's count of the rejected prompt, when it gave one.
    pub prompt_tokens: Option<u64>,
    /// The model's context limit, when the provider gave it.
    pub limit: Option<u64>,
    /// Our estimate of the rejected view.
    pub view_tokens: u64,
}

/// `LimitLearned`: a model's real context limit, from a rejection. The fold lowers the session's
/// budget to `budget` (never raises it), so every later plan, also after a restart, keeps the
/// view within what the provider accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitLearned {
    /// The rejected call's number.
    pub call: u64,
    /// The model, when known.
    pub model: Option<String>,
    /// The limit the provider stated, in its tokens.
    pub limit: u64,
    /// The budget it sets, in the engine's tokens: the limit scaled by how much the provider
    /// counted over our estimate of the rejected view (never above the limit).
    pub budget: u64,
}

/// `ProviderCompacted`: a host relayed a compaction the client asked the provider for, outside
/// any call of the engine (OpenAI `POST /v1/responses/compact`: the provider returns a shorter
/// history, its opaque `compaction` item last, that the client sends from then on). It is a
/// record for people (`replay` shows it after the call it follows); the fold only counts it.
/// Written by a host (the proxy), never by the engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderCompacted {
    /// When the provider's answer arrived (ms since the Unix epoch).
    pub at: u64,
    /// The endpoint called (`/v1/responses/compact`).
    pub endpoint: String,
    /// The model the client asked, when it named one.
    pub model: Option<String>,
    /// The compacted response's id.
    pub response_id: Option<String>,
    /// History items the client sent.
    pub input_items: u64,
    /// Items the provider returned in their place.
    pub output_items: u64,
    /// What the provider billed for it.
    pub usage: Option<crate::usage::Usage>,
}

/// `ImportCompleted`: the last record an import writes; before it, the session is an unfinished
/// import.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportCompleted {
    /// Messages appended (= the transcript's).
    pub messages: u64,
    /// Calls served.
    pub calls: u64,
}

/// `MessageAppended`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageAppended {
    /// Dense 0-based position.
    pub seq: u64,
    /// The message, blobs as references.
    pub message: Message,
    /// Its token estimate (cached for the life of the session).
    pub tokens: u32,
}

/// How a summary was asked for and produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SummaryMode {
    /// System prompt + the span as text.
    Standalone,
    /// The exact last request + one user message naming the span.
    Fork,
    /// The built-in extractive summarizer (no model call).
    Extractive,
    /// Fork when the span is a large enough share of the prefix, else standalone (only ever
    /// *requested*; the mode used is one of the others). Appended after the first release's
    /// three modes, so older records keep decoding.
    Auto,
}

impl SummaryMode {
    /// Snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            SummaryMode::Standalone => "standalone",
            SummaryMode::Fork => "fork",
            SummaryMode::Extractive => "extractive",
            SummaryMode::Auto => "auto",
        }
    }
}

/// `SummaryPrepared`: a summary of a span of messages, or (`merged` not empty) a condensed
/// summary of earlier summaries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryPrepared {
    /// First covered seq: the previous `compacted_prefix_messages`, or for a condensed summary
    /// the first seq of the oldest summary it replaces.
    pub from: u64,
    /// One past the last covered seq: the new `compacted_prefix_messages`, or for a condensed
    /// summary the end of the last summary it replaces.
    pub to: u64,
    /// The summary text.
    pub text: String,
    /// Its token estimate.
    pub tokens: u32,
    /// Estimated tokens of the span it replaces.
    pub replaced_tokens: u64,
    /// Mode the engine asked for.
    pub mode_requested: SummaryMode,
    /// Mode actually used.
    pub mode_used: SummaryMode,
    /// Why the requested mode was refused, if it was.
    pub refusal: Option<String>,
    /// Indices (in prepare order) of the earlier summaries this one condenses; empty for a
    /// summary of messages. Added in record kind 10 (kind 3 upcasts to empty).
    pub merged: Vec<u32>,
    /// The call whose served request a fork summary appended to (`None` for every other
    /// mode). Added in record kind 21 (older kinds upcast to `None`).
    pub prefix_call: Option<u64>,
    /// The summarizer's reported usage, when a model wrote the summary. Added in kind 21.
    pub usage: Option<Usage>,
    /// How long the summarizer call took, as the host measured it. Added in kind 21.
    pub latency_ms: Option<u64>,
}

impl SummaryPrepared {
    /// Does this summary condense earlier summaries (rather than summarize messages)?
    pub fn is_condensed(&self) -> bool {
        !self.merged.is_empty()
    }
}

/// Why a flush happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FlushReason {
    /// Cache-aware mode off: flush as soon as something is prepared.
    LegacyImmediate,
    /// The cache had gone cold, so rewriting the prefix costs nothing extra.
    ColdCache,
    /// The cache was warm but the view was over the hard threshold.
    SizeThreshold,
}

impl FlushReason {
    /// Snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            FlushReason::LegacyImmediate => "legacy_immediate",
            FlushReason::ColdCache => "cold_cache",
            FlushReason::SizeThreshold => "size_threshold",
        }
    }
}

/// `Flushed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flushed {
    /// Old `flushed_prefix_messages`.
    pub from: u64,
    /// New `flushed_prefix_messages`.
    pub to: u64,
    /// Why now.
    pub reason: FlushReason,
    /// Time since the last served request (`None` if never served).
    pub cache_age_ms: Option<u64>,
    /// View tokens before the flush.
    pub tokens_before: u64,
    /// View tokens after the flush.
    pub tokens_after: u64,
    /// Tool outputs and media in the flushed range that are now only references.
    pub stubbed: Vec<u64>,
    /// Condensed summaries this flush brings into the view (indices in prepare order); the
    /// summaries they condense leave it. Added in record kind 13 (kind 4 upcasts to empty).
    pub condensed: Vec<u32>,
}

/// What an edit does to a message in the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EditKind {
    /// Gone from the view (tool pairs go together).
    Removed,
    /// Tool result text cut to its first `keep_chars` characters plus a marker.
    Truncated {
        /// Characters kept.
        keep_chars: u32,
    },
    /// User text replaced by a short stub with a preview; non-text blocks kept.
    Stubbed {
        /// Characters of preview.
        preview_chars: u32,
    },
    /// Every tool result of the message replaced by the session's placeholder text (Anthropic's
    /// tool result clearing); images in it go too. Record kind 32.
    Cleared,
    /// An assistant message trimmed: its thinking and redacted-thinking blocks dropped whole
    /// (never modified), and/or the inputs of its tool calls cleared to `{}` (ids and names
    /// kept, so every pair stays valid). A later trim of the same message carries both flags
    /// it shows. Record kind 32.
    Trimmed {
        /// Thinking blocks dropped.
        thinking: bool,
        /// Tool call inputs cleared.
        inputs: bool,
    },
}

impl EditKind {
    /// Snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            EditKind::Removed => "removed",
            EditKind::Truncated { .. } => "truncated",
            EditKind::Stubbed { .. } => "stubbed",
            EditKind::Cleared => "cleared",
            EditKind::Trimmed { .. } => "trimmed",
        }
    }

    /// Can record kind 5 (the first three kinds) hold it?
    pub fn in_first_layout(self) -> bool {
        matches!(self, EditKind::Removed | EditKind::Truncated { .. } | EditKind::Stubbed { .. })
    }
}

/// Why an edit was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditReason {
    /// Ladder level (1–9); 0 for a knob's edit outside the ladder (`keep_thinking_turns`).
    pub level: u8,
    /// The rule that chose this message.
    pub rule: String,
    /// The token target the ladder was aiming at.
    pub target_tokens: u64,
    /// The guard in force, if any (e.g. the target was clamped to the budget).
    pub guard: Option<String>,
}

impl EditReason {
    /// One sentence: `level L: rule; target T tokens[; guard]`.
    pub fn describe(&self) -> String {
        let mut s = format!("level {}: {}; target {} tokens", self.level, self.rule, self.target_tokens);
        if let Some(g) = &self.guard {
            s.push_str("; ");
            s.push_str(g);
        }
        s
    }
}

/// `Edited`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edited {
    /// The message.
    pub seq: u64,
    /// What happened to it.
    pub kind: EditKind,
    /// Why.
    pub reason: EditReason,
}

/// `SummaryRetired`: a summary left the view without a condensed summary to stand for it.
/// What it covered stays in the log and can be restored message by message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryRetired {
    /// Index of the summary (in prepare order).
    pub summary: u32,
    /// First seq it covered.
    pub from: u64,
    /// One past the last seq it covered.
    pub to: u64,
    /// Its tokens in the view.
    pub tokens: u64,
    /// Why, with the numbers.
    pub reason: String,
}

/// `Restored`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restored {
    /// The message asked for.
    pub seq: u64,
    /// Tool partners restored with it, so no pair is split.
    pub partners: Vec<u64>,
    /// Who asked.
    pub by: String,
    /// Why.
    pub why: String,
}

/// `Pinned` (record kind 29): `ctxlog restore --pin` (written after the `Restored` that brought
/// the message back, in the same batch) or `Session::pin`. A pinned message is what a message
/// appended with `"pinned": true` is: never edited by the ladder, kept verbatim through every
/// flush (its tool partners with it), skipped by the summaries' text. `pin: false` unpins a
/// message an earlier `Pinned` pinned (the explicit edit that ends a pin); a message appended
/// pinned stays pinned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pinned {
    /// The message.
    pub seq: u64,
    /// `true` pins, `false` unpins.
    pub pin: bool,
    /// Who asked.
    pub by: String,
    /// Why.
    pub why: String,
}

/// `RequestServed`: one committed call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestServed {
    /// 0-based call number.
    pub call: u64,
    /// When the dispatch completed (the prompt cache's reference time).
    pub at: Millis,
    /// sha256 of the view bytes (see [`crate::view`]).
    pub digest: String,
    /// Messages in the view.
    pub view_messages: u64,
    /// Estimated tokens of the view.
    pub view_tokens: u64,
    /// The meter reading the gate used (anchored on provider usage when available).
    pub metered_tokens: u64,
    /// Provider-reported prompt tokens of this call ([`Usage::prompt_total`]), if given.
    pub reported_tokens: Option<u64>,
    /// Highest ladder level this call reached (0 = no ladder).
    pub level: u8,
    /// The view was over the trigger before the ladder (compaction was needed).
    pub needed: bool,
    /// This view is the previous view plus new messages, byte for byte.
    pub prefix_reused: bool,
    /// Work the cache-aware gate held back on this call, and why. Added in record kind 11
    /// (kind 7 upcasts to `None`).
    pub deferred: Option<Deferral>,
    /// The provider's usage as the host reported it (uncached input, cache reads and writes,
    /// output), if it gave the parts. Added in record kind 17 (older kinds upcast to `None`).
    pub usage: Option<Usage>,
    /// The meter anchors on `reported_tokens` from this call on. False when nothing was
    /// reported, or when the report was far below the estimate of the served view (not trusted,
    /// see `usage_below_estimate`). Added in record kind 17 (older kinds upcast to
    /// `reported_tokens.is_some()`, what their fold did).
    pub anchored: bool,
    /// What the host sent besides the messages (model, tools, cache breakpoints), when it
    /// committed with [`crate::Session::commit_request`]; `None` when it did not say (a fork
    /// summary then refuses to append to this request: its tools are unknown). Added in record
    /// kind 20 (older kinds upcast to `None`).
    pub request: Option<RequestRecord>,
}

/// What a served request carried besides its messages: enough to rebuild its prefix for a fork
/// summary byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// The `model` field, if the request had one.
    pub model: Option<String>,
    /// The `tools` field.
    pub tools: ToolsRecord,
    /// The cache breakpoints ctxlog placed (Anthropic), if requested.
    pub breakpoints: Option<CacheTtl>,
    /// The breakpoints placed by position ([`crate::RequestOptions::place_breakpoints`]): who
    /// decided them and where they went; the logged `cache_control` were left out. Added in
    /// record kind 30 (kind 20 upcasts to `None`).
    pub placement: Option<crate::breakpoints::Placement>,
}

/// The `tools` a served request carried. The JSON is stored once per distinct value in the
/// store's blob area (content-addressed), so a session that sends the same tools on every call
/// records only their id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolsRecord {
    /// The request had no `tools` field.
    None,
    /// The `tools` JSON, verbatim, as a blob.
    Blob {
        /// Content address of the JSON bytes.
        id: BlobId,
        /// Their length.
        bytes: u64,
    },
}

/// `SummaryFailed`: a summary attempt that produced nothing usable. It changes nothing but the
/// count of consecutive failures (and the refusal counts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryFailed {
    /// First seq of the job's span.
    pub from: u64,
    /// One past its last seq.
    pub to: u64,
    /// The summaries a condense job would have replaced (empty for a span of messages).
    pub merged: Vec<u32>,
    /// Mode asked for.
    pub mode_requested: SummaryMode,
    /// Mode used.
    pub mode_used: SummaryMode,
    /// Why a fork was refused or declined, if it was.
    pub refusal: Option<String>,
    /// The call a fork appended to.
    pub prefix_call: Option<u64>,
    /// What went wrong.
    pub reason: SummaryFailure,
    /// The summarizer's reported usage, if the call got that far.
    pub usage: Option<Usage>,
    /// How long the attempt took, as the host measured it.
    pub latency_ms: Option<u64>,
}

/// Why a summary attempt produced nothing usable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SummaryFailure {
    /// The summarizer did not answer in time.
    Timeout,
    /// The summarizer failed (HTTP status, invalid body, program exit, …), in a sentence.
    Provider(String),
    /// It answered with no text.
    Empty,
    /// The span was edited, flushed or summarized meanwhile (the staleness guard).
    Stale(String),
    /// The summary is not smaller than what it replaces (the shrink guard).
    NotSmaller {
        /// Its tokens.
        tokens: u32,
        /// Tokens of what it would replace.
        replaced_tokens: u64,
    },
    /// A condensed summary over its job's limit.
    OverLimit {
        /// Its tokens.
        tokens: u32,
        /// The job's limit.
        max_tokens: u32,
    },
    /// The answer was cut at the request's `max_tokens` (`finish_reason: length`,
    /// `stop_reason: max_tokens`): a cut summary is never used, however small.
    Truncated {
        /// The request's `max_tokens`, when known.
        max_tokens: Option<u64>,
    },
    /// The answer is mostly the request's own instructions (the prompt or the scope sentence)
    /// echoed back, not a summary.
    Echo {
        /// Share (per mille) of the answer's word 5-grams found in the instructions.
        per_mille: u32,
    },
    /// The summarizer refused the request with a status that repeats for the same request
    /// (a 4xx other than 408, 409 and 429): the same job is not sent again until it changes.
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The error in a sentence.
        detail: String,
    },
}

impl SummaryFailure {
    /// Snake-case name.
    pub fn as_str(&self) -> &'static str {
        match self {
            SummaryFailure::Timeout => "timeout",
            SummaryFailure::Provider(_) => "provider_error",
            SummaryFailure::Empty => "empty",
            SummaryFailure::Stale(_) => "stale",
            SummaryFailure::NotSmaller { .. } => "not_smaller",
            SummaryFailure::OverLimit { .. } => "over_limit",
            SummaryFailure::Truncated { .. } => "truncated",
            SummaryFailure::Echo { .. } => "echo",
            SummaryFailure::Rejected { .. } => "rejected",
        }
    }

    /// One sentence with the numbers.
    pub fn describe(&self) -> String {
        match self {
            SummaryFailure::Timeout => "the summarizer timed out".into(),
            SummaryFailure::Provider(why) => format!("the summarizer failed: {why}"),
            SummaryFailure::Empty => "the summarizer returned no text".into(),
            SummaryFailure::Stale(why) => format!("stale: {why}"),
            SummaryFailure::NotSmaller { tokens, replaced_tokens } => {
                format!("the summary ({tokens} tokens) is not smaller than what it replaces ({replaced_tokens} tokens)")
            }
            SummaryFailure::OverLimit { tokens, max_tokens } => {
                format!("the condensed summary ({tokens} tokens) is over its limit of {max_tokens} tokens")
            }
            SummaryFailure::Truncated { max_tokens: Some(n) } => {
                format!("the answer was cut at max_tokens {n}: a cut summary is not used")
            }
            SummaryFailure::Truncated { max_tokens: None } => {
                "the answer was cut at max_tokens: a cut summary is not used".into()
            }
            SummaryFailure::Echo { per_mille } => format!(
                "the answer mostly repeats the request's instructions ({:.1} % of its word 5-grams): not a summary",
                f64::from(*per_mille) / 10.0
            ),
            SummaryFailure::Rejected { status, detail } => format!(
                "the summarizer refused the request (HTTP {status}, not sent again until the job changes): {detail}"
            ),
        }
    }
}

/// Why a call served its view unchanged although something was pending or due.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Deferral {
    /// The cache was warm and the view within the hard limit: the prepared flush and/or the
    /// ladder wait for a cold cache.
    WarmCache {
        /// Time since the last served call.
        cache_age_ms: u64,
        /// The hard limit the view was within.
        hard_limit_tokens: u64,
        /// Prepared summaries were waiting to be flushed.
        flush_pending: bool,
        /// The view was at or over the trigger (the ladder was due).
        ladder_due: bool,
    },
    /// The rewrite the call would have made frees fewer than `clear_at_least` tokens, and the
    /// view fits the budget without it.
    TooLittleFreed {
        /// Time since the last served call.
        cache_age_ms: u64,
        /// Tokens the rewrite would have freed.
        freed_tokens: u64,
        /// The knob.
        clear_at_least: u64,
    },
}

impl Deferral {
    /// Snake-case name of the reason.
    pub fn as_str(&self) -> &'static str {
        match self {
            Deferral::WarmCache { .. } => "warm_cache",
            Deferral::TooLittleFreed { .. } => "clear_at_least",
        }
    }

    /// One sentence with the numbers.
    pub fn describe(&self) -> String {
        let secs = |ms: u64| ms as f64 / 1000.0;
        match self {
            Deferral::WarmCache { cache_age_ms, hard_limit_tokens, flush_pending, ladder_due } => {
                let what = match (flush_pending, ladder_due) {
                    (true, true) => "the flush and the ladder wait",
                    (true, false) => "the flush waits",
                    _ => "the ladder waits",
                };
                format!(
                    "cache warm ({:.0} s old); {what} for a cold cache while the view is within the hard limit of {} tokens",
                    secs(*cache_age_ms),
                    crate::numbers::thousands(*hard_limit_tokens)
                )
            }
            Deferral::TooLittleFreed { cache_age_ms, freed_tokens, clear_at_least } => format!(
                "cache warm ({:.0} s old); the rewrite would free only {} tokens, less than clear_at_least {}",
                secs(*cache_age_ms),
                crate::numbers::thousands(*freed_tokens),
                crate::numbers::thousands(*clear_at_least)
            ),
        }
    }
}

/// What a guard saw.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum GuardKind {
    /// The unremovable floor alone exceeds the target while the view fits the budget.
    TargetUnreachable,
    /// Removing every candidate could not reach the target: the ladder aimed at the budget.
    TargetClamped,
    /// Too many consecutive passes ended over the budget: escalation is frozen.
    BreakerTripped,
    /// The served view is over the budget.
    OverBudget,
    /// A fork summary request was refused and fell back to standalone.
    ForkRefused {
        /// The precondition that failed.
        reason: String,
    },
    /// A provider-reported prompt total was far below the estimate of the view it was for, so
    /// the meter did not anchor on it.
    UsageBelowEstimate,
    /// Consecutive summary attempts failed: the engine offers no summary job until a call's
    /// view is under the soft threshold again.
    SummarizerPaused,
    /// A client's history disagreed with the log from message `seq` on (it edited or truncated
    /// its own history, or two clients share a session): the conversation goes on in the
    /// session `successor` (a stream id), built from the client's history alone. Written by a
    /// host (the proxy), never by the engine; it stays latched.
    HistoryDiverged {
        /// The first message seq where the client's history differs from the log.
        seq: u64,
        /// The session that continues the conversation.
        successor: String,
    },
    /// The provider holds this conversation's history (OpenAI Responses `previous_response_id`):
    /// the host logs each call, its new input and its answer, passes the client's body through
    /// unchanged and never compacts (what the provider holds was never sent through ctxlog).
    /// Written by a host (the proxy) when it creates such a session; it stays latched.
    ProviderHeldHistory,
    /// The client replaced the first `seq` messages of session `predecessor` by its own
    /// summary (a client-side summarizer, e.g. LangChain's `SummarizationMiddleware`): this
    /// session holds its history from then on, starting with that summary and the messages it
    /// kept. Written by a host (the proxy) on the new session when it creates it; it stays
    /// latched. Added as variant 9.
    ClientCompacted {
        /// The session whose history the client summarized.
        predecessor: String,
        /// The predecessor's first message the client kept.
        seq: u64,
    },
    /// The client sends its own `context_management` (Anthropic's context editing): the host
    /// passed it upstream as it was (`applied` false), or applied it itself as the call's knobs
    /// and left it out of the forwarded request (`applied` true; each call's edits are its
    /// `Edited` events). Written by a host (the proxy) the first time; it stays latched. Added
    /// as variant 10.
    ClientContextManagement {
        /// ctxlog applied the edits (else the provider did).
        applied: bool,
    },
}

impl GuardKind {
    /// Snake-case name (`fork_refused:<reason>` for refusals).
    pub fn name(&self) -> String {
        match self {
            GuardKind::TargetUnreachable => "target_unreachable".into(),
            GuardKind::TargetClamped => "target_clamped".into(),
            GuardKind::BreakerTripped => "breaker_tripped".into(),
            GuardKind::OverBudget => "over_budget".into(),
            GuardKind::ForkRefused { reason } => format!("fork_refused:{reason}"),
            GuardKind::UsageBelowEstimate => "usage_below_estimate".into(),
            GuardKind::SummarizerPaused => "summarizer_paused".into(),
            GuardKind::HistoryDiverged { .. } => "history_diverged".into(),
            GuardKind::ProviderHeldHistory => "provider_held_history".into(),
            GuardKind::ClientCompacted { .. } => "client_compacted".into(),
            GuardKind::ClientContextManagement { applied: false } => "client_context_management:passed".into(),
            GuardKind::ClientContextManagement { applied: true } => "client_context_management:applied".into(),
        }
    }
}

/// `GuardRaised`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardRaised {
    /// The call that raised it, if raised during a call.
    pub call: Option<u64>,
    /// What.
    pub kind: GuardKind,
    /// A sentence with the numbers.
    pub detail: String,
    /// The knob that moves it.
    pub knob: String,
}
