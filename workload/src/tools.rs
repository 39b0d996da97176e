//! Tool calls: which tool fits a drawn result size, its input, and its result text.

use std::fmt::Write as _;

use crate::code::{code_block, grep_output, listing};
use crate::json::Val;
use crate::logs::command_output;
use crate::rng::Rng;
use crate::sizes::fit;
use crate::vocab::{ident, COMMENTS, CRATES, DIRS, FILES, NOUNS, SEARCHES, SNIPPETS, TYPES};

/// One tool call and the result it gets.
pub(crate) struct Call {
    pub(crate) name: &'static str,
    pub(crate) input: Vec<(&'static str, Val)>,
    pub(crate) result: String,
    pub(crate) is_error: bool,
}

/// Picks a tool appropriate for the result size and builds input + result.
pub(crate) fn tool_call(rng: &mut Rng, size: usize) -> Call {
    let roll = rng.below(100);
    let name = if size < 160 && roll < 45 {
        "write_file"
    } else {
        match roll % 20 {
            0..=6 => "read_file",
            7..=10 => "grep",
            11..=16 => "run_command",
            17..=18 => "list_dir",
            _ => "web_search",
        }
    };
    let mut is_error = false;
    let (input, body) = match name {
        "write_file" => {
            let path = rng.pick(FILES);
            let len = rng.range(200, 1800) as usize;
            let content = code_block(rng, len, false);
            let msg =
                format!("Successfully wrote {} bytes to {path} (formatted with rustfmt, 0 diagnostics)", content.len());
            (vec![("path", Val::S(path.to_string())), ("content", Val::S(content))], msg)
        }
        "read_file" => {
            let path = rng.pick(FILES);
            (vec![("path", Val::S(path.to_string()))], code_block(rng, size, true))
        }
        "grep" => {
            let pat = match rng.below(4) {
                0 => format!("fn {}", ident(rng)),
                1 => rng.pick(TYPES).to_string(),
                2 => format!("{}\\(", ident(rng)),
                _ => "TODO|FIXME".to_string(),
            };
            let path = rng.pick(DIRS);
            let body = grep_output(rng, size);
            (vec![("pattern", Val::S(pat)), ("path", Val::S(path.to_string()))], body)
        }
        "run_command" => {
            let (cmd, body, err) = command_output(rng, size);
            is_error = err;
            let timeout = *[60u64, 120, 300, 600].get(rng.below(4) as usize).unwrap_or(&120);
            (vec![("command", Val::S(cmd)), ("timeout", Val::N(timeout))], body)
        }
        "list_dir" => {
            let path = rng.pick(DIRS);
            (vec![("path", Val::S(path.to_string()))], listing(rng, size))
        }
        _ => {
            let q = rng.pick(SEARCHES).to_string();
            (vec![("query", Val::S(q))], search_results(rng, size))
        }
    };
    // write_file replies are short by nature; everything else is sized to
    // the drawn target so the distribution holds.
    let result = fit(body, size);
    Call { name, input, result, is_error }
}

pub(crate) fn search_results(rng: &mut Rng, size: usize) -> String {
    let mut s = String::new();
    let mut i = 1;
    while s.len() < size {
        let c = rng.pick(CRATES);
        let t = rng.pick(TYPES);
        let _ = writeln!(
            s,
            "{i}. {c} - {t} and {} handling\n   https://docs.rs/{c}/latest/{c}/struct.{t}.html\n   {}. See also the {} guide; note that {}.\n",
            rng.pick(NOUNS),
            rng.pick(SNIPPETS),
            rng.pick(NOUNS),
            rng.pick(COMMENTS)
        );
        i += 1;
    }
    s
}
