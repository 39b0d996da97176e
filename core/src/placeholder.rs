//! The placeholder: what stands in the view where messages were hidden with no summary covering
//! them (removed by the ladder, or flushed under a summary that was retired), so a model reading
//! the view can tell what was left out and how to get it back (issue 21, view version 2).
//!
//! Its text depends only on which messages it stands for (their seqs, roles and tool names), so
//! the same hidden set renders the same bytes call after call and the prompt cache holds. The
//! exact form is documented in `docs/log-format.md` ("Placeholders").

use std::collections::BTreeMap;

use crate::message::{Message, Role};
use crate::state::tools::Link;
use crate::state::State;
use crate::view::thousands;

/// Tool names listed by name in a placeholder; the rest are counted.
pub const NAMED_TOOLS: usize = 6;

/// What a run of hidden messages `[from, to)` held.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Composition {
    /// Tool calls made by the run's messages, by tool name.
    pub calls: BTreeMap<String, u64>,
    /// Messages of the run that make no call and carry no result (text of either side).
    pub other: u64,
}

/// The composition of `[from, to)`, read from the state's tool index (no message bodies).
pub fn composition(state: &State, from: u64, to: u64) -> Composition {
    let mut c = Composition::default();
    for seq in from..to {
        let mut linked = false;
        for link in state.tool_links(seq) {
            linked = true;
            if let Link::Call(p) = link {
                let name = state.tool_name_of(&p);
                match c.calls.get_mut(name) {
                    Some(n) => *n += 1,
                    None => {
                        c.calls.insert(name.to_owned(), 1);
                    }
                }
            }
        }
        if !linked && state.entry(seq).is_some() {
            c.other += 1;
        }
    }
    c
}

/// The placeholder's text for the hidden messages `[from, to)`, e.g.
/// `[ctxlog: 41 tool calls removed (seq 2–83): read_file ×41 — restore with ctxlog restore --seq N, N in 2–83]`.
pub fn text(state: &State, from: u64, to: u64) -> String {
    let c = composition(state, from, to);
    let calls: u64 = c.calls.values().sum();
    let plural = |n: u64, one: &str, many: &str| format!("{} {}", thousands(n), if n == 1 { one } else { many });
    let what = match (calls, c.other) {
        (0, n) => plural(n, "message", "messages"),
        (k, 0) => plural(k, "tool call", "tool calls"),
        (k, n) => {
            format!("{} and {}", plural(k, "tool call", "tool calls"), plural(n, "other message", "other messages"))
        }
    };
    let last = to.saturating_sub(1);
    let (range, restore) = if last <= from {
        (format!("seq {from}"), format!("ctxlog restore --seq {from}"))
    } else {
        (format!("seq {from}–{last}"), format!("ctxlog restore --seq N, N in {from}–{last}"))
    };
    let mut names: Vec<(&String, &u64)> = c.calls.iter().collect();
    // Most used first, then by name: a deterministic order.
    names.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut listed: Vec<String> =
        names.iter().take(NAMED_TOOLS).map(|(name, n)| format!("{name} ×{}", thousands(**n))).collect();
    if names.len() > NAMED_TOOLS {
        listed.push(format!("{} more tools", names.len() - NAMED_TOOLS));
    }
    let tools = if listed.is_empty() { String::new() } else { format!(": {}", listed.join(", ")) };
    format!("[ctxlog: {what} removed ({range}){tools} — restore with {restore}]")
}

/// The user message a placeholder is in the view.
pub fn message(state: &State, from: u64, to: u64) -> Message {
    Message::text(Role::User, text(state, from, to))
}
