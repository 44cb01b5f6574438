//! The verdict on an attempt that ended: how its worker ended and what it reported decide
//! whether the trial succeeded, failed, was stopped, or runs again.

use std::collections::BTreeMap;

use crate::executor::{WorkerEnd, WorkerOutcome};
use crate::protocol::{Measurement, ReportError, final_value};
use crate::storage::{TrialEnd, TrialRecord, TrialState};
use crate::study::Study;
use crate::study::stopping::Curve;

/// The learning curve of trial `number` in `measurements`: its finite values of `metric` that
/// have a step, by step.
pub(super) fn curve(number: u64, measurements: &[Measurement], metric: &str) -> Curve {
    let mut points: Vec<(i64, f64)> = measurements
        .iter()
        .filter(|m| m.metric == metric && m.value.is_finite())
        .filter_map(|m| Some((m.step?, m.value)))
        .collect();
    points.sort_by_key(|p| p.0);
    Curve {
        number,
        points,
        succeeded: false,
    }
}

/// The last finite value reported of `metric`, with or without a step.
pub(super) fn last_value(measurements: &[Measurement], metric: &str) -> Option<f64> {
    measurements
        .iter()
        .rev()
        .find(|m| m.metric == metric && m.value.is_finite())
        .map(|m| m.value)
}

/// The final values of the study's constrained metrics in `measurements`, and why a trial
/// that ended in `state` with them is infeasible (`None`: feasible). A stopped trial is not a
/// result: its values are kept, and it is not judged.
pub(super) fn feasibility(
    study: &Study,
    state: TrialState,
    measurements: &[Measurement],
) -> (BTreeMap<String, f64>, Option<String>) {
    let constraints = &study.constraints;
    let finals: BTreeMap<&str, Result<f64, ReportError>> = constraints
        .bounds
        .iter()
        .map(|c| (c.metric.as_str(), final_value(measurements, &c.metric)))
        .collect();
    let values = constraints.values(|metric| finals.get(metric)?.as_ref().ok().copied());
    // Why a constrained metric has no value: never reported, or reported as NaN or infinite.
    let unreported = |metric: &str| match finals.get(metric) {
        Some(Err(not_finite @ ReportError::NotFinite { .. })) => not_finite.to_string(),
        _ => format!("reported no {metric}"),
    };
    let infeasible = match state {
        TrialState::Succeeded | TrialState::Failed => {
            constraints.judge_with(state == TrialState::Failed, &values, unreported)
        }
        _ => None,
    };
    (values, infeasible)
}

/// The end of `trial` in `state` with `value` and `error`, as its attempt's `measurements`
/// (all of them; `unsaved` are those not recorded yet) make it: with several objectives, every
/// objective's value, a succeeded trial that lacks one failed instead; then its constraints
/// judged.
pub(super) fn trial_end(
    study: &Study,
    trial: TrialRecord,
    (state, value, error): (TrialState, Option<f64>, Option<String>),
    measurements: &[Measurement],
    unsaved: Vec<Measurement>,
) -> TrialEnd {
    let (state, value, error, values) = match objective_values(study, state, measurements) {
        Ok(values) => (state, value, error, values),
        Err(reason) => (TrialState::Failed, None, Some(reason), Vec::new()),
    };
    let mut end = TrialEnd::now(trial, state, value, error, unsaved);
    end.trial.objective_values = values;
    (end.trial.constraint_values, end.trial.infeasible) = feasibility(study, state, measurements);
    end
}

