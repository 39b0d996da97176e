//! Frozen layouts of record kinds that a later kind replaced, and their upcasts to the current
//! events. These structs must never change: they are how records written by earlier builds
//! decode (the golden logs in `tests/golden/` pin them). [`encode`] writes an event in its old
//! layout, so the upcasts are also tested against bytes built here, not only against goldens.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::{Config, SummarizerKind};
use crate::event::{
    Deferral, Event, FlushReason, Flushed, ImportSource, RequestRecord, RequestServed, SessionStarted, SummaryMode,
    SummaryPrepared, ToolsRecord,
};
use crate::request::CacheTtl;
use crate::store::Record;
use crate::time::Millis;
use crate::usage::Usage;
use crate::wire::WireFormat;

use super::{kind, payload, EncodeError};

mod encode;
pub use encode::{encode, encode_v2, encode_v3, encode_v4, encode_v5, encode_v6};

/// The twelve knobs of the first release (inside kind 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigV1 {
    /// See [`Config::budget`].
    pub budget: u64,
    /// See [`Config::trigger_ratio`].
    pub trigger_ratio: f64,
    /// See [`Config::target_ratio`].
    pub target_ratio: f64,
    /// See [`Config::prepare_ratio`].
    pub prepare_ratio: f64,
    /// See [`Config::summarizer`].
    pub summarizer: SummarizerKind,
    /// See [`Config::cache_aware`].
    pub cache_aware: bool,
    /// See [`Config::flush_ttl_ms`].
    pub flush_ttl_ms: u64,
    /// See [`Config::protected_tool_results`].
    pub protected_tool_results: u32,
    /// See [`Config::protected_recent_ratio`].
    pub protected_recent_ratio: f64,
    /// See [`Config::breaker_passes`].
    pub breaker_passes: u32,
    /// See [`Config::image_tokens`].
    pub image_tokens: u32,
    /// See [`Config::truncate_chars`].
    pub truncate_chars: u32,
}

/// Kind 1: `SessionStarted` with a [`ConfigV1`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStartedV1 {
    /// Session id.
    pub session: Uuid,
    /// Wire format.
    pub format: WireFormat,
    /// Knobs.
    pub config: ConfigV1,
    /// Creation time.
    pub at: Millis,
}

/// The fifteen knobs of kinds 9 (before `usage_floor_ratio`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigV2 {
    /// See [`Config::budget`].
    pub budget: u64,
    /// See [`Config::trigger_ratio`].
    pub trigger_ratio: f64,
    /// See [`Config::target_ratio`].
    pub target_ratio: f64,
    /// See [`Config::prepare_ratio`].
    pub prepare_ratio: f64,
    /// See [`Config::summarizer`].
    pub summarizer: SummarizerKind,
    /// See [`Config::cache_aware`].
    pub cache_aware: bool,
    /// See [`Config::flush_ttl_ms`].
    pub flush_ttl_ms: u64,
    /// See [`Config::protected_tool_results`].
    pub protected_tool_results: u32,
    /// See [`Config::protected_recent_ratio`].
    pub protected_recent_ratio: f64,
    /// See [`Config::breaker_passes`].
    pub breaker_passes: u32,
    /// See [`Config::image_tokens`].
    pub image_tokens: u32,
    /// See [`Config::truncate_chars`].
    pub truncate_chars: u32,
    /// See [`Config::summary_share`].
    pub summary_share: f64,
    /// See [`Config::hard_limit_ratio`].
    pub hard_limit_ratio: f64,
    /// See [`Config::clear_at_least`].
    pub clear_at_least: u64,
}

/// Kind 9: `SessionStarted` with a [`ConfigV2`], the layout of every session that was not an
/// import before kind 16.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStartedV2 {
    /// Session id.
    pub session: Uuid,
    /// Wire format.
    pub format: WireFormat,
    /// Knobs.
    pub config: ConfigV2,
    /// Creation time.
    pub at: Millis,
}

/// Kind 14: `SessionStarted` of an import, before `usage_floor_ratio`: kind 9 + `import`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStartedV2Import {
    /// Session id.
    pub session: Uuid,
    /// Wire format.
    pub format: WireFormat,
    /// Knobs.
    pub config: ConfigV2,
    /// Creation time.
    pub at: Millis,
    /// The transcript the import reads.
    pub import: Option<ImportSource>,
}

