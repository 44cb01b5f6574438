//! Trials' ends as statements: the trial's final state, its worker's handle and log path, and
//! the last measurements of its attempt, in one call to the database.
//!
//! On SQLite, every statement is a round trip to sqlx's connection thread, and that hand-over
//! costs more than the statement. So the ends of the trials that finished together, and the
//! claims of the next trials when there are some ([`super::Storage::claim_trials`]), are one string
//! of statements run as one transaction (`BEGIN IMMEDIATE; ...; COMMIT`). PostgreSQL prepares
//! one statement per call: there each end is a data-modifying CTE of its own, preceded in a
//! transaction by the inserts of its other measurements when it has more than one insert's
//! worth ([`ROWS_PER_INSERT`]).

use std::time::Instant;

use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, Pool, Transaction};

use super::rows::{TrialRecord, TrialState};
use super::{Dialect, Storage, StorageError, now, query_error, warn_if_slow};
use crate::protocol::Measurement;

/// Measurements per insert. An end holds as many as the worker printed since they were last
/// written (a worker that prints quickly and exits leaves them all to its end); three
/// arguments each, an insert stays far below the arguments a statement may have (SQLite's
/// 32,766, PostgreSQL's 65,535) however many there are.
const ROWS_PER_INSERT: usize = 1000;

/// The longest script, in bytes, whose statements sqlx keeps prepared: the claims and ends of
/// trials that report a few values at their end repeat from trial to trial and are prepared
/// once; a longer script carries many measurements, is unlikely to come again, and would
/// keep its text and prepared statements (megabytes) in sqlx's cache of 100 statements.
const LONGEST_CACHED: usize = 4096;

/// What is done, for error messages.
const FINISHING: &str = "finishing a trial";

/// A trial's end, to be written: the trial as it ended, and the measurements of its attempt
/// not written yet.
#[derive(Debug, Clone)]
pub(crate) struct TrialEnd {
    /// The trial in its final state, ended at `finished_at`, with its worker's handle and log
    /// path as they are known.
    pub trial: TrialRecord,
    /// Measurements of the ended attempt not written yet (non-finite ones are left out).
    pub measurements: Vec<Measurement>,
}

impl TrialEnd {
    /// `trial` ending now, in `state`.
    pub(crate) fn now(
        mut trial: TrialRecord,
        state: TrialState,
        value: Option<f64>,
        error: Option<String>,
        measurements: Vec<Measurement>,
    ) -> Self {
        trial.state = state;
        trial.value = value;
        trial.error = error;
        trial.finished_at = Some(now());
        Self {
            trial,
            measurements,
        }
    }

    /// The measurements to write: the finite ones.
    fn recorded(&self) -> Vec<&Measurement> {
        finite(&self.measurements)
    }
}

/// The measurements that are stored: the finite ones (the trial's error says what else was
/// reported).
pub(super) fn finite(measurements: &[Measurement]) -> Vec<&Measurement> {
    measurements
        .iter()
        .filter(|m| m.value.is_finite())
        .collect()
}

/// The placeholders of the trial's id and end time, which each statement of its end names.
struct EndIds {
    id: String,
    finished_at: String,
}

/// A value bound to a statement built at run time.
#[derive(Debug, Clone)]
enum Arg {
    Text(Option<String>),
    Int(i64),
    Real(f64),
}

/// Statements and their arguments (`$1`, `$2`, ... in the order they are added), sent as one
/// call.
#[derive(Debug, Default)]
pub(super) struct Script {
    statements: Vec<String>,
    args: Vec<Arg>,
}

impl Script {
    /// The placeholder of a new text argument.
    pub(super) fn text(&mut self, value: Option<&str>) -> String {
        self.arg(Arg::Text(value.map(str::to_string)))
    }

    /// The placeholder of a new integer argument.
    pub(super) fn int(&mut self, value: i64) -> String {
        self.arg(Arg::Int(value))
    }

    fn real(&mut self, value: f64) -> String {
        self.arg(Arg::Real(value))
    }

    fn arg(&mut self, arg: Arg) -> String {
        self.args.push(arg);
        format!("${}", self.args.len())
    }

    /// Adds a statement.
    pub(super) fn push(&mut self, statement: String) {
        self.statements.push(statement);
    }

