-- As migrations/sqlite/0013_several_objectives.sql: the study's objectives (JSON; NULL for
-- one) and each trial's final value of every objective (a JSON array in the study's order).

ALTER TABLE studies ADD COLUMN objectives TEXT;
ALTER TABLE trials ADD COLUMN objective_values TEXT;
