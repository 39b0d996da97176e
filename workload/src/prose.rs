//! What the people say: the user's instructions and follow-ups, the agent's reasoning, step
//! announcements, progress reports and final answer.

use std::fmt::Write as _;

use crate::logs::command_output;
use crate::rng::Rng;
use crate::sizes::fit;
use crate::vocab::{ident, COMMENTS, CRATES, FILES, NOUNS, TYPES, VERBS};

pub(crate) const INSTRUCTIONS: &str = "Hi! I need help with my time-tracking tool. PROJECT PATH IS ~/Desktop/ora\n\n\
It's a small Rust CLI (plus a TUI) that records work sessions in a SQLite file and prints reports. Two things:\n\n\
1. Add `ora export --csv [--week <date>]` that writes the entries as CSV to stdout. It must be proper RFC 4180 (notes can contain commas, quotes and newlines) and the hours column must be rounded to two decimals.\n\
2. Fix the weekly report: sessions that start late in the evening are attributed to the wrong day when my timezone isn't UTC. Entries are stored in UTC.\n\n\
Constraints: don't add new dependencies unless you really have to, keep `cargo test` and `cargo clippy -- -D warnings` green, and don't change the database schema. Please add tests for both.";

/// The user's thanks that closes a session of an even number of messages.
pub(crate) const CLOSING: &str =
    "Thanks, that's all for today. I'll review the diff tomorrow morning and get back to you if anything comes up.";

pub(crate) const SHOT1_TEXT: &str = "Here's what the weekly report looks like in my terminal after your change. Look at the Monday and Tuesday rows: the 23:30 session is split weirdly and the total at the bottom doesn't match the sum.";
pub(crate) const SHOT2_TEXT: &str = "And this is the CSV opened in Numbers. The note column is shifted by one for the row that has a comma in it. Screenshot attached.";

const FOLLOWUPS: &[&str] = &[
    "Looks good so far. Please don't change the on-disk format of the store, people already have months of data in it.",
    "Can you make sure the CSV uses the same column order as the report table? Finance imports it into a spreadsheet that expects date first.",
    "The weekly report still shows Monday's late sessions on Tuesday for me. I'm in Europe/Rome. Did you test with a non-UTC zone?",
    "ok, that plan sounds right. Go ahead, but keep the diff small please.",
    "Please run clippy too, CI runs it with -D warnings.",
    "One more requirement: hours should be rounded to two decimals in the export, but totals must be computed from the unrounded values.",
    "Why did you add a new module? I'd prefer to keep the export code in src/export.rs if it fits.",
    "Great, that fixed it. Next, the `--week` flag should accept an ISO week like 2026-W09 as well as a date.",
    "Stop for a second: are you sure about the DST handling? The last Sunday of March is when Italy switches. Please add a test for a session spanning that night.",
    "Can you also update the README with an example of the export command? Keep it short.",
    "That test name is confusing, please rename it to describe the behaviour rather than the bug number.",
    "Don't worry about Windows for now, we only ship macOS and Linux builds.",
];

pub(crate) fn signature(rng: &mut Rng) -> String {
    // base64-alphabet noise with padding-like tail, as real signatures look.
    let mut s = String::with_capacity(100);
    const B: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for _ in 0..98 {
        s.push(char::from(B.get(rng.below(64) as usize).copied().unwrap_or(b'A')));
    }
    s.push_str("==");
    s
}

pub(crate) fn sentence(rng: &mut Rng) -> String {
    let f = rng.pick(FILES);
    let t = rng.pick(TYPES);
    let id = ident(rng);
    match rng.below(10) {
        0 => format!("The {t} type in {f} owns the logic I need to change."),
        1 => format!("I should check whether `{id}` is called anywhere else before changing its signature."),
        2 => format!("The failing case is probably about {}.", rng.pick(COMMENTS)),
        3 => "Running the narrower test first will be faster than the whole suite.".to_string(),
        4 => format!("The user asked to keep dependencies minimal, so I will not pull in a new crate for {t}."),
        5 => format!("It looks like `{id}` assumes the local offset is fixed for the whole week."),
        6 => format!("I'll grep for {t} to find every construction site."),
        7 => format!("{f} is getting long; a small helper would keep it readable."),
        8 => "The earlier output was truncated, so I need to look at the remaining part.".to_string(),
        _ => format!("Note to self: {}.", rng.pick(COMMENTS)),
    }
}

