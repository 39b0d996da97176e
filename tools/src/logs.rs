//! `-v`: the engine's and the stores' `tracing` events on stderr (`-v` flushes, guards,
//! summaries, repairs, conflicts; `-vv` every call, edit and append; `-vvv` everything).

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing::Level;

/// Where `-v` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logs {
    /// Straight to the process's stderr, as they happen (the binary).
    Process,
    /// Collected and written to the caller's stderr writer when the command ends (in-process
    /// runs, tests).
    Captured,
}

/// Runs `f` with a subscriber at the level `verbose` asks for (none at 0); returns what
/// `Logs::Captured` collected.
pub(crate) fn with_logs<T>(verbose: u8, logs: Logs, f: impl FnOnce() -> T) -> (T, Vec<u8>) {
    let level = match verbose {
        0 => return (f(), Vec::new()),
        1 => Level::INFO,
        2 => Level::DEBUG,
        _ => Level::TRACE,
    };
    let builder = tracing_subscriber::fmt().with_max_level(level).with_target(false);
    match logs {
        Logs::Process => {
            (tracing::subscriber::with_default(builder.with_writer(std::io::stderr).finish(), f), Vec::new())
        }
        Logs::Captured => {
            let buf = Arc::new(Mutex::new(Vec::new()));
            let sink = Arc::clone(&buf);
            let subscriber = builder.with_writer(move || Captured(Arc::clone(&sink))).finish();
            let out = tracing::subscriber::with_default(subscriber, f);
            let bytes = std::mem::take(&mut *buf.lock().unwrap_or_else(|e| e.into_inner()));
            (out, bytes)
        }
    }
}

struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
