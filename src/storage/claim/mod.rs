//! Claiming trials: numbering, proposing and inserting the next trials of a study as one step
//! for every controller of it.
//!
//! Several controllers may run one study. Claiming a trial happens inside a transaction that
//! first takes the study's lock (SQLite's write lock by `BEGIN IMMEDIATE`, in PostgreSQL a
//! row lock on the study by writing its row), so counting the trials, choosing the next
//! number, proposing and inserting are one step for every controller: each number is taken
//! once and the budget is honoured exactly.

mod changes;
mod guarded;

use std::time::Duration;

use sqlx::{Any, Transaction};

use super::ends::TrialEnd;
use super::leases::ends_after;
use super::rows::{TrialRecord, TrialState, enqueued, handed_back, trial_columns};
use super::view::StudyView;
use super::{Dialect, Storage, StorageError, now, query_error};
use crate::study::Budget;
use crate::study::space::Assignment;
use changes::read_changes;

/// What becomes of a study's enqueued trials when a controller claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queue {
    /// They are claimed before new trials are proposed (a study's run).
    RunFirst,
    /// They wait for another run (a trial run by hand runs its own parameters).
    Leave,
}

/// What a claim checks: the study's budget, and whether its enqueued trials run first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClaimRules {
    /// Trials in all and failed trials allowed.
    pub budget: Budget,
    /// Whether enqueued trials are claimed first.
    pub queue: Queue,
}

/// Who holds the trials a claim starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holder<'a> {
    /// The owner recorded with them: a controller's `host:pid@start`, or [`CLIENT`].
    pub(crate) owner: &'a str,
    /// A client's lease; `None` for a controller, whose heartbeats keep its trials.
    pub(crate) lease: Option<ClientLease>,
}

impl<'a> Holder<'a> {
    /// The controller `owner`.
    pub(crate) fn controller(owner: &'a str) -> Self {
        Holder { owner, lease: None }
    }
}

impl Holder<'static> {
    /// An ask/tell client, under `lease`.
    pub(crate) fn client(lease: ClientLease) -> Self {
        Holder {
            owner: CLIENT,
            lease: Some(lease),
        }
    }
}

/// The owner recorded with the trials ask/tell clients hold.
pub(crate) const CLIENT: &str = "client";

/// The terms on which an ask/tell client (`hptune ask`) holds trials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientLease {
    /// How long a lease runs before the trial goes back to the study, renewed by each
    /// intermediate result.
    pub(crate) length: Duration,
    /// How many of the study's trials clients may hold at once (`parallel_trial_count`).
    pub(crate) at_most: usize,
}

impl ClientLease {
    /// When a lease that starts (or is renewed) now ends, as stored.
    pub(crate) fn expires(&self) -> String {
        ends_after(self.seconds())
    }

    /// The length in whole seconds, as stored.
    pub(crate) fn seconds(&self) -> i64 {
        i64::try_from(self.length.as_secs()).unwrap_or(i64::MAX)
    }
}

/// What [`Storage::claim_trials`] did, trial by trial.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Claim {
    /// A new trial, running, owned by the claiming controller.
    Started(Box<TrialRecord>),
    /// `max_trial_count` trials exist.
    BudgetSpent,
    /// `max_failed_trial_count` trials failed.
    TooManyFailures,
    /// The sampler has nothing left to propose.
    Exhausted,
    /// Clients hold as many trials as their lease allows at once ([`ClientLease::at_most`]).
    AllLeased,
}

/// What a claim decides on a view of the study.
enum Decision {
    /// Run the waiting trial with this row id.
    Waiting(Waits, i64),
    /// Run trial `number` with these parameters.
    Run(u64, Assignment),
    /// Claim nothing, for this reason.
    Not(Claim),
}

/// Why a trial waits to be claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waits {
    /// It is enqueued: it has never run.
    Enqueued,
    /// It was handed back (a lease ended, a controller was interrupted): its next attempt
    /// waits.
    HandedBack,
}

