//! Cache breakpoints placed by position in the log, for hosts that decide them per request (a
//! proxy mapping its client's `cache_control` onto the view, or placing its own).
//!
//! The log keeps every message's original bytes, `cache_control` included: a client that moves
//! its breakpoint to the last user message each turn leaves one on every old message, so a view
//! rendered as logged would carry them all (more than 4 is a 400 from Anthropic). A request
//! rendered with a [`Placement`] carries none of the logged ones: they are cut out of the view
//! bytes (at the positions [`cuts`] found once, when the view cache rendered the item), and the
//! placement's marks are added, each on the item the view shows at or before its seq.

use serde::{Deserialize, Serialize};

use crate::message::{Block, Content, Message, RawJson};

/// How long Anthropic keeps a marked prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CacheTtl {
    /// The default five minutes: `{"type":"ephemeral"}`.
    FiveMinutes,
    /// One hour: `{"type":"ephemeral","ttl":"1h"}` (priced higher for writes).
    OneHour,
}

impl CacheTtl {
    /// The `cache_control` object.
    pub fn json(self) -> &'static str {
        match self {
            CacheTtl::FiveMinutes => r#"{"type":"ephemeral"}"#,
            CacheTtl::OneHour => r#"{"type":"ephemeral","ttl":"1h"}"#,
        }
    }
}

/// One breakpoint a request asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mark {
    /// The last block of the system prompt (which caches the tools before it too).
    System(CacheTtl),
    /// Message `seq`, or when the view does not show it, the nearest item it shows before it (a
    /// summary standing for it, an earlier kept message); an item that cannot carry a
    /// breakpoint (string content, only thinking) passes it to the one before.
    Message {
        /// The message's seq.
        seq: u64,
        /// Its block (index in `content`) when the message is in the view unedited; `None` or
        /// an edited message: its last block that can carry one.
        block: Option<u32>,
        /// Its TTL.
        ttl: CacheTtl,
    },
}

/// Who decided a request's breakpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Origin {
    /// The host placed its own (the client set none).
    Auto,
    /// The client's, mapped onto the view.
    Client,
    /// None: every logged `cache_control` stripped.
    Off,
}

impl Origin {
    /// `auto`, `client` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Auto => "auto",
            Origin::Client => "client",
            Origin::Off => "off",
        }
    }
}

/// The breakpoints of one request: who decided them and where they go. Recorded with the call
/// (`RequestRecord::placement`) so the request is rebuilt from the log byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Who decided.
    pub origin: Origin,
    /// The marks, in request order.
    pub marks: Vec<Mark>,
}

impl Placement {
    /// The TTL of the system mark, if any (the last one wins).
    pub fn system(&self) -> Option<CacheTtl> {
        self.marks.iter().rev().find_map(|m| match m {
            Mark::System(ttl) => Some(*ttl),
            Mark::Message { .. } => None,
        })
    }
}

/// Byte ranges of one message's JSON to cut: its content blocks' (and tool results' inner
/// blocks') `cache_control` members, each with its separating comma. Sorted, disjoint.
pub(crate) type Cuts = Box<[(u32, u32)]>;

const NEEDLE: &[u8] = b"\"cache_control\"";

/// The cuts of a message's JSON, when it has a `cache_control` on a content block (`None`
/// otherwise, and for JSON that does not scan: such bytes are left as they are).
pub(crate) fn cuts(json: &[u8]) -> Option<Cuts> {
    memchr::memmem::find(json, NEEDLE)?;
    scan(json, Ctx::Message)
}

