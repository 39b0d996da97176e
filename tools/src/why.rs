//! `ctxlog why --seq N`: one paragraph on one message — when it entered, every decision about it
//! (which call, which rule, which guard, how warm the cache was), where its summary went, and
//! whether the latest view still carries it.

use ctxlog::event::FlushReason;
use ctxlog::internal::view::thousands;
use ctxlog::replay::Mode;
use ctxlog::state::Item;
use ctxlog::time::Millis;
use serde_json::{json, Value};

use crate::analysis::{analyze, open_session, Analysis, Decision, Keep, SummaryHistory, Until, What};
use crate::args::WhyArgs;
use crate::error::CliError;
use crate::lineage::Lineage;
use crate::output::Out;

/// `why`
pub fn why(args: &WhyArgs, out: &mut Out<'_>) -> Result<(), CliError> {
    let (store, id) = open_session(&args.session)?;
    let analysis = analyze(store.as_ref(), id, Mode::Strict, Until::Head, Keep { views: false })?;
    let mut answer = explain(&analysis, args.seq)?;
    let lineage = crate::catalog::lineage_of(store.as_ref(), id, &analysis.links);
    with_session_facts(&mut answer, &analysis, &lineage);
    match args.session.store.json {
        true => out.line(&answer.to_string()),
        false => out.line(answer.get("text").and_then(Value::as_str).unwrap_or_default()),
    }
}

/// Adds what happened to the session as a whole — guards a host raised between calls (where
/// the client's history parted from the log) and the lineage — to the paragraph and the JSON.
pub fn with_session_facts(answer: &mut Value, analysis: &Analysis, lineage: &Lineage) {
    let id = analysis.session;
    let mut text = answer.get("text").and_then(Value::as_str).unwrap_or_default().to_owned();
    for g in &analysis.host_guards {
        let when = g.after_call.map_or_else(|| "Before the first call".to_owned(), |c| format!("After call {c}"));
        text.push_str(&format!(" {when} guard {} was raised: {}.", g.record.kind, g.record.detail));
    }
    // Edges this log records are told by its guards above; the others (where the session came
    // from, a branch recorded in the other log) in a sentence each.
    let told = |l: &&crate::lineage::Link| {
        l.recorded_in.0 == id && analysis.host_guards.iter().any(|g| g.version == l.recorded_in.1)
    };
    for l in lineage.predecessors.iter().chain(&lineage.successors).filter(|l| !told(l)) {
        text.extend(l.describe(id).map(|d| format!(" This session {d}.")));
    }
    if let Some(o) = answer.as_object_mut() {
        o.insert("guards_between_calls".into(), analysis.host_guards.iter().map(|g| g.to_json()).collect());
        o.insert("lineage".into(), lineage.to_json(id));
        o.insert("text".into(), Value::from(text));
    }
}

/// `15:37:43 UTC`.
pub fn clock(ms: Millis) -> String {
    let t = ctxlog::time::format_rfc3339(ms);
    format!("{} UTC", t.get(11..19).unwrap_or(&t))
}

fn secs(ms: u64) -> String {
    let s = ms as f64 / 1000.0;
    if s >= 120.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{s:.0} s")
    }
}

fn summary_name(i: u32, s: &SummaryHistory) -> String {
    let kind = if s.merged.is_empty() { "summary" } else { "condensed summary" };
    format!("{kind} #{i} (seq {}–{})", s.from, s.to.saturating_sub(1))
}

