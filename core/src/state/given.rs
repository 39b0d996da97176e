//! Given/when/then for the sub-folds' unit tests (cqrs-es style; `tests/src/scenario.rs` is the
//! same for the workspace's tests): `given` is folded strictly with versions `1..=n` and must be
//! valid, `when` is applied at `n + 1` (or [`When::at_version`]).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use uuid::Uuid;

use super::{Invariant, State, Violation};
use crate::config::Config;
use crate::event::{
    AnswerReceived, EditKind, EditReason, Edited, Event, FlushReason, Flushed, GuardKind, GuardRaised, LimitLearned,
    MessageAppended, RequestServed, SessionNamed, SessionStarted, SummaryFailed, SummaryFailure, SummaryMode,
    SummaryPrepared, SummaryRetired,
};
use crate::message::Message;
use crate::store::Version;
use crate::time::Millis;
use crate::wire::{parse_message, WireFormat};

/// 2026-01-01T00:00:00Z.
pub(crate) const T0: Millis = 1_767_225_600_000;

pub(crate) struct Given(Vec<Event>);

pub(crate) struct When {
    state: State,
    given: Vec<Event>,
    version: Version,
    event: Event,
}

pub(crate) fn given(events: Vec<Event>) -> Given {
    Given(events)
}

impl Given {
    pub(crate) fn when(self, event: Event) -> When {
        let state = fold(&self.0);
        let version = state.version() + 1;
        When { state, given: self.0, version, event }
    }
}

impl When {
    pub(crate) fn at_version(mut self, version: Version) -> When {
        self.version = version;
        self
    }

    fn run(mut self) -> (State, Result<(), Violation>) {
        hydrate_from(&mut self.state, &self.given, &self.event);
        let r = self.state.apply(self.version, &self.event);
        (self.state, r)
    }

    #[track_caller]
    pub(crate) fn then_ok(self) -> State {
        let name = self.event.name();
        let (state, r) = self.run();
        if let Err(v) = r {
            panic!("expected {name} to be accepted, got: {v}");
        }
        state
    }

    #[track_caller]
    pub(crate) fn then_violates(self, invariant: Invariant) -> Violation {
        let (name, version) = (self.event.name(), self.version);
        match self.run().1 {
            Ok(()) => panic!("expected {name} to break {invariant}, but it was accepted"),
            Err(v) => {
                assert_eq!((v.invariant, v.version, v.event), (invariant, version, name), "{v}");
                v
            }
        }
    }
}

/// Folds `events` strictly with versions `1..=n`; panics on the first violation.
#[track_caller]
pub(crate) fn fold(events: &[Event]) -> State {
    let mut state = State::new();
    for (i, ev) in events.iter().enumerate() {
        hydrate_from(&mut state, events.get(..i).unwrap_or_default(), ev);
        if let Err(v) = state.apply(i as Version + 1, ev) {
            panic!("`given` is not a valid history: {v}");
        }
    }
    state
}

/// Hands `state` the messages `ev` needs from the appends in `history`, as a session does.
fn hydrate_from(state: &mut State, history: &[Event], ev: &Event) {
    for seq in state.bodies_needed(ev) {
        let appended = history.iter().find_map(|h| match h {
            Event::MessageAppended(m) if m.seq == seq => Some(m.message.clone()),
            _ => None,
        });
        if let Some(m) = appended {
            state.hydrate(seq, Arc::new(m));
        }
    }
}

pub(crate) fn started() -> Event {
    let config = Config::default();
    let session = Uuid::from_u128(0x5ce0_a210);
    Event::SessionStarted(SessionStarted { session, format: WireFormat::Anthropic, config, at: T0, import: None })
}

pub(crate) fn message(seq: u64, json: &str) -> Event {
    let message: Message = parse_message(json).unwrap();
    let tokens = Config::default().estimator().message(&message);
    Event::MessageAppended(MessageAppended { seq, message, tokens })
}

