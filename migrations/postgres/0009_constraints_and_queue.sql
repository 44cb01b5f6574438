-- As migrations/sqlite/0009_constraints_and_queue.sql: why a trial is infeasible and its
-- constrained metrics' final values (JSON), and when the study file's `initial_trials` were
-- enqueued (as 'pending' trials with no owner and no start).

ALTER TABLE trials ADD COLUMN constraint_values TEXT;
ALTER TABLE trials ADD COLUMN infeasible TEXT;
ALTER TABLE studies ADD COLUMN initial_trials_enqueued_at TEXT;
