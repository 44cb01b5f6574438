//! The best trial, defined once: only a succeeded, feasible trial has a result
//! ([`TrialRecord::result`], in SQL `result_value!()`), and of two results the better value
//! ranks first, of equal values the lower number ([`ranking`]). Every "best" of hptune (the
//! list of studies, `best`, `keep_best`, a controller's view, a follower) is these two; the
//! test below checks the SQL and the Rust against each other on SQLite and PostgreSQL.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::rows::{StudyRecord, TrialRecord, TrialState};
use crate::study::pareto;
use crate::study::{Goal, Objective};

/// A trial's value as a result of the study, in SQL, for `concat!`: NULL unless the trial
/// succeeded and is feasible (see [`TrialRecord::result`], which it must agree with).
macro_rules! result_value {
    () => {
        "(CASE WHEN state = 'succeeded' AND infeasible IS NULL THEN value END)"
    };
}
pub(crate) use result_value;

impl TrialRecord {
    /// Its value as a result of the study: only a succeeded, feasible trial has one, and only
    /// such a trial can be the best; in SQL, `result_value!()`.
    pub(crate) fn result(&self) -> Option<f64> {
        self.value
            .filter(|_| self.state == TrialState::Succeeded && self.infeasible.is_none())
    }

    /// Its values as a result of a study of `count` objectives: a succeeded, feasible trial's
    /// value of every objective (as [`TrialRecord::result`] says which trials have results).
    pub(crate) fn results(&self, count: usize) -> Option<&[f64]> {
        (self.result().is_some() && self.objective_values.len() == count)
            .then_some(self.objective_values.as_slice())
    }
}

/// The trials of `trials` on the Pareto front of a study of several `objectives`, by number:
/// the results (see [`TrialRecord::results`]) that no other result dominates; trials with
/// equal values are on it together.
pub(crate) fn pareto_front<'a>(
    trials: &'a [TrialRecord],
    objectives: &[Objective],
) -> Vec<&'a TrialRecord> {
    let goals = goals(objectives);
    pareto::front(trials, &goals, |t| t.results(goals.len()))
        .into_iter()
        .map(|i| &trials[i])
        .collect()
}

/// The numbers of the trials of `trials` on the Pareto front of `study`; none for a study of
/// one objective.
pub fn front_numbers(trials: &[TrialRecord], study: &StudyRecord) -> BTreeSet<u64> {
    match study.objectives.len() {
        1 => BTreeSet::new(),
        _ => pareto_front(trials, &study.objectives)
            .iter()
            .map(|t| t.number)
            .collect(),
    }
}

/// The `n` first results of `trials` of `study`: the best values first with one objective
/// ([`best_first`]), by Pareto rank with several (`pareto_first`).
pub fn ranked_first(trials: &[TrialRecord], study: &StudyRecord, n: usize) -> Vec<TrialRecord> {
    match study.objectives.len() {
        1 => best_first(trials, study.goal, n),
        _ => pareto_first(trials, &study.objectives, n),
    }
}

/// The `n` first results of `trials` of a study of several `objectives`: by Pareto rank (the
/// front, then the front of the rest, and so on), by number within a rank. A later trial can
/// only push a trial further down, as with [`best_first`].
pub(crate) fn pareto_first(
    trials: &[TrialRecord],
    objectives: &[Objective],
    n: usize,
) -> Vec<TrialRecord> {
    let goals = goals(objectives);
    let results: Vec<&TrialRecord> = trials
        .iter()
        .filter(|t| t.results(goals.len()).is_some())
        .collect();
    let points: Vec<&[f64]> = results
        .iter()
        .map(|t| t.objective_values.as_slice())
        .collect();
    pareto::non_dominated_sort(&points, &goals)
        .into_iter()
        .flat_map(|rank| {
            let mut rank: Vec<&TrialRecord> = rank.into_iter().map(|i| results[i]).collect();
            rank.sort_by_key(|t| t.number);
            rank
        })
        .take(n)
        .cloned()
        .collect()
}

