//! What the relay of a remote job writes about its attempt (PostgreSQL only): the worker's
//! measurements (through [`Storage::record_measurement`]), a heartbeat, and the worker's last
//! line of output; and what the controller reads back of it.

use super::rows::{TrialRecord, trial_columns};
use super::{Storage, StorageError, now, query_error};

impl Storage {
    /// Trial `number` of the study called `study`, as it is now (its current attempt may not be
    /// the one a relay was started for: the caller checks).
    pub(crate) async fn trial_by_number(
        &self,
        study: &str,
        number: u64,
    ) -> Result<Option<TrialRecord>, StorageError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE study_id = (SELECT id FROM studies WHERE name = $1) AND number = $2"
        ))
        .bind(study)
        .bind(number as i64)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("looking up the trial"))?;
        row.as_ref().map(TrialRecord::from_row).transpose()
    }

    /// Marks the trial's current attempt as alive, and keeps the worker's last line of output
    /// when one is given.
    pub(crate) async fn attempt_heartbeat(
        &self,
        trial: &TrialRecord,
        last_output: Option<&str>,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "UPDATE attempts SET heartbeat_at = $1, last_output = COALESCE($2, last_output)
             WHERE trial_id = $3 AND attempt = $4",
        )
        .bind(now())
        .bind(last_output)
        .bind(trial.id)
        .bind(trial.attempt as i64)
        .execute(&self.pool)
        .await
        .map_err(query_error("recording the attempt's heartbeat"))?;
        Ok(())
    }

    /// The worker's last line of output, as the relay of that attempt recorded it.
    pub(crate) async fn attempt_last_output(
        &self,
        trial_id: i64,
        attempt: u32,
    ) -> Result<Option<String>, StorageError> {
        let row: Option<(Option<String>,)> =
            sqlx::query_as("SELECT last_output FROM attempts WHERE trial_id = $1 AND attempt = $2")
                .bind(trial_id)
                .bind(attempt as i64)
                .fetch_optional(&self.pool)
                .await
                .map_err(query_error("reading the attempt's last output"))?;
        Ok(row.and_then(|(line,)| line))
    }
}
