//! `hptune dashboard`: a read-only web UI over the database, served by the binary itself.
//!
//! Pages are HTML drawn here ([`pages`]) with figures drawn as SVG by [`crate::plot`];
//! a small script embedded in the binary polls for what changed (trials since a revision,
//! answered from a [`source::Source`] that reads only the rows that may have changed) and
//! swaps figures and rows in place. Every asset is inside the binary; nothing is fetched
//! from elsewhere. The database is opened read-only and never locked for writing.

mod access;
mod hosts;
mod logs;
mod pages;
mod routes;
mod source;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;

pub use access::Access;
pub use hosts::{AllowedHosts, HostName};
use source::Source;

use crate::storage::StorageUrl;

/// Builds the dashboard's routes over the database at `url`, open to `access` under the
/// names `hosts` allows.
pub fn router(url: StorageUrl, access: Access, hosts: AllowedHosts) -> Router {
    let source = Arc::new(Source::new(url));
    Router::new()
        .route("/", get(routes::studies))
        .route("/studies/{name}", get(routes::study))
        .route("/studies/{name}/figures/{kind}", get(routes::figure))
        .route("/studies/{name}/trials/{number}", get(routes::trial))
        .route("/api/studies", get(routes::studies_json))
        .route("/api/studies/{name}/changes", get(routes::changes))
        .fallback(routes::not_found)
        .with_state(source)
        .layer(axum::middleware::from_fn_with_state(access, access::check))
        .layer(axum::middleware::from_fn_with_state(hosts, hosts::check))
}

/// Serves the dashboard on `listener` within `limits` until `shutdown` resolves, then lets
/// the pages in flight finish within the grace period.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: &hptune_http::Limits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    hptune_http::serve(listener, router, limits, shutdown).await;
}
