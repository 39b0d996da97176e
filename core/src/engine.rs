//! The pure decision of a call: given the state and the time, which events the call would
//! commit and what view it would serve. Nothing here writes; [`crate::session::Session`]
//! persists the batch and only then applies it (decide → persist → advance).
//!
//! Order (DESIGN §8): gate (flush?), summaries over their share (retire), then the ladder if
//! the view is still at the trigger, with the guards deciding whether the ladder may run at all.
//! With `cache_aware`, a warm cache holds everything back while the view is within the hard
//! limit, and a warm rewrite within the budget must free at least `clear_at_least` tokens.
//!
//! When guards disagree, the budget wins: whenever the floor fits the budget, no call is served
//! over it (the deferral stops at the hard limit, `clear_at_least` yields over the budget, and a
//! tripped breaker lets the ladder run as soon as the floor fits).

use crate::config::{CallKnobs, Config};
use crate::event::{Deferral, EditKind, EditReason, Edited, Event, Flushed, GuardKind, SummaryRetired};
use crate::policy::{gate, guards, ladder, margin, media_cap, thinking};
use crate::state::{Item, State, Violation};
use crate::time::Millis;
use crate::view::{flush_stubs, thousands};

/// Ladder passes after the first while the rendered view is over the ladder's aim.
const EXTRA_PASSES: usize = 3;

/// What a call decided.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Tentative `Flushed` / `Edited` / `GuardRaised` events, in order.
    pub events: Vec<Event>,
    /// The state after those events (`None` when there are none: the view is the current one).
    pub scratch: Option<State>,
    /// Highest ladder level reached (0 = none).
    pub level: u8,
    /// The view was at or over the trigger after the gate (the ladder was needed).
    pub needed: bool,
    /// The meter reading of the view this call serves.
    pub metered_tokens: u64,
    /// Work the cache-aware gate held back, and why.
    pub deferred: Option<Deferral>,
}

struct Builder<'a> {
    base: &'a State,
    scratch: Option<State>,
    events: Vec<Event>,
}

impl<'a> Builder<'a> {
    fn current(&self) -> &State {
        self.scratch.as_ref().unwrap_or(self.base)
    }

    /// Applies a tentative event to the scratch state (copied on first use).
    fn push(&mut self, ev: Event) -> Result<(), Violation> {
        let version = self.base.version() + self.events.len() as u64 + 1;
        let scratch = self.scratch.get_or_insert_with(|| self.base.clone());
        scratch.apply(version, &ev)?;
        self.events.push(ev);
        Ok(())
    }

    fn raise(&mut self, call: u64, kind: GuardKind, detail: String, knob: &str) -> Result<(), Violation> {
        match guards::raise(self.current(), call, kind, detail, knob) {
            Some(ev) => self.push(ev),
            None => Ok(()),
        }
    }
}

/// Decides a call at time `now`.
pub fn decide(state: &State, now: Millis) -> Result<Decision, Violation> {
    decide_with(state, now, &CallKnobs::default())
}

