//! No import circle between the files of a crate (issue 24): a reading of every crate's
//! `crate::` paths (in `use` lines and in code) finds none outside core, and core's known ones
//! are listed below, so a new circle (or a known one that grows) fails here, and one that is
//! fixed must leave the list.
//!
//! A file is a module (`src/a/b.rs` is `a::b`); a path `crate::a::b::c` is an import of the
//! deepest file module it names, and `crate::Name` of the module the root re-exports `Name`
//! from. The root (`lib.rs`, `main.rs`) declares and re-exports modules but imports nothing,
//! so it is in no circle; `#[cfg(test)]` modules and comments do not count; `src/bin/` holds
//! binaries of their own and is not read.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Core's known circles: each one a set of files importing each other (a strongly connected
/// component of the import graph). Issue 24 broke the last ones; a new one may not be added.
const KNOWN_CORE_CIRCLES: &[&[&str]] = &[];

/// The import graph of one crate: module → the modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every workspace member with a `src/` folder.
fn crates() -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let members = manifest.split("members = [").nth(1).and_then(|m| m.split(']').next()).unwrap();
    let dirs: Vec<PathBuf> = members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| workspace().join(m))
        .filter(|d| d.join("src").is_dir())
        .collect();
    assert!(dirs.len() >= 10, "the members list was not read: {dirs:?}");
    // The program's library (issue 24, item 6) and the binary are read like every crate.
    assert!(dirs.iter().any(|d| d.ends_with("tools")) && dirs.iter().any(|d| d.ends_with("cli")), "{dirs:?}");
    dirs
}

/// `.rs` files under `dir`, skipping `src/bin`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "bin") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `src/a/b.rs` → `a::b`; `src/a/mod.rs` → `a`; `lib.rs` and `main.rs` → the root, `""`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|l| l == "mod") || (parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main")) {
        parts.pop();
    }
    parts.join("::")
}

/// The file's text without comments and without `#[cfg(test)]` modules.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        if t.starts_with("#[cfg(test)]") && lines.peek().is_some_and(|n| is_mod_block(n)) {
            // Skip the module: count braces until its block closes.
            let mut depth = 0i64;
            for l in lines.by_ref() {
                depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
                if depth <= 0 && l.contains('}') {
                    break;
                }
            }
            continue;
        }
        let code = line.split(" // ").next().unwrap_or(line);
        out.push_str(code);
        out.push('\n');
    }
    out
}

fn is_mod_block(line: &str) -> bool {
    let t = line.trim_start();
    let t = t.strip_prefix("pub(crate) ").or_else(|| t.strip_prefix("pub ")).unwrap_or(t);
    t.starts_with("mod ") && t.trim_end().ends_with('{')
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses a use tree at the start of `s` (after `crate::`, or after `pub use `), pushing every
/// path it names onto `out` (each as its segments, `prefix` first).
fn use_tree(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    let mut i = 0;
    let b = s.as_bytes();
    loop {
        while b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
            i += 1;
        }
        if b.get(i) == Some(&b'{') {
            i += 1;
            loop {
                i += use_tree(&s[i..], &path, out);
                while b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
                    i += 1;
                }
                match b.get(i) {
                    Some(b',') => i += 1,
                    Some(b'}') => return i + 1,
                    _ => return i,
                }
                while b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
                    i += 1;
                }
                if b.get(i) == Some(&b'}') {
                    return i + 1;
                }
            }
        }
        let start = i;
        while b.get(i).is_some_and(|&c| is_ident(char::from(c))) {
            i += 1;
        }
        if i > start {
            let seg = &s[start..i];
            if seg != "self" {
                path.push(seg.to_owned());
            }
        }
        if s[i..].starts_with("::") {
            i += 2;
            continue;
        }
        out.push(path);
        return i;
    }
}

/// Every `crate::` path in `code`.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + 7..];
        // `$crate::` in macros and `ctxlog_crate::` are not this crate's paths.
        if !before.is_some_and(|c| is_ident(c) || c == '$') {
            use_tree(after, &[], &mut out);
        }
        rest = after;
    }
    out
}

/// Names the root re-exports, each with the module it comes from (`pub use a::b::{X, Y};`).
fn root_reexports(root: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = root;
    while let Some(at) = rest.find("pub use ") {
        let after = &rest[at + 8..];
        let after = after.strip_prefix("crate::").unwrap_or(after);
        let mut paths = Vec::new();
        use_tree(after, &[], &mut paths);
        for p in paths {
            if let (Some(name), Some(m)) = (p.last(), resolve(&p, modules)) {
                out.insert(name.clone(), m);
            }
        }
        rest = after;
    }
    out
}

/// The deepest file module a path names, if any.
fn resolve(path: &[String], modules: &BTreeSet<String>) -> Option<String> {
    (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| modules.contains(m))
}

