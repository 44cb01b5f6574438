//! Access to a Kubernetes API server: the current context of the kubeconfig (`KUBECONFIG`,
//! default `~/.kube/config`) with a bearer token (`token`, `tokenFile`, or an `exec` plugin
//! such as `gke-gcloud-auth-plugin` or `aws eks get-token`) or a client certificate and key,
//! or else the in-cluster service account (`KUBERNETES_SERVICE_HOST`, the mounted token and
//! CA).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::Deserialize;

use crate::executor::remote::http::RemoteError;

/// Where the in-cluster service account's files are mounted.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How long a token from an exec plugin is kept when the plugin gives no expiry.
const EXEC_TOKEN_LIFETIME: Duration = Duration::from_secs(300);

/// How long an exec plugin may take to print its credential (it runs non-interactively).
const EXEC_TIMEOUT: Duration = Duration::from_secs(60);

/// A bearer token: given, read from a file each time (projected tokens rotate), or printed
/// by an exec plugin (kept until shortly before it expires).
#[derive(Clone)]
enum Token {
    Literal(String),
    File(PathBuf),
    Exec(Exec, Arc<tokio::sync::Mutex<Option<(String, Instant)>>>),
}

/// A kubeconfig user's `exec` plugin.
#[derive(Clone, Deserialize)]
struct Exec {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<ExecEnv>,
    #[serde(rename = "apiVersion", default)]
    api_version: String,
}

#[derive(Clone, Deserialize)]
struct ExecEnv {
    name: String,
    value: String,
}

/// How to reach and authenticate to the API server.
#[derive(Clone)]
pub(crate) struct KubeAccess {
    /// The API server's base URL.
    pub server: String,
    /// The namespace of the context, if it names one.
    pub namespace: Option<String>,
    /// The cluster's CA certificate (PEM), to trust besides the usual roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Whether the server's certificate is not checked (`insecure-skip-tls-verify`).
    pub insecure: bool,
    /// The user's client certificate and its key (PEM), when it authenticates with them.
    pub identity_pem: Option<Vec<u8>>,
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
    exec: Option<Exec>,
    #[serde(rename = "client-certificate-data")]
    client_certificate_data: Option<String>,
    #[serde(rename = "client-certificate")]
    client_certificate: Option<PathBuf>,
    #[serde(rename = "client-key-data")]
    client_key_data: Option<String>,
    #[serde(rename = "client-key")]
    client_key: Option<PathBuf>,
}

impl KubeAccess {
    /// The kubeconfig's current context, or the in-cluster service account.
    pub(crate) fn from_environment() -> Result<Self, RemoteError> {
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
                identity_pem: None,
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
        let identity_pem = match user {
            Some(user) => {
                let certificate = pem(
                    &user.client_certificate_data,
                    &user.client_certificate,
                    "client-certificate",
                )
                .map_err(&bad)?;
                let key =
                    pem(&user.client_key_data, &user.client_key, "client-key").map_err(&bad)?;
                certificate.zip(key).map(|(mut both, key)| {
                    both.push(b'\n');
                    both.extend(key);
                    both
                })
            }
            None => None,
        };
        let token = match user {
            Some(User { token: Some(t), .. }) => Some(Token::Literal(t.clone())),
            Some(User {
                token_file: Some(f),
                ..
            }) => Some(Token::File(f.clone())),
            Some(User { exec: Some(e), .. }) => Some(Token::Exec(
                e.clone(),
                Arc::new(tokio::sync::Mutex::new(None)),
            )),
            Some(_) if identity_pem.is_some() => None,
            Some(_) => {
                return Err(bad(format!(
                    "user '{}' has no token, tokenFile, exec plugin, or client certificate and key",
                    context.user.as_deref().unwrap_or_default()
                )));
            }
            None => None,
        };
        let ca_pem = pem(
            &cluster.certificate_authority_data,
            &cluster.certificate_authority,
            "certificate-authority",
        )
        .map_err(&bad)?;
        Ok(Self {
            server: cluster.server.trim_end_matches('/').to_string(),
            namespace: context.namespace.clone(),
            ca_pem,
            insecure: cluster.insecure_skip_tls_verify,
            identity_pem,
            token,
        })
    }

