//! Finding sessions with the CLI: `sessions` lists each one's calls, times, model, name, first
//! user message and lineage; `--session` takes a full id, a unique prefix, `latest` or the name a
//! client gave it, and refuses an ambiguous one listing the candidates; a guard raised between
//! calls (`history_diverged`) and the lineage show in `replay`, `report`, `why`, `inspect` and
//! `tail`.
//!
//! The store is written through the core API exactly as `ctxlog proxy` writes it (a named session,
//! a divergence to a successor of the same name, the successor's calls), with fixed ids and times.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use ctxlog::event::GuardKind;
use ctxlog::{parse_message, Config, RequestOptions, Session, StreamId, Timestamp, WireFormat};
use ctxlog_store_sqlite::SqliteStore;
use ctxlog_tests::scenario::cli;
use serde_json::Value;

/// The first conversation, named `agent-7` by its client.
const FIRST: &str = "5e551000-0000-4000-8000-00000000000a";
/// Its successor after the client rewrote its history (same name, same id prefix as FIRST).
const SECOND: &str = "5e551000-0000-4000-8000-00000000000b";
/// An unnamed session whose id prefix is unique.
const OTHER: &str = "c0ffee00-0000-4000-8000-00000000000c";
const T0: u64 = 1_780_000_000_000;

fn msg(role: &str, text: &str) -> ctxlog::Message {
    parse_message(&serde_json::json!({"role": role, "content": text}).to_string()).unwrap()
}

/// One call at `at_ms`: plan, then commit with the model recorded.
fn call(s: &mut Session<&SqliteStore>, model: &str, at_ms: u64) {
    let plan = s.plan(Timestamp::from_millis(at_ms)).unwrap();
    let opts = RequestOptions::new().model(model).max_tokens(1_024);
    s.commit_request(plan, &opts, Timestamp::from_millis(at_ms + 800), None).unwrap();
}

struct Fixture {
    _dir: tempfile::TempDir,
    url: String,
}

impl Fixture {
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let mut all = args.to_vec();
        all.extend(["--store", &self.url]);
        cli(&all)
    }
    fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    }
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctxlog.db");
    let store = SqliteStore::open(&path).unwrap();
    let config = Config { budget: 50_000, ..Config::default() };
    let (first, second, other) = (FIRST.parse().unwrap(), SECOND.parse::<StreamId>().unwrap(), OTHER.parse().unwrap());
    let sys = msg("system", "You are a coding agent working in ~/src/ora.");
    let ask = msg("user", "Fix the login bug in auth.rs:   the session cookie\nexpires too early.");
    let name = Some("agent-7".to_owned());
    let start = |id, at, name: Option<String>, messages| {
        Session::create_named(
            &store,
            id,
            WireFormat::OpenAi,
            config.clone(),
            Timestamp::from_millis(at),
            name,
            messages,
        )
        .unwrap()
        .0
    };
    // agent-7: two calls, then the client sends a history that differs from message 2 on.
    let mut a = start(first, T0, name.clone(), vec![sys.clone(), ask.clone()]);
    call(&mut a, "gpt-4.1", T0);
    a.append(vec![msg("assistant", "Looking at auth.rs."), msg("user", "Go on.")]).unwrap();
    call(&mut a, "gpt-4.1", T0 + 30_000);
    // What the proxy does on a divergence: the successor first, then the guard on the old one.
    let edited = vec![sys, ask.clone(), msg("assistant", "Let me read the cookie code."), msg("user", "Go on.")];
    let mut b = start(second, T0 + 60_000, name, edited);
    a.raise_guard(
        GuardKind::HistoryDiverged { seq: 2, successor: SECOND.into() },
        format!(
            "the client's history (4 messages) differs from the log (4 messages) from message 2 on; the \
             conversation continues in session {SECOND}"
        ),
        "x-ctxlog-session",
    )
    .unwrap();
    call(&mut b, "gpt-4.1-mini", T0 + 60_000);
    b.append(vec![msg("assistant", "Fixed."), msg("user", "Thanks, now the tests.")]).unwrap();
    call(&mut b, "gpt-4.1-mini", T0 + 120_000);
    // An unnamed session, last active before agent-7's successor.
    let mut c = start(other, T0 + 5_000, None, vec![msg("user", "Summarize the changelog.")]);
    call(&mut c, "claude-sonnet-4-5", T0 + 5_000);
    drop(store);
    Fixture { url: format!("sqlite:{}", path.display()), _dir: dir }
}

fn listed(f: &Fixture) -> Vec<Value> {
    serde_json::from_str::<Value>(f.ok(&["sessions", "--json"]).trim()).unwrap().as_array().unwrap().clone()
}

fn by_id<'a>(list: &'a [Value], id: &str) -> &'a Value {
    list.iter().find(|s| s["session"] == id).unwrap_or_else(|| panic!("{id} not listed: {list:?}"))
}

