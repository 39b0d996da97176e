//! The escalation ladder (as in the peers' `_compact_ephemeral`, with their bugs fixed): eight
//! levels that truncate old tool results, remove unprotected messages (tool pairs together,
//! oldest first) and finally stub long user messages by cost, stopping as soon as the view is
//! at the target; then, only if the view is still over the *budget*, a ninth that removes
//! without the protected recent window (the peers' soft recent budget pass), so a view whose
//! floor fits the budget always ends within it. It works on a token model of the view and
//! returns `Edited` events; every saving is measured with the same estimator that sums the view.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{ratio_of, Config};
use crate::event::{EditKind, EditReason, Edited};
use crate::policy::guards::{always_protected, excluded_tool_messages, protected_tool_results};
use crate::policy::margin;
use crate::state::{Item, State};
use crate::tokens::Estimator;
use crate::view::{edited_message_as, stubbable, thousands, STUB_PREVIEW_CHARS};

/// Largest tool group (a call message and all its results) the ladder moves as one.
pub const MAX_GROUP: usize = 64;

/// A removal that opens a new gap in the view (view version 2) adds a placeholder there: the
/// ladder charges what that placeholder would cost on its own (a removal widening a gap adds a
/// few characters at most, not charged). The engine measures the real view after the pass and
/// runs the ladder again if it is still over its aim.
/// What the ladder decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The edits, in order.
    pub edits: Vec<Edited>,
    /// Highest level reached (1–9; 9 only if it removed something).
    pub level: u8,
    /// Predicted meter reading after the edits.
    pub tokens: u64,
    /// The target aimed at (raised towards the budget when the configured one was out of reach).
    pub target: u64,
    /// Set when the target was clamped to the budget: the guard's sentence.
    pub clamped: Option<String>,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    seq: u64,
    tokens: u32,
    removed: bool,
    truncated: bool,
    stubbed: bool,
    // A placeholder sits right before / after it in the view.
    gap_before: bool,
    gap_after: bool,
}

struct Ladder<'a> {
    state: &'a State,
    config: &'a Config,
    est: Estimator,
    slots: Vec<Slot>,
    at: BTreeMap<u64, usize>,
    tools: BTreeSet<u64>,
    total: u64,
    target: u64,
    // Level 9 runs only while the view is over this (the budget; 0 when computing the floor).
    budget: u64,
    // The budget less the margin for estimate error (`policy::margin`; the budget before view
    // version 3): the most a clamped target aims at.
    ceiling: u64,
    // Meter reading minus the estimate: what the provider counts beyond (or below) our estimate.
    offset: i64,
    guard: Option<String>,
    edits: Vec<Edited>,
    level: u8,
}

/// Runs the ladder on the current view of `state`, whose meter reads `metered` tokens. The
/// ladder counts in meter units: savings are estimated, but they are taken off the meter
/// reading, so a provider-anchored meter and the ladder agree on when the target is reached.
pub fn run(state: &State, config: &Config, metered: u64) -> Outcome {
    let mut l = Ladder::new(state, config, metered);
    l.clamp_target();
    l.climb();
    l.finish()
}

/// The floor: the smallest view (in meter units) the whole ladder can reach, levels 1–9 run to
/// exhaustion. What is left is what no level may touch: system, pinned, first and last human,
/// summaries, the protected tool results, the stubs and truncations of what may only shrink,
/// tool groups that may not be split, and the other human messages when removing them could
/// not bring the view within the session's budget.
pub fn floor(state: &State, config: &Config, metered: u64) -> u64 {
    let mut l = Ladder::new(state, config, metered);
    l.target = 0;
    l.budget = 0;
    l.climb();
    l.total
}

