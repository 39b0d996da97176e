//! One model call: `plan` (pure: the engine decides on a scratch copy), the request it serves,
//! then `commit` (its decisions and `RequestServed` as one batch) or `abort` (nothing).

use std::sync::Arc;

use crate::breakpoints::{Mark, Origin, Placement};
use crate::engine;
use crate::error::{SessionError, StaleCause};
use crate::event::{AnswerReceived, Event, GuardKind, MessageAppended, RequestRecord, RequestServed, ToolsRecord};
use crate::log::StoreBlobs;
use crate::message::Message;
use crate::policy::guards;
use crate::request::{self, CacheTtl, Request, RequestOptions, ServedView};
use crate::store::{BlobId, Store, StreamId, Version};
use crate::summary_call;
use crate::time::Timestamp;
use crate::usage::Usage;
use crate::view::{render_item_with, thousands, ViewCache};
use crate::wire::{self, Media, RenderOpts};

use super::{Committed, Session};

/// A call decided but not yet committed. Dropping it (or [`Session::abort`]) writes nothing.
#[derive(Debug, Clone)]
#[must_use = "a plan is committed with Session::commit or dropped with Session::abort"]
pub struct Plan {
    pub(super) stream: StreamId,
    pub(super) base_version: Version,
    pub(super) call: u64,
    decision: engine::Decision,
    cache: Option<ViewCache>,
    /// sha256 of the view bytes.
    pub digest: String,
    /// Messages in the view.
    pub view_messages: u64,
    /// Estimated tokens of the view.
    pub view_tokens: u64,
    /// This view is the previous one plus new messages, byte for byte.
    pub prefix_reused: bool,
    /// Leading items of this view that the previous call's view had too (all of that view when
    /// `prefix_reused`): the part a provider's prompt cache may still hold.
    reused: usize,
}

impl Plan {
    /// How many leading items of this view were in the previous call's view (0 on the first
    /// call): the prefix a provider's prompt cache may still hold.
    pub fn reused_items(&self) -> usize {
        self.reused
    }

    /// The tentative events (flush, edits, guards) this call would commit.
    pub fn events(&self) -> &[Event] {
        &self.decision.events
    }

    /// Highest ladder level reached.
    pub fn level(&self) -> u8 {
        self.decision.level
    }

    /// The call number.
    pub fn call(&self) -> u64 {
        self.call
    }

    /// Work the cache-aware gate held back on this call, and why.
    pub fn deferred(&self) -> Option<&crate::event::Deferral> {
        self.decision.deferred.as_ref()
    }
}

impl<S: Store> Session<S> {
    /// Decides the next call at `now` without writing anything.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// # let head = ctxlog::Store::head(&store, session.id())?;
    /// let plan = session.plan(Timestamp::from_millis(2_000))?;
    /// assert_eq!((plan.call(), plan.view_messages), (0, 1));
    /// assert!(plan.events().is_empty()); // nothing to compact yet
    /// assert_eq!(ctxlog::Store::head(&store, session.id())?, head); // nothing written
    /// # Ok(()) }
    /// ```
    pub fn plan(&mut self, now: Timestamp) -> Result<Plan, SessionError> {
        self.plan_with(now, &crate::config::CallKnobs::default())
    }

    /// [`Session::plan`] with a client's per-request knobs over the session's (Anthropic's
    /// `context_management`, read by the proxy): they steer this call's decisions only, which
    /// its events record, so a replay needs none of them.
    pub fn plan_with(&mut self, now: Timestamp, knobs: &crate::config::CallKnobs) -> Result<Plan, SessionError> {
        let now = now.as_millis();
        let _span = self.call_span(self.state.calls()).entered();
        let decision = engine::decide_with(&self.state, now, knobs).map_err(|v| self.refused(v))?;
        let (cache, view_state) = match &decision.scratch {
            // The scratch view differs from the cached one (new generation), so it is rendered
            // afresh; bringing the cache up to date or copying it first would only be thrown
            // away (a later plan catches it up if this one is aborted).
            Some(scratch) => {
                let mut c = ViewCache::new();
                c.sync(scratch);
                (Some(c), scratch)
            }
            None => {
                self.cache.sync(&self.state);
                (None, &self.state)
            }
        };
        let digest = cache.as_ref().unwrap_or(&self.cache).digest();
        let prefix_reused = self.state.calls() > 0 && view_state.prefix_stable_since_last_call();
        let previous = self.state.last_served().map_or(0, |l| usize::try_from(l.view_messages).unwrap_or(usize::MAX));
        // Between calls the view only grows (flushes and edits are a call's; a restore is the
        // exception, and only costs a breakpoint that misses), so the previous view is the head
        // of the current one; this call's flush or edits end the shared part.
        let reused = if prefix_reused || decision.scratch.is_none() {
            previous.min(view_state.view().len())
        } else {
            self.state.view().iter().zip(view_state.view()).take(previous).take_while(|(a, b)| a == b).count()
        };
        tracing::debug!(
            view_messages = view_state.view().len(),
            view_tokens = view_state.view_tokens(),
            metered_tokens = decision.metered_tokens,
            level = decision.level,
            tentative_events = decision.events.len(),
            prefix_reused,
            "planned"
        );
        Ok(Plan {
            stream: self.stream,
            base_version: self.state.version(),
            call: self.state.calls(),
            digest,
            view_messages: view_state.view().len() as u64,
            view_tokens: view_state.view_tokens(),
            prefix_reused,
            reused,
            decision,
            cache,
        })
    }

