//! Decision diffs between two timelines (`rerun` against the recorded one, `diff A B`): the
//! calls whose view or decisions differ, edits and guards added and removed, and totals —
//! prefix rewrites, tokens, simulated cost — on both sides with the delta.

use std::collections::BTreeSet;

use ctxlog::config::Config;
use ctxlog::internal::view::thousands;
use ctxlog::replay::{Mode, TimelineEdit};
use serde_json::{json, Value};

use crate::analysis::{analyze, Analysis, Call, Keep, Until};
use crate::args::DiffArgs;
use crate::chart::cache_class;
use crate::error::CliError;
use crate::output::Out;
use crate::rerun_notes::Notes;
use crate::session_id::pick_session;
use crate::stores::{open_store, Access};
use crate::table::{Align, Columns};

/// One side of a comparison.
#[derive(Debug)]
pub struct Side<'a> {
    /// `recorded`, `rerun`, or a session id.
    pub label: String,
    /// Its timeline.
    pub analysis: &'a Analysis,
    /// Its knobs.
    pub config: &'a Config,
}

/// A call that differs.
#[derive(Debug, Clone)]
pub struct CallDiff<'a> {
    /// The call number.
    pub call: u64,
    /// The call on the left (`None`: the left has fewer calls).
    pub left: Option<&'a Call>,
    /// The call on the right.
    pub right: Option<&'a Call>,
    /// Edits only the right made, as `(seq, kind)` with the right's reason.
    pub edits_added: Vec<&'a TimelineEdit>,
    /// Edits only the left made.
    pub edits_removed: Vec<&'a TimelineEdit>,
    /// Guards only the right raised.
    pub guards_added: Vec<String>,
    /// Guards only the left raised.
    pub guards_removed: Vec<String>,
}

/// A whole comparison.
#[derive(Debug, Clone)]
pub struct Diff<'a> {
    /// The calls that differ, in order.
    pub calls: Vec<CallDiff<'a>>,
    /// `(name, left, right)` totals.
    pub totals: Vec<(&'static str, f64, f64)>,
    /// Knobs that differ: `(key, left, right)`.
    pub knobs: Vec<(String, String, String)>,
}

impl Diff<'_> {
    /// How many calls differ.
    pub fn differing(&self) -> usize {
        self.calls.len()
    }
}

fn edit_keys(c: Option<&Call>) -> BTreeSet<(u64, &'static str)> {
    c.map(|c| c.record.edits.iter().map(|e| (e.seq, e.kind)).collect()).unwrap_or_default()
}

fn guard_kinds(c: Option<&Call>) -> BTreeSet<String> {
    c.map(|c| c.record.guards.iter().map(|g| g.kind.clone()).collect()).unwrap_or_default()
}

/// Do two calls make the same decisions and serve the same view?
fn same(l: &Call, r: &Call) -> bool {
    let (a, b) = (&l.record, &r.record);
    l.digest == r.digest
        && a.flush == b.flush
        && a.level == b.level
        && a.prefix_reused == b.prefix_reused
        && a.deferred.as_ref().map(|d| d.reason) == b.deferred.as_ref().map(|d| d.reason)
        && edit_keys(Some(l)) == edit_keys(Some(r))
        && guard_kinds(Some(l)) == guard_kinds(Some(r))
}

/// Compares two timelines call by call.
pub fn compare<'a>(left: &Side<'a>, right: &Side<'a>) -> Diff<'a> {
    let (lc, rc) = (&left.analysis.calls, &right.analysis.calls);
    let mut calls = Vec::new();
    for i in 0..lc.len().max(rc.len()) {
        let (l, r) = (lc.get(i), rc.get(i));
        if let (Some(l), Some(r)) = (l, r) {
            if same(l, r) {
                continue;
            }
        }
        let (le, re) = (edit_keys(l), edit_keys(r));
        let (lg, rg) = (guard_kinds(l), guard_kinds(r));
        let pick = |c: Option<&'a Call>, keep: &dyn Fn(&(u64, &'static str)) -> bool| -> Vec<&'a TimelineEdit> {
            c.map(|c| c.record.edits.iter().filter(|e| keep(&(e.seq, e.kind))).collect()).unwrap_or_default()
        };
        calls.push(CallDiff {
            call: i as u64,
            left: l,
            right: r,
            edits_added: pick(r, &|k| !le.contains(k)),
            edits_removed: pick(l, &|k| !re.contains(k)),
            guards_added: rg.difference(&lg).cloned().collect(),
            guards_removed: lg.difference(&rg).cloned().collect(),
        });
    }
    Diff { calls, totals: totals(left.analysis, right.analysis), knobs: knob_changes(left.config, right.config) }
}

