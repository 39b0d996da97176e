//! The record envelope: `format (u8) ‖ kind (u8) ‖ bincode-2 payload`, sealed with a crc32c by
//! [`Record::seal`]. See `docs/log-format.md`.
//!
//! Compatibility rule: a shipped `(format, kind)` layout is never changed. A changed event gets
//! a new kind number; the old kind keeps decoding through its frozen struct and is upcast to
//! the current [`Event`] here. Golden logs in `tests/golden/` pin every shipped layout.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::event::Event;
use crate::store::{Record, StreamId, Version};

pub mod legacy;

/// Envelope format written by this build.
pub const FORMAT_VERSION: u8 = 1;
/// Largest payload a record may decode to; bounds allocation on garbage input.
pub const MAX_PAYLOAD_BYTES: usize = 256 << 20;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_PAYLOAD_BYTES>()
}

/// A record that does not decode to an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stream {stream} version {version}: cannot decode record: {detail}")]
pub struct DecodeError {
    /// The stream.
    pub stream: StreamId,
    /// The record's version.
    pub version: Version,
    /// What is wrong (format version, unknown kind, payload error).
    pub detail: String,
}

/// Kind numbers of format 1. Never reuse or renumber. A kind replaced by a later one is only
/// read (through its frozen struct in [`legacy`]), never written again.
pub mod kind {
    /// `SessionStarted` with the first twelve knobs (read only; see [`SESSION_STARTED`]).
    pub const SESSION_STARTED_V1: u8 = 1;
    /// `MessageAppended`.
    pub const MESSAGE_APPENDED: u8 = 2;
    /// `SummaryPrepared` without `merged` (read only; see [`SUMMARY_PREPARED`]).
    pub const SUMMARY_PREPARED_V1: u8 = 3;
    /// `Flushed` without `condensed` (read only; see [`FLUSHED`]).
    pub const FLUSHED_V1: u8 = 4;
    /// `Edited` of the first three edit kinds (removed, truncated, stubbed): still written for
    /// them, so logs without the newer edits keep their bytes; see [`EDITED_CLEARS`].
    pub const EDITED: u8 = 5;
    /// `Restored`.
    pub const RESTORED: u8 = 6;
    /// `RequestServed` without `deferred` (read only; see [`REQUEST_SERVED`]).
    pub const REQUEST_SERVED_V1: u8 = 7;
    /// `GuardRaised`.
    pub const GUARD_RAISED: u8 = 8;
    /// `SessionStarted` whose config has `summary_share`, `hard_limit_ratio`, `clear_at_least`
    /// (read only, frozen as [`legacy::SessionStartedV2`](super::legacy::SessionStartedV2); see [`SESSION_STARTED`]).
    pub const SESSION_STARTED_V2: u8 = 9;
    /// `SummaryPrepared` with `merged` (condensed summaries), before the summarizer's facts
    /// (read only, frozen as [`legacy::SummaryPreparedV2`](super::legacy::SummaryPreparedV2); see
    /// [`SUMMARY_PREPARED`]).
    pub const SUMMARY_PREPARED_V2: u8 = 10;
    /// `RequestServed` with `deferred` (read only; see [`REQUEST_SERVED`]).
    pub const REQUEST_SERVED_V2: u8 = 11;
    /// `SummaryRetired`.
    pub const SUMMARY_RETIRED: u8 = 12;
    /// `Flushed` with `condensed`.
    pub const FLUSHED: u8 = 13;
    /// `SessionStarted` of an import: kind 9 + `import` (read only, frozen as
    /// [`legacy::SessionStartedV2Import`](super::legacy::SessionStartedV2Import); see [`SESSION_STARTED`]).
    pub const SESSION_STARTED_V2_IMPORT: u8 = 14;
    /// `ImportCompleted`.
    pub const IMPORT_COMPLETED: u8 = 15;
    /// `SessionStarted` whose config has `usage_floor_ratio`, without `import` (read only,
    /// frozen as [`legacy::SessionStartedV3`](super::legacy::SessionStartedV3); see [`SESSION_STARTED`]).
    pub const SESSION_STARTED_V3: u8 = 16;
    /// `RequestServed` with the provider's `usage` parts and `anchored`, before the request
    /// record (read only, frozen as [`legacy::RequestServedV3`](super::legacy::RequestServedV3);
    /// see [`REQUEST_SERVED`]).
    pub const REQUEST_SERVED_V3: u8 = 17;
    /// `SessionStarted` whose config has `usage_floor_ratio`, with `import` (the transcript an
    /// import reads; `None` for every other session), before `view_version` (read only, frozen
    /// as [`legacy::SessionStartedV4`](super::legacy::SessionStartedV4); see [`SESSION_STARTED`]).
    pub const SESSION_STARTED_V4: u8 = 18;
    // 19 is reserved (another branch's kind).
    /// `RequestServed` with the request record (model, tools, breakpoints), before the
    /// placement (read only, frozen as [`legacy::RequestServedV4`](super::legacy::RequestServedV4);
    /// see [`REQUEST_SERVED`]).
    pub const REQUEST_SERVED_V4: u8 = 20;
    /// `SummaryPrepared` with the fork's prefix call, the summarizer's usage and latency.
    pub const SUMMARY_PREPARED: u8 = 21;
    /// `SummaryFailed`.
    pub const SUMMARY_FAILED: u8 = 22;
    /// `AnswerReceived`.
    pub const ANSWER_RECEIVED: u8 = 23;
    /// `Branched`.
    pub const BRANCHED: u8 = 24;
    /// `SessionNamed`.
    pub const SESSION_NAMED: u8 = 25;
    /// `SessionStarted` whose config has `view_version` (placeholders for hidden messages),
    /// before the parity knobs (read only, frozen as
    /// [`legacy::SessionStartedV5`](super::legacy::SessionStartedV5); see [`SESSION_STARTED`]).
    pub const SESSION_STARTED_V5: u8 = 26;
    /// `CallRejected`.
    pub const CALL_REJECTED: u8 = 27;
    /// `LimitLearned`.
    pub const LIMIT_LEARNED: u8 = 28;
    /// `Pinned`.
    pub const PINNED: u8 = 29;
    /// `RequestServed` whose request record has the breakpoints placed by position.
    pub const REQUEST_SERVED: u8 = 30;
    /// `SessionStarted` whose config has the parity knobs (`exclude_tools`,
    /// `clear_tool_inputs`, `tool_placeholder`, `keep_thinking_turns`).
    pub const SESSION_STARTED: u8 = 31;
    /// `Edited` whose kind is `cleared` or `trimmed` (the same struct as kind 5, whose
    /// layout cannot hold those two kinds).
    pub const EDITED_CLEARS: u8 = 32;
    // 33 is left to other branches of the same release.
    /// `ProviderCompacted`.
    pub const PROVIDER_COMPACTED: u8 = 34;
}

