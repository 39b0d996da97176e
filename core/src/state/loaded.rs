//! Hydration: message bodies read back from the log for the one event that needs them (a
//! restore, a second edit of one message). A cache, not part of the fold: never compared, never
//! in a snapshot, emptied by every apply; an event whose body was not handed over is refused
//! ([`super::Invariant::BodyLoaded`]) rather than folded differently.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::event::{EditKind, Event};
use crate::message::Message;

/// The bodies handed over for the next event.
#[derive(Debug, Clone, Default)]
pub(super) struct Loaded(BTreeMap<u64, Arc<Message>>);

impl PartialEq for Loaded {
    fn eq(&self, _: &Loaded) -> bool {
        true
    }
}

impl Loaded {
    pub(super) fn get(&self, seq: u64) -> Option<&Arc<Message>> {
        self.0.get(&seq)
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

impl super::State {
    /// Seqs whose message as appended `ev` needs and this state does not hold: load each from
    /// the log and [`super::State::hydrate`] it before applying `ev`. Empty for almost every
    /// event: only a restore, and a second edit of an already edited message, need one.
    pub fn bodies_needed(&self, ev: &Event) -> Vec<u64> {
        let seqs: Vec<u64> = match ev {
            Event::Restored(e) => std::iter::once(e.seq).chain(e.partners.iter().copied()).collect(),
            Event::Edited(e) if e.kind != EditKind::Removed => vec![e.seq],
            _ => return Vec::new(),
        };
        let mut out: Vec<u64> =
            seqs.into_iter().filter(|&s| self.entry(s).is_some() && self.original(s).is_none()).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Hands over the message `seq` as appended, read back from the log, for the next event
    /// ([`super::State::bodies_needed`]). It fills a cache: the fold's results do not depend on
    /// it, and the next apply empties it. A message that does not exist is ignored.
    pub fn hydrate(&mut self, seq: u64, message: Arc<Message>) {
        if self.entry(seq).is_some() {
            self.loaded.0.insert(seq, message);
        }
    }
}