    /// The request to send for `plan`, in the session's wire format: the view it serves with
    /// media inlined, the host's fields from `opts` passed through (model, tools, …), and for
    /// Anthropic the system prompt in `system` and the requested cache breakpoints. See
    /// [`crate::request`] for the exact bytes. Fails with [`SessionError::StalePlan`] when the
    /// plan can no longer be committed.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// use ctxlog::{Timestamp, CacheTtl, RequestOptions};
    /// let plan = session.plan(Timestamp::from_millis(2_000))?;
    /// let opts = RequestOptions::new().model("claude-sonnet-4-5").max_tokens(1_024).cache_breakpoints(CacheTtl::FiveMinutes);
    /// let request = session.request(&plan, &opts)?;
    /// assert_eq!(
    ///     std::str::from_utf8(request.body())?,
    ///     r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"hi"}]}"#
    /// );
    /// assert_eq!(request.view_digest(), plan.digest);
    /// # Ok(()) }
    /// ```
    pub fn request(&self, plan: &Plan, opts: &RequestOptions) -> Result<Request, SessionError> {
        let _span = self.call_span(plan.call).entered();
        let view = self.served_view(plan)?;
        let request = request::render(&view, self.format(), opts, &StoreBlobs(&self.store));
        if !request.missing_blobs().is_empty() {
            tracing::warn!(missing = request.missing_blobs().len(), "media of the view are missing from the blob area");
        }
        tracing::debug!(bytes = request.body().len(), breakpoints = request.breakpoints(), "request rendered");
        Ok(request)
    }

    /// The request the next call would send if `messages` were appended first, rendered with
    /// `opts`: appends, plan and render on a copy of the state; nothing is written (media
    /// stay inline, no blob is stored) and the session is left as it was. What a proxy answers
    /// `count_tokens` with.
    pub fn preview(
        &self,
        messages: Vec<Message>,
        now: Timestamp,
        opts: &RequestOptions,
    ) -> Result<Request, SessionError> {
        let format = self.format();
        let estimator = self.config().estimator();
        let mut state = self.state.clone();
        for (index, m) in messages.into_iter().enumerate() {
            wire::check_format(&m, format).map_err(|error| SessionError::Message { index, error })?;
            let tokens = estimator.message(&m);
            let ev = Event::MessageAppended(MessageAppended { seq: state.message_count(), message: m, tokens });
            state.apply(state.version() + 1, &ev).map_err(|v| self.refused(v))?;
        }
        let decision = engine::decide(&state, now.as_millis()).map_err(|v| self.refused(v))?;
        let served = decision.scratch.as_ref().unwrap_or(&state);
        let mut cache = ViewCache::new();
        cache.sync(served);
        let digest = cache.digest();
        let view = ServedView {
            state: served,
            items: cache.items(),
            bytes: cache.bytes(),
            cuts: cache.cuts(),
            digest: &digest,
        };
        Ok(request::render(&view, format, opts, &StoreBlobs(&self.store)))
    }

