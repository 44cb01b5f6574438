//! The trials' model folders (`artifacts`): each attempt of a trial writes its model into a
//! folder of its own, and with `keep_best: K` the folders of the trials that can no longer be
//! among the best K are removed once their rows are final: only folders whose owner file
//! names the trial (see `executor::ModelFolder`), never another's.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use super::Run;
use crate::executor::{StudyMark, owner_of};
use crate::protocol::model_folder;
use crate::storage::{
    StorageError, TrialRecord, TrialState, best_first, pareto_first, pareto_front,
};
use crate::study::{Objective, Study};

/// Where the trials' models go and which are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArtifactPlan {
    /// The folder of the studies' model folders: `<dir>/<study>/trial-<n>[-attempt-<k>]`.
    pub dir: PathBuf,
    /// Keep the models of the best K trials only; `None`: keep every model.
    pub keep_best: Option<NonZeroUsize>,
    /// Trials whose models are kept whatever their rank (`hptune run --keep N`), pinned in
    /// the storage when the run starts, with the study's earlier pins.
    pub pinned: BTreeSet<u64>,
}

/// The folder of the models when neither the study nor `--artifacts-dir` names one: beside the
/// log folder.
pub(crate) const DEFAULT_ARTIFACTS_DIR: &str = "hptune-artifacts";

impl ArtifactPlan {
    /// What the study file says, with the default folder beside `log_dir`.
    pub(crate) fn for_study(study: &Study, log_dir: &Path) -> Self {
        let beside_logs = || {
            log_dir
                .parent()
                .unwrap_or(Path::new(""))
                .join(DEFAULT_ARTIFACTS_DIR)
        };
        Self {
            dir: study.artifacts.dir.clone().unwrap_or_else(beside_logs),
            keep_best: study.artifacts.keep_best,
            pinned: BTreeSet::new(),
        }
    }

    /// The model folder of attempt `attempt` of trial `number` of `study`.
    pub(crate) fn attempt_dir(&self, study: &str, number: u64, attempt: u32) -> PathBuf {
        self.dir.join(model_folder(study, number, attempt))
    }
}

/// Whether a recorded model location is a cloud engine's (`gs://...`, `s3://...`,
/// `pvc://...`) rather than a folder of this machine's filesystem: hptune never deletes those.
pub(crate) fn is_remote(location: &str) -> bool {
    location
        .split_once("://")
        .is_some_and(|(scheme, _)| !scheme.is_empty() && !scheme.contains('/'))
}

/// The trials whose models go with `keep_best`: trials whose rows are final, that are not
/// among the best `keep_best` succeeded ones (a later trial can only push them further down;
/// a failed or stopped trial is never among them), not pinned, and whose folders are still
/// there, on this machine's filesystem ([`is_remote`] models stay). Running and pending
/// trials are never among them. With several `objectives`, the best are the first
/// `keep_best` by Pareto rank, and every trial on the front besides, however many: the front
/// is the study's answer (a trial off it never comes back onto it).
pub(crate) fn doomed<'a>(
    trials: impl Iterator<Item = &'a TrialRecord>,
    objectives: &[Objective],
    keep_best: NonZeroUsize,
    pinned: &BTreeSet<u64>,
) -> Vec<&'a TrialRecord> {
    let trials: Vec<&TrialRecord> = trials.collect();
    let succeeded: Vec<TrialRecord> = trials
        .iter()
        .filter(|t| t.state == TrialState::Succeeded)
        .map(|t| (*t).clone())
        .collect();
    let mut best: BTreeSet<u64> = match objectives {
        [one] => best_first(&succeeded, one.goal, keep_best.get()),
        several => pareto_first(&succeeded, several, keep_best.get()),
    }
    .iter()
    .map(|t| t.number)
    .collect();
    if objectives.len() > 1 {
        best.extend(
            pareto_front(&succeeded, objectives)
                .iter()
                .map(|t| t.number),
        );
    }
    trials
        .into_iter()
        .filter(|t| t.state.is_finished())
        .filter(|t| t.artifact_dir.as_deref().is_some_and(|dir| !is_remote(dir)))
        .filter(|t| t.artifact_removed_at.is_none())
        .filter(|t| !best.contains(&t.number) && !pinned.contains(&t.number))
        .collect()
}

