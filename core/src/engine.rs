//! The pure decision of a call: given the state and the time, which events the call would
//! commit and what view it would serve. Nothing here writes; [`crate::session::Session`]
//! persists the batch and only then applies it (decide → persist → advance).
//!
//! Order (DESIGN §8): gate (flush?), then the ladder if the view is still at the trigger, with
//! the guards deciding whether the ladder may run at all.

use crate::config::Config;
use crate::event::{Edited, Event, Flushed, GuardKind};
use crate::policy::{gate, guards, ladder};
use crate::state::{State, Violation};
use crate::time::Millis;
use crate::view::{flush_stubs, thousands};

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
    let config = state.info().map(|i| i.config.clone()).unwrap_or_default();
    let call = state.calls();
    let mut b = Builder { base: state, scratch: None, events: Vec::new() };

    // 1. Gate.
    let metered_before = state.metered_tokens(state.view_tokens());
    if let Some(g) = gate::decide(state, &config, now, metered_before) {
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
        }))?;
        // The fold ignores `tokens_after`; fill it in from the re-rendered view (second pass).
        let after = b.current().view_tokens();
        if let Some(Event::Flushed(f)) = b.events.last_mut() {
            f.tokens_after = after;
        }
    }
    let metered = meter(&b);
    let needed = metered >= config.trigger_tokens();

    // 2. Ladder, if the guards let it run.
    let mut level = 0;
    if needed {
        level = escalate(&mut b, &config, call, metered)?;
    }

    // 3. Served view over the budget: say so once.
    let metered = meter(&b);
    if metered > config.budget {
        let detail = format!(
            "the served view is {} tokens, over the budget of {} (ladder level {level})",
            thousands(metered),
            thousands(config.budget)
        );
        b.raise(call, GuardKind::OverBudget, detail, "--budget, or the size of protected content")?;
    }
    Ok(Decision { events: b.events, scratch: b.scratch, level, needed, metered_tokens: metered })
}

/// The meter reading of the current tentative view.
fn meter(b: &Builder<'_>) -> u64 {
    let cur = b.current();
    cur.metered_tokens(cur.view_tokens())
}

fn escalate(b: &mut Builder<'_>, config: &Config, call: u64, metered: u64) -> Result<u8, Violation> {
    let cur = b.current();
    // Breaker: after N consecutive passes that ended over the budget, stop escalating and
    // serve the frozen sticky view (which keeps the cached prefix intact).
    if cur.breaker_count() >= config.breaker_passes {
        let detail = format!(
            "{} passes in a row ended over the budget of {}; escalation is frozen until a call fits. \
             Check the system prompt size and pinned content against the token budget",
            cur.breaker_count(),
            thousands(config.budget)
        );
        b.raise(call, GuardKind::BreakerTripped, detail, "--budget, --breaker")?;
        return Ok(0);
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
    let level = if outcome.edits.is_empty() { 0 } else { outcome.level };
    for Edited { seq, kind, reason } in outcome.edits {
        b.push(Event::Edited(Edited { seq, kind, reason }))?;
    }
    Ok(level)
}
