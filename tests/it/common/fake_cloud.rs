//! A fake of the three engines' APIs on 127.0.0.1, for the remote executors' tests.
//!
//! It checks every request against the shape the engine documents (path, method, required
//! fields, authentication) and records what is wrong; it "runs" a job by executing the
//! container's command here (`hptune relay ... -- worker ...` with the job's environment), so
//! measurements really flow through PostgreSQL; and it plays the faults of a [`Script`]:
//! throttling, server errors, a slow answer, preempted attempts.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::fake_capacity::{container_folder, has_checkpoint, spot_fields};

/// Which API the fake plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Vertex,
    Kubernetes,
    SageMaker,
}

/// The faults to play, and how jobs run.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// Answer the first job creation with throttling (429; SageMaker: its 400
    /// ThrottlingException).
    pub throttle_first_create: bool,
    /// Answer the first state request with a 500.
    pub fail_first_poll: bool,
    /// Answer this many state requests, from the first on, with a 503: the API down for a
    /// while (an outage longer than the client's own tries of one request).
    pub down_for_polls: usize,
    /// Answer the Nth state request this late (past the client's timeout).
    pub slow_poll: Option<(usize, Duration)>,
    /// Trials whose first attempt's machine is taken away while it runs.
    pub preempt: Vec<u64>,
    /// Take a machine away (`preempt`) only once its job has written a checkpoint.
    pub preempt_after_checkpoint: bool,
    /// Environment added to the job of a trial (e.g. `MODE=fail`).
    pub trial_env: HashMap<u64, Vec<(String, String)>>,
    /// The credential every request must carry: the bearer token, or (SageMaker) the
    /// access key id.
    pub credential: String,
    /// The RSA public key (PEM) that signs Vertex's token requests.
    pub jwt_public_key: Option<String>,
    /// SageMaker: the secret key and session token; each request's signature is computed again
    /// with them and must match.
    pub aws_secret: Option<(String, String)>,
    /// Kubernetes: finished Jobs are deleted at once (a TTL that passed while no controller
    /// watched): asking for one answers 404.
    pub ttl_passed: bool,
    /// Kubernetes: the Secrets of the Jobs' namespace, by (name, key): what an env entry's
    /// `valueFrom.secretKeyRef` gives the container (a reference to another is refused).
    pub secrets: HashMap<(String, String), String>,
}

/// A job the fake runs.
struct Job {
    handle: String,
    trial: u64,
    attempt: u32,
    command: Vec<String>,
    env: Vec<(String, String)>,
    /// The fake's folder of the job's checkpoints (`--checkpoint-dir` of its relay).
    checkpoints: Option<PathBuf>,
    process: Option<Child>,
    polls: u32,
    end: Option<End>,
}

#[derive(Debug, Clone, PartialEq)]
enum End {
    Exited(i32),
    Preempted,
    Cancelled,
}

/// What the fake saw.
#[derive(Default)]
pub struct Seen {
    /// Every request, as `METHOD path`.
    pub requests: Vec<String>,
    /// What was wrong with requests.
    pub problems: Vec<String>,
    /// Statuses of the fault answers given (429, 500, 503, 400 throttling), and slow answers
    /// (0).
    pub faults: Vec<u16>,
    /// Jobs cancelled (or deleted), by trial and attempt.
    pub cancelled: Vec<(u64, u32)>,
    /// Jobs created, by trial and attempt.
    pub created: Vec<(u64, u32)>,
    /// Access tokens issued by the token endpoint.
    pub tokens_issued: usize,
    /// The body of every request, as sent.
    pub bodies: Vec<String>,
    /// Where each created job's model goes, as the engine reads its definition.
    pub models: Vec<SeenModel>,
    /// The spot and checkpoint fields of each created job, by trial and attempt
    /// ([`super::fake_capacity::spot_fields`]).
    pub spot: Vec<(u64, u32, Value)>,
}

