-- As migrations/sqlite/0010_trials_by_state_and_id.sql: the started and finished trials of
-- a study from a row id on, found without walking its enqueued ones.

DROP INDEX trials_by_state;
CREATE INDEX trials_by_state ON trials (study_id, state, id);
