-- Constraints (`constraints`, `failed_as_infeasible`): the final values a trial reported of
-- the constrained metrics (a JSON object, metric -> value), and why the trial is infeasible
-- (NULL when it is feasible). An infeasible trial is kept and shown but never the best.

ALTER TABLE trials ADD COLUMN constraint_values TEXT;
ALTER TABLE trials ADD COLUMN infeasible TEXT;