#[test]
fn sessions_lists_times_model_calls_first_message_name_and_lineage() {
    let f = fixture();
    let list = listed(&f);
    assert_eq!(list.len(), 3);
    let a = by_id(&list, FIRST);
    assert_eq!(a["calls"], 2);
    assert_eq!(a["messages"], 4);
    assert_eq!(a["name"], "agent-7");
    assert_eq!(a["model"], "gpt-4.1");
    assert_eq!(a["first_call"], ctxlog::time::format_rfc3339(T0 + 800));
    assert_eq!(a["last_call"], ctxlog::time::format_rfc3339(T0 + 30_800));
    // Whitespace collapsed, cut at 60 characters.
    assert_eq!(a["first_user_message"], "Fix the login bug in auth.rs: the session cookie expires too…");
    assert_eq!(
        a["lineage"],
        serde_json::json!([{"relation": "successor", "session": SECOND, "kind": "diverged", "at": 2}])
    );
    let b = by_id(&list, SECOND);
    assert_eq!((b["calls"].as_u64(), b["messages"].as_u64()), (Some(2), Some(6)));
    assert_eq!(b["model"], "gpt-4.1-mini");
    assert_eq!(b["name"], "agent-7", "a successor keeps its conversation's name");
    assert_eq!(
        b["lineage"],
        serde_json::json!([{"relation": "predecessor", "session": FIRST, "kind": "diverged", "at": 2}])
    );
    let c = by_id(&list, OTHER);
    assert_eq!((c["name"].clone(), c["lineage"].clone()), (Value::Null, serde_json::json!([])));
    assert_eq!(c["first_user_message"], "Summarize the changelog.");
    insta::assert_snapshot!("sessions_table", f.ok(&["sessions"]));
}

