//! The listener, the routing, the pass-through of every other path, and the handle.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxlog::WireFormat;
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::reply::{error, full, Body, Shape};
use crate::sessions::{Sessions, Store};
use crate::shared::{HttpClient, InFlight, Proxy};
use crate::shedding::{Shed, Unstarted};
use crate::{ProxyConfig, ProxyError};

/// Connections served past the limit, one request each.
const RESERVE: usize = 64;
/// Their header timeout.
const RESERVE_HEADER_TIMEOUT: Duration = Duration::from_millis(500);

/// A running proxy.
pub struct ProxyHandle {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    metrics: Arc<Metrics>,
}

impl ProxyHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Stops accepting, lets the calls in flight end and commit (at most the config's
    /// `drain_timeout`), closes idle connections, and returns.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

fn parse_upstream(url: &str) -> Result<(http::uri::Scheme, http::uri::Authority, String), ProxyError> {
    let fail = |m: &str| ProxyError::Upstream { url: url.to_owned(), message: m.to_owned() };
    let uri: Uri = url.parse().map_err(|e: http::uri::InvalidUri| fail(&e.to_string()))?;
    let scheme = uri.scheme().cloned().ok_or_else(|| fail("no scheme (http:// or https://)"))?;
    if scheme != http::uri::Scheme::HTTP && scheme != http::uri::Scheme::HTTPS {
        return Err(fail("the scheme must be http or https"));
    }
    let authority = uri.authority().cloned().ok_or_else(|| fail("no host"))?;
    if uri.query().is_some() {
        return Err(fail("a base URL takes no query"));
    }
    Ok((scheme, authority, uri.path().trim_end_matches('/').to_owned()))
}

/// Bodies this large are allocated and freed several times per call (read, rendered, sent).
const LARGE_BODY: usize = 8 << 20;

/// glibc serves an allocation at or over its mmap threshold (128 KiB at first) with a fresh
/// mapping, faulted in page by page, and raises the threshold to the size of each such block
/// freed (mallopt(3), "dynamic adjustment"). A session's requests grow by a turn per call, so
/// each call's 600 KB buffers were just over the last freed one: mapped fresh, every call.
/// Freeing one block of [`LARGE_BODY`] first moves the threshold past them, and they are served
/// from memory the previous call freed. Other allocators ignore this (one 8 MiB allocation).
fn raise_mmap_threshold() {
    drop(std::hint::black_box(Vec::<u8>::with_capacity(LARGE_BODY)));
}

/// Starts the proxy on the current tokio runtime with an already opened store.
pub async fn serve(cfg: ProxyConfig, store: Store) -> Result<ProxyHandle, ProxyError> {
    if !cfg.listen.ip().is_loopback() && !cfg.allow_remote {
        return Err(ProxyError::NotLoopback(cfg.listen));
    }
    cfg.engine.validate()?;
    raise_mmap_threshold();
    let upstream = parse_upstream(&cfg.upstream)?;
    let connector =
        hyper_rustls::HttpsConnectorBuilder::new().with_webpki_roots().https_or_http().enable_http1().build();
    let client: HttpClient = Client::builder(TokioExecutor::new()).build(connector);
    let listener =
        TcpListener::bind(cfg.listen).await.map_err(|source| ProxyError::Bind { addr: cfg.listen, source })?;
    let addr = listener.local_addr().map_err(|source| ProxyError::Bind { addr: cfg.listen, source })?;
    let metrics = Arc::new(Metrics::default());
    let proxy = Arc::new(Proxy {
        cfg,
        store,
        client,
        sessions: Sessions::default(),
        chains: Default::default(),
        aliases: Default::default(),
        tails: Default::default(),
        metrics: Arc::clone(&metrics),
        in_flight: InFlight::default(),
        limits: crate::overflow::Limits::default(),
        upstream,
    });
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let period = proxy.cfg.idle_shrink.min(proxy.cfg.idle_evict) / 4;
        let mut sweep = tokio::time::interval(period.max(Duration::from_millis(10)));
        let limit = Arc::new(tokio::sync::Semaphore::new(proxy.cfg.max_connections.max(1)));
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(proxy.cfg.header_timeout);
        // Past the limit, a few more connections are served one request each, with a short
        // header timeout: `/healthz` still answers while every slot holds a call in flight.
        let reserve = Arc::new(tokio::sync::Semaphore::new(RESERVE));
        let mut brief = hyper::server::conn::http1::Builder::new();
        brief.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(RESERVE_HEADER_TIMEOUT).keep_alive(false);
        let unstarted = Arc::new(Unstarted::default());
        let bound = 2 * (proxy.cfg.max_connections + RESERVE);
        // A connection is accepted, then given a slot: at the limit the oldest connection
        // without a whole request head is shed to make room (see `shedding`), else the loop
        // waits for a call to end. At most one accepted connection waits; never a busy loop.
        'accept: loop {
            let accepted = tokio::select! {
                biased;
                _ = stopped.changed() => break,
                _ = sweep.tick() => {
                    sweep_idle(&proxy);
                    continue;
                }
                accepted = listener.accept() => accepted,
            };
            let tcp = match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors, say: make room and back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed; shedding the oldest unstarted connection, retrying in 50 ms");
                    unstarted.shed_oldest(Instant::now());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (held, reserved) = loop {
                if let Ok(p) = Arc::clone(&limit).try_acquire_owned() {
                    break (p, false);
                }
                if let Ok(p) = Arc::clone(&reserve).try_acquire_owned() {
                    break (p, true);
                }
                let retry = match unstarted.shed_oldest(Instant::now()) {
                    Shed::One => Duration::from_millis(50), // its slot frees as its task ends
                    Shed::Wait(d) => d,
                    Shed::None => Duration::from_secs(3600),
                };
                tokio::select! {
                    biased;
                    _ = stopped.changed() => break 'accept,
                    p = Arc::clone(&limit).acquire_owned() => match p {
                        Ok(p) => break (p, false),
                        Err(_) => break 'accept,
                    },
                    p = Arc::clone(&reserve).acquire_owned() => match p {
                        Ok(p) => break (p, true),
                        Err(_) => break 'accept,
                    },
                    _ = tokio::time::sleep(retry) => {}
                    _ = sweep.tick() => sweep_idle(&proxy),
                }
            };
            let _ = tcp.set_nodelay(true);
            let conn = unstarted.push(Instant::now(), bound);
            let p = Arc::clone(&proxy);
            // A reserved connection's body must come as fast as its headers.
            let body_timeout = if reserved { RESERVE_HEADER_TIMEOUT } else { proxy.cfg.body_timeout };
            let started = Arc::clone(&conn);
            let svc = service_fn(move |req| {
                started.start();
                handle(Arc::clone(&p), req, body_timeout)
            });
            let builder = if reserved { brief.clone() } else { http.clone() };
            let first_byte = if reserved { RESERVE_HEADER_TIMEOUT } else { proxy.cfg.header_timeout };
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                // hyper's header timeout starts with the first byte: a connection that sends
                // nothing would hold its slot forever.
                let first = tokio::select! {
                    r = tokio::time::timeout(first_byte, tcp.readable()) => matches!(r, Ok(Ok(()))),
                    _ = conn.shed() => false,
                };
                if first {
                    let served = watcher.watch(builder.serve_connection(TokioIo::new(tcp), svc));
                    tokio::pin!(served);
                    loop {
                        tokio::select! {
                            r = &mut served => {
                                if let Err(e) = r {
                                    tracing::debug!(error = %e, "connection ended");
                                }
                                break;
                            }
                            // Dropping it closes the socket: nothing was read that could be lost.
                            _ = conn.shed(), if !conn.started() => {
                                // It may have started in this very poll: then it stays.
                                if !conn.started() {
                                    break;
                                }
                            }
                        }
                    }
                }
                drop(held);
            });
        }
        drop(listener);
        // Calls in flight end and commit (their connections stay open until their answer is
        // whole); idle keep-alive connections are closed.
        let drain = async {
            graceful.shutdown().await;
            proxy.in_flight.drained().await;
        };
        if tokio::time::timeout(proxy.cfg.drain_timeout, drain).await.is_err() {
            tracing::warn!(
                in_flight = proxy.in_flight.count(),
                "shutdown: calls still in flight after the drain timeout"
            );
        }
    });
    Ok(ProxyHandle { addr, stop, task, metrics })
}