impl Ladder<'_> {
    fn climb(&mut self) {
        type Step = fn(&mut Ladder<'_>);
        let steps: [(u8, Step); 9] = [
            (1, |l| l.first_wave()),
            (2, |l| l.truncate_wave(0.25, 0.50, "truncate the second quarter of tool results")),
            (3, |l| l.remove(1.0, false, "remove old unprotected messages")),
            (4, |l| l.truncate_wave(0.50, 0.75, "truncate the third quarter of tool results")),
            (5, |l| l.remove(0.6, false, "remove old messages, recent window ×0.6")),
            (6, |l| l.truncate_wave(0.0, 1.0, "truncate all but the protected tool results")),
            (7, |l| l.remove(0.3, false, "remove old messages, recent window ×0.3")),
            (8, |l| l.stub_users()),
            (9, |l| {
                let rule = "still over the budget after every level: remove old messages, no recent window";
                if l.total > l.budget {
                    l.remove(0.0, false, rule);
                }
                // Then old human messages (never the first or the last), but only when that can
                // bring the view within the session's budget: without a summarizer they are what
                // is left of old turns, and keeping them all would let the floor grow with the
                // session (one in ~25 messages of an agent session); when the floor is over the
                // budget anyway (a huge system prompt), removing them would only lose words.
                if l.total > l.budget && l.total.saturating_sub(l.removable_human_tokens()) <= l.config.budget {
                    l.remove(0.0, true, rule);
                }
            }),
        ];
        for (level, step) in steps {
            if self.total <= self.target || (level == 9 && self.total <= self.budget) {
                break;
            }
            self.level = level;
            step(self);
        }
    }

    /// Level 1: truncate the oldest quarter of tool results; or, when the session clears them
    /// (a placeholder, Anthropic's `clear_tool_uses`), clear them oldest first, all but the kept
    /// ones, before anything is removed (as the API does, stopping once at the target).
    fn first_wave(&mut self) {
        if self.config.tool_placeholder.is_some() {
            self.truncate_wave(0.0, 1.0, "clear the oldest tool results, all but the kept ones (clear_tool_uses)");
        } else {
            self.truncate_wave(0.0, 0.25, "truncate the oldest quarter of tool results");
        }
    }

    fn finish(self) -> Outcome {
        // A message truncated at an early level and removed at a later one needs only the
        // removal: the view is the same and the log stays free of edits nobody ever saw.
        let removed: BTreeSet<u64> = self.edits.iter().filter(|e| e.kind == EditKind::Removed).map(|e| e.seq).collect();
        let mut edits = self.edits;
        edits.retain(|e| e.kind == EditKind::Removed || !removed.contains(&e.seq));
        // Level 9 counts as reached only when it removed something: looking over the budget
        // and finding nothing it may remove leaves the view as level 8 made it.
        let level = if self.level == 9 && !edits.iter().any(|e| e.reason.level == 9) { 8 } else { self.level };
        Outcome { edits, level, tokens: self.total, target: self.target, clamped: self.guard }
    }
}

impl<'a> Ladder<'a> {
    fn new(state: &'a State, config: &'a Config, metered: u64) -> Self {
        let mut slots: Vec<Slot> = Vec::new();
        let mut at = BTreeMap::new();
        let mut after_gap = false;
        for it in state.view() {
            let Item::Message(seq) = it.item else {
                if matches!(it.item, Item::Placeholder { .. }) {
                    after_gap = true;
                    if let Some(last) = slots.last_mut() {
                        last.gap_after = true;
                    }
                }
                continue;
            };
            let edit = state.entry(seq).and_then(|e| e.edit).map(|e| e.kind);
            at.insert(seq, slots.len());
            slots.push(Slot {
                seq,
                tokens: it.tokens,
                removed: false,
                truncated: matches!(edit, Some(EditKind::Truncated { .. } | EditKind::Cleared)),
                stubbed: matches!(edit, Some(EditKind::Stubbed { .. })),
                gap_before: std::mem::take(&mut after_gap),
                gap_after: false,
            });
        }
        Ladder {
            state,
            config,
            est: config.estimator(),
            slots,
            at,
            tools: protected_tool_results(state, config.protected_tool_results)
                .into_iter()
                .chain(excluded_tool_messages(state, config))
                .collect(),
            total: metered,
            target: config.target_tokens(),
            budget: config.budget,
            ceiling: margin::ceiling(state, config),
            offset: metered as i64 - state.view_tokens() as i64,
            guard: None,
            edits: Vec::new(),
            level: 0,
        }
    }