pub(crate) fn thinking_text(rng: &mut Rng) -> String {
    let n = rng.range(2, 9);
    let mut parts = Vec::new();
    for _ in 0..n {
        parts.push(sentence(rng));
    }
    parts.join(" ")
}

pub(crate) fn step_text(rng: &mut Rng, tool: &str) -> String {
    let f = rng.pick(FILES);
    let id = ident(rng);
    match tool {
        "read_file" => format!("Let me read {f} to see how `{id}` is implemented."),
        "grep" => format!("I'll search for the uses of `{id}` across the crate."),
        "run_command" => rng
            .pick(&[
                "Running the tests to check the change.",
                "Let me build to see whether it compiles now.",
                "Checking the git history for context.",
                "Let me run the binary against the fixture data.",
            ])
            .to_string(),
        "write_file" => format!("Now I'll write the updated {f}."),
        "list_dir" => "Let me look at the directory layout first.".to_string(),
        _ => format!("Let me check the documentation on {}.", rng.pick(CRATES)),
    }
}

pub(crate) fn progress_text(rng: &mut Rng) -> String {
    let mut s = format!(
        "Progress update: I changed `{}` in {} and `{}` in {}. ",
        ident(rng),
        rng.pick(FILES),
        ident(rng),
        rng.pick(FILES)
    );
    let _ = write!(
        s,
        "`cargo test` now reports {} passed, {} failed. Next I'll {} the {} handling.",
        rng.range(40, 160),
        rng.below(3),
        rng.pick(VERBS),
        rng.pick(NOUNS)
    );
    s
}

pub(crate) fn followup_text(rng: &mut Rng) -> String {
    let mut s = rng.pick(FOLLOWUPS).to_string();
    // Occasionally the human writes a longer, multi-point message; skip
    // points already made so the message does not repeat itself.
    for (percent, joiner) in [(30, "\n\nAlso: "), (15, "\n\nAnd one more thing: ")] {
        if rng.chance(percent) {
            let extra = rng.pick(FOLLOWUPS);
            if !s.contains(extra) {
                s.push_str(joiner);
                s.push_str(extra);
            }
        }
    }
    s
}

/// A ~6,000-char pasted terminal log inside a human message.
pub(crate) fn pasted_log(rng: &mut Rng) -> String {
    let (_, body, _) = loop {
        // Want a test run; retry flavours deterministically until we get one.
        let r = command_output(rng, 5_800);
        if r.0.starts_with("cargo test") {
            break r;
        }
    };
    format!(
        "I ran it on my machine (macOS, TZ=Europe/Rome) and it fails, here's the full output:\n\n```\n{}\n```\n\nCan you look at this before continuing?",
        fit(body, 5_800)
    )
}

pub(crate) fn final_text(rng: &mut Rng) -> String {
    format!(
        "All done. Summary of the changes in ~/Desktop/ora:\n\n\
         - `ora export --csv` writes RFC 4180 CSV (header `date,project,start,end,hours,note`), quoting fields that contain commas, quotes or newlines.\n\
         - The weekly report now converts each entry to the configured zone before bucketing, so sessions that cross midnight or a DST change land on the right day.\n\
         - Added {} tests (report, export, tz); the full suite passes and `cargo clippy -- -D warnings` is clean.\n\
         - No new dependencies.\n\n\
         Let me know if you want the CSV columns in a different order or a `--from/--to` range filter.",
        rng.range(12, 30)
    )
}
