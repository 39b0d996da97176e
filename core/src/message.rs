//! The normalized message model shared by both wire formats.
//!
//! Everything is kept in a form that re-serializes to JSON equal to what came in: unknown fields
//! and blocks are kept as their original JSON text ([`RawJson`]), tool inputs too, so a view is
//! byte-stable across renders. Binary payloads are replaced by [`BlobRef`]s at append.

use serde::{Deserialize, Serialize};

use crate::store::BlobId;

/// A JSON value kept as its original text (validated JSON, never re-serialized).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawJson(pub String);

impl RawJson {
    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Unknown fields of an object, in their original order, kept for lossless export.
pub type Extra = Vec<(String, RawJson)>;

/// Who speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Role {
    /// System prompt.
    System,
    /// OpenAI `developer` instructions (treated like `system`).
    Developer,
    /// The user, or (Anthropic) a carrier of tool results.
    User,
    /// The model.
    Assistant,
    /// OpenAI tool result message.
    Tool,
}

impl Role {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "system" => Role::System,
            "developer" => Role::Developer,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => return None,
        })
    }

    /// System-like roles are never edited or summarized away.
    pub fn is_system(self) -> bool {
        matches!(self, Role::System | Role::Developer)
    }
}

/// A message's `content`.
///
/// Deserialization (records, snapshots) refuses content nested deeper than
/// [`MAX_DECODE_NESTING`], so a crafted record cannot overflow the stack of `replay`/`verify`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Content {
    /// Explicit JSON `null` (OpenAI assistant messages that only call tools).
    Null,
    /// A plain string.
    Text(String),
    /// A list of blocks / parts.
    Blocks(Vec<Block>),
}

/// Deepest `Content` nesting (tool results inside tool results) a decoder accepts. The wire
/// parser already stops at [`crate::wire::MAX_CONTENT_NESTING`]; this bound is for bytes that did
/// not come through it.
pub const MAX_DECODE_NESTING: usize = 64;

/// The serde shape of [`Content`] (same name, same variants, so the encoding is unchanged).
#[derive(Deserialize)]
#[serde(rename = "Content")]
enum ContentRepr {
    Null,
    Text(String),
    Blocks(Vec<Block>),
}

thread_local! {
    static CONTENT_DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Level;
        impl Drop for Level {
            fn drop(&mut self) {
                CONTENT_DEPTH.with(|c| c.set(c.get().saturating_sub(1)));
            }
        }
        let depth = CONTENT_DEPTH.with(|c| {
            c.set(c.get() + 1);
            c.get()
        });
        let _level = Level;
        if depth > MAX_DECODE_NESTING {
            return Err(serde::de::Error::custom(format!("content nested more than {MAX_DECODE_NESTING} levels deep")));
        }
        Ok(match ContentRepr::deserialize(d)? {
            ContentRepr::Null => Content::Null,
            ContentRepr::Text(t) => Content::Text(t),
            ContentRepr::Blocks(b) => Content::Blocks(b),
        })
    }
}

/// Where a binary payload lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MediaData {
    /// Still inline as base64 text (externalizing failed or was not attempted).
    Inline(String),
    /// Moved to the store's blob area.
    Blob(BlobRef),
}

/// A reference to an externalized payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRef {
    /// Content address.
    pub id: BlobId,
    /// Byte length of the decoded payload.
    pub bytes: u64,
    /// Pixel width, when the header says so.
    pub width: Option<u32>,
    /// Pixel height, when the header says so.
    pub height: Option<u32>,
}

/// Anthropic `source` of an `image` or `document` block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MediaSource {
    /// `{"type":"base64","media_type":..,"data":..}`
    Base64 {
        /// MIME type.
        media_type: String,
        /// The payload.
        data: MediaData,
        /// Unknown fields.
        extra: Extra,
    },
    /// Any other source (`url`, `file`, …), kept verbatim.
    Other(RawJson),
}

/// OpenAI `image_url.url`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ImageUrl {
    /// `data:<media_type>;base64,<data>`
    Data {
        /// MIME type.
        media_type: String,
        /// The payload.
        data: MediaData,
    },
    /// An ordinary URL.
    Link(String),
}

/// One content block (Anthropic) or content part (OpenAI).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Block {
    /// `text`
    Text {
        /// The text.
        text: String,
        /// Unknown fields (e.g. `cache_control`).
        extra: Extra,
    },
    /// Anthropic `image` or `document`.
    Media {
        /// `"image"` or `"document"`.
        kind: MediaKind,
        /// The source.
        source: MediaSource,
        /// Unknown fields.
        extra: Extra,
    },
    /// OpenAI `image_url`.
    ImageUrl {
        /// The url.
        url: ImageUrl,
        /// Unknown fields of the inner `image_url` object (e.g. `detail`).
        inner: Extra,
        /// Unknown fields of the part.
        extra: Extra,
    },
    /// Anthropic `tool_use`.
    ToolUse {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// The input, as its original JSON text.
        input: RawJson,
        /// Unknown fields.
        extra: Extra,
    },
    /// Anthropic `tool_result`.
    ToolResult {
        /// The call it answers.
        tool_use_id: String,
        /// Its content (absent allowed).
        content: Option<Content>,
        /// `is_error`, if given.
        is_error: Option<bool>,
        /// Unknown fields.
        extra: Extra,
    },
    /// Anthropic `thinking`.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// Provider signature.
        signature: Option<String>,
        /// Unknown fields.
        extra: Extra,
    },
    /// Any other block, kept verbatim (`redacted_thinking`, audio, …).
    Other(RawJson),
}

