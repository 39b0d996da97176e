//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use ctxlog::config::{Config, SummarizerKind};

use crate::transcript::FormatArg;

/// The store used when `--store` is not given.
pub const DEFAULT_STORE: &str = "sqlite:ctxlog.db";

/// ctxlog: auditable, cache-aware context compaction for LLM sessions.
#[derive(Debug, Parser)]
#[command(name = "ctxlog", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Log what the engine and the store do on stderr: -v flushes, guards, summaries, repairs
    /// and conflicts; -vv every call, edit and append; -vvv everything.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Let a writing command (`import`, `demo`, `restore`, `copy --to`, `proxy`) open an fs
    /// store whose log is shorter than what it acknowledged: the loss is recorded in
    /// `<log>.lost-<version>` (which `verify` reports) and the session goes on from where its log
    /// ends. Without it such an open fails (exit 4). Read-only commands never repair.
    #[arg(long, global = true)]
    pub accept_loss: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the bundled agent session through the engine and print its timeline.
    Demo(DemoArgs),
    /// Feed a JSONL transcript through the engine: every assistant line is one model call.
    Import(ImportArgs),
    /// List the sessions of a store.
    Sessions(StoreArgs),
    /// Re-fold a session's log and print its per-call timeline.
    Replay(ReplayArgs),
    /// Show the state or the view of a session at a version.
    Inspect(InspectArgs),
    /// Check checksums, invariants, view digests, blobs and the snapshot of sessions.
    Verify(VerifyArgs),
    /// Write the original transcript back, one message per line.
    Export(ExportArgs),
    /// Undo the edit of one message (recorded as a `Restored` event).
    Restore(RestoreArgs),
    /// Copy sessions between stores, losslessly.
    Copy(CopyArgs),
    /// Print a session's calls as they are committed (`--follow`), like `tail -f`.
    Tail(TailArgs),
    /// Draw a session: one self-contained HTML page with a chart over its calls and the calls
    /// as a table (or, with `--out FILE.svg`, the chart alone).
    Report(ReportArgs),
    /// Say in one paragraph what happened to one message, at which call, by which rule and
    /// under which guard, and whether it is in the latest view.
    Why(WhyArgs),
    /// Re-run a recorded session's inputs through the engine with other knobs (in memory) and
    /// print how its decisions differ from the recorded ones: the regression check.
    Rerun(RerunArgs),
    /// Compare the timelines of two sessions call by call, as `rerun` does.
    Diff(DiffArgs),
    /// Serve the Anthropic and OpenAI chat APIs on a local port, logging and compacting every
    /// session on its way to the real API (`ANTHROPIC_BASE_URL` / `OPENAI_BASE_URL`).
    Proxy(ProxyArgs),
    /// Print the request body a call served, rebuilt byte for byte from the log (what the
    /// proxy forwarded for it, given the client's body for the fields other than the view).
    Request(RequestArgs),
}

/// `--store` and `--json`.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Store URL: `sqlite:PATH`, `sled:PATH`, `fs:PATH`, `postgres://USER@HOST/DB` or `mem:`.
    #[arg(long, default_value = DEFAULT_STORE)]
    pub store: String,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// Selects one session.
#[derive(Debug, Args)]
pub struct SessionArgs {
    /// Store and output.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Session id (may be omitted when the store holds exactly one session).
    #[arg(long)]
    pub session: Option<String>,
}

