//! A call the provider refused: recorded in the log (`CallRejected`), and, when the refusal
//! says the prompt is over the model's context and gives its limit, the limit is learned
//! (`LimitLearned`: the session's budget from then on), the call re-planned to fit and sent
//! once more before the client hears anything — as opencode's compaction retries an
//! overflowing step once after compacting. A second refusal goes to the client as it came.

use bytes::Bytes;
use ctxlog::overflow::parse_rejection;
use ctxlog::{Plan, RequestOptions};

use crate::sessions::Held;

/// What placing a retry's breakpoints needs of the request (see `crate::breakpoints::options`).
pub(crate) struct Replace {
    pub asked: std::sync::Arc<crate::breakpoints::Asked>,
    pub items: usize,
    pub has_system: bool,
    /// The client's per-request knobs (`context_management` applied): the retry plans with them.
    pub knobs: ctxlog::CallKnobs,
}

/// The budgets learned from overflows in this process, by model name.
#[derive(Default)]
pub(crate) struct Limits(std::sync::Mutex<std::collections::HashMap<String, u64>>);

impl Limits {
    /// `config` for a new session of `model`: its budget within what that model was learned to take.
    pub fn config_for(&self, config: &ctxlog::Config, model: Option<&str>) -> ctxlog::Config {
        let mut c = config.clone();
        if let Some(b) = model.and_then(|m| self.0.lock().unwrap_or_else(|p| p.into_inner()).get(m).copied()) {
            c.budget = c.budget.min(b);
        }
        c
    }

    fn learn(&self, model: &str, budget: u64) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let b = map.entry(model.to_owned()).or_insert(budget);
        *b = (*b).min(budget);
    }
}

/// What to do after a refusal.
pub(crate) enum AfterRejection {
    /// Send this body, planned within the learned limit, with this plan.
    Retry {
        /// The slot and lease, still held.
        held: Held,
        /// The new plan (same call number), boxed: a plan is large.
        plan: Box<Plan>,
        /// Its request body.
        body: Vec<u8>,
        /// The options it was rendered with (the breakpoints placed on the new view).
        opts: RequestOptions,
        /// `x-ctxlog-breakpoints` for it.
        breakpoints: Option<http::HeaderValue>,
    },
    /// Pass the provider's answer on to the client.
    Answer,
}

/// Records the refusal of `plan` (status and body as the provider sent them) and decides
/// whether to retry (`may_retry`: not after a retry already). Runs the session's writes on the
/// blocking pool.
#[allow(clippy::too_many_arguments)] // the refused call's parts, each from a different place
pub(crate) async fn on_rejection(
    limits: &Limits,
    replace: &Replace,
    held: Held,
    plan: Plan,
    opts: &RequestOptions,
    status: u16,
    body: &Bytes,
    may_retry: bool,
) -> AfterRejection {
    let opts = opts.clone();
    let body = body.clone();
    let model = opts.model_name();
    let (asked, items, has_system) = (std::sync::Arc::clone(&replace.asked), replace.items, replace.has_system);
    let knobs = replace.knobs.clone();
    let done = tokio::task::spawn_blocking(move || {
        let mut held = held;
        let rejection = parse_rejection(status, &body);
        let Some(session) = held.session_mut() else { return (AfterRejection::Answer, None) };
        let model = opts.model_name();
        let now = ctxlog::Timestamp::from_system_time(std::time::SystemTime::now());
        let learned = match session.reject_call(plan, &rejection, model.as_deref(), now) {
            Ok(out) => out.budget,
            Err(e) => {
                tracing::error!(session = %session.id(), error = %e, "the provider's refusal could not be logged");
                return (AfterRejection::Answer, None);
            }
        };
        let (true, Some(budget)) = (may_retry, learned) else { return (AfterRejection::Answer, learned) };
        let planned = session.plan_with(now, &knobs).and_then(|plan| {
            let (opts, origin) = crate::breakpoints::options(session, &plan, items, has_system, &asked, &opts)?;
            let request = session.request(&plan, &opts)?;
            let breakpoints = origin.and_then(|o| crate::breakpoints::header(request.breakpoints(), o, &asked));
            Ok((request, plan, opts, breakpoints))
        });
        match planned {
            Ok((request, plan, opts, breakpoints)) => {
                tracing::info!(
                    session = %session.id(),
                    budget,
                    view_tokens = plan.view_tokens,
                    "over the model's context: re-planned within the learned limit, sent once more"
                );
                let body = request.into_body();
                (AfterRejection::Retry { held, plan: Box::new(plan), body, opts, breakpoints }, learned)
            }
            Err(e) => {
                tracing::error!(session = %session.id(), error = %e, "re-planning after an overflow failed");
                (AfterRejection::Answer, learned)
            }
        }
    })
    .await;
    let (after, learned) = done.unwrap_or((AfterRejection::Answer, None));
    if let (Some(m), Some(b)) = (model, learned) {
        limits.learn(&m, b);
    }
    after
}
