//! Exact boundaries of the engine's comparisons, each one found untested by mutation testing
//! (`scripts/mutants`, TESTING.md): a `>` that could be a `>=` and no test would notice. Every
//! test drives a real session through the public API and sits on both sides of one boundary.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use ctxlog::event::{Event, GuardKind};
use ctxlog::WireFormat;
use ctxlog_tests::engine_fixtures::{config, Harness};
use ctxlog_tests::scenario;

fn metered(c: &ctxlog_tests::engine_fixtures::Call) -> u64 {
    match c.events.last() {
        Some(Event::RequestServed(s)) => s.metered_tokens,
        other => panic!("a call ends with RequestServed, not {other:?}"),
    }
}

#[test]
fn a_view_metered_exactly_at_the_budget_is_not_over_it() {
    for (reported, over) in [(999, false), (1_000, false), (1_001, true)] {
        // Given a call whose provider reported `reported` input tokens on a budget of 1,000,
        let mut h = Harness::new(WireFormat::Anthropic, config(1_000, 0.85, 0.5));
        let w = h.wire;
        h.append(vec![w.system("You are a careful assistant."), w.user("Read the files.")]);
        h.call_reported(Some(reported));
        // when the next call serves the unchanged history (the meter anchors on that report),
        let c = h.call().clone();
        // then only a view over the budget raises over_budget.
        assert_eq!(metered(&c), reported);
        assert_eq!(c.guards().contains(&GuardKind::OverBudget), over, "metered {reported}: {:?}", c.guards());
    }
}

/// System, a long first instruction, eight removable turns and a short last question.
fn floor_session(budget: u64, trigger: f64, target: f64) -> Harness {
    let mut h = Harness::new(WireFormat::Anthropic, config(budget, trigger, target));
    let w = h.wire;
    h.append(vec![w.system(&"You are a careful assistant. ".repeat(28)), w.user(&"The project is ~/ora. ".repeat(36))]);
    for i in 0..4 {
        h.append(vec![
            w.assistant(&format!("step {i}: {}", "looked at it. ".repeat(28))),
            w.user(&"go on. ".repeat(57)),
        ]);
    }
    h.append(vec![w.assistant("all done"), w.user("Anything else?")]);
    h
}

#[test]
fn a_floor_exactly_at_the_target_still_lets_the_ladder_run() {
    // Given the unremovable floor of a session (system, first and last human message),
    let probe = floor_session(1_000_000, 0.5, 0.25);
    let floor = ctxlog::internal::policy::guards::unremovable_floor(probe.session.state(), &probe.session.config());
    let view = probe.session.state().view_tokens();
    for (target, infeasible) in [(floor, false), (floor - 1, true)] {
        // and a budget whose target is exactly the floor (or one token under it), with the view
        // between the trigger and the budget,
        let mut h = floor_session(target * 4, 0.5, 0.25);
        assert_eq!(h.session.config().target_tokens(), target);
        assert!(view >= h.session.config().trigger_tokens() && view <= h.session.config().budget, "view {view}");
        // when a call is planned, then only a floor *over* the target stops the ladder.
        let c = h.call().clone();
        assert_eq!(c.guards().contains(&GuardKind::TargetUnreachable), infeasible, "target {target}: {:?}", c.guards());
        assert_eq!(c.edits().is_empty(), infeasible, "target {target}: edits {:?}", c.edits());
    }
}

/// A served call that needed the ladder and was metered at `metered` against a budget of
/// 100,000 (the scenario config's).
fn served_needed(call: u64, metered: u64) -> Event {
    let mut ev = scenario::request_served(call, 10 * (call + 1));
    if let Event::RequestServed(s) = &mut ev {
        s.needed = true;
        s.metered_tokens = metered;
    }
    ev
}

#[test]
fn a_pass_ending_exactly_at_the_budget_does_not_count_toward_the_breaker() {
    let budget = scenario::config().budget;
    // Given passes that needed the ladder and ended exactly at, then over, the budget,
    let at = scenario::fold(&scenario::conversation_then(vec![served_needed(0, budget)]));
    let over = scenario::fold(&scenario::conversation_then(vec![served_needed(0, budget + 1)]));
    // then only the one over the budget counts.
    assert_eq!((at.breaker_count(), over.breaker_count()), (0, 1));
}