#[test]
fn every_form_of_session_selects_the_same_session() {
    let f = fixture();
    let calls_of = |sel: &str| -> String {
        let out = f.ok(&["replay", "--json", "--session", sel]);
        let first: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        format!("{} calls, first at {}", out.lines().count(), first["at"])
    };
    let second = calls_of(SECOND);
    // The full id in either case; the name (its current session: the end of the chain);
    // `latest` (the most recent call is the successor's second).
    for sel in ["5E551000-0000-4000-8000-00000000000B", "agent-7", "latest"] {
        assert_eq!(calls_of(sel), second, "--session {sel}");
    }
    // A unique prefix, in either case, with or without its dashes' part.
    for sel in ["c0f", "C0FFEE00-00", "c"] {
        assert_eq!(calls_of(sel), calls_of(OTHER), "--session {sel}");
    }
    assert_ne!(calls_of(FIRST), second);
    // Every command that takes a session takes them all.
    for args in [
        vec!["inspect", "--session", "agent-7"],
        vec!["why", "--seq", "0", "--session", "latest"],
        vec!["export", "--session", "c0ffee"],
        vec!["tail", "--session", "agent-7"],
        vec!["verify", "--session", "agent-7"],
        vec!["request", "--call", "0", "--session", "c0f"],
        vec!["diff", "agent-7", "c0f"],
    ] {
        let (code, out, err) = f.run(&args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
    }
    assert!(f.ok(&["verify", "--session", "latest"]).contains(SECOND));
}

#[test]
fn an_ambiguous_or_unknown_session_is_refused_with_the_candidates() {
    let f = fixture();
    let (code, _, err) = f.run(&["replay", "--session", "5e551"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("2 sessions have ids starting with \"5e551\""), "{err}");
    for id in [FIRST, SECOND] {
        assert!(err.contains(id), "the candidate {id} is listed: {err}");
    }
    assert!(err.contains("name \"agent-7\"") && err.contains("Fix the login bug"), "{err}");
    assert!(!err.contains(OTHER), "{err}");
    let (code, _, err) = f.run(&["why", "--seq", "0", "--session", "agent-8"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("\"agent-8\" names no session") && err.contains("ctxlog sessions"), "{err}");
    // As JSON, the error names the flag.
    let (code, _, err) = f.run(&["replay", "--json", "--session", "5e551"]);
    let v: Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!((code, v["field"].as_str()), (2, Some("--session")), "{err}");
}

#[test]
fn two_conversations_with_one_name_are_ambiguous() {
    let f = fixture();
    // A second tenant names its conversation agent-7 too: two chains end under that name.
    let store = SqliteStore::open(f.url.trim_start_matches("sqlite:")).unwrap();
    let id: StreamId = "0d0d0d0d-0000-4000-8000-00000000000d".parse().unwrap();
    let config = Config { budget: 50_000, ..Config::default() };
    let at = Timestamp::from_millis(T0 + 200_000);
    Session::create_named(&store, id, WireFormat::OpenAi, config, at, Some("agent-7".into()), vec![msg("user", "Hi")])
        .unwrap();
    drop(store);
    let (code, _, err) = f.run(&["replay", "--session", "agent-7"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("2 sessions are named \"agent-7\""), "{err}");
    assert!(err.contains(SECOND) && err.contains("0d0d0d0d") && !err.contains(FIRST), "{err}");
    // `latest` is now the new session (created last, no call yet).
    assert!(f.ok(&["inspect", "--session", "latest"]).contains("0d0d0d0d-0000-4000-8000-00000000000d"));
}

#[test]
fn a_divergence_shows_in_replay_report_why_inspect_and_tail() {
    let f = fixture();
    let replay = f.ok(&["replay", "--session", FIRST]);
    insta::assert_snapshot!("replay_diverged", replay);
    assert!(replay.contains("guard history_diverged (after call 1, version"), "{replay}");
    assert!(replay.contains(&format!("lineage: this session continues in session {SECOND}")), "{replay}");
    assert!(replay.contains("2 calls, 1 guard,"), "{replay}");
    // JSON: still one line per call; the guard rides on the call it follows.
    let lines: Vec<Value> =
        f.ok(&["replay", "--json", "--session", FIRST]).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["guards_after"][0]["kind"], "history_diverged");
    assert!(lines[0].get("guards_after").is_none());
    // The successor names where it came from.
    let replay_b = f.ok(&["replay", "--session", SECOND]);
    assert!(replay_b.contains(&format!("lineage: this session continued from session {FIRST}")), "{replay_b}");

    // The report counts the guard (it said "guards raised: 0") and shows it with call 1.
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    f.ok(&["report", "--session", FIRST, "--out", html.to_str().unwrap()]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("guards raised: 1 (1 between calls)"), "report summary");
    assert!(page.contains("<td>history_diverged</td>"), "the guard in call 1's row");
    assert!(page.contains(&format!("Lineage: this session continues in session {SECOND}")));

    let why = f.ok(&["why", "--seq", "3", "--session", FIRST]);
    insta::assert_snapshot!("why_diverged", why);
    assert!(why.contains("After call 1 guard history_diverged was raised"), "{why}");
    let why_json: Value = serde_json::from_str(&f.ok(&["why", "--seq", "3", "--json", "--session", FIRST])).unwrap();
    assert_eq!(why_json["lineage"][0]["session"], SECOND);
    assert_eq!(why_json["text"].as_str().unwrap(), why.trim_end());
    let why_b = f.ok(&["why", "--seq", "2", "--session", "agent-7"]);
    assert!(why_b.contains(&format!("This session continued from session {FIRST}")), "{why_b}");

    let inspect = f.ok(&["inspect", "--session", FIRST]);
    assert!(
        inspect.contains("guard history_diverged") && inspect.contains("lineage: this session continues"),
        "{inspect}"
    );

    let tail = f.ok(&["tail", "--session", FIRST]);
    assert!(tail.contains("guard history_diverged (after call 1"), "{tail}");
    let tail_json = f.ok(&["tail", "--json", "--session", FIRST]);
    let last: Value = serde_json::from_str(tail_json.lines().last().unwrap()).unwrap();
    assert_eq!(last["guard_between_calls"]["kind"], "history_diverged", "{tail_json}");
    // `-n 1` keeps the last call and the guard after it.
    let one = f.ok(&["tail", "-n", "1", "--session", FIRST]);
    assert_eq!(one.lines().filter(|l| l.contains("history_diverged")).count(), 1, "{one}");
}

#[test]
fn the_listing_reads_only_the_ends_of_each_log() {
    // A session whose log is long in the middle lists the same as a fold would say.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.db");
    let store = SqliteStore::open(&path).unwrap();
    let id = StreamId::random();
    let config = Config { budget: 1_000_000, ..Config::default() };
    let mut s = Session::create_named(
        &store,
        id,
        WireFormat::Anthropic,
        config,
        Timestamp::from_millis(T0),
        None,
        vec![msg("user", "start")],
    )
    .unwrap()
    .0;
    for i in 0..300u64 {
        call(&mut s, "m", T0 + i * 1_000);
        s.append(vec![msg("assistant", &format!("step {i}")), msg("user", "next")]).unwrap();
    }
    let state = s.state().clone();
    drop(s);
    drop(store);
    let url = format!("sqlite:{}", path.display());
    let (code, out, err) = cli(&["sessions", "--json", "--store", &url]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v[0]["calls"].as_u64(), Some(state.calls()));
    assert_eq!(v[0]["messages"].as_u64(), Some(state.message_count()));
    assert_eq!(v[0]["events"].as_u64(), Some(state.version()));
    assert_eq!(v[0]["last_call"], ctxlog::time::format_rfc3339(T0 + 299_000 + 800));
}

#[test]
fn a_name_is_only_recorded_right_after_session_started() {
    let store = ctxlog::MemoryStore::new();
    let id = StreamId::random();
    let at = Timestamp::from_millis(T0);
    let config = Config::default();
    Session::create_named(&store, id, WireFormat::OpenAi, config, at, Some("n".into()), vec![msg("user", "hi")])
        .unwrap();
    let mut state = ctxlog::State::new();
    let mut events = Vec::new();
    ctxlog::replay::for_each_event(&store, id, 1, None, |v, ev| {
        state.apply(v, &ev).unwrap();
        events.push(ev);
        Ok(())
    })
    .unwrap();
    assert!(matches!(&events[1], ctxlog::Event::SessionNamed(n) if n.name == "n"));
    // Anywhere else the fold refuses it (readers look for it at version 2 only).
    let again = ctxlog::Event::SessionNamed(ctxlog::event::SessionNamed { name: "m".into() });
    let refused = state.apply(state.version() + 1, &again).unwrap_err();
    assert_eq!(refused.invariant, ctxlog::state::Invariant::SessionStart, "{refused}");
}

#[test]
fn a_session_without_calls_counts_all_its_messages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nocall.db");
    let store = SqliteStore::open(&path).unwrap();
    let id = StreamId::random();
    let at = Timestamp::from_millis(T0);
    let (mut s, _) =
        Session::create_named(&store, id, WireFormat::OpenAi, Config::default(), at, None, vec![msg("user", "a")])
            .unwrap();
    for i in 0..40 {
        s.append(vec![msg("assistant", &format!("r{i}")), msg("user", &format!("u{i}"))]).unwrap();
    }
    drop(s);
    drop(store);
    let (code, out, err) = cli(&["sessions", "--json", "--store", &format!("sqlite:{}", path.display())]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((v[0]["messages"].as_u64(), v[0]["calls"].as_u64()), (Some(81), Some(0)));
    assert_eq!((v[0]["first_call"].clone(), v[0]["last_call"].clone()), (Value::Null, Value::Null));
}

/// Branches of branches, each after calls of its own (an undo, then another): every
/// session's `Branched` lies between the calls its log copied from its parent and its own,
/// where neither end of the log is read. Each is listed with its parent as predecessor and
/// its own branches as successors, and none with the ancestors' copied `Branched` records.
#[test]
fn branches_after_calls_are_listed_with_their_parent_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctxlog.db");
    let store = SqliteStore::open(&path).unwrap();
    let ids: Vec<StreamId> =
        (0..3).map(|i| format!("b4a7c400-0000-4000-8000-00000000000{i}").parse().unwrap()).collect();
    let (mut root, _) = Session::create_with(
        &store,
        ids[0],
        WireFormat::OpenAi,
        Config { budget: 50_000, ..Config::default() },
        Timestamp::from_millis(T0),
        vec![msg("user", "Fix the login bug.")],
    )
    .unwrap();
    let mut t = T0;
    let turn = |s: &mut Session<&SqliteStore>, t: &mut u64| {
        call(s, "gpt-4.1", *t);
        s.append(vec![msg("assistant", "Done."), msg("user", &format!("Next, at {t}."))]).unwrap();
        *t += 1_000;
    };
    for _ in 0..3 {
        turn(&mut root, &mut t);
    }
    // Undo the last question twice over, each branch calling a few times before the next.
    let (mut one, _) =
        root.branch(ids[1], 5, Timestamp::from_millis(t), vec![msg("user", "Instead: the tests.")]).unwrap();
    for _ in 0..3 {
        turn(&mut one, &mut t);
    }
    let (mut two, _) = one.branch(ids[2], 9, Timestamp::from_millis(t), vec![msg("user", "No: the docs.")]).unwrap();
    turn(&mut two, &mut t);
    drop((root, one, two));
    drop(store);
    let f = Fixture { url: format!("sqlite:{}", path.display()), _dir: dir };
    let list = listed(&f);
    let edges = |id: StreamId| {
        let mut e: Vec<(String, String)> = by_id(&list, &id.to_string())["lineage"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| (l["relation"].as_str().unwrap().to_owned(), l["session"].as_str().unwrap().to_owned()))
            .collect();
        e.sort();
        e
    };
    let s = |i: usize| ids[i].to_string();
    assert_eq!(edges(ids[0]), vec![("successor".into(), s(1))]);
    assert_eq!(edges(ids[1]), vec![("predecessor".into(), s(0)), ("successor".into(), s(2))]);
    assert_eq!(edges(ids[2]), vec![("predecessor".into(), s(1))]);
    // `replay` of the deepest branch tells the same lineage (its log holds all three `Branched`).
    let replay = f.ok(&["replay", "--session", &s(2)]);
    assert!(replay.contains(&s(1)) && !replay.contains(&s(0)), "{replay}");
}
