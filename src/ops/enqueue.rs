//! `hptune enqueue`: a configuration to run first, before the sampler's next proposal.

use std::path::Path;

use super::{OpsError, find_study, is_study_file};
use crate::spec;
use crate::storage::{Enqueue, Storage, StorageUrl, StudyRecord, TrialRecord};
use crate::study::space::Space;

/// Enqueues the parameters `pairs` (`ID=VALUE`, `--param`) in the study named `study` (or
/// of the study file `study`, created in the database if it is new, its `initial_trials`
/// enqueued before), checked against its space; returns the study and the trial enqueued.
pub async fn enqueue(
    url: &StorageUrl,
    study: &str,
    pairs: &[(String, String)],
) -> Result<(StudyRecord, Vec<TrialRecord>), OpsError> {
    let storage = Storage::open(url).await?;
    let checked = |space: &Space| {
        space
            .parse_assignment(pairs)
            .map_err(|e| OpsError::BadInput(format!("--param: {e}")))
    };
    let path = Path::new(study);
    // Checked before the study file's study is created: a refusal records nothing.
    let (record, params) = if is_study_file(path) {
        let study = spec::load(path)?;
        let params = checked(&study.space)?;
        let record = storage.ensure_study(&study).await?;
        // The file's own initial_trials come first, as `hptune run` would have enqueued them.
        storage
            .enqueue(record.id, &study.initial_trials, Enqueue::Initial)
            .await?;
        (record, params)
    } else {
        let record = find_study(&storage, study).await?;
        let params = checked(&record.space()?)?;
        (record, params)
    };
    let trials = storage
        .enqueue(record.id, &[params], Enqueue::Always)
        .await?;
    storage.close().await;
    Ok((record, trials))
}