/// Shrinks or drops the sessions idle past the configured times.
fn sweep_idle(proxy: &Proxy) {
    let (evicted, shrunk) = proxy.sessions.sweep(proxy.cfg.idle_shrink, proxy.cfg.idle_evict);
    proxy.metrics.resident.store(proxy.sessions.len() as u64, std::sync::atomic::Ordering::Relaxed);
    if evicted + shrunk > 0 {
        tracing::debug!(evicted, shrunk, left = proxy.sessions.len(), "idle sessions shrunk or dropped from memory");
    }
}

async fn handle(
    proxy: Arc<Proxy>,
    req: Request<Incoming>,
    body_timeout: Duration,
) -> Result<Response<Body>, Infallible> {
    let started = Instant::now();
    let path = req.uri().path().to_owned();
    let resp = route(&proxy, req, started, body_timeout).await;
    proxy.metrics.request(&path, resp.status().as_u16());
    Ok(resp)
}

async fn route(proxy: &Arc<Proxy>, req: Request<Incoming>, started: Instant, body_timeout: Duration) -> Response<Body> {
    let shape = Shape::of_path(req.uri().path());
    match req.uri().path() {
        "/healthz" => return Response::new(full("ok\n")),
        "/readyz" => return ready(proxy).await,
        _ => {}
    }
    if let Some(token) = &proxy.cfg.client_token {
        let given = req.headers().get(crate::TOKEN_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
        if !constant_time_eq(given, token.as_bytes()) {
            return error(
                shape,
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "ctxlog: missing or wrong x-ctxlog-token",
            );
        }
    }
    let format = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => {
            let mut r = Response::new(full(proxy.metrics.render()));
            if let Ok(v) = "text/plain; version=0.0.4".parse() {
                r.headers_mut().insert(http::header::CONTENT_TYPE, v);
            }
            return r;
        }
        (&Method::POST, "/v1/messages" | "/v1/messages/count_tokens") => WireFormat::Anthropic,
        (&Method::POST, "/v1/chat/completions") => WireFormat::OpenAi,
        (&Method::POST, "/v1/responses" | crate::compact::PATH) => WireFormat::OpenAiResponses,
        (&Method::POST, path) if crate::gemini::method_of(path).is_some() => WireFormat::Gemini,
        _ => {
            let (parts, body) = req.into_parts();
            return crate::forward::forward(proxy, parts, body.map_err(Into::into).boxed(), false).await;
        }
    };
    let too_large = || {
        error(
            shape,
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            &format!("ctxlog: the request body is over {} bytes", proxy.cfg.max_body),
        )
    };
    let declared = req.headers().get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > proxy.cfg.max_body as u64) {
        return too_large();
    }
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(body_timeout, crate::api::read_limited(body, proxy.cfg.max_body));
    let bytes: Bytes = match read.await {
        Ok(Ok(Some(b))) => b,
        Ok(Ok(None)) => return too_large(),
        Ok(Err(e)) => return error(shape, StatusCode::BAD_REQUEST, "invalid_request_error", &format!("body: {e}")),
        Err(_) => {
            return error(
                shape,
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                &format!("ctxlog: the request body did not arrive within {body_timeout:?}"),
            )
        }
    };
    if parts.uri.path() == "/v1/messages/count_tokens" {
        return crate::count_tokens::count(Arc::clone(proxy), parts, bytes).await;
    }
    if parts.uri.path() == crate::compact::PATH {
        return crate::compact::compact(Arc::clone(proxy), parts, bytes).await;
    }
    crate::api::call(Arc::clone(proxy), parts, bytes, format, started).await
}

/// `/readyz`: 200 when the store answers within 2 s, else 503 (the proxy itself is alive:
/// that is `/healthz`).
async fn ready(proxy: &Arc<Proxy>) -> Response<Body> {
    let store = Arc::clone(&proxy.store);
    let probe = tokio::task::spawn_blocking(move || store.head(ctxlog::StreamId(uuid::Uuid::nil())));
    let why = match tokio::time::timeout(Duration::from_secs(2), probe).await {
        Ok(Ok(Ok(_))) => return Response::new(full("ready\n")),
        Ok(Ok(Err(e))) => e.to_string(),
        Ok(Err(e)) => e.to_string(),
        Err(_) => "the store did not answer within 2 s".to_owned(),
    };
    let mut r = Response::new(full(format!("not ready: {why}\n")));
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    r
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