impl Run<'_> {
    /// Records the plan's pins with the study; says which of them come too late, their
    /// models removed already.
    pub(super) async fn pin_models(&self) -> Result<(), StorageError> {
        let pinned = &self.plan.artifacts.pinned;
        if pinned.is_empty() {
            return Ok(());
        }
        let numbers: Vec<u64> = pinned.iter().copied().collect();
        self.storage.pin_models(self.study_id, &numbers).await?;
        for trial in self.view.trials().filter(|t| pinned.contains(&t.number)) {
            if let (Some(dir), Some(at)) = (&trial.artifact_dir, &trial.artifact_removed_at) {
                tracing::warn!(
                    "trial {}: pinned, but its model {dir} was removed at {at}",
                    trial.number
                );
            }
        }
        Ok(())
    }

    /// Removes the model folders of the trials [`doomed`] names (the ends of this controller's
    /// trials are all written by now), sparing the study's pinned ones, and records it with
    /// their rows; only when a trial has ended since the last time.
    pub(super) async fn prune_artifacts(&mut self) -> Result<(), StorageError> {
        let Some(keep_best) = self.plan.artifacts.keep_best else {
            return Ok(());
        };
        let ended = self.view.trials().filter(|t| t.state.is_finished()).count();
        if ended == self.ended_at_pruning {
            return Ok(());
        }
        self.ended_at_pruning = ended;
        let objectives: Vec<Objective> = self.study.objectives().cloned().collect();
        // Read each time: a pin made since by another `hptune run --keep` counts.
        let pinned = self.storage.pinned_models(self.study_id).await?;
        let doomed: Vec<TrialRecord> = doomed(self.view.trials(), &objectives, keep_best, &pinned)
            .into_iter()
            .cloned()
            .collect();
        for mut trial in doomed {
            let mut removed = Vec::new();
            for dir in self.storage.artifact_dirs(&trial).await? {
                if is_remote(&dir) {
                    continue;
                }
                match remove_model(Path::new(&dir), &self.study_mark, trial.number) {
                    Ok(Removal::Removed) => tracing::info!(
                        "trial {}: removed its model {dir} (not among the best {keep_best})",
                        trial.number
                    ),
                    Ok(Removal::Gone) => {}
                    Ok(Removal::NotOurs(found)) => {
                        tracing::warn!(
                            "trial {}: left {dir} alone, although the trial is not among the best {keep_best}: the folder is not this trial's ({found})",
                            trial.number
                        );
                        continue;
                    }
                    Err(e) => {
                        // Kept on record: tried again when the next trial ends.
                        tracing::warn!(
                            "trial {}: cannot remove its model {dir}: {e}",
                            trial.number
                        );
                        return Ok(());
                    }
                }
                removed.push(dir);
            }
            trial.artifact_removed_at =
                Some(self.storage.set_artifacts_removed(&trial, &removed).await?);
            self.view.update(trial);
        }
        Ok(())
    }
}

/// What became of a model folder that `keep_best` removes.
#[derive(Debug, PartialEq, Eq)]
enum Removal {
    /// It was removed.
    Removed,
    /// It was not there.
    Gone,
    /// It is not the trial's: its owner file names another, or it has none (a folder that
    /// hptune did not create, or that predates owner files). Left as it is.
    NotOurs(String),
}

