//! Guards decide *whether* the ladder goes on, never *what* the view contains, and each speaks
//! up once per distinct condition (latched in the state until the condition clears).

use crate::config::Config;
use crate::event::{Event, GuardKind, GuardRaised};
use crate::state::{Item, State};
use crate::view::thousands;

/// Seqs of the last `n` tool-result messages in the view (protected from truncation and
/// removal). `n = 0` protects none.
pub(crate) fn protected_tool_results(state: &State, n: u32) -> Vec<u64> {
    let mut out: Vec<u64> = state
        .view()
        .iter()
        .rev()
        .filter_map(|it| match it.item {
            Item::Message(seq) if state.entry(seq).is_some_and(|e| e.is_tool_result()) => Some(seq),
            _ => None,
        })
        .take(n as usize)
        .collect();
    out.reverse();
    out
}

/// Seqs of the messages in the view that call or answer a tool of `exclude_tools`: the ladder
/// never truncates, clears or removes them (nor, through the pairs, their partners' groups).
pub(crate) fn excluded_tool_messages(state: &State, config: &Config) -> Vec<u64> {
    if config.exclude_tools.is_empty() {
        return Vec::new();
    }
    state
        .view_message_seqs()
        .filter(|&seq| state.tool_names(seq).into_iter().any(|n| config.excludes_tool(n)))
        .collect()
}

/// Is `seq` one of the messages no ladder level may touch: system, pinned, first or last human,
/// or restored a short while ago ([`crate::state::RESTORE_HOLD_CALLS`])?
pub(crate) fn always_protected(state: &State, seq: u64) -> bool {
    state.entry(seq).is_some_and(|e| e.is_system() || e.is_pinned())
        || Some(seq) == state.first_human()
        || Some(seq) == state.last_human()
        || state.restore_held(seq)
}

/// Tokens of the view that no level of the ladder can shrink: system and pinned messages,
/// the first and last human message, summaries and the protected tool results.
pub fn unremovable_floor(state: &State, config: &Config) -> u64 {
    let mut tools = protected_tool_results(state, config.protected_tool_results);
    tools.extend(excluded_tool_messages(state, config));
    state
        .view()
        .iter()
        .filter(|it| match it.item {
            Item::Summary(_) | Item::Placeholder { .. } => true,
            Item::Message(seq) => always_protected(state, seq) || tools.contains(&seq),
        })
        .map(|it| u64::from(it.tokens))
        .sum()
}

/// A `GuardRaised` event, unless the same condition is already latched.
pub(crate) fn raise(state: &State, call: u64, kind: GuardKind, detail: String, knob: &str) -> Option<Event> {
    (!state.raised().contains(&kind))
        .then(|| Event::GuardRaised(GuardRaised { call: Some(call), kind, detail, knob: knob.into() }))
}

/// The floor alone exceeds the target while the view fits the budget: escalating would delete
/// conversation every call chasing a number that cannot come down.
pub(crate) fn target_unreachable(floor: u64, config: &Config) -> String {
    format!(
        "the unremovable floor (system, pinned, first/last human, summaries, protected tool results) is {} tokens \
         against a target of {}; not escalating while the view fits the budget of {}. \
         Reduce the system prompt or raise the budget or the target",
        thousands(floor),
        thousands(config.target_tokens()),
        thousands(config.budget)
    )
}
