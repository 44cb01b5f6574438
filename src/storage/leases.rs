//! The trials ask/tell clients hold ([`super::claim::ClientLease`]): those whose lease has
//! ended, and a lease renewed with the intermediate results that renew it.

use super::ends::{finite, insert_measurements};
use super::rows::{TrialRecord, trial_columns};
use super::{Storage, StorageError, now, query_error};
use crate::protocol::Measurement;

/// When a lease of `seconds` that starts (or is renewed) now ends, as stored (UTC, RFC 3339,
/// milliseconds: ordered as text, as [`now`] writes times).
pub(super) fn ends_after(seconds: i64) -> String {
    let end = chrono::Duration::try_seconds(seconds)
        .and_then(|length| chrono::Utc::now().checked_add_signed(length))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
    end.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl Storage {
    /// The study's running trials whose client's lease has ended, by number.
    pub(crate) async fn expired_leases(
        &self,
        study_id: i64,
    ) -> Result<Vec<TrialRecord>, StorageError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE study_id = $1 AND state = 'running' AND lease_expires_at < $2
             ORDER BY number"
        ))
        .bind(study_id)
        .bind(now())
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading ended leases"))?;
        rows.iter().map(TrialRecord::from_row).collect()
    }

    /// Records the `measurements` (intermediate results) of a trial a client holds and renews
    /// its lease for its length, as one step; returns the trial as it now is. Fails with
    /// [`StorageError::TakenOver`], recording nothing, when the lease has ended (or the trial
    /// is no longer the client's running attempt).
    pub(crate) async fn renew_lease(
        &self,
        trial: &TrialRecord,
        measurements: &[Measurement],
    ) -> Result<TrialRecord, StorageError> {
        let doing = "renewing a lease";
        let at = now();
        let seconds = trial.lease_seconds.unwrap_or_default();
        let until = ends_after(i64::try_from(seconds).unwrap_or(i64::MAX));
        let mut tx = self.pool.begin().await.map_err(query_error(doing))?;
        let renewed = sqlx::query(concat!(
            "UPDATE trials SET lease_expires_at = $1, heartbeat_at = $2
             WHERE id = $3 AND owner = $4 AND attempt = $5 AND state = 'running'
               AND lease_expires_at >= $2 RETURNING ",
            trial_columns!()
        ))
        .bind(&until)
        .bind(&at)
        .bind(trial.id)
        .bind(trial.owner.as_deref())
        .bind(i64::from(trial.attempt))
        .fetch_optional(&mut *tx)
        .await
        .map_err(query_error(doing))?;
        let Some(row) = renewed else {
            return Err(StorageError::TakenOver);
        };
        insert_measurements(&mut tx, trial, &finite(measurements), Some(&at), doing).await?;
        tx.commit().await.map_err(query_error(doing))?;
        TrialRecord::from_row(&row)
    }
}