/// Kinds of Anthropic media blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MediaKind {
    /// `image`
    Image,
    /// `document`
    Document,
}

impl MediaKind {
    /// The block type name.
    pub fn as_str(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Document => "document",
        }
    }
}

/// OpenAI `tool_calls[]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id.
    pub id: String,
    /// `type`, normally `"function"`; empty when the input omitted it, so export (which writes
    /// ctxlog's `meta`) omits it again while views write `"function"`.
    pub kind: String,
    /// `function.name`.
    pub name: String,
    /// `function.arguments`: a JSON-encoded string, kept as given.
    pub arguments: String,
    /// Unknown fields of the entry.
    pub extra: Extra,
    /// Unknown fields of `function`.
    pub function_extra: Extra,
}

/// Optional per-message fields that belong to ctxlog, not to the provider. They round-trip on
/// export but never appear in a view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// `timestamp` (RFC 3339 string or unix seconds), as given.
    pub timestamp: Option<RawJson>,
    /// `pinned`: never edited.
    pub pinned: Option<bool>,
    /// `usage` of the call that produced this assistant message, as given.
    pub usage: Option<RawJson>,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Role.
    pub role: Role,
    /// Content; `None` when the field was absent.
    pub content: Option<Content>,
    /// OpenAI `tool_calls`; `None` when absent.
    pub tool_calls: Option<Vec<ToolCall>>,
    /// OpenAI `tool_call_id` of a `tool` message.
    pub tool_call_id: Option<String>,
    /// ctxlog's own fields.
    pub meta: Meta,
    /// Unknown top-level fields (e.g. `name`).
    pub extra: Extra,
}

impl Message {
    /// A plain text message.
    pub fn text(role: Role, text: impl Into<String>) -> Message {
        Message {
            role,
            content: Some(Content::Text(text.into())),
            tool_calls: None,
            tool_call_id: None,
            meta: Meta::default(),
            extra: Vec::new(),
        }
    }

    /// The content blocks, if the content is a block list.
    pub fn blocks(&self) -> &[Block] {
        match &self.content {
            Some(Content::Blocks(b)) => b,
            _ => &[],
        }
    }

    /// Ids of the tool calls this message makes (Anthropic `tool_use` blocks and OpenAI
    /// `tool_calls`).
    pub fn call_ids(&self) -> impl Iterator<Item = &str> {
        let blocks = self.blocks().iter().filter_map(|b| match b {
            Block::ToolUse { id, .. } => Some(id.as_str()),
            _ => None,
        });
        let calls = self.tool_calls.iter().flatten().map(|c| c.id.as_str());
        blocks.chain(calls)
    }

    /// Ids of the tool calls this message answers (Anthropic `tool_result` blocks and OpenAI
    /// `tool_call_id`).
    pub fn result_ids(&self) -> impl Iterator<Item = &str> {
        let blocks = self.blocks().iter().filter_map(|b| match b {
            Block::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
            _ => None,
        });
        blocks.chain(self.tool_call_id.as_deref())
    }

    /// True when this message carries tool results.
    pub fn is_tool_result(&self) -> bool {
        self.role == Role::Tool || self.result_ids().next().is_some()
    }

    /// A human turn: role user and not a tool-result carrier.
    pub fn is_human(&self) -> bool {
        self.role == Role::User && !self.is_tool_result()
    }

    /// Does it carry a thinking or redacted-thinking block?
    pub fn has_thinking(&self) -> bool {
        self.blocks().iter().any(Block::is_thinking)
    }

    /// Pinned messages are never edited. A message carrying a provider's compaction is pinned
    /// too: the provider reads it as the summary of everything before it, so it must reach the
    /// provider as it was (never removed, truncated or summarized away by ctxlog).
    pub fn is_pinned(&self) -> bool {
        self.meta.pinned == Some(true) || self.provider_compaction()
    }

    /// Whether this message carries a provider's compaction: an Anthropic `compaction` block,
    /// or an OpenAI Responses `compaction` item (kept verbatim). The provider drops everything
    /// before it from what the model sees, and a client may stop sending it.
    pub fn provider_compaction(&self) -> bool {
        self.blocks().iter().any(|b| match b {
            Block::Other(raw) => is_compaction(raw.as_str()),
            _ => false,
        })
    }

    /// Concatenated text of the message (string content, or all text blocks), for summaries and
    /// previews.
    pub fn plain_text(&self) -> String {
        match &self.content {
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Blocks(blocks)) => {
                let mut out = String::new();
                for b in blocks {
                    if let Block::Text { text, .. } = b {
                        if !out.is_empty() {
                            out.push('\n');
                        }
                        out.push_str(text);
                    }
                }
                out
            }
            _ => String::new(),
        }
    }
}

impl Block {
    /// A `thinking` or `redacted_thinking` block: sent back whole or not at all (its signature
    /// covers it), never edited.
    pub fn is_thinking(&self) -> bool {
        match self {
            Block::Thinking { .. } => true,
            Block::Other(raw) => {
                raw.as_str().contains("redacted_thinking")
                    && serde_json::from_str::<serde_json::Value>(raw.as_str())
                        .is_ok_and(|v| v.get("type").and_then(|t| t.as_str()) == Some("redacted_thinking"))
            }
            _ => false,
        }
    }
}

/// Whether a verbatim block or item is a provider compaction (`"type":"compaction"`). A cheap
/// byte test first: most verbatim blocks are not.
fn is_compaction(raw: &str) -> bool {
    #[derive(Deserialize)]
    struct Typed<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    raw.contains("compaction")
        && serde_json::from_str::<Typed<'_>>(raw).is_ok_and(|t| t.kind.as_deref() == Some("compaction"))
}
