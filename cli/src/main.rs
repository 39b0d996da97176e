//! The `ctxlog` binary: everything lives in the library so tests run it in-process.

use std::io::IsTerminal;

fn main() {
    let progress = std::io::stderr().is_terminal();
    let code = ctxlog_cli::run_with_progress(
        std::env::args_os(),
        &mut std::io::stdout().lock(),
        // Not locked: `-v` logs reach stderr from other threads too (the proxy's runtime), and
        // they would wait forever for a lock this thread holds.
        &mut std::io::stderr(),
        progress,
        ctxlog_cli::Logs::Process,
    );
    std::process::exit(code);
}
