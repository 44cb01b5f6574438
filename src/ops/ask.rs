//! `hptune ask`: trials claimed for an ask/tell client, held under a lease, as a controller
//! claims them for its workers.

use std::path::Path;
use std::time::Duration;

use super::OpsError;
use super::run::{refused_warm_start, workers_checked};
use crate::controller::{proposer, read_curves, reclaim_expired_leases, warm_start_prior};
use crate::sampler::{Observation, Sampler};
use crate::storage::{
    Claim, ClaimRules, ClientLease, Enqueue, Holder, Queue, Storage, StorageUrl, StudyRecord,
    StudyView, TrialRecord,
};
use crate::study::Study;
use crate::{sampler, spec};

/// The shortest lease `ask` grants.
const SHORTEST_LEASE: Duration = Duration::from_secs(1);

/// The longest lease `ask` grants (a year): a longer one would be a trial never given back.
const LONGEST_LEASE: Duration = Duration::from_secs(366 * 24 * 3600);

/// What `hptune ask` claimed.
#[derive(Debug, Clone)]
pub struct Asked {
    /// The study as stored.
    pub study: StudyRecord,
    /// The trials claimed, running under the client's lease, in order (at least one).
    pub trials: Vec<TrialRecord>,
}

/// Claims up to `count` trials of the study of the study file `path` (created in the
/// database at `url` if it is new, with the checks of `hptune run`) for a client, each held
/// under a lease of `lease`: trials handed back first, then enqueued ones, then new ones the
/// sampler proposes, under the study's lock. Fails when none can be claimed, saying why
/// ([`OpsError::NoneLeft`] when the study has no more trials to give, [`OpsError::AllLeased`]
/// when clients hold `parallel_trial_count` trials).
pub async fn ask(
    path: &Path,
    url: &StorageUrl,
    count: usize,
    lease: Duration,
) -> Result<Asked, OpsError> {
    checked_claim(count, lease)?;
    let study = checked_study(path, url)?;
    let storage = Storage::open(url).await?;
    let asked = match Asker::opened(path, study, storage.clone()).await {
        Ok(mut asker) => asker.ask(count, lease).await,
        Err(e) => Err(e),
    };
    storage.close().await;
    asked
}

/// A study opened for asking, over many `ask`s (`hptune session`): the study file read and
/// checked, the study created or found, its sampler and warm-start prior made, and its
/// trials as last read, once; each [`Asker::ask`] then reads only what changed since.
pub struct Asker {
    /// The study file's study.
    study: Study,
    /// The study as stored.
    record: StudyRecord,
    /// Its sampler, kept between asks (a proposal depends on the study's seed, the trial's
    /// number and the trials, not on the proposals before it).
    sampler: Box<dyn Sampler>,
    /// The warm start's observations.
    prior: Vec<Observation>,
    /// The database.
    storage: Storage,
    /// The study's trials as last read.
    view: StudyView,
}

impl Asker {
    /// Opens the study of the study file `path` in `storage` for asking (`hptune ask`'s
    /// checks, the study created if it is new, its `initial_trials` enqueued once).
    pub async fn open(path: &Path, url: &StorageUrl, storage: Storage) -> Result<Self, OpsError> {
        let study = checked_study(path, url)?;
        Self::opened(path, study, storage).await
    }

    /// [`Asker::open`] with the study file read and checked already.
    async fn opened(path: &Path, study: Study, storage: Storage) -> Result<Self, OpsError> {
        let sampler = sampler::for_study(&study)
            .map_err(|e| OpsError::BadInput(format!("{}: {e}", path.display())))?;
        let prior = warm_start_prior(&study, &storage)
            .await
            .map_err(|e| refused_warm_start(path, e))?;
        let record = storage.ensure_study(&study).await?;
        storage
            .enqueue(record.id, &study.initial_trials, Enqueue::Initial)
            .await?;
        // A sampler that reads no history is proposed to from the unfinished trials alone,
        // the finished ones counted: the ask of a random search costs the same at any size.
        let view = match sampler.reads_history() {
            true => StudyView::new(record.id, study.objective.goal),
            false => StudyView::counting(record.id, study.objective.goal),
        };
        Ok(Self {
            study,
            record,
            sampler,
            prior,
            storage,
            view,
        })
    }

