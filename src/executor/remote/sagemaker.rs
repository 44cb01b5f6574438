//! SageMaker training jobs over the JSON 1.1 protocol (`POST /` with
//! `X-Amz-Target: SageMaker.CreateTrainingJob`, `DescribeTrainingJob`, `StopTrainingJob`),
//! each request signed with SigV4 from the standard credential chain.
//!
//! The container runs `hptune relay` through `AlgorithmSpecification.ContainerEntrypoint`
//! and `ContainerArguments`; the trial's parameters are also given as `HyperParameters`, as
//! SageMaker users expect to see them. A job whose `FailureReason` speaks of capacity or an
//! interruption (spot instances) lost its machine: the trial is retried.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::credentials::aws::AwsCredentials;
use super::http::{Http, RemoteError};
use super::{Container, Engine, JobState, ModelOutput};
use crate::executor::TrialJob;
use crate::protocol::{Checkpoints, trial_checkpoints};
use crate::study::{SAGEMAKER_DEFAULT_RUNTIME, SageMakerSpec};

/// Where a training container saves its model: SageMaker uploads the folder, as
/// `model.tar.gz`, to the job's output path when the job ends.
const MODEL_DIR: &str = "/opt/ml/model";

/// Where a training container writes its checkpoints: SageMaker uploads them to the job's
/// `CheckpointConfig.S3Uri` as they are written, and downloads them back into it when a job
/// with the same URI starts (a retried attempt, or a spot job SageMaker restarted).
const CHECKPOINT_DIR: &str = "/opt/ml/checkpoints";

/// The SageMaker engine of a study.
pub(super) struct SageMaker {
    spec: SageMakerSpec,
    endpoint: String,
    credentials: AwsCredentials,
    http: Http,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Description {
    training_job_status: String,
    #[serde(default)]
    failure_reason: String,
}

impl SageMaker {
    /// The engine for `spec`, with this process's AWS credentials.
    pub(super) fn new(spec: &SageMakerSpec) -> Result<Self, RemoteError> {
        Ok(Self {
            endpoint: spec
                .remote
                .endpoint
                .clone()
                .unwrap_or_else(|| format!("https://api.sagemaker.{}.amazonaws.com", spec.region)),
            credentials: AwsCredentials::from_environment()?,
            http: Http::new(spec.remote.request_timeout, None, None, false)?,
            spec: spec.clone(),
        })
    }

    /// Calls one action of the API with a JSON body; returns the answer's body.
    async fn call(&self, action: &str, body: &serde_json::Value) -> Result<Vec<u8>, RemoteError> {
        let url = format!("{}/", self.endpoint);
        let body = serde_json::to_vec(body).expect("JSON serialises");
        let target = format!("SageMaker.{action}");
        self.http
            .send(&format!("SageMaker {action}"), |client| {
                let headers = [
                    ("content-type", "application/x-amz-json-1.1"),
                    ("x-amz-target", target.as_str()),
                ];
                let signed = self.credentials.sign(
                    &self.spec.region,
                    "sagemaker",
                    "POST",
                    &url,
                    &headers,
                    &body,
                )?;
                let mut request = client.post(&url).body(body.clone());
                for (name, value) in headers.iter().copied() {
                    request = request.header(name, value);
                }
                for (name, value) in signed {
                    request = request.header(name, value);
                }
                Ok(request)
            })
            .await
    }