/// An event bincode could not encode: a bug, not bad input (every event's fields have a
/// bincode form); the detail is bincode's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct EncodeError {
    detail: String,
}

pub(crate) fn payload<T: Serialize>(k: u8, value: &T) -> Result<Record, EncodeError> {
    let mut body = vec![FORMAT_VERSION, k];
    bincode::serde::encode_into_std_write(value, &mut body, config())
        .map_err(|e| EncodeError { detail: e.to_string() })?;
    Ok(Record::seal(body))
}

/// Encodes an event. Fails only for values bincode cannot represent (a bug, not bad input).
pub fn encode(event: &Event) -> Result<Record, EncodeError> {
    match event {
        Event::SessionStarted(e) => payload(kind::SESSION_STARTED, e),
        Event::MessageAppended(e) => payload(kind::MESSAGE_APPENDED, e),
        Event::SummaryPrepared(e) => payload(kind::SUMMARY_PREPARED, e),
        Event::Flushed(e) => payload(kind::FLUSHED, e),
        Event::Edited(e) if e.kind.in_first_layout() => payload(kind::EDITED, e),
        Event::Edited(e) => payload(kind::EDITED_CLEARS, e),
        Event::SummaryRetired(e) => payload(kind::SUMMARY_RETIRED, e),
        Event::Restored(e) => payload(kind::RESTORED, e),
        Event::RequestServed(e) => payload(kind::REQUEST_SERVED, e),
        Event::GuardRaised(e) => payload(kind::GUARD_RAISED, e),
        Event::ImportCompleted(e) => payload(kind::IMPORT_COMPLETED, e),
        Event::SummaryFailed(e) => payload(kind::SUMMARY_FAILED, e),
        Event::AnswerReceived(e) => payload(kind::ANSWER_RECEIVED, e),
        Event::Branched(e) => payload(kind::BRANCHED, e),
        Event::SessionNamed(e) => payload(kind::SESSION_NAMED, e),
        Event::CallRejected(e) => payload(kind::CALL_REJECTED, e),
        Event::LimitLearned(e) => payload(kind::LIMIT_LEARNED, e),
        Event::Pinned(e) => payload(kind::PINNED, e),
        Event::ProviderCompacted(e) => payload(kind::PROVIDER_COMPACTED, e),
    }
}

/// Why a payload does not decode as its kind.
#[derive(Debug, thiserror::Error)]
enum PayloadError {
    #[error(transparent)]
    Bincode(#[from] bincode::error::DecodeError),
    #[error("{0} trailing bytes after the payload")]
    Trailing(usize),
}

fn body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, PayloadError> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, config())?;
    if read != bytes.len() {
        return Err(PayloadError::Trailing(bytes.len() - read));
    }
    Ok(value)
}

