//! Who may look: anyone on this machine when the dashboard listens on a loopback address;
//! only holders of the token elsewhere, checked on every request.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};

/// The name of the cookie a browser keeps the token in once it has opened a page with
/// `?token=`, followed by the port the browser reached the dashboard on: browsers send a
/// host's cookies to all its ports, and each dashboard keeps its own token.
const COOKIE_PREFIX: &str = "hptune_token";

/// Who may look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Anyone who can reach the address (a loopback one without a token).
    Open,
    /// Requests that carry this token.
    Token(String),
}

impl Access {
    /// The access for a dashboard listening on `host` with `token`: a non-loopback address
    /// needs a token.
    pub fn for_host(host: IpAddr, token: Option<String>) -> Result<Self, String> {
        match token {
            Some(t) if t.trim().is_empty() => {
                Err("--token is empty: give a secret of your own".into())
            }
            Some(t) => Ok(Access::Token(t)),
            None if host.is_loopback() => Ok(Access::Open),
            None => Err(format!(
                "the dashboard would listen on {host}, which other machines can reach: give --token SECRET (checked on every request), or listen on 127.0.0.1"
            )),
        }
    }
}

/// Lets a request through if its token is right: `Authorization: Bearer T`, else
/// `?token=T` (which also sets the cookie, so a browser needs it once), else the cookie.
pub(super) async fn check(State(access): State<Access>, request: Request, next: Next) -> Response {
    let Access::Token(token) = &access else {
        return next.run(request).await;
    };
    let cookie_name = cookie_name(request.headers());
    let from_query = query_token(request.uri().query().unwrap_or(""));
    let given = bearer(request.headers())
        .or(from_query.clone())
        .or_else(|| cookie(request.headers(), &cookie_name));
    if !given.is_some_and(|g| same(g.as_bytes(), token.as_bytes())) {
        return refused();
    }
    let mut response = next.run(request).await;
    if from_query.is_some()
        && let Ok(value) = HeaderValue::from_str(&format!(
            "{cookie_name}={}; Path=/; HttpOnly; SameSite=Strict",
            percent_encode(token)
        ))
    {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

fn refused() -> Response {
    let body = super::pages::message_page(
        "Token needed",
        "This dashboard needs its token. Open it with <code>?token=…</code> once (the browser keeps it), or send <code>Authorization: Bearer …</code>.",
    );
    (StatusCode::UNAUTHORIZED, Html(body)).into_response()
}

/// The token of an `Authorization` header of the `Bearer` scheme (in any case: RFC 7235).
fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start().to_string())
}

/// The name of this dashboard's cookie for a request: [`COOKIE_PREFIX`] and the port of
/// its `Host`, if it names one.
fn cookie_name(headers: &HeaderMap) -> String {
    let port = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .and_then(|host| super::hosts::split_host(host).1)
        .and_then(|port| port.parse::<u16>().ok());
    match port {
        Some(port) => format!("{COOKIE_PREFIX}_{port}"),
        None => COOKIE_PREFIX.to_string(),
    }
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then(|| percent_decode(value))
        })
}

/// The token of a query string: percent escapes decoded, a `+` kept as typed (a token in a
/// URL is what its holder typed or pasted, not a form's field).
fn query_token(query: &str) -> Option<String> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("token=").map(percent_decode))
}

/// Equality in time that does not depend on where the two differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_goes_without_a_token() {
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let any: IpAddr = "0.0.0.0".parse().unwrap();
        assert_eq!(Access::for_host(local, None), Ok(Access::Open));
        assert!(Access::for_host(any, None).unwrap_err().contains("--token"));
        assert_eq!(
            Access::for_host(any, Some("s".into())),
            Ok(Access::Token("s".into()))
        );
        assert!(Access::for_host(any, Some(" ".into())).is_err());
    }

    #[test]
    fn tokens_survive_the_url_and_compare_whole() {
        assert_eq!(percent_decode(&percent_encode("a b/c%d")), "a b/c%d");
        assert_eq!(query_token("x=1&token=s%2Fx"), Some("s/x".into()));
        assert_eq!(query_token("token=a+b%2Bc"), Some("a+b+c".into()));
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd") && !same(b"abc", b"ab"));
    }
}
