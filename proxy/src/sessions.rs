//! Sessions in memory and how a request's history meets the log.
//!
//! Each session has a slot behind an async mutex held for the whole call (plan → upstream →
//! commit): one call in flight per session, any number of sessions in parallel. A slot keeps
//! the open [`Session`] and the xxh3 digests of the history items as the client sent them,
//! so the next request is compared by digests of raw bytes and only its new suffix is parsed.
//! Idle slots are dropped; a session reopened from the store has no digests yet, and its
//! history is then compared once by parsed content (media compared by blob id).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ctxlog::event::GuardKind;
use ctxlog::message::{BlobRef, Block, Content, ImageUrl, MediaData, MediaSource, Message};
use ctxlog::{BlobId, Config, Plan, RequestOptions, Session, SessionError, StreamId, Timestamp, WireFormat};

use crate::identity::successor_of;

/// The store every session of the proxy shares.
pub(crate) type Store = Arc<dyn ctxlog::Store>;
type Sess = Session<Store>;

/// One session's place in memory.
pub(crate) struct Slot {
    /// The id requests resolve to: the key of the store's lease for this slot's calls.
    base: StreamId,
    session: Option<Sess>,
    /// Digests of the first `digests.len()` logged messages of session `digests_of` as the
    /// client sent them. They outlive a shrink (the session dropped, the slot kept), so a
    /// shrunk session is reopened without comparing its history by content.
    digests: Vec<u128>,
    digests_of: Option<StreamId>,
    last_used: Instant,
}

/// The slots, by the id a request resolves to (a diverged session's successor lives in the
/// slot of the id the client still resolves to).
#[derive(Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<StreamId, Arc<tokio::sync::Mutex<Slot>>>>,
}

impl Sessions {
    pub fn slot(&self, id: StreamId) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(map.entry(id).or_insert_with(|| {
            Arc::new(tokio::sync::Mutex::new(Slot {
                base: id,
                session: None,
                digests: Vec::new(),
                digests_of: None,
                last_used: Instant::now(),
            }))
        }))
    }

    /// Drops slots unused for `evict` that no request holds or waits for, and shrinks those
    /// unused for `shrink` to their digests (the session is reopened from the store on the
    /// next request); returns how many were dropped and how many shrunk.
    pub fn sweep(&self, shrink: Duration, evict: Duration) -> (usize, usize) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let before = map.len();
        let mut shrunk = 0;
        map.retain(|_, slot| {
            if Arc::strong_count(slot) > 1 {
                return true;
            }
            let Ok(mut s) = slot.try_lock() else { return true };
            let idle = s.last_used.elapsed();
            if idle >= evict {
                return false;
            }
            if idle >= shrink && s.session.is_some() {
                s.session = None;
                shrunk += 1;
            }
            true
        });
        (before - map.len(), shrunk)
    }

    /// Slots in memory.
    pub fn len(&self) -> usize {
        self.map.lock().map(|m| m.len()).unwrap_or(0)
    }
}

/// One history item of a request: its raw JSON (a slice of the request body, or the
/// Anthropic `system` wrapped as a message), its digest, and where it came from.
#[derive(Clone, Copy)]
pub(crate) struct Item<'a> {
    pub raw: &'a [u8],
    pub digest: u128,
    /// `None`: the `system` field; else the index in `messages`.
    pub index: Option<usize>,
    /// The request's list and system field names (`messages`/`system`, `input`/`instructions`).
    pub keys: crate::body::Keys,
}

impl Item<'_> {
    /// `system` or `messages[i]`: the field an error names.
    fn field(&self) -> String {
        match self.index {
            None => self.keys.system.to_owned(),
            Some(i) => format!("{}[{i}]", self.keys.list),
        }
    }

    /// The raw JSON as text (the whole body was checked to be UTF-8; checked again, cheaply,
    /// only for the items that are parsed).
    fn text(&self) -> Result<&str, PrepareError> {
        std::str::from_utf8(self.raw)
            .map_err(|e| PrepareError::Invalid { field: self.field(), message: format!("not UTF-8: {e}") })
    }
}

