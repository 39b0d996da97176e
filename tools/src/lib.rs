//! The `ctxlog` program as a library (the binary is the `ctxlog-cli` package). [`run`] is the
//! whole program, argv in and exit code out, so tests and benchmarks drive it in-process; the
//! modules are what its commands are built from (transcript import, store URLs, model
//! summarizers, the postmortem fold), which the benchmarks and the fuzz targets use directly.

pub mod analysis;
pub mod args;
pub mod catalog;
pub mod chart;
mod commands;
mod demo_openai;
pub mod diff;
pub mod error;
pub mod import;
mod lineage;
mod logs;
mod markup;
mod model_client;
mod output;
mod proxy;
mod report;
mod request;
pub mod rerun;
mod rerun_notes;
mod select;
mod session_id;
pub mod stores;
pub mod summarizer;
mod table;
mod tail;
pub mod transcript;
mod why;

use std::ffi::OsString;
use std::io::Write;

use clap::Parser;
use ctxlog::config::Config;

use crate::args::{Cli, Command, ConfigArgs, DemoArgs, ImportArgs};
use crate::error::{output as out_err, CliError};
use crate::import::{import, ImportOptions};
use crate::logs::with_logs;
pub use crate::logs::Logs;
use crate::output::{details, json_line, summary, Out, TimelineTable};
use crate::stores::{open_store_with, Access};
use crate::transcript::{FormatArg, Source};

/// Budget the demo runs with unless `--budget` says otherwise: small enough that the bundled
/// session needs compaction.
pub const DEMO_BUDGET: u64 = 80_000;

/// Runs the CLI with `args` (including the program name); returns the exit code.
pub fn run(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    run_with_progress(args, stdout, stderr, false, Logs::Captured)
}

/// [`run`], printing progress of long work on `stderr` when `progress` is set (the binary sets
/// it when stderr is a terminal), and `-v` logs where `logs` says.
pub fn run_with_progress(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    progress: bool,
    logs: Logs,
) -> i32 {
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    // Decided before parsing, so that a flag clap rejects is reported as JSON too.
    let json = args.iter().skip(1).take_while(|a| *a != "--").any(|a| a == "--json");
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { error::EXIT_INPUT } else { 0 };
            let text = match (e.use_stderr() && json, e.use_stderr()) {
                (true, _) => format!("{}\n", error::clap_json(&e, code)),
                _ => e.render().to_string(),
            };
            let _ = if e.use_stderr() { stderr.write_all(text.as_bytes()) } else { stdout.write_all(text.as_bytes()) };
            return code;
        }
    };
    let mut out = Out { stdout, stderr, progress };
    let (result, captured) = with_logs(cli.verbose, logs, || dispatch(cli.command, cli.accept_loss, &mut out));
    let _ = out.stderr.write_all(&captured);
    match result {
        Ok(()) => 0,
        // The reader went away (`ctxlog replay | head`): not an error of ours.
        Err(CliError::Output { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(CliError::Differs(_)) => error::EXIT_DIFFERS,
        Err(e) => {
            let _ = match json {
                true => out.err(&e.to_json().to_string()),
                false => out.err(&format!("error: {e}")),
            };
            e.exit_code()
        }
    }
}

fn dispatch(command: Command, accept_loss: bool, out: &mut Out<'_>) -> Result<(), CliError> {
    match command {
        Command::Demo(a) => demo(a, accept_loss, out),
        Command::Import(a) => import_cmd(a, accept_loss, out),
        Command::Sessions(a) => commands::sessions(&a, out),
        Command::Replay(a) => commands::replay(&a, out),
        Command::Inspect(a) => commands::inspect(&a, out),
        Command::Verify(a) => commands::verify(&a, out),
        Command::Export(a) => commands::export(&a, out),
        Command::Restore(a) => commands::restore(&a, accept_loss, out),
        Command::Copy(a) => commands::copy(&a, accept_loss, out),
        Command::Tail(a) => tail::tail(&a, out),
        Command::Report(a) => report::report(&a, out),
        Command::Why(a) => why::why(&a, out),
        Command::Rerun(a) => rerun::rerun(&a, out),
        Command::Diff(a) => diff::diff(&a, out),
        Command::Proxy(a) => proxy::proxy(&a, accept_loss, out),
        Command::Request(a) => request::request(&a, out),
    }
}

fn config_of(args: &ConfigArgs, base: Config) -> Result<(Config, Option<ctxlog::StreamId>), CliError> {
    let config = args.resolve(base)?;
    config.validate()?;
    let session = args.session.as_deref().map(session_id::parse_session).transpose()?;
    Ok((config, session))
}

fn demo(a: DemoArgs, accept_loss: bool, out: &mut Out<'_>) -> Result<(), CliError> {
    // The summarizer's format by default, so that an `openai:` summarizer can fork.
    let openai = match a.format {
        FormatArg::Openai => true,
        FormatArg::Anthropic => false,
        FormatArg::Auto => {
            matches!(&a.config.summarizer, Some(args::SummarizerArg::Model(spec)) if spec.starts_with("openai:"))
        }
    };
    let transcript = match (a.messages, openai) {
        (None, false) => {
            let text = ctxlog_workload::demo_transcript();
            transcript::read(text.as_bytes(), std::path::Path::new("<bundled demo transcript>"), FormatArg::Anthropic)?
        }
        (None, true) => {
            let text = demo_openai::convert(&ctxlog_workload::demo_transcript())?;
            let path = std::path::Path::new("<bundled demo transcript, OpenAI chat format>");
            transcript::read(text.as_bytes(), path, FormatArg::Openai)?
        }
        (Some(n), openai) => {
            let lines = ctxlog_workload::session(ctxlog_workload::DEMO_SEED, n)
                .map_err(|e| CliError::Usage(format!("--messages {n}: {e}")))?;
            let path = format!("<generated {n}-message session>");
            if openai {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut lines.into_reader(), &mut text)
                    .map_err(|e| CliError::Usage(format!("--messages {n}: {e}")))?;
                let text = demo_openai::convert(&text)?;
                transcript::read(text.as_bytes(), std::path::Path::new(&path), FormatArg::Openai)?
            } else {
                transcript::read(lines.into_reader(), std::path::Path::new(&path), FormatArg::Anthropic)?
            }
        }
    };
    let base = Config { budget: DEMO_BUDGET, ..Config::default() };
    run_import(&transcript, &a.store, &a.config, base, 30_000, a.views.as_deref(), false, accept_loss, out)
}

