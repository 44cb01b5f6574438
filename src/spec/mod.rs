//! The study file: YAML in, a validated [`Study`] out, or errors that say where and why.
//!
//! All YAML parsing of the project lives here. serde reads the file into the raw structs of
//! [`raw`] (catching wrong types, missing and unknown fields with their line and column);
//! then every rule of meaning is checked and each broken one is reported with its field path
//! and, through [`locate`], its position.

mod artifacts;
mod block;
mod constraints;
mod early_stopping;
mod executor;
mod initial_trials;
mod locate;
mod objectives;
mod parameters;
mod raw;
mod slurm;
mod trial;
mod warm_start;

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::protocol::check_metric_name;
use crate::study::{Algorithm, Budget, Study};
use locate::{Locations, Position};
use raw::RawStudy;

/// Failures allowed before a study stops, when the file does not say.
pub(crate) const DEFAULT_MAX_FAILED_TRIAL_COUNT: u64 = 3;
/// Further attempts of a trial whose worker was killed from outside, when the file does not say.
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 2;

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

    /// One issue of the file as a whole (no field), at `position` when known.
    fn of_file(file: &Path, position: Option<(usize, usize)>, message: String) -> Self {
        Self::new(
            file,
            vec![SpecIssue {
                position,
                field: String::new(),
                message,
            }],
        )
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
pub(crate) const MAX_FILE_SIZE: u64 = 4 << 20;

/// The longest study name.
pub(crate) const MAX_NAME_LENGTH: usize = 128;

/// Reads and validates a study file.
pub fn load(path: &Path) -> Result<Study, SpecError> {
    parse(path, &read(path)?)
}

/// The `name` of a study file, the rest unchecked: the listing commands find a study by its
/// file, also one recorded under a name that [`load`] no longer allows.
pub(crate) fn load_name(path: &Path) -> Result<String, SpecError> {
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
    let whole = |message: String| SpecError::of_file(path, None, message);
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
        SpecError::of_file(path, Some((line, column)), e.to_string())
    })
}

/// Validates the text of a study file; `path` is only used in messages.
pub fn parse(path: &Path, text: &str) -> Result<Study, SpecError> {
    let blank = |line: &str| line.trim().is_empty() || line.trim_start().starts_with('#');
    if text.lines().all(blank) {
        return Err(SpecError::of_file(
            path,
            None,
            "the file is empty: a study needs name, objective, parameters and trial".into(),
        ));
    }
    let locations = index(path, text)?;
    let raw: RawStudy =
        serde_yaml::from_str(text).map_err(|e| SpecError::new(path, vec![serde_issue(&e)]))?;
    let mut checker = Checker {
        text,
        locations,
        issues: Vec::new(),
    };
    let study = checker.study(raw);
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
pub(crate) fn from_yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
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
struct Checker<'a> {
    /// The file's text, for the blocks read by their tag ([`block`]).
    text: &'a str,
    locations: Locations,
    issues: Vec<SpecIssue>,
}

impl Checker<'_> {
    fn report(&mut self, field: impl Into<String>, message: impl Into<String>) {
        let field = field.into();
        self.report_at(&field.clone(), field, message);
    }

    /// Reports a broken rule of `field` at the position of the node at `place`.
    fn report_at(&mut self, place: &str, field: String, message: impl Into<String>) {
        let position = self
            .locations
            .find(place)
            .map(|Position { line, column }| (line, column));
        self.issues.push(SpecIssue {
            position,
            field,
            message: message.into(),
        });
    }

    /// Reads the block at `path` into the struct of its tag's variant; `None` when it is
    /// not there or a field does not read (reported where it stands).
    fn block<T: serde::de::DeserializeOwned>(&mut self, path: &[&str]) -> Option<T> {
        match block::read(self.text, path) {
            Ok(found) => found,
            Err(e) => {
                self.issues.push(serde_issue(&e));
                None
            }
        }
    }

    /// Reports each field of the block at `path` that its variant does not take (`own`,
    /// besides the `tag`): one of another variant (in `every`) does not apply to `variant`
    /// (`the kubernetes executor`), any other is unknown. Whether all fields fit.
    fn variant_fields(
        &mut self,
        path: &[&str],
        tag: &str,
        own: &[&'static str],
        every: &[&'static str],
        variant: &str,
    ) -> bool {
        let Ok(keys) = block::keys(self.text, path) else {
            return false;
        };
        let block = path.join(".");
        let mut ok = true;
        for key in &keys {
            if key == tag || own.contains(&key.as_str()) {
                continue;
            }
            ok = false;
            let field = format!("{block}.{key}");
            if every.contains(&key.as_str()) {
                self.report(field, format!("does not apply to {variant}"));
            } else {
                let expected: Vec<String> = own.iter().map(|f| format!("`{f}`")).collect();
                let message = match expected.is_empty() {
                    true => format!("unknown field `{key}`: {variant} takes no other field"),
                    false => format!(
                        "unknown field `{key}`, expected one of {}",
                        expected.join(", ")
                    ),
                };
                self.report_at(&field, block.clone(), message);
            }
        }
        ok
    }

    fn study(&mut self, raw: RawStudy) -> Option<Study> {
        if let Err(message) = check_name(&raw.name) {
            self.report("name", message);
        }
        let objectives = self.objectives(&raw);
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
        let artifacts = self.artifacts(raw.artifacts);
        let constraints = self.constraints(raw.constraints, raw.failed_as_infeasible);
        let initial_trials =
            self.initial_trials(raw.initial_trials, space.as_ref(), max_trial_count);
        let warm_start = self.warm_start(raw.warm_start, &raw.name, space.as_ref());
        if let (Some(Algorithm::Grid), Some(space)) = (algorithm, &space)
            && let Err(e) = space.grid_size()
        {
            self.report("parameters", e.to_string());
        }
        let (objective, further_objectives) = objectives?;
        Some(Study {
            name: raw.name,
            objective,
            further_objectives,
            space: space?,
            algorithm: algorithm?,
            budget: Budget {
                max_trial_count,
                max_failed_trial_count: max_failed_trial_count? as u64,
            },
            parallel_trial_count: parallel_trial_count? as usize,
            max_retries: max_retries?.min(u32::MAX as i64) as u32,
            seed: raw.seed.unwrap_or(0),
            early_stopping: early_stopping?,
            trial: trial?,
            artifacts: artifacts?,
            constraints: constraints?,
            initial_trials: initial_trials?,
            warm_start: warm_start?,
            source: self.text.to_string(),
        })
    }

    /// Checks the `metric` of the block at `field` (an objective, a constraint): not empty,
    /// and a tag workers can report. Whether it is good.
    fn metric(&mut self, field: &str, metric: &str) -> bool {
        let problem = match metric.trim().is_empty() {
            true => Err("must not be empty".to_string()),
            false => check_metric_name(metric),
        };
        match problem {
            Ok(()) => true,
            Err(message) => {
                self.report(format!("{field}.metric"), message);
                false
            }
        }
    }

    fn at_least(&mut self, field: &str, value: i64, min: i64) -> Option<i64> {
        if value < min {
            self.report(field, format!("must be >= {min}, got {value}"));
            return None;
        }
        Some(value)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
        assert_eq!(study.objective.goal, crate::study::Goal::Maximize);
        assert_eq!(study.space.dimension(), 4);
        assert_eq!(study.algorithm, Algorithm::Random);
        assert_eq!(study.parallel_trial_count, 2);
        assert_eq!(
            study.budget.max_failed_trial_count,
            DEFAULT_MAX_FAILED_TRIAL_COUNT
        );
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
}
