//! What the state's own checks find, typed: a tool pair a span or the view splits, a body
//! where none belongs, a summary event the ledger cannot take (defined with the ledger). A [`super::Violation`] carries
//! the sentence (`Display`) as its `detail`.

pub use super::summaries::LedgerError;

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
