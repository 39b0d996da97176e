//! The tool-pair index: which message makes each tool call, which answers it, and the tool's
//! name, kept without the messages themselves so the policies can walk tool groups of messages
//! whose bodies are no longer in memory.
//!
//! Ids are indexed by the first 96 bits of their sha256: two different ids share a key with
//! negligible odds (about 10^-15 for ten million ids in one session), and a key costs 12 bytes
//! whatever the provider's id length.
//! Each message's links (the pairs it calls or answers, in message order) sit in one flat
//! arena of 32-bit slots, so a message costs one index into it, and a pair 12 bytes. At most
//! [`MAX_PAIRS`] calls, `u32::MAX` links and seqs below `u32::MAX` are indexed; the fold refuses
//! a message beyond that (far beyond any session: the keys alone would take tens of gigabytes).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::message::Message;

/// A tool call id as the index keys it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ToolKey([u8; 12]);

impl ToolKey {
    /// The key of `id`.
    pub fn of(id: &str) -> ToolKey {
        let digest = Sha256::digest(id.as_bytes());
        let mut key = [0u8; 12];
        key.copy_from_slice(digest.get(..12).unwrap_or_default());
        ToolKey(key)
    }
}

/// One call id: the message that makes it (the latest, should an id be reused) and the one
/// that answers it (12 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pair {
    /// Seq of the message making the call.
    call: u32,
    /// Seq of the message answering it, [`UNANSWERED`] until answered.
    answer: u32,
    /// The tool's name (index into the name table).
    name: u32,
}

impl super::heap::HeapSize for Pair {
    fn heap_bytes(&self) -> usize {
        0
    }
}

/// `Pair::answer` of a call without a result (and the first seq the index cannot hold).
const UNANSWERED: u32 = u32::MAX;

impl Pair {
    /// Seq of the message making the call.
    pub fn call(&self) -> u64 {
        u64::from(self.call)
    }

    /// Seq of the message answering the call, once answered.
    pub fn result(&self) -> Option<u64> {
        (self.answer != UNANSWERED).then_some(u64::from(self.answer))
    }
}

/// Most calls the index holds (slots keep one bit for the direction).
pub const MAX_PAIRS: usize = (1 << 31) - 1;

/// A message's side of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// The message makes the call of this pair.
    Call(Pair),
    /// The message answers the call of this pair.
    Result(Pair),
}

/// Marks an arena slot as a result (the message answers the pair) rather than a call.
const RESULT: u32 = 1 << 31;

/// The index. Appends only: a message's links are fixed when it is appended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolIndex {
    keys: Keys,
    pairs: Vec<Pair>,
    arena: Vec<u32>,
    names: Vec<Box<str>>,
    name_of: BTreeMap<Box<str>, u32>,
}

impl ToolIndex {
    /// The pair of call `id`, if a message made that call.
    pub fn pair(&self, id: &str) -> Option<Pair> {
        self.pair_of(ToolKey::of(id))
    }

    fn pair_of(&self, key: ToolKey) -> Option<Pair> {
        self.keys.get(&key).and_then(|i| self.pairs.get(i as usize)).copied()
    }

    /// Where the next message's links start.
    pub fn next_link(&self) -> u32 {
        // `room_for` keeps the arena within u32 slots.
        u32::try_from(self.arena.len()).unwrap_or(u32::MAX)
    }

    /// Whether message `seq`'s calls and results still fit the index (see [`MAX_PAIRS`]).
    pub fn room_for(&self, seq: u64, m: &Message) -> bool {
        let (calls, results) = (m.call_ids().count(), m.result_ids().count());
        (calls + results == 0 || seq < u64::from(UNANSWERED))
            && fits(self.pairs.len(), self.arena.len(), calls, results)
    }