/// Every objective's value of a trial of a study with several that ended in `state`: a
/// succeeded trial's final value of each (`Err`: why one is missing, which fails the trial),
/// a stopped trial's last values when it reported each; none otherwise, and none with one
/// objective (its value is the trial's `value`).
fn objective_values(
    study: &Study,
    state: TrialState,
    measurements: &[Measurement],
) -> Result<Vec<f64>, String> {
    if !study.has_several_objectives() {
        return Ok(Vec::new());
    }
    match state {
        TrialState::Succeeded => {
            let finals: Vec<Result<f64, ReportError>> = study
                .objectives()
                .map(|o| final_value(measurements, &o.metric))
                .collect();
            let missing: Vec<String> = finals
                .iter()
                .filter_map(|f| f.as_ref().err().map(ReportError::to_string))
                .collect();
            if missing.is_empty() {
                return Ok(finals.into_iter().flatten().collect());
            }
            let all: Vec<&str> = study.objectives().map(|o| o.metric.as_str()).collect();
            Err(format!(
                "{} (a study of several objectives needs a final value of each: {})",
                missing.join("; "),
                all.join(", ")
            ))
        }
        TrialState::Stopped => Ok(study
            .objectives()
            .map(|o| last_value(measurements, &o.metric))
            .collect::<Option<Vec<f64>>>()
            .unwrap_or_default()),
        _ => Ok(Vec::new()),
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Verdict {
    /// The trial is over, in this state.
    Final(TrialState, Option<f64>, Option<String>),
    /// The worker was killed from outside: run the trial again if retries are left.
    Retry(String),
    /// The user stopped the study: the trial runs again, from its start, when the study is
    /// run again (it used no retry).
    Interrupted(String),
}

/// How an attempt ended; `early_stop` is the stopping rule's reason if it asked the worker to
/// stop, `interrupted` whether the user stopped the study (a worker killed from outside
/// meanwhile is then handed back, not retried).
pub(super) fn verdict_on(
    study: &Study,
    measurements: &[Measurement],
    outcome: &WorkerOutcome,
    early_stop: Option<String>,
    interrupted: bool,
) -> Verdict {
    match verdict_on_end(study, measurements, outcome, early_stop) {
        Verdict::Retry(reason) if interrupted => {
            Verdict::Interrupted(format!("the study was interrupted ({reason})"))
        }
        verdict => verdict,
    }
}

/// How an attempt ended, from its worker's end and what it reported alone.
fn verdict_on_end(
    study: &Study,
    measurements: &[Measurement],
    outcome: &WorkerOutcome,
    early_stop: Option<String>,
) -> Verdict {
    let metric = &study.objective.metric;
    let failed = |message: String| Verdict::Final(TrialState::Failed, None, Some(message));
    let with_output = |message: String| outcome.with_last_output(message);
    let reported = || final_value(measurements, metric);
    let finished = || match (reported(), &outcome.unreadable) {
        (Ok(value), _) => Verdict::Final(TrialState::Succeeded, Some(value), None),
        // No value, but one the worker meant as a value: say what it printed.
        (Err(ReportError::Missing(_)), Some(unreadable)) => failed(unreadable.clone()),
        (Err(e), _) => failed(e.to_string()),
    };
    if let Some(line) = &outcome.out_of_memory
        && matches!(
            outcome.end,
            WorkerEnd::Exited(_) | WorkerEnd::Killed(_) | WorkerEnd::JobFailed(_)
        )
        && outcome.end != WorkerEnd::Exited(0)
    {
        // Not the machine's failure: the next attempt would run out of memory again.
        return failed(format!("the worker ran out of device memory: {line}"));
    }
    match &outcome.end {
        WorkerEnd::Exited(0) => finished(),
        WorkerEnd::Vanished
            if measurements
                .iter()
                .any(|m| m.metric == *metric && m.step.is_none()) =>
        {
            finished()
        }
        WorkerEnd::Vanished => Verdict::Retry(
            "the worker ended while no controller watched it, without a final value".into(),
        ),
        end @ WorkerEnd::Killed(signal) if end.is_infrastructure_failure() => {
            Verdict::Retry(with_output(format!("the worker was killed by {signal}")))
        }
        WorkerEnd::Killed(signal) => {
            failed(with_output(format!("the worker was killed by {signal}")))
        }
        WorkerEnd::Exited(code) => {
            failed(with_output(format!("the worker exited with code {code}")))
        }
        WorkerEnd::TimedOut(left) => failed(format!(
            "timed out after {} (trial.timeout) and was terminated",
            humantime::format_duration(study.trial.timeout.unwrap_or(*left))
        )),
        WorkerEnd::TimedOutBeforeStart { after, why } => failed(format!(
            "timed out after {} (trial.timeout) before it ever started: {why}; it was cancelled",
            humantime::format_duration(study.trial.timeout.unwrap_or(*after))
        )),
        WorkerEnd::Stopped => match early_stop {
            Some(reason) => Verdict::Final(
                TrialState::Stopped,
                last_value(measurements, metric),
                Some(reason),
            ),
            None => Verdict::Interrupted("the study was interrupted".into()),
        },
        WorkerEnd::LaunchFailed(message) => failed(message.clone()),
        WorkerEnd::JobFailed(reason) => failed(with_output(format!("the job failed: {reason}"))),
        WorkerEnd::Preempted(reason) => Verdict::Retry(format!("the job was preempted: {reason}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn study() -> Study {
        let yaml = "name: s\nmax_trial_count: 1\nobjective: {metric: loss, goal: minimize}\nparameters:\n  - {id: x, type: double, min: 0, max: 1}\ntrial: {command: [w], timeout: 1m}\n";
        crate::spec::parse(std::path::Path::new("s.yaml"), yaml).unwrap()
    }

    fn loss(step: Option<i64>, value: f64) -> Measurement {
        Measurement {
            step,
            metric: "loss".into(),
            value,
        }
    }

    fn verdict(end: WorkerEnd, measurements: &[Measurement], early: Option<&str>) -> Verdict {
        let outcome = WorkerOutcome {
            last_output: Some("Traceback: boom".into()),
            ..WorkerOutcome::new(1, end)
        };
        verdict_on(
            &study(),
            measurements,
            &outcome,
            early.map(str::to_string),
            false,
        )
    }

    fn failed(message: &str) -> Verdict {
        Verdict::Final(TrialState::Failed, None, Some(message.into()))
    }

    #[test]
    fn a_clean_exit_succeeds_with_the_last_value_or_fails_without_one() {
        let curve = [loss(Some(1), 3.0), loss(None, 2.0)];
        assert_eq!(
            verdict(WorkerEnd::Exited(0), &curve, None),
            Verdict::Final(TrialState::Succeeded, Some(2.0), None)
        );
        assert_eq!(
            verdict(WorkerEnd::Exited(0), &curve[..1], None),
            Verdict::Final(TrialState::Succeeded, Some(3.0), None)
        );
        let garbled = WorkerOutcome {
            unreadable: Some("the worker reported loss=0.5abc, which is not a number".into()),
            ..WorkerOutcome::new(1, WorkerEnd::Exited(0))
        };
        assert_eq!(
            verdict_on(&study(), &[], &garbled, None, false),
            failed("the worker reported loss=0.5abc, which is not a number")
        );
        match verdict(WorkerEnd::Exited(0), &[], None) {
            Verdict::Final(TrialState::Failed, None, Some(e)) => assert!(e.contains("loss"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_worker_out_of_device_memory_fails_and_is_not_retried() {
        let oom = |end| WorkerOutcome {
            out_of_memory: Some("torch.OutOfMemoryError: CUDA out of memory.".into()),
            ..WorkerOutcome::new(1, end)
        };
        let said = failed(
            "the worker ran out of device memory: torch.OutOfMemoryError: CUDA out of memory.",
        );
        for end in [WorkerEnd::Exited(1), WorkerEnd::killed_by(9)] {
            assert_eq!(verdict_on(&study(), &[], &oom(end), None, false), said);
        }
        // Without the message, a SIGKILL is the machine's and retried.
        assert!(matches!(
            verdict(WorkerEnd::killed_by(9), &[], None),
            Verdict::Retry(_)
        ));
    }

    #[test]
    fn a_worker_that_ended_unwatched_is_judged_by_what_it_reported() {
        assert_eq!(
            verdict(WorkerEnd::Vanished, &[loss(None, 0.5)], None),
            Verdict::Final(TrialState::Succeeded, Some(0.5), None)
        );
        assert!(matches!(
            verdict(WorkerEnd::Vanished, &[loss(Some(1), 0.5)], None),
            Verdict::Retry(_)
        ));
    }

    #[test]
    fn a_kill_from_outside_is_retried_and_a_crash_of_the_worker_fails() {
        assert_eq!(
            verdict(WorkerEnd::Killed("SIGKILL".into()), &[], None),
            Verdict::Retry(
                "the worker was killed by SIGKILL (last output: Traceback: boom)".into()
            )
        );
        assert_eq!(
            verdict(WorkerEnd::Killed("SIGSEGV".into()), &[], None),
            failed("the worker was killed by SIGSEGV (last output: Traceback: boom)")
        );
        assert_eq!(
            verdict(WorkerEnd::Exited(3), &[loss(None, 1.0)], None),
            failed("the worker exited with code 3 (last output: Traceback: boom)")
        );
        assert_eq!(
            verdict(WorkerEnd::Preempted("spot".into()), &[], None),
            Verdict::Retry("the job was preempted: spot".into())
        );
    }

    #[test]
    fn a_timeout_fails_with_the_study_s_limit() {
        assert_eq!(
            verdict(
                WorkerEnd::TimedOut(std::time::Duration::from_secs(7)),
                &[],
                None
            ),
            failed("timed out after 1m (trial.timeout) and was terminated")
        );
    }

    #[test]
    fn a_stop_is_an_early_stop_with_the_last_value_or_the_user_s_interrupt() {
        let curve = [loss(Some(1), 3.0), loss(Some(2), 2.5)];
        assert_eq!(
            verdict(WorkerEnd::Stopped, &curve, Some("below the median")),
            Verdict::Final(
                TrialState::Stopped,
                Some(2.5),
                Some("below the median".into())
            )
        );
        assert_eq!(
            verdict(WorkerEnd::Stopped, &curve, None),
            Verdict::Interrupted("the study was interrupted".into())
        );
    }

    #[test]
    fn a_worker_killed_while_the_user_stops_the_study_is_handed_back() {
        let outcome = WorkerOutcome::new(1, WorkerEnd::Killed("SIGTERM".into()));
        assert_eq!(
            verdict_on(&study(), &[], &outcome, None, true),
            Verdict::Interrupted(
                "the study was interrupted (the worker was killed by SIGTERM)".into()
            )
        );
    }

    #[test]
    fn feasibility_takes_each_constrained_metrics_final_value() {
        let yaml = "name: s\nmax_trial_count: 1\nobjective: {metric: loss, goal: minimize}\nparameters:\n  - {id: x, type: double, min: 0, max: 1}\ntrial: {command: [w]}\nconstraints: [{metric: mem, max: 16}]\nfailed_as_infeasible: true\n";
        let study = crate::spec::parse(std::path::Path::new("s.yaml"), yaml).unwrap();
        let mem = |step, value| Measurement {
            step,
            metric: "mem".into(),
            value,
        };
        // The final report wins over a later step's, as for the objective.
        let reported = [mem(Some(1), 20.0), mem(None, 12.0), mem(Some(2), 30.0)];
        let (values, infeasible) = feasibility(&study, TrialState::Succeeded, &reported);
        assert_eq!(values, BTreeMap::from([("mem".to_string(), 12.0)]));
        assert_eq!(infeasible, None);
        let (_, infeasible) = feasibility(&study, TrialState::Succeeded, &[mem(None, 17.0)]);
        assert_eq!(infeasible.as_deref(), Some("mem = 17 breaks mem <= 16"));
        let (_, infeasible) = feasibility(&study, TrialState::Failed, &[]);
        assert!(infeasible.is_some());
        let (values, infeasible) = feasibility(&study, TrialState::Stopped, &[mem(Some(1), 20.0)]);
        assert_eq!((values.len(), infeasible), (1, None));
        // A metric never reported and one reported as NaN are infeasible, each with its reason.
        let (_, infeasible) = feasibility(&study, TrialState::Succeeded, &[]);
        assert_eq!(infeasible.as_deref(), Some("reported no mem (mem <= 16)"));
        let (values, infeasible) =
            feasibility(&study, TrialState::Succeeded, &[mem(Some(3), f64::NAN)]);
        assert!(values.is_empty());
        assert_eq!(
            infeasible.as_deref(),
            Some("the worker reported mem=NaN at step 3 (mem <= 16)")
        );
    }

    #[test]
    fn with_several_objectives_a_trial_records_each_or_fails_saying_which_is_missing() {
        let yaml = "name: s\nmax_trial_count: 1\nobjectives: [{metric: acc, goal: maximize}, {metric: ms, goal: minimize}]\nparameters:\n  - {id: x, type: double, min: 0, max: 1}\ntrial: {command: [w]}\nconstraints: [{metric: mem, max: 16}]\nfailed_as_infeasible: true\n";
        let several = crate::spec::parse(std::path::Path::new("s.yaml"), yaml).unwrap();
        let m = |metric: &str, step, value| Measurement {
            step,
            metric: metric.into(),
            value,
        };
        let end = |state, measurements: &[Measurement]| {
            let value = last_value(measurements, "acc");
            let trial = TrialRecord::for_test(0);
            trial_end(
                &several,
                trial,
                (state, value, None),
                measurements,
                Vec::new(),
            )
            .trial
        };
        let all = [
            m("acc", None, 0.9),
            m("ms", Some(1), 30.0),
            m("ms", None, 12.0),
            m("mem", None, 8.0),
        ];
        let done = end(TrialState::Succeeded, &all);
        assert_eq!((done.state, done.value), (TrialState::Succeeded, Some(0.9)));
        assert_eq!(done.objective_values, vec![0.9, 12.0]);
        assert_eq!(done.infeasible, None);
        // One objective missing, or NaN: the trial fails, infeasible as failed trials are here.
        for reported in [
            &all[..1],
            &[m("acc", None, 0.9), m("ms", None, f64::NAN)][..],
        ] {
            let failed = end(TrialState::Succeeded, reported);
            assert_eq!((failed.state, failed.value), (TrialState::Failed, None));
            let error = failed.error.unwrap();
            assert!(
                error.contains("'ms'") || error.contains("ms=NaN"),
                "{error}"
            );
            assert!(
                error.ends_with("needs a final value of each: acc, ms)"),
                "{error}"
            );
            assert!(failed.objective_values.is_empty() && failed.infeasible.is_some());
        }
        // A stopped trial keeps its last values when it reported each, else none.
        let stopped = end(
            TrialState::Stopped,
            &[m("acc", Some(1), 0.5), m("ms", Some(1), 3.0)],
        );
        assert_eq!(stopped.objective_values, vec![0.5, 3.0]);
        assert!(
            end(TrialState::Stopped, &all[..1])
                .objective_values
                .is_empty()
        );
        // One objective: its value alone, as before.
        let reported = [loss(None, 2.0)];
        let outcome = (TrialState::Succeeded, Some(2.0), None);
        let one = trial_end(
            &study(),
            TrialRecord::for_test(1),
            outcome,
            &reported,
            Vec::new(),
        );
        assert_eq!(one.trial.value, Some(2.0));
        assert!(one.trial.objective_values.is_empty());
    }
}
