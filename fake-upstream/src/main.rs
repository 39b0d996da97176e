//! `ctxlog-fake-upstream --listen 127.0.0.1:0 [--record FILE]`: prints `listening on
//! http://ADDR` as its first stdout line, then serves until killed.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

fn main() -> std::process::ExitCode {
    let mut listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut record: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--listen", Some(v)) => match v.parse() {
                Ok(x) => listen = x,
                Err(e) => return fail(&format!("--listen {v}: {e}")),
            },
            ("--record", Some(v)) => record = Some(PathBuf::from(v)),
            _ => {
                return fail(&format!(
                    "unexpected argument {a}; usage: ctxlog-fake-upstream [--listen ADDR] [--record FILE]"
                ))
            }
        }
    }
    let up = match ctxlog_fake_upstream::FakeUpstream::start_on(listen, record.as_deref()) {
        Ok(u) => u,
        Err(e) => return fail(&e.to_string()),
    };
    let mut out = std::io::stdout();
    if writeln!(out, "listening on {}", up.url()).and_then(|_| out.flush()).is_err() {
        return std::process::ExitCode::FAILURE;
    }
    loop {
        std::thread::park();
    }
}

fn fail(msg: &str) -> std::process::ExitCode {
    eprintln!("ctxlog-fake-upstream: {msg}");
    std::process::ExitCode::from(2)
}
