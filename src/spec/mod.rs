//! The study file: YAML in, a validated [`Study`] out, or errors that say where and why.
//!
//! All YAML parsing of the project lives here. serde reads the file into the raw structs of
//! [`raw`] (catching wrong types, missing and unknown fields with their line and column);
//! then every rule of meaning is checked and each broken one is reported with its field path
//! and, through [`locate`], its position.

mod executor;
mod locate;
mod raw;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::executor::is_protocol_variable;
use crate::space::{Condition, Domain, MAX_GRID_POINTS, Parameter, Scale, Space};
use crate::stopping::StoppingRule;
pub use executor::{
    Accelerator, ExecutorKind, ExecutorSpec, KubernetesSpec, RemoteSettings, Resources,
    SageMakerSpec, SecretRef, VertexSpec,
};
use locate::{Locations, Position};
use raw::{RawEarlyStopping, RawParameter, RawStudy, RawTrial, Scalar};

/// Failures allowed before a study stops, when the file does not say.
pub const DEFAULT_MAX_FAILED_TRIAL_COUNT: u64 = 3;
/// Further attempts of a trial whose worker was killed from outside, when the file does not say.
pub const DEFAULT_MAX_RETRIES: u32 = 2;
/// Time between SIGTERM and SIGKILL when a worker is stopped, when the file does not say.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(10);

/// Whether the metric should go up or down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// Larger is better (accuracy).
    Maximize,
    /// Smaller is better (loss).
    Minimize,
}

impl Goal {
    /// Whether `a` is strictly better than `b`.
    pub fn better(self, a: f64, b: f64) -> bool {
        match self {
            Goal::Maximize => a > b,
            Goal::Minimize => a < b,
        }
    }

    /// The goal as written in the study file.
    pub fn as_str(self) -> &'static str {
        match self {
            Goal::Maximize => "maximize",
            Goal::Minimize => "minimize",
        }
    }

    /// Reads `maximize` or `minimize`.
    pub fn parse(text: &str) -> Option<Goal> {
        match text {
            "maximize" => Some(Goal::Maximize),
            "minimize" => Some(Goal::Minimize),
            _ => None,
        }
    }
}

/// What the study optimises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Objective {
    /// The tag workers report (`accuracy`).
    pub metric: String,
    /// Up or down.
    pub goal: Goal,
}

/// How trials are proposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Gaussian-process Bayesian optimisation (the default).
    Bayesian,
    /// Independent uniform draws in the unit cube, seeded.
    Random,
    /// Every point of the grid once.
    Grid,
}

impl Algorithm {
    /// The name as written in the study file.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Bayesian => "bayesian",
            Algorithm::Random => "random",
            Algorithm::Grid => "grid",
        }
    }
}

/// How one trial worker is started.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialTemplate {
    /// The program and its fixed arguments.
    pub command: Vec<String>,
    /// Argument template with `{id}` placeholders; when absent each active parameter is
    /// appended as `--<id>=<value>`.
    pub args: Option<Vec<String>>,
    /// Extra environment variables for the worker.
    pub env: BTreeMap<String, String>,
    /// Wall-clock limit of one trial.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when a worker is stopped.
    pub grace_period: Duration,
    /// Where the worker runs.
    pub executor: ExecutorSpec,
}

/// A validated study.
#[derive(Debug, Clone)]
pub struct Study {
    /// Unique key of the study in the database.
    pub name: String,
    /// What is optimised.
    pub objective: Objective,
    /// The parameters.
    pub space: Space,
    /// How trials are proposed.
    pub algorithm: Algorithm,
    /// Trials in all (finished or not, across reruns); for grid search at most the grid size.
    pub max_trial_count: Option<u64>,
    /// Trials running at once.
    pub parallel_trial_count: usize,
    /// Failed trials after which the study stops.
    pub max_failed_trial_count: u64,
    /// Further attempts of a trial whose worker was killed from outside (preempted, out of
    /// memory, its controller gone with it); failures of the worker's own code are not retried.
    pub max_retries: u32,
    /// Seed of the sampler.
    pub seed: u64,
    /// The early-stopping rule, if any.
    pub early_stopping: Option<StoppingRule>,
    /// How a worker is started.
    pub trial: TrialTemplate,
    /// The file as written, kept in the database.
    pub source: String,
}

