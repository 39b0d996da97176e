//! What the fake received and sent, byte for byte, and its JSONL form.

use crate::faults::Fault;
use base64::Engine as _;
use serde::{Serialize, Serializer};

/// One request and the response the fake handed to the connection.
#[derive(Clone, Debug, Serialize)]
pub struct Exchange {
    /// 0-based arrival order.
    pub seq: u64,
    /// The request as received.
    pub request: RecordedRequest,
    /// The response so far (complete once `finished`).
    pub response: RecordedResponse,
    /// The scripted fault applied, if any.
    pub fault: Option<Fault>,
    /// Earlier exchanges still unfinished when this request arrived: 0 shows that a client
    /// (the proxy) waited for its previous call's answer to end before sending this one.
    pub in_flight_on_arrival: usize,
}

/// A received request; every header is kept (auth included: tests check it passes through).
#[derive(Clone, Debug, Serialize)]
pub struct RecordedRequest {
    /// `POST`, `GET`, ...
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Header names (lowercase) and raw values, in arrival order.
    #[serde(serialize_with = "ser_headers")]
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body bytes.
    #[serde(serialize_with = "ser_bytes")]
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive) when it is UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

/// A response as handed to the connection.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecordedResponse {
    /// Status code (0 while no headers were sent).
    pub status: u16,
    /// Headers the fake set (hyper adds `date`, `content-length`/`transfer-encoding`).
    pub headers: Vec<(String, String)>,
    /// Body chunks in send order (one per SSE event when streaming).
    #[serde(serialize_with = "ser_chunks")]
    pub chunks: Vec<Vec<u8>>,
    /// The body ended normally (false: aborted, stalled, hung or the client left).
    pub complete: bool,
    /// The exchange is over (complete or not); false while streaming, stalled or hanging.
    pub finished: bool,
}

impl RecordedResponse {
    /// All chunks concatenated: the body bytes the client received.
    pub fn body(&self) -> Vec<u8> {
        self.chunks.concat()
    }
}

/// A string when UTF-8, else `{"base64": "..."}`.
fn encoded(b: &[u8]) -> serde_json::Value {
    match std::str::from_utf8(b) {
        Ok(s) => serde_json::Value::String(s.to_owned()),
        Err(_) => serde_json::json!({"base64": base64::engine::general_purpose::STANDARD.encode(b)}),
    }
}

fn ser_bytes<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
    encoded(b).serialize(s)
}

fn ser_chunks<S: Serializer>(c: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
    c.iter().map(|b| encoded(b)).collect::<Vec<_>>().serialize(s)
}

fn ser_headers<S: Serializer>(h: &[(String, Vec<u8>)], s: S) -> Result<S::Ok, S::Error> {
    h.iter().map(|(n, v)| (n, encoded(v))).collect::<Vec<_>>().serialize(s)
}

impl Exchange {
    /// One JSONL line (no trailing newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}