fn stats(a: &Analysis) -> Vec<(&'static str, f64)> {
    let calls = &a.calls;
    let n = calls.len() as f64;
    let count = |f: &dyn Fn(&Call) -> bool| calls.iter().filter(|c| f(c)).count() as f64;
    let tokens: Vec<f64> = calls.iter().map(|c| c.record.view_tokens as f64).collect();
    vec![
        ("calls", n),
        ("prefix rewrites", count(&|c| c.record.call > 0 && !c.record.prefix_reused)),
        ("rewrites while the cache was warm", count(&|c| cache_class(c) == "cache-miss")),
        ("flushes", count(&|c| c.record.flush.is_some())),
        ("edits", calls.iter().map(|c| c.record.edits.len()).sum::<usize>() as f64),
        ("guards raised", calls.iter().map(|c| c.record.guards.len()).sum::<usize>() as f64),
        ("calls deferred", count(&|c| c.record.deferred.is_some())),
        ("calls over budget", count(&|c| c.record.view_tokens > c.record.budget)),
        ("peak view tokens", tokens.iter().copied().fold(0.0, f64::max)),
        ("mean view tokens", if n > 0.0 { (tokens.iter().sum::<f64>() / n).round() } else { 0.0 }),
        ("final view tokens", tokens.last().copied().unwrap_or(0.0)),
        ("simulated cost", a.totals.cost.round()),
        ("cost lower bound", a.totals.lower_bound.round()),
    ]
}

fn totals(l: &Analysis, r: &Analysis) -> Vec<(&'static str, f64, f64)> {
    stats(l).into_iter().zip(stats(r)).map(|((name, a), (_, b))| (name, a, b)).collect()
}

/// The flag (and `--config` key) of a config field, and how its value reads there.
fn knob(field: &str, v: &Value) -> (String, String) {
    let name = match field {
        "trigger_ratio" => "trigger",
        "target_ratio" => "target",
        "prepare_ratio" => "prepare",
        "protected_tool_results" => "protected-tools",
        "protected_recent_ratio" => "protected-recent",
        "breaker_passes" => "breaker",
        "hard_limit_ratio" => "hard-limit",
        "flush_ttl_ms" => {
            return ("ttl".to_owned(), v.as_f64().map_or_else(|| v.to_string(), |ms| format!("{}", ms / 1000.0)))
        }
        other => return (other.replace('_', "-"), v.as_str().map_or_else(|| v.to_string(), str::to_lowercase)),
    };
    (name.to_owned(), v.to_string())
}

/// Knobs whose values differ, by their flag names.
fn knob_changes(l: &Config, r: &Config) -> Vec<(String, String, String)> {
    let (Ok(Value::Object(a)), Ok(Value::Object(b))) = (serde_json::to_value(l), serde_json::to_value(r)) else {
        return Vec::new();
    };
    a.iter()
        .filter_map(|(k, v)| {
            let w = b.get(k)?;
            let ((name, left), (_, right)) = (knob(k, v), knob(k, w));
            (v != w).then_some((name, left, right))
        })
        .collect()
}

fn fmt_total(name: &str, v: f64) -> String {
    if name.contains("cost") || name.contains("tokens") {
        thousands(v.max(0.0) as u64)
    } else {
        format!("{v}")
    }
}

fn fmt_delta(name: &str, a: f64, b: f64) -> String {
    let d = b - a;
    let sign = if d > 0.0 {
        "+"
    } else if d < 0.0 {
        "-"
    } else {
        ""
    };
    let mut s = format!("{sign}{}", fmt_total(name, d.abs()));
    if d != 0.0 && a > 0.0 && (name.contains("cost") || name.contains("tokens")) {
        s.push_str(&format!(" ({sign}{:.1}%)", 100.0 * d.abs() / a));
    }
    s
}

