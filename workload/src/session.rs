//! The shape of a session: who speaks when, how the clock runs, where the screenshots and the
//! pasted log go, and how long it lasts. Produces one JSONL line at a time, so a session of any
//! length is generated in constant memory.

use std::collections::VecDeque;
use std::io::Write;

use base64::Engine as _;

use crate::json::{message_line, Block, Content};
use crate::png::screenshot;
use crate::prose::{
    final_text, followup_text, pasted_log, progress_text, signature, step_text, thinking_text, CLOSING, INSTRUCTIONS,
    SHOT1_TEXT, SHOT2_TEXT,
};
use crate::rng::Rng;
use crate::sizes::result_size;
use crate::system_prompt::system_prompt;
use crate::time::rfc3339;
use crate::tools::tool_call;

/// The shortest session [`Lines::messages`] makes: system prompt, instructions, final answer.
pub const MIN_MESSAGES: u64 = 3;

/// A session of a requested number of messages repeats the shape of one 1,500-message session
/// per 1,500 messages (two screenshots at 30% and 70%, one pasted log at 50%), so longer
/// sessions keep the same mix of content instead of diluting it.
pub const CHAPTER_MESSAGES: u64 = 1_500;

/// Facts a single-human tool loop ([`Lines::tool_loop`]) plants in its first tool results, one
/// per result (`note: FACT` as the result's first line): a path, a decision, a number, an
/// error code. The soak benchmark counts how many are still stated in a view after their
/// message left it. The result of tool turn `k` is message `3 + 2k`.
pub const PLANTED_FACTS: [&str; 4] = [
    "crates/ledger/src/settle.rs",
    "decision: keep-the-u128-accumulator",
    "retry budget 48213",
    "error E0502 in ledger::post",
];

/// 2026-03-02T09:00:00Z as unix seconds.
pub(crate) const START_UNIX: u64 = 1_772_442_000;

/// How long a session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Length {
    /// This many tool-calling turns, plus the human follow-ups among them (the demo's measure).
    Turns(usize),
    /// Exactly this many messages.
    Messages(u64),
}

/// A session shorter than [`MIN_MESSAGES`] was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooShort {
    /// The number of messages asked for.
    pub messages: u64,
}

impl std::fmt::Display for TooShort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a session has at least {MIN_MESSAGES} messages (system prompt, instructions, final answer); {} asked for",
            self.messages
        )
    }
}

impl std::error::Error for TooShort {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Start,
    Turns,
    Done,
}

/// Which of a chapter's special follow-ups (screenshots, pasted log) have been sent.
#[derive(Debug, Default)]
struct Specials {
    chapter: u64,
    shot1: bool,
    shot2: bool,
    log: bool,
}

/// A generated session: an iterator of JSONL lines (Anthropic Messages style, each a
/// `{"role","content","timestamp"}` object, without the trailing newline).
///
/// Every session opens with a ~24,000-character system prompt and the user's instructions,
/// then alternates tool-calling turns (1–4 calls each, results of median ~450 characters,
/// p90 ~8k, p99 ~32k) with human follow-ups every 8–15 turns, and closes with a text-only
/// assistant answer. The clock runs 3–40 s between messages, with an idle break of 6–25
/// minutes every 25–40 messages, so a 5-minute prompt cache goes cold now and then.
pub struct Lines {
    rng: Rng,
    length: Length,
    phase: Phase,
    queue: VecDeque<String>,
    emitted: u64,
    clock: u64,
    since_break: u64,
    next_break: u64,
    turn: usize,
    next_followup: usize,
    specials: Specials,
    /// Human follow-ups between turns (false: an autonomous tool loop).
    followups: bool,
}

impl Lines {
    /// A session of `turns` tool-calling turns from `seed` (the demo's measure: the number of
    /// messages follows from the turns and the follow-ups drawn among them).
    pub fn turns(seed: u64, turns: usize) -> Lines {
        Lines::new(seed, Length::Turns(turns))
    }

    /// A session of exactly `messages` messages from `seed`. An odd count ends with the
    /// assistant's final answer; an even one with the user's thanks after it.
    pub fn messages(seed: u64, messages: u64) -> Result<Lines, TooShort> {
        if messages < MIN_MESSAGES {
            return Err(TooShort { messages });
        }
        Ok(Lines::new(seed, Length::Messages(messages)))
    }

    /// An autonomous agent's session of exactly `messages` messages from `seed`: the system
    /// prompt and one instruction, then tool-calling turns only (no human follow-up, no
    /// screenshot, no pasted log) and the final answer, with [`PLANTED_FACTS`] in the first
    /// tool results. The shape issue 21 is about.
    pub fn tool_loop(seed: u64, messages: u64) -> Result<Lines, TooShort> {
        let mut lines = Lines::messages(seed, messages)?;
        lines.followups = false;
        Ok(lines)
    }

