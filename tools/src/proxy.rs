//! `ctxlog proxy`: opens the store and runs [`ctxlog_proxy`] until Ctrl-C.

use std::sync::Arc;
use std::time::Duration;

use ctxlog::Config;

use crate::args::ProxyArgs;
use crate::error::CliError;
use crate::output::Out;
use crate::stores::{open_store_waiting, Access, Opening};

/// Runs the proxy in the foreground.
pub fn proxy(a: &ProxyArgs, accept_loss: bool, out: &mut Out<'_>) -> Result<(), CliError> {
    let engine = a.config.resolve(Config::default())?;
    engine.validate()?;
    let models = models(a)?;
    // Built before the store opens: a missing API key or a bad spec fails first.
    let summaries = summaries(a, &engine)?;
    let opening = Opening { pool: a.store_pool, wait: Duration::from_secs(a.store_wait), accept_loss };
    let store: Arc<dyn ctxlog::Store> = Arc::from(open_store_waiting(&a.store, Access::Create, opening)?);
    let mut cfg = ctxlog_proxy::ProxyConfig::new(a.listen, &a.upstream);
    cfg.engine = engine;
    cfg.client_token = a.client_token.clone();
    cfg.max_body = a.max_body;
    cfg.upstream_timeout = Duration::from_secs(a.upstream_timeout.max(1));
    cfg.session_wait = Duration::from_secs(a.session_wait);
    cfg.idle_shrink = Duration::from_secs(a.idle_shrink);
    cfg.allow_remote = a.allow_remote;
    cfg.summaries = summaries;
    cfg.max_connections = a.max_connections.min(connection_room());
    cfg.header_timeout = Duration::from_secs(a.header_timeout.max(1));
    cfg.body_timeout = Duration::from_secs(a.body_timeout.max(1));
    cfg.drain_timeout = Duration::from_secs(a.drain_timeout);
    cfg.cache_breakpoints = a.cache_breakpoints;
    cfg.provider_context_management = a.provider_context_management;
    cfg.models = models;
    // `-v` installs its subscriber on this thread only; the proxy's work (and the engine's, in
    // `spawn_blocking`) runs on the runtime's threads, which would log nothing without it.
    let logs = tracing::dispatcher::get_default(Clone::clone);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(move || {
            // Kept for the thread's whole life: the guard would restore "no subscriber".
            std::mem::forget(tracing::dispatcher::set_default(&logs));
        })
        .build()
        .map_err(|e| CliError::Usage(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        let handle = ctxlog_proxy::serve(cfg, store).await.map_err(|e| CliError::Usage(e.to_string()))?;
        out.line(&format!(
            "ctxlog proxy on http://{} -> {} (store {}); Ctrl-C stops it",
            handle.addr(),
            a.upstream,
            a.store
        ))?;
        stop_signal().await;
        tracing::info!("stopping: no new connections; draining the calls in flight");
        handle.shutdown().await;
        Ok(())
    })
}

/// The context windows by model, unless `--budget` (a flag or the `--config` file) fixes every
/// session's budget.
fn models(a: &ProxyArgs) -> Result<Option<ctxlog_proxy::Models>, CliError> {
    // A budget of 0 is refused by validation: left at 0, no budget was given.
    let given = a.config.resolve(Config { budget: 0, ..Config::default() })?.budget != 0;
    if given {
        return Ok(None);
    }
    let mut m = ctxlog_proxy::Models::default();
    if let Some(path) = &a.models {
        let text =
            std::fs::read_to_string(path).map_err(|e| CliError::input(path, 0, format!("cannot read it: {e}")))?;
        m.load_json(&path.display().to_string(), &text).map_err(|e| CliError::input(path, 0, e.message))?;
    }
    for entry in &a.model_window {
        let parsed =
            entry.split_once('=').and_then(|(k, v)| Some((k, v.trim().parse::<u64>().ok().filter(|n| *n > 0)?)));
        let Some((prefix, window)) = parsed else {
            return Err(CliError::Flag {
                flag: "--model-window",
                message: format!("--model-window {entry:?}: expected MODEL_PREFIX=TOKENS, e.g. my-finetune=32768"),
            });
        };
        m.set(prefix, window);
    }
    Ok(Some(m))
}

