//! Google's Application Default Credentials, as OAuth access tokens: a service-account key
//! named by `GOOGLE_APPLICATION_CREDENTIALS` (a JWT signed with its RS256 key, exchanged at
//! its `token_uri`), or else the metadata server of the machine (`GCE_METADATA_HOST`
//! overrides its address). Tokens are kept until a minute before they expire.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::executor::remote::http::{Http, RemoteError};

/// The scope of every token: Vertex AI is a Cloud Platform API.
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Tokens are renewed this long before they expire.
const RENEW_BEFORE: Duration = Duration::from_secs(60);

/// The fields of a service-account key file that are used.
#[derive(Deserialize)]
struct ServiceAccountKey {
    #[serde(rename = "type")]
    kind: String,
    client_email: String,
    private_key: String,
    private_key_id: Option<String>,
    token_uri: String,
}

/// Where tokens come from.
enum Source {
    /// A service account's key.
    Key(ServiceAccountKey),
    /// The metadata server, at this base URL.
    Metadata(String),
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    scope: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: u64,
}

/// OAuth access tokens for Google Cloud APIs.
pub(crate) struct GoogleAuth {
    source: Source,
    http: Http,
    cached: Mutex<Option<(String, Instant)>>,
}

impl GoogleAuth {
    /// Finds the Application Default Credentials of this process.
    pub(crate) fn from_environment(http: Http) -> Result<Self, RemoteError> {
        let source = match std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS") {
            Some(path) => {
                let path = std::path::PathBuf::from(path);
                let unreadable = |detail: String| {
                    RemoteError::Credentials(format!(
                        "GOOGLE_APPLICATION_CREDENTIALS names {}, which {detail}",
                        path.display()
                    ))
                };
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| unreadable(format!("cannot be read ({e})")))?;
                // serde_json's messages quote no values, only positions: no key leaks.
                let key: ServiceAccountKey = serde_json::from_str(&text)
                    .map_err(|e| unreadable(format!("is not a service-account key file ({e})")))?;
                if key.kind != "service_account" {
                    return Err(unreadable(format!(
                        "holds credentials of type '{}': hptune takes a service account's key (type service_account) or the metadata server",
                        key.kind
                    )));
                }
                Source::Key(key)
            }
            None => Source::Metadata(match std::env::var("GCE_METADATA_HOST") {
                Ok(host) if host.contains("://") => host,
                Ok(host) => format!("http://{host}"),
                Err(_) => "http://metadata.google.internal".into(),
            }),
        };
        Ok(Self {
            source,
            http,
            cached: Mutex::new(None),
        })
    }

    /// A valid access token.
    pub(crate) async fn token(&self) -> Result<String, RemoteError> {
        let mut cached = self.cached.lock().await;
        if let Some((token, expires)) = cached.as_ref()
            && Instant::now() + RENEW_BEFORE < *expires
        {
            return Ok(token.clone());
        }
        let answer = match &self.source {
            Source::Key(key) => self.exchange(key).await?,
            Source::Metadata(base) => {
                let url =
                    format!("{base}/computeMetadata/v1/instance/service-accounts/default/token");
                self.http
                    .json("GET the metadata server's token", |client| {
                        Ok(client.get(&url).header("Metadata-Flavor", "Google"))
                    })
                    .await?
            }
        };
        let expires = Instant::now() + Duration::from_secs(answer.expires_in);
        *cached = Some((answer.access_token.clone(), expires));
        Ok(answer.access_token)
    }

    /// Exchanges a JWT signed with the key for an access token at the key's `token_uri`.
    async fn exchange(&self, key: &ServiceAccountKey) -> Result<TokenAnswer, RemoteError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let claims = Claims {
            iss: &key.client_email,
            scope: SCOPE,
            aud: &key.token_uri,
            iat: now,
            exp: now + 3600,
        };
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = key.private_key_id.clone();
        let signing_key = jsonwebtoken::EncodingKey::from_rsa_pem(key.private_key.as_bytes())
            .map_err(|e| {
                RemoteError::Credentials(format!(
                    "the private key of service account {} does not read: {e}",
                    key.client_email
                ))
            })?;
        let assertion = jsonwebtoken::encode(&header, &claims, &signing_key)
            .map_err(|e| RemoteError::Credentials(format!("cannot sign the token request: {e}")))?;
        let form = [
            ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
            ("assertion", assertion.as_str()),
        ];
        self.http
            .json(&format!("POST {}", key.token_uri), |client| {
                Ok(client.post(&key.token_uri).form(&form))
            })
            .await
    }
}