fn scan(json: &[u8], ctx: Ctx) -> Option<Cuts> {
    let mut s = Scan { b: json, cuts: Vec::new() };
    let at = s.ws(0);
    s.value(at, ctx, 0)?;
    if s.cuts.is_empty() {
        return None;
    }
    s.cuts.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(s.cuts.len());
    for (a, b) in s.cuts {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    Some(merged.into_boxed_slice())
}

/// Appends `bytes` without the ranges in `cuts`.
pub(crate) fn apply_cuts(out: &mut Vec<u8>, bytes: &[u8], cuts: &[(u32, u32)]) {
    let mut at = 0usize;
    for &(a, b) in cuts {
        let (a, b) = (a as usize, b as usize);
        out.extend_from_slice(bytes.get(at..a).unwrap_or_default());
        at = b;
    }
    out.extend_from_slice(bytes.get(at..).unwrap_or_default());
}

/// Removes every `cache_control` from a message's blocks (and from tool results' inner blocks).
pub(crate) fn strip(m: &mut Message) {
    if let Some(Content::Blocks(blocks)) = &mut m.content {
        strip_blocks(blocks);
    }
}

fn strip_blocks(blocks: &mut [Block]) {
    for b in blocks {
        let extra = match b {
            Block::Text { extra, .. }
            | Block::Media { extra, .. }
            | Block::ImageUrl { extra, .. }
            | Block::ToolUse { extra, .. }
            | Block::Thinking { extra, .. } => extra,
            Block::ToolResult { content, extra, .. } => {
                if let Some(Content::Blocks(inner)) = content {
                    strip_blocks(inner);
                }
                extra
            }
            Block::Other(raw) => {
                if let Some(c) = memchr::memmem::find(raw.as_str().as_bytes(), NEEDLE)
                    .and_then(|_| scan(raw.as_str().as_bytes(), Ctx::Block))
                {
                    let mut out = Vec::with_capacity(raw.as_str().len());
                    apply_cuts(&mut out, raw.as_str().as_bytes(), &c);
                    if let Ok(s) = String::from_utf8(out) {
                        *raw = RawJson(s);
                    }
                }
                continue;
            }
        };
        extra.retain(|(k, _)| k != "cache_control");
    }
}

/// Where a scanned value sits: the message object, its (or a tool result's) `content`, a
/// content block, or anything else (a tool's input: its keys are the tool's, never cut).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Message,
    Content,
    Block,
    Other,
}

/// Deeper than serde_json's own limit: not a parsed message.
const MAX_DEPTH: usize = 256;

struct Scan<'a> {
    b: &'a [u8],
    cuts: Vec<(u32, u32)>,
}

impl Scan<'_> {
    fn ws(&self, mut at: usize) -> usize {
        while matches!(self.b.get(at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            at += 1;
        }
        at
    }

    /// `at` is on the opening quote; returns the index after the closing one.
    fn string(&self, at: usize) -> Option<usize> {
        let mut i = at + 1;
        loop {
            let rest = self.b.get(i..)?;
            let k = memchr::memchr2(b'"', b'\\', rest)?;
            if rest.get(k) == Some(&b'\\') {
                i += k + 2;
            } else {
                return Some(i + k + 1);
            }
        }
    }

    fn value(&mut self, at: usize, ctx: Ctx, depth: usize) -> Option<usize> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.b.get(at)? {
            b'{' => self.object(at, if ctx == Ctx::Content { Ctx::Other } else { ctx }, depth + 1),
            b'[' => self.array(at, ctx, depth + 1),
            b'"' => self.string(at),
            _ => {
                let mut i = at;
                while !matches!(self.b.get(i), None | Some(b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t')) {
                    i += 1;
                }
                (i > at).then_some(i)
            }
        }
    }

    fn array(&mut self, at: usize, ctx: Ctx, depth: usize) -> Option<usize> {
        let child = if ctx == Ctx::Content { Ctx::Block } else { Ctx::Other };
        let mut i = self.ws(at + 1);
        if self.b.get(i) == Some(&b']') {
            return Some(i + 1);
        }
        loop {
            let end = self.value(i, child, depth)?;
            i = self.ws(end);
            match self.b.get(i)? {
                b',' => i = self.ws(i + 1),
                b']' => return Some(i + 1),
                _ => return None,
            }
        }
    }

    fn object(&mut self, at: usize, ctx: Ctx, depth: usize) -> Option<usize> {
        let mut i = self.ws(at + 1);
        if self.b.get(i) == Some(&b'}') {
            return Some(i + 1);
        }
        let mut prev_end: Option<usize> = None;
        // A `cache_control` that is the object's first member: cut up to the next key.
        let mut first: Option<usize> = None;
        loop {
            if self.b.get(i) != Some(&b'"') {
                return None;
            }
            let key_start = i;
            let key_end = self.string(i)?;
            if let Some(s) = first.take() {
                self.cuts.push((pos(s)?, pos(key_start)?));
            }
            let key = self.b.get(key_start + 1..key_end - 1)?;
            i = self.ws(key_end);
            if self.b.get(i) != Some(&b':') {
                return None;
            }
            i = self.ws(i + 1);
            let child = match (ctx, key) {
                (Ctx::Message | Ctx::Block, b"content") => Ctx::Content,
                _ => Ctx::Other,
            };
            let end = self.value(i, child, depth)?;
            if ctx == Ctx::Block && key == b"cache_control" {
                match prev_end {
                    Some(p) => self.cuts.push((pos(p)?, pos(end)?)),
                    None => first = Some(key_start),
                }
            }
            prev_end = Some(end);
            i = self.ws(end);
            match self.b.get(i)? {
                b',' => i = self.ws(i + 1),
                b'}' => {
                    if let Some(s) = first {
                        self.cuts.push((pos(s)?, pos(end)?));
                    }
                    return Some(i + 1);
                }
                _ => return None,
            }
        }
    }
}

