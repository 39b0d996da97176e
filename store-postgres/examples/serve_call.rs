//! Serving one model call of a session on whichever worker of a fleet the request landed on.
//!
//! The log is the truth: before deciding, a worker folds whatever other workers committed
//! (`catch_up`); a plan made on a head that moved meanwhile gets `Conflict` from the store's
//! primary key, and the worker catches up and decides again; a server that is down or
//! restarting is `Unavailable`, and the worker waits and tries again. `serve_call` is that
//! loop, written once: the multi-worker drill (`tests/tests/postgres_drill.rs`) and the
//! session-moving test run it.
//!
//! Run against a server: `cargo run -p ctxlog-store-postgres --example serve_call -- postgres://USER@HOST/DB`

use std::time::Duration;

use ctxlog::session::Committed;
use ctxlog::store::StoreError;
use ctxlog::{Message, Session, SessionError, Store, Timestamp};

/// How many times a call is decided again before the error is handed to the caller.
pub const MAX_ATTEMPTS: u32 = 30;

/// What the provider answered.
#[derive(Debug, Clone, Copy)]
pub struct Reply {
    /// When the response arrived.
    pub at: Timestamp,
    /// What the provider billed, if it said ([`ctxlog::Usage::from_anthropic`] and friends).
    pub usage: Option<ctxlog::Usage>,
}

/// Why a call was not served.
#[derive(Debug)]
pub enum ServeError<E> {
    /// The session or the store failed in a way a retry does not fix (or retries ran out).
    Session(SessionError),
    /// The provider failed; nothing was committed for this attempt.
    Dispatch(E),
}

impl<E> From<SessionError> for ServeError<E> {
    fn from(e: SessionError) -> Self {
        ServeError::Session(e)
    }
}

/// Serves one call of `session`: appends `turn` (exactly once), plans on the latest head,
/// dispatches, commits. `on_retry` hears about every conflict and outage that was retried.
///
/// If a commit's outcome was unknown (the server stayed away longer than the store's
/// resolve window), the retry may serve the turn a second time: the log then holds both
/// calls, each recorded with the view it really sent.
pub fn serve_call<S: Store, E>(
    session: &mut Session<S>,
    turn: &[Message],
    now: impl Fn() -> Timestamp,
    mut dispatch: impl FnMut(&[String]) -> Result<Reply, E>,
    mut on_retry: impl FnMut(&StoreError),
) -> Result<Committed, ServeError<E>> {
    let searched_from = session.state().message_count();
    let mut appended = false;
    let mut pause = Duration::from_millis(20);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match serve_once(session, turn, searched_from, &mut appended, &now, &mut dispatch) {
            Ok(done) => return Ok(done),
            // Another worker moved the session on: catch up and decide again, at once.
            Err(ServeError::Session(SessionError::Store(e @ StoreError::Conflict { .. })))
                if attempt < MAX_ATTEMPTS =>
            {
                on_retry(&e);
            }
            // The server is down or restarting: wait, then catch up and decide again.
            Err(ServeError::Session(SessionError::Store(e @ StoreError::Unavailable { .. })))
                if attempt < MAX_ATTEMPTS =>
            {
                on_retry(&e);
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
}

fn serve_once<S: Store, E>(
    session: &mut Session<S>,
    turn: &[Message],
    searched_from: u64,
    appended: &mut bool,
    now: &impl Fn() -> Timestamp,
    dispatch: &mut impl FnMut(&[String]) -> Result<Reply, E>,
) -> Result<Committed, ServeError<E>> {
    session.catch_up()?;
    // An append that failed with `Unavailable` may have landed: look before appending again.
    if !*appended && !holds_turn(session, searched_from, turn)? {
        session.append(turn.to_vec())?;
    }
    *appended = true;
    // Workers' clocks differ, and a session's calls are served in order: never before the
    // last call another worker recorded.
    let not_before = Timestamp::from_millis(session.state().last_request_at().unwrap_or(0));
    let plan = session.plan(now().max(not_before))?;
    let (request, _missing_blobs) = session.render_plan(&plan);
    match dispatch(&request) {
        Ok(reply) => Ok(session.commit(plan, reply.at.max(not_before), reply.usage)?),
        Err(e) => {
            session.abort(plan);
            Err(ServeError::Dispatch(e))
        }
    }
}

/// Whether the log holds `turn` as consecutive messages at or after `from`. (Media is stored
/// as blob references, so a turn with inline images never compares equal: give such turns an
/// id of your own and look for that instead.)
pub fn holds_turn<S: Store>(session: &Session<S>, from: u64, turn: &[Message]) -> Result<bool, SessionError> {
    let count = session.state().message_count();
    // Messages out of the view are read back from the log.
    let tail = session.messages(from.min(count)..count)?;
    Ok(!turn.is_empty() && tail.windows(turn.len()).any(|w| w.iter().zip(turn).all(|(e, m)| **e == *m)))
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use ctxlog::internal::wire::parse_message;
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: serve_call postgres://USER@HOST/DB");
        return Ok(());
    };
    let now = || Timestamp::from_system_time(std::time::SystemTime::now());
    // Two workers, as two processes would have them: each its own store handle and session.
    let worker_a = ctxlog_store_postgres::PgStore::open(&url)?;
    let worker_b = ctxlog_store_postgres::PgStore::open(&url)?;
    let id = ctxlog::StreamId::random();
    let mut on_a = Session::create(&worker_a, id, ctxlog::WireFormat::Anthropic, ctxlog::Config::default(), now())?;
    let ask = |text: &str| parse_message(&format!(r#"{{"role":"user","content":"{text}"}}"#));
    let provider = |_: &[String]| Ok::<_, String>(Reply { at: now(), usage: None });
    let served = serve_call(&mut on_a, &[ask("first question")?], now, provider, |_| {});
    println!("worker A served call 0 at version {}", served.map_err(|e| format!("{e:?}"))?.version);
    let mut on_b = Session::open(&worker_b, id)?; // the next call lands on worker B
    let served = serve_call(&mut on_b, &[ask("second question")?], now, provider, |_| {});
    println!("worker B served call 1 at version {}", served.map_err(|e| format!("{e:?}"))?.version);
    // Worker A still holds the old head; its next call catches up first.
    let served = serve_call(&mut on_a, &[ask("third question")?], now, provider, |e| println!("retried: {e}"));
    println!("worker A served call 2 at version {}", served.map_err(|e| format!("{e:?}"))?.version);
    Ok(())
}
