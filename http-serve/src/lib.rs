//! The HTTP serving shared by `hptune dashboard` and `hptune-trainer serve`: an axum router
//! behind an accept loop that a client cannot hold. A connection must send its request's
//! headers within the read timeout (which also closes a kept-alive connection left idle that
//! long), and its body without pausing that long; at most `--max-connections` are open at once
//! (more wait in the listen backlog until one closes); on shutdown the server stops accepting,
//! lets the requests in flight finish within the grace period, then cuts what is left.

#![warn(unreachable_pub)]

mod body;
mod limits;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

pub use body::BodyReadTimeout;
pub use limits::Limits;

/// How a server stopped after its shutdown signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Every connection finished its request in flight, then closed, within the grace period.
    Drained,
    /// The grace period ended with this many connections still open: they were cut.
    Cut(usize),
}

/// Serves `router` on `listener` within `limits` until `shutdown` resolves, then drains the
/// connections for at most `limits.shutdown_grace`. Requests carry the client's address as
/// axum's `ConnectInfo<SocketAddr>`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: &Limits,
    shutdown: impl Future<Output = ()>,
) -> Stopped {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop, stopping) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.read_timeout());
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener, &slots, limits.max_connections) => accepted,
        };
        while connections.try_join_next().is_some() {}
        let (stream, peer, slot) = accepted;
        let connection = http.serve_connection(
            TokioIo::new(stream),
            service(router.clone(), peer, limits.read_timeout()),
        );
        let mut stopping = stopping.clone();
        connections.spawn(async move {
            let _slot = slot;
            tokio::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                _ = stopping.changed() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!("connection from {peer} ended: {e}");
            }
        });
    }
    drop(listener);
    stop.send_replace(true);
    let drained = tokio::time::timeout(limits.shutdown_grace(), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    match drained {
        Ok(()) => Stopped::Drained,
        Err(_) => {
            let cut = connections.len();
            tracing::warn!(
                "{cut} connections still open after the {:?} grace period: cut",
                limits.shutdown_grace()
            );
            connections.abort_all();
            Stopped::Cut(cut)
        }
    }
}

/// The next connection, once one of the `max` slots is free.
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
    max: usize,
) -> (TcpStream, SocketAddr, OwnedSemaphorePermit) {
    let slot = match slots.clone().try_acquire_owned() {
        Ok(slot) => slot,
        Err(_) => {
            tracing::warn!("{max} connections open (--max-connections): new ones wait");
            slots
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed")
        }
    };
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => return (stream, peer, slot),
            Err(e) => {
                // Out of descriptors or memory, or a connection reset before it was accepted:
                // the listener itself is fine, try again shortly.
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// `router` as hyper's service on the connection from `peer`, its request bodies under
/// `read_timeout`.
fn service(
    router: Router,
    peer: SocketAddr,
    read_timeout: Duration,
) -> impl hyper::service::Service<
    hyper::Request<Incoming>,
    Response = axum::response::Response,
    Error = Infallible,
    Future: Send,
> {
    service_fn(move |request: hyper::Request<Incoming>| {
        let mut router = router.clone();
        let mut request =
            request.map(|body| axum::body::Body::new(body::Timed::new(body, read_timeout)));
        request.extensions_mut().insert(ConnectInfo(peer));
        tower_service::Service::call(&mut router, request)
    })
}
