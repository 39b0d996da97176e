//! What `ctxlog sessions` and `--session latest|PREFIX|NAME` know of each session, read from
//! the two ends of its log instead of folding it: the start (`SessionStarted`, the name, the
//! first user message, the first call) and the end (the last call, the last message, the
//! lineage). Records are told apart by their kind byte, so the messages in between are read
//! but not decoded. A store of thousands of sessions lists in milliseconds per hundred.

use ctxlog::codec::{self, kind};
use ctxlog::event::Event;
use ctxlog::message::Role;
use ctxlog::store::StoredRecord;
use ctxlog::{Millis, Session, SessionError, Store, StreamId, Version};
use serde_json::{json, Value};

use crate::lineage::{link_of, own_edges, Lineage, Link};

/// Records first read from the start of a log (a proxy session's first call is its 5th record;
/// doubled, up to [`READ_CHUNK`](ctxlog::session::READ_CHUNK), until the first call is found).
const FRONT_CHUNK: usize = 8;
/// Records first read back from its end (a call's batch and its answer; doubled until the last
/// call and the last message are found).
const TAIL_WINDOW: u64 = 8;
/// Characters of the first user message shown.
const EXCERPT: usize = 60;

/// One session, as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The session.
    pub id: StreamId,
    /// Its head version (records in the log).
    pub events: Version,
    /// When it was created.
    pub started_ms: Millis,
    /// When its first call's dispatch completed.
    pub first_call_ms: Option<Millis>,
    /// When its last call's dispatch completed.
    pub last_call_ms: Option<Millis>,
    /// Calls served.
    pub calls: u64,
    /// Messages appended.
    pub messages: u64,
    /// The `model` of its last call, when the host recorded it.
    pub model: Option<String>,
    /// The start of its first user message, on one line.
    pub first_user: Option<String>,
    /// The client's name for it (`x-ctxlog-session`).
    pub name: Option<String>,
    /// Edges recorded in its own log.
    pub links: Vec<Link>,
}

impl Entry {
    /// The time of its latest activity: the last call, or its creation.
    pub fn last_active_ms(&self) -> Millis {
        self.last_call_ms.unwrap_or(self.started_ms)
    }
}

/// The kind byte of a record (after the format byte).
fn kind_of(rec: &StoredRecord) -> u8 {
    rec.record.body().get(1).copied().unwrap_or(0)
}

fn is_request_served(k: u8) -> bool {
    matches!(k, kind::REQUEST_SERVED_V1 | kind::REQUEST_SERVED_V2 | kind::REQUEST_SERVED_V3 | kind::REQUEST_SERVED)
}

fn decode(id: StreamId, rec: &StoredRecord) -> Result<Event, SessionError> {
    Ok(codec::decode(id, rec.version, &rec.record)?)
}

/// `"Fix the login bug in auth.rs…"`: the text, whitespace collapsed, cut at [`EXCERPT`].
fn excerpt(m: &ctxlog::Message) -> String {
    let text = m.plain_text();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = text.chars().take(EXCERPT).collect();
    if text.chars().count() > EXCERPT {
        format!("{cut}…")
    } else {
        cut
    }
}

/// What one pass over some records found.
#[derive(Default)]
struct Found {
    started: Option<(Millis, bool)>,
    name: Option<String>,
    first_user: Option<String>,
    first_call: Option<Millis>,
    /// `(call, at, model)` of the last `RequestServed` seen.
    last_call: Option<(u64, Millis, Option<String>)>,
    last_seq: Option<u64>,
    /// `MessageAppended` records seen going forward (seqs are dense from 0: their count is the
    /// next seq), counted by kind, without decoding.
    appended: u64,
    import_completed: bool,
    links: Vec<Link>,
}

impl Found {
    /// Looks at one record; decodes it only when its kind says it tells something.
    fn observe(&mut self, id: StreamId, rec: &StoredRecord, forward: bool) -> Result<(), SessionError> {
        let k = kind_of(rec);
        if forward && k == kind::MESSAGE_APPENDED {
            self.appended += 1;
        }
        let wanted = match k {
            kind::MESSAGE_APPENDED => {
                if forward {
                    self.first_user.is_none()
                } else {
                    self.last_seq.is_none()
                }
            }
            // Forward reads stop at the first call; backward ones at the last.
            k if is_request_served(k) => forward || self.last_call.is_none(),
            kind::ANSWER_RECEIVED => false,
            _ => true,
        };
        if !wanted {
            return Ok(());
        }
        match decode(id, rec)? {
            Event::SessionStarted(s) => self.started = Some((s.at, s.import.is_some())),
            Event::SessionNamed(n) => self.name = Some(n.name),
            Event::MessageAppended(m) => {
                if forward && self.first_user.is_none() && m.message.role == Role::User {
                    self.first_user = Some(excerpt(&m.message));
                }
                if !forward {
                    self.last_seq = Some(m.seq);
                }
            }
            Event::RequestServed(s) => {
                if forward && self.first_call.is_none() {
                    self.first_call = Some(s.at);
                }
                let model = s.request.and_then(|r| r.model);
                if !forward || self.last_call.as_ref().is_none_or(|(c, ..)| s.call > *c) {
                    self.last_call = Some((s.call, s.at, model));
                }
            }
            Event::ImportCompleted(_) => self.import_completed = true,
            ev => self.links.extend(link_of(id, rec.version, &ev)),
        }
        Ok(())
    }
}

