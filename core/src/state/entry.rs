//! One appended message as the state keeps it (32 bytes): the few facts the policies need
//! (role, pinned, tool result, media, tokens, edit) and where its record is. Its body is kept
//! apart, and only while it is in the view (`State::shown`).

use serde::{Deserialize, Serialize};

use crate::event::EditKind;
use crate::message::{Block, Message, Role};
use crate::store::Version;

/// The edit in force on a message. Its reason is in the log (`Edited`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditRecord {
    /// What.
    pub kind: EditKind,
    /// Tokens of the edited message in the view (0 when removed).
    pub tokens: u32,
}

/// Facts about a message that never change, packed in a byte next to its role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Traits {
    role: Role,
    bits: u8,
}

const PINNED: u8 = 1;
const TOOL_RESULT: u8 = 2;
const MEDIA: u8 = 4;
/// Pinned by a `Pinned` event (`restore --pin`), not as appended: an explicit unpin may end it.
const PINNED_LATER: u8 = 8;

/// One appended message and what the view does with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Version of its `MessageAppended` record, where its body is read back from.
    pub version: Version,
    /// Where its tool links start in the state's tool index.
    pub(super) links: u32,
    /// Its token estimate.
    pub tokens: u32,
    /// The edit in force, if any.
    pub edit: Option<EditRecord>,
    /// Explicitly restored into the view after a flush covered it.
    pub restored: bool,
    traits: Traits,
}

impl Entry {
    pub(super) fn new(version: Version, tokens: u32, m: &Message, links: u32) -> Entry {
        let mut bits = 0;
        if m.is_pinned() {
            bits |= PINNED;
        }
        if m.is_tool_result() {
            bits |= TOOL_RESULT;
        }
        if has_media(m) {
            bits |= MEDIA;
        }
        Entry { version, tokens, edit: None, restored: false, traits: Traits { role: m.role, bits }, links }
    }

    /// Its role.
    pub fn role(&self) -> Role {
        self.traits.role
    }

    /// Pinned: never edited.
    pub fn is_pinned(&self) -> bool {
        self.traits.bits & PINNED != 0
    }

    /// Pinned by a `Pinned` event rather than as appended (only such a pin may be undone).
    pub fn is_pinned_later(&self) -> bool {
        self.traits.bits & PINNED_LATER != 0
    }

    /// A `Pinned` event: pins (or unpins) a message that was not appended pinned.
    pub(super) fn set_pinned(&mut self, pin: bool) {
        if pin {
            self.traits.bits |= PINNED | PINNED_LATER;
        } else {
            self.traits.bits &= !(PINNED | PINNED_LATER);
        }
    }

    /// Carries tool results.
    pub fn is_tool_result(&self) -> bool {
        self.traits.bits & TOOL_RESULT != 0
    }

    /// A human turn: role user and not a tool-result carrier.
    pub fn is_human(&self) -> bool {
        self.traits.role == Role::User && !self.is_tool_result()
    }

    /// System or developer instructions.
    pub fn is_system(&self) -> bool {
        self.traits.role.is_system()
    }

    /// Has an image or document block.
    pub fn has_media(&self) -> bool {
        self.traits.bits & MEDIA != 0
    }

    /// Removed by an edit.
    pub fn is_removed(&self) -> bool {
        self.edit.is_some_and(|e| e.kind == EditKind::Removed)
    }
}

/// Top-level image or document blocks (what a summary lists as restorable media).
pub fn has_media(m: &Message) -> bool {
    m.blocks().iter().any(|b| matches!(b, Block::Media { .. } | Block::ImageUrl { .. }))
}
