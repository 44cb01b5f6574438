//! Which names the dashboard answers to: its defence against DNS rebinding. A web page the
//! user visits can point its own name at 127.0.0.1 and then read the dashboard as a page of
//! its own site; its requests name that site in `Host`. So a request is answered only when
//! its `Host` is an IP address (a page served from an address cannot be moved to another),
//! `localhost` (which browsers resolve themselves), or a name given with `--allow-host`.
//! Ports are not compared: an SSH tunnel (`ssh -L 9000:localhost:8080`) changes them.

use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};

use crate::plot::svg::escape;

/// A name the dashboard answers to besides its addresses (`--allow-host`): a host name as a
/// browser's address bar shows it, without scheme or port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostName(String);

impl FromStr for HostName {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let valid = !text.is_empty()
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
        match valid {
            true => Ok(HostName(text.to_ascii_lowercase())),
            false => Err(format!(
                "'{text}' is not a host name: give the name as the browser's address bar shows it, without scheme or port (e.g. tune.example.org)"
            )),
        }
    }
}

/// The names the dashboard answers to besides IP addresses and `localhost`.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts(Arc<[HostName]>);

impl AllowedHosts {
    /// Addresses, `localhost` and `names`.
    pub fn new(names: Vec<HostName>) -> Self {
        AllowedHosts(names.into())
    }

    /// Whether a request whose `Host` header is `host` (`NAME`, `NAME:PORT`, `[V6]:PORT`)
    /// is answered.
    fn allow(&self, host: &str) -> bool {
        let name = host_name(host);
        name.parse::<IpAddr>().is_ok()
            || name.eq_ignore_ascii_case("localhost")
            || self
                .0
                .iter()
                .any(|allowed| name.eq_ignore_ascii_case(&allowed.0))
    }
}

/// The name or address of a `Host` header's value (an IPv6 address without its brackets)
/// and its port, if it has one.
pub(super) fn split_host(host: &str) -> (&str, Option<&str>) {
    match host.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((v6, rest)) => (v6, rest.strip_prefix(':')),
            None => (bracketed, None),
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    }
}

/// The name or address of a `Host` header's value, without its port.
fn host_name(host: &str) -> &str {
    split_host(host).0
}

/// Answers a request only if its `Host` is one the dashboard answers to; otherwise a 403
/// page that says how to allow the name.
pub(super) async fn check(
    State(allowed): State<AllowedHosts>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    match host {
        Some(host) if allowed.allow(&host) => next.run(request).await,
        Some(host) => {
            tracing::warn!(%host, "refused a request for a name the dashboard does not answer to");
            refused(&host)
        }
        None => {
            let body = super::pages::message_page(
                "No Host",
                "The request names no host (<code>Host:</code>): the dashboard answers only requests that do.",
            );
            (StatusCode::BAD_REQUEST, Html(body)).into_response()
        }
    }
}

fn refused(host: &str) -> Response {
    let name = escape(host_name(host));
    let body = super::pages::message_page(
        "Unknown host name",
        &format!(
            "This dashboard does not answer to the name <code>{name}</code>: another site can point a name of its own at this machine to read the dashboard (DNS rebinding). It answers to <code>localhost</code> and IP addresses; if <code>{name}</code> is your name for this machine, start it with <code>--allow-host {name}</code>."
        ),
    );
    (StatusCode::FORBIDDEN, Html(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_localhost_and_allowed_names_are_answered() {
        let allowed = AllowedHosts::new(vec!["Tune.example.org".parse().unwrap()]);
        for host in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "[::1]:8080",
            "[::1]",
            "10.1.2.3:80",
            "localhost:9000",
            "LOCALHOST",
            "tune.example.org:8080",
            "TUNE.example.org",
        ] {
            assert!(allowed.allow(host), "{host}");
        }
        for host in [
            "attacker.example:8080",
            "attacker.example",
            "localhost.attacker.example",
            "127.0.0.1.attacker.example",
            "example.org",
            "",
            "::1",
        ] {
            assert!(!allowed.allow(host), "{host}");
        }
    }

    #[test]
    fn a_host_name_has_no_scheme_or_port() {
        for bad in ["", "http://x", "x:80", "a b", "x/y"] {
            assert!(bad.parse::<HostName>().is_err(), "{bad}");
        }
        assert_eq!(
            "My-Box.lan".parse::<HostName>(),
            Ok(HostName("my-box.lan".into()))
        );
    }
}
