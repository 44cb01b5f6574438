//! `hptune dashboard`: serve the read-only web UI until interrupted.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use hptune::dashboard::{self, Access, AllowedHosts, HostName};
use hptune::storage::StorageUrl;

use super::Failure;

/// Serves the dashboard of the database at `url` on `host:port` (port 0: any free one),
/// answering to IP addresses, localhost and `allowed` names, printing its address first, within
/// `limits`.
pub async fn dashboard(
    url: &StorageUrl,
    host: IpAddr,
    port: u16,
    token: Option<String>,
    allowed: Vec<HostName>,
    limits: &hptune_http::Limits,
) -> Result<ExitCode, Failure> {
    let access = Access::for_host(host, token).map_err(Failure::BadInput)?;
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(host, port))
        .await
        .map_err(|e| Failure::Other(format!("cannot listen on {host}:{port}: {e}")))?;
    let address = listener
        .local_addr()
        .map_err(|e| Failure::Other(format!("cannot read the address listened on: {e}")))?;
    let shown = match host {
        IpAddr::V6(_) => format!("[{}]:{}", address.ip(), address.port()),
        IpAddr::V4(_) => address.to_string(),
    };
    let mut banner =
        format!("hptune dashboard: http://{shown}/ (read-only view of {url}; Ctrl-C stops it)\n");
    if let Access::Token(_) = access {
        banner.push_str(&format!(
            "every request needs the token: open http://{shown}/?token=<the token> once in a browser, or send 'Authorization: Bearer <the token>'\n"
        ));
    }
    // Whoever started the dashboard may stop reading its output: it goes on serving.
    let mut stdout = std::io::stdout();
    let _ = stdout
        .write_all(banner.as_bytes())
        .and_then(|()| stdout.flush());
    if url.is_missing() {
        eprintln!("warning: no database at {url} yet: the pages say so until a study creates it");
    }
    let router = dashboard::router(url.clone(), access, AllowedHosts::new(allowed));
    let interrupted = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    dashboard::serve(listener, router, limits, interrupted).await;
    Ok(ExitCode::SUCCESS)
}
