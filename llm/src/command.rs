//! `command:PROGRAM [ARGS]`: a local program is the summarizer. The request JSON goes to its
//! stdin, the summary comes from its stdout. Every wait is bounded by the timeout, even when
//! the program leaves a grandchild holding its pipes open.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use ctxlog::WireFormat;

use crate::error::{excerpt, LlmError};
use crate::{Completion, Summarizer};

/// The largest stdout read; the rest is dropped (a summary is a few KiB).
const MAX_OUTPUT_BYTES: u64 = 4 * 1024 * 1024;
/// How often the exit status is polled.
const POLL: Duration = Duration::from_millis(10);
/// The environment variable that carries the configured model to the program.
pub const MODEL_ENV: &str = "CTXLOG_SUMMARY_MODEL";

/// Runs a program per request; its stdout (trimmed) is the summary.
#[derive(Debug, Clone)]
pub struct CommandClient {
    program: String,
    args: Vec<String>,
    model: Option<String>,
    timeout: Duration,
}

impl CommandClient {
    /// A client running `program args…` with no shell in between; the model, if any, is in
    /// the environment as `CTXLOG_SUMMARY_MODEL`.
    pub fn new(
        program: impl Into<String>,
        args: Vec<String>,
        model: Option<String>,
        timeout: Duration,
    ) -> CommandClient {
        CommandClient { program: program.into(), args, model, timeout }
    }

    fn fail(&self, detail: impl Into<String>, stderr: &[u8]) -> LlmError {
        LlmError::Command { program: self.program.clone(), detail: detail.into(), stderr: excerpt(stderr) }
    }

    fn timeout(&self) -> LlmError {
        LlmError::Timeout { target: format!("command `{}`", self.program), after: self.timeout }
    }
}

/// Reads `pipe` to the end (at most `limit` bytes kept) on a thread; the result arrives on the
/// returned channel, so the caller can stop waiting.
fn drain(pipe: Option<impl Read + Send + 'static>, limit: u64) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    if let Some(pipe) = pipe {
        thread::spawn(move || {
            let mut buf = Vec::new();
            let mut pipe = pipe;
            let _ = (&mut pipe).take(limit).read_to_end(&mut buf);
            // Keep reading past the limit so the writer never blocks on a full pipe.
            let _ = std::io::copy(&mut pipe, &mut std::io::sink());
            let _ = tx.send(buf);
        });
    } else {
        let _ = tx.send(Vec::new());
    }
    rx
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

impl Summarizer for CommandClient {
    fn complete(&self, body: &[u8]) -> Result<Completion, LlmError> {
        let start = Instant::now();
        let deadline = start + self.timeout;
        let mut command = Command::new(&self.program);
        command.args(&self.args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        if let Some(model) = &self.model {
            command.env(MODEL_ENV, model);
        }
        let mut child = command.spawn().map_err(|e| self.fail(format!("cannot start: {e}"), b""))?;
        let stdout = drain(child.stdout.take(), MAX_OUTPUT_BYTES);
        let stderr = drain(child.stderr.take(), 64 * 1024);
        if let Some(mut stdin) = child.stdin.take() {
            let body = body.to_vec();
            // A program may stop reading early (e.g. `head`): a broken pipe is not a failure,
            // its exit status and output decide.
            thread::spawn(move || {
                let _ = stdin.write_all(&body);
            });
        }
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    kill(&mut child);
                    return Err(self.timeout());
                }
                Ok(None) => thread::sleep(POLL),
                Err(e) => {
                    kill(&mut child);
                    return Err(self.fail(format!("cannot wait for it: {e}"), b""));
                }
            }
        };
        let remaining = |now: Instant| deadline.saturating_duration_since(now);
        let err_bytes = stderr.recv_timeout(remaining(Instant::now())).unwrap_or_default();
        let out_bytes = match stdout.recv_timeout(remaining(Instant::now())) {
            Ok(bytes) => bytes,
            // Exited, but something it started still holds stdout open past the deadline.
            Err(_) => return Err(self.timeout()),
        };
        if !status.success() {
            return Err(self.fail(format!("exited with {status}"), &err_bytes));
        }
        let text =
            String::from_utf8(out_bytes).map_err(|e| self.fail(format!("stdout is not UTF-8: {e}"), &err_bytes))?;
        let text = text.trim().to_owned();
        if text.is_empty() {
            return Err(LlmError::Empty { source_name: format!("command `{}`", self.program) });
        }
        Ok(Completion { text, usage: None, latency: start.elapsed(), model: self.model.clone() })
    }

    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    fn wire_format(&self) -> Option<WireFormat> {
        None
    }
}