pub(crate) fn user(seq: u64, text: &str) -> Event {
    message(seq, &format!(r#"{{"role":"user","content":{}}}"#, serde_json::Value::from(text)))
}

pub(crate) fn assistant(seq: u64, text: &str) -> Event {
    message(seq, &format!(r#"{{"role":"assistant","content":{}}}"#, serde_json::Value::from(text)))
}

/// Seqs: 0 system, 1 user, 2 tool_use(t1), 3 tool_result(t1), 4 assistant, 5 user.
pub(crate) fn conversation() -> Vec<Event> {
    vec![
        started(),
        message(0, r#"{"role":"system","content":"You are a coding agent."}"#),
        user(1, "Please read src/lib.rs and explain it."),
        message(
            2,
            r#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"read_file","input":{"path":"src/lib.rs"}}]}"#,
        ),
        message(
            3,
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"fn main() {}\n// a long output of the tool, cut when truncated"}]}"#,
        ),
        assistant(4, "It defines main."),
        user(5, "Thanks. Now what about tests?"),
    ]
}

pub(crate) fn conversation_then(extra: Vec<Event>) -> Vec<Event> {
    let mut v = conversation();
    v.extend(extra);
    v
}

pub(crate) fn named(name: &str) -> Event {
    Event::SessionNamed(SessionNamed { name: name.to_owned() })
}

pub(crate) fn limit_learned(budget: u64) -> Event {
    Event::LimitLearned(LimitLearned { call: 0, model: None, limit: budget, budget })
}

pub(crate) fn summary_prepared(from: u64, to: u64) -> Event {
    Event::SummaryPrepared(SummaryPrepared {
        from,
        to,
        text: format!("summary of messages {from}..{to}"),
        tokens: 10,
        replaced_tokens: 100,
        mode_requested: SummaryMode::Extractive,
        mode_used: SummaryMode::Extractive,
        refusal: None,
        merged: Vec::new(),
        prefix_call: None,
        usage: None,
        latency_ms: None,
    })
}

pub(crate) fn summary_failed(from: u64, to: u64, rejected: bool) -> Event {
    let reason = match rejected {
        true => SummaryFailure::Rejected { status: 400, detail: "bad request".into() },
        false => SummaryFailure::Timeout,
    };
    Event::SummaryFailed(SummaryFailed {
        from,
        to,
        merged: Vec::new(),
        mode_requested: SummaryMode::Extractive,
        mode_used: SummaryMode::Extractive,
        refusal: None,
        prefix_call: None,
        reason,
        usage: None,
        latency_ms: None,
    })
}

pub(crate) fn flushed(from: u64, to: u64) -> Event {
    Event::Flushed(Flushed {
        from,
        to,
        reason: FlushReason::LegacyImmediate,
        cache_age_ms: None,
        tokens_before: 1000,
        tokens_after: 100,
        stubbed: Vec::new(),
        condensed: Vec::new(),
    })
}

pub(crate) fn retired(summary: u32, from: u64, to: u64) -> Event {
    Event::SummaryRetired(SummaryRetired { summary, from, to, tokens: 10, reason: "test".into() })
}

pub(crate) fn edited(seq: u64, kind: EditKind) -> Event {
    let reason = EditReason { level: 3, rule: "test".into(), target_tokens: 100_000, guard: None };
    Event::Edited(Edited { seq, kind, reason })
}

pub(crate) fn removed(seq: u64) -> Event {
    edited(seq, EditKind::Removed)
}

pub(crate) fn restored(seq: u64, partners: Vec<u64>) -> Event {
    Event::Restored(crate::event::Restored { seq, partners, by: "test".into(), why: "given".into() })
}

/// `RequestServed` of call `call`, `at_ms` after [`T0`], that needed no compaction.
pub(crate) fn request_served(call: u64, at_ms: u64) -> Event {
    served_metered(call, at_ms, false, 0)
}

/// `RequestServed` with what the meter said and whether the call needed compaction.
pub(crate) fn served_metered(call: u64, at_ms: u64, needed: bool, metered_tokens: u64) -> Event {
    Event::RequestServed(RequestServed {
        call,
        at: T0 + at_ms,
        digest: String::new(),
        view_messages: 0,
        view_tokens: 0,
        metered_tokens,
        reported_tokens: None,
        level: 0,
        needed,
        prefix_reused: false,
        deferred: None,
        usage: None,
        anchored: false,
        request: None,
    })
}

pub(crate) fn answer(call: u64) -> Event {
    let message = parse_message(r#"{"role":"assistant","content":"done"}"#).unwrap();
    Event::AnswerReceived(AnswerReceived { call, message })
}

pub(crate) fn guard(kind: GuardKind) -> Event {
    Event::GuardRaised(GuardRaised { call: None, kind, detail: "test".into(), knob: "test".into() })
}
