//! Both wire formats: lossless round trips, byte-stable tool inputs, format detection and
//! rejection, errors naming the field, media externalized to blobs and exported back, and the
//! token estimator's numbers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Mutex;

use ctxlog::internal::tokens::{Estimator, BLOCK_OVERHEAD, MESSAGE_OVERHEAD};
use ctxlog::internal::wire::{self, check_format, detect, parse_message, to_json, Media, RenderOpts, WireFormat};
use ctxlog::message::{Block, Content, ImageUrl, MediaData, MediaSource, Message};
use ctxlog::replay;
use ctxlog::store::{BlobId, ExpectedVersion, Record, Snapshot, StoreError, StoredRecord, StreamId, Version};
use ctxlog::{Config, MemoryStore, Session, SessionError, Store, Timestamp};
use ctxlog_tests::scenario::{b64, cli, png, rich_anthropic, rich_openai, T0};
use serde_json::Value;

const REFS: RenderOpts<'static> = RenderOpts { meta: true, media: Media::Refs };

fn lines(t: &str) -> Vec<&str> {
    t.lines().filter(|l| !l.trim().is_empty()).collect()
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn round_trip(line: &str) -> String {
    let m = parse_message(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let (out, missing) = to_json(&m, REFS);
    assert!(missing.is_empty());
    out
}

// ---- Round trips -----------------------------------------------------------------------------

#[test]
fn a_rich_anthropic_transcript_round_trips_equal_as_json() {
    for line in lines(&rich_anthropic()) {
        let out = round_trip(line);
        assert_eq!(json(&out), json(line), "round trip changed the message");
        // Parsing the output again gives the same model (the writer is a fixed point).
        assert_eq!(parse_message(&out).unwrap(), parse_message(line).unwrap());
    }
}

#[test]
fn a_rich_openai_transcript_round_trips_equal_as_json() {
    for line in lines(&rich_openai()) {
        let out = round_trip(line);
        assert_eq!(json(&out), json(line), "round trip changed the message");
    }
}

#[test]
fn without_meta_the_ctxlog_fields_are_left_out_of_a_view() {
    let line = r#"{"role":"user","content":"hi","pinned":true,"timestamp":12,"usage":{"input_tokens":3},"name":"x"}"#;
    let m = parse_message(line).unwrap();
    let (out, _) = to_json(&m, RenderOpts { meta: false, media: Media::Refs });
    assert_eq!(json(&out), json(r#"{"role":"user","content":"hi","name":"x"}"#));
}

#[test]
fn tool_inputs_keep_their_original_text_byte_for_byte() {
    let input = r#"{"b": 1,  "a": [1, 2]}"#;
    let line =
        format!(r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"t","name":"f","input":{input}}}]}}"#);
    let out = round_trip(&line);
    assert!(out.contains(input), "input re-serialized: {out}");
    // Keys not sorted, spacing kept: a re-serializing writer would fail this.
    assert!(!out.contains(r#"{"a":[1,2],"b":1}"#));

    let args = r#"{\"q\":  \"x\", \"z\": 1}"#;
    let line = format!(
        r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"c","type":"function","function":{{"name":"f","arguments":"{args}"}}}}]}}"#
    );
    let out = round_trip(&line);
    assert!(out.contains(args), "arguments re-serialized: {out}");
    // The rich transcript's nested input survives verbatim too.
    let rich = rich_anthropic();
    let tool_line = lines(&rich)[2];
    let nested = r#"{"b": 1,  "a": [1, 2], "nested": {"deep": [true, null, 1.5e3, "é\u00e9"]}}"#;
    assert!(tool_line.contains(nested));
    assert!(round_trip(tool_line).contains(nested));
}

