//! A small connection pool: idle clients in a `Mutex<Vec<_>>`, a count of live ones, and a
//! `Condvar` for callers waiting while all are busy. Hand-rolled because this is all a sync
//! store needs (checkout, return, drop the broken); r2d2 would add a crate, a background
//! reaper thread and health checks the store does itself where it matters (see
//! `PgStore::with_conn`: a request that fails on a dead idle connection is retried once on a
//! fresh one).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ctxlog::store::StoreError;
use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

use crate::connect::Connector;
use crate::error::{backend, classify, Class, PgError};

/// A client plus the statements prepared on it (a statement belongs to its connection).
pub(crate) struct PgConn {
    client: Client,
    statements: HashMap<&'static str, Statement>,
    /// Set when a request failed because the connection is gone.
    broken: bool,
}

impl PgConn {
    /// Runs a cached statement, returning its rows.
    pub(crate) fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        let result = self.statement(sql).and_then(|s| self.client.query(&s, params));
        self.note(result)
    }

    /// Runs a cached statement, returning the number of rows it changed.
    pub(crate) fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        let result = self.statement(sql).and_then(|s| self.client.execute(&s, params));
        self.note(result)
    }

    /// The raw client, for transactions and `LISTEN`.
    pub(crate) fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Marks the connection broken when `result` failed because the connection is gone.
    pub(crate) fn note<T>(&mut self, result: Result<T, postgres::Error>) -> Result<T, postgres::Error> {
        if let Err(e) = &result {
            if classify(e) == Class::Connection {
                self.broken = true;
            }
        }
        result
    }

    /// The statement for `sql`, prepared on first use on this connection.
    fn statement(&mut self, sql: &'static str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        self.statements.insert(sql, s.clone());
        Ok(s)
    }
}

struct Slots {
    idle: Vec<PgConn>,
    live: usize,
}

/// The pool.
pub(crate) struct Pool {
    connector: Connector,
    location: String,
    size: usize,
    checkout_timeout: Duration,
    slots: Mutex<Slots>,
    freed: Condvar,
}

impl Pool {
    pub(crate) fn new(connector: Connector, size: usize, checkout_timeout: Duration) -> Pool {
        Pool {
            location: connector.location().to_owned(),
            connector,
            size: size.max(1),
            checkout_timeout,
            slots: Mutex::new(Slots { idle: Vec::new(), live: 0 }),
            freed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        // The guarded data is a list and a counter, each updated in one step: never torn.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How every connection is opened (also for LISTEN and the leases, which keep their own).
    pub(crate) fn connector(&self) -> &Connector {
        &self.connector
    }

    fn connect(&self) -> Result<Client, StoreError> {
        self.connector.connect("connect")
    }

    /// Runs `f` on a pooled connection: an idle one, a new one if the pool has room, or the
    /// next one returned. The connection goes back to the pool afterwards unless it broke.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut PgConn) -> R) -> Result<R, StoreError> {
        let mut conn = self.take()?;
        // Frees the slot if `f` panics (the connection is then dropped, closing it).
        let mut slot = SlotGuard { pool: self, armed: true };
        let out = f(&mut conn);
        slot.armed = false;
        if conn.broken || conn.client.is_closed() {
            self.release_slot();
        } else {
            self.give_back(conn);
        }
        Ok(out)
    }

    fn take(&self) -> Result<PgConn, StoreError> {
        let deadline = Instant::now() + self.checkout_timeout;
        let mut slots = self.lock();
        loop {
            if let Some(conn) = slots.idle.pop() {
                if conn.broken || conn.client.is_closed() {
                    slots.live -= 1;
                    continue;
                }
                return Ok(conn);
            }
            if slots.live < self.size {
                // Reserve the slot, connect without holding the lock.
                slots.live += 1;
                drop(slots);
                return match self.connect() {
                    Ok(client) => Ok(PgConn { client, statements: HashMap::new(), broken: false }),
                    Err(e) => {
                        self.release_slot();
                        Err(e)
                    }
                };
            }
            let now = Instant::now();
            if now >= deadline {
                let waited_ms = self.checkout_timeout.as_millis() as u64;
                return Err(backend(
                    &self.location,
                    "check out a connection",
                    PgError::PoolExhausted { size: self.size, waited_ms },
                ));
            }
            slots = self.freed.wait_timeout(slots, deadline - now).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Drops every idle connection (after a server restart they are all dead).
    pub(crate) fn clear_idle(&self) {
        let mut slots = self.lock();
        let n = slots.idle.len();
        slots.idle.clear();
        slots.live -= n;
        drop(slots);
        self.freed.notify_all();
    }

    fn release_slot(&self) {
        self.lock().live -= 1;
        self.freed.notify_one();
    }

    fn give_back(&self, conn: PgConn) {
        self.lock().idle.push(conn);
        self.freed.notify_one();
    }

    /// Connections open right now (idle or checked out).
    pub(crate) fn live(&self) -> usize {
        self.lock().live
    }
}

/// Gives a checked-out connection's slot back if the closure using it panicked.
struct SlotGuard<'a> {
    pool: &'a Pool,
    armed: bool,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.pool.release_slot();
        }
    }
}
