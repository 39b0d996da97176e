//! Given/when/then for the fold (cqrs-es style), plus small event constructors.
//!
//! ```
//! use ctxlog::state::Invariant;
//! use ctxlog_tests::scenario::{removed, started, user, Scenario};
//!
//! Scenario::given(vec![started(), user(0, "hi"), user(1, "again")]).when(removed(1)).then_violates(Invariant::LastUserRemoved);
//! ```
//! `given` is folded with versions `1..=n` (and must be valid: a broken `given` fails the test
//! loudly, so a typo cannot make a violation test pass); `when` is applied at version `n + 1`
//! (or the version set with [`Scenario::at_version`]).

use ctxlog::config::Config;
use ctxlog::event::{
    EditKind, EditReason, Edited, Event, FlushReason, Flushed, MessageAppended, RequestServed, Restored,
    SessionStarted, SummaryMode, SummaryPrepared,
};
use ctxlog::internal::wire::{self, WireFormat};
use ctxlog::message::Message;
use ctxlog::state::{Invariant, State, Violation};
use ctxlog::store::Version;
use ctxlog::time::Millis;
use uuid::Uuid;

/// The session id every scenario uses.
pub const SESSION: Uuid = Uuid::from_u128(0x5ce0_a210);
/// 2026-01-01T00:00:00Z.
pub const T0: Millis = 1_767_225_600_000;

/// A scenario under construction.
#[derive(Debug, Clone)]
pub struct Scenario {
    given: Vec<Event>,
}

/// A scenario with its `when`.
#[derive(Debug, Clone)]
pub struct When {
    state: State,
    given: Vec<Event>,
    version: Version,
    event: Event,
}

impl Scenario {
    /// The history, folded with versions `1..=n`.
    pub fn given(events: Vec<Event>) -> Scenario {
        Scenario { given: events }
    }

    /// The state after `given`; panics (fails the test) if `given` itself breaks an invariant.
    pub fn state(&self) -> State {
        fold(&self.given)
    }

    /// The event under test, applied at version `n + 1`.
    pub fn when(self, event: Event) -> When {
        let state = self.state();
        let version = state.version() + 1;
        When { state, given: self.given, version, event }
    }
}

impl When {
    /// Applies the event at `version` instead of `n + 1`.
    pub fn at_version(mut self, version: Version) -> When {
        self.version = version;
        self
    }

    fn run(&self) -> (State, Result<(), Violation>) {
        let mut state = self.state.clone();
        hydrate_from(&mut state, &self.given, &self.event);
        let r = state.apply(self.version, &self.event);
        (state, r)
    }

    /// The event is accepted; returns the state after it.
    #[track_caller]
    pub fn then_ok(self) -> State {
        let (state, r) = self.run();
        if let Err(v) = r {
            panic!("expected {} to be accepted, got: {v}", self.event.name());
        }
        state
    }

    /// The event is rejected with `invariant`, naming its version and kind; returns the violation.
    #[track_caller]
    pub fn then_violates(self, invariant: Invariant) -> Violation {
        let (_, r) = self.run();
        match r {
            Ok(()) => panic!("expected {} to break {invariant}, but it was accepted", self.event.name()),
            Err(v) => {
                assert_eq!(v.invariant, invariant, "wrong invariant: {v}");
                assert_eq!(v.version, self.version, "the violation names the wrong version: {v}");
                assert_eq!(v.event, self.event.name(), "the violation names the wrong event: {v}");
                assert!(!v.detail.is_empty(), "a violation explains itself");
                v
            }
        }
    }
}

/// Folds `events` strictly with versions `1..=n`; panics on the first violation.
#[track_caller]
pub fn fold(events: &[Event]) -> State {
    let mut state = State::new();
    for (i, ev) in events.iter().enumerate() {
        let version = i as Version + 1;
        hydrate_from(&mut state, events.get(..i).unwrap_or_default(), ev);
        if let Err(v) = state.apply(version, ev) {
            panic!("`given` is not a valid history: {v}");
        }
    }
    state
}

/// Hands `state` the messages `ev` needs (a restore, a second edit) from the appends in
/// `history`, as a session does from its store.
pub fn hydrate_from(state: &mut State, history: &[Event], ev: &Event) {
    for seq in state.bodies_needed(ev) {
        let appended = history.iter().find_map(|h| match h {
            Event::MessageAppended(m) if m.seq == seq => Some(m.message.clone()),
            _ => None,
        });
        if let Some(m) = appended {
            state.hydrate(seq, std::sync::Arc::new(m));
        }
    }
}

/// The config scenarios run with.
pub fn config() -> Config {
    Config::default()
}

/// `SessionStarted` (Anthropic format, default config).
pub fn started() -> Event {
    started_with(WireFormat::Anthropic, config())
}

/// `SessionStarted` with a format and config.
pub fn started_with(format: WireFormat, config: Config) -> Event {
    Event::SessionStarted(SessionStarted { session: SESSION, format, config, at: T0, import: None })
}