/// Where a job's model goes.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenModel {
    /// The job's trial and attempt.
    pub trial: u64,
    pub attempt: u32,
    /// Where the engine keeps the model: Vertex's `AIP_MODEL_DIR` from the job's
    /// `baseOutputDirectory` (without its trailing `/`), SageMaker's
    /// `S3OutputPath/<job>/output/model.tar.gz`, or `pvc://<claim>/<folder>` for the folder
    /// of a mounted claim that the worker is told; `None` when the job names none.
    pub location: Option<String>,
    /// The worker's `HPTUNE_OUTPUT_DIR` and `AIP_MODEL_DIR` in the container.
    pub worker_env: (Option<String>, Option<String>),
}

struct State {
    api: Api,
    script: Script,
    workdir: PathBuf,
    base: String,
    jobs: Vec<Job>,
    polls: usize,
    seen: Seen,
}

/// The running fake.
pub struct FakeCloud {
    /// Its base URL.
    pub url: String,
    state: Arc<Mutex<State>>,
}

struct Request {
    method: String,
    path: String,
    query: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl FakeCloud {
    /// Starts the fake of `api`; jobs run in directories under `workdir`.
    pub fn start(api: Api, script: Script, workdir: PathBuf) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            api,
            script,
            workdir,
            base: url.clone(),
            jobs: Vec::new(),
            polls: 0,
            seen: Seen::default(),
        }));
        let shared = state.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).unwrap();
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let state = shared.clone();
                    tokio::spawn(async move { serve(stream, state).await });
                }
            });
        });
        Self { url, state }
    }

    /// What the fake saw so far.
    pub fn seen<T>(&self, read: impl FnOnce(&Seen) -> T) -> T {
        read(&self.state.lock().unwrap().seen)
    }
}

