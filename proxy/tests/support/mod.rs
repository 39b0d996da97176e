//! What both proxy test files need: a proxy on a store, and the session's events read back.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use ctxlog::{Event, Store, StreamId};
use ctxlog_proxy::{serve, ProxyConfig, ProxyHandle};

/// The Anthropic key every test client sends (grepped for in the store files).
pub const KEY: &str = "sk-ant-test-SECRET-KEY-0123456789";

/// Generous bound for anything the proxy does after an answer (a commit, an abort, the
/// summary jobs).
pub const SETTLE: Duration = Duration::from_secs(60);

/// A proxy on `store` in front of `upstream`, with a 20 s upstream timeout unless `tweak`
/// says otherwise.
pub async fn proxy_on(store: Arc<dyn Store>, upstream: &str, tweak: impl FnOnce(&mut ProxyConfig)) -> ProxyHandle {
    let mut cfg = ProxyConfig::new("127.0.0.1:0".parse().unwrap(), upstream);
    cfg.upstream_timeout = Duration::from_secs(20);
    tweak(&mut cfg);
    serve(cfg, store).await.unwrap()
}

/// Every event of a session, decoded.
pub fn events(store: &dyn Store, id: StreamId) -> Vec<Event> {
    store
        .read(id, 1, usize::MAX)
        .unwrap()
        .iter()
        .map(|r| ctxlog::codec::decode(id, r.version, &r.record).unwrap())
        .collect()
}

/// The calls a session served.
pub fn served(evs: &[Event]) -> Vec<&ctxlog::event::RequestServed> {
    evs.iter().filter_map(|e| if let Event::RequestServed(s) = e { Some(s) } else { None }).collect()
}

/// Waits (bounded) until the session has `n` committed calls: commits land after the answer.
pub async fn calls(store: &dyn Store, id: StreamId, n: usize) -> Vec<Event> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let evs = events(store, id);
        if served(&evs).len() >= n {
            return evs;
        }
        assert!(tokio::time::Instant::now() < deadline, "session {id} never reached {n} calls");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
