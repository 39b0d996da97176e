//! Reading a JSONL transcript: every line is validated (JSON, fields, base64, format, tool
//! pairing) before anything is written, and every error names the file, the line and the field.
//!
//! A file is read twice and never held whole: [`check_file`] validates it line by line and
//! keeps only its facts (sha256, size, counts, format); import then reads it again line by line
//! ([`TranscriptFile`]), and refuses to finish if the bytes changed in between. [`read`] keeps
//! the messages in memory, for the bundled demo and for tests.

use std::collections::BTreeSet;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use ctxlog::internal::wire::{self, WireFormat};
use ctxlog::message::{Message, RawJson, Role};
use ctxlog::state::tools::ToolKey;
use ctxlog::store::hex;
use sha2::{Digest, Sha256};

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

/// What validation learned about a transcript, and what an import announces about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// sha256 of its bytes, lower-case hex.
    pub sha256: String,
    /// Its length in bytes.
    pub bytes: u64,
    /// Messages (non-blank lines).
    pub messages: u64,
    /// Assistant messages (each is a call at import).
    pub calls: u64,
    /// The first `timestamp` field of any line, as given.
    pub first_timestamp: Option<RawJson>,
}

/// A validated transcript, as import reads it: its format, its facts, and its messages in order.
pub trait Source {
    /// Its format (detected or forced).
    fn format(&self) -> WireFormat;
    /// Its facts.
    fn facts(&self) -> &Facts;
    /// Its messages in order (read again from the file for a [`TranscriptFile`]).
    fn messages(&self) -> Box<dyn Iterator<Item = Result<Message, CliError>> + '_>;
}

/// A validated transcript held in memory.
#[derive(Debug, Clone)]
pub struct Transcript {
    /// Its format (detected or forced).
    pub format: WireFormat,
    /// The messages in order.
    pub lines: Vec<Line>,
    /// Its facts.
    pub facts: Facts,
}

impl Source for Transcript {
    fn format(&self) -> WireFormat {
        self.format
    }

    fn facts(&self) -> &Facts {
        &self.facts
    }

    fn messages(&self) -> Box<dyn Iterator<Item = Result<Message, CliError>> + '_> {
        Box::new(self.lines.iter().map(|l| Ok(l.message.clone())))
    }
}

/// A validated transcript file, read again line by line for each use.
#[derive(Debug, Clone)]
pub struct TranscriptFile {
    path: PathBuf,
    format: WireFormat,
    facts: Facts,
}

impl Source for TranscriptFile {
    fn format(&self) -> WireFormat {
        self.format
    }

    fn facts(&self) -> &Facts {
        &self.facts
    }

    fn messages(&self) -> Box<dyn Iterator<Item = Result<Message, CliError>> + '_> {
        match std::fs::File::open(&self.path) {
            Ok(file) => Box::new(Reread {
                lines: Lines::new(std::io::BufReader::new(file), &self.path),
                expected: &self.facts,
                done: false,
            }),
            Err(e) => Box::new(std::iter::once(Err(CliError::input(&self.path, 0, format!("cannot open: {e}"))))),
        }
    }
}

/// The second reading of a file: the same messages, or an error if its bytes changed.
struct Reread<'a, R: BufRead> {
    lines: Lines<'a, R>,
    expected: &'a Facts,
    done: bool,
}

impl<R: BufRead> Iterator for Reread<'_, R> {
    type Item = Result<Message, CliError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let changed = |lines: &Lines<'_, R>, what: String| {
            CliError::input(lines.path, 0, format!("the file changed while it was imported ({what})"))
        };
        match self.lines.next() {
            Some(Ok(line)) => Some(Ok(line.message)),
            Some(Err(e)) => {
                self.done = true;
                Some(Err(changed(&self.lines, e.to_string())))
            }
            None => {
                self.done = true;
                let (sha256, bytes) = self.lines.digest();
                (sha256 != self.expected.sha256 || bytes != self.expected.bytes).then(|| {
                    Err(changed(
                        &self.lines,
                        format!("{bytes} bytes with sha256 {sha256}, validated as {} bytes", self.expected.bytes),
                    ))
                })
            }
        }
    }
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