impl Drop for FakeCloud {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap();
        for job in &mut state.jobs {
            if let Some(child) = &mut job.process {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    let (status, body, delay) = {
        let mut state = state.lock().unwrap();
        state
            .seen
            .requests
            .push(format!("{} {}", request.method, request.path));
        state
            .seen
            .bodies
            .push(String::from_utf8_lossy(&request.body).into_owned());
        state.answer(&request)
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let body = body.to_string();
    let reply = format!(
        "HTTP/1.1 {status} Fake\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}

async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let target = first.next()?.to_string();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = data[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target, String::new()),
    };
    Some(Request {
        method,
        path,
        query,
        headers,
        body,
    })
}

type Answer = (u16, Value, Option<Duration>);

impl State {
    fn problem(&mut self, what: String) -> Answer {
        self.seen.problems.push(what.clone());
        (400, json!({"error": {"code": 400, "message": what}}), None)
    }

    fn answer(&mut self, request: &Request) -> Answer {
        if self.api == Api::Vertex && request.path == "/token" {
            return self.token(request);
        }
        if self.api == Api::Vertex
            && request.path == "/computeMetadata/v1/instance/service-accounts/default/token"
        {
            if request.headers.get("metadata-flavor").map(String::as_str) != Some("Google") {
                return self.problem("metadata server: no Metadata-Flavor: Google".into());
            }
            self.seen.tokens_issued += 1;
            let token = json!({"access_token": self.script.credential, "expires_in": 3600, "token_type": "Bearer"});
            return (200, token, None);
        }
        if let Err(what) = self.check_auth(request) {
            return self.problem(format!("{} {}: {what}", request.method, request.path));
        }
        let body: Value = if request.body.is_empty() {
            Value::Null
        } else {
            match serde_json::from_slice(&request.body) {
                Ok(v) => v,
                Err(e) => return self.problem(format!("{}: body is not JSON: {e}", request.path)),
            }
        };
        let action = self.action(request);
        match action.as_deref() {
            Some("create") => {
                if self.script.throttle_first_create
                    && !self.seen.faults.iter().any(|f| *f == 429 || *f == 400)
                {
                    return self.throttle();
                }
                match self.create(request, &body) {
                    Ok(answer) => answer,
                    Err(what) => self.problem(what),
                }
            }
            Some("state") => {
                self.polls += 1;
                if self.polls <= self.script.down_for_polls {
                    self.seen.faults.push(503);
                    return (
                        503,
                        json!({"error": {"code": 503, "message": "unavailable"}}),
                        None,
                    );
                }
                if self.script.fail_first_poll && !self.seen.faults.contains(&500) {
                    self.seen.faults.push(500);
                    return (
                        500,
                        json!({"error": {"code": 500, "message": "internal"}}),
                        None,
                    );
                }
                let delay = match self.script.slow_poll {
                    Some((n, delay)) if n == self.polls => {
                        self.seen.faults.push(0);
                        Some(delay)
                    }
                    _ => None,
                };
                match self.state_of(request, &body) {
                    Ok((status, value)) => (status, value, delay),
                    Err(what) => self.problem(what),
                }
            }
            Some("cancel") => match self.cancel(request, &body) {
                Ok(answer) => answer,
                Err(what) => self.problem(what),
            },
            _ => self.problem(format!(
                "{} {}: not an endpoint of the API",
                request.method, request.path
            )),
        }
    }

    fn throttle(&mut self) -> Answer {
        if self.api == Api::SageMaker {
            self.seen.faults.push(400);
            return (
                400,
                json!({"__type": "ThrottlingException", "message": "Rate exceeded"}),
                None,
            );
        }
        self.seen.faults.push(429);
        (
            429,
            json!({"error": {"code": 429, "message": "quota"}}),
            None,
        )
    }

    /// What the request asks for: create, state or cancel.
    fn action(&self, request: &Request) -> Option<String> {
        let m = request.method.as_str();
        let p = request.path.as_str();
        let action = match self.api {
            Api::Vertex => {
                let jobs = p.starts_with("/v1/projects/") && p.contains("/customJobs");
                match m {
                    "POST" if jobs && p.ends_with("/customJobs") => "create",
                    "GET" if jobs => "state",
                    "POST" if jobs && p.ends_with(":cancel") => "cancel",
                    _ => return None,
                }
            }
            Api::Kubernetes => {
                let jobs = p.starts_with("/apis/batch/v1/namespaces/") && p.contains("/jobs");
                match m {
                    "POST" if jobs && p.ends_with("/jobs") => "create",
                    "GET" if jobs => "state",
                    "DELETE" if jobs => "cancel",
                    _ => return None,
                }
            }
            Api::SageMaker => match (
                m,
                p,
                request.headers.get("x-amz-target").map(String::as_str),
            ) {
                ("POST", "/", Some("SageMaker.CreateTrainingJob")) => "create",
                ("POST", "/", Some("SageMaker.DescribeTrainingJob")) => "state",
                ("POST", "/", Some("SageMaker.StopTrainingJob")) => "cancel",
                _ => return None,
            },
        };
        Some(action.to_string())
    }

    fn check_auth(&self, request: &Request) -> Result<(), String> {
        let authorization = request
            .headers
            .get("authorization")
            .ok_or("no Authorization header")?;
        match self.api {
            Api::Vertex | Api::Kubernetes => {
                if *authorization != format!("Bearer {}", self.script.credential) {
                    return Err("the bearer token is not the one issued".into());
                }
            }
            Api::SageMaker => {
                let prefix = format!("AWS4-HMAC-SHA256 Credential={}/", self.script.credential);
                let scope_ok = authorization.contains("/sagemaker/aws4_request");
                let signed = authorization.contains("SignedHeaders=")
                    && authorization.contains("x-amz-date")
                    && authorization.contains("x-amz-target");
                let signature = authorization
                    .split("Signature=")
                    .nth(1)
                    .is_some_and(|s| s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit()));
                if !(authorization.starts_with(&prefix) && scope_ok && signed && signature) {
                    return Err(format!(
                        "not a SigV4 Authorization for sagemaker: {}",
                        authorization.split(',').next().unwrap_or_default()
                    ));
                }
                if !request.headers.contains_key("x-amz-date") {
                    return Err("no X-Amz-Date".into());
                }
                if request.headers.get("content-type").map(String::as_str)
                    != Some("application/x-amz-json-1.1")
                {
                    return Err("Content-Type is not application/x-amz-json-1.1".into());
                }
                if let Some((secret, session)) = &self.script.aws_secret
                    && sigv4(request, &self.script.credential, secret, session)? != *authorization
                {
                    return Err("the SigV4 signature does not match the request".into());
                }
            }
        }
        Ok(())
    }

    /// Vertex's token endpoint: checks the signed JWT and issues the token.
    fn token(&mut self, request: &Request) -> Answer {
        let form: HashMap<String, String> = url_form(&request.body);
        if form.get("grant_type").map(String::as_str)
            != Some("urn:ietf:params:oauth:grant-type:jwt-bearer")
        {
            return self.problem("token: wrong grant_type".into());
        }
        let Some(assertion) = form.get("assertion") else {
            return self.problem("token: no assertion".into());
        };
        let key = self.script.jwt_public_key.clone().unwrap_or_default();
        let key = jsonwebtoken::DecodingKey::from_rsa_pem(key.as_bytes()).unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
        validation.set_audience(&[format!("{}/token", self.base)]);
        match jsonwebtoken::decode::<Value>(assertion, &key, &validation) {
            Ok(data)
                if data.claims["scope"] == "https://www.googleapis.com/auth/cloud-platform"
                    && data.claims["iss"]
                        .as_str()
                        .is_some_and(|i| i.ends_with(".iam.gserviceaccount.com")) =>
            {
                self.seen.tokens_issued += 1;
                (
                    200,
                    json!({"access_token": self.script.credential, "expires_in": 3600, "token_type": "Bearer"}),
                    None,
                )
            }
            Ok(data) => self.problem(format!("token: wrong claims {}", data.claims)),
            Err(e) => self.problem(format!("token: the JWT does not verify: {e}")),
        }
    }

    fn create(&mut self, request: &Request, body: &Value) -> Result<Answer, String> {
        let (handle, command, env, answer, location) = match self.api {
            Api::Vertex => {
                let pool = &body["jobSpec"]["workerPoolSpecs"][0];
                let container = &pool["containerSpec"];
                require(body, &["displayName"])?;
                require(pool, &["machineSpec", "replicaCount"])?;
                require(&pool["machineSpec"], &["machineType"])?;
                require(container, &["imageUri", "command", "args", "env"])?;
                if let Some(timeout) = body["jobSpec"]["scheduling"]["timeout"].as_str()
                    && timeout
                        .strip_suffix('s')
                        .is_none_or(|secs| secs.parse::<u64>().is_err())
                {
                    return Err(format!("scheduling.timeout '{timeout}' is not a Duration"));
                }
                let mut command = strings(&container["command"])?;
                command.extend(strings(&container["args"])?);
                let mut env = name_values(&container["env"])?;
                let base = &body["jobSpec"]["baseOutputDirectory"];
                let location = match base["outputUriPrefix"].as_str() {
                    Some(prefix) if prefix.starts_with("gs://") => {
                        // As Vertex does: the job's AIP_MODEL_DIR under its base directory.
                        env.push(("AIP_MODEL_DIR".into(), format!("{prefix}/model/")));
                        Some(format!("{prefix}/model"))
                    }
                    None if base.is_null() => None,
                    _ => {
                        return Err(format!(
                            "baseOutputDirectory {base} is not a GcsDestination"
                        ));
                    }
                };
                let name = format!(
                    "{}/{}",
                    request.path.trim_start_matches("/v1/"),
                    self.jobs.len() + 1
                );
                let answer = json!({"name": name, "state": "JOB_STATE_QUEUED"});
                (name, command, env, answer, location)
            }
            Api::Kubernetes => {
                require(body, &["apiVersion", "kind", "metadata", "spec"])?;
                let spec = &body["spec"];
                if body["apiVersion"] != "batch/v1" || body["kind"] != "Job" {
                    return Err("not a batch/v1 Job".into());
                }
                if spec["backoffLimit"] != 0 {
                    return Err("backoffLimit is not 0".into());
                }
                require(
                    spec,
                    &["ttlSecondsAfterFinished", "podFailurePolicy", "template"],
                )?;
                let pod = &spec["template"]["spec"];
                if pod["restartPolicy"] != "Never" {
                    return Err("restartPolicy is not Never".into());
                }
                let container = &pod["containers"][0];
                require(container, &["name", "image", "command", "env", "resources"])?;
                let namespace = request
                    .path
                    .split('/')
                    .nth(5)
                    .unwrap_or_default()
                    .to_string();
                let name = body["metadata"]["name"]
                    .as_str()
                    .ok_or("no metadata.name")?;
                let answer = body.clone();
                let env = self.resolve_env(&container["env"])?;
                let location = claim_folder(pod, container, &env)?;
                (
                    format!("{namespace}/{name}"),
                    strings(&container["command"])?,
                    env,
                    answer,
                    location,
                )
            }
            Api::SageMaker => {
                require(
                    body,
                    &[
                        "TrainingJobName",
                        "AlgorithmSpecification",
                        "HyperParameters",
                        "ResourceConfig",
                        "StoppingCondition",
                        "RoleArn",
                        "OutputDataConfig",
                        "Environment",
                    ],
                )?;
                let algorithm = &body["AlgorithmSpecification"];
                require(
                    algorithm,
                    &["TrainingImage", "TrainingInputMode", "ContainerEntrypoint"],
                )?;
                require(
                    &body["ResourceConfig"],
                    &["InstanceType", "InstanceCount", "VolumeSizeInGB"],
                )?;
                require(&body["StoppingCondition"], &["MaxRuntimeInSeconds"])?;
                require(&body["OutputDataConfig"], &["S3OutputPath"])?;
                if !body["HyperParameters"]
                    .as_object()
                    .is_some_and(|h| !h.is_empty() && h.values().all(Value::is_string))
                {
                    return Err("HyperParameters is not a map of strings".into());
                }
                let mut command = strings(&algorithm["ContainerEntrypoint"])?;
                command.extend(strings(&algorithm["ContainerArguments"]).unwrap_or_default());
                let env: Vec<(String, String)> = body["Environment"]
                    .as_object()
                    .ok_or("Environment is not a map")?
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                let name = body["TrainingJobName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let answer = json!({"TrainingJobArn": format!("arn:aws:sagemaker:eu-west-1:123456789012:training-job/{name}")});
                let output = body["OutputDataConfig"]["S3OutputPath"]
                    .as_str()
                    .unwrap_or_default()
                    .trim_end_matches('/');
                let location = Some(format!("{output}/{name}/output/model.tar.gz"));
                (name, command, env, answer, location)
            }
        };
        if command.first().map(String::as_str) != Some("hptune")
            || command.get(1).map(String::as_str) != Some("relay")
        {
            return Err(format!(
                "the container does not run hptune relay: {command:?}"
            ));
        }
        let flag = |name: &str| {
            command
                .iter()
                .position(|a| a == name)
                .and_then(|i| command.get(i + 1))
                .and_then(|v| v.parse::<u64>().ok())
        };
        let (Some(trial), Some(attempt)) = (flag("--trial"), flag("--attempt")) else {
            return Err("the relay has no --trial and --attempt".into());
        };
        if !env
            .iter()
            .any(|(k, v)| k == "HPTUNE_STORAGE" && v.starts_with("postgres"))
        {
            return Err("the job's environment has no HPTUNE_STORAGE".into());
        }
        let spot = spot_fields(self.api, body)?;
        // The folders the relay is told of, as the fake's folders the container would see.
        let root = self.workdir.join("storage");
        let mut command = command;
        let mut checkpoints = None;
        for i in 1..command.len() {
            if ["--checkpoint-dir", "--resume-from"].contains(&command[i - 1].as_str()) {
                let folder = container_folder(self.api, body, &root, &command[i]);
                if command[i - 1] == "--checkpoint-dir" {
                    checkpoints = Some(folder.clone());
                }
                command[i] = folder.display().to_string();
            }
        }
        self.seen.spot.push((trial, attempt as u32, spot));
        self.seen.created.push((trial, attempt as u32));
        let variable = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        self.seen.models.push(SeenModel {
            trial,
            attempt: attempt as u32,
            location,
            worker_env: (variable("HPTUNE_OUTPUT_DIR"), variable("AIP_MODEL_DIR")),
        });
        self.jobs.push(Job {
            handle,
            trial,
            attempt: attempt as u32,
            command,
            env,
            checkpoints,
            process: None,
            polls: 0,
            end: None,
        });
        Ok((
            if self.api == Api::Kubernetes {
                201
            } else {
                200
            },
            answer,
            None,
        ))
    }

    /// A Kubernetes container's env, each `valueFrom.secretKeyRef` replaced by the Secret's
    /// value, as the kubelet does.
    fn resolve_env(&self, value: &Value) -> Result<Vec<(String, String)>, String> {
        let mut plain = Vec::new();
        for entry in value.as_array().ok_or("env is not a list")? {
            let reference = &entry["valueFrom"]["secretKeyRef"];
            if reference.is_null() {
                plain.push(entry.clone());
                continue;
            }
            let (Some(name), Some(key)) = (reference["name"].as_str(), reference["key"].as_str())
            else {
                return Err(format!("secretKeyRef {reference} has no name and key"));
            };
            let secret = self
                .script
                .secrets
                .get(&(name.to_string(), key.to_string()))
                .ok_or_else(|| format!("no Secret {name} with key {key}"))?;
            plain.push(json!({"name": entry["name"], "value": secret}));
        }
        name_values(&Value::Array(plain))
    }

    fn find(&mut self, request: &Request, body: &Value) -> Result<usize, String> {
        let handle = match self.api {
            Api::Vertex => request
                .path
                .trim_start_matches("/v1/")
                .trim_end_matches(":cancel")
                .to_string(),
            Api::Kubernetes => {
                let parts: Vec<&str> = request.path.split('/').collect();
                format!(
                    "{}/{}",
                    parts.get(5).unwrap_or(&""),
                    parts.get(7).unwrap_or(&"")
                )
            }
            Api::SageMaker => body["TrainingJobName"]
                .as_str()
                .ok_or("no TrainingJobName")?
                .to_string(),
        };
        self.jobs
            .iter()
            .position(|j| j.handle == handle)
            .ok_or_else(|| format!("no job {handle}"))
    }

    fn state_of(&mut self, request: &Request, body: &Value) -> Result<(u16, Value), String> {
        let i = self.find(request, body)?;
        let workdir = self.workdir.clone();
        let extra = self.script.trial_env.clone();
        let preempt = self.script.preempt.clone();
        let after_checkpoint = self.script.preempt_after_checkpoint;
        let job = &mut self.jobs[i];
        let checkpointed = job.checkpoints.as_deref().is_some_and(has_checkpoint);
        job.polls += 1;
        if job.process.is_none() && job.end.is_none() && job.polls > 1 {
            job.process = Some(launch(job, &workdir, extra.get(&job.trial)));
        }
        if job.end.is_none()
            && let Some(child) = &mut job.process
        {
            if job.attempt == 1
                && preempt.contains(&job.trial)
                && job.polls > 2
                && (checkpointed || !after_checkpoint)
            {
                terminate(child);
                job.end = Some(End::Preempted);
            } else if let Ok(Some(status)) = child.try_wait() {
                job.end = Some(End::Exited(status.code().unwrap_or(-1)));
            }
        }
        if self.api == Api::Kubernetes
            && self.script.ttl_passed
            && matches!(job.end, Some(End::Exited(_)))
        {
            return Ok((
                404,
                json!({"kind": "Status", "reason": "NotFound", "code": 404}),
            ));
        }
        let running = job.process.is_some();
        Ok(match self.api {
            Api::Vertex => {
                let (state, error) = match &job.end {
                    None if running => ("JOB_STATE_RUNNING", Value::Null),
                    None => ("JOB_STATE_QUEUED", Value::Null),
                    Some(End::Exited(0)) => ("JOB_STATE_SUCCEEDED", Value::Null),
                    Some(End::Exited(code)) => (
                        "JOB_STATE_FAILED",
                        json!({"code": 3, "message": format!("The replica workerpool0-0 exited with a non-zero status of {code}.")}),
                    ),
                    Some(End::Preempted) => (
                        "JOB_STATE_FAILED",
                        json!({"code": 14, "message": "The replica workerpool0-0 was preempted."}),
                    ),
                    Some(End::Cancelled) => ("JOB_STATE_CANCELLED", Value::Null),
                };
                let mut answer = json!({"name": job.handle, "state": state});
                if !error.is_null() {
                    answer["error"] = error;
                }
                (200, answer)
            }
            Api::Kubernetes => {
                let failed = |message: String| json!({"status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": message}]}});
                let pod = format!("{}-x1", job.handle);
                match &job.end {
                    None if running => (200, json!({"status": {"active": 1}})),
                    None => (200, json!({"status": {}})),
                    Some(End::Exited(0)) => (
                        200,
                        json!({"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}),
                    ),
                    Some(End::Exited(code)) => (
                        200,
                        failed(format!(
                            "Container trial for pod {pod} failed with exit code {code} matching FailJob rule at index 1"
                        )),
                    ),
                    Some(End::Preempted) => (
                        200,
                        failed(format!(
                            "Pod {pod} has condition DisruptionTarget matching FailJob rule at index 0"
                        )),
                    ),
                    Some(End::Cancelled) => (
                        404,
                        json!({"kind": "Status", "reason": "NotFound", "code": 404}),
                    ),
                }
            }
            Api::SageMaker => {
                let (status, reason) = match &job.end {
                    None => ("InProgress", String::new()),
                    Some(End::Exited(0)) => ("Completed", String::new()),
                    Some(End::Exited(code)) => (
                        "Failed",
                        format!("AlgorithmError: the container exited with code {code}"),
                    ),
                    Some(End::Preempted) => (
                        "Failed",
                        "CapacityError: Spot instance interruption".to_string(),
                    ),
                    Some(End::Cancelled) => ("Stopped", String::new()),
                };
                let secondary = if running { "Training" } else { "Starting" };
                (
                    200,
                    json!({"TrainingJobName": job.handle, "TrainingJobStatus": status, "SecondaryStatus": secondary, "FailureReason": reason}),
                )
            }
        })
    }

    fn cancel(&mut self, request: &Request, body: &Value) -> Result<Answer, String> {
        if self.api == Api::Kubernetes && request.query != "propagationPolicy=Background" {
            return Err(format!(
                "DELETE without propagationPolicy=Background: '{}'",
                request.query
            ));
        }
        let i = self.find(request, body)?;
        let job = &mut self.jobs[i];
        if let Some(child) = &mut job.process {
            terminate(child);
        }
        if job.end.is_none() {
            job.end = Some(End::Cancelled);
        }
        self.seen.cancelled.push((job.trial, job.attempt));
        Ok((200, json!({}), None))
    }
}

/// The Authorization header a SageMaker request signed with these credentials must carry,
/// computed from what arrived: method, host, the signed headers, the body, X-Amz-Date.
fn sigv4(request: &Request, id: &str, secret: &str, session: &str) -> Result<String, String> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .map(String::as_str)
            .ok_or(format!("no {name} header"))
    };
    let date = chrono::NaiveDateTime::parse_from_str(header("x-amz-date")?, "%Y%m%dT%H%M%SZ")
        .map_err(|e| format!("X-Amz-Date: {e}"))?;
    let time = std::time::UNIX_EPOCH + Duration::from_secs(date.and_utc().timestamp() as u64);
    let identity =
        aws_credential_types::Credentials::new(id, secret, Some(session.to_string()), None, "fake")
            .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("eu-west-1")
        .name("sagemaker")
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let url = format!("http://{}{}", header("host")?, request.path);
    let signed = [
        ("content-type", header("content-type")?),
        ("x-amz-target", header("x-amz-target")?),
    ];
    let signable = SignableRequest::new(
        &request.method,
        &url,
        signed.into_iter(),
        SignableBody::Bytes(&request.body),
    )
    .map_err(|e| e.to_string())?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| e.to_string())?
        .into_parts();
    instructions
        .headers()
        .find(|(name, _)| name.eq_ignore_ascii_case("authorization"))
        .map(|(_, value)| value.to_string())
        .ok_or("no signature".into())
}

