//! Following a study from outside, as the dashboard does while a controller runs it: its
//! trials, the attempts and learning curves of its newest and unfinished ones, read again
//! only for the rows that may have changed (those of trials that were unfinished when last
//! read, and new ones), and a revision number that grows whenever something did change.

use std::collections::BTreeMap;

use sqlx::Row;

use super::best::result_value;
use super::rows::{AttemptRecord, MeasurementRecord, StudyOverview, StudyRecord, attempt_columns};
use super::trials::TrialIds;
use super::{Storage, StorageError, StudyView, TrialRecord, TrialState, query_error};
use crate::study::stopping::Curve;

/// How many of a study's newest trials a follower reads the attempts and learning curves
/// of, besides every unfinished trial's: what the figures of a large study draw (its latest
/// attempts, the curves of its latest trials), so that a page of 100,000 trials does not
/// read 400,000 rows it does not draw. A trial's own attempts are read when it is opened.
pub(super) const DETAILED_TRIALS: usize = 2000;

/// What is known of one study, kept up to date by [`Storage::follow`].
#[derive(Debug, Clone)]
pub(crate) struct StudyFollower {
    /// The study.
    pub study: StudyRecord,
    view: StudyView,
    /// How many of the newest trials have their attempts and curves read.
    detailed: usize,
    /// The number of the oldest trial from which on every trial's attempts and curve are
    /// held (older ones: only the unfinished); 0 when every trial's are.
    details_from: u64,
    attempts: BTreeMap<u64, Vec<AttemptRecord>>,
    curves: BTreeMap<u64, Curve>,
    /// For each trial, the revision at which it (its row, attempts or curve) last changed.
    changed_at: BTreeMap<u64, u64>,
    revision: u64,
}

impl StudyFollower {
    /// A follower of `study` that has read nothing yet.
    pub(crate) fn new(study: StudyRecord) -> Self {
        let view = StudyView::new(study.id, study.goal);
        Self {
            study,
            view,
            detailed: DETAILED_TRIALS,
            details_from: 0,
            attempts: BTreeMap::new(),
            curves: BTreeMap::new(),
            changed_at: BTreeMap::new(),
            revision: 0,
        }
    }

    /// Grows each time a read finds something changed; 0 before the first read.
    pub(crate) fn revision(&self) -> u64 {
        self.revision
    }

    /// Every trial, by number.
    pub(crate) fn trials(&self) -> impl Iterator<Item = &TrialRecord> {
        self.view.trials()
    }

    /// How many trials are in `state`.
    pub(crate) fn count(&self, state: TrialState) -> usize {
        self.view.count(state)
    }

    /// The number and value of the best succeeded feasible trial.
    pub(crate) fn best(&self) -> Option<(u64, f64)> {
        self.view.best()
    }

    /// The trials that changed after revision `since`, by number.
    pub(crate) fn changed_since(&self, since: u64) -> impl Iterator<Item = &TrialRecord> {
        self.view
            .trials()
            .filter(move |t| self.changed_at.get(&t.number).is_some_and(|r| *r > since))
    }

    /// The trial numbered `number`.
    pub(crate) fn trial(&self, number: u64) -> Option<&TrialRecord> {
        self.view.trial(number)
    }

    /// The attempts held ([`StudyFollower::details_from`] says whose), by trial number and
    /// attempt.
    pub(crate) fn all_attempts(&self) -> impl Iterator<Item = &AttemptRecord> {
        self.attempts.values().flatten()
    }

    /// The learning curves held (objective values with a step, current attempt), by number.
    pub(crate) fn curves(&self) -> impl Iterator<Item = &Curve> {
        self.curves.values()
    }

    /// `None` when the attempts and curves of every trial are held; else the number of the
    /// oldest trial from which on they are (and, before it, only the unfinished trials').
    pub(crate) fn details_from(&self) -> Option<u64> {
        (self.details_from > 0).then_some(self.details_from)
    }
}

