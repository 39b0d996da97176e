//! Sessions of any length (issue 8): thousands of generated agent messages (the demo's shape:
//! tool calls, heavy-tailed tool results, idle breaks) on small budgets, with every summarizer
//! setting and the cache-aware gate on and off. For every served view:
//! (a) over the budget only if the floor of that very view (what the whole ladder cannot
//!     remove) is over it;
//! (b) summaries take at most their share of the target, so their number stays bounded
//!     whatever the session's length;
//! (c) the first human message is in the view, verbatim.
//!
//! Plus the breaker regression (a tripped breaker, then 500 more messages: the view stays
//! within the budget and one turn), and replay/verify of a long session on every backend. The
//! sessions are sized for debug builds; the 5,000–100,000-message runs are the soak benchmark's.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::path::Path;

use ctxlog::config::{Config, SummarizerKind};
use ctxlog::event::{EditKind, Event, GuardKind};
use ctxlog::internal::policy::ladder;
use ctxlog::internal::wire::parse_timestamp_ms;
use ctxlog::message::Role;
use ctxlog::session::{Prepared, Produced};
use ctxlog::state::Item;
use ctxlog::{Message, WireFormat};
use ctxlog_tests::engine_fixtures::{config, Harness};
use ctxlog_tests::scenario::cli;
use ctxlog_tools::transcript::{read, FormatArg};
use ctxlog_workload::generate;
use proptest::prelude::*;

/// How the host answers summary jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Host {
    /// Summarizes spans and condenses summaries (the CLI's behaviour).
    Condenses,
    /// Summarizes spans but never condenses (an LLM host without that prompt): the engine must
    /// retire the oldest summaries instead.
    DeclinesCondensing,
    /// `--summarizer none`: no summaries at all.
    None,
}

/// One generated session's messages, with the timestamp of each call (assistant line).
fn session_lines(seed: u64, turns: usize) -> Vec<(Message, Option<u64>)> {
    let text = generate(seed, turns);
    let t = read(text.as_bytes(), Path::new("generated"), FormatArg::Anthropic).unwrap();
    t.lines
        .into_iter()
        .map(|l| {
            let at = l.message.meta.timestamp.as_ref().map(|s| parse_timestamp_ms(s).unwrap());
            (l.message, at)
        })
        .collect()
}

/// Runs `lines` through a session as `ctxlog import` does (each assistant line is a call at its
/// timestamp), with `host` answering summary jobs, and checks (a)–(c) after every call.
fn drive(lines: &[(Message, Option<u64>)], mut cfg: Config, host: Host) -> Harness {
    if host == Host::None {
        cfg.summarizer = SummarizerKind::None;
    }
    let mut h = Harness::new(WireFormat::Anthropic, cfg.clone());
    let cap = cfg.summary_cap_tokens();
    let mut pending = Vec::new();
    for (m, at) in lines {
        if m.role == Role::Assistant {
            h.append(std::mem::take(&mut pending));
            if let Some(at) = at {
                h.now = h.now.max(*at);
            }
            let c = h.call().clone();
            let st = h.session.state();
            let metered = match c.events.last() {
                Some(Event::RequestServed(s)) => s.metered_tokens,
                _ => panic!("no RequestServed"),
            };
            // (a) Over the budget only when the view's own floor is.
            if metered > cfg.budget {
                let floor = ladder::floor(st, &cfg, metered);
                assert!(
                    floor > cfg.budget,
                    "call {}: served {metered} > budget {} with a floor of {floor}",
                    c.call,
                    cfg.budget
                );
            }
            // (b) Summaries within their share, hence bounded in number.
            let summaries = st.view().iter().filter(|i| matches!(i.item, Item::Summary(_))).count() as u64;
            assert!(
                st.view_summary_tokens() <= cap,
                "call {}: summaries {} > cap {cap}",
                c.call,
                st.view_summary_tokens()
            );
            assert!(summaries <= 1 + cap / 20, "call {}: {summaries} summaries in the view", c.call);
            // (c) The user's first words stay.
            if let Some(first) = st.first_human() {
                assert!(st.in_view(first) && st.entry(first).unwrap().edit.is_none(), "call {}", c.call);
            }
            prepare(&mut h, host);
        }
        pending.push(m.clone());
    }
    h
}

