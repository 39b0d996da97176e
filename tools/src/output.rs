//! Output: JSON Lines for machines, an aligned table for people.

use std::io::Write;

use ctxlog::internal::view::thousands;
use ctxlog::replay::CallRecord;

use crate::analysis::{HostGuard, PinNote};
use crate::error::{output, CliError};
use crate::table::{Align, Columns};

/// Where a command writes.
pub struct Out<'a> {
    /// Standard output (results).
    pub stdout: &'a mut dyn Write,
    /// Standard error (warnings, progress).
    pub stderr: &'a mut dyn Write,
    /// Print progress on stderr (only when it is a terminal).
    pub progress: bool,
}

impl Out<'_> {
    /// One line on stdout.
    pub fn line(&mut self, s: &str) -> Result<(), CliError> {
        writeln!(self.stdout, "{s}").map_err(output("stdout"))
    }

    /// Raw bytes on stdout.
    pub fn raw(&mut self, b: &[u8]) -> Result<(), CliError> {
        self.stdout.write_all(b).map_err(output("stdout"))
    }

    /// Overwrites the progress line on stderr, if progress is on.
    pub fn progress(&mut self, s: &str) -> Result<(), CliError> {
        if self.progress {
            write!(self.stderr, "\r\x1b[2K{s}").map_err(output("stderr"))?;
        }
        Ok(())
    }

    /// Clears the progress line.
    pub fn progress_done(&mut self) -> Result<(), CliError> {
        self.progress("")
    }

    /// One line on stderr.
    pub fn err(&mut self, s: &str) -> Result<(), CliError> {
        writeln!(self.stderr, "{s}").map_err(output("stderr"))
    }
}

/// The timeline's columns, and the widths a row of the bundled demo needs.
const TIMELINE: [(&str, Align); 12] = [
    ("call", Align::Right),
    ("version", Align::Right),
    ("time", Align::Right),
    ("msgs", Align::Right),
    ("view", Align::Right),
    ("tokens", Align::Right),
    ("level", Align::Right),
    ("flush", Align::Left),
    ("edits", Align::Right),
    ("guards", Align::Left),
    ("reused", Align::Right),
    ("deferred", Align::Left),
];
const TIMELINE_MIN: [usize; 12] = [5, 7, 8, 5, 5, 9, 5, 26, 5, 22, 6, 0];

/// The per-call table, with its column widths.
#[derive(Debug, Clone)]
pub struct TimelineTable(Columns);

impl TimelineTable {
    /// Widths for rows printed as they come (`tail`), before their numbers are known.
    pub fn streaming() -> TimelineTable {
        TimelineTable(Columns::new(&TIMELINE).at_least(&TIMELINE_MIN))
    }

    /// Widths that fit any call of a session of at most `messages` messages whose views stay
    /// within ten times `budget` (`import`, `demo`: the transcript's length is known first).
    pub fn sized_for(messages: u64, budget: u64) -> TimelineTable {
        let n = messages.max(1).to_string().len();
        // A call commits at most a few events per message (an append, an edit, a flush).
        let versions = messages.saturating_mul(4).max(1).to_string().len();
        let tokens = thousands(budget.saturating_mul(10)).len();
        let mut min = TIMELINE_MIN;
        for (i, w) in [(0, n), (1, versions), (3, n), (4, n), (5, tokens), (8, n)] {
            if let Some(m) = min.get_mut(i) {
                *m = (*m).max(w);
            }
        }
        TimelineTable(Columns::new(&TIMELINE).at_least(&min))
    }

    /// Widths that fit every record of `records`.
    pub fn fitted(records: &[CallRecord]) -> TimelineTable {
        let mut c = Columns::new(&TIMELINE).at_least(&TIMELINE_MIN);
        for r in records {
            c.fit(&cells(r));
        }
        TimelineTable(c)
    }

    /// The header line.
    pub fn header(&self) -> String {
        self.0.header()
    }

