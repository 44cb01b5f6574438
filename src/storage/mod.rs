//! Everything recorded about studies, trials and measurements.
//!
//! One database holds every study. SQLite in WAL mode is the embedded default; the schema is
//! created by embedded migrations; every query is parameterised. The controller is the only
//! writer of a SQLite database: workers report through files and stdout.

mod rows;
mod url;

use chrono::{SecondsFormat, Utc};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Executor, Row};

use crate::report::Measurement;
use crate::space::Assignment;
use crate::spec::{Goal, Study};
use rows::trial_columns;
pub use rows::{StudyRecord, StudySummary, TrialRecord, TrialState};
pub use url::{DEFAULT_STORAGE, StorageUrl};

/// Why the database could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The URL is not one we can open.
    #[error("{0}")]
    BadUrl(String),
    /// Opening or migrating the database failed.
    #[error("cannot open the database {url}: {source}")]
    Open {
        /// The database, without credentials.
        url: String,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// A query failed.
    #[error("database error while {doing}: {source}")]
    Query {
        /// What was being done.
        doing: &'static str,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// A stored row does not read back.
    #[error(
        "the database holds a row that does not read back ({0}); was it written by another tool?"
    )]
    Corrupt(String),
    /// The study already exists with another search space.
    #[error(
        "study '{0}' already exists in this database with a different search space: keep the parameters as they were to continue it, or give the study a new name"
    )]
    SpaceChanged(String),
    /// The study already exists with another objective.
    #[error(
        "study '{name}' already exists in this database with objective {was}: keep it to continue the study, or give the study a new name"
    )]
    ObjectiveChanged {
        /// The study.
        name: String,
        /// The recorded objective.
        was: String,
    },
}

fn query_error(doing: &'static str) -> impl FnOnce(sqlx::Error) -> StorageError {
    move |source| StorageError::Query { doing, source }
}

/// The current time as stored: UTC, RFC 3339, milliseconds.
pub fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A handle on the database.
#[derive(Debug, Clone)]
pub struct Storage {
    pool: AnyPool,
}

