//! Output: JSON Lines for machines, an aligned table for people.

use std::io::Write;

use ctxlog::replay::CallRecord;
use ctxlog::view::thousands;

use crate::error::{output, CliError};

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

/// The table header.
pub fn header() -> String {
    format!(
        "{:>5} {:>7} {:>8} {:>5} {:>5} {:>9} {:>5} {:<26} {:>5} {:<22} {:>6} {}",
        "call", "version", "time", "msgs", "view", "tokens", "level", "flush", "edits", "guards", "reused", "deferred"
    )
}

/// One table row.
pub fn row(r: &CallRecord) -> String {
    let time = ctxlog::time::format_rfc3339((r.at * 1000.0).round() as u64);
    let clock = time.get(11..19).unwrap_or(&time);
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
    format!(
        "{:>5} {:>7} {:>8} {:>5} {:>5} {:>9} {:>5} {:<26} {:>5} {:<22} {:>6} {}",
        r.call,
        r.version,
        clock,
        r.messages,
        r.view_messages,
        thousands(r.view_tokens),
        r.level,
        flush,
        r.edits.len(),
        guards,
        if r.prefix_reused { "yes" } else { "no" },
        r.deferred.as_ref().map_or("-", |d| d.reason)
    )
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
    out
}

/// One JSON line.
pub fn json_line(r: &CallRecord) -> String {
    serde_json::to_string(r).unwrap_or_default()
}

/// Prints a whole timeline.
pub fn print_timeline(out: &mut Out<'_>, records: &[CallRecord], json: bool) -> Result<(), CliError> {
    if !json {
        out.line(&header())?;
    }
    for r in records {
        if json {
            out.line(&json_line(r))?;
        } else {
            out.line(&row(r))?;
            for d in details(r) {
                out.line(&d)?;
            }
        }
    }
    Ok(())
}

/// The closing summary of a timeline.
pub fn summary(records: &[CallRecord]) -> Vec<String> {
    let calls = records.len();
    let reused = records.iter().skip(1).filter(|r| r.prefix_reused).count();
    let flushes = records.iter().filter(|r| r.flush.is_some()).count();
    let edits: usize = records.iter().map(|r| r.edits.len()).sum();
    let guards: usize = records.iter().map(|r| r.guards.len()).sum();
    let max_level = records.iter().map(|r| r.level).max().unwrap_or(0);
    let over = records.iter().filter(|r| r.view_tokens > r.budget).count();
    let deferred = records.iter().filter(|r| r.deferred.is_some()).count();
    let max_summary = records.iter().map(|r| r.summary_tokens).max().unwrap_or(0);
    let last = records.last();
    let share = if calls > 1 { 100.0 * reused as f64 / (calls - 1) as f64 } else { 0.0 };
    vec![
        format!("calls: {calls}; messages: {}", last.map_or(0, |r| r.messages)),
        format!(
            "final view: {} messages, {} tokens (budget {})",
            last.map_or(0, |r| r.view_messages),
            thousands(last.map_or(0, |r| r.view_tokens)),
            thousands(last.map_or(0, |r| r.budget))
        ),
        format!("prefix reused on {reused} of {} calls ({share:.1}%)", calls.saturating_sub(1)),
        format!("flushes: {flushes}; edits: {edits}; guards raised: {guards}; highest ladder level: {max_level}"),
        format!("calls served over budget: {over}; calls deferred by the cache-aware gate: {deferred}"),
        format!("most summary tokens in a view: {}", thousands(max_summary)),
    ]
}