/// Runs summary jobs until none is left, as a background summarizer would between calls, and
/// checks that they end: an accepted span job moves `compacted` forward and an accepted
/// condense job lowers the number of current summaries, so the jobs between two calls are
/// never more than the messages plus the summaries.
fn prepare(h: &mut Harness, host: Host) {
    let st = h.session.state();
    let bound = st.message_count() + st.summary_ledger().current().len() as u64 + 1;
    for _ in 0..bound {
        let Some(job) = h.session.summary_job() else { return };
        let text = match (job.is_condense(), host) {
            (true, Host::DeclinesCondensing) => return,
            (true, _) => ctxlog::summary::condense(h.session.state(), &job),
            (false, _) => h.session.summarize(&job).unwrap(),
        };
        let before = (h.session.state().compacted(), h.session.state().summary_ledger().current().len());
        if let Prepared::Discarded(_) = h.session.prepare(&job, text, Produced::extractive()).unwrap() {
            return;
        }
        let after = (h.session.state().compacted(), h.session.state().summary_ledger().current().len());
        if job.is_condense() {
            assert!(
                after.1 < before.1,
                "condensing {:?} left {} current summaries of {}",
                job.condense,
                after.1,
                before.1
            );
        } else {
            assert!(after.0 > before.0, "a span job {}..{} did not move compacted from {}", job.from, job.to, before.0);
        }
    }
    panic!("summary jobs did not end after {bound} between two calls");
}

fn count(h: &Harness, pred: impl Fn(&Event) -> bool) -> usize {
    h.calls.iter().flat_map(|c| &c.events).filter(|e| pred(e)).count()
}