/// Validates `path` line by line without keeping its messages; import reads it again.
pub fn check_file(path: &Path, format: FormatArg) -> Result<TranscriptFile, CliError> {
    let file = std::fs::File::open(path).map_err(|e| CliError::input(path, 0, format!("cannot open: {e}")))?;
    let (format, facts) = validate(std::io::BufReader::new(file), path, format, |_| {})?;
    Ok(TranscriptFile { path: path.to_owned(), format, facts })
}

/// Reads and validates a transcript from any reader (`path` names it in errors), keeping its
/// messages in memory.
pub fn read(reader: impl BufRead, path: &Path, format: FormatArg) -> Result<Transcript, CliError> {
    let mut lines = Vec::new();
    let (format, facts) = validate(reader, path, format, |l| lines.push(l))?;
    Ok(Transcript { format, lines, facts })
}

/// The lines of a transcript, parsed, with the sha256 and length of the bytes read so far.
struct Lines<'a, R: BufRead> {
    reader: R,
    path: &'a Path,
    buf: Vec<u8>,
    number: usize,
    hasher: Sha256,
    bytes: u64,
}

impl<'a, R: BufRead> Lines<'a, R> {
    fn new(reader: R, path: &'a Path) -> Self {
        Lines { reader, path, buf: Vec::new(), number: 0, hasher: Sha256::new(), bytes: 0 }
    }

    fn digest(&self) -> (String, u64) {
        (hex(&self.hasher.clone().finalize()), self.bytes)
    }
}

impl<R: BufRead> Iterator for Lines<'_, R> {
    type Item = Result<Line, CliError>;

    fn next(&mut self) -> Option<Self::Item> {
        let path = self.path;
        loop {
            self.number += 1;
            let number = self.number;
            self.buf.clear();
            // Read at most one byte past the limit, so an oversized line is refused without
            // holding it in memory.
            let n = match (&mut self.reader).take(MAX_LINE_BYTES as u64 + 1).read_until(b'\n', &mut self.buf) {
                Ok(n) => n,
                Err(e) => return Some(Err(CliError::input(path, number, format!("read error: {e}")))),
            };
            if n == 0 {
                return None;
            }
            self.hasher.update(&self.buf);
            self.bytes += n as u64;
            if self.buf.len() > MAX_LINE_BYTES && self.buf.last() != Some(&b'\n') {
                return Some(Err(CliError::input(
                    path,
                    number,
                    format!("line is longer than the {} MiB limit of one message", MAX_LINE_BYTES >> 20),
                )));
            }
            let text = match std::str::from_utf8(&self.buf) {
                Ok(t) => t,
                Err(e) => {
                    return Some(Err(CliError::input(
                        path,
                        number,
                        format!("not UTF-8 text (invalid byte at column {})", e.valid_up_to() + 1),
                    )))
                }
            };
            // Editors on Windows start UTF-8 files with a byte-order mark; it is not part of the JSON.
            let text = if number == 1 { text.strip_prefix('\u{feff}').unwrap_or(text) } else { text };
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            return Some(
                wire::parse_message(text)
                    .map(|message| Line { number, message })
                    .map_err(|e| CliError::wire(path, number, &e)),
            );
        }
    }
}

/// The first problem of each kind, found in one pass. They are reported in the order a reader
/// of the whole file would find them: an unparsable line first, then conflicting formats, then
/// the first line that breaks its format or the tool pairing.
#[derive(Default)]
struct Problems {
    /// The first line that is not of each format: (line, error), for Anthropic and OpenAI.
    format: [Option<(usize, String)>; 2],
    /// The first tool pairing error.
    pairing: Option<(usize, String)>,
    /// Evidence of a format: the first line showing one, and the first line contradicting it.
    detected: Option<(WireFormat, usize)>,
    conflict: Option<CliError>,
}

