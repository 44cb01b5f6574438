//! Kubernetes `batch/v1` Jobs: one Job per trial attempt
//! (`POST /apis/batch/v1/namespaces/{ns}/jobs`), read with `GET .../jobs/{name}` until its
//! `Complete` or `Failed` condition, deleted (with its pod) when the trial is stopped.
//!
//! A small REST client over `reqwest` with `serde_json` for exactly the fields used, rather
//! than `kube` + `k8s-openapi`: those generate every type of the Kubernetes API and take
//! minutes to compile, for the three calls made here.
//!
//! The Job has `backoffLimit: 0` (retries are the controller's) and a `podFailurePolicy`
//! that fails it at once, with a reason that says which: a pod disrupted (evicted, preempted,
//! its node drained: the `DisruptionTarget` condition) is an infrastructure failure and the
//! trial is retried; a container that exited non-zero is the worker's own failure.

use std::path::Path;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::credentials::kube::KubeAccess;
use super::http::{Http, RemoteError};
use super::{Container, Engine, JobState, ModelOutput};
use crate::executor::TrialJob;
use crate::protocol::{Checkpoints, STORAGE_VARIABLE, model_folder};
use crate::study::{KubernetesSpec, Toleration};

/// The name of the trial's container in its pod.
const CONTAINER: &str = "trial";
/// The name of the pod's volume of models (`artifacts_volume`).
const MODELS_VOLUME: &str = "hptune-models";

/// The Kubernetes engine of a study.
pub(super) struct Kubernetes {
    spec: KubernetesSpec,
    access: KubeAccess,
    server: String,
    namespace: String,
    http: Http,
}

#[derive(Deserialize)]
struct Job {
    #[serde(default)]
    status: JobStatus,
}

#[derive(Deserialize, Default)]
struct JobStatus {
    #[serde(default)]
    active: i64,
    #[serde(default)]
    conditions: Vec<Condition>,
}

#[derive(Deserialize)]
struct Condition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    message: String,
}

impl Kubernetes {
    /// The engine for `spec`, with the kubeconfig's or the in-cluster credentials.
    pub(super) fn new(spec: &KubernetesSpec) -> Result<Self, RemoteError> {
        let access = KubeAccess::from_environment()?;
        let http = Http::new(
            spec.remote.request_timeout,
            access.ca_pem.as_deref(),
            access.identity_pem.as_deref(),
            access.insecure,
        )?;
        Ok(Self {
            server: spec
                .remote
                .endpoint
                .clone()
                .unwrap_or_else(|| access.server.clone()),
            namespace: spec
                .namespace
                .clone()
                .or_else(|| access.namespace.clone())
                .unwrap_or_else(|| "default".into()),
            access,
            http,
            spec: spec.clone(),
        })
    }

    /// The Job of a trial attempt, as the API takes it.
    fn body(&self, job: &TrialJob, container: &Container) -> serde_json::Value {
        let resources = &self.spec.resources;
        let mut amounts = serde_json::Map::new();
        if let Some(cpu) = &resources.cpu {
            amounts.insert("cpu".into(), json!(cpu));
        }
        if let Some(memory) = &resources.memory {
            amounts.insert("memory".into(), json!(memory));
        }
        let mut limits = amounts.clone();
        if resources.gpu > 0 {
            limits.insert("nvidia.com/gpu".into(), json!(resources.gpu.to_string()));
        }
        let labels = json!({
            "app.kubernetes.io/managed-by": "hptune",
            "hptune/trial": job.number.to_string(),
            "hptune/attempt": job.attempt.to_string(),
        });
        let mut pod = json!({
            "restartPolicy": "Never",
            "containers": [{
                "name": CONTAINER,
                "image": self.spec.remote.image,
                "command": container.command,
                "env": container.env_entries(self.storage_entry(container)),
                "resources": {"requests": amounts, "limits": limits},
            }],
        });
        if !self.spec.node_selector.is_empty() {
            pod["nodeSelector"] = json!(self.spec.node_selector);
        }
        if !self.spec.tolerations.is_empty() {
            pod["tolerations"] = self.spec.tolerations.iter().map(toleration).collect();
        }
        if let Some(account) = &self.spec.service_account {
            pod["serviceAccountName"] = json!(account);
        }
        if let Some(volume) = &self.spec.artifacts_volume {
            pod["volumes"] = json!([{
                "name": MODELS_VOLUME,
                "persistentVolumeClaim": {"claimName": volume.claim},
            }]);
            pod["containers"][0]["volumeMounts"] = json!([{
                "name": MODELS_VOLUME,
                "mountPath": volume.mount_path,
            }]);
        }
        let mut spec = json!({
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": self.spec.ttl.as_secs(),
            "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]},
                {"action": "FailJob", "onExitCodes": {
                    "containerName": CONTAINER, "operator": "NotIn", "values": [0]}},
            ]},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        });
        if let Some(timeout) = job.timeout {
            spec["activeDeadlineSeconds"] = json!(timeout.as_secs().max(1));
        }
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": container.name, "namespace": self.namespace, "labels": labels},
            "spec": spec,
        })
    }

    /// `HPTUNE_STORAGE` of the trial's container: from the study's Secret, else the URL.
    fn storage_entry(&self, container: &Container) -> serde_json::Value {
        match &self.spec.storage_secret {
            Some(secret) => json!({
                "name": STORAGE_VARIABLE,
                "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}},
            }),
            None => container.storage_url_entry(),
        }
    }

    fn jobs_path(&self, namespace: &str) -> String {
        format!("/apis/batch/v1/namespaces/{namespace}/jobs")
    }
}