/// Removes the model folder `dir` of trial `number` of `study`, if its owner file says it is
/// one of that trial's attempts'.
fn remove_model(dir: &Path, study: &StudyMark, number: u64) -> std::io::Result<Removal> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Removal::Gone),
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    match owner_of(dir) {
        Ok(owner) if owner.is_of_trial(study, number) => {}
        Ok(owner) => return Ok(Removal::NotOurs(format!("it is {}", owner.describe()))),
        Err(found) => return Ok(Removal::NotOurs(found)),
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(Removal::Removed),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Removal::Gone),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::Goal;

    fn trial(number: u64, state: TrialState, value: Option<f64>) -> TrialRecord {
        TrialRecord {
            artifact_dir: Some(format!("m/trial-{number}")),
            ..TrialRecord::in_state(number, state, value)
        }
    }

    fn numbers(trials: &[TrialRecord], keep: usize, pinned: &[u64]) -> Vec<u64> {
        doomed_of(trials, &[objective("a", Goal::Maximize)], keep, pinned)
    }

    fn doomed_of(
        trials: &[TrialRecord],
        objectives: &[Objective],
        keep: usize,
        pinned: &[u64],
    ) -> Vec<u64> {
        let pinned = pinned.iter().copied().collect();
        let keep = NonZeroUsize::new(keep).unwrap();
        doomed(trials.iter(), objectives, keep, &pinned)
            .iter()
            .map(|t| t.number)
            .collect()
    }

    fn objective(metric: &str, goal: Goal) -> Objective {
        Objective {
            metric: metric.into(),
            goal,
            reference_point: None,
        }
    }

    #[test]
    fn with_several_objectives_the_front_keeps_its_models_whatever_k() {
        // Maximise a, minimise b: 0, 1 and 3 are the front, 2 is dominated by 1 and is the
        // first of the next rank, 4 is dominated by all but itself and infeasible 5 is no
        // result.
        let with = |number, a: f64, b: f64| TrialRecord {
            objective_values: vec![a, b],
            ..trial(number, TrialState::Succeeded, Some(a))
        };
        let mut infeasible = with(5, 0.99, 0.0);
        infeasible.infeasible = Some("mem > 16".into());
        let trials = [
            with(0, 0.9, 30.0),
            with(1, 0.8, 10.0),
            with(2, 0.7, 12.0),
            with(3, 0.6, 5.0),
            with(4, 0.5, 40.0),
            infeasible,
        ];
        let objectives = [
            objective("a", Goal::Maximize),
            objective("b", Goal::Minimize),
        ];
        assert_eq!(doomed_of(&trials, &objectives, 1, &[]), vec![2, 4, 5]);
        assert_eq!(doomed_of(&trials, &objectives, 4, &[]), vec![4, 5]);
        assert_eq!(doomed_of(&trials, &objectives, 4, &[5]), vec![4]);
    }

    #[test]
    fn only_final_trials_outside_the_best_k_lose_their_models() {
        use TrialState::*;
        let trials = [
            trial(0, Succeeded, Some(0.5)),
            trial(1, Succeeded, Some(0.9)),
            trial(2, Running, None),
            trial(3, Failed, None),
            trial(4, Stopped, Some(0.95)),
            trial(5, Succeeded, Some(0.7)),
            trial(6, Pending, None),
        ];
        assert_eq!(numbers(&trials, 2, &[]), vec![0, 3, 4]);
        assert_eq!(numbers(&trials, 2, &[0]), vec![3, 4]);
        assert_eq!(numbers(&trials, 10, &[]), vec![3, 4]);
    }

    #[test]
    fn remote_models_are_never_doomed() {
        let mut remote = trial(0, TrialState::Succeeded, Some(0.1));
        remote.artifact_dir = Some("gs://bucket/hptune/s/trial-0/model".into());
        let local = trial(1, TrialState::Succeeded, Some(0.2));
        let best = trial(2, TrialState::Succeeded, Some(0.9));
        assert_eq!(numbers(&[remote, local, best], 1, &[]), vec![1]);
        for location in [
            "gs://b/p/model",
            "s3://b/p/job/output/model.tar.gz",
            "pvc://models/s/trial-0",
        ] {
            assert!(is_remote(location), "{location}");
        }
        for folder in ["/runs/hptune-artifacts/s/trial-0", "/odd/x://y"] {
            assert!(!is_remote(folder), "{folder}");
        }
    }

    #[test]
    fn removed_models_and_trials_without_one_are_left_alone() {
        let mut removed = trial(0, TrialState::Succeeded, Some(0.1));
        removed.artifact_removed_at = Some("2026-01-01T00:00:00Z".into());
        let mut without = trial(1, TrialState::Failed, None);
        without.artifact_dir = None;
        let best = trial(2, TrialState::Succeeded, Some(0.9));
        assert_eq!(
            numbers(&[removed, without, best], 1, &[]),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn only_a_folder_whose_owner_file_names_the_trial_is_removed() {
        use crate::executor::{FolderOwner, ModelFolder};
        let root = tempfile::tempdir().unwrap();
        let study = |created_at: &str| StudyMark {
            name: "s".into(),
            id: 1,
            created_at: created_at.into(),
        };
        let made_by = |name: &str, study: StudyMark| {
            let folder = ModelFolder {
                path: root.path().join(name),
                owner: FolderOwner {
                    study,
                    trial: 3,
                    attempt: 2,
                },
            };
            folder.create().unwrap();
            folder.path
        };
        let mine = study("2026-01-01T00:00:00.000Z");
        let ours = made_by("ours", mine.clone());
        let theirs = made_by("theirs", study("2026-02-02T00:00:00.000Z"));
        let bare = root.path().join("bare");
        std::fs::create_dir(&bare).unwrap();
        assert_eq!(remove_model(&ours, &mine, 3).unwrap(), Removal::Removed);
        assert!(!ours.exists());
        assert_eq!(remove_model(&ours, &mine, 3).unwrap(), Removal::Gone);
        let kept = |dir: &Path, number| match remove_model(dir, &mine, number).unwrap() {
            Removal::NotOurs(found) => found,
            other => panic!("{other:?}"),
        };
        assert!(kept(&theirs, 3).contains("created 2026-02-02"));
        assert!(kept(&made_by("other-trial", mine.clone()), 4).contains("it is trial 3"));
        assert!(kept(&bare, 3).contains("no .hptune-owner.json"));
        assert!(theirs.is_dir() && bare.is_dir());
    }

    #[test]
    fn the_default_folder_is_beside_the_logs() {
        let study = crate::spec::parse(
            Path::new("s.yaml"),
            "name: s\nobjective: {metric: a, goal: maximize}\nparameters:\n  - {id: x, type: double, min: 0, max: 1}\nalgorithm: random\nmax_trial_count: 1\ntrial:\n  command: [w]\n",
        )
        .unwrap();
        let plan = ArtifactPlan::for_study(&study, Path::new("/runs/hptune-logs"));
        assert_eq!(
            plan.attempt_dir("s", 3, 2),
            Path::new("/runs/hptune-artifacts/s/trial-3-attempt-2")
        );
        assert_eq!(
            ArtifactPlan::for_study(&study, Path::new("hptune-logs")).attempt_dir("s", 0, 1),
            Path::new("hptune-artifacts/s/trial-0")
        );
    }
}
