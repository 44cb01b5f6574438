//! The command lines of the protocol: the worker's (its program, then its parameters), and
//! the relay's that a remote job runs around it.

use super::Checkpoints;
use crate::study::space::{Assignment, Space};
use crate::study::{TemplatePart, TrialTemplate, template_parts};

/// The worker's command line: the template's command, then its `args` with placeholders
/// filled in (an argument naming an inactive parameter is left out), or else each active
/// parameter as `--<id>=<value>` in the order of the study file.
pub(crate) fn command_line(
    template: &TrialTemplate,
    space: &Space,
    study: &str,
    number: u64,
    params: &Assignment,
) -> Vec<String> {
    // A template without a worker (a study only clients drive) is never run.
    let mut argv: Vec<String> = template
        .command
        .iter()
        .flat_map(|c| c.argv())
        .cloned()
        .collect();
    match &template.args {
        None => argv.extend(
            space
                .parameters()
                .iter()
                .filter_map(|p| params.get(&p.id).map(|value| format!("--{}={value}", p.id))),
        ),
        Some(args) => argv.extend(
            args.iter()
                .filter_map(|arg| fill_template(arg, study, number, params)),
        ),
    }
    argv
}

fn fill_template(template: &str, study: &str, number: u64, params: &Assignment) -> Option<String> {
    // spec.rs has checked every template, so it splits.
    let parts = template_parts(template).ok()?;
    let mut out = String::new();
    for part in parts {
        match part {
            TemplatePart::Text(text) => out.push_str(&text),
            TemplatePart::Placeholder("trial_id") => out.push_str(&number.to_string()),
            TemplatePart::Placeholder("study") => out.push_str(study),
            TemplatePart::Placeholder(id) => out.push_str(&params.get(id)?.to_string()),
        }
    }
    Some(out)
}

/// The command a job that reports through the database runs: `hptune relay --study S
/// --trial N --attempt A --metric M [--checkpoint-dir D [--resume-from R ...]] -- <the
/// worker's command line>` (the flags `hptune relay` reads, `cli/mod.rs`). The relay then
/// runs the worker as a local one, with the checkpoint folders of `checkpoints` as the job
/// sees them.
pub(crate) fn relay_command(
    study: &str,
    number: u64,
    attempt: u32,
    metric: &str,
    checkpoints: Option<&Checkpoints>,
    worker: &[String],
) -> Vec<String> {
    let number = number.to_string();
    let attempt = attempt.to_string();
    let flag = |name: &str, path: &std::path::Path| [name.to_string(), path.display().to_string()];
    let checkpoint_flags = checkpoints.into_iter().flat_map(|c| {
        flag("--checkpoint-dir", &c.dir).into_iter().chain(
            c.resume_from
                .iter()
                .flat_map(|dir| flag("--resume-from", dir)),
        )
    });
    [
        "hptune",
        "relay",
        "--study",
        study,
        "--trial",
        &number,
        "--attempt",
        &attempt,
        "--metric",
        metric,
    ]
    .into_iter()
    .map(str::to_string)
    .chain(checkpoint_flags)
    .chain(["--".to_string()])
    .chain(worker.iter().cloned())
    .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::study::space::{Domain, ParamValue, Parameter};
    use crate::study::{ExecutorSpec, WorkerCommand};

    /// A space of the parameters `opt`, `momentum` and `layers`, in that order: the command
    /// line reads only their ids and order (which parameters are active is the assignment's).
    fn space() -> Space {
        let parameter = |id: &str| Parameter {
            id: id.into(),
            domain: Domain::Categorical {
                values: vec!["any".into()],
            },
            condition: None,
        };
        Space::new(["opt", "momentum", "layers"].map(parameter).to_vec())
    }

    /// The trial template `command: [python3, train.py, --fixed]`, with `args` if given.
    fn template(args: Option<&[&str]>) -> TrialTemplate {
        TrialTemplate {
            command: WorkerCommand::new(
                ["python3", "train.py", "--fixed"]
                    .map(String::from)
                    .to_vec(),
            ),
            args: args.map(|args| args.iter().map(|a| a.to_string()).collect()),
            env: BTreeMap::new(),
            timeout: None,
            grace_period: Duration::from_secs(10),
            gpus: None,
            gpu_memory: None,
            executor: ExecutorSpec::Local,
        }
    }

    fn params(momentum: Option<f64>) -> Assignment {
        let mut p = Assignment::new();
        p.insert("opt".into(), ParamValue::Str("sgd".into()));
        p.insert("layers".into(), ParamValue::Int(2));
        if let Some(m) = momentum {
            p.insert("momentum".into(), ParamValue::Float(m));
        }
        p
    }

    #[test]
    fn appends_active_parameters_as_flags_in_file_order() {
        let argv = command_line(&template(None), &space(), "s", 3, &params(Some(0.5)));
        assert_eq!(
            argv,
            [
                "python3",
                "train.py",
                "--fixed",
                "--opt=sgd",
                "--momentum=0.5",
                "--layers=2"
            ]
        );
    }

    #[test]
    fn fills_the_args_template_and_drops_inactive_arguments() {
        let args = [
            "--optimizer",
            "{opt}",
            "--m={momentum}",
            "out/{study}/{trial_id}",
        ];
        let argv = command_line(&template(Some(&args)), &space(), "s", 3, &params(None));
        assert_eq!(
            argv,
            [
                "python3",
                "train.py",
                "--fixed",
                "--optimizer",
                "sgd",
                "out/s/3"
            ]
        );
    }

    #[test]
    fn the_relay_command_ends_with_the_workers_after_two_dashes() {
        let worker = ["python3", "train.py", "--lr=0.1"].map(String::from);
        assert_eq!(
            relay_command("s", 3, 2, "loss", None, &worker),
            [
                "hptune",
                "relay",
                "--study",
                "s",
                "--trial",
                "3",
                "--attempt",
                "2",
                "--metric",
                "loss",
                "--",
                "python3",
                "train.py",
                "--lr=0.1"
            ]
        );
        let checkpoints = Checkpoints::of_attempt(std::path::Path::new("/models"), "s", 3, 2);
        let with_checkpoints = relay_command("s", 3, 2, "loss", Some(&checkpoints), &worker);
        assert_eq!(
            with_checkpoints[10..],
            [
                "--checkpoint-dir",
                "/models/s/trial-3-attempt-2/checkpoints",
                "--resume-from",
                "/models/s/trial-3/checkpoints",
                "--",
                "python3",
                "train.py",
                "--lr=0.1"
            ]
        );
    }
}