/// What could not be prepared.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PrepareError {
    /// The client's request is wrong (400; nothing written).
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// The store could not write or read now (full disk, an outage): nothing was forwarded,
    /// and the client may retry.
    #[error(transparent)]
    Unavailable(SessionError),
    /// The session failed otherwise (its log breaks an invariant, a record does not decode).
    #[error(transparent)]
    Session(SessionError),
}

impl From<SessionError> for PrepareError {
    /// A refusal is the client's history breaking a rule of the log (an orphan tool result, a
    /// message not of the format): 400. A store error is an outage: 503/529.
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::Refused { violation, .. } => {
                PrepareError::Invalid { field: "messages".into(), message: violation.to_string() }
            }
            SessionError::Message { index, error } => {
                PrepareError::Invalid { field: format!("messages[{index}].{}", error.field), message: error.message }
            }
            e @ SessionError::Store(_) => PrepareError::Unavailable(e),
            e => PrepareError::Session(e),
        }
    }
}

/// A planned call, ready to forward.
pub(crate) struct Prepared {
    pub plan: Plan,
    pub body: Vec<u8>,
    pub stream: StreamId,
    pub compaction: bool,
    pub diverged: bool,
    /// Records of other writers (another proxy of a fleet, a `ctxlog restore`) folded in first.
    pub caught_up: bool,
}

/// How often a request that lost a race with another writer of its session (a conflict on
/// append, a session created by another proxy at the same moment) catches up and tries again
/// before it is answered 503/529.
const RACES: usize = 3;

