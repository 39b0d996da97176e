//! How a request's history meets one branch's log: by the xxh3 digests of the raw bytes the
//! client sent before (the hot path: a request of 150k tokens costs one digest per message),
//! and where those disagree or are unknown (a moved `cache_control` breakpoint, a history
//! re-serialized by another JSON library, a session reopened from the store), by the
//! canonical form of the message (`canonical.rs`). A message found equal that way takes the
//! client's new digest, so a client that keeps its new spelling is on the hot path again.

use std::time::Instant;

use ctxlog::message::Message;
use ctxlog::{StreamId, WireFormat};

use crate::item::{Item, PrepareError, Sess};

/// Where a branch forked from its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fork {
    /// The session it branched from.
    pub parent: StreamId,
    /// Messages shared with the parent (the branch's own start at this seq).
    pub at: u64,
}

/// One branch of a lineage in memory.
pub(crate) struct Branch {
    /// The open session; `None` once shrunk (reopened from the store when needed).
    pub session: Option<Sess>,
    /// Digests of the first `digests.len()` logged messages as the client last sent them. They
    /// outlive a shrink, so a shrunk branch is reopened without comparing by content.
    pub digests: Vec<u128>,
    /// Where it forked; `None` for the lineage's root.
    pub fork: Option<Fork>,
    pub last_used: Instant,
}

/// How a request's history relates to a branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relation {
    /// The request is the branch's history plus new messages (maybe none).
    Continues,
    /// The request agrees with the branch on messages `0..n` only (it differs at `n`, or ends
    /// there while the branch goes on).
    SharesFirst(u64),
}

impl Branch {
    pub fn new(session: Sess, digests: Vec<u128>, fork: Option<Fork>) -> Self {
        Branch { session: Some(session), digests, fork, last_used: Instant::now() }
    }

    /// Compares `items` with the branch's log; messages found equal by content record the
    /// client's digests. The branch's session must be open.
    pub fn relation(&mut self, items: &[Item<'_>]) -> Result<Relation, PrepareError> {
        self.last_used = Instant::now();
        let Some(s) = self.session.as_ref() else { return Ok(Relation::SharesFirst(0)) };
        let logged = usize::try_from(s.state().message_count()).unwrap_or(usize::MAX);
        self.digests.truncate(logged);
        let upto = logged.min(items.len());
        let format = s.format();
        let mut i = 0;
        while i < upto {
            let known = self.digests.len().min(upto);
            let same_run =
                self.digests.get(i..known).unwrap_or_default().iter().zip(items.get(i..known).unwrap_or_default());
            i += same_run.take_while(|(d, it)| **d == it.digest).count();
            if i == upto {
                break;
            }
            // A digest that differs: that one message; none known (reopened): all the rest.
            let end = if i < known { i + 1 } else { upto };
            let stored = s.messages(i as u64..end as u64)?;
            for (logged_msg, item) in stored.iter().zip(items.get(i..end).unwrap_or_default()) {
                if !same(item, logged_msg, format) {
                    return Ok(Relation::SharesFirst(i as u64));
                }
                match self.digests.get_mut(i) {
                    Some(d) => *d = item.digest,
                    None => self.digests.push(item.digest),
                }
                i += 1;
            }
        }
        if items.len() < logged {
            return Ok(Relation::SharesFirst(items.len() as u64));
        }
        Ok(Relation::Continues)
    }
}

/// The client's item means the logged message: equal as parsed (media compared as the blobs
/// they became), else equal in canonical form. The item is read in the session's format (a
/// Responses item is not a chat message).
fn same(item: &Item<'_>, logged: &Message, format: WireFormat) -> bool {
    let Ok(m) = item.parse(format) else { return false };
    same_parsed(&m, logged) || crate::canonical::digest(&m) == crate::canonical::digest(logged)
}

fn same_parsed(client: &Message, logged: &Message) -> bool {
    client == logged || &crate::canonical::as_logged(client) == logged
}
