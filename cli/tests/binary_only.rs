//! The CLI package is only the `ctxlog` binary (issue 24, item 6): it has no library target,
//! and no manifest of the workspace (nor the fuzz workspace beside it) depends on it. What the
//! tests, benchmarks and fuzz targets use is the `ctxlog-tools` library.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};

const CLI: &str = "ctxlog-cli";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn manifest(path: &Path) -> toml::Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.parse().unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every package manifest: the workspace's members and the fuzz workspace.
fn manifests() -> Vec<PathBuf> {
    let root = manifest(&workspace().join("Cargo.toml"));
    let members = root["workspace"]["members"].as_array().expect("workspace.members");
    let mut out: Vec<PathBuf> =
        members.iter().map(|m| workspace().join(m.as_str().expect("a member path")).join("Cargo.toml")).collect();
    out.push(workspace().join("fuzz/Cargo.toml"));
    out
}

/// The dependencies `m` (a package manifest, from `dir`) declares on the CLI package, by any
/// name, in any dependency table (plain, dev, build, per target), as `table: key` lines.
fn cli_dependencies(m: &toml::Table, dir: &Path) -> Vec<String> {
    let kinds = ["dependencies", "dev-dependencies", "build-dependencies"];
    let mut tables: Vec<(String, &toml::Table)> =
        kinds.iter().filter_map(|k| m.get(*k).and_then(|t| t.as_table()).map(|t| ((*k).to_owned(), t))).collect();
    for (target, t) in m.get("target").and_then(|t| t.as_table()).into_iter().flatten() {
        for k in kinds {
            if let Some(t) = t.get(k).and_then(|t| t.as_table()) {
                tables.push((format!("target.{target}.{k}"), t));
            }
        }
    }
    let cli_dir = workspace().join("cli").canonicalize().unwrap();
    let mut found = Vec::new();
    for (table, deps) in tables {
        for (key, spec) in deps {
            let package = spec.get("package").and_then(|p| p.as_str()).unwrap_or(key);
            let path = spec.get("path").and_then(|p| p.as_str()).and_then(|p| dir.join(p).canonicalize().ok());
            if package == CLI || path.as_deref() == Some(cli_dir.as_path()) {
                found.push(format!("{table}: {key}"));
            }
        }
    }
    found
}

#[test]
fn no_package_but_the_cli_itself_depends_on_the_cli() {
    let all = manifests();
    assert!(all.len() >= 14, "the members were not read: {all:?}");
    assert!(all.iter().any(|p| p.ends_with("tools/Cargo.toml")), "{all:?}");
    let mut failures = Vec::new();
    for path in &all {
        let m = manifest(path);
        let dir = path.parent().unwrap();
        for d in cli_dependencies(&m, dir) {
            failures.push(format!("{}: {d}", path.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "these depend on the binary package {CLI}; use ctxlog-tools:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_cli_package_has_no_library_target() {
    let cli = workspace().join("cli");
    let m = manifest(&cli.join("Cargo.toml"));
    assert_eq!(m["package"]["name"].as_str(), Some(CLI), "the README's `cargo run -p ctxlog-cli` names it");
    assert!(m.get("lib").is_none(), "cli/Cargo.toml declares a [lib]");
    assert!(!cli.join("src/lib.rs").exists(), "cli/src/lib.rs would be a library target");
}

#[test]
fn the_reader_finds_a_dependency_on_the_cli_by_any_name() {
    let dir = workspace().join("bench");
    let planted = [
        "[dependencies]\nctxlog-cli = { path = \"../cli\" }\n",
        "[dev-dependencies]\nctxlog-cli.workspace = true\n",
        "[dependencies]\nfront = { package = \"ctxlog-cli\", version = \"0.1\" }\n",
        "[dependencies]\nrenamed = { path = \"../cli\" }\n",
        "[target.'cfg(unix)'.build-dependencies]\nctxlog-cli = \"0.1\"\n",
    ];
    for text in planted {
        let m: toml::Table = text.parse().unwrap();
        assert_eq!(cli_dependencies(&m, &dir).len(), 1, "missed in:\n{text}");
    }
    let clean: toml::Table =
        "[dependencies]\nctxlog-tools.workspace = true\nctxlog = { path = \"../core\" }\n".parse().unwrap();
    assert!(cli_dependencies(&clean, &dir).is_empty());
}