/// The sixteen knobs of kinds 16 and 18 (before `view_version`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigV3 {
    /// See [`Config::budget`].
    pub budget: u64,
    /// See [`Config::trigger_ratio`].
    pub trigger_ratio: f64,
    /// See [`Config::target_ratio`].
    pub target_ratio: f64,
    /// See [`Config::prepare_ratio`].
    pub prepare_ratio: f64,
    /// See [`Config::summarizer`].
    pub summarizer: SummarizerKind,
    /// See [`Config::cache_aware`].
    pub cache_aware: bool,
    /// See [`Config::flush_ttl_ms`].
    pub flush_ttl_ms: u64,
    /// See [`Config::protected_tool_results`].
    pub protected_tool_results: u32,
    /// See [`Config::protected_recent_ratio`].
    pub protected_recent_ratio: f64,
    /// See [`Config::breaker_passes`].
    pub breaker_passes: u32,
    /// See [`Config::image_tokens`].
    pub image_tokens: u32,
    /// See [`Config::truncate_chars`].
    pub truncate_chars: u32,
    /// See [`Config::summary_share`].
    pub summary_share: f64,
    /// See [`Config::hard_limit_ratio`].
    pub hard_limit_ratio: f64,
    /// See [`Config::clear_at_least`].
    pub clear_at_least: u64,
    /// See [`Config::usage_floor_ratio`].
    pub usage_floor_ratio: f64,
}

/// Kind 16: `SessionStarted` with `usage_floor_ratio`, before `import`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStartedV3 {
    /// Session id.
    pub session: Uuid,
    /// Wire format.
    pub format: WireFormat,
    /// Knobs.
    pub config: ConfigV3,
    /// Creation time.
    pub at: Millis,
}

/// Kind 18: kind 16 + `import`, before `view_version`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStartedV4 {
    /// Session id.
    pub session: Uuid,
    /// Wire format.
    pub format: WireFormat,
    /// Knobs.
    pub config: ConfigV3,
    /// Creation time.
    pub at: Millis,
    /// The transcript the import reads.
    pub import: Option<ImportSource>,
}

/// The seventeen knobs of kind 26 (before the parity knobs of kind 31).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigV4 {
    /// See [`Config::budget`].
    pub budget: u64,
    /// See [`Config::trigger_ratio`].
    pub trigger_ratio: f64,
    /// See [`Config::target_ratio`].
    pub target_ratio: f64,
    /// See [`Config::prepare_ratio`].
    pub prepare_ratio: f64,
    /// See [`Config::summarizer`].
    pub summarizer: SummarizerKind,
    /// See [`Config::cache_aware`].
    pub cache_aware: bool,
    /// See [`Config::flush_ttl_ms`].
    pub flush_ttl_ms: u64,
    /// See [`Config::protected_tool_results`].
    pub protected_tool_results: u32,
    /// See [`Config::protected_recent_ratio`].
    pub protected_recent_ratio: f64,
    /// See [`Config::breaker_passes`].
    pub breaker_passes: u32,
    /// See [`Config::image_tokens`].
    pub image_tokens: u32,
    /// See [`Config::truncate_chars`].
    pub truncate_chars: u32,
    /// See [`Config::summary_share`].
    pub summary_share: f64,
    /// See [`Config::hard_limit_ratio`].
    pub hard_limit_ratio: f64,
    /// See [`Config::clear_at_least`].
    pub clear_at_least: u64,
    /// See [`Config::usage_floor_ratio`].
    pub usage_floor_ratio: f64,
    /// See [`Config::view_version`].
    pub view_version: u32,
}

/// Kind 26: `SessionStarted` with a [`ConfigV4`]. Today's [`SessionStarted`] holds today's
/// [`Config`]; a change to `Config` must freeze it here first, as this one was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStartedV5 {
    /// Session id.
    pub session: Uuid,
    /// Wire format.
    pub format: WireFormat,
    /// Knobs.
    pub config: ConfigV4,
    /// Creation time.
    pub at: Millis,
    /// The transcript the import reads.
    pub import: Option<ImportSource>,
}