/// Runs the job's container command here: `hptune` is the binary under test.
fn launch(job: &Job, workdir: &std::path::Path, extra: Option<&Vec<(String, String)>>) -> Child {
    let dir = workdir.join(format!("job-{}-{}", job.trial, job.attempt));
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::fs::File::create(dir.join("stdout")).unwrap();
    let err = std::fs::File::create(dir.join("stderr")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_hptune"))
        .args(&job.command[1..])
        .envs(job.env.iter().cloned())
        .envs(extra.into_iter().flatten().cloned())
        .env_remove("RUST_LOG")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap()
}

/// SIGTERM, as an engine stops a container, and waits for it.
fn terminate(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// Kubernetes: `pvc://<claim>/<folder>` when the worker's `HPTUNE_OUTPUT_DIR` is a folder
/// of a PersistentVolumeClaim mounted in its container; an error when a mount names no
/// volume of the pod or a volume is no claim.
fn claim_folder(
    pod: &Value,
    container: &Value,
    env: &[(String, String)],
) -> Result<Option<String>, String> {
    let Some(mounts) = container["volumeMounts"].as_array() else {
        return Ok(None);
    };
    let volumes = pod["volumes"]
        .as_array()
        .ok_or("volumeMounts without volumes")?;
    let output = env.iter().find(|(k, _)| k == "HPTUNE_OUTPUT_DIR");
    for mount in mounts {
        require(mount, &["name", "mountPath"])?;
        let volume = volumes
            .iter()
            .find(|v| v["name"] == mount["name"])
            .ok_or_else(|| format!("volumeMount {mount} names no volume of the pod"))?;
        let claim = volume["persistentVolumeClaim"]["claimName"]
            .as_str()
            .ok_or_else(|| format!("volume {volume} is not a persistentVolumeClaim"))?;
        let path = mount["mountPath"].as_str().unwrap_or_default();
        if let Some((_, dir)) = output
            && let Some(folder) = dir.strip_prefix(path).and_then(|f| f.strip_prefix('/'))
        {
            return Ok(Some(format!("pvc://{claim}/{folder}")));
        }
    }
    Ok(None)
}

fn require(value: &Value, fields: &[&str]) -> Result<(), String> {
    for field in fields {
        if value.get(field).is_none_or(Value::is_null) {
            return Err(format!("missing required field {field} in {value}"));
        }
    }
    Ok(())
}

fn strings(value: &Value) -> Result<Vec<String>, String> {
    value
        .as_array()
        .ok_or_else(|| format!("{value} is not a list"))?
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{v} is not a string"))
        })
        .collect()
}