/// `MessageAppended` of one wire-format JSON message at `seq`, with its token estimate.
#[track_caller]
pub fn appended(seq: u64, json: &str) -> Event {
    let message = parse(json);
    let tokens = config().estimator().message(&message);
    Event::MessageAppended(MessageAppended { seq, message, tokens })
}

/// Parses one message; panics with the wire error.
#[track_caller]
pub fn parse(json: &str) -> Message {
    match wire::parse_message(json) {
        Ok(m) => m,
        Err(e) => panic!("bad test message {json}: {e}"),
    }
}

fn quote(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// A system message.
pub fn system(seq: u64, text: &str) -> Event {
    appended(seq, &format!(r#"{{"role":"system","content":{}}}"#, quote(text)))
}

/// A human user message.
pub fn user(seq: u64, text: &str) -> Event {
    appended(seq, &format!(r#"{{"role":"user","content":{}}}"#, quote(text)))
}

/// A pinned human user message (`"pinned": true` on the line).
pub fn pinned_user(seq: u64, text: &str) -> Event {
    appended(seq, &format!(r#"{{"role":"user","content":{},"pinned":true}}"#, quote(text)))
}

/// A plain assistant message.
pub fn assistant(seq: u64, text: &str) -> Event {
    appended(seq, &format!(r#"{{"role":"assistant","content":{}}}"#, quote(text)))
}

/// An assistant message calling tool `id` (Anthropic `tool_use`).
pub fn tool_use(seq: u64, id: &str) -> Event {
    appended(
        seq,
        &format!(
            r#"{{"role":"assistant","content":[{{"type":"text","text":"let me look"}},{{"type":"tool_use","id":{},"name":"read_file","input":{{"path":"src/lib.rs"}}}}]}}"#,
            quote(id)
        ),
    )
}

/// A user message carrying the result of tool call `id` (Anthropic `tool_result`).
pub fn tool_result(seq: u64, id: &str) -> Event {
    appended(
        seq,
        &format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":{},"content":"fn main() {{}}\n// lots of output"}}]}}"#,
            quote(id)
        ),
    )
}

/// `SummaryPrepared` covering `[from, to)`.
pub fn summary_prepared(from: u64, to: u64) -> Event {
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

/// `Flushed` from `from` to `to`.
pub fn flushed(from: u64, to: u64) -> Event {
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

/// `Edited` of `seq` with `kind`.
pub fn edited(seq: u64, kind: EditKind) -> Event {
    Event::Edited(Edited {
        seq,
        kind,
        reason: EditReason { level: 3, rule: "test".into(), target_tokens: 100_000, guard: None },
    })
}

/// `Edited` removing `seq`.
pub fn removed(seq: u64) -> Event {
    edited(seq, EditKind::Removed)
}

/// `Edited` truncating `seq`.
pub fn truncated(seq: u64) -> Event {
    edited(seq, EditKind::Truncated { keep_chars: 10 })
}

/// `Edited` stubbing `seq`.
pub fn stubbed(seq: u64) -> Event {
    edited(seq, EditKind::Stubbed { preview_chars: 10 })
}

/// `Restored` of `seq` with `partners`.
pub fn restored(seq: u64, partners: Vec<u64>) -> Event {
    Event::Restored(Restored { seq, partners, by: "test".into(), why: "scenario".into() })
}

/// `RequestServed` for call `call` at `T0 + at_secs` seconds.
pub fn request_served(call: u64, at_secs: u64) -> Event {
    Event::RequestServed(RequestServed {
        call,
        at: T0 + at_secs * 1000,
        digest: String::new(),
        view_messages: 0,
        view_tokens: 0,
        metered_tokens: 0,
        reported_tokens: None,
        level: 0,
        needed: false,
        prefix_reused: false,
        deferred: None,
        usage: None,
        anchored: false,
        request: None,
    })
}

/// A small valid conversation: system, user, tool call `t1` answered, assistant, user.
/// Seqs: 0 system, 1 user, 2 tool_use(t1), 3 tool_result(t1), 4 assistant, 5 user.
pub fn conversation() -> Vec<Event> {
    vec![
        started(),
        system(0, "You are a coding agent."),
        user(1, "Please read src/lib.rs and explain it."),
        tool_use(2, "t1"),
        tool_result(3, "t1"),
        assistant(4, "It defines main."),
        user(5, "Thanks. Now what about tests?"),
    ]
}

/// `conversation()` plus `extra` events.
pub fn conversation_then(extra: Vec<Event>) -> Vec<Event> {
    let mut v = conversation();
    v.extend(extra);
    v
}

// ---- Fixtures shared by the wire, CLI and timeline tests ---------------------------------------

/// A real PNG of `width × height` pixels (signature, IHDR, zlib IDAT, IEND, all CRCs correct;
/// the demo's encoder), so header parsing is tested on what encoders write.
pub fn png(width: u32, height: u32) -> Vec<u8> {
    let mut raw = Vec::new();
    for y in 0..height {
        raw.push(0); // filter: none
        raw.extend((0..width).flat_map(|x| [((x + y) % 256) as u8, (x % 256) as u8, (y % 256) as u8]));
    }
    ctxlog_workload::encode_png(width, height, &raw)
}

/// Standard base64.
pub fn b64(bytes: &[u8]) -> String {
    ctxlog::internal::wire::encode_base64(bytes)
}

/// A rich Anthropic transcript, one message per line: string and block content, text with
/// `cache_control`, base64 and URL images, a document, `tool_use` with a nested input written
/// with odd spacing, `tool_result` with string and block content and `is_error`, thinking with a
/// signature, `redacted_thinking`, unknown block types and top-level fields, `timestamp`,
/// `pinned` and `usage`.
pub fn rich_anthropic() -> String {
    let img = b64(&png(800, 600));
    let small = b64(&png(16, 16));
    let pdf = b64(b"%PDF-1.4\n% not really a pdf\n");
    [
        r#"{"role":"system","content":"You are a careful coding agent.","timestamp":"2026-01-01T00:00:00Z"}"#.to_owned(),
        format!(
            r#"{{"role":"user","content":[{{"type":"text","text":"Here is the screenshot and the spec.","cache_control":{{"type":"ephemeral"}}}},{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{img}"}}}},{{"type":"document","source":{{"type":"base64","media_type":"application/pdf","data":"{pdf}"}},"title":"spec.pdf"}},{{"type":"image","source":{{"type":"url","url":"https://example.invalid/a.png"}}}}],"pinned":true,"timestamp":1767225601}}"#
        ),
        r#"{"role":"assistant","content":[{"type":"thinking","thinking":"The user wants the layout checked.","signature":"EqQBCkYIARgCKkD+sig=="},{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},{"type":"text","text":"Let me read the file."},{"type":"tool_use","id":"toolu_01","name":"read_file","input":{"b": 1,  "a": [1, 2], "nested": {"deep": [true, null, 1.5e3, "é\u00e9"]}}}],"id":"msg_01","model":"claude-test","stop_reason":"tool_use","usage":{"input_tokens":1200,"cache_read_input_tokens":300,"output_tokens":40},"timestamp":"2026-01-01T00:00:05Z"}"#.to_owned(),
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"fn main() {\n    println!(\"hi\");\n}\n"}],"timestamp":"2026-01-01T00:00:06Z"}"#.to_owned(),
        r#"{"role":"assistant","content":[{"type":"tool_use","id":"toolu_02","name":"run","input":{}},{"type":"server_tool_use","id":"srv_1","name":"web_search","input":{"query":"x"}}],"timestamp":"2026-01-01T00:00:10Z"}"#.to_owned(),
        format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_02","content":[{{"type":"text","text":"error: exit 1"}},{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{small}"}}}}],"is_error":true,"cache_control":{{"type":"ephemeral"}}}},{{"type":"web_search_tool_result","tool_use_id":"srv_1","content":[]}},{{"type":"text","text":"Why did it fail?"}}]}}"#
        ),
        r#"{"role":"assistant","content":"Because the test harness exits 1 on warnings.","usage":{"input_tokens":2500,"output_tokens":12}}"#.to_owned(),
    ]
    .join("\n")
        + "\n"
}