    /// The bearer token, if the credentials have one. An exec plugin runs as a child process
    /// awaited on the runtime (the controller's one thread goes on meanwhile), at most
    /// [`EXEC_TIMEOUT`].
    pub(crate) async fn token(&self) -> Result<Option<String>, RemoteError> {
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
            Some(Token::Exec(exec, cached)) => {
                let mut cached = cached.lock().await;
                if let Some((token, until)) = cached.as_ref()
                    && Instant::now() < *until
                {
                    return Ok(Some(token.clone()));
                }
                let (token, lifetime) = exec.run().await?;
                *cached = Some((token.clone(), Instant::now() + lifetime));
                Ok(Some(token))
            }
        }
    }
}

impl Exec {
    /// Runs the plugin; its token and how long to keep it (a minute less than it lasts).
    async fn run(&self) -> Result<(String, Duration), RemoteError> {
        let failed = |detail: String| {
            RemoteError::Credentials(format!(
                "the kubeconfig's exec plugin '{}' {detail}",
                self.command
            ))
        };
        let info = serde_json::json!({
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": false},
        });
        let running = tokio::process::Command::new(&self.command)
            .args(&self.args)
            .envs(self.env.iter().map(|e| (&e.name, &e.value)))
            .env("KUBERNETES_EXEC_INFO", info.to_string())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(EXEC_TIMEOUT, running)
            .await
            .map_err(|_| failed(format!("did not answer within {}s", EXEC_TIMEOUT.as_secs())))?
            .map_err(|e| failed(format!("cannot be started: {e}")))?;
        if !out.status.success() {
            // Its stderr says why (not logged in, ...); its stdout may hold a token.
            let reason = String::from_utf8_lossy(&out.stderr);
            return Err(failed(format!(
                "failed ({}): {}",
                out.status,
                reason.trim().lines().last().unwrap_or_default()
            )));
        }
        let credential: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| failed(format!("printed no ExecCredential JSON ({e})")))?;
        let status = &credential["status"];
        let token = status["token"]
            .as_str()
            .ok_or_else(|| failed("printed no status.token".into()))?;
        let lifetime = status["expirationTimestamp"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .and_then(|t| (t.to_utc() - chrono::Utc::now()).to_std().ok())
            .map_or(EXEC_TOKEN_LIFETIME, |left| {
                left.saturating_sub(Duration::from_secs(60))
            });
        Ok((token.to_string(), lifetime))
    }
}

/// A PEM given inline (`<field>-data`, base64) or as a file (`<field>`), if either is.
fn pem(
    data: &Option<String>,
    file: &Option<PathBuf>,
    field: &str,
) -> Result<Option<Vec<u8>>, String> {
    match (data, file) {
        (Some(data), _) => base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map(Some)
            .map_err(|e| format!("{field}-data is not base64: {e}")),
        (None, Some(file)) => std::fs::read(file)
            .map(Some)
            .map_err(|e| format!("{field} {} cannot be read: {e}", file.display())),
        (None, None) => Ok(None),
    }
}

