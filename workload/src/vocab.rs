//! The vocabulary of the fictional project every session works on: `ora`, a Rust time-tracking
//! CLI/TUI. Shared by the code, log and prose generators.

use crate::rng::Rng;

pub(crate) const FILES: &[&str] = &[
    "src/main.rs",
    "src/cli.rs",
    "src/store.rs",
    "src/report.rs",
    "src/export.rs",
    "src/tz.rs",
    "src/model.rs",
    "src/config.rs",
    "src/tui/mod.rs",
    "src/tui/table.rs",
    "src/tui/input.rs",
    "tests/report.rs",
    "tests/export.rs",
    "tests/cli.rs",
    "Cargo.toml",
    "README.md",
    "CHANGELOG.md",
];
pub(crate) const DIRS: &[&str] = &["src", "src/tui", "tests", ".", "tests/fixtures", "docs"];
pub(crate) const NOUNS: &[&str] = &[
    "entry", "session", "project", "week", "span", "tag", "report", "row", "budget", "cursor", "store", "range",
    "offset", "zone", "total", "column", "record", "filter", "day", "client",
];
pub(crate) const VERBS: &[&str] = &[
    "load", "parse", "render", "merge", "split", "export", "format", "compute", "flush", "resolve", "validate",
    "collect", "round", "group", "sort",
];
pub(crate) const TYPES: &[&str] = &[
    "Entry",
    "Session",
    "Project",
    "WeekRange",
    "Span",
    "Tag",
    "Report",
    "Store",
    "Config",
    "CsvWriter",
    "LocalOffset",
    "Duration",
    "Filter",
    "ReportRow",
];
pub(crate) const CRATES: &[&str] = &[
    "serde",
    "serde_json",
    "clap",
    "time",
    "csv",
    "rusqlite",
    "ratatui",
    "crossterm",
    "thiserror",
    "anyhow",
    "dirs",
    "tempfile",
    "insta",
    "itoa",
    "memchr",
    "libc",
    "unicode-width",
    "bitflags",
    "log",
];
pub(crate) const COMMENTS: &[&str] = &[
    "entries are stored in UTC; only presentation converts to local time",
    "a week starts on Monday per ISO 8601, regardless of locale",
    "keep the header stable: downstream spreadsheets key on column names",
    "rounding happens once, at the end, to avoid accumulating drift",
    "an open session has no end yet and counts up to now",
    "the store is append-only; edits are new rows that supersede old ones",
    "escape quotes by doubling them, as RFC 4180 requires",
    "DST transitions can make a local day 23 or 25 hours long",
    "sorting by start keeps the report stable across runs",
    "fall back to the system zone when the config does not name one",
];

pub(crate) const SNIPPETS: &[&str] = &[
    "billable, rounded to quarter hours",
    "meeting with client",
    "code review",
    "offset changes at 02:00 local time",
    "fields containing separators must be quoted",
    "returns None for ambiguous local times",
    "iterator adaptors are lazy",
    "implements Display",
];

pub(crate) const SEARCHES: &[&str] = &[
    "rust csv writer quote fields containing newline RFC 4180",
    "time crate UtcOffset local_offset_at DST",
    "rust iso week start monday time crate",
    "clap derive subcommand optional flag default value",
    "rusqlite query_map collect Result vec",
    "ratatui table widget column widths",
];

/// A `verb_noun` identifier.
pub(crate) fn ident(rng: &mut Rng) -> String {
    format!("{}_{}", rng.pick(VERBS), rng.pick(NOUNS))
}