fn knobs() -> impl Strategy<Value = (Config, Host)> {
    (
        12_000u64..40_000,
        0.7f64..0.95,
        0.3f64..0.8,
        0.1f64..0.5,
        any::<bool>(),
        0.0f64..1.0,
        prop_oneof![Just(Host::Condenses), Just(Host::DeclinesCondensing), Just(Host::None)],
    )
        .prop_map(|(budget, trigger, target_frac, share, cache_aware, hard_frac, host)| {
            let c = Config {
                budget,
                trigger_ratio: trigger,
                target_ratio: trigger * target_frac,
                prepare_ratio: trigger * 0.8,
                summary_share: share,
                cache_aware,
                hard_limit_ratio: trigger + (1.0 - trigger) * hard_frac,
                ..Config::default()
            };
            (c, host)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    #[test]
    fn long_sessions_stay_within_budget_and_keep_summaries_bounded(
        seed in any::<u64>(),
        turns in 900usize..1_100,
        (cfg, host) in knobs(),
    ) {
        let lines = session_lines(seed, turns);
        prop_assert!(lines.len() >= 1_900, "{} messages", lines.len());
        let h = drive(&lines, cfg, host);
        h.assert_verified();
    }
}

#[test]
fn every_summarizer_setting_on_a_small_budget_long_session() {
    // The same 1,500-message session on a 20,000-token budget with each host, legacy and
    // cache-aware: checks (a)–(c) on every call, and each setting does what it claims.
    let lines = session_lines(11, 690);
    for cache_aware in [false, true] {
        for host in [Host::Condenses, Host::DeclinesCondensing, Host::None] {
            let cfg = Config { budget: 20_000, cache_aware, ..Config::default() };
            let h = drive(&lines, cfg, host);
            let condensed = count(&h, |e| matches!(e, Event::Flushed(f) if !f.condensed.is_empty()));
            let retired = count(&h, |e| matches!(e, Event::SummaryRetired(_)));
            let over = h.calls.iter().filter(|c| c.view_tokens > 20_000).count();
            eprintln!(
                "cache_aware {cache_aware} {host:?}: condensing flushes {condensed}, retired {retired}, over {over}"
            );
            match host {
                Host::Condenses => assert!(condensed > 0 && retired == 0, "{condensed} {retired}"),
                Host::DeclinesCondensing => assert!(condensed == 0 && retired > 0, "{condensed} {retired}"),
                Host::None => assert!(h.session.state().summaries().is_empty()),
            }
            if cache_aware {
                let deferred = h.live_timeline.iter().filter(|r| r.deferred.is_some()).count();
                assert!(deferred > 0, "no call deferred by a warm cache");
            }
            h.assert_verified();
        }
    }
}

#[test]
fn a_retired_summary_says_why_and_its_messages_stay_restorable() {
    let lines = session_lines(5, 300);
    let mut h = drive(&lines, Config { budget: 20_000, ..Config::default() }, Host::DeclinesCondensing);
    let retired = h
        .calls
        .iter()
        .flat_map(|c| &c.events)
        .find_map(|e| match e {
            Event::SummaryRetired(r) => Some(r.clone()),
            _ => None,
        })
        .expect("nothing retired");
    assert!(retired.reason.contains("over their share") && retired.reason.contains("restorable"), "{}", retired.reason);
    // A message the retired summary covered comes back on request.
    let seq = (retired.from..retired.to).find(|&s| h.session.state().hidden_by_flush(s)).unwrap();
    h.session.restore(seq, "test", "need it back").unwrap();
    assert!(h.session.state().in_view(seq));
    h.call();
    h.assert_verified();
}

// ---------------------------------------------------------------------------------------------
// The breaker regression: once tripped, the view used to grow by every new message forever.

#[test]
fn a_tripped_breaker_then_500_more_messages_stays_within_budget_and_one_turn() {
    // Given a 10,000 budget and a 60,000-char last human message (a floor over the budget),
    // eleven calls trip the breaker.
    let mut h = Harness::new(WireFormat::OpenAi, config(10_000, 0.8, 0.5));
    let w = h.wire;
    h.append(vec![w.system("You are helpful."), w.user("PROJECT PATH IS ~/Desktop/ora")]);
    h.append(vec![w.assistant("ok"), w.user(&"big ".repeat(15_000))]);
    for _ in 0..11 {
        h.call();
    }
    assert!(h.calls.iter().any(|c| c.guards().contains(&GuardKind::BreakerTripped)), "the breaker did not trip");
    // When 500 more messages arrive (a tool turn of ~600 tokens and a short human message at a
    // time), then every served view stays within the budget plus one turn.
    let mut max = 0;
    for i in 0..125 {
        let id = format!("t{i}");
        h.append(vec![w.calls("", &[&id], "read_file"), w.result(&id, &"r".repeat(2_400))]);
        h.append(vec![w.assistant(&format!("read file {i}")), w.user(&format!("next {i}"))]);
        let c = h.call().clone();
        let turn: u64 =
            (4 * i as u64 + 4..4 * i as u64 + 8).map(|s| u64::from(h.session.state().entry(s).unwrap().tokens)).sum();
        assert!(c.view_tokens <= 10_000 + turn, "call {}: {} tokens", c.call, c.view_tokens);
        max = max.max(c.view_tokens);
    }
    assert_eq!(h.session.state().message_count(), 4 + 500);
    assert!(max <= 10_000, "the view went over the budget: {max}");
    assert_eq!(h.session.state().breaker_count(), 0, "the breaker never re-armed");
    h.assert_verified();
}

#[test]
fn without_a_summarizer_old_human_messages_leave_last_so_the_floor_does_not_grow() {
    // Given no summarizer and 1,200 turns of a short human message (under the stub minimum,
    // so level 8 cannot shrink it) and a short answer: ~24,000 tokens of human words against a
    // 10,000 budget, the floor of a ladder that never removes them.
    let mut cfg = config(10_000, 0.8, 0.5);
    cfg.summarizer = SummarizerKind::None;
    let mut h = Harness::new(WireFormat::Anthropic, cfg);
    let w = h.wire;
    h.append(vec![w.system("You are helpful."), w.user("PROJECT PATH IS ~/Desktop/ora")]);
    let mut max = 0;
    for i in 0..1_200 {
        h.append(vec![
            w.assistant(&format!("done step {i}")),
            w.user(&format!("now do step {} of the plan, please", i + 1)),
        ]);
        max = max.max(h.call().view_tokens);
    }
    // Then every view stays within the budget; the old human messages went at level 9, oldest
    // first, with the reason recorded; the first and the last stay.
    assert!(max <= 10_000, "a view went over the budget: {max}");
    let st = h.session.state();
    let removed_humans = (0..st.message_count())
        .filter(|&s| st.entry(s).is_some_and(|e| e.is_human() && e.edit.is_some_and(|x| x.kind == EditKind::Removed)))
        .count();
    assert!(removed_humans > 300, "only {removed_humans} human messages removed");
    let first = st.first_human().unwrap();
    assert!(st.in_view(first) && st.entry(first).unwrap().edit.is_none());
    assert!(st.in_view(st.message_count() - 1), "the last human message left the view");
    let level9 =
        h.calls.iter().flat_map(|c| &c.events).any(
            |e| matches!(e, Event::Edited(x) if x.reason.level == 9 && x.reason.rule.contains("no recent window")),
        );
    assert!(level9, "no level-9 removal recorded");
    assert!(!h.calls.iter().any(|c| c.guards().contains(&GuardKind::BreakerTripped)), "the breaker tripped");
    h.assert_verified();
}

// ---------------------------------------------------------------------------------------------
// Replay and verify of a long session on every backend.

#[test]
fn a_long_session_replays_and_verifies_identically_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.jsonl");
    std::fs::write(&path, generate(3, 1_300)).unwrap();
    let path = path.to_str().unwrap();
    let stores = [
        "mem:".to_owned(),
        format!("sqlite:{}", dir.path().join("x.db").display()),
        format!("fs:{}", dir.path().join("fs").display()),
        format!("sled:{}", dir.path().join("sled").display()),
    ];
    // The default budget (131,104 as in the issue's sessions), cache-aware.
    let flags = ["--budget", "131104", "--cache-aware", "--session", "00000000-0000-0000-0000-0000000010a6"];
    let mut first: Option<String> = None;
    for store in &stores {
        let mut args = vec!["import", path, "--json", "--store", store.as_str()];
        args.extend_from_slice(&flags);
        let (code, out, err) = cli(&args);
        assert_eq!(code, 0, "import into {store}: {err}");
        let records: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert!(records.last().unwrap()["messages"].as_u64().unwrap() > 2_500);
        assert!(records.iter().any(|r| r["flush"]["condensed"].as_u64().unwrap_or(0) > 0), "nothing condensed");
        assert!(records.iter().all(|r| r["view_tokens"].as_u64().unwrap() <= 131_104));
        match &first {
            None => first = Some(out.clone()),
            Some(f) => assert_eq!(&out, f, "{store}: the timeline differs from mem:"),
        }
        if store == "mem:" {
            continue;
        }
        let (code, replayed, err) = cli(&["replay", "--json", "--store", store]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(replayed, out, "replay of {store} differs from its import");
        let (code, report, err) = cli(&["verify", "--store", store]);
        assert_eq!(code, 0, "verify {store}: {report}{err}");
    }
}

// ---------------------------------------------------------------------------------------------
// The knobs, from the command line and from a config file.

#[test]
fn the_new_knobs_are_validated_and_read_from_flags_and_config_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, generate(2, 30)).unwrap();
    let path = path.to_str().unwrap();
    for (flags, knob) in [
        (vec!["--summary-share", "0"], "summary-share"),
        (vec!["--summary-share", "1.5"], "summary-share"),
        (vec!["--hard-limit", "0.5"], "hard-limit"),
        (vec!["--hard-limit", "1.2"], "hard-limit"),
    ] {
        let mut args = vec!["import", path, "--store", "mem:"];
        args.extend_from_slice(&flags);
        let (code, _, err) = cli(&args);
        assert_ne!(code, 0, "{flags:?} accepted");
        assert!(err.contains(knob), "{flags:?}: {err}");
    }
    let toml = dir.path().join("c.toml");
    std::fs::write(
        &toml,
        "budget = 20000\ncache-aware = true\nsummary-share = 0.1\nhard-limit = 0.9\nclear-at-least = 500\n",
    )
    .unwrap();
    let store = format!("sqlite:{}", dir.path().join("x.db").display());
    let (code, _, err) = cli(&["import", path, "--store", &store, "--config", toml.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&["replay", "--json", "--store", &store]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.is_empty());
    let store = ctxlog_store_sqlite::SqliteStore::open(dir.path().join("x.db")).unwrap();
    let id = ctxlog::Store::streams(&store).unwrap()[0];
    let state = ctxlog::replay::replay(&store, id, ctxlog::replay::Mode::Strict, None).unwrap().state;
    let c = &state.info().unwrap().config;
    assert_eq!((c.summary_share, c.hard_limit_ratio, c.clear_at_least, c.budget), (0.1, 0.9, 500, 20_000));
    assert!(c.cache_aware);
    // Cache-aware is the default (issue 21); the legacy gate is asked for by a flag, by
    // `--cache-aware=false` or by the config file, and a flag wins over the file.
    std::fs::write(&toml, "cache-aware = false\n").unwrap();
    let n = std::cell::Cell::new(0);
    let gate = |extra: &[&str]| {
        n.set(n.get() + 1);
        let db = dir.path().join(format!("gate{}.db", n.get()));
        let url = format!("sqlite:{}", db.display());
        let mut args = vec!["import", path, "--store", &url];
        args.extend_from_slice(extra);
        let (code, _, err) = cli(&args);
        assert_eq!(code, 0, "{extra:?}: {err}");
        let store = ctxlog_store_sqlite::SqliteStore::open(&db).unwrap();
        let id = ctxlog::Store::streams(&store).unwrap()[0];
        let state = ctxlog::replay::replay(&store, id, ctxlog::replay::Mode::Strict, None).unwrap().state;
        state.info().unwrap().config.cache_aware
    };
    assert!(gate(&[]));
    assert!(gate(&["--cache-aware"]));
    assert!(!gate(&["--no-cache-aware"]));
    assert!(!gate(&["--cache-aware=false"]));
    let file = toml.to_str().unwrap();
    assert!(!gate(&["--config", file]));
    assert!(gate(&["--config", file, "--cache-aware"]));
    let (code, _, err) = cli(&["import", path, "--store", "mem:", "--cache-aware", "--no-cache-aware"]);
    assert_ne!(code, 0, "both gates accepted");
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn condensed_summaries_are_bounded_and_keep_the_newest_requests() {
    // Each condensed summary fits its limit (a quarter of the share) however much it covers,
    // is much smaller than the summaries it replaces, and keeps the user's latest requests.
    let lines = session_lines(8, 600);
    let cfg = Config { budget: 20_000, ..Config::default() };
    let cap = cfg.summary_cap_tokens();
    let h = drive(&lines, cfg, Host::Condenses);
    let st = h.session.state();
    // A summary condensed again leaves memory with its text: read them from the log.
    let mut condensed = Vec::new();
    ctxlog::replay::for_each_event(h.store.as_ref(), h.session.id(), 1, None, |_, ev| {
        match ev {
            Event::SummaryPrepared(s) if s.is_condensed() => condensed.push(s),
            _ => {}
        }
        Ok(())
    })
    .unwrap();
    let in_memory = st.summaries().iter().filter(|s| s.is_condensed()).count();
    assert_eq!(in_memory, condensed.len(), "the state keeps every condensed summary's numbers");
    assert!(condensed.len() >= 3, "only {} condensed summaries", condensed.len());
    for s in &condensed {
        assert!(u64::from(s.tokens) <= cap / 4, "{} tokens over {}", s.tokens, cap / 4);
        assert!(u64::from(s.tokens) * 2 <= s.replaced_tokens, "{} of {}", s.tokens, s.replaced_tokens);
        assert!(s.text.starts_with("Condensed summary of messages"), "{}", s.text);
    }
    // The last condensed summary covers most of the session and names its newest request.
    let last = condensed.last().unwrap();
    let newest = (last.from..last.to)
        .rev()
        .find(|&seq| st.entry(seq).unwrap().is_human() && Some(seq) != st.first_human())
        .unwrap();
    assert!(last.text.contains(&format!("- [{newest}] user:")), "request {newest} missing:\n{}", last.text);
}

/// Found by fuzzing: on a 300-token budget the engine kept offering a job that condensed one
/// summary into one summary, whose wrapping alone was over the share, and a host that runs
/// jobs until none is left never returned. On tiny budgets the jobs end (`prepare` panics
/// otherwise) and every call still verifies.
#[test]
fn summary_jobs_end_between_calls_on_tiny_budgets() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/condense-loop.jsonl");
    let found =
        read(std::io::BufReader::new(std::fs::File::open(fixture).unwrap()), Path::new(fixture), FormatArg::Anthropic)
            .unwrap();
    let found: Vec<_> = found.lines.into_iter().map(|l| (l.message, None)).collect();
    let generated = session_lines(3, 120);
    for budget in [300, 500, 1_000, 2_000, 4_000] {
        for lines in [&found, &generated] {
            let cfg = Config { budget, ..Config::default() };
            let mut h = Harness::new(WireFormat::Anthropic, cfg);
            let mut pending = Vec::new();
            for (m, at) in lines {
                if m.role == Role::Assistant {
                    h.append(std::mem::take(&mut pending));
                    if let Some(at) = at {
                        h.now = h.now.max(*at);
                    }
                    h.call();
                    prepare(&mut h, Host::Condenses);
                }
                pending.push(m.clone());
            }
            h.assert_verified();
        }
    }
}