#[cfg(test)]
impl StudyFollower {
    /// A follower that has read `trials`, their `attempts` and `curves`, for unit tests of
    /// what is drawn from it.
    pub(crate) fn for_test(
        study: StudyRecord,
        trials: Vec<TrialRecord>,
        attempts: Vec<AttemptRecord>,
        curves: Vec<Curve>,
    ) -> Self {
        let mut follower = Self::new(study);
        for trial in trials {
            follower.view.update(trial);
        }
        for attempt in attempts {
            follower
                .attempts
                .entry(attempt.number)
                .or_default()
                .push(attempt);
        }
        for curve in curves {
            follower.curves.insert(curve.number, curve);
        }
        follower.revision = 1;
        follower
    }
}

impl Storage {
    /// Brings `follower` up to date: reads the rows of the trials that may have changed since
    /// the last call (all of them the first time), and the attempts and learning curves of
    /// those among them that are unfinished, were unfinished, or are among the
    /// [`DETAILED_TRIALS`] newest.
    pub(crate) async fn follow(&self, follower: &mut StudyFollower) -> Result<(), StorageError> {
        let since = follower.view.first_changed_id();
        let first_new = follower.view.newest_id() + 1;
        let before: BTreeMap<u64, TrialRecord> = follower
            .view
            .trials()
            .filter(|t| t.id >= since)
            .map(|t| (t.number, t.clone()))
            .collect();
        self.refresh(&mut follower.view).await?;
        let newest = follower.view.nth_newest_id(follower.detailed);
        let from = newest.max(since);
        let unfinished = |t: &TrialRecord| !t.state.is_finished() && t.id < from;
        let mut also: Vec<i64> = before
            .values()
            .filter(|t| unfinished(t))
            .map(|t| t.id)
            .collect();
        also.extend(
            follower
                .view
                .unfinished_trials()
                .filter(|t| unfinished(t))
                .map(|t| t.id),
        );
        also.sort_unstable();
        also.dedup();
        let ids = TrialIds { from, also };
        let attempts = self.attempts_of(follower.study.id, &ids).await?;
        let curves = self
            .curves_of(follower.study.id, &follower.study.metric, &ids)
            .await?;
        // New trials older than the newest ones were not read in detail: from now on only
        // the trials from the oldest of those read are held whole.
        if from > first_new
            && let Some(oldest) = follower.view.trials().find(|t| t.id >= from)
        {
            follower.details_from = follower.details_from.max(oldest.number);
        }
        let next = follower.revision + 1;
        let mut changed = Vec::new();
        for trial in follower.view.trials().filter(|t| t.id >= since) {
            if before.get(&trial.number) != Some(trial) {
                changed.push(trial.number);
            }
        }
        let mut grouped: BTreeMap<u64, Vec<AttemptRecord>> = BTreeMap::new();
        for attempt in attempts {
            grouped.entry(attempt.number).or_default().push(attempt);
        }
        for (number, list) in grouped {
            if follower.attempts.get(&number) != Some(&list) {
                follower.attempts.insert(number, list);
                changed.push(number);
            }
        }
        for curve in curves {
            if follower.curves.get(&curve.number) != Some(&curve) {
                changed.push(curve.number);
                follower.curves.insert(curve.number, curve);
            }
        }
        if !changed.is_empty() || follower.revision == 0 {
            follower.revision = next;
            for number in changed {
                follower.changed_at.insert(number, next);
            }
        }
        Ok(())
    }

