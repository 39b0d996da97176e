//! Sessions in memory and how a request's history meets the log.
//!
//! A request resolves to a lineage (`identity::session_of`): a tree of sessions, the root and
//! its branches, one stream each. Each lineage has a slot behind an async mutex held for the
//! whole call (plan → upstream → commit): one call in flight per lineage, any number of
//! lineages in parallel. A request continues the branch whose history is a prefix of its own
//! (tried first: the branch of the lineage's last call), else it becomes a new branch of the
//! branch it shares the longest prefix with, forked there (`Session::branch`). Branch ids are
//! derived from the parent, the fork point and the canonical form of the branch's first own
//! message, so every proxy of a fleet finds the same branch, and two creating it at once meet
//! in the store (the loser catches up and continues it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ctxlog::event::GuardKind;
use ctxlog::message::Message;
use ctxlog::{Config, Plan, RequestOptions, Session, SessionError, StreamId, Timestamp, WireFormat};

use crate::history::{Branch, Fork, Relation};
use crate::identity::branch_of;
use crate::item::parse_all;
pub(crate) use crate::item::{Item, PrepareError, Sess, Store};

/// Branches of one lineage kept open at once; past it the least recently used are shrunk to
/// their digests (a client that cycles through more re-reads them from the store).
const OPEN_BRANCHES: usize = 8;

/// A walk down a lineage's tree stops after this many branches (a tree that deep is a bug).
const MAX_DEPTH: usize = 10_000;

/// One lineage's place in memory.
pub(crate) struct Slot {
    /// The id requests resolve to: the key of the store's lease for this slot's calls.
    base: StreamId,
    /// The lineage's branches in memory (the root among them), by stream.
    branches: HashMap<StreamId, Branch>,
    /// The branch the last call was logged in: the next request tries it first.
    current: Option<StreamId>,
    last_used: Instant,
    /// The client's `x-ctxlog-session` header, recorded (`SessionNamed`) in every session this
    /// slot creates, successors included, so a person can find them by it.
    pub name: Option<String>,
    /// The conversation this request's history summarizes (`tails.rs`), and its first message
    /// kept: recorded (`ClientCompacted`) if the request creates the lineage's root.
    pub summarizes: Option<(StreamId, u64)>,
}

/// The slots, by the id a request resolves to.
#[derive(Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<StreamId, Arc<tokio::sync::Mutex<Slot>>>>,
    /// Derived lineage ids already computed.
    pub derived: crate::identity::Derived,
}