/// Engine knobs shared by `demo` and `import`; a `--config` TOML file has the same keys.
#[derive(Debug, Clone, Args, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConfigArgs {
    /// Read knobs from a TOML file (same keys as the flags, e.g. `budget = 120000`,
    /// `cache-aware = false`); flags given on the command line win.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Input token budget of the model.
    #[arg(long)]
    pub budget: Option<u64>,
    /// Hard threshold as a fraction of the budget (default 0.85).
    #[arg(long)]
    pub trigger: Option<f64>,
    /// Ladder target as a fraction of the budget (default 0.50).
    #[arg(long)]
    pub target: Option<f64>,
    /// Soft threshold where summaries are prepared (default 0.70).
    #[arg(long)]
    pub prepare: Option<f64>,
    /// Who writes summaries: `extractive` (built in), `none`, or a model: `anthropic:URL`,
    /// `openai:URL` (OpenAI, llama.cpp, vLLM, Ollama), `command:PROGRAM [ARGS]` (the request
    /// JSON on its stdin, the summary on its stdout).
    #[arg(long, value_parser = SummarizerArg::parse)]
    pub summarizer: Option<SummarizerArg>,
    /// How a model is asked: `standalone` (own prompt and the span as text), `fork` (the last
    /// request plus one message: read from the prompt cache) or `auto` (fork when the span is
    /// a large enough share of the prompt). Default standalone.
    #[arg(long, value_enum)]
    #[serde(skip)]
    pub summary_call: Option<SummaryCallArg>,
    /// The model named in summary requests (and recorded for the main calls).
    #[arg(long)]
    #[serde(skip)]
    pub summary_model: Option<String>,
    /// NAME of the environment variable holding the summarizer's API key (default
    /// ANTHROPIC_API_KEY for anthropic:, OPENAI_API_KEY if set for openai:).
    #[arg(long, value_name = "NAME")]
    #[serde(skip)]
    pub summary_key_env: Option<String>,
    /// Seconds a summary call may take (default 120).
    #[arg(long, value_name = "SECONDS")]
    #[serde(skip)]
    pub summary_timeout: Option<f64>,
    /// The summarizer's context window in tokens: summary jobs are cut to fit it with room for
    /// the answer (default: what an `openai:` server states at `/props`, as llama.cpp does;
    /// else unbounded).
    #[arg(long, value_name = "TOKENS")]
    #[serde(skip)]
    pub summary_context: Option<u64>,
    /// `max_tokens` of every summary request (default: derived from each job's limit — a
    /// quarter of its span, 96 to 1,024, or a condense job's limit — plus half again).
    #[arg(long, value_name = "TOKENS")]
    #[serde(skip)]
    pub summary_max_tokens: Option<u64>,
    /// Defer flushes while the prompt cache is warm (the default; `--cache-aware=false` or
    /// `--no-cache-aware` for the legacy gate, which flushes as soon as a summary is prepared).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub cache_aware: Option<bool>,
    /// The legacy gate: flush as soon as a summary is prepared, whatever the cache.
    #[arg(long, conflicts_with = "cache_aware")]
    #[serde(skip)]
    pub no_cache_aware: bool,
    /// Prompt-cache time-to-live in seconds (default 300).
    #[arg(long)]
    pub ttl: Option<f64>,
    /// The last N tool results are never truncated, cleared or removed (default 5): Anthropic's
    /// `clear_tool_uses` `keep`, hence its other name `--keep-tool-uses`.
    #[arg(long, visible_alias = "keep-tool-uses", value_name = "N")]
    #[serde(alias = "keep-tool-uses")]
    pub protected_tools: Option<u32>,
    /// Tools whose calls and results are never truncated, cleared or removed (comma-separated,
    /// e.g. `memory,todo_write`): Anthropic's `exclude_tools`.
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    pub exclude_tools: Option<Vec<String>>,
    /// When a tool result is truncated or cleared, clear its call's input too (`{}`; the id and
    /// name stay, so the pair stays valid): Anthropic's `clear_tool_inputs`.
    #[arg(long)]
    #[serde(default)]
    pub clear_tool_inputs: bool,
    /// Clear old tool results to this text (as Anthropic's context editing does) instead of
    /// truncating them to their head.
    #[arg(long, value_name = "TEXT")]
    pub tool_placeholder: Option<String>,
    /// Keep the thinking blocks of the last N thinking turns only; older ones are dropped whole
    /// (never modified; the current tool loop keeps its own): Anthropic's `clear_thinking`.
    /// Default: keep all.
    #[arg(long, value_name = "N")]
    pub keep_thinking_turns: Option<u32>,
    /// The most recent fraction of messages is protected from removal (default 0.30).
    #[arg(long)]
    pub protected_recent: Option<f64>,
    /// Consecutive over-budget passes before the breaker freezes the view (default 10).
    #[arg(long)]
    pub breaker: Option<u32>,
    /// Flat token cost of an image (default 1600).
    #[arg(long)]
    pub image_tokens: Option<u32>,
    /// Share of the target that summaries may take in a view; past it the oldest are condensed
    /// into one (default 0.25).
    #[arg(long)]
    pub summary_share: Option<f64>,
    /// With --cache-aware: while the cache is warm, nothing rewrites the view until it is over
    /// this fraction of the budget (between --trigger and 1; default 1, the budget).
    #[arg(long)]
    pub hard_limit: Option<f64>,
    /// With --cache-aware: a rewrite of a warm prefix within the budget must free at least this
    /// many tokens, or it waits (default 0).
    #[arg(long)]
    pub clear_at_least: Option<u64>,
    /// The view version of a new session (default the newest, 3; 2 renders and decides as
    /// sessions written before the margin for estimate error did). For comparisons only.
    #[arg(long, hide = true)]
    #[serde(skip)]
    pub view_version: Option<u32>,
    /// Choose the session id.
    #[arg(long)]
    #[serde(skip)]
    pub session: Option<String>,
}

