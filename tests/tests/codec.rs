//! The record envelope: every event kind round-trips, every flipped bit is caught by the seal,
//! unknown formats/kinds and truncated payloads are typed errors naming the version, and no
//! input makes `decode` panic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ctxlog::codec::{self, DecodeError, FORMAT_VERSION};
use ctxlog::event::{
    Deferral, Event, FlushReason, Flushed, GuardKind, GuardRaised, ImportCompleted, ImportSource, RequestRecord,
    RequestServed, SessionStarted, SummaryFailed, SummaryFailure, SummaryMode, SummaryPrepared, SummaryRetired,
    ToolsRecord,
};
use ctxlog::replay::{self, Mode};
use ctxlog::store::{ExpectedVersion, Record, Store, StoreError, StreamId};
use ctxlog::{MemoryStore, SessionError, Timestamp};
use ctxlog_tests::scenario::*;
use proptest::prelude::*;

const STREAM: StreamId = StreamId(SESSION);

/// Knobs of a session before issue 21 (view version 1): what the frozen layouts of
/// `SessionStarted` (kinds 1, 9, 14, 16, 18) can hold.
fn v1(c: ctxlog::Config) -> ctxlog::Config {
    ctxlog::Config { view_version: 1, ..c }
}

/// One event of every kind, with every optional field set somewhere.
fn every_kind() -> Vec<Event> {
    static EVENTS: std::sync::OnceLock<Vec<Event>> = std::sync::OnceLock::new();
    EVENTS.get_or_init(build_every_kind).clone()
}

