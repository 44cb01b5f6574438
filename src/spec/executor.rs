//! The `trial.executor` block: which engine runs the workers, and that engine's settings.
//! Each engine's fields are one struct of `raw.rs`; a field of another engine is refused by
//! name.

use std::time::Duration;

use super::raw::{
    Number, RawArtifactsVolume, RawGpus, RawKind, RawKubernetes, RawRemote, RawSageMaker,
    RawSecretRef, RawSlurm, RawToleration, RawVertex,
};
use super::trial::is_fraction;
use super::{Checker, block};
use crate::study::{
    Accelerator, ArtifactsVolume, ExecutorKind, ExecutorSpec, KubernetesSpec, RemoteSettings,
    Resources, SAGEMAKER_DEFAULT_RUNTIME, SageMakerSpec, SecretRef, Toleration, VertexSpec,
};

/// How often a remote job's state is asked for, when the file does not say.
pub(super) const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(10);
/// The limit of one request to an engine's API, when the file does not say.
pub(super) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the jobs' service (an engine's API, Slurm's controller) may fail to answer before
/// a job is given up, when the file does not say: longer than a restart or a failover of
/// Slurm's controller (`SlurmctldTimeout`, 2 minutes by default).
pub(super) const DEFAULT_OUTAGE_LIMIT: Duration = Duration::from_secs(10 * 60);
/// How long Kubernetes keeps a finished Job, when the file does not say.
pub(super) const DEFAULT_TTL: Duration = Duration::from_secs(3600);

/// Where the block stands in the study file.
const PATH: [&str; 2] = ["trial", "executor"];