    fn new(seed: u64, length: Length) -> Lines {
        let mut rng = Rng(seed);
        let next_break = rng.range(25, 40);
        Lines {
            rng,
            length,
            phase: Phase::Start,
            queue: VecDeque::new(),
            emitted: 0,
            clock: START_UNIX,
            since_break: 0,
            next_break,
            turn: 0,
            next_followup: 0,
            specials: Specials::default(),
            followups: true,
        }
    }

    /// Writes the remaining lines to `w`, each followed by `\n`; returns the bytes written.
    pub fn write_jsonl(self, mut w: impl Write) -> std::io::Result<u64> {
        let mut bytes = 0;
        for line in self {
            w.write_all(line.as_bytes())?;
            w.write_all(b"\n")?;
            bytes += line.len() as u64 + 1;
        }
        Ok(bytes)
    }

    /// The remaining lines as one JSONL text.
    pub fn into_jsonl(self) -> String {
        let mut out = String::new();
        for line in self {
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    /// The remaining lines as a reader of JSONL bytes, generated as they are read.
    pub fn into_reader(self) -> Reader {
        Reader { lines: self, line: Vec::new(), pos: 0 }
    }

    /// Messages that the session's closing needs after the last turn: the final answer, and
    /// for an even count the user's thanks.
    fn tail(&self) -> u64 {
        match self.length {
            Length::Turns(_) => 1,
            Length::Messages(n) => 1 + u64::from(n % 2 == 0),
        }
    }

    /// Messages still free for turns and follow-ups (two each).
    fn room(&self) -> u64 {
        match self.length {
            Length::Turns(_) => u64::MAX,
            Length::Messages(n) => n.saturating_sub(self.emitted + self.tail()),
        }
    }

    fn more_turns(&self) -> bool {
        match self.length {
            Length::Turns(turns) => self.turn < turns,
            Length::Messages(_) => self.room() >= 2,
        }
    }

    /// Whether the session is at least `tenths`/10 of the way through its current chapter.
    fn reached(&self, tenths: u64) -> bool {
        match self.length {
            Length::Turns(turns) => self.turn >= turns * tenths as usize / 10,
            Length::Messages(n) => {
                let chapter = n.min(CHAPTER_MESSAGES);
                self.emitted % chapter >= chapter * tenths / 10
            }
        }
    }

    fn step(&mut self) {
        match self.phase {
            Phase::Start => {
                let sys = system_prompt(&mut self.rng);
                self.emit("system", Content::Str(sys));
                self.emit("user", Content::Str(INSTRUCTIONS.to_string()));
                self.next_followup = self.rng.range(8, 15) as usize;
                self.phase = Phase::Turns;
            }
            Phase::Turns if !self.more_turns() => {
                let fin = final_text(&mut self.rng);
                self.emit("assistant", Content::Blocks(vec![Block::Text(fin)]));
                if self.tail() == 2 {
                    self.emit("user", Content::Str(CLOSING.to_string()));
                }
                self.phase = Phase::Done;
            }
            Phase::Turns => {
                // A follow-up needs room for itself and the turn after it.
                if self.followups && self.turn == self.next_followup && self.room() >= 4 {
                    self.followup();
                    self.next_followup += self.rng.range(8, 15) as usize;
                }
                self.tool_turn();
                self.turn += 1;
            }
            Phase::Done => {}
        }
    }

    /// Advances the clock: short think/tool latencies, plus an idle break of
    /// 6–25 minutes every 25–40 messages so a 5-minute prompt cache goes cold.
    fn tick(&mut self) -> u64 {
        if self.emitted > 0 {
            self.since_break += 1;
            let gap = if self.since_break >= self.next_break {
                self.since_break = 0;
                self.next_break = self.rng.range(25, 40);
                self.rng.range(360, 1500)
            } else {
                self.rng.range(3, 40)
            };
            self.clock += gap;
        }
        self.clock
    }

    fn emit(&mut self, role: &str, content: Content) {
        let ts = rfc3339(self.tick());
        self.queue.push_back(message_line(role, &content, &ts));
        self.emitted += 1;
    }

    /// The assistant reports progress, then the human answers: plain text, or once per
    /// chapter a screenshot (at 30% and 70%) or a pasted test log (at 50%).
    fn followup(&mut self) {
        let progress = progress_text(&mut self.rng);
        self.emit("assistant", Content::Blocks(vec![Block::Text(progress)]));
        if let Length::Messages(n) = self.length {
            let chapter = self.emitted / n.min(CHAPTER_MESSAGES);
            if chapter != self.specials.chapter {
                self.specials = Specials { chapter, ..Specials::default() };
            }
        }
        let msg = if !self.specials.shot1 && self.reached(3) {
            self.specials.shot1 = true;
            self.screenshot_message(1440, 900, SHOT1_TEXT)
        } else if !self.specials.shot2 && self.reached(7) {
            self.specials.shot2 = true;
            self.screenshot_message(1280, 720, SHOT2_TEXT)
        } else if !self.specials.log && self.reached(5) {
            self.specials.log = true;
            Content::Str(pasted_log(&mut self.rng))
        } else {
            Content::Str(followup_text(&mut self.rng))
        };
        self.emit("user", msg);
    }

    /// One assistant message with 1–4 tool calls, then the user message
    /// carrying their results in the same order.
    fn tool_turn(&mut self) {
        let rng = &mut self.rng;
        let n = match rng.below(100) {
            0..=44 => 1,
            45..=74 => 2,
            75..=91 => 3,
            _ => 4,
        };
        let mut blocks = Vec::new();
        if rng.chance(30) {
            let thinking = thinking_text(rng);
            let signature = signature(rng);
            blocks.push(Block::Thinking { thinking, signature });
        }
        let mut calls = Vec::new();
        for _ in 0..n {
            let size = result_size(rng);
            calls.push(tool_call(rng, size));
        }
        let first_name = calls.first().map_or("read_file", |c| c.name);
        blocks.push(Block::Text(step_text(rng, first_name)));
        let mut results = Vec::new();
        let planted = if self.followups { None } else { PLANTED_FACTS.get(self.turn) };
        if let (Some(fact), Some(first)) = (planted, calls.first_mut()) {
            first.result = format!("note: {fact}\n{}", first.result);
        }
        for c in calls {
            let id = format!("toolu_{}", rng.alnum(24));
            let as_blocks = rng.chance(12);
            blocks.push(Block::ToolUse { id: id.clone(), name: c.name, input: c.input });
            results.push(Block::ToolResult { id, text: c.result, is_error: c.is_error, as_blocks });
        }
        self.emit("assistant", Content::Blocks(blocks));
        self.emit("user", Content::Blocks(results));
    }

    fn screenshot_message(&mut self, w: u32, h: u32, text: &str) -> Content {
        let png = screenshot(&mut self.rng, w, h);
        let data = base64::engine::general_purpose::STANDARD.encode(png);
        Content::Blocks(vec![Block::Text(text.to_string()), Block::Image(data)])
    }
}

/// A session as a [`std::io::BufRead`] of JSONL bytes (see [`Lines::into_reader`]): holds one
/// line at a time.
pub struct Reader {
    lines: Lines,
    line: Vec<u8>,
    pos: usize,
}

impl std::io::BufRead for Reader {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.pos >= self.line.len() {
            self.line.clear();
            self.pos = 0;
            if let Some(next) = self.lines.next() {
                self.line = next.into_bytes();
                self.line.push(b'\n');
            }
        }
        Ok(self.line.get(self.pos..).unwrap_or_default())
    }

    fn consume(&mut self, amt: usize) {
        self.pos = self.pos.saturating_add(amt).min(self.line.len());
    }
}

impl std::io::Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::BufRead as _;
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf.get_mut(..n).unwrap_or_default().copy_from_slice(available.get(..n).unwrap_or_default());
        self.consume(n);
        Ok(n)
    }
}