/// A session before the parity knobs excluded no tool, cleared no input, truncated its tool
/// results and kept every thinking block: their defaults, so it decides as it did.
impl From<ConfigV4> for Config {
    fn from(c: ConfigV4) -> Config {
        Config {
            budget: c.budget,
            trigger_ratio: c.trigger_ratio,
            target_ratio: c.target_ratio,
            prepare_ratio: c.prepare_ratio,
            summarizer: c.summarizer,
            cache_aware: c.cache_aware,
            flush_ttl_ms: c.flush_ttl_ms,
            protected_tool_results: c.protected_tool_results,
            protected_recent_ratio: c.protected_recent_ratio,
            breaker_passes: c.breaker_passes,
            image_tokens: c.image_tokens,
            truncate_chars: c.truncate_chars,
            summary_share: c.summary_share,
            hard_limit_ratio: c.hard_limit_ratio,
            clear_at_least: c.clear_at_least,
            usage_floor_ratio: c.usage_floor_ratio,
            view_version: c.view_version,
            exclude_tools: Vec::new(),
            clear_tool_inputs: false,
            tool_placeholder: None,
            keep_thinking_turns: None,
        }
    }
}

impl ConfigV4 {
    /// The frozen layout of `c`, if it can hold it (the parity knobs at their defaults).
    pub fn of(c: &Config) -> Option<ConfigV4> {
        let v4 = ConfigV4 {
            budget: c.budget,
            trigger_ratio: c.trigger_ratio,
            target_ratio: c.target_ratio,
            prepare_ratio: c.prepare_ratio,
            summarizer: c.summarizer,
            cache_aware: c.cache_aware,
            flush_ttl_ms: c.flush_ttl_ms,
            protected_tool_results: c.protected_tool_results,
            protected_recent_ratio: c.protected_recent_ratio,
            breaker_passes: c.breaker_passes,
            image_tokens: c.image_tokens,
            truncate_chars: c.truncate_chars,
            summary_share: c.summary_share,
            hard_limit_ratio: c.hard_limit_ratio,
            clear_at_least: c.clear_at_least,
            usage_floor_ratio: c.usage_floor_ratio,
            view_version: c.view_version,
        };
        (Config::from(v4.clone()) == *c).then_some(v4)
    }
}

impl From<SessionStartedV5> for SessionStarted {
    fn from(e: SessionStartedV5) -> SessionStarted {
        SessionStarted { session: e.session, format: e.format, config: e.config.into(), at: e.at, import: e.import }
    }
}

/// A session that predates `view_version` renders its views as it did: version 1.
impl From<ConfigV3> for Config {
    fn from(c: ConfigV3) -> Config {
        Config {
            budget: c.budget,
            trigger_ratio: c.trigger_ratio,
            target_ratio: c.target_ratio,
            prepare_ratio: c.prepare_ratio,
            summarizer: c.summarizer,
            cache_aware: c.cache_aware,
            flush_ttl_ms: c.flush_ttl_ms,
            protected_tool_results: c.protected_tool_results,
            protected_recent_ratio: c.protected_recent_ratio,
            breaker_passes: c.breaker_passes,
            image_tokens: c.image_tokens,
            truncate_chars: c.truncate_chars,
            summary_share: c.summary_share,
            hard_limit_ratio: c.hard_limit_ratio,
            clear_at_least: c.clear_at_least,
            usage_floor_ratio: c.usage_floor_ratio,
            view_version: 1,
            ..Config::default()
        }
    }
}

impl ConfigV3 {
    /// The frozen layout of `c`, if it can hold it (view version 1).
    pub fn of(c: &Config) -> Option<ConfigV3> {
        let v3 = ConfigV3 {
            budget: c.budget,
            trigger_ratio: c.trigger_ratio,
            target_ratio: c.target_ratio,
            prepare_ratio: c.prepare_ratio,
            summarizer: c.summarizer,
            cache_aware: c.cache_aware,
            flush_ttl_ms: c.flush_ttl_ms,
            protected_tool_results: c.protected_tool_results,
            protected_recent_ratio: c.protected_recent_ratio,
            breaker_passes: c.breaker_passes,
            image_tokens: c.image_tokens,
            truncate_chars: c.truncate_chars,
            summary_share: c.summary_share,
            hard_limit_ratio: c.hard_limit_ratio,
            clear_at_least: c.clear_at_least,
            usage_floor_ratio: c.usage_floor_ratio,
        };
        (Config::from(v3.clone()) == *c).then_some(v3)
    }
}