    fn is_tool_result(&self, seq: u64) -> bool {
        self.state.entry(seq).is_some_and(|e| e.is_tool_result())
    }

    fn edit(&mut self, seq: u64, kind: EditKind, rule: &str) {
        let reason =
            EditReason { level: self.level, rule: rule.into(), target_tokens: self.target, guard: self.guard.clone() };
        self.edits.push(Edited { seq, kind, reason });
    }

    /// Records an edit that shrinks slot `i` to `new` tokens.
    fn shrink(&mut self, i: usize, new: u32, kind: EditKind, rule: &str) {
        let Some(slot) = self.slots.get_mut(i) else { return };
        self.total = self.total.saturating_sub(u64::from(slot.tokens.saturating_sub(new)));
        slot.tokens = new;
        match kind {
            EditKind::Truncated { .. } | EditKind::Cleared => slot.truncated = true,
            EditKind::Stubbed { .. } => slot.stubbed = true,
            EditKind::Removed => slot.removed = true,
            EditKind::Trimmed { .. } => {}
        }
        let seq = slot.seq;
        self.edit(seq, kind, rule);
    }

    /// Tokens of `seq` truncated; `None` unless it is in the view unedited (an edited message
    /// is at its floor: the ladder never edits it again).
    fn truncated_tokens(&self, seq: u64) -> Option<u32> {
        let m = self.state.original(seq)?;
        Some(self.est.message(&edited_message_as(m, self.result_edit(), self.config.placeholder_text())))
    }

    /// How this session shrinks a tool result: cleared to its placeholder when it has one
    /// (Anthropic's clearing), else truncated to its head.
    fn result_edit(&self) -> EditKind {
        match self.config.tool_placeholder {
            Some(_) => EditKind::Cleared,
            None => EditKind::Truncated { keep_chars: self.config.truncate_chars },
        }
    }

    /// `clear_tool_inputs`: once every result of a call message is shrunk or gone, its calls'
    /// inputs are cleared too (ids and names kept). Its thinking goes in the same trim when the
    /// thinking knob would drop it anyway. Not the protected ones, not the last assistant
    /// message (the API wants it as the model wrote it).
    fn clear_inputs_after(&mut self, result: u64, rule: &str) {
        if !self.config.clear_tool_inputs {
            return;
        }
        for call in self.state.tool_partners(result) {
            let Some(&ci) = self.at.get(&call) else { continue };
            let Some(slot) = self.slots.get(ci).copied() else { continue };
            if slot.removed || self.tools.contains(&call) || always_protected(self.state, call) {
                continue;
            }
            if self.state.entry(call).is_none_or(|e| e.role() != crate::message::Role::Assistant)
                || Some(call) == crate::policy::thinking::api_required(self.state)
            {
                continue;
            }
            let done = self.state.call_results(call).is_some_and(|rs| {
                rs.iter()
                    .all(|r| self.at.get(r).and_then(|&i| self.slots.get(i)).is_none_or(|s| s.truncated || s.removed))
            });
            let Some((body, was)) = crate::policy::thinking::trim_body(self.state, call) else { continue };
            if !done || was.is_some_and(|(_, inputs)| inputs) {
                continue;
            }
            let thinking = was.is_some_and(|(t, _)| t) || crate::policy::thinking::due(self.state, self.config, call);
            let kind = EditKind::Trimmed { thinking, inputs: true };
            let new = self.est.message(&edited_message_as(body, kind, self.config.placeholder_text()));
            if new < slot.tokens {
                self.shrink(ci, new, kind, &format!("{rule}; clear the inputs of its calls"));
            }
        }
    }

    /// Tokens of `seq` stubbed, if stubbing shrinks it; `None` unless it is in the view unedited.
    fn stubbed_tokens(&self, seq: u64) -> Option<u32> {
        let m = self.state.original(seq)?;
        stubbable(m).then(|| {
            let kind = EditKind::Stubbed { preview_chars: STUB_PREVIEW_CHARS };
            self.est.message(&edited_message_as(m, kind, self.config.placeholder_text()))
        })
    }

