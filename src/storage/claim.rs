//! Claiming trials: numbering, proposing and inserting the next trials of a study as one step
//! for every controller of it.
//!
//! Several controllers may run one study. Claiming a trial happens inside a transaction that
//! first takes the study's lock (SQLite's write lock by `BEGIN IMMEDIATE`, in PostgreSQL a
//! row lock on the study by writing its row), so counting the trials, choosing the next
//! number, proposing and inserting are one step for every controller: each number is taken
//! once and the budget is honoured exactly.

use sqlx::any::AnyRow;
use sqlx::{Any, Transaction};

use super::ends::{Script, TrialEnd};
use super::rows::{TrialRecord, TrialState, enqueued, trial_columns};
use super::view::StudyView;
use super::{Dialect, Storage, StorageError, now, query_error};
use crate::study::Budget;
use crate::study::space::Assignment;

/// What becomes of a study's enqueued trials when a controller claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// They are claimed before new trials are proposed (a study's run).
    RunFirst,
    /// They wait for another run (a trial run by hand runs its own parameters).
    Leave,
}

/// What a claim checks: the study's budget, and whether its enqueued trials run first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimRules {
    /// Trials in all and failed trials allowed.
    pub budget: Budget,
    /// Whether enqueued trials are claimed first.
    pub queue: Queue,
}

/// What [`Storage::claim_trials`] did, trial by trial.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// A new trial, running, owned by the claiming controller.
    Started(Box<TrialRecord>),
    /// `max_trial_count` trials exist.
    BudgetSpent,
    /// `max_failed_trial_count` trials failed.
    TooManyFailures,
    /// The sampler has nothing left to propose.
    Exhausted,
}

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

/// What a claim decides on a view of the study.
enum Decision {
    /// Run the enqueued trial with this row id.
    Enqueued(i64),
    /// Run trial `number` with these parameters.
    Run(u64, Assignment),
    /// Claim nothing, for this reason.
    Not(Claim),
}

/// Checks the failures on `view`, takes the next enqueued trial if the rules run them and
/// there is one, else checks the budget with the `planned` trials (proposed in this claim,
/// not yet in the view) counted and asks `propose` for the next number's parameters.
fn decide<E>(
    view: &StudyView,
    rules: ClaimRules,
    planned: &[Assignment],
    propose: &mut impl FnMut(u64, &StudyView, &[Assignment]) -> Result<Option<Assignment>, E>,
) -> Result<Decision, E> {
    if rules
        .budget
        .too_many_failures(view.count(TrialState::Failed))
    {
        return Ok(Decision::Not(Claim::TooManyFailures));
    }
    if rules.queue == Queue::RunFirst
        && let Some(trial) = view.next_enqueued()
    {
        return Ok(Decision::Enqueued(trial.id));
    }
    if !rules.budget.has_room(view.trial_count() + planned.len()) {
        return Ok(Decision::Not(Claim::BudgetSpent));
    }
    let number = view.next_number() + planned.len() as u64;
    Ok(match propose(number, view, planned)? {
        Some(params) => Decision::Run(number, params),
        None => Decision::Not(Claim::Exhausted),
    })
}

/// What became of the enqueued trial a claim chose.
enum Taken {
    /// It runs now, for the claiming controller.
    Started(TrialRecord),
    /// It was no longer enqueued (another controller took it and handed it back, which the
    /// view does not read): the row as it is.
    Changed(TrialRecord),
}

