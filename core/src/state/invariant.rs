//! The invariants the fold keeps (DESIGN §7 and those the engine added), and the typed error
//! an event that breaks one is refused with.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::store::Version;

/// Names of the invariants of DESIGN §7, for error messages and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Invariant {
    /// The first event is `SessionStarted`, and only the first.
    SessionStart,
    /// Versions are contiguous.
    VersionContiguous,
    /// `seq` of an append equals the message count.
    SeqDense,
    /// `0 ≤ flushed ≤ compacted ≤ message count`.
    Watermarks,
    /// Watermarks never move backwards; a summary starts where the last one ended.
    WatermarkBackwards,
    /// A prepared span does not split a tool call from its results.
    SpanSplitsToolPair,
    /// An edit targets an existing message that is in the view, with a kind fit for it.
    EditTarget,
    /// System and pinned messages and the first human message are never edited.
    EditProtected,
    /// The last user message is never removed.
    LastUserRemoved,
    /// An already-removed message is not edited again.
    AlreadyRemoved,
    /// A tool call without a result is never removed.
    UnansweredCallRemoved,
    /// The view has no orphan tool result and no answered call whose result is missing.
    ToolPairs,
    /// A tool result answers a call that exists.
    UnknownToolCall,
    /// `RequestServed.at` never goes backwards.
    TimeBackwards,
    /// Calls are numbered 0, 1, 2, …
    CallSequence,
    /// A restore targets an edited or flushed message.
    RestoreTarget,
    /// A condensed summary covers exactly the oldest current summaries, within what is prepared.
    CondensedSpan,
    /// Only the oldest summary in the view is retired.
    RetireTarget,
    /// An event that needs a message as appended (a restore, a second edit of one message)
    /// gets it: the message is in the view unedited, or its body was loaded
    /// ([`super::State::hydrate`]). Broken only by a caller that skipped hydration, never by a log.
    BodyLoaded,
    /// `ImportCompleted` ends an unfinished import once every announced message is appended.
    ImportCompleted,
    /// A session indexes at most 2^31 − 1 tool calls, 2^32 − 1 tool links, and tool links of
    /// messages below seq 2^32 − 1 (bounds no real session nears; beyond them an append is
    /// refused rather than mis-indexed).
    ToolCapacity,
    /// A `Branched` record follows exactly the records it says it copied, with the messages
    /// they hold.
    BranchPoint,
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// An event that breaks an invariant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("version {version}: {event} breaks invariant {invariant}: {detail}")]
pub struct Violation {
    /// The event's version.
    pub version: Version,
    /// The event kind.
    pub event: &'static str,
    /// Which invariant.
    pub invariant: Invariant,
    /// The numbers.
    pub detail: String,
}

/// A sub-fold's refusal: which invariant, and the sentence with the numbers. [`State`] names
/// the version and the event.
///
/// [`State`]: super::State
pub(super) type Broken = (Invariant, String);

pub(super) fn violation(version: Version, ev: &Event, invariant: Invariant, detail: impl fmt::Display) -> Violation {
    Violation { version, event: ev.name(), invariant, detail: detail.to_string() }
}
