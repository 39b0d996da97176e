//! What `verify` finds wrong with a stream: one [`Problem`] each, typed so a host can tell a
//! lying `RequestServed` from a damaged record or an unusable snapshot without reading text,
//! and with the sentence `ctxlog verify` prints as its `Display`.

use std::fmt;

use crate::store::{BlobId, SnapshotError, StreamId, Version};

/// One problem `verify` found: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The stream.
    pub stream: StreamId,
    /// The version it is at: the record's, or the snapshot's; `None` for the stream as a
    /// whole (a blob, an unfinished import).
    pub version: Option<Version>,
    /// What is wrong.
    pub kind: ProblemKind,
}

/// The kinds of [`Problem`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// A record does not read back, decode or fold (checksum, format, invariant, a message
    /// body); the error names its version. Nothing after it was checked.
    Damaged {
        /// The error, as the reader reported it.
        error: String,
    },
    /// A `RequestServed` records a digest the view rebuilt from the log does not hash to.
    ViewDigest {
        /// The call.
        call: u64,
        /// The rebuilt view's digest.
        rebuilt: String,
        /// The recorded digest.
        recorded: String,
    },
    /// A `RequestServed` records view tokens the rebuilt view does not have (or the state's
    /// sum of message tokens disagrees with the view's).
    ViewTokens {
        /// The call.
        call: u64,
        /// Recorded.
        recorded: u64,
        /// Of the rebuilt view.
        rebuilt: u64,
        /// The sum over every item of the view.
        sum: u64,
        /// What the state says that sum is.
        state_sum: u64,
    },
    /// A `RequestServed` records a number of view messages the rebuilt view does not have.
    ViewMessages {
        /// The call.
        call: u64,
        /// Recorded.
        recorded: u64,
        /// Of the rebuilt view that hashes to the recorded digest.
        rebuilt: u64,
        /// Items in the view at the commit.
        view: u64,
        /// How many of them are messages appended after the plan.
        late: u64,
    },
    /// A `RequestServed` records `prefix_reused` against what the view bytes say.
    PrefixReused {
        /// The call.
        call: u64,
        /// Recorded.
        recorded: bool,
        /// What the rebuilt views say.
        rebuilt: bool,
    },
    /// A message references a blob the store does not hold.
    BlobMissing {
        /// The blob.
        blob: BlobId,
    },
    /// A referenced blob could not be read.
    BlobUnreadable {
        /// The blob.
        blob: BlobId,
        /// The store's error.
        error: String,
    },
    /// An import that did not write its `ImportCompleted`: readers treat it as absent.
    ImportUnfinished {
        /// Messages appended.
        appended: u64,
        /// Messages the transcript announced.
        announced: u64,
    },
    /// A snapshot of a version past the log's head: acknowledged versions are missing.
    SnapshotBeyondHead {
        /// The log's head.
        head: Version,
    },
    /// A snapshot of this build's layout (or a broken seal) that does not decode.
    SnapshotUnusable {
        /// Why.
        error: SnapshotError,
    },
    /// A snapshot at a version the replay did not reach (damage before it).
    SnapshotPastReplay,
    /// A snapshot that differs from the state a full replay builds at its version.
    SnapshotDiffers,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stream = self.stream;
        let v = self.version.unwrap_or(0);
        let call = |f: &mut fmt::Formatter<'_>, call: u64| write!(f, "stream {stream} version {v} (call {call}): ");
        match &self.kind {
            ProblemKind::Damaged { error } => f.write_str(error),
            ProblemKind::ViewDigest { call: c, rebuilt, recorded } => {
                call(f, *c)?;
                write!(f, "view digest {rebuilt} differs from the recorded {recorded}")
            }
            ProblemKind::ViewTokens { call: c, recorded, rebuilt, sum, state_sum } => {
                call(f, *c)?;
                write!(f, "view tokens: recorded {recorded}, re-rendered {rebuilt}, sum of messages {sum} against {state_sum}")
            }
            ProblemKind::ViewMessages { call: c, recorded, rebuilt, view, late } => {
                call(f, *c)?;
                write!(
                    f,
                    "view messages: recorded {recorded}, re-rendered {rebuilt} of a view of {view} whose last {late} are \
                     messages appended after the plan"
                )
            }
            ProblemKind::PrefixReused { call: c, recorded, rebuilt } => {
                call(f, *c)?;
                write!(f, "prefix_reused recorded {recorded} but the view bytes say {rebuilt}")
            }
            ProblemKind::BlobMissing { blob } => write!(f, "stream {stream}: blob {blob} is referenced but missing"),
            ProblemKind::BlobUnreadable { error, .. } => write!(f, "stream {stream}: {error}"),
            ProblemKind::ImportUnfinished { appended, announced } => write!(
                f,
                "stream {stream}: an import that did not finish ({appended} of {announced} messages appended, no \
                 ImportCompleted); readers treat it as absent until the import is retried"
            ),
            ProblemKind::SnapshotBeyondHead { head } => write!(
                f,
                "stream {stream}: snapshot at version {v} is beyond the log head {head}: versions {}..={v} were \
                 acknowledged and are missing from the log",
                head + 1
            ),
            ProblemKind::SnapshotUnusable { error } => {
                write!(f, "stream {stream}: snapshot at version {v} is unusable: {error}")
            }
            ProblemKind::SnapshotPastReplay => write!(f, "stream {stream}: snapshot at version {v} is beyond the log"),
            ProblemKind::SnapshotDiffers => {
                write!(f, "stream {stream}: snapshot at version {v} differs from a full replay")
            }
        }
    }
}