    /// "Aim at what is achievable": if removing, truncating and stubbing everything the ladder
    /// may touch still leaves the view over the target, do not delete the whole conversation
    /// chasing a number that cannot be reached. Aim halfway between that floor and the budget:
    /// aiming at the budget itself (the peers' clamp) leaves no headroom, so every later call
    /// would trim a message or two and break the prompt cache each time; halfway keeps most of
    /// the conversation and gives it room to grow before the next pass.
    fn clamp_target(&mut self) {
        let live = self.slots.len();
        let tightest = live - ratio_of(live as u64, self.config.protected_recent_ratio * 0.3) as usize;
        let mut floor: u64 = self
            .state
            .view()
            .iter()
            .filter(|i| matches!(i.item, Item::Summary(_) | Item::Placeholder { .. }))
            .map(|i| u64::from(i.tokens))
            .sum();
        for (k, s) in self.slots.iter().enumerate() {
            let human = self.state.entry(s.seq).is_some_and(|e| e.is_human());
            let kept = always_protected(self.state, s.seq) || self.tools.contains(&s.seq);
            floor += u64::from(if kept {
                s.tokens
            } else if human {
                self.stubbed_tokens(s.seq).unwrap_or(s.tokens).min(s.tokens)
            } else if k >= tightest {
                if self.is_tool_result(s.seq) {
                    self.truncated_tokens(s.seq).unwrap_or(s.tokens).min(s.tokens)
                } else {
                    s.tokens
                }
            } else {
                0
            });
        }
        let floor = floor.saturating_add_signed(self.offset);
        if floor > self.target && self.ceiling > self.target {
            let budget = self.ceiling;
            // Before view version 3 the ceiling is the budget, and the sentences are as they were.
            let of_budget = match budget == self.config.budget {
                true => format!("the budget of {}", thousands(budget)),
                false => format!(
                    "the ceiling of {} (the budget of {} less its margin for estimate error)",
                    thousands(budget),
                    thousands(self.config.budget)
                ),
            };
            let (aim, why) = if floor >= budget {
                let why = match budget == self.config.budget {
                    true => "the budget itself, as the floor is over it".to_owned(),
                    false => format!("{of_budget}, as the floor is over it"),
                };
                (budget, why)
            } else {
                let aim = floor + (budget - floor) / 2;
                (aim, format!("halfway between the floor and {of_budget}"))
            };
            self.guard = Some(format!(
                "target clamped: the achievable floor is {} tokens against a target of {}; aiming at {}, {why}",
                thousands(floor),
                thousands(self.target),
                thousands(aim),
            ));
            self.target = aim;
        }
    }

