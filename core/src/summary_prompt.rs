//! What a model summarizer is asked, and how: the knobs of a summary call ([`SummaryCall`]),
//! the two prompts, and a span of messages rendered as text. Read by the request builder
//! ([`crate::summary_call`]) and by the fit of a job to the summarizer ([`crate::summary_fit`]),
//! which therefore do not import each other's knobs.

use crate::event::SummaryMode;
use crate::message::{Block, Content, ImageUrl, MediaData, MediaSource, Message, Role};
use crate::wire::WireFormat;

/// Characters of a tool call's arguments kept in a standalone span (then `…`).
pub const TOOL_ARGS_CHARS: usize = 500;
/// `auto` forks from this `span_tokens / prefix_tokens` on: below it the fork's prompt, read
/// from the cache at a tenth of the price, costs more than a standalone prompt of the span
/// alone (Anthropic: $0.00077 vs $0.00350 per thousand tokens).
pub const DEFAULT_FORK_MIN_SPAN_RATIO: f64 = 0.22;
/// Consecutive failed attempts after which the engine stops offering summary jobs.
pub const DEFAULT_MAX_FAILURES: u32 = 3;
/// The most a summary's derived `max_tokens` budget reaches (see [`crate::summary_fit`]).
pub const DEFAULT_MAX_TOKENS: u64 = 2_048;

/// The standalone system prompt: five sections and guidelines.
pub const STANDALONE_PROMPT: &str =
    "You summarize part of a conversation between a user and an AI assistant so that the \
assistant can continue the work without the original messages. Write the summary under these five headings:\n\
\n\
1. User Requests & Decisions: what the user asked for, in their words where it matters, and every decision taken.\n\
2. Files Examined or Modified: paths, and what was read, changed or created in each.\n\
3. Errors Encountered & Resolutions: each error, its cause and how it was resolved (or that it was not).\n\
4. Current Task State: what is done, what is in progress, what comes next.\n\
5. Key Technical Details: names, values, commands, versions and facts the work depends on.\n\
\n\
Guidelines:\n\
- Be concise and factual; keep identifiers, paths, numbers and commands exact.\n\
- Do not invent anything that is not in the messages; omit a heading's content if there is none.\n\
- Tool outputs matter only for the facts they established.\n\
- Write only the summary, without preamble.";

/// The instruction a fork appends (followed by the scope and the excerpt).
pub const FORK_PROMPT: &str =
    "Stop the task for a moment: write a summary of part of this conversation so that it can \
replace those messages. Use the five headings User Requests & Decisions; Files Examined or Modified; Errors \
Encountered & Resolutions; Current Task State; Key Technical Details. Be concise and factual, keep identifiers, \
paths, numbers and commands exact, invent nothing, call no tool, and write only the summary.";

/// How the host wants its summaries written, and the knobs of the fork decision. These steer
/// host-side calls, not the engine's view, so they are not in the logged [`crate::Config`];
/// what they decided is logged (the attempt's mode, refusal and guards carry the numbers).
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryCall {
    /// `Standalone`, `Fork` or `Auto` (`Extractive` is the built-in summarizer, no request).
    pub mode: SummaryMode,
    /// The summarization model, when it is not the session's own: a different model cannot
    /// read the session's cache, so a fork is refused. `None`: the model of the last request.
    pub model: Option<String>,
    /// `max_tokens` of the request; `None`: derived from the job's limit
    /// ([`crate::summary_fit::max_tokens`]).
    pub max_tokens: Option<u64>,
    /// The summarizer's context window in tokens, when known: standalone jobs are cut to fit it
    /// with room for the answer, and a fork whose prefix does not fit is refused.
    pub context: Option<u64>,
    /// `auto` forks from this span-to-prefix token ratio on.
    pub fork_min_span_ratio: f64,
    /// Consecutive failures after which summary jobs pause until a call's view is under the soft threshold again.
    pub max_failures: u32,
    /// The wire format the summarizer speaks, when it is not the session's (an OpenAI-compatible
    /// server summarizing an Anthropic session): the standalone request is built in it, and a
    /// fork is refused (another API cannot read the session's cache). `None`: the session's.
    pub format: Option<WireFormat>,
}

impl Default for SummaryCall {
    fn default() -> Self {
        SummaryCall {
            mode: SummaryMode::Standalone,
            model: None,
            max_tokens: None,
            context: None,
            fork_min_span_ratio: DEFAULT_FORK_MIN_SPAN_RATIO,
            max_failures: DEFAULT_MAX_FAILURES,
            format: None,
        }
    }
}

impl SummaryCall {
    /// The given mode with the defaults.
    pub fn new(mode: SummaryMode) -> Self {
        SummaryCall { mode, ..SummaryCall::default() }
    }

