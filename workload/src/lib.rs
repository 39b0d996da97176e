//! Deterministic generator of realistic agent sessions, shared by the ctxlog demo, tests and
//! benchmarks.
//!
//! A session is a long agent coding session in Anthropic Messages style, one JSON object per
//! line: a huge system prompt, the user's instructions, tool calls whose results are
//! heavy-tailed (median ~450 characters, p90 ~8k, p99 ~32k), human follow-ups with pasted
//! screenshots and logs, and idle breaks that let a prompt cache go cold. It exists so the
//! engine can be exercised on a session whose shape matches what real agents produce, without
//! shipping a real user's data.
//!
//! - [`demo_transcript`]: the bundled 543-message demo (`ctxlog demo`, the timeline snapshot).
//! - [`session`]: a session of exactly N messages, streamed line by line, so a
//!   100,000-message session never sits in memory whole; [`tool_loop`] the same length with
//!   one instruction and tool calls only.
//! - [`encode_png`]: the PNG encoder behind the screenshots, for tests that need real images.
//!
//! ```
//! let mut jsonl = Vec::new();
//! let bytes = ctxlog_workload::session(7, 301)?.write_jsonl(&mut jsonl)?;
//! assert_eq!(bytes, jsonl.len() as u64);
//! assert_eq!(jsonl.iter().filter(|&&b| b == b'\n').count(), 301);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Determinism matters more than realism: the output is byte-identical on every call and
//! platform. Hence a local PRNG, no OS randomness, no platform `libm` (our own `exp`), no
//! `HashMap` iteration, and a hand-written JSON emitter.

mod code;
mod demo;
mod json;
mod logs;
mod png;
mod prose;
mod rng;
mod session;
mod sizes;
mod system_prompt;
mod time;
mod tools;
mod vocab;

#[cfg(test)]
mod checks;

pub use demo::{demo_transcript, generate, DEMO_SEED, DEMO_TURNS};
pub use png::encode_png;
pub use session::{Lines, Reader, TooShort, CHAPTER_MESSAGES, MIN_MESSAGES, PLANTED_FACTS};

/// A session of exactly `messages` messages from `seed`, one JSONL line at a time (see
/// [`Lines`]); at least [`MIN_MESSAGES`].
pub fn session(seed: u64, messages: u64) -> Result<Lines, TooShort> {
    Lines::messages(seed, messages)
}

/// An autonomous tool loop of exactly `messages` messages: one instruction, then tool calls
/// only ([`Lines::tool_loop`]).
pub fn tool_loop(seed: u64, messages: u64) -> Result<Lines, TooShort> {
    Lines::tool_loop(seed, messages)
}
