//! Core's whole public surface is a reviewed list (issue 24, item 4): every `pub` item of every
//! file of `core/src` — with `#![warn(unreachable_pub)]` in core (and `-D warnings` in CI) a
//! `pub` item is one a path outside the crate reaches — with the public methods of its types,
//! the public fields of its structs and the variants of its enums, is listed in
//! `docs/public-surface.txt`. An item added, removed or renamed fails here until the list is
//! changed with it (`CTXLOG_BLESS=1 cargo test -p ctxlog-tests --test public_surface` rewrites
//! it): growth of the semver surface shows in the diff of a reviewed commit.
//!
//! Read line by line: items at the file's top level (`pub fn`, `struct`, `enum`, `trait`,
//! `type`, `const`, `static`, `mod`, `use`, a `use` spread over lines read whole), `pub fn`
//! inside an inherent `impl` block, `pub` fields inside a `pub struct`, variants of a `pub enum`,
//! the methods of a `pub trait`, and the `pub use` lines of inline `pub mod name { … }` blocks
//! (core's `internal`, which names each engine part the workspace shares).
//! `#[cfg(test)]` modules and comments are skipped. It reads the source as rustfmt leaves it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `src/a/b.rs` → `a::b`, `src/a/mod.rs` → `a`, `src/lib.rs` → `crate`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    if parts == ["lib"] {
        return "crate".into();
    }
    parts.join("::")
}

fn ident(s: &str) -> String {
    s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

/// The name an item line declares: `pub fn name(`, `pub struct Name<`, `pub use a::{B, C};`.
fn declared(rest: &str) -> Option<(String, String)> {
    let rest = rest.trim_start_matches("const fn ").trim_start_matches("unsafe ").trim_start_matches("async ");
    for kw in ["fn", "struct", "enum", "trait", "type", "const", "static", "mod", "union"] {
        if let Some(r) = rest.strip_prefix(kw).and_then(|r| r.strip_prefix(' ')) {
            return Some((kw.to_owned(), ident(r.trim_start_matches("mut "))));
        }
    }
    rest.strip_prefix("use ")
        .map(|r| ("use".to_owned(), r.trim_end_matches(';').split_whitespace().collect::<String>()))
}

/// What a block at the top level is, for the lines inside it.
enum Block {
    Struct(String),
    Enum(String),
    Trait(String),
    Impl(String),
    Other,
}

/// The public surface of one file's text.
fn surface(module: &str, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Option<Block> = None;
    // Inline `pub mod name { … }` blocks (core's `internal`): their indent and name.
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        if t.starts_with("//") || t.is_empty() {
            continue;
        }
        let path = || inline.iter().fold(module.to_owned(), |p, (_, n)| format!("{p}::{n}"));
        if let Some(name) = t.strip_prefix("pub mod ").and_then(|r| r.strip_suffix(" {")) {
            out.push(format!("{}: mod {name}", path()));
            inline.push((indent, name.to_owned()));
            continue;
        }
        if let Some(&(open, _)) = inline.last() {
            if t == "}" && indent == open {
                inline.pop();
            } else if let Some(rest) = t.strip_prefix("pub use ") {
                out.push(format!("{}: use {}", path(), whole_use(rest, &mut lines)));
            }
            continue;
        }
        if indent == 0 && t.starts_with("pub use ") && !t.ends_with(';') {
            out.push(format!("{module}: use {}", whole_use(&t["pub use ".len()..], &mut lines)));
            continue;
        }
        if indent == 0 && t.starts_with("#[cfg(test)]") && lines.peek().is_some_and(|n| n.contains("mod ")) {
            for l in lines.by_ref() {
                if l == "}" {
                    break;
                }
            }
            continue;
        }
        if indent == 0 {
            if t == "}" || t.starts_with("};") {
                block = None;
                continue;
            }
            let opens = t.ends_with('{');
            if let Some(rest) = t.strip_prefix("pub ") {
                if let Some((kw, name)) = declared(rest) {
                    out.push(format!("{module}: {kw} {name}"));
                    let kind = match kw.as_str() {
                        "struct" => Block::Struct(name),
                        "enum" => Block::Enum(name),
                        "trait" => Block::Trait(name),
                        _ => Block::Other,
                    };
                    block = opens.then_some(kind);
                }
            } else if t.starts_with("impl") && opens && !t.contains(" for ") {
                // `impl<S: Store> Session<S> {` → `Session`.
                let head = t.trim_start_matches("impl").trim_end_matches('{').trim();
                let head = if head.starts_with('<') { skip_generics(head) } else { head };
                block = Some(Block::Impl(ident(head.trim_start())));
            } else if opens {
                block = Some(Block::Other);
            }
            continue;
        }
        if indent != 4 {
            continue;
        }
        match &block {
            Some(Block::Struct(s)) => {
                if let Some(f) = t.strip_prefix("pub ").filter(|f| !f.starts_with('(')) {
                    out.push(format!("{module}: field {s}.{}", ident(f)));
                }
            }
            Some(Block::Enum(e)) if t.starts_with(|c: char| c.is_ascii_uppercase()) => {
                out.push(format!("{module}: variant {e}::{}", ident(t)));
            }
            Some(Block::Trait(tr)) => {
                if let Some(("fn", name)) = declared(t).as_ref().map(|(k, n)| (k.as_str(), n.clone())) {
                    out.push(format!("{module}: method {tr}::{name}"));
                }
            }
            Some(Block::Impl(ty)) => {
                if let Some(("fn", name)) =
                    t.strip_prefix("pub ").and_then(declared).as_ref().map(|(k, n)| (k.as_str(), n.clone()))
                {
                    out.push(format!("{module}: method {ty}::{name}"));
                }
            }
            _ => {}
        }
    }
    out
}