    /// Adds the statements writing `end` on SQLite: the inserts of its measurements and the
    /// trial's update.
    pub(super) fn sqlite_end(&mut self, end: &TrialEnd) {
        let ids = self.ids(&end.trial);
        for rows in end.recorded().chunks(ROWS_PER_INSERT) {
            let insert = self.insert(&end.trial, &ids, rows);
            self.push(insert);
        }
        let update = self.update(&end.trial, &ids);
        self.push(update);
    }

    /// Adds the statement writing `end` with `rows`, the last of its measurements, on
    /// PostgreSQL: the insert as a CTE of the trial's update.
    fn postgres_end(&mut self, end: &TrialEnd, rows: &[&Measurement]) {
        let ids = self.ids(&end.trial);
        let update = self.update(&end.trial, &ids);
        match rows.is_empty() {
            true => self.push(update),
            false => {
                let insert = self.insert(&end.trial, &ids, rows);
                self.push(format!("WITH recorded AS ({insert}) {update}"));
            }
        }
    }

    /// The placeholders of what every statement of a trial's end names.
    fn ids(&mut self, trial: &TrialRecord) -> EndIds {
        self.ids_at(trial, trial.finished_at.as_deref())
    }

    /// The placeholders of the trial's id and of `at`, when its measurements are recorded.
    fn ids_at(&mut self, trial: &TrialRecord, at: Option<&str>) -> EndIds {
        EndIds {
            id: self.int(trial.id),
            finished_at: self.text(at),
        }
    }

    /// An insert of `rows` (at most [`ROWS_PER_INSERT`]) of the trial's attempt.
    fn insert(&mut self, trial: &TrialRecord, ids: &EndIds, rows: &[&Measurement]) -> String {
        let EndIds { id, finished_at } = ids;
        let attempt = self.int(i64::from(trial.attempt));
        let values: Vec<String> = rows
            .iter()
            .map(|m| {
                let step = match m.step {
                    Some(step) => self.int(step),
                    None => "NULL".into(),
                };
                let metric = self.text(Some(&m.metric));
                let value = self.real(m.value);
                format!("({id}, {attempt}, {step}, {metric}, {value}, {finished_at})")
            })
            .collect();
        format!(
            "INSERT INTO measurements (trial_id, attempt, step, metric, value, recorded_at) VALUES {}",
            values.join(", ")
        )
    }

    /// The update of the trial to its end.
    fn update(&mut self, trial: &TrialRecord, ids: &EndIds) -> String {
        let EndIds { id, finished_at } = ids;
        // sqlx 0.8's Any driver binds a NULL f64 as PostgreSQL's float4, and the statement it
        // caches then refuses a float8: a missing value is written as NULL in the SQL.
        let value = match trial.value.filter(|v| v.is_finite()) {
            Some(v) => self.real(v),
            None => "NULL".into(),
        };
        let constraint_values = (!trial.constraint_values.is_empty()).then(|| {
            serde_json::to_string(&trial.constraint_values).expect("a map of numbers serialises")
        });
        let objective_values = (!trial.objective_values.is_empty()).then(|| {
            serde_json::to_string(&trial.objective_values).expect("a list of numbers serialises")
        });
        // The owner and attempt are the row's own when this controller still runs the trial;
        // otherwise the database refuses the end (migration 0005).
        format!(
            "UPDATE trials SET state = {}, error = {}, finished_at = {finished_at}, value = {value}, \
             worker = COALESCE({}, worker), log_path = COALESCE({}, log_path), \
             artifact_dir = COALESCE({}, artifact_dir), constraint_values = {}, infeasible = {}, \
             objective_values = {}, owner = {}, attempt = {} WHERE id = {id}",
            self.text(Some(trial.state.as_str())),
            self.text(trial.error.as_deref()),
            self.text(trial.worker.as_deref()),
            self.text(trial.log_path.as_deref()),
            self.text(trial.artifact_dir.as_deref()),
            self.text(constraint_values.as_deref()),
            self.text(trial.infeasible.as_deref()),
            self.text(objective_values.as_deref()),
            self.text(trial.owner.as_deref()),
            self.int(i64::from(trial.attempt)),
        )
    }

