//! Where a trial's workers run: the engine, and that engine's settings.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::gpus::{MAX_SHARE, Share};

/// The engines a trial can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutorKind {
    /// Child processes of the controller.
    Local,
    /// Vertex AI CustomJobs.
    Vertex,
    /// Kubernetes `batch/v1` Jobs.
    Kubernetes,
    /// SageMaker training jobs.
    SageMaker,
    /// Slurm batch jobs.
    Slurm,
}

impl ExecutorKind {
    /// Every kind.
    pub(crate) const ALL: [ExecutorKind; 5] = [
        ExecutorKind::Local,
        ExecutorKind::Vertex,
        ExecutorKind::Kubernetes,
        ExecutorKind::SageMaker,
        ExecutorKind::Slurm,
    ];

    /// Every kind, as written in the study file.
    pub const NAMES: &'static str = "local, vertex, kubernetes, sagemaker or slurm";

    /// The kind as written in the study file.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ExecutorKind::Local => "local",
            ExecutorKind::Vertex => "vertex",
            ExecutorKind::Kubernetes => "kubernetes",
            ExecutorKind::SageMaker => "sagemaker",
            ExecutorKind::Slurm => "slurm",
        }
    }

    /// Reads a kind as written in the study file.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

/// Where trial workers run, with the engine's settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ExecutorSpec {
    /// Child processes of the controller.
    Local,
    /// One Vertex AI CustomJob per trial.
    Vertex(VertexSpec),
    /// One Kubernetes Job per trial.
    Kubernetes(KubernetesSpec),
    /// One SageMaker training job per trial.
    SageMaker(SageMakerSpec),
    /// One Slurm job per trial attempt.
    Slurm(SlurmSpec),
}

impl ExecutorSpec {
    /// The engine.
    pub(crate) fn kind(&self) -> ExecutorKind {
        match self {
            ExecutorSpec::Local => ExecutorKind::Local,
            ExecutorSpec::Vertex(_) => ExecutorKind::Vertex,
            ExecutorSpec::Kubernetes(_) => ExecutorKind::Kubernetes,
            ExecutorSpec::SageMaker(_) => ExecutorKind::SageMaker,
            ExecutorSpec::Slurm(_) => ExecutorKind::Slurm,
        }
    }
}

/// Settings every remote engine has.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RemoteSettings {
    /// The container image holding `hptune` and the worker.
    pub image: String,
    /// The API's base URL, when not the engine's usual one (a proxy, a test's fake).
    pub endpoint: Option<String>,
    /// How often the job's state and its measurements are read.
    pub poll_interval: Duration,
    /// The limit of one request to the engine's API.
    pub request_timeout: Duration,
    /// How long the engine's API may fail to answer (after each request's own tries) before
    /// a job is given up.
    pub outage_limit: Duration,
}

/// A Vertex AI CustomJob's settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VertexSpec {
    /// Image, endpoint, polling.
    pub remote: RemoteSettings,
    /// The Google Cloud project.
    pub project: String,
    /// The region (`us-central1`).
    pub region: String,
    /// The machine (`n1-standard-8`).
    pub machine_type: String,
    /// GPUs or TPUs attached to the machine.
    pub accelerator: Option<Accelerator>,
    /// The service account the job runs as.
    pub service_account: Option<String>,
    /// The Cloud Storage folder (`gs://bucket/prefix`) under which each attempt's job gets
    /// its `baseOutputDirectory`, `<base>/<study>/trial-<n>[-attempt-<k>]`, its model going
    /// to `model/` in it (Vertex's `AIP_MODEL_DIR`) and its checkpoints to
    /// `checkpoints/`; `None`: the jobs have none.
    pub base_output_dir: Option<String>,
    /// Run on Spot VMs (`scheduling.strategy: SPOT`): a preempted job's trial is retried,
    /// resuming from its checkpoints.
    pub spot: bool,
}

/// Accelerators of a Vertex AI machine.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Accelerator {
    /// Vertex's name of the accelerator (`NVIDIA_TESLA_T4`).
    pub kind: String,
    /// How many.
    pub count: u32,
}

/// A Kubernetes Job's settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KubernetesSpec {
    /// Image, endpoint (the API server, instead of the kubeconfig's), polling.
    pub remote: RemoteSettings,
    /// The namespace; else the kubeconfig context's, else `default`.
    pub namespace: Option<String>,
    /// What the trial's container asks for.
    pub resources: Resources,
    /// Labels a node must have to run the trial.
    pub node_selector: BTreeMap<String, String>,
    /// The service account of the trial's pod.
    pub service_account: Option<String>,
    /// How long a finished Job is kept (`ttlSecondsAfterFinished`).
    pub ttl: Duration,
    /// The Secret whose key holds the storage URL the job's `HPTUNE_STORAGE` takes
    /// (`secretKeyRef`); without it, the controller's URL is written in the Job.
    pub storage_secret: Option<SecretRef>,
    /// The volume the trials save their models (and checkpoints) to; `None`: they stay in
    /// the pods.
    pub artifacts_volume: Option<ArtifactsVolume>,
    /// The taints of nodes the trial's pod may run on (a spot node pool's), as the pod's
    /// `tolerations`.
    pub tolerations: Vec<Toleration>,
}

/// A toleration of the trial's pod: it may run on nodes with a matching taint.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Toleration {
    /// The taint's key; `None` with `Exists`: every taint.
    pub key: Option<String>,
    /// `Equal` (the key's value is `value`) or `Exists` (any value).
    pub operator: String,
    /// The taint's value, with `Equal`.
    pub value: Option<String>,
    /// The taint's effect it tolerates (`NoSchedule`, `PreferNoSchedule`, `NoExecute`);
    /// `None`: every effect.
    pub effect: Option<String>,
    /// With `NoExecute`: how long the pod stays once the taint appears; `None`: for ever.
    pub toleration_seconds: Option<i64>,
}