impl Checker<'_> {
    /// Checks the executor block (absent: local); `timeout` is the trial's, the default
    /// time limit of a Slurm job.
    pub(super) fn executor(
        &mut self,
        raw: Option<&RawKind>,
        timeout: Option<Duration>,
    ) -> Option<ExecutorSpec> {
        let Some(raw) = raw else {
            return Some(ExecutorSpec::Local);
        };
        let Some(kind) = ExecutorKind::parse(&raw.kind) else {
            self.report(
                "trial.executor.kind",
                format!(
                    "'{}' is not an executor: use {}",
                    raw.kind,
                    ExecutorKind::NAMES
                ),
            );
            return None;
        };
        let every_kind: Vec<_> = ExecutorKind::ALL.into_iter().flat_map(fields_of).collect();
        let mut own = fields_of(kind);
        // A cloud engine's block may hold `gpus` only to be told where its GPUs are asked for.
        let gpus_ok = shares_instead(kind).is_none() || {
            own.push("gpus");
            self.cloud_gpus(kind)
        };
        let fields_ok = self.variant_fields(
            &PATH,
            "kind",
            &own,
            &every_kind,
            &format!("the {} executor", kind.as_str()),
        );
        let spec = match kind {
            ExecutorKind::Local => Some(ExecutorSpec::Local),
            ExecutorKind::Vertex => {
                let remote = self.remote_settings(kind);
                let raw = self.block(&PATH)?;
                self.vertex(&raw, remote).map(ExecutorSpec::Vertex)
            }
            ExecutorKind::Kubernetes => {
                let remote = self.remote_settings(kind);
                let raw = self.block(&PATH)?;
                self.kubernetes(&raw, remote).map(ExecutorSpec::Kubernetes)
            }
            ExecutorKind::SageMaker => {
                let remote = self.remote_settings(kind);
                let raw = self.block(&PATH)?;
                self.sagemaker(&raw, remote, timeout)
                    .map(ExecutorSpec::SageMaker)
            }
            ExecutorKind::Slurm => {
                let raw = self.block(&PATH)?;
                self.slurm(&raw, timeout).map(ExecutorSpec::Slurm)
            }
        };
        spec.filter(|_| fields_ok && gpus_ok)
    }

    /// A field the engine cannot do without.
    fn required(
        &mut self,
        kind: ExecutorKind,
        name: &str,
        value: &Option<String>,
    ) -> Option<String> {
        match value.as_deref().map(str::trim) {
            Some(text) if !text.is_empty() => Some(text.to_string()),
            Some(_) => {
                self.report(format!("trial.executor.{name}"), "must not be empty");
                None
            }
            None => {
                self.report(
                    "trial.executor",
                    format!("the {} executor needs `{name}`", kind.as_str()),
                );
                None
            }
        }
    }

    /// Refuses `gpus`, the Slurm executor's field, in a cloud engine's block: it names where
    /// the engine asks for GPUs and, for a share of one, what the engine offers instead.
    fn cloud_gpus(&mut self, kind: ExecutorKind) -> bool {
        let Some(RawGpus { gpus: Some(number) }) = self.block(&PATH) else {
            return true;
        };
        let message = match shares_instead(kind) {
            Some(instead) if is_fraction(number) => format!(
                "{number} is a share of a GPU, which a {} job cannot ask for: {instead}",
                kind.as_str()
            ),
            _ => format!(
                "is the Slurm executor's; a {} job asks for GPUs in trial.executor: {}",
                kind.as_str(),
                gpu_field(kind).unwrap_or_default()
            ),
        };
        self.report("trial.executor.gpus", message);
        false
    }

    /// A count of a cloud engine's GPUs (`field`), from `min` (`default` when absent): a share of one is refused,
    /// naming what the engine offers instead.
    fn gpu_count(
        &mut self,
        kind: ExecutorKind,
        field: &str,
        value: Option<Number>,
        default: u32,
        min: i64,
    ) -> Option<u32> {
        let whole = match value {
            Some(number) if is_fraction(number) => {
                self.report(
                    field,
                    format!(
                        "{number} is a share of a GPU, which a {} job cannot ask for: {}",
                        kind.as_str(),
                        shares_instead(kind).unwrap_or_default()
                    ),
                );
                return None;
            }
            // Past i64 either way: as far out of range as an i64 goes.
            Some(number) => Some(number.as_i64().unwrap_or(if number.as_f64() < 0.0 {
                i64::MIN
            } else {
                i64::MAX
            })),
            None => None,
        };
        self.count(field, whole, default, min)
    }

    fn count(&mut self, field: &str, value: Option<i64>, default: u32, min: i64) -> Option<u32> {
        let value = self.at_least(field, value.unwrap_or(i64::from(default)), min)?;
        Some(value.min(i64::from(u32::MAX)) as u32)
    }

    fn remote_settings(&mut self, kind: ExecutorKind) -> Option<RemoteSettings> {
        let raw: RawRemote = self.block(&PATH)?;
        let image = self.required(kind, "image", &raw.image);
        if let Some(endpoint) = &raw.endpoint
            && !(endpoint.starts_with("https://") || endpoint.starts_with("http://"))
        {
            self.report(
                "trial.executor.endpoint",
                format!("'{endpoint}' is not an http:// or https:// URL"),
            );
        }
        let poll = self.duration("trial.executor.poll_interval", raw.poll_interval.as_deref());
        let timeout = self.duration(
            "trial.executor.request_timeout",
            raw.request_timeout.as_deref(),
        );
        let outage_limit =
            self.duration("trial.executor.outage_limit", raw.outage_limit.as_deref());
        Some(RemoteSettings {
            image: image?,
            endpoint: raw
                .endpoint
                .clone()
                .map(|e| e.trim_end_matches('/').to_string()),
            poll_interval: poll?.unwrap_or(DEFAULT_POLL_INTERVAL),
            request_timeout: timeout?.unwrap_or(DEFAULT_REQUEST_TIMEOUT),
            outage_limit: outage_limit?.unwrap_or(DEFAULT_OUTAGE_LIMIT),
        })
    }

    fn vertex(&mut self, raw: &RawVertex, remote: Option<RemoteSettings>) -> Option<VertexSpec> {
        let kind = ExecutorKind::Vertex;
        let project = self.required(kind, "project", &raw.project);
        let region = self.required(kind, "region", &raw.region);
        let machine_type = self.required(kind, "machine_type", &raw.machine_type);
        let accelerator = match &raw.accelerator {
            None => Some(None),
            Some(a) => self
                .gpu_count(kind, "trial.executor.accelerator.count", a.count, 1, 1)
                .map(|count| {
                    Some(Accelerator {
                        kind: a.kind.clone(),
                        count,
                    })
                }),
        };
        let base_output_dir = match &raw.base_output_dir {
            None => Some(None),
            Some(url) => self
                .bucket_url("trial.executor.base_output_dir", url, Bucket::Gcs)
                .map(Some),
        };
        Some(VertexSpec {
            remote: remote?,
            project: project?,
            region: region?,
            machine_type: machine_type?,
            accelerator: accelerator?,
            service_account: raw.service_account.clone(),
            base_output_dir: base_output_dir?,
            spot: raw.spot.unwrap_or(false),
        })
    }

    /// A bucket's URL, `<scheme>://bucket[/prefix]`, without a trailing `/`.
    fn bucket_url(&mut self, field: &str, url: &str, bucket: Bucket) -> Option<String> {
        let (service, scheme) = match bucket {
            Bucket::Gcs => ("a Cloud Storage", "gs"),
            Bucket::S3 => ("an S3", "s3"),
        };
        let trimmed = url.trim().trim_end_matches('/');
        match trimmed.strip_prefix(&format!("{scheme}://")) {
            Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Some(trimmed.to_string()),
            _ => {
                self.report(
                    field,
                    format!("must be {service} URL ({scheme}://bucket/prefix), not '{url}'"),
                );
                None
            }
        }
    }

    fn kubernetes(
        &mut self,
        raw: &RawKubernetes,
        remote: Option<RemoteSettings>,
    ) -> Option<KubernetesSpec> {
        let resources = match &raw.resources {
            None => Some(Resources::default()),
            Some(r) => self
                .gpu_count(
                    ExecutorKind::Kubernetes,
                    "trial.executor.resources.gpu",
                    r.gpu,
                    0,
                    0,
                )
                .map(|gpu| Resources {
                    cpu: r.cpu.clone(),
                    memory: r.memory.clone(),
                    gpu,
                }),
        };
        let ttl = self.duration("trial.executor.ttl", raw.ttl.as_deref());
        let storage_secret = match &raw.storage_secret {
            None => Some(None),
            Some(secret) => self.secret_ref(secret).map(Some),
        };
        let artifacts_volume = match &raw.artifacts_volume {
            None => Some(None),
            Some(volume) => self.artifacts_volume(volume).map(Some),
        };
        let tolerations: Option<Vec<Toleration>> = raw
            .tolerations
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| self.toleration(i, t))
            .collect::<Vec<_>>()
            .into_iter()
            .collect();
        Some(KubernetesSpec {
            remote: remote?,
            namespace: raw.namespace.clone(),
            resources: resources?,
            node_selector: raw.node_selector.clone().unwrap_or_default(),
            service_account: raw.service_account.clone(),
            ttl: ttl?.unwrap_or(DEFAULT_TTL),
            storage_secret: storage_secret?,
            artifacts_volume: artifacts_volume?,
            tolerations: tolerations?,
        })
    }

    /// Toleration `i` of the pod, checked as the API server would: `Exists` or `Equal`
    /// (the default), no value with `Exists`, a key unless `Exists`, a known effect, and
    /// `tolerationSeconds` only with `NoExecute`.
    fn toleration(&mut self, i: usize, raw: &RawToleration) -> Option<Toleration> {
        let field = format!("trial.executor.tolerations[{i}]");
        let operator = raw.operator.clone().unwrap_or_else(|| "Equal".into());
        let problem = match (operator.as_str(), &raw.key, &raw.value) {
            ("Exists", _, Some(_)) => Some("`value` must be absent with operator Exists"),
            ("Equal", None, _) => Some("needs a `key` (or operator: Exists for every taint)"),
            ("Exists" | "Equal", _, _) => None,
            _ => Some("`operator` must be Equal or Exists"),
        };
        let effect_ok = raw
            .effect
            .as_deref()
            .is_none_or(|effect| ["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect));
        let seconds_ok =
            raw.toleration_seconds.is_none() || raw.effect.as_deref() == Some("NoExecute");
        if let Some(problem) = problem {
            self.report(&field, problem);
        }
        if !effect_ok {
            self.report(
                format!("{field}.effect"),
                "must be NoSchedule, PreferNoSchedule or NoExecute",
            );
        }
        if !seconds_ok {
            self.report(
                format!("{field}.tolerationSeconds"),
                "is for effect: NoExecute only",
            );
        }
        (problem.is_none() && effect_ok && seconds_ok).then(|| Toleration {
            key: raw.key.clone(),
            operator,
            value: raw.value.clone(),
            effect: raw.effect.clone(),
            toleration_seconds: raw.toleration_seconds,
        })
    }

    /// A claim's name (a DNS subdomain) and an absolute mount path.
    fn artifacts_volume(&mut self, raw: &RawArtifactsVolume) -> Option<ArtifactsVolume> {
        let field = "trial.executor.artifacts_volume";
        let claim_ok = is_dns_subdomain(&raw.claim);
        if !claim_ok {
            self.report(
                format!("{field}.claim"),
                format!(
                    "'{}' is not a PersistentVolumeClaim's name: lower-case letters, digits, '-' and '.'",
                    raw.claim
                ),
            );
        }
        let path = raw.mount_path.trim_end_matches('/');
        let path_ok = raw.mount_path.starts_with('/') && !path.is_empty();
        if !path_ok {
            self.report(
                format!("{field}.mount_path"),
                format!("'{}' is not an absolute path other than /", raw.mount_path),
            );
        }
        (claim_ok && path_ok).then(|| ArtifactsVolume {
            claim: raw.claim.clone(),
            mount_path: path.to_string(),
        })
    }

    /// A Secret's name (a DNS subdomain) and key (letters, digits, `-`, `_`, `.`), as the API
    /// server would accept them.
    fn secret_ref(&mut self, raw: &RawSecretRef) -> Option<SecretRef> {
        let field = "trial.executor.storage_secret";
        let name_ok = is_dns_subdomain(&raw.name);
        let key_ok = !raw.key.is_empty()
            && raw.key.len() <= 253
            && raw
                .key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !name_ok {
            self.report(
                format!("{field}.name"),
                format!(
                    "'{}' is not a Secret's name: lower-case letters, digits, '-' and '.'",
                    raw.name
                ),
            );
        }
        if !key_ok {
            self.report(
                format!("{field}.key"),
                format!(
                    "'{}' is not a key of a Secret: letters, digits, '-', '_' and '.'",
                    raw.key
                ),
            );
        }
        (name_ok && key_ok).then(|| SecretRef {
            name: raw.name.clone(),
            key: raw.key.clone(),
        })
    }

    /// The SageMaker block; `timeout` is the trial's, the job's `MaxRuntimeInSeconds`, which
    /// a spot job's `max_wait` may not be shorter than.
    fn sagemaker(
        &mut self,
        raw: &RawSageMaker,
        remote: Option<RemoteSettings>,
        timeout: Option<Duration>,
    ) -> Option<SageMakerSpec> {
        let kind = ExecutorKind::SageMaker;
        let region = self.required(kind, "region", &raw.region);
        let role_arn = self.required(kind, "role_arn", &raw.role_arn);
        if role_arn.as_deref().is_some_and(|r| !r.starts_with("arn:")) {
            self.report(
                "trial.executor.role_arn",
                "must be an IAM role's ARN (arn:aws:iam::ACCOUNT:role/NAME)",
            );
        }
        let instance_type = self.required(kind, "instance_type", &raw.instance_type);
        let instance_count = self.count("trial.executor.instance_count", raw.instance_count, 1, 1);
        let volume = self.count("trial.executor.volume_size_gb", raw.volume_size_gb, 30, 1);
        let output_path = self
            .required(kind, "output_path", &raw.output_path)
            .and_then(|url| self.bucket_url("trial.executor.output_path", &url, Bucket::S3));
        let spot = self.spot_wait(raw, timeout);
        Some(SageMakerSpec {
            remote: remote?,
            region: region?,
            role_arn: role_arn.filter(|r| r.starts_with("arn:"))?,
            instance_type: instance_type?,
            instance_count: instance_count?,
            volume_size_gb: volume?,
            output_path: output_path?,
            spot: spot?,
        })
    }

    /// A SageMaker job's `MaxWaitTimeInSeconds` with `spot: true`: `max_wait`, at least the
    /// job's run time (the trial's timeout, else SageMaker's default day); twice that run
    /// time when the file does not say. `max_wait` without `spot: true` is refused.
    fn spot_wait(
        &mut self,
        raw: &RawSageMaker,
        timeout: Option<Duration>,
    ) -> Option<Option<Duration>> {
        let field = "trial.executor.max_wait";
        let max_wait = self.duration(field, raw.max_wait.as_deref())?;
        let runtime = timeout.unwrap_or(SAGEMAKER_DEFAULT_RUNTIME);
        match (raw.spot.unwrap_or(false), max_wait) {
            (false, None) => Some(None),
            (false, Some(_)) => {
                self.report(
                    field,
                    "is the time a spot job may wait for capacity: set spot: true too",
                );
                None
            }
            (true, Some(wait)) if wait < runtime => {
                self.report(
                    field,
                    format!(
                        "{} is shorter than the job's run time ({}, the trial's timeout or SageMaker's default day): SageMaker wants MaxWaitTimeInSeconds >= MaxRuntimeInSeconds",
                        humantime::format_duration(wait),
                        humantime::format_duration(runtime)
                    ),
                );
                None
            }
            (true, wait) => Some(Some(wait.unwrap_or(runtime * 2))),
        }
    }
}

/// The object stores whose URLs a study names.
#[derive(Clone, Copy)]
enum Bucket {
    /// Google Cloud Storage, `gs://`.
    Gcs,
    /// Amazon S3, `s3://`.
    S3,
}

/// Whether `name` is a DNS subdomain, as Kubernetes names Secrets and claims.
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

/// Where a job of `kind` asks for GPUs, as the study file writes it; none for local workers
/// (`trial.resources.gpus`).
pub(super) fn gpu_field(kind: ExecutorKind) -> Option<&'static str> {
    // Exhaustive: an engine added later says here where its jobs ask for GPUs.
    match kind {
        ExecutorKind::Local => None,
        ExecutorKind::Vertex => Some("accelerator: {type: NVIDIA_TESLA_T4, count: 1}"),
        ExecutorKind::Kubernetes => Some("resources: {gpu: 1}"),
        ExecutorKind::SageMaker => Some("a GPU instance_type, e.g. ml.g5.xlarge"),
        ExecutorKind::Slurm => Some("gpus: 1"),
    }
}

