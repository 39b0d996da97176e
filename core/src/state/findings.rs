//! What the state's own checks find, typed: a tool pair a span or the view splits, a body
//! where none belongs, a summary event the ledger cannot take. A [`super::Violation`] carries
//! the sentence (`Display`) as its `detail`.

use super::summaries::SummaryState;

/// A tool pair a span splits, or that the view breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PairError {
    /// A call in the span answered outside it.
    #[error("a call at seq {call} is answered at seq {result}, outside {from}..{to}")]
    AnsweredOutside {
        /// The call's seq.
        call: u64,
        /// Its result's seq.
        result: u64,
        /// The span's start.
        from: u64,
        /// The span's end (exclusive).
        to: u64,
    },
    /// A call in the span not answered yet.
    #[error("a call at seq {0} has no result yet")]
    Unanswered(u64),
    /// A result in the span whose call is outside it.
    #[error("the result at seq {result} answers the call at seq {call}, outside {from}..{to}")]
    CallOutside {
        /// The result's seq.
        result: u64,
        /// Its call's seq.
        call: u64,
        /// The span's start.
        from: u64,
        /// The span's end (exclusive).
        to: u64,
    },
    /// A result in the view whose call is not.
    #[error("seq {result} answers a call of seq {call}, which is not in the view")]
    OrphanResult {
        /// The result's seq.
        result: u64,
        /// Its call's seq.
        call: u64,
    },
    /// A call in the view whose result is not.
    #[error("seq {call} makes a call whose result (seq {result}) is not in the view")]
    MissingResult {
        /// The call's seq.
        call: u64,
        /// Its result's seq.
        result: u64,
    },
}

/// A message body missing where an event needs it, or held where the view does not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    /// An event needs the original of a message the state does not hold.
    #[error("seq {0} is out of the view or edited and its message was not loaded from the log (State::hydrate)")]
    NotLoaded(u64),
    /// A body held out of the view, or missing in it.
    #[error("seq {seq}: in the view {in_view}, holds a body {holds}")]
    Misplaced {
        /// The message.
        seq: u64,
        /// Whether it is in the view.
        in_view: bool,
        /// Whether it holds a body.
        holds: bool,
    },
    /// An edited message holding something else than its edit's rendering.
    #[error("seq {seq}: its body counts {seen} tokens, its edit {edit}")]
    EditTokens {
        /// The message.
        seq: u64,
        /// Tokens of the body held.
        seen: u32,
        /// Tokens of the edit's rendering.
        edit: u32,
    },
    /// More or fewer bodies than messages in the view.
    #[error("{0} bodies for the view's messages")]
    Count(usize),
}

/// A summary event that does not fit the summaries' ledger.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// A flush lists a summary that is not a condensed one waiting for it.
    #[error("summary {summary} is not a condensed summary waiting for a flush to {flushed}")]
    NotReady {
        /// The summary.
        summary: u32,
        /// Where the flush goes.
        flushed: u64,
    },
    /// A condensed summary lists other summaries than the current ones it covers.
    #[error("it lists summaries {listed:?} but the current summaries within {from}..{to} are {covered:?}")]
    Lists {
        /// What it lists.
        listed: Vec<u32>,
        /// Its span's start.
        from: u64,
        /// Its span's end.
        to: u64,
        /// The current summaries within the span.
        covered: Vec<u32>,
    },
    /// A condensed summary that does not start at the oldest current summary.
    #[error("it starts at seq {from} but the oldest current summary starts at {oldest:?}")]
    Start {
        /// Its start.
        from: u64,
        /// The oldest current summary's start.
        oldest: Option<u64>,
    },
    /// A condensed summary that does not end where the last summary it condenses ends.
    #[error("it ends at seq {to} but the last summary it condenses ends at {last_end:?}")]
    End {
        /// Its end.
        to: u64,
        /// The end of the last summary it lists.
        last_end: Option<u64>,
    },
    /// A condensed summary past the compacted prefix.
    #[error("it ends at seq {to} beyond compacted_prefix_messages {compacted}")]
    Beyond {
        /// Its end.
        to: u64,
        /// `compacted_prefix_messages`.
        compacted: u64,
    },
    /// A retirement of a summary that does not exist.
    #[error("summary {summary} does not exist ({count} summaries)")]
    Missing {
        /// The summary.
        summary: u32,
        /// Summaries prepared.
        count: usize,
    },
    /// A retirement of a summary not in the view.
    #[error("summary {summary} is not in the view ({state:?})")]
    NotShown {
        /// The summary.
        summary: u32,
        /// Where it stands.
        state: SummaryState,
    },
    /// A retirement of another summary than the oldest in the view.
    #[error("summary {0} is not the oldest summary in the view")]
    NotOldest(u32),
    /// A retirement naming another span than its summary's.
    #[error("summary {summary} covers {from}..{to}, not {named_from}..{named_to}")]
    Span {
        /// The summary.
        summary: u32,
        /// Its start.
        from: u64,
        /// Its end.
        to: u64,
        /// The start the retirement names.
        named_from: u64,
        /// The end the retirement names.
        named_to: u64,
    },
}