/// A PersistentVolumeClaim mounted in each trial's pod for its model: each attempt saves
/// into `<mount_path>/<study>/trial-<n>[-attempt-<k>]`, recorded as
/// `pvc://<claim>/<study>/trial-<n>[-attempt-<k>]`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ArtifactsVolume {
    /// The claim's name, in the Jobs' namespace.
    pub claim: String,
    /// Where the claim's root is mounted in the trial's container (an absolute path).
    pub mount_path: String,
}

/// A key of a Kubernetes Secret in the Jobs' namespace.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SecretRef {
    /// The Secret's name.
    pub name: String,
    /// The key in its `data`.
    pub key: String,
}

/// Requests and limits of a trial's container.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Resources {
    /// CPU, as Kubernetes writes it (`4`, `500m`).
    pub cpu: Option<String>,
    /// Memory, as Kubernetes writes it (`16Gi`).
    pub memory: Option<String>,
    /// NVIDIA GPUs (`nvidia.com/gpu`).
    pub gpu: u32,
}

/// A SageMaker job's limit (`MaxRuntimeInSeconds`) when the study sets no `trial.timeout`:
/// SageMaker's default, one day.
pub(crate) const SAGEMAKER_DEFAULT_RUNTIME: Duration = Duration::from_secs(86_400);

/// A SageMaker training job's settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SageMakerSpec {
    /// Image, endpoint, polling.
    pub remote: RemoteSettings,
    /// The AWS region.
    pub region: String,
    /// The IAM role the job runs as.
    pub role_arn: String,
    /// The instance type (`ml.g5.xlarge`).
    pub instance_type: String,
    /// Instances per job.
    pub instance_count: u32,
    /// The instance's storage volume, in GB.
    pub volume_size_gb: u32,
    /// Where SageMaker puts the job's output (`s3://bucket/prefix`), and each trial's
    /// checkpoints (`<output_path>/<study>/trial-<n>/checkpoints`, its `CheckpointConfig`).
    pub output_path: String,
    /// Managed spot training (`EnableManagedSpotTraining`), and the job's limit including
    /// the time spent waiting for spot capacity (`MaxWaitTimeInSeconds`); `None`: on-demand
    /// instances.
    pub spot: Option<Duration>,
}

/// A Slurm job's settings: what `sbatch` is asked for.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct SlurmSpec {
    /// The partition (`--partition`); else the cluster's default.
    pub partition: Option<String>,
    /// The account charged (`--account`).
    pub account: Option<String>,
    /// The quality of service (`--qos`).
    pub qos: Option<String>,
    /// The job's time limit (`--time`): the file's, else the trial's timeout, else the
    /// partition's.
    pub time: Option<Duration>,
    /// CPUs of the job's one task (`--cpus-per-task`).
    pub cpus_per_task: Option<u32>,
    /// Memory, as Slurm writes it (`--mem`: `16G`, `500M`).
    pub mem: Option<String>,
    /// GPUs: whole ones (`--gres=gpu:N`), or a share of one (`--gres=shard:N`, see
    /// [`SlurmSpec::gres`]); none asks for none.
    pub gpus: Option<Share>,
    /// Features the node must have (`--constraint`).
    pub constraint: Option<String>,
    /// More `sbatch` options, passed as they are, before the job script.
    pub extra_args: Vec<String>,
    /// How often the job's state is asked of Slurm.
    pub poll_interval: Duration,
    /// How long Slurm's controller may fail to answer (a restart, a failover) before a job
    /// is given up.
    pub outage_limit: Duration,
    /// How the job's worker reports to the controller.
    pub report: SlurmReport,
}

/// The shards of each GPU that hptune assumes a Slurm cluster configures (`gres.conf`:
/// `Name=shard Count=16` per GPU): a job with `gpus: 1/K` asks for `16 / K` of them, so `K`
/// must divide 16 (2, 4, 8 or 16) for `K` such jobs to fill a GPU exactly, and never more
/// than `K` to share one. 16 is the largest share hptune gives anywhere ([`MAX_SHARE`]).
pub(crate) const SHARDS_PER_GPU: u8 = MAX_SHARE;

impl SlurmSpec {
    /// The job's `--gres`: `gpu:N` for whole GPUs, `shard:N` for a share of one (`N` =
    /// [`SHARDS_PER_GPU`] / `K` for `1/K`, a `K` that the study file's check let through),
    /// none without GPUs.
    pub(crate) fn gres(&self) -> Option<String> {
        match self.gpus? {
            Share::Whole(n) => Some(format!("gpu:{n}")),
            Share::Fraction(k) => Some(format!("shard:{}", SHARDS_PER_GPU / k)),
        }
    }
}

/// How a Slurm job's worker reports its measurements to the controller (`report`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum SlurmReport {
    /// Through the filesystem the compute nodes share with the controller: the job's output
    /// and metrics file in the study's log folder, read as a local worker's.
    #[default]
    Files,
    /// Through the study's PostgreSQL database, written by `hptune relay` in the job: for
    /// compute nodes that do not share a filesystem with the controller.
    Database,
}

impl SlurmReport {
    /// Every way, as written in the study file.
    pub(crate) const NAMES: &'static str = "files or database";

    /// Reads a way as written in the study file.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "files" => Some(SlurmReport::Files),
            "database" => Some(SlurmReport::Database),
            _ => None,
        }
    }
}
