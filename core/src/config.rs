//! Engine configuration, recorded in `SessionStarted` so a replay uses the knobs the session ran
//! with.

use serde::{Deserialize, Serialize};

use crate::tokens::{Estimator, DEFAULT_IMAGE_TOKENS};

/// Who writes summaries when a span is prepared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SummarizerKind {
    /// The built-in deterministic extractive summarizer (the embedded default).
    Extractive,
    /// No summaries: prepare never runs, only the ladder shrinks the view.
    None,
}

/// All knobs. Ratios are fractions of `budget`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// The model's input budget in tokens.
    pub budget: u64,
    /// Hard threshold: the ladder runs when the view reaches `trigger_ratio × budget`.
    pub trigger_ratio: f64,
    /// The ladder aims at `target_ratio × budget`.
    pub target_ratio: f64,
    /// Soft threshold: summaries are prepared from `prepare_ratio × budget`.
    pub prepare_ratio: f64,
    /// Summarizer used by prepare.
    pub summarizer: SummarizerKind,
    /// Defer flushes while the provider's prompt cache is warm (the default since issue 21: on
    /// every measured session it costs less under `ctxlog::cost` than flushing at once, see
    /// `docs/decisions.md`; `false` is the legacy gate).
    pub cache_aware: bool,
    /// Cache time-to-live in milliseconds (cold when `now − last_request ≥ ttl`).
    pub flush_ttl_ms: u64,
    /// The last N tool results are never truncated, cleared or removed: Anthropic's
    /// `clear_tool_uses` `keep` (`--keep-tool-uses`, also spelled `--protected-tools`).
    pub protected_tool_results: u32,
    /// The most recent fraction of messages is protected from removal.
    pub protected_recent_ratio: f64,
    /// Consecutive over-budget passes before the breaker freezes the view.
    pub breaker_passes: u32,
    /// Flat cost of an image/document block (and the cap of the size formula).
    pub image_tokens: u32,
    /// Characters of a tool result kept when it is truncated.
    pub truncate_chars: u32,
    /// Summaries in the view may take at most this share of the target; past it the oldest
    /// are condensed into one (or, failing that, retired oldest first).
    pub summary_share: f64,
    /// Cache-aware only: while the cache is warm, nothing rewrites the view until it is over
    /// `hard_limit_ratio × budget` (between the trigger and the budget); from view version 3,
    /// or over the budget less its margin for estimate error if that is lower
    /// (`policy::margin`).
    pub hard_limit_ratio: f64,
    /// Cache-aware only: a rewrite of a warm prefix that frees fewer tokens than this is not
    /// made unless the view is over the budget (0 = any rewrite is worth it).
    pub clear_at_least: u64,
    /// A provider-reported prompt total below `usage_floor_ratio ×` the estimate of the view it
    /// was for is not trusted for anchoring the meter (it is almost always a partial count,
    /// such as Anthropic's `input_tokens` without the cache), and raises `usage_below_estimate`
    /// once. 0 trusts every report.
    pub usage_floor_ratio: f64,
    /// How views render what they hide. 1: as before issue 21 (a retired summary or a ladder
    /// removal leaves nothing in its place; a summary lists every elided output). 2 (new
    /// sessions): every hidden message is represented, by a summary or by a placeholder where it
    /// was (`docs/log-format.md`, "Placeholders"), and a summary names its elided outputs
    /// compactly. 3 (new sessions): as 2, and the cache-aware hard limit and the ladder stop a
    /// margin short of the budget for estimate error (`policy::margin`). Recorded so a replay
    /// renders each session's views as they were served.
    pub view_version: u32,
    /// Tools whose calls and results the ladder never truncates, clears or removes (Anthropic's
    /// `exclude_tools`: a memory or todo tool). Added in record kind 31.
    pub exclude_tools: Vec<String>,
    /// When the ladder truncates or clears a tool result, the call's input is cleared too once
    /// all its results are (Anthropic's `clear_tool_inputs`): the `tool_use` keeps its id and
    /// name, its input becomes `{}`, so the pair stays valid. Added in record kind 31.
    pub clear_tool_inputs: bool,
    /// Set: the ladder *clears* tool results (their whole content becomes this text, as
    /// Anthropic's `clear_tool_uses` does) instead of truncating them to `truncate_chars`.
    /// Added in record kind 31.
    pub tool_placeholder: Option<String>,
    /// Set to N: the thinking blocks of assistant messages before the last N thinking turns are
    /// dropped whole (Anthropic's `clear_thinking` `keep: {thinking_turns: N}`); never modified,
    /// and never dropped from the current tool loop, where the API requires them. `None` keeps
    /// them all (`keep: "all"`). Added in record kind 31.
    pub keep_thinking_turns: Option<u32>,
}

