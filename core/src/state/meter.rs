//! The calls and the meter: how many calls were served and when the last one was (numbered 0,
//! 1, 2, …, never back in time), what it served (the prefix a fork summary appends to), the
//! provider's report the meter anchors on, and the breaker's count of passes that ended over the
//! budget. It owns the rules of `RequestServed` and `AnswerReceived`.

use serde::{Deserialize, Serialize};

use super::invariant::{Broken, Invariant};
use crate::event::{Event, RequestRecord};
use crate::time::Millis;

/// The provider-reported usage the meter anchors on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anchor {
    /// Reported input tokens of the call.
    pub reported: u64,
    /// Our estimate of that call's view.
    pub estimate: u64,
    /// View generation of that call (the anchor is void once the history changes).
    pub generation: u64,
}

/// What the last `RequestServed` recorded: the prefix a fork summary appends to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastServed {
    /// Its call number.
    pub call: u64,
    /// Digest of its view.
    pub digest: String,
    /// Messages in its view.
    pub view_messages: u64,
    /// Estimated tokens of its view.
    pub view_tokens: u64,
    /// What it carried besides the messages, if the host said.
    pub request: Option<RequestRecord>,
}

/// The sub-fold of the calls. Fields are `pub(super)` for the snapshot layout; only
/// [`Meter::apply`] writes them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Meter {
    pub(super) calls: u64,
    pub(super) last_request_at: Option<Millis>,
    pub(super) anchor: Option<Anchor>,
    /// The last trusted report and its view's estimate: the provider's rate, kept across
    /// history changes and calls without a report.
    pub(super) rate: Option<(u64, u64)>,
    pub(super) breaker: u32,
    pub(super) last_served: Option<LastServed>,
}