/// Reads what [`Entry`] holds from the two ends of `id`'s log. An unfinished import is
/// [`SessionError::Unfinished`] (readers treat it as absent), a damaged record the store's or
/// the codec's error.
pub fn entry(store: &dyn Store, id: StreamId) -> Result<Entry, SessionError> {
    let head = store.head(id)?.ok_or(SessionError::NotFound(id))?;
    // Forward to the first call (a successor starts with the client's whole history).
    let mut front = Found::default();
    let mut read_to = 0;
    let mut from = 1;
    let mut chunk = FRONT_CHUNK;
    'front: while from <= head {
        let batch = store.read(id, from, chunk)?;
        chunk = (chunk * 2).min(ctxlog::session::READ_CHUNK);
        let Some(last) = batch.last().map(|r| r.version) else { break };
        for rec in &batch {
            front.observe(id, rec, true)?;
            read_to = rec.version;
            if front.first_call.is_some() {
                break 'front;
            }
        }
        from = last + 1;
    }
    // Backward from the head, in growing windows, to the last call and the last message.
    let mut back = Found::default();
    let mut hi = head;
    let mut window = TAIL_WINDOW;
    while hi > read_to && (back.last_call.is_none() || back.last_seq.is_none()) {
        let lo = hi.saturating_sub(window - 1).max(read_to + 1);
        let batch = store.read(id, lo, usize::try_from(hi - lo + 1).unwrap_or(usize::MAX))?;
        for rec in batch.iter().rev() {
            back.observe(id, rec, false)?;
        }
        hi = lo - 1;
        window = window.saturating_mul(2);
    }
    let Some((started_ms, import)) = front.started else {
        return Err(SessionError::Invariant {
            stream: id,
            violation: ctxlog::Violation {
                version: 1,
                event: "?",
                invariant: ctxlog::state::Invariant::SessionStart,
                detail: "the first event must be SessionStarted".into(),
            },
        });
    };
    // The completion marker is normally the last record of an import; when it is not in what
    // was read, the fold decides.
    if import && !(front.import_completed || back.import_completed) {
        Session::open(store, id)?;
    }
    let last_call = back.last_call.or(front.last_call);
    let mut links = front.links;
    links.extend(back.links);
    Ok(Entry {
        id,
        events: head,
        started_ms,
        first_call_ms: front.first_call,
        last_call_ms: last_call.as_ref().map(|(_, at, _)| *at),
        calls: last_call.as_ref().map_or(0, |(c, ..)| c + 1),
        // The last append the backward read found, else every append was in the forward read.
        messages: back.last_seq.map_or(front.appended, |s| s + 1),
        model: last_call.and_then(|(_, _, m)| m),
        first_user: front.first_user,
        name: front.name,
        links,
    })
}

/// Every session of the store that reads, and the ones that do not (with why).
pub struct Catalog {
    /// Listed sessions, oldest first (by creation, then id).
    pub entries: Vec<Entry>,
    /// Unfinished imports (not sessions yet).
    pub unfinished: Vec<SessionError>,
    /// Sessions whose log could not be read.
    pub damaged: Vec<(StreamId, SessionError)>,
}

impl Catalog {
    /// Reads every stream of `store`; any error other than damage or an unfinished import
    /// (a store that fails) ends it.
    pub fn read(store: &dyn Store) -> Result<Catalog, SessionError> {
        let mut c = Catalog { entries: Vec::new(), unfinished: Vec::new(), damaged: Vec::new() };
        for id in store.streams()? {
            match entry(store, id) {
                Ok(e) => c.entries.push(e),
                Err(e @ SessionError::Unfinished { .. }) => c.unfinished.push(e),
                Err(e) if is_log_damage(&e) => c.damaged.push((id, e)),
                Err(e) => return Err(e),
            }
        }
        find_branches(store, &mut c.entries)?;
        // Oldest first, like `ls -tr`: the latest session ends the listing.
        c.entries.sort_by_key(|e| (e.started_ms, e.id));
        Ok(c)
    }