/// The import graph of the crate at `dir`.
fn graph(dir: &Path) -> Graph {
    let src = dir.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let texts: Vec<(String, String)> =
        files.iter().map(|f| (module_of(&src, f), code_of(&std::fs::read_to_string(f).unwrap()))).collect();
    let modules: BTreeSet<String> = texts.iter().map(|(m, _)| m.clone()).filter(|m| !m.is_empty()).collect();
    let root = texts.iter().filter(|(m, _)| m.is_empty()).map(|(_, t)| t.as_str()).collect::<String>();
    let reexports = root_reexports(&root, &modules);
    let mut g = Graph::new();
    for (m, code) in texts.iter().filter(|(m, _)| !m.is_empty()) {
        let edges = g.entry(m.clone()).or_default();
        for p in crate_paths(code) {
            let to = resolve(&p, &modules).or_else(|| p.first().and_then(|n| reexports.get(n).cloned()));
            if let Some(to) = to.filter(|to| to != m) {
                edges.insert(to);
            }
        }
    }
    g
}

/// The strongly connected components with more than one file (Tarjan), each sorted.
fn circles(g: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out.sort();
    t.out
}

/// A circle for people: its files, and each one's imports inside the circle.
fn describe(g: &Graph, circle: &[String]) -> String {
    let inside: BTreeSet<&String> = circle.iter().collect();
    circle
        .iter()
        .map(|m| {
            let to: Vec<&str> = g[m].iter().filter(|t| inside.contains(t)).map(String::as_str).collect();
            format!("{m} → {}", to.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[test]
fn no_crate_has_an_import_circle_between_its_files_but_cores_known_ones() {
    let mut failures = Vec::new();
    for dir in crates() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let g = graph(&dir);
        let found = circles(&g);
        for c in &found {
            println!("{name}: circle {}", describe(&g, c));
        }
        if name == "core" {
            let known: BTreeSet<Vec<String>> =
                KNOWN_CORE_CIRCLES.iter().map(|c| c.iter().map(|m| (*m).to_owned()).collect()).collect();
            for c in found.iter().filter(|c| !known.contains(*c)) {
                failures.push(format!("core: a new (or grown) import circle: {}", describe(&g, c)));
            }
            for k in known.iter().filter(|k| !found.contains(k)) {
                failures
                    .push(format!("core: the known circle {k:?} is gone (or changed): take it off KNOWN_CORE_CIRCLES"));
            }
        } else {
            failures.extend(found.iter().map(|c| format!("{name}: import circle {}", describe(&g, c))));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_reader_finds_a_planted_circle_and_ignores_tests_comments_and_the_root() {
    // Given a crate whose `a` and `b::c` import each other (through a group and an inline
    // path), a root re-export, a comment and a test module that would close other circles,
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    let write = |p: &str, text: &str| std::fs::write(src.join(p), text).unwrap();
    write("lib.rs", "mod a;\nmod b;\nmod d;\npub use d::{Dee, other::Thing};\nuse crate::a::A;\n");
    write("a.rs", "use crate::{b::c::{self, C}, Dee};\npub struct A;\n");
    write("b.rs", "pub mod c;\n");
    write("b/c.rs", "pub fn f() { let _ = crate::a::A; }\n// use crate::d::x;\n");
    write("d.rs", "pub struct Dee;\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n    fn t() {}\n}\n");
    // when it is read,
    let g = graph(dir.path());
    // then the one circle is `a` ↔ `b::c`; `a → d` comes through the root's re-export, and
    // neither the comment nor the test module adds an edge.
    assert_eq!(circles(&g), vec![vec!["a".to_owned(), "b::c".to_owned()]]);
    assert_eq!(g["a"], BTreeSet::from(["b::c".to_owned(), "d".to_owned()]));
    assert!(g["d"].is_empty() && g["b"].is_empty(), "{g:?}");
}

/// Core's layers as ARCHITECTURE.md lists them (`1. \`a\` \`b\`` … `· 3. \`c\``, in the
/// invariant that names this file): module → layer.
fn core_layers() -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    let start = text.find("core's modules come in layers").expect("the layers invariant is gone from ARCHITECTURE.md");
    let block: String = text[start..].lines().skip(3).take_while(|l| l.starts_with("  ")).collect::<Vec<_>>().join(" ");
    let mut layers = BTreeMap::new();
    let mut layer = 0;
    for word in block.split_whitespace() {
        if let Some(n) = word.strip_suffix('.').and_then(|n| n.parse::<usize>().ok()) {
            layer = n;
        } else if let Some(m) = word.strip_prefix('`').and_then(|w| w.strip_suffix('`')) {
            assert!(layers.insert(m.to_owned(), layer).is_none(), "{m} is listed twice");
        }
    }
    assert!(layers.len() >= 20 && layers.values().max() >= Some(&10), "the layers were not read: {layers:?}");
    layers
}

#[test]
fn cores_files_import_only_earlier_layers() {
    let layers = core_layers();
    let g = graph(&workspace().join("core"));
    let top = |m: &str| m.split("::").next().unwrap().to_owned();
    let mut failures = Vec::new();
    for m in g.keys().map(|m| top(m)).collect::<BTreeSet<_>>() {
        if !layers.contains_key(&m) {
            failures.push(format!("core's module `{m}` is in no layer of ARCHITECTURE.md"));
        }
    }
    for (from, to) in g.iter().flat_map(|(f, ts)| ts.iter().map(move |t| (f, t))) {
        let (a, b) = (top(from), top(to));
        if let (Some(la), Some(lb)) = (layers.get(&a), layers.get(&b)) {
            if a != b && lb >= la {
                failures.push(format!(
                    "{from} (layer {la}) imports {to} (layer {lb}): only earlier layers may be imported"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