fn name_values(value: &Value) -> Result<Vec<(String, String)>, String> {
    value
        .as_array()
        .ok_or("env is not a list")?
        .iter()
        .map(|e| match (e["name"].as_str(), e["value"].as_str()) {
            (Some(n), Some(v)) => Ok((n.to_string(), v.to_string())),
            _ => Err(format!("env entry {e} is not {{name, value}}")),
        })
        .collect()
}

fn url_form(body: &[u8]) -> HashMap<String, String> {
    let decode = |s: &str| {
        let s = s.replace('+', " ");
        let mut out = Vec::new();
        let bytes = s.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%'
                && i + 2 < bytes.len()
                && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
            {
                out.push(b);
                i += 3;
                continue;
            }
            out.push(bytes[i]);
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// A throwaway RSA key pair made for one test (private PKCS#8 PEM, public SPKI PEM).
pub fn throwaway_rsa_key(dir: &std::path::Path) -> (String, String) {
    let private = dir.join("test-only-key.pem");
    let public = dir.join("test-only-key.pub.pem");
    let ok = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&private)
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
        && Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(&private)
            .arg("-out")
            .arg(&public)
            .status()
            .unwrap()
            .success();
    assert!(ok, "openssl makes a test key");
    (
        std::fs::read_to_string(private).unwrap(),
        std::fs::read_to_string(public).unwrap(),
    )
}

/// Writes `text` to `path` and returns the path.
pub fn write(path: PathBuf, text: &str) -> PathBuf {
    std::fs::File::create(&path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    path
}