/// The answer as JSON; its `text` is the paragraph.
pub fn explain(analysis: &Analysis, seq: u64) -> Result<Value, CliError> {
    let count = analysis.messages.len() as u64;
    let Some(m) = analysis.messages.get(seq as usize) else {
        return Err(CliError::Flag {
            flag: "--seq",
            message: format!(
                "--seq {seq}: session {} has {}",
                analysis.session,
                match count {
                    0 => "no messages".to_owned(),
                    n => format!("{n} messages (0–{})", n - 1),
                }
            ),
        });
    };
    let config = analysis.state.info().map(|i| i.config.clone()).unwrap_or_default();
    let call_at = |c: u64| analysis.calls.get(c as usize).map(|c| c.at_ms);
    let when = m.appended_after_call.map_or_else(|| "before the first call".to_owned(), |c| format!("after call {c}"));
    let mut text = format!(
        "Message {seq} ({}, {} tokens{}) was appended {when} (version {})",
        m.role,
        thousands(u64::from(m.tokens)),
        if m.gist.is_empty() { String::new() } else { format!("; {}", m.gist) },
        m.appended
    );
    match m.first_call.and_then(|c| Some((c, call_at(c)?))) {
        Some((c, at)) => text.push_str(&format!(" and first sent with call {c} at {}.", clock(at))),
        None => text.push_str(" and has not been sent yet."),
    }
    // A provider's compaction: what the provider reads in place of everything before it.
    let compactions: Vec<u64> =
        (0..count).filter(|s| analysis.messages.get(*s as usize).is_some_and(|h| h.provider_compaction)).collect();
    if m.provider_compaction {
        text.push_str(&format!(
            " It carries the provider's compaction: the provider reads it as the summary of messages 0–{}, so ctxlog              keeps it pinned (never removed, cut or summarized), and a client may stop sending what precedes it.",
            seq.saturating_sub(1)
        ));
    } else if let Some(k) = compactions.iter().find(|k| **k > seq) {
        text.push_str(&format!(" The provider's compaction at seq {k} covers it: the provider no longer reads it."));
    }
    // The summary of messages that covers it, and what became of it.
    let own = analysis.summaries.iter().enumerate().find(|(_, s)| s.merged.is_empty() && s.from <= seq && seq < s.to);
    if let Some((i, s)) = own {
        let when = s.after_call.map_or_else(|| "Before the first call".to_owned(), |c| format!("After call {c}"));
        text.push_str(&format!(
            " {when} it was summarized into {} of seq {}–{} ({} tokens in place of {}).",
            if s.merged.is_empty() { format!("summary #{i}") } else { format!("condensed summary #{i}") },
            s.from,
            s.to.saturating_sub(1),
            thousands(u64::from(s.tokens)),
            thousands(s.replaced_tokens)
        ));
    }
    let mut decisions = Vec::new();
    for d in &m.decisions {
        text.push(' ');
        text.push_str(&sentence(analysis, d, own.map(|(_, s)| s), config.flush_ttl_ms));
        decisions.push(decision_json(d));
    }
    let mut chain = Vec::new();
    let mut next = own.map(|(i, s)| (i as u32, s));
    while let Some((i, s)) = next {
        chain.push(i);
        next = match (&s.condensed_into, &s.retired) {
            (Some((by, shown)), _) => {
                let Some(into) = analysis.summaries.get(*by as usize) else { break };
                let when = shown.map_or_else(|| "(not yet in the view)".to_owned(), |c| format!("at call {c}"));
                text.push_str(&format!(" Summary #{i} was condensed into {} {when}.", summary_name(*by, into)));
                Some((*by, into))
            }
            (None, Some((call, reason))) => {
                text.push_str(&format!(" Summary #{i} was retired at call {call}: {reason}."));
                None
            }
            _ => None,
        };
    }
    let latest = latest(analysis, seq);
    text.push(' ');
    text.push_str(&latest.1);
    Ok(json!({
        "session": analysis.session.to_string(),
        "seq": seq,
        "role": m.role,
        "tokens": m.tokens,
        "gist": m.gist,
        "appended_version": m.appended,
        "appended_after_call": m.appended_after_call,
        "first_call": m.first_call,
        "summaries": chain,
        "decisions": decisions,
        "provider_compaction": m.provider_compaction,
        "covered_by_provider_compaction": compactions.iter().find(|k| **k > seq),
        "latest": latest.0,
        "text": text,
    }))
}

fn decision_json(d: &Decision) -> Value {
    let at = d.at_ms.map(ctxlog::time::format_rfc3339);
    let base =
        json!({"version": d.version, "call": d.call, "after_call": d.after_call, "at": at, "status": d.what.status()});
    let extra = match &d.what {
        What::Flushed { reason, cache_age_ms, from, to } => {
            json!({"event": "flushed", "reason": reason.as_str(), "cache_age_ms": cache_age_ms, "from": from, "to": to})
        }
        What::Edited { kind, reason } => {
            json!({"event": "edited", "kind": kind, "level": reason.level, "rule": reason.rule,
            "target_tokens": reason.target_tokens, "guard": reason.guard})
        }
        What::Restored { by, why, partner_of } => {
            json!({"event": "restored", "by": by, "why": why, "partner_of": partner_of})
        }
        What::Pinned { pin, by, why } => {
            json!({"event": if *pin { "pinned" } else { "unpinned" }, "by": by, "why": why})
        }
    };
    let mut v = base;
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    v
}