impl Storage {
    /// Opens (creating it if needed) the database at `url` and brings its schema up to date.
    pub async fn open(url: &StorageUrl) -> Result<Self, StorageError> {
        sqlx::any::install_default_drivers();
        let open_error = |source| StorageError::Open {
            url: url.to_string(),
            source,
        };
        let pool = AnyPoolOptions::new()
            .max_connections(4)
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    conn.execute("PRAGMA journal_mode = WAL").await?;
                    conn.execute("PRAGMA synchronous = NORMAL").await?;
                    conn.execute("PRAGMA foreign_keys = ON").await?;
                    conn.execute("PRAGMA busy_timeout = 10000").await?;
                    Ok(())
                })
            })
            .connect(&url.connect_string())
            .await
            .map_err(open_error)?;
        sqlx::migrate!("./migrations/sqlite")
            .run(&pool)
            .await
            .map_err(|e| open_error(e.into()))?;
        Ok(Self { pool })
    }

    /// The record of `study`, created on first run. A rerun must keep the objective and the
    /// search space; the study file text is updated (budgets may grow).
    pub async fn ensure_study(&self, study: &Study) -> Result<StudyRecord, StorageError> {
        let space = serde_json::to_string(&study.space).expect("a space serialises");
        if let Some(existing) = self.find_study(&study.name).await? {
            if existing.metric != study.objective.metric || existing.goal != study.objective.goal {
                return Err(StorageError::ObjectiveChanged {
                    name: study.name.clone(),
                    was: format!("{} {}", existing.goal.as_str(), existing.metric),
                });
            }
            if existing.space != space {
                return Err(StorageError::SpaceChanged(study.name.clone()));
            }
            sqlx::query("UPDATE studies SET spec = $1 WHERE id = $2")
                .bind(&study.source)
                .bind(existing.id)
                .execute(&self.pool)
                .await
                .map_err(query_error("updating the study file"))?;
            return Ok(existing);
        }
        sqlx::query(
            "INSERT INTO studies (name, metric, goal, spec, space, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&study.name)
        .bind(&study.objective.metric)
        .bind(study.objective.goal.as_str())
        .bind(&study.source)
        .bind(&space)
        .bind(now())
        .execute(&self.pool)
        .await
        .map_err(query_error("creating the study"))?;
        self.find_study(&study.name)
            .await?
            .ok_or_else(|| StorageError::Corrupt(format!("study '{}' vanished", study.name)))
    }

    /// The study called `name`, if any.
    pub async fn find_study(&self, name: &str) -> Result<Option<StudyRecord>, StorageError> {
        let row = sqlx::query(
            "SELECT id, name, metric, goal, spec, space, created_at FROM studies WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("looking up the study"))?;
        row.as_ref().map(StudyRecord::from_row).transpose()
    }

    /// Every study with its trial counts and best value, in creation order.
    pub async fn list_studies(&self) -> Result<Vec<StudySummary>, StorageError> {
        let rows = sqlx::query(
            "SELECT id, name, metric, goal, spec, space, created_at FROM studies ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("listing studies"))?;
        let mut summaries = Vec::with_capacity(rows.len());
        for row in &rows {
            let study = StudyRecord::from_row(row)?;
            let trials = self.trials(study.id).await?;
            summaries.push(StudySummary::new(study, &trials));
        }
        Ok(summaries)
    }

    /// The trials of a study, by number.
    pub async fn trials(&self, study_id: i64) -> Result<Vec<TrialRecord>, StorageError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE study_id = $1 ORDER BY number"
        ))
        .bind(study_id)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading trials"))?;
        rows.iter().map(TrialRecord::from_row).collect()
    }

    /// Creates the next trial of a study, already `running`, and returns it with its number.
    pub async fn start_trial(
        &self,
        study_id: i64,
        params: &Assignment,
    ) -> Result<TrialRecord, StorageError> {
        let params = serde_json::to_string(params).expect("parameters serialise");
        let started = now();
        let row: AnyRow = sqlx::query(concat!(
            "INSERT INTO trials (study_id, number, state, params, created_at, started_at, heartbeat_at)
             SELECT $1, COALESCE(MAX(number) + 1, 0), 'running', $2, $3, $3, $3 FROM trials WHERE study_id = $1
             RETURNING ",
            trial_columns!()
        ))
        .bind(study_id)
        .bind(&params)
        .bind(&started)
        .fetch_one(&self.pool)
        .await
        .map_err(query_error("creating a trial"))?;
        TrialRecord::from_row(&row)
    }

    /// Records the worker that runs a trial and where its log goes.
    pub async fn set_worker(
        &self,
        trial_id: i64,
        worker: &str,
        log_path: &str,
    ) -> Result<(), StorageError> {
        sqlx::query("UPDATE trials SET worker = $1, log_path = $2 WHERE id = $3")
            .bind(worker)
            .bind(log_path)
            .bind(trial_id)
            .execute(&self.pool)
            .await
            .map_err(query_error("recording the worker"))?;
        Ok(())
    }

    /// Records one measurement; non-finite values are not stored (the trial's error says
    /// what was reported).
    pub async fn record_measurement(
        &self,
        trial_id: i64,
        measurement: &Measurement,
    ) -> Result<(), StorageError> {
        if !measurement.value.is_finite() {
            return Ok(());
        }
        let now = now();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(query_error("recording a measurement"))?;
        sqlx::query(
            "INSERT INTO measurements (trial_id, step, metric, value, recorded_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(trial_id)
        .bind(measurement.step)
        .bind(&measurement.metric)
        .bind(measurement.value)
        .bind(&now)
        .execute(&mut *tx)
        .await
        .map_err(query_error("recording a measurement"))?;
        sqlx::query("UPDATE trials SET heartbeat_at = $1 WHERE id = $2")
            .bind(&now)
            .bind(trial_id)
            .execute(&mut *tx)
            .await
            .map_err(query_error("recording a measurement"))?;
        tx.commit()
            .await
            .map_err(query_error("recording a measurement"))
    }

    /// The measurements of a trial, in the order they were recorded.
    pub async fn measurements(&self, trial_id: i64) -> Result<Vec<Measurement>, StorageError> {
        let rows = sqlx::query(
            "SELECT step, metric, value FROM measurements WHERE trial_id = $1 ORDER BY id",
        )
        .bind(trial_id)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading measurements"))?;
        rows.iter()
            .map(|row| {
                Ok(Measurement {
                    step: row.try_get("step").map_err(rows::corrupt)?,
                    metric: row.try_get("metric").map_err(rows::corrupt)?,
                    value: row.try_get("value").map_err(rows::corrupt)?,
                })
            })
            .collect()
    }

    /// Puts a trial in its final state; returns the time recorded as its end.
    pub async fn finish_trial(
        &self,
        trial_id: i64,
        state: TrialState,
        value: Option<f64>,
        error: Option<&str>,
    ) -> Result<String, StorageError> {
        let finished_at = now();
        sqlx::query(
            "UPDATE trials SET state = $1, value = $2, error = $3, finished_at = $4 WHERE id = $5",
        )
        .bind(state.as_str())
        .bind(value.filter(|v| v.is_finite()))
        .bind(error)
        .bind(&finished_at)
        .bind(trial_id)
        .execute(&self.pool)
        .await
        .map_err(query_error("finishing a trial"))?;
        Ok(finished_at)
    }

    /// Marks the trials of a study still `pending` or `running` from an earlier controller
    /// that exited without finishing them; returns how many.
    pub async fn stop_abandoned(&self, study_id: i64) -> Result<u64, StorageError> {
        let done = sqlx::query(
            "UPDATE trials SET state = 'stopped', finished_at = $1,
                error = 'abandoned: the controller running it exited before it finished'
             WHERE study_id = $2 AND state IN ('pending', 'running')",
        )
        .bind(now())
        .bind(study_id)
        .execute(&self.pool)
        .await
        .map_err(query_error("closing abandoned trials"))?;
        Ok(done.rows_affected())
    }

    /// Closes the pool, flushing the WAL.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// The best finished trial of `trials` for `goal`, if any succeeded.
pub fn best_trial(trials: &[TrialRecord], goal: Goal) -> Option<&TrialRecord> {
    trials
        .iter()
        .filter(|t| t.state == TrialState::Succeeded)
        .filter_map(|t| t.value.map(|v| (t, v)))
        .fold(
            None,
            |best: Option<(&TrialRecord, f64)>, (t, v)| match best {
                Some((_, b)) if !goal.better(v, b) => best,
                _ => Some((t, v)),
            },
        )
        .map(|(t, _)| t)
}
