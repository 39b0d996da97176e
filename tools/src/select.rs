//! `--session`: a full id, a unique prefix of one, `latest` (the session with the most recent
//! call), or the name a client gave it (`x-ctxlog-session`); omitted, the store's only session.
//! Anything that matches several sessions is refused with the candidates listed.

use ctxlog::{Store, StreamId};

use crate::catalog::{when, Catalog, Entry};
use crate::error::CliError;

/// Candidates listed in an ambiguity error.
const SHOWN: usize = 10;

fn flag(message: String) -> CliError {
    CliError::Flag { flag: "--session", message }
}

/// Parses a full session id (for commands that create one: `import --session`).
pub fn parse_session(s: &str) -> Result<StreamId, CliError> {
    s.parse().map_err(|e| flag(format!("--session {s:?} is not a UUID: {e}")))
}

/// The session `arg` selects in `store`.
pub fn resolve(store: &dyn Store, arg: Option<&str>) -> Result<StreamId, CliError> {
    let Some(arg) = arg else { return only(store) };
    if let Ok(id) = arg.parse::<StreamId>() {
        return Ok(id);
    }
    if arg == "latest" {
        return latest(&Catalog::read(store)?);
    }
    // A prefix is matched against the ids alone (one listing); a name needs every session's
    // start, read only when no id starts with `arg`.
    let wanted = arg.to_ascii_lowercase();
    let looks_like_id = !wanted.is_empty() && wanted.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if looks_like_id {
        let ids: Vec<StreamId> =
            store.streams()?.into_iter().filter(|id| id.to_string().starts_with(&wanted)).collect();
        match ids.as_slice() {
            [one] => return Ok(*one),
            [] => {}
            many => {
                let catalog = Catalog::read(store)?;
                let found: Vec<&Entry> = many.iter().filter_map(|id| catalog.get(*id)).collect();
                return Err(ambiguous(&format!("{} sessions have ids starting with {arg:?}", many.len()), &found));
            }
        }
    }
    let catalog = Catalog::read(store)?;
    let named: Vec<&Entry> = catalog.entries.iter().filter(|e| e.name.as_deref() == Some(arg)).collect();
    // A name follows its conversation: of the sessions it names, the ones that did not go on in
    // another session of the same name (the end of a chain of successors).
    let current: Vec<&Entry> = named
        .iter()
        .copied()
        .filter(|e| !e.links.iter().any(|l| l.from == e.id && named.iter().any(|n| n.id == l.to)))
        .collect();
    match current.as_slice() {
        [one] => Ok(one.id),
        [] => Err(flag(format!(
            "--session {arg:?} names no session: give a session id, a unique prefix of one, `latest`, or the \
             name a client sent in x-ctxlog-session (`ctxlog sessions` lists them)"
        ))),
        many => Err(ambiguous(&format!("{} sessions are named {arg:?}", many.len()), many)),
    }
}

/// The store's only session.
fn only(store: &dyn Store) -> Result<StreamId, CliError> {
    let streams = store.streams()?;
    match streams.as_slice() {
        [one] => Ok(*one),
        [] => Err(flag("the store holds no session".into())),
        many => Err(flag(format!(
            "the store holds {} sessions; choose one with --session (an id, a unique prefix, `latest` or a \
             session name; `ctxlog sessions` lists them): {}",
            many.len(),
            many.iter().take(5).map(ToString::to_string).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The session with the most recent call (or, without calls, the most recently created).
fn latest(catalog: &Catalog) -> Result<StreamId, CliError> {
    let Some(newest) = catalog.entries.iter().map(Entry::last_active_ms).max() else {
        return Err(flag("--session latest: the store holds no session".into()));
    };
    let tied: Vec<&Entry> = catalog.entries.iter().filter(|e| e.last_active_ms() == newest).collect();
    match tied.as_slice() {
        [one] => Ok(one.id),
        many => Err(ambiguous(
            &format!("--session latest: {} sessions were last active at the same time", many.len()),
            many,
        )),
    }
}

/// An ambiguity error listing the candidates: id, name, last call, first user message.
fn ambiguous(what: &str, found: &[&Entry]) -> CliError {
    let mut lines: Vec<String> = found
        .iter()
        .take(SHOWN)
        .map(|e| {
            let name = e.name.as_deref().map_or_else(String::new, |n| format!(" name {n:?},"));
            let user = e.first_user.as_deref().map_or_else(String::new, |u| format!(" \"{u}\""));
            format!("  {}{name} last call {}{user}", e.id, when(e.last_call_ms))
        })
        .collect();
    if found.len() > SHOWN {
        lines.push(format!("  … and {} more", found.len() - SHOWN));
    }
    flag(format!("{what}; choose one with a longer prefix or the full id:\n{}", lines.join("\n")))
}
