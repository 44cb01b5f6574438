-- Several objectives (`objectives:`): the study's list of objectives (a JSON array of
-- {metric, goal, reference_point}; NULL for a study of one, whose objective is `metric` and
-- `goal`), and each trial's final value of every objective (a JSON array in the study's
-- order; NULL with one objective, or when the trial has none). A trial's `value` stays its
-- first objective's.

ALTER TABLE studies ADD COLUMN objectives TEXT;
ALTER TABLE trials ADD COLUMN objective_values TEXT;