/// A call in a few words.
fn brief(c: Option<&Call>) -> String {
    let Some(c) = c else { return "(no such call)".to_owned() };
    let r = &c.record;
    let mut parts = vec![format!("{} tokens", thousands(r.view_tokens))];
    if let Some(f) = &r.flush {
        parts.push(format!("flush {} {}→{}", f.reason, f.from, f.to));
    }
    if r.level > 0 {
        parts.push(format!("level {}, {} edit(s)", r.level, r.edits.len()));
    } else if !r.edits.is_empty() {
        parts.push(format!("{} edit(s)", r.edits.len()));
    }
    if let Some(d) = &r.deferred {
        parts.push(format!("deferred {}", d.reason));
    }
    if !r.guards.is_empty() {
        parts.push(r.guards.iter().map(|g| g.kind.clone()).collect::<Vec<_>>().join(","));
    }
    parts.push(
        match cache_class(c) {
            "cache-read" => "cache read",
            "cache-miss" => "rewrite (warm)",
            _ => "cold",
        }
        .to_owned(),
    );
    parts.join("; ")
}

fn call_json(c: Option<&Call>) -> Value {
    let Some(c) = c else { return Value::Null };
    let r = &c.record;
    json!({
        "view_tokens": r.view_tokens, "view_messages": r.view_messages, "digest": c.digest, "level": r.level,
        "flush": r.flush, "edits": r.edits.len(), "guards": r.guards.iter().map(|g| g.kind.clone()).collect::<Vec<_>>(),
        "prefix_reused": r.prefix_reused, "cache": cache_class(c), "deferred": r.deferred.as_ref().map(|d| d.reason),
        "cost": (c.price.cost * 100.0).round() / 100.0,
    })
}

/// Totals are counts and rounded tokens: whole numbers in JSON.
fn int(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9e15 {
        json!(v as i64)
    } else {
        json!(v)
    }
}

/// The comparison as one JSON object (`--json`).
pub fn to_json(diff: &Diff<'_>, left: &Side<'_>, right: &Side<'_>, notes: Option<&Notes>) -> Value {
    let side = |s: &Side<'_>| json!({"label": s.label, "session": s.analysis.session.to_string(), "config": s.config});
    let totals: serde_json::Map<String, Value> = diff
        .totals
        .iter()
        .map(|(name, a, b)| (name.replace(' ', "_"), json!({"left": int(*a), "right": int(*b), "delta": int(b - a)})))
        .collect();
    let edits = |list: &[&TimelineEdit]| {
        list.iter().map(|e| json!({"seq": e.seq, "kind": e.kind, "reason": e.reason})).collect::<Vec<_>>()
    };
    let calls: Vec<Value> = diff
        .calls
        .iter()
        .map(|c| {
            json!({"call": c.call, "left": call_json(c.left), "right": call_json(c.right),
                   "edits_added": edits(&c.edits_added), "edits_removed": edits(&c.edits_removed),
                   "guards_added": c.guards_added, "guards_removed": c.guards_removed})
        })
        .collect();
    json!({
        "left": side(left),
        "right": side(right),
        "identical": diff.calls.is_empty(),
        "differing_calls": diff.calls.len(),
        "knobs": diff.knobs.iter().map(|(k, a, b)| json!({"key": k, "left": a, "right": b})).collect::<Vec<_>>(),
        "totals": totals,
        "calls": calls,
        "notes": notes.map(Notes::to_json),
    })
}

