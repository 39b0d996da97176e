//! What every connection and call of a running proxy shares (`Proxy`: the config, the store,
//! the upstream client, the sessions, the metrics) and the count of calls in flight that
//! shutdown drains. The server builds it; each call holds it.

use std::sync::Arc;

use http::Uri;
use hyper_util::client::legacy::{connect::HttpConnector, Client};

use crate::metrics::Metrics;
use crate::reply::Body;
use crate::sessions::{Sessions, Store};
use crate::ProxyConfig;

pub(crate) type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Body>;

/// What every connection shares.
pub(crate) struct Proxy {
    pub cfg: ProxyConfig,
    pub store: Store,
    pub client: HttpClient,
    pub sessions: Sessions,
    /// Responses' `previous_response_id` chains (`responses.rs`).
    pub chains: crate::responses::Chains,
    /// Provider compactions seen in answers (`compaction.rs`).
    pub aliases: crate::compaction::Aliases,
    /// The ends of recent conversations, to recognize a client's own summary (`tails.rs`).
    pub tails: crate::tails::Tails,
    pub metrics: Arc<Metrics>,
    /// Calls between their forward and the end of their commit and summaries: shutdown waits
    /// for them to drain.
    pub in_flight: InFlight,
    /// The budgets learned from overflows, by model: a new session of that model starts
    /// within it (each session's own is in its log).
    pub limits: crate::overflow::Limits,
    /// The upstream's scheme, authority and base path.
    pub upstream: (http::uri::Scheme, http::uri::Authority, String),
}

impl Drop for Proxy {
    /// The store's last reference may block as it goes (the PostgreSQL client closes its
    /// connections on a runtime of its own, which cannot start on a tokio worker): the store
    /// and the sessions that hold it are dropped on a thread of their own.
    fn drop(&mut self) {
        let store = std::mem::replace(&mut self.store, Arc::new(ctxlog::MemoryStore::new()));
        let sessions = std::mem::take(&mut self.sessions);
        if tokio::runtime::Handle::try_current().is_ok() {
            let _ = std::thread::Builder::new().name("ctxlog-store-drop".into()).spawn(move || drop((sessions, store)));
        }
    }
}

/// A count of calls in flight that shutdown can wait on.
#[derive(Default)]
pub(crate) struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

/// One call in flight; dropping it ends it.
pub(crate) struct Ticket(Arc<Proxy>);

impl InFlight {
    /// How many calls are in flight now.
    pub fn count(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until no call is in flight.
    pub async fn drained(&self) {
        loop {
            let idle = self.idle.notified();
            if self.count.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

impl Ticket {
    pub fn new(proxy: &Arc<Proxy>) -> Ticket {
        proxy.in_flight.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ticket(Arc::clone(proxy))
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.0.in_flight.count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            self.0.in_flight.idle.notify_waiters();
        }
    }
}

impl Proxy {
    /// The upstream URI of a request URI: the upstream's base path, then the request's path
    /// and query.
    pub fn upstream_uri(&self, uri: &Uri) -> Uri {
        let (scheme, authority, base) = &self.upstream;
        let pq = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        Uri::builder()
            .scheme(scheme.clone())
            .authority(authority.clone())
            .path_and_query(format!("{base}{pq}"))
            .build()
            .unwrap_or_else(|_| uri.clone())
    }
}
