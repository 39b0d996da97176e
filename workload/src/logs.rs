//! Terminal output of the commands an agent runs: test runs, builds, git history and diffs, the
//! program itself.

use std::fmt::Write as _;

use crate::code::code_line;
use crate::rng::Rng;
use crate::vocab::{ident, COMMENTS, CRATES, FILES, NOUNS, SNIPPETS, TYPES};

/// A command plus output of the matching flavour; returns `is_error`.
pub(crate) fn command_output(rng: &mut Rng, size: usize) -> (String, String, bool) {
    let mut s = String::new();
    match rng.below(6) {
        0 | 1 => {
            let filter = rng.pick(&["", " report", " export", " tz", " --test cli"]);
            let failing = rng.chance(25);
            let mut passed = 0;
            let mut failed = Vec::new();
            let _ = writeln!(s, "   Compiling ora v0.3.1 (/Users/dev/Desktop/ora)");
            let _ =
                writeln!(s, "    Finished `test` profile [unoptimized + debuginfo] target(s) in 4.{}s", rng.below(99));
            let _ = writeln!(
                s,
                "     Running unittests src/main.rs (target/debug/deps/ora-{})\n",
                rng.alnum(16).to_lowercase()
            );
            while s.len() < size {
                let name = format!("{}::tests::{}", rng.pick(&["report", "export", "tz", "store", "cli"]), ident(rng));
                if failing && rng.chance(8) {
                    let _ = writeln!(s, "test {name} ... FAILED");
                    failed.push(name);
                } else {
                    let _ = writeln!(s, "test {name} ... ok");
                    passed += 1;
                }
            }
            for f in &failed {
                let _ = writeln!(
                    s,
                    "\n---- {f} stdout ----\nthread '{f}' panicked at src/report.rs:{}:9:\nassertion `left == right` failed\n  left: {}\n right: {}",
                    rng.range(10, 400),
                    rng.range(100, 999),
                    rng.range(100, 999)
                );
            }
            let status = if failed.is_empty() { "ok" } else { "FAILED" };
            let _ = writeln!(s, "\ntest result: {status}. {passed} passed; {} failed; 0 ignored", failed.len());
            (format!("cargo test{filter}"), s, !failed.is_empty())
        }
        2 => {
            let erroring = rng.chance(35);
            while s.len() < size {
                if rng.chance(40) {
                    let _ = writeln!(
                        s,
                        "   Compiling {} v{}.{}.{}",
                        rng.pick(CRATES),
                        rng.below(4),
                        rng.below(30),
                        rng.below(12)
                    );
                } else {
                    let kind = if erroring { "error[E0308]: mismatched types" } else { "warning: unused variable" };
                    let f = rng.pick(FILES);
                    let ln = rng.range(3, 700);
                    let line = code_line(rng);
                    let first = line.lines().next().unwrap_or("");
                    let _ = writeln!(
                        s,
                        "{kind}\n  --> {f}:{ln}:{}\n   |\n{ln:>3} | {first}\n   |     ^^^^^^ expected `{}`, found `{}`\n",
                        rng.range(1, 40),
                        rng.pick(TYPES),
                        rng.pick(TYPES)
                    );
                }
            }
            let cmd = if rng.chance(50) { "cargo build" } else { "cargo clippy --all-targets -- -D warnings" };
            (cmd.to_string(), s, erroring)
        }
        3 => {
            while s.len() < size {
                let _ = writeln!(
                    s,
                    "commit {}\nAuthor: Dana Ruiz <dana@example.com>\nDate:   Mon Feb {} 1{}:{:02}:00 2026 +0100\n\n    {} {}: {}\n",
                    rng.alnum(40).to_lowercase(),
                    rng.range(2, 27),
                    rng.below(9),
                    rng.below(60),
                    rng.pick(&["fix", "add", "refactor", "test", "docs"]),
                    rng.pick(NOUNS),
                    rng.pick(COMMENTS)
                );
            }
            ("git log --stat -n 40".to_string(), s, false)
        }
        4 => {
            let f = rng.pick(FILES);
            let _ = writeln!(s, "diff --git a/{f} b/{f}\n--- a/{f}\n+++ b/{f}");
            while s.len() < size {
                let _ = writeln!(s, "@@ -{0},7 +{0},9 @@", rng.range(1, 600));
                for _ in 0..rng.range(3, 9) {
                    let sign = rng.pick(&[" ", " ", "+", "-"]);
                    let line = code_line(rng);
                    let _ = writeln!(s, "{sign}{}", line.lines().next().unwrap_or(""));
                }
            }
            (format!("git diff {f}"), s, false)
        }
        _ => {
            let bin = rng.pick(&["report --week", "export --csv", "report --tz Europe/Rome", "log --today"]);
            let _ = writeln!(s, "date        project         hours  note");
            while s.len() < size {
                let _ = writeln!(
                    s,
                    "2026-02-{:02}  {:<14}  {:>2}.{:02}  {}",
                    rng.range(1, 28),
                    rng.pick(NOUNS),
                    rng.below(10),
                    rng.below(100),
                    rng.pick(SNIPPETS)
                );
            }
            (format!("cargo run -q -- {bin}"), s, false)
        }
    }
}
