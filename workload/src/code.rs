//! Source code and the outputs that quote it: `cat -n` of a file, grep hits, directory listings.

use std::fmt::Write as _;

use crate::rng::Rng;
use crate::vocab::{ident, COMMENTS, FILES, NOUNS, TYPES};

pub(crate) fn code_line(rng: &mut Rng) -> String {
    let n = rng.pick(NOUNS);
    let n2 = rng.pick(NOUNS);
    let t = rng.pick(TYPES);
    let t2 = rng.pick(TYPES);
    let id = ident(rng);
    match rng.below(14) {
        0 => format!("pub fn {id}(&self, {n}: &{t}) -> Result<{t2}, Error> {{"),
        1 => format!("    let {n} = self.{n2}s.iter().filter(|e| e.{n}.is_some()).count();"),
        2 => format!("    // {}", rng.pick(COMMENTS)),
        3 => "}".to_string(),
        4 => "#[derive(Debug, Clone, PartialEq, Eq)]".to_string(),
        5 => format!("pub struct {t} {{\n    pub {n}: {t2},\n    pub {n2}_count: usize,\n}}"),
        6 => format!("    if {n}.len() > {} {{\n        return Err(Error::{t}({n}.len()));\n    }}", rng.range(2, 500)),
        7 => format!("    for {n} in &{n2}s {{\n        total += {n}.minutes as i64;\n    }}"),
        8 => format!("use crate::{}::{t};", rng.pick(&["model", "store", "tz", "report", "export", "config"])),
        9 => format!("    let {n}_{n2} = {id}(&{n}, offset)?;"),
        10 => "".to_string(),
        11 => format!("    {n2}.push({t}::new({n}.start, {n}.end.unwrap_or(now)));"),
        12 => format!("        .map(|r| r.{n}.format(&FORMAT).unwrap_or_default())"),
        _ => format!("    Ok({t2} {{ {n}, {n2}: Vec::with_capacity({}) }})", rng.range(4, 64)),
    }
}

/// Source text; `numbered` mimics `cat -n` output of read_file.
pub(crate) fn code_block(rng: &mut Rng, size: usize, numbered: bool) -> String {
    let mut s = String::new();
    let mut ln = 1;
    while s.len() < size {
        let line = code_line(rng);
        for l in line.lines().chain(if line.is_empty() { Some("") } else { None }) {
            if numbered {
                let _ = writeln!(s, "{ln:>6}\t{l}");
            } else {
                let _ = writeln!(s, "{l}");
            }
            ln += 1;
        }
    }
    s
}

pub(crate) fn grep_output(rng: &mut Rng, size: usize) -> String {
    let mut s = String::new();
    while s.len() < size {
        let f = rng.pick(FILES);
        let ln = rng.range(1, 900);
        let line = code_line(rng);
        let first = line.lines().next().unwrap_or("").trim_start().to_string();
        let _ = writeln!(s, "{f}:{ln}:{first}");
    }
    s
}

pub(crate) fn listing(rng: &mut Rng, size: usize) -> String {
    let mut s = String::new();
    while s.len() < size {
        let (kind, name) = if rng.chance(20) {
            ("dir ", format!("{}/", rng.pick(NOUNS)))
        } else {
            let ext = rng.pick(&["rs", "rs", "rs", "toml", "md", "csv", "json", "snap"]);
            ("file", format!("{}.{ext}", ident(rng)))
        };
        let _ = writeln!(s, "{kind} {:>8}  {name}", rng.range(40, 48_000));
    }
    s
}
