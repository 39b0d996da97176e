//! What a session decided, as `tracing` events (target `ctxlog::…`), for the host's logs.
//!
//! The core does no IO: emitting an event is a call into whatever subscriber the host
//! installed, which decides whether anything is written and where. With none, or with the
//! level disabled, each call site costs one relaxed atomic load. Spans (`ctxlog.call`,
//! `ctxlog.append`, `ctxlog.prepare`, …) carry the session, the call number and the version.
//!
//! Nothing above `trace` carries message content: events name seqs, kinds, reasons written by
//! the engine, and numbers.

use crate::event::Event;
use crate::store::Version;

/// One event per decision a committed batch recorded.
pub(crate) fn committed(events: &[Event], version: Version) {
    for ev in events {
        match ev {
            Event::Flushed(f) => tracing::info!(
                from = f.from,
                to = f.to,
                reason = f.reason.as_str(),
                tokens_before = f.tokens_before,
                tokens_after = f.tokens_after,
                condensed = f.condensed.len(),
                "flushed to prepared summaries"
            ),
            Event::Edited(e) => tracing::debug!(
                seq = e.seq,
                kind = e.kind.as_str(),
                level = e.reason.level,
                rule = %e.reason.rule,
                target_tokens = e.reason.target_tokens,
                "edited"
            ),
            Event::SummaryRetired(r) => {
                tracing::info!(summary = r.summary, from = r.from, to = r.to, tokens = r.tokens, "summary retired")
            }
            Event::GuardRaised(g) => {
                tracing::warn!(kind = %g.kind.name(), knob = %g.knob, detail = %g.detail, "guard raised")
            }
            Event::RequestServed(r) => tracing::debug!(
                version,
                view_messages = r.view_messages,
                view_tokens = r.view_tokens,
                metered_tokens = r.metered_tokens,
                reported_tokens = r.reported_tokens,
                cache_read = r.usage.map(|u| u.cache_read),
                anchored = r.anchored,
                level = r.level,
                prefix_reused = r.prefix_reused,
                deferred = r.deferred.as_ref().map(|d| d.as_str()),
                "served"
            ),
            _ => {}
        }
    }
}