/// Starts the enqueued trial with row id `id` for `owner`, in `tx`, which holds the study's
/// lock: its first attempt begins now.
async fn start_enqueued(
    tx: &mut Transaction<'static, Any>,
    id: i64,
    owner: &str,
) -> Result<Taken, StorageError> {
    let doing = "starting an enqueued trial";
    let at = now();
    let started = sqlx::query(concat!(
        "UPDATE trials SET state = 'running', owner = $1, started_at = $2, heartbeat_at = $2
         WHERE id = $3 AND ",
        enqueued!(),
        " RETURNING ",
        trial_columns!()
    ))
    .bind(owner)
    .bind(&at)
    .bind(id)
    .fetch_optional(&mut **tx)
    .await
    .map_err(query_error(doing))?;
    let Some(row) = started else {
        let row = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE id = $1"
        ))
        .bind(id)
        .fetch_one(&mut **tx)
        .await
        .map_err(query_error(doing))?;
        return Ok(Taken::Changed(TrialRecord::from_row(&row)?));
    };
    sqlx::query(
        "UPDATE attempts SET owner = $1, started_at = $2 WHERE trial_id = $3 AND attempt = 1",
    )
    .bind(owner)
    .bind(&at)
    .bind(id)
    .execute(&mut **tx)
    .await
    .map_err(query_error(doing))?;
    Ok(Taken::Started(TrialRecord::from_row(&row)?))
}

pub(super) fn params_json(params: &Assignment) -> String {
    serde_json::to_string(params).expect("parameters serialise")
}

/// Why a claim failed: the database, or the proposal of the trial's parameters (`E`, the
/// proposer's error).
#[derive(Debug)]
pub enum ClaimError<E> {
    /// The database failed.
    Storage(StorageError),
    /// The proposal failed.
    Proposal(E),
}

impl<E> From<StorageError> for ClaimError<E> {
    fn from(e: StorageError) -> Self {
        ClaimError::Storage(e)
    }
}

impl Storage {
    /// Reads what changed in the study since the view was last brought up to date.
    pub async fn refresh(&self, view: &mut StudyView) -> Result<(), StorageError> {
        let rows = changed_rows(&self.pool, view).await?;
        view.absorb(&rows)
    }

    /// Claims up to `slots` trials of a study for `owner`, one after another: brings `view`
    /// up to date, checks the budget, asks `propose` for the parameters of the next number
    /// (with the trials already claimed in this call as running), and records the trial as
    /// running with its first attempt, all as one step for every controller of the study.
    /// The trials' `ends` (already in `view`) are written first, in the same call where they
    /// can be; `ends` is empty after the claim. Returns the trials started, in order, and
    /// then why no more were, unless the slots ran out first. `propose` gets the number,
    /// the view, and the parameters of the trials this call claims before that number.
    ///
    /// On SQLite the claim is first tried in one call, on the view as it is: each insert is
    /// guarded by the condition that no trial of the study was added or finished since the
    /// view was read (but the ones this call inserted before it), so it succeeds exactly when
    /// the locked claim would have decided the same. Only when another controller changed the
    /// study (or the study ends) does the claim take the lock, read the changes and decide
    /// again: a lone controller pays one round trip for the trials that ended and the ones
    /// that replace them, instead of four per trial.
    pub async fn claim_trials<E>(
        &self,
        view: &mut StudyView,
        rules: ClaimRules,
        owner: &str,
        slots: usize,
        ends: &mut Vec<TrialEnd>,
        mut propose: impl FnMut(u64, &StudyView, &[Assignment]) -> Result<Option<Assignment>, E>,
    ) -> Result<Vec<Claim>, ClaimError<E>> {
        if self.dialect == Dialect::Sqlite {
            // The parameters of the trials numbered from the view's next number on.
            let mut planned: Vec<Assignment> = Vec::new();
            while planned.len() < slots {
                match decide(view, rules, &planned, &mut propose) {
                    Ok(Decision::Run(_, params)) => planned.push(params),
                    _ => break,
                }
            }
            if !planned.is_empty() {
                let claimed = self
                    .insert_if_unchanged(view, &planned, owner, std::mem::take(ends))
                    .await?;
                if !claimed.is_empty() {
                    let started = claimed.into_iter().map(|t| Claim::Started(Box::new(t)));
                    return Ok(started.collect());
                }
            }
        }
        let claim = self.claim_locked(view, rules, owner, ends, propose).await?;
        Ok(vec![claim])
    }

