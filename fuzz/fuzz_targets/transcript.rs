//! JSONL transcripts, end to end: the CLI's reader (`tools/src/transcript.rs`, which parses each
//! line with `core/src/wire.rs`), then `import` into a memory store, `verify`, `replay` and
//! the lossless export.
//!
//! Input: two knob bytes, then the transcript's bytes. First byte: bits 0–1 `--format` auto /
//! anthropic / openai / auto, bit 2 `--cache-aware`, bits 3–7 a budget from 300 to 12,700
//! tokens (small enough that the ladder, flushes, summaries and guards run). Second byte (0 =
//! the defaults): bits 0–1 protected tool results 5 / 0 / 1 / 2, bits 2–3 truncation to 250 /
//! 40 / 100 / 1,000 characters, bit 4 no summarizer, bits 5–6 protected recent share 0.3 / 0 /
//! 0.1 / 0.6 (so a few kilobytes of tool output are enough to reach every ladder level).
//!
//! A transcript the reader refuses must get an input error naming the file and a line that
//! exists; one it accepts must import without error, verify clean, replay to the same
//! timeline, produce one JSON view line per call with the recorded number of messages, and
//! export every message back to the same message it was read as.

#![no_main]

use std::path::Path;

use ctxlog::config::SummarizerKind;
use ctxlog::message::Role;
use ctxlog::replay::{replay, verify, Mode};
use ctxlog::internal::wire::{parse_message, to_json, Media, RenderOpts};
use ctxlog::{Config, MemoryStore, Session, Store, StreamId};
use ctxlog_tools::error::CliError;
use ctxlog_tools::import::{import, ImportOptions};
use ctxlog_tools::transcript::{read, FormatArg};
use libfuzzer_sys::fuzz_target;

const FILE: &str = "fuzz.jsonl";

/// One line of `--views`.
#[derive(serde::Deserialize)]
struct ViewLine<'a> {
    call: u64,
    #[serde(borrow)]
    messages: Vec<&'a serde_json::value::RawValue>,
}
const SESSION: &str = "00000000-0000-0000-0000-0000000f0220";

fuzz_target!(|data: &[u8]| {
    let [knobs, more, text @ ..] = data else { return };
    let (knobs, more) = (*knobs, *more);
    let format = match knobs & 3 {
        1 => FormatArg::Anthropic,
        2 => FormatArg::Openai,
        _ => FormatArg::Auto,
    };
    let lines_in_file = text.split(|&b| b == b'\n').count();
    let transcript = match read(text, Path::new(FILE), format) {
        Ok(t) => t,
        Err(CliError::Input { file, line, message, .. }) => {
            assert_eq!(file, FILE, "the error names the file");
            assert!(line <= lines_in_file, "line {line} of a {lines_in_file}-line file");
            assert!(!message.is_empty());
            return;
        }
        Err(other) => panic!("the reader may only fail with an input error, got {other:?}"),
    };
    let Ok(id) = SESSION.parse::<StreamId>() else { return };
    let config = Config {
        budget: 300 + u64::from(knobs >> 3) * 400,
        cache_aware: knobs & 4 != 0,
        protected_tool_results: [5, 0, 1, 2][usize::from(more & 3)],
        truncate_chars: [250, 40, 100, 1_000][usize::from((more >> 2) & 3)],
        summarizer: if more & 16 != 0 { SummarizerKind::None } else { SummarizerKind::Extractive },
        protected_recent_ratio: [0.3, 0.0, 0.1, 0.6][usize::from((more >> 5) & 3)],
        ..Config::default()
    };
    // The last bit: Anthropic's context-editing knobs (issue 23) on, so clears, trims and
    // exclusions meet arbitrary transcripts too.
    let config = if more & 128 != 0 {
        Config {
            tool_placeholder: Some("[cleared]".into()),
            clear_tool_inputs: true,
            keep_thinking_turns: Some(1),
            exclude_tools: vec!["read_file".into()],
            ..config
        }
    } else {
        config
    };
    let store = MemoryStore::new();
    let mut views = Vec::new();
    let opts = ImportOptions {
        config,
        session: Some(id),
        call_interval_ms: 30_000,
        views: Some(&mut views),
        inline_media: false,
        summaries: None,
    };
    let done = import(&transcript, &store, opts, |_| Ok(()))
        .unwrap_or_else(|e| panic!("an accepted transcript must import: {e}"));
    let calls = transcript.lines.iter().filter(|l| l.message.role == Role::Assistant).count();
    assert_eq!(done.timeline.len(), calls, "one timeline record per assistant line");
    assert_eq!(done.messages, transcript.lines.len() as u64);

    let report = verify(&store, id).unwrap_or_else(|e| panic!("verify: {e}"));
    assert!(report.ok(), "verify of an imported transcript: {:?}", report.problems);
    let replayed = replay(&store, id, Mode::Strict, None).unwrap_or_else(|e| panic!("replay: {e}"));
    assert_eq!(replayed.timeline, done.timeline, "replay differs from import");

    let view_lines: Vec<&[u8]> = views.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
    assert_eq!(view_lines.len(), calls);
    for ((i, line), record) in view_lines.iter().enumerate().zip(&done.timeline) {
        // Raw messages: tool inputs are spliced verbatim, and JSON allows numbers (say 1e3182)
        // that serde_json::Value cannot hold.
        let view: ViewLine<'_> = serde_json::from_slice(line).unwrap_or_else(|e| panic!("view line {i}: {e}"));
        assert_eq!(view.call, i as u64);
        assert_eq!(view.messages.len() as u64, record.view_messages, "view line {i}");
    }

    let source = |b: &ctxlog::BlobId| store.get_blob(b).ok().flatten();
    let opts = RenderOpts { meta: true, media: Media::Inline(&source) };
    // The state keeps bodies only for the view: the session reads the others back from the log.
    let session = Session::open(&store, id).unwrap_or_else(|e| panic!("open: {e}"));
    let count = replayed.state.message_count();
    assert_eq!(count, transcript.lines.len() as u64);
    let messages = session.messages(0..count).unwrap_or_else(|e| panic!("messages: {e}"));
    for (message, line) in messages.iter().zip(&transcript.lines) {
        let (json, missing) = to_json(message, opts);
        assert!(missing.is_empty(), "line {}: blobs missing on export: {missing:?}", line.number);
        let back =
            parse_message(&json).unwrap_or_else(|e| panic!("line {}: export {json} does not parse: {e}", line.number));
        assert_eq!(back, line.message, "line {}: export is not what was imported: {json}", line.number);
    }
});