    /// The CreateTrainingJob request of a trial attempt.
    fn body(&self, job: &TrialJob, container: &Container) -> serde_json::Value {
        let (entrypoint, arguments) = container.command.split_at(2.min(container.command.len()));
        let hyperparameters: serde_json::Map<String, serde_json::Value> = job
            .params
            .iter()
            .map(|(id, value)| (id.clone(), json!(value.to_string())))
            .collect();
        let environment: serde_json::Map<String, serde_json::Value> = container
            .env_with_storage_url()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let runtime = job
            .timeout
            .unwrap_or(SAGEMAKER_DEFAULT_RUNTIME)
            .as_secs()
            .max(1);
        let mut stopping = json!({"MaxRuntimeInSeconds": runtime});
        if let Some(wait) = self.spec.spot {
            stopping["MaxWaitTimeInSeconds"] = json!(wait.as_secs().max(runtime));
        }
        json!({
            "TrainingJobName": container.name,
            "AlgorithmSpecification": {
                "TrainingImage": self.spec.remote.image,
                "TrainingInputMode": "File",
                "ContainerEntrypoint": entrypoint,
                "ContainerArguments": arguments,
            },
            "HyperParameters": hyperparameters,
            "Environment": environment,
            "RoleArn": self.spec.role_arn,
            "ResourceConfig": {
                "InstanceType": self.spec.instance_type,
                "InstanceCount": self.spec.instance_count,
                "VolumeSizeInGB": self.spec.volume_size_gb,
            },
            "StoppingCondition": stopping,
            "OutputDataConfig": {"S3OutputPath": self.spec.output_path},
            "CheckpointConfig": {
                "S3Uri": format!("{}/{}", self.spec.output_path, trial_checkpoints(&job.study, job.number)),
                "LocalPath": CHECKPOINT_DIR,
            },
            "EnableManagedSpotTraining": self.spec.spot.is_some(),
            "Tags": [{"Key": "hptune:study", "Value": job.study}],
        })
    }
}

/// The job's state from DescribeTrainingJob.
fn job_state(description: &Description) -> JobState {
    let reason = &description.failure_reason;
    match description.training_job_status.as_str() {
        "Completed" => JobState::Succeeded,
        "InProgress" | "Stopping" => JobState::Running,
        "Failed" => {
            let lower = reason.to_lowercase();
            if ["capacity", "interrupt", "preempt"]
                .iter()
                .any(|w| lower.contains(w))
            {
                JobState::Preempted(reason.clone())
            } else {
                JobState::Failed(reason.clone())
            }
        }
        "Stopped" => JobState::Cancelled("the training job was stopped outside hptune".into()),
        _ => JobState::Queued,
    }
}

#[async_trait]
impl Engine for SageMaker {
    async fn submit(&self, job: &TrialJob, container: &Container) -> Result<String, RemoteError> {
        self.call("CreateTrainingJob", &self.body(job, container))
            .await?;
        Ok(container.name.clone())
    }

    async fn state(&self, handle: &str) -> Result<JobState, RemoteError> {
        let body = self
            .call("DescribeTrainingJob", &json!({"TrainingJobName": handle}))
            .await?;
        let description: Description =
            serde_json::from_slice(&body).map_err(|e| RemoteError::Answer {
                what: "SageMaker DescribeTrainingJob".into(),
                detail: e.to_string(),
            })?;
        Ok(job_state(&description))
    }

    /// `<output_path>/<job name>/output/model.tar.gz`, where SageMaker uploads the job's
    /// `/opt/ml/model`.
    fn model_output(&self, _job: &TrialJob, name: &str) -> Option<ModelOutput> {
        let location = format!("{}/{name}/output/model.tar.gz", self.spec.output_path);
        Some(ModelOutput::in_container(location, MODEL_DIR))
    }

    /// `/opt/ml/checkpoints`, the same for every attempt: SageMaker restores into it what
    /// the trial's earlier jobs wrote to its `CheckpointConfig`.
    fn checkpoints(&self, _job: &TrialJob) -> Option<Checkpoints> {
        Some(Checkpoints::kept_by_engine(CHECKPOINT_DIR))
    }

    async fn cancel(&self, handle: &str) -> Result<(), RemoteError> {
        self.call("StopTrainingJob", &json!({"TrainingJobName": handle}))
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(status: &str, reason: &str) -> JobState {
        job_state(&Description {
            training_job_status: status.into(),
            failure_reason: reason.into(),
        })
    }

    #[test]
    fn capacity_and_interruptions_are_preemptions() {
        assert_eq!(state("InProgress", ""), JobState::Running);
        assert_eq!(state("Completed", ""), JobState::Succeeded);
        assert!(matches!(
            state(
                "Failed",
                "CapacityError: Unable to provision requested ML compute capacity"
            ),
            JobState::Preempted(_)
        ));
        assert!(matches!(
            state("Failed", "Spot instance interruption"),
            JobState::Preempted(_)
        ));
        assert!(matches!(
            state("Failed", "AlgorithmError: exit code 3"),
            JobState::Failed(_)
        ));
        assert!(matches!(state("Stopped", ""), JobState::Cancelled(_)));
    }
}
