//! Vertex AI CustomJobs over the v1 REST API: one job per trial attempt
//! (`POST {endpoint}/v1/projects/{project}/locations/{region}/customJobs`), its state read
//! with `GET {endpoint}/v1/{name}`, cancelled with `POST {endpoint}/v1/{name}:cancel`.
//! Authenticated with an OAuth token from Application Default Credentials.

use std::path::Path;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::credentials::google::GoogleAuth;
use super::http::{Http, RemoteError};
use super::{Container, Engine, JobState, ModelOutput};
use crate::executor::TrialJob;
use crate::protocol::{Checkpoints, OUTPUT_DIR_VARIABLE, model_folder};
use crate::study::VertexSpec;

/// gRPC's code UNAVAILABLE, which Vertex gives a job whose machine was preempted.
const UNAVAILABLE: i64 = 14;

/// The Vertex AI engine of a study.
pub(super) struct Vertex {
    spec: VertexSpec,
    endpoint: String,
    http: Http,
    auth: GoogleAuth,
}

#[derive(Deserialize)]
struct CustomJob {
    name: String,
    state: Option<String>,
    error: Option<Status>,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    code: i64,
    #[serde(default)]
    message: String,
}

impl Vertex {
    /// The engine for `spec`, with this process's Google credentials.
    pub(super) fn new(spec: &VertexSpec) -> Result<Self, RemoteError> {
        let http = Http::new(spec.remote.request_timeout, None, None, false)?;
        Ok(Self {
            endpoint: spec
                .remote
                .endpoint
                .clone()
                .unwrap_or_else(|| format!("https://{}-aiplatform.googleapis.com", spec.region)),
            auth: GoogleAuth::from_environment(http.clone())?,
            http,
            spec: spec.clone(),
        })
    }

    /// The CustomJob of a trial attempt, as the API takes it.
    fn body(&self, job: &TrialJob, container: &Container) -> serde_json::Value {
        let mut machine = json!({"machineType": self.spec.machine_type});
        if let Some(accelerator) = &self.spec.accelerator {
            machine["acceleratorType"] = json!(accelerator.kind);
            machine["acceleratorCount"] = json!(accelerator.count);
        }
        let (program, args) = container
            .command
            .split_first()
            .unwrap_or((&container.name, &[]));
        let mut spec = json!({
            "workerPoolSpecs": [{
                "machineSpec": machine,
                "replicaCount": "1",
                "containerSpec": {
                    "imageUri": self.spec.remote.image,
                    "command": [program],
                    "args": args,
                    "env": container.env_entries(container.storage_url_entry()),
                },
            }],
        });
        if let Some(timeout) = job.timeout {
            spec["scheduling"]["timeout"] = json!(format!("{}s", timeout.as_secs().max(1)));
        }
        if self.spec.spot {
            spec["scheduling"]["strategy"] = json!("SPOT");
        }
        if let Some(account) = &self.spec.service_account {
            spec["serviceAccount"] = json!(account);
        }
        if let Some(base) = self.base_output_directory(job) {
            spec["baseOutputDirectory"] = json!({"outputUriPrefix": base});
        }
        json!({"displayName": container.name, "jobSpec": spec})
    }

    /// The attempt's `baseOutputDirectory`: `<base_output_dir>/<study>/trial-<n>[-attempt-<k>]`,
    /// as Vertex's tuning jobs give each trial a folder under the study's.
    fn base_output_directory(&self, job: &TrialJob) -> Option<String> {
        let base = self.spec.base_output_dir.as_ref()?;
        Some(format!(
            "{base}/{}",
            model_folder(&job.study, job.number, job.attempt)
        ))
    }

    async fn bearer(&self) -> Result<String, RemoteError> {
        Ok(format!("Bearer {}", self.auth.token().await?))
    }
}

