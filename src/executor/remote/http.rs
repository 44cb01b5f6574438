//! Requests to the engines' REST APIs: a per-request timeout, and retries with exponential
//! backoff and jitter on throttling (429, SageMaker's `ThrottlingException`), server errors
//! (5xx), timeouts and refused connections. Errors name the request and the answer, never a
//! header: credentials travel in headers only.

use std::time::Duration;

use reqwest::{Client, RequestBuilder, StatusCode};

/// Tries of one request before its error is returned.
const TRIES: u32 = 6;
/// The first pause between tries; it doubles each time, with jitter.
const FIRST_PAUSE: Duration = Duration::from_millis(250);
/// The longest pause between tries.
const LONGEST_PAUSE: Duration = Duration::from_secs(20);
/// How much of an error answer is kept in a message.
const BODY_EXCERPT: usize = 400;

/// Why a request to an engine, or the credentials it needs, failed.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum RemoteError {
    /// The request did not get an answer.
    #[error("{what}: {detail}")]
    Transport {
        /// The request (`GET /apis/batch/v1/...`).
        what: String,
        /// What went wrong.
        detail: String,
    },
    /// The engine answered with an error.
    #[error("{what}: HTTP {status}: {body}")]
    Status {
        /// The request.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The start of the answer's body.
        body: String,
    },
    /// Credentials could not be found or used.
    #[error("{0}")]
    Credentials(String),
    /// A command of the engine (Slurm's `sbatch`, `scontrol`, `scancel`) failed; what it said.
    #[error("{0}")]
    Command(String),
    /// The engine's answer is not what its API documents.
    #[error("{what}: unexpected answer: {detail}")]
    Answer {
        /// The request.
        what: String,
        /// What is wrong with it.
        detail: String,
    },
}

impl RemoteError {
    /// The HTTP status of an error answer.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            RemoteError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A client of one engine's API.
#[derive(Debug, Clone)]
pub(super) struct Http {
    client: Client,
}

impl Http {
    /// A client whose requests time out after `timeout`; `root_pem` adds a trusted CA (a
    /// cluster's own), `identity_pem` is a client certificate and its key to present,
    /// `insecure` trusts any certificate (kubeconfig's `insecure-skip-tls-verify`).
    pub(super) fn new(
        timeout: Duration,
        root_pem: Option<&[u8]>,
        identity_pem: Option<&[u8]>,
        insecure: bool,
    ) -> Result<Self, RemoteError> {
        let mut builder = Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .danger_accept_invalid_certs(insecure)
            .user_agent(concat!("hptune/", env!("CARGO_PKG_VERSION")));
        if let Some(pem) = root_pem {
            let certificate = reqwest::Certificate::from_pem(pem).map_err(|e| {
                RemoteError::Credentials(format!("the cluster's CA certificate does not read: {e}"))
            })?;
            builder = builder.add_root_certificate(certificate);
        }
        if let Some(pem) = identity_pem {
            // reqwest's message names what is missing, never the key's content.
            let identity = reqwest::Identity::from_pem(pem).map_err(|e| {
                RemoteError::Credentials(format!("the client certificate and key do not read: {e}"))
            })?;
            builder = builder.identity(identity);
        }
        let client = builder
            .build()
            .map_err(|e| RemoteError::Credentials(format!("cannot set up HTTPS: {e}")))?;
        Ok(Self { client })
    }

    /// Sends the request `build` makes (built again for each try, so that signatures and
    /// tokens are fresh) and returns the body of its successful answer.
    pub(super) async fn send(
        &self,
        what: &str,
        build: impl Fn(&Client) -> Result<RequestBuilder, RemoteError>,
    ) -> Result<Vec<u8>, RemoteError> {
        let mut try_number = 0;
        loop {
            try_number += 1;
            let last = try_number >= TRIES;
            let error = match build(&self.client)?.send().await {
                Ok(answer) => {
                    let status = answer.status();
                    let body = answer.bytes().await.map(|b| b.to_vec());
                    match body {
                        Ok(body) if status.is_success() => return Ok(body),
                        Ok(body) => {
                            let error = RemoteError::Status {
                                what: what.to_string(),
                                status: status.as_u16(),
                                body: excerpt(&body),
                            };
                            if !is_transient(status, &body) {
                                return Err(error);
                            }
                            error
                        }
                        Err(e) => transport(what, &e),
                    }
                }
                Err(e) if e.is_timeout() || e.is_connect() || e.is_request() => transport(what, &e),
                Err(e) => return Err(transport(what, &e)),
            };
            if last {
                return Err(error);
            }
            tracing::warn!("{error}; trying again ({try_number} of {TRIES})");
            tokio::time::sleep(pause(try_number)).await;
        }
    }

    /// Sends the request and reads its answer as JSON.
    pub(super) async fn json<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        build: impl Fn(&Client) -> Result<RequestBuilder, RemoteError>,
    ) -> Result<T, RemoteError> {
        let body = self.send(what, build).await?;
        serde_json::from_slice(&body).map_err(|e| RemoteError::Answer {
            what: what.to_string(),
            detail: format!("{e}: {}", excerpt(&body)),
        })
    }
}

/// Whether an error answer may go away by itself.
fn is_transient(status: StatusCode, body: &[u8]) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
        || String::from_utf8_lossy(body).contains("ThrottlingException")
}

/// The pause after the `n`th failed try: exponential, capped, with full jitter in its upper
/// half so that controllers do not retry in step.
fn pause(n: u32) -> Duration {
    let ceiling = FIRST_PAUSE
        .saturating_mul(2u32.saturating_pow(n.saturating_sub(1)))
        .min(LONGEST_PAUSE);
    ceiling.mul_f64(0.5 + rand::random::<f64>() / 2.0)
}

/// A transport error with its causes, without the URL's query (no credential is ever in a
/// URL, but the message stays short).
fn transport(what: &str, error: &reqwest::Error) -> RemoteError {
    let mut detail = if error.is_timeout() {
        "no answer within request_timeout".to_string()
    } else {
        "no answer".to_string()
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        detail.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    RemoteError::Transport {
        what: what.to_string(),
        detail,
    }
}

/// The start of an answer's body, on one line.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(BODY_EXCERPT) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_and_stay_under_the_ceiling() {
        for n in 1..12 {
            let ceiling = FIRST_PAUSE * 2u32.pow(n - 1);
            let p = pause(n);
            assert!(p <= ceiling.min(LONGEST_PAUSE), "{n}: {p:?}");
            assert!(p >= ceiling.min(LONGEST_PAUSE) / 2, "{n}: {p:?}");
        }
    }

    #[test]
    fn throttling_and_server_errors_are_transient() {
        assert!(is_transient(StatusCode::TOO_MANY_REQUESTS, b""));
        assert!(is_transient(StatusCode::SERVICE_UNAVAILABLE, b""));
        assert!(is_transient(
            StatusCode::BAD_REQUEST,
            br#"{"__type": "ThrottlingException", "message": "Rate exceeded"}"#
        ));
        assert!(!is_transient(StatusCode::BAD_REQUEST, b"{}"));
        assert!(!is_transient(StatusCode::NOT_FOUND, b""));
    }

    #[test]
    fn excerpts_are_one_short_line() {
        assert_eq!(excerpt(b"a\n  b"), "a b");
        assert_eq!(excerpt(&[b'x'; 1000]).len(), BODY_EXCERPT + 3);
    }
}
