//! Reading `--views` lines (`{"call":N,"messages":[m0,m1,...]}`) one after another, finding
//! the messages of each view and how many of them it shares, byte for byte, with the previous
//! view. Only what changed is scanned: a view that appends to the previous one costs a compare
//! of the shared bytes plus a scan of the new messages, so sessions whose views run to tens of
//! megabytes can be followed call by call.

use std::ops::Range;

/// A `--views` line that is not what `ctxlog import` writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadView {
    /// Byte offset in the line.
    pub at: usize,
    /// What was expected there.
    pub expected: &'static str,
}

impl std::fmt::Display for BadView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "views line: expected {} at byte {}", self.expected, self.at)
    }
}

impl std::error::Error for BadView {}

/// How a view relates to the previous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Diff {
    /// Messages in this view.
    pub messages: usize,
    /// Leading messages identical to the previous view's.
    pub shared: usize,
    /// Bytes of those shared messages (message bodies, without separators).
    pub shared_bytes: u64,
    /// Bytes of all messages of this view.
    pub total_bytes: u64,
}

impl Diff {
    /// The messages scanned anew (those after the shared prefix).
    pub fn rescanned(&self) -> Range<usize> {
        self.shared..self.messages
    }
}

#[derive(Debug, Clone, Copy)]
struct Span {
    /// Offsets relative to the start of the messages array (just after `[`).
    start: usize,
    end: usize,
    /// Bytes of messages `0..=this`.
    cumulative: u64,
}

/// Follows the views of one session, one line at a time.
#[derive(Debug, Default)]
pub struct ViewTracker {
    line: Vec<u8>,
    base: usize,
    spans: Vec<Span>,
}

impl ViewTracker {
    /// A tracker that has seen no view yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next view line (without its newline). On return `line` holds the previous
    /// line's bytes, so its buffer can be reused.
    pub fn feed(&mut self, line: &mut Vec<u8>) -> Result<Diff, BadView> {
        let base = array_start(line)?;
        let old = self.line.get(self.base..).unwrap_or_default();
        let common = common_prefix(old, line.get(base..).unwrap_or_default());
        let shared = self.spans.partition_point(|s| s.end <= common);
        self.spans.truncate(shared);
        std::mem::swap(&mut self.line, line);
        self.base = base;
        if let Err(e) = self.scan_from(shared) {
            // The next view is compared with nothing rather than with a half-read one.
            self.spans.clear();
            self.line.clear();
            self.base = 0;
            return Err(e);
        }
        let total_bytes = self.spans.last().map_or(0, |s| s.cumulative);
        let shared_bytes = shared.checked_sub(1).and_then(|i| self.spans.get(i)).map_or(0, |s| s.cumulative);
        Ok(Diff { messages: self.spans.len(), shared, shared_bytes, total_bytes })
    }

    /// The bytes of message `i` of the current view.
    pub fn message(&self, i: usize) -> Option<&[u8]> {
        let s = self.spans.get(i)?;
        self.line.get(self.base + s.start..self.base + s.end)
    }

    /// Scans the messages after the first `shared` ones.
    fn scan_from(&mut self, shared: usize) -> Result<(), BadView> {
        let bytes = self.line.as_slice();
        let (mut pos, mut cumulative) = match shared.checked_sub(1).and_then(|i| self.spans.get(i)) {
            Some(s) => (self.base + s.end, s.cumulative),
            None => (self.base, 0),
        };
        let mut need_value = shared == 0;
        loop {
            pos = skip_ws(bytes, pos);
            match bytes.get(pos) {
                Some(b']') if need_value && self.spans.is_empty() => break,
                Some(b']') if !need_value => break,
                Some(b',') if !need_value => {
                    pos += 1;
                    need_value = true;
                }
                Some(b'{') if need_value => {
                    let end = object_end(bytes, pos)?;
                    cumulative += (end - pos) as u64;
                    self.spans.push(Span { start: pos - self.base, end: end - self.base, cumulative });
                    pos = end;
                    need_value = false;
                }
                _ => {
                    return Err(BadView {
                        at: pos,
                        expected: if need_value { "a message object" } else { "`,` or `]`" },
                    })
                }
            }
        }
        Ok(())
    }
}

/// Offset just after `"messages":[`.
fn array_start(line: &[u8]) -> Result<usize, BadView> {
    const KEY: &[u8] = b"\"messages\":[";
    let head = line.get(..line.len().min(64)).unwrap_or_default();
    head.windows(KEY.len())
        .position(|w| w == KEY)
        .map(|p| p + KEY.len())
        .ok_or(BadView { at: 0, expected: "`\"messages\":[` near the start" })
}