impl Sessions {
    pub fn slot(&self, id: StreamId) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(map.entry(id).or_insert_with(|| {
            Arc::new(tokio::sync::Mutex::new(Slot {
                base: id,
                branches: HashMap::new(),
                current: None,
                last_used: Instant::now(),
                name: None,
                summarizes: None,
            }))
        }))
    }

    /// Drops slots unused for `evict` that no request holds or waits for, and shrinks those
    /// unused for `shrink` to their digests (the sessions are reopened from the store on the
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
            if idle >= shrink && s.branches.values().any(|b| b.session.is_some()) {
                s.branches.values_mut().for_each(|b| b.session = None);
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

/// A planned call, ready to forward.
pub(crate) struct Prepared {
    pub plan: Plan,
    pub body: Vec<u8>,
    pub stream: StreamId,
    /// Where the stream forked from its parent, when it is a branch.
    pub fork: Option<Fork>,
    pub compaction: bool,
    /// This call made the branch.
    pub branched: bool,
    /// Records of other writers (another proxy of a fleet, a `ctxlog restore`) folded in first.
    pub caught_up: bool,
    /// The options the body was rendered with (the breakpoints placed): what the commit records.
    pub opts: RequestOptions,
    /// `x-ctxlog-breakpoints`, for an Anthropic request.
    pub breakpoints: Option<http::HeaderValue>,
}

/// A client's `context_management`, as the call takes it.
pub(crate) struct ClientManagement {
    /// The edit types it asks for, for the log.
    pub types: String,
    /// Its edits, when ctxlog applies them (`None`: passed upstream).
    pub applied: Option<crate::context_management::ClientEdits>,
}

/// How often a request that lost a race with another writer of its session (a conflict on
/// append, a session created by another proxy at the same moment) catches up and tries again
/// before it is answered 503/529.
const RACES: usize = 3;

/// Brings the lineage up to the client's history — the branch it continues, caught up with
/// what other writers logged, its new suffix appended (durable before this returns); or a new
/// branch holding the shared prefix and the client's own messages — then plans the call and
/// renders its body. Nothing is
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
    asked: &crate::breakpoints::Asked,
    now: Timestamp,
    answered: Option<crate::compaction::Answered>,
    client: Option<&ClientManagement>,
) -> Result<Prepared, PrepareError> {
    slot.last_used = Instant::now();
    let mut raced = 0;
    loop {
        match bring_up(slot, store, base, format, config, items, now, answered) {
            Ok(Brought { stream, fork, branched, caught_up }) => {
                slot.current = Some(stream);
                slot.limit_open();
                let Some(s) = slot.session_mut() else { return Err(SessionError::NotFound(stream).into()) };
                if let Some(c) = client {
                    // Once per session, in the log: whose edits these calls carry.
                    let (how, kind) = match c.applied {
                        Some(_) => {
                            ("applied by ctxlog as the call's knobs and left out of the forwarded request", true)
                        }
                        None => ("passed upstream as it came, for the provider to apply", false),
                    };
                    let detail = format!("the client sends its own context_management ({}): {how}", c.types);
                    s.raise_guard(
                        GuardKind::ClientContextManagement { applied: kind },
                        detail,
                        "--provider-context-management",
                    )?;
                }
                let knobs = client.and_then(|c| c.applied.as_ref()).map(|e| e.knobs.clone()).unwrap_or_default();
                let plan = s.plan_with(now, &knobs)?;
                let has_system = items.first().is_some_and(|i| i.index.is_none());
                let (opts, origin) = crate::breakpoints::options(s, &plan, items.len(), has_system, asked, opts)?;
                let request = s.request(&plan, &opts)?;
                let breakpoints = origin.and_then(|o| crate::breakpoints::header(request.breakpoints(), o, asked));
                let compaction = !plan.events().is_empty();
                return Ok(Prepared {
                    stream,
                    fork,
                    body: request.into_body(),
                    plan,
                    compaction,
                    branched,
                    caught_up,
                    opts,
                    breakpoints,
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

/// The body the next call of the slot's session would forward for `items` (their new suffix
/// appended on a copy, planned, rendered with `opts`), without writing or changing anything
/// but the slot's cache of digests; `None` when the history is not a continuation of a known
/// session (a new conversation, a divergence): the request is then counted as it is.
pub(crate) fn preview(
    slot: &mut Slot,
    store: &Store,
    base: StreamId,
    format: WireFormat,
    items: &[Item<'_>],
    opts: &RequestOptions,
    now: Timestamp,
) -> Result<Option<Vec<u8>>, PrepareError> {
    // The branch of the last call, else the lineage's root (the end of an old successor chain).
    let mut caught_up = false;
    let mut node = slot.current.unwrap_or(base);
    loop {
        match slot.load(store, node, &mut caught_up)? {
            None => return Ok(None),
            Some(b) => match successor_in(b) {
                Some(next) => node = next,
                None => break,
            },
        }
    }
    let Some(b) = slot.branches.get_mut(&node) else { return Ok(None) };
    if b.relation(items)? != Relation::Continues {
        return Ok(None);
    }
    let Some(s) = b.session.as_ref() else { return Ok(None) };
    let logged = usize::try_from(s.state().message_count()).unwrap_or(usize::MAX);
    let messages = parse_all(items.get(logged..).unwrap_or_default(), format)?;
    Ok(Some(s.preview(messages, now, opts)?.into_body()))
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

/// Where a request was logged.
struct Brought {
    stream: StreamId,
    fork: Option<Fork>,
    branched: bool,
    caught_up: bool,
}

/// One attempt at bringing the lineage up to `items`.
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
) -> Result<Brought, BringUp> {
    let mut caught_up = false;
    // The hot path: the branch of the last call continues.
    if let Some(current) = slot.current {
        if let Some(b) = slot.load(store, current, &mut caught_up)? {
            if successor_in(b).is_none() {
                if b.relation(items)? == Relation::Continues {
                    append_new(b, items, format)?;
                    return Ok(Brought { stream: current, fork: b.fork, branched: false, caught_up });
                }
                if continue_aligned(b, items, answered, format)? {
                    return Ok(Brought { stream: current, fork: b.fork, branched: false, caught_up });
                }
            }
        }
    }
    // The root: the end of the chain of successors that sessions of earlier versions left.
    let mut node = base;
    loop {
        match slot.load(store, node, &mut caught_up)? {
            None => {
                let messages = parse_all(items, format)?;
                let name = slot.name.clone();
                let first = first_append(&name);
                let created =
                    Session::create_named(Arc::clone(store), node, format, config.clone(), now, name, messages);
                let (mut s, _) = created.map_err(|e| refused_at(e, items, first))?;
                if let Some((predecessor, seq)) = slot.summarizes.take() {
                    let detail = format!(
                        "the client replaced the first {seq} messages of session {predecessor} by its own summary; \
                         the conversation continues here"
                    );
                    let kind = GuardKind::ClientCompacted { predecessor: predecessor.to_string(), seq };
                    s.raise_guard(kind, detail, "client")?;
                    tracing::info!(%predecessor, session = %node, seq, "the client summarized its history");
                }
                slot.branches.insert(node, Branch::new(s, items.iter().map(|i| i.digest).collect(), None));
                return Ok(Brought { stream: node, fork: None, branched: false, caught_up });
            }
            Some(b) => match successor_in(b) {
                Some(next) => node = next,
                None => break,
            },
        }
    }
    // Down the tree: from each branch to its child that shares more with the request.
    for _ in 0..MAX_DEPTH {
        let Some(b) = slot.branches.get_mut(&node) else { return Err(Failed(SessionError::NotFound(node).into())) };
        let at = match b.relation(items)? {
            Relation::Continues => {
                append_new(b, items, format)?;
                return Ok(Brought { stream: node, fork: b.fork, branched: false, caught_up });
            }
            Relation::SharesFirst(at) => at,
        };
        // A branch the history continues once lined up after a provider compaction.
        if continue_aligned(b, items, answered, format)? {
            return Ok(Brought { stream: node, fork: b.fork, branched: false, caught_up });
        }
        let first = match usize::try_from(at).ok().and_then(|i| items.get(i)) {
            Some(item) => Some(canonical_of(item, format)?),
            None => None,
        };
        // A child forked here whose first message is the request's next one, or one whose
        // history ended here (a client that took messages back, then went on).
        let mut next = None;
        for child in
            [first.map(|f| branch_of(node, at, Some(f))), Some(branch_of(node, at, None))].into_iter().flatten()
        {
            if let Some(c) = slot.load(store, child, &mut caught_up)? {
                c.fork.get_or_insert(Fork { parent: node, at });
                next = Some(child);
                break;
            }
        }
        match next {
            Some(child) => node = child,
            None => return branch(slot, node, at, first, format, items, now).map(|b| Brought { caught_up, ..b }),
        }
    }
    Err(Failed(PrepareError::Session(SessionError::Store(ctxlog::StoreError::backend(
        "proxy",
        format!("lineage {base}: more than {MAX_DEPTH} branches deep"),
        "a tree that deep is a bug: report it",
    )))))
}

/// Makes the branch of `node` forked at `at` holding the client's own messages (`items[at..]`).
fn branch(
    slot: &mut Slot,
    node: StreamId,
    at: u64,
    first: Option<u128>,
    format: WireFormat,
    items: &[Item<'_>],
    now: Timestamp,
) -> Result<Brought, BringUp> {
    let own = items.get(usize::try_from(at).unwrap_or(usize::MAX)..).unwrap_or_default();
    let messages = parse_all(own, format)?;
    let Some(parent) = slot.branches.get(&node) else { return Err(Failed(SessionError::NotFound(node).into())) };
    let Some(ps) = parent.session.as_ref() else { return Err(Failed(SessionError::NotFound(node).into())) };
    let child = branch_of(node, at, first);
    // The copied records end before message `at`; `Branched` follows; the appends after it.
    let copied = ps.state().entry(at).map_or(ps.state().version(), |e| e.version.saturating_sub(1));
    let (s, _) = ps.branch(child, at, now, messages).map_err(|e| refused_at(e, own, copied + 2))?;
    let mut digests: Vec<u128> =
        parent.digests.iter().take(usize::try_from(at).unwrap_or(usize::MAX)).copied().collect();
    digests.extend(own.iter().map(|i| i.digest));
    let fork = Some(Fork { parent: node, at });
    slot.branches.insert(child, Branch::new(s, digests, fork));
    tracing::info!(lineage = %slot.base, parent = %node, branch = %child, at, "the history forked: a branch");
    Ok(Brought { stream: child, fork, branched: true, caught_up: false })
}

/// A history that skips what came before a provider compaction (`compaction.rs`): when,
/// lined up with the branch's log, it continues the branch, its new messages are appended.
/// Looked for only when the history as sent does not continue (the common path pays nothing).
fn continue_aligned(
    b: &mut Branch,
    items: &[Item<'_>],
    answered: Option<crate::compaction::Answered>,
    format: WireFormat,
) -> Result<bool, BringUp> {
    let Some(s) = b.session.as_ref() else { return Ok(false) };
    let Some(skipped) = crate::compaction::align(s, &b.digests, items, answered)? else { return Ok(false) };
    let aligned = skipped.apply(items);
    if b.relation(&aligned)? != Relation::Continues {
        return Ok(false);
    }
    append_new(b, &aligned, format)?;
    Ok(true)
}

/// Appends the request's messages the branch does not have yet (durable when this returns).
fn append_new(b: &mut Branch, items: &[Item<'_>], format: WireFormat) -> Result<(), BringUp> {
    let Some(s) = b.session.as_mut() else { return Ok(()) };
    let logged = usize::try_from(s.state().message_count()).unwrap_or(usize::MAX);
    let new = items.get(logged..).unwrap_or_default();
    if !new.is_empty() {
        let messages = parse_all(new, format)?;
        let first = s.state().version() + 1;
        // Unsynced: the commit's sync covers it before the client has the answer (one fsync
        // per call on SQLite; see `Store::append_unsynced`).
        s.append_unsynced(messages).map_err(|e| refused_at(e, new, first))?;
        b.digests.extend(new.iter().map(|i| i.digest));
    }
    Ok(())
}

/// The canonical digest of a client's item (what names the branch it starts).
fn canonical_of(item: &Item<'_>, format: WireFormat) -> Result<u128, PrepareError> {
    let m = item.parse(format)?;
    Ok(crate::canonical::digest(&m))
}

/// The version of a new session's first append: after `SessionStarted` (1) and, for a named
/// session, its `SessionNamed` (2).
fn first_append(name: &Option<String>) -> u64 {
    2 + u64::from(name.is_some())
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

/// A session of an earlier version whose history diverged names its successor in a guard:
/// the lineage goes on there.
fn successor_in(b: &Branch) -> Option<StreamId> {
    b.session.as_ref()?.state().raised().iter().find_map(|k| match k {
        GuardKind::HistoryDiverged { successor, .. } => successor.parse().ok(),
        _ => None,
    })
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
        let Some(s) = self.session_mut() else { return Ok(()) };
        let format = s.format();
        // A Responses answer is its output items, several messages.
        let raw: Vec<String> = match (format, answer) {
            (WireFormat::OpenAiResponses, Some(a)) => crate::answer::answer_parts(a).map(|p| p.1).unwrap_or_default(),
            (_, a) => a.map(str::to_owned).into_iter().collect(),
        };
        // A Gemini answer follows the request's contents: its position is their number.
        let state = s.state();
        let position = state.message_count() - u64::from(state.entry(0).is_some_and(|e| e.is_system()));
        let parsed: Option<Vec<Message>> = raw
            .iter()
            .map(|a| {
                ctxlog::internal::wire::parse_at(a, format, position)
                    .ok()
                    .filter(|m| ctxlog::internal::wire::check_format(m, format).is_ok())
            })
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

    /// Puts an opened or created session in the slot as its current branch (a provider-held
    /// chain's, `responses.rs`).
    pub fn set_session(&mut self, s: Sess) {
        let id = s.id();
        match self.branches.get_mut(&id) {
            Some(b) => b.session = Some(s),
            None => {
                self.branches.insert(id, Branch::new(s, Vec::new(), None));
            }
        }
        self.current = Some(id);
    }

    /// The current branch and the digests of its logged messages as the client sent them.
    pub fn current_digests(&self) -> Option<(StreamId, &[u128])> {
        let current = self.current?;
        Some((current, &self.branches.get(&current)?.digests))
    }

    /// The stream whose store lease this slot's calls take.
    pub fn lease_key(&self) -> StreamId {
        self.base
    }

    /// The session of the lineage's last call in memory, if any (none after a shrink or a
    /// reset).
    pub fn session(&self) -> Option<&Sess> {
        self.branches.get(&self.current?)?.session.as_ref()
    }

    /// [`Slot::session`], to change it.
    pub fn session_mut(&mut self) -> Option<&mut Sess> {
        let current = self.current?;
        self.branches.get_mut(&current)?.session.as_mut()
    }

    /// Forgets the lineage (a write failed: a session may be ahead of its log, or another
    /// writer got there first); the next request reopens it from the store and compares its
    /// history by content.
    pub fn reset(&mut self) {
        self.branches.clear();
        self.current = None;
    }

    /// The branch `id`, open and caught up with the store (`caught_up` set when another
    /// writer's records were folded in); `None` when the store has no such session.
    fn load(&mut self, store: &Store, id: StreamId, caught_up: &mut bool) -> Result<Option<&mut Branch>, SessionError> {
        let open = match self.branches.get_mut(&id).and_then(|b| b.session.as_mut()) {
            Some(s) => {
                let before = s.state().version();
                s.catch_up()?;
                *caught_up |= s.state().version() > before;
                true
            }
            None => false,
        };
        if !open {
            let s = match Session::open(Arc::clone(store), id) {
                Ok(s) => s,
                Err(SessionError::NotFound(_)) => return Ok(None),
                Err(e) => return Err(e),
            };
            match self.branches.get_mut(&id) {
                Some(b) => b.session = Some(s),
                None => {
                    self.branches.insert(id, Branch::new(s, Vec::new(), None));
                }
            }
        }
        Ok(self.branches.get_mut(&id))
    }

    /// Shrinks the least recently used branches past [`OPEN_BRANCHES`] to their digests.
    fn limit_open(&mut self) {
        if self.branches.len() <= OPEN_BRANCHES {
            return;
        }
        let mut open: Vec<(Instant, StreamId)> =
            self.branches.iter().filter(|(_, b)| b.session.is_some()).map(|(id, b)| (b.last_used, *id)).collect();
        if open.len() <= OPEN_BRANCHES {
            return;
        }
        open.sort_unstable();
        for (_, id) in open.iter().take(open.len() - OPEN_BRANCHES) {
            if Some(*id) != self.current {
                if let Some(b) = self.branches.get_mut(id) {
                    b.session = None;
                }
            }
        }
    }
}

/// A session's slot held for one call (plan → upstream → commit → summaries), with the store's
/// lease on its stream from before the catch-up to the commit: one call in flight per session
/// in this process (the slot) and across every process sharing the store (the lease).
/// Dropping it releases both.
pub(crate) struct Held {
    guard: tokio::sync::OwnedMutexGuard<Slot>,
    lease: Option<ctxlog::Lease>,
}

impl Held {
    pub fn new(guard: tokio::sync::OwnedMutexGuard<Slot>, lease: ctxlog::Lease) -> Self {
        Held { guard, lease: Some(lease) }
    }

    /// Lets other processes have the session once the call is committed and nothing more is
    /// written under this hold (no extractive summary to prepare; a model's attempt takes the
    /// lease again to record): the session's next call, wherever it is routed, then finds the
    /// lease free. The slot stays held (this process's next call still waits for the
    /// summaries). Never before a write: another proxy's call that planned meanwhile would
    /// fail to commit an answer its client already has.
    pub fn release_lease(&mut self) {
        self.lease = None;
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