    /// Breakpoints for a client that placed none (Anthropic caches only up to breakpoints): the
    /// system prompt (with the tools before it), the last item of the part of `plan`'s view
    /// the previous call's view had too (the provider may hold it: read), and the view's last
    /// message (the prefix the next call reuses: written). At most 3, by position in the log.
    pub fn auto_breakpoints(&self, plan: &Plan, ttl: CacheTtl) -> Result<Placement, SessionError> {
        let view = self.served_view(plan)?;
        let system = |it: &crate::state::ViewItem| match it.item {
            crate::state::Item::Message(seq) => view.state.entry(seq).is_some_and(|e| e.is_system()),
            crate::state::Item::Summary(_) | crate::state::Item::Placeholder { .. } => false,
        };
        let mut marks = Vec::new();
        if view.items.iter().any(system) {
            marks.push(Mark::System(ttl));
        }
        let reused = plan.reused.min(view.items.len());
        for it in [reused.checked_sub(1).and_then(|i| view.items.get(i)), view.items.last()].into_iter().flatten() {
            let mark = Mark::Message { seq: it.seq, block: None, ttl };
            if !system(it) && !marks.contains(&mark) {
                marks.push(mark);
            }
        }
        Ok(Placement { origin: Origin::Auto, marks })
    }

    /// The span of call `call`: session, call number, the version it starts from.
    fn call_span(&self, call: u64) -> tracing::Span {
        tracing::info_span!("ctxlog.call", session = %self.stream, call, version = self.state.version())
    }

    /// The planned view as the provider needs it: one JSON message per element, media
    /// inlined from the blob area. Missing blobs stay references and are returned.
    pub fn render_plan(&self, plan: &Plan) -> (Vec<String>, Vec<BlobId>) {
        let Ok(view) = self.served_view(plan) else { return (Vec::new(), Vec::new()) };
        let source = StoreBlobs(&self.store);
        let opts = RenderOpts { meta: false, media: Media::Inline(&source) };
        let mut missing = Vec::new();
        let msgs = view
            .items
            .iter()
            .map(|it| {
                let bytes = render_item_with(view.state, it.item, opts, &mut missing);
                String::from_utf8_lossy(bytes.strip_suffix(b"\n").unwrap_or(&bytes)).into_owned()
            })
            .collect();
        (msgs, missing)
    }

    /// The view bytes of a plan (media as references), one JSON message per element.
    pub fn plan_view(&self, plan: &Plan) -> Vec<Arc<[u8]>> {
        self.served_view(plan).map(|v| v.bytes.to_vec()).unwrap_or_default()
    }

    /// The view `plan` serves: its own rendering when it changed the view, else the first
    /// `view_messages` items of the session's (messages appended since come after them).
    fn served_view<'a>(&'a self, plan: &'a Plan) -> Result<ServedView<'a>, SessionError> {
        self.check_fresh(plan)?;
        let (state, cache) = match (&plan.decision.scratch, &plan.cache) {
            (Some(scratch), Some(cache)) => (scratch, cache),
            _ => (&self.state, &self.cache),
        };
        let n = usize::try_from(plan.view_messages).unwrap_or(usize::MAX);
        let (items, bytes) = (cache.items(), cache.bytes());
        Ok(ServedView {
            state,
            items: items.get(..n).unwrap_or(items),
            bytes: bytes.get(..n).unwrap_or(bytes),
            cuts: cache.cuts(),
            digest: &plan.digest,
        })
    }

    /// Commits a dispatched call: its tentative events plus `RequestServed`, as one batch.
    /// `at` is when the dispatch completed; `usage` what the provider reported for it, if known.
    ///
    /// Messages appended since the plan was made do not make it stale: they were not part of
    /// the view it served, which is what `RequestServed` records (its digest is the one sent).
    /// Anything else written since (another call's commit, a prepared summary, a restore) does:
    /// [`SessionError::StalePlan`], and nothing is written.
    ///
    /// The meter anchors on the reported prompt total ([`Usage::prompt_total`]) unless it is
    /// below `usage_floor_ratio ×` the estimate of the served view: such a report is recorded
    /// but not trusted, and raises `usage_below_estimate` once.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// use ctxlog::{Timestamp, Event, Usage};
    /// let plan = session.plan(Timestamp::from_millis(2_000))?;
    /// // The provider's usage object, as Anthropic returns it: most of the prompt from the cache.
    /// let usage = serde_json::json!({"input_tokens": 3, "cache_read_input_tokens": 7, "output_tokens": 20});
    /// let committed = session.commit(plan, Timestamp::from_millis(2_500), Some(Usage::from_anthropic(&usage)?))?;
    /// let Some(Event::RequestServed(served)) = committed.events.last() else { unreachable!() };
    /// assert_eq!(served.reported_tokens, Some(10)); // the whole prompt, cache included
    /// # Ok(()) }
    /// ```
    pub fn commit(&mut self, plan: Plan, at: Timestamp, usage: Option<Usage>) -> Result<Committed, SessionError> {
        self.commit_with(plan, at, usage, None, Vec::new())
    }

