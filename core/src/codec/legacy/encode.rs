//! Events written in their old layouts: what the upcasts are tested against besides the golden
//! logs. Frozen like the layouts themselves.

use super::*;

/// Encodes `event` the way the first release did, if that layout can hold it: new knobs at
/// their defaults, no condensed summary, no deferral; events whose layout never changed are
/// encoded as today. `None` when the event needs a newer kind.
pub fn encode(event: &Event) -> Option<Result<Record, EncodeError>> {
    Some(match event {
        Event::SessionStarted(e) => {
            let c = &e.config;
            let v1 = ConfigV1 {
                budget: c.budget,
                trigger_ratio: c.trigger_ratio,
                target_ratio: c.target_ratio,
                prepare_ratio: c.prepare_ratio,
                summarizer: c.summarizer,
                cache_aware: c.cache_aware,
                flush_ttl_ms: c.flush_ttl_ms,
                protected_tool_results: c.protected_tool_results,
                protected_recent_ratio: c.protected_recent_ratio,
                breaker_passes: c.breaker_passes,
                image_tokens: c.image_tokens,
                truncate_chars: c.truncate_chars,
            };
            if Config::from(v1.clone()) != *c || e.import.is_some() {
                return None;
            }
            let e = SessionStartedV1 { session: e.session, format: e.format, config: v1, at: e.at };
            payload(kind::SESSION_STARTED_V1, &e)
        }
        Event::SummaryPrepared(e) if e.merged.is_empty() && summary_facts_absent(e) => {
            let v1 = SummaryPreparedV1 {
                from: e.from,
                to: e.to,
                text: e.text.clone(),
                tokens: e.tokens,
                replaced_tokens: e.replaced_tokens,
                mode_requested: e.mode_requested,
                mode_used: e.mode_used,
                refusal: e.refusal.clone(),
            };
            payload(kind::SUMMARY_PREPARED_V1, &v1)
        }
        Event::Flushed(e) if e.condensed.is_empty() => {
            let v1 = FlushedV1 {
                from: e.from,
                to: e.to,
                reason: e.reason,
                cache_age_ms: e.cache_age_ms,
                tokens_before: e.tokens_before,
                tokens_after: e.tokens_after,
                stubbed: e.stubbed.clone(),
            };
            payload(kind::FLUSHED_V1, &v1)
        }
        Event::RequestServed(e)
            if e.deferred.is_none()
                && e.usage.is_none()
                && e.anchored == e.reported_tokens.is_some()
                && e.request.is_none() =>
        {
            let v1 = RequestServedV1 {
                call: e.call,
                at: e.at,
                digest: e.digest.clone(),
                view_messages: e.view_messages,
                view_tokens: e.view_tokens,
                metered_tokens: e.metered_tokens,
                reported_tokens: e.reported_tokens,
                level: e.level,
                needed: e.needed,
                prefix_reused: e.prefix_reused,
            };
            payload(kind::REQUEST_SERVED_V1, &v1)
        }
        Event::SummaryPrepared(_)
        | Event::Flushed(_)
        | Event::RequestServed(_)
        | Event::SummaryRetired(_)
        | Event::ImportCompleted(_)
        | Event::SummaryFailed(_)
        | Event::AnswerReceived(_)
        | Event::Branched(_)
        | Event::SessionNamed(_)
        | Event::CallRejected(_)
        | Event::LimitLearned(_)
        | Event::Pinned(_)
        | Event::ProviderCompacted(_) => return None,
        Event::Edited(e) if !e.kind.in_first_layout() => return None,
        other => crate::codec::encode(other),
    })
}

/// Encodes `event` in the second layout set's kinds 9 (`SessionStarted` without
/// `usage_floor_ratio`), 14 (the same, of an import) and 11 (`RequestServed` without `usage`
/// and `anchored`), if that layout can hold it; `None` for other events, or when the event
/// needs a newer kind.
pub fn encode_v2(event: &Event) -> Option<Result<Record, EncodeError>> {
    match event {
        Event::SessionStarted(e) => {
            let c = &e.config;
            let v2 = ConfigV2 {
                budget: c.budget,
                trigger_ratio: c.trigger_ratio,
                target_ratio: c.target_ratio,
                prepare_ratio: c.prepare_ratio,
                summarizer: c.summarizer,
                cache_aware: c.cache_aware,
                flush_ttl_ms: c.flush_ttl_ms,
                protected_tool_results: c.protected_tool_results,
                protected_recent_ratio: c.protected_recent_ratio,
                breaker_passes: c.breaker_passes,
                image_tokens: c.image_tokens,
                truncate_chars: c.truncate_chars,
                summary_share: c.summary_share,
                hard_limit_ratio: c.hard_limit_ratio,
                clear_at_least: c.clear_at_least,
            };
            if Config::from(v2.clone()) != *c {
                return None;
            }
            Some(match &e.import {
                None => {
                    let e = SessionStartedV2 { session: e.session, format: e.format, config: v2, at: e.at };
                    payload(kind::SESSION_STARTED_V2, &e)
                }
                Some(_) => {
                    let (session, format, at, import) = (e.session, e.format, e.at, e.import.clone());
                    payload(
                        kind::SESSION_STARTED_V2_IMPORT,
                        &SessionStartedV2Import { session, format, config: v2, at, import },
                    )
                }
            })
        }
        Event::RequestServed(e)
            if e.usage.is_none() && e.anchored == e.reported_tokens.is_some() && e.request.is_none() =>
        {
            let v2 = RequestServedV2 {
                call: e.call,
                at: e.at,
                digest: e.digest.clone(),
                view_messages: e.view_messages,
                view_tokens: e.view_tokens,
                metered_tokens: e.metered_tokens,
                reported_tokens: e.reported_tokens,
                level: e.level,
                needed: e.needed,
                prefix_reused: e.prefix_reused,
                deferred: e.deferred.clone(),
            };
            Some(payload(kind::REQUEST_SERVED_V2, &v2))
        }
        _ => None,
    }
}

