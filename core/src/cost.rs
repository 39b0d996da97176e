//! The provider's prompt cache as a price model (Anthropic's published rules, see
//! `shared/research/baselines.md` §4): what a sequence of views costs, and the least it could
//! cost. Pure arithmetic, shared by the benchmarks (`cache_sim`, `soak`) and the CLI's
//! postmortems (`ctxlog report`, `rerun`, `diff`).
//!
//! A call reads from the cache the longest prefix of whole messages it shares with the
//! previous call if that call was less than the TTL (5 minutes) ago, and writes the rest.
//! Prices are relative to the base input price: cache read 0.1×, cache write 1.25×. The tokens
//! of a message prefix are taken in proportion to its bytes within the view's estimated tokens,
//! and never more than the previous call sent.
//!
//! **Lower bound.** The same views cost at least what they would if every warm call read from
//! the cache all it could, `min(its tokens, the previous call's tokens)`, and wrote only the
//! rest: what they cost when no view ever rewrites a warm prefix. `cost ÷ lower bound` is then
//! the price of the prefix rewrites a policy makes while the cache is warm (1.00 = none); the
//! size of the views is judged by the budget columns, not by this ratio.

/// Cache time-to-live: 5 minutes, Anthropic's default.
pub const TTL_MS: f64 = 300_000.0;
/// Price of a cached input token, relative to the base input price.
pub const READ: f64 = 0.1;
/// Price of writing an input token to the cache (5-minute TTL), relative to the base price.
pub const WRITE: f64 = 1.25;

/// Totals over the calls priced so far, in base-price tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    /// Calls priced.
    pub calls: u64,
    /// Input tokens sent.
    pub input: f64,
    /// Of which read from the cache.
    pub cached: f64,
    /// What the calls cost.
    pub cost: f64,
    /// What the same views cost at least (see the module docs).
    pub lower_bound: f64,
}

impl Totals {
    /// `cost ÷ lower bound` (1.0 for no calls).
    pub fn ratio(&self) -> f64 {
        if self.lower_bound > 0.0 {
            self.cost / self.lower_bound
        } else {
            1.0
        }
    }
}

/// Prices one call after another.
#[derive(Debug, Clone, Default)]
pub struct PrefixCache {
    previous: Option<(f64, f64)>,
    /// The sums so far.
    pub totals: Totals,
}

impl PrefixCache {
    /// A cache that has seen no call.
    pub fn new() -> Self {
        Self::default()
    }

    /// Prices a call made at `at_ms` whose view has `tokens` tokens and `total_bytes` bytes of
    /// messages, of which the first `shared_bytes` are whole messages identical to the previous
    /// call's view. Returns the tokens read from the cache.
    pub fn call(&mut self, at_ms: f64, tokens: u64, shared_bytes: u64, total_bytes: u64) -> f64 {
        let tokens = tokens as f64;
        let warm = self.previous.filter(|(at, _)| at_ms - at < TTL_MS).map(|(_, previous_tokens)| previous_tokens);
        let (cached, reusable) = match warm {
            Some(previous_tokens) => {
                let by_bytes = if total_bytes == 0 { 0.0 } else { tokens * shared_bytes as f64 / total_bytes as f64 };
                (by_bytes.min(previous_tokens), tokens.min(previous_tokens))
            }
            None => (0.0, 0.0),
        };
        let t = &mut self.totals;
        t.calls += 1;
        t.input += tokens;
        t.cached += cached;
        t.cost += READ * cached + WRITE * (tokens - cached);
        t.lower_bound += READ * reusable + WRITE * (tokens - reusable);
        self.previous = Some((at_ms, tokens));
        cached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cold_call_writes_everything_and_a_warm_append_reads_the_prefix() {
        let mut c = PrefixCache::new();
        assert_eq!(c.call(0.0, 1_000, 0, 4_000), 0.0);
        // Pure append within the TTL: the previous 1,000 tokens are read, 200 new ones written.
        assert_eq!(c.call(60_000.0, 1_200, 4_000, 4_800), 1_000.0);
        let t = c.totals;
        assert_eq!(t.cost, 1.25 * 1_000.0 + 0.1 * 1_000.0 + 1.25 * 200.0);
        assert_eq!(t.lower_bound, t.cost);
        assert_eq!(t.ratio(), 1.0);
    }

    #[test]
    fn a_warm_rewrite_costs_more_than_the_lower_bound_and_a_cold_one_does_not() {
        let mut c = PrefixCache::new();
        c.call(0.0, 1_000, 0, 4_000);
        // Warm rewrite: only a quarter of the view is shared.
        c.call(1_000.0, 800, 800, 3_200);
        let warm = c.totals;
        assert_eq!(warm.cached, 200.0);
        assert!(warm.cost > warm.lower_bound);
        assert_eq!(warm.lower_bound, 1_250.0 + 0.1 * 800.0);
        // After the TTL nothing is cached, and the bound does not expect anything to be.
        let mut c = PrefixCache::new();
        c.call(0.0, 1_000, 0, 4_000);
        c.call(TTL_MS, 800, 800, 3_200);
        assert_eq!(c.totals.cached, 0.0);
        assert_eq!(c.totals.cost, c.totals.lower_bound);
    }

    #[test]
    fn cached_tokens_never_exceed_what_the_previous_call_sent() {
        let mut c = PrefixCache::new();
        c.call(0.0, 100, 0, 1_000);
        // An image appended: many tokens in few bytes, so the byte share overstates the prefix.
        let cached = c.call(1.0, 1_700, 1_000, 1_100);
        assert_eq!(cached, 100.0);
    }
}
