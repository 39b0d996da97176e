//! The `ctxlog` binary. The program is `ctxlog_tools::run`, a library, so tests and benchmarks
//! drive it in-process; here only what belongs to a process: a terminal on stderr, `-v` logs
//! to the process's stderr, the exit code.

use std::io::IsTerminal;

fn main() {
    let progress = std::io::stderr().is_terminal();
    let code = ctxlog_tools::run_with_progress(
        std::env::args_os(),
        &mut std::io::stdout().lock(),
        // Not locked: `-v` logs reach stderr from other threads too (the proxy's runtime), and
        // they would wait forever for a lock this thread holds.
        &mut std::io::stderr(),
        progress,
        ctxlog_tools::Logs::Process,
    );
    std::process::exit(code);
}