/// `--summarizer`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum SummarizerArg {
    /// Built-in deterministic extractive summaries.
    Extractive,
    /// No summaries.
    None,
    /// A model, as `anthropic:URL`, `openai:URL` or `command:PROGRAM [ARGS]` (checked when the
    /// client is built).
    Model(String),
}

/// Why a `--summarizer` value (or a config file's `summarizer`) is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SummarizerArgError {
    /// Neither a built-in summarizer nor `kind:rest`.
    #[error("`{0}`: expected extractive, none, anthropic:URL, openai:URL or command:PROGRAM")]
    Unknown(String),
    /// A model in a config file, where only the built-in ones are read.
    #[error("`{0}`: a model summarizer is given on the command line (--summarizer)")]
    ModelInConfig(String),
}

impl SummarizerArg {
    /// `extractive`, `none`, or a model spec (`kind:rest`).
    pub fn parse(s: &str) -> Result<SummarizerArg, SummarizerArgError> {
        match s {
            "extractive" => Ok(SummarizerArg::Extractive),
            "none" => Ok(SummarizerArg::None),
            spec if spec.split_once(':').is_some_and(|(k, r)| !k.is_empty() && !r.trim().is_empty()) => {
                Ok(SummarizerArg::Model(spec.to_owned()))
            }
            other => Err(SummarizerArgError::Unknown(other.to_owned())),
        }
    }
}

/// In a `--config` file: `extractive` or `none` (a model and its settings are given as flags).
impl TryFrom<String> for SummarizerArg {
    type Error = SummarizerArgError;
    fn try_from(s: String) -> Result<Self, SummarizerArgError> {
        match SummarizerArg::parse(&s)? {
            SummarizerArg::Model(spec) => Err(SummarizerArgError::ModelInConfig(spec)),
            other => Ok(other),
        }
    }
}

/// `--summary-call`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SummaryCallArg {
    /// Own system prompt and the span as text.
    Standalone,
    /// The last served request plus one message.
    Fork,
    /// Fork when the span is at least 22% of the prompt.
    Auto,
}

impl SummaryCallArg {
    /// The core's mode.
    pub fn mode(self) -> ctxlog::event::SummaryMode {
        match self {
            SummaryCallArg::Standalone => ctxlog::event::SummaryMode::Standalone,
            SummaryCallArg::Fork => ctxlog::event::SummaryMode::Fork,
            SummaryCallArg::Auto => ctxlog::event::SummaryMode::Auto,
        }
    }
}

impl ConfigArgs {
    /// The config of `base`, then the `--config` file, then the flags.
    pub fn resolve(&self, base: Config) -> Result<Config, crate::error::CliError> {
        let Some(path) = &self.config else { return Ok(self.apply(base)) };
        let input = |message: String| crate::error::CliError::input(path, 0, message);
        let text = std::fs::read_to_string(path).map_err(|e| input(format!("cannot read: {e}")))?;
        let file: ConfigArgs = toml::from_str(&text).map_err(|e| toml_error(path, &text, &e))?;
        Ok(self.apply(file.apply(base)))
    }

