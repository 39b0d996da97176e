//! `import` (and `demo`): a validated transcript through the engine, call by call, on a
//! simulated clock; the finished session is then written to the target store in one atomic
//! append, so an import is all or nothing.

use std::io::Write;

use ctxlog::config::Config;
use ctxlog::replay::{CallRecord, Timeline};
use ctxlog::session::{encode_snapshot, new_session_id, Prepared, Produced};
use ctxlog::time::Millis;
use ctxlog::transfer::copy_session;
use ctxlog::wire::parse_timestamp_ms;
use ctxlog::{MemoryStore, Session, SessionError, Store, StreamId, Timestamp};

use crate::error::{output, CliError};
use crate::transcript::Transcript;

/// Simulated start when no line carries a timestamp: 2026-01-01T00:00:00Z.
pub const DEFAULT_START_MS: Millis = 1_767_225_600_000;

/// How to import.
pub struct ImportOptions<'a> {
    /// Engine knobs.
    pub config: Config,
    /// Session id (random if `None`).
    pub session: Option<StreamId>,
    /// Simulated time between calls for lines without a timestamp.
    pub call_interval_ms: Millis,
    /// Receives each call's view as one JSONL line.
    pub views: Option<&'a mut dyn Write>,
    /// Inline media in `views`.
    pub inline_media: bool,
}

/// What an import did.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The session id.
    pub session: StreamId,
    /// One record per call.
    pub timeline: Vec<CallRecord>,
    /// Messages appended.
    pub messages: u64,
    /// Records written to the target.
    pub records: u64,
    /// Blobs written to the target.
    pub blobs: u64,
}

/// Runs `transcript` through the engine and writes the session to `target`.
pub fn import(
    transcript: &Transcript,
    target: &dyn Store,
    mut opts: ImportOptions<'_>,
    mut on_call: impl FnMut(&CallRecord) -> Result<(), CliError>,
) -> Result<Imported, CliError> {
    let id = opts.session.unwrap_or_else(new_session_id);
    if target.head(id)?.is_some() {
        return Err(SessionError::Exists(id).into());
    }
    let first_ts = transcript.lines.iter().find_map(|l| l.message.meta.timestamp.as_ref());
    let start = first_ts.and_then(|t| parse_timestamp_ms(t).ok()).unwrap_or(DEFAULT_START_MS);

    let mem = MemoryStore::new();
    let mut session = Session::create(&mem, id, transcript.format, opts.config.clone(), Timestamp::from_millis(start))?;
    let mut timeline = Timeline::new();
    let mut records = Vec::new();
    let mut pending = Vec::new();
    let mut clock = start;
    for line in &transcript.lines {
        let m = &line.message;
        if m.role == ctxlog::message::Role::Assistant {
            if !pending.is_empty() {
                session.append(std::mem::take(&mut pending))?;
            }
            let stamped = m.meta.timestamp.as_ref().and_then(|t| parse_timestamp_ms(t).ok());
            // A call's clock never goes backwards, even if the transcript's does.
            clock = stamped.unwrap_or(clock + opts.call_interval_ms).max(clock);
            let reported = m.meta.usage.as_ref().and_then(|u| ctxlog::wire::usage_of(u).ok().flatten());
            let plan = session.plan(Timestamp::from_millis(clock))?;
            if let Some(w) = opts.views.as_deref_mut() {
                write_view(w, &session, &plan, opts.inline_media)?;
            }
            let committed = session.commit(plan, Timestamp::from_millis(clock), reported)?;
            let first = committed.version + 1 - committed.events.len() as u64;
            for (i, ev) in committed.events.iter().enumerate() {
                if let Some(rec) = timeline.feed(first + i as u64, ev, session.state()) {
                    on_call(&rec)?;
                    records.push(rec);
                }
            }
            // Prepare runs between calls, as a host would run its summarizer in the background:
            // every job the engine has (a span of messages, condensing summaries), until none is
            // left or one is discarded (asking again would only repeat it).
            while let Some(job) = session.summary_job() {
                let text = if job.is_condense() {
                    ctxlog::summary::condense(session.state(), &job)
                } else {
                    ctxlog::summary::extractive(session.state(), &job)
                };
                if let Prepared::Discarded(_) = session.prepare(&job, text, Produced::extractive())? {
                    break;
                }
            }
        }
        pending.push(m.clone());
    }
    if !pending.is_empty() {
        session.append(pending)?;
    }
    let copied = copy_session(&mem, target, id)?;
    // The snapshot is a cache; failing to write it loses nothing.
    if let Ok(snap) = encode_snapshot(session.state()) {
        target.put_snapshot(id, &snap)?;
    }
    Ok(Imported {
        session: id,
        timeline: records,
        messages: session.state().message_count(),
        records: copied.records,
        blobs: copied.blobs,
    })
}

fn write_view<S: Store>(
    w: &mut dyn Write,
    session: &Session<S>,
    plan: &ctxlog::Plan,
    inline: bool,
) -> Result<(), CliError> {
    let mut line = format!("{{\"call\":{},\"messages\":[", plan.call()).into_bytes();
    let messages: Vec<Vec<u8>> = if inline {
        session.render_plan(plan).0.into_iter().map(String::into_bytes).collect()
    } else {
        session.plan_view(plan).iter().map(|b| b.strip_suffix(b"\n").unwrap_or(b).to_vec()).collect()
    };
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            line.push(b',');
        }
        line.extend_from_slice(m);
    }
    line.extend_from_slice(b"]}\n");
    w.write_all(&line).map_err(output("the views file"))
}