    /// The attempts of the study's trials that `ids` picks.
    async fn attempts_of(
        &self,
        study_id: i64,
        ids: &TrialIds,
    ) -> Result<Vec<AttemptRecord>, StorageError> {
        let sql = format!(
            "SELECT {} FROM attempts a JOIN trials t ON t.id = a.trial_id
             WHERE {} = $1 AND {} ORDER BY t.number, a.attempt",
            attempt_columns!(),
            ids.study_column(),
            ids.condition("a.trial_id")
        );
        let rows = sqlx::query(&sql)
            .bind(study_id)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("reading attempts"))?;
        rows.iter().map(AttemptRecord::from_row).collect()
    }

    /// Every measurement of trial `trial_id`, every attempt's, in the order recorded.
    pub(crate) async fn trial_measurements(
        &self,
        trial_id: i64,
    ) -> Result<Vec<MeasurementRecord>, StorageError> {
        let rows = sqlx::query(
            "SELECT attempt, step, metric, value, recorded_at FROM measurements WHERE trial_id = $1 ORDER BY id",
        )
        .bind(trial_id)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading measurements"))?;
        let corrupt = super::rows::corrupt;
        rows.iter()
            .map(|row| {
                let attempt: i64 = row.try_get("attempt").map_err(corrupt)?;
                Ok(MeasurementRecord {
                    attempt: attempt as u32,
                    step: row.try_get("step").map_err(corrupt)?,
                    metric: row.try_get("metric").map_err(corrupt)?,
                    value: row.try_get("value").map_err(corrupt)?,
                    recorded_at: row.try_get("recorded_at").map_err(corrupt)?,
                })
            })
            .collect()
    }

    /// Every study with its trials counted by state, its best value and last activity,
    /// counted by the database.
    pub(crate) async fn study_overviews(&self) -> Result<Vec<StudyOverview>, StorageError> {
        let studies = self.study_records().await?;
        let counts = sqlx::query(concat!(
            "SELECT study_id, state, COUNT(*) AS n, MIN(",
            result_value!(),
            ") AS low, MAX(",
            result_value!(),
            ") AS high, MAX(COALESCE(finished_at, started_at, created_at)) AS last
                 FROM trials GROUP BY study_id, state"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("counting trials"))?;
        let corrupt = super::rows::corrupt;
        let mut overviews = Vec::with_capacity(studies.len());
        for study in studies {
            let mut overview = StudyOverview {
                study,
                counts: [0; 5],
                best: None,
                last_activity: None,
            };
            for count in &counts {
                let study_id: i64 = count.try_get("study_id").map_err(corrupt)?;
                if study_id != overview.study.id {
                    continue;
                }
                let state: String = count.try_get("state").map_err(corrupt)?;
                let state: TrialState = state.parse().map_err(StorageError::Corrupt)?;
                let n: i64 = count.try_get("n").map_err(corrupt)?;
                let index = TrialState::ALL.iter().position(|s| *s == state);
                overview.counts[index.unwrap_or(0)] = n as usize;
                let last: Option<String> = count.try_get("last").map_err(corrupt)?;
                overview.last_activity = overview.last_activity.max(last);
                // Only the succeeded trials' group has results.
                let best: Option<f64> = match overview.study.goal {
                    crate::study::Goal::Minimize => count.try_get("low"),
                    crate::study::Goal::Maximize => count.try_get("high"),
                }
                .map_err(corrupt)?;
                overview.best = overview.best.or(best);
            }
            overviews.push(overview);
        }
        Ok(overviews)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Measurement;
    use crate::storage::Holder;
    use crate::storage::{Claim, ClaimRules, Queue};
    use crate::study::Budget;

    #[tokio::test]
    async fn a_follower_reads_again_only_what_changed_and_counts_revisions() {
        let (_dir, storage, id) = crate::storage::test_study(10).await;
        let study = storage.find_study("s").await.unwrap().unwrap();
        let mut follower = StudyFollower::new(study);
        storage.follow(&mut follower).await.unwrap();
        assert_eq!(follower.revision(), 1);
        assert_eq!(follower.trials().count(), 0);
        let mut view = StudyView::new(id, crate::study::Goal::Minimize);
        let claims = storage
            .claim_trials(
                &mut view,
                ClaimRules {
                    budget: Budget {
                        max_trial_count: Some(10),
                        max_failed_trial_count: 10,
                    },
                    queue: Queue::RunFirst,
                },
                Holder::controller("me"),
                2,
                &mut Vec::new(),
                |n, _, _| {
                    Ok::<_, String>(Some(
                        [(
                            "x".to_string(),
                            crate::study::space::ParamValue::Float(n as f64 / 10.0),
                        )]
                        .into(),
                    ))
                },
            )
            .await
            .unwrap();
        let Claim::Started(first) = &claims[0] else {
            panic!("{claims:?}")
        };
        storage.follow(&mut follower).await.unwrap();
        assert_eq!(follower.revision(), 2);
        assert_eq!(follower.changed_since(1).count(), 2);
        assert_eq!(follower.all_attempts().filter(|a| a.number == 0).count(), 1);
        // Nothing changed: the revision stays.
        storage.follow(&mut follower).await.unwrap();
        assert_eq!(follower.revision(), 2);
        let step = Measurement {
            step: Some(1),
            metric: "loss".into(),
            value: 0.5,
        };
        storage.record_measurement(first, &step).await.unwrap();
        storage.follow(&mut follower).await.unwrap();
        assert_eq!(follower.revision(), 3);
        let changed: Vec<u64> = follower.changed_since(2).map(|t| t.number).collect();
        assert_eq!(changed, [0]);
        assert_eq!(follower.curves().next().unwrap().points, [(1, 0.5)]);
    }

    /// Inserts trial `number` of study `study_id` in `state` with one step of its curve (its
    /// attempt opens with it); returns its row id.
    async fn insert_trial(storage: &Storage, study_id: i64, number: i64, state: &str) -> i64 {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO trials (study_id, number, state, params, value, created_at, started_at, attempt)
             VALUES ($1, $2, $3, '{\"x\": 0.5}', 1.0, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', 1)
             RETURNING id",
        )
        .bind(study_id)
        .bind(number)
        .bind(state)
        .fetch_one(&storage.pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO measurements (trial_id, attempt, step, metric, value, recorded_at)
             VALUES ($1, 1, 1, 'loss', 2.0, '2026-01-01T00:00:00Z')",
        )
        .bind(id)
        .execute(&storage.pool)
        .await
        .unwrap();
        id
    }

    #[tokio::test]
    async fn only_the_newest_and_the_unfinished_trials_are_read_in_detail() {
        let (_dir, storage, study_id) = crate::storage::test_study(100).await;
        let mut ids = Vec::new();
        for number in 0..10 {
            let state = if number == 2 { "running" } else { "succeeded" };
            ids.push(insert_trial(&storage, study_id, number, state).await);
        }
        let study = storage.find_study("s").await.unwrap().unwrap();
        let mut follower = StudyFollower::new(study);
        follower.detailed = 4;
        storage.follow(&mut follower).await.unwrap();
        let held = |f: &StudyFollower| {
            let attempts: Vec<u64> = f.all_attempts().map(|a| a.number).collect();
            let curves: Vec<u64> = f.curves().map(|c| c.number).collect();
            assert_eq!(attempts, curves);
            attempts
        };
        assert_eq!(follower.trials().count(), 10);
        assert_eq!(held(&follower), [2, 6, 7, 8, 9]);
        assert_eq!(follower.details_from(), Some(6));
        // The running trial ends and a new one starts: both are read again in detail.
        sqlx::query("UPDATE trials SET state = 'succeeded', finished_at = '2026-01-01T00:01:00Z' WHERE id = $1")
            .bind(ids[2])
            .execute(&storage.pool)
            .await
            .unwrap();
        insert_trial(&storage, study_id, 10, "running").await;
        let revision = follower.revision();
        storage.follow(&mut follower).await.unwrap();
        assert_eq!(held(&follower), [2, 6, 7, 8, 9, 10]);
        let ended = follower.all_attempts().find(|a| a.number == 2).unwrap();
        assert_eq!(ended.outcome.as_deref(), Some("succeeded"));
        let changed: Vec<u64> = follower.changed_since(revision).map(|t| t.number).collect();
        assert_eq!(changed, [2, 10]);
        assert_eq!(follower.details_from(), Some(6));
        // An older trial's attempts are read when asked for.
        assert_eq!(storage.trial_attempts(ids[0]).await.unwrap().len(), 1);
        // A follower that reads every trial in detail says so.
        let mut whole = StudyFollower::new(storage.find_study("s").await.unwrap().unwrap());
        storage.follow(&mut whole).await.unwrap();
        assert_eq!(held(&whole).len(), 11);
        assert_eq!(whole.details_from(), None);
    }
}
