//! The placeholder: what stands in the view where messages were hidden with no summary covering
//! them (removed by the ladder, or flushed under a summary that was retired), so a model reading
//! the view can tell what was left out and how to get it back (issue 21, view version 2).
//!
//! Its text depends only on which messages it stands for (their seqs, roles and tool names), so
//! the same hidden set renders the same bytes call after call and the prompt cache holds. The
//! exact form is documented in `docs/log-format.md` ("Placeholders").

use crate::message::Message;
use crate::state::State;

/// The placeholder's text for the hidden messages `[from, to)`, e.g.
/// `[ctxlog: 41 tool calls removed (seq 2–83): read_file ×41 — restore with ctxlog restore --seq N, N in 2–83]`.
pub fn text(state: &State, from: u64, to: u64) -> String {
    crate::render::placeholder_text(&state.composition(from, to), from, to)
}

/// The user message a placeholder is in the view.
pub fn message(state: &State, from: u64, to: u64) -> Message {
    state.placeholder_message(from, to)
}
