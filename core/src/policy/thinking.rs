//! `keep_thinking_turns` (Anthropic's `clear_thinking`): the thinking of assistant messages
//! before the last N thinking turns is dropped whole, by a trim of the message. A thinking block
//! is never modified (its signature covers it), and the last assistant message of the view keeps
//! its thinking always: with thinking enabled the API refuses a tool loop whose last assistant
//! turn lost it (`docs/decisions.md`: what a "turn" is). A message made only of thinking keeps it
//! (dropping it would leave an empty message, which the API refuses).

use std::sync::Arc;

use crate::config::Config;
use crate::event::{EditKind, EditReason, Edited};
use crate::message::{Message, Role};
use crate::state::{Item, State};

/// The rule every thinking drop names.
fn rule(keep: u32) -> String {
    format!("keep the thinking of the last {keep} thinking turns (clear_thinking)")
}

/// The last assistant message of the view: the one whose thinking (and calls) the API wants as
/// the model wrote them when the request continues its tool loop.
pub(crate) fn api_required(state: &State) -> Option<u64> {
    state.view().iter().rev().find_map(|it| match it.item {
        Item::Message(seq) if state.entry(seq).is_some_and(|e| e.role() == Role::Assistant) => Some(seq),
        _ => None,
    })
}

/// What a trim shows: (thinking dropped, inputs cleared).
pub(crate) type Trim = (bool, bool);

/// The body a trim of `seq` starts from and the trim it already shows (`None`: unedited), or
/// `None` when it cannot be trimmed (edited otherwise, or not in the view).
pub(crate) fn trim_body(state: &State, seq: u64) -> Option<(&Arc<Message>, Option<Trim>)> {
    match state.entry(seq)?.edit.map(|e| e.kind) {
        None => Some((state.original(seq)?, None)),
        Some(EditKind::Trimmed { thinking, inputs }) => Some((state.shown(seq)?, Some((thinking, inputs)))),
        Some(_) => None,
    }
}

/// Would the knob drop the thinking of `seq` (an assistant message in the view, older than the
/// kept turns, not the last, with something besides thinking)?
pub(crate) fn due(state: &State, config: &Config, seq: u64) -> bool {
    config.keep_thinking_turns.is_some() && candidates(state, config).contains(&seq)
}

/// The assistant messages whose thinking the knob drops, oldest first.
fn candidates(state: &State, config: &Config) -> Vec<u64> {
    let Some(keep) = config.keep_thinking_turns else { return Vec::new() };
    let required = api_required(state);
    let turns: Vec<u64> = state
        .view_message_seqs()
        .filter(|&seq| state.entry(seq).is_some_and(|e| e.role() == Role::Assistant && !e.is_pinned()))
        .filter(|&seq| trim_body(state, seq).is_some_and(|(m, was)| was.is_none_or(|(t, _)| !t) && m.has_thinking()))
        .collect();
    let kept_from = turns.len().saturating_sub(keep as usize);
    turns
        .iter()
        .take(kept_from)
        .copied()
        .filter(|&seq| Some(seq) != required)
        .filter(|&seq| trim_body(state, seq).is_some_and(|(m, _)| m.blocks().iter().any(|b| !b.is_thinking())))
        .collect()
}

/// The trims this call makes for the knob, each carrying the inputs trim it already shows.
pub(crate) fn drops(state: &State, config: &Config) -> Vec<Edited> {
    let Some(keep) = config.keep_thinking_turns else { return Vec::new() };
    candidates(state, config)
        .into_iter()
        .map(|seq| {
            let inputs = trim_body(state, seq).and_then(|(_, was)| was).is_some_and(|(_, i)| i);
            let reason = EditReason { level: 0, rule: rule(keep), target_tokens: config.target_tokens(), guard: None };
            Edited { seq, kind: EditKind::Trimmed { thinking: true, inputs }, reason }
        })
        .collect()
}