impl From<SessionStartedV4> for SessionStarted {
    fn from(e: SessionStartedV4) -> SessionStarted {
        SessionStarted { session: e.session, format: e.format, config: e.config.into(), at: e.at, import: e.import }
    }
}

/// Kind 3: `SummaryPrepared` before condensed summaries (`merged`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryPreparedV1 {
    /// First covered seq.
    pub from: u64,
    /// One past the last covered seq.
    pub to: u64,
    /// The summary text.
    pub text: String,
    /// Its token estimate.
    pub tokens: u32,
    /// Estimated tokens of the span.
    pub replaced_tokens: u64,
    /// Mode asked for.
    pub mode_requested: SummaryMode,
    /// Mode used.
    pub mode_used: SummaryMode,
    /// Why the requested mode was refused.
    pub refusal: Option<String>,
}

/// Kind 4: `Flushed` before `condensed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushedV1 {
    /// Old watermark.
    pub from: u64,
    /// New watermark.
    pub to: u64,
    /// Why now.
    pub reason: FlushReason,
    /// Cache age.
    pub cache_age_ms: Option<u64>,
    /// View tokens before.
    pub tokens_before: u64,
    /// View tokens after.
    pub tokens_after: u64,
    /// Elided tool outputs and media.
    pub stubbed: Vec<u64>,
}

/// Kind 7: `RequestServed` before `deferred`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestServedV1 {
    /// 0-based call number.
    pub call: u64,
    /// Dispatch completion time.
    pub at: Millis,
    /// View digest.
    pub digest: String,
    /// Messages in the view.
    pub view_messages: u64,
    /// Estimated view tokens.
    pub view_tokens: u64,
    /// Meter reading.
    pub metered_tokens: u64,
    /// Provider-reported tokens.
    pub reported_tokens: Option<u64>,
    /// Ladder level.
    pub level: u8,
    /// Compaction was needed.
    pub needed: bool,
    /// Pure append of the previous view.
    pub prefix_reused: bool,
}

/// Kind 11: `RequestServed` before `usage` and `anchored`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestServedV2 {
    /// 0-based call number.
    pub call: u64,
    /// Dispatch completion time.
    pub at: Millis,
    /// View digest.
    pub digest: String,
    /// Messages in the view.
    pub view_messages: u64,
    /// Estimated view tokens.
    pub view_tokens: u64,
    /// Meter reading.
    pub metered_tokens: u64,
    /// Provider-reported tokens.
    pub reported_tokens: Option<u64>,
    /// Ladder level.
    pub level: u8,
    /// Compaction was needed.
    pub needed: bool,
    /// Pure append of the previous view.
    pub prefix_reused: bool,
    /// Work the gate held back.
    pub deferred: Option<Deferral>,
}

/// Kind 10: `SummaryPrepared` with `merged`, before the fork's prefix call and the
/// summarizer's usage and latency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryPreparedV2 {
    /// First covered seq.
    pub from: u64,
    /// One past the last covered seq.
    pub to: u64,
    /// The summary text.
    pub text: String,
    /// Its token estimate.
    pub tokens: u32,
    /// Estimated tokens of the span.
    pub replaced_tokens: u64,
    /// Mode asked for.
    pub mode_requested: SummaryMode,
    /// Mode used.
    pub mode_used: SummaryMode,
    /// Why the requested mode was refused.
    pub refusal: Option<String>,
    /// Summaries condensed.
    pub merged: Vec<u32>,
}

/// Kind 17: `RequestServed` with `usage` and `anchored`, before the request record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestServedV3 {
    /// 0-based call number.
    pub call: u64,
    /// Dispatch completion time.
    pub at: Millis,
    /// View digest.
    pub digest: String,
    /// Messages in the view.
    pub view_messages: u64,
    /// Estimated view tokens.
    pub view_tokens: u64,
    /// Meter reading.
    pub metered_tokens: u64,
    /// Provider-reported tokens.
    pub reported_tokens: Option<u64>,
    /// Ladder level.
    pub level: u8,
    /// Compaction was needed.
    pub needed: bool,
    /// Pure append of the previous view.
    pub prefix_reused: bool,
    /// Work the gate held back.
    pub deferred: Option<Deferral>,
    /// The provider's usage parts.
    pub usage: Option<Usage>,
    /// The meter anchored on the report.
    pub anchored: bool,
}