/// The goals of `objectives`, in order.
pub(crate) fn goals(objectives: &[Objective]) -> Vec<Goal> {
    objectives.iter().map(|o| o.goal).collect()
}

/// Which of two results, each `(number, value)`, ranks first for `goal`: the better value,
/// and of equal values the lower number.
pub(crate) fn ranking(goal: Goal, a: (u64, f64), b: (u64, f64)) -> Ordering {
    let order = match goal {
        Goal::Maximize => b.1.total_cmp(&a.1),
        Goal::Minimize => a.1.total_cmp(&b.1),
    };
    order.then(a.0.cmp(&b.0))
}

/// The `n` best trials of `trials` for `goal` (those with a result), best first.
pub fn best_first(trials: &[TrialRecord], goal: Goal, n: usize) -> Vec<TrialRecord> {
    let mut ranked: Vec<_> = with_results(trials).collect();
    ranked.sort_by(|a, b| ranking(goal, a.1, b.1));
    ranked.into_iter().take(n).map(|(t, _)| t.clone()).collect()
}

/// The best trial of `trials` for `goal` (of those with a result), if any.
pub(crate) fn best_trial(trials: &[TrialRecord], goal: Goal) -> Option<&TrialRecord> {
    with_results(trials)
        .min_by(|a, b| ranking(goal, a.1, b.1))
        .map(|(t, _)| t)
}

/// The trials that have a result, each with its `(number, value)`.
fn with_results(trials: &[TrialRecord]) -> impl Iterator<Item = (&TrialRecord, (u64, f64))> {
    trials
        .iter()
        .filter_map(|t| t.result().map(|v| (t, (t.number, v))))
}

#[cfg(test)]
mod tests {
    use sqlx::Row;

    use super::*;
    use crate::storage::{Storage, StudyView};
    use TrialState::{Failed, Pending, Running, Stopped, Succeeded};

    /// Trials by number: state, feasible, value. The lowest and the highest values belong to
    /// trials without a result, and results tie at both ends.
    const TRIALS: [(TrialState, bool, Option<f64>); 15] = [
        (Succeeded, true, Some(3.0)),
        (Succeeded, false, Some(-9.0)),
        (Failed, true, Some(-8.0)),
        (Stopped, true, Some(9.0)),
        (Running, true, None),
        (Succeeded, true, Some(1.0)),
        (Pending, true, None),
        (Succeeded, true, Some(1.0)),
        (Succeeded, true, None),
        (Succeeded, false, Some(8.5)),
        (Succeeded, true, Some(4.0)),
        (Failed, false, None),
        (Stopped, false, Some(-10.0)),
        (Running, true, Some(-7.0)),
        (Succeeded, true, Some(4.0)),
    ];