/// `request` with the bearer `token`, if there is one.
fn authorized(request: reqwest::RequestBuilder, token: &Option<String>) -> reqwest::RequestBuilder {
    match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

/// The Job's state from its conditions.
fn job_state(job: &Job) -> JobState {
    let holds = |kind: &str| {
        job.status
            .conditions
            .iter()
            .find(|c| c.kind == kind && c.status == "True")
    };
    if holds("Complete").is_some() {
        return JobState::Succeeded;
    }
    if let Some(failed) = holds("Failed") {
        let reason = format!("{}: {}", failed.reason, failed.message);
        return if failed.message.contains("DisruptionTarget") {
            JobState::Preempted(reason)
        } else {
            JobState::Failed(reason)
        };
    }
    if job.status.active > 0 {
        JobState::Running
    } else {
        JobState::Queued
    }
}

#[async_trait]
impl Engine for Kubernetes {
    async fn submit(&self, job: &TrialJob, container: &Container) -> Result<String, RemoteError> {
        let path = self.jobs_path(&self.namespace);
        let url = format!("{}{path}", self.server);
        let body = self.body(job, container);
        let token = self.access.token().await?;
        self.http
            .send(&format!("POST {path}"), |client| {
                Ok(authorized(client.post(&url).json(&body), &token))
            })
            .await?;
        Ok(format!("{}/{}", self.namespace, container.name))
    }

    async fn state(&self, handle: &str) -> Result<JobState, RemoteError> {
        let (namespace, name) = split_handle(handle)?;
        let path = format!("{}/{name}", self.jobs_path(namespace));
        let url = format!("{}{path}", self.server);
        let token = self.access.token().await?;
        let answer: Result<Job, RemoteError> = self
            .http
            .json(&format!("GET {path}"), |client| {
                Ok(authorized(client.get(&url), &token))
            })
            .await;
        match answer {
            Ok(job) => Ok(job_state(&job)),
            Err(e) if e.status() == Some(404) => Ok(JobState::Gone),
            Err(e) => Err(e),
        }
    }

    /// `<mount_path>/<study>/trial-<n>[-attempt-<k>]` in the container, on the claim of
    /// `artifacts_volume`: recorded as `pvc://<claim>/<study>/trial-<n>[-attempt-<k>]`.
    fn model_output(&self, job: &TrialJob, _name: &str) -> Option<ModelOutput> {
        let volume = self.spec.artifacts_volume.as_ref()?;
        let folder = model_folder(&job.study, job.number, job.attempt);
        Some(ModelOutput::in_container(
            format!("pvc://{}/{folder}", volume.claim),
            &format!("{}/{folder}", volume.mount_path),
        ))
    }

    /// `checkpoints/` in the attempt's model folder on the claim of `artifacts_volume`; it
    /// may resume from an earlier attempt's.
    fn checkpoints(&self, job: &TrialJob) -> Option<Checkpoints> {
        let volume = self.spec.artifacts_volume.as_ref()?;
        Some(Checkpoints::of_attempt(
            Path::new(&volume.mount_path),
            &job.study,
            job.number,
            job.attempt,
        ))
    }

    async fn cancel(&self, handle: &str) -> Result<(), RemoteError> {
        let (namespace, name) = split_handle(handle)?;
        let path = format!("{}/{name}", self.jobs_path(namespace));
        let url = format!("{}{path}", self.server);
        let token = self.access.token().await?;
        let deleted = self
            .http
            .send(&format!("DELETE {path}"), |client| {
                let request = client
                    .delete(&url)
                    .query(&[("propagationPolicy", "Background")]);
                Ok(authorized(request, &token))
            })
            .await;
        match deleted {
            Err(e) if e.status() != Some(404) => Err(e),
            _ => Ok(()),
        }
    }
}

/// A toleration as the pod's API takes it, without the fields the study left out.
fn toleration(t: &Toleration) -> serde_json::Value {
    let mut entry = json!({"operator": t.operator});
    let fields = [
        ("key", t.key.as_ref().map(|k| json!(k))),
        ("value", t.value.as_ref().map(|v| json!(v))),
        ("effect", t.effect.as_ref().map(|e| json!(e))),
        ("tolerationSeconds", t.toleration_seconds.map(|s| json!(s))),
    ];
    for (name, value) in fields {
        if let Some(value) = value {
            entry[name] = value;
        }
    }
    entry
}

/// `namespace/name` apart.
fn split_handle(handle: &str) -> Result<(&str, &str), RemoteError> {
    handle.split_once('/').ok_or_else(|| RemoteError::Answer {
        what: format!("the Job handle '{handle}'"),
        detail: "not namespace/name".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(text: &str) -> Job {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn conditions_give_the_state() {
        assert_eq!(job_state(&job("{}")), JobState::Queued);
        assert_eq!(
            job_state(&job(r#"{"status": {"active": 1}}"#)),
            JobState::Running
        );
        assert_eq!(
            job_state(&job(
                r#"{"status": {"conditions": [{"type": "Complete", "status": "True"}]}}"#
            )),
            JobState::Succeeded
        );
        let evicted = r#"{"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": "Pod default/x has condition DisruptionTarget matching FailJob rule at index 0"}]}}"#;
        assert!(matches!(job_state(&job(evicted)), JobState::Preempted(_)));
        let exited = r#"{"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": "Container trial for pod default/x failed with exit code 3 matching FailJob rule at index 1"}]}}"#;
        assert!(
            matches!(job_state(&job(exited)), JobState::Failed(m) if m.contains("exit code 3"))
        );
    }
}