    /// The config these flags describe, on top of `base`.
    pub fn apply(&self, mut c: Config) -> Config {
        if let Some(v) = self.budget {
            c.budget = v;
        }
        if let Some(v) = self.trigger {
            c.trigger_ratio = v;
        }
        if let Some(v) = self.target {
            c.target_ratio = v;
        }
        if let Some(v) = self.prepare {
            c.prepare_ratio = v;
        }
        if let Some(v) = &self.summarizer {
            c.summarizer = match v {
                // A model's summaries are prepared like the built-in ones (the engine asks).
                SummarizerArg::Extractive | SummarizerArg::Model(_) => SummarizerKind::Extractive,
                SummarizerArg::None => SummarizerKind::None,
            };
        }
        if let Some(v) = self.cache_aware {
            c.cache_aware = v;
        }
        if self.no_cache_aware {
            c.cache_aware = false;
        }
        if let Some(v) = self.ttl {
            c.flush_ttl_ms = (v.max(0.0) * 1000.0).round() as u64;
        }
        if let Some(v) = self.protected_tools {
            c.protected_tool_results = v;
        }
        if let Some(v) = self.protected_recent {
            c.protected_recent_ratio = v;
        }
        if let Some(v) = self.breaker {
            c.breaker_passes = v;
        }
        if let Some(v) = self.image_tokens {
            c.image_tokens = v;
        }
        if let Some(v) = self.summary_share {
            c.summary_share = v;
        }
        if let Some(v) = self.hard_limit {
            c.hard_limit_ratio = v;
        }
        if let Some(v) = self.clear_at_least {
            c.clear_at_least = v;
        }
        if let Some(v) = &self.exclude_tools {
            c.exclude_tools = v.iter().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()).collect();
        }
        c.clear_tool_inputs |= self.clear_tool_inputs;
        if let Some(v) = &self.tool_placeholder {
            c.tool_placeholder = Some(v.clone());
        }
        if let Some(v) = self.keep_thinking_turns {
            c.keep_thinking_turns = Some(v);
        }
        if let Some(v) = self.view_version {
            c.view_version = v;
        }
        c
    }
}

/// A `--config` file that does not parse, with the line and the key it is about.
fn toml_error(path: &std::path::Path, text: &str, e: &toml::de::Error) -> crate::error::CliError {
    let start = e.span().map_or(0, |s| s.start).min(text.len());
    let line = text.get(..start).map_or(0, |t| t.matches('\n').count()) + 1;
    let message = e.message().trim();
    // serde names an unknown key in its message; otherwise the key is the one on that line.
    let named = message.split('`').nth(1).filter(|_| message.starts_with("unknown field"));
    let key = text.lines().nth(line - 1).and_then(|l| l.split_once('=')).map(|(k, _)| k.trim().trim_matches('"'));
    let field = named.or(key).unwrap_or_default();
    crate::error::CliError::input_field(path, line, field, message.to_owned())
}

/// `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Store and output.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Engine knobs (the demo defaults to an 80,000-token budget).
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Write each call's exact view to this JSONL file.
    #[arg(long)]
    pub views: Option<PathBuf>,
    /// Instead of the bundled 543-message session, generate one of exactly N messages with the
    /// same shape (at least 3), to see how compaction holds up on a long session.
    #[arg(long, value_name = "N")]
    pub messages: Option<u64>,
    /// Wire format of the demo session: `anthropic`, `openai` (the same session converted to
    /// OpenAI chat messages), or `auto` (default): the summarizer's format with an `openai:`
    /// summarizer, so that its fork summaries can be built, else anthropic.
    #[arg(long, value_enum, default_value = "auto")]
    pub format: FormatArg,
}

/// `import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The transcript (JSON Lines, one message per line).
    pub file: PathBuf,
    /// Store and output.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Wire format of the transcript.
    #[arg(long, value_enum, default_value = "auto")]
    pub format: FormatArg,
    /// Engine knobs.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Simulated seconds between calls when lines carry no timestamp.
    #[arg(long, default_value_t = 30.0)]
    pub call_interval: f64,
    /// Write each call's exact view to this JSONL file.
    #[arg(long)]
    pub views: Option<PathBuf>,
    /// In `--views`, inline media as base64 instead of blob references.
    #[arg(long)]
    pub inline_media: bool,
}

/// `replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Session selection.
    #[command(flatten)]
    pub session: SessionArgs,
    /// Stop after this stream version.
    #[arg(long, conflicts_with = "call")]
    pub until: Option<u64>,
    /// Stop after this call (0-based, as in the `call` column).
    #[arg(long)]
    pub call: Option<u64>,
    /// Go on past invariant violations (clamp or skip), reporting each.
    #[arg(long)]
    pub lenient: bool,
}

