//! The pure decision of a call: given the state and the time, which events the call would
//! commit and what view it would serve. Nothing here writes; [`crate::session::Session`]
//! persists the batch and only then applies it (decide → persist → advance).

use crate::event::Event;
use crate::state::{State, Violation};
use crate::time::Millis;

/// What a call decided.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Tentative `Flushed` / `Edited` / `GuardRaised` events, in order.
    pub events: Vec<Event>,
    /// The state after those events (`None` when there are none: the view is the current one).
    pub scratch: Option<State>,
    /// Highest ladder level reached (0 = none).
    pub level: u8,
    /// The view was at or over the trigger before the ladder.
    pub needed: bool,
    /// The meter reading the gate used.
    pub metered_tokens: u64,
}

/// Decides a call at time `now`.
pub fn decide(state: &State, _now: Millis) -> Result<Decision, Violation> {
    let config = state.info().map(|i| i.config.clone()).unwrap_or_default();
    let metered = state.metered_tokens(state.view_tokens());
    Ok(Decision {
        events: Vec::new(),
        scratch: None,
        level: 0,
        needed: metered >= config.trigger_tokens(),
        metered_tokens: metered,
    })
}
