//! Client-side summaries: a client that replaces its old messages by a summary of its own
//! (LangChain's `SummarizationMiddleware`, a hand-written agent's) sends a history whose
//! leading messages are new, so its lineage id is new too. [`Tails`] remembers the last
//! messages of each tenant's recent conversations, by the digests the client sent them with;
//! a new conversation whose history holds the end of one of them, after messages of its own,
//! is that conversation summarized by its client: the proxy records the edge
//! (`GuardKind::ClientCompacted`) instead of leaving two unrelated sessions.
//!
//! In memory, like the provider compactions' aliases: after a restart, or on another proxy
//! of a fleet, the summarized conversation starts as an unrelated session (nothing is lost;
//! only the edge is missing).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use ctxlog::StreamId;

use crate::item::Item;

/// Messages remembered from the end of each conversation (a client summary keeps fewer).
const TAIL: usize = 128;
/// Conversations remembered per tenant, most recent first.
const PER_TENANT: usize = 16;
/// Tenants remembered before the index starts again.
const TENANTS: usize = 1024;
/// Kept messages that must match: one alone could be a coincidence ("ok").
const MIN_RUN: usize = 2;

struct Tail {
    stream: StreamId,
    /// The seq of `digests[0]` in `stream`.
    from: u64,
    digests: Vec<u128>,
}

/// The ends of recent conversations, by tenant.
#[derive(Default)]
pub(crate) struct Tails {
    map: Mutex<HashMap<[u8; 32], VecDeque<Tail>>>,
}

impl Tails {
    /// Remembers `stream`'s logged messages' digests (all of them; the last [`TAIL`] kept).
    pub fn record(&self, tenant: &[u8; 32], stream: StreamId, digests: &[u128]) {
        let cut = digests.len().saturating_sub(TAIL);
        let tail = Tail { stream, from: cut as u64, digests: digests.get(cut..).unwrap_or_default().to_vec() };
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= TENANTS && !map.contains_key(tenant) {
            map.clear();
        }
        let list = map.entry(*tenant).or_default();
        list.retain(|t| t.stream != stream);
        list.push_front(tail);
        list.truncate(PER_TENANT);
    }

    /// The conversation `items` summarizes, and its first message kept: the most recent one
    /// whose remembered end the request holds, whole and in order, after at least one message
    /// of its own (the summary), with something dropped before what it kept.
    pub fn summarized(&self, tenant: &[u8; 32], items: &[Item<'_>]) -> Option<(StreamId, u64)> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        for tail in map.get(tenant)? {
            let Some(last) = tail.digests.len().checked_sub(1) else { continue };
            let at: HashMap<u128, usize> = tail.digests.iter().enumerate().map(|(j, d)| (*d, j)).collect();
            for (i, item) in items.iter().enumerate().skip(1) {
                let Some(&j) = at.get(&item.digest) else { continue };
                let run = last - j + 1;
                let kept = tail.from + j as u64;
                let whole = items.get(i..i + run).is_some_and(|it| {
                    it.iter().zip(tail.digests.get(j..).unwrap_or_default()).all(|(a, b)| a.digest == *b)
                });
                // At the same place as in the log it is the conversation itself, not a summary.
                let replaced = kept != i as u64;
                if whole && run >= MIN_RUN && kept >= 1 && replaced {
                    return Some((tail.stream, kept));
                }
                break; // the first known message decides for this conversation
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(digests: &[u128]) -> Vec<Item<'static>> {
        digests
            .iter()
            .enumerate()
            .map(|(i, d)| Item { raw: b"{}", digest: *d, index: Some(i), keys: crate::body::Keys::MESSAGES })
            .collect()
    }

    const T: [u8; 32] = [7; 32];

    #[test]
    fn a_history_ending_like_a_recent_conversation_after_a_summary_is_that_conversation() {
        let tails = Tails::default();
        let a = StreamId::random();
        tails.record(&T, a, &[1, 2, 3, 4, 5, 6, 7]);
        // system, the client's summary (new), then messages 4..7 kept, then a new one.
        assert_eq!(tails.summarized(&T, &items(&[1, 100, 5, 6, 7, 8])), Some((a, 4)));
        // Another tenant never matches.
        assert_eq!(tails.summarized(&[8; 32], &items(&[1, 100, 5, 6, 7, 8])), None);
    }

    #[test]
    fn nothing_matches_without_a_summary_a_whole_end_or_enough_kept() {
        let tails = Tails::default();
        let a = StreamId::random();
        tails.record(&T, a, &[1, 2, 3, 4, 5, 6, 7]);
        // The conversation itself, whole: nothing was replaced.
        assert_eq!(tails.summarized(&T, &items(&[1, 2, 3, 4, 5, 6, 7, 8])), None);
        // The kept run stops before the conversation's end (an edit, not a summary).
        assert_eq!(tails.summarized(&T, &items(&[1, 100, 5, 6, 99])), None);
        // One kept message is not enough.
        assert_eq!(tails.summarized(&T, &items(&[1, 100, 7, 8])), None);
        // A new conversation sharing nothing.
        assert_eq!(tails.summarized(&T, &items(&[50, 51, 52])), None);
    }

    #[test]
    fn the_most_recent_conversation_wins_and_the_index_is_bounded() {
        let tails = Tails::default();
        let (old, new) = (StreamId::random(), StreamId::random());
        tails.record(&T, old, &[1, 2, 7, 5, 6]);
        tails.record(&T, new, &[1, 3, 8, 5, 6]);
        assert_eq!(tails.summarized(&T, &items(&[1, 100, 5, 6])).map(|f| f.0), Some(new));
        let long: Vec<u128> = (0..1000).collect();
        tails.record(&T, old, &long);
        let map = tails.map.lock().unwrap();
        assert!(map[&T].iter().all(|t| t.digests.len() <= TAIL));
        assert_eq!(map[&T].iter().find(|t| t.stream == old).map(|t| t.from), Some(1000 - TAIL as u64));
    }
}
