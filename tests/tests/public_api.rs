//! The curated public API: what `docs/public-api.md` promises is what the crate root exports,
//! and a host's imports compile from the root alone.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::BTreeSet;
use std::time::{Duration, UNIX_EPOCH};

#[allow(unused_imports)]
use ctxlog::{
    parse_message, Appended, BlobId, CacheTtl, Committed, Config, ConfigError, DecodeError, Event, ExpectedVersion,
    IntegrityReport, MemoryStore, Message, Millis, Plan, Prepared, Produced, Record, Request, RequestError,
    RequestOptions, Session, SessionError, Snapshot, StaleCause, State, Store, StoreError, StoredRecord, StreamId,
    SummaryJob, Timestamp, Usage, UsageError, UsageFormat, Version, Violation, WireError, WireFormat,
};

fn workspace_file(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Names in the `pub use` items of `core/src/lib.rs`.
fn root_exports(lib_rs: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = lib_rs;
    while let Some(start) = rest.find("\npub use ") {
        let item = &rest[start + 9..];
        let end = item.find(';').unwrap();
        let body = &item[..end];
        let list = match (body.find('{'), body.rfind('}')) {
            (Some(open), Some(close)) => &body[open + 1..close],
            _ => body.rsplit("::").next().unwrap(),
        };
        names.extend(list.split(',').map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()));
        rest = &item[end..];
    }
    names
}

/// Names in the root table of `docs/public-api.md` (backquoted, in its "Items" column).
fn documented_root(doc: &str) -> BTreeSet<String> {
    let table = doc.split("At the crate root").nth(1).unwrap().split("\n\n").nth(1).unwrap();
    table
        .lines()
        .skip(2)
        .filter_map(|row| row.trim_end_matches('|').rsplit('|').next())
        .flat_map(|items| items.split('`').skip(1).step_by(2).map(|n| n.split_whitespace().next().unwrap().to_owned()))
        .collect()
}

#[test]
fn the_documented_root_is_exactly_what_the_crate_root_exports() {
    // Given the semver list and the crate root
    let documented = documented_root(&workspace_file("docs/public-api.md"));
    let exported = root_exports(&workspace_file("core/src/lib.rs"));
    // Then each names the same items: nothing exported without a promise, nothing promised
    // that is not there.
    assert!(exported.len() > 30, "parsed {exported:?}");
    assert_eq!(
        exported.difference(&documented).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "exported but not in docs/public-api.md"
    );
    assert_eq!(
        documented.difference(&exported).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "documented but not exported"
    );
}

#[test]
fn the_parsers_of_this_test_see_a_missing_item() {
    let lib = "//! doc\npub use a::{B, C};\npub use d::E;\n";
    assert_eq!(root_exports(lib), ["B", "C", "E"].map(String::from).into());
    let doc = "At the crate root:\n\n| Concept | Items |\n|---|---|\n| x | `B`, `C` (what) |\n\nafter";
    assert_eq!(documented_root(doc), ["B", "C"].map(String::from).into());
}

#[test]
fn the_session_api_takes_a_timestamp_whatever_unit_the_host_holds() {
    // Given one instant held three ways by a host
    let from_clock = Timestamp::from_system_time(UNIX_EPOCH + Duration::from_secs(1_767_225_600));
    let from_secs = Timestamp::from_secs(1_767_225_600);
    let from_db: Millis = 1_767_225_600_000;
    // Then they are the same instant, and the session records it in milliseconds
    assert_eq!(from_clock, from_secs);
    assert_eq!(from_secs, Timestamp::from_millis(from_db));
    let store = MemoryStore::new();
    let session = Session::create(&store, StreamId::random(), WireFormat::Anthropic, Config::default(), from_clock)
        .expect("create");
    assert_eq!(session.state().info().map(|m| m.started_at), Some(from_db));
}

/// The examples a new user copies from (the tokio service, the core's embed example, the
/// README's Rust blocks) use only the semver API: no path into a `#[doc(hidden)]` module.
#[test]
fn examples_use_only_the_semver_api() {
    let hidden = ["codec", "engine", "media", "policy", "tokens", "view", "wire", "json"];
    for file in ["tokio/examples/service.rs", "core/examples/embed.rs", "README.md"] {
        let text = workspace_file(file);
        for m in hidden {
            for pattern in [format!("ctxlog::{m}::"), format!("ctxlog::{m}}}"), format!("ctxlog::{m};")] {
                assert!(!text.contains(&pattern), "{file} reaches into the internal module `ctxlog::{m}`");
            }
        }
    }
}