    /// [`Session::commit`], recording what the request carried besides its messages: `opts`
    /// are the options it was rendered with ([`Session::request`]). Its `model`, its cache
    /// breakpoints and its `tools` (stored once per distinct value in the blob area) go into
    /// `RequestServed`, so a fork summary can rebuild this request byte for byte. A call
    /// committed with plain [`Session::commit`] is recorded as not saying (tools unknown), and
    /// a fork refuses to append to it. Fails like `commit`, and with a store error when the
    /// tools cannot be written (then nothing is).
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat, RequestOptions, Event};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// let opts = RequestOptions::new().model("claude-sonnet-4-5").tools(r#"[{"name":"ls","input_schema":{"type":"object"}}]"#)?;
    /// let plan = session.plan(Timestamp::from_millis(2_000))?;
    /// let request = session.request(&plan, &opts)?;
    /// // ... send request.body() ...
    /// let committed = session.commit_request(plan, &opts, Timestamp::from_millis(2_500), None)?;
    /// let Some(Event::RequestServed(served)) = committed.events.last() else { unreachable!() };
    /// assert_eq!(served.request.as_ref().and_then(|r| r.model.as_deref()), Some("claude-sonnet-4-5"));
    /// # Ok(()) }
    /// ```
    pub fn commit_request(
        &mut self,
        plan: Plan,
        opts: &RequestOptions,
        at: Timestamp,
        usage: Option<Usage>,
    ) -> Result<Committed, SessionError> {
        self.check_fresh(&plan)?;
        let tools = self.tools_record(opts)?;
        let record = RequestRecord {
            model: opts.model_name(),
            tools,
            breakpoints: opts.breakpoints(),
            placement: opts.placement().cloned(),
        };
        self.commit_with(plan, at, usage, Some(record), Vec::new())
    }

    /// [`Session::commit_request`] with the assistant message the provider answered, recorded
    /// in the same atomic batch as an [`AnswerReceived`] event (a record of the call, not a
    /// message of the conversation: the client's next request brings its own copy). A host
    /// that relays answers (a proxy) uses it so that the log holds every answer, the last one
    /// of a conversation included. An answer not valid in the session's format is refused.
    pub fn commit_answered(
        &mut self,
        plan: Plan,
        opts: &RequestOptions,
        at: Timestamp,
        usage: Option<Usage>,
        answer: Message,
    ) -> Result<Committed, SessionError> {
        self.commit_answers(plan, opts, at, usage, vec![answer])
    }

    /// [`Session::commit_answered`] for an answer of several messages: a Responses answer's
    /// `output` items (reasoning, messages, function calls), one [`AnswerReceived`] each, in
    /// order, in the same batch.
    pub fn commit_answers(
        &mut self,
        plan: Plan,
        opts: &RequestOptions,
        at: Timestamp,
        usage: Option<Usage>,
        answers: Vec<Message>,
    ) -> Result<Committed, SessionError> {
        for (index, answer) in answers.iter().enumerate() {
            wire::check_format(answer, self.format()).map_err(|error| SessionError::Message { index, error })?;
        }
        let tools = self.tools_record(opts)?;
        let record = RequestRecord {
            model: opts.model_name(),
            tools,
            breakpoints: opts.breakpoints(),
            placement: opts.placement().cloned(),
        };
        self.commit_with(plan, at, usage, Some(record), answers)
    }

    /// The tools a request carried, stored once per distinct value in the blob area.
    fn tools_record(&self, opts: &RequestOptions) -> Result<ToolsRecord, SessionError> {
        Ok(match opts.tools_json() {
            None => ToolsRecord::None,
            Some(json) => {
                let id = summary_call::tools_id(json);
                let known = self.state.last_served().and_then(|l| l.request.as_ref()).map(|r| &r.tools);
                // The same tools as last time are in the blob area already.
                if !matches!(known, Some(ToolsRecord::Blob { id: k, .. }) if *k == id) {
                    self.store.put_blob(json.as_bytes())?;
                }
                ToolsRecord::Blob { id, bytes: json.len() as u64 }
            }
        })
    }

    fn commit_with(
        &mut self,
        plan: Plan,
        at: Timestamp,
        usage: Option<Usage>,
        request: Option<RequestRecord>,
        answers: Vec<Message>,
    ) -> Result<Committed, SessionError> {
        let at = at.as_millis();
        let _span = self.call_span(plan.call).entered();
        self.check_fresh(&plan)?;
        let Plan { decision, cache, digest, view_messages, view_tokens, prefix_reused, call, base_version, .. } = plan;
        let reported = usage.map(|u| u.prompt_total());
        let config = self.config();
        let anchored = reported.is_some_and(|r| config.trusts_usage(r, view_tokens));
        let mut events = decision.events;
        if let (Some(r), false) = (reported, anchored) {
            let detail = format!(
                "the provider reported {} prompt tokens for a view estimated at {}, below {}x the estimate; \
                 the meter keeps the estimate. Likely cause: a partial count was passed, such as Anthropic's \
                 `input_tokens` alone (it excludes cache reads and writes): pass the whole usage \
                 (Usage::from_anthropic / from_openai_chat / from_openai_responses)",
                thousands(r),
                thousands(view_tokens),
                config.usage_floor_ratio
            );
            let guard = guards::raise(&self.state, call, GuardKind::UsageBelowEstimate, detail, "usage_floor_ratio");
            events.extend(guard);
        }
        let served = Event::RequestServed(RequestServed {
            call,
            at,
            digest,
            view_messages,
            view_tokens,
            metered_tokens: decision.metered_tokens,
            reported_tokens: reported,
            level: decision.level,
            needed: decision.needed,
            prefix_reused,
            deferred: decision.deferred,
            usage,
            anchored,
            request,
        });
        let first = self.state.version() + 1;
        let planned_here = base_version == self.state.version();
        let scratch = match decision.scratch {
            // Only appends since the plan: its decisions are taken again on top of them.
            Some(_) if !planned_here => Some(self.replayed(&events, first)?),
            // The scratch state holds the decided events; add the usage guard, if any.
            Some(mut next) => {
                let decided = usize::try_from(next.version() - base_version).unwrap_or(usize::MAX);
                for (ev, version) in events.iter().skip(decided).zip(next.version() + 1..) {
                    next.apply(version, ev).map_err(|v| self.refused(v))?;
                }
                Some(next)
            }
            None if events.is_empty() => None,
            None => Some(self.replayed(&events, first)?),
        };
        let version = match scratch {
            // The view changed: the scratch state already holds the batch; finish it there.
            Some(mut next) => {
                next.apply(first + events.len() as u64, &served).map_err(|v| self.refused(v))?;
                events.push(served);
                for message in answers {
                    let ev = Event::AnswerReceived(AnswerReceived { call, message });
                    next.apply(first + events.len() as u64, &ev).map_err(|v| self.refused(v))?;
                    events.push(ev);
                }
                self.persist(events.clone(), next)?
            }
            // Only `RequestServed` (and the answer): validate in place, no copy of the state.
            None => {
                self.state.check_event(first, &served).map_err(|v| self.refused(v))?;
                events.push(served);
                // The answer's only rule is that its call is served: checked against the count.
                for message in answers {
                    events.push(Event::AnswerReceived(AnswerReceived { call, message }));
                }
                self.persist_then_apply(events.clone())?
            }
        };
        if let Some(c) = cache {
            self.cache = c;
        }
        crate::trace::committed(&events, version);
        Ok(Committed { version, events })
    }

    /// Is `plan` still committable here: this session's, and nothing but appends since?
    fn check_fresh(&self, plan: &Plan) -> Result<(), SessionError> {
        let (changed, by) = self.settled;
        let stale = |by| SessionError::StalePlan { planned: plan.base_version, current: self.state.version(), by };
        if plan.stream != self.stream {
            return Err(stale(StaleCause::OtherSession));
        }
        if changed > plan.base_version || plan.base_version > self.state.version() {
            tracing::info!(planned = plan.base_version, changed_at = changed, %by, "stale plan");
            return Err(stale(by));
        }
        Ok(())
    }

    /// Drops a plan: nothing was written, nothing changes; the next call decides again.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// let plan = session.plan(Timestamp::from_millis(2_000))?;
    /// // ... the provider call failed ...
    /// session.abort(plan);
    /// assert_eq!(session.plan(Timestamp::from_millis(3_000))?.call(), 0); // the same call, decided again
    /// # Ok(()) }
    /// ```
    pub fn abort(&mut self, plan: Plan) {
        drop(plan);
    }
}
