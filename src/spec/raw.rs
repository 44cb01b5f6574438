//! The study file as written: what serde reads before any check of meaning.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use crate::study::space::written;

/// A YAML scalar of a `values` list or a `when` clause.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum Scalar {
    /// `16`
    Int(i64),
    /// `0.5`
    Float(f64),
    /// `true`
    Bool(bool),
    /// `adamw`
    Str(String),
}

impl Scalar {
    /// The scalar as a number, if it is one.
    pub(super) fn as_f64(&self) -> Option<f64> {
        match self {
            Scalar::Int(i) => Some(*i as f64),
            Scalar::Float(x) => Some(*x),
            _ => None,
        }
    }

    /// The scalar as text, as a categorical value.
    pub(super) fn as_text(&self) -> String {
        match self {
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(x) => x.to_string(),
            Scalar::Bool(b) => b.to_string(),
            Scalar::Str(s) => s.clone(),
        }
    }
}

/// A bound as written: an integer keeps every digit (an `f64` would round those past 2^53
/// and saturate those past i64 when cast), anything else is a float.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Number {
    /// `16`, `-3`, `99999999999999999999`
    Int(i128),
    /// `0.5`, `1e-5`, `-1e30`
    Float(f64),
}

impl Number {
    /// The number as a float (rounded for integers beyond 2^53).
    pub(super) fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(x) => x,
        }
    }

    /// The number as an i64, when it is a whole number in i64's range.
    pub(super) fn as_i64(self) -> Option<i64> {
        match self {
            Number::Int(i) => i64::try_from(i).ok(),
            // -2^63 and 2^63 are exact floats; the range is [-2^63, 2^63).
            Number::Float(x)
                if x.fract() == 0.0 && (-(2f64.powi(63))..2f64.powi(63)).contains(&x) =>
            {
                Some(x as i64)
            }
            Number::Float(_) => None,
        }
    }
}

impl std::fmt::Display for Number {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Number::Int(i) => write!(f, "{i}"),
            Number::Float(x) => f.write_str(&written(*x)),
        }
    }
}

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NumberVisitor;

        impl Visitor<'_> for NumberVisitor {
            type Value = Number;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number")
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number::Int(v.into()))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(Number::Int(v.into()))
            }

            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Number, E> {
                Ok(Number::Int(v))
            }

            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Number, E> {
                Ok(i128::try_from(v).map_or(Number::Float(v as f64), Number::Int))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number::Float(v))
            }
        }

        deserializer.deserialize_any(NumberVisitor)
    }
}

/// The whole study file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStudy {
    pub name: String,
    pub objective: Option<RawObjective>,
    pub objectives: Option<Vec<RawObjective>>,
    pub parameters: Vec<RawParameter>,
    pub algorithm: Option<String>,
    pub max_trial_count: Option<i64>,
    pub parallel_trial_count: Option<i64>,
    pub max_failed_trial_count: Option<i64>,
    pub max_retries: Option<i64>,
    pub seed: Option<u64>,
    pub early_stopping: Option<RawRule>,
    pub trial: Option<RawTrial>,
    pub artifacts: Option<RawArtifacts>,
    pub constraints: Option<Vec<RawConstraint>>,
    pub failed_as_infeasible: Option<bool>,
    pub initial_trials: Option<Vec<BTreeMap<String, Scalar>>>,
    pub warm_start: Option<RawWarmStart>,
}

/// `warm_start`: the study whose trials inform the model, and the values its trials ran
/// with for the parameters this study adds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWarmStart {
    pub study: String,
    pub values: Option<BTreeMap<String, Scalar>>,
}

/// One of `constraints`: a bound on a reported metric.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConstraint {
    pub metric: String,
    pub max: Option<Number>,
    pub min: Option<Number>,
}

/// `artifacts`: the trials' model folders.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawArtifacts {
    pub dir: Option<String>,
    pub keep_best: Option<Number>,
}

/// The early-stopping block: here only its `rule` is read; the rule's own fields are read
/// into [`RawMedian`] or [`RawAsha`] by [`super::block`].
#[derive(Debug, Deserialize)]
pub(super) struct RawRule {
    pub rule: String,
}

/// `rule: median`.
#[derive(Debug, Deserialize)]
pub(super) struct RawMedian {
    pub min_steps: Option<i64>,
    pub min_trials: Option<i64>,
}

