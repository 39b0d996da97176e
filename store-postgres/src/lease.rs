//! Stream leases across a fleet: [`Store::try_lease`](ctxlog::Store::try_lease) on PostgreSQL.
//!
//! A lease is a session-level advisory lock, `pg_try_advisory_lock(key)`, taken on **one
//! dedicated connection per [`PgStore`](crate::PgStore)** (the *lease connection*, opened on
//! the first `try_lease`, `application_name` `ctxlog-lease` unless the URL names one). It is
//! not a pooled connection, so calls in flight that hold leases never use up the pool. One
//! thread owns that connection and serves requests over a channel:
//!
//! * `try_lease` sends an acquire and waits for the answer (one round trip to the server, or
//!   none if this store already holds the key: advisory locks are re-entrant per session, so
//!   the thread keeps its own table of held keys and answers "taken" from it);
//! * dropping the [`Lease`] only *sends* the release (`pg_advisory_unlock`) to the thread: it
//!   never waits for the network;
//! * when the holder process dies, its connection closes and the server drops every lock the
//!   session held. (A host that vanishes without closing its sockets is noticed by the server's
//!   TCP keepalive, `tcp_keepalives_idle`; lower it on the server if a fleet must not wait for
//!   the operating system's default of two hours.)
//!
//! **Key space.** The key is the first 8 bytes, as a signed bigint, of
//! `sha256("ctxlog lease\0" ‖ current_schema ‖ "\0" ‖ stream uuid)`: the one-bigint key space
//! of advisory locks of the database (`pg_locks`: `locktype = 'advisory'`, `objsubid = 1`),
//! shared with the store's schema-migration lock and with any other application's bigint
//! advisory locks in the same database. Two logs in different schemas of one database get
//! different keys for the same stream. A collision (two streams, or a stream and someone
//! else's lock, with one key) only makes them wait for each other; it never lets two holders
//! share a stream, since a stream always maps to the same key.
//!
//! **A broken lease connection.** When the server restarts or the connection breaks, every
//! lease held on it is gone on the server at that moment, whatever this process believes. The
//! thread notices at the next request or within [`PING_EVERY`] while leases are held,
//! reconnects and tries to take the held keys again; a key another process took meanwhile is
//! logged as lost (`tracing` warning) and stays held locally until its `Lease` is dropped.
//! A lease is therefore a way to keep calls from racing, not a proof of exclusivity: the
//! version check of `append` (`Conflict`) stays the safety net that keeps the log right.

use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Mutex;
use std::time::Duration;

use ctxlog::store::{Lease, StoreError, StreamId};
use postgres::Client;
use sha2::{Digest, Sha256};

use crate::connect::Connector;
use crate::error::{classify, full_message, store_error, unavailable, Class};

/// How often the lease thread checks its connection while it holds leases.
pub const PING_EVERY: Duration = Duration::from_secs(2);

const TRY_LOCK: &str = "SELECT pg_try_advisory_lock($1)";
const UNLOCK: &str = "SELECT pg_advisory_unlock($1)";