/// Decodes a verified record.
pub fn decode(stream: StreamId, version: Version, record: &Record) -> Result<Event, DecodeError> {
    let fail = |detail: String| DecodeError { stream, version, detail };
    let (format, k, rest) = match record.body() {
        [format, k, rest @ ..] => (*format, *k, rest),
        _ => return Err(fail("record is shorter than its envelope header".into())),
    };
    if format != FORMAT_VERSION {
        return Err(fail(format!("unknown envelope format {format} (this build reads format {FORMAT_VERSION})")));
    }
    let event = match k {
        kind::SESSION_STARTED_V1 => body::<legacy::SessionStartedV1>(rest).map(|e| Event::SessionStarted(e.into())),
        kind::MESSAGE_APPENDED => body(rest).map(Event::MessageAppended),
        kind::SUMMARY_PREPARED_V1 => body::<legacy::SummaryPreparedV1>(rest).map(|e| Event::SummaryPrepared(e.into())),
        kind::FLUSHED_V1 => body::<legacy::FlushedV1>(rest).map(|e| Event::Flushed(e.into())),
        kind::EDITED => match body::<crate::event::Edited>(rest) {
            // A kind 5 record never carried the later edit kinds: one that does is damage.
            Ok(e) if !e.kind.in_first_layout() => {
                return Err(fail(format!("kind {k}: edit kind `{}` is not in this layout", e.kind.as_str())))
            }
            other => other.map(Event::Edited),
        },
        kind::EDITED_CLEARS => body(rest).map(Event::Edited),
        kind::RESTORED => body(rest).map(Event::Restored),
        kind::REQUEST_SERVED_V1 => body::<legacy::RequestServedV1>(rest).map(|e| Event::RequestServed(e.into())),
        kind::GUARD_RAISED => body(rest).map(Event::GuardRaised),
        kind::SESSION_STARTED_V2 => body::<legacy::SessionStartedV2>(rest).map(|e| Event::SessionStarted(e.into())),
        kind::SUMMARY_PREPARED_V2 => body::<legacy::SummaryPreparedV2>(rest).map(|e| Event::SummaryPrepared(e.into())),
        kind::SUMMARY_PREPARED => body(rest).map(Event::SummaryPrepared),
        kind::SUMMARY_FAILED => body(rest).map(Event::SummaryFailed),
        kind::ANSWER_RECEIVED => body(rest).map(Event::AnswerReceived),
        kind::BRANCHED => body(rest).map(Event::Branched),
        kind::SESSION_NAMED => body(rest).map(Event::SessionNamed),
        kind::CALL_REJECTED => body(rest).map(Event::CallRejected),
        kind::LIMIT_LEARNED => body(rest).map(Event::LimitLearned),
        kind::PINNED => body(rest).map(Event::Pinned),
        kind::PROVIDER_COMPACTED => body(rest).map(Event::ProviderCompacted),
        kind::REQUEST_SERVED_V2 => body::<legacy::RequestServedV2>(rest).map(|e| Event::RequestServed(e.into())),
        kind::REQUEST_SERVED_V3 => body::<legacy::RequestServedV3>(rest).map(|e| Event::RequestServed(e.into())),
        kind::REQUEST_SERVED_V4 => body::<legacy::RequestServedV4>(rest).map(|e| Event::RequestServed(e.into())),
        kind::REQUEST_SERVED => body(rest).map(Event::RequestServed),
        kind::SUMMARY_RETIRED => body(rest).map(Event::SummaryRetired),
        kind::FLUSHED => body(rest).map(Event::Flushed),
        kind::SESSION_STARTED_V2_IMPORT => {
            body::<legacy::SessionStartedV2Import>(rest).map(|e| Event::SessionStarted(e.into()))
        }
        kind::IMPORT_COMPLETED => body(rest).map(Event::ImportCompleted),
        kind::SESSION_STARTED_V3 => body::<legacy::SessionStartedV3>(rest).map(|e| Event::SessionStarted(e.into())),
        kind::SESSION_STARTED_V4 => body::<legacy::SessionStartedV4>(rest).map(|e| Event::SessionStarted(e.into())),
        kind::SESSION_STARTED_V5 => body::<legacy::SessionStartedV5>(rest).map(|e| Event::SessionStarted(e.into())),
        kind::SESSION_STARTED => body(rest).map(Event::SessionStarted),
        other => return Err(fail(format!("unknown event kind {other} in format {format}"))),
    };
    event.map_err(|e| fail(format!("kind {k}: {e}")))
}