/// `rule: asha`.
#[derive(Debug, Deserialize)]
pub(super) struct RawAsha {
    pub min_resource: Option<i64>,
    pub reduction_factor: Option<f64>,
    pub max_resource: Option<i64>,
    pub fidelity: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawObjective {
    pub metric: String,
    pub goal: String,
    pub reference_point: Option<Number>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawParameter {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub min: Option<Number>,
    pub max: Option<Number>,
    pub scale: Option<String>,
    pub values: Option<Vec<Scalar>>,
    pub grid_points: Option<i64>,
    pub when: Option<BTreeMap<String, Vec<Scalar>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTrial {
    pub command: Vec<String>,
    pub args: Option<Vec<String>>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub timeout: Option<String>,
    pub grace_period: Option<String>,
    pub resources: Option<RawTrialResources>,
    pub executor: Option<RawKind>,
}

/// `trial.resources`: what each trial holds while it runs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTrialResources {
    pub gpus: Option<Number>,
    pub gpu_memory: Option<String>,
}

/// A block whose fields depend on its `kind`: here only the kind is read; the kind's own
/// fields are read into their struct by [`super::block`].
#[derive(Debug, Deserialize)]
pub(super) struct RawKind {
    pub kind: String,
}

/// The fields every remote engine takes.
#[derive(Debug, Deserialize)]
pub(super) struct RawRemote {
    pub image: Option<String>,
    pub endpoint: Option<String>,
    pub poll_interval: Option<String>,
    pub request_timeout: Option<String>,
    pub outage_limit: Option<String>,
}

/// `kind: vertex`: a Vertex AI CustomJob.
#[derive(Debug, Deserialize)]
pub(super) struct RawVertex {
    pub project: Option<String>,
    pub region: Option<String>,
    pub machine_type: Option<String>,
    pub accelerator: Option<RawAccelerator>,
    pub service_account: Option<String>,
    pub base_output_dir: Option<String>,
    pub spot: Option<bool>,
}

/// `kind: kubernetes`: a Kubernetes Job.
#[derive(Debug, Deserialize)]
pub(super) struct RawKubernetes {
    pub namespace: Option<String>,
    pub resources: Option<RawResources>,
    pub node_selector: Option<BTreeMap<String, String>>,
    pub service_account: Option<String>,
    pub ttl: Option<String>,
    pub storage_secret: Option<RawSecretRef>,
    pub artifacts_volume: Option<RawArtifactsVolume>,
    pub tolerations: Option<Vec<RawToleration>>,
}

/// `kind: sagemaker`: a SageMaker training job.
#[derive(Debug, Deserialize)]
pub(super) struct RawSageMaker {
    pub region: Option<String>,
    pub role_arn: Option<String>,
    pub instance_type: Option<String>,
    pub instance_count: Option<i64>,
    pub volume_size_gb: Option<i64>,
    pub output_path: Option<String>,
    pub spot: Option<bool>,
    pub max_wait: Option<String>,
}

/// A cloud engine's block read for `gpus` alone, the Slurm executor's field, which it
/// refuses.
#[derive(Debug, Deserialize)]
pub(super) struct RawGpus {
    pub gpus: Option<Number>,
}

/// `kind: slurm`: a Slurm batch job.
#[derive(Debug, Deserialize)]
pub(super) struct RawSlurm {
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub time: Option<String>,
    pub cpus_per_task: Option<i64>,
    pub mem: Option<String>,
    pub gpus: Option<Number>,
    pub constraint: Option<String>,
    pub extra_args: Option<Vec<String>>,
    pub poll_interval: Option<String>,
    pub outage_limit: Option<String>,
    pub report: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSecretRef {
    pub name: String,
    pub key: String,
}

/// A toleration of a Kubernetes pod, as its API names the fields.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawToleration {
    pub key: Option<String>,
    pub operator: Option<String>,
    pub value: Option<String>,
    pub effect: Option<String>,
    pub toleration_seconds: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawArtifactsVolume {
    pub claim: String,
    pub mount_path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAccelerator {
    #[serde(rename = "type")]
    pub kind: String,
    pub count: Option<Number>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawResources {
    pub cpu: Option<String>,
    pub memory: Option<String>,
    pub gpu: Option<Number>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(text: &str) -> Number {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn integers_keep_every_digit_and_fit_i64_or_not() {
        assert_eq!(
            number("9007199254740993").as_i64(),
            Some(9_007_199_254_740_993)
        );
        assert_eq!(number("-9223372036854775808").as_i64(), Some(i64::MIN));
        assert_eq!(number("9223372036854775808").as_i64(), None);
        assert_eq!(
            number("99999999999999999999").to_string(),
            "99999999999999999999"
        );
        assert_eq!(number("-1e30").as_i64(), None);
        assert_eq!(number("-9.223372036854775808e18").as_i64(), Some(i64::MIN));
        assert_eq!(number("9.223372036854775808e18").as_i64(), None);
        assert_eq!(number("2.5").as_i64(), None);
        assert_eq!(number(".nan").as_i64(), None);
        assert_eq!(number("1e3").as_i64(), Some(1000));
        let error = serde_yaml::from_str::<Number>("[1]").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("invalid type: sequence, expected a number"),
            "{error}"
        );
    }
}