/// The placeholder of a tool result cleared at a client's request (`context_management`) in a
/// session that set none: frozen, since views render it.
pub const DEFAULT_TOOL_PLACEHOLDER: &str =
    "[tool result cleared by ctxlog to save context; the whole result is in the log: ctxlog restore]";

/// [`Config::view_version`] of new sessions (3: views keep a margin for estimate error below
/// the budget, [`crate::policy::margin`]).
pub const VIEW_VERSION: u32 = 3;

impl Default for Config {
    fn default() -> Self {
        Config {
            budget: 200_000,
            trigger_ratio: 0.85,
            target_ratio: 0.50,
            prepare_ratio: 0.70,
            summarizer: SummarizerKind::Extractive,
            cache_aware: true,
            flush_ttl_ms: 300_000,
            protected_tool_results: 5,
            protected_recent_ratio: 0.30,
            breaker_passes: 10,
            image_tokens: DEFAULT_IMAGE_TOKENS,
            truncate_chars: 250,
            summary_share: 0.25,
            hard_limit_ratio: 1.0,
            clear_at_least: 0,
            usage_floor_ratio: 0.5,
            view_version: VIEW_VERSION,
            exclude_tools: Vec::new(),
            clear_tool_inputs: false,
            tool_placeholder: None,
            keep_thinking_turns: None,
        }
    }
}

/// A client's knobs for one call (Anthropic's `context_management` read by the proxy): each
/// set field overrides the session's knob for that call's decisions only. What the call decides
/// is in its events, so a replay needs none of this; placeholders render with the session's text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallKnobs {
    /// `trigger` in input tokens: the ladder runs from here.
    pub trigger_tokens: Option<u64>,
    /// `keep` tool uses: the last N tool results are kept.
    pub keep_tool_uses: Option<u32>,
    /// `exclude_tools`.
    pub exclude_tools: Option<Vec<String>>,
    /// `clear_tool_inputs`.
    pub clear_tool_inputs: Option<bool>,
    /// `clear_at_least` in input tokens.
    pub clear_at_least: Option<u64>,
    /// `clear_tool_uses` was asked for: tool results are cleared, not truncated.
    pub clear_tool_results: bool,
    /// `clear_thinking` `keep`: `Some(None)` for `"all"`.
    pub keep_thinking_turns: Option<Option<u32>>,
}

/// A configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config `{key}`: {message}")]
pub struct ConfigError {
    /// The knob.
    pub key: &'static str,
    /// Why.
    pub message: String,
}

impl Config {
    /// `trigger_ratio × budget`, floored.
    pub fn trigger_tokens(&self) -> u64 {
        ratio_of(self.budget, self.trigger_ratio)
    }

    /// `target_ratio × budget`, floored.
    pub fn target_tokens(&self) -> u64 {
        ratio_of(self.budget, self.target_ratio)
    }

    /// `prepare_ratio × budget`, floored.
    pub fn prepare_tokens(&self) -> u64 {
        ratio_of(self.budget, self.prepare_ratio)
    }

    /// `hard_limit_ratio × budget`, floored: while the cache is warm (cache-aware), the view
    /// may grow up to here before anything rewrites it.
    pub fn hard_limit_tokens(&self) -> u64 {
        ratio_of(self.budget, self.hard_limit_ratio)
    }

    /// `summary_share × target`, floored: the most tokens summaries may take in a view.
    pub fn summary_cap_tokens(&self) -> u64 {
        ratio_of(self.target_tokens(), self.summary_share)
    }

    /// Is a reported prompt total of `reported` tokens, for a view estimated at `estimate`,
    /// plausible enough to anchor the meter on?
    pub fn trusts_usage(&self, reported: u64, estimate: u64) -> bool {
        reported as f64 >= estimate as f64 * self.usage_floor_ratio
    }

    /// A first human message over this many tokens may be truncated once, the one edit of it
    /// the fold allows. Before view version 3: the budget (nothing else could ever fit beside
    /// it, and the ladder would strip everything else, the latest answer included, on every
    /// call). From version 3: what the truncation keeps (half the target), as the engine also
    /// cuts a smaller one when the view's floor with it whole is over the ceiling (the budget
    /// less its margin), which only the engine can judge.
    pub fn first_message_limit_tokens(&self) -> u64 {
        match self.keeps_margin() {
            true => (self.target_tokens() / 2).min(self.budget),
            false => self.budget,
        }
    }

    /// Characters of an oversized first human message kept when it is truncated: half the
    /// target in tokens, at four characters a token.
    pub fn first_message_keep_chars(&self) -> u32 {
        u32::try_from((self.target_tokens() / 2).saturating_mul(4)).unwrap_or(u32::MAX)
    }

    /// Does every hidden message get a placeholder or a summary in the view (view version 2)?
    pub fn placeholders(&self) -> bool {
        self.view_version >= 2
    }

    /// The text a cleared tool result shows.
    pub fn placeholder_text(&self) -> &str {
        self.tool_placeholder.as_deref().unwrap_or(DEFAULT_TOOL_PLACEHOLDER)
    }