    /// One call.
    pub fn row(&self, r: &CallRecord) -> String {
        self.0.line(&cells(r))
    }
}

/// The table header, at the streaming widths.
pub fn header() -> String {
    TimelineTable::streaming().header()
}

/// One table row, at the streaming widths.
pub fn row(r: &CallRecord) -> String {
    TimelineTable::streaming().row(r)
}

fn cells(r: &CallRecord) -> Vec<String> {
    let time = ctxlog::time::format_rfc3339((r.at * 1000.0).round() as u64);
    let clock = time.get(11..19).unwrap_or(&time).to_owned();
    let flush = r.flush.as_ref().map_or_else(
        || "-".to_owned(),
        |f| match f.condensed {
            0 => format!("{} {}→{}", f.reason, f.from, f.to),
            n => format!("{} {}→{} +{n}c", f.reason, f.from, f.to),
        },
    );
    let guards = if r.guards.is_empty() {
        "-".to_owned()
    } else {
        r.guards.iter().map(|g| g.kind.as_str()).collect::<Vec<_>>().join(",")
    };
    vec![
        r.call.to_string(),
        r.version.to_string(),
        clock,
        r.messages.to_string(),
        r.view_messages.to_string(),
        thousands(r.view_tokens),
        r.level.to_string(),
        flush,
        r.edits.len().to_string(),
        guards,
        if r.prefix_reused { "yes" } else { "no" }.to_owned(),
        r.deferred.as_ref().map_or("-", |d| d.reason).to_owned(),
    ]
}

/// The reasons behind a row, for people: the flush, the edits grouped by kind and reason,
/// and each guard's sentence. Empty when the call changed nothing.
pub fn details(r: &CallRecord) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(f) = &r.flush {
        if f.to > f.from {
            out.push(format!(
                "      flush {}: view switched to the summaries of messages {}..{}",
                f.reason, f.from, f.to
            ));
        }
        if f.condensed > 0 {
            out.push(format!(
                "      flush {}: {} condensed summar{} replaced the oldest summaries",
                f.reason,
                f.condensed,
                if f.condensed == 1 { "y" } else { "ies" }
            ));
        }
    }
    if let Some(d) = &r.deferred {
        out.push(format!("      deferred ({}): {}", d.reason, d.detail));
    }
    let mut groups: Vec<(&str, &str, usize)> = Vec::new();
    for e in &r.edits {
        match groups.iter_mut().find(|(k, why, _)| *k == e.kind && *why == e.reason) {
            Some(g) => g.2 += 1,
            None => groups.push((e.kind, &e.reason, 1)),
        }
    }
    for (kind, reason, n) in groups {
        out.push(format!("      {n} × {kind}: {reason}"));
    }
    for g in &r.guards {
        out.push(format!("      guard {}: {}", g.kind, g.detail));
    }
    for x in &r.rejected {
        out.push(rejection(x));
    }
    for a in &r.summaries {
        out.push(summary_attempt(a));
    }
    out
}

/// One refused request under the call it preceded: status, error, the counts, what was learned.
pub fn rejection(r: &ctxlog::replay::RejectionRecord) -> String {
    let mut line = format!("      rejected: call {} got HTTP {}", r.call, r.status);
    if !r.error.is_empty() {
        line.push_str(&format!(" {}", r.error));
    }
    if r.overflow {
        let n = r.prompt_tokens.map_or("?".to_owned(), thousands);
        let m = r.limit.map_or("?".to_owned(), thousands);
        line.push_str(&format!(" (prompt too long: {n} tokens > {m})"));
    }
    match r.learned_budget {
        Some(b) => line.push_str(&format!("; limit learned: budget now {}, retried", thousands(b))),
        None if !r.message.is_empty() => line.push_str(&format!(": {}", r.message)),
        None => {}
    }
    line
}

