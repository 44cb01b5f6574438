//! The `trial` block: the worker's command line and its argument template, its environment,
//! its time limits, its GPUs (the executor block is `executor.rs`).

use std::num::NonZeroUsize;
use std::time::Duration;

use super::executor::gpu_field;
use super::raw::{Number, RawTrial, RawTrialResources};
use super::{Checker, quoted};
use crate::gpus::{MAX_SHARE, Share};
use crate::protocol::{DEFAULT_GRACE_PERIOD, DEVICE_VARIABLES, is_protocol_variable};
use crate::study::space::Space;
use crate::study::{
    ExecutorSpec, TEMPLATE_BUILTINS, TemplatePart, TrialTemplate, WorkerCommand, template_parts,
};

/// The most GPUs a trial may ask for (the largest machines have 16).
const MAX_GPUS: i64 = 1024;

impl Checker<'_> {
    /// Checks the `trial` block (the parameters' ids are needed by argument templates).
    pub(super) fn trial(&mut self, raw: RawTrial, space: Option<&Space>) -> Option<TrialTemplate> {
        let command = WorkerCommand::new(raw.command).or_else(|| {
            self.report(
                "trial.command",
                "must name the worker program, e.g. [python, train.py]",
            );
            None
        });
        let mut ok = true;
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
        let gpu_memory = self.gpu_memory(raw.resources.as_ref(), gpus);
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
            command: Some(command?),
            args: raw.args,
            env: raw.env,
            timeout: timeout?,
            grace_period: grace?.unwrap_or(DEFAULT_GRACE_PERIOD),
            gpus: gpus?,
            gpu_memory: gpu_memory?,
            executor: executor?,
        })
    }

    /// Checks `trial.resources.gpus`: a whole number of devices from 1, or `1/K` of one for
    /// a whole `K` from 2 to [`MAX_SHARE`], for local workers (a remote engine asks for GPUs
    /// in its own block).
    fn gpus(
        &mut self,
        raw: Option<&RawTrialResources>,
        executor: Option<&ExecutorSpec>,
    ) -> Option<Option<Share>> {
        let field = "trial.resources.gpus";
        let Some(number) = raw.and_then(|r| r.gpus) else {
            return Some(None);
        };
        let share = self.share(
            field,
            number,
            "leave `resources` out for trials without GPUs",
        )?;
        let engine_field = executor.and_then(|e| gpu_field(e.kind()));
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
        Some(Some(share))
    }

    /// Checks a number of GPUs (`field`): whole GPUs from 1 to [`MAX_GPUS`], or `1/K` of one
    /// for a whole `K` from 2 to [`MAX_SHARE`]; `without` says how to ask for none. The rule
    /// of `trial.resources.gpus` and of the Slurm executor's `gpus`.
    pub(super) fn share(&mut self, field: &str, number: Number, without: &str) -> Option<Share> {
        let rule = format!(
            "whole GPUs from 1 to {MAX_GPUS}, or 1/K of one GPU for a whole K from 2 to {MAX_SHARE} (0.5, 0.25, 0.125, ...)"
        );
        match number.as_i64() {
            Some(n) if (1..=MAX_GPUS).contains(&n) => {
                Some(Share::Whole(NonZeroUsize::new(n as usize).expect("from 1")))
            }
            _ => match share_of(number.as_f64()) {
                Some(k) => Some(Share::Fraction(k)),
                None if is_fraction(number) => {
                    self.report(field, format!("{number} is neither a whole number of GPUs nor 1/K of one: a trial holds {rule}"));
                    None
                }
                None => {
                    self.report(field, format!("must be {rule}, got {number} ({without})"));
                    None
                }
            },
        }
    }

    /// Checks `trial.resources.gpu_memory`: a memory size, for a study whose trials hold GPUs
    /// (`gpus` as [`Self::gpus`] read it: `None` when it was refused, which is its own error).
    fn gpu_memory(
        &mut self,
        raw: Option<&RawTrialResources>,
        gpus: Option<Option<Share>>,
    ) -> Option<Option<u64>> {
        let field = "trial.resources.gpu_memory";
        let Some(text) = raw.and_then(|r| r.gpu_memory.as_deref()) else {
            return Some(None);
        };
        if gpus == Some(None) {
            self.report(
                field,
                "caps the memory of each trial's GPUs: give trial.resources.gpus too",
            );
            return None;
        }
        match hptune_memory_size::parse(text) {
            Ok(bytes) => Some(Some(bytes)),
            Err(error) => {
                self.report(field, error.to_string());
                None
            }
        }
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

/// The `K` of a share `1/K` of a GPU that `value` writes (0.5, 0.25, 0.125, or 1/3 to
/// enough digits), for `K` from 2 to [`MAX_SHARE`].
fn share_of(value: f64) -> Option<u8> {
    if !(value > 0.0 && value < 1.0) {
        return None;
    }
    let k = (1.0 / value).round();
    ((2.0..=f64::from(MAX_SHARE)).contains(&k) && (value * k - 1.0).abs() < 1e-4).then_some(k as u8)
}

/// Whether `number` is a positive number of GPUs that is not whole (`0.3`, `1.5`).
pub(super) fn is_fraction(number: Number) -> bool {
    let value = number.as_f64();
    value > 0.0 && value.is_finite() && value.fract() != 0.0
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
    use std::num::NonZeroUsize;
    use std::path::Path;

    use crate::gpus::Share;
    use crate::spec::parse;

    const STUDY: &str = "name: s\nobjective: {metric: loss, goal: minimize}\nparameters:\n  - {id: x, type: double, min: 0.0, max: 1.0}\nalgorithm: random\nmax_trial_count: 1\ntrial:\n  command: [train]\n";

    fn gpus(value: &str) -> Result<Option<Share>, String> {
        let text = format!("{STUDY}  resources: {{gpus: {value}}}\n");
        parse(Path::new("s.yaml"), &text)
            .map(|study| study.trial.gpus)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_trial_holds_whole_gpus_or_one_kth_of_one() {
        let whole = |n| Ok(Some(Share::Whole(NonZeroUsize::new(n).unwrap())));
        assert_eq!(gpus("2"), whole(2));
        assert_eq!(gpus("2.0"), whole(2));
        assert_eq!(gpus("0.5"), Ok(Some(Share::Fraction(2))));
        assert_eq!(gpus("0.125"), Ok(Some(Share::Fraction(8))));
        assert_eq!(gpus("0.0625"), Ok(Some(Share::Fraction(16))));
        assert_eq!(gpus("0.3333333"), Ok(Some(Share::Fraction(3))));
        for value in ["0.3", "1.5", "0.03125"] {
            let error = gpus(value).unwrap_err();
            assert!(
                error.starts_with(&format!("s.yaml:9:21: trial.resources.gpus: {value} is neither a whole number of GPUs nor 1/K of one: a trial holds whole GPUs from 1 to 1024, or 1/K of one GPU for a whole K from 2 to 16")),
                "{error}"
            );
        }
        for value in ["0", "-1", "-0.5", "1e9", ".inf"] {
            let error = gpus(value).unwrap_err();
            assert!(
                error.contains("trial.resources.gpus: must be whole GPUs from 1 to 1024, or 1/K"),
                "{value}: {error}"
            );
        }
        let none = parse(Path::new("s.yaml"), STUDY).unwrap();
        assert_eq!(none.trial.gpus, None);
    }

    #[test]
    fn a_memory_cap_is_a_size_for_trials_with_gpus() {
        let study = |resources: &str| {
            parse(
                Path::new("s.yaml"),
                &format!("{STUDY}  resources: {resources}\n"),
            )
            .map(|study| study.trial.gpu_memory)
            .map_err(|e| e.to_string())
        };
        assert_eq!(study("{gpus: 0.25, gpu_memory: 16GiB}"), Ok(Some(16 << 30)));
        let bad = study("{gpus: 1, gpu_memory: lots}").unwrap_err();
        assert!(
            bad.contains("s.yaml:9:36: trial.resources.gpu_memory: 'lots' is not a memory size"),
            "{bad}"
        );
        let alone = study("{gpu_memory: 16GiB}").unwrap_err();
        assert!(
            alone.contains("trial.resources.gpu_memory: caps the memory"),
            "{alone}"
        );
        // A refused gpus is the one error: the cap beside it is not blamed for it.
        let refused = study("{gpus: 0.3, gpu_memory: 16GiB}").unwrap_err();
        assert!(refused.contains("trial.resources.gpus: 0.3"), "{refused}");
        assert!(!refused.contains("gpu_memory"), "{refused}");
    }
}