impl Iterator for Lines {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        while self.queue.is_empty() && self.phase != Phase::Done {
            self.step();
        }
        self.queue.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::{check_alternation, check_pairing, humans, images, parse, result_quantiles, text_of};
    use crate::png::check_png;

    fn jsonl(seed: u64, n: u64) -> String {
        Lines::messages(seed, n).unwrap().into_jsonl()
    }

    #[test]
    fn a_tool_loop_has_one_instruction_then_tool_turns_with_the_planted_facts() {
        let text = Lines::tool_loop(5, 401).unwrap().into_jsonl();
        let v = parse(&text);
        assert_eq!(v.len(), 401);
        check_pairing(&v);
        check_alternation(&v);
        // `humans` counts the follow-ups after the instructions: none.
        assert!(humans(&v).is_empty(), "{:?}", humans(&v));
        assert!(images(&v).is_empty());
        for (k, fact) in PLANTED_FACTS.iter().enumerate() {
            let result = &v[3 + 2 * k]["content"][0]["content"];
            let text = match result {
                serde_json::Value::String(s) => s.clone(),
                other => other[0]["text"].as_str().unwrap().to_owned(),
            };
            assert!(text.starts_with(&format!("note: {fact}")), "{k}: {text}");
        }
        // The default shape is unchanged by the new option.
        assert_eq!(Lines::messages(5, 401).unwrap().into_jsonl(), jsonl(5, 401));
    }