/// Decides a call at time `now` with a client's per-request knobs over the session's.
pub(crate) fn decide_with(state: &State, now: Millis, knobs: &CallKnobs) -> Result<Decision, Violation> {
    let config = state.info().map(|i| i.config.with_call(knobs)).unwrap_or_default();
    let call = state.calls();
    let metered_before = state.metered_tokens(state.view_tokens());
    let warm = gate::holds_prefix(state, &config, now);
    let cache_age_ms = gate::cache_age(state, now).unwrap_or(0);
    // The limits a view may grow to, a margin short of the budget (view version 3).
    let hard_limit = margin::hard_limit(state, &config);
    let ceiling = margin::ceiling(state, &config);

    // A client's own context editing (`apply` mode) runs as the provider's does: at its
    // trigger, warm cache or not; its `clear_at_least` is the client's say over the cache.
    // Asked only on a warm call (the thinking drops are found again in step 3c).
    let client_edits_due = || {
        (knobs.clear_tool_results && metered_before >= config.trigger_tokens())
            || (knobs.keep_thinking_turns.is_some() && !thinking::drops(state, &config).is_empty())
    };

    // 0. Cache-aware and warm, within the hard limit: nothing rewrites the cached prefix
    // (unless the provider would refuse the view for its images, or the client asked).
    if warm && metered_before <= hard_limit && !media_cap::over(state) && !client_edits_due() {
        let flush_pending = state.flush_pending();
        let ladder_due = metered_before >= config.trigger_tokens();
        let deferred = (flush_pending || ladder_due).then_some(Deferral::WarmCache {
            cache_age_ms,
            hard_limit_tokens: hard_limit,
            flush_pending,
            ladder_due,
        });
        return Ok(unchanged(ladder_due, metered_before, deferred));
    }

    let mut b = Builder { base: state, scratch: None, events: Vec::new() };
    // 1. Gate.
    if let Some(g) = gate::decide(state, &config, now, metered_before, hard_limit) {
        let (from, to) = (state.flushed(), state.compacted());
        let stubbed = flush_stubs(state, from, to);
        let tokens_before = state.view_tokens();
        b.push(Event::Flushed(Flushed {
            from,
            to,
            reason: g.reason,
            cache_age_ms: g.cache_age_ms,
            tokens_before,
            tokens_after: 0,
            stubbed,
            condensed: state.summary_ledger().condensed_pending(to),
        }))?;
        // The fold ignores `tokens_after`; fill it in from the re-rendered view (second pass).
        let after = b.current().view_tokens();
        if let Some(Event::Flushed(f)) = b.events.last_mut() {
            f.tokens_after = after;
        }
    }
    // 2. Summaries over their share with nothing condensed to replace them: the oldest go.
    retire_summaries(&mut b, &config)?;
    let metered = meter(&b);
    // A rewrite of a warm prefix forced by the hard limit (view version 3) is paid for whole
    // however little it frees: it goes on to the ladder's target, so the next forced one is a
    // whole pass of growth away rather than a few calls.
    let forced = warm && config.keeps_margin() && metered_before > hard_limit;
    let needed = metered >= config.trigger_tokens() || forced;

    // 3. Ladder, if the guards let it run.
    let mut level = 0;
    if needed {
        level = escalate(&mut b, &config, call, metered)?;
    }
    // 3b. The provider's limit on images per request: the oldest go, with their messages.
    for ev in media_cap::cap(b.current(), level) {
        b.push(Event::Edited(ev))?;
    }
    // 3c. `keep_thinking_turns`: older turns' thinking goes whole (on every call, as the API's).
    for ev in thinking::drops(b.current(), &config) {
        b.push(Event::Edited(ev))?;
    }

    // 4. A warm rewrite that is not forced by the budget must be worth the cache it throws away.
    let metered = meter(&b);
    let rewrites =
        b.events.iter().any(|e| matches!(e, Event::Flushed(_) | Event::Edited(_) | Event::SummaryRetired(_)));
    let freed_tokens = metered_before.saturating_sub(metered);
    if warm && rewrites && metered_before <= ceiling && freed_tokens < config.clear_at_least {
        let deferred = Deferral::TooLittleFreed { cache_age_ms, freed_tokens, clear_at_least: config.clear_at_least };
        return Ok(unchanged(metered_before >= config.trigger_tokens(), metered_before, Some(deferred)));
    }

    // 5. Served view over the budget: say so once.
    if metered > config.budget {
        let detail = format!(
            "the served view is {} tokens, over the budget of {} (ladder level {level})",
            thousands(metered),
            thousands(config.budget)
        );
        b.raise(call, GuardKind::OverBudget, detail, "--budget, or the size of protected content")?;
    }
    Ok(Decision { events: b.events, scratch: b.scratch, level, needed, metered_tokens: metered, deferred: None })
}

/// A call that serves the current view as it is.
fn unchanged(needed: bool, metered_tokens: u64, deferred: Option<Deferral>) -> Decision {
    Decision { events: Vec::new(), scratch: None, level: 0, needed, metered_tokens, deferred }
}

/// Retires the oldest summaries in the view while they take more than their share of the
/// target. Condensing (prepared by the host, flushed by the gate) keeps them within it; this is
/// the fallback when nothing was condensed (no summarizer for it, or its summary was refused),
/// so the floor never grows with the session.
fn retire_summaries(b: &mut Builder<'_>, config: &Config) -> Result<(), Violation> {
    let cap = config.summary_cap_tokens();
    loop {
        let cur = b.current();
        let total = cur.view_summary_tokens();
        if total <= cap {
            return Ok(());
        }
        let Some(oldest) = cur.oldest_summary_in_view() else { return Ok(()) };
        let Some(s) = cur.summaries().get(oldest as usize) else { return Ok(()) };
        let tokens = cur.view().iter().find(|it| it.item == Item::Summary(oldest)).map_or(0, |it| u64::from(it.tokens));
        let reason = format!(
            "summaries take {} tokens of the view, over their share of {} ({:.0}% of the target {}) with no \
             condensed summary prepared; the oldest leaves the view (its messages stay in the log, restorable by seq)",
            thousands(total),
            thousands(cap),
            config.summary_share * 100.0,
            thousands(config.target_tokens())
        );
        let ev = SummaryRetired { summary: oldest, from: s.from, to: s.to, tokens, reason };
        b.push(Event::SummaryRetired(ev))?;
    }
}

/// The meter reading of the current tentative view.
fn meter(b: &Builder<'_>) -> u64 {
    let cur = b.current();
    cur.metered_tokens(cur.view_tokens())
}

