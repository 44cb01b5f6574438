//! What the loop of a study tells whoever shows it to a user: the counts of the study
//! ([`Progress`]) and each thing that happens to a trial ([`RunEvent`]).

use std::cell::RefCell;

use crate::storage::{StudyView, TrialRecord, TrialState};
use crate::study::{Study, pareto};

/// Counts of a study while it runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// Trials in all, when known.
    pub budget: Option<u64>,
    /// Succeeded trials.
    pub succeeded: usize,
    /// Failed trials.
    pub failed: usize,
    /// Stopped trials.
    pub stopped: usize,
    /// Running trials (of every controller of the study), and trials handed back to wait
    /// for the next controller.
    pub running: usize,
    /// Enqueued trials (`initial_trials`, `hptune enqueue`) waiting to run first.
    pub queued: usize,
    /// The best so far: a trial, or with several objectives the Pareto front.
    pub best: Option<Best>,
    /// The GPUs of the pool, when they hold fewer trials at once than
    /// `parallel_trial_count`.
    pub limited_by_gpus: Option<usize>,
}

impl Progress {
    /// Finished trials.
    pub fn done(&self) -> usize {
        self.succeeded + self.failed + self.stopped
    }

    /// The counts of `study`, whose trials `view` holds, of a budget of `budget` trials, the
    /// best from `best`.
    pub(super) fn of(
        study: &Study,
        view: &StudyView,
        budget: Option<u64>,
        best: &BestSoFar,
    ) -> Self {
        Progress {
            budget,
            succeeded: view.count(TrialState::Succeeded),
            failed: view.count(TrialState::Failed),
            stopped: view.count(TrialState::Stopped),
            running: view.count(TrialState::Pending) - view.queued()
                + view.count(TrialState::Running),
            queued: view.queued(),
            best: best.of(study, view),
            limited_by_gpus: None,
        }
    }
}

/// The best of a study so far, as its progress shows it.
#[derive(Debug, Clone, PartialEq)]
pub enum Best {
    /// With one objective: the best succeeded feasible trial.
    Trial {
        /// Its number.
        number: u64,
        /// Its value.
        value: f64,
    },
    /// With several: the Pareto front of the succeeded feasible trials.
    Front {
        /// How many trials it holds.
        trials: usize,
        /// The hypervolume it dominates up to the study's reference point
        /// ([`pareto::reference_point`], as `hptune best` shows it).
        hypervolume: f64,
    },
}

/// The best of a study, worked out again only when the view's history has grown: finished
/// trials never change, and with several objectives the best is the front of every finished
/// trial and its exact hypervolume, which the progress of every event would otherwise
/// recompute.
#[derive(Debug, Default)]
pub(super) struct BestSoFar(RefCell<Option<(usize, Option<Best>)>>);

impl BestSoFar {
    /// The best of `study` among the trials `view` holds ([`Best::of`]).
    fn of(&self, study: &Study, view: &StudyView) -> Option<Best> {
        let finished = view.history().len();
        let mut known = self.0.borrow_mut();
        match &*known {
            Some((seen, best)) if *seen == finished => best.clone(),
            _ => {
                let best = Best::of(study, view);
                *known = Some((finished, best.clone()));
                best
            }
        }
    }
}

impl Best {
    /// The best of `study` among the trials `view` holds; `None` before the first result.
    fn of(study: &Study, view: &StudyView) -> Option<Self> {
        if !study.has_several_objectives() {
            let (number, value) = view.best()?;
            return Some(Self::Trial { number, value });
        }
        let goals: Vec<_> = study.objectives().map(|o| o.goal).collect();
        let results: Vec<&[f64]> = view
            .history()
            .iter()
            .filter(|o| o.feasible)
            .map(|o| o.values.as_slice())
            .collect();
        let on = pareto::front(&results, &goals, |v| Some(*v));
        if on.is_empty() {
            return None;
        }
        let given: Vec<Option<f64>> = study.objectives().map(|o| o.reference_point).collect();
        let points: Vec<&[f64]> = on.iter().map(|&i| results[i]).collect();
        let hypervolume = pareto::reference_point(&results, &goals, &given)
            .map_or(0.0, |r| pareto::hypervolume(&points, &goals, &r));
        Some(Self::Front {
            trials: on.len(),
            hypervolume,
        })
    }
}

/// What the loop tells whoever shows it to a user.
#[derive(Debug, Clone)]
pub enum RunEvent<'a> {
    /// The study exists already: `finished` trials count, and `adopted` trials that a
    /// controller now gone left running are taken over.
    Resumed {
        /// Finished trials of earlier runs.
        finished: usize,
        /// Trials taken over from a controller that is gone.
        adopted: usize,
    },
    /// A trial's worker is starting (or being adopted, or retried).
    TrialStarted {
        /// The trial.
        trial: &'a TrialRecord,
    },
    /// A trial's attempt ended from outside; it runs again.
    TrialRetried {
        /// The trial, with its new attempt number.
        trial: &'a TrialRecord,
        /// Why the attempt ended.
        reason: &'a str,
    },
    /// A trial's worker was stopped because the user stopped the study: the trial waits as
    /// `pending`, with its next attempt, for the next run of the study.
    TrialInterrupted {
        /// The trial, with its new attempt number.
        trial: &'a TrialRecord,
    },
    /// A trial ended.
    TrialFinished {
        /// The trial in its final state.
        trial: &'a TrialRecord,
    },
    /// New trials wait for GPUs of the pool that other processes hold.
    WaitingForGpus,
    /// The user asked to stop; running workers are being stopped, gracefully or (`now`) at
    /// once.
    Stopping {
        /// Whether the workers are killed without waiting out their grace period.
        now: bool,
    },
}

/// Shows a running study (a progress bar, log lines, nothing).
pub trait RunObserver {
    /// Called on each event, with the counts after it.
    fn observe(&mut self, event: RunEvent<'_>, progress: &Progress);
}
