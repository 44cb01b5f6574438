//! What each command of the `hptune` binary does, as functions of the library: each takes
//! the command's inputs, opens what it needs (read-only for the commands that only read),
//! does the work and returns what there is to show; none prints. The binary's `cli` parses
//! the flags, calls one of these and prints what it returns, as cargo's commands do over
//! `cargo::ops`.

mod ask;
mod enqueue;
mod plot;
mod read;
mod run;
mod tell;

use std::path::Path;

pub use ask::{Asked, Asker, ask};
pub use enqueue::enqueue;
pub use plot::plot;
pub use read::{
    Best, BestBy, Chosen, Front, Resumption, Resumptions, TrialList, best, best_artifact, studies,
    trials,
};
pub use run::{Prepared, WorkerOptions, prepare_study, prepare_trial};
pub use tell::{Report, Teller, Told, tell};

use crate::controller::ControllerError;
use crate::spec::{self, SpecError};
use crate::storage::{Storage, StorageError, StudyRecord};
use crate::study::Study;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// Bad input found by the command itself: a flag, a study's name, what the study file
    /// asks of this machine; the message says which.
    #[error("{0}")]
    BadInput(String),
    /// The study file.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The database.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The run of the study.
    #[error(transparent)]
    Controller(#[from] ControllerError),
    /// Anything else that stops the command: what it found, or could not write.
    #[error("{0}")]
    Failed(String),
    /// `hptune ask`: clients hold as many of the study's trials as it runs at once.
    #[error("{0}")]
    AllLeased(String),
    /// `hptune ask`: the study gives no more trials (its budget is spent, too many trials
    /// failed, or the grid is exhausted).
    #[error("{0}")]
    NoneLeft(String),
}

/// Whether `path` names a study file rather than a study.
fn is_study_file(path: &Path) -> bool {
    path.is_file() && path.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

/// The study file `record` was last run with, as stored.
fn stored_study(record: &StudyRecord) -> Result<Study, OpsError> {
    let stored = format!("the study file of '{}' as last run", record.name);
    Ok(spec::parse(Path::new(&stored), &record.spec)?)
}

/// The study named `name`, or the study of the study file `name`; an unknown one is bad
/// input that lists the database's studies.
async fn find_study(storage: &Storage, name: &str) -> Result<StudyRecord, OpsError> {
    let path = Path::new(name);
    let name = if is_study_file(path) {
        spec::load_name(path)?
    } else {
        name.to_string()
    };
    if let Some(record) = storage.find_study(&name).await? {
        return Ok(record);
    }
    let known: Vec<String> = storage
        .list_studies()
        .await?
        .into_iter()
        .map(|s| s.study.name)
        .collect();
    Err(OpsError::BadInput(format!(
        "no study named '{name}' in this database (studies: {})",
        if known.is_empty() {
            "none".into()
        } else {
            known.join(", ")
        }
    )))
}
