//! `hptune enqueue`: a configuration to run first, before the sampler's next proposal.

use std::path::Path;
use std::process::ExitCode;

use hptune::spec;
use hptune::storage::{Enqueue, Storage, StorageUrl};
use hptune::study::space::Space;

use super::Failure;
use super::show::{find, is_study_file, stored_space};

/// Enqueues the parameters `pairs` in the study named `study` (or of the study file
/// `study`, created in the database if it is new, its `initial_trials` enqueued before),
/// checked against its space; prints the trial's number.
pub async fn enqueue(
    url: &StorageUrl,
    study: &str,
    pairs: &[(String, String)],
) -> Result<ExitCode, Failure> {
    let storage = Storage::open(url).await?;
    let checked = |space: &Space| {
        space
            .parse_assignment(pairs)
            .map_err(|e| Failure::BadInput(format!("--param: {e}")))
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
        let record = find(&storage, study).await?;
        let params = checked(&stored_space(&record)?)?;
        (record, params)
    };
    let trials = storage
        .enqueue(record.id, &[params], Enqueue::Always)
        .await?;
    storage.close().await;
    for trial in trials {
        println!(
            "enqueued trial {} of study '{}': it runs before the next proposal",
            trial.number, record.name
        );
    }
    Ok(ExitCode::SUCCESS)
}