    /// Is `name` one of the tools the ladder never edits?
    pub fn excludes_tool(&self, name: &str) -> bool {
        self.exclude_tools.iter().any(|t| t == name)
    }

    /// The knobs of one call: these knobs with a client's per-request ones over them.
    pub fn with_call(&self, k: &CallKnobs) -> Config {
        let mut c = self.clone();
        if let Some(v) = k.trigger_tokens {
            // A trigger over the budget means "not before the budget".
            c.trigger_ratio = (v as f64 / self.budget.max(1) as f64).clamp(f64::MIN_POSITIVE, 1.0);
            c.target_ratio = c.target_ratio.min(c.trigger_ratio);
            c.hard_limit_ratio = c.hard_limit_ratio.max(c.trigger_ratio);
        }
        if let Some(v) = k.keep_tool_uses {
            c.protected_tool_results = v;
        }
        if let Some(v) = &k.exclude_tools {
            c.exclude_tools.clone_from(v);
        }
        if let Some(v) = k.clear_tool_inputs {
            c.clear_tool_inputs = v;
        }
        if let Some(v) = k.clear_at_least {
            c.clear_at_least = v;
        }
        if k.clear_tool_results && c.tool_placeholder.is_none() {
            c.tool_placeholder = Some(DEFAULT_TOOL_PLACEHOLDER.to_owned());
        }
        if let Some(v) = k.keep_thinking_turns {
            c.keep_thinking_turns = v;
        }
        c
    }

    /// Is a summary span's recent window that of the view the span leaves, for messages the
    /// model was sent (view version 3; `summary::message_job`)? Before, it was a share of the
    /// view as it is, and replays of those sessions decide as they did.
    pub(crate) fn window_after_flush(&self) -> bool {
        self.view_version >= 3
    }

    /// Do the hard limit and the ladder keep a margin for estimate error below the budget
    /// (view version 3)?
    pub fn keeps_margin(&self) -> bool {
        self.view_version >= 3
    }

    /// The estimator these knobs imply.
    pub fn estimator(&self) -> Estimator {
        Estimator { image_tokens: self.image_tokens }
    }

    /// Rejects knobs that cannot work, naming the knob.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let e = |key, message: String| Err(ConfigError { key, message });
        let unit = |r: f64| r.is_finite() && r > 0.0 && r <= 1.0;
        if self.budget == 0 {
            return e("budget", "must be positive".into());
        }
        for (key, r) in
            [("trigger", self.trigger_ratio), ("target", self.target_ratio), ("prepare", self.prepare_ratio)]
        {
            if !unit(r) {
                return e(key, format!("{r} is not a ratio in (0, 1]"));
            }
        }
        if self.target_ratio > self.trigger_ratio {
            return e("target", format!("{} must not be above trigger {}", self.target_ratio, self.trigger_ratio));
        }
        if !(self.protected_recent_ratio.is_finite() && (0.0..=1.0).contains(&self.protected_recent_ratio)) {
            return e("protected-recent", format!("{} is not a ratio in [0, 1]", self.protected_recent_ratio));
        }
        if !(self.hard_limit_ratio.is_finite()
            && self.hard_limit_ratio >= self.trigger_ratio
            && self.hard_limit_ratio <= 1.0)
        {
            return e(
                "hard-limit",
                format!("{} is not a ratio between the trigger {} and 1", self.hard_limit_ratio, self.trigger_ratio),
            );
        }
        if !unit(self.summary_share) {
            return e("summary-share", format!("{} is not a ratio in (0, 1]", self.summary_share));
        }
        if !(self.usage_floor_ratio.is_finite() && (0.0..=1.0).contains(&self.usage_floor_ratio)) {
            return e("usage-floor", format!("{} is not a ratio in [0, 1]", self.usage_floor_ratio));
        }
        if self.breaker_passes == 0 {
            return e("breaker", "must be at least 1".into());
        }
        if !(1..=VIEW_VERSION).contains(&self.view_version) {
            return e("view-version", format!("{} is not a view version (1 to {VIEW_VERSION})", self.view_version));
        }
        if self.image_tokens == 0 {
            return e("image-tokens", "must be positive".into());
        }
        if self.tool_placeholder.as_deref().is_some_and(|p| p.trim().is_empty()) {
            // The providers refuse an empty or blank text block.
            return e("tool-placeholder", "must contain non-whitespace text".into());
        }
        if let Some(t) = self.exclude_tools.iter().find(|t| t.trim().is_empty()) {
            return e("exclude-tools", format!("{t:?} is not a tool name"));
        }
        Ok(())
    }
}

/// `floor(n × r)` without going through a lossy product for large `n`.
pub fn ratio_of(n: u64, r: f64) -> u64 {
    (n as f64 * r).floor() as u64
}