    /// Claims up to `count` trials, each held under a lease of `lease`, as [`ask`] does.
    pub async fn ask(&mut self, count: usize, lease: Duration) -> Result<Asked, OpsError> {
        checked_claim(count, lease)?;
        let (study, storage, view) = (&self.study, &self.storage, &mut self.view);
        let study_id = self.record.id;
        reclaim_expired_leases(study, storage, study_id).await?;
        // Each claim reads what changed in the study since the view was read, under the
        // study's lock: the first claim reads the study there, in the claim's transaction
        // (every trial, or the unfinished ones and the finished counted).
        let holder = Holder::client(ClientLease {
            length: lease,
            at_most: study.parallel_trial_count,
        });
        let rules = ClaimRules {
            budget: study.budget,
            queue: Queue::RunFirst,
        };
        let mut trials = Vec::new();
        let mut why = None;
        while trials.len() < count && why.is_none() {
            let curves = read_curves(study, storage, study_id)
                .await
                .map_err(crate::controller::ControllerError::from)?;
            let propose = proposer(
                study,
                &self.prior,
                study.parallel_trial_count,
                self.sampler.as_mut(),
                &curves,
            );
            let claims = storage
                .claim_trials(
                    view,
                    rules,
                    holder,
                    count - trials.len(),
                    &mut Vec::new(),
                    propose,
                )
                .await
                .map_err(crate::controller::ControllerError::from)?;
            for claim in claims {
                match claim {
                    Claim::Started(trial) => trials.push(*trial),
                    other => why = Some(other),
                }
            }
        }
        match why {
            Some(why) if trials.is_empty() => Err(nothing_to_claim(study, view, why)),
            _ => Ok(Asked {
                study: self.record.clone(),
                trials,
            }),
        }
    }
}

/// Checks the flags of a claim: `count` at least 1, `lease` within its bounds.
fn checked_claim(count: usize, lease: Duration) -> Result<(), OpsError> {
    if count == 0 {
        return Err(OpsError::BadInput("--count: at least 1".into()));
    }
    if !(SHORTEST_LEASE..=LONGEST_LEASE).contains(&lease) {
        return Err(OpsError::BadInput(format!(
            "--lease {}: from {} to {}",
            humantime::format_duration(lease),
            humantime::format_duration(SHORTEST_LEASE),
            humantime::format_duration(LONGEST_LEASE)
        )));
    }
    Ok(())
}

/// The study file `path` read, and checked as for a run when it names a worker (a study
/// only clients drive has none).
fn checked_study(path: &Path, url: &StorageUrl) -> Result<Study, OpsError> {
    let study = spec::load(path)?;
    match study.trial.has_worker() {
        true => workers_checked(study, path, url, None),
        false => Ok(study),
    }
}

/// Why a claim that started no trial, `why`, gave the client nothing.
fn nothing_to_claim(study: &Study, view: &StudyView, why: Claim) -> OpsError {
    let name = &study.name;
    let running = view.count(crate::storage::TrialState::Running);
    match why {
        Claim::AllLeased => OpsError::AllLeased(format!(
            "study '{name}': clients hold {} trials, its parallel_trial_count: tell a result (or let a lease end) before asking again",
            study.parallel_trial_count
        )),
        Claim::TooManyFailures => OpsError::NoneLeft(format!(
            "study '{name}': {} trials failed (max_failed_trial_count {}): no more trials",
            view.count(crate::storage::TrialState::Failed),
            study.budget.max_failed_trial_count
        )),
        Claim::Exhausted => OpsError::NoneLeft(format!(
            "study '{name}': the sampler has nothing left to propose (every grid point was tried)"
        )),
        Claim::BudgetSpent | Claim::Started(_) => OpsError::NoneLeft(format!(
            "study '{name}': its budget of {} trials is spent ({running} still running; a trial whose lease ends without a result comes back)",
            study.budget.max_trial_count.unwrap_or_default()
        )),
    }
}