/// The comparison for people.
pub fn to_lines(diff: &Diff<'_>, left: &Side<'_>, right: &Side<'_>, notes: Option<&Notes>) -> Vec<String> {
    let mut out = vec![match left.analysis.session == right.analysis.session {
        true => format!("{} of session {} against its {} timeline", right.label, right.analysis.session, left.label),
        false => format!(
            "{} = session {}, {} = session {}",
            left.label, left.analysis.session, right.label, right.analysis.session
        ),
    }];
    for (k, a, b) in &diff.knobs {
        out.push(format!("--{k}: {a} → {b}"));
    }
    out.extend(notes.map(Notes::lines).unwrap_or_default());
    out.push(String::new());
    let heads = [("", Align::Left), ("left", Align::Right), ("right", Align::Right), ("delta", Align::Right)];
    let rows: Vec<Vec<String>> =
        std::iter::once(vec![String::new(), left.label.clone(), right.label.clone(), "delta".to_owned()])
            .chain(diff.totals.iter().map(|(name, a, b)| {
                vec![(*name).to_owned(), fmt_total(name, *a), fmt_total(name, *b), fmt_delta(name, *a, *b)]
            }))
            .collect();
    let table = Columns::new(&heads).gap(2).fitted(&rows);
    out.extend(rows.iter().map(|r| table.line(r)));
    out.push(String::new());
    if diff.calls.is_empty() {
        out.push(format!(
            "no call differs: the {} timeline makes the same decisions and serves the same views",
            right.label
        ));
        return out;
    }
    out.push(format!("{} call(s) differ:", diff.calls.len()));
    let heads = [("call", Align::Right), ("", Align::Left), ("", Align::Left)];
    let header = vec!["call".to_owned(), left.label.clone(), right.label.clone()];
    let mut rows = vec![header];
    let mut after: Vec<Vec<String>> = Vec::new();
    for c in &diff.calls {
        rows.push(vec![c.call.to_string(), brief(c.left), brief(c.right)]);
        let mut more = Vec::new();
        for e in &c.edits_added {
            more.push(format!("      + {} seq {} ({})", e.kind, e.seq, e.reason));
        }
        for e in &c.edits_removed {
            more.push(format!("      - {} seq {} ({})", e.kind, e.seq, e.reason));
        }
        for g in &c.guards_added {
            more.push(format!("      + guard {g}"));
        }
        for g in &c.guards_removed {
            more.push(format!("      - guard {g}"));
        }
        after.push(more);
    }
    let table = Columns::new(&heads).gap(2).fitted(&rows);
    let mut rows = rows.iter();
    if let Some(h) = rows.next() {
        out.push(table.line(h));
    }
    for (r, more) in rows.zip(after) {
        out.push(table.line(r));
        out.extend(more);
    }
    out
}

/// Prints a comparison as JSON or for people.
pub fn print_diff(
    out: &mut Out<'_>,
    diff: &Diff<'_>,
    left: &Side<'_>,
    right: &Side<'_>,
    notes: Option<&Notes>,
    json: bool,
) -> Result<(), CliError> {
    if json {
        return out.line(&to_json(diff, left, right, notes).to_string());
    }
    to_lines(diff, left, right, notes).iter().try_for_each(|l| out.line(l))
}

/// `diff`
pub fn diff(args: &DiffArgs, out: &mut Out<'_>) -> Result<(), CliError> {
    let store = open_store(&args.store.store, Access::ReadOnly)?;
    // One handle when both sessions are in one store.
    let other = args.store_b.as_deref().map(|url| open_store(url, Access::ReadOnly)).transpose()?;
    let store_b = other.as_deref().unwrap_or(store.as_ref());
    let (ia, ib) = (pick_session(store.as_ref(), Some(&args.a))?, pick_session(store_b, Some(&args.b))?);
    let left = analyze(store.as_ref(), ia, Mode::Strict, Until::Head, Keep { views: false })?;
    let right = analyze(store_b, ib, Mode::Strict, Until::Head, Keep { views: false })?;
    let config = |a: &Analysis| a.state.info().map(|i| i.config.clone()).unwrap_or_default();
    let (lc, rc) = (config(&left), config(&right));
    let l = Side { label: "A".into(), analysis: &left, config: &lc };
    let r = Side { label: "B".into(), analysis: &right, config: &rc };
    let d = compare(&l, &r);
    print_diff(out, &d, &l, &r, None, args.store.json)?;
    match (args.exit_code, d.differing()) {
        (true, n) if n > 0 => Err(CliError::Differs(n)),
        _ => Ok(()),
    }
}