/// A `use` that rustfmt spread over lines, read to its `;`, without whitespace.
fn whole_use<'a>(first: &str, lines: &mut impl Iterator<Item = &'a str>) -> String {
    let mut text = first.to_owned();
    while !text.trim_end().ends_with(';') {
        let Some(next) = lines.next() else { break };
        text.push_str(next);
    }
    text.trim_end().trim_end_matches(';').split_whitespace().collect()
}

/// `<S: Store + Clone> Session<S>` → `Session<S>`: past the balanced leading generics.
fn skip_generics(s: &str) -> &str {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return &s[i + 1..];
                }
            }
            _ => {}
        }
    }
    s
}

fn core_surface() -> BTreeSet<String> {
    let src = workspace().join("core/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.iter().flat_map(|f| surface(&module_of(&src, f), &std::fs::read_to_string(f).unwrap())).collect()
}

#[test]
fn cores_public_surface_is_the_reviewed_list() {
    let found = core_surface();
    assert!(found.len() > 300, "the reader found only {} items", found.len());
    let path = workspace().join("docs/public-surface.txt");
    let header = "# core's public surface (tests/tests/public_surface.rs): one item per line. Change it with the code,\n# `CTXLOG_BLESS=1 cargo test -p ctxlog-tests --test public_surface`, and say why in the commit.\n";
    let written = format!("{header}{}\n", found.iter().cloned().collect::<Vec<_>>().join("\n"));
    if std::env::var_os("CTXLOG_BLESS").is_some() {
        std::fs::write(&path, &written).unwrap();
    }
    let listed: BTreeSet<String> = std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_owned)
        .collect();
    let added: Vec<&String> = found.difference(&listed).collect();
    let gone: Vec<&String> = listed.difference(&found).collect();
    assert!(
        added.is_empty() && gone.is_empty(),
        "core's public surface changed; review, then rewrite docs/public-surface.txt with CTXLOG_BLESS=1\nadded: {added:#?}\ngone: {gone:#?}"
    );
}

#[test]
fn the_reader_sees_items_methods_fields_and_variants_but_not_private_or_test_code() {
    let text = "\
pub struct Session<S> {
    pub stream: u64,
    store: S,
}

impl<S: Store + Clone> Session<S> {
    pub fn plan(&self) {}
    fn private(&self) {}
    pub(crate) fn inner(&self) {}
}

impl Drop for Session<u8> {
    fn drop(&mut self) {}
}

pub enum Kind {
    First,
    Second { x: u8 },
}

pub trait Summarizer {
    fn text(&mut self) -> Option<String> {
        None
    }
}

pub(crate) fn hidden() {}
pub const LIMIT: usize = 3;
pub use inner::{A, B};
pub use long::{
    C, D,
};

pub mod shared {
    pub use crate::a::{E, F};
    pub mod deeper {
        pub use crate::b::{
            G,
        };
    }
}

#[cfg(test)]
mod tests {
    pub fn helper() {}
}
";
    let got = surface("m", text);
    assert_eq!(
        got,
        [
            "m: struct Session",
            "m: field Session.stream",
            "m: method Session::plan",
            "m: enum Kind",
            "m: variant Kind::First",
            "m: variant Kind::Second",
            "m: trait Summarizer",
            "m: method Summarizer::text",
            "m: const LIMIT",
            "m: use inner::{A,B}",
            "m: use long::{C,D,}",
            "m: mod shared",
            "m::shared: use crate::a::{E,F}",
            "m::shared: mod deeper",
            "m::shared::deeper: use crate::b::{G,}",
        ]
    );
}
