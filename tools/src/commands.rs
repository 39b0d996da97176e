//! The commands other than `import`/`demo`.

use std::io::Write;

use ctxlog::event::Event;
use ctxlog::internal::wire::{Media, RenderOpts};
use ctxlog::replay::{self, Mode};
use ctxlog::state::State;
use ctxlog::transfer::copy_session;
use ctxlog::{Session, Store, StreamId};
use serde_json::json;

use crate::analysis::{analyze, unfinished, Decision, Keep, Until, What};
use crate::args::{CopyArgs, ExportArgs, InspectArgs, ReplayArgs, RestoreArgs, SessionArgs, StoreArgs, VerifyArgs};
use crate::catalog::{self, is_log_damage, Catalog, Entry};
use crate::error::{output, CliError};
use crate::lineage::Lineage;
use crate::output::{print_timeline_with, Out};
pub use crate::session_id::pick_session;
use crate::stores::{open_store, open_store_with, Access};
use crate::table::{Align, Columns};

fn open_selected(args: &SessionArgs, access: Access) -> Result<(Box<dyn Store>, StreamId), CliError> {
    open_selected_with(args, access, false)
}

fn open_selected_with(
    args: &SessionArgs,
    access: Access,
    accept_loss: bool,
) -> Result<(Box<dyn Store>, StreamId), CliError> {
    let store = open_store_with(&args.store.store, access, accept_loss)?;
    let id = pick_session(store.as_ref(), args.session.as_deref())?;
    Ok((store, id))
}

