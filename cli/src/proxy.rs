//! `ctxlog proxy`: opens the store and runs [`ctxlog_proxy`] until Ctrl-C.

use std::sync::Arc;
use std::time::Duration;

use ctxlog::Config;

use crate::args::ProxyArgs;
use crate::error::CliError;
use crate::output::Out;
use crate::stores::{open_store, Access};

/// Runs the proxy in the foreground.
pub fn proxy(a: &ProxyArgs, out: &mut Out<'_>) -> Result<(), CliError> {
    let engine = a.config.resolve(Config::default())?;
    engine.validate()?;
    let store: Arc<dyn ctxlog::Store> = Arc::from(open_store(&a.store, Access::Create)?);
    let mut cfg = ctxlog_proxy::ProxyConfig::new(a.listen, &a.upstream);
    cfg.engine = engine;
    cfg.client_token = a.client_token.clone();
    cfg.max_body = a.max_body;
    cfg.upstream_timeout = Duration::from_secs(a.upstream_timeout.max(1));
    cfg.session_wait = Duration::from_secs(a.session_wait);
    cfg.idle_shrink = Duration::from_secs(a.idle_shrink);
    cfg.allow_remote = a.allow_remote;
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
        let _ = tokio::signal::ctrl_c().await;
        handle.shutdown().await;
        Ok(())
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
}
