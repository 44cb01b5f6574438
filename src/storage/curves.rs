//! The trials' learning curves, one per trial across its attempts. A retried attempt that
//! resumed from a checkpoint (`attempts.resumed_from`) reports again the steps between its
//! checkpoint and where the attempt before it was killed: each step is taken once, from the
//! newest attempt that reported it. An attempt's values count only below the first step
//! the attempt after it reported, and the curve goes back through resumed attempts only: an
//! attempt that started afresh begins the trial's curve anew.

use super::trials::TrialIds;
use super::{Storage, StorageError, query_error};
use crate::study::stopping::Curve;

/// One measurement of a curve, as read: its trial's number, whether the trial succeeded and
/// its current attempt, then the measurement's attempt, whether that attempt resumed, its
/// step and value.
#[derive(Debug, Clone, PartialEq)]
struct Point {
    number: u64,
    succeeded: bool,
    current: u32,
    attempt: u32,
    resumed: bool,
    step: i64,
    value: f64,
}

impl Storage {
    /// The learning curves of the study's trials that `ids` picks: their measurements of
    /// `metric` that have a step, joined across resumed attempts (see the module).
    pub(super) async fn curves_of(
        &self,
        study_id: i64,
        metric: &str,
        ids: &TrialIds,
    ) -> Result<Vec<Curve>, StorageError> {
        let sql = format!(
            "SELECT t.number, t.state, t.attempt AS current, m.attempt, a.resumed_from, m.step, m.value
             FROM measurements m JOIN trials t ON t.id = m.trial_id
             LEFT JOIN attempts a ON a.trial_id = m.trial_id AND a.attempt = m.attempt
             WHERE {} = $1 AND m.metric = $2 AND m.step IS NOT NULL AND m.attempt <= t.attempt
               AND {}
             ORDER BY t.number, m.attempt DESC, m.id",
            ids.study_column(),
            ids.condition("m.trial_id")
        );
        let rows = sqlx::query(&sql)
            .bind(study_id)
            .bind(metric)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("reading learning curves"))?;
        let points = rows
            .iter()
            .map(|row| {
                let get =
                    |name| sqlx::Row::try_get::<i64, _>(row, name).map_err(super::rows::corrupt);
                let resumed: Option<String> =
                    sqlx::Row::try_get(row, "resumed_from").map_err(super::rows::corrupt)?;
                let state: String =
                    sqlx::Row::try_get(row, "state").map_err(super::rows::corrupt)?;
                Ok(Point {
                    number: get("number")? as u64,
                    succeeded: state == super::TrialState::Succeeded.as_str(),
                    current: get("current")? as u32,
                    attempt: get("attempt")? as u32,
                    resumed: resumed.is_some(),
                    step: get("step")?,
                    value: sqlx::Row::try_get(row, "value").map_err(super::rows::corrupt)?,
                })
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok(join_attempts(&points))
    }
}

/// The curves of `points`, grouped by trial, each trial's by attempt from the newest, each
/// attempt's in the order recorded. A trial whose current attempt has reported nothing yet
/// has no curve yet; an older attempt that reported nothing is passed over.
fn join_attempts(points: &[Point]) -> Vec<Curve> {
    let mut curves = Vec::new();
    for trial in points.chunk_by(|a, b| a.number == b.number) {
        let mut curve: Vec<(i64, f64)> = Vec::new();
        // Steps below `below` are still to be taken from older attempts.
        let mut below = i64::MAX;
        let mut attempts = trial.chunk_by(|a, b| a.attempt == b.attempt);
        let mut next = attempts
            .next()
            .filter(|newest| newest[0].attempt == newest[0].current);
        while let Some(attempt) = next {
            let mut own: Vec<(i64, f64)> = Vec::new();
            for point in attempt.iter().filter(|p| p.step < below) {
                // The newest report of a step wins within an attempt too (a job its engine
                // restarted from a checkpoint reports its steps again).
                match own.iter_mut().find(|(step, _)| *step == point.step) {
                    Some(entry) => entry.1 = point.value,
                    None => own.push((point.step, point.value)),
                }
            }
            below = attempt.iter().map(|p| p.step).fold(below, i64::min);
            curve.extend(own);
            next = attempts.next().filter(|_| attempt[0].resumed);
        }
        curve.sort_by_key(|(step, _)| *step);
        if !curve.is_empty() {
            curves.push(Curve {
                number: trial[0].number,
                points: curve,
                succeeded: trial[0].succeeded,
            });
        }
    }
    curves
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The points of trial 1, whose current attempt is `current`: `(attempt, resumed, step,
    /// value)`, newest attempt first, as the query orders them.
    fn points(current: u32, rows: &[(u32, bool, i64, f64)]) -> Vec<Point> {
        rows.iter()
            .map(|&(attempt, resumed, step, value)| Point {
                number: 1,
                succeeded: false,
                current,
                attempt,
                resumed,
                step,
                value,
            })
            .collect()
    }

    fn curve(current: u32, rows: &[(u32, bool, i64, f64)]) -> Vec<(i64, f64)> {
        join_attempts(&points(current, rows))
            .pop()
            .map(|c| c.points)
            .unwrap_or_default()
    }

    #[test]
    fn a_resumed_attempt_continues_the_curve_and_its_values_win_from_its_first_step() {
        // Attempt 1 reached step 5, checkpointed at 3; attempt 2 resumed at 4.
        let rows = [
            (2, true, 4, 0.40),
            (2, true, 5, 0.50),
            (2, true, 6, 0.60),
            (1, false, 1, 0.1),
            (1, false, 2, 0.2),
            (1, false, 3, 0.3),
            (1, false, 4, 0.41),
            (1, false, 5, 0.51),
        ];
        assert_eq!(
            curve(2, &rows),
            [
                (1, 0.1),
                (2, 0.2),
                (3, 0.3),
                (4, 0.40),
                (5, 0.50),
                (6, 0.60)
            ]
        );
    }

    #[test]
    fn an_attempt_that_started_afresh_begins_the_curve_anew() {
        let rows = [(2, false, 1, 0.9), (1, false, 1, 0.1), (1, false, 2, 0.2)];
        assert_eq!(curve(2, &rows), [(1, 0.9)]);
        // Its current attempt has reported nothing yet: no curve yet.
        assert_eq!(curve(3, &rows), []);
    }

    #[test]
    fn the_chain_goes_back_through_resumed_attempts_only() {
        // 3 resumed (from 1's checkpoint: 2 reported nothing); 1 resumed from nothing older.
        let rows = [
            (3, true, 7, 0.7),
            (1, true, 5, 0.5),
            (1, true, 6, 0.6),
            (1, true, 7, 0.69),
        ];
        assert_eq!(curve(3, &rows), [(5, 0.5), (6, 0.6), (7, 0.7)]);
        // A step reported twice by one attempt (its job restarted by its engine): the later.
        let restarted = [(1, false, 1, 0.1), (1, false, 2, 0.2), (1, false, 2, 0.25)];
        assert_eq!(curve(1, &restarted), [(1, 0.1), (2, 0.25)]);
    }
}
