//! How big a tool result is: a log-normal with median ~450 characters and a softened tail
//! (p90 ~8k, p99 ~32k), the shape measured on real agent sessions.

use crate::rng::{exp_det, Rng};

/// `ln(450)`: the median tool-result size of the target log-normal.
const LN_MEDIAN: f64 = 6.109_247_582_764_366;
/// Log-space standard deviation of tool-result sizes (p90 ~8k, p99 ~32k+).
const SIGMA: f64 = 2.28;
/// `ln(16000)`: above this knee the log-size tail is compressed by [`TAIL`],
/// because real tool outputs are thinner-tailed than a pure log-normal fitted
/// to the p90 (which would put p99 near 90k); this lands p99 near 32k.
const LN_KNEE: f64 = 9.680_344_001_221_918;
const TAIL: f64 = 0.4;
const MIN_RESULT: usize = 20;
pub(crate) const MAX_RESULT: usize = 52_000;

/// Log-normal size with a softened tail, clamped to `[MIN_RESULT, MAX_RESULT]`.
pub(crate) fn result_size(rng: &mut Rng) -> usize {
    let mut y = LN_MEDIAN + SIGMA * rng.normal();
    if y > LN_KNEE {
        y = LN_KNEE + TAIL * (y - LN_KNEE);
    }
    let x = exp_det(y);
    if x >= MAX_RESULT as f64 {
        MAX_RESULT
    } else {
        (x as usize).max(MIN_RESULT)
    }
}

/// Trims `s` to exactly `size` bytes (all generated text is ASCII) or leaves
/// it shorter if it already is.
pub(crate) fn fit(mut s: String, size: usize) -> String {
    let mut cut = size.min(s.len());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s
}