/// `sessions`: one line per session, read from the ends of each log (`catalog`).
pub fn sessions(args: &StoreArgs, out: &mut Out<'_>) -> Result<(), CliError> {
    let store = open_store(&args.store, Access::ReadOnly)?;
    let catalog = Catalog::read(store.as_ref())?;
    // An unfinished import is not a session yet: say so aside, not in the list.
    for e in &catalog.unfinished {
        out.err(&format!("note: {e}"))?;
    }
    // One damaged session does not hide the others: it is reported, and the command exits 4
    // once the list is out.
    for (id, e) in &catalog.damaged {
        out.err(&format!("damaged: session {id}: {e}"))?;
    }
    let rows: Vec<(&Entry, Lineage)> = catalog.entries.iter().zip(catalog.lineages()).collect();
    let short = catalog.short_ids();
    let short = |id: StreamId| short.get(&id).cloned().unwrap_or_else(|| id.to_string());
    if args.json {
        let list: Vec<_> = rows.iter().map(|(e, l)| catalog::to_json(e, l)).collect();
        out.line(&serde_json::to_string(&list).unwrap_or_default())?;
    } else {
        let heads = [
            ("session", Align::Left),
            ("calls", Align::Right),
            ("msgs", Align::Right),
            ("first call", Align::Left),
            ("last call", Align::Left),
            ("model", Align::Left),
            ("name", Align::Left),
            ("lineage", Align::Left),
            ("first user message", Align::Left),
        ];
        let dash = |s: Option<&str>| s.map_or_else(|| "-".to_owned(), str::to_owned);
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|(e, l)| {
                vec![
                    e.id.to_string(),
                    e.calls.to_string(),
                    e.messages.to_string(),
                    catalog::when(e.first_call_ms),
                    catalog::when(e.last_call_ms),
                    dash(e.model.as_deref()),
                    dash(e.name.as_deref()),
                    l.cell(short),
                    e.first_user.as_deref().map_or_else(|| "-".to_owned(), |u| format!("\"{u}\"")),
                ]
            })
            .collect();
        let table = Columns::new(&heads).gap(2).fitted(&cells);
        out.line(&table.header())?;
        for r in &cells {
            out.line(&table.line(r))?;
        }
    }
    match catalog.damaged.as_slice() {
        [] => Ok(()),
        ids => Err(CliError::InvalidLog(format!(
            "{} session(s) damaged and not listed: {}",
            ids.len(),
            ids.iter().map(|(id, _)| id.to_string()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// `replay`
pub fn replay(args: &ReplayArgs, out: &mut Out<'_>) -> Result<(), CliError> {
    let (store, id) = open_selected(&args.session, Access::ReadOnly)?;
    let mode = if args.lenient { Mode::Lenient } else { Mode::Strict };
    let until = match (args.until, args.call) {
        (Some(v), _) => Until::Version(check_version(store.as_ref(), id, "--until", v)?),
        (None, Some(c)) => Until::Call(c),
        (None, None) => Until::Head,
    };
    // A strict fold refuses an unfinished import; a postmortem (lenient) shows it with a warning.
    let r = analyze(store.as_ref(), id, mode, until, Keep { views: false })?;
    let left = if until == Until::Head { unfinished(id, &r.state) } else { None };
    let timeline: Vec<_> = r.calls.iter().map(|c| c.record.clone()).collect();
    print_timeline_with(out, &timeline, &r.host_guards, &r.pins, &r.trailing, args.session.store.json)?;
    let lineage = catalog::lineage_of(store.as_ref(), id, &r.links);
    for v in &r.violations {
        out.err(&format!("violation (lenient replay went on): {v}"))?;
    }
    if let Some(e) = left {
        out.err(&format!("warning: {e}"))?;
    }
    if !args.session.store.json {
        for l in lineage.sentences(id) {
            out.line(&format!("lineage: this session {l}"))?;
        }
        let guards = timeline.iter().map(|c| c.guards.len()).sum::<usize>() + r.host_guards.len();
        let guards = match guards {
            1 => "1 guard".to_owned(),
            n => format!("{n} guards"),
        };
        out.line(&format!(
            "session {id}: {} events, {} messages, {} calls, {guards}, {} violations",
            r.state.version(),
            r.state.message_count(),
            r.state.calls(),
            r.violations.len()
        ))?;
    }
    Ok(())
}

/// A `--version`/`--until` that names a version of the session: from 1 to its head.
fn check_version(store: &dyn Store, id: StreamId, flag: &'static str, v: u64) -> Result<u64, CliError> {
    if v == 0 {
        return Err(CliError::Flag { flag, message: format!("{flag} counts from 1 (the SessionStarted event)") });
    }
    let head = store.head(id)?.ok_or(ctxlog::SessionError::NotFound(id))?;
    if v > head {
        return Err(CliError::Flag {
            flag,
            message: format!("{flag} {v} is past the head of session {id}, which is version {head}"),
        });
    }
    Ok(v)
}

/// Status of a message in the view, and the reason (the state keeps the edit's kind; its reason
/// is in the log, as the last decision the analysis collected).
fn status(st: &State, last: Option<&Decision>, seq: u64) -> (&'static str, Option<String>) {
    let Some(e) = st.entry(seq) else { return ("missing", None) };
    if st.hidden_by_flush(seq) {
        return ("flushed", Some(format!("summarized by a flush (flushed_prefix_messages {})", st.flushed())));
    }
    match &e.edit {
        None => ("live", None),
        Some(edit) => {
            let reason = match last {
                Some(Decision { what: What::Edited { reason, .. }, .. }) => Some(reason.describe()),
                _ => None,
            };
            (edit.kind.as_str(), reason)
        }
    }
}

/// The decision that set a message's status: `(call, time, as JSON)`.
fn set_by(d: Option<&Decision>) -> (String, String, serde_json::Value) {
    let Some(d) = d else { return ("-".into(), "-".into(), serde_json::Value::Null) };
    let event = match &d.what {
        What::Flushed { .. } => "flushed",
        What::Edited { .. } => "edited",
        What::Restored { .. } => "restored",
        What::Pinned { pin: true, .. } => "pinned",
        What::Pinned { pin: false, .. } => "unpinned",
    };
    let at = d.at_ms.map(ctxlog::time::format_rfc3339);
    let call = match (d.call, d.after_call) {
        (Some(c), _) => c.to_string(),
        (None, Some(c)) => format!("after {c}"),
        (None, None) => "before 0".to_owned(),
    };
    let clock = at.as_deref().and_then(|t| t.get(11..19)).unwrap_or("-").to_owned();
    let json = json!({"event": event, "version": d.version, "call": d.call, "after_call": d.after_call, "at": at});
    (call, clock, json)
}

/// `inspect`
pub fn inspect(args: &InspectArgs, out: &mut Out<'_>) -> Result<(), CliError> {
    let (store, id) = open_selected(&args.session, Access::ReadOnly)?;
    let until = match (args.version, args.call) {
        (Some(v), _) => Until::Version(check_version(store.as_ref(), id, "--version", v)?),
        (None, Some(c)) => Until::Call(c),
        (None, None) => Until::Head,
    };
    let analysis = analyze(store.as_ref(), id, Mode::Strict, until, Keep { views: false })?;
    let st = &analysis.state;
    if args.view {
        for it in st.view() {
            out.raw(&ctxlog::internal::view::render_item(st, it.item))?;
        }
        return Ok(());
    }
    let rows: Vec<_> = analysis
        .messages
        .iter()
        .enumerate()
        .map(|(seq, m)| {
            let seq = seq as u64;
            let last = m.decisions.last();
            let (status, mut reason) = status(st, last, seq);
            if let Some(Decision { what: What::Restored { by, why, partner_of }, .. }) = last {
                let partner = partner_of.map_or_else(String::new, |p| format!(" with seq {p}"));
                reason = Some(format!("restored{partner} by {by}: {why}"));
            }
            if let Some(Decision { what: What::Pinned { pin, by, why }, .. }) = last {
                let done = if *pin { "pinned (never edited nor flushed until unpinned)" } else { "unpinned" };
                reason = Some(format!("{done} by {by}: {why}"));
            }
            let (call, time, by) = set_by(last);
            (seq, m.role.as_str(), m.tokens, status, reason, call, time, by)
        })
        .collect();
    let lineage = catalog::lineage_of(store.as_ref(), id, &analysis.links);
    let coverage = st.coverage(st.view().len());
    if args.session.store.json {
        let messages: Vec<_> = rows
            .iter()
            .map(|(seq, role, tokens, status, reason, _, _, by)| {
                json!({"seq": seq, "role": role, "tokens": tokens, "status": status, "reason": reason, "set_by": by})
            })
            .collect();
        let doc = json!({
            "version": st.version(),
            "calls": st.calls(),
            "compacted": st.compacted(),
            "flushed": st.flushed(),
            "view_tokens": st.view_tokens(),
            "hidden": coverage.hidden,
            "represented": coverage.represented,
            "messages": messages,
            "guards_between_calls": analysis.host_guards.iter().map(|g| g.to_json()).collect::<Vec<_>>(),
            "lineage": lineage.to_json(id),
        });
        out.line(&doc.to_string())?;
    } else {
        out.line(&format!(
            "session {id} at version {}, {}: {} messages, compacted {}, flushed {}, view {} messages / {} tokens; {} of {} hidden messages represented",
            st.version(),
            st.calls().checked_sub(1).map_or_else(|| "before the first call".to_owned(), |c| format!("after call {c}")),
            st.message_count(),
            st.compacted(),
            st.flushed(),
            st.view().len(),
            st.view_tokens(),
            coverage.represented,
            coverage.hidden
        ))?;
        for g in &analysis.host_guards {
            out.line(g.detail_line().trim_start())?;
        }
        for l in lineage.sentences(id) {
            out.line(&format!("lineage: this session {l}"))?;
        }
        let heads = [
            ("seq", Align::Right),
            ("role", Align::Left),
            ("tokens", Align::Right),
            ("status", Align::Left),
            ("call", Align::Right),
            ("time", Align::Right),
            ("reason", Align::Left),
        ];
        let cells: Vec<Vec<String>> = rows
            .into_iter()
            .map(|(seq, role, tokens, status, reason, call, time, _)| {
                vec![
                    seq.to_string(),
                    role.to_owned(),
                    tokens.to_string(),
                    status.to_owned(),
                    call,
                    time,
                    reason.unwrap_or_default(),
                ]
            })
            .collect();
        let table = Columns::new(&heads).gap(2).fitted(&cells);
        out.line(&table.header())?;
        for r in &cells {
            out.line(&table.line(r))?;
        }
    }
    Ok(())
}

/// `verify`: the store as a whole (its backend's own checks, repairs earlier opens made),
/// then every session (checksums, invariants, every served view, blobs, the snapshot).
pub fn verify(args: &VerifyArgs, out: &mut Out<'_>) -> Result<(), CliError> {
    let store = open_store(&args.store.store, Access::ReadOnly)?;
    let integrity = store.check_integrity()?;
    let bad = integrity.problems.len() + if args.accept_repairs { 0 } else { integrity.repairs.len() };
    let json = args.store.json;
    if !integrity.problems.is_empty() || !integrity.repairs.is_empty() {
        if json {
            out.line(
                &json!({"store": args.store.store, "ok": bad == 0, "problems": integrity.problems,
                        "repairs": integrity.repairs, "repairs_accepted": args.accept_repairs})
                .to_string(),
            )?;
        } else {
            for p in &integrity.problems {
                out.line(&format!("BAD store: {p}"))?;
            }
            let tag = if args.accept_repairs { "repaired (accepted)" } else { "REPAIRED" };
            for r in &integrity.repairs {
                out.line(&format!("{tag}: {r}"))?;
            }
        }
    }
    for n in &integrity.notes {
        out.err(&format!("note: {n}"))?;
    }
    let ids = match &args.session {
        Some(s) => vec![pick_session(store.as_ref(), Some(s))?],
        None => store.streams()?,
    };
    let mut bad_sessions = 0;
    for id in ids {
        let report = match replay::verify(store.as_ref(), id) {
            Ok(report) => report,
            // A stream the store cannot read at all (its head is damaged) is a finding like any
            // other: report it and go on with the next session.
            Err(e) if is_log_damage(&e) => {
                let kind = ctxlog::replay::ProblemKind::Damaged { error: e.to_string() };
                let problem = ctxlog::replay::Problem { stream: id, version: None, kind };
                ctxlog::replay::VerifyReport { problems: vec![problem], ..Default::default() }
            }
            Err(e) => return Err(e.into()),
        };
        if json {
            out.line(
                &json!({"session": id.to_string(), "ok": report.ok(), "events": report.events, "calls": report.calls,
                        "blobs": report.blobs, "snapshot_checked": report.snapshot_checked,
                        "problems": report.problems.iter().map(ToString::to_string).collect::<Vec<_>>()})
                .to_string(),
            )?;
        } else if report.ok() {
            out.line(&format!(
                "ok  {id}: {} events, {} calls re-rendered, {} blobs, snapshot {}",
                report.events,
                report.calls,
                report.blobs,
                if report.snapshot_checked { "matches replay" } else { "absent" }
            ))?;
        } else {
            out.line(&format!("BAD {id}: {} problem(s)", report.problems.len()))?;
            for p in &report.problems {
                out.line(&format!("    {p}"))?;
            }
        }
        if !report.ok() {
            bad_sessions += 1;
        }
    }
    let mut failed = Vec::new();
    if !integrity.problems.is_empty() {
        failed.push(format!("{} problem(s) with the store", integrity.problems.len()));
    }
    if !integrity.repairs.is_empty() && !args.accept_repairs {
        failed.push(format!(
            "{} repair(s) made by an earlier open (pass --accept-repairs once you have looked at them)",
            integrity.repairs.len()
        ));
    }
    if bad_sessions > 0 {
        failed.push(format!("{bad_sessions} session(s) failed verification"));
    }
    match failed.is_empty() {
        true => Ok(()),
        false => Err(CliError::InvalidLog(failed.join("; "))),
    }
}

/// `export`: the messages as appended, streamed from their records (the session is opened
/// first, so a log that does not fold, or an unfinished import, exports nothing). A file is
/// written aside and renamed once complete.
pub fn export(args: &ExportArgs, out: &mut Out<'_>) -> Result<(), CliError> {
    let (store, id) = open_selected(&args.session, Access::ReadOnly)?;
    let head = Session::open(store.as_ref(), id)?.state().version();
    let mut missing = Vec::new();
    match &args.out {
        Some(path) => {
            let mut name = path.as_os_str().to_owned();
            name.push(".partial");
            let partial = std::path::PathBuf::from(name);
            let what = path.display().to_string();
            let file = std::fs::File::create(&partial).map_err(output(&what))?;
            let mut w = std::io::BufWriter::new(file);
            let written = export_messages(store.as_ref(), id, head, &mut missing, |line| {
                w.write_all(line).map_err(output(&what))
            })
            .and_then(|()| w.flush().map_err(output(&what)))
            .and_then(|()| std::fs::rename(&partial, path).map_err(output(&what)));
            if written.is_err() {
                let _ = std::fs::remove_file(&partial);
            }
            written?;
        }
        None => export_messages(store.as_ref(), id, head, &mut missing, |line| out.raw(line))?,
    }
    for id in missing {
        out.err(&format!("warning: blob {id} is missing; exported as a reference"))?;
    }
    Ok(())
}

/// Writes each message of `id` up to version `head` as one JSONL line, media inlined, then
/// the answer to its last call when the client never sent it back.
fn export_messages(
    store: &dyn Store,
    id: StreamId,
    head: u64,
    missing: &mut Vec<ctxlog::BlobId>,
    mut write: impl FnMut(&[u8]) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let source = |b: &ctxlog::BlobId| store.get_blob(b).ok().flatten();
    let opts = RenderOpts { meta: true, media: Media::Inline(&source) };
    let mut from = 1;
    // Each message in its session's format (a Responses session's lines are items).
    let mut format = ctxlog::WireFormat::Anthropic;
    let mut line = |m: &ctxlog::Message, format: ctxlog::WireFormat| {
        let (mut json, miss) = ctxlog::internal::wire::to_json_in(format, m, opts);
        missing.extend(miss);
        json.push('\n');
        write(json.as_bytes())
    };
    // A relayed conversation's last answer is recorded with its call (`AnswerReceived`), not
    // appended: the client never sent it back. It ends the transcript.
    let mut last_answer: Vec<(u64, ctxlog::Message)> = Vec::new();
    while from <= head {
        let batch = store.read(id, from, ctxlog::session::READ_CHUNK)?;
        let Some(last) = batch.last().map(|r| r.version) else { break };
        for rec in batch.into_iter().take_while(|r| r.version <= head) {
            let ev = ctxlog::codec::decode(id, rec.version, &rec.record).map_err(ctxlog::SessionError::from)?;
            match ev {
                Event::SessionStarted(e) => format = e.format,
                Event::MessageAppended(e) => {
                    last_answer.clear();
                    line(&e.message, format)?;
                }
                // A Responses answer is several items, one event each.
                Event::AnswerReceived(e) => {
                    if last_answer.last().is_some_and(|(call, _)| *call != e.call) {
                        last_answer.clear();
                    }
                    last_answer.push((e.call, e.message));
                }
                _ => {}
            }
        }
        from = last + 1;
    }
    for (_, m) in last_answer {
        line(&m, format)?;
    }
    Ok(())
}

/// `restore`
pub fn restore(args: &RestoreArgs, accept_loss: bool, out: &mut Out<'_>) -> Result<(), CliError> {
    let (store, id) = open_selected_with(&args.session, Access::ReadWrite, accept_loss)?;
    let mut session = Session::open(store.as_ref(), id)?;
    // A restore the invariants refuse (nothing to restore, no such seq) is a bad `--seq`, not a
    // bad log: exit 2 like any other input error.
    let (done, result) = if args.unpin {
        ("unpinned", session.pin(args.seq, false, "ctxlog restore --unpin", &args.why))
    } else if args.pin {
        ("restored and pinned", session.restore_pinned(args.seq, "ctxlog restore --pin", &args.why))
    } else {
        ("restored", session.restore(args.seq, "ctxlog restore", &args.why))
    };
    let committed = result.map_err(|e| match e {
        ctxlog::SessionError::Refused { violation, .. } => {
            let what = if args.unpin { "unpin" } else { "restore" };
            CliError::Usage(format!("cannot {what} --seq {}: {violation}", args.seq))
        }
        e => e.into(),
    })?;
    if args.session.store.json {
        let pinned = session.state().entry(args.seq).is_some_and(|e| e.is_pinned());
        let doc = json!({"session": id.to_string(), "seq": args.seq, "version": committed.version, "pinned": pinned});
        out.line(&doc.to_string())?;
    } else {
        out.line(&format!("{done} seq {} of session {id} (version {})", args.seq, committed.version))?;
    }
    Ok(())
}

/// `copy`
pub fn copy(args: &CopyArgs, accept_loss: bool, out: &mut Out<'_>) -> Result<(), CliError> {
    let from = open_store(&args.from, Access::ReadOnly)?;
    let to = open_store_with(&args.to, Access::Create, accept_loss)?;
    let ids = match &args.session {
        Some(s) => vec![pick_session(from.as_ref(), Some(s))?],
        None => from.streams()?,
    };
    let all = args.session.is_none();
    for id in ids {
        let c = match copy_session(from.as_ref(), to.as_ref(), id) {
            // Copying every session passes over an unfinished import (it is not a session yet).
            Err(e @ ctxlog::SessionError::Unfinished { .. }) if all => {
                out.err(&format!("note: not copied: {e}"))?;
                continue;
            }
            other => other?,
        };
        if args.json {
            out.line(
                &json!({"session": id.to_string(), "records": c.records, "blobs": c.blobs,
                             "missing_blobs": c.missing_blobs.iter().map(ToString::to_string).collect::<Vec<_>>()})
                .to_string(),
            )?;
        } else {
            out.line(&format!("copied {id}: {} records, {} blobs", c.records, c.blobs))?;
        }
        for b in &c.missing_blobs {
            out.err(&format!("warning: blob {b} referenced by {id} is missing in the source"))?;
        }
    }
    Ok(())
}