#[test]
fn media_payloads_are_kept_exactly_and_typed() {
    let rich = rich_anthropic();
    let m = parse_message(lines(&rich)[1]).unwrap();
    let kinds: Vec<_> = m
        .blocks()
        .iter()
        .map(|b| match b {
            Block::Text { .. } => "text",
            Block::Media { source: MediaSource::Base64 { data: MediaData::Inline(_), .. }, .. } => "inline",
            Block::Media { source: MediaSource::Other(_), .. } => "other-source",
            _ => "?",
        })
        .collect();
    assert_eq!(kinds, ["text", "inline", "inline", "other-source"]);
    assert_eq!(m.meta.pinned, Some(true));
    let o = parse_message(lines(&rich_openai())[2]).unwrap();
    assert!(
        matches!(&o.blocks()[1], Block::ImageUrl { url: ImageUrl::Data { media_type, .. }, .. } if media_type == "image/png")
    );
    assert!(matches!(&o.blocks()[2], Block::ImageUrl { url: ImageUrl::Link(_), .. }));
}

#[test]
fn tool_pairs_are_indexed_in_both_formats() {
    let a = parse_message(lines(&rich_anthropic())[2]).unwrap();
    assert_eq!(a.call_ids().collect::<Vec<_>>(), ["toolu_01"]);
    let r = parse_message(lines(&rich_anthropic())[5]).unwrap();
    assert_eq!(r.result_ids().collect::<Vec<_>>(), ["toolu_02"]);
    assert!(r.is_tool_result() && !r.is_human());
    let o = parse_message(lines(&rich_openai())[3]).unwrap();
    assert_eq!(o.call_ids().collect::<Vec<_>>(), ["call_1", "call_2"]);
    assert_eq!(o.content, Some(Content::Null));
    let t = parse_message(lines(&rich_openai())[4]).unwrap();
    assert_eq!(t.result_ids().collect::<Vec<_>>(), ["call_1"]);
}

// ---- Detection and format checks ---------------------------------------------------------------