#[test]
fn a_restore_at_exactly_the_flushed_prefix_is_not_a_restore_out_of_a_flush() {
    use scenario::*;
    // Given messages 0..4 flushed, and message 4 (just past the flushed prefix) removed and
    // restored: it came back from an edit, not from a flush,
    let given = conversation_then(vec![summary_prepared(0, 4), flushed(0, 4), removed(4), restored(4, vec![])]);
    // when a later flush covers it, then it is summarized away like any other message
    // (a restore out of a flush would have kept it in the view).
    let st = fold(&[given, vec![summary_prepared(4, 5), flushed(4, 5)]].concat());
    assert!(st.hidden_by_flush(4));
    assert!(!st.view().iter().any(|it| it.item == ctxlog::state::Item::Message(4)));
    // A message restored from *inside* the flushed prefix does stay.
    let st = fold(&conversation_then(vec![summary_prepared(0, 5), flushed(0, 5), restored(4, vec![])]));
    assert!(!st.hidden_by_flush(4));
}

/// A folded session on `cfg` (system, long first instruction, four removable turns, a short
/// last question) whose last `passes` calls all needed the ladder and ended over the budget.
fn breaker_armed(cfg: &ctxlog::Config, passes: u64) -> ctxlog::state::State {
    use scenario::*;
    let mut events = vec![
        started_with(WireFormat::Anthropic, cfg.clone()),
        system(0, &"You are a careful assistant. ".repeat(28)),
        user(1, &"The project is ~/ora. ".repeat(36)),
    ];
    for i in 0..2 {
        events.push(assistant(2 + 2 * i, &format!("step {i}: {}", "looked at it. ".repeat(28))));
        events.push(user(3 + 2 * i, &"go on. ".repeat(57)));
    }
    events.push(assistant(6, "all done"));
    events.push(user(7, "Anything else?"));
    for call in 0..passes {
        let mut ev = request_served(call, 10 * (call + 1));
        if let Event::RequestServed(s) = &mut ev {
            (s.needed, s.metered_tokens) = (true, cfg.budget + 1);
        }
        events.push(ev);
    }
    fold(&events)
}

#[test]
fn a_floor_exactly_at_the_budget_does_not_trip_the_breaker() {
    // Given the budget for which the ladder's floor (what it can reach at its last level) is
    // exactly the budget (the floor depends on the budget through the recent window: iterate
    // to the fixed point),
    // (View version 2: its first user message stays whole. From version 3 one whose floor is
    // over the ceiling is truncated once instead: `compaction_scenarios::irreducible_floor_*`.)
    let with_budget = |budget| ctxlog::Config { budget, view_version: 2, ..config(budget, 0.5, 0.1) };
    let floor_at = |budget| {
        let cfg = with_budget(budget);
        let st = breaker_armed(&cfg, 0);
        ctxlog::internal::policy::ladder::floor(&st, &cfg, st.view_tokens())
    };
    let mut budget = 1_000_000;
    for _ in 0..10 {
        budget = floor_at(budget);
    }
    assert_eq!(floor_at(budget), budget, "no budget equal to its own floor");
    for (budget, trips) in [(budget, false), (budget - 1, true)] {
        // and a session with the breaker armed (as many over-budget passes in a row as it allows)
        // whose view is over that budget,
        let cfg = with_budget(budget);
        let st = breaker_armed(&cfg, u64::from(cfg.breaker_passes));
        assert!(st.breaker_count() >= cfg.breaker_passes);
        assert!(st.view_tokens() > budget, "view {} within {budget}", st.view_tokens());
        // when the next call is decided (cold cache),
        let d = ctxlog::internal::engine::decide(&st, scenario::T0 + 3_600_000).unwrap();
        // then only a floor *over* the budget freezes the view; a floor that fits is compacted to.
        let tripped =
            d.events.iter().any(|e| matches!(e, Event::GuardRaised(g) if g.kind == GuardKind::BreakerTripped));
        assert_eq!(tripped, trips, "budget {budget}: {:?}", d.events);
        if !trips {
            assert!(d.metered_tokens <= budget, "compacted to {} over {budget}", d.metered_tokens);
        }
    }
}

/// A session whose first exchange is one assistant message calling `calls` tools, each result
/// in its own message, then long turns; only the system and the first and last human messages
/// are protected.
fn one_tool_group_of(calls: usize, budget: u64) -> Harness {
    let cfg = ctxlog::Config { protected_tool_results: 0, protected_recent_ratio: 0.0, ..config(budget, 0.5, 0.25) };
    let mut h = Harness::new(WireFormat::Anthropic, cfg);
    let w = h.wire;
    h.append(vec![w.system("You are a careful assistant."), w.user("Read every file.")]);
    let ids: Vec<String> = (0..calls).map(|i| format!("t{i}")).collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut group = vec![w.calls("reading them all", &id_refs, "read_file")];
    group.extend(ids.iter().map(|id| w.result(id, "ok")));
    h.append(group);
    for i in 0..6 {
        h.append(vec![w.assistant(&format!("part {i}: {}", "explained. ".repeat(200))), w.user("go on")]);
    }
    h
}