/// One broken rule of the study file.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecIssue {
    /// Where, when known.
    pub position: Option<(usize, usize)>,
    /// The field path (`parameters[1].min`), empty for the whole file.
    pub field: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

/// Why a study file was refused: every broken rule found, each with its place.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct SpecError {
    /// The file.
    pub file: PathBuf,
    /// What is wrong, in file order.
    pub issues: Vec<SpecIssue>,
}

impl SpecError {
    fn new(file: &Path, issues: Vec<SpecIssue>) -> Self {
        Self {
            file: file.to_path_buf(),
            issues,
        }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        for (i, issue) in self.issues.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            match issue.position {
                Some((line, column)) => write!(f, "{file}:{line}:{column}: ")?,
                None => write!(f, "{file}: ")?,
            }
            if !issue.field.is_empty() {
                write!(f, "{}: ", issue.field)?;
            }
            f.write_str(&issue.message)?;
        }
        Ok(())
    }
}

/// The largest study file hptune reads (a study file is a few kilobytes).
pub const MAX_FILE_SIZE: u64 = 4 << 20;

/// The longest study name.
pub const MAX_NAME_LENGTH: usize = 128;

/// Reads and validates a study file.
pub fn load(path: &Path) -> Result<Study, SpecError> {
    parse(path, &read(path)?)
}

/// The `name` of a study file, the rest unchecked: the listing commands find a study by its
/// file, also one recorded under a name that [`load`] no longer allows.
pub fn load_name(path: &Path) -> Result<String, SpecError> {
    #[derive(Deserialize)]
    struct Named {
        name: String,
    }
    let text = read(path)?;
    index(path, &text)?;
    serde_yaml::from_str::<Named>(&text)
        .map(|named| named.name)
        .map_err(|e| SpecError::new(path, vec![serde_issue(&e)]))
}

