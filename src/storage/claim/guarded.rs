//! The claim of a lone controller on SQLite, in one call: the trials planned on the view as
//! it is, each inserted only if no other controller changed the study since the view was
//! read (see [`Storage::claim_trials`]).

use super::super::ends::{Script, TrialEnd};
use super::super::rows::{TrialRecord, trial_columns};
use super::super::view::StudyView;
use super::super::{Storage, StorageError, now};
use super::{Holder, params_json};
use crate::study::space::Assignment;

impl Storage {
    /// Inserts the `planned` trials (numbered from the view's next number on) as running, in
    /// one call, each only if the study's rows
    /// from the view's first changeable one on are still the ones the view holds and the
    /// ones inserted before it (none added by another controller, none of its unfinished ones
    /// finished); returns those inserted, in order, none when the view was stale. The `ends`
    /// are written before them, in the same call and transaction, whether they are inserted
    /// or not.
    pub(super) async fn insert_if_unchanged(
        &self,
        view: &mut StudyView,
        planned: &[Assignment],
        holder: Holder<'_>,
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
        let owner = script.text(Some(holder.owner));
        let lease_expires = holder.lease.map(|l| l.expires());
        let lease_expires = script.text(lease_expires.as_deref());
        let lease_seconds = match holder.lease {
            Some(lease) => script.int(lease.seconds()),
            None => "NULL".into(),
        };
        for (i, params) in planned.iter().enumerate() {
            // `changes()`: the rows the previous statement (this call's previous insert)
            // inserted; a trial is inserted only after the ones planned before it.
            let after_previous = if i == 0 { "" } else { "changes() = 1 AND " };
            let insert = format!(
                "INSERT INTO trials (study_id, number, state, params, created_at, started_at, heartbeat_at, attempt, owner,
                                     lease_expires_at, lease_seconds)
                 SELECT {study}, {}, 'running', {}, {now}, {now}, {now}, 1, {owner}, {lease_expires}, {lease_seconds}
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
}