    /// Runs the statements as one call, in one transaction on SQLite when there are several
    /// (a failed one rolls back the others), and returns the rows they returned.
    pub(super) async fn run(
        self,
        pool: &Pool<Any>,
        dialect: Dialect,
        doing: &'static str,
    ) -> Result<Vec<AnyRow>, StorageError> {
        let transaction = dialect == Dialect::Sqlite && self.statements.len() > 1;
        let sql = match transaction {
            true => format!("BEGIN IMMEDIATE; {}; COMMIT", self.statements.join("; ")),
            false => self.statements.join("; "),
        };
        let started = Instant::now();
        // `fetch_all`: every statement runs, the COMMIT included, whatever rows come first.
        let result = bound(&sql, self.args).fetch_all(pool).await;
        if result.is_err() && transaction {
            // Whatever statement failed, the transaction must not stay open.
            let _ = sqlx::query("ROLLBACK").execute(pool).await;
        }
        warn_if_slow(&sql, started.elapsed());
        result.map_err(query_error(doing))
    }

    /// Runs the statement (only one: see [`Script::run`]) in the transaction `tx`.
    async fn run_in(
        self,
        tx: &mut Transaction<'_, Any>,
        doing: &'static str,
    ) -> Result<(), StorageError> {
        let sql = self.statements.join("; ");
        let started = Instant::now();
        let result = bound(&sql, self.args).execute(&mut **tx).await;
        warn_if_slow(&sql, started.elapsed());
        result.map(drop).map_err(query_error(doing))
    }
}

/// Inserts `rows`, measurements of the trial's current attempt recorded `at`, in `tx`,
/// [`ROWS_PER_INSERT`] to a statement.
pub(super) async fn insert_measurements(
    tx: &mut Transaction<'_, Any>,
    trial: &TrialRecord,
    rows: &[&Measurement],
    at: Option<&str>,
    doing: &'static str,
) -> Result<(), StorageError> {
    for rows in rows.chunks(ROWS_PER_INSERT) {
        let mut script = Script::default();
        let ids = script.ids_at(trial, at);
        let insert = script.insert(trial, &ids, rows);
        script.push(insert);
        script.run_in(tx, doing).await?;
    }
    Ok(())
}

/// `sql` with `args` bound, in order, prepared to be kept if it is short.
fn bound(sql: &str, args: Vec<Arg>) -> Query<'_, Any, AnyArguments<'_>> {
    let query = sqlx::query(sql).persistent(sql.len() <= LONGEST_CACHED);
    args.into_iter().fold(query, |query, arg| match arg {
        Arg::Text(text) => query.bind(text),
        Arg::Int(int) => query.bind(int),
        Arg::Real(real) => query.bind(real),
    })
}

impl Storage {
    /// Writes the trials' ends (see [`TrialEnd`]): on SQLite in one call, on PostgreSQL one
    /// call each (or one transaction, for an end of more than [`ROWS_PER_INSERT`]
    /// measurements). Leaves `ends` empty once they are written (as they were, on an error).
    pub(crate) async fn finish_trials(&self, ends: &mut Vec<TrialEnd>) -> Result<(), StorageError> {
        match self.dialect {
            Dialect::Sqlite if ends.is_empty() => {}
            Dialect::Sqlite => {
                let mut script = Script::default();
                for end in ends.iter() {
                    script.sqlite_end(end);
                }
                script.run(&self.pool, Dialect::Sqlite, FINISHING).await?;
            }
            Dialect::Postgres => {
                for end in ends.iter() {
                    self.finish_on_postgres(end).await?;
                }
            }
        }
        ends.clear();
        Ok(())
    }