/// The text of the file, read up to [`MAX_FILE_SIZE`]: a stat would not do, as pipes and
/// devices (`/dev/zero`) have no size.
fn read(path: &Path) -> Result<String, SpecError> {
    let whole = |message: String| {
        SpecError::new(
            path,
            vec![SpecIssue {
                position: None,
                field: String::new(),
                message,
            }],
        )
    };
    let cannot = |e: std::io::Error| whole(format!("cannot read the study file: {e}"));
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(cannot)?
        .take(MAX_FILE_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_FILE_SIZE {
        return Err(whole(format!(
            "the study file is larger than {} MiB, the most hptune reads",
            MAX_FILE_SIZE >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        whole(format!(
            "cannot read the study file: it is not UTF-8 text (byte {} is not)",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Where each field of `text` stands. Indexing comes before serde: it refuses text nested
/// too deep for serde_yaml to read in linear time.
fn index(path: &Path, text: &str) -> Result<Locations, SpecError> {
    Locations::index(text).map_err(|e| {
        let Position { line, column } = e.position();
        SpecError::new(
            path,
            vec![SpecIssue {
                position: Some((line, column)),
                field: String::new(),
                message: e.to_string(),
            }],
        )
    })
}

/// Validates the text of a study file; `path` is only used in messages.
pub fn parse(path: &Path, text: &str) -> Result<Study, SpecError> {
    let blank = |line: &str| line.trim().is_empty() || line.trim_start().starts_with('#');
    if text.lines().all(blank) {
        return Err(SpecError::new(
            path,
            vec![SpecIssue {
                position: None,
                field: String::new(),
                message: "the file is empty: a study needs name, objective, parameters and trial"
                    .into(),
            }],
        ));
    }
    let locations = index(path, text)?;
    let raw: RawStudy =
        serde_yaml::from_str(text).map_err(|e| SpecError::new(path, vec![serde_issue(&e)]))?;
    let mut checker = Checker {
        locations,
        issues: Vec::new(),
    };
    let study = checker.study(raw, text);
    if checker.issues.is_empty()
        && let Some(study) = study
    {
        return Ok(study);
    }
    checker.issues.sort_by_key(|i| i.position);
    Err(SpecError::new(path, checker.issues))
}

/// Reads another YAML document (a kubeconfig) into `T`: the project's YAML parsing stays in
/// this module.
pub fn from_yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_yaml::from_str(text).map_err(|e| e.to_string())
}

fn serde_issue(error: &serde_yaml::Error) -> SpecIssue {
    let text = error.to_string();
    // serde_yaml appends " at line L column C"; the position is shown in front instead.
    let message = match text.rfind(" at line ") {
        Some(cut) if error.location().is_some() => text[..cut].to_string(),
        _ => text,
    };
    let (field, message) = match message.split_once(": ") {
        Some((field, rest)) if !field.contains(' ') => (field.to_string(), rest.to_string()),
        _ => (String::new(), message),
    };
    SpecIssue {
        position: error.location().map(|l| (l.line(), l.column())),
        field,
        message,
    }
}

/// Collects every broken rule while turning the raw file into a [`Study`].
struct Checker {
    locations: Locations,
    issues: Vec<SpecIssue>,
}

impl Checker {
    fn report(&mut self, field: impl Into<String>, message: impl Into<String>) {
        let field = field.into();
        let position = self
            .locations
            .find(&field)
            .map(|Position { line, column }| (line, column));
        self.issues.push(SpecIssue {
            position,
            field,
            message: message.into(),
        });
    }

    fn study(&mut self, raw: RawStudy, text: &str) -> Option<Study> {
        if let Err(message) = check_name(&raw.name) {
            self.report("name", message);
        }
        if raw.objective.metric.trim().is_empty() {
            self.report("objective.metric", "must not be empty");
        }
        let goal = Goal::parse(&raw.objective.goal);
        if goal.is_none() {
            self.report(
                "objective.goal",
                format!(
                    "'{}' is not a goal: use maximize or minimize",
                    raw.objective.goal
                ),
            );
        }
        let algorithm = match raw.algorithm.as_deref() {
            None | Some("bayesian") => Some(Algorithm::Bayesian),
            Some("random") => Some(Algorithm::Random),
            Some("grid") => Some(Algorithm::Grid),
            Some(other) => {
                self.report(
                    "algorithm",
                    format!("'{other}' is not an algorithm: use bayesian, random or grid"),
                );
                None
            }
        };
        let space = self.space(&raw.parameters);
        let max_trial_count = self.max_trial_count(raw.max_trial_count, algorithm);
        let parallel_trial_count = self.at_least(
            "parallel_trial_count",
            raw.parallel_trial_count.unwrap_or(1),
            1,
        );
        let max_failed_trial_count = self.at_least(
            "max_failed_trial_count",
            raw.max_failed_trial_count
                .unwrap_or(DEFAULT_MAX_FAILED_TRIAL_COUNT as i64),
            1,
        );
        let max_retries = self.at_least(
            "max_retries",
            raw.max_retries.unwrap_or(DEFAULT_MAX_RETRIES as i64),
            0,
        );
        let early_stopping = match &raw.early_stopping {
            Some(raw) => self.early_stopping(raw).map(Some),
            None => Some(None),
        };
        let trial = self.trial(raw.trial, space.as_ref());
        if let (Some(Algorithm::Grid), Some(space)) = (algorithm, &space)
            && let Err(e) = space.grid_size()
        {
            self.report("parameters", e.to_string());
        }
        Some(Study {
            name: raw.name,
            objective: Objective {
                metric: raw.objective.metric,
                goal: goal?,
            },
            space: space?,
            algorithm: algorithm?,
            max_trial_count,
            parallel_trial_count: parallel_trial_count? as usize,
            max_failed_trial_count: max_failed_trial_count? as u64,
            max_retries: max_retries?.min(u32::MAX as i64) as u32,
            seed: raw.seed.unwrap_or(0),
            early_stopping: early_stopping?,
            trial: trial?,
            source: text.to_string(),
        })
    }

    fn at_least(&mut self, field: &str, value: i64, min: i64) -> Option<i64> {
        if value < min {
            self.report(field, format!("must be >= {min}, got {value}"));
            return None;
        }
        Some(value)
    }

    fn early_stopping(&mut self, raw: &RawEarlyStopping) -> Option<StoppingRule> {
        let field = "early_stopping";
        let (median, asha) = match raw.rule.as_str() {
            "median" => (true, false),
            "asha" => (false, true),
            other => {
                self.report(
                    format!("{field}.rule"),
                    format!("'{other}' is not a stopping rule: use median or asha"),
                );
                return None;
            }
        };
        let mut ok = true;
        for (name, present, allowed) in [
            ("min_steps", raw.min_steps.is_some(), median),
            ("min_trials", raw.min_trials.is_some(), median),
            ("min_resource", raw.min_resource.is_some(), asha),
            ("reduction_factor", raw.reduction_factor.is_some(), asha),
        ] {
            if present && !allowed {
                self.report(
                    format!("{field}.{name}"),
                    format!("does not apply to the {} rule", raw.rule),
                );
                ok = false;
            }
        }
        if median {
            let min_steps =
                self.at_least("early_stopping.min_steps", raw.min_steps.unwrap_or(1), 1);
            let min_trials =
                self.at_least("early_stopping.min_trials", raw.min_trials.unwrap_or(3), 1);
            return Some(StoppingRule::Median {
                min_steps: min_steps.filter(|_| ok)?,
                min_trials: min_trials? as usize,
            });
        }
        let min_resource = self.at_least(
            "early_stopping.min_resource",
            raw.min_resource.unwrap_or(1),
            1,
        );
        let reduction_factor = raw.reduction_factor.unwrap_or(3.0);
        if !(reduction_factor > 1.0 && reduction_factor.is_finite()) {
            self.report(
                "early_stopping.reduction_factor",
                format!("must be a number > 1, got {reduction_factor}"),
            );
            return None;
        }
        Some(StoppingRule::Asha {
            min_resource: min_resource.filter(|_| ok)?,
            reduction_factor,
        })
    }

    fn max_trial_count(&mut self, value: Option<i64>, algorithm: Option<Algorithm>) -> Option<u64> {
        match value {
            Some(n) => self.at_least("max_trial_count", n, 1).map(|n| n as u64),
            None => {
                if algorithm.is_some_and(|a| a != Algorithm::Grid) {
                    self.report(
                        "max_trial_count",
                        "is required (only grid search may leave it out: it stops when the grid is exhausted)",
                    );
                }
                None
            }
        }
    }

    fn space(&mut self, raw: &[RawParameter]) -> Option<Space> {
        if raw.is_empty() {
            self.report("parameters", "must list at least one parameter");
            return None;
        }
        let mut parameters: Vec<Parameter> = Vec::new();
        let mut seen = HashSet::new();
        let mut ok = true;
        for (i, p) in raw.iter().enumerate() {
            let field = format!("parameters[{i}]");
            if !is_identifier(&p.id) {
                self.report(
                    format!("{field}.id"),
                    format!(
                        "'{}' is not a valid id: use letters, digits, '_', '-' and '.', starting with a letter",
                        p.id
                    ),
                );
                ok = false;
            } else if !seen.insert(p.id.clone()) {
                self.report(
                    format!("{field}.id"),
                    format!("duplicate id '{}': each parameter needs its own id", p.id),
                );
                ok = false;
            }
            let domain = self.domain(&field, p);
            let condition = self.condition(&field, p, &parameters);
            match (domain, condition) {
                (Some(domain), Some(condition)) => parameters.push(Parameter {
                    id: p.id.clone(),
                    domain,
                    condition,
                }),
                _ => ok = false,
            }
        }
        ok.then(|| Space::new(parameters))
    }

    fn domain(&mut self, field: &str, p: &RawParameter) -> Option<Domain> {
        let scale = match p.scale.as_deref() {
            None | Some("linear") => Some(Scale::Linear),
            Some("log") => Some(Scale::Log),
            Some("reverse_log") => Some(Scale::ReverseLog),
            Some(other) => {
                self.report(
                    format!("{field}.scale"),
                    format!("'{other}' is not a scale: use linear, log or reverse_log"),
                );
                None
            }
        };
        let numeric = matches!(p.kind.as_str(), "double" | "integer");
        let listed = matches!(p.kind.as_str(), "discrete" | "categorical");
        let mut misplaced = |name: &str, present: bool, allowed: bool| {
            if present && !allowed {
                self.report(
                    format!("{field}.{name}"),
                    format!("does not apply to a {} parameter", p.kind),
                );
            }
        };
        misplaced("min", p.min.is_some(), numeric);
        misplaced("max", p.max.is_some(), numeric);
        misplaced("values", p.values.is_some(), listed);
        misplaced("grid_points", p.grid_points.is_some(), numeric);
        misplaced("scale", p.scale.is_some(), p.kind != "categorical");
        match p.kind.as_str() {
            "double" | "integer" => self.numeric_domain(field, p, scale?),
            "discrete" => self.discrete_domain(field, p, scale?),
            "categorical" => self.categorical_domain(field, p),
            other => {
                self.report(
                    format!("{field}.type"),
                    format!(
                        "'{other}' is not a parameter type: use double, integer, discrete or categorical"
                    ),
                );
                None
            }
        }
    }

    fn numeric_domain(&mut self, field: &str, p: &RawParameter, scale: Scale) -> Option<Domain> {
        let integer = p.kind == "integer";
        let (Some(min), Some(max)) = (p.min, p.max) else {
            for (name, value) in [("min", p.min), ("max", p.max)] {
                if value.is_none() {
                    self.report(
                        field.to_string(),
                        format!("a {} parameter needs `{name}`", p.kind),
                    );
                }
            }
            return None;
        };
        let mut ok = true;
        for (name, value) in [("min", min), ("max", max)] {
            let fits = if integer {
                value.as_i64().is_some()
            } else {
                value.as_f64().is_finite()
            };
            if !fits {
                let what = if integer {
                    format!("an integer from {} to {}", i64::MIN, i64::MAX)
                } else {
                    "a finite number".to_string()
                };
                self.report(
                    format!("{field}.{name}"),
                    format!("must be {what}, got {value}"),
                );
                ok = false;
            }
        }
        let ordered = match (min.as_i64(), max.as_i64()) {
            (Some(lo), Some(hi)) if integer => lo < hi,
            _ => min.as_f64() < max.as_f64(),
        };
        if ok && !ordered {
            self.report(
                format!("{field}.max"),
                format!("max must be > min, got min {min} and max {max}"),
            );
            ok = false;
        }
        if ok && scale != Scale::Linear {
            let lowest = if integer { 1.0 } else { f64::MIN_POSITIVE };
            if min.as_f64() < lowest {
                let need = if integer { "min >= 1" } else { "min > 0" };
                self.report(
                    format!("{field}.min"),
                    format!("{} scale needs {need}, got min {min}", scale_name(scale)),
                );
                ok = false;
            }
        }
        let grid_points = self.grid_points(field, p.grid_points);
        if !ok {
            return None;
        }
        let grid_points = grid_points?;
        Some(match (min.as_i64(), max.as_i64()) {
            (Some(min), Some(max)) if integer => Domain::Integer {
                min,
                max,
                scale,
                grid_points,
            },
            _ => Domain::Double {
                min: min.as_f64(),
                max: max.as_f64(),
                scale,
                grid_points,
            },
        })
    }

    /// `grid_points` as written: from 1 to the most points a grid may have.
    fn grid_points(&mut self, field: &str, value: Option<i64>) -> Option<Option<usize>> {
        match value {
            Some(n) if n < 1 || n > MAX_GRID_POINTS as i64 => {
                self.report(
                    format!("{field}.grid_points"),
                    format!("must be from 1 to {MAX_GRID_POINTS} (the most points a grid may have), got {n}"),
                );
                None
            }
            n => Some(n.map(|n| n as usize)),
        }
    }

    fn values<'a>(&mut self, field: &str, p: &'a RawParameter) -> Option<&'a [Scalar]> {
        match p.values.as_deref() {
            None => {
                self.report(
                    field.to_string(),
                    format!("a {} parameter needs `values`", p.kind),
                );
                None
            }
            Some([]) => {
                self.report(format!("{field}.values"), "must list at least one value");
                None
            }
            Some(values) => Some(values),
        }
    }

    fn discrete_domain(&mut self, field: &str, p: &RawParameter, scale: Scale) -> Option<Domain> {
        let raw = self.values(field, p)?;
        let mut values = Vec::with_capacity(raw.len());
        for (i, value) in raw.iter().enumerate() {
            match value.as_f64() {
                Some(x) if x.is_finite() => values.push(x),
                _ => self.report(
                    format!("{field}.values[{i}]"),
                    format!(
                        "'{}' is not a number: discrete values are numbers (use type categorical for strings)",
                        value.as_text()
                    ),
                ),
            }
        }
        if values.len() != raw.len() {
            return None;
        }
        if let Some(i) = values.windows(2).position(|w| w[1] <= w[0]) {
            self.report(
                format!("{field}.values[{}]", i + 1),
                format!(
                    "discrete values must increase: {} comes after {}",
                    values[i + 1],
                    values[i]
                ),
            );
            return None;
        }
        if scale != Scale::Linear && values[0] <= 0.0 {
            self.report(
                format!("{field}.values[0]"),
                format!(
                    "{} scale needs values > 0, got {}",
                    scale_name(scale),
                    values[0]
                ),
            );
            return None;
        }
        Some(Domain::Discrete { values, scale })
    }

    fn categorical_domain(&mut self, field: &str, p: &RawParameter) -> Option<Domain> {
        let raw = self.values(field, p)?;
        let values: Vec<String> = raw.iter().map(Scalar::as_text).collect();
        let mut first = HashMap::with_capacity(values.len());
        for (i, text) in values.iter().enumerate() {
            if let Some(earlier) = first.insert(text.as_str(), i) {
                self.report(
                    format!("{field}.values[{i}]"),
                    format!("duplicate value '{text}' (also values[{earlier}])"),
                );
                return None;
            }
        }
        Some(Domain::Categorical { values })
    }

    fn condition(
        &mut self,
        field: &str,
        p: &RawParameter,
        earlier: &[Parameter],
    ) -> Option<Option<Condition>> {
        let Some(when) = &p.when else {
            return Some(None);
        };
        if when.is_empty() {
            self.report(
                format!("{field}.when"),
                "must name at least one parent parameter",
            );
            return None;
        }
        let mut requires = BTreeMap::new();
        let mut ok = true;
        for (parent_id, allowed) in when {
            let place = format!("{field}.when.{parent_id}");
            let Some(parent) = earlier.iter().find(|q| &q.id == parent_id) else {
                let known: Vec<&str> = earlier.iter().map(|q| q.id.as_str()).collect();
                self.report(
                    place,
                    format!(
                        "'{parent_id}' is not a parameter defined before '{}' (defined before it: {})",
                        p.id,
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    ),
                );
                ok = false;
                continue;
            };
            if matches!(parent.domain, Domain::Double { .. }) {
                self.report(
                    place,
                    format!(
                        "'{parent_id}' is a double: a condition needs a categorical, discrete or integer parent"
                    ),
                );
                ok = false;
                continue;
            }
            if allowed.is_empty() {
                self.report(place, "must list at least one value of the parent");
                ok = false;
                continue;
            }
            let mut values = Vec::new();
            for (i, scalar) in allowed.iter().enumerate() {
                match parent.domain.parse(&scalar.as_text()) {
                    Ok(value) => values.push(value),
                    Err(message) => {
                        self.report(
                            format!("{place}[{i}]"),
                            format!("{message} of '{parent_id}'"),
                        );
                        ok = false;
                    }
                }
            }
            requires.insert(parent_id.clone(), values);
        }
        ok.then_some(Some(Condition { requires }))
    }

    fn trial(&mut self, raw: RawTrial, space: Option<&Space>) -> Option<TrialTemplate> {
        let mut ok = true;
        if raw.command.first().is_none_or(|c| c.trim().is_empty()) {
            self.report(
                "trial.command",
                "must name the worker program, e.g. [python, train.py]",
            );
            ok = false;
        }
        if let (Some(args), Some(space)) = (&raw.args, space) {
            for (i, arg) in args.iter().enumerate() {
                if let Err(message) = check_template(arg, space) {
                    self.report(format!("trial.args[{i}]"), message);
                    ok = false;
                }
            }
        }
        for (key, value) in &raw.env {
            if let Err(message) = check_env(key, value) {
                self.report(format!("trial.env.{key}"), message);
                ok = false;
            }
        }
        let timeout = self.duration("trial.timeout", raw.timeout.as_deref());
        let grace = self.duration("trial.grace_period", raw.grace_period.as_deref());
        let executor = self.executor(raw.executor.as_ref());
        if !ok {
            return None;
        }
        Some(TrialTemplate {
            command: raw.command,
            args: raw.args,
            env: raw.env,
            timeout: timeout?,
            grace_period: grace?.unwrap_or(DEFAULT_GRACE_PERIOD),
            executor: executor?,
        })
    }

    fn duration(&mut self, field: &str, text: Option<&str>) -> Option<Option<Duration>> {
        let Some(text) = text else {
            return Some(None);
        };
        match humantime::parse_duration(text) {
            Ok(d) if !d.is_zero() => Some(Some(d)),
            Ok(_) => {
                self.report(field, "must be longer than zero");
                None
            }
            Err(e) => {
                self.report(
                    field,
                    format!("'{text}' is not a duration ({e}): write e.g. 90s, 30m or 2h"),
                );
                None
            }
        }
    }
}

fn scale_name(scale: Scale) -> &'static str {
    match scale {
        Scale::Linear => "linear",
        Scale::Log => "log",
        Scale::ReverseLog => "reverse_log",
    }
}

/// Checks a study's name. The name is also the folder of its trials' logs and metrics files
/// under `--log-dir`, so it must be one plain file name: letters, digits, '.', '_' and '-',
/// starting with a letter or a digit (no `/`, no `..`, no hidden folder), short enough for
/// any file system.
fn check_name(name: &str) -> Result<(), String> {
    let rule = format!(
        "a study name is 1 to {MAX_NAME_LENGTH} letters, digits, '.', '_' and '-', starting with a letter or a digit (it names the folder of the study's logs)"
    );
    let length = name.chars().count();
    let mut chars = name.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if length == 0 {
        Err(format!("must not be empty: {rule}"))
    } else if length > MAX_NAME_LENGTH {
        Err(format!("{} has {length} characters: {rule}", quoted(name)))
    } else if !valid {
        Err(format!(
            "{} is not a valid study name: {rule}",
            quoted(name)
        ))
    } else {
        Ok(())
    }
}

/// Checks a `trial.env` entry: a name a process environment can hold, not one of the worker
/// protocol's (a worker must see its own trial, and a lost worker is found by them).
fn check_env(key: &str, value: &str) -> Result<(), String> {
    if is_protocol_variable(key) {
        Err(format!(
            "{key} is set by hptune for every worker (the worker protocol): give the variable another name"
        ))
    } else if key.is_empty() || key.contains(['=', '\0']) {
        Err(format!(
            "{} is not a variable name: it must be non-empty, without '=' or NUL",
            quoted(key)
        ))
    } else if value.contains('\0') {
        Err("the value holds a NUL character, which no environment variable can".into())
    } else {
        Ok(())
    }
}

/// `text` in quotes for a message: control characters escaped, cut after 40 characters.
fn quoted(text: &str) -> String {
    const SHOWN: usize = 40;
    let shown: String = text
        .chars()
        .take(SHOWN)
        .flat_map(char::escape_debug)
        .collect();
    if text.chars().count() > SHOWN {
        format!("'{shown}…'")
    } else {
        format!("'{shown}'")
    }
}

fn is_identifier(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The placeholders of an argument template: `{id}` names a parameter, `{trial_id}` and
/// `{study}` the trial and the study; `{{` and `}}` stand for braces.
pub const TEMPLATE_BUILTINS: [&str; 2] = ["trial_id", "study"];

/// Splits a template into literal text and placeholder names.
pub fn template_parts(template: &str) -> Result<Vec<TemplatePart<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = template;
    let mut literal = String::new();
    while let Some(i) = rest.find(['{', '}']) {
        literal.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            literal.push_str(&tail[..1]);
            rest = &tail[2..];
        } else if tail.starts_with('}') {
            return Err(format!(
                "unmatched '}}' in '{template}': write '}}}}' for a literal brace"
            ));
        } else {
            let end = tail
                .find('}')
                .ok_or_else(|| format!("unclosed '{{' in '{template}'"))?;
            if !literal.is_empty() {
                parts.push(TemplatePart::Text(std::mem::take(&mut literal)));
            }
            parts.push(TemplatePart::Placeholder(&tail[1..end]));
            rest = &tail[end + 1..];
        }
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(TemplatePart::Text(literal));
    }
    Ok(parts)
}

/// A piece of an argument template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplatePart<'a> {
    /// Text copied as is.
    Text(String),
    /// A `{name}` to fill in.
    Placeholder(&'a str),
}

fn check_template(template: &str, space: &Space) -> Result<(), String> {
    for part in template_parts(template)? {
        if let TemplatePart::Placeholder(name) = part
            && space.get(name).is_none()
            && !TEMPLATE_BUILTINS.contains(&name)
        {
            let ids: Vec<&str> = space.parameters().iter().map(|p| p.id.as_str()).collect();
            return Err(format!(
                "'{{{name}}}' names no parameter (parameters: {}; also {{trial_id}}, {{study}})",
                ids.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name: demo
objective: {metric: accuracy, goal: maximize}
parameters:
  - {id: lr, type: double, min: 1.0e-5, max: 1.0e-3, scale: log}
  - {id: batch_size, type: discrete, values: [8, 16, 32]}
  - {id: opt, type: categorical, values: [adam, sgd]}
  - {id: momentum, type: double, min: 0.0, max: 0.99, when: {opt: [sgd]}}
algorithm: random
max_trial_count: 4
parallel_trial_count: 2
trial:
  command: [python3, train.py]
  timeout: 30m
"#;

    fn errors(text: &str) -> String {
        parse(Path::new("study.yaml"), text)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn reads_a_complete_study() {
        let study = parse(Path::new("study.yaml"), GOOD).unwrap();
        assert_eq!(study.name, "demo");
        assert_eq!(study.objective.goal, Goal::Maximize);
        assert_eq!(study.space.dimension(), 4);
        assert_eq!(study.algorithm, Algorithm::Random);
        assert_eq!(study.parallel_trial_count, 2);
        assert_eq!(study.max_failed_trial_count, DEFAULT_MAX_FAILED_TRIAL_COUNT);
        assert_eq!(study.trial.timeout, Some(Duration::from_secs(1800)));
    }

    #[test]
    fn range_errors_name_line_column_and_field() {
        let text = GOOD.replace("min: 1.0e-5", "min: 0.0");
        assert_eq!(
            errors(&text),
            "study.yaml:5:33: parameters[0].min: log scale needs min > 0, got min 0"
        );
    }

    #[test]
    fn every_broken_rule_is_reported_at_once() {
        let text = GOOD
            .replace("[8, 16, 32]", "[8, 32, 16]")
            .replace("parallel_trial_count: 2", "parallel_trial_count: 0");
        let message = errors(&text);
        assert!(message.contains("study.yaml:6:54: parameters[1].values[2]: discrete values must increase: 16 comes after 32"), "{message}");
        assert!(
            message.contains("study.yaml:11:23: parallel_trial_count: must be >= 1, got 0"),
            "{message}"
        );
    }

    #[test]
    fn unknown_fields_are_refused_with_their_position() {
        let text = GOOD
            .replace("seed", "x")
            .replace("algorithm: random", "algorithm: random\nsede: 3");
        let message = errors(&text);
        assert!(
            message.starts_with("study.yaml:10:1: unknown field `sede`"),
            "{message}"
        );
    }

    #[test]
    fn templates_split_into_text_and_placeholders() {
        assert_eq!(
            template_parts("--lr={lr}{{x}}").unwrap(),
            vec![
                TemplatePart::Text("--lr=".into()),
                TemplatePart::Placeholder("lr"),
                TemplatePart::Text("{x}".into()),
            ]
        );
        assert!(template_parts("{lr").is_err());
        assert!(template_parts("lr}").is_err());
    }
}