/// Ctrl-C (SIGINT) or SIGTERM (what `kill`, systemd and container runtimes send).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// How many connections the process can hold open: the soft limit on open files, raised to
/// the hard one first (many systems start processes at 1,024), less room for the store's files
/// and the upstream connections.
fn connection_room() -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
    let open = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    // Each call holds its client's connection and one upstream; the reserve (64) and the
    // store's files need the rest.
    usize::try_from(open.saturating_sub(160) / 2).unwrap_or(usize::MAX).max(16)
}

/// Who writes the sessions' summaries: a model when `--summarizer` names one (with its own
/// key, read from `--summary-key-env`: never the key of a proxied call), none when the
/// engine's summarizer is off, else the built-in extractive summarizer (the default).
fn summaries(a: &ProxyArgs, engine: &Config) -> Result<ctxlog_proxy::Summaries, CliError> {
    if let Some((client, call)) = crate::model_client::from_args(&a.config)? {
        return Ok(ctxlog_proxy::Summaries::Model { client: Arc::from(client.0), call });
    }
    Ok(match engine.summarizer {
        ctxlog::config::SummarizerKind::None => ctxlog_proxy::Summaries::Off,
        _ => ctxlog_proxy::Summaries::Extractive,
    })
}

#[cfg(test)]
mod tests {
    fn run(args: &[&str]) -> (i32, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = crate::run(args.iter().copied(), &mut out, &mut err);
        (code, String::from_utf8_lossy(&err).into_owned())
    }

    #[test]
    fn refuses_a_remote_listen_and_a_bad_upstream() {
        let (code, err) =
            run(&["ctxlog", "proxy", "--listen", "0.0.0.0:0", "--upstream", "http://127.0.0.1:1", "--store", "mem:"]);
        assert_ne!(code, 0);
        assert!(err.contains("--allow-remote"), "{err}");
        let (code, err) =
            run(&["ctxlog", "proxy", "--listen", "127.0.0.1:0", "--upstream", "ftp://x", "--store", "mem:"]);
        assert_ne!(code, 0);
        assert!(err.contains("upstream URL"), "{err}");
        let (code, err) = run(&["ctxlog", "proxy", "--upstream", "http://x", "--store", "mem:", "--budget", "0"]);
        assert_ne!(code, 0, "{err}");
    }