/// One decision as a sentence.
fn sentence(analysis: &Analysis, d: &Decision, own: Option<&SummaryHistory>, ttl_ms: u64) -> String {
    let at = d.at_ms.map_or_else(String::new, |t| format!(" at {}", clock(t)));
    let call = d.call.map_or_else(String::new, |c| format!("Call {c}{at}"));
    let guards = d
        .call
        .and_then(|c| analysis.calls.get(c as usize))
        .map(|c| c.record.guards.iter().map(|g| g.kind.clone()).collect::<Vec<_>>())
        .filter(|g| !g.is_empty())
        .map_or_else(String::new, |g| format!("; guards raised by that call: {}", g.join(", ")));
    match &d.what {
        What::Flushed { reason, cache_age_ms, from, to } => {
            let rule = match reason {
                FlushReason::LegacyImmediate => {
                    "rule legacy_immediate: cache-aware is off, so prepared summaries are flushed on the next call"
                        .to_owned()
                }
                FlushReason::ColdCache => format!(
                    "rule cold_cache: the cache had gone cold (TTL {}), so rewriting the prefix cost nothing extra",
                    secs(ttl_ms)
                ),
                FlushReason::SizeThreshold => {
                    "rule size_threshold: the cache was warm but the view was over the hard limit".to_owned()
                }
            };
            let cache = match cache_age_ms {
                None => "no call had been served before".to_owned(),
                Some(age) if *age < ctxlog::cost::TTL_MS as u64 => format!(
                    "the previous call was {} earlier, so the provider's cache was still warm and this rewrote the cached prefix",
                    secs(*age)
                ),
                Some(age) => format!("the previous call was {} earlier, so the cache was already cold", secs(*age)),
            };
            let waited = own.map_or(0, |s| deferred_between(analysis, s.after_call, d.call));
            let waited = match waited {
                0 => String::new(),
                n => format!("; the flush had waited through {n} call(s) deferred while the cache was warm"),
            };
            format!(
                "{call} flushed it: the view switched to the summaries of messages {from}–{} ({rule}; {cache}{waited}{guards}).",
                to.saturating_sub(1)
            )
        }
        What::Edited { kind, reason } => {
            let guard = reason.guard.as_ref().map_or_else(String::new, |g| format!(", under guard {g}"));
            format!(
                "{call} {kind} it at ladder level {} by rule \"{}\", aiming at {} tokens{guard}{guards}.",
                reason.level,
                reason.rule,
                thousands(reason.target_tokens)
            )
        }
        What::Restored { by, why, partner_of } => {
            let when = d.after_call.map_or_else(|| "Before any call".to_owned(), |c| format!("After call {c}"));
            let how = partner_of.map_or_else(String::new, |p| format!(" as the tool partner of seq {p}"));
            format!("{when} (version {}) it was restored{how} by {by}: {why}.", d.version)
        }
        What::Pinned { pin, by, why } => {
            let when = d.after_call.map_or_else(|| "Before any call".to_owned(), |c| format!("After call {c}"));
            let done = match pin {
                true => "pinned: no ladder level edits it and no flush hides it until it is unpinned",
                false => "unpinned: the ladder and flushes may hide it again",
            };
            format!("{when} (version {}) it was {done}, by {by}: {why}.", d.version)
        }
    }
}

/// Calls after `after` and before `until` that deferred work while the cache was warm.
fn deferred_between(analysis: &Analysis, after: Option<u64>, until: Option<u64>) -> usize {
    let from = after.map_or(0, |c| c + 1);
    let to = until.unwrap_or(u64::MAX);
    analysis.calls.iter().filter(|c| (from..to).contains(&c.record.call) && c.record.deferred.is_some()).count()
}

/// Where the message stands in the latest view, as JSON and as a sentence.
fn latest(analysis: &Analysis, seq: u64) -> (Value, String) {
    let st = &analysis.state;
    let last = analysis.calls.last().map(|c| c.record.call);
    let which = last.map_or_else(|| "The current view".to_owned(), |c| format!("The latest view (call {c})"));
    let restore = format!("`ctxlog restore --seq {seq}` brings it back");
    if let Some(pos) = st.view_position(seq) {
        let edit = st.entry(seq).and_then(|e| e.edit.as_ref()).map(|e| e.kind.as_str());
        let how = edit.map_or_else(|| "verbatim".to_owned(), |k| format!("{k} ({restore} in full)"));
        let json =
            json!({"call": last, "in_view": true, "position": pos, "status": edit.unwrap_or("live"), "summary": null});
        return (json, format!("{which} sends it {how}."));
    }
    let shown = st.view().iter().find_map(|it| match it.item {
        Item::Summary(i) => st
            .summaries()
            .get(i as usize)
            .filter(|s| s.from <= seq && seq < s.to)
            .map(|s| (i, s.is_condensed(), s.from, s.to)),
        Item::Message(_) | Item::Placeholder { .. } => None,
    });
    let removed = st.entry(seq).and_then(|e| e.edit.as_ref()).is_some();
    let status = if removed { "removed" } else { "flushed" };
    match shown {
        Some((i, condensed, from, to)) => {
            let kind = if condensed { "condensed summary" } else { "summary" };
            let json = json!({"call": last, "in_view": false, "status": status, "summary": i});
            (
                json,
                format!(
                    "{which} does not send it; it is represented by {kind} #{i} (seq {from}–{}); {restore}.",
                    to.saturating_sub(1)
                ),
            )
        }
        None => {
            let placeholder = st.view().iter().find_map(|it| match it.item {
                Item::Placeholder { from, to } if from <= seq && seq < to => Some((from, to)),
                _ => None,
            });
            let json = json!({"call": last, "in_view": false, "status": status, "summary": null,
                "placeholder": placeholder.map(|(from, to)| json!({"from": from, "to": to}))});
            match placeholder {
                Some((from, to)) => (
                    json,
                    format!(
                        "{which} does not send it; a placeholder stands where it was (seq {from}–{}); {restore}.",
                        to.saturating_sub(1)
                    ),
                ),
                None => (json, format!("{which} does not carry it in any form; {restore}.")),
            }
        }
    }
}