/// Encodes a `SessionStarted` of view version 1 that is not an import in kind 16 (before
/// `import`); `None` for other events, for imports and for later view versions.
pub fn encode_v3(event: &Event) -> Option<Result<Record, EncodeError>> {
    match event {
        Event::SessionStarted(e) if e.import.is_none() => {
            let v3 =
                SessionStartedV3 { session: e.session, format: e.format, config: ConfigV3::of(&e.config)?, at: e.at };
            Some(payload(kind::SESSION_STARTED_V3, &v3))
        }
        _ => None,
    }
}

/// Does `e` carry nothing a summary before kind 21 could not hold?
fn summary_facts_absent(e: &SummaryPrepared) -> bool {
    e.prefix_call.is_none() && e.usage.is_none() && e.latency_ms.is_none() && e.mode_requested != SummaryMode::Auto
}

/// Encodes in the fourth layout set's kinds 10 (`SummaryPrepared` before the summarizer's
/// facts) and 17 (`RequestServed` before the request record), if that layout can hold the
/// event; `None` otherwise.
pub fn encode_v4(event: &Event) -> Option<Result<Record, EncodeError>> {
    match event {
        Event::SummaryPrepared(e) if summary_facts_absent(e) => {
            let v2 = SummaryPreparedV2 {
                from: e.from,
                to: e.to,
                text: e.text.clone(),
                tokens: e.tokens,
                replaced_tokens: e.replaced_tokens,
                mode_requested: e.mode_requested,
                mode_used: e.mode_used,
                refusal: e.refusal.clone(),
                merged: e.merged.clone(),
            };
            Some(payload(kind::SUMMARY_PREPARED_V2, &v2))
        }
        Event::RequestServed(e) if e.request.is_none() => {
            let v3 = RequestServedV3 {
                call: e.call,
                at: e.at,
                digest: e.digest.clone(),
                view_messages: e.view_messages,
                view_tokens: e.view_tokens,
                metered_tokens: e.metered_tokens,
                reported_tokens: e.reported_tokens,
                level: e.level,
                needed: e.needed,
                prefix_reused: e.prefix_reused,
                deferred: e.deferred.clone(),
                usage: e.usage,
                anchored: e.anchored,
            };
            Some(payload(kind::REQUEST_SERVED_V3, &v3))
        }
        _ => None,
    }
}

/// Encodes in the fifth layout set's kinds 18 (`SessionStarted` before `view_version`, for
/// view version 1) and 20 (`RequestServed` whose request record places no breakpoints by
/// position), if that layout can hold the event; `None` otherwise.
pub fn encode_v5(event: &Event) -> Option<Result<Record, EncodeError>> {
    match event {
        Event::SessionStarted(e) => {
            let v4 = SessionStartedV4 {
                session: e.session,
                format: e.format,
                config: ConfigV3::of(&e.config)?,
                at: e.at,
                import: e.import.clone(),
            };
            Some(payload(kind::SESSION_STARTED_V4, &v4))
        }
        Event::RequestServed(e) if e.request.as_ref().is_none_or(|r| r.placement.is_none()) => {
            let v4 = RequestServedV4 {
                call: e.call,
                at: e.at,
                digest: e.digest.clone(),
                view_messages: e.view_messages,
                view_tokens: e.view_tokens,
                metered_tokens: e.metered_tokens,
                reported_tokens: e.reported_tokens,
                level: e.level,
                needed: e.needed,
                prefix_reused: e.prefix_reused,
                deferred: e.deferred.clone(),
                usage: e.usage,
                anchored: e.anchored,
                request: e.request.as_ref().map(|r| RequestRecordV1 {
                    model: r.model.clone(),
                    tools: r.tools.clone(),
                    breakpoints: r.breakpoints,
                }),
            };
            Some(payload(kind::REQUEST_SERVED_V4, &v4))
        }
        _ => None,
    }
}

/// Encodes a `SessionStarted` whose parity knobs are at their defaults in kind 26 (before
/// kind 31), and an `Edited` of the first three kinds in kind 5; `None` otherwise.
pub fn encode_v6(event: &Event) -> Option<Result<Record, EncodeError>> {
    match event {
        Event::SessionStarted(e) => {
            let v5 = SessionStartedV5 {
                session: e.session,
                format: e.format,
                config: ConfigV4::of(&e.config)?,
                at: e.at,
                import: e.import.clone(),
            };
            Some(payload(kind::SESSION_STARTED_V5, &v5))
        }
        Event::Edited(e) if e.kind.in_first_layout() => Some(payload(kind::EDITED, e)),
        _ => None,
    }
}