/// What the log holds after the last call, for the table (`replay`).
pub fn trailing_lines(t: &ctxlog::replay::Trailing) -> Vec<String> {
    if t.is_empty() {
        return Vec::new();
    }
    let mut out = vec![format!("  after call {}:", t.after_calls.saturating_sub(1))];
    out.extend(t.rejected.iter().map(rejection));
    out.extend(t.guards.iter().map(|g| format!("      guard {}: {}", g.kind, g.detail)));
    out.extend(t.summaries.iter().map(summary_attempt));
    out
}

/// One summary attempt under its call's row: span, modes, refusal, outcome, the summarizer's
/// prompt and how much of it came from the cache.
pub fn summary_attempt(a: &ctxlog::replay::SummaryAttemptRecord) -> String {
    let mut line = format!("      summary {}..{}: {}", a.from, a.to, a.mode_requested);
    if a.mode_used != a.mode_requested {
        line.push_str(&format!(" → {}", a.mode_used));
    }
    if let Some(r) = &a.refusal {
        line.push_str(&format!(" (fork refused: {r})"));
    }
    line.push_str(&format!(", {}", a.outcome));
    if let Some(d) = &a.detail {
        line.push_str(&format!(": {d}"));
    }
    if let Some(u) = a.usage {
        let prompt = u.prompt_total();
        let pct = if prompt > 0 { 100.0 * u.cache_read as f64 / prompt as f64 } else { 0.0 };
        line.push_str(&format!("; prompt {} tokens, {pct:.1}% from cache", thousands(prompt)));
    }
    if let Some(ms) = a.latency_ms {
        line.push_str(&format!("; {:.1} s", ms as f64 / 1000.0));
    }
    line
}

/// One JSON line.
pub fn json_line(r: &CallRecord) -> String {
    serde_json::to_string(r).unwrap_or_default()
}

/// Prints a whole timeline with the guards raised between its calls ([`print_calls`]), then
/// what the log holds after its last call (under `--json`, one more object,
/// `{"after_calls", "summaries", "rejected"}`, only when there is something).
pub fn print_timeline_with(
    out: &mut Out<'_>,
    records: &[CallRecord],
    host: &[HostGuard],
    pins: &[PinNote],
    trailing: &ctxlog::replay::Trailing,
    json: bool,
) -> Result<(), CliError> {
    print_calls(out, records, host, pins, json)?;
    if json && !trailing.is_empty() {
        out.line(&serde_json::to_string(trailing).unwrap_or_default())?;
    } else {
        for l in trailing_lines(trailing) {
            out.line(&l)?;
        }
    }
    Ok(())
}

/// Prints a timeline with the guards a host raised and the pins a person made between its
/// calls, each under the row of the call it follows (in JSON, that call's line gets them as
/// `guards_after` / `pins_after`; one line per call stays one line per call). Those before the
/// first call follow the header.
pub fn print_calls(
    out: &mut Out<'_>,
    records: &[CallRecord],
    host: &[HostGuard],
    pins: &[PinNote],
    json: bool,
) -> Result<(), CliError> {
    let table = TimelineTable::fitted(records);
    if !json {
        out.line(&table.header())?;
        for g in host.iter().filter(|g| g.after_call.is_none()) {
            out.line(&g.detail_line())?;
        }
        for p in pins.iter().filter(|p| p.after_call.is_none()) {
            out.line(&p.detail_line())?;
        }
    }
    for r in records {
        let after: Vec<&HostGuard> = host.iter().filter(|g| g.after_call == Some(r.call)).collect();
        let pinned: Vec<&PinNote> = pins.iter().filter(|p| p.after_call == Some(r.call)).collect();
        if json {
            let line = if after.is_empty() && pinned.is_empty() {
                json_line(r)
            } else {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    if !after.is_empty() {
                        o.insert("guards_after".into(), after.iter().map(|g| g.to_json()).collect());
                    }
                    if !pinned.is_empty() {
                        o.insert("pins_after".into(), pinned.iter().map(|p| p.to_json()).collect());
                    }
                }
                v.to_string()
            };
            out.line(&line)?;
        } else {
            out.line(&table.row(r))?;
            for d in details(r) {
                out.line(&d)?;
            }
            for g in after {
                out.line(&g.detail_line())?;
            }
            for p in pinned {
                out.line(&p.detail_line())?;
            }
        }
    }
    Ok(())
}