    /// Sets the summarization model.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets `max_tokens` (instead of deriving it from the job).
    pub fn max_tokens(mut self, n: u64) -> Self {
        self.max_tokens = Some(n);
        self
    }

    /// Sets the summarizer's context window.
    pub fn context(mut self, tokens: u64) -> Self {
        self.context = Some(tokens);
        self
    }

    /// Sets the summarizer's wire format.
    pub fn format(mut self, format: WireFormat) -> Self {
        self.format = Some(format);
        self
    }

    /// Sets the `auto` ratio.
    pub fn fork_min_span_ratio(mut self, r: f64) -> Self {
        self.fork_min_span_ratio = r;
        self
    }
}

/// The span as text: each message rendered by [`render_message`], joined by blank lines.
pub fn render_messages<'a>(msgs: impl Iterator<Item = &'a Message>) -> String {
    msgs.map(render_message).filter(|s| !s.is_empty()).collect::<Vec<_>>().join("\n\n")
}

/// One message as text: `[role]: text`, each tool call on its own line as
/// `  [tool_call: name(args)]` (args as compact JSON, cut at [`TOOL_ARGS_CHARS`] + `…`), each
/// tool result as `[tool_result for ID]: text`, media as a reference (`[image image/png, 1,234
/// bytes, sha256:…]`), never inlined; thinking is left out.
pub fn render_message(m: &Message) -> String {
    let mut texts: Vec<String> = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    match &m.content {
        Some(Content::Text(t)) => texts.push(t.clone()),
        Some(Content::Blocks(bs)) => {
            for b in bs {
                match b {
                    Block::ToolUse { name, input, .. } => lines.push(tool_call(name, input.as_str())),
                    Block::ToolResult { tool_use_id, content, .. } => {
                        lines.push(format!("[tool_result for {tool_use_id}]: {}", content_text(content.as_ref())))
                    }
                    other => texts.extend(block_text(other)),
                }
            }
        }
        Some(Content::Null) | None => {}
    }
    for c in m.tool_calls.iter().flatten() {
        lines.push(tool_call(&c.name, &c.arguments));
    }
    let body = texts.join("\n");
    let head = match (m.role, &m.tool_call_id) {
        (Role::Tool, Some(id)) => format!("[tool_result for {id}]: {body}"),
        _ if body.is_empty() && !lines.is_empty() => String::new(),
        (role, _) => format!("[{}]: {body}", role.as_str()),
    };
    let mut out = head;
    for l in lines {
        if !out.is_empty() {
            out.push('\n');
            if l.starts_with("[tool_call") {
                out.push_str("  ");
            }
        }
        out.push_str(&l);
    }
    out
}

fn tool_call(name: &str, args: &str) -> String {
    let compact = serde_json::from_str::<serde_json::Value>(args).map(|v| v.to_string()).unwrap_or(args.to_owned());
    format!("[tool_call: {name}({})]", cut(&compact, TOOL_ARGS_CHARS))
}

fn content_text(c: Option<&Content>) -> String {
    match c {
        Some(Content::Text(t)) => t.clone(),
        Some(Content::Blocks(bs)) => bs.iter().filter_map(block_text).collect::<Vec<_>>().join("\n"),
        Some(Content::Null) | None => String::new(),
    }
}

fn block_text(b: &Block) -> Option<String> {
    match b {
        Block::Text { text, .. } => Some(text.clone()),
        Block::Media { kind, source, .. } => Some(match source {
            MediaSource::Base64 { media_type, data, .. } => media_ref(kind.as_str(), media_type, data),
            MediaSource::Other(_) => format!("[{} (external source)]", kind.as_str()),
        }),
        Block::ImageUrl { url, .. } => Some(match url {
            ImageUrl::Data { media_type, data } => media_ref("image", media_type, data),
            ImageUrl::Link(u) => format!("[image {u}]"),
        }),
        Block::ToolUse { name, input, .. } => Some(tool_call(name, input.as_str())),
        Block::ToolResult { tool_use_id, content, .. } => {
            Some(format!("[tool_result for {tool_use_id}]: {}", content_text(content.as_ref())))
        }
        Block::Thinking { .. } => None,
        Block::Other(raw) => {
            let kind = serde_json::from_str::<serde_json::Value>(raw.as_str())
                .ok()
                .and_then(|v| v.get("type")?.as_str().map(str::to_owned))
                .unwrap_or_else(|| "block".into());
            (kind != "redacted_thinking").then(|| format!("[{kind}]"))
        }
    }
}

fn media_ref(kind: &str, media_type: &str, data: &MediaData) -> String {
    match data {
        MediaData::Blob(r) => format!("[{kind} {media_type}, {} bytes, {}]", r.bytes, r.id),
        MediaData::Inline(b64) => format!("[{kind} {media_type}, {} base64 characters, not shown]", b64.len()),
    }
}

/// `s` cut at `max` characters, then `…`.
pub(crate) fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}
