//! The fakes' spot capacity and checkpoints: each API's spot and checkpoint fields checked as
//! its reference documents them, and the folders a job's container sees (SageMaker's
//! `/opt/ml/checkpoints`, Cloud Storage FUSE's `/gcs/...`, a volume's mount) played by
//! folders of the fake, so that a retried job finds what the one before it wrote.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::fake_cloud::Api;

/// Checks the spot and checkpoint fields of a job's definition `body`; returns them as
/// seen, for the tests to compare.
pub fn spot_fields(api: Api, body: &Value) -> Result<Value, String> {
    match api {
        // CustomJobSpec.scheduling.strategy: an enum of the v1 API.
        Api::Vertex => {
            let strategy = &body["jobSpec"]["scheduling"]["strategy"];
            let known = [
                "STRATEGY_UNSPECIFIED",
                "ON_DEMAND",
                "LOW_COST",
                "STANDARD",
                "SPOT",
                "FLEX_START",
            ];
            if !strategy.is_null() && !strategy.as_str().is_some_and(|s| known.contains(&s)) {
                return Err(format!("scheduling.strategy {strategy} is not a Strategy"));
            }
            Ok(json!({"strategy": strategy}))
        }
        // PodSpec.tolerations: key, operator (Exists, Equal), value, effect, tolerationSeconds.
        Api::Kubernetes => {
            let tolerations = &body["spec"]["template"]["spec"]["tolerations"];
            for t in tolerations.as_array().into_iter().flatten() {
                let fields = ["key", "operator", "value", "effect", "tolerationSeconds"];
                if let Some(other) = t
                    .as_object()
                    .and_then(|o| o.keys().find(|k| !fields.contains(&k.as_str())))
                {
                    return Err(format!("a toleration has no field {other}"));
                }
                let operator = t["operator"].as_str().unwrap_or("Equal");
                let effect_ok = t["effect"].is_null()
                    || ["NoSchedule", "PreferNoSchedule", "NoExecute"]
                        .contains(&t["effect"].as_str().unwrap_or_default());
                let ok = match operator {
                    "Exists" => t["value"].is_null(),
                    "Equal" => t["key"].is_string(),
                    _ => false,
                };
                if !ok || !effect_ok {
                    return Err(format!("toleration {t} is not one the API server takes"));
                }
            }
            Ok(json!({"tolerations": tolerations}))
        }
        // EnableManagedSpotTraining (boolean); StoppingCondition.MaxWaitTimeInSeconds, with
        // managed spot training only, >= MaxRuntimeInSeconds; CheckpointConfig.S3Uri
        // (required, `(https|s3)://([^/]+)/?(.*)`) and LocalPath.
        Api::SageMaker => {
            let spot = &body["EnableManagedSpotTraining"];
            if !spot.is_null() && !spot.is_boolean() {
                return Err(format!("EnableManagedSpotTraining {spot} is not a boolean"));
            }
            let stopping = &body["StoppingCondition"];
            let wait = &stopping["MaxWaitTimeInSeconds"];
            match (spot.as_bool().unwrap_or(false), wait.as_u64()) {
                (false, None) => {}
                (true, Some(wait)) if Some(wait) >= stopping["MaxRuntimeInSeconds"].as_u64() => {}
                _ => {
                    return Err(format!(
                        "MaxWaitTimeInSeconds {wait} with EnableManagedSpotTraining {spot}: managed spot training needs it, >= MaxRuntimeInSeconds"
                    ));
                }
            }
            let checkpoint = &body["CheckpointConfig"];
            if !checkpoint.is_null() {
                let uri = checkpoint["S3Uri"].as_str().unwrap_or_default();
                let bucket = uri
                    .strip_prefix("s3://")
                    .or_else(|| uri.strip_prefix("https://"))
                    .and_then(|rest| rest.split('/').next());
                if bucket.is_none_or(str::is_empty) {
                    return Err(format!("CheckpointConfig.S3Uri '{uri}' is not an S3 URI"));
                }
                if !checkpoint["LocalPath"].is_null() && !checkpoint["LocalPath"].is_string() {
                    return Err("CheckpointConfig.LocalPath is not a string".into());
                }
            }
            Ok(json!({
                "EnableManagedSpotTraining": spot,
                "MaxWaitTimeInSeconds": wait,
                "CheckpointConfig": checkpoint,
            }))
        }
    }
}

/// The fake's folder for `path` in the container of a job defined by `body`, under `root`:
/// SageMaker's checkpoint folder (`CheckpointConfig.LocalPath`) is its `S3Uri`'s (which
/// SageMaker syncs both ways), any other path its own, as a shared bucket or volume is.
pub fn container_folder(api: Api, body: &Value, root: &Path, path: &str) -> PathBuf {
    let checkpoint = &body["CheckpointConfig"];
    let local = checkpoint["LocalPath"]
        .as_str()
        .unwrap_or("/opt/ml/checkpoints");
    match checkpoint["S3Uri"].as_str() {
        Some(uri)
            if api == Api::SageMaker
                && path.trim_end_matches('/') == local.trim_end_matches('/') =>
        {
            root.join("s3").join(uri.trim_start_matches("s3://"))
        }
        _ => root.join("fs").join(path.trim_start_matches('/')),
    }
}

/// Whether the folder holds a whole checkpoint: a file other than one still being written
/// (`*.tmp`, which the fixture workers write and then rename over their checkpoint). A folder
/// holding only the temporary file has no checkpoint a next attempt could resume from.
pub fn has_checkpoint(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|entry| !entry.file_name().to_string_lossy().ends_with(".tmp"))
    })
}
