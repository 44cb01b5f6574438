//! The `trial` block: the worker's command line and its argument template, its environment,
//! its time limits, its GPUs (the executor block is `executor.rs`).

use std::num::NonZeroUsize;
use std::time::Duration;

use super::raw::{Number, RawTrial, RawTrialResources};
use super::{Checker, quoted};
use crate::protocol::{DEFAULT_GRACE_PERIOD, DEVICE_VARIABLES, is_protocol_variable};
use crate::study::space::Space;
use crate::study::{ExecutorSpec, TEMPLATE_BUILTINS, TemplatePart, TrialTemplate, template_parts};

/// The most GPUs a trial may ask for (the largest machines have 16).
const MAX_GPUS: i64 = 1024;

impl Checker<'_> {
    /// Checks the `trial` block (the parameters' ids are needed by argument templates).
    pub(super) fn trial(&mut self, raw: RawTrial, space: Option<&Space>) -> Option<TrialTemplate> {
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
        let executor = self.executor(raw.executor.as_ref(), timeout.flatten());
        let gpus = self.gpus(raw.resources.as_ref(), executor.as_ref());
        if let Some(Some(_)) = gpus {
            for name in DEVICE_VARIABLES
                .iter()
                .filter(|v| raw.env.contains_key(**v))
            {
                self.report(
                    format!("trial.env.{name}"),
                    format!("{name} is set by hptune to each trial's own devices (trial.resources.gpus): remove it"),
                );
                ok = false;
            }
        }
        if !ok {
            return None;
        }
        Some(TrialTemplate {
            command: raw.command,
            args: raw.args,
            env: raw.env,
            timeout: timeout?,
            grace_period: grace?.unwrap_or(DEFAULT_GRACE_PERIOD),
            gpus: gpus?,
            executor: executor?,
        })
    }

    /// Checks `trial.resources.gpus`: a whole number of devices from 1, for local workers
    /// (a remote engine asks for GPUs in its own block).
    fn gpus(
        &mut self,
        raw: Option<&RawTrialResources>,
        executor: Option<&ExecutorSpec>,
    ) -> Option<Option<NonZeroUsize>> {
        let field = "trial.resources.gpus";
        let Some(number) = raw.and_then(|r| r.gpus) else {
            return Some(None);
        };
        let fraction = matches!(number, Number::Float(x) if x.is_finite() && x.fract() != 0.0);
        let count = match number.as_i64() {
            Some(n) if (1..=MAX_GPUS).contains(&n) => n as usize,
            _ if fraction => {
                self.report(
                    field,
                    format!("{number} is not a whole number of GPUs: each trial gets whole devices of its own (processes sharing a GPU share its memory without any limit, so trials would run each other out of memory)"),
                );
                return None;
            }
            _ => {
                self.report(
                    field,
                    format!("must be from 1 to {MAX_GPUS}, got {number} (leave `resources` out for trials without GPUs)"),
                );
                return None;
            }
        };
        // Exhaustive: an engine added later says here where its jobs ask for GPUs.
        let engine_field = match executor {
            None | Some(ExecutorSpec::Local) => None,
            Some(ExecutorSpec::Vertex(_)) => Some("accelerator: {type: NVIDIA_TESLA_T4, count: 1}"),
            Some(ExecutorSpec::Kubernetes(_)) => Some("resources: {gpu: 1}"),
            Some(ExecutorSpec::SageMaker(_)) => Some("a GPU instance_type, e.g. ml.g5.xlarge"),
            Some(ExecutorSpec::Slurm(_)) => Some("gpus: 1"),
        };
        if let (Some(engine_field), Some(engine)) = (engine_field, executor) {
            self.report(
                field,
                format!(
                    "is for local workers; a {} job asks for GPUs in trial.executor: {engine_field}",
                    engine.kind().as_str()
                ),
            );
            return None;
        }
        NonZeroUsize::new(count).map(Some)
    }

    /// Reads a duration field (`30s`, `2h`), absent or longer than zero.
    pub(super) fn duration(&mut self, field: &str, text: Option<&str>) -> Option<Option<Duration>> {
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
    use std::path::Path;

    use crate::spec::parse;

    const STUDY: &str = "name: s\nobjective: {metric: loss, goal: minimize}\nparameters:\n  - {id: x, type: double, min: 0.0, max: 1.0}\nalgorithm: random\nmax_trial_count: 1\ntrial:\n  command: [train]\n";

    fn gpus(value: &str) -> Result<Option<usize>, String> {
        let text = format!("{STUDY}  resources: {{gpus: {value}}}\n");
        parse(Path::new("s.yaml"), &text)
            .map(|study| study.trial.gpus.map(|n| n.get()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_trial_holds_a_whole_number_of_gpus_from_one() {
        assert_eq!(gpus("2"), Ok(Some(2)));
        assert_eq!(gpus("2.0"), Ok(Some(2)));
        let fraction = gpus("0.5").unwrap_err();
        assert!(
            fraction.starts_with(
                "s.yaml:9:21: trial.resources.gpus: 0.5 is not a whole number of GPUs"
            ),
            "{fraction}"
        );
        for value in ["0", "-1", "1e9", ".inf"] {
            let error = gpus(value).unwrap_err();
            assert!(error.contains("must be from 1 to 1024"), "{value}: {error}");
        }
        let none = parse(Path::new("s.yaml"), STUDY).unwrap();
        assert_eq!(none.trial.gpus, None);
    }
}