    /// Claims one trial under the study's lock, having written the `ends`.
    async fn claim_locked<E>(
        &self,
        view: &mut StudyView,
        rules: ClaimRules,
        owner: &str,
        ends: &mut Vec<TrialEnd>,
        mut propose: impl FnMut(u64, &StudyView, &[Assignment]) -> Result<Option<Assignment>, E>,
    ) -> Result<Claim, ClaimError<E>> {
        self.finish_trials(ends).await?;
        let doing = "claiming a trial";
        let mut tx = self.lock_study(view.study_id).await?;
        let rows = changed_rows(&mut *tx, view).await?;
        view.absorb(&rows)?;
        let (number, params) = loop {
            match decide(view, rules, &[], &mut propose) {
                Ok(Decision::Run(number, params)) => break (number, params),
                Ok(Decision::Enqueued(id)) => match start_enqueued(&mut tx, id, owner).await? {
                    Taken::Started(trial) => {
                        tx.commit().await.map_err(query_error(doing))?;
                        view.update(trial.clone());
                        return Ok(Claim::Started(Box::new(trial)));
                    }
                    // The view learns what became of it, and the claim decides again.
                    Taken::Changed(trial) => view.update(trial),
                },
                Ok(Decision::Not(claim)) => return Ok(claim),
                Err(e) => return Err(ClaimError::Proposal(e)),
            }
        };
        let started = now();
        let row = sqlx::query(concat!(
            "INSERT INTO trials (study_id, number, state, params, created_at, started_at, heartbeat_at, attempt, owner)
             VALUES ($1, $2, 'running', $3, $4, $4, $4, 1, $5) RETURNING ",
            trial_columns!()
        ))
        .bind(view.study_id)
        .bind(number as i64)
        .bind(params_json(&params))
        .bind(&started)
        .bind(owner)
        .fetch_one(&mut *tx)
        .await
        .map_err(query_error(doing))?;
        let trial = TrialRecord::from_row(&row)?;
        tx.commit().await.map_err(query_error(doing))?;
        view.update(trial.clone());
        Ok(Claim::Started(Box::new(trial)))
    }

    /// Inserts the `planned` trials (numbered from the view's next number on) as running, in
    /// one call, each only if the study's rows
    /// from the view's first changeable one on are still the ones the view holds and the
    /// ones inserted before it (none added by another controller, none of its unfinished ones
    /// finished); returns those inserted, in order, none when the view was stale. The `ends`
    /// are written before them, in the same call and transaction, whether they are inserted
    /// or not.
    async fn insert_if_unchanged(
        &self,
        view: &mut StudyView,
        planned: &[Assignment],
        owner: &str,
        ends: Vec<TrialEnd>,
    ) -> Result<Vec<TrialRecord>, StorageError> {
        let first = view.next_number();
        let mut script = Script::default();
        for end in &ends {
            script.sqlite_end(end);
        }
        let since = view.first_changed_id();
        let (rows, unfinished) = view.rows_since(since);
        let study = script.int(view.study_id);
        let since = script.int(since);
        let now = script.text(Some(&now()));
        let owner = script.text(Some(owner));
        for (i, params) in planned.iter().enumerate() {
            // `changes()`: the rows the previous statement (this call's previous insert)
            // inserted; a trial is inserted only after the ones planned before it.
            let after_previous = if i == 0 { "" } else { "changes() = 1 AND " };
            let insert = format!(
                "INSERT INTO trials (study_id, number, state, params, created_at, started_at, heartbeat_at, attempt, owner)
                 SELECT {study}, {}, 'running', {}, {now}, {now}, {now}, 1, {owner}
                 WHERE {after_previous}(SELECT COUNT(*) FROM trials WHERE +study_id = {study} AND id >= {since}) = {}
                   AND (SELECT COUNT(*) FROM trials WHERE +study_id = {study} AND id >= {since}
                        AND state IN ('pending', 'running')) = {}
                 RETURNING {}",
                script.int((first + i as u64) as i64),
                script.text(Some(&params_json(params))),
                script.int((rows + i) as i64),
                script.int((unfinished + i) as i64),
                trial_columns!(),
            );
            script.push(insert);
        }
        let inserted = script
            .run(&self.pool, self.dialect, "claiming a trial")
            .await?;
        let mut trials = Vec::with_capacity(inserted.len());
        for row in &inserted {
            let trial = TrialRecord::from_row(row)?;
            view.update(trial.clone());
            trials.push(trial);
        }
        Ok(trials)
    }

