//! What a controller knows of a study's trials, kept up to date from the rows that changed.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sqlx::any::AnyRow;

use super::StorageError;
use super::best::ranking;
use super::rows::{TrialRecord, TrialState};
use crate::sampler::Observation;
use crate::study::Goal;
use crate::study::space::Assignment;

/// What a controller knows of a study's trials, kept up to date incrementally: finished
/// trials never change, so only new rows and unfinished ones are read again, and the counts,
/// the best trial and the unfinished ones are kept as rows come in (every question a
/// controller asks per trial costs the number of running trials, not the number of trials).
/// Enqueued trials are kept apart: a waiting row changes only when a controller takes it,
/// so it is read once and the queue costs a claim nothing ([`super::claim`]).
#[derive(Debug, Clone)]
pub(crate) struct StudyView {
    pub(super) study_id: i64,
    goal: Goal,
    trials: BTreeMap<u64, TrialRecord>,
    history: Vec<Observation>,
    newest_id: i64,
    counts: HashMap<TrialState, usize>,
    /// The unfinished trials that are not enqueued: running, or handed back to wait.
    unfinished: BTreeSet<u64>,
    /// The enqueued trials, waiting to run first.
    queued: BTreeSet<u64>,
    best: Option<(u64, f64)>,
    /// Finished trials counted in `counts` whose rows the view does not hold
    /// ([`Self::count_finished`]), 0 for a view that holds every row.
    counted: usize,
    /// The newest row id among the counted trials: a finished row at or below it that the
    /// view does not hold is one of them.
    counted_through: i64,
    /// The number after the counted trials' highest.
    counted_next: u64,
    /// Whether the view's first read is to count the finished trials rather than read them
    /// ([`Self::counting`]), until it has.
    count_first: bool,
}

/// The finished trials of one state, counted rather than read ([`StudyView::count_finished`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counted {
    /// Their state.
    pub(super) state: TrialState,
    /// How many there are.
    pub(super) trials: usize,
    /// The newest row id among them.
    pub(super) newest_id: i64,
    /// The highest number among them.
    pub(super) highest_number: u64,
}

impl StudyView {
    /// An empty view of a study whose objective has `goal`.
    pub(crate) fn new(study_id: i64, goal: Goal) -> Self {
        Self {
            study_id,
            goal,
            trials: BTreeMap::new(),
            history: Vec::new(),
            newest_id: 0,
            counts: HashMap::new(),
            unfinished: BTreeSet::new(),
            queued: BTreeSet::new(),
            best: None,
            counted: 0,
            counted_through: 0,
            counted_next: 0,
            count_first: false,
        }
    }

    /// An empty view whose first read, wherever it happens (a claim's, under the study's
    /// lock), reads the rows of the unfinished and enqueued trials alone and counts the
    /// finished ones ([`Self::count_finished`]): the view of a claim whose sampler reads no
    /// history.
    pub(crate) fn counting(study_id: i64, goal: Goal) -> Self {
        Self {
            count_first: true,
            ..Self::new(study_id, goal)
        }
    }

    /// Whether the view's next read is its first, counting one ([`Self::counting`]).
    pub(super) fn counts_first(&self) -> bool {
        self.count_first
    }

    /// Counts the study's finished trials, `counted` by state, without holding their rows:
    /// the view of a claim whose sampler reads no history, which then reads the rows of the
    /// unfinished and enqueued trials alone. Such a view has no history and no best trial,
    /// and rows it reads again of trials it counted change nothing. Called on a new view.
    pub(super) fn count_finished(&mut self, counted: &[Counted]) {
        self.count_first = false;
        for c in counted {
            *self.counts.entry(c.state).or_default() += c.trials;
            self.counted += c.trials;
            self.counted_through = self.counted_through.max(c.newest_id);
            self.counted_next = self.counted_next.max(c.highest_number + 1);
        }
        self.newest_id = self.newest_id.max(self.counted_through);
    }

    /// Every trial, by number.
    pub(crate) fn trials(&self) -> impl Iterator<Item = &TrialRecord> {
        self.trials.values()
    }

    /// The trial numbered `number`.
    pub(crate) fn trial(&self, number: u64) -> Option<&TrialRecord> {
        self.trials.get(&number)
    }

    /// Finished trials as samplers see them, by number.
    pub(crate) fn history(&self) -> &[Observation] {
        &self.history
    }

    /// The parameters of the trials started and not finished yet (enqueued trials have not
    /// started).
    pub(crate) fn unfinished_params(&self) -> Vec<Assignment> {
        self.unfinished_trials().map(|t| t.params.clone()).collect()
    }

