//! The life of a trial in the database after its claim ([`super::claim`]): its worker, its
//! measurements and heartbeats, its adoption by another controller, its retries.
//!
//! The `attempts` rows follow the trial's row by triggers (migration 0004): inserting a trial
//! or raising its attempt number opens an attempt, finishing the trial closes it. Only a
//! retry, whose outcome is not a trial state, closes its attempt itself.

use super::ends::{finite, insert_measurements};
use super::rows::{
    AttemptRecord, TrialRecord, TrialState, attempt_columns, enqueued, trial_columns,
};
use super::{Storage, StorageError, now, query_error};
use crate::protocol::Measurement;
use crate::study::stopping::Curve;

/// When the next attempt of a retried trial runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextAttempt {
    /// At once, by the controller that retries it.
    Now,
    /// By the next controller of the study that takes it over: the trial waits as `pending`,
    /// with no owner (its controller was interrupted).
    Later,
}

impl Storage {
    /// Records the worker of the trial's current attempt (`trial.worker`), where its log goes
    /// and its model folder (one statement: the attempt's row gets the handle and the folder
    /// when the attempt ends).
    pub(crate) async fn set_worker(&self, trial: &TrialRecord) -> Result<(), StorageError> {
        sqlx::query(
            "UPDATE trials SET worker = $1, log_path = $2, artifact_dir = $3 WHERE id = $4",
        )
        .bind(trial.worker.as_deref())
        .bind(trial.log_path.as_deref().unwrap_or_default())
        .bind(trial.artifact_dir.as_deref())
        .bind(trial.id)
        .execute(&self.pool)
        .await
        .map_err(query_error("recording the worker"))?;
        Ok(())
    }

    /// Records that the trial's current attempt resumed from the checkpoint folder `dir`
    /// (an earlier attempt's, `HPTUNE_RESUME_FROM`).
    pub(crate) async fn set_resumed_from(
        &self,
        trial: &TrialRecord,
        dir: &str,
    ) -> Result<(), StorageError> {
        sqlx::query("UPDATE attempts SET resumed_from = $1 WHERE trial_id = $2 AND attempt = $3")
            .bind(dir)
            .bind(trial.id)
            .bind(i64::from(trial.attempt))
            .execute(&self.pool)
            .await
            .map_err(query_error(
                "recording the checkpoint an attempt resumed from",
            ))?;
        Ok(())
    }

    /// Records the GPUs of the trial's current attempt, and its slot on a GPU it shares,
    /// before its worker starts: a controller that takes the trial over finds the devices its
    /// worker may hold. Fails with [`StorageError::TakenOver`] when the attempt is no longer
    /// this controller's.
    pub(crate) async fn set_gpus(
        &self,
        trial: &TrialRecord,
        gpus: &[String],
        slot: Option<u32>,
    ) -> Result<(), StorageError> {
        let doing = "recording the trial's GPUs";
        let list = gpus.join(",");
        let mut tx = self.pool.begin().await.map_err(query_error(doing))?;
        let set = sqlx::query(
            "UPDATE trials SET gpus = $1, gpu_slot = $5 WHERE id = $2 AND owner = $3 AND attempt = $4 AND state = 'running'",
        )
        .bind(&list)
        .bind(trial.id)
        .bind(trial.owner.as_deref())
        .bind(i64::from(trial.attempt))
        .bind(slot.map(i64::from))
        .execute(&mut *tx)
        .await
        .map_err(query_error(doing))?;
        if set.rows_affected() != 1 {
            return Err(StorageError::TakenOver);
        }
        sqlx::query(
            "UPDATE attempts SET gpus = $1, gpu_slot = $4 WHERE trial_id = $2 AND attempt = $3",
        )
        .bind(&list)
        .bind(trial.id)
        .bind(i64::from(trial.attempt))
        .bind(slot.map(i64::from))
        .execute(&mut *tx)
        .await
        .map_err(query_error(doing))?;
        tx.commit().await.map_err(query_error(doing))
    }

