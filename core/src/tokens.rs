//! The token estimator: content-aware and additive.
//!
//! Text costs `chars / 4`; an image or document costs a flat amount, or the provider's
//! `ceil(w*h/750)` (capped at the flat amount) when its dimensions are known; a tool result
//! recurses into its content. A message costs [`MESSAGE_OVERHEAD`] plus its parts, and a view
//! costs exactly the sum of its messages: every delta (removal, truncation, stub) uses the same
//! function, so the arithmetic of the ladder never drifts from a fresh estimate.

use crate::message::{Block, Content, ImageUrl, MediaData, MediaSource, Message};

/// Framing cost of one message (role, separators).
pub const MESSAGE_OVERHEAD: u32 = 4;
/// Framing cost of one structured block or tool call.
pub const BLOCK_OVERHEAD: u32 = 2;
/// Default flat cost of an image or document block.
pub(crate) const DEFAULT_IMAGE_TOKENS: u32 = 1_600;

/// Estimates tokens of messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimator {
    /// Flat cost of a media block, and the cap of the dimension formula.
    pub image_tokens: u32,
}

impl Default for Estimator {
    fn default() -> Self {
        Estimator { image_tokens: DEFAULT_IMAGE_TOKENS }
    }
}

/// `chars / 4` of a text.
pub fn text_tokens(s: &str) -> u32 {
    u32::try_from(s.chars().count() / 4).unwrap_or(u32::MAX)
}

impl Estimator {
    /// Tokens of one message.
    pub fn message(&self, m: &Message) -> u32 {
        let mut t = MESSAGE_OVERHEAD;
        if let Some(c) = &m.content {
            t = t.saturating_add(self.content(c));
        }
        for call in m.tool_calls.iter().flatten() {
            t = t.saturating_add(BLOCK_OVERHEAD + text_tokens(&call.name) + text_tokens(&call.arguments));
        }
        t
    }

    /// Tokens of a content value.
    pub fn content(&self, c: &Content) -> u32 {
        match c {
            Content::Null => 0,
            Content::Text(t) => text_tokens(t),
            Content::Blocks(blocks) => blocks.iter().fold(0u32, |acc, b| acc.saturating_add(self.block(b))),
        }
    }

    /// Tokens of one block.
    pub fn block(&self, b: &Block) -> u32 {
        BLOCK_OVERHEAD.saturating_add(match b {
            Block::Text { text, .. } => text_tokens(text),
            Block::Media { source: MediaSource::Base64 { data, .. }, .. } => self.media(data),
            Block::Media { source: MediaSource::Other(_), .. } => self.image_tokens,
            Block::ImageUrl { url: ImageUrl::Data { data, .. }, .. } => self.media(data),
            Block::ImageUrl { url: ImageUrl::Link(_), .. } => self.image_tokens,
            Block::ToolUse { name, input, .. } => text_tokens(name).saturating_add(text_tokens(input.as_str())),
            Block::ToolResult { content, .. } => content.as_ref().map_or(0, |c| self.content(c)),
            Block::Thinking { thinking, .. } => text_tokens(thinking),
            Block::Other(raw) => text_tokens(raw.as_str()),
        })
    }

    fn media(&self, data: &MediaData) -> u32 {
        match data {
            MediaData::Blob(r) => match (r.width, r.height) {
                (Some(w), Some(h)) => self.image_by_size(w, h),
                _ => self.image_tokens,
            },
            MediaData::Inline(_) => self.image_tokens,
        }
    }

    /// `ceil(w*h/750)`, capped at the flat image cost.
    pub fn image_by_size(&self, w: u32, h: u32) -> u32 {
        let t = (u64::from(w) * u64::from(h)).div_ceil(750);
        u32::try_from(t).unwrap_or(u32::MAX).min(self.image_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{BlobRef, MediaKind, Role};
    use crate::store::BlobId;

    fn image(w: Option<u32>, h: Option<u32>) -> Block {
        let data = MediaData::Blob(BlobRef { id: BlobId::of(b"x"), bytes: 7_182_876, width: w, height: h });
        Block::Media {
            kind: MediaKind::Image,
            source: MediaSource::Base64 { media_type: "image/png".into(), data, extra: vec![] },
            extra: vec![],
        }
    }

    #[test]
    fn images_cost_by_size_not_by_payload() {
        let e = Estimator::default();
        // The seeds' incident: a 7,182,876-char base64 screenshot was estimated at 1.8M tokens.
        assert_eq!(e.block(&image(None, None)), 1_602);
        assert_eq!(e.block(&image(Some(800), Some(600))), 2 + 640);
        assert_eq!(e.block(&image(Some(1440), Some(900))), 2 + 1_600);
    }

    #[test]
    fn text_is_chars_over_four_and_blocks_add_up() {
        let e = Estimator::default();
        let text = "word ".repeat(4000);
        let plain = Message::text(Role::User, text.clone());
        assert_eq!(e.message(&plain), 4 + 5000);
        let mut blocks = plain.clone();
        blocks.content = Some(Content::Blocks(vec![Block::Text { text, extra: vec![] }, image(None, None)]));
        assert_eq!(e.message(&blocks), 4 + 2 + 5000 + 1602);
        // Multi-byte characters count as characters, not bytes.
        assert_eq!(text_tokens("ééééé"), 1);
    }
}