    /// How many trials are in `state`.
    pub(crate) fn count(&self, state: TrialState) -> usize {
        self.counts.get(&state).copied().unwrap_or(0)
    }

    /// The number and value of the best succeeded feasible trial, if any.
    pub(crate) fn best(&self) -> Option<(u64, f64)> {
        self.best
    }

    /// How many enqueued trials wait to run first.
    pub(crate) fn queued(&self) -> usize {
        self.queued.len()
    }

    /// The enqueued trial to run next: the lowest-numbered one.
    pub(super) fn next_enqueued(&self) -> Option<&TrialRecord> {
        self.queued.first().and_then(|n| self.trials.get(n))
    }

    /// The trials started and not finished yet (running, or handed back to wait).
    pub(super) fn unfinished_trials(&self) -> impl Iterator<Item = &TrialRecord> {
        self.unfinished.iter().filter_map(|n| self.trials.get(n))
    }

    /// The row ids of [`Self::unfinished_trials`].
    pub(super) fn unfinished_ids(&self) -> Vec<i64> {
        self.unfinished_trials().map(|t| t.id).collect()
    }

    /// How many trials the study has.
    pub(super) fn trial_count(&self) -> usize {
        self.trials.len() + self.counted
    }

    /// The number the next trial of the study gets.
    pub(super) fn next_number(&self) -> u64 {
        let held = self.trials.keys().next_back().map_or(0, |n| n + 1);
        held.max(self.counted_next)
    }

    /// The first row id that may have changed since the view was read: the oldest
    /// unfinished or enqueued trial's, or else the first id after the newest seen. Row ids
    /// grow with numbers, so it is the lowest-numbered one's.
    pub(super) fn first_changed_id(&self) -> i64 {
        [self.unfinished.first(), self.queued.first()]
            .into_iter()
            .flatten()
            .filter_map(|n| self.trials.get(n))
            .map(|t| t.id)
            .min()
            .unwrap_or(self.newest_id + 1)
    }

    /// The row id of the newest trial read, 0 before any.
    pub(super) fn newest_id(&self) -> i64 {
        self.newest_id
    }

    /// The row id of the `n`th newest trial (the oldest when there are fewer), 0 if none.
    pub(super) fn nth_newest_id(&self, n: usize) -> i64 {
        let mut trials = self.trials.values();
        let nth = trials.clone().nth_back(n.max(1) - 1);
        nth.or_else(|| trials.next()).map_or(0, |t| t.id)
    }

    /// How many trials of the view have a row id from `since` on, and how many of those
    /// are unfinished. Ids grow with numbers, so only the newest trials are looked at (were
    /// they not to, the count would fall short and a guarded claim would take the lock).
    pub(super) fn rows_since(&self, since: i64) -> (usize, usize) {
        let from = self.trials.values().rev().take_while(|t| t.id >= since);
        from.fold((0, 0), |(rows, unfinished), t| {
            (rows + 1, unfinished + usize::from(!t.state.is_finished()))
        })
    }

    /// Takes in the rows read from the database (new or changed trials).
    pub(super) fn absorb(&mut self, rows: &[AnyRow]) -> Result<(), StorageError> {
        for row in rows {
            self.update(TrialRecord::from_row(row)?);
        }
        Ok(())
    }