/// `inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Session selection.
    #[command(flatten)]
    pub session: SessionArgs,
    /// Inspect the state at this stream version (default: the head).
    #[arg(long, conflicts_with = "call")]
    pub version: Option<u64>,
    /// Inspect the state right after this call (0-based): its view is what the call sent.
    #[arg(long)]
    pub call: Option<u64>,
    /// Print the view at that version instead: one JSON message per line, exactly as it
    /// would be sent (media as blob references).
    #[arg(long)]
    pub view: bool,
}

/// `verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Store and output.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this session (default: all).
    #[arg(long)]
    pub session: Option<String>,
    /// Do not fail on repairs earlier opens made (a torn write moved to a quarantine file):
    /// list them and exit 0 if nothing else is wrong.
    #[arg(long)]
    pub accept_repairs: bool,
}

/// `export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Session selection.
    #[command(flatten)]
    pub session: SessionArgs,
    /// Write here instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `restore`.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// Session selection.
    #[command(flatten)]
    pub session: SessionArgs,
    /// The message to restore.
    #[arg(long)]
    pub seq: u64,
    /// Why (recorded in the event).
    #[arg(long, default_value = "restored from the command line")]
    pub why: String,
    /// Also pin it (a `Pinned` event in the same batch): no ladder level edits it and no flush
    /// hides it for good, until `--unpin`. A message already in the view is only pinned.
    #[arg(long, conflicts_with = "unpin")]
    pub pin: bool,
    /// Unpin a message pinned with `--pin` (the explicit edit that ends the pin); nothing is restored.
    #[arg(long)]
    pub unpin: bool,
}

/// `copy`.
#[derive(Debug, Args)]
pub struct CopyArgs {
    /// Source store URL.
    #[arg(long)]
    pub from: String,
    /// Target store URL.
    #[arg(long)]
    pub to: String,
    /// Only this session (default: all).
    #[arg(long)]
    pub session: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `tail`.
#[derive(Debug, Args)]
pub struct TailArgs {
    /// Session selection.
    #[command(flatten)]
    pub session: SessionArgs,
    /// Keep printing calls as they are committed (LISTEN/NOTIFY on PostgreSQL, polling on
    /// other stores); waits for the session if it does not exist yet.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// How many of the calls already in the log to print first.
    #[arg(long, short = 'n', default_value_t = 10)]
    pub lines: usize,
    /// Exit after printing this many calls.
    #[arg(long)]
    pub max_calls: Option<u64>,
    /// Seconds between re-reads of the log (PostgreSQL: a fallback behind its notifications).
    #[arg(long, default_value_t = 1.0)]
    pub poll: f64,
}

/// `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Session selection.
    #[command(flatten)]
    pub session: SessionArgs,
    /// Where to write: `FILE.html` (the page) or `FILE.svg` (the chart alone).
    #[arg(long)]
    pub out: PathBuf,
    /// Draw the session up to this call (0-based) and mark it.
    #[arg(long)]
    pub call: Option<u64>,
}

/// `why`.
#[derive(Debug, Args)]
pub struct WhyArgs {
    /// Session selection.
    #[command(flatten)]
    pub session: SessionArgs,
    /// The message.
    #[arg(long)]
    pub seq: u64,
}

/// `rerun`.
#[derive(Debug, Args)]
#[command(mut_arg("session", |a| a.help("The recorded session (may be omitted when the store holds exactly one)")))]
pub struct RerunArgs {
    /// Store and output.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Knobs to change, on top of the ones the session was recorded with (same flags and
    /// `--config` file as `import`).
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Summaries: `recorded` reuses a recorded summary wherever the engine asks for the same
    /// span, and re-makes the others with the built-in summarizer; `remake` re-makes them all.
    #[arg(long, value_enum, default_value = "recorded")]
    pub summaries: SummariesArg,
    /// Exit with 1 when some call differs (for CI).
    #[arg(long)]
    pub exit_code: bool,
}

/// `rerun --summaries`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SummariesArg {
    /// Reuse recorded summaries where they fit.
    Recorded,
    /// Re-make every summary with the built-in summarizer.
    Remake,
}