fn build_every_kind() -> Vec<Event> {
    vec![
        started_with(ctxlog::WireFormat::Anthropic, v1(config())),
        appended(0, rich_anthropic().lines().nth(2).unwrap()),
        appended(1, rich_openai().lines().nth(3).unwrap()),
        appended(2, r#"{"role":"user","content":"plain","pinned":false,"timestamp":1767225600.5}"#),
        Event::SummaryPrepared(SummaryPrepared {
            from: 0,
            to: 2,
            text: "Summary: ünïcode ✓".into(),
            tokens: 5,
            replaced_tokens: 12_345,
            mode_requested: SummaryMode::Fork,
            mode_used: SummaryMode::Standalone,
            refusal: Some("prefix changed".into()),
            merged: Vec::new(),
            prefix_call: None,
            usage: None,
            latency_ms: None,
        }),
        Event::SummaryPrepared(SummaryPrepared {
            from: 0,
            to: 2,
            text: "Condensed".into(),
            tokens: 2,
            replaced_tokens: 5,
            mode_requested: SummaryMode::Extractive,
            mode_used: SummaryMode::Extractive,
            refusal: None,
            merged: vec![0],
            prefix_call: None,
            usage: None,
            latency_ms: None,
        }),
        Event::Flushed(Flushed {
            from: 0,
            to: 2,
            reason: FlushReason::ColdCache,
            cache_age_ms: Some(301_000),
            tokens_before: 9_000,
            tokens_after: 1_000,
            stubbed: vec![0, 1],
            condensed: vec![1],
        }),
        Event::SummaryRetired(SummaryRetired {
            summary: 1,
            from: 0,
            to: 2,
            tokens: 40,
            reason: "summaries over their share".into(),
        }),
        removed(3),
        truncated(4),
        stubbed(5),
        restored(3, vec![4, 7]),
        Event::RequestServed(RequestServed {
            call: 3,
            at: T0 + 1,
            digest: "sha256:00ff".into(),
            view_messages: 7,
            view_tokens: 8_000,
            metered_tokens: 8_100,
            reported_tokens: Some(8_123),
            level: 4,
            needed: true,
            prefix_reused: true,
            deferred: Some(Deferral::TooLittleFreed { cache_age_ms: 1_000, freed_tokens: 12, clear_at_least: 5_000 }),
            usage: Some(ctxlog::Usage { input: 23, cache_read: 8_000, cache_write: 100, output: 7 }),
            anchored: true,
            request: None,
        }),
        Event::RequestServed(RequestServed {
            call: 4,
            at: T0 + 2,
            digest: "sha256:00ff".into(),
            view_messages: 7,
            view_tokens: 8_000,
            metered_tokens: 8_000,
            reported_tokens: None,
            level: 0,
            needed: true,
            prefix_reused: true,
            deferred: Some(Deferral::WarmCache {
                cache_age_ms: 2_000,
                hard_limit_tokens: 9_000,
                flush_pending: true,
                ladder_due: false,
            }),
            usage: None,
            anchored: false,
            request: None,
        }),
        Event::GuardRaised(GuardRaised {
            call: Some(3),
            kind: GuardKind::ForkRefused { reason: "no_last_request".into() },
            detail: "a sentence with 42".into(),
            knob: "--summarizer".into(),
        }),
        Event::GuardRaised(GuardRaised {
            call: None,
            kind: GuardKind::BreakerTripped,
            detail: String::new(),
            knob: "--breaker".into(),
        }),
        Event::SessionStarted(SessionStarted {
            session: SESSION,
            format: ctxlog::WireFormat::OpenAi,
            config: v1(config()),
            at: T0,
            import: Some(ImportSource {
                transcript_sha256: "ab".repeat(32),
                transcript_bytes: 68_000_000,
                messages: 20_000,
                call_interval_ms: 30_000,
            }),
        }),
        Event::ImportCompleted(ImportCompleted { messages: 20_000, calls: 10_000 }),
        // Kind 26: a session of view version 2 (placeholders).
        started(),
        // Kinds 20–22: a fork summary with the summarizer's facts, a served request with its
        // record, a failed attempt.
        Event::SummaryPrepared(SummaryPrepared {
            from: 2,
            to: 3,
            text: "fork".into(),
            tokens: 1,
            replaced_tokens: 40,
            mode_requested: SummaryMode::Auto,
            mode_used: SummaryMode::Fork,
            refusal: None,
            merged: Vec::new(),
            prefix_call: Some(4),
            usage: Some(ctxlog::Usage { input: 12, cache_read: 9_000, cache_write: 0, output: 80 }),
            latency_ms: Some(1_234),
        }),
        Event::RequestServed(RequestServed {
            call: 5,
            at: T0 + 3,
            digest: "sha256:00ff".into(),
            view_messages: 7,
            view_tokens: 8_000,
            metered_tokens: 8_000,
            reported_tokens: None,
            level: 0,
            needed: false,
            prefix_reused: true,
            deferred: None,
            usage: None,
            anchored: false,
            request: Some(RequestRecord {
                model: Some("claude-sonnet-4-5".into()),
                tools: ToolsRecord::Blob { id: ctxlog::BlobId::of(b"[]"), bytes: 2 },
                breakpoints: None,
                // Kind 30: the breakpoints a proxy placed by position.
                placement: Some(ctxlog::internal::breakpoints::Placement {
                    origin: ctxlog::internal::breakpoints::Origin::Client,
                    marks: vec![
                        ctxlog::internal::breakpoints::Mark::System(ctxlog::CacheTtl::FiveMinutes),
                        ctxlog::internal::breakpoints::Mark::Message { seq: 4, block: Some(1), ttl: ctxlog::CacheTtl::OneHour },
                    ],
                }),
            }),
        }),
        Event::SummaryFailed(SummaryFailed {
            from: 3,
            to: 5,
            merged: vec![0, 1],
            mode_requested: SummaryMode::Fork,
            mode_used: SummaryMode::Standalone,
            refusal: Some("tools_not_recorded".into()),
            prefix_call: None,
            reason: SummaryFailure::NotSmaller { tokens: 50, replaced_tokens: 40 },
            usage: Some(ctxlog::Usage { input: 100, cache_read: 0, cache_write: 0, output: 60 }),
            latency_ms: Some(15),
        }),
        Event::GuardRaised(GuardRaised {
            call: Some(6),
            kind: GuardKind::SummarizerPaused,
            detail: "3 in a row".into(),
            knob: "--summarizer".into(),
        }),
        // Kind 25: the client's name for the conversation.
        Event::SessionNamed(ctxlog::event::SessionNamed { name: "agent-7".into() }),
        // Kind 23: what a relayed call was answered with.
        Event::AnswerReceived(ctxlog::event::AnswerReceived {
            call: 2,
            message: ctxlog::parse_message(
                r#"{"role":"assistant","content":[{"type":"text","text":"done"},{"type":"tool_use","id":"toolu_1","name":"ls","input":{"path":"src"}}]}"#,
            )
            .unwrap(),
        }),
        // Kind 24: a branch's fork point.
        Event::Branched(ctxlog::event::Branched {
            parent: uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
            parent_version: 41,
            messages: 17,
            at: T0 + 9,
        }),
        // Issue 22: the failure reasons appended to kind 22's enum.
        Event::SummaryFailed(SummaryFailed {
            from: 3,
            to: 5,
            merged: vec![],
            mode_requested: SummaryMode::Standalone,
            mode_used: SummaryMode::Standalone,
            refusal: None,
            prefix_call: None,
            reason: SummaryFailure::Truncated { max_tokens: Some(370) },
            usage: None,
            latency_ms: None,
        }),
        Event::SummaryFailed(SummaryFailed {
            from: 3,
            to: 5,
            merged: vec![],
            mode_requested: SummaryMode::Fork,
            mode_used: SummaryMode::Fork,
            refusal: None,
            prefix_call: Some(4),
            reason: SummaryFailure::Echo { per_mille: 912 },
            usage: None,
            latency_ms: Some(7),
        }),
        Event::SummaryFailed(SummaryFailed {
            from: 3,
            to: 5,
            merged: vec![],
            mode_requested: SummaryMode::Standalone,
            mode_used: SummaryMode::Standalone,
            refusal: Some("over_context".into()),
            prefix_call: None,
            reason: SummaryFailure::Rejected { status: 400, detail: "HTTP 400: exceed_context_size_error".into() },
            usage: None,
            latency_ms: None,
        }),
        // Kinds 27 and 28: a refused call and the limit it taught.
        Event::CallRejected(ctxlog::event::CallRejected {
            call: 6,
            at: T0 + 9,
            model: Some("claude-sonnet-4-5".into()),
            status: 400,
            error: "invalid_request_error".into(),
            message: "prompt is too long: 210000 tokens > 200000 maximum".into(),
            overflow: true,
            prompt_tokens: Some(210_000),
            limit: Some(200_000),
            view_tokens: 180_000,
        }),
        Event::LimitLearned(ctxlog::event::LimitLearned {
            call: 6,
            model: Some("claude-sonnet-4-5".into()),
            limit: 200_000,
            budget: 171_428,
        }),
        Event::Pinned(ctxlog::event::Pinned {
            seq: 41,
            pin: true,
            by: "ctxlog restore --pin".into(),
            why: "the spec".into(),
        }),
        Event::ProviderCompacted(ctxlog::event::ProviderCompacted {
            at: 1_767_225_700_000,
            endpoint: "/v1/responses/compact".into(),
            model: Some("gpt-5".into()),
            response_id: Some("resp_0a1b".into()),
            input_items: 41,
            output_items: 4,
            usage: Some(ctxlog::Usage { input: 9_000, cache_read: 30_000, cache_write: 0, output: 1_200 }),
        }),
    ]
}

#[test]
fn a_pinned_record_has_its_documented_layout() {
    // Kind 29 (docs/log-format.md): seq, pin, by, why in bincode 2's standard varint form.
    let ev = Event::Pinned(ctxlog::event::Pinned { seq: 300, pin: false, by: "me".into(), why: "done".into() });
    let rec = codec::encode(&ev).unwrap();
    assert_eq!(&rec.body()[..2], &[FORMAT_VERSION, codec::kind::PINNED]);
    assert_eq!(codec::kind::PINNED, 29);
    // 300 = 0xfb 0x2c 0x01 (varint u16), false = 0, then each string as its length and bytes.
    assert_eq!(&rec.body()[2..], &[0xfb, 0x2c, 0x01, 0, 2, b'm', b'e', 4, b'd', b'o', b'n', b'e']);
    let back = Record::from_stored(STREAM, 1, rec.as_bytes().to_vec()).unwrap();
    assert_eq!(codec::decode(STREAM, 1, &back).unwrap(), ev);
}

#[test]
fn every_event_kind_round_trips_through_the_envelope() {
    let events = every_kind();
    let mut kinds = std::collections::BTreeSet::new();
    for (i, ev) in events.iter().enumerate() {
        let version = i as u64 + 1;
        let rec = codec::encode(ev).unwrap();
        assert_eq!(rec.body()[0], FORMAT_VERSION);
        kinds.insert(rec.body()[1]);
        // As a store hands it back: bytes re-verified by the seal.
        let back = Record::from_stored(STREAM, version, rec.as_bytes().to_vec()).unwrap();
        assert_eq!(&codec::decode(STREAM, version, &back).unwrap(), ev);
        // Encoding is deterministic (what golden logs rely on).
        assert_eq!(codec::encode(ev).unwrap(), rec);
    }
    // One kind byte per event type, an import's SessionStarted included; only current kinds.
    use codec::kind::*;
    let current = [
        MESSAGE_APPENDED,
        EDITED,
        RESTORED,
        GUARD_RAISED,
        SUMMARY_PREPARED,
        SUMMARY_RETIRED,
        FLUSHED,
        IMPORT_COMPLETED,
        REQUEST_SERVED,
        SESSION_STARTED,
        SUMMARY_FAILED,
        ANSWER_RECEIVED,
        BRANCHED,
        SESSION_NAMED,
        CALL_REJECTED,
        LIMIT_LEARNED,
        PINNED,
        PROVIDER_COMPACTED,
    ];
    assert_eq!(kinds, current.into_iter().collect(), "written kinds");
}

#[test]
fn first_release_layouts_decode_and_upcast_to_the_current_events() {
    // Events the first release could express, written in its layouts (kinds 1, 3, 4, 7), decode
    // to the same current events: the new fields take their neutral values.
    let mut old_kinds = std::collections::BTreeSet::new();
    let mut legacy_count = 0;
    for (i, ev) in every_kind().iter().enumerate() {
        let version = i as u64 + 1;
        let neutral = match ev {
            Event::SessionStarted(e) => e.import.is_none() && e.config.view_version == 1,
            Event::MessageAppended(_) | Event::Edited(_) | Event::Restored(_) => true,
            Event::ImportCompleted(_)
            | Event::SummaryFailed(_)
            | Event::AnswerReceived(_)
            | Event::Branched(_)
            | Event::SessionNamed(_) => false,
            Event::CallRejected(_) | Event::LimitLearned(_) | Event::Pinned(_) | Event::ProviderCompacted(_) => false,
            Event::GuardRaised(_) => true,
            Event::SummaryPrepared(e) => e.merged.is_empty() && e.prefix_call.is_none() && e.usage.is_none(),
            Event::Flushed(e) => e.condensed.is_empty(),
            Event::RequestServed(e) => {
                e.deferred.is_none()
                    && e.usage.is_none()
                    && e.anchored == e.reported_tokens.is_some()
                    && e.request.is_none()
            }
            Event::SummaryRetired(_) => false,
        };
        let Some(rec) = codec::legacy::encode(ev) else {
            assert!(!neutral, "{} should have a first-release layout", ev.name());
            continue;
        };
        let rec = rec.unwrap();
        assert!(neutral, "{} has new fields but was written in an old layout", ev.name());
        old_kinds.insert(rec.body()[1]);
        legacy_count += 1;
        assert_eq!(&codec::decode(STREAM, version, &rec).unwrap(), ev, "{}", ev.name());
    }
    assert!(legacy_count >= 8);
    for k in [codec::kind::SESSION_STARTED_V1, codec::kind::SUMMARY_PREPARED_V1] {
        assert!(old_kinds.contains(&k), "kind {k} not exercised");
    }
    // A flush without condensed summaries, in kind 4.
    let flush = flushed(0, 2);
    let rec = codec::legacy::encode(&flush).unwrap().unwrap();
    assert_eq!(rec.body()[1], codec::kind::FLUSHED_V1);
    assert_eq!(codec::decode(STREAM, 1, &rec).unwrap(), flush);
    // A served call without a deferral, in kind 7.
    let served = Event::RequestServed(RequestServed {
        call: 0,
        at: T0,
        digest: String::new(),
        view_messages: 1,
        view_tokens: 2,
        metered_tokens: 2,
        reported_tokens: None,
        level: 0,
        needed: false,
        prefix_reused: false,
        deferred: None,
        usage: None,
        anchored: false,
        request: None,
    });
    let rec = codec::legacy::encode(&served).unwrap().unwrap();
    assert_eq!(rec.body()[1], codec::kind::REQUEST_SERVED_V1);
    assert_eq!(codec::decode(STREAM, 1, &rec).unwrap(), served);
}

#[test]
fn second_layout_set_kinds_decode_and_upcast_to_the_current_events() {
    // Kinds 9, 14 (an import's) and 11, written today in their frozen layouts, decode to the
    // current events: the usage floor at its default, the import's facts kept, no usage parts,
    // anchored exactly when a report was given.
    let mut written = std::collections::BTreeSet::new();
    for (i, ev) in every_kind().iter().enumerate() {
        let Some(rec) = codec::legacy::encode_v2(ev) else { continue };
        let rec = rec.unwrap();
        assert_eq!(&codec::decode(STREAM, i as u64 + 1, &rec).unwrap(), ev, "{}", ev.name());
        written.insert(rec.body()[1]);
    }
    use codec::kind::{REQUEST_SERVED_V2, SESSION_STARTED_V2, SESSION_STARTED_V2_IMPORT};
    assert_eq!(written, [SESSION_STARTED_V2, REQUEST_SERVED_V2, SESSION_STARTED_V2_IMPORT].into_iter().collect());
    let mut anchored = request_served(0, 1);
    if let Event::RequestServed(r) = &mut anchored {
        r.reported_tokens = Some(900);
        r.anchored = true;
    }
    let rec = codec::legacy::encode_v2(&anchored).unwrap().unwrap();
    assert_eq!(codec::decode(STREAM, 1, &rec).unwrap(), anchored);
    // Events the old layouts cannot hold are refused, not truncated.
    let mut parts = anchored.clone();
    if let Event::RequestServed(r) = &mut parts {
        r.usage = Some(ctxlog::Usage::prompt(900));
    }
    assert!(codec::legacy::encode_v2(&parts).is_none());
    let floor = Event::SessionStarted(ctxlog::event::SessionStarted {
        session: STREAM.0,
        format: ctxlog::WireFormat::Anthropic,
        config: ctxlog::Config { usage_floor_ratio: 0.25, ..ctxlog::Config::default() },
        at: T0,
        import: None,
    });
    assert!(codec::legacy::encode_v2(&floor).is_none());
    assert_eq!(codec::encode(&floor).unwrap().body()[1], codec::kind::SESSION_STARTED);
}

#[test]
fn kind_16_a_session_start_before_import_facts_decodes_to_the_current_event() {
    // Kind 16 (the usage floor, no `import`) decodes with `import: None` and every knob kept,
    // the usage floor included.
    let floor = Event::SessionStarted(SessionStarted {
        session: SESSION,
        format: ctxlog::WireFormat::Anthropic,
        config: ctxlog::Config { usage_floor_ratio: 0.25, ..v1(config()) },
        at: T0,
        import: None,
    });
    for ev in [started_with(ctxlog::WireFormat::Anthropic, v1(config())), floor] {
        let rec = codec::legacy::encode_v3(&ev).unwrap().unwrap();
        assert_eq!(rec.body()[1], codec::kind::SESSION_STARTED_V3);
        assert_eq!(codec::decode(STREAM, 1, &rec).unwrap(), ev);
        // The current kind is another layout: the frozen one is not what encode writes.
        assert_ne!(codec::encode(&ev).unwrap(), rec);
    }
    // An import's start does not fit kind 16 (it would lose its facts), nor does any other event.
    for ev in every_kind() {
        let fits = matches!(&ev, Event::SessionStarted(s) if s.import.is_none() && s.config.view_version == 1);
        assert_eq!(codec::legacy::encode_v3(&ev).is_some(), fits, "{}", ev.name());
    }
}

#[test]
fn kind_20_decodes_and_upcasts_with_no_placement() {
    // Kind 20 (a request record before the placement) decodes with `placement` none; a record
    // with a placement does not fit it.
    for ev in every_kind() {
        let Event::RequestServed(mut e) = ev else {
            // The fifth layout set's other kind: a session start of view version 1 (below).
            let v1_start = matches!(&ev, Event::SessionStarted(s) if s.config.view_version == 1);
            assert_eq!(codec::legacy::encode_v5(&ev).is_some(), v1_start, "{}", ev.name());
            continue;
        };
        let placed = e.request.as_ref().is_some_and(|r| r.placement.is_some());
        assert_eq!(codec::legacy::encode_v5(&Event::RequestServed(e.clone())).is_none(), placed, "kind 20 fits");
        if let Some(record) = e.request.as_mut() {
            record.placement = None;
            record.breakpoints = Some(ctxlog::CacheTtl::OneHour);
        }
        let ev = Event::RequestServed(e);
        let rec = codec::legacy::encode_v5(&ev).unwrap().unwrap();
        assert_eq!(rec.body()[1], codec::kind::REQUEST_SERVED_V4);
        assert_eq!(codec::decode(STREAM, 9, &rec).unwrap(), ev);
        assert_ne!(codec::encode(&ev).unwrap(), rec, "the current kind is another layout");
    }
}

#[test]
fn kind_18_a_session_start_before_view_version_decodes_to_view_version_1() {
    // Kind 18 (every knob but `view_version`, with or without an import) decodes with view
    // version 1: sessions written before issue 21 keep rendering their views without
    // placeholders, so `verify` still finds every recorded digest.
    let import =
        every_kind().into_iter().find(|e| matches!(e, Event::SessionStarted(s) if s.import.is_some())).unwrap();
    for ev in [started_with(ctxlog::WireFormat::Anthropic, v1(config())), import] {
        let rec = codec::legacy::encode_v5(&ev).unwrap().unwrap();
        assert_eq!(rec.body()[1], codec::kind::SESSION_STARTED_V4);
        let back = codec::decode(STREAM, 1, &rec).unwrap();
        assert_eq!(back, ev);
        let Event::SessionStarted(s) = back else { unreachable!() };
        assert_eq!(s.config.view_version, 1);
        assert!(!s.config.placeholders());
    }
    // A session of view version 2 does not fit kind 18, and today's kind says so.
    let current = started();
    assert!(codec::legacy::encode_v5(&current).is_none());
    let rec = codec::encode(&current).unwrap();
    assert_eq!(rec.body()[1], codec::kind::SESSION_STARTED);
    let Event::SessionStarted(s) = codec::decode(STREAM, 1, &rec).unwrap() else { unreachable!() };
    assert_eq!(s.config.view_version, ctxlog::config::VIEW_VERSION);
    assert!(s.config.placeholders());
}

#[test]
fn fourth_layout_set_kinds_10_and_17_decode_and_upcast_to_the_current_events() {
    // Kind 10 (a summary before the summarizer's facts) and kind 17 (a served request before
    // its record) decode with no prefix call, usage or latency, and tools unknown.
    let mut written = std::collections::BTreeSet::new();
    for (i, ev) in every_kind().iter().enumerate() {
        let fits = match ev {
            Event::SummaryPrepared(e) => {
                e.prefix_call.is_none()
                    && e.usage.is_none()
                    && e.latency_ms.is_none()
                    && e.mode_requested != SummaryMode::Auto
            }
            Event::RequestServed(e) => e.request.is_none(),
            _ => false,
        };
        let Some(rec) = codec::legacy::encode_v4(ev) else {
            assert!(!fits, "{} should fit kind 10 or 17", ev.name());
            continue;
        };
        assert!(fits, "{} has new fields but was written in an old layout", ev.name());
        let rec = rec.unwrap();
        assert_eq!(&codec::decode(STREAM, i as u64 + 1, &rec).unwrap(), ev, "{}", ev.name());
        assert_ne!(codec::encode(ev).unwrap(), rec, "{}: the current kind is another layout", ev.name());
        written.insert(rec.body()[1]);
    }
    let expected = [codec::kind::SUMMARY_PREPARED_V2, codec::kind::REQUEST_SERVED_V3];
    assert_eq!(written, expected.into_iter().collect());
}

#[test]
fn a_whole_log_round_trips_through_a_store() {
    let events = conversation_then(vec![summary_prepared(0, 4), flushed(0, 4), request_served(0, 10)]);
    let store = MemoryStore::new();
    let records: Vec<_> = events.iter().map(|e| codec::encode(e).unwrap()).collect();
    store.append(STREAM, ExpectedVersion::Exact(0), &records).unwrap();
    let r = replay::replay(&store, STREAM, Mode::Strict, None).unwrap();
    assert_eq!(r.state, fold(&events));
    assert_eq!(r.timeline.len(), 1);
}

fn assert_corrupt(bytes: Vec<u8>, version: u64, what: &str) {
    match Record::from_stored(STREAM, version, bytes) {
        Err(StoreError::Corrupt { stream, version: v, detail }) => {
            assert_eq!((stream, v), (STREAM, version), "{what}");
            assert!(!detail.is_empty());
        }
        Ok(_) => panic!("{what}: corruption not detected"),
        Err(e) => panic!("{what}: wrong error {e}"),
    }
}

#[test]
fn flipping_any_bit_of_a_small_record_is_detected() {
    let rec = codec::encode(&restored(3, vec![4])).unwrap();
    let bytes = rec.as_bytes().to_vec();
    assert!(bytes.len() < 100, "small record: {} bytes", bytes.len());
    for bit in 0..bytes.len() * 8 {
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        assert_corrupt(flipped, 17, &format!("bit {bit}"));
    }
}

#[test]
fn flipping_sampled_bits_of_a_large_message_record_is_detected() {
    let big = "x".repeat(200_000);
    let rec = codec::encode(&user(0, &big)).unwrap();
    let bytes = rec.as_bytes().to_vec();
    let bits = bytes.len() * 8;
    // Every bit of the envelope header and the checksum, plus a prime stride through the body.
    let sample = (0..64).chain((bits - 64)..bits).chain((0..bits).step_by(7_919));
    for bit in sample {
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        assert_corrupt(flipped, 2, &format!("bit {bit} of {bits}"));
    }
}

#[test]
fn short_or_truncated_stored_bytes_are_corrupt_not_a_panic() {
    let bytes = codec::encode(&user(0, "hello")).unwrap().into_bytes();
    for len in 0..bytes.len() {
        assert_corrupt(bytes[..len].to_vec(), 5, &format!("truncated to {len}"));
    }
}

#[test]
fn a_tampered_record_in_a_store_fails_replay_naming_stream_and_version() {
    let store = MemoryStore::new();
    let records: Vec<_> = conversation().iter().map(|e| codec::encode(e).unwrap()).collect();
    store.append(STREAM, ExpectedVersion::Exact(0), &records).unwrap();
    assert!(store.tamper(STREAM, 4, |b| b[3] ^= 0x10));
    match replay::replay(&store, STREAM, Mode::Lenient, None) {
        Err(SessionError::Store(StoreError::Corrupt { stream, version, .. })) => {
            assert_eq!((stream, version), (STREAM, 4));
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let report = replay::verify(&store, STREAM).unwrap();
    assert!(!report.ok());
    let p = report.problems[0].to_string();
    assert!(p.contains("version 4") && p.contains(&STREAM.to_string()), "{p}");
}

fn decode_err(body: Vec<u8>, version: u64) -> DecodeError {
    match codec::decode(STREAM, version, &Record::seal(body)) {
        Ok(ev) => panic!("decoded garbage as {ev:?}"),
        Err(e) => {
            assert_eq!((e.stream, e.version), (STREAM, version));
            assert!(e.to_string().contains(&format!("version {version}")), "{e}");
            e
        }
    }
}

#[test]
fn an_unknown_envelope_format_is_a_decode_error_naming_the_version() {
    let mut body = codec::encode(&started()).unwrap().body().to_vec();
    body[0] = FORMAT_VERSION + 1;
    let e = decode_err(body, 9);
    assert!(e.detail.contains("format"), "{e}");
    let e = decode_err(vec![0, 1], 10);
    assert!(e.detail.contains("format 0"), "{e}");
}

#[test]
fn an_unknown_event_kind_is_a_decode_error_naming_the_version() {
    let mut body = codec::encode(&removed(1)).unwrap().body().to_vec();
    for kind in [0u8, 9, 200, 255] {
        body[1] = kind;
        let e = decode_err(body.clone(), 3);
        assert!(e.detail.contains(&format!("kind {kind}")), "{e}");
    }
    let e = decode_err(vec![FORMAT_VERSION], 4);
    assert!(e.detail.contains("shorter"), "{e}");
    decode_err(vec![], 4);
}

#[test]
fn a_truncated_or_padded_payload_is_an_error_never_a_panic() {
    for ev in every_kind() {
        let body = codec::encode(&ev).unwrap().body().to_vec();
        for len in 2..body.len() {
            let _ = decode_err(body[..len].to_vec(), 1);
        }
        let mut padded = body.clone();
        padded.push(0);
        let e = decode_err(padded, 1);
        assert!(e.detail.contains("trailing"), "{e}");
    }
}

#[test]
fn a_kind_byte_swapped_to_another_valid_kind_does_not_decode_silently_as_the_original() {
    // Payload of one kind read as another: either an error or a different event, never the
    // original (the kind byte is what selects the layout).
    let events = every_kind();
    for ev in &events {
        let body = codec::encode(ev).unwrap().body().to_vec();
        for kind in 1u8..=8 {
            if kind == body[1] {
                continue;
            }
            let mut b = body.clone();
            b[1] = kind;
            if let Ok(other) = codec::decode(STREAM, 1, &Record::seal(b)) {
                assert_ne!(&other, ev);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_sealed_bytes_never_panic_decode(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = codec::decode(STREAM, 1, &Record::seal(bytes));
    }

    #[test]
    fn arbitrary_payloads_behind_a_valid_header_never_panic_decode(
        kind in 0u8..=9,
        payload in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut body = vec![FORMAT_VERSION, kind];
        body.extend(payload);
        let _ = codec::decode(STREAM, 1, &Record::seal(body));
    }

    #[test]
    fn mutated_valid_records_never_panic_decode(
        which in 0usize..13,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let events = every_kind();
        let mut body = codec::encode(&events[which % events.len()]).unwrap().body().to_vec();
        for (at, byte) in edits {
            let i = 2 + at % (body.len() - 2);
            body[i] = byte;
        }
        let _ = codec::decode(STREAM, 1, &Record::seal(body));
    }

    #[test]
    fn arbitrary_stored_bytes_never_panic_from_stored(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(rec) = Record::from_stored(STREAM, 1, bytes) {
            let _ = codec::decode(STREAM, 1, &rec);
        }
    }
}

// ---- Snapshots: a cache, never a source of truth ---------------------------------------------

fn session_with_history(store: &MemoryStore) -> ctxlog::Session<&MemoryStore> {
    let mut s = ctxlog::Session::create(
        store,
        STREAM,
        ctxlog::WireFormat::Anthropic,
        ctxlog::Config::default(),
        Timestamp::from_millis(T0),
    )
    .unwrap();
    for (i, line) in rich_anthropic().lines().enumerate() {
        let m = parse(line);
        if m.role == ctxlog::message::Role::Assistant {
            let at = T0 + 1_000 * i as u64;
            let plan = s.plan(Timestamp::from_millis(at)).unwrap();
            s.commit(plan, Timestamp::from_millis(at), Some(ctxlog::Usage::prompt(1_000 + i as u64))).unwrap();
        }
        s.append(vec![m]).unwrap();
    }
    s
}

#[test]
fn open_from_a_snapshot_equals_a_full_replay() {
    let store = MemoryStore::new();
    let mut s = session_with_history(&store);
    s.snapshot().unwrap();
    let snap_version = store.get_snapshot(STREAM).unwrap().unwrap().version;
    assert_eq!(snap_version, s.state().version());
    // More history after the snapshot.
    s.append(vec![parse(r#"{"role":"user","content":"after the snapshot"}"#)]).unwrap();
    let plan = s.plan(Timestamp::from_millis(T0 + 60_000)).unwrap();
    s.commit(plan, Timestamp::from_millis(T0 + 60_000), None).unwrap();
    let reopened = ctxlog::Session::open(&store, STREAM).unwrap();
    let replayed = replay::replay(&store, STREAM, Mode::Strict, None).unwrap().state;
    assert_eq!(reopened.state(), &replayed);
    assert_eq!(reopened.state(), s.state());
    let report = replay::verify(&store, STREAM).unwrap();
    assert!(report.ok() && report.snapshot_checked, "{:?}", report.problems);
}

#[test]
fn a_corrupt_snapshot_is_ignored_by_open_and_reported_by_verify() {
    let store = MemoryStore::new();
    let s = session_with_history(&store);
    s.snapshot().unwrap();
    let mut snap = store.get_snapshot(STREAM).unwrap().unwrap();
    let mid = snap.bytes.len() / 2;
    snap.bytes[mid] ^= 0x40;
    store.put_snapshot(STREAM, &snap).unwrap();
    let reopened = ctxlog::Session::open(&store, STREAM).unwrap();
    assert_eq!(reopened.state(), s.state(), "fell back to a full replay");
    let report = replay::verify(&store, STREAM).unwrap();
    assert!(report.snapshot_checked);
    assert!(
        report.problems.iter().map(ToString::to_string).any(|p| p.contains("snapshot") && p.contains("unusable")),
        "{:?}",
        report.problems
    );
}

#[test]
fn a_snapshot_that_disagrees_with_the_log_is_reported_by_verify() {
    let store = MemoryStore::new();
    let s = session_with_history(&store);
    // A well-sealed snapshot of a different history at the same version.
    let mut other = fold(&conversation());
    while other.version() < s.state().version() {
        let v = other.version() + 1;
        other
            .apply(
                v,
                &ctxlog::event::Event::GuardRaised(GuardRaised {
                    call: None,
                    kind: GuardKind::OverBudget,
                    detail: String::new(),
                    knob: String::new(),
                }),
            )
            .unwrap();
    }
    store.put_snapshot(STREAM, &ctxlog::session::encode_snapshot(&other).unwrap()).unwrap();
    let report = replay::verify(&store, STREAM).unwrap();
    assert!(
        report.problems.iter().any(|p| p.to_string().contains("differs from a full replay")),
        "{:?}",
        report.problems
    );
}

// ---- Hostile records ---------------------------------------------------------------------------

fn nested_message_record(depth: usize) -> Record {
    use ctxlog::event::MessageAppended;
    use ctxlog::message::{Block, Content, Message, Role};
    // Building, encoding and dropping a deep value recurses too: do it on a big stack.
    std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(move || {
            let mut c = Content::Text("x".into());
            for _ in 0..depth {
                let b = Block::ToolResult { tool_use_id: "t".into(), content: Some(c), is_error: None, extra: vec![] };
                c = Content::Blocks(vec![b]);
            }
            let mut message = Message::text(Role::User, "");
            message.content = Some(c);
            codec::encode(&Event::MessageAppended(MessageAppended { seq: 0, message, tokens: 1 })).unwrap()
        })
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn a_crafted_deeply_nested_record_is_a_decode_error_not_a_stack_overflow() {
    // Regression: a well-sealed 800 kB record nesting 100,000 tool results aborted replay and
    // verify with a stack overflow.
    let rec = nested_message_record(100_000);
    let e = codec::decode(STREAM, 7, &rec).unwrap_err();
    assert_eq!(e.version, 7);
    assert!(e.detail.contains("nested"), "{e}");
    // Nesting the wire parser accepts decodes fine.
    let ok = nested_message_record(ctxlog::internal::wire::MAX_CONTENT_NESTING);
    assert!(codec::decode(STREAM, 1, &ok).is_ok());
    // The depth counter is per decode: a failed decode does not poison the next one.
    let again = codec::decode(STREAM, 1, &ok);
    assert!(again.is_ok());
}

/// OpenAI Responses (issue 23): the session format `OpenAiResponses` (variant 2 of
/// `WireFormat`) and the guard `ProviderHeldHistory` (variant 8 of `GuardKind`) are new values
/// inside existing kinds 18 and 8; a Responses item is an ordinary message (kinds 2 and 23).
#[test]
fn responses_values_round_trip_with_their_tags() {
    use ctxlog::internal::wire::responses::parse_item;
    let started = |format| {
        Event::SessionStarted(ctxlog::event::SessionStarted {
            session: STREAM.0,
            format,
            config: ctxlog::Config::default(),
            at: 1,
            import: None,
        })
    };
    let chat = codec::encode(&started(ctxlog::WireFormat::OpenAi)).unwrap();
    let responses = codec::encode(&started(ctxlog::WireFormat::OpenAiResponses)).unwrap();
    let differ: Vec<(u8, u8)> =
        chat.body().iter().zip(responses.body()).filter(|(a, b)| a != b).map(|(a, b)| (*a, *b)).collect();
    assert_eq!(differ, [(1, 2)], "the format is one varint tag");
    let guard = Event::GuardRaised(GuardRaised {
        call: None,
        kind: GuardKind::ProviderHeldHistory,
        detail: "d".into(),
        knob: "k".into(),
    });
    let rec = codec::encode(&guard).unwrap();
    assert_eq!(&rec.body()[2..], [0, 8, 1, b'd', 1, b'k'], "call none, variant 8, detail, knob");
    let reasoning = r#"{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA+/=="}"#;
    let events = [
        started(ctxlog::WireFormat::OpenAiResponses),
        guard,
        Event::MessageAppended(ctxlog::event::MessageAppended {
            seq: 0,
            message: parse_item(reasoning).unwrap(),
            tokens: 20,
        }),
        Event::AnswerReceived(ctxlog::event::AnswerReceived {
            call: 0,
            message: parse_item(
                r#"{"type":"function_call","id":"fc_1","call_id":"call_1","name":"ls","arguments":"{}"}"#,
            )
            .unwrap(),
        }),
    ];
    for (i, ev) in events.iter().enumerate() {
        let rec = codec::encode(ev).unwrap();
        let back = Record::from_stored(STREAM, i as u64 + 1, rec.as_bytes().to_vec()).unwrap();
        assert_eq!(&codec::decode(STREAM, i as u64 + 1, &back).unwrap(), ev);
    }
}

/// Gemini (issue 23 item 4): the session format `Gemini` is variant 3 of `WireFormat`, a new
/// value inside the existing kind 18, appended after the others so that every earlier log
/// keeps its tags (a chat session's record is byte for byte the same as before); a Gemini
/// content is an ordinary message (kinds 2 and 23), ctxlog's pairing keys and the client's
/// `thoughtSignature` inside it.
#[test]
fn gemini_values_round_trip_with_their_tags() {
    use ctxlog::internal::wire::gemini::parse_content_at;
    let started = |format| {
        Event::SessionStarted(ctxlog::event::SessionStarted {
            session: STREAM.0,
            format,
            config: ctxlog::Config::default(),
            at: 1,
            import: None,
        })
    };
    let tag = |format| {
        let rec = codec::encode(&started(format)).unwrap();
        let chat = codec::encode(&started(ctxlog::WireFormat::OpenAi)).unwrap();
        let differ: Vec<(u8, u8)> =
            chat.body().iter().zip(rec.body()).filter(|(a, b)| a != b).map(|(a, b)| (*a, *b)).collect();
        differ
    };
    assert_eq!(tag(ctxlog::WireFormat::Gemini), [(1, 3)], "the format is one varint tag, after the others");
    assert_eq!(tag(ctxlog::WireFormat::OpenAiResponses), [(1, 2)], "the earlier tags are unchanged");
    assert_eq!(tag(ctxlog::WireFormat::Anthropic), [(1, 0)]);
    let call = r#"{"role":"model","parts":[{"functionCall":{"name":"ls","args":{}},"thoughtSignature":"c2ln+/=="}]}"#;
    let answer = r#"{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{"output":"a b"}}}]}"#;
    let events = [
        started(ctxlog::WireFormat::Gemini),
        Event::MessageAppended(ctxlog::event::MessageAppended {
            seq: 2,
            message: parse_content_at(answer, 2).unwrap(),
            tokens: 20,
        }),
        Event::AnswerReceived(ctxlog::event::AnswerReceived { call: 0, message: parse_content_at(call, 1).unwrap() }),
    ];
    for (i, ev) in events.iter().enumerate() {
        let rec = codec::encode(ev).unwrap();
        let back = Record::from_stored(STREAM, i as u64 + 1, rec.as_bytes().to_vec()).unwrap();
        assert_eq!(&codec::decode(STREAM, i as u64 + 1, &back).unwrap(), ev);
    }
}

/// A client-side summary (issue 20): the guard `ClientCompacted` (variant 9 of `GuardKind`)
/// is a new value inside the existing kind 8, its two fields after the tag; logs written
/// before it decode unchanged (the other variants keep their tags).
#[test]
fn client_compacted_round_trips_as_variant_9() {
    let predecessor = "5e551000-0000-4000-8000-00000000000a".to_owned();
    let guard = Event::GuardRaised(GuardRaised {
        call: None,
        kind: GuardKind::ClientCompacted { predecessor: predecessor.clone(), seq: 14 },
        detail: "d".into(),
        knob: "k".into(),
    });
    let rec = codec::encode(&guard).unwrap();
    let body = &rec.body()[2..];
    assert_eq!(body[..3], [0, 9, 36], "call none, variant 9, the predecessor's length");
    assert_eq!(&body[3..39], predecessor.as_bytes());
    assert_eq!(body[39..], [14, 1, b'd', 1, b'k'], "seq, detail, knob");
    assert_eq!(codec::decode(STREAM, 1, &rec).unwrap(), guard);
    assert_eq!(GuardKind::ClientCompacted { predecessor, seq: 14 }.name(), "client_compacted");
}

/// The parity knobs of issue 23, all set.
fn parity_config() -> ctxlog::Config {
    ctxlog::Config {
        exclude_tools: vec!["memory".into(), "todo_write".into()],
        clear_tool_inputs: true,
        tool_placeholder: Some("[cleared]".into()),
        keep_thinking_turns: Some(2),
        ..config()
    }
}

#[test]
fn kind_26_a_session_start_before_the_parity_knobs_decodes_with_them_off() {
    // Kind 26 (today's layout before issue 23) decodes to the same knobs with the parity ones
    // at their defaults, so such a session decides and renders as it did.
    let before = started();
    let rec = codec::legacy::encode_v6(&before).unwrap().unwrap();
    assert_eq!(rec.body()[1], codec::kind::SESSION_STARTED_V5);
    let back = codec::decode(STREAM, 1, &rec).unwrap();
    assert_eq!(back, before);
    let Event::SessionStarted(s) = back else { unreachable!() };
    assert!(s.config.exclude_tools.is_empty() && !s.config.clear_tool_inputs);
    assert_eq!((s.config.tool_placeholder, s.config.keep_thinking_turns), (None, None));
    // Today's kind holds the four new fields (one byte each at their defaults) and is written
    // for every new session.
    let now = codec::encode(&before).unwrap();
    assert_eq!(now.body()[1], codec::kind::SESSION_STARTED);
    assert_eq!(now.body().len(), rec.body().len() + 4, "kind 31 = kind 26 + four fields");
    // A session with any parity knob set does not fit kind 26 (nor any older one).
    let set = started_with(ctxlog::WireFormat::Anthropic, parity_config());
    assert!(codec::legacy::encode_v6(&set).is_none());
    assert!(codec::legacy::encode_v5(&Event::SessionStarted(match &set {
        Event::SessionStarted(s) => ctxlog::event::SessionStarted { config: v1(s.config.clone()), ..s.clone() },
        _ => unreachable!(),
    }))
    .is_none());
    let rec = codec::encode(&set).unwrap();
    assert_eq!(rec.body()[1], codec::kind::SESSION_STARTED);
    assert_eq!(codec::decode(STREAM, 1, &rec).unwrap(), set);
}

#[test]
fn cleared_and_trimmed_edits_are_kind_32_and_the_first_three_stay_kind_5() {
    use ctxlog::event::{EditKind, EditReason, Edited};
    let edit = |kind| {
        Event::Edited(Edited {
            seq: 3,
            kind,
            reason: EditReason { level: 1, rule: "r".into(), target_tokens: 10, guard: None },
        })
    };
    for (kind, k) in [
        (EditKind::Removed, codec::kind::EDITED),
        (EditKind::Truncated { keep_chars: 9 }, codec::kind::EDITED),
        (EditKind::Stubbed { preview_chars: 9 }, codec::kind::EDITED),
        (EditKind::Cleared, codec::kind::EDITED_CLEARS),
        (EditKind::Trimmed { thinking: true, inputs: false }, codec::kind::EDITED_CLEARS),
        (EditKind::Trimmed { thinking: true, inputs: true }, codec::kind::EDITED_CLEARS),
    ] {
        let ev = edit(kind);
        let rec = codec::encode(&ev).unwrap();
        assert_eq!(rec.body()[1], k, "{kind:?}");
        assert_eq!(codec::decode(STREAM, 4, &rec).unwrap(), ev);
        // No older layout set writes the new kinds.
        assert_eq!(codec::legacy::encode(&ev).is_none(), k == codec::kind::EDITED_CLEARS);
    }
    // A kind 5 record carrying a new edit kind is damage, named, never read as an edit.
    let mut body = codec::encode(&edit(EditKind::Cleared)).unwrap().body().to_vec();
    body[1] = codec::kind::EDITED;
    let err = decode_err(body, 4);
    assert!(err.detail.contains("kind 5") && err.detail.contains("cleared"), "{err}");
}

#[test]
fn client_context_management_round_trips_as_variant_10() {
    for applied in [false, true] {
        let guard = Event::GuardRaised(GuardRaised {
            call: None,
            kind: GuardKind::ClientContextManagement { applied },
            detail: "d".into(),
            knob: "k".into(),
        });
        let rec = codec::encode(&guard).unwrap();
        assert_eq!(rec.body()[1], codec::kind::GUARD_RAISED);
        assert_eq!(rec.body()[2..], [0, 10, u8::from(applied), 1, b'd', 1, b'k'], "call none, variant 10, applied");
        assert_eq!(codec::decode(STREAM, 1, &rec).unwrap(), guard);
    }
    assert_eq!(GuardKind::ClientContextManagement { applied: true }.name(), "client_context_management:applied");
}