    /// Writes [`TRIALS`] into a new study of `goal` and checks, on `storage`, that the SQL
    /// and the Rust agree: the result of each row, the best value the list of studies counts
    /// in SQL, and the best trial of `best`, `best_first` and a controller's view.
    async fn sql_and_rust_agree(storage: &Storage, name: &str, goal: Goal) {
        let yaml = format!(
            "name: {name}\nmax_trial_count: 100\nobjective: {{metric: loss, goal: {}}}\nparameters:\n  - {{id: x, type: double, min: 0, max: 1}}\ntrial: {{command: [w]}}\n",
            goal.as_str()
        );
        let study = crate::spec::parse(std::path::Path::new("s.yaml"), &yaml).unwrap();
        let id = storage.ensure_study(&study).await.unwrap().id;
        for (number, (state, feasible, value)) in TRIALS.into_iter().enumerate() {
            // The value written out: the `Any` driver binds no typed NULL for PostgreSQL.
            let value = value.map_or("NULL".into(), |v| format!("{v:?}"));
            sqlx::query(&format!(
                "INSERT INTO trials (study_id, number, state, params, value, infeasible, created_at, started_at)
                 VALUES ($1, $2, $3, '{{}}', {value}, $4, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')",
            ))
            .bind(id)
            .bind(number as i64)
            .bind(state.as_str())
            .bind((!feasible).then_some("mem > 16"))
            .execute(&storage.pool)
            .await
            .unwrap();
        }
        let trials = storage.trials(id).await.unwrap();
        let rows = sqlx::query(concat!(
            "SELECT number, ",
            result_value!(),
            " AS result FROM trials WHERE study_id = $1 ORDER BY number"
        ))
        .bind(id)
        .fetch_all(&storage.pool)
        .await
        .unwrap();
        let in_sql: Vec<(i64, Option<f64>)> = rows
            .iter()
            .map(|row| (row.get("number"), row.get("result")))
            .collect();
        let in_rust: Vec<(i64, Option<f64>)> = trials
            .iter()
            .map(|t| (t.number as i64, t.result()))
            .collect();
        assert_eq!(in_sql, in_rust);
        assert_eq!(in_rust.len(), TRIALS.len());

        let best = best_trial(&trials, goal).unwrap();
        let overviews = storage.study_overviews().await.unwrap();
        let overview = overviews.iter().find(|o| o.study.id == id).unwrap();
        assert_eq!(
            overview.best,
            best.result(),
            "the list counts the best in SQL"
        );
        assert_eq!(best_first(&trials, goal, 1)[0].number, best.number);
        let mut view = StudyView::new(id, goal);
        storage.refresh(&mut view).await.unwrap();
        assert_eq!(view.best(), Some((best.number, best.result().unwrap())));
    }

    #[test]
    fn the_best_are_the_best_results_and_of_equal_results_the_lower_number() {
        let trials: Vec<TrialRecord> = TRIALS
            .into_iter()
            .enumerate()
            .map(|(number, (state, feasible, value))| TrialRecord {
                infeasible: (!feasible).then(|| "mem > 16".into()),
                ..TrialRecord::in_state(number as u64, state, value)
            })
            .collect();
        let ranked = |goal| -> Vec<(u64, f64)> {
            let best = best_first(&trials, goal, TRIALS.len());
            best.iter().map(|t| (t.number, t.value.unwrap())).collect()
        };
        let results = [(5, 1.0), (7, 1.0), (0, 3.0), (10, 4.0), (14, 4.0)];
        assert_eq!(ranked(Goal::Minimize), results);
        assert_eq!(
            ranked(Goal::Maximize),
            [(10, 4.0), (14, 4.0), (0, 3.0), (5, 1.0), (7, 1.0)]
        );
        assert_eq!(best_trial(&trials, Goal::Maximize).unwrap().number, 10);
        let mut view = StudyView::new(1, Goal::Maximize);
        // A view that learns of the tying results in the other order still ranks them so.
        for trial in trials.iter().rev() {
            view.update(trial.clone());
        }
        assert_eq!(view.best(), Some((10, 4.0)));
    }

    #[tokio::test]
    async fn the_sql_and_the_rust_agree_on_the_best_trial_in_sqlite() {
        let (_dir, storage, _) = crate::storage::test_study(1).await;
        sql_and_rust_agree(&storage, "min", Goal::Minimize).await;
        sql_and_rust_agree(&storage, "max", Goal::Maximize).await;
    }

    #[tokio::test]
    async fn the_sql_and_the_rust_agree_on_the_best_trial_in_postgres() {
        let Some(url) = crate::storage::test_postgres() else {
            return;
        };
        let storage = Storage::open(&url).await.unwrap();
        let run = std::process::id();
        sql_and_rust_agree(&storage, &format!("best-min-{run}"), Goal::Minimize).await;
        sql_and_rust_agree(&storage, &format!("best-max-{run}"), Goal::Maximize).await;
    }
}