/// `request`.
#[derive(Debug, Args)]
pub struct RequestArgs {
    /// Session selection (`--json` prints the call's view digest and size instead of the body).
    #[command(flatten)]
    pub session: SessionArgs,
    /// The call (0-based).
    #[arg(long)]
    pub call: u64,
    /// A client request body (JSON) whose top-level fields other than `system` and `messages`
    /// (`model`, `max_tokens`, `tools`, `stream`, ...) go around the view, in its order, as
    /// `ctxlog proxy` passes them through. Without it the body holds the view alone.
    #[arg(long)]
    pub fields_from: Option<PathBuf>,
}

/// `diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The first session (the baseline).
    pub a: String,
    /// The second session.
    pub b: String,
    /// Store of both sessions, and output.
    #[command(flatten)]
    pub store: StoreArgs,
    /// The second session is in this store instead.
    #[arg(long, value_name = "URL")]
    pub store_b: Option<String>,
    /// Exit with 1 when some call differs (for CI).
    #[arg(long)]
    pub exit_code: bool,
}

/// `proxy`.
#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Address to listen on (loopback unless `--allow-remote`).
    #[arg(long, default_value = "127.0.0.1:8787")]
    pub listen: std::net::SocketAddr,
    /// Base URL of the provider, e.g. `https://api.anthropic.com` or `https://api.openai.com`.
    #[arg(long)]
    pub upstream: String,
    /// Store URL: `sqlite:PATH`, `sled:PATH`, `fs:PATH`, `postgres://USER@HOST/DB` or `mem:`.
    #[arg(long, default_value = DEFAULT_STORE)]
    pub store: String,
    /// Pooled connections of a PostgreSQL store (default 8, or the URL's `pool_size`).
    #[arg(long, value_name = "N")]
    pub store_pool: Option<usize>,
    /// Seconds to keep retrying a store that is unavailable at start (a database server down
    /// or restarting) before exiting; 0 tries once.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub store_wait: u64,
    /// Engine knobs for the sessions the proxy creates.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Require this token from clients in the `x-ctxlog-token` header.
    #[arg(long)]
    pub client_token: Option<String>,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    pub max_body: usize,
    /// Seconds to wait for the upstream's headers, and between two chunks of its answer.
    #[arg(long, default_value_t = 600)]
    pub upstream_timeout: u64,
    /// Seconds a request waits for the call in flight on its session (in this proxy or
    /// another of a fleet) before it is answered 529/503 with `retry-after` (nothing sent).
    #[arg(long, default_value_t = 120)]
    pub session_wait: u64,
    /// Seconds a session may stay idle before it is shrunk to the digests of its history (its
    /// state leaves memory; the next request reopens it from the store's snapshot).
    #[arg(long, default_value_t = 60)]
    pub idle_shrink: u64,
    /// Accept a listen address that is not loopback.
    #[arg(long)]
    pub allow_remote: bool,
    /// Connections served at once; past it the proxy waits for one to close.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Seconds a client may take to send a request's headers (idle keep-alive included).
    #[arg(long, default_value_t = 30)]
    pub header_timeout: u64,
    /// Seconds a client may take to send a request's body.
    #[arg(long, default_value_t = 60)]
    pub body_timeout: u64,
    /// On Ctrl-C or SIGTERM: seconds the calls in flight may take to end and commit.
    #[arg(long, default_value_t = 30)]
    pub drain_timeout: u64,
    /// Anthropic prompt-cache breakpoints of forwarded requests: `auto` (the client's mapped
    /// onto the view, the proxy's own when it set none), `client` (only the client's) or `off`.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub cache_breakpoints: ctxlog_proxy::CacheBreakpoints,
    /// A client's own Anthropic `context_management` (context editing): `pass` it upstream as
    /// it came (default), or `apply` it in ctxlog as the call's knobs and leave it out (for
    /// upstreams that lack it, e.g. llama.cpp); the answer then reports `applied_edits`.
    #[arg(long, value_name = "MODE", default_value = "pass")]
    pub provider_context_management: ctxlog_proxy::ProviderContextManagement,
    /// Context windows by model prefix over the built-in table, as a JSON object
    /// (`{"my-finetune": 32768}`); used as the budget unless `--budget` is given.
    #[arg(long, value_name = "FILE")]
    pub models: Option<PathBuf>,
    /// One context window over the table: `MODEL_PREFIX=TOKENS` (repeatable).
    #[arg(long, value_name = "PREFIX=TOKENS")]
    pub model_window: Vec<String>,
}