/// The advisory-lock key of `stream` in the log whose tables live in `schema`.
pub fn lease_key(schema: &str, stream: StreamId) -> i64 {
    let mut hash = Sha256::new();
    hash.update(b"ctxlog lease\0");
    hash.update(schema.as_bytes());
    hash.update(b"\0");
    hash.update(stream.0.as_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    for (to, from) in first.iter_mut().zip(digest.iter()) {
        *to = *from;
    }
    i64::from_be_bytes(first)
}

/// What the lease thread is asked to do.
enum Request {
    Acquire { stream: StreamId, reply: mpsc::SyncSender<Result<Option<(i64, u64)>, StoreError>> },
    Release { key: i64, id: u64 },
}

/// The guard inside a [`Lease`]: dropping it sends the release.
struct Held {
    key: i64,
    id: u64,
    to: mpsc::Sender<Request>,
}

impl Drop for Held {
    fn drop(&mut self) {
        // The thread exits only when every sender is gone, and this is one: the send fails
        // only if the thread died, and then its connection (and the lock) died with it.
        let _ = self.to.send(Request::Release { key: self.key, id: self.id });
    }
}

/// The leases of one store: the channel to its lease thread, started on first use.
pub(crate) struct Leases {
    connector: Connector,
    /// How long `try_lease` waits for the thread's answer.
    answer_within: Duration,
    to: Mutex<Option<mpsc::Sender<Request>>>,
}

impl Leases {
    pub(crate) fn new(connector: Connector, answer_within: Duration) -> Leases {
        Leases { connector: connector.named("ctxlog", "ctxlog-lease"), answer_within, to: Mutex::new(None) }
    }

    pub(crate) fn try_lease(&self, stream: StreamId) -> Result<Option<Lease>, StoreError> {
        let (reply, answer) = mpsc::sync_channel(1);
        let to = self.send(Request::Acquire { stream, reply })?;
        match answer.recv_timeout(self.answer_within) {
            Ok(Ok(Some((key, id)))) => Ok(Some(Lease::new(Held { key, id, to }))),
            Ok(Ok(None)) => Ok(None),
            Ok(Err(e)) => Err(e),
            // The thread grants nothing to a caller that stopped waiting (its answer cannot be
            // delivered, so it releases the key at once).
            Err(RecvTimeoutError::Timeout) => Err(unavailable(
                self.connector.location(),
                format!(
                    "stream {stream}: take the lease: the lease connection did not answer within {:?}",
                    self.answer_within
                ),
            )),
            Err(RecvTimeoutError::Disconnected) => Err(unavailable(
                self.connector.location(),
                format!("stream {stream}: take the lease: the lease thread stopped"),
            )),
        }
    }

    /// Sends `request` to the thread, starting it first if needed; returns a sender for the
    /// lease's release.
    fn send(&self, request: Request) -> Result<mpsc::Sender<Request>, StoreError> {
        // Held only to send or install the sender: never across a wait.
        let mut to = self.to.lock().unwrap_or_else(|e| e.into_inner());
        let request = match to.as_ref() {
            Some(t) => match t.send(request) {
                Ok(()) => return Ok(t.clone()),
                // The thread is gone (it cannot panic, but a new one costs nothing): start anew.
                Err(mpsc::SendError(r)) => r,
            },
            None => request,
        };
        let (tx, rx) = mpsc::channel();
        let worker =
            Worker { connector: self.connector.clone(), client: None, schema: None, held: HashMap::new(), next_id: 0 };
        std::thread::Builder::new()
            .name("ctxlog-pg-lease".into())
            .spawn(move || worker.run(rx))
            .map_err(|e| StoreError::backend(crate::error::BACKEND, "start the lease thread", e))?;
        tx.send(request).map_err(|_| self.stopped())?;
        *to = Some(tx.clone());
        Ok(tx)
    }

    fn stopped(&self) -> StoreError {
        unavailable(self.connector.location(), "the lease thread stopped".into())
    }
}

/// A key this store holds.
struct Entry {
    /// Which lease holds it (a release from an older lease of the same key is ignored).
    id: u64,
    /// Whether the lock is held on the current connection (false once that connection broke
    /// and another process took the key before the reconnect).
    on_server: bool,
}

/// The lease thread's state.
struct Worker {
    connector: Connector,
    client: Option<Client>,
    /// `current_schema()` of the connection, part of every key.
    schema: Option<String>,
    held: HashMap<i64, Entry>,
    next_id: u64,
}

impl Worker {
    /// Serves requests until the store and every lease are gone (every sender dropped); the
    /// connection then closes, which frees anything left on the server.
    fn run(mut self, rx: mpsc::Receiver<Request>) {
        loop {
            let wait = if self.held.is_empty() { Duration::from_secs(3600) } else { PING_EVERY };
            match rx.recv_timeout(wait) {
                Ok(Request::Acquire { stream, reply }) => {
                    let answer = self.acquire(stream);
                    if let Err(mpsc::SendError(Ok(Some((key, id))))) = reply.send(answer) {
                        // The caller stopped waiting: nobody will drop this lease, release now.
                        self.release(key, id);
                    }
                }
                Ok(Request::Release { key, id }) => self.release(key, id),
                Err(RecvTimeoutError::Timeout) => self.ping(),
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// The connection, (re)opened if needed; a new connection takes the held keys again.
    fn connection(&mut self) -> Result<&mut Client, StoreError> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.lost_connection();
        }
        if self.client.is_none() {
            let mut client = self.connector.connect("connect the lease connection")?;
            if self.schema.is_none() {
                let row = client
                    .query_one("SELECT coalesce(current_schema(), '')", &[])
                    .map_err(|e| store_error(self.connector.location(), "read current_schema()", e))?;
                let schema: String =
                    row.try_get(0).map_err(|e| store_error(self.connector.location(), "read current_schema()", e))?;
                self.schema = Some(schema);
            }
            for (key, entry) in &mut self.held {
                entry.on_server = match client.query_one(TRY_LOCK, &[key]).and_then(|r| r.try_get::<_, bool>(0)) {
                    Ok(true) => true,
                    Ok(false) => {
                        tracing::warn!(
                            store = self.connector.location(),
                            key,
                            "lease lost: the lease connection broke and another process took the key; the \
                             append's version check still keeps the log right"
                        );
                        false
                    }
                    Err(e) => {
                        return Err(store_error(self.connector.location(), "take the held leases again", e));
                    }
                };
            }
            self.client = Some(client);
        }
        match self.client.as_mut() {
            Some(c) => Ok(c),
            None => Err(unavailable(self.connector.location(), "the lease connection is closed".into())),
        }
    }

    /// The connection broke: the server dropped every lock it held.
    fn lost_connection(&mut self) {
        self.client = None;
        for entry in self.held.values_mut() {
            entry.on_server = false;
        }
    }

    fn acquire(&mut self, stream: StreamId) -> Result<Option<(i64, u64)>, StoreError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            if let Err(e) = self.connection() {
                self.lost_connection();
                return Err(e);
            }
            let key = lease_key(self.schema.as_deref().unwrap_or(""), stream);
            if self.held.contains_key(&key) {
                return Ok(None);
            }
            let Some(client) = self.client.as_mut() else {
                return Err(unavailable(self.connector.location(), "the lease connection is closed".into()));
            };
            match client.query_one(TRY_LOCK, &[&key]).and_then(|r| r.try_get::<_, bool>(0)) {
                Ok(true) => {
                    self.next_id += 1;
                    let id = self.next_id;
                    self.held.insert(key, Entry { id, on_server: true });
                    return Ok(Some((key, id)));
                }
                Ok(false) => return Ok(None),
                // A connection that died since its last use: once more on a fresh one.
                Err(e) if classify(&e) == Class::Connection && attempt == 1 => self.lost_connection(),
                Err(e) => {
                    if classify(&e) == Class::Connection {
                        self.lost_connection();
                    }
                    return Err(store_error(self.connector.location(), &format!("stream {stream}: take the lease"), e));
                }
            }
        }
    }

    fn release(&mut self, key: i64, id: u64) {
        match self.held.get(&key) {
            Some(entry) if entry.id == id => {}
            _ => return,
        }
        let Some(entry) = self.held.remove(&key) else { return };
        if !entry.on_server {
            return;
        }
        if let Some(client) = self.client.as_mut() {
            match client.query_one(UNLOCK, &[&key]) {
                Ok(_) => {}
                Err(e) if classify(&e) == Class::Connection => self.lost_connection(),
                Err(e) => {
                    // The lock stays with the session until it ends: close it, so nothing is
                    // held that no lease stands for.
                    tracing::warn!(store = self.connector.location(), key, error = %full_message(&e),
                        "release a lease failed; reopening the lease connection");
                    self.lost_connection();
                }
            }
        }
    }

    /// While leases are held, checks the connection so a broken one is replaced (and its
    /// keys taken again) without waiting for the next request.
    fn ping(&mut self) {
        if self.held.is_empty() {
            // Idle: let an idle connection go rather than keep a server slot for nothing.
            return;
        }
        let alive = self.client.as_mut().is_some_and(|c| c.is_valid(PING_EVERY).is_ok());
        if !alive {
            self.lost_connection();
            if let Err(e) = self.connection() {
                self.lost_connection();
                tracing::warn!(store = self.connector.location(), error = %e, "lease connection: reconnect failed");
            }
        }
    }
}
