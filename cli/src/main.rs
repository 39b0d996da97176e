//! The `ctxlog` binary: everything lives in the library so tests run it in-process.

fn main() {
    let code = ctxlog_cli::run(std::env::args_os(), &mut std::io::stdout().lock(), &mut std::io::stderr().lock());
    std::process::exit(code);
}
