//! Scripted faults: a queue consumed one entry per model request (`/v1/messages`,
//! `/v1/chat/completions`); an empty queue means a normal reply.

use serde::{Deserialize, Serialize};

/// What the next model request suffers. JSON form: `{"kind":"status","status":429,...}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// A normal reply (lets a script fault the second request, not the first).
    Pass,
    /// An error status with the provider's error JSON; `retry-after` is sent when set.
    Status {
        /// HTTP status, e.g. 429, 500, 529.
        status: u16,
        /// Seconds for the `retry-after` header (429 defaults to 1 when absent).
        #[serde(default)]
        retry_after_secs: Option<u64>,
    },
    /// Wait this long before sending the headers, then reply normally.
    Delay {
        /// Milliseconds.
        ms: u64,
    },
    /// Send the headers and `after_events` body chunks (SSE events; for a JSON reply the
    /// first half of the body), then drop the connection.
    Disconnect {
        /// Chunks sent before the abort.
        after_events: usize,
    },
    /// Send `after_events` chunks, then stall forever (the connection stays open).
    Stall {
        /// Chunks sent before the stall.
        after_events: usize,
    },
    /// Streaming only: after `after_events` events, send the provider's in-stream error event
    /// (`event: error` / `data: {"error":...}`) and end the stream.
    StreamError {
        /// Events sent before the error event.
        after_events: usize,
    },
    /// Send the whole reply, final event included (`message_stop`, `data: [DONE]`, or the
    /// whole JSON body, then sent chunked, without a content-length), then keep the body open
    /// for `ms` milliseconds before ending it: as real servers do, the end of the HTTP body
    /// comes later than the protocol's end. `then: "abort"` drops the connection at that
    /// moment instead of ending the body cleanly. A client must decide completion by the
    /// protocol, not by the end of the body.
    LateEnd {
        /// Milliseconds between the final event and the end of the body.
        ms: u64,
        /// How the body ends after the wait (default `finish`).
        #[serde(default)]
        then: LateEnd,
    },
    /// Never send headers.
    Hang,
    /// Wait before sending the headers until [`crate::FakeUpstream::release`] (or
    /// `POST /_fake/release`) is called, then reply normally: a call held in flight for as
    /// long as a test needs, without a timing guess.
    Hold,
}

/// How a [`Fault::LateEnd`] body ends after its wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LateEnd {
    /// The body ends normally (last chunk of a chunked body).
    #[default]
    Finish,
    /// The connection is dropped (after every byte of the reply was sent).
    Abort,
}

/// One entry of `POST /_fake/script`: `fault` for the next `times` requests (default 1).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScriptEntry {
    /// The fault.
    pub fault: Fault,
    /// How many consecutive requests get it.
    #[serde(default = "one")]
    pub times: usize,
}

fn one() -> usize {
    1
}
