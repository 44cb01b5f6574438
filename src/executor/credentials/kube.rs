//! Access to a Kubernetes API server: the current context of the kubeconfig (`KUBECONFIG`,
//! default `~/.kube/config`) with a bearer token (`token` or `tokenFile`), or else the
//! in-cluster service account (`KUBERNETES_SERVICE_HOST`, the mounted token and CA).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use crate::executor::http::RemoteError;

/// Where the in-cluster service account's files are mounted.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A bearer token, given or read from a file each time (projected tokens rotate).
#[derive(Clone)]
enum Token {
    Literal(String),
    File(PathBuf),
}

/// How to reach and authenticate to the API server.
#[derive(Clone)]
pub struct KubeAccess {
    /// The API server's base URL.
    pub server: String,
    /// The namespace of the context, if it names one.
    pub namespace: Option<String>,
    /// The cluster's CA certificate (PEM), to trust besides the usual roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Whether the server's certificate is not checked (`insecure-skip-tls-verify`).
    pub insecure: bool,
    token: Option<Token>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Kubeconfig {
    current_context: Option<String>,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<Named<User>>,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "context", alias = "cluster", alias = "user")]
    value: T,
}

#[derive(Deserialize)]
struct Context {
    cluster: String,
    user: Option<String>,
    namespace: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: String,
    certificate_authority_data: Option<String>,
    certificate_authority: Option<PathBuf>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize)]
struct User {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
}

impl KubeAccess {
    /// The kubeconfig's current context, or the in-cluster service account.
    pub fn from_environment() -> Result<Self, RemoteError> {
        let configured = std::env::var_os("KUBECONFIG")
            .and_then(|paths| std::env::split_paths(&paths).find(|p| p.exists()))
            .or_else(|| {
                super::home()
                    .map(|h| h.join(".kube/config"))
                    .filter(|p| p.exists())
            });
        if let Some(path) = configured {
            return Self::from_kubeconfig(&path);
        }
        if let (Ok(host), Ok(port)) = (
            std::env::var("KUBERNETES_SERVICE_HOST"),
            std::env::var("KUBERNETES_SERVICE_PORT"),
        ) {
            let dir = Path::new(SERVICE_ACCOUNT_DIR);
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host
            };
            return Ok(Self {
                server: format!("https://{host}:{port}"),
                namespace: std::fs::read_to_string(dir.join("namespace"))
                    .ok()
                    .map(|n| n.trim().to_string()),
                ca_pem: std::fs::read(dir.join("ca.crt")).ok(),
                insecure: false,
                token: Some(Token::File(dir.join("token"))),
            });
        }
        Err(RemoteError::Credentials(
            "no Kubernetes credentials: set KUBECONFIG, write ~/.kube/config, or run inside the cluster".into(),
        ))
    }

    /// The current context of the kubeconfig at `path`.
    fn from_kubeconfig(path: &Path) -> Result<Self, RemoteError> {
        let bad = |detail: String| {
            RemoteError::Credentials(format!("kubeconfig {}: {detail}", path.display()))
        };
        let text =
            std::fs::read_to_string(path).map_err(|e| bad(format!("cannot be read: {e}")))?;
        let config: Kubeconfig = crate::spec::from_yaml(&text).map_err(bad)?;
        let current = config
            .current_context
            .ok_or_else(|| bad("names no current-context".into()))?;
        let context = find(&config.contexts, &current)
            .ok_or_else(|| bad(format!("has no context '{current}'")))?;
        let cluster = find(&config.clusters, &context.cluster)
            .ok_or_else(|| bad(format!("has no cluster '{}'", context.cluster)))?;
        let user = match &context.user {
            Some(name) => Some(
                find(&config.users, name).ok_or_else(|| bad(format!("has no user '{name}'")))?,
            ),
            None => None,
        };
        let token = match user {
            Some(User { token: Some(t), .. }) => Some(Token::Literal(t.clone())),
            Some(User {
                token_file: Some(f),
                ..
            }) => Some(Token::File(f.clone())),
            Some(_) => {
                return Err(bad(format!(
                    "user '{}' has no token or tokenFile: hptune authenticates with bearer tokens (client certificates and exec plugins are not supported)",
                    context.user.as_deref().unwrap_or_default()
                )));
            }
            None => None,
        };
        let ca_pem = match (
            &cluster.certificate_authority_data,
            &cluster.certificate_authority,
        ) {
            (Some(data), _) => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(data.trim())
                    .map_err(|e| bad(format!("certificate-authority-data is not base64: {e}")))?,
            ),
            (None, Some(file)) => Some(std::fs::read(file).map_err(|e| {
                bad(format!(
                    "certificate-authority {} cannot be read: {e}",
                    file.display()
                ))
            })?),
            (None, None) => None,
        };
        Ok(Self {
            server: cluster.server.trim_end_matches('/').to_string(),
            namespace: context.namespace.clone(),
            ca_pem,
            insecure: cluster.insecure_skip_tls_verify,
            token,
        })
    }

    /// The bearer token, if the credentials have one.
    pub fn token(&self) -> Result<Option<String>, RemoteError> {
        match &self.token {
            None => Ok(None),
            Some(Token::Literal(token)) => Ok(Some(token.clone())),
            Some(Token::File(path)) => std::fs::read_to_string(path)
                .map(|t| Some(t.trim().to_string()))
                .map_err(|e| {
                    RemoteError::Credentials(format!(
                        "the token file {} cannot be read: {e}",
                        path.display()
                    ))
                }),
        }
    }
}

fn find<'a, T>(items: &'a [Named<T>], name: &str) -> Option<&'a T> {
    items.iter().find(|i| i.name == name).map(|i| &i.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_current_context_of_a_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            r#"
apiVersion: v1
kind: Config
current-context: work
contexts:
  - name: home
    context: {cluster: a, user: a}
  - name: work
    context: {cluster: b, user: b, namespace: tuning}
clusters:
  - name: a
    cluster: {server: "https://a.example"}
  - name: b
    cluster:
      server: "https://b.example:6443/"
      certificate-authority-data: UEVN
users:
  - name: a
    user: {token: wrong}
  - name: b
    user: {token: right}
"#,
        )
        .unwrap();
        let access = KubeAccess::from_kubeconfig(&path).unwrap();
        assert_eq!(access.server, "https://b.example:6443");
        assert_eq!(access.namespace.as_deref(), Some("tuning"));
        assert_eq!(access.ca_pem.as_deref(), Some(&b"PEM"[..]));
        assert_eq!(access.token().unwrap().as_deref(), Some("right"));
    }

    #[test]
    fn a_user_without_a_token_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: {server: 'https://k'}}]\nusers: [{name: u, user: {exec: {command: gcloud}}}]\n",
        )
        .unwrap();
        let error = KubeAccess::from_kubeconfig(&path)
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("user 'u' has no token"), "{error}");
    }
}
