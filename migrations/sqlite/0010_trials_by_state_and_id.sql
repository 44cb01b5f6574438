-- The started and finished trials of a study from a row id on, found without walking its
-- enqueued ones: a controller reads what changed since its last claim by (study_id, state,
-- id ranges), so the length of the queue costs a claim nothing.

DROP INDEX trials_by_state;
CREATE INDEX trials_by_state ON trials (study_id, state, id);