    /// Indexes message `seq`'s calls, then its results (already validated: every result
    /// answers a known call, and there is room). Returns where its links start.
    pub fn add(&mut self, seq: u64, m: &Message) -> u32 {
        let start = self.next_link();
        // `room_for` refused a message with tool links at a seq the index cannot hold.
        let seq = u32::try_from(seq).unwrap_or(UNANSWERED);
        for id in m.call_ids() {
            let name = self.intern(tool_name(m, id).unwrap_or("tool"));
            let key = ToolKey::of(id);
            let index = match self.keys.get(&key) {
                Some(i) => i,
                None => {
                    let Ok(i) = u32::try_from(self.pairs.len()) else { continue };
                    self.keys.insert(key, i);
                    grow(&mut self.pairs);
                    self.pairs.push(Pair { call: seq, answer: UNANSWERED, name });
                    i
                }
            };
            if let Some(p) = self.pairs.get_mut(index as usize) {
                // A reused id points at its latest call, as a lookup by id always did.
                p.call = seq;
                p.name = name;
            }
            grow(&mut self.arena);
            self.arena.push(index);
        }
        for id in m.result_ids() {
            let Some(index) = self.keys.get(&ToolKey::of(id)) else { continue };
            if let Some(p) = self.pairs.get_mut(index as usize) {
                p.answer = seq;
            }
            grow(&mut self.arena);
            self.arena.push(index | RESULT);
        }
        start
    }

    /// The links of the message whose arena slots are `start..end`.
    pub fn links(&self, start: u32, end: u32) -> impl Iterator<Item = Link> + '_ {
        let slots = self.arena.get(start as usize..end as usize);
        slots.unwrap_or_default().iter().filter_map(|&slot| {
            let pair = *self.pairs.get((slot & !RESULT) as usize)?;
            Some(if slot & RESULT == 0 { Link::Call(pair) } else { Link::Result(pair) })
        })
    }

    /// The tool name of a pair.
    pub fn name(&self, pair: &Pair) -> &str {
        self.names.get(pair.name as usize).map_or("tool", |n| n)
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.name_of.get(name) {
            return i;
        }
        let i = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.names.push(name.into());
        self.name_of.insert(name.into(), i);
        i
    }

    /// Heap bytes held (see [`crate::state::State::heap_bytes`]).
    pub fn heap_bytes(&self) -> usize {
        use super::heap::{btree_bytes, HeapSize};
        self.keys.heap_bytes()
            + self.pairs.heap_bytes()
            + self.arena.heap_bytes()
            + self.names.heap_bytes()
            + btree_bytes::<Box<str>, u32>(self.name_of.len())
            + self.name_of.keys().map(HeapSize::heap_bytes).sum::<usize>()
    }
}

/// Whether `calls` more pairs and `calls + results` more links fit next to `pairs` and `links`.
fn fits(pairs: usize, links: usize, calls: usize, results: usize) -> bool {
    pairs.saturating_add(calls) <= MAX_PAIRS && links.saturating_add(calls).saturating_add(results) < u32::MAX as usize
}

/// Key → pair index: a sorted vector (16 bytes a key, copied by a `memcpy` when the state is
/// copied for a plan) plus a small B-tree of recent keys, merged into the vector whenever it
/// reaches a sixteenth of it, so an insert costs O(log n) plus an amortized copy of 16 keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Keys {
    sorted: Vec<(ToolKey, u32)>,
    recent: BTreeMap<ToolKey, u32>,
}

impl Keys {
    fn get(&self, key: &ToolKey) -> Option<u32> {
        self.recent.get(key).copied().or_else(|| {
            let i = self.sorted.binary_search_by(|(k, _)| k.cmp(key)).ok()?;
            self.sorted.get(i).map(|(_, v)| *v)
        })
    }

    /// Adds a key that is not there yet.
    fn insert(&mut self, key: ToolKey, value: u32) {
        self.recent.insert(key, value);
        if self.recent.len() >= (self.sorted.len() / 16).max(256) {
            self.merge();
        }
    }

    fn merge(&mut self) {
        let mut merged = Vec::with_capacity((self.sorted.len() + self.recent.len()) * 9 / 8);
        let mut old = std::mem::take(&mut self.sorted).into_iter().peekable();
        for (k, v) in std::mem::take(&mut self.recent) {
            while let Some(o) = old.next_if(|(ok, _)| *ok < k) {
                merged.push(o);
            }
            merged.push((k, v));
        }
        merged.extend(old);
        self.sorted = merged;
    }