/// `RequestServed` of kind 20: the request record without the placement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestServedV4 {
    /// 0-based call number.
    pub call: u64,
    /// Dispatch completion time.
    pub at: Millis,
    /// View digest.
    pub digest: String,
    /// Messages in the view.
    pub view_messages: u64,
    /// Estimated view tokens.
    pub view_tokens: u64,
    /// Meter reading.
    pub metered_tokens: u64,
    /// Provider-reported tokens.
    pub reported_tokens: Option<u64>,
    /// Ladder level.
    pub level: u8,
    /// Compaction was needed.
    pub needed: bool,
    /// Pure append of the previous view.
    pub prefix_reused: bool,
    /// Work the gate held back.
    pub deferred: Option<Deferral>,
    /// The provider's usage parts.
    pub usage: Option<Usage>,
    /// The meter anchored on the report.
    pub anchored: bool,
    /// The request record of kind 20.
    pub request: Option<RequestRecordV1>,
}

/// The request record of kind 20: model, tools, breakpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecordV1 {
    /// The `model` field.
    pub model: Option<String>,
    /// The `tools` field.
    pub tools: ToolsRecord,
    /// The breakpoints requested.
    pub breakpoints: Option<CacheTtl>,
}

/// Before kind 30 no request placed breakpoints by position.
impl From<RequestServedV4> for RequestServed {
    fn from(e: RequestServedV4) -> RequestServed {
        RequestServed {
            call: e.call,
            at: e.at,
            digest: e.digest,
            view_messages: e.view_messages,
            view_tokens: e.view_tokens,
            metered_tokens: e.metered_tokens,
            reported_tokens: e.reported_tokens,
            level: e.level,
            needed: e.needed,
            prefix_reused: e.prefix_reused,
            deferred: e.deferred,
            usage: e.usage,
            anchored: e.anchored,
            request: e.request.map(|r| RequestRecord {
                model: r.model,
                tools: r.tools,
                breakpoints: r.breakpoints,
                placement: None,
            }),
        }
    }
}

/// Before kind 21 no summary recorded a prefix, usage or latency.
impl From<SummaryPreparedV2> for SummaryPrepared {
    fn from(e: SummaryPreparedV2) -> SummaryPrepared {
        SummaryPrepared {
            from: e.from,
            to: e.to,
            text: e.text,
            tokens: e.tokens,
            replaced_tokens: e.replaced_tokens,
            mode_requested: e.mode_requested,
            mode_used: e.mode_used,
            refusal: e.refusal,
            merged: e.merged,
            prefix_call: None,
            usage: None,
            latency_ms: None,
        }
    }
}

/// Before kind 20 no request recorded what it carried besides its messages: tools unknown.
impl From<RequestServedV3> for RequestServed {
    fn from(e: RequestServedV3) -> RequestServed {
        RequestServed {
            call: e.call,
            at: e.at,
            digest: e.digest,
            view_messages: e.view_messages,
            view_tokens: e.view_tokens,
            metered_tokens: e.metered_tokens,
            reported_tokens: e.reported_tokens,
            level: e.level,
            needed: e.needed,
            prefix_reused: e.prefix_reused,
            deferred: e.deferred,
            usage: e.usage,
            anchored: e.anchored,
            request: None,
        }
    }
}

/// Knobs a first-release session never set take their defaults: they only steer decisions
/// of later calls, never the fold of what was recorded.
impl From<ConfigV1> for Config {
    fn from(c: ConfigV1) -> Config {
        Config {
            budget: c.budget,
            trigger_ratio: c.trigger_ratio,
            target_ratio: c.target_ratio,
            prepare_ratio: c.prepare_ratio,
            summarizer: c.summarizer,
            cache_aware: c.cache_aware,
            flush_ttl_ms: c.flush_ttl_ms,
            protected_tool_results: c.protected_tool_results,
            protected_recent_ratio: c.protected_recent_ratio,
            breaker_passes: c.breaker_passes,
            image_tokens: c.image_tokens,
            truncate_chars: c.truncate_chars,
            view_version: 1,
            ..Config::default()
        }
    }
}