/// What a cloud engine offers instead of a share of a GPU (`gpus: 0.25`), which it cannot
/// schedule; none for the engines that give shares (local workers, Slurm's shards).
fn shares_instead(kind: ExecutorKind) -> Option<&'static str> {
    match kind {
        ExecutorKind::Local | ExecutorKind::Slurm => None,
        ExecutorKind::Vertex => Some(
            "Vertex AI gives a job whole accelerators; for a smaller device choose a smaller accelerator type (NVIDIA_L4, NVIDIA_TESLA_T4) or a machine_type with fewer GPUs, with accelerator.count 1",
        ),
        ExecutorKind::Kubernetes => Some(
            "Kubernetes schedules whole nvidia.com/gpu devices; to share one, have the cluster's NVIDIA device plugin time-slice its GPUs (sharing.timeSlicing replicas) or split them with MIG (strategy single), so that each resources.gpu: 1 is a share",
        ),
        ExecutorKind::SageMaker => Some(
            "SageMaker gives a job whole instances; choose an instance_type with fewer or smaller GPUs (ml.g4dn.xlarge: one T4, ml.g5.xlarge: one A10G)",
        ),
    }
}

/// The fields a kind takes besides `kind`: its engine's own and, for a cloud engine, the
/// ones every cloud engine takes.
fn fields_of(kind: ExecutorKind) -> Vec<&'static str> {
    let own = match kind {
        ExecutorKind::Local => return Vec::new(),
        ExecutorKind::Vertex => block::fields::<RawVertex>(),
        ExecutorKind::Kubernetes => block::fields::<RawKubernetes>(),
        ExecutorKind::SageMaker => block::fields::<RawSageMaker>(),
        ExecutorKind::Slurm => return block::fields::<RawSlurm>().to_vec(),
    };
    [block::fields::<RawRemote>(), own].concat()
}
