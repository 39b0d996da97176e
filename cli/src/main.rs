//! The `ctxlog` binary: everything lives in the library so tests run it in-process.

use std::io::IsTerminal;

fn main() {
    let progress = std::io::stderr().is_terminal();
    let code = ctxlog_cli::run_with_progress(
        std::env::args_os(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
        progress,
        ctxlog_cli::Logs::Process,
    );
    std::process::exit(code);
}