fn format_slot(f: WireFormat) -> usize {
    match f {
        WireFormat::Anthropic => 0,
        // Transcripts are chat or Anthropic lines; a Responses or Gemini session is exported
        // in its format but not imported (decisions.md).
        WireFormat::OpenAi | WireFormat::OpenAiResponses | WireFormat::Gemini => 1,
    }
}

/// Validates every line of `reader`, handing each to `keep`; returns the format and the facts.
fn validate(
    reader: impl BufRead,
    path: &Path,
    format: FormatArg,
    mut keep: impl FnMut(Line),
) -> Result<(WireFormat, Facts), CliError> {
    let mut lines = Lines::new(reader, path);
    let mut p = Problems::default();
    let (mut calls, mut answered) = (BTreeSet::new(), BTreeSet::new());
    let (mut messages, mut assistant) = (0u64, 0u64);
    let mut first_timestamp = None;
    for line in lines.by_ref() {
        let line = line?;
        messages += 1;
        let m = &line.message;
        if m.role == Role::Assistant {
            assistant += 1;
        }
        if first_timestamp.is_none() {
            first_timestamp.clone_from(&m.meta.timestamp);
        }
        for f in [WireFormat::Anthropic, WireFormat::OpenAi] {
            let slot = p.format.get_mut(format_slot(f));
            if let Some(slot @ None) = slot {
                if let Err(e) = wire::check_format(m, f) {
                    *slot = Some((line.number, format!("{e} (format {})", f.as_str())));
                }
            }
        }
        if p.pairing.is_none() {
            p.pairing = pairing_error(m, &mut calls, &mut answered).map(|e| (line.number, e));
        }
        if p.conflict.is_none() {
            detect(&mut p, m, line.number, path);
        }
        keep(line);
    }
    if messages == 0 {
        return Err(CliError::input(path, 0, "the transcript holds no messages".into()));
    }
    if let (FormatArg::Auto, Some(e)) = (format, p.conflict) {
        return Err(e);
    }
    let format = match format {
        FormatArg::Anthropic => WireFormat::Anthropic,
        FormatArg::Openai => WireFormat::OpenAi,
        FormatArg::Auto => p.detected.map_or(WireFormat::Anthropic, |(f, _)| f),
    };
    let format_error = p.format.get(format_slot(format)).cloned().flatten();
    // On one line, its format is checked before its tool ids.
    let first = match (format_error, p.pairing) {
        (Some(f), Some(t)) => Some(if t.0 < f.0 { t } else { f }),
        (f, t) => f.or(t),
    };
    if let Some((number, message)) = first {
        return Err(CliError::input(path, number, message));
    }
    let (sha256, bytes) = lines.digest();
    Ok((format, Facts { sha256, bytes, messages, calls: assistant, first_timestamp }))
}

/// The tool pairing error of `m`, given the calls made and answered before it (ids are kept as
/// their 12-byte keys, as in the state).
fn pairing_error(m: &Message, calls: &mut BTreeSet<ToolKey>, answered: &mut BTreeSet<ToolKey>) -> Option<String> {
    for id in m.call_ids() {
        if !calls.insert(ToolKey::of(id)) {
            return Some(format!("tool call id {id:?} is used twice"));
        }
    }
    for id in m.result_ids() {
        let key = ToolKey::of(id);
        if !calls.contains(&key) {
            return Some(format!("tool result answers unknown call {id:?}"));
        }
        if !answered.insert(key) {
            return Some(format!("tool call {id:?} is answered twice"));
        }
    }
    None
}

fn detect(p: &mut Problems, m: &Message, number: usize, path: &Path) {
    let Some(f) = wire::detect(m) else { return };
    match p.detected {
        None => p.detected = Some((f, number)),
        Some((g, first)) if g != f => {
            p.conflict = Some(CliError::input(
                path,
                number,
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