    /// Truncates the tool results between the `from` and `to` fractions of their list.
    fn truncate_wave(&mut self, from: f64, to: f64, rule: &str) {
        let tools: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots.get(i).is_some_and(|s| !s.removed && self.is_tool_result(s.seq)))
            .collect();
        let n = tools.len() as u64;
        let (a, b) = (ratio_of(n, from) as usize, ratio_of(n, to) as usize);
        for &i in tools.get(a..b).unwrap_or_default() {
            if self.total <= self.target {
                return;
            }
            let Some(s) = self.slots.get(i).copied() else { continue };
            // Pinned results are never edited (the fold rejects it), like the protected last N.
            if s.truncated || self.tools.contains(&s.seq) || always_protected(self.state, s.seq) {
                continue;
            }
            let Some(new) = self.truncated_tokens(s.seq).filter(|&t| t < s.tokens) else { continue };
            self.shrink(i, new, self.result_edit(), rule);
            self.clear_inputs_after(s.seq, rule);
        }
    }

    /// A message and all the messages tied to it by tool calls; `None` if a call in the group
    /// is unanswered (such a call is never removed) or the group is implausibly large.
    fn tool_group(&self, seq: u64) -> Option<Vec<u64>> {
        let mut group = vec![seq];
        let mut i = 0;
        while let Some(&s) = group.get(i) {
            i += 1;
            self.state.entry(s)?;
            // An unanswered call is never removed: no group.
            self.state.call_results(s)?;
            for p in self.state.tool_partners(s) {
                if !group.contains(&p) {
                    group.push(p);
                }
            }
            if group.len() > MAX_GROUP {
                return None;
            }
        }
        group.sort_unstable();
        Some(group)
    }

    /// Removes unprotected messages oldest first, tool pairs together. `recent` scales the
    /// protected recent window; human messages go only when `humans` (level 9).
    fn remove(&mut self, recent: f64, humans: bool, rule: &str) {
        let live: Vec<usize> =
            (0..self.slots.len()).filter(|&i| self.slots.get(i).is_some_and(|s| !s.removed)).collect();
        let cut = live.len() - ratio_of(live.len() as u64, self.config.protected_recent_ratio * recent) as usize;
        let recent_seqs: BTreeSet<u64> =
            live.iter().skip(cut).filter_map(|&i| self.slots.get(i).map(|s| s.seq)).collect();
        let rule = format!("{rule} (recent {:.0}% protected)", self.config.protected_recent_ratio * recent * 100.0);
        let protected = |l: &Ladder<'_>, seq: u64| {
            always_protected(l.state, seq) || l.tools.contains(&seq) || recent_seqs.contains(&seq)
        };
        for &i in &live {
            if self.total <= self.target {
                return;
            }
            let Some(s) = self.slots.get(i).copied() else { continue };
            let human = self.state.entry(s.seq).is_none_or(|e| e.is_human());
            if s.removed || (human && !humans) || protected(self, s.seq) {
                continue;
            }
            let Some(group) = self.tool_group(s.seq) else { continue };
            if group.iter().any(|&g| protected(self, g)) {
                continue;
            }
            let charge = self.placeholder_charge(&group);
            for g in group {
                let Some(&gi) = self.at.get(&g) else { continue };
                if self.slots.get(gi).is_some_and(|slot| !slot.removed) {
                    self.shrink(gi, 0, EditKind::Removed, &rule);
                }
            }
            self.total += u64::from(charge);
        }
    }

    /// What removing `group` adds for its placeholder: nothing when it widens a gap (a
    /// placeholder or a removed message is next to it), the placeholder's own estimate when it
    /// opens a new one.
    fn placeholder_charge(&self, group: &[u64]) -> u32 {
        if !self.config.placeholders() {
            return 0;
        }
        let (Some(&a), Some(&b)) = (group.first(), group.last()) else { return 0 };
        let (Some(first), Some(last)) = (self.at.get(&a), self.at.get(&b)) else { return 0 };
        let before = self.slots.get(*first).is_some_and(|s| s.gap_before)
            || first.checked_sub(1).and_then(|i| self.slots.get(i)).is_some_and(|s| s.removed);
        let after =
            self.slots.get(*last).is_some_and(|s| s.gap_after) || self.slots.get(last + 1).is_some_and(|s| s.removed);
        if before || after {
            0
        } else {
            self.est.message(&crate::placeholder::message(self.state, a, b + 1))
        }
    }

    /// Tokens of the human messages level 9 may remove: in the view, neither the first nor the
    /// last human message, not pinned.
    fn removable_human_tokens(&self) -> u64 {
        self.slots
            .iter()
            .filter(|s| !s.removed && !always_protected(self.state, s.seq))
            .filter(|s| self.state.entry(s.seq).is_some_and(|e| e.is_human()))
            .map(|s| u64::from(s.tokens))
            .sum()
    }

    /// Level 8: stub long human messages by cost (text goes, images stay), oldest first; the
    /// first and last human message are never stubbed.
    fn stub_users(&mut self) {
        for i in 0..self.slots.len() {
            if self.total <= self.target {
                return;
            }
            let Some(s) = self.slots.get(i).copied() else { continue };
            let human = self.state.entry(s.seq).is_some_and(|e| e.is_human());
            if s.removed || s.stubbed || !human || always_protected(self.state, s.seq) {
                continue;
            }
            let Some(new) = self.stubbed_tokens(s.seq).filter(|&t| t < s.tokens) else { continue };
            let kind = EditKind::Stubbed { preview_chars: STUB_PREVIEW_CHARS };
            self.shrink(i, new, kind, "stub long user messages by cost");
        }
    }
}