fn skip_ws(bytes: &[u8], mut pos: usize) -> usize {
    while matches!(bytes.get(pos), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        pos += 1;
    }
    pos
}

/// The offset just after the object that opens at `start` (braces balanced outside strings).
fn object_end(bytes: &[u8], start: usize) -> Result<usize, BadView> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut pos = start;
    while let Some(&b) = bytes.get(pos) {
        pos += 1;
        if in_string {
            match b {
                b'\\' => pos += 1,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Ok(pos);
                }
            }
            _ => {}
        }
    }
    Err(BadView { at: start, expected: "a complete message object" })
}

/// Length of the longest common prefix, comparing a page at a time (memcmp) before bytes.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const PAGE: usize = 4096;
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + PAGE <= n && a.get(i..i + PAGE) == b.get(i..i + PAGE) {
        i += PAGE;
    }
    while i < n && a.get(i) == b.get(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(call: u64, messages: &[&str]) -> Vec<u8> {
        format!("{{\"call\":{call},\"messages\":[{}]}}", messages.join(",")).into_bytes()
    }

    fn feed(t: &mut ViewTracker, call: u64, messages: &[&str]) -> Diff {
        t.feed(&mut line(call, messages)).unwrap()
    }

    #[test]
    fn a_view_that_appends_shares_every_previous_message() {
        let mut t = ViewTracker::new();
        let a = r#"{"role":"user","content":"a"}"#;
        let b = r#"{"role":"assistant","content":[{"type":"text","text":"}{ \" ]["}]}"#;
        let c = r#"{"role":"user","content":"c"}"#;
        let d = feed(&mut t, 0, &[a, b]);
        assert_eq!((d.messages, d.shared, d.shared_bytes), (2, 0, 0));
        assert_eq!(d.total_bytes, (a.len() + b.len()) as u64);
        assert_eq!(t.message(1), Some(b.as_bytes()));
        let d = feed(&mut t, 1, &[a, b, c]);
        assert_eq!((d.messages, d.shared), (3, 2));
        assert_eq!(d.shared_bytes, (a.len() + b.len()) as u64);
        assert_eq!(d.rescanned(), 2..3);
        assert_eq!(t.message(2), Some(c.as_bytes()));
    }

    #[test]
    fn a_rewrite_shares_only_the_messages_before_the_first_change() {
        let mut t = ViewTracker::new();
        let (a, b, c) = (r#"{"n":1}"#, r#"{"n":2}"#, r#"{"n":3}"#);
        feed(&mut t, 0, &[a, b, c]);
        let d = feed(&mut t, 1, &[a, r#"{"n":22}"#, c]);
        assert_eq!((d.messages, d.shared, d.shared_bytes), (3, 1, a.len() as u64));
        // A message that only grows is not shared either: its bytes differ at its end.
        let d = feed(&mut t, 2, &[a, r#"{"n":222}"#]);
        assert_eq!((d.messages, d.shared), (2, 1));
        let d = feed(&mut t, 3, &[]);
        assert_eq!((d.messages, d.shared, d.total_bytes), (0, 0, 0));
        let d = feed(&mut t, 4, &[a]);
        assert_eq!((d.messages, d.shared), (1, 0));
    }

    #[test]
    fn broken_lines_are_refused_with_the_offset() {
        let mut t = ViewTracker::new();
        for bad in [&b"{\"call\":0}"[..], b"{\"call\":0,\"messages\":[{\"a\":1}", b"{\"call\":0,\"messages\":[1]}"] {
            let e = t.feed(&mut bad.to_vec()).unwrap_err();
            assert!(e.to_string().contains("expected"), "{e}");
        }
        let e = t.feed(&mut b"{\"call\":0,\"messages\":[{\"a\":1} {\"b\":2}]}".to_vec()).unwrap_err();
        assert_eq!(e.expected, "`,` or `]`");
    }

    #[test]
    fn common_prefix_crosses_page_boundaries() {
        let a = vec![7u8; 10_000];
        let mut b = a.clone();
        assert_eq!(common_prefix(&a, &b), 10_000);
        b[9_000] = 8;
        assert_eq!(common_prefix(&a, &b), 9_000);
        assert_eq!(common_prefix(&a[..5], &b), 5);
    }
}
