//! The model folders of trials' attempts (`artifacts`): which folders a trial's attempts
//! wrote, that hptune removed them, and the trials whose models are pinned.

use std::collections::BTreeSet;

use sqlx::Row;

use super::rows::TrialRecord;
use super::{Storage, StorageError, now, query_error};

impl Storage {
    /// The model folders recorded with the trial's attempts and not removed yet: those of
    /// its ended attempts, and its current attempt's.
    pub(crate) async fn artifact_dirs(
        &self,
        trial: &TrialRecord,
    ) -> Result<Vec<String>, StorageError> {
        let rows = sqlx::query(
            "SELECT artifact_dir FROM attempts
             WHERE trial_id = $1 AND artifact_dir IS NOT NULL AND artifact_removed_at IS NULL
             ORDER BY attempt",
        )
        .bind(trial.id)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading the trial's model folders"))?;
        let mut dirs: Vec<String> = rows
            .iter()
            .map(|row| row.try_get::<String, _>("artifact_dir"))
            .collect::<Result<_, _>>()
            .map_err(query_error("reading the trial's model folders"))?;
        if let Some(current) = &trial.artifact_dir
            && trial.artifact_removed_at.is_none()
            && !dirs.contains(current)
        {
            dirs.push(current.clone());
        }
        Ok(dirs)
    }

    /// Records that the trial's current model folder and the attempts' folders `removed`
    /// were removed; returns when.
    pub(crate) async fn set_artifacts_removed(
        &self,
        trial: &TrialRecord,
        removed: &[String],
    ) -> Result<String, StorageError> {
        let doing = "recording that the trial's model folders were removed";
        let at = now();
        let mut tx = self.pool.begin().await.map_err(query_error(doing))?;
        sqlx::query("UPDATE trials SET artifact_removed_at = $1 WHERE id = $2")
            .bind(&at)
            .bind(trial.id)
            .execute(&mut *tx)
            .await
            .map_err(query_error(doing))?;
        for dir in removed {
            sqlx::query(
                "UPDATE attempts SET artifact_removed_at = $1
                 WHERE trial_id = $2 AND artifact_dir = $3 AND artifact_removed_at IS NULL",
            )
            .bind(&at)
            .bind(trial.id)
            .bind(dir)
            .execute(&mut *tx)
            .await
            .map_err(query_error(doing))?;
        }
        tx.commit().await.map_err(query_error(doing))?;
        Ok(at)
    }

    /// Pins the models of the study's trials `numbers` (trials that may not exist yet):
    /// `keep_best` never removes them, in this run or a later one. A pin is kept once.
    pub(crate) async fn pin_models(
        &self,
        study_id: i64,
        numbers: &[u64],
    ) -> Result<(), StorageError> {
        let doing = "recording the pinned models";
        let at = now();
        let mut tx = self.pool.begin().await.map_err(query_error(doing))?;
        for number in numbers {
            sqlx::query(
                "INSERT INTO pinned_models (study_id, number, pinned_at) VALUES ($1, $2, $3)
                 ON CONFLICT (study_id, number) DO NOTHING",
            )
            .bind(study_id)
            .bind(*number as i64)
            .bind(&at)
            .execute(&mut *tx)
            .await
            .map_err(query_error(doing))?;
        }
        tx.commit().await.map_err(query_error(doing))?;
        Ok(())
    }

    /// The numbers of the study's trials whose models are pinned.
    pub(crate) async fn pinned_models(&self, study_id: i64) -> Result<BTreeSet<u64>, StorageError> {
        let doing = "reading the pinned models";
        let rows = sqlx::query("SELECT number FROM pinned_models WHERE study_id = $1")
            .bind(study_id)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error(doing))?;
        rows.iter()
            .map(|row| row.try_get::<i64, _>("number").map(|n| n as u64))
            .collect::<Result<_, _>>()
            .map_err(query_error(doing))
    }
}
