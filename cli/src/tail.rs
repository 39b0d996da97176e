//! `ctxlog tail`: a session's timeline records as calls are committed, for an operator watching
//! a live session. On PostgreSQL it sleeps on `LISTEN` (every append sends a `NOTIFY`) and
//! still re-reads every `--poll` seconds in case a notification was lost; on other stores it
//! polls. The records come from the same fold and [`Timeline`] as `replay`, so they are the
//! lines `replay --json` would print.

use std::time::Duration;

use ctxlog::replay::{for_each_event, CallRecord, Timeline};
use ctxlog::store::StoreError;
use ctxlog::{SessionError, State, Store, StreamId};
use ctxlog_store_postgres::Listener;

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

    /// The records of the calls committed since the last read.
    fn read_new(&mut self, store: &dyn Store) -> Result<Vec<CallRecord>, SessionError> {
        let (stream, state, timeline) = (self.stream, &mut self.state, &mut self.timeline);
        let mut calls = Vec::new();
        for_each_event(store, stream, state.version() + 1, None, |version, ev| {
            ctxlog::session::hydrate(store, stream, state, &ev)?;
            state.apply(version, &ev).map_err(|violation| SessionError::Invariant { stream, violation })?;
            calls.extend(timeline.feed(version, &ev, state));
            Ok(())
        })?;
        Ok(calls)
    }
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
    let skip = backlog.len().saturating_sub(args.lines);
    for r in backlog.iter().skip(skip) {
        if printed >= limit {
            return Ok(());
        }
        print(out, r, json)?;
        printed += 1;
    }
    if !args.follow {
        return Ok(());
    }
    let mut down = false;
    while printed < limit {
        let step = (|| -> Result<Vec<CallRecord>, CliError> {
            wake.wait(poll)?;
            if !is_postgres(url) {
                store = open_store(url, Access::ReadOnly)?;
            }
            Ok(follower.read_new(store.as_ref())?)
        })();
        match step {
            Ok(records) => {
                if down {
                    out.err("tail: the store answers again")?;
                    down = false;
                }
                for r in records.iter().take(usize::try_from(limit - printed).unwrap_or(usize::MAX)) {
                    print(out, r, json)?;
                    printed += 1;
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

fn print(out: &mut Out<'_>, r: &CallRecord, json: bool) -> Result<(), CliError> {
    if json {
        return out.line(&json_line(r));
    }
    out.line(&row(r))?;
    details(r).iter().try_for_each(|d| out.line(d))
}
