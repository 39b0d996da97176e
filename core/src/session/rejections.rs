//! What a session refuses and what it records being refused: a command that would break an
//! invariant (nothing written), a call the provider refused (`CallRejected`, `LimitLearned`),
//! and what a host records outside a call (a guard, a compaction the provider made).

use crate::error::{SessionError, StaleCause};
use crate::event::{CallRejected, Event, GuardKind, LimitLearned, ProviderCompacted};
use crate::state::Violation;
use crate::store::{Store, Version};
use crate::time::Timestamp;

use super::{Committed, Plan, Session};

/// What [`Session::reject_call`] wrote.
#[derive(Debug, Clone)]
pub struct CallRejectedOutcome {
    /// The batch (`CallRejected`, and `LimitLearned` when a limit was learned).
    pub committed: Committed,
    /// The budget the learned limit set, if one was learned.
    pub budget: Option<u64>,
}

impl<S: Store> Session<S> {
    /// Records a compaction the provider made on the client's request outside a call (OpenAI
    /// `POST /v1/responses/compact`), durably, as one `ProviderCompacted` record: the history
    /// the client sends next may start from its output. Nothing else changes.
    pub fn record_provider_compaction(&mut self, compaction: ProviderCompacted) -> Result<Version, SessionError> {
        self.persist_then_apply(vec![Event::ProviderCompacted(compaction)])
    }

    /// A command that would break an invariant: refused before anything is written.
    pub(super) fn refused(&self, violation: Violation) -> SessionError {
        SessionError::Refused { stream: self.stream, violation }
    }

    /// Records that the provider refused `plan`'s request (an HTTP error status: read its body
    /// with [`crate::overflow::parse_rejection`]) instead of dropping it silently: a
    /// `CallRejected`, and, when the rejection says the prompt is over the model's context and
    /// gives the limit, a `LimitLearned` that lowers the session's budget for every later plan
    /// (it is in the log, so also after a restart). Plan again and retry: the new plan fits the
    /// lowered budget.
    ///
    /// ```
    /// # use ctxlog::{Timestamp, parse_message, Config, MemoryStore, Session, StreamId, WireFormat};
    /// # use ctxlog::overflow::parse_rejection;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = MemoryStore::new();
    /// # let mut session = Session::create(&store, StreamId::random(), WireFormat::OpenAi, Config::default(), Timestamp::from_millis(1_000))?;
    /// # session.append(vec![parse_message(r#"{"role":"user","content":"hi"}"#)?])?;
    /// let plan = session.plan(Timestamp::from_millis(2_000))?;
    /// let body = br#"{"error":{"code":400,"message":"request (9000 tokens) exceeds the available context size (8192 tokens)","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#;
    /// let learned = session.reject_call(plan, &parse_rejection(400, body), None, Timestamp::from_millis(2_100))?;
    /// assert!(learned.budget.is_some());
    /// assert!(session.config().budget <= 8_192);
    /// # Ok(()) }
    /// ```
    pub fn reject_call(
        &mut self,
        plan: Plan,
        rejection: &crate::overflow::Rejection,
        model: Option<&str>,
        at: Timestamp,
    ) -> Result<CallRejectedOutcome, SessionError> {
        if plan.stream != self.stream {
            let current = self.state.version();
            return Err(SessionError::StalePlan { planned: plan.base_version, current, by: StaleCause::OtherSession });
        }
        let call = plan.call;
        let mut events = vec![Event::CallRejected(CallRejected {
            call,
            at: at.as_millis(),
            model: model.map(str::to_owned),
            status: rejection.status,
            error: rejection.error.clone(),
            message: rejection.message.clone(),
            overflow: rejection.overflow,
            prompt_tokens: rejection.prompt_tokens,
            limit: rejection.limit,
            view_tokens: plan.view_tokens,
        })];
        let mut budget = None;
        if let (true, Some(limit)) = (rejection.overflow, rejection.limit) {
            let learned = crate::overflow::learned_budget(limit, rejection.prompt_tokens, plan.view_tokens);
            // Only news is written: a budget already at or below it learns nothing.
            if learned < self.config().budget {
                events.push(Event::LimitLearned(LimitLearned {
                    call,
                    model: model.map(str::to_owned),
                    limit,
                    budget: learned,
                }));
                budget = Some(learned);
            }
        }
        drop(plan);
        tracing::warn!(
            session = %self.stream,
            call,
            status = rejection.status,
            error = %rejection.error,
            overflow = rejection.overflow,
            learned = budget,
            "call rejected by the provider"
        );
        let version = self.persist_then_apply(events.clone())?;
        Ok(CallRejectedOutcome { committed: Committed { version, events }, budget })
    }

    /// Records a guard a host raised outside a call (e.g. the proxy's
    /// [`GuardKind::HistoryDiverged`]): one `GuardRaised` event with no call. Raising a kind
    /// that is already latched writes nothing and returns the current version.
    pub fn raise_guard(&mut self, kind: GuardKind, detail: String, knob: &str) -> Result<Version, SessionError> {
        if self.state.raised().contains(&kind) {
            return Ok(self.state.version());
        }
        let events =
            vec![Event::GuardRaised(crate::event::GuardRaised { call: None, kind, detail, knob: knob.into() })];
        let version = self.persist_then_apply(events.clone())?;
        // `-v` shows a host's guard (a divergence) like the engine's own.
        crate::trace::committed(&events, version);
        Ok(version)
    }
}