    fn heap_bytes(&self) -> usize {
        self.sorted.capacity() * std::mem::size_of::<(ToolKey, u32)>()
            + super::heap::btree_bytes::<ToolKey, u32>(self.recent.len())
    }
}

/// Makes room for one more element, growing by an eighth rather than doubling: these vectors
/// grow with the session, and a doubled vector would hold up to twice what it needs. Each
/// element is still copied a bounded number of times on average (eight).
pub fn grow<T>(v: &mut Vec<T>) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 8).max(64));
    }
}

/// The name of call `id` in `m`: its `tool_use` block, or its OpenAI `tool_calls` entry.
pub fn tool_name<'a>(m: &'a Message, id: &str) -> Option<&'a str> {
    use crate::message::Block;
    m.blocks()
        .iter()
        .find_map(|b| match b {
            Block::ToolUse { id: i, name, .. } if i == id => Some(name.as_str()),
            _ => None,
        })
        .or_else(|| m.tool_calls.iter().flatten().find(|c| c.id == id).map(|c| c.name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_refuses_what_its_32_bit_slots_cannot_hold() {
        assert!(fits(0, 0, 3, 2));
        assert!(fits(MAX_PAIRS - 1, 0, 1, 0));
        assert!(!fits(MAX_PAIRS, 0, 1, 0), "one call too many");
        assert!(fits(MAX_PAIRS, 10, 0, 5), "results need no new pair");
        assert!(!fits(0, u32::MAX as usize - 2, 1, 1), "the arena is full");
        assert!(!fits(usize::MAX, usize::MAX, usize::MAX, usize::MAX), "no overflow");
        let call = crate::wire::parse_message(
            r#"{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"ls","input":{}}]}"#,
        )
        .unwrap();
        let plain = crate::wire::parse_message(r#"{"role":"user","content":"hi"}"#).unwrap();
        let index = ToolIndex::default();
        assert!(index.room_for(u64::from(u32::MAX) - 1, &call));
        assert!(!index.room_for(u64::from(u32::MAX), &call), "a seq the pairs cannot hold");
        assert!(index.room_for(u64::MAX, &plain), "a message without tool links needs no room");
    }

    #[test]
    fn keys_are_found_before_and_after_every_merge() {
        let mut keys = Keys::default();
        let ids: Vec<String> = (0..3_000).map(|i| format!("call_{i}")).collect();
        for (i, id) in ids.iter().enumerate() {
            keys.insert(ToolKey::of(id), i as u32);
            // The latest and an early one are found, whichever part holds them.
            assert_eq!(keys.get(&ToolKey::of(id)), Some(i as u32));
            assert_eq!(keys.get(&ToolKey::of(&ids[i / 2])), Some((i / 2) as u32));
        }
        assert!(keys.sorted.len() > 2_000 && keys.recent.len() < 256, "merged: {}", keys.sorted.len());
        assert!(keys.sorted.windows(2).all(|w| w[0].0 < w[1].0), "sorted");
        assert_eq!(keys.get(&ToolKey::of("call_3000")), None);
    }

    #[test]
    fn keys_differ_by_id_and_links_keep_message_order() {
        assert_ne!(ToolKey::of("toolu_1"), ToolKey::of("toolu_2"));
        let m = crate::wire::parse_message(
            r#"{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"ls","input":{}},{"type":"tool_use","id":"b","name":"cat","input":{}}]}"#,
        )
        .unwrap();
        let mut index = ToolIndex::default();
        let start = index.add(4, &m);
        let names: Vec<&str> = index
            .links(start, index.next_link())
            .map(|l| match l {
                Link::Call(p) => index.name(&p),
                Link::Result(_) => "result",
            })
            .collect();
        assert_eq!(names, ["ls", "cat"]);
        assert_eq!(index.pair("b").map(|p| (p.call(), p.result())), Some((4, None)));
    }
}