/// A rich OpenAI chat transcript: system, developer, user with text and `image_url` parts (a
/// data URL with `detail`, and a plain link), an assistant with `content: null` and
/// `tool_calls`, a tool message, a `name` field, unknown fields, `usage`.
pub fn rich_openai() -> String {
    let img = b64(&png(64, 48));
    [
        r#"{"role":"system","content":"You are helpful."}"#.to_owned(),
        r#"{"role":"developer","content":"Answer tersely.","name":"policy"}"#.to_owned(),
        format!(
            r#"{{"role":"user","name":"alice","content":[{{"type":"text","text":"What is in this picture?"}},{{"type":"image_url","image_url":{{"url":"data:image/png;base64,{img}","detail":"high"}}}},{{"type":"image_url","image_url":{{"url":"https://example.invalid/b.jpg"}}}}]}}"#
        ),
        r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"describe","arguments":"{\"q\":  \"pixels\", \"n\": [1,2 ,3]}"}},{"id":"call_2","type":"function","function":{"name":"noop","arguments":"{}"}}],"refusal":null,"usage":{"prompt_tokens":900,"completion_tokens":20}}"#.to_owned(),
        r#"{"role":"tool","tool_call_id":"call_1","content":"a grey gradient"}"#.to_owned(),
        r#"{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"ok"}]}"#.to_owned(),
        r#"{"role":"assistant","content":"A grey gradient.","timestamp":1767225700}"#.to_owned(),
    ]
    .join("\n")
        + "\n"
}

/// Runs the CLI in-process; returns `(exit code, stdout, stderr)`.
pub fn cli(args: &[&str]) -> (i32, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let argv = std::iter::once("ctxlog").chain(args.iter().copied());
    let code = ctxlog_tools::run(argv, &mut out, &mut err);
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}