    /// Records one measurement of the trial's current attempt; non-finite values are not
    /// stored (the trial's error says what was reported).
    pub(crate) async fn record_measurement(
        &self,
        trial: &TrialRecord,
        measurement: &Measurement,
    ) -> Result<(), StorageError> {
        if !measurement.value.is_finite() {
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO measurements (trial_id, attempt, step, metric, value, recorded_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(trial.id)
        .bind(trial.attempt as i64)
        .bind(measurement.step)
        .bind(&measurement.metric)
        .bind(measurement.value)
        .bind(now())
        .execute(&self.pool)
        .await
        .map_err(query_error("recording a measurement"))?;
        Ok(())
    }

    /// The measurements of a trial's attempt, in the order they were recorded.
    pub(crate) async fn measurements(
        &self,
        trial_id: i64,
        attempt: u32,
    ) -> Result<Vec<Measurement>, StorageError> {
        let rows = sqlx::query(
            "SELECT step, metric, value FROM measurements WHERE trial_id = $1 AND attempt = $2 ORDER BY id",
        )
        .bind(trial_id)
        .bind(attempt as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading measurements"))?;
        rows.iter().map(super::rows::measurement_from_row).collect()
    }

    /// The learning curves of a study's trials: their current attempt's measurements of
    /// `metric` that have a step.
    pub(crate) async fn curves(
        &self,
        study_id: i64,
        metric: &str,
    ) -> Result<Vec<Curve>, StorageError> {
        self.curves_of(study_id, metric, &TrialIds::from(0)).await
    }

    /// The attempts of trial `trial_id` (row id), first first.
    pub(crate) async fn trial_attempts(
        &self,
        trial_id: i64,
    ) -> Result<Vec<AttemptRecord>, StorageError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            attempt_columns!(),
            " FROM attempts a JOIN trials t ON t.id = a.trial_id WHERE a.trial_id = $1 ORDER BY a.attempt"
        ))
        .bind(trial_id)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading attempts"))?;
        rows.iter().map(AttemptRecord::from_row).collect()
    }

