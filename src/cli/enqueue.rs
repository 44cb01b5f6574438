//! `hptune enqueue`: a configuration to run first, before the sampler's next proposal.

use std::process::ExitCode;

use hptune::ops;
use hptune::storage::StorageUrl;

use super::Failure;

/// Enqueues the parameters `pairs` in the study named `study` (or of the study file `study`,
/// [`ops::enqueue`]); prints the trial's number.
pub async fn enqueue(
    url: &StorageUrl,
    study: &str,
    pairs: &[(String, String)],
) -> Result<ExitCode, Failure> {
    let (record, trials) = ops::enqueue(url, study, pairs).await?;
    for trial in trials {
        println!(
            "enqueued trial {} of study '{}': it runs before the next proposal",
            trial.number, record.name
        );
    }
    Ok(ExitCode::SUCCESS)
}
