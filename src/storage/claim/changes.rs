//! Reading what changed in a study since a view of it was last brought up to date: what
//! every claim does first, under the study's lock, and what a controller does while it waits.

use std::str::FromStr;

use sqlx::any::AnyRow;
use sqlx::{Any, AnyConnection, Row};

use super::super::rows::{TrialState, corrupt, trial_columns};
use super::super::view::{Counted, StudyView};
use super::super::{Dialect, Storage, StorageError, query_error};

/// The rows of the view's study that are new or may have changed since it was last read:
/// rows past the newest it read; started or finished rows from its oldest unfinished or
/// enqueued one on (an enqueued trial another controller took is running or finished now);
/// and the trials it holds as started that wait again, handed back. Enqueued rows are
/// never read again, so a claim costs the same however long the queue is.
async fn changed_rows<'e>(
    executor: impl sqlx::Executor<'e, Database = Any>,
    view: &StudyView,
) -> Result<Vec<AnyRow>, StorageError> {
    // `+study_id`: rows found by their ids (a few rows), not by the study's index, which
    // would walk every trial of the study. The started and finished rows are found by the
    // index on (study_id, state, id), which skips the waiting ones (migration 0010).
    let mut sql = String::from(concat!(
        "SELECT ",
        trial_columns!(),
        " FROM trials WHERE +study_id = $1 AND id > $3
         UNION ALL SELECT ",
        trial_columns!(),
        " FROM trials WHERE study_id = $1
         AND state IN ('running', 'succeeded', 'failed', 'stopped') AND id BETWEEN $2 AND $3"
    ));
    let started = view.unfinished_ids();
    if !started.is_empty() {
        let ids: Vec<String> = (0..started.len()).map(|i| format!("${}", i + 4)).collect();
        sql.push_str(concat!(
            " UNION ALL SELECT ",
            trial_columns!(),
            " FROM trials WHERE +study_id = $1 AND state = 'pending' AND id IN ("
        ));
        sql.push_str(&ids.join(", "));
        sql.push(')');
    }
    sql.push_str(" ORDER BY id");
    let mut query = sqlx::query(&sql)
        .bind(view.study_id)
        .bind(view.first_changed_id())
        .bind(view.newest_id());
    for id in started {
        query = query.bind(id);
    }
    query
        .fetch_all(executor)
        .await
        .map_err(query_error("reading trials"))
}

/// Brings `view` up to date: its first read if it counts the finished trials
/// ([`StudyView::counting`]), else the rows that changed since it was last read.
pub(super) async fn read_changes(
    conn: &mut AnyConnection,
    view: &mut StudyView,
) -> Result<(), StorageError> {
    if view.counts_first() {
        return read_unfinished(conn, view).await;
    }
    let rows = changed_rows(conn, view).await?;
    view.absorb(&rows)
}

/// Fills a new view with the rows of the unfinished and enqueued trials, the finished ones
/// counted by state ([`StudyView::count_finished`]); `conn` in a transaction that sees one
/// snapshot of the study.
async fn read_unfinished(
    conn: &mut AnyConnection,
    view: &mut StudyView,
) -> Result<(), StorageError> {
    let doing = "reading trials";
    let finished = sqlx::query(
        "SELECT state, COUNT(*) AS trials, MAX(id) AS newest_id, MAX(number) AS highest_number
         FROM trials WHERE study_id = $1 AND state IN ('succeeded', 'failed', 'stopped')
         GROUP BY state",
    )
    .bind(view.study_id)
    .fetch_all(&mut *conn)
    .await
    .map_err(query_error(doing))?;
    let rows = sqlx::query(concat!(
        "SELECT ",
        trial_columns!(),
        " FROM trials WHERE study_id = $1 AND state IN ('pending', 'running') ORDER BY id"
    ))
    .bind(view.study_id)
    .fetch_all(&mut *conn)
    .await
    .map_err(query_error(doing))?;
    let counted = finished
        .iter()
        .map(counted)
        .collect::<Result<Vec<_>, _>>()?;
    view.count_finished(&counted);
    view.absorb(&rows)
}

impl Storage {
    /// Reads what changed in the study since the view was last brought up to date (on a
    /// new counting view, its first read: [`Storage::refresh_unfinished`]).
    pub(crate) async fn refresh(&self, view: &mut StudyView) -> Result<(), StorageError> {
        if view.counts_first() {
            return self.refresh_unfinished(view).await;
        }
        let rows = changed_rows(&self.pool, view).await?;
        view.absorb(&rows)
    }

    /// Brings a new view up to date holding the rows of the unfinished and enqueued trials
    /// alone, the finished ones counted by state ([`StudyView::count_finished`]): all that a
    /// claim whose sampler reads no history needs, read in a time that does not grow with
    /// the finished trials. Both reads see one snapshot of the study.
    pub(super) async fn refresh_unfinished(
        &self,
        view: &mut StudyView,
    ) -> Result<(), StorageError> {
        let doing = "reading trials";
        let mut tx = self.pool.begin().await.map_err(query_error(doing))?;
        if self.dialect == Dialect::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut *tx)
                .await
                .map_err(query_error(doing))?;
        }
        read_unfinished(&mut tx, view).await?;
        tx.commit().await.map_err(query_error(doing))
    }
}

/// A row of the finished trials counted by state.
fn counted(row: &AnyRow) -> Result<Counted, StorageError> {
    let state: String = row.try_get("state").map_err(corrupt)?;
    let whole =
        |column: &str| -> Result<i64, StorageError> { row.try_get(column).map_err(corrupt) };
    Ok(Counted {
        state: TrialState::from_str(&state).map_err(StorageError::Corrupt)?,
        trials: usize::try_from(whole("trials")?).unwrap_or_default(),
        newest_id: whole("newest_id")?,
        highest_number: u64::try_from(whole("highest_number")?).unwrap_or_default(),
    })
}
