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

/// Kind numbers of format 1. Never reuse or renumber.
mod kind {
    pub const SESSION_STARTED: u8 = 1;
    pub const MESSAGE_APPENDED: u8 = 2;
    pub const SUMMARY_PREPARED: u8 = 3;
    pub const FLUSHED: u8 = 4;
    pub const EDITED: u8 = 5;
    pub const RESTORED: u8 = 6;
    pub const REQUEST_SERVED: u8 = 7;
    pub const GUARD_RAISED: u8 = 8;
}

fn payload<T: Serialize>(k: u8, value: &T) -> Result<Record, String> {
    let mut body = vec![FORMAT_VERSION, k];
    bincode::serde::encode_into_std_write(value, &mut body, config()).map_err(|e| e.to_string())?;
    Ok(Record::seal(body))
}

/// Encodes an event. Fails only for values bincode cannot represent (a bug, not bad input).
pub fn encode(event: &Event) -> Result<Record, String> {
    match event {
        Event::SessionStarted(e) => payload(kind::SESSION_STARTED, e),
        Event::MessageAppended(e) => payload(kind::MESSAGE_APPENDED, e),
        Event::SummaryPrepared(e) => payload(kind::SUMMARY_PREPARED, e),
        Event::Flushed(e) => payload(kind::FLUSHED, e),
        Event::Edited(e) => payload(kind::EDITED, e),
        Event::Restored(e) => payload(kind::RESTORED, e),
        Event::RequestServed(e) => payload(kind::REQUEST_SERVED, e),
        Event::GuardRaised(e) => payload(kind::GUARD_RAISED, e),
    }
}

fn body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, config()).map_err(|e| e.to_string())?;
    if read != bytes.len() {
        return Err(format!("{} trailing bytes after the payload", bytes.len() - read));
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
        kind::SESSION_STARTED => body(rest).map(Event::SessionStarted),
        kind::MESSAGE_APPENDED => body(rest).map(Event::MessageAppended),
        kind::SUMMARY_PREPARED => body(rest).map(Event::SummaryPrepared),
        kind::FLUSHED => body(rest).map(Event::Flushed),
        kind::EDITED => body(rest).map(Event::Edited),
        kind::RESTORED => body(rest).map(Event::Restored),
        kind::REQUEST_SERVED => body(rest).map(Event::RequestServed),
        kind::GUARD_RAISED => body(rest).map(Event::GuardRaised),
        other => return Err(fail(format!("unknown event kind {other} in format {format}"))),
    };
    event.map_err(|e| fail(format!("kind {k}: {e}")))
}
