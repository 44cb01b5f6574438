//! Configurations to run first (`initial_trials`, `hptune enqueue`): trials inserted as
//! `pending`, with no owner and no start, numbered after the study's last trial. A claim
//! takes the lowest-numbered of them before it asks the sampler for a new trial
//! ([`super::claim`]), under the study's lock, so each runs once however many controllers
//! claim; they count against `max_trial_count` as every trial does, and a crash of the
//! controller running one leaves it to the next controller as any running trial.

use super::rows::{TrialRecord, trial_columns};
use super::{Storage, StorageError, now, query_error};
use crate::study::space::Assignment;

/// Which configurations [`Storage::enqueue`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Enqueue {
    /// Every one (`hptune enqueue`).
    Always,
    /// The study file's `initial_trials`: only the first time the study runs with them.
    Initial,
}

impl Storage {
    /// Records `configurations` as trials of the study to run first, in order, after any
    /// enqueued before them; returns the trials recorded (none when `when` is
    /// [`Enqueue::Initial`] and they were enqueued before).
    pub(crate) async fn enqueue(
        &self,
        study_id: i64,
        configurations: &[Assignment],
        when: Enqueue,
    ) -> Result<Vec<TrialRecord>, StorageError> {
        if configurations.is_empty() {
            return Ok(Vec::new());
        }
        let doing = "enqueueing trials";
        let mut tx = self.lock_study(study_id).await?;
        if when == Enqueue::Initial {
            let marked = sqlx::query(
                "UPDATE studies SET initial_trials_enqueued_at = $1
                 WHERE id = $2 AND initial_trials_enqueued_at IS NULL",
            )
            .bind(now())
            .bind(study_id)
            .execute(&mut *tx)
            .await
            .map_err(query_error(doing))?;
            if marked.rows_affected() == 0 {
                return Ok(Vec::new());
            }
        }
        let next: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(number) + 1, 0) FROM trials WHERE study_id = $1",
        )
        .bind(study_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(query_error(doing))?;
        let mut trials = Vec::with_capacity(configurations.len());
        for (i, params) in configurations.iter().enumerate() {
            let row = sqlx::query(concat!(
                "INSERT INTO trials (study_id, number, state, params, created_at, attempt)
                 VALUES ($1, $2, 'pending', $3, $4, 1) RETURNING ",
                trial_columns!()
            ))
            .bind(study_id)
            .bind(next + i as i64)
            .bind(super::claim::params_json(params))
            .bind(now())
            .fetch_one(&mut *tx)
            .await
            .map_err(query_error(doing))?;
            trials.push(TrialRecord::from_row(&row)?);
        }
        tx.commit().await.map_err(query_error(doing))?;
        Ok(trials)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Holder;
    use crate::storage::{Claim, ClaimRules, Queue, StorageUrl, StudyView};
    use crate::study::Budget;
    use crate::study::Goal;
    use crate::study::space::ParamValue;

    fn at(x: f64) -> Assignment {
        [("x".to_string(), ParamValue::Float(x))].into()
    }

    /// Claims for `owner` on its own connection until the budget is spent; returns the trials
    /// it started. Its proposals are x = 0.9, made only once no enqueued trial waits.
    async fn claim_all(url: StorageUrl, id: i64, owner: String) -> Vec<TrialRecord> {
        let storage = Storage::open(&url).await.unwrap();
        let mut view = StudyView::new(id, Goal::Minimize);
        let budget = ClaimRules {
            budget: Budget {
                max_trial_count: Some(6),
                max_failed_trial_count: 1,
            },
            queue: Queue::RunFirst,
        };
        let mut started = Vec::new();
        loop {
            let claims = storage
                .claim_trials(
                    &mut view,
                    budget,
                    Holder::controller(&owner),
                    2,
                    &mut Vec::new(),
                    |_, view, _| {
                        assert!(
                            view.next_enqueued().is_none(),
                            "a proposal before the queue"
                        );
                        Ok::<_, ()>(Some(at(0.9)))
                    },
                )
                .await
                .unwrap();
            for claim in claims {
                match claim {
                    Claim::Started(trial) => started.push(*trial),
                    Claim::BudgetSpent => return started,
                    other => panic!("{other:?}"),
                }
            }
        }
    }

    #[tokio::test]
    async fn enqueued_trials_run_first_in_order_once_under_parallel_claims() {
        let (dir, storage, id) = crate::storage::test_study(6).await;
        let queue = [at(0.1), at(0.2), at(0.3)];
        let enqueued = storage.enqueue(id, &queue, Enqueue::Initial).await.unwrap();
        let numbers: Vec<u64> = enqueued.iter().map(|t| t.number).collect();
        assert_eq!(numbers, [0, 1, 2]);
        assert!(enqueued.iter().all(TrialRecord::is_enqueued));
        // The study file's initial trials are enqueued once, however many runs start.
        assert!(
            storage
                .enqueue(id, &queue, Enqueue::Initial)
                .await
                .unwrap()
                .is_empty()
        );
        // A waiting trial is not a dead controller's: it is not adopted.
        let adopted = storage.adopt_orphans(id, "x", |_, _| true).await.unwrap();
        assert!(adopted.is_empty(), "{adopted:?}");
        // Four controllers, each on its own connection, claim at once.
        let url =
            StorageUrl::parse(&format!("sqlite://{}", dir.path().join("t.db").display())).unwrap();
        let controllers: Vec<_> = (0..4)
            .map(|c| tokio::spawn(claim_all(url.clone(), id, format!("controller-{c}"))))
            .collect();
        let mut started = Vec::new();
        for controller in controllers {
            started.extend(controller.await.unwrap());
        }
        started.sort_by_key(|t| t.number);
        let numbers: Vec<u64> = started.iter().map(|t| t.number).collect();
        assert_eq!(numbers, [0, 1, 2, 3, 4, 5], "each trial started once");
        let xs: Vec<f64> = started
            .iter()
            .map(|t| t.params["x"].as_f64().unwrap())
            .collect();
        assert_eq!(xs, [0.1, 0.2, 0.3, 0.9, 0.9, 0.9]);
        // A controller that dies leaves its enqueued trial to the next one, as any trial: it
        // is adopted (the same trial, not a new one), never claimed again.
        let adopted = storage
            .adopt_orphans(id, "next", |_, _| true)
            .await
            .unwrap();
        assert_eq!(adopted.len(), 6);
        let rows = storage.trials(id).await.unwrap();
        assert_eq!(rows.len(), 6);
        assert!(
            rows.iter()
                .all(|t| t.state == crate::storage::TrialState::Running)
        );
        let attempts: Vec<u32> = rows.iter().map(|t| t.attempt).collect();
        assert_eq!(attempts, [1; 6]);
    }

    #[tokio::test]
    async fn enqueued_trials_wait_for_a_run_and_count_against_its_budget() {
        let (_dir, storage, id) = crate::storage::test_study(2).await;
        storage
            .enqueue(id, &[at(0.1), at(0.2), at(0.3)], Enqueue::Always)
            .await
            .unwrap();
        let mut view = StudyView::new(id, Goal::Minimize);
        // A trial run by hand runs its own parameters, not the queue's.
        let by_hand = ClaimRules {
            budget: Budget {
                max_trial_count: None,
                max_failed_trial_count: 1,
            },
            queue: Queue::Leave,
        };
        let claims = storage
            .claim_trials(
                &mut view,
                by_hand,
                Holder::controller("me"),
                1,
                &mut Vec::new(),
                |_, _, _| Ok::<_, ()>(Some(at(0.7))),
            )
            .await
            .unwrap();
        let [Claim::Started(trial)] = &claims[..] else {
            panic!("{claims:?}")
        };
        assert_eq!((trial.number, trial.params["x"].as_f64()), (3, Some(0.7)));
        // The study's budget of 2 is spent by the trials already there, yet the queue runs.
        let budget = ClaimRules {
            budget: Budget {
                max_trial_count: Some(2),
                ..by_hand.budget
            },
            queue: Queue::RunFirst,
        };
        let mut numbers = Vec::new();
        loop {
            let claims = storage
                .claim_trials(
                    &mut view,
                    budget,
                    Holder::controller("me"),
                    1,
                    &mut Vec::new(),
                    |_, _, _| Ok::<_, ()>(Some(at(0.9))),
                )
                .await
                .unwrap();
            match &claims[..] {
                [Claim::Started(trial)] => numbers.push(trial.number),
                [Claim::BudgetSpent] => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(numbers, [0, 1, 2]);
    }
}
