//! Reading a JSONL transcript: every line is validated (JSON, fields, base64, format, tool
//! pairing) before anything is written, and every error names the file, the line and the field.

use std::collections::BTreeSet;
use std::io::{BufRead, Read};
use std::path::Path;

use ctxlog::message::Message;
use ctxlog::wire::{self, WireFormat};

use crate::error::CliError;

/// Longest accepted line. A 10 MB screenshot is ~13.4 MB of base64; anything much larger is
/// almost certainly not one chat message.
pub const MAX_LINE_BYTES: usize = 32 << 20;

/// One parsed line.
#[derive(Debug, Clone)]
pub struct Line {
    /// 1-based line number in the file.
    pub number: usize,
    /// The message.
    pub message: Message,
}

/// A validated transcript.
#[derive(Debug, Clone)]
pub struct Transcript {
    /// Its format (detected or forced).
    pub format: WireFormat,
    /// The messages in order.
    pub lines: Vec<Line>,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// Detect from the content.
    Auto,
    /// Anthropic Messages style.
    Anthropic,
    /// OpenAI chat style.
    Openai,
}

/// Reads and validates `path`.
pub fn read_file(path: &Path, format: FormatArg) -> Result<Transcript, CliError> {
    let file = std::fs::File::open(path).map_err(|e| CliError::input(path, 0, format!("cannot open: {e}")))?;
    read(std::io::BufReader::new(file), path, format)
}

/// Reads and validates a transcript from any reader (`path` names it in errors).
pub fn read(mut reader: impl BufRead, path: &Path, format: FormatArg) -> Result<Transcript, CliError> {
    let mut lines = Vec::new();
    let mut buf = Vec::new();
    let mut number = 0;
    loop {
        number += 1;
        buf.clear();
        // Read at most one byte past the limit, so an oversized line is refused without
        // holding it in memory.
        let n = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| CliError::input(path, number, format!("read error: {e}")))?;
        if n == 0 {
            break;
        }
        if buf.len() > MAX_LINE_BYTES && buf.last() != Some(&b'\n') {
            return Err(CliError::input(
                path,
                number,
                format!("line is longer than the {} MiB limit of one message", MAX_LINE_BYTES >> 20),
            ));
        }
        let text = std::str::from_utf8(&buf).map_err(|e| {
            CliError::input(path, number, format!("not UTF-8 text (invalid byte at column {})", e.valid_up_to() + 1))
        })?;
        // Editors on Windows start UTF-8 files with a byte-order mark; it is not part of the JSON.
        let text = if number == 1 { text.strip_prefix('\u{feff}').unwrap_or(text) } else { text };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let message = wire::parse_message(text).map_err(|e| CliError::wire(path, number, &e))?;
        lines.push(Line { number, message });
    }
    if lines.is_empty() {
        return Err(CliError::input(path, 0, "the transcript holds no messages".into()));
    }
    let format = match format {
        FormatArg::Anthropic => WireFormat::Anthropic,
        FormatArg::Openai => WireFormat::OpenAi,
        FormatArg::Auto => detect(&lines, path)?,
    };
    let mut calls = BTreeSet::new();
    let mut answered = BTreeSet::new();
    for l in &lines {
        wire::check_format(&l.message, format)
            .map_err(|e| CliError::input(path, l.number, format!("{e} (format {})", format.as_str())))?;
        for id in l.message.call_ids() {
            if !calls.insert(id.to_owned()) {
                return Err(CliError::input(path, l.number, format!("tool call id {id:?} is used twice")));
            }
        }
        for id in l.message.result_ids() {
            if !calls.contains(id) {
                return Err(CliError::input(path, l.number, format!("tool result answers unknown call {id:?}")));
            }
            if !answered.insert(id.to_owned()) {
                return Err(CliError::input(path, l.number, format!("tool call {id:?} is answered twice")));
            }
        }
    }
    Ok(Transcript { format, lines })
}

fn detect(lines: &[Line], path: &Path) -> Result<WireFormat, CliError> {
    let mut found: Option<(WireFormat, usize)> = None;
    for l in lines {
        if let Some(f) = wire::detect(&l.message) {
            match found {
                None => found = Some((f, l.number)),
                Some((g, first)) if g != f => {
                    return Err(CliError::input(
                        path,
                        l.number,
                        format!(
                            "looks like {} but line {first} looks like {}; pass --format to choose",
                            f.as_str(),
                            g.as_str()
                        ),
                    ))
                }
                _ => {}
            }
        }
    }
    Ok(found.map_or(WireFormat::Anthropic, |(f, _)| f))
}