fn find<'a, T>(items: &'a [Named<T>], name: &str) -> Option<&'a T> {
    items.iter().find(|i| i.name == name).map(|i| &i.value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::remote::http::Http;

    #[tokio::test]
    async fn reads_the_current_context_of_a_kubeconfig() {
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
        assert_eq!(access.token().await.unwrap().as_deref(), Some("right"));
    }

    fn kubeconfig_with_user(dir: &Path, user: &str) -> PathBuf {
        let path = dir.join("config");
        let text = format!(
            "current-context: c\ncontexts: [{{name: c, context: {{cluster: k, user: u}}}}]\nclusters: [{{name: k, cluster: {{server: 'https://k'}}}}]\nusers: [{{name: u, user: {user}}}]\n"
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_user_without_a_token_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = kubeconfig_with_user(dir.path(), "{username: admin}");
        let error = KubeAccess::from_kubeconfig(&path)
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("user 'u' has no token"), "{error}");
    }

    #[tokio::test]
    async fn a_client_certificate_and_key_make_an_identity() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        let made = std::process::Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args(["-subj", "/CN=test-only", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(made.success());
        let inline =
            base64::engine::general_purpose::STANDARD.encode(std::fs::read(&cert).unwrap());
        let user = format!(
            "{{client-certificate-data: {inline}, client-key: '{}'}}",
            key.display()
        );
        let access = KubeAccess::from_kubeconfig(&kubeconfig_with_user(dir.path(), &user)).unwrap();
        assert_eq!(access.token().await.unwrap(), None);
        let identity = access.identity_pem.clone().unwrap();
        let timeout = Duration::from_secs(1);
        assert!(Http::new(timeout, None, Some(&identity), false).is_ok());
        let key_text = std::fs::read_to_string(&key).unwrap();
        let broken = key_text.lines().take(3).collect::<Vec<_>>().join("\n");
        let error = Http::new(timeout, None, Some(broken.as_bytes()), false)
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains("client certificate and key do not read"),
            "{error}"
        );
        assert!(!error.contains(key_text.lines().nth(1).unwrap()), "{error}");
    }

    /// Access through a kubeconfig in `dir` whose user's exec plugin is the shell `script`
    /// (`exec` has `more` after its command).
    fn with_exec_plugin(dir: &Path, script: &str, more: &str) -> KubeAccess {
        let plugin = dir.join("plugin.sh");
        std::fs::write(&plugin, script).unwrap();
        let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&plugin, executable).unwrap();
        let user = format!(
            "{{exec: {{apiVersion: client.authentication.k8s.io/v1, command: '{}'{more}}}}}",
            plugin.display()
        );
        KubeAccess::from_kubeconfig(&kubeconfig_with_user(dir, &user)).unwrap()
    }

    /// The plugin runs beside the controller's one thread: the runtime's other tasks go on
    /// while it works (a plugin that logs in over the network takes seconds).
    #[tokio::test(flavor = "current_thread")]
    async fn the_runtime_goes_on_while_an_exec_plugin_runs() {
        let dir = tempfile::tempdir().unwrap();
        let script = "#!/bin/sh\nsleep 1\nprintf '{\"kind\": \"ExecCredential\", \"status\": {\"token\": \"slow\"}}'\n";
        let access = with_exec_plugin(dir.path(), script, "");
        let counted = std::sync::atomic::AtomicUsize::new(0);
        let ticking = async {
            let mut every = tokio::time::interval(Duration::from_millis(100));
            loop {
                every.tick().await;
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        };
        let token = tokio::select! {
            token = access.token() => token,
            _ = ticking => unreachable!(),
        };
        assert_eq!(token.unwrap().as_deref(), Some("slow"));
        let ticked = counted.load(std::sync::atomic::Ordering::Relaxed);
        assert!(ticked >= 5, "{ticked} ticks of 100 ms during a 1 s plugin");
    }

    #[tokio::test]
    async fn an_exec_plugin_gives_the_token_once_until_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        let script = format!(
            "#!/bin/sh\necho run >> '{}'\necho \"$KUBERNETES_EXEC_INFO\" | grep -q ExecCredential || exit 9\nprintf '{{\"kind\": \"ExecCredential\", \"status\": {{\"token\": \"%s\"}}}}' \"$PREFIX-token\"\n",
            runs.display()
        );
        let access = with_exec_plugin(dir.path(), &script, ", env: [{name: PREFIX, value: gke}]");
        assert_eq!(access.token().await.unwrap().as_deref(), Some("gke-token"));
        assert_eq!(access.token().await.unwrap().as_deref(), Some("gke-token"));
        let ran = std::fs::read_to_string(&runs).unwrap();
        assert_eq!(ran.lines().count(), 1, "the token is kept");
    }
}
