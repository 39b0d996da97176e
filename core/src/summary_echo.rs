//! Is a summary only the request's own instructions echoed back? A small model asked to
//! summarize sometimes answers with the prompt's SCOPE sentence or its headings and guidelines;
//! such an answer is smaller than its span, so the shrink guard alone would accept it and
//! replace the span with nothing.

use std::collections::HashSet;

/// Words per shingle: long enough that the five headings alone (≤ 4 words each) never match.
pub const SHINGLE_WORDS: usize = 5;
/// An answer with at least this share (per mille) of its shingles in the instructions is an echo.
pub const ECHO_PER_MILLE: u32 = 500;

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

fn shingles(words: &[String]) -> impl Iterator<Item = String> + '_ {
    words.windows(SHINGLE_WORDS).map(|w| w.join(" "))
}

/// The share (per mille) of `answer`'s word 5-grams found in `instructions`; `None` when the
/// answer has fewer than five words (too short to judge this way).
pub fn echo_per_mille(answer: &str, instructions: &str) -> Option<u32> {
    let answer = words(answer);
    let total = answer.len().checked_sub(SHINGLE_WORDS - 1).filter(|&n| n > 0)?;
    let known: HashSet<String> = shingles(&words(instructions)).collect();
    let found = shingles(&answer).filter(|s| known.contains(s)).count();
    u32::try_from(found * 1000 / total).ok()
}

/// Is `answer` mostly `instructions`?
pub fn is_echo(answer: &str, instructions: &str) -> Option<u32> {
    echo_per_mille(answer, instructions).filter(|&p| p >= ECHO_PER_MILLE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary_call::{fork_message, STANDALONE_PROMPT};

    #[test]
    fn the_scope_sentence_echoed_is_an_echo_a_summary_is_not() {
        let fork = fork_message(2, 8, "cargo test passed");
        let scope = "SCOPE: summarize only the 8 messages following the first 2 messages after the system prompt; \
                     your summary replaces them, and the messages after them stay as they are.";
        assert!(is_echo(scope, &fork).is_some());
        let summary = "1. User Requests & Decisions: port the billing service to the ledger API; keep error codes \
                       stable.\n2. Files Examined or Modified: src/m1.rs, src/m2.rs (signatures changed).\n\
                       4. Current Task State: modules 1-3 ported, module 4 next.";
        assert_eq!(is_echo(summary, &fork), None, "{:?}", echo_per_mille(summary, &fork));
        assert_eq!(is_echo(summary, STANDALONE_PROMPT), None);
        assert!(is_echo(STANDALONE_PROMPT, STANDALONE_PROMPT).is_some());
        assert_eq!(echo_per_mille("too short", STANDALONE_PROMPT), None);
    }
}