#[test]
fn a_tool_group_of_exactly_the_largest_size_is_removed_as_one() {
    use ctxlog::internal::policy::ladder::MAX_GROUP;
    for (calls, removable) in [(MAX_GROUP - 1, true), (MAX_GROUP, false)] {
        // Given a call message and its results, `calls + 1` messages in all (the largest group
        // the ladder moves is MAX_GROUP messages), as the oldest removable content of a view
        // four times its target,
        let view = one_tool_group_of(calls, 1_000_000_000).session.state().view_tokens();
        let mut h = one_tool_group_of(calls, view);
        // when a call compacts it,
        let c = h.call().clone();
        // then a group of exactly MAX_GROUP messages goes as one, and a larger one stays whole.
        let group: Vec<u64> = (2..=2 + calls as u64).collect();
        let removed = c.removed();
        let gone = group.iter().filter(|s| removed.contains(s)).count();
        assert_eq!(gone, if removable { group.len() } else { 0 }, "{calls} calls: removed {removed:?}");
    }
}

/// A session with extractive summaries flushed into its view and nothing left to flush,
/// recorded at a budget of 4,000 and a target of 0.5 with a share (1.0) nothing retires under.
fn summarized() -> Harness {
    let mut cfg = config(4_000, 0.85, 0.5);
    cfg.summarizer = ctxlog::config::SummarizerKind::Extractive;
    cfg.summary_share = 1.0;
    let mut h = Harness::new(WireFormat::Anthropic, cfg);
    let w = h.wire;
    h.append(vec![w.system("You are a careful assistant."), w.user("Fix the build in ~/ora.")]);
    for i in 0..24 {
        h.append(vec![
            w.assistant(&format!("step {i}: {}", "looked at the code and changed it. ".repeat(12))),
            w.user(&format!("Now part {i}, please. {}", "Keep the tests green. ".repeat(6))),
        ]);
        h.call();
        while h.prepare_extractive() {}
    }
    h.call();
    h
}

/// A copy of `h`'s log whose `SessionStarted` carries `summary_share` instead.
fn with_share(h: &Harness, share: f64) -> ctxlog::MemoryStore {
    use ctxlog::Store as _;
    let mut records = Vec::new();
    ctxlog::replay::for_each_event(h.store.as_ref(), h.session.id(), 1, None, |_, mut ev| {
        if let Event::SessionStarted(s) = &mut ev {
            s.config.summary_share = share;
        }
        records.push(ctxlog::codec::encode(&ev).unwrap());
        Ok(())
    })
    .unwrap();
    let copy = ctxlog::MemoryStore::new();
    copy.append(h.session.id(), ctxlog::ExpectedVersion::Exact(0), &records).unwrap();
    copy
}

#[test]
fn summaries_retire_at_one_token_over_budget_times_target_times_share() {
    // Given a session whose view holds summaries of `shown` tokens, nothing to flush and the
    // view under the trigger,
    let h = summarized();
    let st = h.session.state();
    let shown = st.view_summary_tokens();
    assert!(shown > 0 && st.flushed() == st.compacted() && st.flushed() > 0, "{shown} {}", st.flushed());
    assert!(st.view_tokens() < h.session.config().trigger_tokens());
    let target = h.session.config().target_tokens();
    assert_eq!(target, 2_000);
    for (cap, retires) in [(shown, false), (shown - 1, true)] {
        // and the same log under a share whose cap (budget × target × share, floored) is
        // exactly `shown`, or one token under it,
        let share = (cap as f64 + 0.5) / 2_000.0;
        let store = with_share(&h, share);
        let mut s = ctxlog::Session::open(&store, h.session.id()).unwrap();
        assert_eq!(s.config().summary_cap_tokens(), (4_000.0 * 0.5 * share).floor() as u64);
        assert_eq!(s.config().summary_cap_tokens(), cap);
        // when the next call is planned and committed,
        let now = ctxlog::Timestamp::from_millis(h.now);
        let plan = s.plan(now).unwrap();
        let committed = s.commit(plan, now, None).unwrap();
        // then the oldest summary leaves the view only when the summaries are over the cap,
        let retired: Vec<_> = committed
            .events
            .iter()
            .filter_map(|e| match e {
                Event::SummaryRetired(r) => Some(r),
                _ => None,
            })
            .collect();
        assert_eq!(!retired.is_empty(), retires, "cap {cap}, shown {shown}: {:?}", committed.events);
        assert!(s.state().view_summary_tokens() <= cap, "cap {cap}: {}", s.state().view_summary_tokens());
        if retires {
            assert_eq!(retired[0].summary, st.oldest_summary_in_view().unwrap());
            assert!(
                retired[0].reason.contains(&format!("takes {shown}")) || retired[0].reason.contains("over their share")
            );
        }
    }
}