impl Meter {
    pub(super) fn check(&self, ev: &Event) -> Result<(), Broken> {
        match ev {
            // An answer follows the call it answers.
            Event::AnswerReceived(e) if e.call >= self.calls => Err((
                Invariant::CallSequence,
                format!("an answer to call {} after {} calls were served", e.call, self.calls),
            )),
            Event::RequestServed(e) if e.call != self.calls => {
                Err((Invariant::CallSequence, format!("call {} served after {} calls", e.call, self.calls)))
            }
            Event::RequestServed(e) => match self.last_request_at {
                Some(last) if e.at < last => Err((
                    Invariant::TimeBackwards,
                    format!("served at {} ms, before the previous call at {last} ms", e.at),
                )),
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Lenient replay: a call renumbered in sequence and moved to the last call's instant.
    pub(super) fn repair(&self, ev: &Event, invariant: Invariant) -> Option<Event> {
        match (ev, invariant) {
            (Event::RequestServed(e), Invariant::TimeBackwards | Invariant::CallSequence) => {
                let mut e = e.clone();
                e.at = e.at.max(self.last_request_at.unwrap_or(0));
                e.call = self.calls;
                Some(Event::RequestServed(e))
            }
            _ => None,
        }
    }

    /// `generation`: the view's, which the call served; `budget`: the knob in force.
    pub(super) fn apply(&mut self, ev: &Event, generation: u64, budget: u64) {
        let Event::RequestServed(e) = ev else { return };
        self.calls = e.call + 1;
        self.last_request_at = Some(e.at);
        self.last_served = Some(LastServed {
            call: e.call,
            digest: e.digest.clone(),
            view_messages: e.view_messages,
            view_tokens: e.view_tokens,
            request: e.request.clone(),
        });
        // A report the commit did not trust leaves the meter on the estimate.
        self.anchor = e.reported_tokens.filter(|_| e.anchored).map(|reported| Anchor {
            reported,
            estimate: e.view_tokens,
            generation,
        });
        if let Some(a) = self.anchor {
            self.rate = Some((a.reported, a.estimate));
        }
        if e.needed && e.metered_tokens > budget {
            self.breaker += 1;
        } else {
            self.breaker = 0;
        }
    }

    /// See [`super::State::metered_tokens`]; `generation` is the view's now.
    pub(super) fn metered(&self, estimate: u64, generation: u64) -> u64 {
        let scaled = |n: u64, (reported, est): (u64, u64)| -> u64 {
            match reported > est && est > 0 {
                true => u64::try_from(u128::from(n) * u128::from(reported) / u128::from(est)).unwrap_or(u64::MAX),
                false => n,
            }
        };
        match self.anchor {
            Some(a) if a.generation == generation => {
                let added = scaled(estimate.saturating_sub(a.estimate), (a.reported, a.estimate));
                a.reported.saturating_add(added)
            }
            _ => self.rate.map_or(estimate, |r| scaled(estimate, r)),
        }
    }
}

impl super::State {
    /// Calls served so far.
    pub fn calls(&self) -> u64 {
        self.meter.calls
    }

    /// When the last call completed.
    pub fn last_request_at(&self) -> Option<Millis> {
        self.meter.last_request_at
    }

    /// Consecutive passes that needed compaction and still ended over the budget.
    pub fn breaker_count(&self) -> u32 {
        self.meter.breaker
    }

    /// The provider's rate the meter counts at: the last trusted report and its view's
    /// estimate (`None` before any).
    pub fn provider_rate(&self) -> Option<(u64, u64)> {
        self.meter.rate
    }

    /// The last served request, if any.
    pub fn last_served(&self) -> Option<&LastServed> {
        self.meter.last_served.as_ref()
    }

    /// The meter: the last provider-reported total plus the estimate of what was added since,
    /// or the plain estimate when there is no valid anchor. What was added is counted at the
    /// rate the provider counted the anchored view (reported ÷ estimate) when that is above 1:
    /// a provider whose tokenizer counts 30% more than the estimate will count the new messages
    /// 30% higher too, and a cache-aware session may let the meter reach the budget itself.
    /// Once the history changed (a flush, an edit, a restore) the anchor's total no longer
    /// applies, but the provider still counts at its rate: the whole estimate is scaled by the
    /// last trusted rate above 1 (issue 21: the call after a restore went over the budget by
    /// the provider's count while the plain estimate said it fit).
    pub fn metered_tokens(&self, estimate: u64) -> u64 {
        self.meter.metered(estimate, self.view.generation)
    }
}

#[cfg(test)]
mod tests {
    use super::super::given::*;
    use super::super::Invariant;

    #[test]
    fn given_a_served_call_when_the_next_is_earlier_or_misnumbered_then_it_is_refused() {
        let history = conversation_then(vec![request_served(0, 10)]);
        given(history.clone()).when(request_served(1, 9)).then_violates(Invariant::TimeBackwards);
        given(history.clone()).when(request_served(0, 11)).then_violates(Invariant::CallSequence);
        given(history.clone()).when(answer(1)).then_violates(Invariant::CallSequence);
        let st = given(history).when(request_served(1, 10)).then_ok();
        assert_eq!((st.calls(), st.last_request_at()), (2, Some(T0 + 10)));
    }

    #[test]
    fn given_calls_over_the_budget_when_one_needs_no_compaction_then_the_breaker_resets() {
        let over = |call| served_metered(call, 10 + call, true, 10_000_000);
        let st = fold(&conversation_then(vec![over(0), over(1)]));
        assert_eq!(st.breaker_count(), 2);
        let st =
            given(conversation_then(vec![over(0), over(1)])).when(served_metered(2, 20, false, 10_000_000)).then_ok();
        assert_eq!(st.breaker_count(), 0);
    }

    #[test]
    fn given_an_anchored_report_when_the_history_changes_then_the_meter_keeps_only_the_rate() {
        let mut served = request_served(0, 10);
        if let crate::event::Event::RequestServed(e) = &mut served {
            (e.reported_tokens, e.anchored, e.view_tokens) = (Some(1_300), true, 1_000);
        }
        let history = conversation_then(vec![served, summary_prepared(0, 2)]);
        let st = fold(&history);
        assert_eq!(st.metered_tokens(1_100), 1_300 + 130, "the anchor plus what was added, at the provider's rate");
        let st = given(history).when(flushed(0, 2)).then_ok();
        assert_eq!(st.metered_tokens(1_000), 1_300, "after a flush only the rate applies");
    }
}
