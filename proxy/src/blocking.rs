//! A call's blocking work (the store's reads, writes and fsyncs; planning; rendering) run off
//! the runtime's scheduling without a round trip through the blocking pool.
//!
//! `spawn_blocking` costs the call two thread wake-ups on its path (to a pool thread and back),
//! twice per call (prepare, commit): on a busy machine tens of microseconds each. On a
//! multi-threaded runtime `block_in_place` runs the work on the calling worker thread instead,
//! after handing that worker's other tasks to a new one, so no other session waits behind it
//! and the call goes on where it was. A current-thread runtime (tests, embedders) cannot do
//! that: there the work goes to the blocking pool as before.

use std::panic::{catch_unwind, AssertUnwindSafe};

use tokio::runtime::{Handle, RuntimeFlavor};

/// The work panicked (a bug): the call is answered 500 as when a pool task fails.
#[derive(Debug)]
pub(crate) struct Panicked;

/// Runs `work` to completion as blocking work of the current task.
pub(crate) async fn run<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, Panicked> {
    if Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread {
        // A panic stays in this call, as a pool task's would.
        return tokio::task::block_in_place(|| catch_unwind(AssertUnwindSafe(work))).map_err(|_| Panicked);
    }
    tokio::task::spawn_blocking(work).await.map_err(|_| Panicked)
}
