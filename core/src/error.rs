//! What a session command (and a reader of its log: replay, verify, copy) can fail with, and
//! why a plan went stale. Below both [`crate::log`] and [`crate::session`], so the reader of a
//! stream and the session share one error without importing each other.

use crate::codec::{self, DecodeError};
use crate::config::ConfigError;
use crate::event::{Event, GuardKind};
use crate::state::Violation;
use crate::store::{SnapshotError, StoreError, StreamId, Version};
use crate::wire::WireError;

/// Everything a session command can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A record did not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// What the caller asked for is impossible (restore a message that was never edited, a
    /// time before the last event, a tool result with no call, ...): the event it would write
    /// breaks an invariant, so nothing was written and the log is intact. Fix the call.
    #[error("stream {stream}: refused, nothing written: {violation}")]
    Refused {
        /// The stream.
        stream: StreamId,
        /// The invariant the command would break.
        violation: Violation,
    },
    /// A stored event breaks an invariant: the log is corrupt (or was written by a buggy
    /// writer). Reading stops at `violation.version`; `ctxlog verify` reports it.
    #[error("stream {stream}: the log breaks an invariant: {violation}")]
    Invariant {
        /// The stream.
        stream: StreamId,
        /// What broke.
        violation: Violation,
    },
    /// The configuration cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No such session.
    #[error("no session {0} in this store")]
    NotFound(StreamId),
    /// The session id is taken.
    #[error("session {0} already exists in this store")]
    Exists(StreamId),
    /// The session is an import that did not finish: readers treat it as absent, and only a
    /// retried import of the same transcript may go on writing it.
    #[error(
        "session {stream} is an import that did not finish ({messages} of {announced} messages appended); \
         retry the import of the same transcript with this session id to finish it"
    )]
    Unfinished {
        /// The session.
        stream: StreamId,
        /// Messages appended so far.
        messages: u64,
        /// Messages the transcript holds.
        announced: u64,
    },
    /// A message's record could not be read back (it is out of the view, so only the log holds
    /// it).
    #[error("stream {stream}: cannot read back message {seq} (version {version}): {detail}")]
    Body {
        /// The stream.
        stream: StreamId,
        /// The message.
        seq: u64,
        /// The version its `MessageAppended` was recorded at.
        version: Version,
        /// What went wrong.
        detail: String,
    },
    /// A message to append is not valid in the session's format.
    #[error("message {index} of the batch: {error}")]
    Message {
        /// Position in the batch.
        index: usize,
        /// What is wrong.
        error: WireError,
    },
    /// The plan can no longer be committed: since it was made, something other than appends
    /// changed the session (`by`: another call was committed, a summary prepared, a message
    /// restored), or it belongs to another session. Plan again.
    #[error("stale plan: made at version {planned}, session is at version {current}: {by}")]
    StalePlan {
        /// Version the plan was made at.
        planned: Version,
        /// Current version.
        current: Version,
        /// What happened since.
        by: StaleCause,
    },
    /// The log has no such call.
    #[error("stream {stream}: no call {call} (the session served {calls})")]
    NoSuchCall {
        /// The stream.
        stream: StreamId,
        /// The call asked for.
        call: u64,
        /// Calls served.
        calls: u64,
    },
    /// A call's view, rebuilt from the log, does not hash to the digest recorded for it.
    #[error("stream {stream} call {call}: the rebuilt view hashes to {rebuilt}, the log recorded {recorded}")]
    ViewMismatch {
        /// The stream.
        stream: StreamId,
        /// The call.
        call: u64,
        /// Digest recorded in `RequestServed`.
        recorded: String,
        /// Digest of the rebuilt view.
        rebuilt: String,
    },
    /// Encoding an event failed (a bug).
    #[error("cannot encode event: {0}")]
    Encode(codec::EncodeError),
    /// Encoding the state as a snapshot failed (a bug).
    #[error("cannot encode the snapshot: {0}")]
    Snapshot(SnapshotError),
    /// A summary attempt is already in flight in this session (at most one at a time): finish
    /// or cancel it first.
    #[error("stream {0}: a summary attempt is already in flight; finish or cancel it first")]
    SummaryInFlight(StreamId),
    /// The attempt was not started by this session handle, or was already finished.
    #[error("stream {0}: this summary attempt is not the one in flight here")]
    NotInFlight(StreamId),
}

/// Why a plan can no longer be committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleCause {
    /// Another call was committed since (its `RequestServed`, flush or edits).
    CallCommitted,
    /// A summary was prepared since (the plan did not see it).
    SummaryPrepared,
    /// A message was restored since.
    Restored,
    /// The session was reopened or caught up past the plan's version: this handle cannot
    /// tell what was written before.
    Reopened,
    /// The plan was made by another session.
    OtherSession,
}

impl StaleCause {
    /// What `ev` does to a plan made before it; `None` when it leaves the plan committable
    /// (an append, or the import's completion marker: neither is part of a served view).
    pub(crate) fn of(ev: &Event) -> Option<StaleCause> {
        match ev {
            Event::MessageAppended(_)
            | Event::ImportCompleted(_)
            | Event::AnswerReceived(_)
            | Event::SessionNamed(_) => None,
            // A rejection records a call that was not served, a provider's compaction a call
            // outside the engine: neither changes a view.
            Event::CallRejected(_) | Event::ProviderCompacted(_) => None,
            // A failed summary attempt and the summarizer's guards change no view.
            Event::SummaryFailed(_) => None,
            Event::GuardRaised(g) if matches!(g.kind, GuardKind::ForkRefused { .. } | GuardKind::SummarizerPaused) => {
                None
            }
            Event::SummaryPrepared(_) => Some(StaleCause::SummaryPrepared),
            Event::Restored(_) => Some(StaleCause::Restored),
            Event::SessionStarted(_) | Event::Branched(_) => Some(StaleCause::Reopened),
            _ => Some(StaleCause::CallCommitted),
        }
    }
}

impl std::fmt::Display for StaleCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StaleCause::CallCommitted => "another call was committed since",
            StaleCause::SummaryPrepared => "a summary was prepared since",
            StaleCause::Restored => "a message was restored since",
            StaleCause::Reopened => "the session was reopened since",
            StaleCause::OtherSession => "the plan belongs to another session",
        })
    }
}
