//! `ctxlog tail`: a session's timeline records as calls are committed, for an operator watching
//! a live session. On PostgreSQL it sleeps on `LISTEN` (every append sends a `NOTIFY`) and
//! still re-reads every `--poll` seconds in case a notification was lost; on other stores it
//! polls. The records come from the same fold and [`Timeline`] as `replay`, so they are the
//! lines `replay --json` would print.

use std::time::Duration;

use ctxlog::event::Event;
use ctxlog::replay::{for_each_event, CallRecord, GuardRecord, Timeline};
use ctxlog::store::StoreError;
use ctxlog::{SessionError, State, Store, StreamId};
use ctxlog_store_postgres::Listener;

use crate::analysis::HostGuard;
use crate::args::TailArgs;
use crate::error::CliError;
use crate::output::{details, header, json_line, row, Out};
use crate::session_id::pick_session;
use crate::stores::{open_store, Access};

/// Folds a stream incrementally and turns each committed call into its timeline record.
struct Follower {
    stream: StreamId,
    state: State,
    timeline: Timeline,
}

impl Follower {
    fn new(stream: StreamId) -> Self {
        Follower { stream, state: State::new(), timeline: Timeline::new() }
    }

    /// The calls committed since the last read, and the guards a host raised between them.
    fn read_new(&mut self, store: &dyn Store) -> Result<Vec<Line>, SessionError> {
        let (stream, state, timeline) = (self.stream, &mut self.state, &mut self.timeline);
        let mut lines = Vec::new();
        for_each_event(store, stream, state.version() + 1, None, |version, ev| {
            ctxlog::session::hydrate(store, stream, state, &ev)?;
            let after_call = state.calls().checked_sub(1);
            state.apply(version, &ev).map_err(|violation| SessionError::Invariant { stream, violation })?;
            if let Event::GuardRaised(g) = &ev {
                if g.call.is_none() {
                    let record =
                        GuardRecord { kind: g.kind.name(), detail: format!("{} (knob: {})", g.detail, g.knob) };
                    lines.push(Line::Guard(HostGuard { version, after_call, record }));
                }
            }
            lines.extend(timeline.feed(version, &ev, state).map(|r| Line::Call(Box::new(r))));
            Ok(())
        })?;
        Ok(lines)
    }
}

/// What `tail` prints: a call, or a guard a host raised after one (its own line: the call's
/// line is out already).
enum Line {
    Call(Box<CallRecord>),
    Guard(HostGuard),
}

/// How `--follow` learns that something was appended.
enum Wake {
    Listen(Box<Listener>),
    Poll,
}

impl Wake {
    /// Waits up to `poll` for a sign of new records.
    fn wait(&mut self, poll: Duration) -> Result<(), StoreError> {
        match self {
            Wake::Listen(l) => l.wait(poll).map(drop),
            Wake::Poll => {
                std::thread::sleep(poll);
                Ok(())
            }
        }
    }
}

fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// `tail`
pub fn tail(args: &TailArgs, out: &mut Out<'_>) -> Result<(), CliError> {
    if !(args.poll.is_finite() && args.poll > 0.0) {
        return Err(CliError::Usage(format!("--poll {} is not a positive number of seconds", args.poll)));
    }
    let poll = Duration::from_secs_f64(args.poll);
    let url = &args.session.store.store;
    let json = args.session.store.json;
    // A reader never writes: every store is opened read-only. A read-only open of a file store
    // sees the files as they were when it opened (sled's is even a copy), so polling reopens it.
    let mut store: Box<dyn Store> = open_store(url, Access::ReadOnly)?;
    let id = pick_session(store.as_ref(), args.session.session.as_deref())?;
    if !args.follow && store.head(id)?.is_none() {
        return Err(SessionError::NotFound(id).into());
    }
    // LISTEN before the first read, so nothing committed in between goes unnoticed.
    let mut wake = if is_postgres(url) { Wake::Listen(Box::new(Listener::open(url, id)?)) } else { Wake::Poll };
    let mut follower = Follower::new(id);
    let limit = args.max_calls.unwrap_or(u64::MAX);
    let mut printed = 0u64;
    if !json {
        out.line(&header())?;
    }
    let backlog = follower.read_new(store.as_ref())?;
    let calls = backlog.iter().filter(|l| matches!(l, Line::Call(_))).count();
    let mut skip = calls.saturating_sub(args.lines);
    for l in &backlog {
        match l {
            Line::Call(_) if skip > 0 => skip -= 1,
            Line::Guard(_) if skip > 0 => {}
            Line::Call(_) if printed >= limit => return Ok(()),
            l => printed += print(out, l, json)?,
        }
    }
    if !args.follow {
        return Ok(());
    }
    let mut down = false;
    while printed < limit {
        let step = (|| -> Result<Vec<Line>, CliError> {
            wake.wait(poll)?;
            if !is_postgres(url) {
                store = open_store(url, Access::ReadOnly)?;
            }
            Ok(follower.read_new(store.as_ref())?)
        })();
        match step {
            Ok(lines) => {
                if down {
                    out.err("tail: the store answers again")?;
                    down = false;
                }
                for l in &lines {
                    if printed >= limit {
                        break;
                    }
                    printed += print(out, l, json)?;
                }
            }
            // A server restart is not the end of a live session: say so once, keep trying.
            Err(
                CliError::Store(e @ StoreError::Unavailable { .. })
                | CliError::Session(SessionError::Store(e @ StoreError::Unavailable { .. })),
            ) => {
                if !down {
                    out.err(&format!("tail: {e}; retrying every {:.1} s", poll.as_secs_f64()))?;
                    down = true;
                }
                std::thread::sleep(poll);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Prints one line (and its details); returns how many calls it printed (`--max-calls`).
fn print(out: &mut Out<'_>, l: &Line, json: bool) -> Result<u64, CliError> {
    match (l, json) {
        (Line::Call(r), true) => out.line(&json_line(r))?,
        (Line::Call(r), false) => {
            out.line(&row(r))?;
            details(r).iter().try_for_each(|d| out.line(d))?;
        }
        (Line::Guard(g), true) => out.line(&serde_json::json!({"guard_between_calls": g.to_json()}).to_string())?,
        (Line::Guard(g), false) => out.line(&g.detail_line())?,
    }
    Ok(u64::from(matches!(l, Line::Call(_))))
}