/// A session that predates `usage_floor_ratio` gets its default: the knob only decides whether
/// later reports anchor the meter, never the fold of what was recorded.
impl From<ConfigV2> for Config {
    fn from(c: ConfigV2) -> Config {
        Config {
            budget: c.budget,
            trigger_ratio: c.trigger_ratio,
            target_ratio: c.target_ratio,
            prepare_ratio: c.prepare_ratio,
            summarizer: c.summarizer,
            cache_aware: c.cache_aware,
            flush_ttl_ms: c.flush_ttl_ms,
            protected_tool_results: c.protected_tool_results,
            protected_recent_ratio: c.protected_recent_ratio,
            breaker_passes: c.breaker_passes,
            image_tokens: c.image_tokens,
            truncate_chars: c.truncate_chars,
            summary_share: c.summary_share,
            hard_limit_ratio: c.hard_limit_ratio,
            clear_at_least: c.clear_at_least,
            view_version: 1,
            ..Config::default()
        }
    }
}

impl From<SessionStartedV2> for SessionStarted {
    fn from(e: SessionStartedV2) -> SessionStarted {
        SessionStarted { session: e.session, format: e.format, config: e.config.into(), at: e.at, import: None }
    }
}

impl From<SessionStartedV2Import> for SessionStarted {
    fn from(e: SessionStartedV2Import) -> SessionStarted {
        SessionStarted { session: e.session, format: e.format, config: e.config.into(), at: e.at, import: e.import }
    }
}

impl From<SessionStartedV3> for SessionStarted {
    fn from(e: SessionStartedV3) -> SessionStarted {
        SessionStarted { session: e.session, format: e.format, config: e.config.into(), at: e.at, import: None }
    }
}

/// Before kind 17 the fold anchored on every report.
impl From<RequestServedV2> for RequestServed {
    fn from(e: RequestServedV2) -> RequestServed {
        RequestServed {
            call: e.call,
            at: e.at,
            digest: e.digest,
            view_messages: e.view_messages,
            view_tokens: e.view_tokens,
            metered_tokens: e.metered_tokens,
            anchored: e.reported_tokens.is_some(),
            reported_tokens: e.reported_tokens,
            level: e.level,
            needed: e.needed,
            prefix_reused: e.prefix_reused,
            deferred: e.deferred,
            usage: None,
            request: None,
        }
    }
}

impl From<SessionStartedV1> for SessionStarted {
    fn from(e: SessionStartedV1) -> SessionStarted {
        SessionStarted { session: e.session, format: e.format, config: e.config.into(), at: e.at, import: None }
    }
}

impl From<SummaryPreparedV1> for SummaryPrepared {
    fn from(e: SummaryPreparedV1) -> SummaryPrepared {
        SummaryPrepared {
            from: e.from,
            to: e.to,
            text: e.text,
            tokens: e.tokens,
            replaced_tokens: e.replaced_tokens,
            mode_requested: e.mode_requested,
            mode_used: e.mode_used,
            refusal: e.refusal,
            merged: Vec::new(),
            prefix_call: None,
            usage: None,
            latency_ms: None,
        }
    }
}

impl From<FlushedV1> for Flushed {
    fn from(e: FlushedV1) -> Flushed {
        Flushed {
            from: e.from,
            to: e.to,
            reason: e.reason,
            cache_age_ms: e.cache_age_ms,
            tokens_before: e.tokens_before,
            tokens_after: e.tokens_after,
            stubbed: e.stubbed,
            condensed: Vec::new(),
        }
    }
}

impl From<RequestServedV1> for RequestServed {
    fn from(e: RequestServedV1) -> RequestServed {
        RequestServed {
            call: e.call,
            at: e.at,
            digest: e.digest,
            view_messages: e.view_messages,
            view_tokens: e.view_tokens,
            metered_tokens: e.metered_tokens,
            reported_tokens: e.reported_tokens,
            level: e.level,
            needed: e.needed,
            prefix_reused: e.prefix_reused,
            deferred: None,
            usage: None,
            anchored: e.reported_tokens.is_some(),
            request: None,
        }
    }
}