    fn proxy_args(args: &[&str]) -> crate::args::ProxyArgs {
        use clap::Parser;
        let base = ["ctxlog", "proxy", "--upstream", "http://127.0.0.1:1", "--store", "mem:"];
        match crate::args::Cli::try_parse_from([&base[..], args].concat()).unwrap().command {
            crate::args::Command::Proxy(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_models_table_is_the_budget_unless_budget_is_given() {
        let window = |a: &crate::args::ProxyArgs, model: &str| super::models(a).unwrap().and_then(|m| m.window(model));
        assert_eq!(window(&proxy_args(&[]), "claude-opus-4-1"), Some(200_000));
        // --budget (a flag or the --config file) fixes every session's budget: no table.
        assert!(super::models(&proxy_args(&["--budget", "50000"])).unwrap().is_none());
        let dir = std::env::temp_dir().join(format!("ctxlog-models-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("c.toml");
        std::fs::write(&config, "budget = 50000\n").unwrap();
        assert!(super::models(&proxy_args(&["--config", config.to_str().unwrap()])).unwrap().is_none());
        // A file and flags add or override entries; a bad one names itself.
        let file = dir.join("models.json");
        std::fs::write(&file, r#"{"claude-": 150000, "my-tune": 32768}"#).unwrap();
        let a = proxy_args(&["--models", file.to_str().unwrap(), "--model-window", "my-tune-v2=8192"]);
        assert_eq!(
            (window(&a, "claude-x"), window(&a, "my-tune-1"), window(&a, "my-tune-v2-q")),
            (Some(150_000), Some(32_768), Some(8_192))
        );
        let (code, err) = run(&["ctxlog", "proxy", "--upstream", "http://x", "--store", "mem:", "--model-window", "x"]);
        assert_ne!(code, 0);
        assert!(err.contains("--model-window"), "{err}");
        std::fs::write(&file, "[1]").unwrap();
        let (code, err) =
            run(&["ctxlog", "proxy", "--upstream", "http://x", "--store", "mem:", "--models", file.to_str().unwrap()]);
        assert_ne!(code, 0);
        assert!(err.contains("models.json"), "{err}");
        assert_eq!(proxy_args(&["--cache-breakpoints", "off"]).cache_breakpoints, ctxlog_proxy::CacheBreakpoints::Off);
        assert!(<crate::args::Cli as clap::Parser>::try_parse_from([
            "ctxlog",
            "proxy",
            "--upstream",
            "u",
            "--cache-breakpoints",
            "x"
        ])
        .is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_parity_knobs_are_flags_and_config_keys_and_keep_tool_uses_is_protected_tools() {
        let c = |a: &crate::args::ProxyArgs| a.config.resolve(ctxlog::Config::default()).unwrap();
        let a = proxy_args(&[
            "--keep-tool-uses",
            "7",
            "--exclude-tools",
            "memory, todo_write",
            "--clear-tool-inputs",
            "--tool-placeholder",
            "[cleared]",
            "--keep-thinking-turns",
            "2",
            "--provider-context-management",
            "apply",
        ]);
        let got = c(&a);
        assert_eq!(got.protected_tool_results, 7);
        assert_eq!(got.exclude_tools, ["memory", "todo_write"]);
        assert!(got.clear_tool_inputs);
        assert_eq!((got.tool_placeholder.as_deref(), got.keep_thinking_turns), (Some("[cleared]"), Some(2)));
        assert_eq!(a.provider_context_management, ctxlog_proxy::ProviderContextManagement::Apply);
        assert_eq!(proxy_args(&[]).provider_context_management, ctxlog_proxy::ProviderContextManagement::Pass);
        // One knob: both spellings set the same field; the config file takes either key.
        assert_eq!(c(&proxy_args(&["--protected-tools", "4"])).protected_tool_results, 4);
        let dir = std::env::temp_dir().join(format!("ctxlog-parity-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(&file, "keep-tool-uses = 9\nexclude-tools = [\"memory\"]\nkeep-thinking-turns = 1\n").unwrap();
        let got = c(&proxy_args(&["--config", file.to_str().unwrap()]));
        assert_eq!((got.protected_tool_results, got.keep_thinking_turns), (9, Some(1)));
        assert_eq!(got.exclude_tools, ["memory"]);
        std::fs::remove_dir_all(&dir).unwrap();
        // A blank placeholder cannot work (the API refuses an empty text): refused, naming it.
        let (code, err) =
            run(&["ctxlog", "proxy", "--upstream", "http://x", "--store", "mem:", "--tool-placeholder", " "]);
        assert_ne!(code, 0);
        assert!(err.contains("tool-placeholder"), "{err}");
        assert!(<crate::args::Cli as clap::Parser>::try_parse_from([
            "ctxlog",
            "proxy",
            "--upstream",
            "u",
            "--provider-context-management",
            "strip"
        ])
        .is_err());
    }

    #[test]
    fn a_model_summarizer_is_checked_before_the_proxy_starts() {
        let base =
            ["ctxlog", "proxy", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--store", "mem:"];
        let with = |extra: &[&'static str]| [&base[..], extra].concat();
        let (code, err) = run(&with(&[
            "--summarizer",
            "anthropic:http://127.0.0.1:1",
            "--summary-key-env",
            "CTXLOG_TEST_PROXY_SUMMARY_KEY_UNSET",
        ]));
        assert_ne!(code, 0);
        assert!(err.contains("CTXLOG_TEST_PROXY_SUMMARY_KEY_UNSET"), "{err}");
        let (code, err) = run(&with(&["--summarizer", "extractive", "--summary-call", "fork"]));
        assert_ne!(code, 0);
        assert!(err.contains("--summary-call"), "{err}");
        let (code, err) = run(&with(&["--summarizer", "nonsense"]));
        assert_ne!(code, 0);
        assert!(err.contains("nonsense"), "{err}");
        let (code, err) = run(&with(&["--summarizer", "command:cat", "--summary-timeout=-1"]));
        assert_ne!(code, 0);
        assert!(err.contains("--summary-timeout"), "{err}");
    }
}
