//! The trials ask/tell clients hold, judged by the rules of the controller's workers: what a
//! client reports ends the trial as a worker's report would, the study's early-stopping rule
//! judges its intermediate values, and a trial whose lease ended without a result goes back
//! to the study, as a vanished worker's trial does. Nothing watches the clock: whichever
//! process touches the study next (a controller, `hptune ask`, `hptune tell`) takes back the
//! trials whose lease has ended.

use super::verdict::{curve, last_value, trial_end};
use crate::protocol::{Measurement, final_value};
use crate::storage::{NextAttempt, Storage, StorageError, TrialEnd, TrialRecord, TrialState};
use crate::study::Study;
use crate::study::stopping::Curve;

/// How a client ends a trial it holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ClientVerdict {
    /// Its final result: it succeeds with the objective's final value, or fails when that is
    /// missing or not a finite number.
    Final,
    /// It failed, for this reason.
    Failed(String),
    /// The early-stopping rule stopped it, for this reason: its value is the last it reported.
    Stopped(String),
}

/// The end of `trial`, held by a client, as `verdict` says, its attempt having reported
/// `measurements` (all of them), of which `unsaved` are not recorded yet; its objectives and
/// constraints judged as a worker's trial's.
pub(crate) fn client_end(
    study: &Study,
    trial: TrialRecord,
    measurements: &[Measurement],
    unsaved: Vec<Measurement>,
    verdict: ClientVerdict,
) -> TrialEnd {
    let metric = &study.objective.metric;
    let (state, value, error) = match verdict {
        ClientVerdict::Final => match final_value(measurements, metric) {
            Ok(value) => (TrialState::Succeeded, Some(value), None),
            Err(e) => (TrialState::Failed, None, Some(e.to_string())),
        },
        ClientVerdict::Failed(reason) => (TrialState::Failed, None, Some(reason)),
        ClientVerdict::Stopped(reason) => (
            TrialState::Stopped,
            last_value(measurements, metric),
            Some(reason),
        ),
    };
    trial_end(study, trial, (state, value, error), measurements, unsaved)
}

/// Why the study's early-stopping rule stops trial `number`, whose attempt reported
/// `measurements`, given the learning curves of the study's trials (`curves`); `None` to let it
/// go on, or when the study has no rule.
pub(crate) fn early_stop(
    study: &Study,
    number: u64,
    measurements: &[Measurement],
    curves: &[Curve],
) -> Option<String> {
    let own = curve(number, measurements, &study.objective.metric);
    study
        .early_stopping?
        .judge(study.objective.goal, &own, curves)
}

/// Takes back the trials of `study` (row id `study_id`) whose client's lease has ended: each
/// goes back to the study as an interrupted attempt, its next attempt waiting (handed back)
/// while `max_retries` allows, else it fails. A trial another process took back first is
/// left to it. Returns how many this call took back.
pub(crate) async fn reclaim_expired_leases(
    study: &Study,
    storage: &Storage,
    study_id: i64,
) -> Result<usize, StorageError> {
    let mut reclaimed = 0;
    for trial in storage.expired_leases(study_id).await? {
        let reason = format!(
            "the lease of its client ended at {} without a result",
            trial.lease_expires_at.as_deref().unwrap_or("?")
        );
        let taken = if trial.attempt <= study.max_retries {
            storage
                .retry(&trial, &reason, &[], NextAttempt::Later)
                .await
                .map(drop)
        } else {
            let error = format!(
                "{reason}; no retry left (max_retries {})",
                study.max_retries
            );
            let verdict = ClientVerdict::Failed(error);
            let end = client_end(study, trial, &[], Vec::new(), verdict);
            storage.finish_trials(&mut vec![end]).await
        };
        match taken {
            Ok(()) => reclaimed += 1,
            Err(StorageError::TakenOver) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(reclaimed)
}