    /// Every edge recorded anywhere in the store.
    pub fn links(&self) -> impl Iterator<Item = Link> + '_ {
        self.entries.iter().flat_map(|e| e.links.iter().copied())
    }

    /// The lineage of `id` as the whole store records it.
    pub fn lineage(&self, id: StreamId) -> Lineage {
        Lineage::of(id, self.links())
    }

    /// The lineage of every listed session, in the order of [`Catalog::entries`] (one pass over
    /// the edges, not one per session).
    pub fn lineages(&self) -> Vec<Lineage> {
        let mut touching: std::collections::HashMap<StreamId, Vec<Link>> = std::collections::HashMap::new();
        for l in own_edges(self.links()) {
            touching.entry(l.from).or_default().push(l);
            touching.entry(l.to).or_default().push(l);
        }
        self.entries.iter().map(|e| Lineage::of(e.id, touching.remove(&e.id).unwrap_or_default())).collect()
    }

    /// The entry of `id`.
    pub fn get(&self, id: StreamId) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == id)
    }

    /// Each listed id's shortest prefix of at least 8 characters that no other listed id
    /// shares, as `git` abbreviates: what `--session` accepts.
    pub fn short_ids(&self) -> std::collections::HashMap<StreamId, String> {
        let mut ids: Vec<String> = self.entries.iter().map(|e| e.id.to_string()).collect();
        ids.sort_unstable();
        let common = |a: &str, b: &str| a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
        let mut out = std::collections::HashMap::new();
        for (i, id) in ids.iter().enumerate() {
            let before = i.checked_sub(1).and_then(|j| ids.get(j)).map_or(0, |p| common(p, id));
            let after = ids.get(i + 1).map_or(0, |n| common(id, n));
            let len = (before.max(after) + 1).max(8);
            if let Ok(parsed) = id.parse::<StreamId>() {
                out.insert(parsed, id.chars().take(len).collect());
            }
        }
        out
    }
}

/// Whether a session failed to read because its log is damaged or invalid (exit 4).
pub fn is_log_damage(e: &SessionError) -> bool {
    match e {
        SessionError::Store(e) => crate::error::is_damage(e),
        SessionError::Decode(_) | SessionError::Invariant { .. } => true,
        _ => false,
    }
}

/// The lineage of one session: its own log's edges and those other sessions' logs record about
/// it (read from the ends of their logs; a store that cannot be listed gives only its own).
pub fn lineage_of(store: &dyn Store, id: StreamId, own: &[Link]) -> Lineage {
    let mut links = own.to_vec();
    if let Ok(streams) = store.streams() {
        let mut entries: Vec<Entry> = streams.into_iter().filter_map(|s| entry(store, s).ok()).collect();
        let _ = find_branches(store, &mut entries);
        links.extend(entries.into_iter().flat_map(|e| e.links));
    }
    Lineage::of(id, links)
}

/// A branch's log starts with a copy of its parent's (its `SessionStarted` differs only by
/// the id), so its `Branched` lies between the copied calls and its own, where the reads from
/// the two ends do not look. Sessions sharing their creation time and first call with another
/// are read whole for their `Branched` records, by kind byte: only branches, their roots and
/// coincidences pay for it.
fn find_branches(store: &dyn Store, entries: &mut [Entry]) -> Result<(), SessionError> {
    let key = |e: &Entry| (e.started_ms, e.first_call_ms);
    let mut seen: std::collections::HashMap<(Millis, Option<Millis>), usize> = std::collections::HashMap::new();
    for e in entries.iter() {
        *seen.entry(key(e)).or_default() += 1;
    }
    for e in entries.iter_mut() {
        let own = |l: &Link| l.kind == crate::lineage::LinkKind::Branched && l.to == e.id;
        if seen.get(&key(e)).copied().unwrap_or(0) < 2 || e.links.iter().any(own) {
            continue;
        }
        let mut from = 1;
        while from <= e.events {
            let batch = store.read(e.id, from, ctxlog::session::READ_CHUNK)?;
            let Some(last) = batch.last().map(|r| r.version) else { break };
            for rec in batch.iter().filter(|r| kind_of(r) == kind::BRANCHED) {
                e.links.extend(link_of(e.id, rec.version, &decode(e.id, rec)?));
            }
            from = last + 1;
        }
    }
    Ok(())
}

/// `2026-12-01 21:41:24` (UTC), or `-`.
pub fn when(ms: Option<Millis>) -> String {
    ms.map_or_else(
        || "-".to_owned(),
        |ms| {
            let t = ctxlog::time::format_rfc3339(ms);
            t.get(..19).map_or_else(|| t.clone(), |s| s.replace('T', " "))
        },
    )
}

/// One entry as JSON (the keys of earlier versions — `session`, `events`, `messages`, `calls`
/// — first and unchanged).
pub fn to_json(e: &Entry, lineage: &Lineage) -> Value {
    let at = |ms: Option<Millis>| ms.map(ctxlog::time::format_rfc3339);
    json!({
        "session": e.id.to_string(),
        "events": e.events,
        "messages": e.messages,
        "calls": e.calls,
        "started": ctxlog::time::format_rfc3339(e.started_ms),
        "first_call": at(e.first_call_ms),
        "last_call": at(e.last_call_ms),
        "model": e.model,
        "name": e.name,
        "first_user_message": e.first_user,
        "lineage": lineage.to_json(e.id),
    })
}