    /// Puts the trial as it now is into the view.
    pub(crate) fn update(&mut self, trial: TrialRecord) {
        self.newest_id = self.newest_id.max(trial.id);
        let old = self.trials.get(&trial.number);
        if old.is_none() && trial.state.is_finished() && trial.id <= self.counted_through {
            return; // counted already, and a finished trial never changes
        }
        if let Some(old) = old {
            *self.counts.entry(old.state).or_default() -= 1;
        }
        let newly_finished =
            trial.state.is_finished() && old.is_none_or(|old| !old.state.is_finished());
        *self.counts.entry(trial.state).or_default() += 1;
        self.unfinished.remove(&trial.number);
        self.queued.remove(&trial.number);
        if trial.is_enqueued() {
            self.queued.insert(trial.number);
        } else if !trial.state.is_finished() {
            self.unfinished.insert(trial.number);
        }
        if newly_finished && let Some(observation) = trial.observation() {
            if let Some(v) = trial.result()
                && self
                    .best
                    .is_none_or(|best| ranking(self.goal, (trial.number, v), best).is_lt())
            {
                self.best = Some((trial.number, v));
            }
            let at = self.history.partition_point(|o| o.number < trial.number);
            self.history.insert(at, observation);
        }
        self.trials.insert(trial.number, trial);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(number: u64, state: TrialState, value: Option<f64>) -> TrialRecord {
        TrialRecord::in_state(number, state, value)
    }

    #[test]
    fn the_view_keeps_counts_best_and_unfinished_trials_as_rows_change() {
        let mut view = StudyView::new(1, Goal::Minimize);
        for n in 0..4 {
            view.update(trial(n, TrialState::Running, None));
        }
        assert_eq!(view.count(TrialState::Running), 4);
        assert_eq!(view.first_changed_id(), 100);
        view.update(trial(2, TrialState::Succeeded, Some(3.0)));
        view.update(trial(0, TrialState::Failed, None));
        view.update(trial(3, TrialState::Succeeded, Some(1.5)));
        // A row read again after it finished changes nothing.
        view.update(trial(3, TrialState::Succeeded, Some(1.5)));
        view.update(trial(4, TrialState::Running, None));
        assert_eq!(view.count(TrialState::Running), 2);
        assert_eq!(view.count(TrialState::Succeeded), 2);
        assert_eq!(view.count(TrialState::Failed), 1);
        assert_eq!(view.best(), Some((3, 1.5)));
        assert_eq!(view.unfinished_params().len(), 2);
        assert_eq!(view.first_changed_id(), 101);
        let numbers: Vec<u64> = view.history().iter().map(|o| o.number).collect();
        assert_eq!(numbers, [0, 2, 3]);
        assert_eq!(view.history()[0].value, None);
        view.update(trial(1, TrialState::Stopped, Some(0.5)));
        view.update(trial(4, TrialState::Succeeded, Some(2.0)));
        // A stopped trial's last value is not a result: the best stays trial 3.
        assert_eq!(view.best(), Some((3, 1.5)));
        assert_eq!(view.count(TrialState::Running), 0);
        assert_eq!(view.first_changed_id(), 105);
        assert_eq!(view.next_number(), 5);
    }

    #[test]
    fn a_view_that_counts_the_finished_trials_counts_each_once() {
        let mut view = StudyView::new(1, Goal::Minimize);
        let counted = |state, trials, newest_id, highest_number| Counted {
            state,
            trials,
            newest_id,
            highest_number,
        };
        // Trials 0-4 and 6 finished (rows 100-104, 106), trial 5 (row 105) runs.
        view.count_finished(&[
            counted(TrialState::Succeeded, 5, 106, 6),
            counted(TrialState::Failed, 1, 103, 3),
        ]);
        view.update(trial(5, TrialState::Running, None));
        assert_eq!((view.trial_count(), view.next_number()), (7, 7));
        assert_eq!(view.count(TrialState::Succeeded), 5);
        assert_eq!(view.first_changed_id(), 105);
        // Read again under the lock: the counted rows change nothing, trial 5's end and a
        // new trial count.
        view.update(trial(4, TrialState::Succeeded, Some(1.0)));
        view.update(trial(6, TrialState::Succeeded, Some(2.0)));
        view.update(trial(5, TrialState::Failed, None));
        view.update(trial(7, TrialState::Succeeded, Some(0.5)));
        assert_eq!(view.trial_count(), 8);
        assert_eq!(view.count(TrialState::Succeeded), 6);
        assert_eq!(view.count(TrialState::Failed), 2);
        assert_eq!(view.count(TrialState::Running), 0);
        assert_eq!((view.next_number(), view.best()), (8, Some((7, 0.5))));
        assert_eq!(
            view.history().len(),
            2,
            "trials 5 and 7, read as they finished"
        );
    }

    #[test]
    fn enqueued_trials_wait_apart_from_the_started_ones() {
        let mut view = StudyView::new(1, Goal::Minimize);
        for n in 0..5 {
            view.update(trial(n, TrialState::Pending, None));
        }
        assert_eq!((view.queued(), view.count(TrialState::Pending)), (5, 5));
        assert_eq!(view.next_enqueued().map(|t| t.number), Some(0));
        assert!(view.unfinished_ids().is_empty());
        assert_eq!(view.first_changed_id(), 100);
        // Trial 0 runs, then waits again, handed back (started, no owner): no longer enqueued.
        let mut handed_back = trial(0, TrialState::Running, None);
        view.update(handed_back.clone());
        handed_back.state = TrialState::Pending;
        handed_back.started_at = Some("2026-01-01T00:00:00Z".into());
        view.update(handed_back);
        assert_eq!((view.queued(), view.count(TrialState::Pending)), (4, 5));
        assert_eq!(view.next_enqueued().map(|t| t.number), Some(1));
        assert_eq!(view.unfinished_ids(), [100]);
        assert!(view.unfinished_params().len() == 1);
        view.update(trial(0, TrialState::Succeeded, Some(1.0)));
        view.update(trial(1, TrialState::Failed, None));
        // The oldest enqueued trial's row is the first that may change.
        assert_eq!(view.first_changed_id(), 102);
    }
}
