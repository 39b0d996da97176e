//! How sessions are related: which session a conversation came from and where it went on.
//!
//! Every edge is read from one event by [`link_of`]. Today that is a host's `history_diverged`
//! guard (the proxy moved the conversation to a successor session); an event recording a
//! branch's parent and fork point is one more arm there, and every listing and postmortem
//! shows it.

use ctxlog::event::{Event, GuardKind, GuardRaised};
use ctxlog::{StreamId, Version};
use serde_json::{json, Value};

/// What relates two sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    /// The client's history differed from `from`'s log at message `at`; the conversation went
    /// on in `to`, a session holding exactly the client's history.
    Diverged,
    /// `to` is a branch of `from` (an undo, a retry, an edit, a re-run with the same opening):
    /// it starts with `from`'s history up to message `at`, compaction state included.
    Branched,
    /// The client replaced `from`'s messages before `at` by its own summary; the conversation
    /// went on in `to`, which starts with that summary and the messages the client kept.
    ClientCompacted,
}

impl LinkKind {
    /// Snake-case name, as in `--json`.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::Diverged => "diverged",
            LinkKind::Branched => "branched",
            LinkKind::ClientCompacted => "client_compacted",
        }
    }
}

/// One edge of the lineage: `from` went on as `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// The earlier session.
    pub from: StreamId,
    /// The later one.
    pub to: StreamId,
    /// Why.
    pub kind: LinkKind,
    /// The first message seq (of `from`) where they part.
    pub at: u64,
    /// The stream whose log records the edge, and the version of the record there.
    pub recorded_in: (StreamId, Version),
}

/// The edge `ev` (at `version` of `stream`) records, if any: the one place that knows which
/// events relate sessions.
pub fn link_of(stream: StreamId, version: Version, ev: &Event) -> Option<Link> {
    match ev {
        Event::GuardRaised(GuardRaised { kind: GuardKind::HistoryDiverged { seq, successor }, .. }) => Some(Link {
            from: stream,
            to: successor.parse().ok()?,
            kind: LinkKind::Diverged,
            at: *seq,
            recorded_in: (stream, version),
        }),
        Event::GuardRaised(GuardRaised { kind: GuardKind::ClientCompacted { predecessor, seq }, .. }) => Some(Link {
            from: predecessor.parse().ok()?,
            to: stream,
            kind: LinkKind::ClientCompacted,
            at: *seq,
            recorded_in: (stream, version),
        }),
        // A branch's own `Branched` is its last one: the ones before it are its ancestors',
        // copied with the shared prefix (each linking an ancestor to this descendant).
        Event::Branched(b) => Some(Link {
            from: StreamId(b.parent),
            to: stream,
            kind: LinkKind::Branched,
            at: b.messages,
            recorded_in: (stream, version),
        }),
        _ => None,
    }
}

/// `links` without the copied ones: a branch's log holds its ancestors' `Branched` records
/// too (copied with the shared prefix), and only its last is its own edge — the others are
/// told by the ancestors' logs. Pass every edge found, not only those touching one session:
/// the record that supersedes a copy may be about another pair.
pub fn own_edges(links: impl IntoIterator<Item = Link>) -> Vec<Link> {
    let links: Vec<Link> = links.into_iter().collect();
    let copied = |l: &Link| {
        l.kind == LinkKind::Branched
            && links.iter().any(|k| {
                k.kind == LinkKind::Branched && k.recorded_in.0 == l.recorded_in.0 && k.recorded_in.1 > l.recorded_in.1
            })
    };
    links.iter().filter(|l| !copied(l)).copied().collect()
}

impl Link {
    /// The edge seen from session `me`: `continues in session X …` or `continued from session
    /// X …` (`None` when it does not touch `me`).
    pub fn describe(&self, me: StreamId) -> Option<String> {
        let why = match self.kind {
            LinkKind::Diverged => format!("the client's history differed from message {} on", self.at),
            LinkKind::Branched => format!("a branch sharing its first {} messages", self.at),
            LinkKind::ClientCompacted => {
                format!("the client replaced the messages before {} by its own summary", self.at)
            }
        };
        if self.from == me {
            Some(format!("continues in session {} ({why})", self.to))
        } else if self.to == me {
            Some(format!("continued from session {} ({why})", self.from))
        } else {
            None
        }
    }

    /// As JSON, seen from `me`: `{"relation": "successor"|"predecessor", "session", "kind", "at"}`.
    pub fn to_json(self, me: StreamId) -> Value {
        let (relation, other) = if self.from == me { ("successor", self.to) } else { ("predecessor", self.from) };
        json!({"relation": relation, "session": other.to_string(), "kind": self.kind.as_str(), "at": self.at})
    }
}

/// A session's edges, both ways, each once (an edge may be found in both sessions' logs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lineage {
    /// Edges into the session (where it came from).
    pub predecessors: Vec<Link>,
    /// Edges out of it (where it went on).
    pub successors: Vec<Link>,
}

impl Lineage {
    /// The edges of `links` that touch `me`, sorted into both directions.
    pub fn of(me: StreamId, links: impl IntoIterator<Item = Link>) -> Lineage {
        let mut l = Lineage::default();
        for link in own_edges(links) {
            let list = match (link.from == me, link.to == me) {
                (true, false) => &mut l.successors,
                (false, true) => &mut l.predecessors,
                _ => continue,
            };
            if !list.iter().any(|k| k.from == link.from && k.to == link.to && k.kind == link.kind) {
                list.push(link);
            }
        }
        l
    }

    /// Nothing relates the session to another.
    pub fn is_empty(&self) -> bool {
        self.predecessors.is_empty() && self.successors.is_empty()
    }

    /// One sentence per edge, predecessors first.
    pub fn sentences(&self, me: StreamId) -> Vec<String> {
        self.predecessors.iter().chain(&self.successors).filter_map(|l| l.describe(me)).collect()
    }

    /// As a JSON list, predecessors first.
    pub fn to_json(&self, me: StreamId) -> Value {
        Value::Array(self.predecessors.iter().chain(&self.successors).map(|l| l.to_json(me)).collect())
    }

    /// Short form for a table cell: `← 1a2b3c4d` for each predecessor, `→ 5e6f7a8b@4` for each
    /// successor (the seq where they part), ids as `short` writes them; `-` when there is none.
    pub fn cell(&self, short: impl Fn(StreamId) -> String) -> String {
        let parts: Vec<String> = self
            .predecessors
            .iter()
            .map(|l| format!("← {}", short(l.from)))
            .chain(self.successors.iter().map(|l| format!("→ {}@{}", short(l.to), l.at)))
            .collect();
        if parts.is_empty() {
            "-".to_owned()
        } else {
            parts.join(" ")
        }
    }
}
