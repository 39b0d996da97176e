//! A call the provider refused: recorded in the log (`CallRejected`), and, when the refusal
//! says the prompt is over the model's context and gives its limit, the limit is learned
//! (`LimitLearned`: the session's budget from then on), the call re-planned to fit and sent
//! once more before the client hears anything — as opencode's compaction retries an
//! overflowing step once after compacting. A second refusal goes to the client as it came.

use bytes::Bytes;
use ctxlog::overflow::parse_rejection;
use ctxlog::{Plan, RequestOptions};

use crate::sessions::Held;

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
    },
    /// Pass the provider's answer on to the client.
    Answer,
}

/// Records the refusal of `plan` (status and body as the provider sent them) and decides
/// whether to retry (`may_retry`: not after a retry already). Runs the session's writes on the
/// blocking pool.
pub(crate) async fn on_rejection(
    held: Held,
    plan: Plan,
    opts: &RequestOptions,
    status: u16,
    body: &Bytes,
    may_retry: bool,
) -> AfterRejection {
    let opts = opts.clone();
    let body = body.clone();
    let done = tokio::task::spawn_blocking(move || {
        let mut held = held;
        let rejection = parse_rejection(status, &body);
        let Some(session) = held.session_mut() else { return AfterRejection::Answer };
        let model = opts.model_name();
        let now = ctxlog::Timestamp::from_system_time(std::time::SystemTime::now());
        let learned = match session.reject_call(plan, &rejection, model.as_deref(), now) {
            Ok(out) => out.budget,
            Err(e) => {
                tracing::error!(session = %session.id(), error = %e, "the provider's refusal could not be logged");
                return AfterRejection::Answer;
            }
        };
        let (true, Some(budget)) = (may_retry, learned) else { return AfterRejection::Answer };
        let planned = session.plan(now).and_then(|plan| Ok((session.request(&plan, &opts)?, plan)));
        match planned {
            Ok((request, plan)) => {
                tracing::info!(
                    session = %session.id(),
                    budget,
                    view_tokens = plan.view_tokens,
                    "over the model's context: re-planned within the learned limit, sent once more"
                );
                AfterRejection::Retry { held, plan: Box::new(plan), body: request.into_body() }
            }
            Err(e) => {
                tracing::error!(session = %session.id(), error = %e, "re-planning after an overflow failed");
                AfterRejection::Answer
            }
        }
    })
    .await;
    done.unwrap_or(AfterRejection::Answer)
}