    #[test]
    fn a_session_has_exactly_the_messages_asked_for() {
        for n in [3, 4, 5, 6, 7, 40, 41, 300, 1_501] {
            let v = parse(&jsonl(11, n));
            assert_eq!(v.len() as u64, n);
            check_alternation(&v);
            assert!(v[1]["content"].as_str().unwrap().contains("PROJECT PATH IS ~/Desktop/ora"));
            let fin = if n % 2 == 1 { &v[v.len() - 1] } else { &v[v.len() - 2] };
            assert!(text_of(fin).starts_with("All done."), "{n}");
            if n % 2 == 0 {
                assert_eq!(v[v.len() - 1]["content"], CLOSING);
            }
            if n >= 5 {
                check_pairing(&v);
            }
        }
    }

    #[test]
    fn fewer_than_three_messages_is_refused() {
        for n in 0..MIN_MESSAGES {
            let e = Lines::messages(1, n).err().unwrap();
            assert_eq!(e, TooShort { messages: n });
            assert!(e.to_string().contains("at least 3 messages"), "{e}");
        }
    }

    #[test]
    fn streaming_writing_and_collecting_give_the_same_bytes() {
        let text = jsonl(5, 800);
        let mut written = Vec::new();
        let bytes = Lines::messages(5, 800).unwrap().write_jsonl(&mut written).unwrap();
        assert_eq!(bytes, text.len() as u64);
        assert_eq!(written, text.as_bytes());
        let lines: Vec<String> = Lines::messages(5, 800).unwrap().collect();
        assert_eq!(lines.join("\n") + "\n", text);
        assert!(lines.iter().all(|l| !l.contains('\n')));
        assert_ne!(jsonl(6, 800), text);
    }

    #[test]
    fn the_reader_yields_the_same_bytes_in_any_read_sizes() {
        use std::io::{BufRead as _, Read as _};
        let text = jsonl(8, 301);
        let mut all = Vec::new();
        Lines::messages(8, 301).unwrap().into_reader().read_to_end(&mut all).unwrap();
        assert_eq!(all, text.as_bytes());
        let mut small = Vec::new();
        let mut r = Lines::messages(8, 301).unwrap().into_reader();
        let mut buf = [0u8; 7];
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            small.extend_from_slice(&buf[..n]);
        }
        assert_eq!(small, text.as_bytes());
        let lines: Vec<String> = Lines::messages(8, 301).unwrap().into_reader().lines().map(Result::unwrap).collect();
        assert_eq!(lines.len(), 301);
        assert_eq!(lines.join("\n") + "\n", text);
    }

    #[test]
    fn a_longer_session_starts_like_a_shorter_one_until_the_first_screenshot() {
        // The shape depends on the length only through the schedule of screenshots and logs
        // and the ending, so two lengths share every message before the first of those.
        let (a, b) = (jsonl(9, 301), jsonl(9, 3_001));
        let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
        let same = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        assert!(same >= 60, "{same} shared messages");
    }

    #[test]
    fn every_chapter_of_a_long_session_has_two_screenshots_and_a_pasted_log() {
        let n = 2 * CHAPTER_MESSAGES + 100;
        let v = parse(&jsonl(3, n));
        assert_eq!(v.len() as u64, n);
        check_pairing(&v);
        let shots: Vec<usize> = (0..v.len()).filter(|&i| !images(&v[i..=i]).is_empty()).collect();
        let logs: Vec<usize> = humans(&v).into_iter().filter(|&i| text_of(&v[i]).contains("```")).collect();
        let chapter = |i: &usize| *i as u64 / CHAPTER_MESSAGES;
        assert_eq!(shots.iter().map(chapter).collect::<Vec<_>>(), [0, 0, 1, 1], "{shots:?}");
        assert_eq!(logs.iter().map(chapter).collect::<Vec<_>>(), [0, 1], "{logs:?}");
        for i in &shots {
            let at = *i as u64 % CHAPTER_MESSAGES;
            assert!(at >= CHAPTER_MESSAGES * 3 / 10, "{i}");
        }
        let dims: Vec<(u32, u32)> = images(&v).iter().map(|p| check_png(p)).collect();
        assert_eq!(dims, [(1440, 900), (1280, 720), (1440, 900), (1280, 720)]);
    }

    #[test]
    fn long_sessions_keep_the_tool_result_distribution_and_message_size() {
        let t = jsonl(21, 5_000);
        let v = parse(&t);
        let (p50, p90, p99, max) = result_quantiles(&v);
        assert!((300..=650).contains(&p50), "p50={p50}");
        assert!((5_000..=12_000).contains(&p90), "p90={p90}");
        assert!((20_000..=45_000).contains(&p99), "p99={p99}");
        assert!(max <= crate::sizes::MAX_RESULT);
        // The demo is ~3.1 KB per message; a long session is the same mix.
        let per_message = t.len() / v.len();
        assert!((2_500..=4_000).contains(&per_message), "{per_message} bytes per message");
    }
}