    /// Writes one end on PostgreSQL, which prepares one statement per call: the trial's
    /// update with its last [`ROWS_PER_INSERT`] measurements, after the inserts of the others
    /// in the same transaction when there are more.
    async fn finish_on_postgres(&self, end: &TrialEnd) -> Result<(), StorageError> {
        let rows = end.recorded();
        let last_insert = rows.len().saturating_sub(1) / ROWS_PER_INSERT * ROWS_PER_INSERT;
        let (earlier, last) = rows.split_at(last_insert);
        let ending = |rows| {
            let mut script = Script::default();
            script.postgres_end(end, rows);
            script
        };
        if earlier.is_empty() {
            ending(last)
                .run(&self.pool, Dialect::Postgres, FINISHING)
                .await?;
            return Ok(());
        }
        let mut tx = self.pool.begin().await.map_err(query_error(FINISHING))?;
        let at = end.trial.finished_at.as_deref();
        insert_measurements(&mut tx, &end.trial, earlier, at, FINISHING).await?;
        ending(last).run_in(&mut tx, FINISHING).await?;
        tx.commit().await.map_err(query_error(FINISHING))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Holder;
    use crate::storage::{Claim, ClaimRules, Queue, StudyView};
    use crate::study::Budget;
    use crate::study::space::Assignment;

    async fn claim(storage: &Storage, view: &mut StudyView) -> TrialRecord {
        let budget = ClaimRules {
            budget: Budget {
                max_trial_count: None,
                max_failed_trial_count: 1,
            },
            queue: Queue::RunFirst,
        };
        let claimed = storage
            .claim_trials(
                view,
                budget,
                Holder::controller("me"),
                1,
                &mut Vec::new(),
                |_, _, _| Ok::<_, ()>(Some(Assignment::default())),
            )
            .await
            .unwrap();
        match &claimed[..] {
            [Claim::Started(trial)] => (**trial).clone(),
            other => panic!("no trial claimed: {other:?}"),
        }
    }

    /// The ends written in one call are one transaction: when one of them cannot be written
    /// (here its measurements name a trial that does not exist), none is.
    #[tokio::test]
    async fn ends_written_together_are_written_all_or_none() {
        let (_dir, storage, id) = crate::storage::test_study(5).await;
        let mut view = StudyView::new(id, crate::study::Goal::Minimize);
        let first = claim(&storage, &mut view).await;
        let mut ghost = claim(&storage, &mut view).await;
        ghost.id = 9999;
        let final_loss = |value| Measurement {
            step: None,
            metric: "loss".into(),
            value,
        };
        let end = |trial: &TrialRecord, value: f64| {
            TrialEnd::now(
                trial.clone(),
                TrialState::Succeeded,
                Some(value),
                None,
                vec![final_loss(value)],
            )
        };
        let mut ends = vec![end(&first, 1.0), end(&ghost, 2.0)];
        let refused = storage.finish_trials(&mut ends).await;
        assert!(refused.is_err(), "a measurement of no trial is refused");
        let states: Vec<TrialState> = storage
            .trials(id)
            .await
            .unwrap()
            .iter()
            .map(|t| t.state)
            .collect();
        assert_eq!(states, [TrialState::Running, TrialState::Running]);
        storage
            .finish_trials(&mut vec![end(&first, 1.0)])
            .await
            .unwrap();
        let trials = storage.trials(id).await.unwrap();
        assert_eq!(trials[0].state, TrialState::Succeeded);
        assert_eq!(trials[0].value, Some(1.0));
        assert_eq!(trials[1].state, TrialState::Running);
        assert_eq!(
            storage.measurements(first.id, 1).await.unwrap(),
            [final_loss(1.0)]
        );
    }

    /// A retried attempt's measurements not written yet go with its retry, in inserts of
    /// [`ROWS_PER_INSERT`] rows (more than one insert's worth here), the non-finite left out.
    #[tokio::test]
    async fn a_retry_writes_the_measurements_of_the_attempt_it_ends() {
        let (_dir, storage, id) = crate::storage::test_study(5).await;
        let mut view = StudyView::new(id, crate::study::Goal::Minimize);
        let trial = claim(&storage, &mut view).await;
        let step = |i: usize, value| Measurement {
            step: Some(i as i64),
            metric: "loss".into(),
            value,
        };
        let mut unsaved: Vec<Measurement> = (0..2500).map(|i| step(i, i as f64)).collect();
        unsaved.push(step(2500, f64::NAN));
        let next = storage
            .retry(&trial, "killed", &unsaved, crate::storage::NextAttempt::Now)
            .await
            .unwrap();
        assert_eq!(next.attempt, 2);
        let stored = storage.measurements(trial.id, 1).await.unwrap();
        assert_eq!(stored, unsaved[..2500]);
        assert!(storage.measurements(trial.id, 2).await.unwrap().is_empty());
    }
}
