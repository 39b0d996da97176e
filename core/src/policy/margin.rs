//! The margin for estimate error (view version 3, issue 21 item 5): the provider counts a view
//! with its own tokenizer, not with ctxlog's chars/4 estimate, so the limits that let a view
//! grow close to the budget stop short of it. Where the provider has reported usage, the meter
//! already counts at the provider's rate ([`crate::state::State::metered_tokens`]) and the
//! margin only covers how that rate moves from one view to the next; before any trusted
//! report it covers the estimate's own error.
//!
//! Two limits keep it: the cache-aware hard limit (a warm cache defers everything up to it,
//! and a rewrite it forces goes on to the ladder's target) and the ladder's aim when its target
//! is out of reach (halfway between the floor and the ceiling, not the budget). Level 9, the
//! breaker and the over-budget guard still judge the budget itself: they are what a view over
//! it by ctxlog's own count gets. Sessions of view version 2 or older keep the budget for
//! both, so their replays decide as they did.

use crate::config::{ratio_of, Config};
use crate::state::State;

/// Margin before the provider has reported usage: 10 % of the budget. A uniform chars/4 count
/// of the messages' JSON bytes (ids, roles, keys and escapes included) is up to ~8 % over the
/// estimate on the soak's sessions; a tokenizer that counts far more (code in a small model's
/// vocabulary, ~2×) is only caught once it has reported once.
pub(crate) const DEFAULT_MARGIN: f64 = 0.10;

/// Margin once a trusted report set the meter's rate: 5 % of the budget, for the rate of the
/// next view differing from the last reported one (a flush swaps tool output for summary prose).
pub(crate) const LEARNED_MARGIN: f64 = 0.05;

/// The share of the budget kept free for estimate error in `state`'s session (0 before view
/// version 3).
pub(crate) fn margin_ratio(state: &State, config: &Config) -> f64 {
    match (config.keeps_margin(), state.provider_rate().is_some()) {
        (false, _) => 0.0,
        (true, false) => DEFAULT_MARGIN,
        (true, true) => LEARNED_MARGIN,
    }
}

/// The budget less the margin (in meter units): the most a clamped ladder target aims at, and
/// the cache-aware hard limit at most.
pub(crate) fn ceiling(state: &State, config: &Config) -> u64 {
    config.budget.saturating_sub(ratio_of(config.budget, margin_ratio(state, config)))
}

/// The cache-aware hard limit in force: the configured one, within the ceiling.
pub(crate) fn hard_limit(state: &State, config: &Config) -> u64 {
    config.hard_limit_tokens().min(ceiling(state, config))
}
