//! The flush gate: when may the view switch to the prepared summaries (spans of messages, and
//! condensed summaries of earlier summaries)?
//!
//! Legacy (cache-aware off): as soon as something is prepared. Cache-aware: only when the
//! provider's prompt cache is cold (rewriting the prefix then costs nothing extra), or when the
//! view is over the hard limit anyway (`size_threshold`, the second pass). While the cache is
//! warm and the view within the hard limit, the engine holds back the ladder too
//! ([`crate::engine`]).

use crate::config::Config;
use crate::event::FlushReason;
use crate::state::State;
use crate::time::Millis;

/// A flush the gate allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlushDecision {
    /// Why.
    pub reason: FlushReason,
    /// Time since the last served call (`None` if never served).
    pub cache_age_ms: Option<u64>,
}

/// Age of the prompt cache at `now`; `None` if no call was served yet.
pub(crate) fn cache_age(state: &State, now: Millis) -> Option<u64> {
    state.last_request_at().map(|last| now.saturating_sub(last))
}

/// Is the cache cold at `now`? Never served counts as cold: there is nothing to lose.
pub(crate) fn is_cold(state: &State, config: &Config, now: Millis) -> bool {
    cache_age(state, now).is_none_or(|age| age >= config.flush_ttl_ms)
}

/// Cache-aware and warm at `now`: a rewrite of the view would throw away a cached prefix.
pub(crate) fn holds_prefix(state: &State, config: &Config, now: Millis) -> bool {
    config.cache_aware && !is_cold(state, config, now)
}

/// The gate's decision for a view whose meter reads `metered` tokens, under the hard limit in
/// force (`policy::margin::hard_limit`).
pub(crate) fn decide(
    state: &State,
    config: &Config,
    now: Millis,
    metered: u64,
    hard_limit: u64,
) -> Option<FlushDecision> {
    if !state.flush_pending() {
        return None;
    }
    let cache_age_ms = cache_age(state, now);
    let reason = if !config.cache_aware {
        FlushReason::LegacyImmediate
    } else if is_cold(state, config, now) {
        FlushReason::ColdCache
    } else if metered > hard_limit {
        FlushReason::SizeThreshold
    } else {
        // Warm and within the hard limit: keep the cached prefix byte for byte.
        return None;
    };
    Some(FlushDecision { reason, cache_age_ms })
}