/// Brings the slot's session up to the client's history — first catching up with what other
/// writers logged, then appending the new suffix (durable before this returns), or moving to
/// a successor session when it diverged — then plans the call and renders its body. Nothing is
/// forwarded before this returns, so nothing unlogged reaches the provider.
#[allow(clippy::too_many_arguments)] // one call's inputs, each from a different place
pub(crate) fn prepare(
    slot: &mut Slot,
    store: &Store,
    base: StreamId,
    format: WireFormat,
    config: &Config,
    items: &[Item<'_>],
    opts: &RequestOptions,
    now: Timestamp,
    answered: Option<crate::compaction::Answered>,
) -> Result<Prepared, PrepareError> {
    slot.last_used = Instant::now();
    let mut raced = 0;
    loop {
        match bring_up(slot, store, base, format, config, items, now, answered) {
            Ok((diverged, caught_up)) => {
                let Some(s) = slot.session.as_mut() else { return Err(SessionError::NotFound(base).into()) };
                let plan = s.plan(now)?;
                let request = s.request(&plan, opts)?;
                let compaction = !plan.events().is_empty();
                return Ok(Prepared {
                    stream: s.id(),
                    body: request.into_body(),
                    plan,
                    compaction,
                    diverged,
                    caught_up,
                });
            }
            // Another writer got there first: nothing of ours was written; catch up, again.
            Err(Race) if raced < RACES => {
                raced += 1;
                slot.reset();
            }
            Err(Race) => {
                return Err(PrepareError::Unavailable(SessionError::Store(ctxlog::StoreError::backend(
                    "proxy",
                    format!("session {base}: lost {RACES} races in a row with other writers"),
                    "too many concurrent writers",
                ))))
            }
            Err(Failed(e)) => {
                // A failed write may or may not have reached the store: reopen from it next time.
                if matches!(e, PrepareError::Unavailable(_)) {
                    slot.reset();
                }
                return Err(e);
            }
        }
    }
}

/// Why bringing a session up failed.
enum BringUp {
    /// Lost a race with another writer (a conflict, or a session that appeared meanwhile).
    Race,
    Failed(PrepareError),
}
use BringUp::{Failed, Race};

impl<E: Into<PrepareError>> From<E> for BringUp {
    fn from(e: E) -> Self {
        match e.into() {
            PrepareError::Unavailable(SessionError::Store(ctxlog::StoreError::Conflict { .. }))
            | PrepareError::Session(SessionError::Exists(_)) => Race,
            e => Failed(e),
        }
    }
}

/// One attempt at bringing the slot's session up to `items`; returns whether it diverged and
/// whether other writers' records were folded in.
#[allow(clippy::too_many_arguments)]
fn bring_up(
    slot: &mut Slot,
    store: &Store,
    base: StreamId,
    format: WireFormat,
    config: &Config,
    items: &[Item<'_>],
    now: Timestamp,
    answered: Option<crate::compaction::Answered>,
) -> Result<(bool, bool), BringUp> {
    let mut caught_up = false;
    if let Some(s) = slot.session.as_mut() {
        let before = s.state().version();
        s.catch_up()?;
        caught_up = s.state().version() > before;
        // Another proxy moved the conversation to a successor meanwhile: follow the chain.
        if successor_in(s).is_some() {
            slot.reset();
        }
    }
    if slot.session.is_none() {
        let (id, session) = open_chain(store, base)?;
        if slot.digests_of != Some(id) {
            slot.digests.clear();
            slot.digests_of = Some(id);
        }
        slot.session = match session {
            Some(s) => Some(s),
            None => {
                let messages = parse_all(items, format)?;
                let created = Session::create_with(Arc::clone(store), id, format, config.clone(), now, messages);
                // Version 1 is `SessionStarted`: the items' appends start at 2.
                let (s, _) = created.map_err(|e| refused_at(e, items, 2))?;
                slot.digests = items.iter().map(|i| i.digest).collect();
                Some(s)
            }
        };
    }
    // A history that skips what came before a provider compaction continues the log; looked
    // for only when the history as sent does not.
    let mut difference = first_difference(slot, items)?;
    let skipped = match (difference, slot.session.as_ref()) {
        (Some(_), Some(s)) => crate::compaction::align(s, &slot.digests, items, answered)?,
        _ => None,
    };
    let aligned = skipped.as_ref().map(|k| k.apply(items));
    if let Some(aligned) = &aligned {
        difference = first_difference(slot, aligned)?;
    }
    let continued: &[Item<'_>] = match (&aligned, difference) {
        (Some(a), None) => a,
        _ => items,
    };
    if let Some(at) = difference {
        let messages = parse_all(items, format)?;
        let Some(old) = slot.session.as_mut() else { return Err(Failed(SessionError::NotFound(base).into())) };
        let successor = successor_of(old.id());
        // The successor is created first: if its messages are refused, the old session keeps
        // no guard pointing at a session that does not exist. If it exists already (another
        // proxy diverged first, or our guard's write failed last time), the guard is written
        // and the chain followed again.
        let created = Session::create_with(Arc::clone(store), successor, format, config.clone(), now, messages);
        let s = match created {
            Ok((s, _)) => Some(s),
            Err(SessionError::Exists(_)) => None,
            Err(e) => return Err(refused_at(e, items, 2)),
        };
        let detail = format!(
            "the client's history ({} messages) differs from the log ({} messages) from message {at} on; \
             the conversation continues in session {successor}",
            items.len(),
            old.state().message_count()
        );
        old.raise_guard(
            GuardKind::HistoryDiverged { seq: at, successor: successor.to_string() },
            detail,
            "x-ctxlog-session",
        )?;
        let Some(s) = s else { return Err(Race) };
        slot.digests = items.iter().map(|i| i.digest).collect();
        slot.digests_of = Some(successor);
        slot.session = Some(s);
        return Ok((true, caught_up));
    }
    if let Some(s) = slot.session.as_mut() {
        let logged = usize::try_from(s.state().message_count()).unwrap_or(usize::MAX);
        let new = continued.get(logged..).unwrap_or_default();
        if !new.is_empty() {
            let messages = parse_all(new, format)?;
            let first = s.state().version() + 1;
            s.append(messages).map_err(|e| refused_at(e, new, first))?;
            slot.digests.extend(new.iter().map(|i| i.digest));
        }
    }
    Ok((false, caught_up))
}

/// A refused append names the request's field it came from: the violation's version is the
/// append of `items[version - first]`.
fn refused_at(e: SessionError, items: &[Item<'_>], first: u64) -> BringUp {
    match e {
        SessionError::Refused { violation, .. } => {
            let item = violation.version.checked_sub(first).and_then(|i| items.get(usize::try_from(i).ok()?));
            let field = item.map_or_else(|| "messages".to_owned(), Item::field);
            Failed(PrepareError::Invalid { field, message: format!("{}: {}", violation.invariant, violation.detail) })
        }
        e => e.into(),
    }
}

/// The session a base id resolves to: the end of its chain of successors, opened, or the id
/// to create when the chain ends in a session that does not exist yet.
fn open_chain(store: &Store, base: StreamId) -> Result<(StreamId, Option<Sess>), SessionError> {
    let mut id = base;
    loop {
        match Session::open(Arc::clone(store), id) {
            Ok(s) => match successor_in(&s) {
                Some(next) => id = next,
                None => return Ok((id, Some(s))),
            },
            Err(SessionError::NotFound(_)) => return Ok((id, None)),
            Err(e) => return Err(e),
        }
    }
}

fn successor_in(s: &Sess) -> Option<StreamId> {
    s.state().raised().iter().find_map(|k| match k {
        GuardKind::HistoryDiverged { successor, .. } => successor.parse().ok(),
        _ => None,
    })
}

/// The first seq where the client's history disagrees with the log, if any. A client history
/// shorter than the log disagrees at its end (it was truncated).
fn first_difference(slot: &mut Slot, items: &[Item<'_>]) -> Result<Option<u64>, PrepareError> {
    let Some(s) = slot.session.as_ref() else { return Ok(None) };
    let logged = usize::try_from(s.state().message_count()).unwrap_or(usize::MAX);
    let known = slot.digests.len().min(logged);
    if let Some(i) = slot.digests.iter().take(known).zip(items).position(|(d, it)| *d != it.digest) {
        return Ok(Some(i as u64));
    }
    if items.len() < known {
        return Ok(Some(items.len() as u64));
    }
    // Reopened from the store: compare the rest of the log by content, once.
    let upto = logged.min(items.len());
    let format = s.format();
    if known < upto {
        let stored = s.messages(known as u64..upto as u64)?;
        for (offset, (logged_msg, item)) in stored.iter().zip(&items[known..upto]).enumerate() {
            let same = item
                .text()
                .ok()
                .and_then(|t| ctxlog::wire::parse_in(t, format).ok())
                .is_some_and(|m| same_message(&m, logged_msg));
            if !same {
                return Ok(Some((known + offset) as u64));
            }
            slot.digests.push(item.digest);
        }
    }
    if items.len() < logged {
        return Ok(Some(items.len() as u64));
    }
    Ok(None)
}

/// Parses and checks every item; the first error names its field.
pub(crate) fn parse_all(items: &[Item<'_>], format: WireFormat) -> Result<Vec<Message>, PrepareError> {
    items
        .iter()
        .map(|it| {
            let m =
                ctxlog::wire::parse_in(it.text()?, format).map_err(|e| invalid(&it.field(), &e.field, e.message))?;
            ctxlog::wire::check_format(&m, format).map_err(|e| invalid(&it.field(), &e.field, e.message))?;
            // ctxlog's tag for `instructions` is not an item a client may send.
            if it.index.is_some()
                && ctxlog::wire::responses::is_instructions(&m)
                && format == WireFormat::OpenAiResponses
            {
                return Err(invalid(&it.field(), "type", "unknown item type \"instructions\"".into()));
            }
            Ok(m)
        })
        .collect()
}

fn invalid(item: &str, inner: &str, message: String) -> PrepareError {
    let field = match (item, inner) {
        // The Anthropic `system` field was wrapped as a message: its `content` is the field.
        ("system" | "instructions", "content") | (_, "") => item.to_owned(),
        (field @ ("system" | "instructions"), rest) => {
            format!("{field}{}", rest.strip_prefix("content").unwrap_or(rest))
        }
        (item, rest) => format!("{item}.{rest}"),
    };
    PrepareError::Invalid { field, message }
}

/// The client's message equals the logged one, media compared as the blobs they became.
fn same_message(client: &Message, logged: &Message) -> bool {
    if client == logged {
        return true;
    }
    let mut m = client.clone();
    if let Some(Content::Blocks(blocks)) = &mut m.content {
        blocks.iter_mut().for_each(externalize);
    }
    &m == logged
}

fn externalize(b: &mut Block) {
    match b {
        Block::Media { source: MediaSource::Base64 { data, .. }, .. } => as_blob(data),
        Block::ImageUrl { url: ImageUrl::Data { data, .. }, .. } => as_blob(data),
        Block::ToolResult { content: Some(Content::Blocks(inner)), .. } => inner.iter_mut().for_each(externalize),
        _ => {}
    }
}

fn as_blob(data: &mut MediaData) {
    let MediaData::Inline(b64) = data else { return };
    let Ok(bytes) = ctxlog::wire::decode_base64(b64) else { return };
    let dims = ctxlog::media::dimensions(&bytes);
    *data = MediaData::Blob(BlobRef {
        id: BlobId::of(&bytes),
        bytes: bytes.len() as u64,
        width: dims.map(|d| d.0),
        height: dims.map(|d| d.1),
    });
}

impl Slot {
    /// Commits the slot's session's plan with the options its request was rendered with, so
    /// the log records the model, the tools and the cache breakpoints of the call, and the
    /// answer's assistant message in the same batch (an answer that does not parse as a
    /// message of the session's format is left out, with a warning: the call still counts).
    pub fn commit(
        &mut self,
        plan: Plan,
        opts: &RequestOptions,
        at: Timestamp,
        usage: Option<ctxlog::Usage>,
        answer: Option<&str>,
    ) -> Result<(), SessionError> {
        self.last_used = Instant::now();
        let Some(s) = self.session.as_mut() else { return Ok(()) };
        let format = s.format();
        // A Responses answer is its output items, several messages.
        let raw: Vec<String> = match (format, answer) {
            (WireFormat::OpenAiResponses, Some(a)) => {
                crate::responses::answer_parts(a).map(|p| p.1).unwrap_or_default()
            }
            (_, a) => a.map(str::to_owned).into_iter().collect(),
        };
        let parsed: Option<Vec<Message>> = raw
            .iter()
            .map(|a| ctxlog::wire::parse_in(a, format).ok().filter(|m| ctxlog::wire::check_format(m, format).is_ok()))
            .collect();
        match parsed {
            Some(messages) if !messages.is_empty() => s.commit_answers(plan, opts, at, usage, messages).map(|_| ()),
            none => {
                if none.is_none() {
                    tracing::warn!(session = %s.id(), "the answer is not a message of the session's format: not recorded");
                }
                s.commit_request(plan, opts, at, usage).map(|_| ())
            }
        }
    }

    /// Puts an opened or created session in the slot (a provider-held chain's, `responses.rs`).
    pub fn set_session(&mut self, s: Sess) {
        self.session = Some(s);
    }

    /// The stream whose store lease this slot's calls take.
    pub fn lease_key(&self) -> StreamId {
        self.base
    }

    /// The session in memory, if any (none after a shrink or a reset).
    pub fn session_mut(&mut self) -> Option<&mut Sess> {
        self.session.as_mut()
    }

    /// Forgets the session (its pending append could not be written: it is ahead of its log);
    /// the next request reopens it from the store and compares its history by content.
    pub fn reset(&mut self) {
        self.session = None;
        self.digests.clear();
        self.digests_of = None;
    }
}

/// A session's slot held for one call (plan → upstream → commit → summaries), with the store's
/// lease on its stream: one call in flight per session in this process (the slot) and across
/// every process sharing the store (the lease). Dropping it releases both.
pub(crate) struct Held {
    guard: tokio::sync::OwnedMutexGuard<Slot>,
    _lease: ctxlog::Lease,
}

impl Held {
    pub fn new(guard: tokio::sync::OwnedMutexGuard<Slot>, lease: ctxlog::Lease) -> Self {
        Held { guard, _lease: lease }
    }

    /// The slot's mutex, to take it again after releasing it.
    pub fn mutex(&self) -> Arc<tokio::sync::Mutex<Slot>> {
        Arc::clone(tokio::sync::OwnedMutexGuard::mutex(&self.guard))
    }
}

impl std::ops::Deref for Held {
    type Target = Slot;
    fn deref(&self) -> &Slot {
        &self.guard
    }
}

impl std::ops::DerefMut for Held {
    fn deref_mut(&mut self) -> &mut Slot {
        &mut self.guard
    }
}