    /// The attempts of the study's trials that resumed from a checkpoint, by trial and
    /// attempt.
    pub(crate) async fn resumed_attempts(
        &self,
        study_id: i64,
    ) -> Result<Vec<AttemptRecord>, StorageError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            attempt_columns!(),
            " FROM attempts a JOIN trials t ON t.id = a.trial_id
             WHERE t.study_id = $1 AND a.resumed_from IS NOT NULL ORDER BY t.number, a.attempt"
        ))
        .bind(study_id)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading resumed attempts"))?;
        rows.iter().map(AttemptRecord::from_row).collect()
    }

    /// Marks the trials this controller runs as alive; returns how many the database still
    /// holds as this controller's running trials.
    pub(crate) async fn heartbeat(&self, owner: &str) -> Result<u64, StorageError> {
        let beat = sqlx::query(
            "UPDATE trials SET heartbeat_at = $1 WHERE owner = $2 AND state = 'running'",
        )
        .bind(now())
        .bind(owner)
        .execute(&self.pool)
        .await
        .map_err(query_error("sending a heartbeat"))?;
        Ok(beat.rows_affected())
    }

    /// Takes over the running trials of a study whose controller is gone (`is_orphan` says so
    /// from the owner and the last heartbeat), and the ones handed back (by an interrupted
    /// controller, or a client's lease that ended); returns them, now owned by `owner`. A
    /// trial a client holds is never taken while its lease runs, whatever its heartbeat. Enqueued trials are not taken here: claims
    /// take them one by one ([`super::enqueue`]).
    pub(crate) async fn adopt_orphans(
        &self,
        study_id: i64,
        owner: &str,
        is_orphan: impl Fn(Option<&str>, Option<&str>) -> bool,
    ) -> Result<Vec<TrialRecord>, StorageError> {
        let doing = "taking over abandoned trials";
        let mut tx = self.lock_study(study_id).await?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            ", heartbeat_at FROM trials WHERE study_id = $1 AND state IN ('pending', 'running')
             AND lease_expires_at IS NULL AND NOT ",
            enqueued!(),
            " ORDER BY number"
        ))
        .bind(study_id)
        .fetch_all(&mut *tx)
        .await
        .map_err(query_error(doing))?;
        let mut adopted = Vec::new();
        for row in &rows {
            let mut trial = TrialRecord::from_row(row)?;
            let heartbeat: Option<String> =
                sqlx::Row::try_get(row, "heartbeat_at").map_err(super::rows::corrupt)?;
            if trial.owner.as_deref() == Some(owner)
                || !is_orphan(trial.owner.as_deref(), heartbeat.as_deref())
            {
                continue;
            }
            let at = now();
            if trial.state == TrialState::Pending {
                // The attempt an interrupted controller handed back begins now.
                sqlx::query(
                    "UPDATE attempts SET owner = $1, started_at = $2 WHERE trial_id = $3 AND attempt = $4",
                )
                .bind(owner)
                .bind(&at)
                .bind(trial.id)
                .bind(i64::from(trial.attempt))
                .execute(&mut *tx)
                .await
                .map_err(query_error(doing))?;
                trial.state = TrialState::Running;
                trial.started_at = Some(at.clone());
            }
            sqlx::query(
                "UPDATE trials SET owner = $1, heartbeat_at = $2, state = 'running',
                 started_at = $3 WHERE id = $4",
            )
            .bind(owner)
            .bind(&at)
            .bind(trial.started_at.as_deref())
            .bind(trial.id)
            .execute(&mut *tx)
            .await
            .map_err(query_error(doing))?;
            trial.owner = Some(owner.to_string());
            adopted.push(trial);
        }
        tx.commit().await.map_err(query_error(doing))?;
        Ok(adopted)
    }

    /// Ends the trial's current attempt with `error`, writing its `unsaved` measurements, and
    /// opens the next one with the same parameters, to run now (`NextAttempt::Now`) or by the
    /// next controller of the study (`NextAttempt::Later`); returns the trial as it now is.
    pub(crate) async fn retry(
        &self,
        trial: &TrialRecord,
        error: &str,
        unsaved: &[Measurement],
        when: NextAttempt,
    ) -> Result<TrialRecord, StorageError> {
        let doing = "starting another attempt";
        let at = now();
        let next = trial.attempt + 1;
        let (state, owner, heartbeat) = match when {
            NextAttempt::Now => (TrialState::Running, trial.owner.clone(), Some(at.clone())),
            NextAttempt::Later => (TrialState::Pending, None, None),
        };
        let mut tx = self.pool.begin().await.map_err(query_error(doing))?;
        // Only while this controller still runs the attempt: another may have taken it over.
        // The next attempt's GPUs are recorded when its worker is about to start.
        let moved_on = sqlx::query(
            "UPDATE trials SET attempt = $1, worker = NULL, started_at = $2, heartbeat_at = $3,
             state = $4, owner = $5, gpus = NULL, gpu_slot = NULL, artifact_dir = NULL,
             lease_expires_at = NULL, lease_seconds = NULL
             WHERE id = $6 AND owner = $7 AND attempt = $8 AND state = 'running'",
        )
        .bind(next as i64)
        .bind(&at)
        .bind(heartbeat)
        .bind(state.as_str())
        .bind(owner.as_deref())
        .bind(trial.id)
        .bind(trial.owner.as_deref())
        .bind(trial.attempt as i64)
        .execute(&mut *tx)
        .await
        .map_err(query_error(doing))?;
        if moved_on.rows_affected() != 1 {
            return Err(StorageError::TakenOver);
        }
        insert_measurements(&mut tx, trial, &finite(unsaved), Some(&at), doing).await?;
        sqlx::query(
            "UPDATE attempts SET finished_at = $1, outcome = 'retried', error = $2, worker = $5,
             artifact_dir = $6 WHERE trial_id = $3 AND attempt = $4",
        )
        .bind(&at)
        .bind(error)
        .bind(trial.id)
        .bind(trial.attempt as i64)
        .bind(trial.worker.as_deref())
        .bind(trial.artifact_dir.as_deref())
        .execute(&mut *tx)
        .await
        .map_err(query_error(doing))?;
        tx.commit().await.map_err(query_error(doing))?;
        let mut retried = trial.clone();
        retried.attempt = next;
        retried.worker = None;
        retried.started_at = Some(at);
        retried.state = state;
        retried.owner = owner;
        retried.gpus = Vec::new();
        retried.gpu_slot = None;
        retried.artifact_dir = None;
        retried.lease_expires_at = None;
        retried.lease_seconds = None;
        Ok(retried)
    }
}

/// Which trials' rows a read takes, by row id: every one from `from` on, and `also` these.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct TrialIds {
    /// The first row id taken whole.
    pub from: i64,
    /// Older row ids taken too.
    pub also: Vec<i64>,
}

impl TrialIds {
    /// Every trial from row id `from` on.
    pub(super) fn from(from: i64) -> Self {
        TrialIds {
            from,
            also: Vec::new(),
        }
    }

    /// The study column `t.study_id` as the condition on it should name it: from a row id
    /// on, `+t.study_id`, so that the database finds the rows by the range of ids (the
    /// newest, a few) rather than walk every trial of the study by the study's index.
    pub(super) fn study_column(&self) -> &'static str {
        if self.from > 0 {
            "+t.study_id"
        } else {
            "t.study_id"
        }
    }

    /// The SQL condition on `column` (a trial row id) that holds for these trials; the ids
    /// are integers written by this code, nothing a user typed.
    pub(super) fn condition(&self, column: &str) -> String {
        if self.also.is_empty() {
            return format!("{column} >= {}", self.from);
        }
        let also: Vec<String> = self.also.iter().map(i64::to_string).collect();
        format!(
            "({column} >= {} OR {column} IN ({}))",
            self.from,
            also.join(", ")
        )
    }
}