fn pos(i: usize) -> Option<u32> {
    u32::try_from(i).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(json: &str) -> String {
        let c = cuts(json.as_bytes()).unwrap_or_default();
        let mut out = Vec::new();
        apply_cuts(&mut out, json.as_bytes(), &c);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn cuts_block_breakpoints_and_nothing_else() {
        let cc = r#"{"type":"ephemeral"}"#;
        let m = format!(
            r#"{{"role":"user","content":[{{"type":"text","text":"a \"cache_control\": x","cache_control":{cc}}},{{"cache_control":{cc},"type":"tool_result","tool_use_id":"t","content":[{{"type":"text","text":"b","cache_control":{cc}}}]}},{{"type":"tool_use","id":"u","name":"n","input":{{"cache_control":1}},"cache_control":{cc}}}]}}"#
        );
        let v: serde_json::Value = serde_json::from_str(&m).unwrap_or_default();
        assert!(v.is_object(), "the test's JSON is valid");
        let out = cut(&m);
        assert_eq!(
            out,
            r#"{"role":"user","content":[{"type":"text","text":"a \"cache_control\": x"},{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"b"}]},{"type":"tool_use","id":"u","name":"n","input":{"cache_control":1}}]}"#
        );
        // Whitespace of a client's raw JSON, an only member, and no breakpoint at all.
        assert_eq!(
            cut(r#"{"role":"user","content":[ { "cache_control" : {"type":"ephemeral"} } ]}"#),
            r#"{"role":"user","content":[ {  } ]}"#
        );
        assert!(cuts(br#"{"role":"user","content":"cache_control"}"#).is_none());
        assert!(cuts(br#"{"role":"user","content":[{"type":"text","text":"\"cache_control\""}]}"#).is_none());
    }

    #[test]
    fn strip_removes_breakpoints_from_modelled_and_raw_blocks() {
        let raw = r#"{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"search_result","source":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}]}"#;
        let mut m = crate::parse_message(raw).unwrap_or_else(|_| Message::text(crate::message::Role::User, ""));
        strip(&mut m);
        let mut w = crate::json::JsonWriter::new();
        crate::wire::write_message(
            &mut w,
            &m,
            crate::wire::RenderOpts { meta: false, media: crate::wire::Media::Refs },
            &mut Vec::new(),
        );
        let out = String::from_utf8(w.into_bytes()).unwrap_or_default();
        assert!(!out.contains("cache_control"), "{out}");
        assert!(out.contains(r#""type":"search_result","source":"s""#), "{out}");
    }
}