/// The one edit of the first human message: truncated once to half the target (its head and
/// media kept; the log keeps all of it) when it alone is over the budget, or (view version 3)
/// when the floor of the view with it whole is over the ceiling (the budget less its margin
/// for estimate error), so no call could be served safely within the budget beside it. Else
/// the ladder would remove everything else, the latest answer included, on every call, and the
/// calls would be over the budget anyway: when the first message and the budget disagree, the
/// budget wins, once, and as early as the floor shows it (on the first call for a first
/// message over the ceiling alone, before the cache holds it).
fn first_message_cut(state: &State, config: &Config, metered: u64) -> Option<Edited> {
    let seq = state.first_human()?;
    let entry = state.entry(seq)?;
    let tokens = u64::from(entry.tokens);
    if tokens <= config.first_message_limit_tokens()
        || entry.edit.is_some()
        || entry.is_pinned()
        || !state.in_view(seq)
        || state.restore_held(seq)
    {
        return None;
    }
    let keep_chars = config.first_message_keep_chars();
    let why = if tokens > config.budget {
        format!("alone is {} tokens, over the budget of {}", thousands(tokens), thousands(config.budget))
    } else {
        let floor = ladder::floor(state, config, metered);
        let ceiling = margin::ceiling(state, config);
        if floor <= ceiling {
            return None;
        }
        format!(
            "is {} tokens and the view's floor with it whole is {}, over the ceiling of {} (the budget of {} less its margin)",
            thousands(tokens),
            thousands(floor),
            thousands(ceiling),
            thousands(config.budget)
        )
    };
    let rule = format!(
        "the first user message {why}: truncated once to its first {} characters",
        thousands(u64::from(keep_chars))
    );
    let reason = EditReason { level: 8, rule, target_tokens: config.target_tokens(), guard: None };
    Some(Edited { seq, kind: EditKind::Truncated { keep_chars }, reason })
}

fn escalate(b: &mut Builder<'_>, config: &Config, call: u64, metered: u64) -> Result<u8, Violation> {
    let mut metered = metered;
    let mut cut_first = false;
    if let Some(e) = first_message_cut(b.current(), config, metered) {
        b.push(Event::Edited(e))?;
        metered = meter(b);
        cut_first = true;
        if metered < config.trigger_tokens() {
            return Ok(8);
        }
    }
    let cur = b.current();
    // Breaker: after N consecutive passes that ended over the budget, the floor itself cannot
    // fit. Re-running the ladder every call would only churn the prefix, so the view is frozen
    // until new content adds a whole pass worth of tokens (budget − target); it never grows
    // without bound. As soon as the floor fits again the ladder runs and the call ends within
    // the budget, which re-arms the breaker.
    if cur.breaker_count() >= config.breaker_passes {
        let floor = ladder::floor(cur, config, metered);
        let pass = config.budget.saturating_sub(config.target_tokens()).max(1);
        if floor > config.budget && metered < floor.saturating_add(pass) {
            let detail = format!(
                "{} passes in a row ended over the budget of {}: the floor the ladder can reach is {} tokens. \
                 The view is frozen until new content adds {} tokens, then compacted back to the floor. \
                 Check the system prompt size and pinned content against the token budget",
                cur.breaker_count(),
                thousands(config.budget),
                thousands(floor),
                thousands(pass)
            );
            b.raise(call, GuardKind::BreakerTripped, detail, "--budget, --breaker")?;
            return Ok(0);
        }
    }
    // Infeasible target: the floor alone is over the target while the view fits the budget.
    let floor = guards::unremovable_floor(cur, config);
    if floor > config.target_tokens() && metered <= config.budget {
        b.raise(call, GuardKind::TargetUnreachable, guards::target_unreachable(floor, config), "--target, --budget")?;
        return Ok(0);
    }
    let outcome = ladder::run(cur, config, metered);
    if let Some(detail) = &outcome.clamped {
        b.raise(call, GuardKind::TargetClamped, detail.clone(), "--target, --protected-recent, --protected-tools")?;
    }
    // A pass that found nothing to edit serves the same view: it reached no level. Reporting
    // the level it walked up to (8) would make every no-op call look like a full escalation.
    let mut level = if outcome.edits.is_empty() { 0 } else { outcome.level };
    if cut_first {
        level = level.max(8);
    }
    let aim = outcome.target;
    for Edited { seq, kind, reason } in outcome.edits {
        b.push(Event::Edited(Edited { seq, kind, reason }))?;
    }
    // The ladder reserves tokens for the placeholders its removals add; when the view as
    // rendered is still over its aim (the reserve was short), it runs again on that view.
    for _ in 0..EXTRA_PASSES {
        let now = meter(b);
        if level == 0 || now <= aim {
            break;
        }
        let again = ladder::run(b.current(), config, now);
        if again.edits.is_empty() {
            break;
        }
        level = level.max(again.level);
        for Edited { seq, kind, reason } in again.edits {
            b.push(Event::Edited(Edited { seq, kind, reason }))?;
        }
    }
    Ok(level)
}
