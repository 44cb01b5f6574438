//! Reading what changed in a study since a view of it was last brought up to date: what
//! every claim does first, under the study's lock, and what a controller does while it waits.

use sqlx::Any;
use sqlx::any::AnyRow;

use super::super::rows::trial_columns;
use super::super::view::StudyView;
use super::super::{Storage, StorageError, query_error};

/// The rows of the view's study that are new or may have changed since it was last read:
/// rows past the newest it read; started or finished rows from its oldest unfinished or
/// enqueued one on (an enqueued trial another controller took is running or finished now);
/// and the trials it holds as started that wait again, handed back. Enqueued rows are
/// never read again, so a claim costs the same however long the queue is.
pub(super) async fn changed_rows<'e>(
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

impl Storage {
    /// Reads what changed in the study since the view was last brought up to date.
    pub(crate) async fn refresh(&self, view: &mut StudyView) -> Result<(), StorageError> {
        let rows = changed_rows(&self.pool, view).await?;
        view.absorb(&rows)
    }
}