    /// A transaction holding the study's lock until it ends: SQLite's write lock, taken by
    /// `BEGIN IMMEDIATE` (one statement), or a row lock on the study in PostgreSQL.
    pub(super) async fn lock_study(
        &self,
        study_id: i64,
    ) -> Result<Transaction<'static, Any>, StorageError> {
        let doing = "locking the study";
        if self.dialect == Dialect::Sqlite {
            return self
                .pool
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(query_error(doing));
        }
        let mut tx = self.pool.begin().await.map_err(query_error(doing))?;
        sqlx::query("UPDATE studies SET id = id WHERE id = $1")
            .bind(study_id)
            .execute(&mut *tx)
            .await
            .map_err(query_error(doing))?;
        Ok(tx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Measurement;
    use crate::study::Goal;

    /// The budget of a study of `max_trial_count` trials (five failures allowed), and the
    /// empty views of two controllers of it.
    fn two_controllers(id: i64, max_trial_count: u64) -> (ClaimRules, StudyView, StudyView) {
        let budget = ClaimRules {
            budget: Budget {
                max_trial_count: Some(max_trial_count),
                max_failed_trial_count: 5,
            },
            queue: Queue::RunFirst,
        };
        let view = || StudyView::new(id, Goal::Minimize);
        (budget, view(), view())
    }

    /// A controller suspended while it holds the study's lock in PostgreSQL holds the other
    /// controllers of the study only until the server closes its idle connection: the lock is
    /// released, the others claim, and the suspended one gets an error when it goes on.
    #[tokio::test]
    async fn a_connection_idle_in_the_studys_lock_is_closed_and_the_lock_released() {
        let Some(url) = std::env::var("HPTUNE_TEST_POSTGRES")
            .ok()
            .filter(|u| !u.is_empty())
        else {
            eprintln!("skipped: HPTUNE_TEST_POSTGRES is not set");
            return;
        };
        let url = crate::storage::StorageUrl::parse(&url).unwrap();
        let (suspended, peer) = (
            Storage::open(&url).await.unwrap(),
            Storage::open(&url).await.unwrap(),
        );
        let name = format!("idle-lock-{}", std::process::id());
        let yaml = format!(
            "name: {name}\nmax_trial_count: 2\nobjective: {{metric: loss, goal: minimize}}\nparameters:\n  - {{id: x, type: double, min: 0, max: 1}}\ntrial: {{command: [w]}}\n"
        );
        let study = crate::spec::parse(std::path::Path::new("s.yaml"), &yaml).unwrap();
        let id = suspended.ensure_study(&study).await.unwrap().id;

        let mut held = suspended.lock_study(id).await.unwrap();
        let limit: (String,) = sqlx::query_as("SHOW idle_in_transaction_session_timeout")
            .fetch_one(&mut *held)
            .await
            .unwrap();
        assert_eq!(limit.0, "1min", "every session of the pool has the limit");
        // The limit of this transaction shortened, so that the test need not wait a minute.
        sqlx::query("SET LOCAL idle_in_transaction_session_timeout = '1s'")
            .execute(&mut *held)
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let peer_lock =
            tokio::time::timeout(std::time::Duration::from_secs(20), peer.lock_study(id))
                .await
                .expect("the peer waits only until the idle connection is closed")
                .unwrap();
        assert!(
            started.elapsed() >= std::time::Duration::from_millis(900),
            "the lock was held meanwhile"
        );
        peer_lock.commit().await.unwrap();
        assert!(
            held.commit().await.is_err(),
            "the ended session's transaction fails"
        );
        // The suspended controller's storage goes on with a new connection.
        assert!(
            suspended
                .lock_study(id)
                .await
                .unwrap()
                .commit()
                .await
                .is_ok()
        );
    }

    /// Two controllers on one SQLite file, each with its own view: a claim on a view that
    /// another controller made stale must read the change before it proposes (the one-call
    /// claim is refused), the ends given to a claim are written whether or not the one-call
    /// claim goes through, and an end writes the measurements, the handle and the state.
    #[tokio::test]
    async fn a_claim_on_a_stale_view_reads_what_another_controller_did() {
        let (_dir, storage, id) = crate::storage::test_study(4).await;
        let (budget, mut a, mut b) = two_controllers(id, 4);
        // What each proposal saw: (number, finished trials, running trials).
        let mut seen = Vec::new();
        let claim = async |view: &mut StudyView,
                           ends: Vec<TrialEnd>,
                           seen: &mut Vec<(u64, usize, usize)>| {
            let mut ends = ends;
            for end in &ends {
                view.update(end.trial.clone());
            }
            let claimed = storage
                .claim_trials(view, budget, "me", 1, &mut ends, |number, view, claimed| {
                    assert!(claimed.is_empty());
                    seen.push((number, view.history().len(), view.unfinished_params().len()));
                    Ok::<_, ()>(Some(Assignment::default()))
                })
                .await
                .unwrap();
            assert!(ends.is_empty(), "the claim writes every end");
            match &claimed[..] {
                [Claim::Started(trial)] => Some((**trial).clone()),
                _ => None,
            }
        };
        let mut first = claim(&mut a, vec![], &mut seen).await.unwrap();
        first.worker = Some("pid:1@2".into());
        first.log_path = Some("trial-0.log".into());
        let reported = vec![
            Measurement {
                step: Some(1),
                metric: "loss".into(),
                value: 2.0,
            },
            Measurement {
                step: None,
                metric: "loss".into(),
                value: 1.5,
            },
            Measurement {
                step: None,
                metric: "acc".into(),
                value: f64::NAN,
            },
        ];
        let mut ends = vec![TrialEnd::now(
            first.clone(),
            TrialState::Succeeded,
            Some(1.5),
            None,
            reported,
        )];
        a.update(ends[0].trial.clone());
        storage.finish_trials(&mut ends).await.unwrap();
        // B has read nothing: its claim must see trial 0 finished, and take number 1.
        let second = claim(&mut b, vec![], &mut seen).await.unwrap();
        assert_eq!(second.number, 1);
        // A's view misses trial 1: its claim reads it and takes number 2.
        assert_eq!(claim(&mut a, vec![], &mut seen).await.unwrap().number, 2);
        // B ends trial 1 with its next claim, on a view that misses trial 2: the one-call
        // claim is refused, trial 1's end is written all the same, and B takes number 3.
        let failed = TrialEnd::now(second, TrialState::Failed, None, Some("no".into()), vec![]);
        assert_eq!(
            claim(&mut b, vec![failed], &mut seen).await.unwrap().number,
            3
        );
        assert!(
            claim(&mut a, vec![], &mut seen).await.is_none(),
            "the budget is 4"
        );
        // Each stale proposal is followed by one on the view brought up to date.
        let expected = [
            (0, 0, 0), // A, on an empty study: claimed in one call
            (0, 0, 0), // B, stale: refused
            (1, 1, 0), // B, having read trial 0's end
            (1, 1, 0), // A, stale (trial 1 new): refused
            (2, 1, 1), // A, up to date
            (2, 2, 0), // B, trial 1 ended, stale (trial 2 new): refused
            (3, 2, 1), // B, up to date
            (3, 1, 2), // A, stale: refused; up to date the budget is spent
        ];
        assert_eq!(seen, expected);
        let trials = storage.trials(id).await.unwrap();
        assert_eq!(trials[1].state, TrialState::Failed);
        assert_eq!(trials[1].error.as_deref(), Some("no"));
        let rows: Vec<(Option<i64>, String, f64)> = sqlx::query_as(
            "SELECT step, metric, value FROM measurements WHERE trial_id = $1 ORDER BY id",
        )
        .bind(first.id)
        .fetch_all(&storage.pool)
        .await
        .unwrap();
        assert_eq!(
            rows,
            [(Some(1), "loss".into(), 2.0), (None, "loss".into(), 1.5)]
        );
        let trials = storage.trials(id).await.unwrap();
        assert_eq!(trials[0].state, TrialState::Succeeded);
        assert_eq!(trials[0].worker.as_deref(), Some("pid:1@2"));
        assert_eq!(trials[0].log_path.as_deref(), Some("trial-0.log"));
        let attempt: (String, Option<String>) =
            sqlx::query_as("SELECT outcome, worker FROM attempts WHERE trial_id = $1")
                .bind(first.id)
                .fetch_one(&storage.pool)
                .await
                .unwrap();
        assert_eq!(attempt, ("succeeded".into(), Some("pid:1@2".into())));
    }

    /// A claim of several slots proposes each trial with the ones before it as running and
    /// inserts them in one call; on a stale view none of them is inserted (each insert waits
    /// for the one before it: without that, the second would pass its guard, the other
    /// controller's trial standing in for the first), and the claim goes on under the lock.
    #[tokio::test]
    async fn a_claim_of_several_slots_inserts_them_in_one_call_or_none() {
        let (_dir, storage, id) = crate::storage::test_study(6).await;
        let (budget, mut a, mut b) = two_controllers(id, 6);
        // What each proposal saw: (number, finished, running in the view, claimed before it).
        let mut seen = Vec::new();
        let claim = async |view: &mut StudyView,
                           slots: usize,
                           mut ends: Vec<TrialEnd>,
                           seen: &mut Vec<(u64, usize, usize, usize)>| {
            let claimed = storage
                .claim_trials(
                    view,
                    budget,
                    "me",
                    slots,
                    &mut ends,
                    |number, view, claimed| {
                        let (history, running) =
                            (view.history().len(), view.unfinished_params().len());
                        seen.push((number, history, running, claimed.len()));
                        Ok::<_, ()>(Some(Assignment::default()))
                    },
                )
                .await
                .unwrap();
            claimed
                .into_iter()
                .map(|claim| match claim {
                    Claim::Started(trial) => Ok(*trial),
                    other => Err(other),
                })
                .collect::<Vec<_>>()
        };
        let numbers = |claims: &[Result<TrialRecord, Claim>]| -> Vec<u64> {
            claims.iter().map(|c| c.as_ref().unwrap().number).collect()
        };
        let first = claim(&mut a, 3, vec![], &mut seen).await;
        assert_eq!(numbers(&first), [0, 1, 2]);
        assert_eq!(numbers(&claim(&mut b, 1, vec![], &mut seen).await), [3]);
        // A ends trial 0 and claims three more on a view that misses trial 3: none is
        // inserted in one call, the end is written, and the locked claim takes number 4.
        let end = TrialEnd::now(
            first[0].clone().unwrap(),
            TrialState::Succeeded,
            Some(1.0),
            None,
            vec![],
        );
        a.update(end.trial.clone());
        assert_eq!(numbers(&claim(&mut a, 3, vec![end], &mut seen).await), [4]);
        // Up to date, A plans two, and the budget stops it at one.
        assert_eq!(numbers(&claim(&mut a, 2, vec![], &mut seen).await), [5]);
        let spent = claim(&mut b, 1, vec![], &mut seen).await;
        assert_eq!(spent, [Err(Claim::BudgetSpent)]);
        let expected = [
            (0, 0, 0, 0), // A: three in one call, each seeing the ones before it running
            (1, 0, 0, 1),
            (2, 0, 0, 2),
            (0, 0, 0, 0), // B, on an empty view: refused
            (3, 0, 3, 0), // B, up to date
            (3, 1, 2, 0), // A, stale: refused, the three of them
            (4, 1, 2, 1),
            (5, 1, 2, 2),
            (4, 1, 3, 0), // A, up to date, under the lock
            (5, 1, 4, 0), // A, one slot left in the budget
            (4, 0, 4, 0), // B, stale: refused; up to date the budget is spent
        ];
        assert_eq!(seen, expected);
        let trials = storage.trials(id).await.unwrap();
        let stored: Vec<(u64, TrialState)> = trials.iter().map(|t| (t.number, t.state)).collect();
        let mut wanted = vec![(0, TrialState::Succeeded)];
        wanted.extend((1..6).map(|n| (n, TrialState::Running)));
        assert_eq!(stored, wanted);
    }
}