fn import_cmd(a: ImportArgs, accept_loss: bool, out: &mut Out<'_>) -> Result<(), CliError> {
    if !(a.call_interval.is_finite() && a.call_interval >= 0.0) {
        return Err(CliError::Usage(format!("--call-interval {} is not a number of seconds", a.call_interval)));
    }
    let transcript = transcript::check_file(&a.file, a.format)?;
    let interval = (a.call_interval * 1000.0).round() as u64;
    let views = a.views.as_deref();
    run_import(&transcript, &a.store, &a.config, Config::default(), interval, views, a.inline_media, accept_loss, out)
}

#[allow(clippy::too_many_arguments)]
fn run_import(
    transcript: &dyn Source,
    store_args: &args::StoreArgs,
    config_args: &ConfigArgs,
    base: Config,
    interval_ms: u64,
    views: Option<&std::path::Path>,
    inline_media: bool,
    accept_loss: bool,
    out: &mut Out<'_>,
) -> Result<(), CliError> {
    let (config, session) = config_of(config_args, base)?;
    // Built before anything is written: a bad spec or a missing key fails here.
    let model = model_client::from_args(config_args)?;
    // The id is chosen here so a failed import can name the session it leaves unfinished.
    let id = session.unwrap_or_else(ctxlog::session::new_session_id);
    let store = open_store_with(&store_args.store, Access::Create, accept_loss)?;
    // The views go to `<path>.partial` and are renamed only once the session is stored, so a
    // failed import leaves no views file that describes a session that does not exist.
    let partial = views.map(|p| {
        let mut name = p.as_os_str().to_owned();
        name.push(".partial");
        std::path::PathBuf::from(name)
    });
    let mut views_file = match &partial {
        Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p).map_err(out_err(&p.display().to_string()))?)),
        None => None,
    };
    let json = store_args.json;
    let table = TimelineTable::sized_for(transcript.facts().messages, config.budget);
    if !json {
        out.line(&table.header())?;
    }
    let opts = ImportOptions {
        config,
        session: Some(id),
        call_interval_ms: interval_ms,
        views: views_file.as_mut().map(|w| w as &mut dyn Write),
        inline_media,
        summaries: model.as_ref().map(|(client, call)| summarizer::ModelSummaries { client, call: call.clone() }),
    };
    let total = transcript.facts().calls;
    let done = import(transcript, store.as_ref(), opts, |r| {
        out.progress(&format!("call {}/{total}", r.call + 1))?;
        if json {
            return out.line(&json_line(r));
        }
        out.line(&table.row(r))?;
        details(r).iter().try_for_each(|d| out.line(d))
    });
    out.progress_done()?;
    let done = match done {
        Ok(done) => done,
        Err(e) => {
            if let Some(p) = &partial {
                let _ = std::fs::remove_file(p);
            }
            let refused = matches!(e, CliError::Usage(_) | CliError::Session(ctxlog::SessionError::Exists(_)));
            if !refused && store.head(id).ok().flatten().is_some() {
                out.err(&format!(
                    "note: session {id} is an unfinished import: readers ignore it; run the same import with \
                     --session {id} to finish it"
                ))?;
            }
            return Err(e);
        }
    };
    if let Some(v) = done.resumed_at {
        out.err(&format!("resumed the unfinished import of session {id} after version {v}"))?;
    }
    if let (Some(mut w), Some(tmp), Some(path)) = (views_file, &partial, views) {
        w.flush().map_err(out_err("the views file"))?;
        std::fs::rename(tmp, path).map_err(out_err(&path.display().to_string()))?;
    }
    // What followed the last call, as `replay` prints it.
    if json && !done.trailing.is_empty() {
        out.line(&serde_json::to_string(&done.trailing).unwrap_or_default())?;
    } else {
        for l in output::trailing_lines(&done.trailing) {
            out.line(&l)?;
        }
    }
    if !json {
        for l in summary(&done.timeline, 0) {
            out.line(&l)?;
        }
        out.line(&format!(
            "session {} written to {} ({} records, {} blobs, format {})",
            done.session,
            store_args.store,
            done.records,
            done.blobs,
            transcript.format().as_str()
        ))?;
    }
    Ok(())
}
