//! Trials whose ask/tell client's lease ended without a result go back to the study, as a
//! vanished worker's trial does: nothing watches the clock, so whichever process touches the
//! study next (a controller, `hptune ask`, `hptune tell`) takes them back.

use super::verdict::feasibility;
use crate::storage::{NextAttempt, Storage, StorageError, TrialEnd, TrialState};
use crate::study::Study;

/// Takes back the trials of `study` (row id `study_id`) whose client's lease has ended: each
/// goes back to the study as an interrupted attempt, its next attempt waiting (handed back)
/// while `max_retries` allows, else it fails. A trial another process took back first is
/// left to it. Returns how many this call took back.
pub async fn reclaim_expired_leases(
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
            let mut end = TrialEnd::now(trial, TrialState::Failed, None, Some(error), Vec::new());
            (end.trial.constraint_values, end.trial.infeasible) =
                feasibility(study, TrialState::Failed, &[]);
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
