-- Constraints (`constraints`, `failed_as_infeasible`): the final values a trial reported of
-- the constrained metrics (a JSON object, metric -> value), and why the trial is infeasible
-- (NULL when it is feasible). An infeasible trial is kept and shown but never the best.
--
-- Configurations to run first (`initial_trials`, `hptune enqueue`) are trials inserted as
-- 'pending' with no owner and no start; the study records when its file's `initial_trials`
-- were enqueued, so that they are enqueued once whichever controller runs it first.

ALTER TABLE trials ADD COLUMN constraint_values TEXT;
ALTER TABLE trials ADD COLUMN infeasible TEXT;
ALTER TABLE studies ADD COLUMN initial_trials_enqueued_at TEXT;
