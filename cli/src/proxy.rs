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
    cfg.allow_remote = a.allow_remote;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
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