#[async_trait]
impl Engine for Vertex {
    async fn submit(&self, job: &TrialJob, container: &Container) -> Result<String, RemoteError> {
        let path = format!(
            "/v1/projects/{}/locations/{}/customJobs",
            self.spec.project, self.spec.region
        );
        let url = format!("{}{path}", self.endpoint);
        let body = self.body(job, container);
        let bearer = self.bearer().await?;
        let created: CustomJob = self
            .http
            .json(&format!("POST {path}"), |client| {
                Ok(client
                    .post(&url)
                    .header("Authorization", &bearer)
                    .json(&body))
            })
            .await?;
        Ok(created.name)
    }

    async fn state(&self, handle: &str) -> Result<JobState, RemoteError> {
        let url = format!("{}/v1/{handle}", self.endpoint);
        let bearer = self.bearer().await?;
        let what = format!("GET /v1/{handle}");
        let job: CustomJob = self
            .http
            .json(&what, |client| {
                Ok(client.get(&url).header("Authorization", &bearer))
            })
            .await?;
        let error = job.error.unwrap_or(Status {
            code: 0,
            message: String::new(),
        });
        let reason = |default: &str| match error.message.as_str() {
            "" => default.to_string(),
            message => message.to_string(),
        };
        Ok(
            match job.state.as_deref().unwrap_or("JOB_STATE_UNSPECIFIED") {
                "JOB_STATE_SUCCEEDED" => JobState::Succeeded,
                "JOB_STATE_RUNNING" | "JOB_STATE_CANCELLING" | "JOB_STATE_UPDATING" => {
                    JobState::Running
                }
                "JOB_STATE_FAILED"
                    if error.code == UNAVAILABLE
                        || error.message.to_lowercase().contains("preempt") =>
                {
                    JobState::Preempted(reason("the job's machine was preempted"))
                }
                "JOB_STATE_FAILED" | "JOB_STATE_EXPIRED" | "JOB_STATE_PARTIALLY_SUCCEEDED" => {
                    JobState::Failed(reason(job.state.as_deref().unwrap_or_default()))
                }
                "JOB_STATE_CANCELLED" => {
                    JobState::Cancelled(reason("the job was cancelled outside hptune"))
                }
                _ => JobState::Queued,
            },
        )
    }

    /// `model/` in the attempt's `baseOutputDirectory`, where Vertex points the job's
    /// `AIP_MODEL_DIR`; the worker gets it as `HPTUNE_OUTPUT_DIR` through Cloud Storage
    /// FUSE (`gs://bucket/path` is the folder `/gcs/bucket/path` in the job), so that a
    /// worker writing plain files saves there.
    fn model_output(&self, job: &TrialJob, _name: &str) -> Option<ModelOutput> {
        let location = format!("{}/model", self.base_output_directory(job)?);
        let mounted = location.replacen("gs://", "/gcs/", 1);
        Some(ModelOutput {
            location,
            env: vec![(OUTPUT_DIR_VARIABLE.to_string(), mounted)],
        })
    }

    /// `checkpoints/` in the attempt's `baseOutputDirectory`, through Cloud Storage FUSE;
    /// it may resume from an earlier attempt's.
    fn checkpoints(&self, job: &TrialJob) -> Option<Checkpoints> {
        let base = self.spec.base_output_dir.as_ref()?;
        let mounted = base.replacen("gs://", "/gcs/", 1);
        Some(Checkpoints::of_attempt(
            Path::new(&mounted),
            &job.study,
            job.number,
            job.attempt,
        ))
    }

    async fn cancel(&self, handle: &str) -> Result<(), RemoteError> {
        let url = format!("{}/v1/{handle}:cancel", self.endpoint);
        let bearer = self.bearer().await?;
        self.http
            .send(&format!("POST /v1/{handle}:cancel"), |client| {
                Ok(client
                    .post(&url)
                    .header("Authorization", &bearer)
                    .json(&json!({})))
            })
            .await?;
        Ok(())
    }
}