/// The closing summary of a timeline; `host_guards` counts the guards raised between calls.
pub fn summary(records: &[CallRecord], host_guards: usize) -> Vec<String> {
    let calls = records.len();
    let reused = records.iter().skip(1).filter(|r| r.prefix_reused).count();
    let flushes = records.iter().filter(|r| r.flush.is_some()).count();
    let edits: usize = records.iter().map(|r| r.edits.len()).sum();
    let guards: usize = records.iter().map(|r| r.guards.len()).sum::<usize>() + host_guards;
    let between = match host_guards {
        0 => String::new(),
        n => format!(" ({n} between calls)"),
    };
    let max_level = records.iter().map(|r| r.level).max().unwrap_or(0);
    // By the provider's count where it reported one (issue 21: the estimate can be low).
    let over = records.iter().filter(|r| r.reported_tokens.unwrap_or(r.view_tokens) > r.budget).count();
    let over_estimate = records.iter().filter(|r| r.view_tokens > r.budget).count();
    let hidden: u64 = records.iter().map(|r| r.hidden).sum();
    let represented: u64 = records.iter().map(|r| r.represented).sum();
    let unrepresented = records.iter().filter(|r| r.represented < r.hidden).count();
    let deferred = records.iter().filter(|r| r.deferred.is_some()).count();
    let max_summary = records.iter().map(|r| r.summary_tokens).max().unwrap_or(0);
    let last = records.last();
    let share = if calls > 1 { 100.0 * reused as f64 / (calls - 1) as f64 } else { 0.0 };
    let mut lines = vec![
        format!("calls: {calls}; messages: {}", last.map_or(0, |r| r.messages)),
        format!(
            "final view: {} messages, {} tokens (budget {})",
            last.map_or(0, |r| r.view_messages),
            thousands(last.map_or(0, |r| r.view_tokens)),
            thousands(last.map_or(0, |r| r.budget))
        ),
        format!("prefix reused on {reused} of {} calls ({share:.1}%)", calls.saturating_sub(1)),
        format!(
            "flushes: {flushes}; edits: {edits}; guards raised: {guards}{between}; highest ladder level: {max_level}"
        ),
        format!(
            "calls served over budget: {over} (provider's count where reported; {over_estimate} by the estimate); calls deferred by the cache-aware gate: {deferred}"
        ),
        format!(
            "hidden messages represented (by a summary or a placeholder): {} of {} over all calls; calls leaving one unrepresented: {unrepresented}",
            thousands(represented),
            thousands(hidden)
        ),
        format!("most summary tokens in a view: {}", thousands(max_summary)),
    ];
    let attempts: Vec<_> = records.iter().flat_map(|r| &r.summaries).collect();
    if !attempts.is_empty() {
        let count =
            |f: &dyn Fn(&&ctxlog::replay::SummaryAttemptRecord) -> bool| attempts.iter().filter(|a| f(a)).count();
        let forks = count(&|a| a.mode_used == "fork");
        let refused = count(&|a| a.refusal.is_some());
        let failed = count(&|a| a.outcome != "prepared");
        let (prompt, cached) = attempts
            .iter()
            .filter_map(|a| a.usage)
            .fold((0u64, 0u64), |(p, c), u| (p + u.prompt_total(), c + u.cache_read));
        let pct = if prompt > 0 { 100.0 * cached as f64 / prompt as f64 } else { 0.0 };
        lines.push(format!(
            "summary attempts: {}; fork {forks}, standalone {}; fork refused or declined {refused}; failed {failed}",
            attempts.len(),
            attempts.len() - forks
        ));
        lines.push(format!(
            "summarizer prompts: {} tokens, {} read from the cache ({pct:.1}%)",
            thousands(prompt),
            thousands(cached)
        ));
    }
    lines
}
