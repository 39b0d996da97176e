//! Load shedding at the connection limit: the connections that have not yet sent a whole
//! request head, oldest first, so that at the limit the oldest of them is closed to make room.
//!
//! Why: a flood of idle or half-sent connections (slowloris) otherwise holds every slot for
//! the header timeout, and a real request waits behind all of them in the kernel's accept
//! queue. Closing a connection whose first request head is incomplete loses nothing: no
//! request was read from it, nothing was forwarded or written. A connection that has started
//! a request is never shed (its call may be in flight).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How long a connection may go without a whole request head before it may be shed. The
/// kernel's accept queue is FIFO, so a real request waits behind the flood's connections and
/// the queue drains at `slots / SHED_AFTER` a second: 250 ms gave `/healthz` a p50 of 1.5 s at
/// the open-file limit, 100 ms 0.2 s. It also caps the closes a reconnecting attacker can
/// cause (~1,100 a second with 112 slots, ~5 % CPU). A real client sends its head in one write.
pub(crate) const SHED_AFTER: Duration = Duration::from_millis(100);

/// One accepted connection as the shedder sees it.
#[derive(Default)]
pub(crate) struct Conn {
    started: AtomicBool,
    shed: Notify,
}

impl Conn {
    /// Its first request head is whole: from now on it is never shed.
    pub(crate) fn start(&self) {
        self.started.store(true, Ordering::Release);
    }

    pub(crate) fn started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    /// Completes when the shedder picked this connection (a pick made before the wait
    /// counts: the signal is kept).
    pub(crate) async fn shed(&self) {
        self.shed.notified().await
    }
}

/// What [`Unstarted::shed_oldest`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Shed {
    /// The oldest unstarted connection was told to close.
    One,
    /// The oldest is younger than [`SHED_AFTER`]: try again after this long.
    Wait(Duration),
    /// Every connection has started a request: only an ending call makes room.
    None,
}

/// The unstarted connections, oldest first.
#[derive(Default)]
pub(crate) struct Unstarted {
    queue: Mutex<VecDeque<(Instant, Weak<Conn>)>>,
}

impl Unstarted {
    /// Registers a connection accepted at `now`. `bound` caps the dead entries kept between
    /// prunes (connections that ended or started are dropped lazily).
    pub(crate) fn push(&self, now: Instant, bound: usize) -> Arc<Conn> {
        let conn = Arc::new(Conn::default());
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= bound.max(16) {
            q.retain(|(_, c)| c.upgrade().is_some_and(|c| !c.started()));
        }
        q.push_back((now, Arc::downgrade(&conn)));
        conn
    }

    /// Tells the oldest connection without a whole request head, if it is at least
    /// [`SHED_AFTER`] old, to close.
    pub(crate) fn shed_oldest(&self, now: Instant) -> Shed {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((since, weak)) = q.front() {
            let Some(conn) = weak.upgrade().filter(|c| !c.started()) else {
                q.pop_front();
                continue;
            };
            let age = now.saturating_duration_since(*since);
            if age < SHED_AFTER {
                return Shed::Wait(SHED_AFTER - age);
            }
            q.pop_front();
            conn.shed.notify_one();
            return Shed::One;
        }
        Shed::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_unstarted_connection_is_shed_and_a_started_one_never() {
        let t0 = Instant::now();
        let q = Unstarted::default();
        let a = q.push(t0, 64);
        let b = q.push(t0 + Duration::from_millis(10), 64);
        let c = q.push(t0 + Duration::from_millis(20), 64);
        // Too young: nobody is shed yet, and the wait is what is left of the oldest's grace.
        assert_eq!(q.shed_oldest(t0 + Duration::from_millis(50)), Shed::Wait(SHED_AFTER - Duration::from_millis(50)));
        a.start();
        let later = t0 + SHED_AFTER + Duration::from_millis(30);
        assert_eq!(q.shed_oldest(later), Shed::One);
        // `a` started a request: `b`, the next oldest, was picked.
        assert!(shed_signalled(&b));
        assert!(!shed_signalled(&a));
        drop(c); // ended on its own
        assert_eq!(q.shed_oldest(later), Shed::None);
    }

    #[test]
    fn dead_entries_are_pruned_at_the_bound() {
        let q = Unstarted::default();
        let keep = q.push(Instant::now(), 16);
        for _ in 0..1000 {
            drop(q.push(Instant::now(), 16));
        }
        assert!(q.queue.lock().unwrap().len() <= 17);
        assert!(!keep.started());
    }

    fn shed_signalled(conn: &Conn) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async { tokio::time::timeout(Duration::from_millis(20), conn.shed()).await.is_ok() })
    }
}