#[test]
fn formats_are_detected_from_evidence_and_plain_text_is_neutral() {
    let detected = |line: &str| detect(&parse_message(line).unwrap());
    assert_eq!(detected(r#"{"role":"user","content":"hi"}"#), None);
    assert_eq!(detected(r#"{"role":"tool","tool_call_id":"c","content":"x"}"#), Some(WireFormat::OpenAi));
    assert_eq!(detected(r#"{"role":"developer","content":"x"}"#), Some(WireFormat::OpenAi));
    assert_eq!(
        detected(r#"{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}"#),
        Some(WireFormat::OpenAi)
    );
    assert_eq!(
        detected(r#"{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}"#),
        Some(WireFormat::Anthropic)
    );
    assert_eq!(
        detected(r#"{"role":"assistant","content":[{"type":"thinking","thinking":"hm"}]}"#),
        Some(WireFormat::Anthropic)
    );
    for line in lines(&rich_anthropic()) {
        let m = parse_message(line).unwrap();
        assert_ne!(detect(&m), Some(WireFormat::OpenAi), "{line}");
        check_format(&m, WireFormat::Anthropic).unwrap();
    }
    for line in lines(&rich_openai()) {
        let m = parse_message(line).unwrap();
        assert_ne!(detect(&m), Some(WireFormat::Anthropic), "{line}");
        check_format(&m, WireFormat::OpenAi).unwrap();
    }
}

#[test]
fn a_tool_role_is_rejected_in_the_anthropic_format() {
    let m = parse_message(r#"{"role":"tool","tool_call_id":"c","content":"x"}"#).unwrap();
    let e = check_format(&m, WireFormat::Anthropic).unwrap_err();
    assert_eq!(e.field, "role");
    check_format(&m, WireFormat::OpenAi).unwrap();
    let m = parse_message(r#"{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"https://x"}}]}"#).unwrap();
    assert_eq!(check_format(&m, WireFormat::Anthropic).unwrap_err().field, "content[1]");
}

#[test]
fn a_tool_use_block_is_rejected_in_the_openai_format() {
    let m = parse_message(
        r#"{"role":"assistant","content":[{"type":"text","text":"x"},{"type":"tool_use","id":"t","name":"f","input":{}}]}"#,
    )
    .unwrap();
    let e = check_format(&m, WireFormat::OpenAi).unwrap_err();
    assert_eq!(e.field, "content[1]");
    check_format(&m, WireFormat::Anthropic).unwrap();
    let m = parse_message(r#"{"role":"tool","content":"no id"}"#).unwrap();
    assert_eq!(check_format(&m, WireFormat::OpenAi).unwrap_err().field, "tool_call_id");
}

// ---- Errors name the field -------------------------------------------------------------------

fn field_of(line: &str) -> String {
    match parse_message(line) {
        Ok(m) => panic!("expected an error for {line}, parsed {m:?}"),
        Err(e) => {
            assert!(e.to_string().contains(&e.field), "the message names the field: {e}");
            e.field
        }
    }
}

#[test]
fn parse_errors_name_the_field_path() {
    let cases = [
        (
            r#"{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"!!not base64!!"}}]}"#,
            "content[1].source.data",
        ),
        (r#"{"role":"wizard","content":"x"}"#, "role"),
        (r#"{"content":"x"}"#, "role"),
        (r#"{"role":7,"content":"x"}"#, "role"),
        (r#"{"role":"user","content":42}"#, "content"),
        (r#"{"role":"user","content":[{"type":"text"}]}"#, "content[0].text"),
        (r#"{"role":"user","content":[{"text":"no type"}]}"#, "content[0].type"),
        (r#"{"role":"user","content":[{"type":"image"}]}"#, "content[0].source"),
        (
            r#"{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,@@@"}}]}"#,
            "content[0].image_url.url",
        ),
        (
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":{"arguments":"{}"}}]}"#,
            "tool_calls[0].function.name",
        ),
        (r#"{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f"}]}"#, "content[0].input"),
        (
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"a"}}]}]}"#,
            "content[0].content[0].source.data",
        ),
        (
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":"yes"}]}"#,
            "content[0].is_error",
        ),
        (r#"{"role":"user","content":"x","pinned":"yes"}"#, "pinned"),
        (r#"{"role":"user","content":"x","timestamp":"yesterday"}"#, "timestamp"),
        (r#"{"role":"user","content":"x","usage":{"input_tokens":-1}}"#, "usage"),
        (r#"["role","user"]"#, ""),
        (r#"{"role":"user","content":"x""#, ""),
    ];
    for (line, field) in cases {
        assert_eq!(field_of(line), field, "{line}");
    }
}

#[test]
fn non_canonical_base64_is_refused_so_export_can_be_byte_identical() {
    // "QQ" lacks padding, "QR==" has non-zero trailing bits: both decode leniently elsewhere
    // but would not re-encode to the same text.
    for data in ["QQ", "QR==", "QQ==\n"] {
        let line = format!(
            r#"{{"role":"user","content":[{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":{}}}}}]}}"#,
            serde_json::Value::String(data.into())
        );
        assert_eq!(field_of(&line), "content[0].source.data", "{data:?}");
    }
    parse_message(r#"{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"QQ=="}}]}"#).unwrap();
}

// ---- Media through a Session -----------------------------------------------------------------

/// A store that logs the order of writes, and can refuse blobs.
struct Recording {
    inner: MemoryStore,
    log: Mutex<Vec<String>>,
    refuse_blobs: bool,
}

impl Recording {
    fn new(refuse_blobs: bool) -> Self {
        Recording { inner: MemoryStore::new(), log: Mutex::new(Vec::new()), refuse_blobs }
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Store for Recording {
    fn append(&self, stream: StreamId, expected: ExpectedVersion, records: &[Record]) -> Result<Version, StoreError> {
        let v = self.inner.append(stream, expected, records)?;
        self.log.lock().unwrap().push(format!("append {}", records.len()));
        Ok(v)
    }
    fn read(&self, stream: StreamId, from: Version, max: usize) -> Result<Vec<StoredRecord>, StoreError> {
        self.inner.read(stream, from, max)
    }
    fn head(&self, stream: StreamId) -> Result<Option<Version>, StoreError> {
        self.inner.head(stream)
    }
    fn streams(&self) -> Result<Vec<StreamId>, StoreError> {
        self.inner.streams()
    }
    fn put_snapshot(&self, stream: StreamId, snap: &Snapshot) -> Result<(), StoreError> {
        self.inner.put_snapshot(stream, snap)
    }
    fn get_snapshot(&self, stream: StreamId) -> Result<Option<Snapshot>, StoreError> {
        self.inner.get_snapshot(stream)
    }
    fn put_blob(&self, bytes: &[u8]) -> Result<BlobId, StoreError> {
        if self.refuse_blobs {
            return Err(StoreError::backend("recording", "put_blob", std::io::Error::other("disk full")));
        }
        let id = self.inner.put_blob(bytes)?;
        self.log.lock().unwrap().push(format!("blob {id}"));
        Ok(id)
    }
    fn get_blob(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get_blob(id)
    }
}

fn image_message(bytes: &[u8]) -> Message {
    parse_message(&format!(
        r#"{{"role":"user","content":[{{"type":"text","text":"look"}},{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{}"}}}}]}}"#,
        b64(bytes)
    ))
    .unwrap()
}

fn blob_ref(m: &Message) -> &ctxlog::message::BlobRef {
    match &m.blocks()[1] {
        Block::Media { source: MediaSource::Base64 { data: MediaData::Blob(r), .. }, .. } => r,
        other => panic!("not externalized: {other:?}"),
    }
}

#[test]
fn an_image_is_externalized_to_a_blob_written_before_its_event() {
    let store = Recording::new(false);
    let id = StreamId(uuid::Uuid::from_u128(1));
    let mut s =
        Session::create(&store, id, WireFormat::Anthropic, Config::default(), Timestamp::from_millis(T0)).unwrap();
    let bytes = png(800, 600);
    let appended = s.append(vec![image_message(&bytes), image_message(&bytes)]).unwrap();
    let blob = BlobId::of(&bytes);
    assert!(blob.as_str().starts_with("sha256:"), "{blob}");
    assert_eq!(store.get_blob(&blob).unwrap().as_deref(), Some(&bytes[..]), "the blob exists after append");
    assert_eq!(appended.blobs, vec![blob.clone(), blob.clone()], "deduplicated by content");
    assert!(appended.inline_fallbacks.is_empty());
    let log = store.log();
    let first_blob = log.iter().position(|l| l.starts_with("blob ")).unwrap();
    let event_append = log.iter().rposition(|l| l.starts_with("append ")).unwrap();
    assert!(first_blob < event_append, "blob must be written before the event: {log:?}");

    let entry = &s.state().entries()[0];
    let r = blob_ref(s.state().original(0).unwrap());
    assert_eq!((r.id.clone(), r.bytes, r.width, r.height), (blob, bytes.len() as u64, Some(800), Some(600)));
    // Cost by size, ceil(800*600/750) = 640, not by payload length.
    let text = ctxlog::internal::tokens::text_tokens("look");
    assert_eq!(entry.tokens, MESSAGE_OVERHEAD + BLOCK_OVERHEAD + text + BLOCK_OVERHEAD + 640);
    // The stored event holds no base64 payload.
    let rec = &store.read(id, 2, 1).unwrap()[0];
    assert!(rec.record.as_bytes().len() < bytes.len() / 2, "the payload stayed in the event");
}

#[test]
fn a_blob_that_cannot_be_written_falls_back_to_inline() {
    let store = Recording::new(true);
    let mut s = Session::create(
        &store,
        StreamId(uuid::Uuid::from_u128(2)),
        WireFormat::Anthropic,
        Config::default(),
        Timestamp::from_millis(T0),
    )
    .unwrap();
    let bytes = png(32, 32);
    let appended = s.append(vec![image_message(&bytes)]).unwrap();
    assert_eq!(appended.inline_fallbacks.len(), 1);
    assert!(appended.inline_fallbacks[0].contains("disk full"), "{:?}", appended.inline_fallbacks);
    let m = s.state().original(0).unwrap();
    assert!(
        matches!(&m.blocks()[1], Block::Media { source: MediaSource::Base64 { data: MediaData::Inline(d), .. }, .. } if *d == b64(&bytes))
    );
    // Inline payloads cost the flat amount.
    assert_eq!(s.state().entries()[0].tokens, MESSAGE_OVERHEAD + BLOCK_OVERHEAD + 1 + BLOCK_OVERHEAD + 1_600);
}

#[test]
fn rendering_resolves_blobs_back_to_the_original_base64() {
    let store = MemoryStore::new();
    let mut s = Session::create(
        &store,
        StreamId(uuid::Uuid::from_u128(3)),
        WireFormat::Anthropic,
        Config::default(),
        Timestamp::from_millis(T0),
    )
    .unwrap();
    let original = lines(&rich_anthropic()).into_iter().map(str::to_owned).collect::<Vec<_>>();
    s.append(original[..2].iter().map(|l| parse_message(l).unwrap()).collect()).unwrap();
    let source = |id: &BlobId| store.get_blob(id).ok().flatten();
    for (m, line) in s.messages(0..2).unwrap().iter().zip(&original) {
        let (inline, missing) = to_json(m, RenderOpts { meta: true, media: Media::Inline(&source) });
        assert!(missing.is_empty());
        assert_eq!(json(&inline), json(line));
        let (refs, _) = to_json(m, REFS);
        if line.contains("base64") {
            assert!(refs.contains("\"type\":\"blob\"") && refs.contains("sha256:"), "{refs}");
            assert!(refs.len() < line.len());
        }
    }
    // A missing blob stays a reference and is reported.
    let empty = |_: &BlobId| None;
    let (_, missing) = to_json(s.state().original(1).unwrap(), RenderOpts { meta: true, media: Media::Inline(&empty) });
    assert_eq!(missing.len(), 2, "the image and the document");
}

#[test]
fn export_returns_the_imported_transcript_equal_as_json_with_media_inlined() {
    for (name, transcript) in [("anthropic", rich_anthropic()), ("openai", rich_openai())] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(format!("{name}.jsonl"));
        std::fs::write(&file, &transcript).unwrap();
        let url = format!("sqlite:{}", dir.path().join("x.db").display());
        let (code, _, err) = cli(&["import", file.to_str().unwrap(), "--json", "--store", &url]);
        assert_eq!(code, 0, "{err}");
        let (code, out, err) = cli(&["export", "--store", &url]);
        assert_eq!(code, 0, "{err}");
        assert!(err.is_empty(), "{err}");
        let got = lines(&out);
        let want = lines(&transcript);
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(json(g), json(w), "{name}");
        }
        // The image bytes come back identical, not re-encoded.
        let img = b64(&png(if name == "openai" { 64 } else { 800 }, if name == "openai" { 48 } else { 600 }));
        assert!(out.contains(&img));
        // And verify agrees that the blobs are all there.
        let (code, out, err) = cli(&["verify", "--store", &url, "--json"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(json(out.trim())["blobs"].as_u64().unwrap() >= 1);
    }
}

// ---- The token estimator ---------------------------------------------------------------------

#[test]
fn per_message_estimates_sum_exactly_to_the_view_and_verify_agrees() {
    let store = MemoryStore::new();
    let id = StreamId(uuid::Uuid::from_u128(4));
    let mut s =
        Session::create(&store, id, WireFormat::Anthropic, Config::default(), Timestamp::from_millis(T0)).unwrap();
    let all = lines(&rich_anthropic()).into_iter().map(|l| parse_message(l).unwrap()).collect::<Vec<_>>();
    let mut at = T0;
    for m in all {
        let is_call = m.role == ctxlog::message::Role::Assistant;
        if is_call {
            at += 30_000;
            let plan = s.plan(Timestamp::from_millis(at)).unwrap();
            let sum: u64 = s.state().entries().iter().map(|e| u64::from(e.tokens)).sum();
            assert_eq!(plan.view_tokens, sum);
            assert_eq!(s.state().view_tokens(), sum);
            s.commit(plan, Timestamp::from_millis(at), None).unwrap();
        }
        s.append(vec![m]).unwrap();
        let sum: u64 = s.state().entries().iter().map(|e| u64::from(e.tokens)).sum();
        assert_eq!(s.state().view_tokens(), sum);
        // Every cached estimate equals a fresh estimate of the stored message.
        let est = Estimator::default();
        let stored = s.messages(0..s.state().message_count()).unwrap();
        for (e, m) in s.state().entries().iter().zip(&stored) {
            assert_eq!(e.tokens, est.message(m));
        }
    }
    let report = replay::verify(&store, id).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.calls, 3);
}

#[test]
fn twenty_thousand_chars_of_text_is_about_five_thousand_tokens() {
    let text = "word ".repeat(4000);
    let m = parse_message(&format!(r#"{{"role":"user","content":"{text}"}}"#)).unwrap();
    assert_eq!(Estimator::default().message(&m), MESSAGE_OVERHEAD + 5_000);
    let blocks = parse_message(&format!(r#"{{"role":"user","content":[{{"type":"text","text":"{text}"}}]}}"#)).unwrap();
    assert_eq!(Estimator::default().message(&blocks), MESSAGE_OVERHEAD + BLOCK_OVERHEAD + 5_000);
}

#[test]
fn a_seven_megabyte_screenshot_costs_the_flat_image_price_not_millions() {
    // The seeds' incident: a 7,182,876-char base64 screenshot estimated at ~1.8M tokens.
    let bytes: Vec<u8> = (0..5_387_157u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let data = b64(&bytes);
    assert_eq!(data.len(), 7_182_876);
    let line = format!(
        r#"{{"role":"user","content":[{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{data}"}}}}]}}"#
    );
    let m = parse_message(&line).unwrap();
    let flat = MESSAGE_OVERHEAD + BLOCK_OVERHEAD + 1_600;
    assert_eq!(Estimator::default().message(&m), flat, "inline");
    // Externalized (no readable header, so no dimensions): still flat.
    let store = MemoryStore::new();
    let mut s = Session::create(
        &store,
        StreamId(uuid::Uuid::from_u128(5)),
        WireFormat::Anthropic,
        Config::default(),
        Timestamp::from_millis(T0),
    )
    .unwrap();
    s.append(vec![m]).unwrap();
    assert_eq!(s.state().entries()[0].tokens, flat);
    assert_eq!(s.state().view_tokens(), u64::from(flat));
    // --image-tokens moves it.
    assert_eq!(Estimator { image_tokens: 800 }.message(s.state().original(0).unwrap()), flat - 800);
}

#[test]
fn a_known_size_costs_by_the_provider_formula_capped_at_the_flat_price() {
    let store = MemoryStore::new();
    let mut s = Session::create(
        &store,
        StreamId(uuid::Uuid::from_u128(6)),
        WireFormat::Anthropic,
        Config::default(),
        Timestamp::from_millis(T0),
    )
    .unwrap();
    s.append(vec![image_message(&png(100, 75)), image_message(&png(4000, 3000))]).unwrap();
    let base = MESSAGE_OVERHEAD + BLOCK_OVERHEAD + 1 + BLOCK_OVERHEAD;
    assert_eq!(s.state().entries()[0].tokens, base + 10); // ceil(7500/750)
    assert_eq!(s.state().entries()[1].tokens, base + 1_600); // capped
    let r = blob_ref(s.state().original(1).unwrap());
    assert_eq!((r.width, r.height), (Some(4000), Some(3000)));
}

#[test]
fn messages_with_only_wrong_format_parts_are_refused_by_the_session() {
    let store = MemoryStore::new();
    let mut s = Session::create(
        &store,
        StreamId(uuid::Uuid::from_u128(7)),
        WireFormat::OpenAi,
        Config::default(),
        Timestamp::from_millis(T0),
    )
    .unwrap();
    let head = store.head(s.id()).unwrap();
    let err = s.append(vec![image_message(&png(2, 2))]).unwrap_err();
    assert!(matches!(&err, SessionError::Message { index: 0, error } if error.field == "content[1]"), "{err:?}");
    assert_eq!(store.head(s.id()).unwrap(), head);
    // The blob was not written either: validation comes first.
    assert!(store.get_blob(&BlobId::of(&png(2, 2))).unwrap().is_none());
}

#[test]
fn an_openai_tool_call_without_a_type_exports_without_one_but_views_name_it() {
    // Regression: parsing defaulted the missing `type` to "function" and export wrote it back,
    // so the exported transcript was not equal to the imported one.
    let line =
        r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}]}"#;
    let m = parse_message(line).unwrap();
    assert_eq!(json(&to_json(&m, REFS).0), json(line));
    let (view, _) = to_json(&m, RenderOpts { meta: false, media: Media::Refs });
    assert_eq!(json(&view)["tool_calls"][0]["type"], Value::from("function"));
    // An explicit type is kept as given, in both.
    let typed = line.replace(r#""id":"c","#, r#""id":"c","type":"function","#);
    let m = parse_message(&typed).unwrap();
    assert_eq!(json(&to_json(&m, REFS).0), json(&typed));
    assert_eq!(json(&to_json(&m, RenderOpts { meta: false, media: Media::Refs }).0), json(&typed));
}

#[test]
fn a_string_that_does_not_decode_says_why_instead_of_a_type_mismatch() {
    // Regression: a lone surrogate escape was reported as "expected a string, found a string".
    for (line, field) in [
        (r#"{"role":"user","content":"\ud800"}"#, "content"),
        (r#"{"role":"user","content":[{"type":"text","text":"ok \udc00"}]}"#, "content[0].text"),
    ] {
        let e = parse_message(line).unwrap_err();
        assert_eq!(e.field, field);
        assert!(e.message.starts_with("invalid string: "), "{e}");
        assert!(!e.message.contains("found a string"), "{e}");
    }
    // A real type mismatch still says so.
    let e = parse_message(r#"{"role":"user","content":[{"type":"text","text":5}]}"#).unwrap_err();
    assert_eq!((e.field.as_str(), e.message.as_str()), ("content[0].text", "expected a string, found a number"));
}

#[test]
fn a_line_that_is_not_a_json_object_is_not_blamed_on_an_empty_field() {
    // Regression: these were reported as "field ``: invalid JSON ...".
    for line in [r#"{"role":"user""#, "null", r#"["role","user"]"#, "not json"] {
        let e = parse_message(line).unwrap_err();
        assert_eq!(e.field, "");
        assert!(!e.to_string().contains("field"), "{e}");
    }
    let e = parse_message(r#"{"role":"user","content":5}"#).unwrap_err();
    assert!(e.to_string().starts_with("field `content`: "), "{e}");
}

#[test]
fn the_demo_transcript_exports_back_equal_as_json() {
    let transcript = ctxlog_workload::demo_transcript();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("demo.jsonl");
    std::fs::write(&file, &transcript).unwrap();
    let url = format!("sqlite:{}", dir.path().join("x.db").display());
    let (code, _, err) = cli(&["import", file.to_str().unwrap(), "--store", &url]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&["export", "--store", &url]);
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "{err}");
    let (got, want) = (lines(&out), lines(&transcript));
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(json(g) == json(w), "line {} differs after export", i + 1);
    }
}

#[test]
fn tool_result_nesting_is_bounded() {
    let nested = |depth: usize| {
        let mut content = String::from("\"x\"");
        for _ in 0..depth {
            content = format!(r#"[{{"type":"tool_result","tool_use_id":"t","content":{content}}}]"#);
        }
        format!(r#"{{"role":"user","content":{content}}}"#)
    };
    let ok = nested(wire::MAX_CONTENT_NESTING);
    assert_eq!(json(&round_trip(&ok)), json(&ok));
    let e = parse_message(&nested(wire::MAX_CONTENT_NESTING + 1)).unwrap_err();
    assert!(e.message.contains("nested"), "{e}");
    assert_eq!(e.field, format!("content{}", "[0].content".repeat(wire::MAX_CONTENT_NESTING + 1)));
}

#[test]
fn timestamps_must_be_real_instants() {
    // Regression: any day up to 31 was accepted in every month (2026-02-30 became March 2) and
    // offsets were not range-checked.
    let ts = |t: &str| parse_message(&format!(r#"{{"role":"user","content":"x","timestamp":"{t}"}}"#));
    for bad in [
        "2026-02-29T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-04-31T12:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-01-01T24:00:00Z",
        "2026-01-01T00:00:00+24:00",
        "2026-01-01T00:00:00+05:60",
        "2026-01-01",
        "1969-12-31T23:59:59Z",
    ] {
        assert_eq!(ts(bad).unwrap_err().field, "timestamp", "{bad}");
    }
    let ms = |t: &str| ctxlog::time::parse_rfc3339_ms(t).unwrap();
    assert_eq!(ms("2024-02-29T00:00:00Z"), 1_709_164_800_000, "leap day");
    assert_eq!(ms("2026-01-01T05:30:00.25+05:30"), 1_767_225_600_250);
    assert_eq!(ms("2026-01-01T00:00:00Z"), 1_767_225_600_000);
    assert_eq!(ms("2000-02-29T00:00:00Z"), 951_782_400_000);
}