/// Checks the failures on `view` and, for a client, the trials clients hold; takes a trial
/// handed back if a client claims and there is one, the next enqueued trial if the rules run
/// them and there is one, else checks the budget with the `planned` trials (proposed in this
/// claim, not yet in the view) counted and asks `propose` for the next number's parameters.
fn decide<E>(
    view: &StudyView,
    rules: ClaimRules,
    holder: Holder<'_>,
    planned: &[Assignment],
    propose: &mut impl FnMut(u64, &StudyView, &[Assignment]) -> Result<Option<Assignment>, E>,
) -> Result<Decision, E> {
    if rules
        .budget
        .too_many_failures(view.count(TrialState::Failed))
    {
        return Ok(Decision::Not(Claim::TooManyFailures));
    }
    if let Some(lease) = holder.lease {
        let leased = view
            .unfinished_trials()
            .filter(|t| t.lease_expires_at.is_some())
            .count();
        if leased + planned.len() >= lease.at_most {
            return Ok(Decision::Not(Claim::AllLeased));
        }
        // A controller takes these over as orphans ([`Storage::adopt_orphans`]).
        if let Some(trial) = view.unfinished_trials().find(|t| t.is_handed_back()) {
            return Ok(Decision::Waiting(Waits::HandedBack, trial.id));
        }
    }
    if rules.queue == Queue::RunFirst
        && let Some(trial) = view.next_enqueued()
    {
        return Ok(Decision::Waiting(Waits::Enqueued, trial.id));
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

/// What became of the waiting trial a claim chose.
enum Taken {
    /// It runs now, for the claiming controller or client.
    Started(TrialRecord),
    /// It no longer waited (another controller took it, and maybe handed it back, which the
    /// view does not read): the row as it is.
    Changed(TrialRecord),
}

/// Starts the waiting trial with row id `id` for `holder`, in `tx`, which holds the study's
/// lock: its current attempt begins now.
async fn start_waiting(
    tx: &mut Transaction<'static, Any>,
    waits: Waits,
    id: i64,
    holder: Holder<'_>,
) -> Result<Taken, StorageError> {
    let doing = "starting a waiting trial";
    let at = now();
    let waiting = match waits {
        Waits::Enqueued => enqueued!(),
        Waits::HandedBack => handed_back!(),
    };
    let start = format!(
        "UPDATE trials SET state = 'running', owner = $1, started_at = $2, heartbeat_at = $2,
         lease_expires_at = $4, lease_seconds = $5 WHERE id = $3 AND {waiting} RETURNING {}",
        trial_columns!()
    );
    let started = sqlx::query(&start)
        .bind(holder.owner)
        .bind(&at)
        .bind(id)
        .bind(holder.lease.map(|l| l.expires()))
        .bind(holder.lease.map(|l| l.seconds()))
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
    let trial = TrialRecord::from_row(&row)?;
    sqlx::query(
        "UPDATE attempts SET owner = $1, started_at = $2 WHERE trial_id = $3 AND attempt = $4",
    )
    .bind(holder.owner)
    .bind(&at)
    .bind(id)
    .bind(i64::from(trial.attempt))
    .execute(&mut **tx)
    .await
    .map_err(query_error(doing))?;
    Ok(Taken::Started(trial))
}

pub(super) fn params_json(params: &Assignment) -> String {
    serde_json::to_string(params).expect("parameters serialise")
}

/// Why a claim failed: the database, or the proposal of the trial's parameters (`E`, the
/// proposer's error).
#[derive(Debug)]
pub(crate) enum ClaimError<E> {
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
    /// Claims up to `slots` trials of a study for `holder`, one after another: brings `view`
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
    /// that replace them, instead of four per trial. An ask/tell client always claims under
    /// the lock: its count of leased trials depends on trials that were handed back and taken
    /// again, which neither adds nor finishes a trial, so the guard would not see it.
    pub(crate) async fn claim_trials<E>(
        &self,
        view: &mut StudyView,
        rules: ClaimRules,
        holder: Holder<'_>,
        slots: usize,
        ends: &mut Vec<TrialEnd>,
        mut propose: impl FnMut(u64, &StudyView, &[Assignment]) -> Result<Option<Assignment>, E>,
    ) -> Result<Vec<Claim>, ClaimError<E>> {
        if self.dialect == Dialect::Sqlite && holder.lease.is_none() {
            // The parameters of the trials numbered from the view's next number on.
            let mut planned: Vec<Assignment> = Vec::new();
            while planned.len() < slots {
                match decide(view, rules, holder, &planned, &mut propose) {
                    Ok(Decision::Run(_, params)) => planned.push(params),
                    _ => break,
                }
            }
            if !planned.is_empty() {
                let claimed = self
                    .insert_if_unchanged(view, &planned, holder, std::mem::take(ends))
                    .await?;
                if !claimed.is_empty() {
                    let started = claimed.into_iter().map(|t| Claim::Started(Box::new(t)));
                    return Ok(started.collect());
                }
            }
        }
        let claim = self
            .claim_locked(view, rules, holder, ends, propose)
            .await?;
        Ok(vec![claim])
    }

    /// Claims one trial under the study's lock, having written the `ends`.
    async fn claim_locked<E>(
        &self,
        view: &mut StudyView,
        rules: ClaimRules,
        holder: Holder<'_>,
        ends: &mut Vec<TrialEnd>,
        mut propose: impl FnMut(u64, &StudyView, &[Assignment]) -> Result<Option<Assignment>, E>,
    ) -> Result<Claim, ClaimError<E>> {
        self.finish_trials(ends).await?;
        let doing = "claiming a trial";
        if view.counts_first() && self.dialect == Dialect::Postgres {
            // PostgreSQL counts and reads in one snapshot of their own (REPEATABLE READ),
            // which the lock's transaction, begun by its write, cannot take; SQLite's lock
            // keeps every other writer out of the claim's reads.
            self.refresh_unfinished(view).await?;
        }
        let mut tx = self.lock_study(view.study_id).await?;
        read_changes(&mut tx, view).await?;
        let (number, params) = loop {
            match decide(view, rules, holder, &[], &mut propose) {
                Ok(Decision::Run(number, params)) => break (number, params),
                Ok(Decision::Waiting(waits, id)) => {
                    match start_waiting(&mut tx, waits, id, holder).await? {
                        Taken::Started(trial) => {
                            tx.commit().await.map_err(query_error(doing))?;
                            view.update(trial.clone());
                            return Ok(Claim::Started(Box::new(trial)));
                        }
                        // The view learns what became of it, and the claim decides again.
                        Taken::Changed(trial) => view.update(trial),
                    }
                }
                Ok(Decision::Not(claim)) => return Ok(claim),
                Err(e) => return Err(ClaimError::Proposal(e)),
            }
        };
        let started = now();
        let row = sqlx::query(concat!(
            "INSERT INTO trials (study_id, number, state, params, created_at, started_at, heartbeat_at, attempt, owner,
                                 lease_expires_at, lease_seconds)
             VALUES ($1, $2, 'running', $3, $4, $4, $4, 1, $5, $6, $7) RETURNING ",
            trial_columns!()
        ))
        .bind(view.study_id)
        .bind(number as i64)
        .bind(params_json(&params))
        .bind(&started)
        .bind(holder.owner)
        .bind(holder.lease.map(|l| l.expires()))
        .bind(holder.lease.map(|l| l.seconds()))
        .fetch_one(&mut *tx)
        .await
        .map_err(query_error(doing))?;
        let trial = TrialRecord::from_row(&row)?;
        tx.commit().await.map_err(query_error(doing))?;
        view.update(trial.clone());
        Ok(Claim::Started(Box::new(trial)))
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
mod tests;
