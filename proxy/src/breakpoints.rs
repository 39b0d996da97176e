//! Anthropic prompt-cache breakpoints of a forwarded request (`--cache-breakpoints`).
//!
//! The log keeps the client's messages as first sent, `cache_control` included, so the view
//! carries the breakpoints of every past request; the forwarded body carries only this
//! request's, mapped onto the view (a breakpoint on a message the view no longer shows moves to
//! the nearest item it shows before it), each with its TTL. A client that sets none (LangChain's
//! `ChatAnthropic`, the Node SDK) gets the proxy's own in `auto` mode: Anthropic caches nothing
//! a request does not mark. What was placed is recorded with the call (`ctxlog request` rebuilds
//! it) and told in `x-ctxlog-breakpoints`.

use ctxlog::internal::breakpoints::{Mark, Origin, Placement};
use ctxlog::{CacheTtl, Plan, RequestOptions, Session, SessionError, WireFormat};
use serde_json::Value;

use crate::body::ClientBody;

/// Whose breakpoints a forwarded Anthropic request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheBreakpoints {
    /// The client's, mapped onto the view; the proxy's own when the client set none (default).
    #[default]
    Auto,
    /// Only the client's, mapped onto the view.
    Client,
    /// None: every `cache_control` of the messages and the system prompt is left out.
    Off,
}

/// A `--cache-breakpoints` value that is none of the three.
#[derive(Debug, thiserror::Error)]
#[error("{0:?}: expected auto, client or off")]
pub struct UnknownBreakpointMode(String);

impl std::str::FromStr for CacheBreakpoints {
    type Err = UnknownBreakpointMode;
    fn from_str(s: &str) -> Result<Self, UnknownBreakpointMode> {
        match s {
            "auto" => Ok(CacheBreakpoints::Auto),
            "client" => Ok(CacheBreakpoints::Client),
            "off" => Ok(CacheBreakpoints::Off),
            other => Err(UnknownBreakpointMode(other.to_owned())),
        }
    }
}

/// The breakpoints a client's request set, by where they are in it.
#[derive(Debug, Default)]
pub(crate) struct Asked {
    mode: CacheBreakpoints,
    anthropic: bool,
    /// Tools with a `cache_control` (passed on verbatim with the tools: they count).
    tools: usize,
    /// The TTL of the system prompt's last marked block.
    system: Option<CacheTtl>,
    /// `(messages index, block index, ttl)`, in order.
    messages: Vec<(usize, u32, CacheTtl)>,
}

const NEEDLE: &[u8] = b"\"cache_control\"";

impl Asked {
    /// Reads the breakpoints of `body`: only the fields and messages that name `cache_control`
    /// are parsed (a history of 150k tokens is scanned once, with memchr).
    pub fn of(body: &ClientBody<'_>, format: WireFormat, mode: CacheBreakpoints) -> Asked {
        let mut asked = Asked { mode, anthropic: format == WireFormat::Anthropic, ..Asked::default() };
        if !asked.anthropic {
            return asked;
        }
        let finder = memchr::memmem::Finder::new(NEEDLE);
        let parsed = |raw: &str| finder.find(raw.as_bytes()).and_then(|_| serde_json::from_str::<Value>(raw).ok());
        if let Some((_, raw)) = body.fields.iter().find(|(k, _)| *k == "tools") {
            if let Some(Value::Array(tools)) = parsed(raw.get()) {
                asked.tools = tools.iter().filter(|t| t.get("cache_control").is_some()).count();
            }
        }
        if let Some(Value::Array(blocks)) = body.system.and_then(|s| parsed(s.get())) {
            asked.system = blocks.iter().rev().find_map(ttl_of);
        }
        for (i, raw) in body.messages.iter().enumerate() {
            let Some(m) = parsed(raw) else { continue };
            let Some(Value::Array(blocks)) = m.get("content") else { continue };
            for (j, b) in blocks.iter().enumerate() {
                // A mark inside a tool result's content marks the result's block.
                let inner = b.get("content").and_then(Value::as_array).and_then(|c| c.iter().rev().find_map(ttl_of));
                if let (Some(ttl), Ok(j)) = (ttl_of(b).or(inner), u32::try_from(j)) {
                    asked.messages.push((i, j, ttl));
                }
            }
        }
        asked
    }

    /// Did the client set any breakpoint?
    fn any(&self) -> bool {
        self.tools > 0 || self.system.is_some() || !self.messages.is_empty()
    }
}

fn ttl_of(block: &Value) -> Option<CacheTtl> {
    let c = block.get("cache_control")?;
    Some(if c.get("ttl").and_then(Value::as_str) == Some("1h") { CacheTtl::OneHour } else { CacheTtl::FiveMinutes })
}

/// `opts` with the breakpoints of `plan`'s request, for a session whose last `items` messages
/// are the request's history (its `system`, when it has one, then `messages`); and who decided
/// them (`None`: not an Anthropic request, nothing placed).
pub(crate) fn options<S: ctxlog::Store>(
    session: &Session<S>,
    plan: &Plan,
    items: usize,
    has_system: bool,
    asked: &Asked,
    opts: &RequestOptions,
) -> Result<(RequestOptions, Option<Origin>), SessionError> {
    if !asked.anthropic {
        return Ok((opts.clone(), None));
    }
    let placement = match asked.mode {
        CacheBreakpoints::Off => Placement { origin: Origin::Off, marks: Vec::new() },
        CacheBreakpoints::Auto if !asked.any() => session.auto_breakpoints(plan, CacheTtl::FiveMinutes)?,
        CacheBreakpoints::Auto | CacheBreakpoints::Client => {
            // The session's messages end with the request's history, item for item.
            let first = session.state().message_count().saturating_sub(items as u64) + u64::from(has_system);
            let mut marks: Vec<Mark> = asked.system.map(Mark::System).into_iter().collect();
            marks.extend(asked.messages.iter().map(|&(i, block, ttl)| Mark::Message {
                seq: first + i as u64,
                block: Some(block),
                ttl,
            }));
            Placement { origin: Origin::Client, marks }
        }
    };
    let origin = placement.origin;
    Ok((opts.clone().place_breakpoints(placement), Some(origin)))
}

/// `x-ctxlog-breakpoints`: the breakpoints the forwarded body carries (the tools' included)
/// and who placed them, e.g. `3 auto`.
pub(crate) fn header(placed: usize, origin: Origin, asked: &Asked) -> Option<http::HeaderValue> {
    format!("{} {}", placed + asked.tools, origin.as_str()).parse().ok()
}
